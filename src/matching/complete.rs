//! Filling in what a conformance case may leave out of an AdmissionRequest.

use super::table::{ResourceTable, Scope};
use crate::request::{AdmissionRequest, GroupVersionKind};
use serde_json::Value;

/// The group/version/kind an object declares (`apiVersion` and `kind`).
fn declared_kind(obj: &Value) -> Option<GroupVersionKind> {
    let api_version = obj.get("apiVersion")?.as_str()?;
    let kind = obj.get("kind")?.as_str()?;
    if api_version.is_empty() || kind.is_empty() {
        return None;
    }
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    Some(GroupVersionKind {
        group: group.to_string(),
        version: version.to_string(),
        kind: kind.to_string(),
    })
}

fn meta_str<'a>(obj: Option<&'a Value>, field: &str) -> Option<&'a str> {
    obj?.get("metadata")?
        .get(field)?
        .as_str()
        .filter(|s| !s.is_empty())
}

/// Fills in what a case may omit, from the object (or old object) and the
/// table: `kind` from apiVersion/kind (or from `resource`), `resource` from
/// the kind, `name` and `namespace` from metadata (a Namespace's own name for
/// Namespace requests, as the API server sets it; `default` for a namespaced
/// resource with no namespace anywhere), and `requestKind`, `requestResource`,
/// `requestSubResource` from kind, resource and subResource. Given fields are
/// kept.
pub fn complete_request(req: &mut AdmissionRequest, table: &ResourceTable) {
    let object = req
        .object
        .as_ref()
        .filter(|o| o.is_object())
        .or(req.old_object.as_ref().filter(|o| o.is_object()));
    let declared = object.and_then(declared_kind);

    // kind
    if req.kind.kind.is_empty() {
        if let Some(k) = declared.clone() {
            req.kind = k;
        } else if !req.resource.resource.is_empty() && !req.resource.version.is_empty() {
            if let Some(k) = table.kind_for(&req.resource, &req.sub_resource) {
                req.kind = k;
            }
        }
    } else if req.kind.version.is_empty() {
        // Only the kind name was given: take group/version from the object.
        if let Some(k) = declared.as_ref().filter(|k| k.kind == req.kind.kind) {
            req.kind = k.clone();
        }
    }

    // resource
    if req.resource.resource.is_empty() && !req.kind.kind.is_empty() {
        let found = if req.sub_resource.is_empty() {
            table.resource_for_kind(&req.kind)
        } else {
            table.unique_parent_of(&req.sub_resource, &req.kind)
        };
        if let Some(info) = found {
            req.resource = info.gvr.clone();
        }
    } else if !req.resource.resource.is_empty()
        && req.resource.version.is_empty()
        && !req.kind.version.is_empty()
    {
        // Only the plural was given: the kind's group/version.
        req.resource.group = req.kind.group.clone();
        req.resource.version = req.kind.version.clone();
    }

    // name
    if req.name.is_empty() {
        if let Some(name) = meta_str(object, "name") {
            req.name = name.to_string();
        }
    }

    // namespace
    if req.namespace.is_empty() {
        let is_namespace = req.resource.group.is_empty() && req.resource.resource == "namespaces";
        let scope = table.scope_of(&req.resource);
        if is_namespace {
            // The request namespace of a Namespace is its own name.
            req.namespace = req.name.clone();
        } else if scope != Some(Scope::Cluster) {
            if let Some(ns) = meta_str(object, "namespace") {
                req.namespace = ns.to_string();
            } else if scope == Some(Scope::Namespaced) {
                req.namespace = "default".to_string();
            }
        }
    }

    // request*
    if req.request_kind.is_none() {
        req.request_kind = Some(req.kind.clone());
    }
    if req.request_resource.is_none() {
        req.request_resource = Some(req.resource.clone());
    }
    if req.request_sub_resource.is_none() {
        req.request_sub_resource = Some(req.sub_resource.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::GroupVersionResource;
    use serde_json::json;

    fn gvk(g: &str, v: &str, k: &str) -> GroupVersionKind {
        GroupVersionKind {
            group: g.into(),
            version: v.into(),
            kind: k.into(),
        }
    }
    fn gvr(g: &str, v: &str, r: &str) -> GroupVersionResource {
        GroupVersionResource {
            group: g.into(),
            version: v.into(),
            resource: r.into(),
        }
    }
    fn req(object: Value) -> AdmissionRequest {
        AdmissionRequest {
            operation: "CREATE".into(),
            object: Some(object),
            ..Default::default()
        }
    }

    #[test]
    fn pod_from_object() {
        let t = ResourceTable::builtin();
        let mut r = req(
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}}),
        );
        complete_request(&mut r, &t);
        assert_eq!(r.kind, gvk("", "v1", "Pod"));
        assert_eq!(r.resource, gvr("", "v1", "pods"));
        assert_eq!(r.name, "p");
        assert_eq!(r.namespace, "ns");
        assert_eq!(r.request_kind, Some(gvk("", "v1", "Pod")));
        assert_eq!(r.request_resource, Some(gvr("", "v1", "pods")));
        assert_eq!(r.request_sub_resource.as_deref(), Some(""));
    }

    #[test]
    fn given_fields_are_kept() {
        let t = ResourceTable::builtin();
        let mut r = req(
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "a"}}),
        );
        r.namespace = "b".into();
        r.name = "x".into();
        r.request_kind = Some(gvk("apps", "v1beta1", "Deployment"));
        complete_request(&mut r, &t);
        assert_eq!(r.namespace, "b");
        assert_eq!(r.name, "x");
        assert_eq!(r.kind, gvk("apps", "v1", "Deployment"));
        assert_eq!(r.request_kind, Some(gvk("apps", "v1beta1", "Deployment")));
    }

    #[test]
    fn namespace_request_namespace_is_its_name() {
        let t = ResourceTable::builtin();
        let mut r =
            req(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}));
        complete_request(&mut r, &t);
        assert_eq!(r.resource, gvr("", "v1", "namespaces"));
        assert_eq!(r.namespace, "team-a");
    }

    #[test]
    fn cluster_scoped_ignores_object_namespace() {
        let t = ResourceTable::builtin();
        let mut r = req(
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "c", "namespace": "bogus"}}),
        );
        complete_request(&mut r, &t);
        assert_eq!(
            r.resource,
            gvr("rbac.authorization.k8s.io", "v1", "clusterroles")
        );
        assert_eq!(r.namespace, "");
    }

    #[test]
    fn namespaced_without_namespace_defaults() {
        let t = ResourceTable::builtin();
        let mut r =
            req(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}));
        complete_request(&mut r, &t);
        assert_eq!(r.namespace, "default");
    }

    #[test]
    fn crd_with_given_resource() {
        let crd = json!({"metadata": {"name": "widgets.example.com"}, "spec": {"group": "example.com",
            "names": {"plural": "widgets", "kind": "Widget"}, "scope": "Namespaced",
            "versions": [{"name": "v1"}]}});
        let t = ResourceTable::new(&[crd]);
        let mut r = req(
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "n"}}),
        );
        r.resource = gvr("example.com", "v1", "widgets");
        complete_request(&mut r, &t);
        assert_eq!(r.kind, gvk("example.com", "v1", "Widget"));
        assert_eq!(r.resource, gvr("example.com", "v1", "widgets"));
        // The CRD alone lets the resource be derived too.
        let mut r2 = req(
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}),
        );
        complete_request(&mut r2, &t);
        assert_eq!(r2.resource, gvr("example.com", "v1", "widgets"));
        assert_eq!(r2.namespace, "default");
        // An unknown kind with a given plural only: group/version from the kind.
        let mut r3 = req(
            json!({"apiVersion": "other.io/v2", "kind": "Thing", "metadata": {"name": "t", "namespace": "n"}}),
        );
        r3.resource.resource = "things".into();
        complete_request(&mut r3, &ResourceTable::builtin());
        assert_eq!(r3.resource, gvr("other.io", "v2", "things"));
        assert_eq!(r3.namespace, "n");
    }

    #[test]
    fn subresources() {
        let t = ResourceTable::builtin();
        // pods/status with a Pod object: the parent is unique.
        let mut r = req(
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "n"}}),
        );
        r.operation = "UPDATE".into();
        r.sub_resource = "status".into();
        complete_request(&mut r, &t);
        assert_eq!(r.resource, gvr("", "v1", "pods"));
        assert_eq!(r.request_sub_resource.as_deref(), Some("status"));
        // A Scale could be any scalable resource: left to the case.
        let mut r = req(
            json!({"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "d", "namespace": "n"}}),
        );
        r.sub_resource = "scale".into();
        complete_request(&mut r, &t);
        assert_eq!(r.kind, gvk("autoscaling", "v1", "Scale"));
        assert_eq!(r.resource, GroupVersionResource::default());
        // Given the resource, the kind comes from the table when no object says.
        let mut r = AdmissionRequest {
            operation: "CONNECT".into(),
            resource: gvr("", "v1", "pods"),
            sub_resource: "exec".into(),
            name: "p".into(),
            namespace: "n".into(),
            ..Default::default()
        };
        complete_request(&mut r, &t);
        assert_eq!(r.kind, gvk("", "v1", "PodExecOptions"));
    }

    #[test]
    fn update_uses_old_object_when_no_object() {
        let t = ResourceTable::builtin();
        let mut r = AdmissionRequest {
            operation: "UPDATE".into(),
            old_object: Some(
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "n"}}),
            ),
            ..Default::default()
        };
        complete_request(&mut r, &t);
        assert_eq!(r.kind, gvk("", "v1", "Secret"));
        assert_eq!(r.name, "s");
    }

    #[test]
    fn odd_objects_do_not_panic() {
        let t = ResourceTable::builtin();
        for o in [
            json!(null),
            json!("str"),
            json!([1, 2]),
            json!({"apiVersion": 3, "kind": []}),
            json!({"apiVersion": "", "kind": ""}),
            json!({"apiVersion": "a/b/c", "kind": "K", "metadata": "nope"}),
            json!({"apiVersion": "/", "kind": "K", "metadata": {"name": 5, "namespace": {}}}),
        ] {
            let mut r = req(o);
            complete_request(&mut r, &t);
            assert!(r.request_kind.is_some());
        }
    }
}
