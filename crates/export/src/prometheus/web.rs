//! The exporter's HTTP server: it listens, holds at most
//! [`MAX_CONNECTIONS`], answers one request per connection within the
//! time limits, behind the TLS and basic auth of `--web-config`
//! ([`config`]), with the OpenMetrics text of the registry it was given.
//! It knows the registry only as prometheus-client's [`Registry`]: the
//! metrics (prometheus.rs) are registered in it before the server starts,
//! and nothing here calls back into them.
use std::{
    collections::VecDeque,
    convert::Infallible,
    net::SocketAddr,
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use anyhow::Context as _;
use http_body_util::Full;
use hyper::{
    Method, Request, Response, StatusCode,
    body::{Bytes, Incoming},
    header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue, WWW_AUTHENTICATE},
    server::conn::http1,
    service::service_fn,
};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family},
    registry::Registry,
};
use rustls::ServerConfig;
use tokio::{
    net::{TcpListener, TcpSocket, TcpStream},
    task::{AbortHandle, JoinHandle, JoinSet},
};

mod config;

use config::{BasicAuth, WebConfig};

/// `Content-Type` of the OpenMetrics text format (what prometheus-client
/// encodes; Prometheus parses it as OpenMetrics only with this type).
const CONTENT_TYPE_OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Connections held at once (the figure the flood test bounds the open
/// sockets with). A new connection beyond it evicts the oldest held one
/// that has not sent its request yet, else the oldest: a scraper sends its
/// request at once and is answered in milliseconds, so whoever has held a
/// slot longest is the idle or slow client. docs/prometheus.md says why.
pub const MAX_CONNECTIONS: usize = 32;
/// A client that has not sent its request headers by then is dropped: a
/// scraper sends them right after connecting, within a round trip.
const HEADER_TIMEOUT: Duration = Duration::from_secs(2);
/// Whole life of a connection, request and response: Prometheus's default
/// `scrape_timeout` (a scraper waits no longer for an answer).
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);
/// Read buffer limit per connection: a scrape request is a few hundred
/// bytes; 16 KiB leaves room for long headers and bounds a flood's memory
/// (hyper's default is ~400 KiB; its minimum is 8 KiB).
const MAX_REQUEST_BYTES: usize = 16 << 10;
/// Connections the kernel queues before wbscope accepts them; a flood
/// above it has SYNs dropped (retried by the client) until the queue
/// drains. listen(2): capped by net.core.somaxconn.
const LISTEN_BACKLOG: u32 = 1024;

/// The OpenMetrics text of `registry`.
pub(crate) fn encode(registry: &Registry) -> Result<String, std::fmt::Error> {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry)?;
    Ok(out)
}

/// The server running: where it listens and what guards it; dropping it
/// stops it and every connection.
pub(crate) struct Server {
    pub(crate) local_addr: SocketAddr,
    /// What it serves, with the door's counters registered.
    pub(crate) registry: Arc<Registry>,
    tls: bool,
    auth: bool,
    task: JoinHandle<()>,
}

impl Server {
    /// Binds `addr` and serves `registry` on the current tokio runtime,
    /// behind the TLS and basic auth of `web_config` when given (read
    /// now: before the privileges are dropped). The door's own counters
    /// are registered in `registry` first.
    pub(crate) fn start(
        addr: SocketAddr,
        web_config: Option<&Path>,
        mut registry: Registry,
    ) -> anyhow::Result<Server> {
        let web = web_config.map(WebConfig::load).transpose()?;
        let listener =
            listen(addr).with_context(|| format!("--prometheus {addr}: cannot listen"))?;
        let local_addr = listener
            .local_addr()
            .context("--prometheus: local address")?;
        let (tls, auth) = web.map(|w| (w.tls, w.auth)).unwrap_or_default();
        let door = FrontDoor::new(tls, auth, &mut registry);
        let (tls, auth) = (door.tls.is_some(), door.auth.is_some());
        let registry = Arc::new(registry);
        let task = tokio::spawn(serve(listener, registry.clone(), Arc::new(door)));
        Ok(Server {
            local_addr,
            registry,
            tls,
            auth,
            task,
        })
    }

