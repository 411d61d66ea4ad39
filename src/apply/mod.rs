//! `kmutate apply` over manifest streams: every object of the input
//! evaluated as the API server would admit it, the cluster context taken
//! from the stream itself (its Namespaces, params and CRDs), and the stream
//! written back with the policies' changes.
//!
//! - [`input`]: reading files, folders and standard input into documents;
//! - [`output`]: writing the results as a stream, per object, or as JSON lines.

pub mod input;
pub mod output;

use crate::api::{Binding, Policy};
use crate::authorizer::Authorizer;
use crate::dispatch::{AdmissionContext, Outcome, PolicySet};
use crate::explain::{ExplainObserver, Explanation};
use crate::matching::{complete_request, ResourceTable};
use crate::request::{AdmissionRequest, ClusterObjects, UserInfo};
use crate::schema::SchemaStore;
use input::{Content, Document, Origin};
use serde_json::Value as Json;
use std::collections::HashMap;

/// How the objects are admitted.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// CREATE (the default), UPDATE or CONNECT.
    pub operation: String,
    /// The namespace of namespaced objects that name none (`kubectl -n`).
    pub namespace: Option<String>,
    /// The requesting user.
    pub user: UserInfo,
    /// Whether each admission is explained.
    pub explain: bool,
}

/// What became of one object of the input.
#[derive(Debug)]
pub struct Evaluated {
    /// Where it came from.
    pub origin: Origin,
    /// The object as admitted (its namespace defaulted).
    pub original: Json,
    /// The answer.
    pub verdict: Verdict,
    /// Warnings about this object (a kind without a schema).
    pub warnings: Vec<String>,
    /// The explanation, when asked for.
    pub explanation: Option<Explanation>,
}

/// The answer for one object.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Admitted; `changed` when a policy changed it.
    Admitted {
        /// The object after the policies.
        object: Json,
        /// Whether it differs from the original.
        changed: bool,
    },
    /// Denied, with the API server's message.
    Denied(String),
}

/// One document of the input with what became of its objects.
#[derive(Debug)]
pub struct DocumentResult {
    /// The document as read.
    pub document: Document,
    /// Its objects' results (one, or a `List`'s items; none when unreadable).
    pub objects: Vec<Evaluated>,
}

impl DocumentResult {
    /// Whether a policy changed any of its objects.
    pub fn changed(&self) -> bool {
        self.objects
            .iter()
            .any(|e| matches!(e.verdict, Verdict::Admitted { changed: true, .. }))
    }
}

/// The policies and what they may see.
pub struct Evaluator<'a> {
    /// The compiled policies.
    pub set: &'a PolicySet,
    /// The policies and bindings as loaded (for explanations).
    pub policies: &'a [Policy],
    /// The bindings as loaded.
    pub bindings: &'a [Binding],
    /// Answers the CEL `authorizer` checks.
    pub authorizer: &'a dyn Authorizer,
    /// Problems loading the policies, repeated in each explanation.
    pub problems: &'a [String],
}

/// An UPDATE's object without an old one.
#[derive(Debug, thiserror::Error)]
#[error("{origin}: {kind} {name:?}: no old object of the same kind, namespace and name among --old-object")]
pub struct MissingOldObject {
    /// Where the object is.
    pub origin: Origin,
    /// Its kind.
    pub kind: String,
    /// Its namespace/name.
    pub name: String,
}

