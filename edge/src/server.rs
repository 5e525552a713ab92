//! The one server every listener of every role runs on.
//!
//! `axum::serve` sets no header, body or idle timeout, caps nothing and has
//! no place for a per-listener limit (`Router::layer` makes one semaphore
//! per route). This accept loop and connection driver, on hyper's HTTP/1
//! connection builder, bound what a client can hold:
//!
//! | bound | where | past it |
//! |---|---|---|
//! | open connections | accept loop | the new connection is closed at once |
//! | header bytes and count | hyper's parser | `431`, connection closed |
//! | header read time | connection watchdog, from accept or the request's first byte | connection closed |
//! | idle time between requests | connection watchdog | connection closed |
//! | body read time | [`DeadlineBody`] | `408 REQUEST_TIMEOUT` |
//! | requests in flight | one concurrency limit for the whole listener | `503 SERVICE_OVERLOADED`, `Retry-After` |
//! | whole request | timeout around the router | `503`, `Retry-After` |
//! | a path with dot segments, encoded dots or slashes | before any layer | `400 INVALID_PATH` |
//! | a panicking handler | `catch_unwind` around the whole request | `500 INTERNAL_ERROR` |
//! | TLS handshake time (with [`Server::with_tls`]) | the header read timeout, from accept | connection closed |
//!
//! With [`Server::with_tls`] every connection is TLS first; the rustls
//! configuration decides whether a client certificate is required (the
//! internal listeners require one chained to the CA, see `once-tls`). The
//! identity the client's certificate names is put on each of its requests
//! as an [`Identity`] extension, for the role's authorisation layer; a
//! plaintext listener puts none. A client that fails the handshake (plain
//! HTTP, no certificate, another CA) is closed before hyper sees a byte.
//!
//! Memory per connection is then bounded by hyper's read buffer
//! (`max_header_bytes`) and the role's body limit, and the number of
//! connections by `max_connections`.
//!
//! A listener given a runtime with [`Server::on_runtime`] (the router's
//! admin one, on its [`crate::own_runtime::OwnRuntime`]) is served there,
//! so its probes are not queued behind the role's other work.
//!
//! On shutdown the listener closes, every connection finishes the request
//! it is serving and closes (hyper's graceful shutdown), and connections
//! still open after the drain deadline are dropped.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use futures::FutureExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use once_tls::Identity;
use std::panic::AssertUnwindSafe;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Handle;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tower::{BoxError, ServiceBuilder, ServiceExt};

use crate::body::DeadlineBody;
use crate::error::ApiError;
use crate::limits::ServerLimits;
use crate::metrics::{CloseLabels, EdgeMetrics, ListenerLabel};
use prometheus_client::metrics::counter::Counter;

/// The address a request's connection came from, in every request's
/// extensions: what per-peer checks (the admin throttle) key on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr(pub std::net::SocketAddr);

/// A bound listener with its limits, not serving yet.
pub struct Server {
    name: &'static str,
    listener: TcpListener,
    limits: ServerLimits,
    metrics: EdgeMetrics,
    tls: Option<TlsAcceptor>,
    /// Where [`serve_together`] serves it; `None`: the caller's runtime.
    runtime: Option<Handle>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("name", &self.name)
            .field("listener", &self.listener)
            .field("limits", &self.limits)
            .field("tls", &self.tls.is_some())
            .field("own_runtime", &self.runtime.is_some())
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Binds `addr` (port 0 picks one; see [`Server::local_addr`]). `name`
    /// labels this listener's metrics (`public`, `admin`, `raft`, …).
    pub async fn bind(
        name: &'static str,
        addr: SocketAddr,
        limits: ServerLimits,
        metrics: EdgeMetrics,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        Ok(Self {
            name,
            listener,
            limits,
            metrics,
            tls: None,
            runtime: None,
        })
    }

    /// Serves this listener, when through [`serve_together`], on
    /// `runtime` (an [`crate::own_runtime::OwnRuntime`]'s), so its requests
    /// are not queued behind the role's other work: a router whose public
    /// listener is swamped by a retry storm still answers its probes and
    /// its operator on the admin one (RELIABILITY.md, finding 17).
    /// Linkerd's proxy serves its admin endpoints the same way. Handlers
    /// run there too, and connections their clients open are driven by that
    /// runtime: the caller keeps it until [`serve_together`] has returned.
    pub fn on_runtime(self, runtime: Handle) -> Self {
        Self {
            runtime: Some(runtime),
            ..self
        }
    }

