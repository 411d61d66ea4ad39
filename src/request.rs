//! The admission request (`admission.k8s.io/v1` AdmissionRequest) and the
//! cluster objects an admission sees (Namespaces, params, CRDs).

use crate::api::LabelSelector;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

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
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionRequest {
    /// Request UID.
    #[serde(default)]
    pub uid: String,
    /// Kind of the object.
    #[serde(default)]
    pub kind: GroupVersionKind,
    /// Resource being requested.
    #[serde(default)]
    pub resource: GroupVersionResource,
    /// Subresource ("" for the main resource).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sub_resource: String,
    /// Kind as originally requested (before conversion to a matched version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_kind: Option<GroupVersionKind>,
    /// Resource as originally requested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_resource: Option<GroupVersionResource>,
    /// Subresource as originally requested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_sub_resource: Option<String>,
    /// Object name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Object namespace ("" when cluster-scoped).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// CREATE, UPDATE, DELETE or CONNECT.
    #[serde(default = "default_operation")]
    pub operation: String,
    /// The requesting user.
    #[serde(default)]
    pub user_info: UserInfo,
    /// The new object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<Value>,
    /// The existing object (UPDATE).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_object: Option<Value>,
    /// Whether the request is a dry run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<bool>,
    /// Operation options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<Value>,
}

fn default_operation() -> String {
    "CREATE".into()
}

/// What the cluster holds, as seen by an admission: Namespaces, param
/// objects and CRDs.
#[derive(Clone, Debug, Default)]
pub struct ClusterObjects {
    namespaces: BTreeMap<String, Value>,
    objects: Vec<Value>,
    crds: Vec<Value>,
}

impl ClusterObjects {
    /// Indexes a list of objects.
    pub fn new(objects: Vec<Value>) -> Self {
        let mut c = ClusterObjects::default();
        for o in objects {
            c.insert(o);
        }
        c
    }

    /// Adds one object.
    pub fn insert(&mut self, o: Value) {
        let kind = o.get("kind").and_then(Value::as_str).unwrap_or_default();
        let api_version = o
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if kind == "Namespace" && api_version == "v1" {
            if let Some(name) = o.pointer("/metadata/name").and_then(Value::as_str) {
                self.namespaces.insert(name.to_string(), o.clone());
            }
        }
        if kind == "CustomResourceDefinition" && api_version.starts_with("apiextensions.k8s.io/") {
            self.crds.push(o.clone());
        }
        self.objects.push(o);
    }

    /// The Namespace object called `name`.
    pub fn namespace(&self, name: &str) -> Option<&Value> {
        self.namespaces.get(name)
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
        let mut found: Vec<&Value> = self
            .objects
            .iter()
            .filter(|o| {
                o.get("apiVersion").and_then(Value::as_str) == Some(api_version)
                    && o.get("kind").and_then(Value::as_str) == Some(kind)
            })
            .filter(|o| match namespace {
                Some(ns) => {
                    o.pointer("/metadata/namespace")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        == ns
                }
                None => true,
            })
            .filter(|o| match name {
                Some(n) => o.pointer("/metadata/name").and_then(Value::as_str) == Some(n),
                None => true,
            })
            .filter(|o| match selector {
                Some(sel) => sel.matches(&labels_of(o)),
                None => true,
            })
            .collect();
        found.sort_by_key(|o| {
            (
                o.pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or(""),
                o.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or(""),
            )
        });
        found
    }
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
/// (all but the objects), borrowed for serialisation.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CelRequestView<'a> {
    uid: &'a str,
    kind: &'a GroupVersionKind,
    resource: &'a GroupVersionResource,
    #[serde(skip_serializing_if = "str::is_empty")]
    sub_resource: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    request_kind: &'a Option<GroupVersionKind>,
    #[serde(skip_serializing_if = "Option::is_none")]
    request_resource: &'a Option<GroupVersionResource>,
    #[serde(skip_serializing_if = "Option::is_none")]
    request_sub_resource: &'a Option<String>,
    #[serde(skip_serializing_if = "str::is_empty")]
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    namespace: &'a str,
    operation: &'a str,
    user_info: &'a UserInfo,
    #[serde(skip_serializing_if = "Option::is_none")]
    dry_run: &'a Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    options: &'a Option<Value>,
}

impl AdmissionRequest {
    /// The CEL `request` variable: the request without its objects, as
    /// upstream's `CreateAdmissionRequest` builds it.
    pub fn cel_request_json(&self) -> Value {
        serde_json::to_value(CelRequestView {
            uid: &self.uid,
            kind: &self.kind,
            resource: &self.resource,
            sub_resource: &self.sub_resource,
            request_kind: &self.request_kind,
            request_resource: &self.request_resource,
            request_sub_resource: &self.request_sub_resource,
            name: &self.name,
            namespace: &self.namespace,
            operation: &self.operation,
            user_info: &self.user_info,
            dry_run: &self.dry_run,
            options: &self.options,
        })
        .unwrap_or(Value::Null)
    }
}
