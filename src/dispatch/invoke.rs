//! Running one binding of one policy: its matching and params, then an
//! invocation per param (match conditions, then the mutations in order) on
//! the object in the matched version.

use super::{
    apply_configuration_value, apply_mutation, footprint, gvk_string, is_api_version,
    json_patch_value, param_key, params, request_matches, AdmissionContext, AdmissionObserver,
    AdmissionState, BindingChange, BindingMatch, CompiledPolicy, FirstResult, InvocationInputs,
    MutationStep, MutationValue, Original, PolicyError, PolicySet, SkipReason, StatusError,
    StepError,
};
use crate::api::{Binding, FailurePolicy, PatchType, Policy, ReinvocationPolicy};
use crate::cel::cost::RUNTIME_CEL_COST_BUDGET_MATCH_CONDITIONS;
use crate::cel::CompiledExpression;
use crate::matching;
use crate::request::{AdmissionRequest, GroupVersionKind};
use crate::schema::model::FastHash;
use crate::schema::TypeRef;
use cel::common::types::CelBool;
use serde_json::Value as Json;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::OnceLock;

use super::activation::Activation;
use super::object_checks::ObjectChecks;

/// One binding of a policy, as an admission takes it in turn.
#[derive(Clone, Copy)]
pub(super) struct Candidate<'p> {
    pub(super) compiled: &'p CompiledPolicy,
    /// Its position among the request's candidates.
    pub(super) index: usize,
    pub(super) binding: &'p Binding,
}

impl Candidate<'_> {
    /// An error of this binding, with its policy's failure policy.
    fn error(&self, message: String) -> PolicyError {
        binding_error(&self.compiled.policy, self.binding, message)
    }
}

/// An error of `policy` under `binding`.
fn binding_error(policy: &Policy, binding: &Binding, message: String) -> PolicyError {
    PolicyError {
        policy: policy.name.clone(),
        binding: binding.name.clone(),
        failure_policy: policy.failure_policy,
        message,
    }
}

/// What [`PolicySet::invocations`] found to run for one binding.
struct Invocations {
    /// How the request matched the policy.
    matched: matching::MatchedAs,
    /// One invocation per param (`None`: null params).
    params: params::Params,
    /// Each invocation's reinvocation key (IfNeeded policies only).
    keys: smallvec::SmallVec<[Option<String>; 1]>,
}

impl PolicySet {
    /// Runs one binding of one policy; a monitored one on a copy of the
    /// object, its errors reported to the observer instead of the
    /// admission's.
    pub(super) fn dispatch_binding(
        &self,
        candidate: Candidate<'_>,
        ctx: &AdmissionContext<'_>,
        state: &mut AdmissionState<'_>,
    ) -> Result<(), StatusError> {
        if !candidate.binding.monitor && !state.observer.monitor_all() {
            return self.invoke_binding(candidate, ctx, state, false);
        }
        let (errors, config_errors) = (state.errors.len(), state.config_errors.len());
        let outcome = self.invoke_binding(candidate, ctx, state, true);
        let failed = state.config_errors.drain(config_errors..);
        let failed: Vec<PolicyError> = failed.chain(state.errors.drain(errors..)).collect();
        let observer = state.observer;
        for e in failed {
            observer.monitored_error(&e.policy, &e.binding, &e.message);
        }
        if let Err(status) = outcome {
            let policy = &candidate.compiled.policy.name;
            observer.monitored_error(policy, &candidate.binding.name, &status.message);
        }
        Ok(())
    }