/// Evaluates every object of `documents` in input order, on all cores.
/// The input's own objects, the old objects of an UPDATE (`old`) and
/// `resources` are the cluster the policies see.
pub fn evaluate(
    evaluator: &Evaluator<'_>,
    request: &Request,
    documents: Vec<Document>,
    resources: Vec<Json>,
    old: &[Document],
) -> Result<Vec<DocumentResult>, MissingOldObject> {
    // --resources, the old objects (what is stored: their Namespaces and
    // params exist too), then the input's, a later object of the same
    // identity replacing an earlier one. Only what a policy can read.
    let param_kinds: Vec<(&str, &str)> = evaluator
        .policies
        .iter()
        .filter_map(|p| p.param_kind.as_ref())
        .map(|k| (k.api_version.as_str(), k.kind.as_str()))
        .collect();
    let readable = |o: &&Json| {
        let (api_version, kind) = (str_at(o, "/apiVersion"), str_at(o, "/kind"));
        matches!(
            (api_version, kind),
            ("v1", "Namespace") | ("apiextensions.k8s.io/v1", "CustomResourceDefinition")
        ) || param_kinds.contains(&(api_version, kind))
    };
    let mut cluster_objects = resources;
    cluster_objects.extend(
        old.iter()
            .chain(&documents)
            .flat_map(objects_of)
            .filter(readable)
            .cloned(),
    );
    let cluster = ClusterObjects::new(cluster_objects);
    let table = ResourceTable::new(cluster.crds());
    let schemas = SchemaStore::with_crds(cluster.crds()).deducing_unknown_kinds();
    let ctx = AdmissionContext {
        cluster: &cluster,
        schemas: &schemas,
        resources: &table,
        authorizer: evaluator.authorizer,
    };
    let old_by_key: HashMap<String, &Json> = old
        .iter()
        .flat_map(objects_of)
        .map(|o| (identity(o), o))
        .collect();
    // One job per object, in order; each knows its document. The objects
    // move into the jobs (a List keeps its other fields).
    let mut documents = documents;
    let mut jobs = Vec::new();
    for (d, document) in documents.iter_mut().enumerate() {
        let is_list = matches!(document.content, Content::List { .. });
        for (i, object) in take_objects(&mut document.content).into_iter().enumerate() {
            let origin = Origin {
                item: is_list.then_some(i),
                ..document.origin.clone()
            };
            let mut object = object;
            default_namespace(&mut object, request, &table);
            let old_object = match request.operation.as_str() {
                "UPDATE" => Some(
                    old_by_key
                        .get(&identity(&object))
                        .map(|o| (*o).clone())
                        .ok_or_else(|| MissingOldObject {
                            origin: origin.clone(),
                            kind: str_at(&object, "/kind").to_string(),
                            name: namespaced_name(&object),
                        })?,
                ),
                _ => None,
            };
            jobs.push((d, origin, object, old_object));
        }
    }
    let results = crate::parallel::map_in_order(jobs, 64, |(d, origin, object, old)| {
        (d, admit_one(evaluator, request, &ctx, origin, object, old))
    });
    let mut out: Vec<DocumentResult> = documents
        .into_iter()
        .map(|document| DocumentResult {
            document,
            objects: Vec::new(),
        })
        .collect();
    for (d, evaluated) in results {
        out[d].objects.push(evaluated);
    }
    Ok(out)
}

/// The objects of a document, taken out of it (a `List` keeps the rest).
fn take_objects(content: &mut Content) -> Vec<Json> {
    match content {
        Content::Object(o) => vec![std::mem::take(o)],
        Content::List { list, items } => {
            if let Some(map) = list.as_object_mut() {
                map.remove("items");
            }
            std::mem::take(items)
        }
        Content::Unreadable(_) => Vec::new(),
    }
}

/// The objects of a document (none when it is unreadable).
fn objects_of(document: &Document) -> Vec<&Json> {
    match &document.content {
        Content::Object(o) => vec![o],
        Content::List { items, .. } => items.iter().collect(),
        Content::Unreadable(_) => Vec::new(),
    }
}

/// What an old object is matched by: apiVersion's group, kind, namespace
/// and name.
fn identity(object: &Json) -> String {
    let group = str_at(object, "/apiVersion")
        .split_once('/')
        .map_or("", |(g, _)| g);
    format!(
        "{group}\u{0}{}\u{0}{}",
        str_at(object, "/kind"),
        namespaced_name(object)
    )
}

fn namespaced_name(object: &Json) -> String {
    match str_at(object, "/metadata/namespace") {
        "" => str_at(object, "/metadata/name").to_string(),
        ns => format!("{ns}/{}", str_at(object, "/metadata/name")),
    }
}

fn str_at<'a>(object: &'a Json, pointer: &str) -> &'a str {
    object
        .pointer(pointer)
        .and_then(Json::as_str)
        .unwrap_or_default()
}

/// `--namespace` on a namespaced object that names none, as `kubectl -n`.
fn default_namespace(object: &mut Json, request: &Request, table: &ResourceTable) {
    let Some(namespace) = &request.namespace else {
        return;
    };
    if !str_at(object, "/metadata/namespace").is_empty() {
        return;
    }
    let api_version = str_at(object, "/apiVersion").to_string();
    let group = api_version
        .split_once('/')
        .map_or("", |(g, _)| g)
        .to_string();
    let kind = str_at(object, "/kind").to_string();
    if table.is_namespaced(&group, &api_version, &kind) == Some(false) {
        return;
    }
    if let Some(meta) = object
        .as_object_mut()
        .map(|o| {
            o.entry("metadata")
                .or_insert_with(|| Json::Object(Default::default()))
        })
        .and_then(Json::as_object_mut)
    {
        meta.insert("namespace".into(), Json::String(namespace.clone()));
    }
}

