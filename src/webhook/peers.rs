//! Sharing the reinvocation memory among the replicas.
//!
//! kube-apiserver's reinvocation of the webhook carries nothing that says
//! it is one ([`super::reinvocation`]): only a replica that knows the
//! first call's answer can tell it. kube-apiserver does not keep to one
//! replica: when a replica stops, its connections close and the second
//! call goes to another, and Go's client opens several connections at
//! once under load, which a Service spreads over the replicas. A replica
//! that did not know the answer would run the `Never` policies again (a
//! sidecar appended twice).
//!
//! So every replica knows every answer before kube-apiserver has it:
//!
//! - each answer with a change is sent to the peers that are up, and
//!   waited for, before it is sent to kube-apiserver
//!   (`POST /reinvocations`);
//! - a replica that starts takes what its peers remember (`GET
//!   /reinvocations`) before it accepts a connection, telling them its own
//!   address, from which on they send it their answers;
//! - a replica that stops hands what it remembers to its peers before it
//!   closes a connection.
//!
//! A peer that does not answer is left out for a second, then tried again.
//! Peers are named by `--peers` (`HOST:PORT`, resolved every few seconds:
//! a headless Service's name gives every replica's address) and announce
//! themselves (`--peer-address`). Both sides prove they hold the serving
//! key, which the replicas share: the receiver by presenting the very
//! certificate this replica serves (pinned, whatever its name or issuer),
//! the sender by a token derived from the private key. A replica sends
//! nothing to itself (each process has an instance id of its own).

use super::client::{Client, Connection};
use super::reinvocation::{encode_remembered, Remembered};
use super::tls::{self, CertFiles, ReloadingCert};
use anyhow::{anyhow, Context as _, Result};
use bytes::Bytes;
use hyper::Method;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where a replica takes in what another hands it.
pub const HAND_OVER_PATH: &str = "/reinvocations";

/// The header naming the sending process (a replica ignores its own).
pub const INSTANCE_HEADER: &str = "kmutate-instance";

/// The header with the sender's own address (`--peer-address`).
pub const ADDRESS_HEADER: &str = "kmutate-peer-address";

/// Most bytes of one hand-over request: entries are sent in batches of
/// about this size (one object may be larger, up to the request limit).
const BATCH_BYTES: usize = 4 << 20;

/// Largest hand-over body a replica reads: a batch and one more object.
pub const MAX_HAND_OVER_BYTES: usize = BATCH_BYTES + 2 * super::MAX_BODY_BYTES;

/// How long a stopping replica's hand-over, or a starting one's taking,
/// keeps trying a peer that does not answer (a replica just started may
/// not listen yet).
const PEER_PATIENCE: Duration = Duration::from_secs(3);

/// How long a peer that failed is left out.
const PEER_BACKOFF: Duration = Duration::from_secs(1);

/// The least time one exchange with a peer on the request path is given,
/// however little of the request's own time is left.
const PEER_TIMEOUT_MIN: Duration = Duration::from_millis(500);

/// Most idle connections kept to one peer: concurrent answers each take
/// one, rather than queue behind one exchange.
const MOST_IDLE_CONNECTIONS: usize = 8;

/// How often the `--peers` names are resolved again.
const RESOLVE_EVERY: Duration = Duration::from_secs(5);

/// How long a token derived from the key is used before the key file is
/// read again (it may have been rotated).
const TOKEN_FOR: Duration = Duration::from_secs(5);

/// The other replicas, and the means to reach them.
pub struct Peers {
    names: Vec<String>,
    own_address: Option<String>,
    instance: String,
    key: CertFiles,
    config: ClientConfig,
    token: Mutex<(Instant, String)>,
    links: Mutex<Links>,
}

/// The peers known: from `--peers` and from their announcements.
#[derive(Default)]
struct Links {
    by_address: HashMap<SocketAddr, Arc<PeerLink>>,
    resolved_at: Option<Instant>,
}

/// One peer: its idle connections, kept open, and when it may be tried
/// again.
struct PeerLink {
    addr: SocketAddr,
    idle: Mutex<Vec<Connection>>,
    down_until: Mutex<Option<Instant>>,
}

