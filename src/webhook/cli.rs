//! The `serve` and `loadtest` subcommands (their arguments and what they
//! run); `src/main.rs` only dispatches to them.

use super::loadtest::{self, LoadtestConfig};
use super::server::{self, ServeConfig, TlsSource};
use super::tls::CertFiles;
use super::{format_duration, parse_duration};
use crate::api::load;
use crate::authorizer::{AlwaysAllow, AlwaysDeny, Authorizer, FixedAuthorizer};
use crate::engine::EngineSources;
use crate::source::api::ApiConfig;
use crate::source::SourceKind;
use anyhow::{anyhow, bail, Context as _, Result};
use clap::ValueEnum;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Log line format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// `kmutate serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Policy files or folders (a folder may hold bindings too).
    #[arg(long, value_name = "PATH", default_value = "policies")]
    pub policies: Vec<PathBuf>,
    /// Binding files or folders.
    #[arg(long, value_name = "PATH", default_value = "bindings")]
    pub bindings: Vec<PathBuf>,
    /// Cluster objects: Namespaces, params, CRDs.
    #[arg(long, value_name = "PATH")]
    pub resources: Vec<PathBuf>,
    /// Where policies and bindings come from: the files above (re-read when
    /// they change), the Kubernetes API (watched; kubeconfig from
    /// $KUBECONFIG, ~/.kube/config or the in-cluster service account), or both.
    #[arg(long, value_enum, default_value = "files")]
    pub source: SourceKind,
    /// The API of the policies watched with --source api|both:
    /// `admissionregistration.k8s.io/v1`, `.../v1beta1`, `.../v1alpha1` or
    /// `kmutate.dev/v1` (kmutate's CRDs, deploy/crds/). By default the
    /// newest admissionregistration.k8s.io version the server serves, else
    /// kmutate.dev/v1.
    #[arg(long, value_name = "GROUP/VERSION")]
    pub policy_api_version: Option<String>,
    /// Address of the HTTPS listener (`HOST:PORT` or `:PORT`).
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:8443", value_parser = parse_addr)]
    pub listen: SocketAddr,
    /// Address of the plain-HTTP metrics listener (`/metrics`).
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:9090", value_parser = parse_addr)]
    pub metrics_listen: SocketAddr,
    /// Serving certificate chain (PEM), re-read when it changes. Without it a
    /// self-signed certificate is generated at start.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// Private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Require client certificates signed by these CAs (PEM).
    #[arg(long, value_name = "FILE")]
    pub client_ca: Option<PathBuf>,
    /// Where a generated self-signed certificate is written (default: a new
    /// folder under the temporary directory).
    #[arg(long, value_name = "DIR", conflicts_with = "tls_cert")]
    pub cert_dir: Option<PathBuf>,
    /// Further DNS names or IP addresses of a generated certificate (besides
    /// localhost, 127.0.0.1 and ::1).
    #[arg(long = "tls-san", value_name = "NAME", conflicts_with = "tls_cert")]
    pub tls_sans: Vec<String>,
    /// Longest time from a request's headers to its answer; past it the
    /// request's policies' failure policies decide (Fail denies, Ignore admits
    /// unchanged).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Longest time a shutdown (SIGTERM, SIGINT) waits for in-flight requests.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = parse_duration)]
    pub drain_timeout: Duration,
    /// The other replicas of this webhook (HOST:PORT, repeatable or
    /// comma-separated; a headless Service's name gives them all). Each
    /// answer with a change reaches the peers before kube-apiserver, so
    /// that its reinvocation of the request is told from a new request by
    /// whichever replica it reaches. The replicas must serve the same
    /// certificate and key (--tls-cert, --tls-key).
    #[arg(
        long,
        value_name = "HOST:PORT",
        value_delimiter = ',',
        requires = "tls_cert"
    )]
    pub peers: Vec<String>,
    /// Where the peers reach this replica (HOST:PORT; in a Pod,
    /// `$(POD_IP):8443`). Default: --listen, unless it is a wildcard address.
    #[arg(long, value_name = "HOST:PORT", requires = "peers")]
    pub peer_address: Option<String>,
    /// Longest time a request's head (request line and headers) may take to
    /// arrive, in all, not restarted by each byte: from the connection's
    /// start for its first request, from its first byte for a later one.
    /// Past it the connection is closed unanswered. 0: no limit.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub header_read_timeout: Duration,
    /// Longest time a connection stays open with no request in flight; past
    /// it the connection is closed gracefully (HTTP/1.1: closed; HTTP/2:
    /// GOAWAY). 90s is Go's default, as kube-apiserver's client uses. 0: no
    /// limit.
    #[arg(long, value_name = "DURATION", default_value = "90s", value_parser = parse_duration)]
    pub idle_timeout: Duration,
    /// Keep the `rules` of this MutatingWebhookConfiguration equal to what
    /// the loaded policies can match, so that kube-apiserver calls kmutate
    /// for nothing else (needs get and patch on it, and a Lease: see
    /// deploy/rbac.yaml). Only `rules` are written, never beyond the
    /// configuration's `kmutate.dev/allowed-rules` annotation.
    #[arg(long, value_name = "NAME")]
    pub manage_webhook: Option<String>,
    /// Namespace of the Leases of --manage-webhook (`NAME-webhook-rules`)
    /// and --policy-reports; default: the client's namespace (in a Pod, its
    /// own).
    #[arg(long, value_name = "NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// Write wg-policy PolicyReports (`kmutate-monitor` in each namespace, a
    /// ClusterPolicyReport for cluster-scoped objects) of what monitored
    /// bindings would have done: one result per object and binding, each
    /// report written at most every 5 s, the replicas taking turns through
    /// the Lease `kmutate-policy-reports`. Needs deploy/crds/policyreports.yaml.
    #[arg(long)]
    pub policy_reports: bool,
    /// `monitor`: every binding is evaluated and what its mutations would
    /// change is reported (audit annotations, metrics, --warnings), but
    /// nothing is applied and no error is enforced: a first rollout.
    /// `enforce`: only bindings annotated `kmutate.dev/mode: monitor` are.
    #[arg(long, value_enum, default_value = "enforce")]
    pub mode: server::AdmissionMode,
    /// `changes`: answers also carry a warning per binding that changed the
    /// object (or would have), which kubectl prints: `kmutate: policy P
    /// (binding B) set spec.containers[0].resources`.
    #[arg(long, value_enum, default_value = "none")]
    pub warnings: server::WarningsMode,
    /// Decisions for the CEL `authorizer` checks (the list format of
    /// `kmutate apply --authorizer`); without it or --authorizer-allow-all,
    /// every check is denied, or with --source api|both asked of the API
    /// server by SubjectAccessReview (answers cached 10 s).
    #[arg(long, value_name = "FILE", conflicts_with = "authorizer_allow_all")]
    pub authorizer: Option<PathBuf>,
    /// Allow every CEL `authorizer` check.
    #[arg(long)]
    pub authorizer_allow_all: bool,
    /// Log format (the level comes from RUST_LOG, default `info`).
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// Threads handling connections and evaluating their requests (default:
    /// one per core); requests more than 32 bindings match, and those whose
    /// authorizer asks the API server, are evaluated on a separate pool.
    #[arg(long, value_name = "N")]
    pub workers: Option<usize>,
}

