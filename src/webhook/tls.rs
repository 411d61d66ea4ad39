//! TLS for the webhook: rustls with the `ring` provider, TLS 1.2 and 1.3,
//! ALPN `h2` and `http/1.1`; the serving certificate read from files and
//! re-read when they change (cert-manager rotates them), or generated
//! self-signed at start; client certificates required and verified when a
//! client CA is given, its file re-read when it changes too.

use super::metrics::Metrics;
use anyhow::{anyhow, bail, Context as _, Result};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::client::ClientConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::UnixTime;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, ServerConfig, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::RootCertStore;
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// The crypto provider used everywhere (ring).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// [`provider`] with its cipher suites in the order kube-apiserver's Go
/// client offers them on hardware with AES (crypto/tls
/// `defaultCipherSuitesTLS13` and `cipherSuitesPreferenceOrder`):
/// AES-128-GCM, then AES-256-GCM, then ChaCha20-Poly1305. The server takes
/// the client's first choice, so a client of [`client_config`] (the load
/// generator, the tests) gets the suite kube-apiserver's connections get.
pub fn client_provider() -> Arc<CryptoProvider> {
    let mut provider = rustls::crypto::ring::default_provider();
    // Stable: ECDSA before RSA within a rank, as in Go's order.
    provider
        .cipher_suites
        .sort_by_key(|s| go_client_rank(s.suite()));
    Arc::new(provider)
}

/// Where Go's client puts a suite (lower first).
fn go_client_rank(suite: rustls::CipherSuite) -> u8 {
    use rustls::CipherSuite as S;
    match suite {
        S::TLS13_AES_128_GCM_SHA256 => 0,
        S::TLS13_AES_256_GCM_SHA384 => 1,
        S::TLS13_CHACHA20_POLY1305_SHA256 => 2,
        S::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 | S::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => 3,
        S::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384 | S::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 => 4,
        _ => 5,
    }
}

/// ALPN protocols offered by the server, preferred first.
pub const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// A certificate chain file and its private key file, PEM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertFiles {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    /// The private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// Reads every certificate of a PEM file.
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let pem = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        bail!("{}: no certificate found", path.display());
    }
    Ok(certs)
}

/// Reads the private key of a PEM file.
pub fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>> {
    let pem = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| anyhow!("{}: {e}", path.display()))
}

/// Loads a certificate and its key, checking that they belong together.
pub fn load_certified_key(files: &CertFiles, provider: &CryptoProvider) -> Result<CertifiedKey> {
    let certs = read_certs(&files.cert)?;
    let key = read_key(&files.key)?;
    CertifiedKey::from_der(certs, key, provider)
        .map_err(|e| anyhow!("{} and {}: {e}", files.cert.display(), files.key.display()))
}

/// What identifies a file's version: any write or replacement changes it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct FileStamp {
    modified: Option<SystemTime>,
    len: u64,
    #[cfg(unix)]
    inode: (u64, u64, i64, i64),
}

fn stamp(path: &Path) -> Option<FileStamp> {
    // Follows symlinks: a Secret volume swaps its `..data` link.
    let meta = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    let inode = {
        use std::os::unix::fs::MetadataExt;
        (meta.dev(), meta.ino(), meta.ctime(), meta.ctime_nsec())
    };
    Some(FileStamp {
        modified: meta.modified().ok(),
        len: meta.len(),
        #[cfg(unix)]
        inode,
    })
}

struct Current {
    stamps: (Option<FileStamp>, Option<FileStamp>),
    key: Arc<CertifiedKey>,
}

/// The serving certificate, re-read from its files when they change.
///
/// Every handshake looks at the files' metadata (two `stat` calls) and
/// reloads when it changed, so a rotated certificate is served from the
/// next connection on; open connections keep theirs. A pair that does not
/// load (e.g. the certificate written but not yet the key) leaves the
/// previous one in service and is tried again when the files change again.
pub struct ReloadingCert {
    files: CertFiles,
    provider: Arc<CryptoProvider>,
    current: Mutex<Current>,
    metrics: Option<Arc<Metrics>>,
}

impl std::fmt::Debug for ReloadingCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReloadingCert")
            .field("files", &self.files)
            .finish()
    }
}

impl ReloadingCert {
    /// Loads `files` now (an error if they do not load).
    pub fn new(
        files: CertFiles,
        provider: Arc<CryptoProvider>,
        metrics: Option<Arc<Metrics>>,
    ) -> Result<ReloadingCert> {
        let stamps = (stamp(&files.cert), stamp(&files.key));
        let key = Arc::new(load_certified_key(&files, &provider)?);
        if let Some(m) = &metrics {
            m.init_cert_reloads();
        }
        Ok(ReloadingCert {
            files,
            provider,
            current: Mutex::new(Current { stamps, key }),
            metrics,
        })
    }

