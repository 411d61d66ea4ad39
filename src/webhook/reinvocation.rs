//! Telling kube-apiserver's reinvocation of the webhook from a new request.
//!
//! kube-apiserver calls a webhook registered with `reinvocationPolicy:
//! IfNeeded` a second time when the object changed after its first call:
//! when a later webhook changed it, and also when an in-tree plugin did in
//! the chain's reinvocation pass, which runs whenever a webhook changed the
//! object (the ServiceAccount plugin mounts its token into a container
//! kmutate added; DefaultTolerationSeconds gives back the tolerations a
//! policy removed). Upstream's plugin then runs only its `IfNeeded`
//! policies again; a webhook that ran every policy again would apply a
//! `Never` policy twice (a second sidecar appended by a JSON patch).
//!
//! The second call carries nothing that says it is one (each call has a
//! uid of its own), so the webhook remembers, for a short time, what it
//! answered to each request: a request of the same operation, resource,
//! object name, user and stored version whose object still holds
//! everything that answer held is the reinvocation of it.

use crate::request::AdmissionRequest;
use serde_json::Value as Json;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long an answer is remembered: kube-apiserver reinvokes within the
/// same admission, within its webhook timeouts (at most 30 s).
const REMEMBERED_FOR: Duration = Duration::from_secs(30);

/// Most answers remembered at once; the oldest go first. A reinvocation
/// follows its first call within milliseconds, so even a webhook under
/// thousands of requests a second finds it.
const MOST_REMEMBERED: usize = 1024;

/// The objects kmutate admitted changed, by request identity.
#[derive(Default)]
pub struct ReinvocationMemory {
    answers: Mutex<HashMap<u64, (Instant, Arc<Json>)>>,
}

/// What kube-apiserver sends alike in a request and its reinvocation
/// (operation, resource, namespace, name or generateName, the stored
/// version, user, dry run), hashed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RequestIdentity(u64);

impl RequestIdentity {
    /// The identity of `request`.
    pub fn of(request: &AdmissionRequest) -> RequestIdentity {
        RequestIdentity(identity(request))
    }
}

impl ReinvocationMemory {
    /// Whether a request of identity `id` and object `object` is
    /// kube-apiserver's reinvocation of a request kmutate answered with a
    /// change in the last 30 s.
    pub fn is_reinvocation(&self, id: RequestIdentity, object: Option<&Json>) -> bool {
        let Some(object) = object else {
            return false;
        };
        let answered = {
            let answers = self.answers.lock().unwrap_or_else(|e| e.into_inner());
            match answers.get(&id.0) {
                Some((at, answered)) if at.elapsed() < REMEMBERED_FOR => answered.clone(),
                _ => return false,
            }
        };
        holds(object, &answered)
    }

    /// Remembers `admitted`, the object kmutate changed the object of the
    /// request of identity `id` into.
    pub fn remember(&self, id: RequestIdentity, admitted: Arc<Json>) {
        let now = Instant::now();
        let mut answers = self.answers.lock().unwrap_or_else(|e| e.into_inner());
        if answers.len() >= MOST_REMEMBERED {
            answers.retain(|_, (at, _)| now.duration_since(*at) < REMEMBERED_FOR);
            if answers.len() >= MOST_REMEMBERED {
                if let Some(oldest) = answers
                    .iter()
                    .min_by_key(|(_, (at, _))| *at)
                    .map(|(k, _)| *k)
                {
                    answers.remove(&oldest);
                }
            }
        }
        answers.insert(id.0, (now, admitted));
    }
}

fn identity(request: &AdmissionRequest) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let object_meta = |o: &Option<Json>, field: &str| {
        o.as_ref()
            .and_then(|o| o.get("metadata"))
            .and_then(|m| m.get(field))
            .and_then(Json::as_str)
            .unwrap_or_default()
            .to_string()
    };
    (
        &request.operation,
        &request.resource.group,
        &request.resource.version,
        &request.resource.resource,
        &request.sub_resource,
        &request.namespace,
        &request.name,
        object_meta(&request.object, "generateName"),
        object_meta(&request.old_object, "resourceVersion"),
        &request.user_info.username,
        &request.user_info.uid,
        request.dry_run,
    )
        .hash(&mut h);
    h.finish()
}

