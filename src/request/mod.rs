//! The admission request (`admission.k8s.io/v1` AdmissionRequest) and the
//! cluster objects an admission sees (Namespaces, params, CRDs).

pub mod decode;

use crate::api::LabelSelector;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// A group/version/kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GroupVersionKind {
    /// API group ("" for core).
    #[serde(default)]
    pub group: String,
    /// API version.
    #[serde(default)]
    pub version: String,
    /// Kind.
    #[serde(default)]
    pub kind: String,
}

/// A group/version/resource.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GroupVersionResource {
    /// API group ("" for core).
    #[serde(default)]
    pub group: String,
    /// API version.
    #[serde(default)]
    pub version: String,
    /// Resource (plural, lower case).
    #[serde(default)]
    pub resource: String,
}

/// The requesting user.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UserInfo {
    /// User name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub username: String,
    /// UID.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// Groups.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// Extra attributes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
}

/// An admission.k8s.io/v1 AdmissionRequest.
///
/// Decoded by [`decode::RequestSeed`] (its `Deserialize` builds every
/// member): a member left out takes its default, and `operation`
/// `CREATE`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionRequest {
    /// Request UID.
    pub uid: String,
    /// Kind of the object.
    pub kind: GroupVersionKind,
    /// Resource being requested.
    pub resource: GroupVersionResource,
    /// Subresource ("" for the main resource).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub sub_resource: String,
    /// Kind as originally requested (before conversion to a matched version).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_kind: Option<GroupVersionKind>,
    /// Resource as originally requested.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_resource: Option<GroupVersionResource>,
    /// Subresource as originally requested.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_sub_resource: Option<String>,
    /// Object name.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Object namespace ("" when cluster-scoped).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// CREATE, UPDATE, DELETE or CONNECT.
    pub operation: String,
    /// The requesting user.
    pub user_info: UserInfo,
    /// The new object; `None` too when decoded without building it
    /// ([`decode::ObjectChoice::object_gate`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object: Option<Value>,
    /// The existing object (UPDATE); `None` too when decoded without
    /// building it ([`decode::ObjectChoice::old_object`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old_object: Option<Value>,
    /// Whether the request is a dry run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<bool>,
    /// Operation options.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub options: Option<Value>,
    /// Whether this is kube-apiserver's reinvocation of the webhook for an
    /// admission it already called it for (upstream's `IsReinvoke`): only
    /// the `IfNeeded` policies run. Not part of the AdmissionReview; the
    /// webhook tells it ([`crate::webhook::reinvocation`]).
    #[serde(skip)]
    pub reinvocation: bool,
}

/// Objects of one kind by (namespace, name).
type ByName = BTreeMap<(String, String), Arc<Value>>;

/// What the cluster holds, as seen by an admission: Namespaces, param
/// objects and CRDs. Objects are shared (`Arc`), so that a source holding
/// thousands of params can build a fresh set cheaply, and indexed by
/// apiVersion and kind, then namespace and name, for param lookups.
#[derive(Clone, Debug, Default)]
pub struct ClusterObjects {
    namespaces: BTreeMap<String, Arc<Value>>,
    by_kind: HashMap<(String, String), ByName>,
    crds: Arc<Vec<Value>>,
    len: usize,
}

impl ClusterObjects {
    /// Indexes a list of objects.
    pub fn new(objects: Vec<Value>) -> Self {
        Self::from_shared(objects.into_iter().map(Arc::new))
    }

    /// Indexes shared objects.
    pub fn from_shared(objects: impl IntoIterator<Item = Arc<Value>>) -> Self {
        let mut c = ClusterObjects::default();
        for o in objects {
            c.insert_shared(o);
        }
        c
    }

    /// Adds one object.
    pub fn insert(&mut self, o: Value) {
        self.insert_shared(Arc::new(o));
    }

    /// Adds one shared object; a later object with the same apiVersion,
    /// kind, namespace and name replaces an earlier one.
    pub fn insert_shared(&mut self, o: Arc<Value>) {
        if is_crd(&o) {
            Arc::make_mut(&mut self.crds).push((*o).clone());
        }
        self.index(o);
    }