    /// The certificate to serve, reloaded first if its files changed.
    pub fn current(&self) -> Arc<CertifiedKey> {
        let stamps = (stamp(&self.files.cert), stamp(&self.files.key));
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if stamps != current.stamps {
            current.stamps = stamps;
            match load_certified_key(&self.files, &self.provider) {
                Ok(key) => {
                    current.key = Arc::new(key);
                    tracing::info!(
                        cert = %self.files.cert.display(),
                        "serving certificate reloaded"
                    );
                    if let Some(m) = &self.metrics {
                        m.observe_cert_reload(true);
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "serving certificate not reloaded; keeping the previous one");
                    if let Some(m) = &self.metrics {
                        m.observe_cert_reload(false);
                    }
                }
            }
        }
        current.key.clone()
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// A verifier of client certificates against the CAs of a file.
fn client_verifier(
    ca: &Path,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn ClientCertVerifier>> {
    let mut roots = RootCertStore::empty();
    for c in read_certs(ca)? {
        roots.add(c).map_err(|e| anyhow!("{}: {e}", ca.display()))?;
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| anyhow!("client CA {}: {e}", ca.display()))
}

/// Client certificates verified against the CAs of a file, re-read when it
/// changes (as the serving certificate is: the CA that signs
/// kube-apiserver's client certificate rotates too). A file that does not
/// load leaves the previous CAs in service.
pub struct ReloadingClientVerifier {
    ca: PathBuf,
    provider: Arc<CryptoProvider>,
    current: Mutex<(Option<FileStamp>, Arc<dyn ClientCertVerifier>)>,
    metrics: Option<Arc<Metrics>>,
}

impl std::fmt::Debug for ReloadingClientVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReloadingClientVerifier")
            .field("ca", &self.ca)
            .finish()
    }
}

impl ReloadingClientVerifier {
    /// Loads the CAs of `ca` now (an error if they do not load).
    pub fn new(
        ca: &Path,
        provider: Arc<CryptoProvider>,
        metrics: Option<Arc<Metrics>>,
    ) -> Result<ReloadingClientVerifier> {
        let verifier = client_verifier(ca, &provider)?;
        if let Some(m) = &metrics {
            m.init_cert_reloads();
        }
        Ok(ReloadingClientVerifier {
            ca: ca.to_path_buf(),
            provider,
            current: Mutex::new((stamp(ca), verifier)),
            metrics,
        })
    }

    /// The verifier of the file's current CAs.
    fn current(&self) -> Arc<dyn ClientCertVerifier> {
        let now = stamp(&self.ca);
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if now != current.0 {
            current.0 = now;
            let reloaded = client_verifier(&self.ca, &self.provider);
            if let Some(m) = &self.metrics {
                m.observe_cert_reload(reloaded.is_ok());
            }
            match reloaded {
                Ok(v) => {
                    current.1 = v;
                    tracing::info!(client_ca = %self.ca.display(), "client CA reloaded");
                }
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "client CA not reloaded; keeping the previous one")
                }
            }
        }
        current.1.clone()
    }
}

impl ClientCertVerifier for ReloadingClientVerifier {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        // The hints would borrow from a verifier that may be replaced; an
        // empty list lets the client send any certificate it has.
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.current()
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.current().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.current().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.current().supported_verify_schemes()
    }
}