/// `kmutate loadtest`.
#[derive(Debug, clap::Args)]
pub struct LoadtestArgs {
    /// The webhook's URL.
    #[arg(long, default_value = "https://127.0.0.1:8443/mutate")]
    pub url: String,
    /// The AdmissionReview to send (JSON). Valid JSON is sent compact, its
    /// members in the order written, as kube-apiserver encodes it;
    /// anything else is sent as it is.
    #[arg(long, value_name = "FILE", default_value = "bench/webhook/review.json")]
    pub review: PathBuf,
    /// The CA bundle to trust (`kmutate serve` logs where its generated one is).
    #[arg(long, value_name = "FILE")]
    pub ca: PathBuf,
    /// Client certificate to present (PEM).
    #[arg(long, value_name = "FILE", requires = "client_key")]
    pub client_cert: Option<PathBuf>,
    /// Key of --client-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "client_cert")]
    pub client_key: Option<PathBuf>,
    /// Connections kept open, each with one request in flight (with
    /// --streams, that many).
    #[arg(long, default_value_t = 8)]
    pub connections: usize,
    /// Requests in flight at once on each HTTP/2 connection, as
    /// kube-apiserver multiplexes its calls to a webhook on one connection.
    #[arg(long, default_value_t = 1, requires = "http2")]
    pub streams: usize,
    /// Requests per second over all connections (0: flat out).
    #[arg(long, default_value_t = 0.0)]
    pub rate: f64,
    /// How long to measure.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,
    /// How long to run first, unmeasured.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    pub warmup: Duration,
    /// Use HTTP/2 rather than HTTP/1.1.
    #[arg(long)]
    pub http2: bool,
    /// Threads of the generator.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
}

