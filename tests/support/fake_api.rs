//! A fake Kubernetes API server on 127.0.0.1 (plain HTTP/1.1) for the API
//! source tests: discovery (`/api`, `/api/v1`, `/apis`, `/apis/<g>/<v>`),
//! list and watch of the kinds it is told about (resourceVersions, watch
//! history, `allowWatchBookmarks` bookmarks, an `ERROR` event with code 410
//! for a resourceVersion older than the history kept), and
//! SubjectAccessReviews answered from rules. Tests stop it (connections
//! dropped, port closed) and start it again on the same port, close every
//! watch, or compact its history to force relists.

use bytes::Bytes;
use futures::StreamExt as _;
use http_body_util::{combinators::UnsyncBoxBody, BodyExt as _, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinHandle;

type Body = UnsyncBoxBody<Bytes, Infallible>;

/// A kind the fake serves.
#[derive(Clone, Debug)]
pub struct Kind {
    /// API group ("" for core).
    pub group: String,
    /// Version.
    pub version: String,
    /// Resource (plural).
    pub plural: String,
    /// Kind.
    pub kind: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
}

impl Kind {
    /// A kind.
    pub fn new(group: &str, version: &str, plural: &str, kind: &str, namespaced: bool) -> Kind {
        Kind {
            group: group.into(),
            version: version.into(),
            plural: plural.into(),
            kind: kind.into(),
            namespaced,
        }
    }

    fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    fn key(&self) -> String {
        format!("{}/{}/{}", self.group, self.version, self.plural)
    }
}

/// A SubjectAccessReview rule: the first whose fields all match decides.
#[derive(Clone, Debug)]
pub struct SarRule {
    /// The user.
    pub user: String,
    /// The verb.
    pub verb: String,
    /// The resource.
    pub resource: String,
    /// The answer.
    pub allowed: bool,
}

#[derive(Clone, Debug)]
struct Change {
    rv: u64,
    key: String,
    kind: &'static str,
    object: Value,
}

#[derive(Debug, Default)]
struct State {
    kinds: Vec<Kind>,
    /// (kind key, namespace, name) → object.
    objects: BTreeMap<(String, String, String), Value>,
    rv: u64,
    history: Vec<Change>,
    /// Watches from a resourceVersion below this get 410.
    oldest: u64,
    sar_rules: Vec<SarRule>,
    sar_requests: Vec<Value>,
    events: Vec<Value>,
    lists: usize,
    watches: usize,
}

/// What the watchers are told: a change, or to end.
#[derive(Clone, Debug)]
enum Signal {
    Change(Change),
    CloseAll,
}

/// The fake API server.
pub struct FakeApi {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    signals: broadcast::Sender<Signal>,
    serving: Mutex<Option<JoinHandle<()>>>,
}

impl FakeApi {
    /// Starts serving `kinds` on a free 127.0.0.1 port.
    pub async fn start(kinds: Vec<Kind>) -> Arc<FakeApi> {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (signals, _) = broadcast::channel(65536);
        let fake = Arc::new(FakeApi {
            addr,
            state: Arc::new(Mutex::new(State {
                kinds,
                rv: 100,
                oldest: 0,
                ..State::default()
            })),
            signals,
            serving: Mutex::new(None),
        });
        fake.serve(listener);
        fake
    }

    /// The server's URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kube client configuration for the server.
    pub fn kube_config(&self) -> kube::Config {
        let mut c = kube::Config::new(self.url().parse().unwrap());
        c.connect_timeout = Some(Duration::from_secs(2));
        c
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn serve(&self, listener: TcpListener) {
        let state = self.state.clone();
        let signals = self.signals.clone();
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let state = state.clone();
                let signals = signals.clone();
                connections.spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let state = state.clone();
                        let signals = signals.clone();
                        async move { Ok::<_, Infallible>(route(state, signals, req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), service)
                        .await;
                });
                while connections.try_join_next().is_some() {}
            }
        });
        *self.serving.lock().unwrap() = Some(task);
    }

    /// Stops serving: every connection is dropped and the port closed.
    pub fn stop(&self) {
        if let Some(t) = self.serving.lock().unwrap().take() {
            t.abort();
        }
    }

    /// Serves again on the same port (objects and history kept).
    pub async fn restart(&self) {
        self.stop();
        let mut tries = 0;
        let listener = loop {
            match TcpListener::bind(self.addr).await {
                Ok(l) => break l,
                Err(e) if tries < 100 => {
                    tries += 1;
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("rebinding {}: {e}", self.addr),
            }
        };
        self.serve(listener);
    }

    /// Ends every open watch (clients watch again from their last resourceVersion).
    pub fn close_watches(&self) {
        let _ = self.signals.send(Signal::CloseAll);
    }

    /// Forgets the watch history, so that every watch resumed from a
    /// resourceVersion seen so far gets `ERROR` 410 and must relist; ends
    /// every open watch.
    pub fn expire_history(&self) {
        {
            let mut s = self.state();
            s.oldest = s.rv + 1;
            s.history.clear();
        }
        self.close_watches();
    }

    /// Creates or replaces an object of `kind` (namespace and name from its
    /// metadata); returns its new resourceVersion.
    pub fn put(&self, kind: &Kind, mut object: Value) -> u64 {
        let change = {
            let mut s = self.state();
            s.rv += 1;
            let rv = s.rv;
            object["apiVersion"] = json!(kind.api_version());
            object["kind"] = json!(kind.kind);
            object["metadata"]["resourceVersion"] = json!(rv.to_string());
            let ns = object["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let name = object["metadata"]["name"].as_str().unwrap().to_string();
            object["metadata"]["uid"] = json!(format!("uid-{}-{ns}-{name}", kind.plural));
            let previous = s.objects.insert((kind.key(), ns, name), object.clone());
            let change = Change {
                rv,
                key: kind.key(),
                kind: if previous.is_some() {
                    "MODIFIED"
                } else {
                    "ADDED"
                },
                object,
            };
            s.history.push(change.clone());
            change
        };
        let rv = change.rv;
        let _ = self.signals.send(Signal::Change(change));
        rv
    }

    /// Deletes an object.
    pub fn delete(&self, kind: &Kind, namespace: &str, name: &str) {
        let change = {
            let mut s = self.state();
            let Some(mut object) =
                s.objects
                    .remove(&(kind.key(), namespace.to_string(), name.to_string()))
            else {
                return;
            };
            s.rv += 1;
            object["metadata"]["resourceVersion"] = json!(s.rv.to_string());
            let change = Change {
                rv: s.rv,
                key: kind.key(),
                kind: "DELETED",
                object,
            };
            s.history.push(change.clone());
            change
        };
        let _ = self.signals.send(Signal::Change(change));
    }

    /// Adds a SubjectAccessReview rule.
    pub fn allow(&self, rule: SarRule) {
        self.state().sar_rules.push(rule);
    }

    /// The SubjectAccessReviews received.
    pub fn sar_requests(&self) -> Vec<Value> {
        self.state().sar_requests.clone()
    }

    /// The Events created.
    pub fn events(&self) -> Vec<Value> {
        self.state().events.clone()
    }

    /// The object of `kind` called `name` in `namespace`.
    pub fn object(&self, kind: &Kind, namespace: &str, name: &str) -> Option<Value> {
        self.state()
            .objects
            .get(&(kind.key(), namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// (lists, watches) requests received.
    pub fn list_and_watch_counts(&self) -> (usize, usize) {
        let s = self.state();
        (s.lists, s.watches)
    }
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        self.stop();
    }
}

fn json_response(status: StatusCode, body: &Value) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())).boxed_unsync());
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "reason": reason, "message": message, "code": code})
}

