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
//!
//! The first call already ran kmutate's own reinvocation pass (the
//! apiserver may not call again: it does only when another plugin changed
//! the object), so the second call is not run on its object as sent: that
//! would reinvoke each `IfNeeded` policy a second time (a sidecar appended
//! by one appended twice more). The built-in plugin's chain reinvokes each
//! once, on the object its first pass made with what the other plugins
//! changed since: the webhook runs its `IfNeeded` policies once on that
//! ([`rebase`]), and answers the change from the object as sent.

use crate::request::AdmissionRequest;
use serde_json::Value as Json;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long an answer is remembered: kube-apiserver reinvokes within the
/// same admission, within its webhook timeouts (at most 30 s).
const REMEMBERED_FOR: Duration = Duration::from_secs(30);

/// Most answers remembered at once; the oldest go first. A reinvocation
/// follows its first call within milliseconds, so even a webhook under
/// thousands of requests a second finds it.
const MOST_REMEMBERED: usize = 1024;

/// Most answers remembered of one request identity, the newest kept: a new
/// request of that identity is compared with each (a few microseconds in
/// all). A controller creating its Pods as one user at its client's rate
/// (kube-controller-manager's 20 a second by default) has 64 answered in
/// the last three seconds, and a reinvocation follows its first call
/// within milliseconds.
const MOST_OF_ONE_IDENTITY: usize = 64;

/// The objects kmutate admitted changed, by request identity.
#[derive(Default)]
pub struct ReinvocationMemory {
    answers: Mutex<Answers>,
}

/// The answers remembered: several a request identity, since concurrent
/// requests can share one (a ReplicaSet's Pods: one user, one
/// generateName) and differ only in what other plugins set (each Pod's
/// token volume has a name of its own).
#[derive(Default)]
struct Answers {
    by_identity: HashMap<u64, Vec<Entry>>,
    /// The answer ids held, so that an answer a peer sends twice (as it
    /// is made and again as the peer stops) is held once.
    ids: std::collections::HashSet<u64>,
    count: usize,
    /// Answers just forgotten, for the caller to drop outside the lock
    /// (an object is hundreds of allocations).
    forgotten: Vec<Answered>,
}

/// One answer held: when it was made, its id (unique among replicas),
/// the answer.
type Entry = (Instant, u64, Answered);

impl Answers {
    fn insert(&mut self, identity: u64, at: Instant, answer: u64, answered: Answered) {
        if !self.ids.insert(answer) {
            return;
        }
        // The same answer again as the newest held (a request sent again as
        // it was): that one is renewed, nothing is forgotten.
        if let Some(newest) = self
            .by_identity
            .get_mut(&identity)
            .and_then(|answers| answers.last_mut())
            .filter(|(_, _, held)| {
                held.object == answered.object && held.first_pass == answered.first_pass
            })
        {
            self.ids.remove(&newest.1);
            *newest = (at, answer, answered);
            return;
        }
        if self.count >= MOST_REMEMBERED {
            self.forget_expired();
        }
        if self.count >= MOST_REMEMBERED {
            self.forget_oldest();
        }
        let answers = self.by_identity.entry(identity).or_default();
        if answers.len() >= MOST_OF_ONE_IDENTITY {
            if let Some(oldest) = (0..answers.len()).min_by_key(|&i| answers[i].0) {
                let (_, gone, answered) = answers.remove(oldest);
                self.ids.remove(&gone);
                self.forgotten.push(answered);
                self.count -= 1;
            }
        }
        answers.push((at, answer, answered));
        self.count += 1;
    }

    fn forget_expired(&mut self) {
        let (ids, forgotten) = (&mut self.ids, &mut self.forgotten);
        self.by_identity.retain(|_, answers| {
            let (kept, gone): (Vec<Entry>, Vec<Entry>) = std::mem::take(answers)
                .into_iter()
                .partition(|(at, _, _)| at.elapsed() < REMEMBERED_FOR);
            for (_, answer, answered) in gone {
                ids.remove(&answer);
                forgotten.push(answered);
            }
            *answers = kept;
            !answers.is_empty()
        });
        self.count = self.by_identity.values().map(Vec::len).sum();
    }

