//! `kmutate apply -o explain`: which policy, binding and mutation changed
//! which fields of the object, in dispatch order, with the reinvocation pass,
//! skipped invocations and errors with their failure policy.
//!
//! [`ExplainObserver`] records the dispatcher's steps
//! ([`crate::dispatch::AdmissionObserver`]); [`ExplainObserver::finish`]
//! turns them into an [`Explanation`], which renders as text or serialises
//! as JSON. Field paths name list elements by their merge keys where the
//! schema declares them (`spec.containers[name=app].image`), by index
//! otherwise.

use crate::api::{Binding, FailurePolicy, PatchType, Policy};
use crate::dispatch::{AdmissionObserver, MutationStep, Outcome, SkipReason};
use crate::schema::model::{Resolved, SchemaData, TypeSpec};
use crate::schema::TypeRef;
use serde::Serialize;
use serde_json::Value as Json;
use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;

/// What an admission did, step by step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Explanation {
    /// Problems loading or compiling policies and bindings.
    pub problems: Vec<String>,
    /// The first pass, then the reinvocation pass when it ran.
    pub passes: Vec<Pass>,
    /// Bindings whose policy's matchConstraints or own matchResources did
    /// not match the request, in dispatch order.
    pub not_matched: Vec<BindingName>,
    /// Bindings after the one whose error ended the first pass (a status
    /// error such as 503 for a kind without a schema), which never ran.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_reached: Vec<BindingName>,
    /// What bindings in monitor mode would have done (their changes are
    /// not applied, so they are not among the passes' steps).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub monitored: Vec<String>,
    /// How the admission ended.
    pub outcome: Verdict,
}

/// A policy and one of its bindings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BindingName {
    /// The policy name.
    pub policy: String,
    /// The binding name.
    pub binding: String,
}

/// One dispatch pass over the bindings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pass {
    /// Whether this is the reinvocation pass (reinvocationPolicy IfNeeded).
    pub reinvocation: bool,
    /// The invocations of the pass, in order.
    pub invocations: Vec<Invocation>,
}

/// One invocation of a policy through a binding (one per param object).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Invocation {
    /// The policy name.
    pub policy: String,
    /// The binding name.
    pub binding: String,
    /// The param object (`namespace/name`, or `name` when cluster-scoped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub param: Option<String>,
    /// Why no mutation ran, if none did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<Skip>,
    /// The mutations that ran, in order.
    pub mutations: Vec<MutationEffect>,
    /// Errors of the binding not tied to a mutation (matching, params).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<PolicyError>,
}

/// Why an invocation ran no mutation.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "reason", rename_all = "camelCase")]
pub enum Skip {
    /// A match condition evaluated to false.
    ConditionFalse {
        /// The first such condition's name.
        condition: String,
    },
    /// A match condition failed.
    ConditionError {
        /// The error and its failure policy.
        error: PolicyError,
    },
    /// No param object was found (parameterNotFoundAction Allow).
    ParamNotFound,
}

/// An error and the failure policy that decides what it does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyError {
    /// The error message.
    pub message: String,
    /// `Fail` (the request is denied) or `Ignore` (the error is dropped).
    pub failure_policy: &'static str,
    /// Whether the error is a status error (500, 503) that ended the
    /// admission at once, whatever the failure policy.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub ended_admission: bool,
}

/// What one mutation did.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MutationEffect {
    /// The index in `spec.mutations`.
    pub index: usize,
    /// `ApplyConfiguration` or `JSONPatch`.
    pub patch_type: &'static str,
    /// The fields it changed; empty when it changed nothing.
    pub changes: Vec<FieldChange>,
    /// Its error, if it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<PolicyError>,
}

/// One changed field.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FieldChange {
    /// The field path, e.g. `spec.containers[name=app].imagePullPolicy`.
    pub path: String,
    /// The value before; absent when the field was added.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<Json>,
    /// The value after; absent when the field was removed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<Json>,
}

/// How the admission ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "camelCase")]
pub enum Verdict {
    /// Admitted; `changed` says whether the object differs from the request's.
    Admitted {
        /// Whether any field changed.
        changed: bool,
    },
    /// Denied with this HTTP code and message.
    Denied {
        /// The HTTP status code.
        code: u16,
        /// Upstream's denial message.
        message: String,
    },
}

/// Records an admission's steps for an [`Explanation`].
pub struct ExplainObserver {
    failure_policies: HashMap<String, FailurePolicy>,
    bindings: Vec<BindingName>,
    passes: RefCell<Vec<Pass>>,
    /// What monitored bindings would have done (not part of the steps).
    monitored: RefCell<crate::attribution::Attribution>,
}