    /// Adds `o` to the indexes (Namespaces, by kind and name).
    fn index(&mut self, o: Arc<Value>) {
        let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_string();
        let kind = text(o.get("kind"));
        let api_version = text(o.get("apiVersion"));
        let name = text(o.pointer("/metadata/name"));
        let namespace = text(o.pointer("/metadata/namespace"));
        if kind == "Namespace" && api_version == "v1" && !name.is_empty() {
            self.namespaces.insert(name.clone(), o.clone());
        }
        let previous = self
            .by_kind
            .entry((api_version, kind))
            .or_default()
            .insert((namespace, name), o);
        if previous.is_none() {
            self.len += 1;
        }
    }

    /// Indexes shared objects, taking the CustomResourceDefinitions among
    /// them to be `crds` (already copied out, so that a caller rebuilding
    /// often with the same CRDs copies them once).
    pub fn from_shared_with_crds(
        objects: impl IntoIterator<Item = Arc<Value>>,
        crds: Arc<Vec<Value>>,
    ) -> Self {
        let mut c = ClusterObjects {
            crds,
            ..ClusterObjects::default()
        };
        for o in objects {
            c.index(o);
        }
        c
    }

    /// Number of objects held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no object is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The Namespace object called `name`.
    pub fn namespace(&self, name: &str) -> Option<&Value> {
        self.namespaces.get(name).map(|v| v.as_ref())
    }

    /// The CustomResourceDefinitions.
    pub fn crds(&self) -> &[Value] {
        &self.crds
    }

    /// Objects of `api_version`/`kind`, in `namespace` when given (cluster-wide
    /// otherwise), by `name` or `selector`, sorted by namespace and name.
    pub fn find(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: Option<&str>,
        selector: Option<&LabelSelector>,
    ) -> Vec<&Value> {
        let Some(objects) = self
            .by_kind
            .get(&(api_version.to_string(), kind.to_string()))
        else {
            return Vec::new();
        };
        if let (Some(ns), Some(n)) = (namespace, name) {
            return objects
                .get(&(ns.to_string(), n.to_string()))
                .map(|o| o.as_ref())
                .into_iter()
                .filter(|o| selector.is_none_or(|sel| sel.matches(&labels_of(o))))
                .collect();
        }
        let in_namespace = |((o_ns, _), _): &(&(String, String), &Arc<Value>)| {
            namespace.is_none_or(|ns| ns == o_ns)
        };
        let candidates = match namespace {
            Some(ns) => objects.range((ns.to_string(), String::new())..),
            None => objects.range::<(String, String), _>(..),
        };
        candidates
            .take_while(in_namespace)
            .filter(|((_, o_name), _)| name.is_none_or(|n| n == o_name))
            .map(|(_, o)| o.as_ref())
            .filter(|o| selector.is_none_or(|sel| sel.matches(&labels_of(o))))
            .collect()
    }
}

/// Whether `o` is a CustomResourceDefinition.
pub fn is_crd(o: &Value) -> bool {
    o.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition")
        && o.get("apiVersion")
            .and_then(Value::as_str)
            .is_some_and(|v| v.starts_with("apiextensions.k8s.io/"))
}

/// The `metadata.labels` of an object (empty when it has none).
pub fn labels_of(o: &Value) -> BTreeMap<String, String> {
    o.pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// The fields of an [`AdmissionRequest`] the CEL `request` variable holds
/// (all but the objects), borrowed for serialisation. A field is `None`
/// when it is left out: empty, or not asked for.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CelRequestView<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    uid: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<&'a GroupVersionKind>,
    #[serde(skip_serializing_if = "Option::is_none")]
    resource: Option<&'a GroupVersionResource>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sub_resource: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    request_kind: Option<&'a GroupVersionKind>,
    #[serde(skip_serializing_if = "Option::is_none")]
    request_resource: Option<&'a GroupVersionResource>,
    #[serde(skip_serializing_if = "Option::is_none")]
    request_sub_resource: Option<&'a String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    namespace: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    operation: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user_info: Option<&'a UserInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dry_run: Option<&'a bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    options: Option<Value>,
}