impl std::fmt::Debug for Peers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peers")
            .field("names", &self.names)
            .field("own_address", &self.own_address)
            .field("instance", &self.instance)
            .finish()
    }
}

impl Peers {
    /// Peers named `names` (`HOST:PORT`), for a replica reached at
    /// `own_address` serving the certificate and key of `files` (`cert` is
    /// that certificate, kept current).
    pub fn new(
        names: Vec<String>,
        own_address: Option<String>,
        files: CertFiles,
        cert: Arc<ReloadingCert>,
    ) -> Result<Peers> {
        let verifier = Arc::new(SameCertificate {
            cert,
            provider: tls::client_provider(),
        });
        let config = ClientConfig::builder_with_provider(tls::client_provider())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        let token = token(&files).context("the replicas' token")?;
        Ok(Peers {
            names,
            own_address,
            instance: instance_id(),
            key: files,
            config,
            token: Mutex::new((Instant::now(), token)),
            links: Mutex::default(),
        })
    }

    /// Whether a request's `authorization` and instance headers come from
    /// a replica holding this one's key; `Ok(false)` for this process's
    /// own.
    pub fn accepts(&self, authorization: Option<&str>, instance: Option<&str>) -> Result<bool> {
        let expected = format!("Bearer {}", self.token()?);
        let given = authorization.unwrap_or_default();
        if !constant_time_eq(given.as_bytes(), expected.as_bytes()) {
            return Err(anyhow!("not a replica's token"));
        }
        Ok(instance != Some(self.instance.as_str()))
    }

    /// A peer announced itself at `address` (`HOST:PORT`): it is sent
    /// answers from now on, and every peer left out is tried again.
    pub async fn announced(&self, address: Option<&str>) {
        let mut found = Vec::new();
        if let Some(address) = address {
            match tokio::net::lookup_host(address).await {
                Ok(addrs) => found.extend(addrs),
                Err(e) => {
                    tracing::warn!(peer = %address, error = %e, "resolving an announced peer failed")
                }
            }
        }
        let mut links = self.links.lock().unwrap_or_else(|e| e.into_inner());
        for addr in found {
            links
                .by_address
                .entry(addr)
                .or_insert_with(|| PeerLink::new(addr));
        }
        for link in links.by_address.values() {
            *link.down_until.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
    }

    /// Sends `entries` to every peer that is up and waits for them until
    /// `until` (at least [`PEER_TIMEOUT_MIN`]); the number of peers that
    /// took them.
    ///
    /// A peer that is up but slow (a loaded node) is waited for as long as
    /// the request allows: once left out, a reinvocation that reaches it
    /// would be taken for a new request.
    pub async fn send(&self, entries: &[Remembered], until: Instant) -> usize {
        let patience = until
            .saturating_duration_since(Instant::now())
            .max(PEER_TIMEOUT_MIN);
        self.send_within(entries, patience, false).await
    }

    /// [`Peers::send`] with more patience, as a stopping replica hands
    /// over all it remembers.
    pub async fn hand_over(&self, entries: &[Remembered]) -> usize {
        self.send_within(entries, PEER_PATIENCE, true).await
    }

    /// `hand_over`: every peer is tried, those left out a moment ago too,
    /// and a refused connection is tried again within `patience`.
    async fn send_within(
        &self,
        entries: &[Remembered],
        patience: Duration,
        hand_over: bool,
    ) -> usize {
        if entries.is_empty() {
            return 0;
        }
        let token = match self.token() {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(error = %e, "reinvocation memory: the key cannot be read");
                return 0;
            }
        };
        let batches = batches(entries);
        let exchange = Exchange {
            token: &token,
            method: Method::POST,
            bodies: &batches,
            patience,
            retry_refused: hand_over,
        };
        self.with_each(hand_over, exchange)
            .await
            .into_iter()
            .filter(Result::is_ok)
            .count()
    }

    /// `exchange` with each peer at once (`every`: those left out too).
    async fn with_each(&self, every: bool, exchange: Exchange<'_>) -> Vec<Result<Bytes>> {
        let links = self.links(every).await;
        let each = links
            .iter()
            .map(|link| self.exchange(link, exchange.clone()));
        futures::future::join_all(each).await
    }

