//! One stored object evaluated as kube-apiserver would admit it now: as
//! the CREATE that would make it again (server-set metadata and status
//! cleared), or as an UPDATE that leaves it as it is.

use crate::api::FailurePolicy;
use crate::dispatch::{AdmissionObserver, BindingChange, Outcome};
use crate::engine::Engine;
use crate::request::{AdmissionRequest, GroupVersionKind, GroupVersionResource, UserInfo};
use serde_json::{json, Value as Json};
use std::cell::RefCell;

/// The admission a stored object is evaluated as.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum AsOperation {
    /// The object created again now: most policies act on CREATE only.
    #[default]
    Create,
    /// An update that leaves the object as stored (`oldObject` = `object`).
    Update,
}

/// What the policies would do to one object.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Nothing would change.
    Unchanged,
    /// The object would be changed: by these bindings, with this patch (a
    /// JSON patch from the evaluated object to the mutated one).
    Change {
        /// Who would change what, in the order they would.
        changes: Vec<Change>,
        /// The JSON patch.
        patch: json_patch::Patch,
    },
    /// The request would be denied with upstream's message.
    Denied {
        /// HTTP status code.
        code: u16,
        /// Upstream's message.
        message: String,
        /// The policy and binding whose error denies it, when one does.
        cause: Option<(String, String)>,
        /// Changes of bindings before the denial (not applied).
        changes: Vec<Change>,
    },
    /// The object could not be evaluated.
    Error(String),
}

/// What one binding would change.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Change {
    /// The policy.
    pub policy: String,
    /// The binding.
    pub binding: String,
    /// Whether the binding is in monitor mode (its change is never applied).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub monitored: bool,
    /// Field paths set.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub set: Vec<String>,
    /// Field paths removed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<String>,
}

/// The metadata fields the API server sets, which a create does not carry.
const SERVER_SET_METADATA: [&str; 8] = [
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

/// `stored` as a create would carry it: server-set metadata and status
/// cleared.
pub fn as_created(stored: &Json) -> Json {
    let mut object = stored.clone();
    if let Some(members) = object.as_object_mut() {
        members.remove("status");
        if let Some(metadata) = members.get_mut("metadata").and_then(Json::as_object_mut) {
            for field in SERVER_SET_METADATA {
                metadata.remove(field);
            }
        }
    }
    object
}

/// The admission request that evaluates `stored` (of `resource`) as
/// `operation`, sent by `user`.
pub fn request_for(
    stored: &Json,
    resource: &GroupVersionResource,
    operation: AsOperation,
    user: &UserInfo,
) -> AdmissionRequest {
    let metadata = &stored["metadata"];
    let text = |v: &Json| v.as_str().unwrap_or_default().to_string();
    let api_version = text(&stored["apiVersion"]);
    let (group, version) = api_version
        .split_once('/')
        .unwrap_or(("", api_version.as_str()));
    let kind = GroupVersionKind {
        group: group.into(),
        version: version.into(),
        kind: text(&stored["kind"]),
    };
    let (operation, object, old_object, options) = match operation {
        AsOperation::Create => (
            "CREATE",
            as_created(stored),
            None,
            json!({"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}),
        ),
        AsOperation::Update => (
            "UPDATE",
            stored.clone(),
            Some(stored.clone()),
            json!({"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions"}),
        ),
    };
    AdmissionRequest {
        uid: format!("kmutate-scan-{}", text(&metadata["uid"])),
        request_kind: Some(kind.clone()),
        request_resource: Some(resource.clone()),
        kind,
        resource: resource.clone(),
        name: text(&metadata["name"]),
        namespace: text(&metadata["namespace"]),
        operation: operation.into(),
        user_info: user.clone(),
        object: Some(object),
        old_object,
        dry_run: Some(false),
        options: Some(options),
        ..AdmissionRequest::default()
    }
}

/// What the policies of `engine` would do to `stored` (of `resource`).
pub fn evaluate(
    engine: &Engine,
    stored: &Json,
    resource: &GroupVersionResource,
    operation: AsOperation,
    user: &UserInfo,
) -> Verdict {
    let request = request_for(stored, resource, operation, user);
    let observer = ChangeLog::default();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        engine.admit(&request, &observer)
    }));
    let (changes, cause) = (
        observer.changes.into_inner(),
        observer.denied_by.into_inner(),
    );
    match outcome {
        Err(_) => Verdict::Error("the evaluation panicked".into()),
        Ok(Outcome::Denied { code, message }) => Verdict::Denied {
            code,
            message,
            cause,
            changes,
        },
        Ok(Outcome::Admitted { object, .. }) => {
            let before = request.object.as_ref().unwrap_or(&Json::Null);
            let patch = crate::mutation::diff::diff(before, &object);
            if patch.0.is_empty() && changes.is_empty() {
                Verdict::Unchanged
            } else {
                Verdict::Change { changes, patch }
            }
        }
    }
}