/// Which top-level fields of the CEL `request` variable to build.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum RequestFields {
    /// Every field.
    #[default]
    All,
    /// Only these (by their JSON names); the others are never read.
    Only(std::collections::BTreeSet<String>),
}

impl RequestFields {
    fn wants(&self, field: &str) -> bool {
        match self {
            RequestFields::All => true,
            RequestFields::Only(fields) => fields.contains(field),
        }
    }
}

impl AdmissionRequest {
    /// A copy of what matching reads and completing changes: the request
    /// without its user, options and objects.
    pub fn matching_header(&self) -> AdmissionRequest {
        AdmissionRequest {
            kind: self.kind.clone(),
            resource: self.resource.clone(),
            sub_resource: self.sub_resource.clone(),
            request_kind: self.request_kind.clone(),
            request_resource: self.request_resource.clone(),
            request_sub_resource: self.request_sub_resource.clone(),
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            operation: self.operation.clone(),
            ..AdmissionRequest::default()
        }
    }

    /// The CEL `request` variable: the request without its objects, as
    /// upstream's `CreateAdmissionRequest` builds it, with only `fields`
    /// (what no expression reads is not built).
    pub fn cel_request_json(&self, fields: &RequestFields) -> Value {
        let want = |field: &str, present: bool| present && fields.wants(field);
        serde_json::to_value(CelRequestView {
            uid: want("uid", true).then_some(self.uid.as_str()),
            kind: want("kind", true).then_some(&self.kind),
            resource: want("resource", true).then_some(&self.resource),
            sub_resource: want("subResource", !self.sub_resource.is_empty())
                .then_some(self.sub_resource.as_str()),
            request_kind: self
                .request_kind
                .as_ref()
                .filter(|_| fields.wants("requestKind")),
            request_resource: self
                .request_resource
                .as_ref()
                .filter(|_| fields.wants("requestResource")),
            request_sub_resource: self
                .request_sub_resource
                .as_ref()
                .filter(|_| fields.wants("requestSubResource")),
            name: want("name", !self.name.is_empty()).then_some(self.name.as_str()),
            namespace: want("namespace", !self.namespace.is_empty())
                .then_some(self.namespace.as_str()),
            operation: want("operation", true).then_some(self.operation.as_str()),
            user_info: want("userInfo", true).then_some(&self.user_info),
            // Upstream's `CreateAdmissionRequest` always sets these two:
            // false, and the operation's options, when the review omits them.
            dry_run: fields
                .wants("dryRun")
                .then_some(self.dry_run.as_ref().unwrap_or(&false)),
            options: fields
                .wants("options")
                .then(|| match &self.options {
                    Some(o) => Some(o.clone()),
                    None => default_options(&self.operation),
                })
                .flatten(),
        })
        .unwrap_or(Value::Null)
    }
}