    /// The invocations of one binding that run in this pass: its matching
    /// (the prematch's, where it holds), its params, and each one's
    /// reinvocation key (IfNeeded policies only). None when nothing runs; a
    /// configuration error is recorded first.
    fn invocations(
        &self,
        candidate: Candidate<'_>,
        ctx: &AdmissionContext<'_>,
        state: &mut AdmissionState<'_>,
    ) -> Option<Invocations> {
        let Candidate {
            compiled,
            index,
            binding,
        } = candidate;
        let policy = &compiled.policy;
        let prematched = match &mut state.prematch {
            // The first pass, on the object as matched, or on a changed one
            // that the binding's matching does not read.
            Some(prematch)
                if state.reinvoke.is_none()
                    && (!state.changed
                        || !BindingMatch::reads_object(policy, binding, &state.attrs)) =>
            {
                prematch.results.get_mut(index).and_then(Option::take)
            }
            _ => None,
        };
        let matching = match prematched {
            Some(m) => m,
            None => BindingMatch::of(policy, binding, &state.attrs, ctx),
        };
        let matched = match matching.policy {
            Ok(Some(m)) => m,
            Ok(None) => return None,
            Err(e) => {
                let e = candidate.error(format!("failed to configure policy: {e}"));
                state.config_errors.push(e);
                return None;
            }
        };
        match matching.binding {
            None | Some(Ok(Some(_))) => {}
            Some(Ok(None)) => return None,
            Some(Err(e)) => {
                let e = candidate.error(format!("failed to configure binding: {e}"));
                state.config_errors.push(e);
                return None;
            }
        }
        let params = match params::collect(policy, binding, &state.attrs, ctx) {
            Ok(p) => p,
            Err(e) => {
                state.config_errors.push(candidate.error(e));
                return None;
            }
        };
        if params.is_empty() {
            state.observer.invocation_skipped(
                &policy.name,
                &binding.name,
                None,
                SkipReason::ParamNotFound,
            );
            return None;
        }
        // The invocation keys of the reinvocation bookkeeping, which only
        // IfNeeded invocations enter; in the reinvocation pass, a binding
        // none of whose invocations is due stops here (matching and params
        // ran, as upstream's do).
        let reinvocable = policy.reinvocation_policy == ReinvocationPolicy::IfNeeded;
        let keys: smallvec::SmallVec<[Option<String>; 1]> = params
            .iter()
            .map(|param| {
                reinvocable.then(|| {
                    format!(
                        "{}\u{0}{}\u{0}{}",
                        policy.name,
                        binding.name,
                        param.as_ref().map(param_key).unwrap_or_default()
                    )
                })
            })
            .collect();
        if let Some(set) = &state.reinvoke {
            if !keys.iter().flatten().any(|key| set.contains(key)) {
                return None;
            }
        }
        Some(Invocations {
            matched,
            params,
            keys,
        })
    }

    /// Runs one binding of one policy: an invocation per param (match
    /// conditions, then the mutations in order) on the object in the
    /// matched version. A `monitored` one mutates a copy of the object,
    /// which it drops, with its own facts about the copy and no snapshot.
    fn invoke_binding(
        &self,
        candidate: Candidate<'_>,
        ctx: &AdmissionContext<'_>,
        state: &mut AdmissionState<'_>,
        monitored: bool,
    ) -> Result<(), StatusError> {
        let compiled = candidate.compiled;
        let Some(Invocations {
            matched,
            params,
            keys,
        }) = self.invocations(candidate, ctx, state)
        else {
            return Ok(());
        };
        let taken = match monitored {
            false => state.attrs.object.take(),
            true => state.attrs.object.clone(),
        };
        let Some(object) = taken else {
            return Ok(());
        };
        let matched_gvk = matched.gvk(&state.attrs);
        let schema =
            ctx.schemas
                .lookup(&matched_gvk.group, &matched_gvk.version, &matched_gvk.kind);
        let original = (!monitored).then_some(&mut state.original);
        let mut versioned = Versioned::of(object, matched_gvk, original);
        // `request` and `namespaceObject` are built only for policies that read them.
        let request = match compiled.reads_request {
            true => self.request_variable(&state.attrs, &mut state.request_json, &matched),
            false => Cow::Owned(Json::Null),
        };
        let namespace_object = namespace_variable(compiled, &state.attrs, ctx);
        let mut own_facts = monitored.then(|| (state.checks.clone(), Original::Unwanted));
        let (checks, original) = match &mut own_facts {
            Some((checks, original)) => (checks, original),
            None => (&mut state.checks, &mut state.original),
        };
        let null = Json::Null;
        let old_object = state.attrs.old_object.as_ref().unwrap_or(&null);
        let observer = state.observer;

        let mut outcome = Ok(());
        for (param, key) in params.iter().zip(keys) {
            if let Some(set) = &state.reinvoke {
                if !key.as_ref().is_some_and(|key| set.contains(key)) {
                    continue;
                }
            }
            let inputs = InvocationInputs {
                env: &self.env,
                old_object,
                request: request.as_ref(),
                params: param.as_ref().unwrap_or(&null),
                namespace_object: &namespace_object,
                authorizer: compiled.reads_authorizer.then_some(ctx.authorizer),
                attrs: &state.attrs,
                variables: &compiled.variables,
            };
            let invocation = Invocation {
                candidate,
                param: param.as_ref(),
                observer,
            };
            if !invocation.conditions_hold(&inputs, &versioned.object, &mut state.errors) {
                continue;
            }
            let mut run = MutationRun {
                invocation,
                inputs: &inputs,
                key: key.as_ref(),
                schema: schema.as_ref(),
                matched_gvk,
                monitored,
                attributed: monitored || observer.wants_changes(),
                reinvoking: state.reinvoke.is_some(),
                errors: &mut state.errors,
                first_results: &mut state.first_results,
                checks: &mut *checks,
                original: &mut *original,
            };
            match run.mutate(&mut versioned.object) {
                Err(status) => {
                    outcome = Err(status);
                    break;
                }
                Ok(changed) if !monitored => {
                    state.changed |= changed;
                    if let Some(key) = key {
                        state.invoked_if_needed.insert(key);
                    }
                }
                Ok(_) => {}
            }
        }
        if monitored {
            return outcome;
        }
        state.attrs.object = Some(versioned.into_request_version(&mut state.touched));
        outcome
    }

