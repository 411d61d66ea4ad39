//! The dispatcher: compiled policies and bindings, run against one admission
//! request in a deterministic order, with params, match conditions, lazily
//! evaluated variables, mutations and reinvocation.
//!
//! Upstream: `k8s.io/apiserver/pkg/admission/plugin/policy/generic/policy_dispatcher.go`
//! and `.../policy/mutating/dispatcher.go`.

pub mod activation;
mod params;

use crate::api::{Binding, FailurePolicy, PatchType, Policy, ReinvocationPolicy};
use crate::cel::convert::{json_to_val, val_to_json};
use crate::cel::object_types::{check_type_names, JSON_PATCH_TYPE, OBJECT_TYPE};
use crate::cel::{CelEnvironment, CompiledExpression};
use crate::matching::{self, ResourceTable};
use crate::mutation::apply_configuration::apply_configuration;
use crate::mutation::json_patch::{apply_patch, JsonPatchError, PatchOperation};
use crate::request::{AdmissionRequest, ClusterObjects};
use crate::schema::SchemaStore;
use activation::{Activation, CompiledVariable};
use cel::common::types::{CelBool, CelList, CelString, CelStruct};
use cel::common::value::Val;
use serde_json::Value as Json;
use std::collections::BTreeSet;

/// A policy with its expressions compiled.
#[derive(Debug)]
pub struct CompiledPolicy {
    /// The policy as loaded.
    pub policy: Policy,
    match_conditions: Vec<(String, Result<CompiledExpression, String>)>,
    variables: Vec<CompiledVariable>,
    mutations: Vec<(PatchType, Result<CompiledExpression, String>)>,
}

/// A compile problem of one expression.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("policy {policy:?}: {field}: {message}")]
pub struct PolicyCompileError {
    /// The policy name.
    pub policy: String,
    /// The expression's field path, e.g. `spec.mutations[0].applyConfiguration.expression`.
    pub field: String,
    /// The compiler's message (`compilation failed: ERROR: <input>:l:c: ...`).
    pub message: String,
}

impl CompiledPolicy {
    /// Compiles every expression of `policy`; problems are returned and also
    /// kept, so that an invocation of the policy fails as upstream's does.
    pub fn compile(
        env: &CelEnvironment,
        policy: Policy,
    ) -> (CompiledPolicy, Vec<PolicyCompileError>) {
        let mut errors = Vec::new();
        let mut compile = |field: String, source: &str| match env.compile(source) {
            Ok(c) => Ok(c),
            Err(e) => {
                errors.push(PolicyCompileError {
                    policy: policy.name.clone(),
                    field,
                    message: e.to_string(),
                });
                Err(e.to_string())
            }
        };
        let match_conditions = policy
            .match_conditions
            .iter()
            .enumerate()
            .map(|(i, c)| {
                (
                    c.name.clone(),
                    compile(
                        format!("spec.matchConditions[{i}].expression"),
                        &c.expression,
                    ),
                )
            })
            .collect();
        let variables = policy
            .variables
            .iter()
            .enumerate()
            .map(|(i, v)| CompiledVariable {
                name: v.name.clone(),
                expression: compile(format!("spec.variables[{i}].expression"), &v.expression),
            })
            .collect();
        let mutations = policy
            .mutations
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let sub = match m.patch_type {
                    PatchType::ApplyConfiguration => "applyConfiguration",
                    PatchType::JsonPatch => "jsonPatch",
                };
                (
                    m.patch_type,
                    compile(
                        format!("spec.mutations[{i}].{sub}.expression"),
                        &m.expression,
                    ),
                )
            })
            .collect();
        (
            CompiledPolicy {
                policy,
                match_conditions,
                variables,
                mutations,
            },
            errors,
        )
    }
}

/// The compiled policies and bindings, in dispatch order.
#[derive(Debug)]
pub struct PolicySet {
    env: CelEnvironment,
    policies: Vec<CompiledPolicy>,
    /// (binding, index into `policies`), sorted by binding name then policy name.
    bindings: Vec<(Binding, usize)>,
}