    /// Serves TLS with `config` (which says whether a client certificate is
    /// required); each request carries the client's [`Identity`].
    pub fn with_tls(self, config: Arc<rustls::ServerConfig>) -> Self {
        Self {
            tls: Some(TlsAcceptor::from(config)),
            ..self
        }
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// Serves `router` until `shutdown` resolves, then drains for at most
    /// `drain`.
    pub async fn serve(
        self,
        router: Router,
        shutdown: impl Future<Output = ()> + Send,
        drain: Duration,
    ) {
        let Self {
            name,
            listener,
            limits,
            metrics,
            tls,
            runtime: _,
        } = self;
        let service = requests(router, &limits);
        let (stop, stopping) = watch::channel(false);
        let slots = Arc::new(Semaphore::new(limits.max_connections));
        let label = EdgeMetrics::listener(name);
        let mut connections = JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            let accepted = tokio::select! {
                () = &mut shutdown => break,
                accepted = listener.accept() => accepted,
            };
            while connections.try_join_next().is_some() {}
            let stream = match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors or a connection reset before
                    // accept: back off briefly instead of spinning on it.
                    tracing::warn!(listener = name, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                metrics.connections_refused.get_or_create(&label).inc();
                drop(stream);
                continue;
            };
            let _ = stream.set_nodelay(true);
            connections.spawn(connection(
                stream,
                tls.clone(),
                service.clone(),
                limits,
                Conn {
                    metrics: metrics.clone(),
                    label: label.clone(),
                    _slot: slot,
                },
                stopping.clone(),
            ));
        }
        drop(listener);
        let _ = stop.send(true);
        let drained = tokio::time::timeout(drain, async {
            while connections.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                listener = name,
                remaining = connections.len(),
                "drain deadline passed; closing the remaining connections"
            );
            connections.abort_all();
        }
    }
}

impl Server {
    /// [`Server::serve`] on the runtime this runs on: the socket is taken
    /// off the reactor it was bound on and registered with this one, or
    /// its connections would still wait on the runtime it was bound on.
    async fn moved_here(
        self,
        router: Router,
        shutdown: impl Future<Output = ()> + Send,
        drain: Duration,
    ) {
        let name = self.name;
        let listener = self
            .listener
            .into_std()
            .and_then(|std| std.set_nonblocking(true).map(|()| std))
            .and_then(TcpListener::from_std);
        match listener {
            Ok(listener) => {
                Self { listener, ..self }
                    .serve(router, shutdown, drain)
                    .await
            }
            Err(e) => {
                tracing::error!(listener = name, error = %e, "cannot move the listener to its own runtime; not serving")
            }
        }
    }
}

/// Serves each listener with its router until `shutdown` resolves, then
/// drains them all, each for at most `drain`; returns when all are done.
/// A role with a public and an admin listener serves both through this.
/// A listener given a runtime ([`Server::on_runtime`]) is served there.
pub async fn serve_together(
    listeners: Vec<(Server, Router)>,
    shutdown: impl Future<Output = ()> + Send,
    drain: Duration,
) {
    let (stop, stopping) = watch::channel(false);
    let serving: Vec<_> = listeners
        .into_iter()
        .map(|(server, router)| {
            let mut stopping = stopping.clone();
            let stopped = async move {
                let _ = stopping.wait_for(|stop| *stop).await;
            };
            match server.runtime.clone() {
                Some(runtime) => runtime.spawn(server.moved_here(router, stopped, drain)),
                None => tokio::spawn(server.serve(router, stopped, drain)),
            }
        })
        .collect();
    shutdown.await;
    let _ = stop.send(true);
    for listener in serving {
        let _ = listener.await;
    }
}

/// The per-request layers around a role's router. Each sits where it does
/// for a reason; none allocates per request beyond what the router does.
fn requests(
    router: Router,
    limits: &ServerLimits,
) -> impl tower::Service<
    Request,
    Response = Response,
    Error = BoxError,
    Future = impl Future<Output = Result<Response, BoxError>> + Send + 'static,
> + Clone
+ Send
+ Sync
+ 'static {
    ServiceBuilder::new()
        // One limit for the whole listener (not per route), shedding at
        // once instead of queueing until clients time out and retry.
        .load_shed()
        .concurrency_limit(limits.max_in_flight)
        // Inside the limit, so a late request gives its slot back.
        .timeout(limits.request_deadline)
        .service(router)
}

/// Turns the refusals of the layers above into answers a client can act on.
#[derive(Clone)]
struct Refusals {
    shed: Counter,
    late: Counter,
    panics: Counter,
    deadline: Duration,
}