    /// The `request` variable for a request matched as `matched`: built once
    /// per admission (into `built`), with the matched kind and resource
    /// where they differ from the request's.
    fn request_variable<'s>(
        &self,
        attrs: &AdmissionRequest,
        built: &'s mut Option<Json>,
        matched: &matching::MatchedAs,
    ) -> Cow<'s, Json> {
        let request = built.get_or_insert_with(|| attrs.cel_request_json(&self.request_fields));
        if request_matches(attrs, matched) {
            return Cow::Borrowed(request);
        }
        let mut request = request.clone();
        request["kind"] = serde_json::to_value(matched.gvk(attrs)).unwrap_or(Json::Null);
        request["resource"] = serde_json::to_value(matched.gvr(attrs)).unwrap_or(Json::Null);
        Cow::Owned(request)
    }
}

/// The `namespaceObject` variable: the request's Namespace, null for a
/// cluster-scoped request, a Namespace itself, or a policy that never
/// reads it.
fn namespace_variable(
    compiled: &CompiledPolicy,
    attrs: &AdmissionRequest,
    ctx: &AdmissionContext<'_>,
) -> Json {
    let is_namespace_request =
        attrs.resource.group.is_empty() && attrs.resource.resource == "namespaces";
    if !compiled.reads_namespace_object || is_namespace_request || attrs.namespace.is_empty() {
        return Json::Null;
    }
    matching::namespace_object(ctx.cluster, &attrs.namespace).unwrap_or(Json::Null)
}

/// The object in the matched version (CRD versions differ only by
/// apiVersion), and what puts it back in the request's.
struct Versioned {
    object: Json,
    /// The request's `apiVersion` when the object was converted (`None`
    /// inside: it had none).
    converted_from: Option<Option<Json>>,
}

impl Versioned {
    /// `object` in the version of `gvk`; `original` (the request's
    /// snapshot, when this binding writes the request's object) is told
    /// before a conversion writes to it.
    fn of(mut object: Json, gvk: &GroupVersionKind, original: Option<&mut Original>) -> Versioned {
        let in_matched_version = object
            .get("apiVersion")
            .and_then(Json::as_str)
            .is_some_and(|v| is_api_version(v, &gvk.group, &gvk.version));
        if in_matched_version {
            return Versioned {
                object,
                converted_from: None,
            };
        }
        if let Some(original) = original {
            original.before_write(&object);
        }
        let converted_from = Some(object.get("apiVersion").cloned());
        let matched_api_version = if gvk.group.is_empty() {
            gvk.version.clone()
        } else {
            format!("{}/{}", gvk.group, gvk.version)
        };
        // Only an object has a version to set (a webhook refuses any other
        // request object; a library caller may still pass one).
        if let Some(members) = object.as_object_mut() {
            members.insert("apiVersion".into(), Json::String(matched_api_version));
        }
        Versioned {
            object,
            converted_from,
        }
    }

