//! Telling a policy's author what kmutate serves of it, and why: a `Ready`
//! status condition on kmutate.dev policies and bindings (their CRDs have
//! a status subresource), a Warning Event on built-in
//! admissionregistration.k8s.io ones that are not ready (whose status
//! kmutate does not own). Reports are sent in the
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

/// Attempts at writing a Ready condition, and the pause after the first
/// failure (doubled after each).
const STATUS_ATTEMPTS: u32 = 5;
const STATUS_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(200);

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

/// Why an object is (not) ready, the condition's `reason`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// Compiled and served.
    Compiled,
    /// The object cannot be read (the API would refuse it): not served.
    Invalid,
    /// The policy does not compile: served, each invocation failing under
    /// its failure policy.
    CompileError,
    /// The binding's policy does not compile (served as above).
    PolicyCompileError,
    /// The binding's policy cannot be read: nothing served.
    PolicyInvalid,
    /// The binding's policy does not exist: nothing served.
    PolicyNotFound,
}

impl Reason {
    /// The condition's `reason` text.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Compiled => "Compiled",
            Reason::Invalid => "Invalid",
            Reason::CompileError => "CompileError",
            Reason::PolicyCompileError => "PolicyCompileError",
            Reason::PolicyInvalid => "PolicyInvalid",
            Reason::PolicyNotFound => "PolicyNotFound",
        }
    }
}

/// What kmutate makes of one policy or binding: its `Ready` condition and
/// the load problem it adds, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// `Ready` is True.
    pub ready: bool,
    /// The condition's reason.
    pub reason: Reason,
    /// The condition's message: what kmutate serves, and why.
    pub message: String,
    /// The load problem (log line, metric) this object adds.
    pub problem: Option<String>,
}

impl Verdict {
    /// A compiled policy, served.
    pub fn compiled() -> Verdict {
        Verdict {
            ready: true,
            reason: Reason::Compiled,
            message: "kmutate serves the policy".into(),
            problem: None,
        }
    }

    /// An object that cannot be read, not served; `problem` says why.
    pub fn invalid(problem: String) -> Verdict {
        Verdict {
            ready: false,
            reason: Reason::Invalid,
            message: problem.clone(),
            problem: Some(problem),
        }
    }

    /// A policy that does not compile, served failing; `problem` says so.
    pub fn does_not_compile(problem: String) -> Verdict {
        Verdict {
            ready: false,
            reason: Reason::CompileError,
            message: problem.clone(),
            problem: Some(problem),
        }
    }

    /// A readable binding of `policy`, whose verdict is `reason` (one of
    /// the policy reasons; the load problem of a missing or unreadable
    /// policy is counted once, by the compiler, not here).
    pub fn binding_of(policy: &str, reason: Reason) -> Verdict {
        let message = match reason {
            Reason::Compiled => format!("kmutate serves policy {policy:?} with this binding"),
            Reason::PolicyCompileError => format!(
                "policy {policy:?} does not compile: served with this binding, and every \
                 invocation fails under the policy's failurePolicy (see its condition)"
            ),
            Reason::PolicyInvalid => {
                format!("policy {policy:?} is invalid and not served: this binding does nothing")
            }
            _ => format!("policy {policy:?} does not exist: this binding does nothing"),
        };
        Verdict {
            ready: reason == Reason::Compiled,
            reason,
            message,
            problem: None,
        }
    }
}

/// The `Ready` condition for a verdict.
pub fn ready_condition(verdict: &Verdict, generation: Option<i64>) -> Value {
    let status = if verdict.ready { "True" } else { "False" };
    let mut c = json!({"type": READY, "status": status, "reason": verdict.reason.as_str(),
        "message": verdict.message,
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
    /// kmutate.dev object, an Event for a built-in one that is not ready.
    pub fn verdict(&self, object: &Value, plural: &str, verdict: &Verdict) {
        let api_version = text(object, "/apiVersion").to_string();
        let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
        let kind = text(object, "/kind").to_string();
        let name = text(object, "/metadata/name").to_string();
        if group == KMUTATE_GROUP {
            let generation = object
                .pointer("/metadata/generation")
                .and_then(Value::as_i64);
            let condition = ready_condition(verdict, generation);
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
                // Retried: the object's next version, the only other
                // occasion to write it, may be long in coming.
                let mut pause = STATUS_RETRY_PAUSE;
                for attempt in 1..=STATUS_ATTEMPTS {
                    let written = api
                        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                        .await;
                    match written {
                        Ok(_) => return,
                        // Gone: nothing left to report on.
                        Err(kube::Error::Api(e)) if e.code == 404 => return,
                        Err(e) if attempt == STATUS_ATTEMPTS => {
                            tracing::warn!(policy = %name, error = %e, "setting the Ready condition failed");
                        }
                        Err(e) => {
                            tracing::debug!(policy = %name, error = %e, attempt, "setting the Ready condition failed; retrying");
                            tokio::time::sleep(pause).await;
                            pause *= 2;
                        }
                    }
                }
            });
        } else if !verdict.ready {
            let now = k8s_openapi::jiff::Timestamp::now().to_string();
            let event = json!({
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": format!("{name}."), "namespace": EVENT_NAMESPACE},
                "involvedObject": {"apiVersion": api_version, "kind": kind, "name": name,
                    "uid": text(object, "/metadata/uid"),
                    "resourceVersion": text(object, "/metadata/resourceVersion")},
                "reason": verdict.reason.as_str(),
                "message": format!("kmutate: {}", verdict.message),
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