impl ExplainObserver {
    /// An observer for an admission by the set of these policies and
    /// bindings (in any order; bindings of missing policies are left out,
    /// as the dispatcher leaves them out).
    pub fn new(policies: &[Policy], bindings: &[Binding]) -> ExplainObserver {
        let mut bindings: Vec<BindingName> = bindings
            .iter()
            .filter(|b| policies.iter().any(|p| p.name == b.policy_name))
            .map(|b| BindingName {
                policy: b.policy_name.clone(),
                binding: b.name.clone(),
            })
            .collect();
        // The dispatcher's order: binding name, then policy name.
        bindings.sort_by(|a, b| (&a.binding, &a.policy).cmp(&(&b.binding, &b.policy)));
        // The same file given twice (`--policies . --bindings .`) loads twice.
        bindings.dedup();
        ExplainObserver {
            failure_policies: policies
                .iter()
                .map(|p| (p.name.clone(), p.failure_policy))
                .collect(),
            bindings,
            passes: RefCell::new(vec![Pass {
                reinvocation: false,
                invocations: Vec::new(),
            }]),
            monitored: RefCell::default(),
        }
    }

    /// What the monitored bindings would have done, one line each.
    pub fn monitored(&self) -> Vec<String> {
        self.monitored.borrow().warnings(false)
    }

    /// The explanation of the admission that ended with `outcome`;
    /// `original` is the request's object.
    pub fn finish(self, problems: Vec<String>, original: &Json, outcome: &Outcome) -> Explanation {
        let mut passes = self.passes.into_inner();
        // A status error ends the admission at once, with its own message
        // (policy errors are wrapped in "policy '...' with binding '...'").
        let mut ended_by = None;
        if let (Outcome::Denied { message, .. }, [first]) = (outcome, passes.as_mut_slice()) {
            for i in &mut first.invocations {
                for e in i.mutations.iter_mut().filter_map(|m| m.error.as_mut()) {
                    if &e.message == message {
                        e.ended_admission = true;
                        ended_by = Some((i.policy.clone(), i.binding.clone()));
                    }
                }
            }
        }
        let attribution = self.monitored.into_inner();
        let acted = attribution.changes().map(|(p, b, _)| (p, b));
        let seen: BTreeSet<(&str, &str)> = passes
            .first()
            .into_iter()
            .flat_map(|p| &p.invocations)
            .map(|i| (i.policy.as_str(), i.binding.as_str()))
            .chain(acted.chain(attribution.errors()))
            .collect();
        let ended_at = ended_by.and_then(|(p, b)| {
            self.bindings
                .iter()
                .position(|n| n.policy == p && n.binding == b)
        });
        let (mut not_matched, mut not_reached) = (Vec::new(), Vec::new());
        for (i, b) in self.bindings.iter().enumerate() {
            if seen.contains(&(b.policy.as_str(), b.binding.as_str())) {
                continue;
            }
            if ended_at.is_some_and(|end| i > end) {
                not_reached.push(b.clone());
            } else {
                not_matched.push(b.clone());
            }
        }
        let outcome = match outcome {
            Outcome::Admitted { object, .. } => Verdict::Admitted {
                changed: object != original,
            },
            Outcome::Denied { message, code } => Verdict::Denied {
                code: *code,
                message: message.clone(),
            },
        };
        Explanation {
            problems,
            passes,
            not_matched,
            not_reached,
            monitored: attribution.warnings(false),
            outcome,
        }
    }

    fn error(&self, policy: &str, message: &str) -> PolicyError {
        let failure_policy = match self.failure_policies.get(policy) {
            Some(FailurePolicy::Ignore) => "Ignore",
            _ => "Fail",
        };
        PolicyError {
            message: message.to_string(),
            failure_policy,
            ended_admission: false,
        }
    }

    /// The pass's invocation of `policy`/`binding`/`param` that `continues`
    /// accepts as the last one, or a new one.
    fn with_invocation(
        &self,
        policy: &str,
        binding: &str,
        param: Option<String>,
        continues: impl Fn(&Invocation) -> bool,
        f: impl FnOnce(&mut Invocation),
    ) {
        let mut passes = self.passes.borrow_mut();
        let Some(pass) = passes.last_mut() else {
            return;
        };
        let reuse = pass.invocations.last().is_some_and(|i| {
            i.policy == policy && i.binding == binding && i.param == param && continues(i)
        });
        if !reuse {
            pass.invocations.push(Invocation {
                policy: policy.to_string(),
                binding: binding.to_string(),
                param,
                skipped: None,
                mutations: Vec::new(),
                errors: Vec::new(),
            });
        }
        if let Some(i) = pass.invocations.last_mut() {
            f(i);
        }
    }
}

