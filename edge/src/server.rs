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
//! | open connections of one peer (a quarter of the cap by default, [`crate::peers`]) | accept loop | the new connection is closed at once |
//! | idle connections near the cap | connection watchdog, told when the listener is pressed | idle ones closed after [`crate::peers::PRESSED_IDLE`] |
//! | header bytes and count | hyper's parser | `431`, connection closed |
//! | header read time | connection watchdog, from accept or the request's first byte | connection closed |
//! | idle time between requests | connection watchdog | connection closed |
//! | body read time | [`DeadlineBody`] | `408 REQUEST_TIMEOUT` |
//! | requests in flight | one concurrency limit for the whole listener | `503 SERVICE_OVERLOADED`, `Retry-After` |
//! | requests in flight of one peer (a quarter of the limit by default) | before the listener's limit | `503 SERVICE_OVERLOADED`, `Retry-After` |
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
//! connections by `max_connections`. The connection watchdog is
//! `watchdog`.
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
use std::sync::Arc;
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
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Handle;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tower::{BoxError, ServiceBuilder, ServiceExt};

use crate::body::DeadlineBody;
use crate::error::ApiError;
use crate::limits::ServerLimits;
use crate::metrics::{EdgeMetrics, ListenerLabel, ReasonLabels};
use crate::peers::{Occupancy, Refused, Seat};
use crate::watchdog::{Activity, CloseReason, Watched};
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
        let occupancy = Occupancy::new(&limits);
        let label = EdgeMetrics::listener(name);
        let refusals = Refusals::new(&metrics, &label, limits.request_deadline);
        let mut connections = JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            let accepted = tokio::select! {
                () = &mut shutdown => break,
                accepted = listener.accept() => accepted,
            };
            while connections.try_join_next().is_some() {}
            let (stream, peer) = match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors or a connection reset before
                    // accept: back off briefly instead of spinning on it.
                    tracing::warn!(listener = name, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let seat = match occupancy.admit(Some(peer.ip())) {
                Ok(seat) => seat,
                Err(refused) => {
                    metrics
                        .connections_refused
                        .get_or_create(&reason(&label, refused.as_str()))
                        .inc();
                    drop(stream);
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            connections.spawn(connection(
                Accepted { stream, seat },
                tls.clone(),
                service.clone(),
                limits,
                Conn {
                    metrics: metrics.clone(),
                    label: label.clone(),
                    refusals: refusals.clone(),
                    peer: PeerAddr(peer),
                    pressure: occupancy.pressure(),
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

fn reason(label: &ListenerLabel, reason: &'static str) -> ReasonLabels {
    ReasonLabels {
        listener: label.listener.clone(),
        reason,
    }
}

/// Turns the refusals of the layers above into answers a client can act on.
#[derive(Clone)]
struct Refusals {
    shed: Counter,
    peer_shed: Counter,
    late: Counter,
    panics: Counter,
    deadline: Duration,
}

impl Refusals {
    /// Once per listener, not per connection. Each counter is taken in a
    /// statement of its own: `Family::get_or_create` hands back a read
    /// guard on the family, and a second call for a label not yet created
    /// needs the family's write lock, so two calls in one expression (whose
    /// temporaries live to its end) deadlock the worker thread. That froze
    /// every listener of `once up`'s store members when this layer was
    /// first merged (decision 0078).
    fn new(metrics: &EdgeMetrics, label: &ListenerLabel, deadline: Duration) -> Self {
        let shed_label = reason(label, Refused::ListenerCap.as_str());
        let shed = metrics.requests_shed.get_or_create(&shed_label).clone();
        let peer_label = reason(label, Refused::PeerCap.as_str());
        let peer_shed = metrics.requests_shed.get_or_create(&peer_label).clone();
        let late = metrics.deadline_exceeded.get_or_create(label).clone();
        let panics = metrics.panics.get_or_create(label).clone();
        Self {
            shed,
            peer_shed,
            late,
            panics,
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

    /// The peer has its share of the listener's requests in flight.
    fn peer_overloaded(&self) -> Response {
        self.peer_shed.inc();
        ApiError::Overloaded {
            retry_after: Duration::from_secs(1),
        }
        .into_response()
    }

    fn panicked(&self) -> Response {
        self.panics.inc();
        ApiError::Internal(anyhow::anyhow!("handler panicked")).into_response()
    }
}

/// A connection just accepted, and its seat in the listener's occupancy
/// (shared with its requests, which count against its peer's share).
struct Accepted {
    stream: TcpStream,
    seat: Seat,
}

/// What a connection holds while it lives besides its seat: its place in
/// the open-connections gauge and what it counts its closes and refusals in.
struct Conn {
    metrics: EdgeMetrics,
    label: ListenerLabel,
    refusals: Refusals,
    peer: PeerAddr,
    /// Whether the listener is near its cap (idle connections go first).
    pressure: watch::Receiver<bool>,
}

fn reason_of(label: &ListenerLabel, close: CloseReason) -> ReasonLabels {
    reason(label, close.as_str())
}

impl Conn {
    fn closed(&self, reason: CloseReason) {
        self.metrics
            .connections_closed
            .get_or_create(&reason_of(&self.label, reason))
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
    Accepted { stream, mut seat }: Accepted,
    tls: Option<TlsAcceptor>,
    service: S,
    limits: ServerLimits,
    mut conn: Conn,
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
    let peer_addr = conn.peer;
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
    let refusals = conn.refusals.clone();
    if peer.is_some() {
        // A role peer, by a certificate of the CA: the role's peers share
        // one address on one machine (`once up`) and few addresses behind
        // routers, so their connections count against the listener's cap
        // only, not against one address's share (decision 0078).
        seat.authenticated();
    }
    let seat = Arc::new(seat);
    let handler = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let service = service.clone();
        let activity = tracked.clone();
        activity.request_started();
        // Before the listener's limit: a peer over its share is shed
        // without taking one of the slots the other peers share.
        let in_flight = seat.start_request();
        // Before anything else: a path that could mean two things is
        // refused here, in every role, whatever its routes are.
        let canonical = crate::path::is_canonical(request.uri().path());
        let mut request = request.map(|body| Body::new(DeadlineBody::new(body, body_timeout)));
        if let Some(peer) = &peer {
            request.extensions_mut().insert(peer.clone());
        }
        request.extensions_mut().insert(peer_addr);
        let refusals = refusals.clone();
        async move {
            let response = if in_flight.is_none() {
                refusals.peer_overloaded()
            } else if canonical {
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
            drop(in_flight);
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
        let pressed = *conn.pressure.borrow_and_update();
        let recheck_at = match activity.due(&limits, pressed) {
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
            // The sender lives in the occupancy this connection's seat
            // holds, so this never ends for want of one.
            _ = conn.pressure.changed() => {}
            _ = stopping.changed(), if !draining => {
                draining = true;
                connection.as_mut().graceful_shutdown();
            }
        }
    }
    open.dec();
}
