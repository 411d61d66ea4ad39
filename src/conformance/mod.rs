//! The conformance runner of `../shared/conformance/FORMAT.md`: reads cases,
//! runs each through the dispatcher and compares with its expectation.

pub mod cluster;

use crate::api::{binding_from_json, load, policy_from_json, SourceRef};
use crate::authorizer::FixedAuthorizer;
use crate::dispatch::{AdmissionContext, NoObserver, ObjectOrigin, Outcome, PolicySet};
use crate::matching::{complete_request, ResourceTable};
use crate::mutation::diff::Snapshot;
use crate::request::{AdmissionRequest, ClusterObjects};
use crate::schema::SchemaStore;
use crate::webhook::review::{decode_for_policies, decode_reading_old_object, DecodedBody};
use serde_json::Value as Json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One conformance case, as written.
#[derive(Debug, Clone)]
pub struct Case {
    /// `name`.
    pub name: String,
    /// The file it came from and its document index.
    pub source: SourceRef,
    /// The whole document.
    pub doc: Json,
}

/// A case prepared to run: the admission and its expectation.
pub struct PreparedCase {
    /// The compiled policies and bindings.
    pub policies: PolicySet,
    /// The completed request.
    pub request: AdmissionRequest,
    /// Namespaces, params, CRDs.
    pub cluster: ClusterObjects,
    /// Schemas (built-ins and the case's CRDs; a custom kind with no CRD
    /// gets the deduced schema).
    pub schemas: SchemaStore,
    /// What the runner tells about the case besides its result: custom
    /// kinds run with a deduced schema.
    pub warnings: Vec<String>,
    /// Resource names and scopes.
    pub resources: ResourceTable,
    /// The case's `authorizer` decisions (none listed: every check denied).
    pub authorizer: FixedAuthorizer,
}

impl PreparedCase {
    fn context(&self) -> AdmissionContext<'_> {
        AdmissionContext {
            cluster: &self.cluster,
            schemas: &self.schemas,
            resources: &self.resources,
            authorizer: &self.authorizer,
        }
    }

    /// Runs the admission.
    pub fn run(&self) -> Outcome {
        self.policies.admit(&self.request, &self.context())
    }

    /// Runs the admission as the webhook does, with the snapshot of the
    /// object its patch is computed from.
    pub fn run_keeping_original(&self) -> (Outcome, Option<Snapshot>) {
        self.run_from(ObjectOrigin::Written)
    }

    /// [`PreparedCase::run_keeping_original`], taking the object as from
    /// `origin`.
    fn run_from(&self, origin: ObjectOrigin) -> (Outcome, Option<Snapshot>) {
        self.run_request_from(self.request.clone(), origin)
    }

    fn run_request_from(
        &self,
        request: AdmissionRequest,
        origin: ObjectOrigin,
    ) -> (Outcome, Option<Snapshot>) {
        self.policies
            .admit_keeping_original(request, None, &self.context(), &NoObserver, origin)
    }

    /// The request as kube-apiserver could have sent it, if it could: its
    /// object as the Go types of the request's kind encode it, and decoding
    /// into them strictly. (A custom kind has no Go types; its object needs
    /// only to hold no field its schema lacks, as after kube-apiserver's
    /// pruning.)
    fn request_as_kube_apiserver_sends_it(&self) -> Option<AdmissionRequest> {
        let kind = &self.request.kind;
        let ty = self
            .schemas
            .lookup(&kind.group, &kind.version, &kind.kind)?;
        let mut request = self.request.clone();
        let object = request.object.as_mut()?;
        *object = self.go_encoded_object(object);
        if crate::schema::go_decode_error(object, ty.name()).is_some()
            || !crate::schema::unknown_fields(object, &ty).is_empty()
        {
            return None;
        }
        if let Some(old) = request.old_object.as_mut() {
            *old = self.go_encoded_object(old);
        }
        Some(request)
    }

    /// `outcome`'s object as the Go types of the request's kind encode it.
    fn go_encoded(&self, outcome: &Outcome) -> Outcome {
        match outcome {
            Outcome::Admitted {
                object,
                warnings,
                changed,
            } => Outcome::Admitted {
                object: self.go_encoded_object(object),
                warnings: warnings.clone(),
                changed: *changed,
            },
            denied => denied.clone(),
        }
    }

    /// `object` as the Go types of the request's kind encode it.
    fn go_encoded_object(&self, object: &Json) -> Json {
        let mut object = object.clone();
        let kind = &self.request.kind;
        self.schemas
            .go_round_trip_of_kind(&kind.group, &kind.version, &kind.kind, &mut object);
        object
    }
}