impl AdmissionObserver for ExplainObserver {
    fn wants_steps(&self) -> bool {
        true
    }

    fn binding_changed(&self, change: crate::dispatch::BindingChange<'_>) {
        if change.monitored {
            self.monitored.borrow_mut().record(change);
        }
    }

    fn monitored_error(&self, policy: &str, binding: &str, message: &str) {
        self.monitored
            .borrow_mut()
            .record_error(policy, binding, message);
    }

    fn mutation_step(&self, step: &MutationStep<'_>) {
        // A monitored binding's steps changed a copy: reported apart.
        if step.monitored {
            return;
        }
        let (changes, error) = match step.after {
            Ok(after) => (field_changes(step.before, after, step.schema), None),
            Err(e) => (Vec::new(), Some(self.error(step.policy, e))),
        };
        let effect = MutationEffect {
            index: step.index,
            patch_type: match step.patch_type {
                PatchType::ApplyConfiguration => "ApplyConfiguration",
                PatchType::JsonPatch => "JSONPatch",
            },
            changes,
            error,
        };
        self.with_invocation(
            step.policy,
            step.binding,
            step.param.map(param_name),
            |i| i.skipped.is_none() && i.mutations.last().is_some_and(|m| m.index < step.index),
            |i| i.mutations.push(effect),
        );
    }

    fn invocation_skipped(
        &self,
        policy: &str,
        binding: &str,
        param: Option<&Json>,
        reason: SkipReason<'_>,
    ) {
        let skip = match reason {
            SkipReason::ConditionFalse(c) => Skip::ConditionFalse {
                condition: c.to_string(),
            },
            SkipReason::ConditionError(e) => Skip::ConditionError {
                error: self.error(policy, e),
            },
            SkipReason::ParamNotFound => Skip::ParamNotFound,
        };
        self.with_invocation(
            policy,
            binding,
            param.map(param_name),
            |_| false,
            |i| i.skipped = Some(skip),
        );
    }

    fn policy_error(
        &self,
        policy: &str,
        binding: &str,
        failure_policy: FailurePolicy,
        message: &str,
    ) {
        let mut passes = self.passes.borrow_mut();
        let Some(pass) = passes.last_mut() else {
            return;
        };
        // Errors of mutations and match conditions are already recorded
        // where they happened; the rest (matching, params) are the binding's.
        let recorded = pass
            .invocations
            .iter()
            .filter(|i| i.policy == policy && i.binding == binding)
            .any(|i| {
                i.mutations
                    .iter()
                    .filter_map(|m| m.error.as_ref())
                    .chain(match &i.skipped {
                        Some(Skip::ConditionError { error }) => Some(error),
                        _ => None,
                    })
                    .chain(&i.errors)
                    .any(|e| e.message == message)
            });
        if recorded {
            return;
        }
        pass.invocations.push(Invocation {
            policy: policy.to_string(),
            binding: binding.to_string(),
            param: None,
            skipped: None,
            mutations: Vec::new(),
            errors: vec![PolicyError {
                message: message.to_string(),
                failure_policy: match failure_policy {
                    FailurePolicy::Fail => "Fail",
                    FailurePolicy::Ignore => "Ignore",
                },
                ended_admission: false,
            }],
        });
    }

    fn reinvocation(&self, _first_pass: &Json) {
        self.passes.borrow_mut().push(Pass {
            reinvocation: true,
            invocations: Vec::new(),
        });
    }
}

/// A param object's name: `namespace/name`, or `name` when cluster-scoped.
fn param_name(param: &Json) -> String {
    let field = |f: &str| {
        param
            .pointer(&format!("/metadata/{f}"))
            .and_then(Json::as_str)
            .unwrap_or("")
    };
    match field("namespace") {
        "" => field("name").to_string(),
        ns => format!("{ns}/{}", field("name")),
    }
}

/// The fields that differ between `before` and `after`, in document order:
/// list elements are matched by the merge keys `schema` declares for the
/// list, by index otherwise.
pub fn field_changes(before: &Json, after: &Json, schema: Option<&TypeRef>) -> Vec<FieldChange> {
    let mut out = Vec::new();
    let walker = Walker {
        schema: schema.map(|t| &*t.schema),
    };
    walker.diff(
        schema.map(|t| &t.spec),
        &mut String::new(),
        before,
        after,
        &mut out,
    );
    out
}

