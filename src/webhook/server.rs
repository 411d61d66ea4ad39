//! The webhook server: a TLS listener (HTTP/1.1 and HTTP/2) with
//! `POST /mutate`, `GET /healthz` and `GET /readyz`, a plain-HTTP metrics
//! listener with `GET /metrics`, per-request timeouts and panic isolation,
//! and draining on shutdown.
//!
//! Connection hygiene, on both listeners (kept by `drive`, in each
//! connection's task):
//!
//! - the head of a request must arrive whole within the header-read timeout
//!   (`--header-read-timeout`, 5 s), counted from the connection's start for
//!   its first request (so an HTTP/2 connection's preface and first HEADERS
//!   too) and from the first byte of each later HTTP/1.1 request; past it
//!   the connection is closed, without an answer (as Go's and hyper's
//!   servers do). The time is the head's total, not restarted per byte;
//! - a connection with no request in flight for the idle timeout
//!   (`--idle-timeout`, 90 s, Go's default) is closed gracefully: HTTP/1.1
//!   closes it, HTTP/2 sends GOAWAY. HTTP/2 PINGs and other frames do not
//!   keep a connection open, requests do.
//!
//! `POST /mutate` takes `Content-Type: application/json` only (parameters
//! such as `; charset=utf-8` allowed, any case), as kube-apiserver sends it;
//! another Content-Type, or none, is answered 415.

use super::metrics::{ErrorType, Metrics, RequestResult};
use super::peers::{Peers, ADDRESS_HEADER, HAND_OVER_PATH, INSTANCE_HEADER, MAX_HAND_OVER_BYTES};
use super::reinvocation::encode_remembered;
use super::reinvocation::{decode_remembered, Answered};
use super::review::{self, Answer};
use super::review::{decode_review, DecodedBody};
use super::tls::{self, CertFiles, ReloadingCert};
use super::validate::{self as validation_webhook, VALIDATE_PATH};
use super::{format_duration, MAX_BODY_BYTES};
use crate::api::FailurePolicy;
use crate::attribution::Attribution;
use crate::authorizer::Authorizer;
use crate::dispatch::{AdmissionObserver, ObjectOrigin, Outcome, Prematch};
use crate::engine::{Engine, EngineSources};
use crate::matching::complete_request;
use crate::registration::lease::LeaseLock;
use crate::registration::RuleKeeper;
use crate::request::AdmissionRequest;
use crate::source::api::ApiConfig;
use crate::source::SourceKind;
use anyhow::{Context as _, Result};
use arc_swap::ArcSwapOption;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use std::cell::RefCell;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

/// The path kube-apiserver POSTs AdmissionReviews to (a
/// MutatingWebhookConfiguration's `clientConfig.service.path`).
pub const MUTATE_PATH: &str = "/mutate";

/// The liveness probe's path (HTTPS, and on the metrics listener).
pub const HEALTHZ_PATH: &str = "/healthz";

/// The readiness probe's path (HTTPS): 503 until the policies are loaded and
/// once shutting down.
pub const READYZ_PATH: &str = "/readyz";

/// How long a client may take to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The default of `--header-read-timeout`: how long a request's head may
/// take to arrive, in all.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The default of `--idle-timeout`: how long a connection may stay open with
/// no request in flight (Go's `http.Server` and kube-apiserver's clients use
/// 90 s).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// The only media type `POST /mutate` takes.
const JSON: &str = "application/json";

/// Where the serving certificate comes from.
#[derive(Clone, Debug)]
pub enum TlsSource {
    /// PEM files, re-read when they change.
    Files(CertFiles),
    /// Generated at start into `dir` (`ca.crt`, `tls.crt`, `tls.key`), for
    /// `localhost`, `127.0.0.1`, `::1` and `names`.
    SelfSigned {
        /// Where to write the files.
        dir: PathBuf,
        /// Further DNS names or IP addresses.
        names: Vec<String>,
    },
}

/// What `kmutate serve` is told.
pub struct ServeConfig {
    /// Policies, bindings and cluster objects (files).
    pub sources: EngineSources,
    /// Which sources to read: the files, the Kubernetes API, or both.
    pub source: SourceKind,
    /// The Kubernetes API source's configuration.
    pub api: ApiConfig,
    /// Decides the CEL `authorizer` checks.
    pub authorizer: Box<dyn Authorizer>,
    /// The TLS listener's address.
    pub listen: SocketAddr,
    /// The metrics listener's address (none: no metrics listener).
    pub metrics_listen: Option<SocketAddr>,
    /// The serving certificate.
    pub tls: TlsSource,
    /// When set, clients must present a certificate signed by these CAs.
    pub client_ca: Option<PathBuf>,
    /// Longest time from a request's headers to its answer; past it the
    /// request's policies' failure policies decide.
    pub timeout: Duration,
    /// Longest time shutdown waits for in-flight requests.
    pub drain_timeout: Duration,
    /// The other replicas (`HOST:PORT`), which share the reinvocation
    /// memory ([`super::peers`]).
    pub peers: Vec<String>,
    /// Where the peers reach this replica (`HOST:PORT`).
    pub peer_address: Option<String>,
    /// Longest time a request's head (request line and headers) may take to
    /// arrive, in all; past it the connection is closed. Zero: no limit.
    pub header_read_timeout: Duration,
    /// Longest time a connection stays open with no request in flight; past
    /// it the connection is closed gracefully (HTTP/2: GOAWAY). Zero: no
    /// limit.
    pub idle_timeout: Duration,
    /// Keep the rules of this MutatingWebhookConfiguration equal to what
    /// the loaded policies match ([`crate::registration`]).
    pub manage_webhook: Option<ManagedWebhook>,
    /// Whether every binding is monitored (its changes reported, not
    /// applied), or only those annotated `kmutate.dev/mode: monitor`.
    pub mode: AdmissionMode,
    /// Whether answers also carry warnings naming each change.
    pub warnings: WarningsMode,
    /// Write PolicyReports of what monitored bindings would have done
    /// ([`crate::reports`]), taking turns through a Lease in this namespace
    /// (none: the client's).
    pub policy_reports: Option<Option<String>>,
}

/// How the bindings' mutations are treated (`--mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum AdmissionMode {
    /// Applied and enforced, but for bindings annotated
    /// `kmutate.dev/mode: monitor`.
    #[default]
    Enforce,
    /// Every binding monitored: evaluated and reported, never applied nor
    /// enforced (a first rollout).
    Monitor,
}

/// Which admission warnings answers carry besides the policies' own (`--warnings`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum WarningsMode {
    /// None.
    #[default]
    None,
    /// One per binding that changed the object (or would have, monitored),
    /// naming the policy, the binding and the fields.
    Changes,
}

/// The webhook configuration `kmutate serve` keeps, and its Lease.
#[derive(Clone, Debug)]
pub struct ManagedWebhook {
    /// The MutatingWebhookConfiguration's name.
    pub name: String,
    /// The Lease's namespace (none: the client's default namespace).
    pub lease_namespace: Option<String>,
}

impl std::fmt::Debug for ServeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeConfig")
            .field("sources", &self.sources)
            .field("source", &self.source)
            .field("listen", &self.listen)
            .field("metrics_listen", &self.metrics_listen)
            .field("tls", &self.tls)
            .field("client_ca", &self.client_ca)
            .field("timeout", &self.timeout)
            .field("drain_timeout", &self.drain_timeout)
            .field("peers", &self.peers)
            .field("peer_address", &self.peer_address)
            .field("header_read_timeout", &self.header_read_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("manage_webhook", &self.manage_webhook)
            .field("mode", &self.mode)
            .field("warnings", &self.warnings)
            .field("policy_reports", &self.policy_reports)
            .finish()
    }
}