/// The result of an admission.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The request is admitted with this object.
    Admitted {
        /// The object after every mutation.
        object: Json,
        /// Warnings to return.
        warnings: Vec<String>,
    },
    /// The request is denied.
    Denied {
        /// Upstream's message, e.g. `policy 'p' with binding 'b' denied request: ...`.
        message: String,
        /// HTTP status code.
        code: u16,
    },
}

/// What an admission needs besides the request.
pub struct AdmissionContext<'a> {
    /// Namespaces, params and CRDs.
    pub cluster: &'a ClusterObjects,
    /// Schemas for ApplyConfiguration and strict decoding.
    pub schemas: &'a SchemaStore,
    /// Resource names and scopes.
    pub resources: &'a ResourceTable,
}

struct PolicyError {
    policy: String,
    binding: String,
    failure_policy: FailurePolicy,
    message: String,
}

impl PolicySet {
    /// Compiles `policies` and pairs them with `bindings`; a binding whose
    /// policy does not exist is ignored, as upstream does.
    pub fn new(
        policies: Vec<Policy>,
        bindings: Vec<Binding>,
    ) -> (PolicySet, Vec<PolicyCompileError>) {
        let env = CelEnvironment::shared();
        let mut errors = Vec::new();
        let mut compiled = Vec::with_capacity(policies.len());
        for p in policies {
            let (c, mut e) = CompiledPolicy::compile(&env, p);
            errors.append(&mut e);
            compiled.push(c);
        }
        let mut pairs: Vec<(Binding, usize)> = bindings
            .into_iter()
            .filter_map(|b| {
                compiled
                    .iter()
                    .position(|p| p.policy.name == b.policy_name)
                    .map(|i| (b, i))
            })
            .collect();
        pairs.sort_by(|a, b| {
            (a.0.name.as_str(), a.0.policy_name.as_str())
                .cmp(&(b.0.name.as_str(), b.0.policy_name.as_str()))
        });
        (
            PolicySet {
                env,
                policies: compiled,
                bindings: pairs,
            },
            errors,
        )
    }

    /// Number of policies.
    pub fn policy_count(&self) -> usize {
        self.policies.len()
    }