/// Walks two values side by side with their schema type, when known.
struct Walker<'s> {
    schema: Option<&'s SchemaData>,
}

impl<'s> Walker<'s> {
    fn resolve<'a>(&self, spec: Option<&'a TypeSpec>) -> Option<Resolved<'a>>
    where
        's: 'a,
    {
        self.schema?.resolve(spec?)
    }

    fn diff(
        &self,
        spec: Option<&TypeSpec>,
        path: &mut String,
        before: &Json,
        after: &Json,
        out: &mut Vec<FieldChange>,
    ) {
        if before == after {
            return;
        }
        let resolved = self.resolve(spec);
        match (before, after) {
            (Json::Object(b), Json::Object(a)) => {
                let map = resolved.and_then(|r| r.map);
                let child = |k: &str| {
                    map.as_ref().and_then(|m| {
                        m.def
                            .field(k)
                            .map(|f| f.ty.clone())
                            .or_else(|| m.def.element.clone())
                    })
                };
                for (k, bv) in b {
                    let len = path.len();
                    push_field(path, k);
                    match a.get(k) {
                        Some(av) => self.diff(child(k).as_ref(), path, bv, av, out),
                        None => one_sided(path, bv, false, out),
                    }
                    path.truncate(len);
                }
                for (k, av) in a.iter().filter(|(k, _)| !b.contains_key(*k)) {
                    let len = path.len();
                    push_field(path, k);
                    one_sided(path, av, true, out);
                    path.truncate(len);
                }
            }
            (Json::Array(b), Json::Array(a)) => {
                let list = resolved.and_then(|r| r.list);
                let element = list.as_ref().map(|l| l.def.element.clone());
                let keys = list.as_ref().map(|l| l.def.keys.as_slice()).unwrap_or(&[]);
                match (element_labels(b, keys), element_labels(a, keys)) {
                    (Some(bl), Some(al)) => {
                        for (bv, label) in b.iter().zip(&bl) {
                            let len = path.len();
                            path.push_str(label);
                            match al.iter().position(|l| l == label) {
                                Some(j) => self.diff(element.as_ref(), path, bv, &a[j], out),
                                None => out.push(change(path, Some(bv), None)),
                            }
                            path.truncate(len);
                        }
                        for (av, label) in a.iter().zip(&al).filter(|(_, l)| !bl.contains(l)) {
                            let len = path.len();
                            path.push_str(label);
                            out.push(change(path, None, Some(av)));
                            path.truncate(len);
                        }
                    }
                    _ => {
                        for i in 0..b.len().max(a.len()) {
                            let len = path.len();
                            let _ = write!(path, "[{i}]");
                            match (b.get(i), a.get(i)) {
                                (Some(bv), Some(av)) => {
                                    self.diff(element.as_ref(), path, bv, av, out)
                                }
                                (bv, av) => out.push(change(path, bv, av)),
                            }
                            path.truncate(len);
                        }
                    }
                }
            }
            _ => out.push(change(path, Some(before), Some(after))),
        }
    }
}

/// A field only one side has: a map is reported field by field (so that
/// each added label shows), anything else as one value.
fn one_sided(path: &mut String, value: &Json, added: bool, out: &mut Vec<FieldChange>) {
    match value {
        Json::Object(m) if !m.is_empty() => {
            for (k, v) in m {
                let len = path.len();
                push_field(path, k);
                one_sided(path, v, added, out);
                path.truncate(len);
            }
        }
        _ if added => out.push(change(path, None, Some(value))),
        _ => out.push(change(path, Some(value), None)),
    }
}

fn change(path: &str, before: Option<&Json>, after: Option<&Json>) -> FieldChange {
    FieldChange {
        path: if path.is_empty() {
            ".".into()
        } else {
            path.to_string()
        },
        before: before.cloned(),
        after: after.cloned(),
    }
}

/// Appends `.name`, or `["name"]` when the name is not a plain identifier
/// (label and annotation keys such as `app.kubernetes.io/name`).
fn push_field(path: &mut String, name: &str) {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '$');
    if plain {
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(name);
    } else {
        let _ = write!(path, "[{}]", Json::String(name.to_string()));
    }
}