/// Whether `object` still holds everything `answered` held: every member
/// (a later plugin may add members, and items at the end of a list, and
/// drops what is empty: kube-apiserver's typed round trip).
fn holds(object: &Json, answered: &Json) -> bool {
    match (object, answered) {
        (Json::Object(o), Json::Object(a)) => a.iter().all(|(k, av)| match o.get(k) {
            Some(ov) => holds(ov, av),
            None => is_empty(av),
        }),
        (Json::Array(o), Json::Array(a)) => {
            o.len() >= a.len() && o.iter().zip(a).all(|(ov, av)| holds(ov, av))
        }
        (Json::Number(o), Json::Number(a)) => o.as_f64() == a.as_f64(),
        _ => object == answered,
    }
}

/// What kube-apiserver's typed round trip may leave out.
fn is_empty(v: &Json) -> bool {
    match v {
        Json::Null => true,
        Json::Bool(b) => !b,
        Json::Number(n) => n.as_f64() == Some(0.0),
        Json::String(s) => s.is_empty(),
        Json::Array(a) => a.is_empty(),
        Json::Object(m) => m.is_empty(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn seen(memory: &ReinvocationMemory, request: &AdmissionRequest) -> bool {
        memory.is_reinvocation(RequestIdentity::of(request), request.object.as_ref())
    }

    fn pod_create(object: Json) -> AdmissionRequest {
        AdmissionRequest {
            operation: "CREATE".into(),
            namespace: "default".into(),
            name: "web".into(),
            object: Some(object),
            ..Default::default()
        }
    }

    #[test]
    fn the_answer_with_what_later_plugins_added_is_a_reinvocation() {
        let memory = ReinvocationMemory::default();
        let sent = json!({"spec": {"containers": [{"name": "app", "image": "nginx"}]}});
        let answered = json!({"spec": {"containers": [{"name": "app", "image": "nginx"},
            {"name": "sidecar", "image": "busybox", "resources": {}}]}});
        assert!(!seen(&memory, &pod_create(sent.clone())));
        memory.remember(
            RequestIdentity::of(&pod_create(sent.clone())),
            Arc::new(answered),
        );
        // The apiserver defaulted the sidecar and the ServiceAccount plugin
        // mounted its token into it (the chain's reinvocation pass).
        let reinvoked = json!({"spec": {"containers": [
            {"name": "app", "image": "nginx", "imagePullPolicy": "Always"},
            {"name": "sidecar", "image": "busybox", "imagePullPolicy": "Always",
                "volumeMounts": [{"name": "kube-api-access-x1y2z", "mountPath": "/var/run"}]}]}});
        assert!(seen(&memory, &pod_create(reinvoked)));
        // The same request again, as a client or a controller sends it.
        assert!(!seen(&memory, &pod_create(sent)));
    }

    #[test]
    fn another_object_user_or_stored_version_is_a_new_request() {
        let memory = ReinvocationMemory::default();
        let answered = json!({"metadata": {"labels": {"a": "b"}}});
        memory.remember(
            RequestIdentity::of(&pod_create(json!({}))),
            Arc::new(answered.clone()),
        );
        let mut other_name = pod_create(answered.clone());
        other_name.name = "api".into();
        assert!(!seen(&memory, &other_name));
        let mut other_user = pod_create(answered.clone());
        other_user.user_info.username = "bob".into();
        assert!(!seen(&memory, &other_user));
        let mut update = pod_create(answered.clone());
        update.operation = "UPDATE".into();
        assert!(!seen(&memory, &update));
        // A label the answer set, changed since: not the answer any more.
        assert!(!seen(
            &memory,
            &pod_create(json!({"metadata": {"labels": {"a": "c"}}}))
        ));
        assert!(seen(&memory, &pod_create(answered)));
    }
}
