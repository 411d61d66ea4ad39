//! The dispatcher: compiled policies and bindings, run against one admission
//! request in a deterministic order, with params, match conditions, lazily
//! evaluated variables, mutations and reinvocation.
//!
//! Upstream: `k8s.io/apiserver/pkg/admission/plugin/policy/generic/policy_dispatcher.go`
//! and `.../policy/mutating/dispatcher.go`.

pub mod activation;
mod invoke;
mod object_checks;
mod params;

use crate::api::{Binding, FailurePolicy, MatchResources, PatchType, Policy, ReinvocationPolicy};
use crate::authorizer::{Authorizer, CachingAuthorizer};
use crate::cel::access::{activation_access, Access};
use crate::cel::authz;
use crate::cel::convert::{project, projection_matches};
use crate::cel::object_json::object_to_json;
use crate::cel::object_types::{as_struct, JSON_PATCH_TYPE, OBJECT_TYPE};
use crate::cel::{CelEnvironment, CompiledExpression, DeclaredVariables, ExpectedResult};
use crate::matching::index::{self, ResourceIndex};
use crate::matching::{self, ObjectSeen, ResourceTable};
use crate::mutation::apply_configuration::{
    apply_configuration_in_place, MergeTold, MergedPositions, PatchChecks,
};
use crate::mutation::diff::Snapshot;
use crate::mutation::json_patch::{apply_patch_in_place, JsonPatchError, PatchOperation};
use crate::request::{AdmissionRequest, ClusterObjects, RequestFields};
use crate::schema::model::FastHash;
use crate::schema::{SchemaStore, TypeRef};
use activation::{Activation, CompiledVariable};
use cel::common::types::{CelList, CelString};
use cel::common::value::Val;
use object_checks::ObjectChecks;
pub use object_checks::ObjectOrigin;
use serde_json::Value as Json;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, OnceLock};

/// A policy with its expressions compiled.
#[derive(Debug)]
pub struct CompiledPolicy {
    /// The policy as loaded.
    pub policy: Policy,
    match_conditions: Vec<(String, Result<CompiledExpression, String>)>,
    variables: Vec<CompiledVariable>,
    mutations: Vec<(PatchType, Result<CompiledExpression, String>)>,
    /// Whether any expression reads `request`.
    reads_request: bool,
    /// Whether any expression reads `namespaceObject`.
    reads_namespace_object: bool,
    /// Whether any expression reads `oldObject`.
    reads_old_object: bool,
    /// Whether any expression reads `authorizer` (its values are built per
    /// activation otherwise).
    reads_authorizer: bool,
    /// What the match conditions' activation can observe of its inputs.
    match_access: InputAccess,
    /// What each mutation's activation can observe of its inputs.
    mutation_access: Vec<InputAccess>,
    /// For each mutation that reads no variable at all (its result is the
    /// same for every request), that result once evaluated.
    constant_results: Vec<Option<OnceLock<MutationValue>>>,
    /// What compiling it found (kept to report again when reused).
    compile_errors: Vec<PolicyCompileError>,
}

/// The JSON inputs of an activation, in this order.
const JSON_INPUTS: [&str; 5] = [
    "object",
    "oldObject",
    "request",
    "params",
    "namespaceObject",
];

/// What an activation's expressions can observe of each of [`JSON_INPUTS`]:
/// theirs and every variable's (any may be evaluated).
#[derive(Debug, Default)]
struct InputAccess([Access; 5]);

impl InputAccess {
    fn of<'e>(
        expressions: impl IntoIterator<Item = &'e Result<CompiledExpression, String>>,
        variables: &'e [CompiledVariable],
    ) -> InputAccess {
        let expressions: Vec<_> = expressions
            .into_iter()
            .filter_map(|e| e.as_ref().ok().map(CompiledExpression::ast))
            .collect();
        let variables: Vec<_> = variables
            .iter()
            .filter_map(|v| Some((v.name.as_str(), v.expression.as_ref().ok()?.ast())))
            .collect();
        InputAccess(JSON_INPUTS.map(|name| activation_access(&expressions, &variables, name)))
    }

    /// What is observed of `object` (the first of [`JSON_INPUTS`]).
    fn object(&self) -> &Access {
        &self.0[0]
    }

    /// What is observed of `request` (the third of [`JSON_INPUTS`]).
    fn request(&self) -> &Access {
        &self.0[2]
    }
}

/// The fields of `request` that any expression of `policies` can read:
/// the rest of the variable is never built.
fn request_fields(policies: &[Arc<CompiledPolicy>]) -> RequestFields {
    let mut fields = BTreeSet::new();
    let accesses = policies
        .iter()
        .flat_map(|p| std::iter::once(&p.match_access).chain(&p.mutation_access));
    for access in accesses {
        match access.request() {
            // `request` itself is always there.
            Access::None | Access::Present => {}
            Access::Fields(read) => fields.extend(read.keys().cloned()),
            Access::Full | Access::Elements(_) => return RequestFields::All,
        }
    }
    RequestFields::Only(fields)
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
    /// What compiling the policy found (empty: every expression compiled).
    pub fn compile_errors(&self) -> &[PolicyCompileError] {
        &self.compile_errors
    }

    /// Whether any compiled expression of the policy reads `name`.
    fn reads(&self, name: &str) -> bool {
        let reads =
            |e: &Result<CompiledExpression, String>| e.as_ref().is_ok_and(|e| e.reads(name));
        self.match_conditions.iter().any(|(_, e)| reads(e))
            || self.variables.iter().any(|v| reads(&v.expression))
            || self.mutations.iter().any(|(_, e)| reads(e))
    }

    /// Compiles every expression of `policy`; problems are returned and also
    /// kept, so that an invocation of the policy fails as upstream's does.
    pub fn compile(
        env: &CelEnvironment,
        policy: Policy,
    ) -> (CompiledPolicy, Vec<PolicyCompileError>) {
        let mut errors = Vec::new();
        // Upstream compiles variables and match conditions without the patch
        // types, mutations with them (compilation.go, `HasPatchTypes`); each
        // variable sees the ones before it, the rest see them all.
        let mut declared = DeclaredVariables::for_policy(policy.param_kind.is_some());
        let mut compile = |field: String,
                           source: &str,
                           declared: &DeclaredVariables,
                           expected: Option<ExpectedResult>| {
            let is_mutation = field.starts_with("spec.mutations");
            let compiled = env
                .compile_in_policy(source, is_mutation, declared)
                .and_then(|c| match expected.and_then(|e| c.result_type_error(e)) {
                    Some(e) => Err(e),
                    None => Ok(c),
                });
            match compiled {
                Ok(c) => Ok(c),
                Err(e) => {
                    errors.push(PolicyCompileError {
                        policy: policy.name.clone(),
                        field,
                        message: e.to_string(),
                    });
                    Err(e.to_string())
                }
            }
        };
        let variables: Vec<CompiledVariable> = policy
            .variables
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let field = format!("spec.variables[{i}].expression");
                let expression = compile(field, &v.expression, &declared, None);
                let output = expression
                    .as_ref()
                    .ok()
                    .map(CompiledExpression::output_type);
                declared.declare(&v.name, output);
                CompiledVariable {
                    name: v.name.clone(),
                    expression,
                }
            })
            .collect();
        let conditions_declared = declared.for_match_conditions();
        let match_conditions: Vec<(String, Result<CompiledExpression, String>)> = policy
            .match_conditions
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let field = format!("spec.matchConditions[{i}].expression");
                (
                    c.name.clone(),
                    compile(
                        field,
                        &c.expression,
                        &conditions_declared,
                        Some(ExpectedResult::Bool),
                    ),
                )
            })
            .collect();
        let mutations: Vec<(PatchType, Result<CompiledExpression, String>)> = policy
            .mutations
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let (sub, expected) = match m.patch_type {
                    PatchType::ApplyConfiguration => ("applyConfiguration", ExpectedResult::Object),
                    PatchType::JsonPatch => ("jsonPatch", ExpectedResult::JsonPatchList),
                };
                (
                    m.patch_type,
                    compile(
                        format!("spec.mutations[{i}].{sub}.expression"),
                        &m.expression,
                        &declared,
                        Some(expected),
                    ),
                )
            })
            .collect();
        (
            {
                let match_access =
                    InputAccess::of(match_conditions.iter().map(|(_, e)| e), &variables);
                let mutation_access = mutations
                    .iter()
                    .map(|(_, e)| InputAccess::of([e], &variables))
                    .collect();
                // CEL is pure and a mutation gets a fresh budget, so an
                // expression without identifiers evaluates to the same value
                // (at the same cost) every time.
                let constant_results = mutations
                    .iter()
                    .map(|(_, e)| {
                        e.as_ref()
                            .is_ok_and(CompiledExpression::reads_nothing)
                            .then(OnceLock::new)
                    })
                    .collect();
                let mut compiled = CompiledPolicy {
                    policy,
                    match_conditions,
                    variables,
                    mutations,
                    reads_request: false,
                    reads_namespace_object: false,
                    reads_old_object: false,
                    reads_authorizer: false,
                    match_access,
                    mutation_access,
                    constant_results,
                    compile_errors: Vec::new(),
                };
                compiled.reads_request = compiled.reads("request");
                compiled.reads_namespace_object = compiled.reads("namespaceObject");
                compiled.reads_old_object = compiled.reads("oldObject");
                compiled.reads_authorizer = compiled.reads(authz::AUTHORIZER_VAR);
                compiled.compile_errors = errors.clone();
                compiled
            },
            errors,
        )
    }
}

/// The compiled policies and bindings, in dispatch order.
#[derive(Debug)]
pub struct PolicySet {
    env: CelEnvironment,
    policies: Vec<Arc<CompiledPolicy>>,
    /// (binding, index into `policies`), sorted by binding name then policy name.
    bindings: Vec<(Binding, usize)>,
    /// The fields of `request` the policies read.
    request_fields: RequestFields,
    /// Whether an admission may read the request's `oldObject`.
    reads_old_object: bool,
    /// The bindings each resource can match.
    index: ResourceIndex,
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
        /// Whether the admission may have changed the object: when not,
        /// `object` is the request's object as it came, and a caller need
        /// not compare the two.
        changed: bool,
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
    /// Decides the checks of the CEL `authorizer` variable.
    pub authorizer: &'a dyn Authorizer,
}