/// Each element's `[key=value,...]` label, or `None` when the list has no
/// keys or its elements cannot be told apart by them (then indices are used).
fn element_labels(items: &[Json], keys: &[String]) -> Option<Vec<String>> {
    if keys.is_empty() {
        return None;
    }
    let mut labels = Vec::with_capacity(items.len());
    for item in items {
        let object = item.as_object()?;
        let parts: Vec<String> = keys
            .iter()
            .filter_map(|k| object.get(k).map(|v| format!("{k}={}", key_value(v))))
            .collect();
        if parts.is_empty() {
            return None;
        }
        labels.push(format!("[{}]", parts.join(",")));
    }
    let distinct: BTreeSet<&String> = labels.iter().collect();
    (distinct.len() == labels.len()).then_some(labels)
}

/// A key value as written in a path: strings bare when unambiguous.
fn key_value(v: &Json) -> String {
    match v {
        Json::String(s)
            if !s.is_empty()
                && !s
                    .chars()
                    .any(|c| matches!(c, ',' | '=' | '[' | ']' | '"') || c.is_whitespace()) =>
        {
            s.clone()
        }
        other => other.to_string(),
    }
}

impl Explanation {
    /// The explanation as readable text, one step a line.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for p in &self.problems {
            let _ = writeln!(out, "problem: {p}");
        }
        for pass in &self.passes {
            if pass.reinvocation {
                out.push_str("reinvocation pass (policies with reinvocationPolicy IfNeeded, after later ones changed the object):\n");
            } else {
                out.push_str("pass 1:\n");
            }
            if pass.invocations.is_empty() {
                out.push_str("  no binding matched\n");
            }
            for inv in &pass.invocations {
                inv.write_text(&mut out);
            }
        }
        for (title, bindings) in [
            (
                "not reached (the admission ended before them)",
                &self.not_reached,
            ),
            ("not matched", &self.not_matched),
        ] {
            if !bindings.is_empty() {
                let _ = writeln!(out, "{title}:");
                for b in bindings {
                    let _ = writeln!(out, "  policy {}, binding {}", b.policy, b.binding);
                }
            }
        }
        if !self.monitored.is_empty() {
            out.push_str("monitored (changes not applied):\n");
            for line in &self.monitored {
                let _ = writeln!(out, "  {line}");
            }
        }
        match &self.outcome {
            Verdict::Admitted { changed: true } => out.push_str("result: admitted, mutated\n"),
            Verdict::Admitted { changed: false } => out.push_str("result: admitted, unchanged\n"),
            Verdict::Denied { code, message } => {
                let _ = writeln!(out, "result: denied ({code}): {message}");
            }
        }
        out
    }
}

impl Invocation {
    fn write_text(&self, out: &mut String) {
        let _ = write!(out, "  policy {}, binding {}", self.policy, self.binding);
        if let Some(p) = &self.param {
            let _ = write!(out, ", param {p}");
        }
        match &self.skipped {
            Some(Skip::ConditionFalse { condition }) => {
                let _ = write!(out, ": skipped, match condition {condition:?} is false");
            }
            Some(Skip::ConditionError { error }) => {
                let _ = write!(out, ": skipped, match condition error {}", error.text());
            }
            Some(Skip::ParamNotFound) => {
                out.push_str(": skipped, no param found (parameterNotFoundAction Allow)");
            }
            None => {}
        }
        out.push('\n');
        for e in &self.errors {
            let _ = writeln!(out, "    error {}", e.text());
        }
        for m in &self.mutations {
            let _ = write!(out, "    spec.mutations[{}] ({})", m.index, m.patch_type);
            if let Some(e) = &m.error {
                let _ = writeln!(out, ": error {}", e.text());
            } else if m.changes.is_empty() {
                out.push_str(": no change\n");
            } else {
                out.push_str(":\n");
                for c in &m.changes {
                    let _ = writeln!(out, "      {}", c.text());
                }
            }
        }
    }
}

impl PolicyError {
    fn text(&self) -> String {
        match self.failure_policy {
            _ if self.ended_admission => format!(
                "(ends the admission whatever the failurePolicy): {}",
                self.message
            ),
            "Ignore" => format!("(failurePolicy Ignore, ignored): {}", self.message),
            _ => format!("(failurePolicy Fail): {}", self.message),
        }
    }
}

impl FieldChange {
    fn text(&self) -> String {
        match (&self.before, &self.after) {
            (Some(b), Some(a)) => format!("{}: {b} -> {a}", self.path),
            (None, Some(a)) => format!("{}: added {a}", self.path),
            (Some(b), None) => format!("{}: removed {b}", self.path),
            (None, None) => self.path.clone(),
        }
    }
}

#[cfg(test)]
mod tests;