fn not_found(path: &str) -> Response<Body> {
    json_response(
        StatusCode::NOT_FOUND,
        &status(404, "NotFound", &format!("{path} not found")),
    )
}

fn resource_list(kinds: &[Kind], group: &str, version: &str) -> Option<Value> {
    let resources: Vec<Value> = kinds
        .iter()
        .filter(|k| k.group == group && k.version == version)
        .map(|k| {
            json!({"name": k.plural, "singularName": k.kind.to_lowercase(), "namespaced": k.namespaced,
                "kind": k.kind, "verbs": ["get", "list", "watch", "create", "update", "delete"]})
        })
        .collect();
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    let sar = group == "authorization.k8s.io" && version == "v1";
    if resources.is_empty() && !sar {
        return None;
    }
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}

fn group_list(kinds: &[Kind]) -> Value {
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    groups
        .entry("authorization.k8s.io".into())
        .or_default()
        .push("v1".into());
    for k in kinds.iter().filter(|k| !k.group.is_empty()) {
        let versions = groups.entry(k.group.clone()).or_default();
        if !versions.contains(&k.version) {
            versions.push(k.version.clone());
        }
    }
    let groups: Vec<Value> = groups
        .into_iter()
        .map(|(name, versions)| {
            let vs: Vec<Value> = versions
                .iter()
                .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
                .collect();
            json!({"name": name, "versions": vs.clone(), "preferredVersion": vs[0]})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

fn query(req: &Request<Incoming>) -> BTreeMap<String, String> {
    req.uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

async fn route(
    state: Arc<Mutex<State>>,
    signals: broadcast::Sender<Signal>,
    req: Request<Incoming>,
) -> Response<Body> {
    let path = req.uri().path().to_string();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let kinds = state.lock().unwrap().kinds.clone();
    if req.method() == Method::POST {
        if segments == ["apis", "authorization.k8s.io", "v1", "subjectaccessreviews"] {
            let body = req.into_body().collect().await.unwrap().to_bytes();
            let review: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            return json_response(StatusCode::CREATED, &subject_access_review(&state, review));
        }
        if let ["api", "v1", "namespaces", _, "events"] = segments.as_slice() {
            let body = req.into_body().collect().await.unwrap().to_bytes();
            let mut event: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let mut s = state.lock().unwrap();
            event["metadata"]["name"] = json!(format!("event-{}", s.events.len()));
            s.events.push(event.clone());
            return json_response(StatusCode::CREATED, &event);
        }
        return not_found(&path);
    }
    if req.method() == Method::PATCH {
        let body = req.into_body().collect().await.unwrap().to_bytes();
        let patch: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        return patch_status(&state, &signals, &kinds, &segments, patch)
            .unwrap_or_else(|| not_found(&path));
    }
    // Discovery.
    match segments.as_slice() {
        ["api"] => {
            return json_response(
                StatusCode::OK,
                &json!({"kind": "APIVersions", "versions": ["v1"],
                    "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}),
            )
        }
        ["api", v] => {
            return resource_list(&kinds, "", v)
                .map_or_else(|| not_found(&path), |l| json_response(StatusCode::OK, &l))
        }
        ["apis"] => return json_response(StatusCode::OK, &group_list(&kinds)),
        ["apis", g, v] => {
            return resource_list(&kinds, g, v)
                .map_or_else(|| not_found(&path), |l| json_response(StatusCode::OK, &l))
        }
        _ => {}
    }
    // List and watch.
    let (group, version, rest) = match segments.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return not_found(&path),
    };
    let (namespace, plural) = match rest {
        [plural] => (None, *plural),
        ["namespaces", ns, plural] => (Some(ns.to_string()), *plural),
        _ => return not_found(&path),
    };
    let Some(kind) = kinds
        .iter()
        .find(|k| k.group == group && k.version == version && k.plural == plural)
        .cloned()
    else {
        return not_found(&path);
    };
    let q = query(&req);
    if q.get("watch").is_some_and(|w| w == "true" || w == "1") {
        let from: u64 = q
            .get("resourceVersion")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let bookmarks = q.get("allowWatchBookmarks").is_some_and(|b| b == "true");
        let timeout = q
            .get("timeoutSeconds")
            .and_then(|v| v.parse().ok())
            .unwrap_or(300u64);
        return watch(state, signals, kind, namespace, from, bookmarks, timeout);
    }
    let mut s = state.lock().unwrap();
    s.lists += 1;
    let items: Vec<Value> = s
        .objects
        .iter()
        .filter(|((k, ns, _), _)| *k == kind.key() && namespace.as_ref().is_none_or(|n| n == ns))
        .map(|(_, o)| o.clone())
        .collect();
    json_response(
        StatusCode::OK,
        &json!({"kind": format!("{}List", kind.kind), "apiVersion": kind.api_version(),
            "metadata": {"resourceVersion": s.rv.to_string()}, "items": items}),
    )
}

fn event_line(kind: &str, object: &Value) -> Bytes {
    let mut line = json!({"type": kind, "object": object}).to_string();
    line.push('\n');
    Bytes::from(line)
}

fn watch(
    state: Arc<Mutex<State>>,
    signals: broadcast::Sender<Signal>,
    kind: Kind,
    namespace: Option<String>,
    from: u64,
    bookmarks: bool,
    timeout: u64,
) -> Response<Body> {
    let (tx, rx) = mpsc::channel::<Bytes>(1024);
    let matches = {
        let kind = kind.clone();
        move |c: &Change| {
            c.key == kind.key()
                && namespace
                    .as_ref()
                    .is_none_or(|n| c.object["metadata"]["namespace"] == *n.as_str())
        }
    };
    let (backlog, expired, mut live, mut last) = {
        let mut s = state.lock().unwrap();
        s.watches += 1;
        let expired = from < s.oldest;
        let backlog: Vec<Change> = s
            .history
            .iter()
            .filter(|c| c.rv > from && matches(c))
            .cloned()
            .collect();
        (backlog, expired, signals.subscribe(), s.rv.max(from))
    };
    tokio::spawn(async move {
        if expired {
            let gone = status(410, "Expired", &format!("too old resource version: {from}"));
            let _ = tx.send(event_line("ERROR", &gone)).await;
            return;
        }
        for c in backlog {
            if tx.send(event_line(c.kind, &c.object)).await.is_err() {
                return;
            }
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        loop {
            tokio::select! {
                signal = live.recv() => match signal {
                    Ok(Signal::Change(c)) if matches(&c) => {
                        last = last.max(c.rv);
                        if tx.send(event_line(c.kind, &c.object)).await.is_err() {
                            return;
                        }
                    }
                    Ok(Signal::Change(c)) => last = last.max(c.rv),
                    Ok(Signal::CloseAll) | Err(broadcast::error::RecvError::Closed) => return,
                    Err(broadcast::error::RecvError::Lagged(_)) => return,
                },
                _ = tick.tick(), if bookmarks => {
                    let mark = json!({"kind": kind.kind, "apiVersion": kind.api_version(),
                        "metadata": {"resourceVersion": last.to_string()}});
                    if tx.send(event_line("BOOKMARK", &mark)).await.is_err() {
                        return;
                    }
                }
                _ = tokio::time::sleep_until(deadline) => return,
            }
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
    });
    let mut r = Response::new(http_body_util::BodyExt::boxed_unsync(StreamBody::new(
        stream.boxed(),
    )));
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

fn subject_access_review(state: &Mutex<State>, review: Value) -> Value {
    let mut s = state.lock().unwrap();
    s.sar_requests.push(review.clone());
    let spec = &review["spec"];
    let attrs = &spec["resourceAttributes"];
    let rule = s.sar_rules.iter().find(|r| {
        spec["user"] == *r.user.as_str()
            && attrs["verb"] == *r.verb.as_str()
            && attrs["resource"] == *r.resource.as_str()
    });
    let (allowed, denied, reason) = match rule {
        Some(r) if r.allowed => (true, false, format!("rule allows {}", r.user)),
        Some(r) => (false, true, format!("rule denies {}", r.user)),
        None => (false, false, "no rule".to_string()),
    };
    let mut answer = review;
    answer["apiVersion"] = json!("authorization.k8s.io/v1");
    answer["kind"] = json!("SubjectAccessReview");
    answer["status"] = json!({"allowed": allowed, "denied": denied, "reason": reason});
    answer
}

/// A merge patch of an object's status subresource (only `status` changes).
fn patch_status(
    state: &Mutex<State>,
    signals: &broadcast::Sender<Signal>,
    kinds: &[Kind],
    segments: &[&str],
    patch: Value,
) -> Option<Response<Body>> {
    let (group, version, plural, name) = match segments {
        ["apis", g, v, plural, name, "status"] => (*g, *v, *plural, *name),
        ["api", v, plural, name, "status"] => ("", *v, *plural, *name),
        _ => return None,
    };
    let kind = kinds
        .iter()
        .find(|k| k.group == group && k.version == version && k.plural == plural)?;
    let mut s = state.lock().unwrap();
    let key = (kind.key(), String::new(), name.to_string());
    let mut object = s.objects.get(&key)?.clone();
    let mut status = object.get("status").cloned().unwrap_or(json!({}));
    json_patch::merge(&mut status, &patch["status"]);
    object["status"] = status;
    s.rv += 1;
    object["metadata"]["resourceVersion"] = json!(s.rv.to_string());
    s.objects.insert(key, object.clone());
    let change = Change {
        rv: s.rv,
        key: kind.key(),
        kind: "MODIFIED",
        object: object.clone(),
    };
    s.history.push(change.clone());
    drop(s);
    let _ = signals.send(Signal::Change(change));
    Some(json_response(StatusCode::OK, &object))
}