    fn forget_oldest(&mut self) {
        let oldest = self
            .by_identity
            .iter()
            .flat_map(|(id, answers)| {
                answers
                    .iter()
                    .enumerate()
                    .map(move |(i, (at, _, _))| (*at, *id, i))
            })
            .min();
        if let Some((_, id, i)) = oldest {
            if let Some(answers) = self.by_identity.get_mut(&id) {
                let (_, answer, answered) = answers.remove(i);
                self.ids.remove(&answer);
                self.forgotten.push(answered);
                if answers.is_empty() {
                    self.by_identity.remove(&id);
                }
            }
            self.count -= 1;
        }
    }
}

/// A new answer id: random in each process, then counted up.
fn next_answer_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: std::sync::OnceLock<AtomicU64> = std::sync::OnceLock::new();
    NEXT.get_or_init(|| {
        let random = std::collections::hash_map::RandomState::new();
        AtomicU64::new(random.hash_one(std::process::id()))
    })
    .fetch_add(1, Ordering::Relaxed)
}

/// What kmutate answered a request with, its objects kept as JSON text:
/// up to 64 answers of one request identity are held, and a tree of
/// hundreds of allocations dropped when its answer is forgotten, cold in
/// the cache 64 requests later, cost more than writing the text; the text
/// is read again only for a reinvocation.
#[derive(Clone, Debug)]
pub struct Answered {
    /// The object kmutate admitted (changed), as JSON text.
    pub object: Arc<str>,
    /// The object its first pass made, where its own reinvocation pass
    /// ran after, as JSON text.
    pub first_pass: Option<Arc<str>>,
    /// One value the answer set, checked before the whole object.
    pub witness: Option<Witness>,
}

impl Answered {
    /// The answer that admitted `admitted` with `patch` (RFC 6902 JSON),
    /// `first_pass` what its first pass made when its own reinvocation
    /// pass ran after.
    pub fn new(admitted: &Json, first_pass: Option<&Json>, patch: Option<&[u8]>) -> Answered {
        // serde_json's own writer: through `Display` it costs twice as much.
        let text = |v: &Json| {
            let bytes = serde_json::to_vec(v).unwrap_or_default();
            Arc::<str>::from(String::from_utf8(bytes).unwrap_or_default())
        };
        Answered {
            object: text(admitted),
            first_pass: first_pass.map(text),
            witness: patch.and_then(|p| Witness::find(p, admitted)),
        }
    }

    /// The admitted object (null where its text does not read, which
    /// [`Answered::new`] never writes).
    pub fn object(&self) -> Json {
        serde_json::from_str(&self.object).unwrap_or(Json::Null)
    }

    /// What its first pass made, when its own reinvocation pass ran after.
    pub fn first_pass(&self) -> Option<Json> {
        self.first_pass
            .as_deref()
            .and_then(|t| serde_json::from_str(t).ok())
    }
}

/// Where kmutate's answer set a value (the first its patch adds or
/// replaces that the admitted object still holds, not empty): a
/// reinvocation holds that value, a new request of the same identity seldom
/// does, so it is checked before the whole object (a pointer lookup, not a
/// walk).
#[derive(Clone, Debug, PartialEq)]
pub struct Witness {
    /// Its JSON pointer.
    pub path: String,
    /// The pointer's tokens, unescaped once.
    tokens: Vec<String>,
    /// The admitted object's value there.
    value: Json,
}

/// What [`Witness::find`] reads of a patch operation; its value is skipped.
#[derive(serde::Deserialize)]
struct PatchOperation {
    #[serde(default)]
    op: String,
    #[serde(default)]
    path: String,
}

impl Witness {
    /// The witness of `admitted`, made by `patch` (RFC 6902 JSON): its
    /// operations are read without their values.
    pub fn find(patch: &[u8], admitted: &Json) -> Option<Witness> {
        let operations: Vec<PatchOperation> = serde_json::from_slice(patch).ok()?;
        operations
            .iter()
            .filter(|op| matches!(op.op.as_str(), "add" | "replace" | "copy" | "move"))
            .find_map(|op| Witness::at(&op.path, admitted))
    }

    /// The witness at `path` of `admitted`, if its value there is not empty.
    pub fn at(path: &str, admitted: &Json) -> Option<Witness> {
        let tokens: Vec<String> = path
            .strip_prefix('/')?
            .split('/')
            .map(|t| t.replace("~1", "/").replace("~0", "~"))
            .collect();
        let value = lookup(admitted, &tokens)?;
        (!is_empty(value)).then(|| Witness {
            path: path.to_string(),
            tokens,
            value: value.clone(),
        })
    }