impl ServeConfig {
    /// The defaults of `kmutate serve`: `./policies`, `./bindings`,
    /// `0.0.0.0:8443`, metrics on `0.0.0.0:9090`, a self-signed certificate
    /// in a fresh temporary folder, a 10 s timeout, a 5 s header-read
    /// timeout, a 90 s idle timeout, CEL authorizer checks denied.
    pub fn new() -> ServeConfig {
        ServeConfig {
            sources: EngineSources {
                policies: vec![PathBuf::from("policies")],
                bindings: vec![PathBuf::from("bindings")],
                resources: Vec::new(),
            },
            source: SourceKind::Files,
            api: ApiConfig::default(),
            authorizer: Box::new(crate::authorizer::AlwaysDeny),
            listen: SocketAddr::from(([0, 0, 0, 0], 8443)),
            metrics_listen: Some(SocketAddr::from(([0, 0, 0, 0], 9090))),
            tls: TlsSource::SelfSigned {
                dir: std::env::temp_dir().join(format!("kmutate-serve-{}", std::process::id())),
                names: Vec::new(),
            },
            client_ca: None,
            timeout: Duration::from_secs(10),
            drain_timeout: Duration::from_secs(15),
            peers: Vec::new(),
            peer_address: None,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            manage_webhook: None,
            mode: AdmissionMode::Enforce,
            warnings: WarningsMode::None,
            policy_reports: None,
        }
    }
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig::new()
    }
}

/// State shared by every connection.
struct Shared {
    /// The engine in force; swapped whole when a source changes.
    engine: Arc<ArcSwapOption<Engine>>,
    metrics: Arc<Metrics>,
    timeout: Duration,
    /// What kmutate answered with a change, to tell reinvocations.
    reinvocations: super::reinvocation::ReinvocationMemory,
    /// The other replicas, which know every answer with a change before
    /// kube-apiserver does ([`super::peers`]).
    peers: Option<Peers>,
    /// True once the peers' memory is taken in (at once without peers).
    memory_ready: watch::Sender<bool>,
    shutting_down: AtomicBool,
    received: AtomicU64,
    /// How answers report what the bindings did.
    reporting: Reporting,
}

/// How answers report what the bindings did (`--mode`, `--warnings`,
/// `--policy-reports`).
#[derive(Clone, Debug)]
struct Reporting {
    monitor_all: bool,
    warn_changes: bool,
    /// The request path's end of the PolicyReport writer.
    reports: Option<crate::reports::ReportSink>,
}

/// A running server.
pub struct Server {
    addr: SocketAddr,
    metrics_addr: Option<SocketAddr>,
    ca_bundle: Option<PathBuf>,
    shared: Arc<Shared>,
    shutdown: watch::Sender<bool>,
    serving: Option<JoinHandle<()>>,
    metrics_serving: Option<JoinHandle<()>>,
    /// The sources' tasks, stopped when the server is dropped.
    sources: crate::source::Running,
    /// Keeps the webhook configuration's rules (`--manage-webhook`).
    registration: Option<Arc<RuleKeeper>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("addr", &self.addr)
            .field("metrics_addr", &self.metrics_addr)
            .finish()
    }
}

/// Starts serving: binds the listeners, then loads the policies in the
/// background (`/readyz` answers 503 until they are loaded).
pub async fn start(config: ServeConfig) -> Result<Server> {
    let metrics = Arc::new(Metrics::new());
    let provider = tls::provider();
    let (files, ca_bundle) = match &config.tls {
        TlsSource::Files(files) => (files.clone(), None),
        TlsSource::SelfSigned { dir, names } => {
            let generated = tls::generate_self_signed(dir, names)?;
            (generated.files, Some(generated.ca))
        }
    };
    let cert = Arc::new(ReloadingCert::new(
        files.clone(),
        provider.clone(),
        Some(metrics.clone()),
    )?);
    let tls_config = tls::server_config(cert.clone(), config.client_ca.as_deref(), provider)?;
    let acceptor = TlsAcceptor::from(Arc::new(tls_config));
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("listening on {}", config.listen))?;
    let addr = listener.local_addr()?;
    let metrics_listener = match config.metrics_listen {
        Some(a) => Some(
            TcpListener::bind(a)
                .await
                .with_context(|| format!("listening on {a}"))?,
        ),
        None => None,
    };
    let metrics_addr = metrics_listener
        .as_ref()
        .map(TcpListener::local_addr)
        .transpose()?;
    let reports = match &config.policy_reports {
        Some(namespace) => Some(start_reports(namespace.as_deref(), &config.api).await?),
        None => None,
    };
    let shared = Arc::new(Shared {
        engine: Arc::new(ArcSwapOption::empty()),
        metrics: metrics.clone(),
        timeout: config.timeout,
        reinvocations: Default::default(),
        peers: match config.peers.is_empty() {
            true => None,
            false => Some(Peers::new(
                config.peers.clone(),
                config.peer_address.clone(),
                files,
                cert.clone(),
            )?),
        },
        memory_ready: watch::Sender::new(false),
        shutting_down: AtomicBool::new(false),
        received: AtomicU64::new(0),
        reporting: Reporting {
            monitor_all: config.mode == AdmissionMode::Monitor,
            warn_changes: config.warnings == WarningsMode::Changes,
            reports,
        },
    });

    let registration = match &config.manage_webhook {
        Some(managed) => Some(start_registration(managed, &config.api).await?),
        None => None,
    };
    let sources = crate::source::start(
        &config.sources,
        config.source,
        &config.api,
        Arc::from(config.authorizer),
        shared.engine.clone(),
        Some(metrics.clone()),
        registration
            .clone()
            .map(|r| r as Arc<dyn crate::source::PublishGate>),
    )
    .await?;

    let (shutdown, shutdown_rx) = watch::channel(false);
    let limits = Limits::new(config.header_read_timeout, config.idle_timeout);
    let serving = tokio::spawn(serve_tls(
        listener,
        acceptor,
        shared.clone(),
        shutdown_rx.clone(),
        config.drain_timeout,
        limits,
    ));
    let metrics_serving = metrics_listener
        .map(|l| tokio::spawn(serve_metrics(l, shared.clone(), shutdown_rx, limits)));
    // What the peers remember, taken while the listener already answers
    // them (they take this replica's at their start too); admissions wait.
    match &shared.peers {
        Some(_) => {
            let shared = shared.clone();
            tokio::spawn(async move {
                if let Some(peers) = &shared.peers {
                    let taken = peers.take_from_peers(PEERS_AT_START).await;
                    tracing::info!(
                        answers = taken.len(),
                        "reinvocation memory taken from the peers"
                    );
                    shared.reinvocations.absorb(taken);
                }
                shared.memory_ready.send_replace(true);
            });
        }
        None => {
            shared.memory_ready.send_replace(true);
        }
    }
    Ok(Server {
        addr,
        metrics_addr,
        ca_bundle,
        shared,
        shutdown,
        serving: Some(serving),
        metrics_serving,
        sources,
        registration,
    })
}

/// Starts keeping the rules of `managed`, with its own client.
async fn start_registration(managed: &ManagedWebhook, api: &ApiConfig) -> Result<Arc<RuleKeeper>> {
    let what = format!("--manage-webhook {}", managed.name);
    let lease_name = format!("{}-webhook-rules", managed.name);
    let (client, lease) =
        leased_client(&what, managed.lease_namespace.as_deref(), &lease_name, api).await?;
    Ok(RuleKeeper::start(client, &managed.name, lease))
}