    /// `https` with TLS, else `http`.
    pub(crate) fn scheme(&self) -> &'static str {
        if self.tls { "https" } else { "http" }
    }

    /// One line to warn with when the metrics reach beyond this host
    /// without TLS or without authentication.
    pub(crate) fn exposure_warning(&self) -> Option<String> {
        if self.local_addr.ip().is_loopback() || (self.tls && self.auth) {
            return None;
        }
        let missing = match (self.tls, self.auth) {
            (false, false) => "without TLS or authentication",
            (false, true) => "without TLS (passwords in clear)",
            _ => "without authentication",
        };
        Some(format!(
            "metrics on {} are served {missing} to anyone who can connect; see --web-config \
             (docs/production.md)",
            self.local_addr
        ))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A listening socket on `addr` with a backlog of [`LISTEN_BACKLOG`]
/// (tokio's `TcpListener::bind` takes 128).
fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    // As `TcpListener::bind` does: a restarted trace can take its port
    // back while the old connections are in TIME_WAIT.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// A connection the server holds.
struct Held {
    task: AbortHandle,
    /// Set once its request headers are in: it is being answered.
    answering: Arc<AtomicBool>,
}

/// Which held connection (oldest first) gives its slot to a new one: the
/// oldest that has not sent a request, else the oldest.
fn victim(answering: impl IntoIterator<Item = bool>) -> usize {
    let mut answering = answering.into_iter();
    answering.position(|a| !a).unwrap_or(0)
}

/// Accepts without ever waiting for a slot: at most [`MAX_CONNECTIONS`]
/// are held, and each new one evicts a held one ([`victim`]), so idle or
/// slow clients cannot keep a scraper out and a flood costs at most that
/// many tasks and sockets. Each connection is one request (no
/// keep-alive), headers within [`HEADER_TIMEOUT`], all within
/// [`CONNECTION_TIMEOUT`].
async fn serve(listener: TcpListener, registry: Arc<Registry>, door: Arc<FrontDoor>) {
    // Dropping the set (the exporter is dropped) aborts every connection.
    let mut tasks = JoinSet::new();
    let mut held: VecDeque<Held> = VecDeque::with_capacity(MAX_CONNECTIONS);
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors and the like: wait, don't spin.
                log::warn!("--prometheus: accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        while tasks.try_join_next().is_some() {}
        held.retain(|h| !h.task.is_finished());
        if held.len() >= MAX_CONNECTIONS {
            let i = victim(held.iter().map(|h| h.answering.load(Ordering::Relaxed)));
            if let Some(old) = held.remove(i) {
                old.task.abort();
            }
        }
        // An aborted task is dropped, socket and all, once the runtime
        // polls it: on the one thread of `trace` (lib.rs) not while this
        // loop keeps finding connections ready, so wait for it here.
        while tasks.len() >= MAX_CONNECTIONS {
            if tasks.join_next().await.is_none() {
                break;
            }
        }
        let answering = Arc::new(AtomicBool::new(false));
        let task = tasks.spawn(connection(
            stream,
            registry.clone(),
            door.clone(),
            answering.clone(),
        ));
        held.push_back(Held { task, answering });
    }
}

fn respond(req: &Request<Incoming>, registry: &Registry) -> Response<Full<Bytes>> {
    let text = |status: StatusCode, body: String, content_type: &'static str| {
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = status;
        r.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        r
    };
    let plain = "text/plain; charset=utf-8";
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "GET only\n".into(), plain);
    }
    match req.uri().path() {
        "/metrics" => match encode(registry) {
            Ok(body) => text(StatusCode::OK, body, CONTENT_TYPE_OPENMETRICS),
            Err(e) => text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("encoding metrics: {e}\n"),
                plain,
            ),
        },
        "/" => text(
            StatusCode::OK,
            "wbscope: metrics are at /metrics\n".into(),
            plain,
        ),
        _ => text(
            StatusCode::NOT_FOUND,
            "not found; try /metrics\n".into(),
            plain,
        ),
    }
}