/// Reads `HOST:PORT`, `:PORT` (all interfaces) or `[V6]:PORT`.
pub fn parse_addr(text: &str) -> Result<SocketAddr, String> {
    let full = if text.starts_with(':') {
        format!("0.0.0.0{text}")
    } else {
        text.to_string()
    };
    full.to_socket_addrs()
        .map_err(|e| format!("{text:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("{text:?}: no address"))
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

fn authorizer(path: Option<&PathBuf>, allow_all: bool) -> Result<Box<dyn Authorizer>> {
    Ok(match path {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let mut docs =
                load::parse_documents(&text).map_err(|e| anyhow!("{}: {e}", path.display()))?;
            if docs.len() != 1 {
                bail!("{}: expected one document", path.display());
            }
            Box::new(
                FixedAuthorizer::from_json(&docs.remove(0))
                    .map_err(|e| anyhow!("{}: {e}", path.display()))?,
            )
        }
        None if allow_all => Box::new(AlwaysAllow),
        None => Box::new(AlwaysDeny),
    })
}

/// Runs `kmutate serve` until SIGTERM or SIGINT, then drains.
pub fn serve(args: ServeArgs) -> Result<ExitCode> {
    init_logging(args.log_format);
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => TlsSource::Files(CertFiles {
            cert: cert.clone(),
            key: key.clone(),
        }),
        _ => TlsSource::SelfSigned {
            dir: args.cert_dir.clone().unwrap_or_else(|| {
                std::env::temp_dir().join(format!("kmutate-serve-{}", std::process::id()))
            }),
            names: args.tls_sans.clone(),
        },
    };
    let config = ServeConfig {
        sources: EngineSources {
            policies: args.policies.clone(),
            bindings: args.bindings.clone(),
            resources: args.resources.clone(),
        },
        source: args.source,
        api: ApiConfig {
            kube: None,
            policy_api_version: args.policy_api_version.clone(),
            // With the API at hand, the API server decides the checks
            // unless a decision list or allow-all is given.
            subject_access_review: args.source != SourceKind::Files
                && args.authorizer.is_none()
                && !args.authorizer_allow_all,
        },
        authorizer: authorizer(args.authorizer.as_ref(), args.authorizer_allow_all)?,
        listen: args.listen,
        metrics_listen: Some(args.metrics_listen),
        tls,
        client_ca: args.client_ca.clone(),
        timeout: args.timeout,
        drain_timeout: args.drain_timeout,
        peers: args.peers.clone(),
        peer_address: args
            .peer_address
            .clone()
            .or_else(|| (!args.listen.ip().is_unspecified()).then(|| args.listen.to_string())),
        header_read_timeout: args.header_read_timeout,
        idle_timeout: args.idle_timeout,
        manage_webhook: args
            .manage_webhook
            .clone()
            .map(|name| server::ManagedWebhook {
                name,
                lease_namespace: args.lease_namespace.clone(),
            }),
        mode: args.mode,
        warnings: args.warnings,
        policy_reports: args.policy_reports.then(|| args.lease_namespace.clone()),
    };
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.workers.unwrap_or(cores).max(1))
        .max_blocking_threads((4 * cores).max(8))
        .thread_name("kmutate")
        .enable_all()
        .build()?;
    let result = runtime.block_on(async move {
        let server = server::start(config).await?;
        if let Some(ca) = server.ca_bundle() {
            tracing::info!(ca_bundle = %ca.display(),
                "no --tls-cert given: serving a generated self-signed certificate; clients should trust the CA bundle");
        }
        tracing::info!(
            listen = %server.addr(),
            metrics = %server.metrics_addr().map(|a| a.to_string()).unwrap_or_default(),
            timeout = %format_duration(args.timeout),
            "serving POST /mutate, POST /validate, GET /healthz, GET /readyz (HTTPS) and GET /metrics (HTTP)"
        );
        wait_for_signal().await?;
        tracing::info!("shutdown signal received");
        server.shutdown().await;
        anyhow::Ok(())
    });
    // Evaluations still running past the drain timeout are abandoned.
    runtime.shutdown_timeout(Duration::from_secs(1));
    result?;
    tracing::info!("stopped");
    Ok(ExitCode::SUCCESS)
}