    /// What the peers remember (each asked for at most `patience`),
    /// announcing this replica to them.
    pub async fn take_from_peers(&self, patience: Duration) -> Vec<Remembered> {
        let Ok(token) = self.token() else {
            return Vec::new();
        };
        let empty = [Bytes::new()];
        let exchange = Exchange {
            token: &token,
            method: Method::GET,
            bodies: &empty,
            patience,
            retry_refused: false,
        };
        let mut taken = Vec::new();
        for answer in self.with_each(true, exchange).await.into_iter().flatten() {
            match super::reinvocation::decode_remembered(&answer) {
                Ok(entries) => taken.extend(entries),
                Err(e) => tracing::warn!(error = %e, "a peer's memory could not be read"),
            }
        }
        taken
    }

    /// The links to try now (`every`: those left out too), `--peers`
    /// resolved again when it is time.
    async fn links(&self, every: bool) -> Vec<Arc<PeerLink>> {
        let due = {
            let links = self.links.lock().unwrap_or_else(|e| e.into_inner());
            links
                .resolved_at
                .is_none_or(|at| at.elapsed() >= RESOLVE_EVERY)
        };
        if due {
            let resolved = self.resolve().await;
            let mut links = self.links.lock().unwrap_or_else(|e| e.into_inner());
            links.resolved_at = Some(Instant::now());
            for addr in resolved {
                links
                    .by_address
                    .entry(addr)
                    .or_insert_with(|| PeerLink::new(addr));
            }
        }
        let links = self.links.lock().unwrap_or_else(|e| e.into_inner());
        links
            .by_address
            .values()
            .filter(|link| every || link.is_up())
            .cloned()
            .collect()
    }

    async fn resolve(&self) -> Vec<SocketAddr> {
        let mut found = Vec::new();
        for name in &self.names {
            match tokio::net::lookup_host(name.as_str()).await {
                Ok(addrs) => found.extend(addrs),
                Err(e) => tracing::warn!(peer = %name, error = %e, "resolving a peer failed"),
            }
        }
        found.sort();
        found.dedup();
        found
    }

    /// One exchange with `link` (each body in turn), on its kept
    /// connection or a new one; a failure leaves the peer out for
    /// [`PEER_BACKOFF`]. The last answer's body.
    async fn exchange(&self, link: &PeerLink, exchange: Exchange<'_>) -> Result<Bytes> {
        let patience = exchange.patience;
        let result = tokio::time::timeout(patience, self.exchange_once(link, exchange)).await;
        let result = result.unwrap_or_else(|_| Err(anyhow!("no answer within {patience:?}")));
        if let Err(e) = &result {
            tracing::warn!(peer = %link.addr, error = %format!("{e:#}"), "a peer did not take part; left out for {PEER_BACKOFF:?}");
            *link.down_until.lock().unwrap_or_else(|e| e.into_inner()) =
                Some(Instant::now() + PEER_BACKOFF);
        }
        result
    }

    /// One exchange on an idle connection to `link`, or a new one; the
    /// connection is kept for the next exchange if it went well.
    async fn exchange_once(&self, link: &PeerLink, exchange: Exchange<'_>) -> Result<Bytes> {
        let Exchange {
            token,
            method,
            bodies,
            patience,
            retry_refused,
        } = exchange;
        let (mut connection, reused) = match link.take_idle() {
            Some(c) => (c, true),
            None => (
                self.connect(link.addr, patience, retry_refused).await?,
                false,
            ),
        };
        let result = match self
            .send_bodies(&mut connection, token, &method, bodies)
            .await
        {
            // The kept connection may have closed meanwhile (the peer
            // restarted): once more on a new one.
            Err(_) if reused => {
                connection = self.connect(link.addr, patience, retry_refused).await?;
                self.send_bodies(&mut connection, token, &method, bodies)
                    .await
            }
            result => result,
        };
        if result.is_ok() {
            link.keep_idle(connection);
        }
        result
    }