/// Admits one object.
fn admit_one(
    evaluator: &Evaluator<'_>,
    request: &Request,
    ctx: &AdmissionContext<'_>,
    origin: Origin,
    object: Json,
    old_object: Option<Json>,
) -> Evaluated {
    let mut admission = AdmissionRequest {
        uid: "kmutate-apply".into(),
        operation: if request.operation.is_empty() {
            "CREATE".into()
        } else {
            request.operation.clone()
        },
        user_info: request.user.clone(),
        object: Some(object.clone()),
        old_object,
        ..Default::default()
    };
    complete_request(&mut admission, ctx.resources);
    let mut warnings = Vec::new();
    let kind = admission.kind.clone();
    if !ctx
        .schemas
        .has_schema(&kind.group, &kind.version, &kind.kind)
    {
        // Its resource name too, as kube's UnsafeGuessKindToResource would.
        if admission.resource.resource.is_empty() {
            admission.resource.group = kind.group.clone();
            admission.resource.version = kind.version.clone();
            admission.resource.resource = guess_resource(&kind.kind);
        }
        warnings.push(format!(
            "{origin}: kind {}/{} {} has no CustomResourceDefinition among the inputs: \
             a deduced schema is used (lists atomic, maps granular), resource {:?}",
            kind.group, kind.version, kind.kind, admission.resource.resource
        ));
    }
    // What monitored bindings would have done is told apart, as warnings.
    let (outcome, explanation, monitored) = if request.explain {
        let observer = ExplainObserver::new(evaluator.policies, evaluator.bindings);
        let outcome = evaluator.set.admit_owned(admission, ctx, &observer);
        let monitored = observer.monitored();
        let mut problems = evaluator.problems.to_vec();
        problems.extend(warnings.iter().cloned());
        let explanation = observer.finish(problems, &object, &outcome);
        (outcome, Some(explanation), monitored)
    } else {
        let observer = MonitoredBindings::default();
        let outcome = evaluator.set.admit_owned(admission, ctx, &observer);
        (outcome, None, observer.0.into_inner().warnings(false))
    };
    warnings.extend(monitored.into_iter().map(|m| format!("{origin}: {m}")));
    let verdict = match outcome {
        Outcome::Denied { message, .. } => Verdict::Denied(message),
        Outcome::Admitted { object: result, .. } => Verdict::Admitted {
            changed: result != object,
            object: result,
        },
    };
    // A changed object is shown against the object as kube-apiserver would
    // have sent it, its kind's Go types' encoding, which the policies
    // changed: its patch and diff hold their changes, not the encoding's.
    let original = match &verdict {
        Verdict::Admitted { changed: true, .. } => {
            let mut encoded = object;
            ctx.schemas
                .go_round_trip_of_kind(&kind.group, &kind.version, &kind.kind, &mut encoded);
            encoded
        }
        _ => object,
    };
    Evaluated {
        origin,
        original,
        verdict,
        warnings,
        explanation,
    }
}

/// Records what monitored bindings would have done.
#[derive(Default)]
struct MonitoredBindings(std::cell::RefCell<crate::attribution::Attribution>);

impl crate::dispatch::AdmissionObserver for MonitoredBindings {
    fn binding_changed(&self, change: crate::dispatch::BindingChange<'_>) {
        self.0.borrow_mut().record(change);
    }

    fn monitored_error(&self, policy: &str, binding: &str, message: &str) {
        self.0.borrow_mut().record_error(policy, binding, message);
    }
}

/// The plural resource name of a kind, as kube's `UnsafeGuessKindToResource`
/// guesses it.
pub fn guess_resource(kind: &str) -> String {
    let lower = kind.to_lowercase();
    if lower.is_empty() {
        return lower;
    }
    if lower.ends_with('s') {
        return format!("{lower}es");
    }
    if let Some(stem) = lower.strip_suffix('y') {
        return format!("{stem}ies");
    }
    format!("{lower}s")
}

#[cfg(test)]
mod tests {
    use super::*;

    // k8s.io/apimachinery meta.UnsafeGuessKindToResource's examples.
    #[test]
    fn resource_names_are_guessed_as_kube_guesses_them() {
        assert_eq!(guess_resource("Widget"), "widgets");
        assert_eq!(guess_resource("NetworkPolicy"), "networkpolicies");
        assert_eq!(guess_resource("IngressClass"), "ingressclasses");
        assert_eq!(guess_resource(""), "");
    }
}