/// Told about each step of an admission, for metrics and logs
/// ([`PolicySet::admit_with`]). Every method does nothing by default.
pub trait AdmissionObserver {
    /// One mutation of an invocation ran (upstream observes each with
    /// `celmetrics`): `error` is its error message, if any (compile errors
    /// included).
    fn mutation(
        &self,
        _policy: &str,
        _binding: &str,
        _elapsed: std::time::Duration,
        _error: Option<&str>,
    ) {
    }

    /// A policy error of a pass, subject to `failure_policy`.
    fn policy_error(
        &self,
        _policy: &str,
        _binding: &str,
        _failure_policy: FailurePolicy,
        _message: &str,
    ) {
    }

    /// The reinvocation pass is about to run on `first_pass`, the object
    /// the first pass made.
    fn reinvocation(&self, _first_pass: &Json) {}

    /// What one mutation did, with the object before and after it (for
    /// `kmutate apply -o explain`); called right after [`AdmissionObserver::mutation`],
    /// only when [`AdmissionObserver::wants_steps`] says so.
    fn mutation_step(&self, _step: &MutationStep<'_>) {}

    /// Whether [`AdmissionObserver::mutation_step`] is wanted: it costs a copy
    /// of the object per mutation, since mutations otherwise change it in place.
    fn wants_steps(&self) -> bool {
        false
    }

    /// Whether the admission is to stop before its next binding (the webhook's
    /// deadline has passed); an interrupted admission's outcome means nothing.
    fn interrupted(&self) -> bool {
        false
    }

    /// Whether every binding is monitored (`serve --mode monitor`), not
    /// only those annotated so ([`crate::api::MODE_ANNOTATION`]).
    fn monitor_all(&self) -> bool {
        false
    }

    /// Whether [`AdmissionObserver::binding_changed`] is wanted for the
    /// bindings that apply their changes: it costs a copy of the object per
    /// invocation (a monitored binding's are always reported).
    fn wants_changes(&self) -> bool {
        false
    }

    /// An invocation of a binding changed the object (a monitored one:
    /// would have changed it).
    fn binding_changed(&self, _change: BindingChange<'_>) {}

    /// A monitored binding failed: reported here, never enforced.
    fn monitored_error(&self, _policy: &str, _binding: &str, _message: &str) {}

    /// A matched binding's invocation ran no mutation (for `kmutate apply -o explain`).
    fn invocation_skipped(
        &self,
        _policy: &str,
        _binding: &str,
        _param: Option<&Json>,
        _reason: SkipReason<'_>,
    ) {
    }
}

/// What one invocation of a binding changed ([`AdmissionObserver::binding_changed`]).
pub struct BindingChange<'a> {
    /// The policy name.
    pub policy: &'a str,
    /// The binding name.
    pub binding: &'a str,
    /// Whether the binding is monitored: the change was not applied.
    pub monitored: bool,
    /// The fields its mutations that changed the object set
    /// ([`footprint`]), in the matched version.
    pub set: Vec<String>,
    /// The fields they removed.
    pub removed: Vec<String>,
}

/// One mutation of an invocation and its effect ([`AdmissionObserver::mutation_step`]).
pub struct MutationStep<'a> {
    /// The policy name.
    pub policy: &'a str,
    /// The binding name.
    pub binding: &'a str,
    /// The invocation's param object, if the binding has params.
    pub param: Option<&'a Json>,
    /// The mutation's index in `spec.mutations`.
    pub index: usize,
    /// The mutation's patch type.
    pub patch_type: PatchType,
    /// The schema of the matched kind, if the store has one.
    pub schema: Option<&'a crate::schema::TypeRef>,
    /// The object before the mutation, in the matched version.
    pub before: &'a Json,
    /// The object after the mutation, or the mutation's error.
    pub after: Result<&'a Json, &'a str>,
    /// Whether its binding is monitored: the mutation ran on a copy.
    pub monitored: bool,
}

/// Why a matched binding ran no mutation ([`AdmissionObserver::invocation_skipped`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SkipReason<'a> {
    /// This match condition evaluated to false.
    ConditionFalse(&'a str),
    /// A match condition failed: skipped under failurePolicy Ignore, an
    /// error of the pass under Fail.
    ConditionError(&'a str),
    /// No param object was found and parameterNotFoundAction is Allow.
    ParamNotFound,
}

/// Observes nothing (an admission nobody counts or logs).
pub struct NoObserver;

impl AdmissionObserver for NoObserver {}

/// A binding whose policy's matchConstraints and own matchResources match a
/// request (or could not be decided): see [`PolicySet::matched`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatchedBinding<'a> {
    /// The policy name.
    pub policy: &'a str,
    /// The binding name.
    pub binding: &'a str,
    /// The policy's failure policy.
    pub failure_policy: FailurePolicy,
}

struct PolicyError {
    policy: String,
    binding: String,
    failure_policy: FailurePolicy,
    message: String,
}

impl PolicySet {
    /// Whether an admission by this set may read the request's `oldObject`:
    /// a bound policy's expression names it, or a binding's matching has an
    /// object selector. When not, the request's old object need not be
    /// decoded ([`crate::request::decode::ObjectChoice::old_object`]).
    pub fn reads_old_object(&self) -> bool {
        self.reads_old_object
    }

    /// The policies, as loaded.
    pub fn policies(&self) -> impl Iterator<Item = &Policy> {
        self.policies.iter().map(|c| &c.policy)
    }

    /// The bindings of existing policies, as loaded.
    pub fn bindings(&self) -> impl Iterator<Item = &Binding> {
        self.bindings.iter().map(|(b, _)| b)
    }

    /// Compiles `policies` and pairs them with `bindings`; a binding whose
    /// policy does not exist is ignored, as upstream does.
    pub fn new(
        policies: Vec<Policy>,
        bindings: Vec<Binding>,
    ) -> (PolicySet, Vec<PolicyCompileError>) {
        PolicySet::reusing(policies, bindings, None)
    }

    /// [`PolicySet::new`], taking from `previous` every policy it compiled
    /// that is unchanged (same name, same document, same content): when one
    /// of thousands of policies changes, only that one is compiled again.
    pub fn reusing(
        policies: Vec<Policy>,
        bindings: Vec<Binding>,
        previous: Option<&PolicySet>,
    ) -> (PolicySet, Vec<PolicyCompileError>) {
        let env = CelEnvironment::shared();
        let mut errors = Vec::new();
        let mut compiled: Vec<Arc<CompiledPolicy>> = Vec::with_capacity(policies.len());
        let known: HashMap<&str, &Arc<CompiledPolicy>> = previous
            .map(|p| {
                p.policies
                    .iter()
                    .map(|c| (c.policy.name.as_str(), c))
                    .collect()
            })
            .unwrap_or_default();
        let mut to_compile = Vec::new();
        let slots: Vec<Option<Arc<CompiledPolicy>>> = policies
            .into_iter()
            .map(
                |p| match known.get(p.name.as_str()).filter(|c| c.policy == p) {
                    Some(c) => Some(Arc::clone(c)),
                    None => {
                        to_compile.push(p);
                        None
                    }
                },
            )
            .collect();
        drop(known);
        let mut fresh = compile_policies(&env, to_compile).into_iter();
        for slot in slots {
            match slot {
                Some(c) => {
                    errors.extend(c.compile_errors.iter().cloned());
                    compiled.push(c);
                }
                None => {
                    let (c, mut e) = fresh.next().expect("one compiled policy for each slot");
                    errors.append(&mut e);
                    compiled.push(Arc::new(c));
                }
            }
        }
        (PolicySet::assemble(compiled, bindings), errors)
    }

    /// Pairs policies compiled already with `bindings` (a binding whose
    /// policy is not among them is ignored, as upstream does) and indexes
    /// them: nothing is compiled, so a source that compiles each policy
    /// as it reads it rebuilds a set of thousands in milliseconds.
    pub fn assemble(compiled: Vec<Arc<CompiledPolicy>>, bindings: Vec<Binding>) -> PolicySet {
        let env = CelEnvironment::shared();
        let by_name: HashMap<&str, usize> = compiled
            .iter()
            .enumerate()
            .map(|(i, p)| (p.policy.name.as_str(), i))
            .rev()
            .collect();
        let mut pairs: Vec<(Binding, usize)> = bindings
            .into_iter()
            .filter_map(|b| by_name.get(b.policy_name.as_str()).map(|&i| (b, i)))
            .collect();
        drop(by_name);
        pairs.sort_by(|a, b| {
            (a.0.name.as_str(), a.0.policy_name.as_str())
                .cmp(&(b.0.name.as_str(), b.0.policy_name.as_str()))
        });
        // Matching reads the old object through object selectors (a
        // namespace selector on a Namespace reads the new one only).
        let selects_by_object = |mr: &MatchResources| !mr.object_selector.is_empty();
        let reads_old_object = pairs.iter().any(|(binding, pi)| {
            let compiled = &compiled[*pi];
            compiled.reads_old_object
                || selects_by_object(&compiled.policy.match_constraints)
                || binding
                    .match_resources
                    .as_ref()
                    .is_some_and(selects_by_object)
        });
        // The policy's rules when they name resources, else the binding's.
        let index = ResourceIndex::new(pairs.iter().map(|(binding, pi)| {
            index::resource_names(&compiled[*pi].policy.match_constraints.resource_rules).or_else(
                || {
                    binding
                        .match_resources
                        .as_ref()
                        .and_then(|m| index::resource_names(&m.resource_rules))
                },
            )
        }));
        PolicySet {
            env,
            request_fields: request_fields(&compiled),
            policies: compiled,
            bindings: pairs,
            reads_old_object,
            index,
        }
    }

    /// The compiled policies, in the order given.
    pub fn compiled_policies(&self) -> &[Arc<CompiledPolicy>] {
        &self.policies
    }

    /// Number of policies.
    pub fn policy_count(&self) -> usize {
        self.policies.len()
    }

    /// Matches `request` against every binding, as the admission's first
    /// pass would, for a caller that decides from it before the admission
    /// ([`PolicySet::matched`]) and then hands it to
    /// [`PolicySet::admit_prematched`].
    pub fn prematch(&self, request: &AdmissionRequest, ctx: &AdmissionContext<'_>) -> Prematch {
        let candidates = self.index.candidates(&request.resource.resource);
        if request.object.is_none() || request.operation == "DELETE" || is_policy_object(request) {
            return Prematch {
                bindings: self.bindings.len(),
                candidates,
                results: Vec::new(),
            };
        }
        let results = candidates
            .iter()
            .map(|&i| {
                let (binding, pi) = &self.bindings[i];
                Some(BindingMatch::of(
                    &self.policies[*pi].policy,
                    binding,
                    request,
                    ctx,
                ))
            })
            .collect();
        Prematch {
            bindings: self.bindings.len(),
            candidates,
            results,
        }
    }