    /// The object back in the request's version; `touched` is set when it
    /// keeps the matched one (the request's had none).
    fn into_request_version(self, touched: &mut bool) -> Json {
        let mut object = self.object;
        match self.converted_from {
            None => {}
            Some(Some(version)) => {
                if let Some(members) = object.as_object_mut() {
                    members.insert("apiVersion".into(), version);
                }
            }
            // The object keeps the version it was given.
            Some(None) => *touched = true,
        }
        object
    }
}

/// One invocation of a binding: the binding, its param, and who is told.
#[derive(Clone, Copy)]
struct Invocation<'i, 'o> {
    candidate: Candidate<'i>,
    param: Option<&'i Json>,
    observer: &'o dyn AdmissionObserver,
}

impl Invocation<'_, '_> {
    /// Whether the invocation runs. Upstream `matchconditions.Matcher`: any
    /// false condition skips it; an error counts only when none is false,
    /// and is one of the pass (into `errors`) under failurePolicy Fail.
    fn conditions_hold(
        &self,
        inputs: &InvocationInputs<'_>,
        object: &Json,
        errors: &mut Vec<PolicyError>,
    ) -> bool {
        let compiled = self.candidate.compiled;
        if compiled.match_conditions.is_empty() {
            return true;
        }
        // Upstream's condition matcher evaluates with no Namespace
        // (`ForInput` with a nil namespace): `namespaceObject` is null there,
        // and in the variables evaluated for it.
        let match_inputs = InvocationInputs {
            namespace_object: &Json::Null,
            ..*inputs
        };
        let act = match_inputs
            .activation(object, &compiled.match_access)
            .with_budget(RUNTIME_CEL_COST_BUDGET_MATCH_CONDITIONS);
        let skipped = |reason| {
            let (policy, binding) = (&compiled.policy.name, &self.candidate.binding.name);
            (self.observer).invocation_skipped(policy, binding, self.param, reason)
        };
        match evaluate_match_conditions(&compiled.match_conditions, &act) {
            Conditions::Hold => true,
            Conditions::False(name) => {
                skipped(SkipReason::ConditionFalse(name));
                false
            }
            Conditions::Error(e) => {
                skipped(SkipReason::ConditionError(&e));
                if compiled.policy.failure_policy == FailurePolicy::Fail {
                    errors.push(self.candidate.error(e));
                }
                false
            }
        }
    }
}

/// One invocation's mutations: what they read, and the parts of the
/// admission's state they write (borrowed apart from the request, which
/// the inputs read).
struct MutationRun<'r, 'o> {
    invocation: Invocation<'r, 'o>,
    inputs: &'r InvocationInputs<'r>,
    /// The invocation's reinvocation key (IfNeeded policies only).
    key: Option<&'r String>,
    /// The matched kind's schema, if the store has one.
    schema: Option<&'r TypeRef>,
    matched_gvk: &'r GroupVersionKind,
    monitored: bool,
    /// Whether the fields each mutation writes are found (for the observer).
    attributed: bool,
    /// Whether this is the reinvocation pass.
    reinvoking: bool,
    errors: &'r mut Vec<PolicyError>,
    first_results: &'r mut HashMap<(String, usize), Option<FirstResult>, FastHash>,
    checks: &'r mut ObjectChecks,
    original: &'r mut Original,
}

/// The fields an invocation's mutations set and removed.
#[derive(Default)]
struct Footprint {
    set: Vec<String>,
    removed: Vec<String>,
}

impl MutationRun<'_, '_> {
    /// Runs the mutations in order, each on the previous one's result, with
    /// variables evaluated afresh against that result (as upstream's
    /// per-mutation `ForInput`); whether `object` changed. The observer is
    /// told what a changing invocation wrote, when it wants to know.
    fn mutate(&mut self, object: &mut Json) -> Result<bool, StatusError> {
        let compiled = self.invocation.candidate.compiled;
        let mut changed = false;
        let mut footprint = Footprint::default();
        for (index, (patch_type, expr)) in compiled.mutations.iter().enumerate() {
            changed |= self.step(index, *patch_type, expr, object, &mut footprint)?;
        }
        if changed && self.attributed {
            let Invocation {
                candidate,
                observer,
                ..
            } = self.invocation;
            observer.binding_changed(BindingChange {
                policy: &candidate.compiled.policy.name,
                binding: &candidate.binding.name,
                monitored: self.monitored,
                set: footprint.set,
                removed: footprint.removed,
            });
        }
        Ok(changed)
    }

