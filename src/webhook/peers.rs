//! Handing the reinvocation memory to the other replicas when one stops.
//!
//! kube-apiserver's reinvocation of the webhook carries nothing that says
//! it is one ([`super::reinvocation`]): only the replica that answered the
//! first call can tell it. kube-apiserver keeps its connection to one
//! replica, so the second call reaches the first one's replica, except
//! when that replica stops between the two (a rolling update): its
//! connections close and the second call reaches another replica, which
//! would run the `Never` policies again (a sidecar appended twice).
//!
//! So a replica that stops hands what it remembers to its peers before it
//! closes a connection, and until it has drained it hands each further
//! answer over before sending it: every answer kube-apiserver has from it
//! is known to the peers before any call can reach them instead. A replica
//! takes in what peers hand it on `POST /reinvocations`.
//!
//! Peers are named by `--peers` (`HOST:PORT`, each name resolved when the
//! hand-over starts: a headless Service's name gives every replica's
//! address). Both sides prove they hold the serving key, which the
//! replicas share: the receiver by presenting the very certificate this
//! replica serves (pinned, whatever its name or issuer), the sender by a
//! token derived from the private key. A replica hands nothing to itself
//! (each process has an instance id of its own).

use super::client::Client;
use super::reinvocation::{encode_remembered, Remembered};
use super::tls::{self, CertFiles, ReloadingCert};
use anyhow::{anyhow, Context as _, Result};
use bytes::Bytes;
use hyper::Method;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Where a replica takes in what another hands it.
pub const HAND_OVER_PATH: &str = "/reinvocations";

/// The header naming the sending process (a replica ignores its own).
pub const INSTANCE_HEADER: &str = "kmutate-instance";

/// Most bytes of one hand-over request: entries are sent in batches of
/// about this size (one object may be larger, up to the request limit).
const BATCH_BYTES: usize = 4 << 20;

/// Largest hand-over body a replica reads: a batch and one more object.
pub const MAX_HAND_OVER_BYTES: usize = BATCH_BYTES + 2 * super::MAX_BODY_BYTES;

/// How long a hand-over keeps trying a peer that does not answer (a
/// replica just started may not listen yet).
const PEER_PATIENCE: Duration = Duration::from_secs(3);

/// The other replicas, and the means to hand them answers.
pub struct Peers {
    addresses: Vec<String>,
    instance: String,
    key: CertFiles,
    config: ClientConfig,
}

impl std::fmt::Debug for Peers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peers")
            .field("addresses", &self.addresses)
            .field("instance", &self.instance)
            .finish()
    }
}

impl Peers {
    /// Peers at `addresses` (`HOST:PORT`), for a replica serving the
    /// certificate and key of `files` (`cert` is that certificate, kept
    /// current).
    pub fn new(
        addresses: Vec<String>,
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
        // The token is derived now once, to fail at start on a key that
        // cannot be read.
        token(&files).context("the reinvocation hand-over's token")?;
        Ok(Peers {
            addresses,
            instance: instance_id(),
            key: files,
            config,
        })
    }

    /// This process's instance id.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Whether a hand-over's `authorization` header and instance header
    /// come from a replica holding this one's key; `Ok(false)` for this
    /// process's own.
    pub fn accepts(&self, authorization: Option<&str>, instance: Option<&str>) -> Result<bool> {
        let expected = format!("Bearer {}", token(&self.key)?);
        let given = authorization.unwrap_or_default();
        if !constant_time_eq(given.as_bytes(), expected.as_bytes()) {
            return Err(anyhow!("not a replica's token"));
        }
        Ok(instance != Some(self.instance.as_str()))
    }

    /// Hands `entries` to every peer reachable within a few seconds; the
    /// number of peers that took them.
    pub async fn hand_over(&self, entries: &[Remembered]) -> usize {
        if entries.is_empty() {
            return 0;
        }
        let token = match token(&self.key) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(error = %e, "reinvocation hand-over: the key cannot be read");
                return 0;
            }
        };
        let batches = batches(entries);
        let addresses = self.resolve().await;
        let sends = addresses
            .iter()
            .map(|addr| self.send_to(*addr, &token, &batches));
        let results = futures::future::join_all(sends).await;
        let mut taken = 0;
        for (addr, result) in addresses.iter().zip(results) {
            match result {
                Ok(()) => taken += 1,
                Err(e) => {
                    tracing::warn!(peer = %addr, error = %format!("{e:#}"), "reinvocation hand-over failed")
                }
            }
        }
        taken
    }

    async fn resolve(&self) -> Vec<SocketAddr> {
        let mut found = Vec::new();
        for name in &self.addresses {
            match tokio::net::lookup_host(name.as_str()).await {
                Ok(addrs) => found.extend(addrs),
                Err(e) => tracing::warn!(peer = %name, error = %e, "resolving a peer failed"),
            }
        }
        found.sort();
        found.dedup();
        found
    }

    async fn send_to(&self, addr: SocketAddr, token: &str, batches: &[Bytes]) -> Result<()> {
        let client = Client::new(addr, &addr.ip().to_string(), self.config.clone(), true)?;
        let deadline = tokio::time::Instant::now() + PEER_PATIENCE;
        let mut connection = loop {
            match tokio::time::timeout_at(deadline, client.connect()).await {
                Ok(Ok(c)) => break c,
                Ok(Err(e))
                    if tokio::time::Instant::now() + Duration::from_millis(50) < deadline =>
                {
                    tracing::debug!(peer = %addr, error = %e, "peer not reached yet");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Ok(Err(e)) => return Err(e),
                Err(_) => return Err(anyhow!("no answer within {PEER_PATIENCE:?}")),
            }
        };
        let authorization = format!("Bearer {token}");
        let headers = [
            ("authorization", authorization.as_str()),
            (INSTANCE_HEADER, self.instance.as_str()),
        ];
        for batch in batches {
            let response = tokio::time::timeout_at(
                deadline.max(tokio::time::Instant::now() + Duration::from_secs(1)),
                connection.request_with(Method::POST, HAND_OVER_PATH, &headers, batch.clone()),
            )
            .await
            .map_err(|_| anyhow!("no answer within {PEER_PATIENCE:?}"))??;
            if !response.status.is_success() {
                return Err(anyhow!("{}: {}", response.status, response.text().trim()));
            }
        }
        Ok(())
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