    /// Whether some binding may act on `request` (completed) whatever its
    /// object holds: its matching, with the object unknown
    /// ([`ObjectSeen::No`]), matches or fails. When none may,
    /// [`PolicySet::matched`] is empty for the request with any object in
    /// it, and the admission leaves the object as it came.
    pub fn may_act_whatever_the_object(
        &self,
        request: &AdmissionRequest,
        ctx: &AdmissionContext<'_>,
    ) -> bool {
        if request.operation == "DELETE" || is_policy_object(request) {
            return false;
        }
        self.index
            .candidates(&request.resource.resource)
            .into_iter()
            .any(|i| {
                let (binding, pi) = &self.bindings[i];
                let policy = &self.policies[*pi].policy;
                BindingMatch::given(policy, binding, request, ctx, ObjectSeen::No).acts()
            })
    }

    /// The bindings that act on the request `prematch` was made for, in
    /// dispatch order, by matching alone (no CEL, no params): when none
    /// does, the admission returns the object unchanged, so a caller may
    /// skip it. A binding whose matching fails (e.g. an unknown namespace)
    /// is included, since its failure policy decides.
    pub fn matched(&self, prematch: &Prematch) -> Vec<MatchedBinding<'_>> {
        prematch
            .candidates
            .iter()
            .zip(&prematch.results)
            .filter(|(_, result)| result.as_ref().is_some_and(BindingMatch::acts))
            .map(|(&i, _)| (&self.bindings[i].0, self.bindings[i].1))
            .map(|(binding, pi)| MatchedBinding {
                policy: &self.policies[pi].policy.name,
                binding: &binding.name,
                // A monitored binding's failures are never enforced.
                failure_policy: match binding.monitor {
                    true => FailurePolicy::Ignore,
                    false => self.policies[pi].policy.failure_policy,
                },
            })
            .collect()
    }

    /// Runs the admission of `request` (its object is the incoming object).
    pub fn admit(&self, request: &AdmissionRequest, ctx: &AdmissionContext<'_>) -> Outcome {
        self.admit_with(request, ctx, &NoObserver)
    }

    /// [`PolicySet::admit`], telling `observer` about each mutation, each
    /// policy error and the reinvocation pass.
    pub fn admit_with(
        &self,
        request: &AdmissionRequest,
        ctx: &AdmissionContext<'_>,
        observer: &dyn AdmissionObserver,
    ) -> Outcome {
        self.admit_owned(request.clone(), ctx, observer)
    }

    /// [`PolicySet::admit_with`] on a request given up to the admission:
    /// its object is mutated in place rather than copied first.
    pub fn admit_owned(
        &self,
        request: AdmissionRequest,
        ctx: &AdmissionContext<'_>,
        observer: &dyn AdmissionObserver,
    ) -> Outcome {
        self.admit_prematched(request, None, ctx, observer)
    }

    /// [`PolicySet::admit_owned`], whose first pass takes each binding's
    /// matching from `prematch` (made for this request by this set) while
    /// it still holds: until a mutation changes the object, or for good
    /// when the binding's matching does not read the object.
    pub fn admit_prematched(
        &self,
        request: AdmissionRequest,
        prematch: Option<Prematch>,
        ctx: &AdmissionContext<'_>,
        observer: &dyn AdmissionObserver,
    ) -> Outcome {
        self.admit_inner(
            request,
            prematch,
            ctx,
            observer,
            Original::Unwanted,
            ObjectOrigin::Written,
        )
        .0
    }

    /// [`PolicySet::admit_prematched`], with a snapshot of the request's
    /// object as it came, for a patch from it to the admitted object, from
    /// `origin` (what the schema checks may take for granted of it).
    ///
    /// The snapshot is taken right before the admission first writes to the
    /// object, so an admission that writes nothing (the mutations find
    /// nothing to do, or none runs) takes none: `None` means the admitted
    /// object is the request's object as it came.
    pub fn admit_keeping_original(
        &self,
        request: AdmissionRequest,
        prematch: Option<Prematch>,
        ctx: &AdmissionContext<'_>,
        observer: &dyn AdmissionObserver,
        origin: ObjectOrigin,
    ) -> (Outcome, Option<Snapshot>) {
        let (outcome, original) =
            self.admit_inner(request, prematch, ctx, observer, Original::Pending, origin);
        let original = match original {
            Original::Kept(snapshot) => Some(snapshot),
            Original::Unwanted | Original::Pending => None,
        };
        (outcome, original)
    }

    fn admit_inner(
        &self,
        mut request: AdmissionRequest,
        prematch: Option<Prematch>,
        ctx: &AdmissionContext<'_>,
        observer: &dyn AdmissionObserver,
        original: Original,
        origin: ObjectOrigin,
    ) -> (Outcome, Original) {
        if request.object.is_none() {
            let outcome = Outcome::Admitted {
                object: Json::Null,
                warnings: Vec::new(),
                changed: false,
            };
            return (outcome, original);
        }
        if request.operation == "DELETE" || is_policy_object(&request) {
            let outcome = Outcome::Admitted {
                object: request.object.take().unwrap_or(Json::Null),
                warnings: Vec::new(),
                changed: false,
            };
            return (outcome, original);
        }
        let mut prematch = prematch
            .filter(|p| p.bindings == self.bindings.len())
            .filter(|_| !request.reinvocation);
        // Only the bindings that can match the request's resource, in order.
        let mut candidates = match &mut prematch {
            Some(p) => std::mem::take(&mut p.candidates),
            None => self.index.candidates(&request.resource.resource),
        };
        // kube-apiserver calling the webhook again: upstream reinvokes its
        // IfNeeded policies only.
        if request.reinvocation {
            candidates.retain(|&index| {
                self.policies[self.bindings[index].1]
                    .policy
                    .reinvocation_policy
                    == ReinvocationPolicy::IfNeeded
            });
        }
        let pristine = match origin {
            ObjectOrigin::Written => go_encode_written(&mut request, ctx.schemas),
            ObjectOrigin::KubeApiserver => None,
        };
        let mut state = AdmissionState {
            attrs: request,
            request_json: None,
            reinvoke: None,
            invoked_if_needed: BTreeSet::new(),
            first_results: HashMap::default(),
            prematch,
            quiet: BindingSet::default(),
            changed: false,
            touched: false,
            config_errors: Vec::new(),
            errors: Vec::new(),
            observer,
            checks: ObjectChecks::of(origin),
            original,
        };
        let outcome = match (self.run_passes(&mut state, &candidates, ctx), pristine) {
            // What the round trip alone changed is no change of the
            // admission: the object comes back as it came.
            (
                Outcome::Admitted {
                    changed: false,
                    warnings,
                    ..
                },
                Some(pristine),
            ) => Outcome::Admitted {
                object: pristine,
                warnings,
                changed: false,
            },
            (outcome, _) => outcome,
        };
        (outcome, state.original)
    }

    /// The admission's passes over the bindings: the first, and the
    /// reinvocation pass when an IfNeeded invocation ran and the object
    /// changed.
    fn run_passes(
        &self,
        state: &mut AdmissionState<'_>,
        candidates: &[usize],
        ctx: &AdmissionContext<'_>,
    ) -> Outcome {
        let observer = state.observer;
        for _pass in 0..2 {
            // Upstream: one caching authorizer per dispatch (NewCachingAuthorizer).
            let caching = CachingAuthorizer::new(ctx.authorizer);
            let ctx = &AdmissionContext {
                authorizer: &caching,
                ..*ctx
            };
            state.changed = false;
            for (candidate, &index) in candidates.iter().enumerate() {
                let (binding, pi) = &self.bindings[index];
                let compiled = &self.policies[*pi];
                // A Never binding that gave the first pass neither an error
                // nor a missing param, and whose matching does not read the
                // object, would give the same again before the reinvocation
                // check stops it: this pass changes nothing else it reads.
                let reinvocable =
                    compiled.policy.reinvocation_policy == ReinvocationPolicy::IfNeeded;
                if state.reinvoke.is_some() && !reinvocable && state.quiet.contains(candidate) {
                    continue;
                }
                if observer.interrupted() {
                    return Outcome::Denied {
                        message: "admission interrupted before its end".into(),
                        code: 500,
                    };
                }
                let errors = state.errors.len() + state.config_errors.len();
                let dispatched = self.dispatch_binding(
                    invoke::Candidate {
                        compiled,
                        index: candidate,
                        binding,
                    },
                    ctx,
                    state,
                );
                if state.reinvoke.is_none()
                    && compiled.policy.param_kind.is_none()
                    && state.errors.len() + state.config_errors.len() == errors
                    && !BindingMatch::reads_object(&compiled.policy, binding, &state.attrs)
                {
                    state.quiet.insert(candidate);
                }
                if let Err(status) = dispatched {
                    // Status errors end the admission whatever the failure policy.
                    return Outcome::Denied {
                        message: status.message,
                        code: status.code,
                    };
                }
            }
            let evaluation = std::mem::take(&mut state.errors);
            state.errors = std::mem::take(&mut state.config_errors);
            state.errors.extend(evaluation);
            for e in &state.errors {
                observer.policy_error(&e.policy, &e.binding, e.failure_policy, &e.message);
            }
            if let Some(e) = state
                .errors
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
            state.errors.clear();
            state.touched |= state.changed;
            // kube-apiserver calling the webhook again is its chain's
            // reinvocation pass: kmutate's own would be a second one.
            if state.reinvoke.is_some()
                || state.attrs.reinvocation
                || !state.changed
                || state.invoked_if_needed.is_empty()
            {
                break;
            }
            observer.reinvocation(state.attrs.object.as_ref().unwrap_or(&Json::Null));
            state.reinvoke = Some(std::mem::take(&mut state.invoked_if_needed));
        }
        Outcome::Admitted {
            object: state.attrs.object.take().unwrap_or(Json::Null),
            warnings: Vec::new(),
            changed: state.touched,
        }
    }
}