/// The options upstream gives an operation's request when none were sent:
/// `CreateOptions`, `UpdateOptions`, `DeleteOptions` (meta.k8s.io/v1); a
/// CONNECT's options are its kind's own, so none is made up.
fn default_options(operation: &str) -> Option<Value> {
    let kind = match operation {
        "CREATE" => "CreateOptions",
        "UPDATE" => "UpdateOptions",
        "DELETE" => "DeleteOptions",
        _ => return None,
    };
    Some(serde_json::json!({"apiVersion": "meta.k8s.io/v1", "kind": kind}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // Upstream's `CreateAdmissionRequest`: every field but the objects,
    // the empty optional ones left out; dryRun and options always there
    // (maporacle: `request.dryRun` is false and `request.options.kind`
    // is CreateOptions on a CREATE that sent neither).
    #[test]
    fn dry_run_and_options_are_always_there() {
        let request: AdmissionRequest =
            serde_json::from_value(json!({"uid": "u", "operation": "CREATE"})).unwrap();
        let only = |f: &str| request.cel_request_json(&RequestFields::Only([f.to_string()].into()));
        assert_eq!(only("dryRun"), json!({"dryRun": false}));
        assert_eq!(
            only("options"),
            json!({"options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}})
        );
    }

    // Upstream's `CreateAdmissionRequest`: every field but the objects,
    // the empty optional ones left out.
    #[test]
    fn the_request_variable_has_the_fields_asked_for() {
        // The request as sent, less its object.
        let whole = json!({
            "uid": "u1",
            "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "subResource": "scale",
            "name": "web",
            "operation": "UPDATE",
            "userInfo": {"username": "alice", "groups": ["dev"]},
            "dryRun": true,
        });
        let mut sent = whole.clone();
        sent["object"] = json!({"kind": "Scale"});
        let request: AdmissionRequest = serde_json::from_value(sent).expect("a request");
        // Sent without options, it has the operation's (CreateAdmissionRequest).
        let mut with_options = whole.clone();
        with_options["options"] = json!({"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions"});
        assert_eq!(request.cel_request_json(&RequestFields::All), with_options);
        let only = |fields: &[&str]| {
            let fields = fields.iter().map(|f| f.to_string()).collect();
            request.cel_request_json(&RequestFields::Only(fields))
        };
        assert_eq!(
            only(&["userInfo", "dryRun"]),
            json!({"userInfo": {"username": "alice", "groups": ["dev"]}, "dryRun": true})
        );
        // A field asked for but empty stays out, as in the whole variable.
        assert_eq!(
            only(&["namespace", "operation"]),
            json!({"operation": "UPDATE"})
        );
        assert_eq!(only(&[]), json!({}));
    }

    fn cm(ns: &str, name: &str, labels: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"namespace": ns, "name": name, "labels": labels}})
    }

    fn names(found: Vec<&Value>) -> Vec<String> {
        found
            .iter()
            .map(|o| {
                format!(
                    "{}/{}",
                    o["metadata"]["namespace"].as_str().unwrap_or(""),
                    o["metadata"]["name"].as_str().unwrap_or("")
                )
            })
            .collect()
    }

    #[test]
    fn find_by_kind_namespace_name_and_selector() {
        let c = ClusterObjects::new(vec![
            cm("b", "x", json!({"use": "yes"})),
            cm("a", "x", json!({"use": "no"})),
            cm("a", "y", json!({"use": "yes"})),
            cm("ab", "x", json!({})),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"namespace": "a", "name": "x"}}),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}}),
        ]);
        assert_eq!(c.len(), 6);
        assert!(c.namespace("a").is_some() && c.namespace("b").is_none());
        let find = |ns, name, sel: Option<LabelSelector>| {
            names(c.find("v1", "ConfigMap", ns, name, sel.as_ref()))
        };
        assert_eq!(find(Some("a"), Some("x"), None), ["a/x"]);
        assert_eq!(find(Some("a"), None, None), ["a/x", "a/y"]);
        assert_eq!(find(None, Some("x"), None), ["a/x", "ab/x", "b/x"]);
        let yes = LabelSelector {
            match_labels: [("use".to_string(), "yes".to_string())].into(),
            ..Default::default()
        };
        assert_eq!(find(None, None, Some(yes.clone())), ["a/y", "b/x"]);
        assert_eq!(find(Some("a"), None, Some(yes.clone())), ["a/y"]);
        assert_eq!(find(Some("a"), Some("x"), Some(yes)), Vec::<String>::new());
        assert_eq!(find(Some("c"), None, None), Vec::<String>::new());
        assert!(c.find("v1", "Pod", None, None, None).is_empty());
        // The same object again replaces the first.
        let mut c = c;
        c.insert(cm("a", "x", json!({"v": "2"})));
        assert_eq!(c.len(), 6);
        assert_eq!(
            c.find("v1", "ConfigMap", Some("a"), Some("x"), None)[0]["metadata"]["labels"]["v"],
            "2"
        );
    }
}