#[cfg(unix)]
async fn wait_for_signal() -> Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}

#[cfg(not(unix))]
async fn wait_for_signal() -> Result<()> {
    tokio::signal::ctrl_c().await?;
    Ok(())
}

/// Runs `kmutate loadtest` and prints its report.
pub fn loadtest_cmd(args: LoadtestArgs) -> Result<ExitCode> {
    let uri: hyper::Uri = args
        .url
        .parse()
        .with_context(|| format!("--url {:?}", args.url))?;
    if uri.scheme_str() != Some("https") {
        bail!("--url must be https://HOST:PORT/PATH");
    }
    let host = uri
        .host()
        .ok_or_else(|| anyhow!("--url has no host"))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = uri.port_u16().unwrap_or(443);
    let addr = (host.as_str(), port)
        .to_socket_addrs()
        .with_context(|| format!("resolving {host}"))?
        .next()
        .ok_or_else(|| anyhow!("{host}: no address"))?;
    let body = std::fs::read(&args.review)
        .with_context(|| format!("reading {}", args.review.display()))?;
    // A recorded review is kept readable on disk; kube-apiserver sends it
    // compact, its members in the order written.
    let body = match serde_json::from_slice::<serde::de::IgnoredAny>(&body) {
        Ok(_) => super::review::compact_json(&body),
        Err(_) => body,
    };
    let config = LoadtestConfig {
        addr,
        server_name: host,
        path: uri
            .path_and_query()
            .map_or("/".to_string(), |p| p.as_str().to_string()),
        ca: args.ca.clone(),
        identity: match (&args.client_cert, &args.client_key) {
            (Some(cert), Some(key)) => Some(CertFiles {
                cert: cert.clone(),
                key: key.clone(),
            }),
            _ => None,
        },
        body: body.into(),
        connections: args.connections,
        streams: args.streams,
        rate: (args.rate > 0.0).then_some(args.rate),
        duration: args.duration,
        warmup: args.warmup,
        http2: args.http2,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()?;
    let report = runtime.block_on(loadtest::run(&config))?;
    print!("{report}");
    Ok(if report.errors == 0 && report.bad_status == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    #[derive(clap::Parser)]
    struct Serve {
        #[command(flatten)]
        args: ServeArgs,
    }

    #[test]
    fn serve_timeouts_default_as_the_server_does() {
        let defaults = ServeConfig::new();
        let args = Serve::parse_from(["serve"]).args;
        assert_eq!(args.timeout, defaults.timeout);
        assert_eq!(args.drain_timeout, defaults.drain_timeout);
        assert_eq!(args.header_read_timeout, defaults.header_read_timeout);
        assert_eq!(
            args.header_read_timeout,
            server::DEFAULT_HEADER_READ_TIMEOUT
        );
        assert_eq!(args.idle_timeout, defaults.idle_timeout);
        assert_eq!(args.idle_timeout, server::DEFAULT_IDLE_TIMEOUT);
        let args = Serve::parse_from([
            "serve",
            "--header-read-timeout",
            "2s",
            "--idle-timeout",
            "0",
        ])
        .args;
        assert_eq!(args.header_read_timeout, Duration::from_secs(2));
        assert_eq!(args.idle_timeout, Duration::ZERO);
    }
}
