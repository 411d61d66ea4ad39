//! `kmutate loadtest`: drives a webhook over TLS keep-alive connections
//! with a recorded AdmissionReview, flat out or at a fixed rate, and
//! reports throughput and latency percentiles.
//!
//! Latency is measured per request from writing it to having read the
//! whole answer. At a fixed rate, request *i* is due at `start + i / rate`
//! (spread over the connections in turn); a request sent more than 1 ms
//! after it was due is counted as late, so a server (or generator) that
//! cannot keep up shows there rather than hiding in the percentiles.
//! Requests are sent when due to within the kernel's timer precision
//! (`DueTimer`), not on tokio's millisecond ticks, which would release
//! the requests due within each millisecond together, in a burst.

use super::client::{Client, RawHttp1Connection, RawHttp2Connection, Response};
use super::tls::{self, CertFiles};
use anyhow::{bail, Context as _, Result};
use bytes::Bytes;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// A connection of the generator: HTTP/1.1 requests are serialized once and
/// written whole ([`RawHttp1Connection`]); HTTP/2 goes through hyper.
enum LoadConnection {
    /// Boxed: the TLS state is a kilobyte.
    Http1(Box<RawHttp1Connection<TlsStream<TcpStream>>>),
    Http2(RawHttp2Connection),
}

impl LoadConnection {
    /// A stream of the connection `shared`, or else a connection of its
    /// own, counted in `opened` (a shared one counts itself).
    async fn open(
        client: &Client,
        http2: bool,
        shared: Option<&SharedConnection>,
        opened: &AtomicU64,
    ) -> Result<LoadConnection> {
        if let Some(shared) = shared {
            return Ok(LoadConnection::Http2(shared.stream(client).await?));
        }
        let connection = if http2 {
            LoadConnection::Http2(client.connect_raw_h2().await?)
        } else {
            LoadConnection::Http1(Box::new(client.connect_raw().await?))
        };
        opened.fetch_add(1, Ordering::Relaxed);
        Ok(connection)
    }

    /// Sends `request`, prepared for this connection's protocol.
    async fn send(&mut self, request: &PreparedRequest) -> Result<Response> {
        match (self, request) {
            (LoadConnection::Http1(c), PreparedRequest::Http1(text)) => c.send(text).await,
            (LoadConnection::Http2(c), PreparedRequest::Http2(head, body)) => {
                c.send(head, body).await
            }
            _ => bail!("the request was prepared for another protocol"),
        }
    }

    fn is_open(&self) -> bool {
        match self {
            LoadConnection::Http1(c) => c.is_open(),
            LoadConnection::Http2(c) => c.is_open(),
        }
    }
}

/// The request every loop sends, prepared once for the protocol.
#[derive(Clone)]
enum PreparedRequest {
    /// The whole HTTP/1.1 request ([`Client::http1_post`]).
    Http1(Bytes),
    /// The HTTP/2 head ([`Client::http2_post_head`]) and body.
    Http2(Box<hyper::Request<()>>, Bytes),
}

/// The HTTP/2 connection that [`LoadtestConfig::streams`] request loops
/// share, as kube-apiserver sends its concurrent calls to a webhook over one
/// connection: opened by the first loop that needs it, and again by the
/// first that finds it closed.
#[derive(Clone)]
struct SharedConnection {
    slot: Arc<tokio::sync::Mutex<Option<RawHttp2Connection>>>,
    opened: Arc<AtomicU64>,
}