/// What stands between a connection and the metrics (`--web-config`),
/// and the count of who it turned away.
struct FrontDoor {
    tls: Option<tokio_rustls::TlsAcceptor>,
    auth: Option<BasicAuth>,
    refused: Family<RefusalLabels, Counter>,
    handshakes_failed: Counter,
}

/// Labels of `wbscope_exporter_auth_failures_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefusalLabels {
    reason: &'static str,
}

impl FrontDoor {
    /// The door of a loaded config, its counters registered.
    fn new(
        tls: Option<Arc<ServerConfig>>,
        auth: Option<BasicAuth>,
        registry: &mut Registry,
    ) -> FrontDoor {
        let door = FrontDoor {
            tls: tls.map(tokio_rustls::TlsAcceptor::from),
            auth,
            refused: Family::default(),
            handshakes_failed: Counter::default(),
        };
        registry.register(
            "exporter_auth_failures",
            "Requests refused with 401 by basic auth (--web-config), by reason",
            door.refused.clone(),
        );
        registry.register(
            "exporter_tls_handshake_failures",
            "Connections closed because their TLS handshake failed (--web-config)",
            door.handshakes_failed.clone(),
        );
        door
    }
}

/// Serves one request on `stream`, within the time limits: the TLS
/// handshake, when there is one, within the time the request headers
/// have, and all of it within [`CONNECTION_TIMEOUT`].
async fn connection(
    stream: TcpStream,
    registry: Arc<Registry>,
    door: Arc<FrontDoor>,
    answering: Arc<AtomicBool>,
) {
    let Some(acceptor) = door.tls.clone() else {
        return serve_io(stream, registry, door, answering).await;
    };
    match tokio::time::timeout(HEADER_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => serve_io(tls, registry, door, answering).await,
        Ok(Err(e)) => {
            door.handshakes_failed.inc();
            log::debug!("--prometheus: TLS handshake: {e}");
        }
        Err(_) => {
            door.handshakes_failed.inc();
            log::debug!("--prometheus: TLS handshake not done in {HEADER_TIMEOUT:?}, closed");
        }
    }
}

/// One HTTP/1 request on `io` (plain TCP or TLS).
async fn serve_io<IO>(
    io: IO,
    registry: Arc<Registry>,
    door: Arc<FrontDoor>,
    answering: Arc<AtomicBool>,
) where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |req: Request<Incoming>| {
        answering.store(true, Ordering::Relaxed);
        let response = match door
            .auth
            .as_ref()
            .map(|a| a.check(req.headers().get(AUTHORIZATION)))
        {
            Some(Err(refusal)) => {
                door.refused
                    .get_or_create(&RefusalLabels {
                        reason: refusal.label(),
                    })
                    .inc();
                unauthorized()
            }
            None | Some(Ok(())) => respond(&req, &registry),
        };
        async move { Ok::<_, Infallible>(response) }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        // One request per connection: nothing idles between scrapes
        // holding a slot; a scraper reconnects (once per scrape interval).
        .keep_alive(false)
        .max_buf_size(MAX_REQUEST_BYTES);
    let served = builder.serve_connection(TokioIo::new(io), service);
    match tokio::time::timeout(CONNECTION_TIMEOUT, served).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => log::debug!("--prometheus: connection: {e}"),
        Err(_) => {
            log::debug!("--prometheus: connection: not done in {CONNECTION_TIMEOUT:?}, closed")
        }
    }
}

/// 401 with the challenge a browser or curl answers, and nothing of the
/// metrics.
fn unauthorized() -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(b"Unauthorized\n")));
    *r.status_mut() = StatusCode::UNAUTHORIZED;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r.headers_mut().insert(
        WWW_AUTHENTICATE,
        HeaderValue::from_static("Basic realm=\"wbscope\""),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_connection_without_a_request_is_evicted() {
        assert_eq!(victim([true, true, false, false]), 2);
        assert_eq!(victim([false, true]), 0);
        // Every held connection is being answered: the oldest goes.
        assert_eq!(victim([true, true, true]), 0);
        assert_eq!(victim([]), 0);
    }
}