/// Starts the PolicyReport writer, with its own client.
async fn start_reports(
    lease_namespace: Option<&str>,
    api: &ApiConfig,
) -> Result<crate::reports::ReportSink> {
    let lease_name = crate::reports::LEASE_NAME;
    let (client, lease) =
        leased_client("--policy-reports", lease_namespace, lease_name, api).await?;
    let (sink, _writer) = crate::reports::start(client, lease);
    Ok(sink)
}

/// A client of its own for the writer started by the option `what`, and
/// the Lease `lease_name` its replicas take turns through (in
/// `lease_namespace`, by default the client's namespace).
async fn leased_client(
    what: &str,
    lease_namespace: Option<&str>,
    lease_name: &str,
    api: &ApiConfig,
) -> Result<(kube::Client, LeaseLock)> {
    let client = crate::source::api::client(api.kube.clone())
        .await
        .with_context(|| what.to_string())?;
    let namespace = lease_namespace
        .unwrap_or(client.default_namespace())
        .to_string();
    let lease = LeaseLock::new(client.clone(), &namespace, lease_name, &lease_identity());
    Ok((client, lease))
}

/// This replica's name in the Lease: the host (a Pod's name) and a
/// per-process suffix, so that two processes on one host differ.
fn lease_identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "kmutate".into());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!("{host}_{}_{nanos:08x}", std::process::id())
}

/// Triggers a server's shutdown from anywhere.
#[derive(Clone, Debug)]
pub struct ShutdownHandle(watch::Sender<bool>);

impl ShutdownHandle {
    /// Stops accepting connections and starts draining.
    pub fn shutdown(&self) {
        let _ = self.0.send(true);
    }
}

impl Server {
    /// The TLS listener's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The metrics listener's address.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// The generated CA bundle, when the certificate is self-signed.
    pub fn ca_bundle(&self) -> Option<&std::path::Path> {
        self.ca_bundle.as_deref()
    }

    /// The metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.shared.metrics
    }

    /// Whether the policies are loaded (after every source's first full sync).
    pub fn is_ready(&self) -> bool {
        self.shared.engine.load().is_some()
    }

    /// The engine in force, once ready.
    pub fn engine(&self) -> Option<Arc<Engine>> {
        self.shared.engine.load_full()
    }

    /// Waits until the policies are loaded (false if `limit` passes first).
    pub async fn wait_ready(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while !self.is_ready() {
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        true
    }

    /// `POST /mutate` requests received so far (each is answered unless the
    /// drain deadline passes first).
    pub fn requests_received(&self) -> u64 {
        self.shared.received.load(Ordering::SeqCst)
    }

    /// A handle that triggers the shutdown.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle(self.shutdown.clone())
    }

    /// Shuts down: stops accepting, answers the requests in flight (for at
    /// most the drain timeout), then returns.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        self.sources.stop();
        self.wait().await;
    }

    /// Waits until the server has shut down (after a trigger) and drained.
    pub async fn wait(&mut self) {
        if let Some(serving) = self.serving.take() {
            let _ = serving.await;
        }
        if let Some(m) = self.metrics_serving.take() {
            let _ = m.await;
        }
        // The rules stay as they are (the other replicas serve them); only
        // the Lease is given up, for another replica to write at once.
        if let Some(registration) = self.registration.take() {
            registration.stop(Duration::from_secs(2)).await;
        }
    }
}

async fn serve_tls(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
    drain_timeout: Duration,
    limits: Limits,
) {
    let builder = connection_builder();
    // Connections are told to stop only after the hand-over to the peers,
    // and the listener accepts until then: this replica still serves its
    // connections, so a peer's answer made meanwhile must reach it, not be
    // refused (the peer would leave it out, and a reinvocation that came
    // here would be taken for a new request).
    let (stop_connections, connection_shutdown) = watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    let mut handing_over: Option<tokio::task::JoinHandle<()>> = None;
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (tcp, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // E.g. out of file descriptors: back off, keep serving.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = tcp.set_nodelay(true);
                let acceptor = acceptor.clone();
                let shared = shared.clone();
                let builder = builder.clone();
                let shutdown = connection_shutdown.clone();
                connections.spawn(async move {
                    // rustls reads 4 KB at a time: a buffer under it takes a
                    // request's record from the socket in one read, not two.
                    let tcp = tokio::io::BufReader::with_capacity(SOCKET_READ_BUFFER, tcp);
                    let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(tls)) => tls,
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "TLS handshake timed out");
                            return;
                        }
                    };
                    let activity = Arc::new(Activity::new());
                    let service = {
                        let activity = activity.clone();
                        hyper::service::service_fn(move |req| {
                            let shared = shared.clone();
                            let request = activity.begin(req.version());
                            async move {
                                let response = route(shared, req).await;
                                drop(request);
                                Ok::<_, Infallible>(response)
                            }
                        })
                    };
                    let io = TokioIo::new(Watched { io: tls, activity: activity.clone() });
                    let conn = builder.serve_connection(io, service);
                    let ended = drive(conn, |c| c.graceful_shutdown(), &activity, limits, Some(shutdown)).await;
                    ended.log(peer);
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = stopped(&mut shutdown), if handing_over.is_none() => {
                shared.shutting_down.store(true, Ordering::SeqCst);
                let shared = shared.clone();
                handing_over = Some(tokio::spawn(async move { hand_over_to_peers(&shared).await }));
            }
            _ = async { handing_over.as_mut().expect("handing over").await }, if handing_over.is_some() => break,
        }
    }
    drop(listener);
    let _ = stop_connections.send(true);
    tracing::info!("shutting down: draining in-flight requests");
    // Each connection saw the shutdown: HTTP/1.1 ones close after their
    // request in flight, HTTP/2 ones get GOAWAY.
    let drained = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(drain_timeout, drained).await.is_err() {
        tracing::warn!(
            "drain timeout ({}) passed with requests in flight",
            format_duration(drain_timeout)
        );
        // They go on until the runtime stops.
        connections.detach_all();
    } else {
        tracing::info!("drained");
    }
}

/// How long a starting replica waits for its peers' memory.
const PEERS_AT_START: Duration = Duration::from_secs(2);

/// Before any connection closes: hands what this replica remembers to its
/// peers (those left out a moment ago included: each answer also went to
/// the peers up when it was made).
async fn hand_over_to_peers(shared: &Shared) {
    let Some(peers) = &shared.peers else {
        return;
    };
    let entries = shared.reinvocations.remembered();
    let started = Instant::now();
    let taken = peers.hand_over(&entries).await;
    tracing::info!(
        answers = entries.len(),
        peers = taken,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "reinvocation memory handed to the peers"
    );
    shared.metrics.observe_hand_over(entries.len(), taken);
}

/// Whether `req` comes from a peer (`Ok(false)`: from this process),
/// or the answer that refuses it.
#[allow(clippy::result_large_err)]
fn from_a_peer<'s>(
    shared: &'s Shared,
    req: &Request<Incoming>,
) -> Result<(&'s Peers, bool), Response<Full<Bytes>>> {
    let Some(peers) = &shared.peers else {
        return Err(text(
            StatusCode::NOT_FOUND,
            "not found: this replica has no --peers",
        ));
    };
    let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok());
    match peers.accepts(header("authorization"), header(INSTANCE_HEADER)) {
        Ok(other) => Ok((peers, other)),
        Err(e) => {
            tracing::warn!(error = %e, "a request to the replicas' endpoint refused");
            Err(text(StatusCode::FORBIDDEN, "not a replica of this webhook"))
        }
    }
}