impl SharedConnection {
    /// A stream of the connection, opening it when there is none.
    async fn stream(&self, client: &Client) -> Result<RawHttp2Connection> {
        let mut slot = self.slot.lock().await;
        if let Some(open) = slot.as_ref().filter(|c| c.is_open()) {
            return Ok(open.clone());
        }
        let connection = client.connect_raw_h2().await?;
        self.opened.fetch_add(1, Ordering::Relaxed);
        *slot = Some(connection.clone());
        Ok(connection)
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct LoadtestConfig {
    /// The server's address.
    pub addr: SocketAddr,
    /// The name to verify the server certificate as.
    pub server_name: String,
    /// The request path (`/mutate`).
    pub path: String,
    /// The CA bundle to trust.
    pub ca: PathBuf,
    /// A client certificate and key to present.
    pub identity: Option<CertFiles>,
    /// The AdmissionReview sent with every request.
    pub body: Bytes,
    /// Connections kept open.
    pub connections: usize,
    /// Requests in flight at once on each connection (HTTP/2 streams;
    /// HTTP/1.1 has one).
    pub streams: usize,
    /// Requests per second over all connections; `None` for flat out.
    pub rate: Option<f64>,
    /// How long to measure.
    pub duration: Duration,
    /// How long to run before measuring.
    pub warmup: Duration,
    /// Use HTTP/2 rather than HTTP/1.1.
    pub http2: bool,
}

/// What a run measured.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Successful (HTTP 200) requests measured.
    pub ok: u64,
    /// Answers with another HTTP status.
    pub bad_status: u64,
    /// Requests that failed (connection errors).
    pub errors: u64,
    /// The first error or bad status seen.
    pub first_problem: Option<String>,
    /// The measured time.
    pub elapsed: Duration,
    /// Latencies of the successful requests, sorted.
    pub latencies: Vec<Duration>,
    /// Requests sent more than 1 ms after they were due (fixed rate).
    pub late: u64,
    /// The most a request was sent after it was due.
    pub max_lateness: Duration,
    /// The rate asked for.
    pub rate: Option<f64>,
    /// Connections used.
    pub connections: usize,
    /// Requests in flight at once on each connection.
    pub streams: usize,
    /// Connections opened while measuring and before (reopened ones too).
    pub opened: u64,
    /// The protocol.
    pub http2: bool,
}

impl Report {
    /// Successful requests per second.
    pub fn throughput(&self) -> f64 {
        self.ok as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The `q` quantile (0..=1) of the latencies.
    pub fn percentile(&self, q: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let rank = (q * self.latencies.len() as f64).ceil() as usize;
        self.latencies[rank.clamp(1, self.latencies.len()) - 1]
    }
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mode = match self.rate {
            Some(r) => format!("fixed rate {r} requests/s"),
            None => "flat out".to_string(),
        };
        let streams = if self.streams > 1 {
            format!(", {} streams each", self.streams)
        } else {
            String::new()
        };
        writeln!(
            f,
            "mode:        {mode}, {} {} connections{streams} ({} opened)",
            self.connections,
            if self.http2 { "HTTP/2" } else { "HTTP/1.1" },
            self.opened
        )?;
        writeln!(
            f,
            "requests:    {} ok, {} bad status, {} errors in {:.2} s",
            self.ok,
            self.bad_status,
            self.errors,
            self.elapsed.as_secs_f64()
        )?;
        writeln!(f, "throughput:  {:.0} requests/s", self.throughput())?;
        writeln!(
            f,
            "latency:     p50 {}, p99 {}, p99.9 {}, max {}",
            ms(self.percentile(0.50)),
            ms(self.percentile(0.99)),
            ms(self.percentile(0.999)),
            ms(self.latencies.last().copied().unwrap_or_default())
        )?;
        if self.rate.is_some() {
            writeln!(
                f,
                "schedule:    {} requests sent over 1 ms late (at most {})",
                self.late,
                ms(self.max_lateness)
            )?;
        }
        if let Some(p) = &self.first_problem {
            writeln!(f, "first problem: {p}")?;
        }
        Ok(())
    }
}

#[derive(Default)]
struct Tally {
    ok: u64,
    bad_status: u64,
    errors: u64,
    first_problem: Option<String>,
    latencies: Vec<Duration>,
    late: u64,
    max_lateness: Duration,
}

/// Runs the load and reports.
pub async fn run(config: &LoadtestConfig) -> Result<Report> {
    if config.connections == 0 || config.streams == 0 {
        bail!("at least one connection and one stream are needed");
    }
    if config.streams > 1 && !config.http2 {
        bail!("more than one stream a connection needs HTTP/2");
    }
    if config.rate.is_some_and(|r| !(r > 0.0 && r.is_finite())) {
        bail!("the rate must be positive");
    }
    let client_config = tls::client_config(&config.ca, config.identity.as_ref(), &[])?;
    let client = Client::new(
        config.addr,
        &config.server_name,
        client_config,
        config.http2,
    )?;
    let request = if config.http2 {
        PreparedRequest::Http2(
            Box::new(client.http2_post_head(&config.path, config.body.len())?),
            config.body.clone(),
        )
    } else {
        PreparedRequest::Http1(client.http1_post(&config.path, &config.body)?)
    };
    // One request first: fail early when the server does not answer well.
    let mut probe = client.connect().await?;
    let first = probe
        .post(&config.path, config.body.clone())
        .await
        .context("first request")?;
    if !first.status.is_success() {
        bail!(
            "first request answered {}: {}",
            first.status,
            first.text().trim()
        );
    }
    drop(probe);

    let start = Instant::now() + Duration::from_millis(20);
    let measure_from = start + config.warmup;
    let end = measure_from + config.duration;
    let opened = Arc::new(AtomicU64::new(0));
    let loops = config.connections * config.streams;
    let mut tasks = Vec::with_capacity(loops);
    let mut shared = None;
    for index in 0..loops {
        if config.streams > 1 && index % config.streams == 0 {
            shared = Some(SharedConnection {
                slot: Arc::default(),
                opened: opened.clone(),
            });
        }
        let request_loop = RequestLoop {
            client: client.clone(),
            config: config.clone(),
            request: request.clone(),
            shared: shared.clone(),
            opened: opened.clone(),
            index,
            loops,
        };
        tasks.push(tokio::spawn(async move {
            request_loop.run(start, measure_from, end).await
        }));
    }
    let mut tally = Tally::default();
    for t in tasks {
        let part = t.await.context("load task")?;
        tally.ok += part.ok;
        tally.bad_status += part.bad_status;
        tally.errors += part.errors;
        tally.late += part.late;
        tally.max_lateness = tally.max_lateness.max(part.max_lateness);
        if tally.first_problem.is_none() {
            tally.first_problem = part.first_problem;
        }
        tally.latencies.extend(part.latencies);
    }
    tally.latencies.sort_unstable();
    Ok(Report {
        ok: tally.ok,
        bad_status: tally.bad_status,
        errors: tally.errors,
        first_problem: tally.first_problem,
        elapsed: config.duration,
        latencies: tally.latencies,
        late: tally.late,
        max_lateness: tally.max_lateness,
        rate: config.rate,
        connections: config.connections,
        streams: config.streams,
        opened: opened.load(Ordering::Relaxed),
        http2: config.http2,
    })
}

/// One loop of requests, one in flight at a time: on a connection of its
/// own, or on a stream of a shared one.
struct RequestLoop {
    client: Client,
    config: LoadtestConfig,
    request: PreparedRequest,
    shared: Option<SharedConnection>,
    /// Connections opened by all loops.
    opened: Arc<AtomicU64>,
    /// This loop's place among all `loops`, for its share of a fixed rate.
    index: usize,
    loops: usize,
}

impl RequestLoop {
    /// Sends requests from `start` until `end`, measuring those sent from
    /// `measure_from`.
    async fn run(self, start: Instant, measure_from: Instant, end: Instant) -> Tally {
        let RequestLoop {
            client,
            config,
            request,
            shared,
            opened,
            index,
            loops,
        } = self;
        let shared = shared.as_ref();
        let mut tally = Tally::default();
        let mut conn: Option<LoadConnection> = None;
        let interval = config
            .rate
            .map(|r| Duration::from_secs_f64(loops as f64 / r));
        let offset = config
            .rate
            .map(|r| Duration::from_secs_f64(index as f64 / r))
            .unwrap_or_default();
        let mut n: u32 = 0;
        let mut timer = DueTimer::new();
        loop {
            let due = match interval {
                Some(iv) => {
                    let due = start + offset + iv * n;
                    n += 1;
                    if due >= end {
                        break;
                    }
                    if due > Instant::now() {
                        timer.sleep_until(due).await;
                    }
                    Some(due)
                }
                None => None,
            };
            let sent = Instant::now();
            if sent >= end {
                break;
            }
            // At a fixed rate a request belongs to the span it was due in:
            // one due in the warm-up but sent late, after it, is not
            // measured (the rate measured would exceed the rate asked for).
            let measured = due.unwrap_or(sent) >= measure_from;
            if let (Some(due), true) = (due, measured) {
                let lateness = sent.saturating_duration_since(due);
                if lateness > Duration::from_millis(1) {
                    tally.late += 1;
                }
                tally.max_lateness = tally.max_lateness.max(lateness);
            }
            if conn.is_none() {
                match LoadConnection::open(&client, config.http2, shared, &opened).await {
                    Ok(c) => conn = Some(c),
                    Err(e) => {
                        if measured {
                            tally.errors += 1;
                            tally.first_problem.get_or_insert(format!("{e:#}"));
                        }
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                }
            }
            let Some(c) = conn.as_mut() else { continue };
            let result = c.send(&request).await;
            let latency = sent.elapsed();
            match result {
                Ok(r) if r.status.is_success() => {
                    if measured {
                        tally.ok += 1;
                        tally.latencies.push(latency);
                    }
                }
                Ok(r) => {
                    if measured {
                        tally.bad_status += 1;
                        tally.first_problem.get_or_insert(format!(
                            "HTTP {}: {}",
                            r.status,
                            r.text().trim()
                        ));
                    }
                }
                Err(e) => {
                    if measured {
                        tally.errors += 1;
                        tally.first_problem.get_or_insert(format!("{e:#}"));
                    }
                    conn = None;
                }
            }
            if conn.as_ref().is_some_and(|c| !c.is_open()) {
                conn = None;
            }
        }
        tally
    }
}

/// Sleeps until an instant with the precision of the kernel's timers: a
/// timerfd on Linux, tokio's millisecond timer elsewhere (or when no timerfd
/// can be had).
struct DueTimer {
    #[cfg(target_os = "linux")]
    fd: Option<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>>,
}

impl DueTimer {
    fn new() -> DueTimer {
        DueTimer {
            #[cfg(target_os = "linux")]
            fd: timerfd::create().ok(),
        }
    }