    /// Runs the mutation `index` on `object`; whether it changed. Its
    /// error is one of the pass; a status error ends the admission.
    fn step(
        &mut self,
        index: usize,
        patch_type: PatchType,
        expr: &Result<CompiledExpression, String>,
        object: &mut Json,
        footprint: &mut Footprint,
    ) -> Result<bool, StatusError> {
        let Invocation {
            candidate,
            param,
            observer,
        } = self.invocation;
        let (policy, binding) = (&candidate.compiled.policy, candidate.binding);
        let started = std::time::Instant::now();
        let before = observer.wants_steps().then(|| object.clone());
        let (schema, monitored) = (self.schema, self.monitored);
        // `current` is the object after the mutation, unchanged by a failed one.
        let observe = |current: &Json, error: Option<&str>| {
            observer.mutation(&policy.name, &binding.name, started.elapsed(), error);
            if let Some(before) = &before {
                observer.mutation_step(&MutationStep {
                    policy: &policy.name,
                    binding: &binding.name,
                    param,
                    index,
                    patch_type,
                    schema,
                    before,
                    after: error.map_or(Ok(current), Err),
                    monitored,
                });
            }
        };
        let expr = match expr {
            Ok(e) => e,
            Err(e) => {
                observe(object, Some(e));
                self.errors.push(candidate.error(e.clone()));
                return Ok(false);
            }
        };
        let (result, first) = self.value(index, patch_type, expr, object);
        let Some(schema) = schema else {
            // Upstream: no type converter for the kind (dispatchOne).
            let status = StatusError {
                code: 503,
                message: format!(
                    "Resource kind {} not found. There can be a delay between when CustomResourceDefinitions are created and when they are available.",
                    gvk_string(self.matched_gvk)
                ),
            };
            observe(object, Some(&status.message));
            return Err(status);
        };
        let mut written = None;
        // Kept past the merge: its footprint is read from it.
        let mut mutation = None;
        let applied = result.and_then(|m| {
            let m = mutation.insert(m);
            if self.attributed {
                written = Some(footprint::of_mutation(m, object));
            }
            apply_mutation(object, m, schema, self.checks, self.original)
        });
        self.keep_for_reuse(index, applied.is_ok(), schema, first);
        match applied {
            Ok(changed) => {
                observe(object, None);
                if let (true, Some(written), Some(m)) = (changed, written, &mutation) {
                    let (set, removed) = written.resolve(m);
                    footprint::extend_unique(&mut footprint.set, set);
                    footprint::extend_unique(&mut footprint.removed, removed);
                }
                Ok(changed)
            }
            Err(StepError::Policy(e)) => {
                observe(object, Some(&e));
                self.errors.push(candidate.error(e));
                Ok(false)
            }
            Err(StepError::Status(st)) => {
                observe(object, Some(&st.message));
                Err(st)
            }
        }
    }

    /// The value of the mutation `index` on `object`: a constant's, the
    /// first pass's when the reinvocation pass would observe the same, else
    /// evaluated; with what this (first) pass keeps for the next.
    fn value(
        &mut self,
        index: usize,
        patch_type: PatchType,
        expr: &CompiledExpression,
        object: &Json,
    ) -> (
        Result<MutationValue, StepError>,
        Option<(String, FirstResult)>,
    ) {
        let compiled = self.invocation.candidate.compiled;
        let constant = compiled.constant_results[index].as_ref();
        if let Some(value) = constant.and_then(OnceLock::get) {
            return (Ok(value.clone()), None);
        }
        let object_access = compiled.mutation_access[index].object();
        let remembered = match self.key {
            Some(key) if self.reinvoking && constant.is_none() && !compiled.reads_authorizer => {
                self.first_results
                    .remove(&(key.clone(), index))
                    .flatten()
                    .filter(|first| first.still_observed(object, object_access))
            }
            _ => None,
        };
        if let Some(first) = remembered {
            return (Ok(first.value), None);
        }
        let act = self
            .inputs
            .activation(object, &compiled.mutation_access[index]);
        let result = evaluate_mutation(&act, expr, patch_type);
        // Errors are not kept: an evaluation stopped by the request's
        // deadline is no property of the expression.
        if let (Some(cell), Ok(value)) = (constant, &result) {
            let _ = cell.set(value.clone());
        }
        let first = match (self.key, &result) {
            (Some(key), Ok(value))
                if !self.reinvoking && constant.is_none() && !compiled.reads_authorizer =>
            {
                Some((key.clone(), FirstResult::new(object, object_access, value)))
            }
            _ => None,
        };
        (result, first)
    }