/// `GET /reinvocations`: a starting peer takes what this replica
/// remembers, and announces where it is sent answers from now on.
async fn give_memory(shared: Arc<Shared>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let peers = match from_a_peer(&shared, &req) {
        Ok((peers, true)) => peers,
        Ok((_, false)) => return reply(StatusCode::OK, "application/json", encode_remembered(&[])),
        Err(refused) => return refused,
    };
    let address = req
        .headers()
        .get(ADDRESS_HEADER)
        .and_then(|v| v.to_str().ok());
    // Announced first: an answer made after the snapshot is sent to it.
    peers.announced(address).await;
    let entries = shared.reinvocations.remembered();
    tracing::info!(
        answers = entries.len(),
        peer = address.unwrap_or_default(),
        "reinvocation memory given to a starting peer"
    );
    reply(
        StatusCode::OK,
        "application/json",
        encode_remembered(&entries),
    )
}

/// `POST /reinvocations`: a peer's answers, taken in.
async fn take_hand_over(shared: Arc<Shared>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    match from_a_peer(&shared, &req) {
        Ok((_, true)) => {}
        Ok((_, false)) => return text(StatusCode::NO_CONTENT, ""),
        Err(refused) => return refused,
    }
    let body = match http_body_util::Limited::new(req.into_body(), MAX_HAND_OVER_BYTES)
        .collect()
        .await
    {
        Ok(collected) => collected.to_bytes(),
        Err(e) => {
            return text(
                StatusCode::BAD_REQUEST,
                format!("reading the hand-over: {e}"),
            )
        }
    };
    match decode_remembered(&body) {
        Ok(entries) => {
            tracing::debug!(answers = entries.len(), "answers taken from a peer");
            shared.reinvocations.absorb(entries);
            text(StatusCode::NO_CONTENT, "")
        }
        Err(e) => text(StatusCode::BAD_REQUEST, e.to_string()),
    }
}

/// hyper's connection settings, for both listeners.
fn connection_builder() -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // The header-read timeout is kept by `drive`: hyper's own starts when a
    // keep-alive connection goes idle, so it would close idle connections
    // after it too. (With a timer, hyper's default is 30 s: off it goes.)
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(None);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(256);
    builder
}

/// Resolves once a shutdown is triggered (or its sender is gone).
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await.map(|_| ());
}

async fn serve_metrics(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
    limits: Limits,
) {
    let builder = connection_builder();
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((tcp, peer)) = accepted else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let shared = shared.clone();
                let builder = builder.clone();
                connections.spawn(async move {
                    let activity = Arc::new(Activity::new());
                    let service = {
                        let activity = activity.clone();
                        hyper::service::service_fn(move |req: Request<Incoming>| {
                            let shared = shared.clone();
                            let request = activity.begin(req.version());
                            async move {
                                let response = match (req.method(), req.uri().path()) {
                                    (&Method::GET, "/metrics") => {
                                        reply(StatusCode::OK, super::metrics::CONTENT_TYPE, shared.metrics.encode())
                                    }
                                    (&Method::GET, HEALTHZ_PATH) => text(StatusCode::OK, "ok"),
                                    _ => text(StatusCode::NOT_FOUND, "not found"),
                                };
                                drop(request);
                                Ok::<_, Infallible>(response)
                            }
                        })
                    };
                    let io = TokioIo::new(Watched { io: tcp, activity: activity.clone() });
                    let conn = builder.serve_connection(io, service);
                    // Stopped by `abort_all` at shutdown, not drained.
                    let ended = drive(conn, |c| c.graceful_shutdown(), &activity, limits, None).await;
                    ended.log(peer);
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = stopped(&mut shutdown) => break,
        }
    }
    connections.abort_all();
}

/// The connection timeouts (`None`: no limit).
#[derive(Clone, Copy, Debug)]
struct Limits {
    /// `--header-read-timeout`.
    header_read: Option<Duration>,
    /// `--idle-timeout`.
    idle: Option<Duration>,
}

impl Limits {
    fn new(header_read: Duration, idle: Duration) -> Limits {
        Limits {
            header_read: (!header_read.is_zero()).then_some(header_read),
            idle: (!idle.is_zero()).then_some(idle),
        }
    }
}

/// How long a connection closing gracefully (idle, or at shutdown) may take
/// to close once no request is in flight: an HTTP/2 client has to answer the
/// GOAWAY's PING first. Past it the connection is dropped.
const CLOSING_GRACE: Duration = Duration::from_secs(5);

/// What [`drive`] watches of one connection: its reads ([`Watched`]) and its
/// requests ([`Activity::begin`]). Times are nanoseconds since `start`.
struct Activity {
    /// When the connection started (after its TLS handshake).
    start: tokio::time::Instant,
    /// Requests whose answer is being worked out.
    in_flight: AtomicUsize,
    /// Whether a request has begun yet.
    served: AtomicBool,
    /// Whether the connection speaks HTTP/2 (known at its first request).
    http2: AtomicBool,
    /// When the last request ended (0: the start).
    idle_since: AtomicU64,
    /// When the first byte came with no request in flight, plus one (0:
    /// none since the last request began): the start of an HTTP/1.1 head.
    head_since: AtomicU64,
}

/// Why [`drive`] dropped a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expiry {
    /// A request's head did not arrive whole in time.
    Head,
    /// No request in flight for the idle timeout: closed gracefully.
    Idle,
    /// Closing gracefully took longer than [`CLOSING_GRACE`].
    Closing,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            start: tokio::time::Instant::now(),
            in_flight: AtomicUsize::new(0),
            served: AtomicBool::new(false),
            http2: AtomicBool::new(false),
            idle_since: AtomicU64::new(0),
            head_since: AtomicU64::new(0),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn at(&self, nanos: u64) -> tokio::time::Instant {
        self.start + Duration::from_nanos(nanos)
    }

    /// A request begins: its head has arrived. In flight until the guard
    /// is dropped (its answer worked out, or the request abandoned).
    fn begin(self: &Arc<Self>, version: hyper::Version) -> InRequest {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.head_since.store(0, Ordering::Relaxed);
        if !self.served.load(Ordering::Relaxed) {
            self.http2
                .store(version == hyper::Version::HTTP_2, Ordering::Relaxed);
            self.served.store(true, Ordering::Release);
        }
        InRequest(self.clone())
    }

    /// Bytes were read.
    fn read(&self) {
        if self.in_flight.load(Ordering::Acquire) == 0
            && self.head_since.load(Ordering::Relaxed) == 0
        {
            self.head_since.store(self.now() + 1, Ordering::Relaxed);
        }
    }

    /// The next time something is due, and what: none while a request is in
    /// flight. `closing`: since when the connection is closing gracefully.
    fn deadline(
        &self,
        limits: Limits,
        closing: Option<tokio::time::Instant>,
    ) -> Option<(tokio::time::Instant, Expiry)> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        let idle_since = self.at(self.idle_since.load(Ordering::Relaxed));
        if let Some(since) = closing {
            return Some((since.max(idle_since) + CLOSING_GRACE, Expiry::Closing));
        }
        if let Some(header_read) = limits.header_read {
            // The first request's head is due from the start (for HTTP/2,
            // the preface and the first HEADERS); a later HTTP/1.1 one from
            // its first byte. An HTTP/2 connection's frames between
            // requests (PING, SETTINGS, WINDOW_UPDATE) start no head.
            if !self.served.load(Ordering::Acquire) {
                return Some((self.start + header_read, Expiry::Head));
            }
            let head = self.head_since.load(Ordering::Relaxed);
            if head != 0 && !self.http2.load(Ordering::Relaxed) {
                return Some((self.at(head - 1) + header_read, Expiry::Head));
            }
        }
        limits.idle.map(|idle| (idle_since + idle, Expiry::Idle))
    }
}

/// A request in flight (see [`Activity::begin`]).
struct InRequest(Arc<Activity>);

