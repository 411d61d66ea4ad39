//! `scan --fix`: a change written back to the object it was found on, as a
//! JSON patch that first tests the resourceVersion read, so that a write
//! made since is never overwritten (the object is read and evaluated again
//! instead, a bounded number of times); where the API server refuses the
//! change in place (a Pod's spec is immutable), the controller that owns
//! the object is named, and can be restarted so that its new objects are
//! mutated at creation.

use super::discover::Target;
use super::evaluate::{self, Verdict};
use super::{api_message, ScanOptions};
use crate::engine::Engine;
use kube::api::{DynamicObject, Patch, PatchParams};
use serde_json::{json, Value as Json};
use std::time::Duration;

/// How many times a change is evaluated again after a concurrent write.
pub const RETRIES: usize = 3;

/// The kinds a restart re-creates the objects of (`kubectl rollout restart`).
const RESTARTABLE: [&str; 3] = ["Deployment", "StatefulSet", "DaemonSet"];

/// The kinds an owner chain stops at: the workload a user manages (a Job
/// may belong to a CronJob, a ReplicaSet to a Deployment).
const TOP_WORKLOADS: [&str; 4] = ["Deployment", "StatefulSet", "DaemonSet", "CronJob"];

/// What writing a change back did.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "result", rename_all = "camelCase")]
pub enum FixOutcome {
    /// Written (or, in a server-side dry run, accepted).
    Fixed {
        /// Whether only as a server-side dry run.
        #[serde(rename = "dryRun", skip_serializing_if = "std::ops::Not::not")]
        dry_run: bool,
        /// How many times the object was read again after a concurrent write.
        #[serde(skip_serializing_if = "is_zero")]
        retries: usize,
    },
    /// Read again, the object needs no change any more (or is gone).
    NothingToDo {
        /// Why.
        reason: String,
    },
    /// Written concurrently every time it was tried.
    Conflict {
        /// The last refusal.
        message: String,
    },
    /// The API server refuses the change in place.
    Refused {
        /// Its message.
        message: String,
        /// The controller that owns the object (`Kind namespace/name`).
        #[serde(skip_serializing_if = "Option::is_none")]
        owner: Option<Owner>,
    },
    /// The write failed otherwise.
    Failed {
        /// Why.
        message: String,
    },
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The workload that owns an object.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Owner {
    /// `apiVersion`.
    pub api_version: String,
    /// `kind`.
    pub kind: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// Writes changes back, at most `qps` writes a second.
pub struct Fixer {
    client: kube::Client,
    engine: std::sync::Arc<Engine>,
    options: ScanOptions,
    served: Vec<Target>,
    dry_run: bool,
    tick: tokio::time::Interval,
}

impl Fixer {
    /// A fixer writing through `client` (`dry_run`: server-side dry runs
    /// only); `served` maps owners' kinds to their resources.
    pub fn new(
        client: kube::Client,
        engine: std::sync::Arc<Engine>,
        options: ScanOptions,
        served: Vec<Target>,
        dry_run: bool,
        qps: f64,
    ) -> Fixer {
        let period = Duration::from_secs_f64(1.0 / qps.max(0.01));
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Fixer {
            client,
            engine,
            options,
            served,
            dry_run,
            tick,
        }
    }

    /// Writes `patch` (found on `stored`, of `target`) back.
    pub async fn fix(
        &mut self,
        target: &Target,
        stored: &Json,
        patch: &json_patch::Patch,
    ) -> FixOutcome {
        let namespace = stored["metadata"]["namespace"].as_str();
        let name = stored["metadata"]["name"].as_str().unwrap_or_default();
        let mut version = resource_version(stored);
        let mut patch = patch.clone();
        for retries in 0..=RETRIES {
            self.tick.tick().await;
            let refusal = match self.write(target, namespace, name, &version, &patch).await {
                Ok(()) => {
                    return FixOutcome::Fixed {
                        dry_run: self.dry_run,
                        retries,
                    }
                }
                Err(Refusal::Other(message)) => return FixOutcome::Failed { message },
                Err(refusal) => refusal,
            };
            let fresh = match self.get(target, namespace, name).await {
                Ok(Some(fresh)) => fresh,
                Ok(None) => {
                    return FixOutcome::NothingToDo {
                        reason: "deleted meanwhile".into(),
                    }
                }
                Err(e) => {
                    return FixOutcome::Failed {
                        message: api_message(&e),
                    }
                }
            };
            // A failed resourceVersion test and an immutable field both
            // answer 422 with no word on which; the version read again tells.
            let moved = resource_version(&fresh) != version;
            match refusal {
                Refusal::Invalid(message) if !moved => {
                    let owner = self.owner_of(stored).await;
                    return FixOutcome::Refused { message, owner };
                }
                Refusal::Conflict(message) | Refusal::Invalid(message) if retries == RETRIES => {
                    return FixOutcome::Conflict { message }
                }
                _ => {}
            }
            // Written meanwhile: evaluate what is stored now.
            match self.evaluate(target, &fresh) {
                Verdict::Change { patch: p, .. } if !p.0.is_empty() => patch = p,
                Verdict::Change { .. } | Verdict::Unchanged => {
                    return FixOutcome::NothingToDo {
                        reason: "as the policies make it since a concurrent write".into(),
                    }
                }
                Verdict::Denied { message, .. } | Verdict::Error(message) => {
                    return FixOutcome::Failed { message }
                }
            }
            version = resource_version(&fresh);
        }
        FixOutcome::Failed {
            message: "gave up".into(),
        }
    }

    fn evaluate(&self, target: &Target, stored: &Json) -> Verdict {
        let resource = target.gvr();
        let mut stored = stored.clone();
        stored["apiVersion"] = json!(target.resource.api_version);
        stored["kind"] = json!(target.resource.kind);
        let (operation, user) = (self.options.operation, &self.options.user);
        let run = || evaluate::evaluate(&self.engine, &stored, &resource, operation, user);
        // `authorizer` checks wait on SubjectAccessReviews this runtime runs.
        match tokio::runtime::Handle::current().runtime_flavor() {
            tokio::runtime::RuntimeFlavor::MultiThread => tokio::task::block_in_place(run),
            _ => run(),
        }
    }

    /// One JSON patch: the resourceVersion test, then the change.
    async fn write(
        &self,
        target: &Target,
        namespace: Option<&str>,
        name: &str,
        version: &str,
        patch: &json_patch::Patch,
    ) -> Result<(), Refusal> {
        let mut ops =
            vec![json!({"op": "test", "path": "/metadata/resourceVersion", "value": version})];
        ops.extend(
            patch
                .0
                .iter()
                .map(|op| serde_json::to_value(op).unwrap_or(Json::Null)),
        );
        let tested: json_patch::Patch =
            serde_json::from_value(Json::Array(ops)).map_err(|e| Refusal::Other(e.to_string()))?;
        let api = self.api(target, namespace);
        let params = PatchParams {
            dry_run: self.dry_run,
            ..PatchParams::default()
        };
        match api.patch(name, &params, &Patch::Json::<()>(tested)).await {
            Ok(_) => Ok(()),
            Err(e) => Err(Refusal::of(&e)),
        }
    }

    async fn get(
        &self,
        target: &Target,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Json>, kube::Error> {
        let api = self.api(target, namespace);
        Ok(api
            .get_opt(name)
            .await?
            .and_then(|o| serde_json::to_value(o).ok()))
    }

    fn api(&self, target: &Target, namespace: Option<&str>) -> kube::Api<DynamicObject> {
        match namespace.filter(|_| target.namespaced) {
            Some(ns) => kube::Api::namespaced_with(self.client.clone(), ns, &target.resource),
            None => kube::Api::all_with(self.client.clone(), &target.resource),
        }
    }

    /// The workload up `object`'s controller owner references, if any:
    /// Pod, ReplicaSet, Deployment; Pod, Job, CronJob.
    pub async fn owner_of(&self, object: &Json) -> Option<Owner> {
        let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
        let mut current = object.clone();
        let mut last = None;
        for _ in 0..4 {
            let Some(reference) = controller_reference(&current) else {
                break;
            };
            let text = |field: &str| reference[field].as_str().unwrap_or_default().to_string();
            let owner = Owner {
                api_version: text("apiVersion"),
                kind: text("kind"),
                namespace: namespace.to_string(),
                name: text("name"),
            };
            let top = TOP_WORKLOADS.contains(&owner.kind.as_str());
            let target = self.served_kind(&owner.api_version, &owner.kind).cloned();
            last = Some(owner);
            let (false, Some(target)) = (top, target) else {
                break;
            };
            let name = last.as_ref().map(|o| o.name.clone()).unwrap_or_default();
            match self.get(&target, Some(namespace), &name).await {
                Ok(Some(next)) => current = next,
                _ => break,
            }
        }
        last
    }

    fn served_kind(&self, api_version: &str, kind: &str) -> Option<&Target> {
        self.served
            .iter()
            .find(|t| t.resource.api_version == api_version && t.resource.kind == kind)
    }

    /// Restarts `owner` as `kubectl rollout restart` does: its Pod
    /// template gets a new `kubectl.kubernetes.io/restartedAt` annotation.
    pub async fn restart(&mut self, owner: &Owner) -> Result<(), String> {
        if !RESTARTABLE.contains(&owner.kind.as_str()) {
            return Err(format!(
                "a {} cannot be restarted (only a Deployment, StatefulSet or DaemonSet)",
                owner.kind
            ));
        }
        let target = self
            .served_kind(&owner.api_version, &owner.kind)
            .ok_or_else(|| format!("the server does not serve {}", owner.api_version))?
            .clone();
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let patch = json!({"spec": {"template": {"metadata": {"annotations": {
            "kubectl.kubernetes.io/restartedAt": now}}}}});
        let params = PatchParams {
            dry_run: self.dry_run,
            ..PatchParams::default()
        };
        self.tick.tick().await;
        self.api(&target, Some(&owner.namespace))
            .patch(&owner.name, &params, &Patch::Merge(&patch))
            .await
            .map(drop)
            .map_err(|e| api_message(&e))
    }
}

/// Why a write was refused.
enum Refusal {
    /// The object changed since it was read (409).
    Conflict(String),
    /// The change is invalid (422): an immutable field, or a failed test.
    Invalid(String),
    /// Anything else.
    Other(String),
}

impl Refusal {
    fn of(e: &kube::Error) -> Refusal {
        let message = api_message(e);
        match e {
            kube::Error::Api(s) if s.code == 409 => Refusal::Conflict(message),
            kube::Error::Api(s) if s.code == 422 => Refusal::Invalid(message),
            _ => Refusal::Other(message),
        }
    }
}

fn resource_version(object: &Json) -> String {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The owner reference marked `controller`, else the only one.
fn controller_reference(object: &Json) -> Option<&Json> {
    let references = object["metadata"]["ownerReferences"].as_array()?;
    references
        .iter()
        .find(|r| r["controller"] == true)
        .or_else(|| (references.len() == 1).then(|| &references[0]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_controller_reference_is_the_marked_one_else_the_only_one() {
        let marked = json!({"metadata": {"ownerReferences": [
            {"kind": "A", "name": "a"}, {"kind": "B", "name": "b", "controller": true}]}});
        assert_eq!(controller_reference(&marked).unwrap()["kind"], "B");
        let only = json!({"metadata": {"ownerReferences": [{"kind": "A", "name": "a"}]}});
        assert_eq!(controller_reference(&only).unwrap()["kind"], "A");
        let two = json!({"metadata": {"ownerReferences": [{"kind": "A"}, {"kind": "B"}]}});
        assert!(controller_reference(&two).is_none());
        assert!(controller_reference(&json!({"metadata": {}})).is_none());
    }
}