/// Records each binding's change, and the first error that denies.
#[derive(Default)]
struct ChangeLog {
    changes: RefCell<Vec<Change>>,
    denied_by: RefCell<Option<(String, String)>>,
}

impl AdmissionObserver for ChangeLog {
    fn wants_changes(&self) -> bool {
        true
    }

    fn policy_error(&self, policy: &str, binding: &str, failure: FailurePolicy, _message: &str) {
        let mut denied_by = self.denied_by.borrow_mut();
        if failure == FailurePolicy::Fail && denied_by.is_none() {
            *denied_by = Some((policy.to_string(), binding.to_string()));
        }
    }

    fn binding_changed(&self, change: BindingChange<'_>) {
        self.changes.borrow_mut().push(Change {
            policy: change.policy.to_string(),
            binding: change.binding.to_string(),
            monitored: change.monitored,
            set: change.set,
            removed: change.removed,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authorizer::AlwaysDeny;
    use crate::engine::EngineSources;

    fn library() -> Engine {
        let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        Engine::load(
            &EngineSources {
                policies: vec![repo.join("policies")],
                bindings: vec![repo.join("bindings")],
                resources: vec![repo.join("examples/namespace.yaml")],
            },
            Box::new(AlwaysDeny),
        )
    }

    fn pods() -> GroupVersionResource {
        GroupVersionResource {
            group: String::new(),
            version: "v1".into(),
            resource: "pods".into(),
        }
    }

    /// A Pod as kube-apiserver stores it: defaulted, with server-set
    /// metadata and status.
    fn stored_pod() -> Json {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default", "uid": "u-1",
                "resourceVersion": "42", "creationTimestamp": "2026-12-06T10:00:00Z",
                "managedFields": [{"manager": "kubectl"}]},
            "spec": {"containers": [{"name": "app", "image": "nginx:1.27",
                "imagePullPolicy": "IfNotPresent"}],
                "serviceAccountName": "default"},
            "status": {"phase": "Pending"}})
    }

    #[test]
    fn a_create_carries_no_server_set_metadata_nor_status() {
        let created = as_created(&stored_pod());
        assert_eq!(
            created["metadata"],
            json!({"name": "web", "namespace": "default"})
        );
        assert!(created.get("status").is_none());
        let request = request_for(
            &stored_pod(),
            &pods(),
            AsOperation::Create,
            &UserInfo::default(),
        );
        assert_eq!(request.operation, "CREATE");
        assert_eq!(request.old_object, None);
        assert_eq!(
            (request.namespace.as_str(), request.name.as_str()),
            ("default", "web")
        );
        let update = request_for(
            &stored_pod(),
            &pods(),
            AsOperation::Update,
            &UserInfo::default(),
        );
        assert_eq!(update.old_object.as_ref(), Some(&stored_pod()));
        assert_eq!(update.object.as_ref(), Some(&stored_pod()));
    }

    // The library's Pod policies act on CREATE only: as an update, the
    // stored Pod is left alone; as a create it gets their defaults.
    #[test]
    fn the_library_changes_a_pod_created_again_and_leaves_its_update_alone() {
        let engine = library();
        let user = UserInfo::default();
        let update = evaluate(&engine, &stored_pod(), &pods(), AsOperation::Update, &user);
        assert_eq!(update, Verdict::Unchanged);
        let Verdict::Change { changes, patch } =
            evaluate(&engine, &stored_pod(), &pods(), AsOperation::Create, &user)
        else {
            panic!("the library changes a Pod without requests");
        };
        let policies: Vec<&str> = changes.iter().map(|c| c.policy.as_str()).collect();
        assert!(
            policies.contains(&"defaults-resource-requests"),
            "{policies:?}"
        );
        let resources = changes
            .iter()
            .find(|c| c.policy == "defaults-resource-requests")
            .unwrap();
        assert!(
            resources
                .set
                .contains(&"spec.containers[0].resources.requests.cpu".to_string()),
            "{resources:?}"
        );
        let patch = serde_json::to_value(&patch).unwrap();
        assert!(
            patch
                .as_array()
                .unwrap()
                .iter()
                .any(|op| op["path"] == "/spec/containers/0/resources"),
            "{patch}"
        );
    }
}