impl Drop for InRequest {
    fn drop(&mut self) {
        let activity = &self.0;
        activity.idle_since.store(activity.now(), Ordering::Relaxed);
        activity.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A connection's byte stream, telling its [`Activity`] when bytes come.
struct Watched<I> {
    io: I,
    activity: Arc<Activity>,
}

impl<I: AsyncRead + Unpin> AsyncRead for Watched<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let result = Pin::new(&mut this.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.activity.read();
        }
        result
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Watched<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// How [`drive`] ended.
enum Ended<E> {
    /// The connection ended by itself (or closed gracefully).
    Closed(Result<(), E>),
    /// Dropped: its head not in time, or its graceful close too long.
    Dropped(Expiry),
}

impl<E: std::fmt::Display> Ended<E> {
    fn log(&self, peer: SocketAddr) {
        match self {
            Ended::Closed(Ok(())) => {}
            Ended::Closed(Err(e)) => {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
            Ended::Dropped(Expiry::Head) => {
                tracing::debug!(%peer, "request head not received in time: connection closed");
            }
            Ended::Dropped(_) => {
                tracing::debug!(%peer, "connection did not close in time: dropped");
            }
        }
    }
}

/// Serves `conn` until it ends, keeping the header-read and idle timeouts:
/// a head late in coming drops the connection; an idle connection, or a
/// shutdown, closes it gracefully (`graceful`), and if that takes longer
/// than [`CLOSING_GRACE`] with no request in flight, drops it.
///
/// The checks run in the connection's own task, after each poll of it:
/// everything that changes a deadline (a read, a request beginning or
/// ending) wakes that task, so no other wake-up is needed.
async fn drive<C, E>(
    conn: C,
    mut graceful: impl FnMut(Pin<&mut C>),
    activity: &Activity,
    limits: Limits,
    shutdown: Option<watch::Receiver<bool>>,
) -> Ended<E>
where
    C: Future<Output = Result<(), E>>,
{
    let mut conn = std::pin::pin!(conn);
    let mut stop = std::pin::pin!(async move {
        match shutdown {
            Some(mut shutdown) => stopped(&mut shutdown).await,
            None => std::future::pending().await,
        }
    });
    let mut stopping = false;
    let mut closing: Option<tokio::time::Instant> = None;
    let mut timer = std::pin::pin!(tokio::time::sleep(Duration::ZERO));
    let mut armed: Option<tokio::time::Instant> = None;
    std::future::poll_fn(|cx| loop {
        if let Poll::Ready(result) = conn.as_mut().poll(cx) {
            return Poll::Ready(Ended::Closed(result));
        }
        if !stopping && stop.as_mut().poll(cx).is_ready() {
            stopping = true;
            if closing.is_none() {
                graceful(conn.as_mut());
                closing = Some(tokio::time::Instant::now());
            }
            continue;
        }
        let Some((at, expiry)) = activity.deadline(limits, closing) else {
            return Poll::Pending;
        };
        // A deadline moved later (a request came since) is re-armed only
        // when the earlier one fires: one timer reset per request at most.
        if armed.is_none_or(|armed| at < armed) {
            timer.as_mut().reset(at);
            armed = Some(at);
        }
        if timer.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        armed = None;
        if tokio::time::Instant::now() < at {
            continue;
        }
        match expiry {
            Expiry::Idle => {
                tracing::debug!("connection idle: closing it");
                graceful(conn.as_mut());
                closing = Some(tokio::time::Instant::now());
            }
            Expiry::Head | Expiry::Closing => return Poll::Ready(Ended::Dropped(expiry)),
        }
    })
    .await
}

fn reply(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn text(status: StatusCode, message: impl Into<String>) -> Response<Full<Bytes>> {
    let mut message = message.into();
    message.push('\n');
    reply(status, "text/plain; charset=utf-8", message)
}

async fn route(shared: Arc<Shared>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    match (req.method(), req.uri().path()) {
        (&Method::POST, MUTATE_PATH) => mutate(shared, req).await,
        (&Method::POST, VALIDATE_PATH) => validate(shared, req).await,
        (&Method::POST, HAND_OVER_PATH) => take_hand_over(shared, req).await,
        (&Method::GET, HAND_OVER_PATH) => give_memory(shared, req).await,
        (&Method::GET, HEALTHZ_PATH) => text(StatusCode::OK, "ok"),
        (&Method::GET, READYZ_PATH) => {
            if shared.shutting_down.load(Ordering::SeqCst) {
                text(StatusCode::SERVICE_UNAVAILABLE, "shutting down")
            } else if !*shared.memory_ready.borrow() {
                text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "taking the peers' reinvocation memory",
                )
            } else if shared.engine.load().is_some() {
                text(StatusCode::OK, "ok")
            } else {
                text(StatusCode::SERVICE_UNAVAILABLE, "policies not loaded yet")
            }
        }
        (_, MUTATE_PATH | VALIDATE_PATH) => text(StatusCode::METHOD_NOT_ALLOWED, "use POST"),
        (_, HEALTHZ_PATH | READYZ_PATH) => text(StatusCode::METHOD_NOT_ALLOWED, "use GET"),
        _ => text(StatusCode::NOT_FOUND, "not found"),
    }
}

/// `POST /validate`: a review of a `kmutate.dev` policy or binding,
/// answered from the object alone (no engine needed, so it works before the
/// policies are loaded).
async fn validate(shared: Arc<Shared>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    if let Some(message) = unsupported_media_type(req.headers().get(CONTENT_TYPE)) {
        return text(StatusCode::UNSUPPORTED_MEDIA_TYPE, message);
    }
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let body =
        match tokio::time::timeout(shared.timeout, read_body(req.into_body(), declared)).await {
            Ok(Ok(body)) => body,
            Ok(Err(BodyError::TooLarge)) => {
                return text(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("request body larger than {MAX_BODY_BYTES} bytes"),
                )
            }
            Ok(Err(BodyError::Read(e))) => {
                return text(
                    StatusCode::BAD_REQUEST,
                    format!("reading request body: {e}"),
                )
            }
            Err(_) => {
                return text(
                    StatusCode::REQUEST_TIMEOUT,
                    "request body not received in time",
                )
            }
        };
    // Compiling the expressions is the costly part: off the reactor.
    let answered = tokio::task::spawn_blocking(move || {
        std::panic::catch_unwind(|| validation_webhook::answer(&body))
    })
    .await;
    match answered {
        Ok(Ok(Ok(review))) => reply(StatusCode::OK, JSON, review.to_string()),
        Ok(Ok(Err(message))) => text(StatusCode::BAD_REQUEST, message),
        _ => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "validating the object failed unexpectedly",
        ),
    }
}

/// Decrements the in-flight gauge however the request ends.
struct InFlight<'a>(&'a Metrics);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight().dec();
    }
}

/// The `resource` label: `deployments.apps`, `pods`, `pods/status`.
fn resource_label(request: &AdmissionRequest) -> String {
    let r = &request.resource;
    let mut label = if r.group.is_empty() {
        r.resource.clone()
    } else {
        format!("{}.{}", r.resource, r.group)
    };
    if !request.sub_resource.is_empty() {
        label.push('/');
        label.push_str(&request.sub_resource);
    }
    label
}

/// How often a request that came before the first policy set looks again.
const ENGINE_POLL: Duration = Duration::from_millis(5);

/// The engine in force, waited for until `deadline` when none is yet: a
/// replica accepts connections before its policies are compiled (its peers
/// and probes need the listener), and whatever routes to it before it is
/// ready (a proxy, a Service between probes) must not see its requests
/// refused; compiling takes milliseconds. The slot is shared with the
/// sources, which publish without telling anyone, so it is polled, and only
/// on this path.
async fn engine_when_loaded(
    slot: &ArcSwapOption<Engine>,
    deadline: tokio::time::Instant,
) -> Option<Arc<Engine>> {
    loop {
        if let Some(engine) = slot.load_full() {
            return Some(engine);
        }
        if tokio::time::Instant::now() + ENGINE_POLL > deadline {
            return None;
        }
        tokio::time::sleep(ENGINE_POLL).await;
    }
}