/// The result of one case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaseResult {
    /// The case passed.
    Pass,
    /// The case failed; the text says how.
    Fail(String),
}

/// Reads every case under `paths` (files, or folders read recursively for
/// `*.yaml`). A file that cannot be parsed becomes one failing case.
pub fn read_cases(paths: &[PathBuf]) -> Vec<Result<Case, (String, String)>> {
    let mut out = Vec::new();
    for p in paths {
        let files = match load::collect_files(p) {
            Ok(f) => f,
            Err(e) => {
                out.push(Err((p.display().to_string(), e.to_string())));
                continue;
            }
        };
        for f in files {
            if f.extension().and_then(|e| e.to_str()) == Some("json") {
                continue;
            }
            out.extend(read_case_file(&f));
        }
    }
    out
}

fn read_case_file(f: &Path) -> Vec<Result<Case, (String, String)>> {
    let file = f.display().to_string();
    let text = match std::fs::read_to_string(f) {
        Ok(t) => t,
        Err(e) => return vec![Err((file.clone(), e.to_string()))],
    };
    match load::parse_documents(&text) {
        Err(e) => vec![Err((file.clone(), format!("{file}: {e}")))],
        Ok(docs) => docs
            .into_iter()
            .enumerate()
            .filter(|(_, d)| !d.is_null())
            .map(|(i, doc)| {
                let source = SourceRef {
                    file: file.clone(),
                    document: i,
                };
                match doc.get("name").and_then(Json::as_str) {
                    Some(name) => Ok(Case {
                        name: name.to_string(),
                        source,
                        doc,
                    }),
                    None => Err((format!("{file}#{i}"), format!("{source}: case has no name"))),
                }
            })
            .collect(),
    }
}