/// The server's TLS configuration.
pub fn server_config(
    cert: Arc<ReloadingCert>,
    client_ca: Option<&Path>,
    provider: Arc<CryptoProvider>,
) -> Result<ServerConfig> {
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?;
    let builder = match client_ca {
        Some(ca) => builder.with_client_cert_verifier(Arc::new(ReloadingClientVerifier::new(
            ca,
            provider,
            cert.metrics.clone(),
        )?)),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(cert);
    config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// A client configuration trusting the CAs of `ca` (PEM), offering `alpn`,
/// presenting `identity` (certificate and key files) when given.
pub fn client_config(
    ca: &Path,
    identity: Option<&CertFiles>,
    alpn: &[&[u8]],
) -> Result<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for c in read_certs(ca)? {
        roots.add(c).map_err(|e| anyhow!("{}: {e}", ca.display()))?;
    }
    let builder = ClientConfig::builder_with_provider(client_provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_root_certificates(roots);
    let mut config = match identity {
        Some(files) => builder
            .with_client_auth_cert(read_certs(&files.cert)?, read_key(&files.key)?)
            .map_err(|e| anyhow!("client certificate: {e}"))?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// Certificates generated by [`generate_self_signed`], as PEM files.
#[derive(Clone, Debug)]
pub struct SelfSigned {
    /// The CA bundle clients should trust (`ca.crt`).
    pub ca: PathBuf,
    /// The serving certificate and key (`tls.crt`, `tls.key`).
    pub files: CertFiles,
}

/// A PEM certificate and key pair made by [`issue`].
#[derive(Clone, Debug)]
pub struct Issued {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// The private key, PEM (PKCS#8).
    pub key_pem: String,
}

/// A new CA (ECDSA P-256), for [`issue`].
pub fn new_ca(common_name: &str) -> Result<(rcgen::Issuer<'static, rcgen::KeyPair>, String)> {
    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, common_name);
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let cert = params.self_signed(&key)?;
    Ok((rcgen::Issuer::new(params, key), cert.pem()))
}

/// A certificate for `names` (DNS names or IP addresses) signed by `ca`, for
/// serving (`server == true`) or as a client identity.
pub fn issue(
    ca: &rcgen::Issuer<'_, rcgen::KeyPair>,
    common_name: &str,
    names: &[String],
    server: bool,
) -> Result<Issued> {
    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::new(names.to_vec())?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, common_name);
    params.extended_key_usages = vec![if server {
        rcgen::ExtendedKeyUsagePurpose::ServerAuth
    } else {
        rcgen::ExtendedKeyUsagePurpose::ClientAuth
    }];
    params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
    let cert = params.signed_by(&key, ca)?;
    Ok(Issued {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// Writes a new CA and a serving certificate for `names` (plus `localhost`,
/// `127.0.0.1` and `::1`) into `dir` as `ca.crt`, `tls.crt` and `tls.key`.
pub fn generate_self_signed(dir: &Path, names: &[String]) -> Result<SelfSigned> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let (ca, ca_pem) = new_ca("kmutate self-signed CA")?;
    let mut all: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    for n in names {
        if !all.contains(n) {
            all.push(n.clone());
        }
    }
    let leaf = issue(&ca, "kmutate", &all, true)?;
    let ca_path = dir.join("ca.crt");
    let files = CertFiles {
        cert: dir.join("tls.crt"),
        key: dir.join("tls.key"),
    };
    std::fs::write(&ca_path, ca_pem).with_context(|| format!("writing {}", ca_path.display()))?;
    std::fs::write(&files.cert, &leaf.cert_pem)
        .with_context(|| format!("writing {}", files.cert.display()))?;
    write_private(&files.key, leaf.key_pem.as_bytes())?;
    Ok(SelfSigned { ca: ca_path, files })
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write as _;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut f = options
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    f.write_all(bytes)
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("kmutate-tls-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn clients_offer_suites_in_go_order() {
        // Go's crypto/tls with AES hardware: defaultCipherSuitesTLS13, then
        // the TLS 1.2 part of cipherSuitesPreferenceOrder that ring has.
        use rustls::CipherSuite as S;
        let offered: Vec<S> = client_provider()
            .cipher_suites
            .iter()
            .map(|s| s.suite())
            .collect();
        assert_eq!(
            offered,
            [
                S::TLS13_AES_128_GCM_SHA256,
                S::TLS13_AES_256_GCM_SHA384,
                S::TLS13_CHACHA20_POLY1305_SHA256,
                S::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
                S::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
                S::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
                S::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
                S::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
                S::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
            ]
        );
    }

    #[test]
    fn self_signed_loads_and_reloads() {
        let dir = temp_dir("reload");
        let generated = generate_self_signed(&dir, &["kmutate.example.svc".into()]).unwrap();
        let cert = ReloadingCert::new(generated.files.clone(), provider(), None).unwrap();
        let first = cert.current();
        assert!(
            Arc::ptr_eq(&first, &cert.current()),
            "unchanged files are not reloaded"
        );
        // A mismatched pair keeps the previous certificate.
        let (ca, _) = new_ca("other").unwrap();
        let other = issue(&ca, "kmutate", &["localhost".into()], true).unwrap();
        std::fs::write(&generated.files.cert, &other.cert_pem).unwrap();
        assert!(Arc::ptr_eq(&first, &cert.current()));
        // Once the key follows, the new pair is served.
        std::fs::write(&generated.files.key, &other.key_pem).unwrap();
        let second = cert.current();
        assert!(!Arc::ptr_eq(&first, &second));
        assert_ne!(first.cert[0], second.cert[0]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