async fn mutate(shared: Arc<Shared>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let started = Instant::now();
    let deadline = tokio::time::Instant::from_std(started + shared.timeout);
    let peers_until = peers_deadline(started, shared.timeout, req.uri().query());
    shared.received.fetch_add(1, Ordering::SeqCst);
    let metrics = shared.metrics.clone();
    metrics.in_flight().inc();
    let _in_flight = InFlight(&metrics);
    // The client gets the reason; the log only its kind (a decoder's message
    // may quote part of the object), the reason itself at debug level.
    let refuse = |status: StatusCode, result: RequestResult, kind: &str, message: String| {
        tracing::info!(status = status.as_u16(), kind, "request refused");
        tracing::debug!(reason = %message, "request refused");
        metrics.observe_request("", "", result, started.elapsed());
        text(status, message)
    };

    // JSON only, as kube-apiserver sends it; the body is not read.
    if let Some(message) = unsupported_media_type(req.headers().get(CONTENT_TYPE)) {
        return refuse(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            RequestResult::Invalid,
            "unsupported media type",
            message,
        );
    }

    // The body, at most MAX_BODY_BYTES.
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let body = match tokio::time::timeout_at(deadline, read_body(req.into_body(), declared)).await {
        Ok(Ok(body)) => body,
        Ok(Err(BodyError::TooLarge)) => {
            return refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                RequestResult::TooLarge,
                "body too large",
                format!("request body larger than {MAX_BODY_BYTES} bytes"),
            )
        }
        Ok(Err(BodyError::Read(e))) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                RequestResult::Invalid,
                "body unreadable",
                format!("reading request body: {e}"),
            )
        }
        Err(_) => {
            return refuse(
                StatusCode::REQUEST_TIMEOUT,
                RequestResult::Invalid,
                "body timeout",
                "request body not received in time".into(),
            )
        }
    };

    // A replica just started knows its peers' answers before it admits.
    if !*shared.memory_ready.borrow() {
        let mut ready = shared.memory_ready.subscribe();
        let _ = tokio::time::timeout_at(deadline, ready.wait_for(|r| *r)).await;
    }

    // One load of the engine in force: the whole request uses it.
    let Some(mut engine) = engine_when_loaded(&shared.engine, deadline).await else {
        return text(StatusCode::SERVICE_UNAVAILABLE, "policies not loaded yet");
    };

    // Decoding and matching run here, guarded against panics.
    let decode = |engine: &Engine| {
        std::panic::catch_unwind(AssertUnwindSafe(|| {
            decode_review(engine, &body).map(|decoded| match decoded {
                DecodedBody::Unmatched(review) => (review, 0, None, None),
                DecodedBody::Review(mut review) => {
                    complete_request(&mut review.request, engine.resources());
                    // The admission's first pass reuses this matching.
                    let prematch = engine.prematch(&review.request);
                    let matched = engine.matched(&prematch);
                    // Every binding monitored: none is enforced.
                    let fallback = matched
                        .iter()
                        .filter(|_| !shared.reporting.monitor_all)
                        .find(|m| m.failure_policy == FailurePolicy::Fail)
                        .map(|m| (m.policy.to_string(), m.binding.to_string()));
                    (review, matched.len(), fallback, Some(prematch))
                }
            })
        }))
    };
    let mut decoded = decode(&engine);
    // A Namespace created a moment ago may not have reached the watch yet:
    // read it live, within the request's deadline, and decide with it.
    let missing = match &decoded {
        Ok(Ok((review, matched, _, _))) if *matched > 0 => {
            let ns = &review.request.namespace;
            (!ns.is_empty() && engine.cluster().namespace(ns).is_none()).then(|| ns.clone())
        }
        _ => None,
    };
    if let (Some(ns), Some(live)) = (missing, engine.live_namespaces().cloned()) {
        let result = match tokio::time::timeout_at(deadline, live.get(&ns)).await {
            Ok(Ok(Some(namespace))) => {
                engine = Arc::new(engine.with_namespace(namespace));
                decoded = decode(&engine);
                "found"
            }
            Ok(Ok(None)) => "not_found",
            Ok(Err(e)) => {
                tracing::warn!(namespace = %ns, error = %e, "reading the request's Namespace failed");
                "error"
            }
            Err(_) => "timeout",
        };
        metrics.observe_namespace_lookup(result);
    }
    let (review, matched, fallback, prematch) = match decoded {
        Ok(Ok(d)) => d,
        Ok(Err(e)) => {
            let kind = match e {
                review::DecodeError::TooDeep => "nesting too deep",
                review::DecodeError::Json(_) => "invalid JSON or AdmissionReview",
                review::DecodeError::NotAReview { .. } => "not an AdmissionReview",
                review::DecodeError::NoRequest => "no request",
            };
            return refuse(
                StatusCode::BAD_REQUEST,
                RequestResult::Invalid,
                kind,
                e.to_string(),
            );
        }
        Err(_) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                RequestResult::Invalid,
                "decoder panic",
                "request could not be decoded".into(),
            )
        }
    };
    drop(body);
    let version = review.version;
    let uid = review.request.uid.clone();
    let operation = review.request.operation.clone();
    let resource = resource_label(&review.request);

    if matched == 0 || review.request.object.is_none() {
        let bytes = review::encode(version, &uid, &Answer::allow());
        metrics.observe_request(
            &operation,
            &resource,
            RequestResult::Allowed,
            started.elapsed(),
        );
        return reply(StatusCode::OK, "application/json", bytes);
    }

    let mut review = review;
    let (identity, as_sent) = shared.reinvocations.recognise(&mut review.request);

    // Evaluation runs here on the worker (handing it to another thread costs
    // more than most evaluations), stopped from inside at the deadline. One
    // that may wait on the network, or run many bindings, goes to the
    // blocking pool, so that the workers keep answering (probes included).
    let evaluated = if engine.may_block() || matched > INLINE_MAX_BINDINGS {
        let metrics = metrics.clone();
        let request = review.request;
        let until = started + shared.timeout;
        let reporting = shared.reporting.clone();
        let evaluation = tokio::task::spawn_blocking(move || {
            evaluate(
                &engine, &metrics, request, prematch, until, as_sent, &reporting,
            )
        });
        match tokio::time::timeout_at(deadline, evaluation).await {
            Ok(Ok(evaluated)) => evaluated,
            Ok(Err(join_error)) => {
                // `evaluate` catches panics; this is a cancelled task.
                tracing::error!(uid = %uid, error = %join_error, "evaluation task failed");
                Evaluated::Done(panic_answer(), RequestResult::Panic, None)
            }
            Err(_) => Evaluated::TimedOut,
        }
    } else {
        evaluate(
            &engine,
            &metrics,
            review.request,
            prematch,
            deadline.into_std(),
            as_sent,
            &shared.reporting,
        )
    };
    let (answer, result, leftover) = match evaluated {
        Evaluated::Done(answer, result, leftover) => (answer, result, leftover),
        Evaluated::TimedOut => {
            let timeout = format_duration(shared.timeout);
            match &fallback {
                Some((policy, binding)) => {
                    tracing::warn!(uid = %uid, policy = %policy, binding = %binding, timeout = %timeout,
                        "evaluation timed out; denied by failurePolicy Fail");
                    (
                        Answer::deny(
                            403,
                            format!("policy '{policy}' with binding '{binding}' denied request: evaluation did not complete within {timeout}"),
                        ),
                        RequestResult::Timeout,
                        None,
                    )
                }
                None => {
                    tracing::warn!(uid = %uid, timeout = %timeout,
                        "evaluation timed out; admitted unchanged by failurePolicy Ignore");
                    (Answer::allow(), RequestResult::Timeout, None)
                }
            }
        }
    };
    let bytes = review::encode(version, &uid, &answer);
    metrics.observe_request(&operation, &resource, result, started.elapsed());
    match leftover {
        // The object changed: kube-apiserver may call again with it.
        Some((admitted, first_pass)) if matches!(result, RequestResult::Patched) => {
            let answered = Answered::new(&admitted, first_pass.as_ref(), answer.patch.as_deref());
            let (entry, forgotten) = shared.reinvocations.remember(identity, answered);
            if let Some(peers) = &shared.peers {
                // The peers know the answer before kube-apiserver does.
                peers.send(std::slice::from_ref(&entry), peers_until).await;
            }
            drop_after_reply((admitted, first_pass, forgotten));
        }
        Some(leftover) => drop_after_reply(leftover),
        None => {}
    }
    reply(StatusCode::OK, "application/json", bytes)
}