/// What one admission carries from binding to binding.
struct AdmissionState<'o> {
    /// The request, its object the current (mutated) object.
    attrs: AdmissionRequest,
    /// The `request` variable as JSON, built once.
    request_json: Option<Json>,
    /// The invocations to run again in the reinvocation pass.
    reinvoke: Option<BTreeSet<String>>,
    /// IfNeeded invocations run so far.
    invoked_if_needed: BTreeSet<String>,
    /// The first pass's results of IfNeeded mutations, by invocation key and
    /// mutation index, for the reinvocation pass (see [`FirstResult`]);
    /// `None` where two invocations had the same key.
    first_results: HashMap<(String, usize), Option<FirstResult>, FastHash>,
    /// Each binding's matching, made before the admission, for the first pass.
    prematch: Option<Prematch>,
    /// The candidates (by position) whose first-pass dispatch recorded no error, had no
    /// params to find (and so observed no missing one), and whose matching
    /// does not read the object.
    quiet: BindingSet,
    /// Whether the object changed in this pass.
    changed: bool,
    /// Whether the object may have changed in an earlier pass, or other than
    /// by a mutation (see [`Outcome::Admitted`]).
    touched: bool,
    /// Upstream matches every binding and collects its params before it
    /// evaluates any invocation (`generic/policy_dispatcher.go` `Dispatch`):
    /// the errors of configuration (a policy or binding that fails to match,
    /// params that fail) come before those of evaluation, whatever the order
    /// of the bindings.
    config_errors: Vec<PolicyError>,
    /// Errors of this pass's evaluations (and, once the pass is over, all
    /// its errors in upstream's order).
    errors: Vec<PolicyError>,
    /// Told about mutations (metrics).
    observer: &'o dyn AdmissionObserver,
    /// What earlier mutations' schema checks showed of `attrs.object`.
    checks: ObjectChecks,
    /// The request's object as it came, once taken.
    original: Original,
}

/// Rewrites a written request's objects of a built-in kind as the kind's Go
/// types encode them; the object as it came, if that changed it.
///
/// Upstream decodes a request's objects into their kind's Go types before
/// admission, so its expressions and patches meet them encoded again:
/// `status: {}` and a container's `resources: {}` there, `paused: false`
/// gone (`has(object.status)` is true for a Pod written without one). An
/// object kube-apiserver sent is already so. A snapshot for a patch is
/// taken of the encoded object, as kube-apiserver would have sent it: the
/// patch holds what the policies changed, not the encoding.
fn go_encode_written(request: &mut AdmissionRequest, schemas: &SchemaStore) -> Option<Json> {
    let kind = &request.kind;
    let ty = schemas.lookup(&kind.group, &kind.version, &kind.kind)?;
    if !crate::schema::go_typed(ty.name()) {
        return None;
    }
    if let Some(old) = request.old_object.as_mut() {
        crate::schema::go_round_trip(old, ty.name());
    }
    let object = request.object.as_mut()?;
    let mut encoded = object.clone();
    if !crate::schema::go_round_trip(&mut encoded, ty.name()) {
        return None;
    }
    Some(std::mem::replace(object, encoded))
}

/// The snapshot of the request's object, for a caller that answers with a
/// patch from it ([`PolicySet::admit_keeping_original`]).
enum Original {
    /// No snapshot is taken.
    Unwanted,
    /// Taken right before the object is first written to.
    Pending,
    /// Taken.
    Kept(Snapshot),
}

impl Original {
    /// Called with the object, still as the request gave it, right before
    /// the admission first writes to it; later calls do nothing.
    fn before_write(&mut self, object: &Json) {
        if let Original::Pending = self {
            *self = Original::Kept(Snapshot::of(object));
        }
    }
}

/// A request's matching against every binding of a policy set, made before
/// its admission ([`PolicySet::prematch`]).
pub struct Prematch {
    /// How many bindings the set had.
    bindings: usize,
    /// The bindings the request's resource can match (the index's
    /// candidates), in dispatch order.
    candidates: Vec<usize>,
    /// Each candidate's matching, by position in `candidates`, until the
    /// admission takes it; none at all for a request the admission does not
    /// dispatch.
    results: Vec<Option<BindingMatch>>,
}

/// How a request matched one binding: its policy's matchConstraints, then
/// (when those matched) its own matchResources, if it has any.
struct BindingMatch {
    policy: Result<Option<matching::MatchedAs>, matching::MatchError>,
    binding: Option<Result<Option<matching::MatchedAs>, matching::MatchError>>,
}

impl BindingMatch {
    fn of(
        policy: &Policy,
        binding: &Binding,
        request: &AdmissionRequest,
        ctx: &AdmissionContext<'_>,
    ) -> BindingMatch {
        Self::given(policy, binding, request, ctx, ObjectSeen::Yes)
    }

    /// [`BindingMatch::of`], reading the request's objects only when
    /// `object` says so ([`matching::matches_given`]).
    fn given(
        policy: &Policy,
        binding: &Binding,
        request: &AdmissionRequest,
        ctx: &AdmissionContext<'_>,
        object: ObjectSeen,
    ) -> BindingMatch {
        let matches = |mr| matching::matches_given(mr, request, ctx.cluster, ctx.resources, object);
        let policy = matches(&policy.match_constraints);
        let binding = match policy {
            Ok(Some(_)) => binding.match_resources.as_ref().map(matches),
            _ => None,
        };
        BindingMatch { policy, binding }
    }

    /// Whether matching the binding ([`BindingMatch::of`]) reads the
    /// request's object (see [`matching::reads_object`]).
    fn reads_object(policy: &Policy, binding: &Binding, request: &AdmissionRequest) -> bool {
        let reads = |mr| matching::reads_object(mr, request);
        reads(&policy.match_constraints) || binding.match_resources.as_ref().is_some_and(reads)
    }

    /// Whether the binding acts on the request: it matches, or its
    /// matching failed and its failure policy decides.
    fn acts(&self) -> bool {
        !matches!(self.policy, Ok(None)) && !matches!(self.binding, Some(Ok(None)))
    }
}

/// A set of candidate positions: a bit each, the first 256 inline.
#[derive(Default)]
struct BindingSet(smallvec::SmallVec<[u64; 4]>);

impl BindingSet {
    fn insert(&mut self, index: usize) {
        let word = index / 64;
        if self.0.len() <= word {
            self.0.resize(word + 1, 0);
        }
        self.0[word] |= 1 << (index % 64);
    }

    fn contains(&self, index: usize) -> bool {
        self.0
            .get(index / 64)
            .is_some_and(|word| word & (1 << (index % 64)) != 0)
    }
}

/// A mutation's result in the first pass, with what its expression (and the
/// variables) could observe of the object then.
///
/// CEL is pure, and an invocation's other inputs (oldObject, request, params,
/// namespaceObject) are the same in both passes, so when the reinvocation
/// pass finds the observed part of the object unchanged the expression would
/// evaluate to this value again, at the same cost under a fresh budget.
/// Policies reading `authorizer` are not remembered: its answers come from
/// outside the request.
struct FirstResult {
    observed: Json,
    value: MutationValue,
}

impl FirstResult {
    /// `value`, computed by a mutation whose activation reads `object` as
    /// `access` says.
    fn new(object: &Json, access: &Access, value: &MutationValue) -> FirstResult {
        FirstResult {
            // An expression that never reads `object` never converts it.
            observed: if access.is_none() {
                Json::Null
            } else {
                project(object, access)
            },
            value: value.clone(),
        }
    }

    /// Whether the same activation would observe the same of `object`.
    fn still_observed(&self, object: &Json, access: &Access) -> bool {
        access.is_none() || projection_matches(&self.observed, object, access)
    }
}

/// The inputs of an invocation besides the object, which changes with each
/// mutation.
struct InvocationInputs<'x> {
    env: &'x CelEnvironment,
    old_object: &'x Json,
    request: &'x Json,
    params: &'x Json,
    namespace_object: &'x Json,
    /// `None` when no expression reads `authorizer`.
    authorizer: Option<&'x dyn Authorizer>,
    attrs: &'x AdmissionRequest,
    variables: &'x [CompiledVariable],
}

impl<'x> InvocationInputs<'x> {
    /// An activation over `object` and these inputs, each JSON input
    /// converted as far as `access` says its expressions can observe it.
    fn activation<'y>(&'y self, object: &'y Json, access: &'y InputAccess) -> Activation<'y> {
        let json = [
            object,
            self.old_object,
            self.request,
            self.params,
            self.namespace_object,
        ];
        Activation::new(
            self.env,
            JSON_INPUTS
                .into_iter()
                .zip(json)
                .zip(&access.0)
                .map(|((name, json), access)| (name, json, access))
                .collect(),
            self.authorizer
                .map(|a| authz::activation_inputs(a, self.attrs).into())
                .unwrap_or_default(),
            self.variables,
        )
    }
}

/// Whether `api_version` is `group/version` (`version` for the core group).
fn is_api_version(api_version: &str, group: &str, version: &str) -> bool {
    if group.is_empty() {
        return api_version == version;
    }
    api_version
        .strip_prefix(group)
        .and_then(|rest| rest.strip_prefix('/'))
        .is_some_and(|rest| rest == version)
}

/// Whether the request already names the matched kind and resource.
fn request_matches(request: &AdmissionRequest, matched: &matching::MatchedAs) -> bool {
    *matched == matching::MatchedAs::Exact
        || (request.kind == *matched.gvk(request) && request.resource == *matched.gvr(request))
}