    async fn send_bodies(
        &self,
        connection: &mut Connection,
        token: &str,
        method: &Method,
        bodies: &[Bytes],
    ) -> Result<Bytes> {
        let authorization = format!("Bearer {token}");
        let mut headers = vec![
            ("authorization", authorization.as_str()),
            (INSTANCE_HEADER, self.instance.as_str()),
        ];
        if let Some(own) = &self.own_address {
            headers.push((ADDRESS_HEADER, own.as_str()));
        }
        let mut last = Bytes::new();
        for body in bodies {
            let response = connection
                .request_with(method.clone(), HAND_OVER_PATH, &headers, body.clone())
                .await?;
            if !response.status.is_success() {
                return Err(anyhow!("{}: {}", response.status, response.text().trim()));
            }
            last = response.body;
        }
        Ok(last)
    }

    /// A connection to `addr`; with `retry`, tried
    /// again while refused (a replica just started may not listen yet),
    /// else once: on the request path a peer that refuses is down.
    async fn connect(
        &self,
        addr: SocketAddr,
        patience: Duration,
        retry: bool,
    ) -> Result<Connection> {
        let client = Client::new(addr, &addr.ip().to_string(), self.config.clone(), true)?;
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            match client.connect().await {
                Ok(c) => return Ok(c),
                Err(e)
                    if retry
                        && tokio::time::Instant::now() + Duration::from_millis(50) < deadline =>
                {
                    tracing::debug!(peer = %addr, error = %e, "peer not reached yet");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The token, derived again from the key file every [`TOKEN_FOR`].
    fn token(&self) -> Result<String> {
        let mut cached = self.token.lock().unwrap_or_else(|e| e.into_inner());
        if cached.0.elapsed() >= TOKEN_FOR {
            *cached = (Instant::now(), token(&self.key)?);
        }
        Ok(cached.1.clone())
    }
}

/// One exchange with a peer: the requests' method and bodies, with the
/// token, within `patience`.
#[derive(Clone)]
struct Exchange<'a> {
    token: &'a str,
    method: Method,
    bodies: &'a [Bytes],
    patience: Duration,
    /// Whether a refused connection is tried again within `patience`.
    retry_refused: bool,
}

impl PeerLink {
    fn new(addr: SocketAddr) -> Arc<PeerLink> {
        Arc::new(PeerLink {
            addr,
            idle: Mutex::new(Vec::new()),
            down_until: Mutex::new(None),
        })
    }

    /// An idle connection still open, if one is kept.
    fn take_idle(&self) -> Option<Connection> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(c) = idle.pop() {
            if c.is_open() {
                return Some(c);
            }
        }
        None
    }

    /// Keeps `connection` for a later exchange, unless enough are kept.
    fn keep_idle(&self, connection: Connection) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < MOST_IDLE_CONNECTIONS {
            idle.push(connection);
        }
    }

    fn is_up(&self) -> bool {
        self.down_until
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none_or(|until| Instant::now() >= until)
    }
}

/// The entries as request bodies of about [`BATCH_BYTES`] each.
fn batches(entries: &[Remembered]) -> Vec<Bytes> {
    let mut batches = Vec::new();
    let mut start = 0;
    let mut size = 0;
    for (i, e) in entries.iter().enumerate() {
        // A rough size: the serialized object, counted once it is added.
        let this = serde_json::to_vec(&*e.answered.object).map_or(0, |v| v.len());
        if i > start && size + this > BATCH_BYTES {
            batches.push(Bytes::from(encode_remembered(&entries[start..i])));
            start = i;
            size = 0;
        }
        size += this;
    }
    batches.push(Bytes::from(encode_remembered(&entries[start..])));
    batches
}

/// The bearer token of replicas serving the key of `files`: SHA-256 of a
/// fixed label and the key's DER bytes, hex. Only a holder of the key can
/// make it; it says nothing of the key.
fn token(files: &CertFiles) -> Result<String> {
    let key = tls::read_key(&files.key)?;
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    context.update(b"kmutate reinvocation hand-over\0");
    context.update(key.secret_der());
    Ok(context
        .finish()
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A random id for this process.
fn instance_id() -> String {
    let mut bytes = [0u8; 16];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Trusts exactly the certificate this replica serves: its peers share it.
#[derive(Debug)]
struct SameCertificate {
    cert: Arc<ReloadingCert>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for SameCertificate {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let current = self.cert.current();
        match current.cert.first() {
            Some(own) if own.as_ref() == end_entity.as_ref() => Ok(ServerCertVerified::assertion()),
            _ => Err(rustls::Error::General(
                "the peer does not serve this replica's certificate".into(),
            )),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