/// Until when the peers are waited for with a request's answer: a tenth
/// of the request's time before the earlier of `--timeout` and
/// kube-apiserver's own (the `timeout` query parameter it adds to every
/// webhook call: `timeoutSeconds`), which leaves the reply its time.
fn peers_deadline(started: Instant, timeout: Duration, query: Option<&str>) -> Instant {
    let apiserver = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter_map(|pair| pair.strip_prefix("timeout="))
        .find_map(|value| super::parse_duration(value).ok());
    let timeout = apiserver.map_or(timeout, |t| t.min(timeout));
    started + timeout - timeout / 10
}

/// Why a request's Content-Type is refused (`None`: it is
/// `application/json`, with or without parameters, in any case).
fn unsupported_media_type(content_type: Option<&HeaderValue>) -> Option<String> {
    let Some(value) = content_type else {
        return Some(format!("missing Content-Type: expected {JSON:?}"));
    };
    let essence = value
        .as_bytes()
        .split(|&b| b == b';')
        .next()
        .unwrap_or_default()
        .trim_ascii();
    if essence.eq_ignore_ascii_case(JSON.as_bytes()) {
        return None;
    }
    let received = String::from_utf8_lossy(value.as_bytes());
    Some(format!(
        "unsupported Content-Type {received:?}: expected {JSON:?}"
    ))
}

/// Drops the admitted object, or the answers the reinvocation memory
/// forgot (hundreds of allocations each), after the answer is written
/// rather than before. A task spawned on a worker waits there for the
/// current task to yield, and the connection's task yields after writing
/// the answer (an HTTP/2 stream's task wakes the connection's, which then
/// runs first).
fn drop_after_reply<T: Send + 'static>(leftover: T) {
    tokio::spawn(async move { drop(leftover) });
}

/// The bytes read from a connection's socket at once: a TLS record (at most
/// 16 KB and its header).
const SOCKET_READ_BUFFER: usize = 17 * 1024;

/// The most matching bindings a request may have to be evaluated on the
/// worker that read it; more go to the blocking pool. (The benchmark's ten
/// policies take about 0.3 ms together; a thousand, about 7 ms.)
const INLINE_MAX_BINDINGS: usize = 32;

/// How much of an oversized body is read and dropped before answering 413,
/// so that the client, still writing, gets to read the answer.
const DISCARD_LIMIT: u64 = 4 * MAX_BODY_BYTES as u64;

enum BodyError {
    TooLarge,
    Read(String),
}

/// Reads a body of at most [`MAX_BODY_BYTES`]; of a larger one, reads and
/// drops up to [`DISCARD_LIMIT`] bytes before reporting it too large.
async fn read_body(mut body: Incoming, declared: Option<u64>) -> Result<Bytes, BodyError> {
    let mut buf = bytes::BytesMut::with_capacity(
        declared.map_or(16 * 1024, |n| n.min(MAX_BODY_BYTES as u64) as usize),
    );
    let mut total: u64 = 0;
    let mut too_large = declared.is_some_and(|n| n > MAX_BODY_BYTES as u64);
    if too_large && declared.is_some_and(|n| n > DISCARD_LIMIT) {
        return Err(BodyError::TooLarge);
    }
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| BodyError::Read(e.to_string()))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        total += data.len() as u64;
        if total > MAX_BODY_BYTES as u64 {
            too_large = true;
            buf.clear();
        }
        if too_large {
            if total > DISCARD_LIMIT {
                break;
            }
        } else {
            buf.extend_from_slice(&data);
        }
    }
    if too_large {
        Err(BodyError::TooLarge)
    } else {
        Ok(buf.freeze())
    }
}

fn panic_answer() -> Answer {
    Answer::deny(
        500,
        "This request caused apiserver to panic. Look in the logs for details.".into(),
    )
}

/// A policy error seen during one admission.
struct SeenError {
    policy: String,
    binding: String,
    failure_policy: Option<FailurePolicy>,
    message: String,
}

/// Feeds the per-policy metrics and keeps the errors for the log line.
struct RequestObserver<'m> {
    metrics: &'m Metrics,
    errors: RefCell<Vec<SeenError>>,
    deadline: Instant,
    /// The object the first pass made, where the reinvocation pass ran.
    first_pass: RefCell<Option<serde_json::Value>>,
    /// Who changed what.
    attribution: RefCell<Attribution>,
    monitor_all: bool,
}

impl AdmissionObserver for RequestObserver<'_> {
    fn mutation(&self, policy: &str, binding: &str, elapsed: Duration, error: Option<&str>) {
        if self.interrupted() {
            // Cut short by the deadline: not a check of the policy.
            return;
        }
        self.metrics
            .observe_check(policy, binding, elapsed, ErrorType::of(error));
        if let Some(message) = error {
            self.errors.borrow_mut().push(SeenError {
                policy: policy.to_string(),
                binding: binding.to_string(),
                failure_policy: None,
                message: message.to_string(),
            });
        }
    }

    fn policy_error(
        &self,
        policy: &str,
        binding: &str,
        failure_policy: FailurePolicy,
        message: &str,
    ) {
        self.errors.borrow_mut().push(SeenError {
            policy: policy.to_string(),
            binding: binding.to_string(),
            failure_policy: Some(failure_policy),
            message: message.to_string(),
        });
    }

    fn reinvocation(&self, first_pass: &serde_json::Value) {
        self.metrics.observe_reinvocation();
        *self.first_pass.borrow_mut() = Some(first_pass.clone());
    }

    fn interrupted(&self) -> bool {
        Instant::now() >= self.deadline
    }

    fn monitor_all(&self) -> bool {
        self.monitor_all
    }

    fn wants_changes(&self) -> bool {
        true
    }

    fn binding_changed(&self, change: crate::dispatch::BindingChange<'_>) {
        self.attribution.borrow_mut().record(change);
    }

    fn monitored_error(&self, policy: &str, binding: &str, message: &str) {
        self.attribution
            .borrow_mut()
            .record_error(policy, binding, message);
    }
}

/// Puts what the bindings did into `answer` (audit annotations, and
/// warnings with `--warnings=changes`) and the metrics. Applied changes
/// count only when the answer patches the object.
fn report(
    attribution: &Attribution,
    answer: &mut Answer,
    metrics: &Metrics,
    reporting: &Reporting,
) {
    if attribution.is_empty() {
        return;
    }
    let applied = answer.applies();
    for (policy, binding, monitored) in attribution.changes() {
        if monitored || applied {
            metrics.observe_binding_change(policy, binding, monitored);
        }
    }
    for (policy, binding) in attribution.errors() {
        metrics.observe_monitor_error(policy, binding);
    }
    answer.annotate(attribution);
    if reporting.warn_changes {
        answer.warnings.extend(attribution.warnings(applied));
    }
}