/// Applies one mutation's value to `object`, which it leaves untouched on an
/// error; whether the object changed (a failed JSON patch `test` is a no-op).
fn apply_mutation(
    object: &mut Json,
    value: &mut MutationValue,
    schema: &crate::schema::TypeRef,
    checks: &mut ObjectChecks,
    original: &mut Original,
) -> Result<bool, StepError> {
    // Told only while the snapshot is still to be taken: the mutations then
    // find whether they change anything before writing.
    let before_write: Option<&mut dyn FnMut(&Json)> = match original {
        Original::Pending => Some(&mut |object: &Json| original.before_write(object)),
        Original::Unwanted | Original::Kept(_) => None,
    };
    match value {
        MutationValue::Apply(applied) => {
            let live = checks.live(schema);
            let known_patch = applied.checks_for(schema);
            // Upstream converts the merged object into its Go type; only what
            // the patch brought can fail there (the object was typed), so the
            // patch is checked, and the merge runs on a copy when it fails:
            // its own errors come first, and the object stays as it was.
            if let Some(err) = crate::schema::go_convert_error(&applied.patch, schema.name()) {
                let mut scratch = object.clone();
                apply_configuration_in_place(
                    &mut scratch,
                    live,
                    &mut applied.patch,
                    known_patch,
                    schema,
                    MergeTold::default(),
                )
                .map_err(|e| StepError::Policy(format!("error applying patch: {e}")))?;
                return Err(StepError::Policy(format!(
                    "unable to convert unstructured object to {}: {err}",
                    object_gvk(&scratch)
                )));
            }
            let changed = apply_configuration_in_place(
                object,
                live,
                &mut applied.patch,
                known_patch,
                schema,
                MergeTold {
                    before_write,
                    positions: applied.positions.as_mut(),
                },
            )
            .map_err(|e| StepError::Policy(format!("error applying patch: {e}")))?;
            round_trip(object, schema, changed, checks, applied.patch.as_object());
            checks.applied(schema);
            Ok(changed)
        }
        // A strict-decoding failure ends the admission, so the object it
        // leaves changed is never used.
        MutationValue::Patch(ops) => match apply_patch_in_place(object, ops, before_write) {
            Ok(changed) => {
                // What the patch wrote, when a fact about the rest of the
                // object spares visiting it.
                let decoded_before = checks.go_decodes(schema);
                let written = (decoded_before || checks.go_encoded(schema))
                    .then(|| written_by_patch(object, ops))
                    .flatten();
                // The result is decoded into the kind's Go types: a value of
                // the wrong type fails before any unknown field is told.
                let decode_error = match written.as_ref().filter(|_| decoded_before) {
                    Some(written) => {
                        crate::schema::go_decode_error_within(object, schema.name(), written)
                    }
                    None => crate::schema::go_decode_error(object, schema.name()),
                };
                if let Some(err) = decode_error {
                    return Err(StepError::Status(StatusError {
                        code: 500,
                        message: format!("Internal error occurred: {err}"),
                    }));
                }
                checks.decoded(schema);
                let unknown = checks.strict_errors(schema, ops, object);
                if unknown.is_empty() {
                    round_trip(object, schema, changed, checks, written.as_ref());
                    Ok(changed)
                } else {
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
                }
            }
            Err(JsonPatchError::TestFailed { .. }) => Ok(false),
            Err(JsonPatchError::Panic { .. }) => Err(StepError::Status(StatusError {
                code: 500,
                message: APISERVER_PANIC.into(),
            })),
            Err(e) => Err(StepError::Policy(format!("JSON Patch: {e}"))),
        },
    }
}

/// Upstream decodes each mutation's result into the kind's Go type and
/// encodes it again (see `schema::go_round_trip`). Only a mutation that
/// changed the object is followed by it: an object that comes from
/// kube-apiserver has been through the Go types already, and the snapshot
/// of the original is taken before the first write. The mutation's own
/// answer (changed or not) stands, so reinvocation follows what it did.
///
/// The first round trip of an admission visits the whole object, which
/// makes all of it as the Go types encode it (the round trip changes
/// nothing twice); later ones visit only what their mutation wrote
/// (`written`, `None` when unknown: all of it).
fn round_trip(
    object: &mut Json,
    schema: &crate::schema::TypeRef,
    changed: bool,
    checks: &mut ObjectChecks,
    written: Option<&serde_json::Map<String, Json>>,
) {
    if !changed {
        return;
    }
    match written.filter(|_| checks.go_encoded(schema)) {
        Some(written) => {
            crate::schema::go_round_trip_within(object, schema.name(), written);
        }
        None => {
            crate::schema::go_round_trip(object, schema.name());
            checks.round_tripped(schema);
        }
    }
}

/// What the JSON patch `ops` changed in its result `patched`, in the shape
/// `schema::go_round_trip_within` takes: each written subtree's path as
/// nested objects, the subtree itself as null (all of it); `None` when it
/// wrote the whole document. The map or list a removal left empty is among
/// them, for the round trip to leave it out where its field is `omitempty`.
fn written_by_patch(
    patched: &Json,
    ops: &[crate::mutation::json_patch::PatchOperation],
) -> Option<serde_json::Map<String, Json>> {
    let dests = crate::mutation::json_patch::changed_paths(ops);
    let mut shape = serde_json::Map::new();
    for root in crate::schema::subtree::written_roots(patched, dests) {
        if root.is_empty() {
            return None;
        }
        insert_path(&mut shape, &root);
    }
    Some(shape)
}

/// Adds `path` to `shape` as nested objects ending in null; a path under
/// one already there as null is covered by it.
fn insert_path(shape: &mut serde_json::Map<String, Json>, path: &[String]) {
    match path {
        [] => {}
        [last] => {
            shape.insert(last.clone(), Json::Null);
        }
        [first, rest @ ..] => {
            let entry = shape
                .entry(first.clone())
                .or_insert_with(|| Json::Object(serde_json::Map::new()));
            if let Json::Object(inner) = entry {
                insert_path(inner, rest);
            }
        }
    }
}