    /// Marks the kept copies of a merged value (a constant's, the first
    /// pass's) as past the patch checks for `schema`, and keeps the first
    /// pass's result for the reinvocation pass (not a monitored binding's).
    fn keep_for_reuse(
        &mut self,
        index: usize,
        applied: bool,
        schema: &TypeRef,
        first: Option<(String, FirstResult)>,
    ) {
        if applied {
            let compiled = self.invocation.candidate.compiled;
            if let Some(value) = compiled.constant_results[index]
                .as_ref()
                .and_then(OnceLock::get)
            {
                value.merged_as(schema);
            }
            if let Some((_, kept)) = &first {
                kept.value.merged_as(schema);
            }
        }
        if let Some((key, kept)) = first.filter(|_| !self.monitored) {
            self.first_results
                .entry((key, index))
                // Two invocations with one key (params without names):
                // neither is reused.
                .and_modify(|kept| *kept = None)
                .or_insert(Some(kept));
        }
    }
}

/// Evaluates a mutation's expression into its value: an applied
/// configuration or a JSON patch.
fn evaluate_mutation(
    act: &Activation<'_>,
    expr: &CompiledExpression,
    patch_type: PatchType,
) -> Result<MutationValue, StepError> {
    act.evaluate(expr, |v| match patch_type {
        PatchType::ApplyConfiguration => apply_configuration_value(v).map_err(StepError::Policy),
        PatchType::JsonPatch => json_patch_value(v),
    })
    .map_err(|e| {
        StepError::Policy(if act.out_of_budget() {
            e
        } else {
            format!("expression '{}' resulted in error: {}", expr.source(), e)
        })
    })
    .and_then(|r| r)
}

/// What an invocation's match conditions decided.
enum Conditions<'c> {
    /// All hold: the invocation runs.
    Hold,
    /// This one (the first false) does not: skipped.
    False(&'c str),
    /// Some failed and none was false: the error, as upstream aggregates it.
    Error(String),
}

/// Upstream's `matchconditions.Matcher`: every condition is evaluated; any
/// false skips the invocation, an error counts only when none is false
/// (one that runs out of the budget fails the match, false or not), and
/// several errors are one aggregate (`[a, b]`, repeated texts once).
fn evaluate_match_conditions<'c>(
    conditions: &'c [(String, Result<CompiledExpression, String>)],
    act: &Activation<'_>,
) -> Conditions<'c> {
    let mut errors: Vec<String> = Vec::new();
    let mut false_condition = None;
    for (name, cond) in conditions {
        let result = match cond {
            // Upstream's condition filter words it so.
            Err(e) => Err(format!("compilation error: {e}")),
            Ok(expr) => act
                .evaluate(expr, |v| v.downcast_ref::<CelBool>().map(|b| *b.inner()))
                .map_err(|e| {
                    if act.out_of_budget() {
                        e
                    } else {
                        format!("expression '{}' resulted in error: {e}", expr.source())
                    }
                })
                .and_then(|b| {
                    b.ok_or_else(|| format!("match condition {name:?} must evaluate to bool"))
                }),
        };
        match result {
            Ok(true) => {}
            Ok(false) => {
                false_condition.get_or_insert(name.as_str());
            }
            Err(e) if act.out_of_budget() => return Conditions::Error(e),
            Err(e) => {
                if !errors.contains(&e) {
                    errors.push(e);
                }
            }
        }
    }
    if let Some(name) = false_condition {
        return Conditions::False(name);
    }
    match errors.len() {
        0 => Conditions::Hold,
        1 => Conditions::Error(errors.remove(0)),
        _ => Conditions::Error(format!("[{}]", errors.join(", "))),
    }
}