impl Refusals {
    fn new(metrics: &EdgeMetrics, label: &ListenerLabel, deadline: Duration) -> Self {
        Self {
            shed: metrics.requests_shed.get_or_create(label).clone(),
            late: metrics.deadline_exceeded.get_or_create(label).clone(),
            panics: metrics.panics.get_or_create(label).clone(),
            deadline,
        }
    }

    fn answer(&self, error: BoxError) -> Response {
        if error.is::<tower::load_shed::error::Overloaded>() {
            self.shed.inc();
            ApiError::Overloaded {
                retry_after: Duration::from_secs(1),
            }
        } else if error.is::<tower::timeout::error::Elapsed>() {
            self.late.inc();
            ApiError::DeadlineExceeded {
                deadline: self.deadline,
            }
        } else {
            ApiError::Internal(anyhow::anyhow!(error))
        }
        .into_response()
    }

    fn panicked(&self) -> Response {
        self.panics.inc();
        ApiError::Internal(anyhow::anyhow!("handler panicked")).into_response()
    }
}

/// What a connection holds while it lives: its slot under the cap and its
/// place in the open-connections gauge.
struct Conn {
    metrics: EdgeMetrics,
    label: ListenerLabel,
    _slot: OwnedSemaphorePermit,
}

#[derive(Debug, Clone, Copy)]
enum CloseReason {
    HeaderTimeout,
    IdleTimeout,
    /// No TLS session within the header timeout: plain HTTP, no or a
    /// foreign client certificate, or too slow.
    TlsHandshake,
}

impl CloseReason {
    fn as_str(self) -> &'static str {
        match self {
            Self::HeaderTimeout => "header_timeout",
            Self::IdleTimeout => "idle_timeout",
            Self::TlsHandshake => "tls_handshake",
        }
    }
}

impl Conn {
    fn closed(&self, reason: CloseReason) {
        self.metrics
            .connections_closed
            .get_or_create(&CloseLabels {
                listener: self.label.listener.clone(),
                reason: reason.as_str(),
            })
            .inc();
    }
}

/// A connection's byte stream, plain or TLS.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// Drives one connection and closes it when its client overstays: the
/// headers of a request must be complete within the header read timeout of
/// the request's first byte (of accept, for the first request), and a
/// kept-alive connection may sit idle for the idle timeout.
async fn connection<S>(
    stream: TcpStream,
    tls: Option<TlsAcceptor>,
    service: S,
    limits: ServerLimits,
    conn: Conn,
    mut stopping: watch::Receiver<bool>,
) where
    S: tower::Service<Request, Response = Response, Error = BoxError> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    let open = conn
        .metrics
        .connections_open
        .get_or_create(&conn.label)
        .clone();
    open.inc();
    let peer_addr = stream.peer_addr().ok().map(PeerAddr);
    let activity = Arc::new(Activity::new());
    let watched = Watched {
        inner: stream,
        activity: activity.clone(),
    };
    let (io, peer): (Box<dyn Io>, Option<Identity>) = match tls {
        None => (Box::new(watched), None),
        Some(acceptor) => {
            match tokio::time::timeout(limits.header_read_timeout, acceptor.accept(watched)).await {
                Ok(Ok(session)) => {
                    let peer = session
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|chain| chain.first())
                        .and_then(|cert| Identity::of_certificate(cert));
                    (Box::new(session), peer)
                }
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "TLS handshake refused");
                    conn.closed(CloseReason::TlsHandshake);
                    open.dec();
                    return;
                }
                Err(_) => {
                    conn.closed(CloseReason::TlsHandshake);
                    open.dec();
                    return;
                }
            }
        }
    };
    let io = TokioIo::new(io);
    let body_timeout = limits.body_read_timeout;
    let tracked = activity.clone();
    let refusals = Refusals::new(&conn.metrics, &conn.label, limits.request_deadline);
    let handler = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let service = service.clone();
        let activity = tracked.clone();
        activity.request_started();
        // Before anything else: a path that could mean two things is
        // refused here, in every role, whatever its routes are.
        let canonical = crate::path::is_canonical(request.uri().path());
        let mut request = request.map(|body| Body::new(DeadlineBody::new(body, body_timeout)));
        if let Some(peer) = &peer {
            request.extensions_mut().insert(peer.clone());
        }
        if let Some(addr) = peer_addr {
            request.extensions_mut().insert(addr);
        }
        let refusals = refusals.clone();
        async move {
            let response = if canonical {
                // Outermost: a panic anywhere below is a 500 in the API's
                // error shape, never a dropped connection.
                match AssertUnwindSafe(service.oneshot(request))
                    .catch_unwind()
                    .await
                {
                    Ok(Ok(answer)) => answer,
                    Ok(Err(refused)) => refusals.answer(refused),
                    Err(_) => refusals.panicked(),
                }
            } else {
                ApiError::InvalidPath.into_response()
            };
            activity.request_finished();
            Ok::<_, Infallible>(response)
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .max_buf_size(limits.max_header_bytes)
        .max_headers(limits.max_headers)
        .keep_alive(true);
    let connection = builder.serve_connection(io, handler);
    tokio::pin!(connection);
    // One timer for the connection's life, moved only when its deadline
    // changes: no timer is registered per request.
    let watchdog = tokio::time::sleep_until(activity.at(0) + limits.header_read_timeout);
    tokio::pin!(watchdog);
    let mut draining = false;
    loop {
        let recheck_at = match activity.due(&limits) {
            Ok(at) => at,
            Err(reason) => {
                conn.closed(reason);
                break;
            }
        };
        if watchdog.deadline() != recheck_at {
            watchdog.as_mut().reset(recheck_at);
        }
        tokio::select! {
            _ = connection.as_mut() => break,
            () = watchdog.as_mut() => {}
            _ = stopping.changed(), if !draining => {
                draining = true;
                connection.as_mut().graceful_shutdown();
            }
        }
    }
    open.dec();
}