fn list<'a>(doc: &'a Json, key: &str) -> &'a [Json] {
    doc.get(key)
        .and_then(Json::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// The case's MutatingAdmissionPolicies and bindings as JSON: those its
/// `declarative:` items translate to, then its own.
pub fn policy_documents(case: &Case) -> Result<(Vec<Json>, Vec<Json>), String> {
    let doc = &case.doc;
    let translated = match doc.get("declarative") {
        Some(items) => {
            let dir = Path::new(&case.source.file)
                .parent()
                .unwrap_or(Path::new("."));
            crate::translate::translate_declarative_list(items, dir).map_err(|e| e.to_string())?
        }
        None => crate::translate::Translation::default(),
    };
    let mut policies = translated.policies;
    policies.extend(list(doc, "policies").iter().cloned());
    let mut bindings = translated.bindings;
    bindings.extend(list(doc, "bindings").iter().cloned());
    Ok((policies, bindings))
}

/// The case's request, completed (kind, resource, namespace, name derived
/// from its object), with its cluster objects and resource table; no
/// policy is compiled.
pub fn case_request(
    case: &Case,
) -> Result<(AdmissionRequest, ClusterObjects, ResourceTable), String> {
    let doc = &case.doc;
    let cluster = ClusterObjects::new(list(doc, "resources").to_vec());
    let resources = ResourceTable::new(cluster.crds());
    let mut request: AdmissionRequest = match doc.get("request") {
        Some(r) if !r.is_null() => {
            serde_json::from_value(r.clone()).map_err(|e| format!("request: {e}"))?
        }
        _ => AdmissionRequest {
            operation: "CREATE".into(),
            ..Default::default()
        },
    };
    request.object = doc.get("object").filter(|o| !o.is_null()).cloned();
    request.old_object = doc.get("oldObject").filter(|o| !o.is_null()).cloned();
    if request.uid.is_empty() {
        request.uid = format!("conformance-{}", case.name);
    }
    complete_request(&mut request, &resources);
    // A namespace the case gives, even empty, is kept: only an omitted one
    // is derived (a Namespace's request would otherwise name itself).
    if let Some(ns) = doc
        .get("request")
        .and_then(|r| r.get("namespace"))
        .and_then(Json::as_str)
    {
        request.namespace = ns.to_string();
    }
    Ok((request, cluster, resources))
}

/// Builds the admission a case describes.
pub fn prepare(case: &Case) -> Result<PreparedCase, String> {
    let doc = &case.doc;
    // `declarative:` items are translated first and join the case's own policies.
    let (policy_docs, binding_docs) = policy_documents(case)?;
    let translated_policies = policy_docs.len() - list(doc, "policies").len();
    let translated_bindings = binding_docs.len() - list(doc, "bindings").len();
    let mut policies = Vec::new();
    for (i, p) in policy_docs.iter().enumerate() {
        let at = SourceRef {
            file: case.source.file.clone(),
            document: case.source.document,
        };
        let what = match i.checked_sub(translated_policies) {
            None => format!("translated policies[{i}]"),
            Some(own) => format!("policies[{own}]"),
        };
        policies.push(policy_from_json(p, at).map_err(|e| format!("{what}: {e}"))?);
    }
    let mut bindings = Vec::new();
    for (i, b) in binding_docs.iter().enumerate() {
        let what = match i.checked_sub(translated_bindings) {
            None => format!("translated bindings[{i}]"),
            Some(own) => format!("bindings[{own}]"),
        };
        bindings
            .push(binding_from_json(b, case.source.clone()).map_err(|e| format!("{what}: {e}"))?);
    }
    let (request, cluster, resources) = case_request(case)?;
    let schemas = SchemaStore::with_crds(cluster.crds()).deducing_unknown_kinds();
    let authorizer = FixedAuthorizer::from_json(doc.get("authorizer").unwrap_or(&Json::Null))
        .map_err(|e| format!("authorizer: {e}"))?;
    let (policies, _compile_errors) = PolicySet::new(policies, bindings);
    let mut warnings = Vec::new();
    let kind = &request.kind;
    if !kind.kind.is_empty() && !schemas.has_schema(&kind.group, &kind.version, &kind.kind) {
        warnings.push(format!(
            "kind {}/{} {} has no CustomResourceDefinition among the case's resources: \
             a deduced schema is used (lists atomic, maps granular)",
            kind.group, kind.version, kind.kind
        ));
    }
    Ok(PreparedCase {
        policies,
        request,
        cluster,
        schemas,
        warnings,
        resources,
        authorizer,
    })
}

/// Runs one case and checks its expectation.
pub fn run_case(case: &Case) -> CaseResult {
    run_case_warning(case).0
}

/// [`run_case`], with the case's warnings.
pub fn run_case_warning(case: &Case) -> (CaseResult, Vec<String>) {
    let prepared = match prepare(case) {
        Ok(p) => p,
        Err(e) => {
            return (
                CaseResult::Fail(format!("{}: {e}", case.source)),
                Vec::new(),
            )
        }
    };
    let warnings = prepared.warnings.clone();
    (judge(case, &prepared), warnings)
}

/// The result of the prepared `case`.
fn judge(case: &Case, prepared: &PreparedCase) -> CaseResult {
    if let Err(e) = check_decode_claims(case, prepared) {
        return CaseResult::Fail(e);
    }
    let expect = case.doc.get("expect").cloned().unwrap_or(Json::Null);
    let (outcome, original) = prepared.run_keeping_original();
    if let Outcome::Admitted {
        object, changed, ..
    } = &outcome
    {
        let request_object = prepared.request.object.as_ref().unwrap_or(&Json::Null);
        if let Err(e) = check_patch_claims(
            request_object,
            &prepared.go_encoded_object(request_object),
            object,
            *changed,
            original.as_ref(),
        ) {
            return CaseResult::Fail(e.into());
        }
    }
    if let Err(e) = check_origin_claims(prepared, &outcome) {
        return CaseResult::Fail(e);
    }
    check(&expect, &outcome)
}

/// The webhook takes an object kube-apiserver sent as its kind's Go types
/// encode it, and checks only what each mutation wrote
/// ([`ObjectOrigin::KubeApiserver`]): every case whose object kube-apiserver
/// could have sent checks that this gives `outcome`, the answer of the
/// checks that look at the whole object.
fn check_origin_claims(prepared: &PreparedCase, outcome: &Outcome) -> Result<(), String> {
    let Some(request) = prepared.request_as_kube_apiserver_sends_it() else {
        return Ok(());
    };
    let (trusted, _) = prepared.run_request_from(request, ObjectOrigin::KubeApiserver);
    // A written object the admission leaves unchanged comes back as it
    // came, not as the Go types encode it.
    let (trusted, outcome) = (prepared.go_encoded(&trusted), prepared.go_encoded(outcome));
    if trusted == outcome {
        return Ok(());
    }
    Err(format!(
        "taken as kube-apiserver sent it, the object gets another answer: {trusted:?} instead of {outcome:?}"
    ))
}

/// The webhook answers an admission that says it left the object as it
/// came (`changed`), or that took no snapshot of it (`original`), without
/// comparing the two, and computes its patch from the snapshot: every case
/// checks that those claims hold of `request_object`, the object as the
/// request gave it, and that the snapshot is `base`, that object as the
/// admission began with it (a written object as its kind's Go types encode
/// it, as kube-apiserver would have sent it).
fn check_patch_claims(
    request_object: &Json,
    base: &Json,
    object: &Json,
    changed: bool,
    original: Option<&Snapshot>,
) -> Result<(), &'static str> {
    if !changed && object != request_object {
        return Err("the admission said it left the object unchanged, but changed it");
    }
    match original {
        None if changed || object != request_object => {
            Err("the admission wrote to the object without taking its snapshot first")
        }
        Some(snapshot) if !snapshot.diff(base).0.is_empty() => {
            Err("the admission's snapshot is not the object as the request gave it")
        }
        _ => Ok(()),
    }
}

