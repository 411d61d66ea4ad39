//! Telling a policy's author why kmutate skips it: a `Ready` status
//! condition on kmutate.dev policies (their CRDs have a status
//! subresource), a Warning Event on built-in admissionregistration.k8s.io
//! ones (whose status kmutate does not own). Reports are sent in the
//! background; a failure to send is logged at debug level and otherwise
//! ignored, since the log line and the metric already carry the problem.

use super::api::KMUTATE_GROUP;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::Client;
use serde_json::{json, Value};

/// The condition type kmutate sets on kmutate.dev policies.
pub const READY: &str = "Ready";

/// Where Events about cluster-scoped objects go (as kubectl looks for them).
const EVENT_NAMESPACE: &str = "default";

/// Reports policy verdicts through `client`.
#[derive(Clone)]
pub struct Reporter {
    client: Client,
}

impl std::fmt::Debug for Reporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reporter").finish_non_exhaustive()
    }
}

fn text<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The `Ready` condition for a verdict (`problems` empty: compiled).
pub fn ready_condition(problems: &[String], generation: Option<i64>) -> Value {
    let (status, reason, message) = if problems.is_empty() {
        ("True", "Compiled", "kmutate serves the policy".to_string())
    } else {
        ("False", "Invalid", problems.join("; "))
    };
    let mut c = json!({"type": READY, "status": status, "reason": reason, "message": message,
        "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string()});
    if let Some(g) = generation {
        c["observedGeneration"] = json!(g);
    }
    c
}

/// Whether `object` already carries an equivalent `Ready` condition.
fn has_condition(object: &Value, wanted: &Value) -> bool {
    object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| {
            c["type"] == READY
                && ["status", "reason", "message", "observedGeneration"]
                    .iter()
                    .all(|k| c.get(*k) == wanted.get(*k))
        })
}

impl Reporter {
    /// A reporter through `client`.
    pub fn new(client: Client) -> Reporter {
        Reporter { client }
    }

    /// Reports a policy's (or binding's) verdict: a status condition on a
    /// kmutate.dev object, an Event for a problem of a built-in one.
    pub fn verdict(&self, object: &Value, plural: &str, problems: &[String]) {
        let api_version = text(object, "/apiVersion").to_string();
        let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
        let kind = text(object, "/kind").to_string();
        let name = text(object, "/metadata/name").to_string();
        if group == KMUTATE_GROUP {
            let generation = object
                .pointer("/metadata/generation")
                .and_then(Value::as_i64);
            let condition = ready_condition(problems, generation);
            if has_condition(object, &condition) {
                return;
            }
            let resource = ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(group, version, &kind),
                plural,
            );
            let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
            let mut status = json!({"status": {"conditions": [condition]}});
            if let Some(g) = generation {
                status["status"]["observedGeneration"] = json!(g);
            }
            tokio::spawn(async move {
                if let Err(e) = api
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                    .await
                {
                    tracing::debug!(policy = %name, error = %e, "setting the Ready condition failed");
                }
            });
        } else if !problems.is_empty() {
            let now = k8s_openapi::jiff::Timestamp::now().to_string();
            let event = json!({
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": format!("{name}."), "namespace": EVENT_NAMESPACE},
                "involvedObject": {"apiVersion": api_version, "kind": kind, "name": name,
                    "uid": text(object, "/metadata/uid"),
                    "resourceVersion": text(object, "/metadata/resourceVersion")},
                "reason": "PolicySkipped",
                "message": format!("kmutate skips this object: {}", problems.join("; ")),
                "type": "Warning",
                "source": {"component": "kmutate"},
                "reportingComponent": "kmutate",
                "reportingInstance": std::env::var("HOSTNAME").unwrap_or_else(|_| "kmutate".into()),
                "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            });
            let resource = ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("", "v1", "Event"),
                "events",
            );
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.client.clone(), EVENT_NAMESPACE, &resource);
            tokio::spawn(async move {
                let Ok(event) = serde_json::from_value::<DynamicObject>(event) else {
                    return;
                };
                if let Err(e) = api.create(&PostParams::default(), &event).await {
                    tracing::debug!(policy = %name, error = %e, "recording the Event failed");
                }
            });
        }
    }
}