    /// Runs the admission of `request` (its object is the incoming object).
    pub fn admit(&self, request: &AdmissionRequest, ctx: &AdmissionContext<'_>) -> Outcome {
        let Some(original) = request.object.clone() else {
            return Outcome::Admitted {
                object: Json::Null,
                warnings: Vec::new(),
            };
        };
        if request.operation == "DELETE" {
            return Outcome::Admitted {
                object: original,
                warnings: Vec::new(),
            };
        }
        if is_policy_object(request) {
            return Outcome::Admitted {
                object: original,
                warnings: Vec::new(),
            };
        }
        let mut object = original;
        let mut reinvoke: Option<BTreeSet<String>> = None;
        let mut invoked_if_needed: BTreeSet<String> = BTreeSet::new();
        for _pass in 0..2 {
            let mut changed_in_pass = false;
            let mut errors: Vec<PolicyError> = Vec::new();
            for (binding, pi) in &self.bindings {
                let compiled = &self.policies[*pi];
                if let Err(status) = self.dispatch_binding(
                    compiled,
                    binding,
                    request,
                    ctx,
                    &mut object,
                    reinvoke.as_ref(),
                    &mut invoked_if_needed,
                    &mut changed_in_pass,
                    &mut errors,
                ) {
                    // Status errors end the admission whatever the failure policy.
                    return Outcome::Denied {
                        message: status.message,
                        code: status.code,
                    };
                }
            }
            if let Some(e) = errors
                .iter()
                .find(|e| e.failure_policy == FailurePolicy::Fail)
            {
                return Outcome::Denied {
                    message: format!(
                        "policy '{}' with binding '{}' denied request: {}",
                        e.policy, e.binding, e.message
                    ),
                    code: 403,
                };
            }
            if reinvoke.is_some() || !changed_in_pass || invoked_if_needed.is_empty() {
                break;
            }
            reinvoke = Some(std::mem::take(&mut invoked_if_needed));
        }
        Outcome::Admitted {
            object,
            warnings: Vec::new(),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn dispatch_binding(
        &self,
        compiled: &CompiledPolicy,
        binding: &Binding,
        request: &AdmissionRequest,
        ctx: &AdmissionContext<'_>,
        object: &mut Json,
        reinvoke: Option<&BTreeSet<String>>,
        invoked_if_needed: &mut BTreeSet<String>,
        changed: &mut bool,
        errors: &mut Vec<PolicyError>,
    ) -> Result<(), StatusError> {
        let policy = &compiled.policy;
        let mut attrs = request.clone();
        attrs.object = Some(object.clone());
        let error = |message: String| PolicyError {
            policy: policy.name.clone(),
            binding: binding.name.clone(),
            failure_policy: policy.failure_policy,
            message,
        };
        let matched = match matching::matches(
            &policy.match_constraints,
            &attrs,
            ctx.cluster,
            ctx.resources,
        ) {
            Ok(Some(m)) => m,
            Ok(None) => return Ok(()),
            Err(e) => {
                errors.push(error(format!("failed to configure policy: {e}")));
                return Ok(());
            }
        };
        if let Some(mr) = &binding.match_resources {
            match matching::matches(mr, &attrs, ctx.cluster, ctx.resources) {
                Ok(Some(_)) => {}
                Ok(None) => return Ok(()),
                Err(e) => {
                    errors.push(error(format!("failed to configure binding: {e}")));
                    return Ok(());
                }
            }
        }
        let params = match params::collect(policy, binding, request, ctx) {
            Ok(p) => p,
            Err(e) => {
                errors.push(error(e));
                return Ok(());
            }
        };
        // The object in the matched version (CRD versions differ only by apiVersion).
        let original_api_version = object.get("apiVersion").cloned();
        let matched_api_version = if matched.gvk.group.is_empty() {
            matched.gvk.version.clone()
        } else {
            format!("{}/{}", matched.gvk.group, matched.gvk.version)
        };
        let converted = original_api_version.as_ref().and_then(Json::as_str)
            != Some(matched_api_version.as_str());
        let mut versioned = object.clone();
        if converted {
            versioned["apiVersion"] = Json::String(matched_api_version);
        }
        let mut request_view = request.clone();
        request_view.kind = matched.gvk.clone();
        request_view.resource = matched.gvr.clone();
        let request_json = request_json(&request_view);
        let is_namespace_request =
            request.resource.group.is_empty() && request.resource.resource == "namespaces";
        let namespace_object = if is_namespace_request || request.namespace.is_empty() {
            Json::Null
        } else {
            matching::namespace_object(ctx.cluster, &request.namespace).unwrap_or(Json::Null)
        };
        let schema =
            ctx.schemas
                .lookup(&matched.gvk.group, &matched.gvk.version, &matched.gvk.kind);

        for param in params {
            let key = format!(
                "{}\u{0}{}\u{0}{}",
                policy.name,
                binding.name,
                param.as_ref().map(param_key).unwrap_or_default()
            );
            if let Some(set) = reinvoke {
                if !set.contains(&key) {
                    continue;
                }
            }
            let old_object = request.old_object.clone().unwrap_or(Json::Null);
            let null = Json::Null;
            let before = versioned.clone();
            let mut invocation_errors = Vec::new();
            let mut matched_conditions = true;
            {
                let inputs_object = versioned.clone();
                let inputs: Vec<(&'static str, Box<dyn Val + '_>)> = vec![
                    ("object", json_to_val(&inputs_object)),
                    ("oldObject", json_to_val(&old_object)),
                    ("request", json_to_val(&request_json)),
                    ("params", json_to_val(param.as_ref().unwrap_or(&null))),
                    ("namespaceObject", json_to_val(&namespace_object)),
                ];
                let act = Activation::new(&self.env, inputs, &compiled.variables);
                // Upstream matchconditions.Matcher: any false skips the policy;
                // an error counts only when no condition is false.
                let mut first_error: Option<String> = None;
                for (name, cond) in &compiled.match_conditions {
                    let result = match cond {
                        Err(e) => Err(e.clone()),
                        Ok(expr) => act
                            .evaluate(expr, |v| v.downcast_ref::<CelBool>().map(|b| *b.inner()))
                            .map_err(|e| {
                                format!("expression '{}' resulted in error: {e}", expr.source())
                            })
                            .and_then(|b| {
                                b.ok_or_else(|| {
                                    format!("match condition {name:?} must evaluate to bool")
                                })
                            }),
                    };
                    match result {
                        Ok(true) => {}
                        Ok(false) => {
                            matched_conditions = false;
                            first_error = None;
                            break;
                        }
                        Err(e) => {
                            first_error.get_or_insert(e);
                        }
                    }
                }
                if let Some(e) = first_error {
                    matched_conditions = false;
                    if policy.failure_policy == FailurePolicy::Fail {
                        invocation_errors.push(e);
                    }
                }
            }
            if !matched_conditions {
                for m in invocation_errors {
                    errors.push(error(m));
                }
                continue;
            }
            // Mutations run in order, each on the previous one's result; the
            // variables' memo is per invocation but `object` changes, so each
            // mutation gets a fresh activation sharing nothing stale.
            for (patch_type, expr) in &compiled.mutations {
                let expr = match expr {
                    Ok(e) => e,
                    Err(e) => {
                        errors.push(error(e.clone()));
                        continue;
                    }
                };
                let result = {
                    let inputs: Vec<(&'static str, Box<dyn Val + '_>)> = vec![
                        ("object", json_to_val(&versioned)),
                        ("oldObject", json_to_val(&old_object)),
                        ("request", json_to_val(&request_json)),
                        ("params", json_to_val(param.as_ref().unwrap_or(&null))),
                        ("namespaceObject", json_to_val(&namespace_object)),
                    ];
                    let act = Activation::new(&self.env, inputs, &compiled.variables);
                    act.evaluate(expr, |v| match patch_type {
                        PatchType::ApplyConfiguration => apply_configuration_value(v),
                        PatchType::JsonPatch => json_patch_value(v),
                    })
                    .map_err(|e| format!("expression '{}' resulted in error: {}", expr.source(), e))
                    .and_then(|r| r)
                };
                let Some(schema) = schema.as_ref() else {
                    // Upstream: no type converter for the kind (dispatchOne).
                    return Err(StatusError {
                        code: 503,
                        message: format!(
                            "Resource kind {} not found. There can be a delay between when CustomResourceDefinitions are created and when they are available.",
                            gvk_string(&matched.gvk)
                        ),
                    });
                };
                let outcome = result.map_err(StepError::Policy).and_then(|m| match m {
                    MutationValue::Apply(mut patch) => {
                        if let Some(obj) = patch.as_object_mut() {
                            obj.insert("apiVersion".into(), versioned.get("apiVersion").cloned().unwrap_or(Json::Null));
                            obj.insert("kind".into(), versioned.get("kind").cloned().unwrap_or(Json::Null));
                        }
                        apply_configuration(&versioned, &patch, schema)
                            .map_err(|e| StepError::Policy(format!("error applying patch: {e}")))
                    }
                    MutationValue::Patch(ops) => match apply_patch(&versioned, &ops) {
                        Ok(v) => {
                            let unknown = crate::schema::unknown_fields(&v, schema);
                            if !unknown.is_empty() {
                                let fields: Vec<String> = unknown
                                    .iter()
                                    .map(|f| format!("unknown field {f:?}"))
                                    .collect();
                                Err(StepError::Status(StatusError {
                                    code: 500,
                                    message: format!(
                                        "Internal error occurred: strict decoding error: {}",
                                        fields.join(", ")
                                    ),
                                }))
                            } else {
                                Ok(v)
                            }
                        }
                        Err(JsonPatchError::TestFailed { .. }) => Ok(versioned.clone()),
                        Err(JsonPatchError::Panic { .. }) => Err(StepError::Status(StatusError {
                            code: 500,
                            message: "This request caused apiserver to panic. Look in the logs for details.".into(),
                        })),
                        Err(e) => Err(StepError::Policy(format!("JSON Patch: {e}"))),
                    },
                });
                match outcome {
                    Ok(v) => versioned = v,
                    Err(StepError::Policy(e)) => errors.push(error(e)),
                    Err(StepError::Status(st)) => return Err(st),
                }
            }
            if versioned != before {
                *changed = true;
            }
            if policy.reinvocation_policy == ReinvocationPolicy::IfNeeded {
                invoked_if_needed.insert(key);
            }
        }
        // Back to the request's version.
        if converted {
            if let Some(v) = original_api_version {
                versioned["apiVersion"] = v;
            }
        }
        *object = versioned;
        Ok(())
    }
}

/// An error that ends the admission whatever the failure policy (upstream's
/// `*k8serrors.StatusError` returns from `dispatchInvocations`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct StatusError {
    code: u16,
    message: String,
}

enum StepError {
    Policy(String),
    Status(StatusError),
}

fn gvk_string(gvk: &crate::request::GroupVersionKind) -> String {
    if gvk.group.is_empty() {
        format!("/{}, Kind={}", gvk.version, gvk.kind)
    } else {
        format!("{}/{}, Kind={}", gvk.group, gvk.version, gvk.kind)
    }
}

/// Whether the request is for a MAP or MAP binding, which are never mutated.
fn is_policy_object(request: &AdmissionRequest) -> bool {
    request.resource.group == "admissionregistration.k8s.io"
        && matches!(
            request.resource.resource.as_str(),
            "mutatingadmissionpolicies" | "mutatingadmissionpolicybindings"
        )
}

fn param_key(param: &Json) -> String {
    format!(
        "{}/{}",
        param
            .pointer("/metadata/namespace")
            .and_then(Json::as_str)
            .unwrap_or(""),
        param
            .pointer("/metadata/name")
            .and_then(Json::as_str)
            .unwrap_or("")
    )
}

/// The `request` variable: the AdmissionRequest without the objects.
fn request_json(request: &AdmissionRequest) -> Json {
    let mut r = request.clone();
    r.object = None;
    r.old_object = None;
    serde_json::to_value(r).unwrap_or(Json::Null)
}

enum MutationValue {
    Apply(Json),
    Patch(Vec<PatchOperation>),
}

fn apply_configuration_value(v: &dyn Val) -> Result<MutationValue, String> {
    let Some(st) = v
        .downcast_ref::<CelStruct>()
        .filter(|s| s.name() == OBJECT_TYPE || s.name().starts_with("Object."))
    else {
        return Err(format!(
            "ApplyConfiguration expression must evaluate to Object but got {}",
            v.get_type().name()
        ));
    };
    let mismatches = check_type_names(st);
    if !mismatches.is_empty() {
        return Err(format!("type mismatch: {}", mismatches.join("\n")));
    }
    val_to_json(v)
        .map(MutationValue::Apply)
        .map_err(|e| e.to_string())
}

fn json_patch_value(v: &dyn Val) -> Result<MutationValue, String> {
    let Some(list) = v.downcast_ref::<CelList>() else {
        return Err(format!(
            "JSONPatch expression must evaluate to list of JSONPatch but got {}",
            v.get_type().name()
        ));
    };
    let mut ops = Vec::with_capacity(list.inner().len());
    for item in list.inner() {
        let Some(st) = item
            .downcast_ref::<CelStruct>()
            .filter(|s| s.name() == JSON_PATCH_TYPE)
        else {
            return Err(format!(
                "JSONPatch expression must evaluate to list of JSONPatch but got element of type {}",
                item.get_type().name()
            ));
        };
        let string_field = |name: &str| {
            st.field_value(name)
                .and_then(|f| f.downcast_ref::<CelString>().map(|s| s.inner().to_string()))
        };
        let value = match st.field_value("value") {
            Some(v) => Some(val_to_json(v).map_err(|e| e.to_string())?),
            None => None,
        };
        ops.push(PatchOperation {
            op: string_field("op").unwrap_or_default(),
            path: string_field("path").unwrap_or_default(),
            from: string_field("from"),
            value,
        });
    }
    Ok(MutationValue::Patch(ops))
}