    async fn sleep_until(&mut self, due: Instant) {
        #[cfg(target_os = "linux")]
        if let Some(fd) = &self.fd {
            if timerfd::sleep_until(fd, due).await.is_ok() {
                return;
            }
            // A timerfd that fails once is given up for tokio's timer.
            self.fd = None;
        }
        tokio::time::sleep_until(due.into()).await;
    }
}

#[cfg(target_os = "linux")]
mod timerfd {
    use std::io;
    use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
    use std::time::Instant;
    use tokio::io::unix::AsyncFd;
    use tokio::io::Interest;

    /// A non-blocking monotonic timerfd registered with tokio.
    pub(super) fn create() -> io::Result<AsyncFd<OwnedFd>> {
        // SAFETY: a plain system call with constant arguments.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: the `OwnedFd` keeps the timerfd open, and refers to it,
        // for as long as the `AsyncFd` that owns it lives.
        unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }.map_err(io::Error::from)
    }

    /// Arms `fd` to expire at `due` and waits for it.
    pub(super) async fn sleep_until(fd: &AsyncFd<OwnedFd>, due: Instant) -> io::Result<()> {
        let wait = due.saturating_duration_since(Instant::now());
        if wait.is_zero() {
            return Ok(());
        }
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: wait.as_secs() as libc::time_t,
                tv_nsec: wait.subsec_nanos() as libc::c_long,
            },
        };
        // SAFETY: `fd` is an open timerfd and `spec` a valid itimerspec; the
        // old value is not asked for.
        if unsafe { libc::timerfd_settime(fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) } < 0 {
            return Err(io::Error::last_os_error());
        }
        loop {
            let mut ready = fd.readable().await?;
            let read = ready.try_io(|fd| {
                let mut expirations = [0u8; 8];
                // SAFETY: reads at most 8 bytes into an 8-byte buffer.
                let n = unsafe {
                    libc::read(
                        fd.as_raw_fd(),
                        expirations.as_mut_ptr().cast(),
                        expirations.len(),
                    )
                };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(())
                }
            });
            match read {
                Ok(result) => return result,
                // Woken without an expiration: wait again.
                Err(_would_block) => continue,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_due_timer_never_wakes_early() {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                let mut timer = DueTimer::new();
                #[cfg(target_os = "linux")]
                assert!(timer.fd.is_some(), "a timerfd is available on Linux");
                let start = Instant::now();
                for i in 1..=20u32 {
                    let due = start + Duration::from_micros(250) * i;
                    timer.sleep_until(due).await;
                    assert!(Instant::now() >= due, "woke before request {i} was due");
                }
                // An instant already past returns at once.
                timer.sleep_until(start).await;
                #[cfg(target_os = "linux")]
                assert!(timer.fd.is_some(), "the timerfd was kept");
            });
    }
}