/// The webhook decides from a request's other members, before building its
/// object, whether a binding may act on it, and leaves the object of one no
/// binding may act on unbuilt ([`decode_for_policies`]): every case checks
/// that a request so left is one its bindings do not match, and that a
/// request built is decoded as it is without the choice, with the object
/// written after the other members (kube-apiserver's order) and before.
fn check_decode_claims(case: &Case, prepared: &PreparedCase) -> Result<(), String> {
    let doc = &case.doc;
    let Some(object) = doc.get("object").filter(|o| !o.is_null()) else {
        return Ok(());
    };
    let mut members: Vec<String> = Vec::new();
    if let Some(Json::Object(request)) = doc.get("request") {
        for (key, value) in request {
            if !matches!(key.as_str(), "object" | "oldObject") {
                members.push(format!("{}:{value}", Json::from(key.as_str())));
            }
        }
    }
    let mut objects = vec![format!("\"object\":{object}")];
    if let Some(old) = doc.get("oldObject").filter(|o| !o.is_null()) {
        objects.push(format!("\"oldObject\":{old}"));
    }
    let ctx = prepared.context();
    for objects_first in [false, true] {
        let request = if objects_first {
            [objects.clone(), members.clone()].concat()
        } else {
            [members.clone(), objects.clone()].concat()
        };
        let body = format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{{}}}}}"#,
            request.join(",")
        );
        let order = if objects_first { "first" } else { "last" };
        let fail = |what: String| Err(format!("with the object written {order}: {what}"));
        let reads_old_object = prepared.policies.reads_old_object();
        let built = decode_reading_old_object(body.as_bytes(), reads_old_object);
        match (
            decode_for_policies(body.as_bytes(), &prepared.policies, &ctx),
            built,
        ) {
            (Ok(DecodedBody::Review(review)), Ok(built)) if review.request == built.request => {}
            (Ok(DecodedBody::Unmatched(review)), Ok(built)) => {
                let mut whole = built.request;
                complete_request(&mut whole, &prepared.resources);
                let prematch = prepared.policies.prematch(&whole, &ctx);
                let matched = prepared.policies.matched(&prematch);
                if let Some(m) = matched.first() {
                    return fail(format!(
                        "the object was left unbuilt, but binding {:?} of policy {:?} acts on the request",
                        m.binding, m.policy
                    ));
                }
                whole.object = None;
                whole.old_object = None;
                if review.request != whole {
                    return fail(format!(
                        "the object was left unbuilt, and the request completed as {:?} instead of {:?}",
                        review.request, whole
                    ));
                }
            }
            (Err(e), Err(built)) if e == built => {}
            (gated, built) => {
                return fail(format!(
                    "decoded as {gated:?} instead of {:?}",
                    built.map(|b| b.request)
                ))
            }
        }
    }
    Ok(())
}

