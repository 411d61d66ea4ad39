//! Helpers shared by the source tests: a runtime with a time limit, scratch
//! folders, a started server and a client that sends ConfigMap CREATE
//! reviews and reads back the labels the webhook's patch sets.

#![allow(dead_code)]

pub mod api;
pub mod fake_api;
pub mod fuzz;
pub mod kas;
pub mod validation_corpus;

use base64::Engine as _;
use kmutate::engine::EngineSources;
use kmutate::webhook::client::{get_plain, Client, Connection};
use kmutate::webhook::tls;
use kmutate::webhook::{start, ServeConfig, Server, TlsSource};
use serde_json::{json, Value};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Runs `f` on a fresh runtime, failing the test past `limit`.
pub fn run<F: Future<Output = ()>>(limit: Duration, f: F) {
    // `KMUTATE_TEST_LOG=kmutate=debug` shows an in-process server's log.
    if let Ok(filter) = std::env::var("KMUTATE_TEST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .try_init();
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        tokio::time::timeout(limit, f)
            .await
            .expect("test finished in time")
    });
    rt.shutdown_timeout(Duration::from_millis(100));
}

/// The program `name` on PATH, if there.
pub fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(name))
            .find(|p| p.is_file())
    })
}

/// A 127.0.0.1 port free when asked (for a child process to listen on).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A fresh folder under the target directory for one test's files.
pub fn scratch(group: &str, name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(group)
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A server configuration on free 127.0.0.1 ports with a self-signed
/// certificate in `dir/tls`.
pub fn config(dir: &Path, sources: EngineSources) -> ServeConfig {
    ServeConfig {
        sources,
        listen: "127.0.0.1:0".parse().unwrap(),
        metrics_listen: Some("127.0.0.1:0".parse().unwrap()),
        tls: TlsSource::SelfSigned {
            dir: dir.join("tls"),
            names: Vec::new(),
        },
        ..ServeConfig::new()
    }
}

/// The JSON lines a child process writes to `stderr` (its log in
/// `--log-format json`), as they come; other lines are skipped.
pub fn json_lines(stderr: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<Value> {
    use std::io::BufRead as _;
    let (tx, lines) = std::sync::mpsc::channel::<Value>();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                if tx.send(v).is_err() {
                    break;
                }
            }
        }
    });
    lines
}

/// Starts a server and waits (at most 30 s) until it is ready.
pub async fn started(config: ServeConfig) -> Server {
    let server = start(config).await.expect("server starts");
    assert!(
        server.wait_ready(Duration::from_secs(30)).await,
        "policies load"
    );
    server
}

/// A connection to `server`.
pub async fn connect(server: &Server) -> Connection {
    let ca = server.ca_bundle().expect("self-signed CA");
    let config = tls::client_config(ca, None, &[]).unwrap();
    Client::new(server.addr(), "localhost", config, false)
        .unwrap()
        .connect()
        .await
        .expect("connects")
}

/// A bare TLS connection to `server` offering the ALPN protocols `alpn`
/// (none: the server picks by the first bytes), on which a test writes
/// the bytes it wants, when it wants.
pub async fn tls_stream(
    server: &Server,
    alpn: &[&[u8]],
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let ca = server.ca_bundle().expect("self-signed CA");
    let config = tls::client_config(ca, None, alpn).unwrap();
    let tcp = tokio::net::TcpStream::connect(server.addr())
        .await
        .expect("connects");
    tcp.set_nodelay(true).unwrap();
    tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect("localhost".try_into().unwrap(), tcp)
        .await
        .expect("TLS handshake")
}

/// Reads `stream` until the peer closes it (end of stream or an error);
/// returns what was read and whether the close was clean (a TLS
/// close_notify, or a plain end of stream).
pub async fn read_until_closed(
    stream: &mut (impl tokio::io::AsyncRead + Unpin),
) -> (Vec<u8>, bool) {
    use tokio::io::AsyncReadExt as _;
    let mut read = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) => return (read, true),
            Ok(n) => read.extend_from_slice(&buf[..n]),
            Err(_) => return (read, false),
        }
    }
}