/// `group/version, Kind=kind` of an object, from its `apiVersion` and `kind`.
fn object_gvk(object: &Json) -> String {
    let field = |name: &str| object.get(name).and_then(Json::as_str).unwrap_or_default();
    let (group, version) = field("apiVersion")
        .split_once('/')
        .unwrap_or(("", field("apiVersion")));
    gvk_string(&crate::request::GroupVersionKind {
        group: group.into(),
        version: version.into(),
        kind: field("kind").into(),
    })
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

/// A mutation expression's result, ready to apply.
#[derive(Debug, Clone)]
enum MutationValue {
    Apply(AppliedConfiguration),
    Patch(Vec<PatchOperation>),
}

/// An ApplyConfiguration expression's value.
#[derive(Debug, Clone)]
struct AppliedConfiguration {
    patch: Json,
    /// The type this value passed the patch checks of (schema validation and
    /// the search for atomic values) in an earlier merge, set on the copy
    /// that is kept for reuse: a constant expression's, or the first pass's
    /// result remembered for the reinvocation pass.
    passed: OnceLock<TypeRef>,
    /// Where the merge placed the patch's list items, when attribution
    /// asks for them ([`footprint::of_mutation`]).
    positions: Option<MergedPositions>,
}

impl AppliedConfiguration {
    /// What is known of this value's patch checks for a merge as `ty`.
    fn checks_for(&self, ty: &TypeRef) -> PatchChecks {
        if self.passed.get().is_some_and(|t| t.same_as(ty)) {
            PatchChecks::Passed
        } else {
            PatchChecks::Unchecked
        }
    }
}

impl MutationValue {
    /// Records that this value, if an applied configuration, merged as `ty`
    /// (so it passed the patch checks for `ty`).
    fn merged_as(&self, ty: &TypeRef) {
        if let MutationValue::Apply(applied) = self {
            let _ = applied.passed.set(ty.clone());
        }
    }
}

fn apply_configuration_value(v: &dyn Val) -> Result<MutationValue, String> {
    let Some(st) =
        as_struct(v).filter(|s| s.name() == OBJECT_TYPE || s.name().starts_with("Object."))
    else {
        return Err(format!(
            "ApplyConfiguration expression must evaluate to Object but got {}",
            v.get_type().name()
        ));
    };
    object_to_json(st).map(|patch| {
        MutationValue::Apply(AppliedConfiguration {
            patch,
            passed: OnceLock::new(),
            positions: None,
        })
    })
}

fn json_patch_value(v: &dyn Val) -> Result<MutationValue, StepError> {
    let Some(list) = v.downcast_ref::<CelList>() else {
        return Err(StepError::Policy(format!(
            "JSONPatch expression must evaluate to list of JSONPatch but got {}",
            v.get_type().name()
        )));
    };
    let mut ops = Vec::with_capacity(list.inner().len());
    for item in list.inner() {
        let Some(st) = as_struct(item.as_ref()).filter(|s| s.name() == JSON_PATCH_TYPE) else {
            return Err(StepError::Policy(format!(
                "JSONPatch expression must evaluate to list of JSONPatch but got element of type {}",
                item.get_type().name()
            )));
        };
        let string_field = |name: &str| {
            st.field(name)
                .and_then(|f| f.downcast_ref::<CelString>().map(|s| s.inner().to_string()))
        };
        let value = match st.field("value") {
            Some(v) => Some(patch_value_to_json(v)?),
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

/// A JSONPatch operation's `value` as JSON, as upstream's
/// `evaluatePatchExpression` makes it: an `Object...{}` initializer has the
/// names of the initializers nested in it checked against their field path
/// from its own name (`CheckTypeNamesMatchFieldPathNames`); a list or map
/// that holds an initializer (not inside another one) panics upstream's
/// conversion to a `structpb.Value`, which fails the whole request.
fn patch_value_to_json(v: &dyn Val) -> Result<Json, StepError> {
    if let Some(st) = as_struct(v).filter(|s| s.name() != JSON_PATCH_TYPE) {
        return object_to_json(st).map_err(StepError::Policy);
    }
    if holds_initializer(v) {
        return Err(StepError::Status(StatusError {
            code: 500,
            message: APISERVER_PANIC.into(),
        }));
    }
    crate::cel::structpb::patch_value_to_json(v).map_err(|e| StepError::Policy(e.to_string()))
}

/// Compiles `policies` (on several threads when there are many), each
/// with its problems, in the order given.
pub fn compile_policies(
    env: &CelEnvironment,
    policies: Vec<Policy>,
) -> Vec<(CompiledPolicy, Vec<PolicyCompileError>)> {
    crate::parallel::map_in_order(policies, 64, |p| CompiledPolicy::compile(env, p))
}

/// What kube-apiserver answers a request whose handling panicked.
const APISERVER_PANIC: &str =
    "This request caused apiserver to panic. Look in the logs for details.";

/// Whether a list or map `v` holds an `Object...{}` initializer, through
/// lists and maps only.
fn holds_initializer(v: &dyn Val) -> bool {
    use cel::common::types::CelMap;
    let holds = |item: &dyn Val| as_struct(item).is_some() || holds_initializer(item);
    if let Some(list) = v.downcast_ref::<CelList>() {
        list.inner().iter().any(|i| holds(i.as_ref()))
    } else if let Some(map) = v.downcast_ref::<CelMap>() {
        map.inner().values().any(|i| holds(i.as_ref()))
    } else {
        false
    }
}

mod footprint;

#[cfg(test)]
mod index_properties;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{policy_from_json, LabelSelector, SourceRef};
    use serde_json::json;

    /// Policy `p` (v1beta1) on ConfigMap CREATEs with these variables and
    /// mutations.
    fn configmap_policy(variables: Json, mutations: Json) -> Policy {
        let doc = json!({
            "apiVersion": "admissionregistration.k8s.io/v1beta1",
            "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": "p"},
            "spec": {
                "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                    "operations": ["CREATE"], "resources": ["configmaps"]}]},
                "variables": variables,
                "mutations": mutations
            }
        });
        policy_from_json(&doc, SourceRef::default()).expect("valid policy")
    }

    /// The compile errors of a policy with these variables and mutation.
    fn compile_errors(variables: Json, mutation: &str) -> Vec<String> {
        let policy = configmap_policy(
            variables,
            json!([{"patchType": "ApplyConfiguration",
                "applyConfiguration": {"expression": mutation}}]),
        );
        let (_, errors) = CompiledPolicy::compile(&CelEnvironment::shared(), policy);
        errors
            .iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect()
    }

    /// A ConfigMap CREATE of `data`, completed as the webhook completes it.
    fn configmap_create(data: Json, resources: &ResourceTable) -> AdmissionRequest {
        let mut request = AdmissionRequest {
            operation: "CREATE".into(),
            namespace: "default".into(),
            object: Some(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "cm", "namespace": "default"}, "data": data})),
            ..Default::default()
        };
        request.kind.version = "v1".into();
        request.kind.kind = "ConfigMap".into();
        request.resource.version = "v1".into();
        request.resource.resource = "configmaps".into();
        crate::matching::complete_request(&mut request, resources);
        request
    }

    /// A ConfigMap CREATE in namespace `apps`, which no test lists among the
    /// cluster objects (unlike `default`, which always exists).
    fn configmap_create_in_apps(resources: &ResourceTable) -> AdmissionRequest {
        let mut request = configmap_create(json!({}), resources);
        request.namespace = "apps".into();
        if let Some(object) = &mut request.object {
            object["metadata"]["namespace"] = json!("apps");
        }
        request
    }

    /// The denial by a Fail policy whose namespaceSelector needs namespace
    /// `apps`, which is not there.
    fn apps_not_found(policy: &str, binding: &str) -> Outcome {
        Outcome::Denied {
            message: format!(
                "policy '{policy}' with binding '{binding}' denied request: \
                 failed to configure policy: namespaces \"apps\" not found"
            ),
            code: 403,
        }
    }

    /// Binding `name` of policy `policy`, on everything the policy matches.
    fn binding(name: &str, policy: &str) -> Binding {
        crate::api::binding_from_json(
            &json!({"apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingAdmissionPolicyBinding", "metadata": {"name": name},
                "spec": {"policyName": policy}}),
            SourceRef::default(),
        )
        .expect("valid binding")
    }

    /// `f` in the context of built-in schemas and no cluster objects.
    fn with_context<T>(resources: &ResourceTable, f: impl FnOnce(&AdmissionContext<'_>) -> T) -> T {
        let cluster = ClusterObjects::default();
        f(&AdmissionContext {
            cluster: &cluster,
            schemas: &SchemaStore::builtin(),
            resources,
            authorizer: &crate::authorizer::AlwaysDeny,
        })
    }

    /// The admission of `request` by `set`, with built-in schemas and no
    /// cluster objects.
    fn admit(set: &PolicySet, request: &AdmissionRequest, resources: &ResourceTable) -> Outcome {
        with_context(resources, |ctx| set.admit(request, ctx))
    }

    // One policy of many changing is the only one compiled again; a reused
    // policy that does not compile is reported again.
    #[test]
    fn unchanged_policies_are_reused_not_compiled_again() {
        let named = |name: &str, expression: &str| {
            let mut p = configmap_policy(
                json!([]),
                json!([{"patchType": "ApplyConfiguration",
                    "applyConfiguration": {"expression": expression}}]),
            );
            p.name = name.to_string();
            p
        };
        let policies = |second: &str| {
            vec![
                named("a", "Object{}"),
                named("b", second),
                named("broken", "Object{} +"),
            ]
        };
        let bindings = || {
            vec![
                binding("a", "a"),
                binding("b", "b"),
                binding("broken", "broken"),
            ]
        };
        let (first, errors) = PolicySet::new(policies("Object{}"), bindings());
        assert_eq!(errors.len(), 1);
        let (second, errors) = PolicySet::reusing(
            policies("Object{data: {'x': 'y'}}"),
            bindings(),
            Some(&first),
        );
        assert_eq!(
            errors.len(),
            1,
            "the reused broken policy is reported again"
        );
        let same = |i: usize| Arc::ptr_eq(&first.policies[i], &second.policies[i]);
        assert!(same(0) && !same(1) && same(2));
    }

    // The binding index only skips what can never match: over policies and
    // bindings with every kind of resource rule, every binding outside a
    // request's candidates neither matches nor fails to.
    #[test]
    fn the_binding_index_skips_only_bindings_that_cannot_match() {
        let rules = [
            json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}]),
            json!([{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*"]}]),
            json!([{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*/*"]}]),
            json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["*"], "resources": ["pods/*"]}]),
            json!([{"apiGroups": ["apps"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*/scale"]}]),
            json!([{"apiGroups": ["extensions", "apps"], "apiVersions": ["*"], "operations": ["CREATE"], "resources": ["deployments"]}]),
            json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["*"], "resources": ["namespaces"], "scope": "Cluster"}]),
            json!([]),
        ];
        let mut policies = Vec::new();
        let mut bindings = Vec::new();
        for (i, policy_rules) in rules.iter().enumerate() {
            let doc = json!({"apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingAdmissionPolicy", "metadata": {"name": format!("p{i}")},
                "spec": {"matchConstraints": {"resourceRules": policy_rules,
                        "excludeResourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                            "operations": ["*"], "resources": ["secrets"]}]},
                    "mutations": [{"patchType": "ApplyConfiguration",
                        "applyConfiguration": {"expression": "Object{}"}}]}});
            policies.push(policy_from_json(&doc, SourceRef::default()).expect("valid policy"));
            for (j, binding_rules) in rules.iter().enumerate() {
                let mut b = binding(&format!("b{i}-{j}"), &format!("p{i}"));
                let doc = json!({"apiVersion": "admissionregistration.k8s.io/v1",
                    "kind": "MutatingAdmissionPolicyBinding", "metadata": {"name": b.name},
                    "spec": {"policyName": b.policy_name,
                        "matchResources": {"resourceRules": binding_rules}}});
                b = crate::api::binding_from_json(&doc, SourceRef::default())
                    .expect("valid binding");
                bindings.push(b);
            }
        }
        let (set, _) = PolicySet::new(policies, bindings);
        let resources = ResourceTable::builtin();
        let requests = [
            ("", "v1", "configmaps", "", "ConfigMap"),
            ("", "v1", "pods", "", "Pod"),
            ("", "v1", "pods", "status", "Pod"),
            ("apps", "v1", "deployments", "", "Deployment"),
            ("apps", "v1", "deployments", "scale", "Scale"),
            ("", "v1", "namespaces", "", "Namespace"),
            ("", "v1", "secrets", "", "Secret"),
            ("example.com", "v1", "widgets", "", "Widget"),
        ];
        let mut candidates_seen = 0;
        with_context(&resources, |ctx| {
            for (group, version, resource, sub, kind) in requests {
                let namespaced = resource != "namespaces";
                let request = super::index_properties::request_for(
                    "CREATE",
                    (group, version, resource, sub, kind, namespaced),
                );
                let candidates = set.index.candidates(resource);
                candidates_seen += candidates.len();
                for (i, (b, pi)) in set.bindings.iter().enumerate() {
                    if candidates.contains(&i) {
                        continue;
                    }
                    let m = BindingMatch::of(&set.policies[*pi].policy, b, &request, ctx);
                    let decided_no =
                        matches!(m.policy, Ok(None)) || matches!(m.binding, Some(Ok(None)));
                    assert!(
                        decided_no,
                        "{resource}/{sub}: binding {} skipped but {}",
                        b.name,
                        if m.acts() { "matches" } else { "fails" }
                    );
                }
            }
        });
        // Not all of them: the index did narrow.
        assert!(candidates_seen < requests.len() * set.bindings.len());
    }

    // A mutation that reads no variable is evaluated once and its result
    // kept: every later request must still get the mutation applied to its
    // own object, as if the expression ran again.
    #[test]
    fn a_constant_mutation_applies_to_every_request() {
        let policy = configmap_policy(
            json!([]),
            json!([
                {"patchType": "ApplyConfiguration", "applyConfiguration":
                    {"expression": "Object{data: {'constant': 'yes'}}"}},
                {"patchType": "JSONPatch", "jsonPatch":
                    {"expression": "[JSONPatch{op: 'add', path: '/metadata/labels', value: {'l': 'v'}}]"}},
                {"patchType": "ApplyConfiguration", "applyConfiguration":
                    {"expression": "Object{data: {'size': string(size(object.data))}}"}}
            ]),
        );
        let (set, errors) = PolicySet::new(vec![policy], vec![binding("b", "p")]);
        assert!(errors.is_empty(), "{errors:?}");
        let resources = ResourceTable::builtin();
        for (data, size) in [
            (json!({"a": "1"}), "2"),
            (json!({"b": "2", "c": "3"}), "3"),
            (json!({"a": "1"}), "2"),
        ] {
            let mut expected = data.clone();
            expected["constant"] = json!("yes");
            expected["size"] = json!(size);
            match admit(&set, &configmap_create(data, &resources), &resources) {
                Outcome::Admitted { object, .. } => {
                    assert_eq!(object["data"], expected);
                    assert_eq!(object["metadata"]["labels"], json!({"l": "v"}));
                }
                other => panic!("not admitted: {other:?}"),
            }
        }
    }

    // A set says it may read `oldObject` when a bound policy's expression
    // names it or a binding is matched by object selector, so that a
    // webhook decodes it only then.
    #[test]
    fn a_set_says_whether_it_may_read_the_old_object() {
        let label = |expression: &str| {
            json!([{"patchType": "ApplyConfiguration", "applyConfiguration":
                {"expression": format!("Object{{metadata: Object.metadata{{labels: {{'l': {expression}}}}}}}")}}])
        };
        let reads = |policy: Policy, binding: Binding| {
            let (set, errors) = PolicySet::new(vec![policy], vec![binding]);
            assert!(errors.is_empty(), "{errors:?}");
            set.reads_old_object()
        };
        let plain = || configmap_policy(json!([]), label("object.metadata.name"));
        assert!(!reads(plain(), binding("b", "p")));
        let old_name = "oldObject.metadata.name";
        assert!(reads(
            configmap_policy(json!([]), label(old_name)),
            binding("b", "p")
        ));
        let variable = json!([{"name": "old", "expression": old_name}]);
        assert!(reads(
            configmap_policy(variable, label("variables.old")),
            binding("b", "p")
        ));
        let mut condition = plain();
        condition.match_conditions = vec![crate::api::NamedExpression {
            name: "c".into(),
            expression: "has(oldObject.metadata)".into(),
        }];
        assert!(reads(condition, binding("b", "p")));
        let app = LabelSelector {
            match_labels: [("app".to_string(), "web".to_string())].into(),
            ..LabelSelector::default()
        };
        let mut selected = plain();
        selected.match_constraints.object_selector = app.clone();
        assert!(reads(selected, binding("b", "p")));
        let mut selecting = binding("b", "p");
        selecting.match_resources = Some(MatchResources {
            object_selector: app,
            ..MatchResources::default()
        });
        assert!(reads(plain(), selecting));
        // A policy no binding runs reads nothing.
        assert!(!reads(
            configmap_policy(json!([]), label(old_name)),
            binding("b", "other")
        ));
    }

    // An admission whose mutations find nothing to do says so, so that the
    // webhook answers without comparing the objects; one that changes
    // anything, in either pass, says it may have.
    #[test]
    fn an_admission_says_whether_it_changed_the_object() {
        let changed = |mutations: Json, reinvoke: bool, data: Json| {
            let mut policy = configmap_policy(json!([]), mutations);
            if reinvoke {
                policy.reinvocation_policy = ReinvocationPolicy::IfNeeded;
            }
            let (set, errors) = PolicySet::new(vec![policy], vec![binding("b", "p")]);
            assert!(errors.is_empty(), "{errors:?}");
            let resources = ResourceTable::builtin();
            let request = configmap_create(data, &resources);
            let changed = match admit(&set, &request, &resources) {
                Outcome::Admitted {
                    object, changed, ..
                } => {
                    if !changed {
                        assert_eq!(Some(&object), request.object.as_ref());
                    }
                    changed
                }
                other => panic!("not admitted: {other:?}"),
            };
            // Kept for a patch, the object as it came is taken exactly when
            // the admission writes to it, before it does.
            let (_, original) = with_context(&resources, |ctx| {
                set.admit_keeping_original(
                    request.clone(),
                    None,
                    ctx,
                    &NoObserver,
                    ObjectOrigin::Written,
                )
            });
            assert_eq!(original.is_some(), changed);
            // Of the object as the admission began with it: as the Go types
            // encode it (an empty `data` left out).
            if let (Some(original), Some(object)) = (original, &request.object) {
                let mut encoded = object.clone();
                crate::schema::go_round_trip(&mut encoded, Some("io.k8s.api.core.v1.ConfigMap"));
                assert!(original.diff(&encoded).0.is_empty());
            }
            changed
        };
        let apply = |e: &str| json!([{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": e}}]);
        let patch = |e: &str| json!([{"patchType": "JSONPatch", "jsonPatch": {"expression": e}}]);
        let set_a = apply("Object{data: {'a': '1'}}");
        assert!(changed(set_a.clone(), false, json!({})));
        assert!(changed(set_a.clone(), false, json!({"a": "2"})));
        assert!(!changed(set_a, false, json!({"a": "1"})));
        let replace = patch("[JSONPatch{op: 'replace', path: '/data/a', value: '1'}]");
        assert!(changed(replace.clone(), false, json!({"a": "2"})));
        assert!(!changed(replace, false, json!({"a": "1"})));
        let failed_test = patch(
            "[JSONPatch{op: 'test', path: '/data/a', value: 'x'}, \
              JSONPatch{op: 'add', path: '/data/b', value: '1'}]",
        );
        assert!(!changed(failed_test, false, json!({"a": "1"})));
        let moved = patch("[JSONPatch{op: 'move', from: '/data/a', path: '/data/b'}]");
        assert!(changed(moved, false, json!({"a": "1"})));
        // Changed in the first pass, and found done in the reinvocation pass.
        // (An empty `data` is no field of the object upstream's expressions
        // see: the Go types leave it out, and `object.data.n` fails.)
        let counter = apply("Object{data: {'n': object.?data.?n.orValue('1')}}");
        assert!(changed(counter.clone(), true, json!({})));
        assert!(!changed(counter, true, json!({"n": "1"})));
    }

    // A constant applied configuration skips the patch checks when merged
    // again as a type it passed them for: merged as another type, its
    // errors must still be found (here `data`, which a Pod does not have),
    // whichever type comes first.
    #[test]
    fn a_constant_configuration_is_checked_again_for_another_type() {
        let mut policy = configmap_policy(
            json!([]),
            json!([{"patchType": "ApplyConfiguration", "applyConfiguration":
                {"expression": "Object{data: {'constant': 'yes'}}"}}]),
        );
        policy.match_constraints.resource_rules[0]
            .resources
            .push("pods".into());
        policy.failure_policy = FailurePolicy::Fail;
        let resources = ResourceTable::builtin();
        let configmap = configmap_create(json!({"a": "1"}), &resources);
        let mut pod = configmap_create(json!({}), &resources);
        pod.kind.kind = "Pod".into();
        pod.resource.resource = "pods".into();
        pod.object = Some(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"containers": [{"name": "app", "image": "app:1"}]}}));
        crate::matching::complete_request(&mut pod, &resources);
        let check =
            |set: &PolicySet, request: &AdmissionRequest| match admit(set, request, &resources) {
                Outcome::Admitted { object, .. } => {
                    assert_eq!(request.kind.kind, "ConfigMap");
                    assert_eq!(object["data"], json!({"a": "1", "constant": "yes"}));
                }
                Outcome::Denied { message, .. } => {
                    assert_eq!(request.kind.kind, "Pod");
                    assert_eq!(
                        message,
                        "policy 'p' with binding 'b' denied request: error applying patch: \
                     failed to convert patch object to typed object: \
                     .data: field not declared in schema"
                    );
                }
            };
        for order in [
            [&configmap, &pod, &configmap, &pod],
            [&pod, &configmap, &pod, &configmap],
        ] {
            let (set, errors) = PolicySet::new(vec![policy.clone()], vec![binding("b", "p")]);
            assert!(errors.is_empty(), "{errors:?}");
            for request in order {
                check(&set, request);
            }
        }
    }

    // The reinvocation pass matches the bindings again, Never ones too: one
    // whose object selector the first pass's change makes match must then
    // meet its namespace selector's error, as upstream's second dispatch
    // does (no Namespace `apps` is among the cluster objects). Bindings whose
    // matching does not read the object are not matched again.
    #[test]
    fn the_reinvocation_pass_matches_again_a_binding_a_change_made_match() {
        let apply = |expression: &str| {
            json!([{"patchType": "ApplyConfiguration",
                "applyConfiguration": {"expression": expression}}])
        };
        let selector = |key: &str, value: &str| crate::api::LabelSelector {
            match_labels: [(key.to_string(), value.to_string())].into(),
            ..Default::default()
        };
        let mut labeler = configmap_policy(
            json!([]),
            apply("Object{metadata: Object.metadata{labels: {'x': 'y'}}}"),
        );
        labeler.name = "labeler".into();
        labeler.reinvocation_policy = ReinvocationPolicy::IfNeeded;
        let mut selective = configmap_policy(json!([]), apply("Object{data: {'seen': 'yes'}}"));
        selective.name = "selective".into();
        selective.failure_policy = FailurePolicy::Fail;
        selective.match_constraints.object_selector = selector("x", "y");
        selective.match_constraints.namespace_selector = selector("team", "a");
        // Bindings run in name order: `selective` first, before the label.
        let bindings = vec![binding("a", "selective"), binding("b", "labeler")];
        let (set, errors) = PolicySet::new(vec![selective, labeler], bindings);
        assert!(errors.is_empty(), "{errors:?}");
        let resources = ResourceTable::builtin();
        let request = configmap_create_in_apps(&resources);
        assert_eq!(
            admit(&set, &request, &resources),
            apps_not_found("selective", "a")
        );
    }

    /// Records what [`AdmissionObserver`] is told of changes and monitored
    /// errors.
    #[derive(Default)]
    struct ChangeRecorder {
        monitor_all: bool,
        changes: std::sync::Mutex<Vec<(String, bool, Json)>>,
        errors: std::sync::Mutex<Vec<String>>,
    }

    impl AdmissionObserver for ChangeRecorder {
        fn monitor_all(&self) -> bool {
            self.monitor_all
        }
        fn wants_changes(&self) -> bool {
            true
        }
        fn binding_changed(&self, change: BindingChange<'_>) {
            let paths = change.set.to_vec();
            self.changes.lock().unwrap().push((
                change.policy.to_string(),
                change.monitored,
                json!(paths),
            ));
        }
        fn monitored_error(&self, policy: &str, _binding: &str, message: &str) {
            self.errors
                .lock()
                .unwrap()
                .push(format!("{policy}: {message}"));
        }
    }

    /// A ConfigMap policy `name` whose one mutation is the apply
    /// configuration `expression`.
    fn named_policy(name: &str, expression: &str) -> Policy {
        let mut p = configmap_policy(
            json!([]),
            json!([{"patchType": "ApplyConfiguration",
                "applyConfiguration": {"expression": expression}}]),
        );
        p.name = name.into();
        p.failure_policy = FailurePolicy::Fail;
        p
    }

    fn admitted_with(set: &PolicySet, observer: &ChangeRecorder) -> Json {
        let resources = ResourceTable::builtin();
        let request = configmap_create(json!({"a": "1"}), &resources);
        match with_context(&resources, |ctx| set.admit_with(&request, ctx, observer)) {
            Outcome::Admitted { object, .. } => object,
            other => panic!("not admitted: {other:?}"),
        }
    }

    // A monitored binding runs on a copy: the object, and what later
    // bindings see of it, stay as the enforced ones left them; its error
    // under failurePolicy Fail is reported, not enforced; an IfNeeded one
    // causes no reinvocation.
    #[test]
    fn a_monitored_binding_reports_and_changes_nothing() {
        let mut watched = named_policy("b-watched", "Object{data: {'watched': 'yes'}}");
        watched.reinvocation_policy = ReinvocationPolicy::IfNeeded;
        let policies = vec![
            named_policy("a-applied", "Object{data: {'applied': 'yes'}}"),
            watched,
            named_policy("c-broken", "Object{data: {'broken': object.data.missing}}"),
            // Counts the keys it sees: the monitored ones added none.
            named_policy(
                "d-counter",
                "Object{data: {'seen': string(size(object.data))}}",
            ),
        ];
        let mut bindings: Vec<Binding> = ["a-applied", "b-watched", "c-broken", "d-counter"]
            .iter()
            .map(|p| binding(p, p))
            .collect();
        bindings[1].monitor = true;
        bindings[2].monitor = true;
        let (set, errors) = PolicySet::new(policies, bindings);
        assert!(errors.is_empty(), "{errors:?}");
        let observer = ChangeRecorder::default();
        let object = admitted_with(&set, &observer);
        assert_eq!(
            object["data"],
            json!({"a": "1", "applied": "yes", "seen": "2"})
        );
        assert_eq!(
            *observer.changes.lock().unwrap(),
            [
                ("a-applied".to_string(), false, json!(["data.applied"])),
                ("b-watched".to_string(), true, json!(["data.watched"])),
                ("d-counter".to_string(), false, json!(["data.seen"])),
            ]
        );
        assert_eq!(
            *observer.errors.lock().unwrap(),
            ["c-broken: expression 'Object{data: {'broken': object.data.missing}}' resulted in error: no such key: missing"]
        );
        // Its matching alone: a monitored binding's failure policy is Ignore.
        let resources = ResourceTable::builtin();
        let request = configmap_create(json!({}), &resources);
        let prematch = with_context(&resources, |ctx| set.prematch(&request, ctx));
        let fail: Vec<&str> = set
            .matched(&prematch)
            .iter()
            .filter(|m| m.failure_policy == FailurePolicy::Fail)
            .map(|m| m.binding)
            .collect();
        assert_eq!(fail, ["a-applied", "d-counter"]);

        // Every binding monitored: the object is the request's.
        let observer = ChangeRecorder {
            monitor_all: true,
            ..ChangeRecorder::default()
        };
        assert_eq!(admitted_with(&set, &observer)["data"], json!({"a": "1"}));
        let monitored: Vec<bool> = observer
            .changes
            .lock()
            .unwrap()
            .iter()
            .map(|c| c.1)
            .collect();
        assert_eq!(monitored, [true, true, true]);
    }

    // The first pass takes each binding's matching from the prematch only
    // while it holds: once a mutation labels the object, a later binding
    // selecting that label matches, as it does without a prematch.
    #[test]
    fn a_prematch_is_not_reused_for_a_binding_a_change_made_match() {
        let apply = |expression: &str| {
            json!([{"patchType": "ApplyConfiguration",
                "applyConfiguration": {"expression": expression}}])
        };
        let mut labeler = configmap_policy(
            json!([]),
            apply("Object{metadata: Object.metadata{labels: {'x': 'y'}}}"),
        );
        labeler.name = "labeler".into();
        let mut selective = configmap_policy(json!([]), apply("Object{data: {'seen': 'yes'}}"));
        selective.name = "selective".into();
        let mut selecting = binding("b", "selective");
        let mut by_label = selective.match_constraints.clone();
        by_label.resource_rules.clear();
        by_label.object_selector.match_labels = [("x".to_string(), "y".to_string())].into();
        selecting.match_resources = Some(by_label);
        let (set, errors) = PolicySet::new(
            vec![labeler, selective],
            vec![binding("a", "labeler"), selecting],
        );
        assert!(errors.is_empty(), "{errors:?}");
        let resources = ResourceTable::builtin();
        let request = configmap_create(json!({}), &resources);
        let with = with_context(&resources, |ctx| {
            let prematch = set.prematch(&request, ctx);
            let matched: Vec<&str> = set.matched(&prematch).iter().map(|m| m.binding).collect();
            assert_eq!(matched, ["a"]);
            set.admit_prematched(request.clone(), Some(prematch), ctx, &NoObserver)
        });
        let without = admit(&set, &request, &resources);
        match &with {
            Outcome::Admitted { object, .. } => {
                assert_eq!(object["metadata"]["labels"], json!({"x": "y"}));
                assert_eq!(object["data"], json!({"seen": "yes"}));
            }
            other => panic!("not admitted: {other:?}"),
        }
        assert_eq!(with, without);
    }

    // Upstream's dispatcher records a policy's matching error without
    // matching its bindings (`DefinitionMatches` fails, `addConfigError`,
    // next policy): such a binding acts on the request whatever its own
    // matchResources say, so a caller skipping unmatched requests must not
    // skip it. The namespace `apps` is not among the cluster objects.
    #[test]
    fn a_binding_whose_policy_cannot_be_matched_acts_on_the_request() {
        let mut policy = configmap_policy(
            json!([]),
            json!([{"patchType": "ApplyConfiguration",
                "applyConfiguration": {"expression": "Object{data: {'seen': 'yes'}}"}}]),
        );
        policy.failure_policy = FailurePolicy::Fail;
        policy.match_constraints.namespace_selector.match_labels =
            [("team".to_string(), "a".to_string())].into();
        let mut elsewhere = binding("b", "p");
        let mut secrets_only = policy.match_constraints.clone();
        secrets_only.namespace_selector = Default::default();
        secrets_only.resource_rules[0].resources = vec!["secrets".into()];
        elsewhere.match_resources = Some(secrets_only);
        let (set, errors) = PolicySet::new(vec![policy], vec![elsewhere]);
        assert!(errors.is_empty(), "{errors:?}");
        let resources = ResourceTable::builtin();
        let request = configmap_create_in_apps(&resources);
        let matched: Vec<String> = with_context(&resources, |ctx| {
            let found = set.matched(&set.prematch(&request, ctx));
            found.iter().map(|m| m.binding.to_string()).collect()
        });
        assert_eq!(matched, ["b"]);
        assert_eq!(admit(&set, &request, &resources), apps_not_found("p", "b"));
    }

    // `request` is built once an admission with only the fields some
    // policy reads: each policy must still see every field it reads,
    // including through a variable and in a match condition.
    #[test]
    fn request_holds_every_field_any_policy_reads() {
        let policy = |name: &str, variables: Json, condition: &str, mutation: &str| {
            let mut p = configmap_policy(
                variables,
                json!([{"patchType": "ApplyConfiguration",
                    "applyConfiguration": {"expression": mutation}}]),
            );
            p.name = name.into();
            p.match_conditions = vec![crate::api::NamedExpression {
                name: "c".into(),
                expression: condition.into(),
            }];
            p
        };
        let policies = vec![
            policy(
                "a",
                json!([{"name": "user", "expression": "request.userInfo.username"}]),
                "request.kind.kind == 'ConfigMap'",
                "Object{data: {'user': variables.user}}",
            ),
            policy(
                "b",
                json!([]),
                "true",
                "Object{data: {'op': request.operation, 'ns': request.namespace}}",
            ),
        ];
        let bindings = vec![binding("a", "a"), binding("b", "b")];
        let (set, errors) = PolicySet::new(policies.clone(), bindings.clone());
        assert!(errors.is_empty(), "{errors:?}");
        let read = ["kind", "namespace", "operation", "userInfo"];
        assert_eq!(
            set.request_fields,
            RequestFields::Only(read.iter().map(|f| f.to_string()).collect())
        );
        let resources = ResourceTable::builtin();
        let mut request = configmap_create(json!({}), &resources);
        request.user_info.username = "alice".into();
        match admit(&set, &request, &resources) {
            Outcome::Admitted { object, .. } => assert_eq!(
                object["data"],
                json!({"user": "alice", "op": "CREATE", "ns": "default"})
            ),
            other => panic!("not admitted: {other:?}"),
        }

        // A policy reading `request` other than by field selections gets
        // the whole of it built.
        let mut whole = policies;
        whole.push(policy("c", json!([]), "size(request) > 0", "Object{}"));
        let (set, _) = PolicySet::new(whole, bindings);
        assert_eq!(set.request_fields, RequestFields::All);
    }

    // Upstream's `plugin/cel/composition.go` (`CompositedCompiler`):
    // `variables` is an object whose fields are the variables compiled so
    // far, each of its expression's type (`dyn` when it did not compile).
    #[test]
    fn variables_are_declared_in_order_with_their_types() {
        let label = "Object{metadata: Object.metadata{labels: {'a': 'b'}}}";
        assert!(compile_errors(
            json!([{"name": "name", "expression": "object.metadata.name"},
                   {"name": "upper", "expression": "variables.name.upperAscii()"}]),
            &format!("variables.upper == '' ? {label} : {label}"),
        )
        .is_empty());
        // A name no variable has, or one declared later.
        let e = compile_errors(
            json!([]),
            &format!("variables.missing == 1 ? {label} : {label}"),
        );
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].contains("ERROR: <input>:1:10: undefined field 'missing'"),
            "{e:?}"
        );
        let e = compile_errors(
            json!([{"name": "first", "expression": "variables.second"},
                   {"name": "second", "expression": "'x'"}]),
            label,
        );
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].starts_with("spec.variables[0].expression: "), "{e:?}");
        assert!(e[0].contains("undefined field 'second'"), "{e:?}");
        // A variable's type reaches the operators that read it.
        let e = compile_errors(
            json!([{"name": "s", "expression": "'x'"}]),
            &format!("variables.s + 1 == 2 ? {label} : {label}"),
        );
        assert!(
            e.iter()
                .any(|m| m
                    .contains("found no matching overload for '_+_' applied to '(string, int)'")),
            "{e:?}"
        );
        // Object and library types are declared `dyn`
        // (`convertCelTypeToDeclType`): their fields are not checked.
        assert!(compile_errors(
            json!([{"name": "user", "expression": "request.userInfo"},
                   {"name": "q", "expression": "quantity('1')"}]),
            &format!(
                "variables.user.anything == '' && variables.q.isInteger() ? {label} : {label}"
            ),
        )
        .is_empty());
        // One that does not compile is `dyn`: no second error follows from it.
        let e = compile_errors(
            json!([{"name": "broken", "expression": "'x' +"}]),
            &format!("variables.broken + 1 == 2 ? {label} : {label}"),
        );
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].starts_with("spec.variables[0].expression: "), "{e:?}");
    }
}