/// Compares an outcome with a case's `expect`.
pub fn check(expect: &Json, outcome: &Outcome) -> CaseResult {
    match (expect.get("object"), expect.get("rejected"), outcome) {
        (Some(want), None, Outcome::Admitted { object, .. }) => {
            let (w, g) = (normalize(want), normalize(object));
            if w == g {
                CaseResult::Pass
            } else {
                let mut diffs = Vec::new();
                diff("", &w, &g, &mut diffs);
                CaseResult::Fail(format!("object differs:\n{}", diffs.join("\n")))
            }
        }
        (Some(_), None, Outcome::Denied { message, .. }) => CaseResult::Fail(format!(
            "expected the object, but the request was denied: {message}"
        )),
        (None, Some(rej), Outcome::Denied { message, .. }) => {
            let want = rej
                .get("messageContains")
                .and_then(Json::as_str)
                .unwrap_or("");
            if message.contains(want) {
                CaseResult::Pass
            } else {
                CaseResult::Fail(format!(
                    "denied, but the message\n    {message}\ndoes not contain\n    {want}"
                ))
            }
        }
        (None, Some(_), Outcome::Admitted { object, .. }) => CaseResult::Fail(format!(
            "expected a denial, but the request was admitted with\n{}",
            serde_json::to_string_pretty(object).unwrap_or_default()
        )),
        _ => CaseResult::Fail("expect must hold exactly one of object / rejected".into()),
    }
}

/// Drops nulls and empty maps and lists, recursively, as FORMAT.md says.
pub fn normalize(v: &Json) -> Json {
    match v {
        Json::Object(m) => Json::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), normalize(v)))
                .filter(|(_, v)| !is_empty(v))
                .collect(),
        ),
        Json::Array(a) => Json::Array(a.iter().map(normalize).collect()),
        other => other.clone(),
    }
}

fn is_empty(v: &Json) -> bool {
    match v {
        Json::Null => true,
        Json::Object(m) => m.is_empty(),
        Json::Array(a) => a.is_empty(),
        _ => false,
    }
}

fn diff(path: &str, want: &Json, got: &Json, out: &mut Vec<String>) {
    match (want, got) {
        (Json::Object(w), Json::Object(g)) => {
            let keys: std::collections::BTreeSet<&String> = w.keys().chain(g.keys()).collect();
            for k in keys {
                let p = format!("{path}.{k}");
                match (w.get(k), g.get(k)) {
                    (Some(a), Some(b)) => diff(&p, a, b, out),
                    (Some(a), None) => out.push(format!("  {p}: expected {a}, missing")),
                    (None, Some(b)) => out.push(format!("  {p}: unexpected {b}")),
                    (None, None) => {}
                }
            }
        }
        (Json::Array(w), Json::Array(g)) if w.len() == g.len() => {
            for (i, (a, b)) in w.iter().zip(g).enumerate() {
                diff(&format!("{path}[{i}]"), a, b, out);
            }
        }
        _ if want == got => {}
        _ => out.push(format!(
            "  {}: expected {want}, got {got}",
            if path.is_empty() { "." } else { path }
        )),
    }
}