/// The object `request` is about, for a PolicyReport result.
fn subject_of(request: &AdmissionRequest) -> crate::reports::Subject {
    let kind = &request.kind;
    let object = request.object.as_ref().or(request.old_object.as_ref());
    let meta = |key: &str| {
        object
            .and_then(|o| o["metadata"][key].as_str())
            .unwrap_or_default()
            .to_string()
    };
    let name = match (request.name.is_empty(), meta("name")) {
        (false, _) => request.name.clone(),
        (true, name) if !name.is_empty() => name,
        // A create by generateName: the prefix, marked.
        (true, _) => format!("{}*", meta("generateName")),
    };
    crate::reports::Subject {
        api_version: match kind.group.as_str() {
            "" => kind.version.clone(),
            group => format!("{group}/{}", kind.version),
        },
        kind: kind.kind.clone(),
        namespace: request.namespace.clone(),
        name,
        uid: meta("uid"),
    }
}

/// Hands what the monitored bindings would have done to the report writer.
fn send_findings(
    sink: &crate::reports::ReportSink,
    attribution: &Attribution,
    subject: crate::reports::Subject,
) {
    use crate::attribution::Monitored;
    let at = std::time::SystemTime::now();
    for monitored in attribution.monitored() {
        let (policy, binding, outcome) = match monitored {
            Monitored::WouldChange {
                policy,
                binding,
                set,
                removed,
            } => (policy, binding, Ok((set.to_vec(), removed.to_vec()))),
            Monitored::WouldFail {
                policy,
                binding,
                message,
            } => (policy, binding, Err(message.to_string())),
        };
        sink.send(crate::reports::Finding {
            subject: subject.clone(),
            policy: policy.into(),
            binding: binding.into(),
            outcome,
            at,
        });
    }
}

/// What [`evaluate`] ends with.
enum Evaluated {
    /// The answer, how the request ended, and the admitted object (which
    /// [`drop_after_reply`] disposes of) with the object its first pass
    /// made where a reinvocation pass followed.
    Done(
        Answer,
        RequestResult,
        Option<(serde_json::Value, Option<serde_json::Value>)>,
    ),
    /// The deadline passed first; the failure policies decide the answer.
    TimedOut,
}

/// Runs the admission, isolated from panics, until `deadline`.
fn evaluate(
    engine: &Engine,
    metrics: &Metrics,
    request: AdmissionRequest,
    prematch: Option<Prematch>,
    deadline: Instant,
    as_sent: Option<serde_json::Value>,
    reporting: &Reporting,
) -> Evaluated {
    let subject = reporting.reports.as_ref().map(|_| subject_of(&request));
    let observer = RequestObserver {
        metrics,
        errors: RefCell::new(Vec::new()),
        deadline,
        first_pass: RefCell::new(None),
        attribution: RefCell::new(Attribution::default()),
        monitor_all: reporting.monitor_all,
    };
    let uid = request.uid.clone();
    let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let _interrupt = crate::cel::cost::Interrupt::at(deadline);
        engine.admit_prematched(request, prematch, &observer, ObjectOrigin::KubeApiserver)
    }));
    if observer.interrupted() {
        return Evaluated::TimedOut;
    }
    let errors = observer.errors.into_inner();
    let attribution = observer.attribution.into_inner();
    if let (Some(sink), Some(subject)) = (&reporting.reports, subject) {
        send_findings(sink, &attribution, subject);
    }
    let uid = uid.as_str();
    match outcome {
        Err(_) => {
            tracing::error!(uid = %uid, "evaluation panicked");
            Evaluated::Done(panic_answer(), RequestResult::Panic, None)
        }
        Ok((Outcome::Denied { message, code }, _)) => {
            let cause = errors
                .iter()
                .find(|e| e.failure_policy == Some(FailurePolicy::Fail))
                .or(errors.last());
            let (policy, binding) = cause
                .map(|e| (e.policy.as_str(), e.binding.as_str()))
                .unwrap_or(("", ""));
            tracing::info!(uid = %uid, policy = %policy, binding = %binding, code, denial = %message, "request denied");
            let mut answer = Answer::deny(code, message);
            report(&attribution, &mut answer, metrics, reporting);
            Evaluated::Done(answer, RequestResult::Denied, None)
        }
        Ok((
            Outcome::Admitted {
                object, warnings, ..
            },
            original,
        )) => {
            let ignored: Vec<&SeenError> = errors
                .iter()
                .filter(|e| e.failure_policy.is_some())
                .collect();
            if let Some(first) = ignored.first() {
                tracing::warn!(uid = %uid, policy = %first.policy, binding = %first.binding,
                    errors = ignored.len(), error = %first.message,
                    "admitted despite policy errors (failurePolicy Ignore)");
            }
            let (answer, result) = match std::panic::catch_unwind(AssertUnwindSafe(|| {
                // A reinvocation ran on its own object: the patch is from
                // the one kube-apiserver sent.
                let original = match &as_sent {
                    Some(sent) => Some(crate::mutation::diff::Snapshot::of(sent)),
                    None => original,
                };
                Answer::admit_from(original.as_ref(), &object, warnings)
            })) {
                Ok(mut answer) => {
                    report(&attribution, &mut answer, metrics, reporting);
                    match answer.patch.is_some() {
                        true => (answer, RequestResult::Patched),
                        false => (answer, RequestResult::Allowed),
                    }
                }
                Err(_) => {
                    tracing::error!(uid = %uid, "computing the patch panicked");
                    (panic_answer(), RequestResult::Panic)
                }
            };
            Evaluated::Done(
                answer,
                result,
                Some((object, observer.first_pass.into_inner())),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authorizer::AlwaysDeny;

    fn empty_engine() -> Arc<Engine> {
        let dir = std::env::temp_dir().join("kmutate-no-policies");
        Arc::new(Engine::load(
            &EngineSources::under(&dir),
            Box::new(AlwaysDeny),
        ))
    }

    #[test]
    fn the_peers_are_waited_for_until_a_tenth_before_the_earlier_timeout() {
        let started = Instant::now();
        let ten = Duration::from_secs(10);
        // kube-apiserver's `timeoutSeconds: 3` (rest client: `timeout=3s`).
        assert_eq!(
            peers_deadline(started, ten, Some("timeout=3s")),
            started + Duration::from_millis(2_700)
        );
        assert_eq!(
            peers_deadline(started, Duration::from_secs(2), Some("x=1&timeout=30s")),
            started + Duration::from_millis(1_800)
        );
        // No parameter, or one that does not parse: `--timeout` alone.
        assert_eq!(
            peers_deadline(started, ten, None),
            started + Duration::from_secs(9)
        );
        assert_eq!(
            peers_deadline(started, ten, Some("timeout=soon")),
            started + Duration::from_secs(9)
        );
    }

    #[tokio::test]
    async fn a_request_before_the_first_policy_set_waits_for_it() {
        let slot = Arc::new(ArcSwapOption::<Engine>::empty());
        let publisher = {
            let slot = slot.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(60)).await;
                slot.store(Some(empty_engine()));
            })
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        assert!(engine_when_loaded(&slot, deadline).await.is_some());
        publisher.await.unwrap();
    }

    #[tokio::test]
    async fn a_request_is_refused_when_no_policy_set_comes_before_its_deadline() {
        let slot = ArcSwapOption::<Engine>::empty();
        let deadline = tokio::time::Instant::now() + Duration::from_millis(30);
        assert!(engine_when_loaded(&slot, deadline).await.is_none());
    }
}
