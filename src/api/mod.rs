//! The policy model: MutatingAdmissionPolicy and MutatingAdmissionPolicyBinding
//! of every served version, normalised to one internal form with the API
//! server's defaults applied.
//!
//! `load` reads them from YAML/JSON files; `convert` turns the typed
//! `k8s-openapi` objects into this model.

mod convert;
pub mod load;

pub use convert::{binding_from_json, label_selector_from_json, policy_from_json, ConvertError};

use std::collections::BTreeMap;

/// Where an object was read from, for error messages.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceRef {
    /// File the object came from (empty when it came from elsewhere).
    pub file: String,
    /// Zero-based index of the YAML document within the file.
    pub document: usize,
}

impl std::fmt::Display for SourceRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.file.is_empty() {
            write!(f, "document {}", self.document)
        } else {
            write!(f, "{} (document {})", self.file, self.document)
        }
    }
}

/// A MutatingAdmissionPolicy, defaults applied.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    /// `metadata.name`.
    pub name: String,
    /// `spec.paramKind`.
    pub param_kind: Option<ParamKind>,
    /// `spec.matchConstraints` (required by the API; defaulted when absent).
    pub match_constraints: MatchResources,
    /// `spec.variables`, in order.
    pub variables: Vec<NamedExpression>,
    /// `spec.mutations`, in order.
    pub mutations: Vec<Mutation>,
    /// `spec.failurePolicy` (default Fail).
    pub failure_policy: FailurePolicy,
    /// `spec.matchConditions`, in order.
    pub match_conditions: Vec<NamedExpression>,
    /// `spec.reinvocationPolicy` (default Never).
    pub reinvocation_policy: ReinvocationPolicy,
    /// Where the policy was read from.
    pub source: SourceRef,
}

/// A MutatingAdmissionPolicyBinding, defaults applied.
#[derive(Clone, Debug, PartialEq)]
pub struct Binding {
    /// `metadata.name`.
    pub name: String,
    /// `spec.policyName`.
    pub policy_name: String,
    /// `spec.paramRef`.
    pub param_ref: Option<ParamRef>,
    /// `spec.matchResources`; `None` matches everything the policy matches.
    pub match_resources: Option<MatchResources>,
    /// Annotated [`MODE_ANNOTATION`]`: monitor`: evaluated, its changes and
    /// errors reported, never applied nor enforced.
    pub monitor: bool,
    /// Where the binding was read from.
    pub source: SourceRef,
}

/// The annotation of a binding whose mutations are reported, not applied
/// (`monitor`; `enforce`, the default, applies them).
pub const MODE_ANNOTATION: &str = "kmutate.dev/mode";

/// `paramKind`: the kind of the param objects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamKind {
    /// `apiVersion`, e.g. `v1` or `example.com/v1`.
    pub api_version: String,
    /// `kind`, e.g. `ConfigMap`.
    pub kind: String,
}

impl ParamKind {
    /// The API group of the param kind ("" for the core group).
    pub fn group(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map(|(g, _)| g)
            .unwrap_or("")
    }
}

/// `paramRef`: which param objects a binding uses.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamRef {
    /// A single param by name.
    pub name: Option<String>,
    /// Namespace of the params; empty means the request's namespace.
    pub namespace: Option<String>,
    /// Params by label selector.
    pub selector: Option<LabelSelector>,
    /// What to do when no param is found (default Deny).
    pub parameter_not_found_action: ParameterNotFoundAction,
}

/// `parameterNotFoundAction`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParameterNotFoundAction {
    /// Run nothing for the binding.
    Allow,
    /// A configuration error, subject to the failure policy.
    Deny,
}

/// A named CEL expression: a variable or a match condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedExpression {
    /// The name.
    pub name: String,
    /// The CEL source.
    pub expression: String,
}

/// One entry of `spec.mutations`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mutation {
    /// ApplyConfiguration or JSONPatch.
    pub patch_type: PatchType,
    /// The CEL source of `applyConfiguration.expression` or `jsonPatch.expression`.
    pub expression: String,
}

/// `patchType` of a mutation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    /// Server-side-apply style merge of an `Object{...}` value.
    ApplyConfiguration,
    /// RFC 6902 operations built from `JSONPatch{...}` values.
    JsonPatch,
}

/// `failurePolicy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailurePolicy {
    /// An error denies the request.
    Fail,
    /// An error is dropped.
    Ignore,
}

/// `reinvocationPolicy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReinvocationPolicy {
    /// Never run the policy twice in one admission.
    Never,
    /// Run again when later mutations changed the object.
    IfNeeded,
}

/// `matchPolicy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatchPolicy {
    /// Only the listed group/version/resource.
    Exact,
    /// Also equivalent versions of the same resource.
    Equivalent,
}

/// `matchConstraints` / `matchResources`.
#[derive(Clone, Debug, PartialEq)]
pub struct MatchResources {
    /// `namespaceSelector` (default: everything).
    pub namespace_selector: LabelSelector,
    /// `objectSelector` (default: everything).
    pub object_selector: LabelSelector,
    /// `resourceRules`.
    pub resource_rules: Vec<NamedRule>,
    /// `excludeResourceRules`.
    pub exclude_resource_rules: Vec<NamedRule>,
    /// `matchPolicy` (default Equivalent).
    pub match_policy: MatchPolicy,
}

impl Default for MatchResources {
    fn default() -> Self {
        MatchResources {
            namespace_selector: LabelSelector::default(),
            object_selector: LabelSelector::default(),
            resource_rules: Vec::new(),
            exclude_resource_rules: Vec::new(),
            match_policy: MatchPolicy::Equivalent,
        }
    }
}

/// A `NamedRuleWithOperations`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamedRule {
    /// `resourceNames` (empty: any name).
    pub resource_names: Vec<String>,
    /// `operations` (`*` for all).
    pub operations: Vec<String>,
    /// `apiGroups`.
    pub api_groups: Vec<String>,
    /// `apiVersions`.
    pub api_versions: Vec<String>,
    /// `resources`, possibly with `/subresource`.
    pub resources: Vec<String>,
    /// `scope` (default `*`).
    pub scope: RuleScope,
}

/// `scope` of a rule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RuleScope {
    /// Cluster and namespaced resources.
    #[default]
    All,
    /// Only cluster-scoped resources.
    Cluster,
    /// Only namespaced resources.
    Namespaced,
}

/// A label selector (`matchLabels` and `matchExpressions`, ANDed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    /// `matchLabels`.
    pub match_labels: BTreeMap<String, String>,
    /// `matchExpressions`.
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

/// One `matchExpressions` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelSelectorRequirement {
    /// The label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: SelectorOperator,
    /// The values (for In / NotIn).
    pub values: Vec<String>,
}

/// The operator of a label selector requirement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SelectorOperator {
    /// The label's value is one of the values.
    In,
    /// The label is absent or its value is none of the values.
    NotIn,
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
}

impl LabelSelector {
    /// Whether the selector selects everything (it has no requirement).
    pub fn is_empty(&self) -> bool {
        self.match_labels.is_empty() && self.match_expressions.is_empty()
    }

    /// Whether `labels` satisfy every requirement of the selector.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|req| {
                let value = labels.get(&req.key);
                match req.operator {
                    SelectorOperator::In => value.is_some_and(|v| req.values.contains(v)),
                    SelectorOperator::NotIn => value.is_none_or(|v| !req.values.contains(v)),
                    SelectorOperator::Exists => value.is_some(),
                    SelectorOperator::DoesNotExist => value.is_none(),
                }
            })
    }
}