/// The metrics text.
pub async fn metrics_text(server: &Server) -> String {
    let r = get_plain(server.metrics_addr().unwrap(), "/metrics")
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    r.text()
}

/// The value of the metric line starting with `prefix` (0 when absent).
pub fn metric(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .map(|v| v.parse().unwrap())
        .unwrap_or(0.0)
}

/// What the webhook answered a ConfigMap CREATE.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// Whether the request was allowed.
    pub allowed: bool,
    /// The ConfigMap's labels after the patch.
    pub labels: Value,
    /// The whole response.
    pub response: Value,
}

/// Sends a CREATE of ConfigMap `name` in `namespace` by `user`, returns the answer.
pub async fn create_config_map(
    conn: &mut Connection,
    namespace: &str,
    name: &str,
    user: &str,
) -> Answer {
    let object = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace}, "data": {"a": "b"}});
    let gvk = json!({"group": "", "version": "v1", "kind": "ConfigMap"});
    let gvr = json!({"group": "", "version": "v1", "resource": "configmaps"});
    let body = serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
            "name": name, "namespace": namespace, "operation": "CREATE",
            "userInfo": {"username": user, "groups": ["system:authenticated"]},
            "object": object, "oldObject": null, "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }))
    .unwrap();
    let r = conn.post("/mutate", body).await.expect("answered");
    assert_eq!(r.status, 200, "{}", r.text());
    let response = r.json().unwrap()["response"].clone();
    let mut patched = object.clone();
    if let Some(patch) = response.get("patch").and_then(Value::as_str) {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(patch)
            .unwrap();
        let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
        json_patch::patch(&mut patched, &patch).unwrap();
    }
    Answer {
        allowed: response["allowed"] == true,
        labels: patched["metadata"]["labels"].clone(),
        response,
    }
}

/// The documents of a YAML file (empty documents dropped).
pub fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    kmutate::api::load::parse_documents(&text)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

/// The only document of a YAML file.
pub fn single_document(path: &Path) -> Value {
    let mut docs = documents(path);
    assert_eq!(docs.len(), 1, "{}: one document per file", path.display());
    docs.remove(0)
}

/// Polls `check` every 20 ms until it returns `Some`, for at most `limit`;
/// returns the value and how long it took.
pub async fn eventually<T, F, Fut>(limit: Duration, mut check: F) -> Option<(T, Duration)>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(v) = check().await {
            return Some((v, started.elapsed()));
        }
        if started.elapsed() > limit {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A MutatingAdmissionPolicy (`api_version`) named `name` that sets label
/// `key` of created ConfigMaps to the CEL expression `value`, with
/// `param_kind` when given, and its binding (with `param_ref`).
pub fn labelling_policy(
    api_version: &str,
    name: &str,
    key: &str,
    value: &str,
    param_kind: Option<Value>,
    param_ref: Option<Value>,
) -> (Value, Value) {
    let mut policy = json!({
        "apiVersion": api_version,
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["configmaps"],
            }]},
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "mutations": [{
                "patchType": "ApplyConfiguration",
                "applyConfiguration": {"expression": format!(
                    "Object{{metadata: Object.metadata{{labels: {{{key:?}: {value}}}}}}}"
                )},
            }],
        },
    });
    if let Some(kind) = param_kind {
        policy["spec"]["paramKind"] = kind;
    }
    let mut binding = json!({
        "apiVersion": api_version,
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name},
    });
    if let Some(r) = param_ref {
        binding["spec"]["paramRef"] = r;
    }
    (policy, binding)
}

/// Sends ConfigMap CREATEs every 20 ms until the patched labels satisfy
/// `want`, for at most `limit`; returns how long it took.
pub async fn until_labels(
    conn: &mut Connection,
    namespace: &str,
    limit: Duration,
    want: impl Fn(&Value) -> bool,
) -> Result<Duration, Answer> {
    let started = Instant::now();
    loop {
        let a = create_config_map(conn, namespace, "cm", "alice").await;
        if want(&a.labels) {
            return Ok(started.elapsed());
        }
        if started.elapsed() > limit {
            return Err(a);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