    /// Whether `object` holds the answer's value here (as [`holds`] holds
    /// the whole).
    fn held_by(&self, object: &Json) -> bool {
        lookup(object, &self.tokens).is_some_and(|o| holds(o, &self.value))
    }
}

/// The value at unescaped pointer `tokens`, without allocating.
fn lookup<'v>(mut value: &'v Json, tokens: &[String]) -> Option<&'v Json> {
    for token in tokens {
        value = match value {
            Json::Object(members) => members.get(token.as_str())?,
            Json::Array(items) => items.get(token.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(value)
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
    /// What kmutate answered the request that a request of identity `id`
    /// and object `object` reinvokes, if it is kube-apiserver's
    /// reinvocation of a request kmutate answered with a change in the
    /// last 30 s.
    pub fn reinvoked(&self, id: RequestIdentity, object: Option<&Json>) -> Option<Answered> {
        let object = object?;
        // Newest first; the witness under the lock, the whole object (read
        // from its text) after.
        let candidates: Vec<Answered> = {
            let answers = self.answers.lock().unwrap_or_else(|e| e.into_inner());
            let found = answers.by_identity.get(&id.0)?;
            found
                .iter()
                .rev()
                .filter(|(at, _, _)| at.elapsed() < REMEMBERED_FOR)
                .map(|(_, _, answered)| answered)
                .filter(|answered| answered.witness.as_ref().is_none_or(|w| w.held_by(object)))
                .cloned()
                .collect()
        };
        candidates
            .into_iter()
            .find(|answered| holds(object, &answered.object()))
    }

    /// Takes `request` for kube-apiserver's reinvocation of a request this
    /// memory remembers, if it is one: marks it so and, where kmutate's
    /// own reinvocation pass followed the first, gives the policies the
    /// object that reinvocation runs on ([`rebase`]). Returns the identity
    /// to remember the answer by, and the object as kube-apiserver sent it
    /// where the policies run on another (the patch is from it).
    pub fn recognise(&self, request: &mut AdmissionRequest) -> (RequestIdentity, Option<Json>) {
        let identity = RequestIdentity::of(request);
        let reinvoked = self.reinvoked(identity, request.object.as_ref());
        request.reinvocation = reinvoked.is_some();
        let mut as_sent = None;
        if let Some(first_pass) = reinvoked.as_ref().and_then(Answered::first_pass) {
            let answered = reinvoked.as_ref().map(Answered::object).unwrap_or_default();
            if let Some(object) = request.object.take() {
                request.object = Some(rebase(&first_pass, &answered, &object));
                as_sent = Some(object);
            }
        }
        (identity, as_sent)
    }

    /// Every answer remembered and not yet expired, for another replica
    /// ([`crate::webhook::peers`]).
    pub fn remembered(&self) -> Vec<Remembered> {
        let answers = self.answers.lock().unwrap_or_else(|e| e.into_inner());
        answers
            .by_identity
            .iter()
            .flat_map(|(id, found)| found.iter().map(move |entry| (*id, entry)))
            .filter(|(_, (at, _, _))| at.elapsed() < REMEMBERED_FOR)
            .map(|(id, (at, answer, answered))| Remembered {
                identity: RequestIdentity(id),
                answer: *answer,
                age: at.elapsed(),
                answered: answered.clone(),
            })
            .collect()
    }

    /// Takes in what another replica remembered, each answer as old as it
    /// was there (one this memory holds already is not taken twice).
    pub fn absorb(&self, entries: Vec<Remembered>) {
        let now = Instant::now();
        let forgotten = {
            let mut answers = self.answers.lock().unwrap_or_else(|e| e.into_inner());
            for entry in entries {
                if entry.age < REMEMBERED_FOR {
                    let at = now.checked_sub(entry.age).unwrap_or(now);
                    answers.insert(entry.identity.0, at, entry.answer, entry.answered);
                }
            }
            std::mem::take(&mut answers.forgotten)
        };
        drop(forgotten);
    }

    /// Remembers `admitted`, what kmutate changed the object of the request
    /// of identity `id` into; the entry as peers are sent it, and the
    /// answers it made room by forgetting, for the caller to drop when the
    /// reply is out.
    pub fn remember(&self, id: RequestIdentity, admitted: Answered) -> (Remembered, Vec<Answered>) {
        let answer = next_answer_id();
        let forgotten = {
            let mut answers = self.answers.lock().unwrap_or_else(|e| e.into_inner());
            answers.insert(id.0, Instant::now(), answer, admitted.clone());
            std::mem::take(&mut answers.forgotten)
        };
        let remembered = Remembered {
            identity: id,
            answer,
            age: Duration::ZERO,
            answered: admitted,
        };
        (remembered, forgotten)
    }
}

/// One remembered answer, as one replica hands it to another.
#[derive(Clone, Debug)]
pub struct Remembered {
    /// The identity of the request answered.
    pub identity: RequestIdentity,
    /// The answer's id, unique among the replicas.
    pub answer: u64,
    /// How long ago it was answered.
    pub age: Duration,
    /// The answer.
    pub answered: Answered,
}

/// Why a hand-over body was refused.
#[derive(Debug, thiserror::Error)]
pub enum HandOverError {
    /// Not JSON, or not the shape [`encode_remembered`] writes.
    #[error("reinvocation hand-over: {0}")]
    Invalid(String),
}

/// `entries` as the JSON body one replica sends another:
/// `{"entries": [{"identity": "N", "answer": "N", "ageMillis": N, "object": {...},
/// "firstPass": {...} | null}]}`. The identity is a hash of the request's
/// parts, the same in every replica of one build.
pub fn encode_remembered(entries: &[Remembered]) -> Vec<u8> {
    let entries: Vec<Json> = entries
        .iter()
        .map(|e| {
            serde_json::json!({
                "identity": e.identity.0.to_string(),
                "answer": e.answer.to_string(),
                "ageMillis": e.age.as_millis() as u64,
                "object": raw(&e.answered.object),
                "firstPass": e.answered.first_pass.as_deref().map(raw),
                "witness": e.answered.witness.as_ref().map(|w| &w.path),
            })
        })
        .collect();
    serde_json::to_vec(&serde_json::json!({ "entries": entries })).unwrap_or_default()
}

/// Kept JSON text, written into a body as it is.
fn raw(text: &str) -> Option<&serde_json::value::RawValue> {
    serde_json::from_str(text).ok()
}

/// The entries of a body [`encode_remembered`] wrote.
pub fn decode_remembered(body: &[u8]) -> Result<Vec<Remembered>, HandOverError> {
    let invalid = |what: &str| HandOverError::Invalid(what.to_string());
    let mut doc: Json =
        serde_json::from_slice(body).map_err(|e| HandOverError::Invalid(e.to_string()))?;
    let Some(Json::Array(entries)) = doc.get_mut("entries").map(Json::take) else {
        return Err(invalid("entries: expected an array"));
    };
    entries
        .into_iter()
        .enumerate()
        .map(|(i, mut entry)| {
            let decimal = |field: &str| {
                entry
                    .get(field)
                    .and_then(Json::as_str)
                    .and_then(|t| t.parse::<u64>().ok())
                    .ok_or_else(|| {
                        invalid(&format!("entries[{i}].{field}: expected a decimal string"))
                    })
            };
            let (identity, answer) = (decimal("identity")?, decimal("answer")?);
            let age = entry
                .get("ageMillis")
                .and_then(Json::as_u64)
                .ok_or_else(|| invalid(&format!("entries[{i}].ageMillis: expected a number")))?;
            let object = match entry.get_mut("object").map(Json::take) {
                Some(o @ Json::Object(_)) => o,
                _ => return Err(invalid(&format!("entries[{i}].object: expected an object"))),
            };
            let first_pass = match entry.get_mut("firstPass").map(Json::take) {
                None | Some(Json::Null) => None,
                Some(o @ Json::Object(_)) => Some(Arc::from(o.to_string())),
                _ => {
                    return Err(invalid(&format!(
                        "entries[{i}].firstPass: expected an object or null"
                    )))
                }
            };
            let witness = entry
                .get("witness")
                .and_then(Json::as_str)
                .and_then(|path| Witness::at(path, &object));
            Ok(Remembered {
                identity: RequestIdentity(identity),
                answer,
                age: Duration::from_millis(age),
                answered: Answered {
                    object: Arc::from(object.to_string()),
                    first_pass,
                    witness,
                },
            })
        })
        .collect()
}

/// The object kube-apiserver's reinvocation pass would give the policies:
/// `first_pass`, what kmutate's first pass made of the object, with what
/// the other plugins changed since kmutate answered `answered` and sent
/// `object` (an operation that finds nothing to apply to, such as a
/// token mounted into a container only kmutate's own reinvocation pass
/// added, is left out).
pub fn rebase(first_pass: &Json, answered: &Json, object: &Json) -> Json {
    let mut rebased = first_pass.clone();
    for operation in json_patch::diff(answered, object).0 {
        // One at a time: json_patch::patch leaves the object as it was
        // when its operation fails.
        let _ = json_patch::patch(&mut rebased, std::slice::from_ref(&operation));
    }
    rebased
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
        memory
            .reinvoked(RequestIdentity::of(request), request.object.as_ref())
            .is_some()
    }

    fn answer(object: Json) -> Answered {
        Answered::new(&object, None, None)
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
            answer(answered),
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
    fn concurrent_requests_of_one_identity_are_each_told_apart() {
        // A ReplicaSet's Pods: one user, one generateName, each with a
        // token volume of its own from the ServiceAccount plugin, answered
        // before either reinvocation comes.
        let memory = ReinvocationMemory::default();
        let pod = |token: &str, sidecar: bool| {
            let mut containers = vec![json!({"name": "app"})];
            if sidecar {
                containers.push(json!({"name": "sidecar"}));
            }
            json!({"metadata": {"generateName": "web-"},
                "spec": {"volumes": [{"name": token}], "containers": containers}})
        };
        let create = |object: Json| AdmissionRequest {
            name: String::new(),
            ..pod_create(object)
        };
        for token in ["kube-api-access-aaaaa", "kube-api-access-bbbbb"] {
            let request = create(pod(token, false));
            assert!(!seen(&memory, &request));
            memory.remember(RequestIdentity::of(&request), answer(pod(token, true)));
        }
        for token in ["kube-api-access-aaaaa", "kube-api-access-bbbbb"] {
            let reinvocation = create(pod(token, true));
            let found = memory
                .reinvoked(
                    RequestIdentity::of(&reinvocation),
                    reinvocation.object.as_ref(),
                )
                .expect("the reinvocation is recognised");
            assert_eq!(found.object(), pod(token, true));
        }
        assert_eq!(memory.remembered().len(), 2);
    }

    #[test]
    fn the_witness_is_a_value_the_answer_set_and_a_reinvocation_holds() {
        let admitted = json!({"metadata": {"labels": {"a": "1", "b": "2"}},
            "spec": {"containers": [{"name": "app"}, {"name": "sidecar"}]}});
        // An append ("-") and a removal name no value; an empty one says
        // nothing; the first added value the object holds is the witness.
        let patch = br#"[{"op":"remove","path":"/spec/x"},
            {"op":"add","path":"/spec/containers/-","value":{"name":"sidecar"}},
            {"op":"add","path":"/metadata/annotations","value":{}},
            {"op":"add","path":"/spec/containers/1","value":{"name":"sidecar"}}]"#;
        let witness = Witness::find(patch, &admitted).expect("a witness");
        assert_eq!(witness.path, "/spec/containers/1");
        let memory = ReinvocationMemory::default();
        let request = pod_create(json!({"spec": {"containers": [{"name": "app"}]}}));
        let id = RequestIdentity::of(&request);
        memory.remember(
            id,
            Answered {
                witness: Some(witness),
                ..answer(admitted.clone())
            },
        );
        // The sidecar with the token the ServiceAccount plugin mounted.
        let mut reinvoked = admitted.clone();
        reinvoked["spec"]["containers"][1]["volumeMounts"] = json!([{"name": "token"}]);
        assert!(memory.reinvoked(id, Some(&reinvoked)).is_some());
        assert!(memory.reinvoked(id, request.object.as_ref()).is_none());
    }

    #[test]
    fn one_identity_keeps_its_newest_answers() {
        let memory = ReinvocationMemory::default();
        let request = pod_create(json!({"spec": {}}));
        let id = RequestIdentity::of(&request);
        for i in 0..MOST_OF_ONE_IDENTITY + 10 {
            memory.remember(id, answer(json!({"spec": {"n": i}})));
        }
        assert_eq!(memory.remembered().len(), MOST_OF_ONE_IDENTITY);
        assert!(memory
            .reinvoked(id, Some(&json!({"spec": {"n": 0}})))
            .is_none());
        let newest = MOST_OF_ONE_IDENTITY + 9;
        assert!(memory
            .reinvoked(id, Some(&json!({"spec": {"n": newest}})))
            .is_some());
    }

    #[test]
    fn the_same_answer_again_renews_the_one_held() {
        let memory = ReinvocationMemory::default();
        let request = pod_create(json!({"spec": {}}));
        let id = RequestIdentity::of(&request);
        let (_, forgotten) = memory.remember(id, answer(json!({"spec": {"n": 1}})));
        assert!(forgotten.is_empty());
        for _ in 0..MOST_OF_ONE_IDENTITY + 10 {
            let (entry, forgotten) = memory.remember(id, answer(json!({"spec": {"n": 2}})));
            assert!(forgotten.is_empty());
            // The renewed answer is the one held, under its new id.
            let held = memory.remembered();
            assert_eq!(held.len(), 2);
            assert!(held.iter().any(|e| e.answer == entry.answer));
        }
        for n in [1, 2] {
            assert!(memory
                .reinvoked(id, Some(&json!({"spec": {"n": n}})))
                .is_some());
        }
    }

    #[test]
    fn a_peers_answers_are_taken_in_once_and_keep_their_age() {
        let memory = ReinvocationMemory::default();
        let request = pod_create(json!({"spec": {}}));
        let id = RequestIdentity::of(&request);
        let entry = Remembered {
            identity: id,
            answer: 7,
            age: Duration::from_secs(5),
            answered: answer(json!({"spec": {"x": 1}})),
        };
        let body = encode_remembered(std::slice::from_ref(&entry));
        let decoded = decode_remembered(&body).unwrap();
        memory.absorb(decoded.clone());
        memory.absorb(decoded);
        let remembered = memory.remembered();
        assert_eq!(remembered.len(), 1);
        assert!(remembered[0].age >= Duration::from_secs(5));
        assert!(memory
            .reinvoked(id, Some(&json!({"spec": {"x": 1, "y": 2}})))
            .is_some());
        // Expired on the way: not taken.
        let old = Remembered {
            age: REMEMBERED_FOR,
            ..entry
        };
        let other = ReinvocationMemory::default();
        other.absorb(vec![old]);
        assert!(other.remembered().is_empty());
        for bad in [
            &b"{}"[..],
            br#"{"entries":[{"identity":1,"answer":"1","ageMillis":0,"object":{}}]}"#,
            br#"{"entries":[{"identity":"1","ageMillis":0,"object":{}}]}"#,
            br#"{"entries":[{"identity":"1","answer":"1","ageMillis":0,"object":[]}]}"#,
            br#"{"entries":[{"identity":"1","answer":"1","ageMillis":0,"object":{},"firstPass":3}]}"#,
        ] {
            assert!(
                decode_remembered(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn the_reinvocation_runs_on_the_first_pass_with_what_later_plugins_changed() {
        let container = |name: &str, mounted: bool| {
            let mut c = json!({"name": name, "image": "busybox", "imagePullPolicy": "Always"});
            if mounted {
                c["volumeMounts"] = json!([{"name": "token", "mountPath": "/var/run"}]);
            }
            c
        };
        let pod = |containers: Vec<Json>| json!({"spec": {"containers": containers}});
        // kmutate's first pass appended a sidecar, its reinvocation pass a
        // second; the ServiceAccount plugin then mounted its token into both.
        let first_pass = pod(vec![container("app", true), container("sidecar", false)]);
        let answered = pod(vec![
            container("app", true),
            container("sidecar", false),
            container("sidecar", false),
        ]);
        let sent = pod(vec![
            container("app", true),
            container("sidecar", true),
            container("sidecar", true),
        ]);
        // As the built-in plugin's chain has it in its reinvocation pass:
        // the first sidecar mounted, no second one yet.
        assert_eq!(
            rebase(&first_pass, &answered, &sent),
            pod(vec![container("app", true), container("sidecar", true)])
        );
        // A toleration a later plugin gave back is there again.
        let removed = json!({"spec": {"tolerations": []}});
        let given_back = json!({"spec": {"tolerations": [{"key": "k", "operator": "Exists"}]}});
        assert_eq!(rebase(&removed, &removed, &given_back), given_back);
    }

    #[test]
    fn another_object_user_or_stored_version_is_a_new_request() {
        let memory = ReinvocationMemory::default();
        let answered = json!({"metadata": {"labels": {"a": "b"}}});
        memory.remember(
            RequestIdentity::of(&pod_create(json!({}))),
            answer(answered.clone()),
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
