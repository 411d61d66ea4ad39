//! A small HTTPS client (HTTP/1.1 keep-alive or HTTP/2 over rustls) for the
//! load generator and the end-to-end tests, and a plain-HTTP GET for the
//! metrics listener.

use anyhow::{anyhow, bail, Context as _, Result};
use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt as _, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::ClientConfig;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
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
        let (tls, peer, protocol) = self.connect_tls().await?;
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

    /// Opens a connection for [`RawHttp1Connection`] (TCP, TLS handshake);
    /// the client must be an HTTP/1.1 one (its ALPN offers `http/1.1`).
    pub async fn connect_raw(&self) -> Result<RawHttp1Connection<TlsStream<TcpStream>>> {
        if self.http2 {
            bail!("an HTTP/2 client opens no raw HTTP/1.1 connection");
        }
        let (tls, _, _) = self.connect_tls().await?;
        Ok(RawHttp1Connection::new(tls))
    }

    /// An HTTP/2 connection for the load generator (see
    /// [`RawHttp2Connection`]); the client must be an HTTP/2 one.
    pub async fn connect_raw_h2(&self) -> Result<RawHttp2Connection> {
        if !self.http2 {
            bail!("an HTTP/1.1 client opens no HTTP/2 connection");
        }
        let (tls, _, _) = self.connect_tls().await?;
        let (sender, connection) = h2::client::handshake(tls)
            .await
            .context("HTTP/2 handshake")?;
        let open = Arc::new(AtomicBool::new(true));
        let driver_open = open.clone();
        tokio::spawn(async move {
            let _ = connection.await;
            driver_open.store(false, Ordering::Relaxed);
        });
        Ok(RawHttp2Connection { sender, open })
    }

    /// The request line and headers of a POST of `body` to `path` on this
    /// client's host, followed by the body: what [`RawHttp1Connection::send`]
    /// writes. Fails for a `path` that is no request target.
    pub fn http1_post(&self, path: &str, body: &[u8]) -> Result<Bytes> {
        check_request_path(path)?;
        let mut request = format!(
            "POST {path} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            self.host,
            body.len()
        )
        .into_bytes();
        request.extend_from_slice(body);
        Ok(Bytes::from(request))
    }

    /// The head of a POST of a `body_len`-byte JSON body to `path` on this
    /// client's host: what [`RawHttp2Connection::send`] sends, built once.
    /// Fails for a `path` that is no request target.
    pub fn http2_post_head(&self, path: &str, body_len: usize) -> Result<Request<()>> {
        check_request_path(path)?;
        Ok(Request::builder()
            .method(Method::POST)
            .uri(format!("https://{}{}", self.host, path))
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(hyper::header::CONTENT_LENGTH, body_len)
            .body(())?)
    }

    async fn connect_tls(
        &self,
    ) -> Result<(
        TlsStream<TcpStream>,
        Option<CertificateDer<'static>>,
        Option<Vec<u8>>,
    )> {
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
        Ok((tls, peer, protocol))
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
        self.request_with(method, path, &[], body).await
    }

    /// [`Connection::request`] with further headers.
    pub async fn request_with(
        &mut self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<Response> {
        let mut builder = Request::builder().method(method);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
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

/// Fails unless `path` is an origin-form request target (`/path?query`).
fn check_request_path(path: &str) -> Result<()> {
    path.parse::<hyper::http::uri::PathAndQuery>()
        .ok()
        .filter(|_| path.starts_with('/'))
        .with_context(|| format!("request path {path:?}"))?;
    Ok(())
}

/// An HTTP/2 connection driven through the `h2` crate, the load
/// generator's: hyper's client adds a channel to its connection task and a
/// task to send each request's body. Clones are streams of the same
/// connection, so that requests go at once as kube-apiserver sends them to
/// a webhook on a loopback address.
#[derive(Clone)]
pub struct RawHttp2Connection {
    sender: h2::client::SendRequest<Bytes>,
    /// Cleared when the connection ends or a request on it fails.
    open: Arc<AtomicBool>,
}

impl RawHttp2Connection {
    /// Whether the connection can take another request.
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Relaxed)
    }

    /// Sends a request with `head` (from [`Client::http2_post_head`]) and
    /// `body`, and reads the whole answer.
    pub async fn send(&mut self, head: &Request<()>, body: &Bytes) -> Result<Response> {
        if !self.is_open() {
            bail!("connection closed");
        }
        let result = self.round_trip(head.clone(), body).await;
        if result.is_err() {
            self.open.store(false, Ordering::Relaxed);
        }
        result
    }

    async fn round_trip(&mut self, request: Request<()>, body: &Bytes) -> Result<Response> {
        let mut sender = self
            .sender
            .clone()
            .ready()
            .await
            .context("connection closed")?;
        let (answer, mut stream) = sender
            .send_request(request, false)
            .context("sending the request")?;
        stream
            .send_data(body.clone(), true)
            .context("sending the request body")?;
        let (head, mut recv) = answer.await.context("reading the answer")?.into_parts();
        let mut received = BytesMut::new();
        while let Some(chunk) = recv.data().await {
            let chunk = chunk.context("reading the answer body")?;
            // Returned at once: the window stays open for the next answers.
            let _ = recv.flow_control().release_capacity(chunk.len());
            received.extend_from_slice(&chunk);
        }
        let content_type = head
            .headers
            .get(hyper::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        Ok(Response {
            status: head.status,
            content_type,
            body: received.freeze(),
        })
    }
}

/// The longest answer head [`RawHttp1Connection`] reads.
const MAX_HEAD: usize = 64 * 1024;

/// A keep-alive HTTP/1.1 connection that writes requests serialized
/// beforehand ([`Client::http1_post`]) and reads each answer whole: the load
/// generator's. hyper's client hands every request to a connection task
/// through a channel; here a request is one write and its answer a read or
/// two, so the generator takes less of the CPU it shares with the server it
/// measures. Answers must carry a `Content-Length` (as hyper's server sends
/// for a whole body); one request is in flight at a time.
pub struct RawHttp1Connection<S> {
    stream: S,
    /// Bytes read past the last answer.
    buffer: BytesMut,
    open: bool,
}

impl<S: AsyncRead + AsyncWrite + Unpin> RawHttp1Connection<S> {
    /// A connection over `stream` (TLS already set up, no request sent).
    pub fn new(stream: S) -> RawHttp1Connection<S> {
        RawHttp1Connection {
            stream,
            buffer: BytesMut::with_capacity(16 * 1024),
            open: true,
        }
    }

    /// Whether the connection can take another request (the server has not
    /// answered `Connection: close` or closed it).
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// Writes `request` (a whole HTTP/1.1 request) and reads its answer.
    pub async fn send(&mut self, request: &[u8]) -> Result<Response> {
        if !self.open {
            bail!("connection closed");
        }
        let result = self.round_trip(request).await;
        if result.is_err() {
            self.open = false;
        }
        result
    }

    async fn round_trip(&mut self, request: &[u8]) -> Result<Response> {
        self.stream
            .write_all(request)
            .await
            .context("writing the request")?;
        self.stream.flush().await.context("writing the request")?;
        let head = loop {
            if let Some(head) = AnswerHead::parse(&self.buffer)? {
                break head;
            }
            if self.buffer.len() > MAX_HEAD {
                bail!("answer head longer than {MAX_HEAD} bytes");
            }
            self.read_more().await?;
        };
        let end = head
            .length
            .checked_add(head.content_length)
            .context("answer length overflows")?;
        while self.buffer.len() < end {
            self.read_more().await?;
        }
        let mut answer = self.buffer.split_to(end);
        let body = answer.split_off(head.length).freeze();
        if head.close {
            self.open = false;
        }
        Ok(Response {
            status: head.status,
            content_type: head.content_type,
            body,
        })
    }

    async fn read_more(&mut self) -> Result<()> {
        self.buffer.reserve(16 * 1024);
        let n = self
            .stream
            .read_buf(&mut self.buffer)
            .await
            .context("reading the answer")?;
        if n == 0 {
            self.open = false;
            bail!("the server closed the connection before answering");
        }
        Ok(())
    }
}

/// What [`RawHttp1Connection`] needs of an answer's head.
#[derive(Debug)]
struct AnswerHead {
    /// Bytes of the head, up to the body.
    length: usize,
    status: StatusCode,
    content_length: usize,
    content_type: String,
    close: bool,
}

impl AnswerHead {
    /// The head at the start of `bytes`; `None` while it is incomplete.
    fn parse(bytes: &[u8]) -> Result<Option<AnswerHead>> {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut answer = httparse::Response::new(&mut headers);
        let length = match answer.parse(bytes).context("malformed answer head")? {
            httparse::Status::Complete(n) => n,
            httparse::Status::Partial => return Ok(None),
        };
        let code = answer.code.context("answer without a status")?;
        let status = StatusCode::from_u16(code).context("answer status")?;
        let mut content_length = None;
        let mut content_type = String::new();
        let mut close = answer.version == Some(0);
        for h in answer.headers.iter() {
            if h.name.eq_ignore_ascii_case("content-length") {
                let text = std::str::from_utf8(h.value).unwrap_or("");
                let n: usize = text
                    .trim()
                    .parse()
                    .with_context(|| format!("answer Content-Length {text:?}"))?;
                content_length = Some(n);
            } else if h.name.eq_ignore_ascii_case("content-type") {
                content_type = String::from_utf8_lossy(h.value).into_owned();
            } else if h.name.eq_ignore_ascii_case("connection") {
                close = h.value.eq_ignore_ascii_case(b"close");
            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                bail!("answer with Transfer-Encoding: only answers with a Content-Length are read");
            }
        }
        let content_length = match content_length {
            Some(n) => n,
            // No body.
            None if code == 204 || code == 304 => 0,
            None => bail!("answer without a Content-Length"),
        };
        Ok(Some(AnswerHead {
            length,
            status,
            content_length,
            content_type,
            close,
        }))
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{duplex, DuplexStream};

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// A connection whose server has already written `answer`.
    async fn answered_with(answer: &[u8]) -> (RawHttp1Connection<DuplexStream>, DuplexStream) {
        let (client_end, mut server_end) = duplex(1024);
        server_end.write_all(answer).await.unwrap();
        (RawHttp1Connection::new(client_end), server_end)
    }

    const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{\"ok\":true}";

    #[test]
    fn the_serialized_post_is_one_whole_request() {
        let client = Client::new(
            "127.0.0.1:1".parse().unwrap(),
            "localhost",
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth(),
            false,
        )
        .unwrap();
        let bytes = client.http1_post("/mutate", b"{\"a\":1}").unwrap();
        for bad in ["/a b", "/a\r\nx: y", "mutate", ""] {
            assert!(client.http1_post(bad, b"").is_err(), "{bad:?}");
        }
        let mut headers = [httparse::EMPTY_HEADER; 8];
        let mut request = httparse::Request::new(&mut headers);
        let httparse::Status::Complete(n) = request.parse(&bytes).unwrap() else {
            panic!("incomplete request");
        };
        assert_eq!(request.method, Some("POST"));
        assert_eq!(request.path, Some("/mutate"));
        assert_eq!(request.version, Some(1));
        let header = |name: &str| {
            request
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case(name))
                .map(|h| std::str::from_utf8(h.value).unwrap().to_string())
        };
        assert_eq!(header("host").as_deref(), Some("localhost"));
        assert_eq!(header("content-type").as_deref(), Some("application/json"));
        assert_eq!(header("content-length").as_deref(), Some("7"));
        assert_eq!(&bytes[n..], b"{\"a\":1}");
    }

    #[test]
    fn answers_split_anywhere_are_read_whole_one_after_another() {
        runtime().block_on(async {
            let (client_end, mut server_end) = duplex(64);
            let mut conn = RawHttp1Connection::new(client_end);
            let server = tokio::spawn(async move {
                let mut seen = Vec::new();
                for _ in 0..2 {
                    let mut request = [0u8; 3];
                    server_end.read_exact(&mut request).await.unwrap();
                    seen.push(request);
                    // The answer a byte at a time.
                    for b in OK {
                        server_end.write_all(&[*b]).await.unwrap();
                        server_end.flush().await.unwrap();
                    }
                }
                seen
            });
            for request in [b"one", b"two"] {
                let answer = conn.send(request).await.unwrap();
                assert_eq!(answer.status, StatusCode::OK);
                assert_eq!(answer.content_type, "application/json");
                assert_eq!(&answer.body[..], b"{\"ok\":true}");
                assert!(conn.is_open());
            }
            assert_eq!(server.await.unwrap(), [*b"one", *b"two"]);
        });
    }

    #[test]
    fn connection_close_and_closed_connections_end_the_connection() {
        runtime().block_on(async {
            let (mut conn, _server_end) = answered_with(
                b"HTTP/1.1 413 Payload Too Large\r\nconnection: close\r\ncontent-length: 3\r\n\r\nbig",
            )
            .await;
            let answer = conn.send(b"x").await.unwrap();
            assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE);
            assert_eq!(&answer.body[..], b"big");
            assert!(!conn.is_open());
            assert!(conn.send(b"x").await.is_err());

            let (client_end, server_end) = duplex(1024);
            let mut conn = RawHttp1Connection::new(client_end);
            drop(server_end);
            let e = conn.send(b"x").await.unwrap_err();
            assert!(!conn.is_open(), "{e:#}");
        });
    }

    #[test]
    fn answers_it_cannot_frame_are_errors() {
        runtime().block_on(async {
            for (answer, message) in [
                (
                    &b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
                        [..],
                    "Transfer-Encoding",
                ),
                (&b"HTTP/1.1 200 OK\r\n\r\n"[..], "without a Content-Length"),
                (
                    &b"HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n"[..],
                    "Content-Length \"x\"",
                ),
                (&b"SMTP ready\r\n\r\n"[..], "malformed answer head"),
            ] {
                let (mut conn, _server_end) = answered_with(answer).await;
                let e = format!("{:#}", conn.send(b"x").await.unwrap_err());
                assert!(e.contains(message), "{e}");
                assert!(!conn.is_open());
            }
            // A 204 has no body and needs no length.
            let (mut conn, _server_end) = answered_with(b"HTTP/1.1 204 No Content\r\n\r\n").await;
            let answer = conn.send(b"x").await.unwrap();
            assert_eq!(answer.status, StatusCode::NO_CONTENT);
            assert!(answer.body.is_empty() && conn.is_open());
        });
    }
}
