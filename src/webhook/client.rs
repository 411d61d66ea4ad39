//! A small HTTPS client (HTTP/1.1 keep-alive or HTTP/2 over rustls) for the
//! load generator and the end-to-end tests, and a plain-HTTP GET for the
//! metrics listener.

use anyhow::{anyhow, Context as _, Result};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::ClientConfig;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// Connects to one server.
#[derive(Clone)]
pub struct Client {
    connector: TlsConnector,
    addr: SocketAddr,
    server_name: ServerName<'static>,
    host: String,
    http2: bool,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("addr", &self.addr)
            .field("host", &self.host)
            .field("http2", &self.http2)
            .finish()
    }
}

/// An answer.
#[derive(Clone, Debug)]
pub struct Response {
    /// The HTTP status.
    pub status: StatusCode,
    /// The Content-Type header.
    pub content_type: String,
    /// The body.
    pub body: Bytes,
}

impl Response {
    /// The body as JSON.
    pub fn json(&self) -> Result<serde_json::Value> {
        serde_json::from_slice(&self.body).context("response body is not JSON")
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

enum Sender {
    H1(hyper::client::conn::http1::SendRequest<Full<Bytes>>),
    H2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

/// One open connection; requests on it go one after another (HTTP/1.1) or
/// may be sent from clones concurrently (HTTP/2).
pub struct Connection {
    sender: Sender,
    host: String,
    peer: Option<CertificateDer<'static>>,
    protocol: Option<Vec<u8>>,
}

impl Client {
    /// A client of `addr`, verifying the server as `server_name` with
    /// `config` (whose ALPN list is set here: `h2` when `http2`, else
    /// `http/1.1`).
    pub fn new(
        addr: SocketAddr,
        server_name: &str,
        mut config: ClientConfig,
        http2: bool,
    ) -> Result<Client> {
        config.alpn_protocols = vec![if http2 {
            b"h2".to_vec()
        } else {
            b"http/1.1".to_vec()
        }];
        let name = ServerName::try_from(server_name.to_string())
            .map_err(|e| anyhow!("server name {server_name:?}: {e}"))?;
        Ok(Client {
            connector: TlsConnector::from(Arc::new(config)),
            addr,
            server_name: name,
            host: server_name.to_string(),
            http2,
        })
    }

    /// Opens a connection (TCP, TLS handshake, HTTP handshake).
    pub async fn connect(&self) -> Result<Connection> {
        let tcp = TcpStream::connect(self.addr)
            .await
            .with_context(|| format!("connecting to {}", self.addr))?;
        tcp.set_nodelay(true)?;
        let tls = self
            .connector
            .connect(self.server_name.clone(), tcp)
            .await
            .context("TLS handshake")?;
        let (_, session) = tls.get_ref();
        let peer = session
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| c.clone().into_owned());
        let protocol = session.alpn_protocol().map(<[u8]>::to_vec);
        let io = TokioIo::new(tls);
        let sender = if self.http2 {
            let (sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                .await
                .context("HTTP/2 handshake")?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            Sender::H2(sender)
        } else {
            let (sender, conn) = hyper::client::conn::http1::handshake(io)
                .await
                .context("HTTP/1.1 handshake")?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            Sender::H1(sender)
        };
        Ok(Connection {
            sender,
            host: self.host.clone(),
            peer,
            protocol,
        })
    }
}

impl Connection {
    /// The server's leaf certificate.
    pub fn peer_certificate(&self) -> Option<&CertificateDer<'static>> {
        self.peer.as_ref()
    }

    /// The ALPN protocol agreed.
    pub fn protocol(&self) -> Option<&[u8]> {
        self.protocol.as_deref()
    }

    /// Sends one request and reads the whole answer.
    pub async fn request(&mut self, method: Method, path: &str, body: Bytes) -> Result<Response> {
        let builder = Request::builder().method(method);
        let response = match &mut self.sender {
            Sender::H1(s) => {
                let req = builder
                    .uri(path)
                    .header(hyper::header::HOST, &self.host)
                    .header(hyper::header::CONTENT_TYPE, "application/json")
                    .body(Full::new(body))?;
                s.ready().await.context("connection closed")?;
                s.send_request(req).await?
            }
            Sender::H2(s) => {
                let req = builder
                    .uri(format!("https://{}{}", self.host, path))
                    .header(hyper::header::CONTENT_TYPE, "application/json")
                    .body(Full::new(body))?;
                s.ready().await.context("connection closed")?;
                s.send_request(req).await?
            }
        };
        Response::read(response).await
    }

    /// POSTs `body` to `path`.
    pub async fn post(&mut self, path: &str, body: impl Into<Bytes>) -> Result<Response> {
        self.request(Method::POST, path, body.into()).await
    }

    /// GETs `path`.
    pub async fn get(&mut self, path: &str) -> Result<Response> {
        self.request(Method::GET, path, Bytes::new()).await
    }

    /// Whether the connection can take another request.
    pub fn is_open(&self) -> bool {
        match &self.sender {
            Sender::H1(s) => !s.is_closed(),
            Sender::H2(s) => !s.is_closed(),
        }
    }
}

/// A plain-HTTP GET (the metrics listener).
pub async fn get_plain(addr: SocketAddr, path: &str) -> Result<Response> {
    let tcp = TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let req = Request::builder()
        .method(Method::GET)
        .uri(path)
        .header(hyper::header::HOST, addr.to_string())
        .body(Full::new(Bytes::new()))?;
    let response = sender.send_request(req).await?;
    Response::read(response).await
}

impl Response {
    /// Reads a whole answer: status, content type and body.
    async fn read(response: hyper::Response<hyper::body::Incoming>) -> Result<Response> {
        let status = response.status();
        let content_type = response
            .headers()
            .get(hyper::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let body = response.into_body().collect().await?.to_bytes();
        Ok(Response {
            status,
            content_type,
            body,
        })
    }
}