/// Names of cases expected to fail, with the reason, from a file of lines
/// `name  # reason` (blank lines and `#` comments ignored).
pub fn read_expected_failures(path: &Path) -> std::io::Result<BTreeMap<String, String>> {
    Ok(parse_expected_failures(&std::fs::read_to_string(path)?))
}

/// Names of cases expected to fail, with the reason, from the text of an
/// expected-failures file ([`read_expected_failures`]).
pub fn parse_expected_failures(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            if l.is_empty() || l.starts_with('#') {
                return None;
            }
            let (name, reason) = l.split_once('#').unwrap_or((l, ""));
            Some((name.trim().to_string(), reason.trim().to_string()))
        })
        .collect()
}

/// Totals of a run.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// Cases that passed.
    pub passed: usize,
    /// Cases that failed (and were not expected to).
    pub failed: usize,
    /// Cases that failed as the expected-failures list says.
    pub expected_failures: usize,
}

/// Runs every case under `paths`, printing one line per case to `out`, then
/// `N passed, N failed` (and `, N skipped` for expected failures).
pub fn run_all(
    paths: &[PathBuf],
    expected: &BTreeMap<String, String>,
    verbose: bool,
    out: &mut dyn std::io::Write,
) -> std::io::Result<Summary> {
    let mut s = Summary::default();
    let mut seen = std::collections::BTreeSet::new();
    for case in read_cases(paths) {
        match case {
            Err((name, msg)) => {
                writeln!(out, "FAIL {name}\n    {msg}")?;
                s.failed += 1;
            }
            Ok(case) => {
                if !seen.insert(case.name.clone()) {
                    writeln!(
                        out,
                        "FAIL {}\n    {}: duplicate case name",
                        case.name, case.source
                    )?;
                    s.failed += 1;
                    continue;
                }
                let (result, warnings) = std::panic::catch_unwind(|| run_case_warning(&case))
                    .unwrap_or_else(|_| {
                        (
                            CaseResult::Fail("the evaluator panicked".into()),
                            Vec::new(),
                        )
                    });
                for w in &warnings {
                    writeln!(out, "warning: {}: {w}", case.name)?;
                }
                match (result, expected.get(&case.name)) {
                    (CaseResult::Pass, None) => {
                        writeln!(out, "ok {}", case.name)?;
                        s.passed += 1;
                    }
                    // A list that still names a fixed case would hide its
                    // next regression: a listed case that passes fails.
                    (CaseResult::Pass, Some(_)) => {
                        writeln!(
                            out,
                            "FAIL {}\n    passes, but is listed as an expected failure: remove it from the list",
                            case.name
                        )?;
                        s.failed += 1;
                    }
                    (CaseResult::Fail(msg), Some(reason)) => {
                        writeln!(out, "xfail {} ({reason})", case.name)?;
                        if verbose {
                            writeln!(out, "    {}", msg.replace('\n', "\n    "))?;
                        }
                        s.expected_failures += 1;
                    }
                    (CaseResult::Fail(msg), None) => {
                        writeln!(
                            out,
                            "FAIL {}\n    {}",
                            case.name,
                            msg.replace('\n', "\n    ")
                        )?;
                        s.failed += 1;
                    }
                }
            }
        }
    }
    if s.expected_failures > 0 {
        writeln!(
            out,
            "{} passed, {} failed, {} skipped",
            s.passed, s.failed, s.expected_failures
        )?;
    } else {
        writeln!(out, "{} passed, {} failed", s.passed, s.failed)?;
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn normalize_drops_nulls_and_empties_recursively() {
        let v = json!({"a": null, "b": {}, "c": [], "d": {"e": {"f": null}}, "g": [1, {}]});
        assert_eq!(normalize(&v), json!({"g": [1, {}]}));
    }

    #[test]
    fn expected_failures_are_skipped_and_a_listed_pass_fails() {
        let dir = std::env::temp_dir().join(format!("kmutate-xfail-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("cases.yaml");
        let case = |name: &str, expect: &str| {
            format!(
                "name: {name}\nobject: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: c, namespace: default}}}}\nexpect: {expect}\n"
            )
        };
        let text = [
            case("passes", "{object: {apiVersion: v1, kind: ConfigMap, metadata: {name: c, namespace: default}}}"),
            case("fails", "{rejected: {messageContains: x}}"),
        ]
        .join("---\n");
        std::fs::write(&file, text).unwrap();
        let run = |listed: &[&str]| {
            let expected = listed
                .iter()
                .map(|n| (n.to_string(), "why".to_string()))
                .collect();
            run_all(
                std::slice::from_ref(&file),
                &expected,
                false,
                &mut Vec::new(),
            )
            .unwrap()
        };
        let s = run(&["fails"]);
        assert_eq!((s.passed, s.failed, s.expected_failures), (1, 0, 1));
        let s = run(&["fails", "passes"]);
        assert_eq!((s.passed, s.failed, s.expected_failures), (0, 1, 1));
        let s = run(&[]);
        assert_eq!((s.passed, s.failed, s.expected_failures), (1, 1, 0));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn expected_failures_file_lines_are_name_and_reason() {
        let listed =
            parse_expected_failures("# a comment\n\n  one  # its reason # with a hash\ntwo\n");
        assert_eq!(listed.len(), 2);
        assert_eq!(listed["one"], "its reason # with a hash");
        assert_eq!(listed["two"], "");
        assert!(read_expected_failures(Path::new("/nonexistent/expected-failures.txt")).is_err());
    }

    #[test]
    fn denial_must_contain_the_expected_text() {
        let expect = json!({"rejected": {"messageContains": "no such key"}});
        let denied = Outcome::Denied {
            message: "policy 'p' with binding 'b' denied request: no such key: x".into(),
            code: 403,
        };
        assert_eq!(check(&expect, &denied), CaseResult::Pass);
        let other = Outcome::Denied {
            message: "something else".into(),
            code: 403,
        };
        assert!(matches!(check(&expect, &other), CaseResult::Fail(_)));
    }

    #[test]
    fn claims_the_patch_relies_on_are_checked() {
        let (came, mutated) = (json!({"a": 1}), json!({"a": 2}));
        let of = |v: &Json| Some(Snapshot::of(v));
        assert_eq!(check_patch_claims(&came, &came, &came, false, None), Ok(()));
        assert_eq!(
            check_patch_claims(&came, &came, &mutated, true, of(&came).as_ref()),
            Ok(())
        );
        // Written to, and the snapshot taken first, but changed back.
        assert_eq!(
            check_patch_claims(&came, &came, &came, false, of(&came).as_ref()),
            Ok(())
        );
        // Changed, said unchanged.
        assert!(check_patch_claims(&came, &came, &mutated, false, of(&came).as_ref()).is_err());
        // Changed with no snapshot, whatever it says.
        assert!(check_patch_claims(&came, &came, &mutated, true, None).is_err());
        // A snapshot taken after the write.
        assert!(check_patch_claims(&came, &came, &mutated, true, of(&mutated).as_ref()).is_err());
    }

    #[test]
    fn list_order_counts_and_key_order_does_not() {
        let expect = json!({"object": {"a": 1, "l": [1, 2]}});
        let same = Outcome::Admitted {
            object: json!({"l": [1, 2], "a": 1}),
            warnings: vec![],
            changed: true,
        };
        assert_eq!(check(&expect, &same), CaseResult::Pass);
        let swapped = Outcome::Admitted {
            object: json!({"l": [2, 1], "a": 1}),
            warnings: vec![],
            changed: true,
        };
        assert!(matches!(check(&expect, &swapped), CaseResult::Fail(_)));
    }
}