/// What the watchdog needs to know about a connection, updated by the IO
/// wrapper and the request handler with atomics and no wake-ups: the
/// watchdog looks again at least every `min(header, idle)` timeout, so a
/// head that starts on an idle kept-alive connection is timed out within
/// the header timeout plus that (exactly the header timeout for a
/// connection's first request, whose clock starts at accept), and an idle
/// connection within the idle timeout plus that. Times are milliseconds since
/// `born`.
struct Activity {
    born: Instant,
    in_flight: AtomicUsize,
    /// Last byte read or written, or last answer made.
    last: AtomicU64,
    /// 1 + when the current request's head began; 0 while none is being read.
    head_started: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Self {
            born: Instant::now(),
            in_flight: AtomicUsize::new(0),
            last: AtomicU64::new(0),
            // The first request's header clock starts at accept.
            head_started: AtomicU64::new(1),
        }
    }

    fn now(&self) -> u64 {
        self.born.elapsed().as_millis() as u64
    }

    fn at(&self, ms: u64) -> Instant {
        self.born + Duration::from_millis(ms)
    }

    fn request_started(&self) {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.head_started.store(0, Ordering::Release);
    }

    fn request_finished(&self) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.last.store(self.now(), Ordering::Release);
    }

    fn bytes_read(&self) {
        let now = self.now();
        self.last.store(now, Ordering::Release);
        if self.in_flight.load(Ordering::Acquire) == 0 {
            let _ =
                self.head_started
                    .compare_exchange(0, now + 1, Ordering::AcqRel, Ordering::Acquire);
        }
    }

    fn bytes_written(&self) {
        self.last.store(self.now(), Ordering::Release);
    }

    /// When to look again, or why the connection must close now.
    fn due(&self, limits: &ServerLimits) -> Result<Instant, CloseReason> {
        let now = self.now();
        let ms = |d: Duration| d.as_millis() as u64;
        // Nothing wakes the watchdog early, so it looks again at least this
        // often: a head that starts, or a request that ends, is seen in time
        // for whichever of the two timeouts is shorter.
        let look_again = now + ms(limits.header_read_timeout.min(limits.idle_timeout));
        if self.in_flight.load(Ordering::Acquire) > 0 {
            // The request's own deadlines apply; look again later.
            return Ok(self.at(look_again));
        }
        let head = self.head_started.load(Ordering::Acquire);
        if head > 0 {
            let due = head - 1 + ms(limits.header_read_timeout);
            return if now >= due {
                Err(CloseReason::HeaderTimeout)
            } else {
                Ok(self.at(due.min(look_again)))
            };
        }
        let due = self.last.load(Ordering::Acquire) + ms(limits.idle_timeout);
        if now >= due {
            Err(CloseReason::IdleTimeout)
        } else {
            Ok(self.at(due.min(look_again)))
        }
    }
}

/// The socket, reporting reads and writes to the watchdog.
struct Watched {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.bytes_read();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.bytes_written();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.bytes_written();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
