//! `/payments…`, `/webhook-endpoints…` and `/events`: authenticate, find
//! the tenant's home, forward to one of its nodes, stream the answer back.
//!
//! ```text
//! client ─► 401? ─► 429? ─► body ≤ --body-limit (413), in time (408) ─► home = placement(tenant) or own region
//!   ─► [WAN wait if home ≠ own region] ─► node (round-robin; next node on connect error;
//!                                            nodes that refused a connection lately skipped)
//!        ├─ answer        ─► stream back + X-Once-Region
//!        ├─ 421           ─► re-read the tenant's placement ─► re-send once ─► answer (even a 421)
//!        ├─ no answer     ─► 503 SERVICE_UNAVAILABLE, Retry-After: 1
//!        └─ every node skipped ─► 503 SERVICE_UNAVAILABLE at once, Retry-After: the backoff left
//! ```
//!
//! A node that refused a connection is skipped for a backoff, one request
//! probing it when that ends ([`crate::reachability`]): a paused or dead
//! node costs each request nothing instead of a connect timeout.
//!
//! A region cut off by `/admin/partition` ([`crate::partition`]) is
//! answered like a node that refuses connections: 503 with `Retry-After: 1`,
//! nothing sent.
//!
//! **Why the request body is buffered.** A 421 means the node refused the
//! request before doing anything, and the router must send the *same*
//! request again to the new home; a streamed body would be gone by then.
//! Payment commands are small (the node itself refuses bodies over
//! 16 KiB), so buffering up to `--body-limit` (64 KiB) costs little and a
//! bigger body is answered with the node's own `413 PAYLOAD_TOO_LARGE`.
//! Answers are streamed: they are never re-sent.
//!
//! Re-sending is safe for the same reason client retries are: the request
//! carries its `Idempotency-Key`, and the node decides exactly once.

use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use once_edge::{ApiError, Caller, InternalCause};
use tracing::Instrument;

use crate::headers;
use crate::metrics::Metrics;
use crate::reachability::Admission;
use crate::state::{RouterState, SharedState};

/// Names the region whose node answered, on every forwarded answer.
pub const X_ONCE_REGION: HeaderName = HeaderName::from_static("x-once-region");
/// A node's hint on a 421: the home region it believes in.
pub const X_ONCE_HOME_REGION: HeaderName = HeaderName::from_static("x-once-home-region");

/// Only the API's own routes are forwarded, each with its own method: a
/// path the node would route elsewhere (`/metrics`, `/admin/…`) can never
/// be reached through the router. Paths are canonical by then (the edge
/// answers `400 INVALID_PATH` to dot segments and encoded dots or slashes),
/// and a payment id is one segment of the id alphabet. The query string
/// (`GET /payments`'s filters and cursor) is forwarded as the client sent
/// it; the node validates it.
pub fn router() -> Router<SharedState> {
    Router::new()
        .route("/payments", post(forward).get(forward))
        .route("/payments/{id}", get(forward))
        .route("/webhook-endpoints", post(forward).get(forward))
        .route("/webhook-endpoints/{id}", delete(forward))
        .route("/webhook-endpoints/{id}/rotate-secret", post(forward))
        .route("/events", get(forward))
}

/// A payment id as the node mints them (`pay_` and hex), checked loosely:
/// one segment of `[A-Za-z0-9_-]`, so nothing but an id is forwarded.
fn is_id_segment(segment: &str) -> bool {
    !segment.is_empty()
        && segment.len() <= 128
        && segment
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A forward that got no answer from a node.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    #[error("region {0} has no nodes configured")]
    NoNodes(String),
    #[error("region {0} is cut off from this router by a simulated partition")]
    Partitioned(String),
    #[error(
        "every node of region {region} refused a connection lately; the next is tried in {retry_in:?}"
    )]
    KnownDown { region: String, retry_in: Duration },
    #[error("node {url} of region {region} did not answer")]
    Unreachable {
        region: String,
        url: String,
        #[source]
        source: reqwest::Error,
    },
}

/// What the router keeps of a request to send it (again).
struct Outgoing {
    method: Method,
    path_and_query: String,
    headers: HeaderMap,
    body: Bytes,
}

/// Forwards one request and counts it: `router_requests_total` and
/// `router_request_duration_seconds` (until the node's answer starts; the
/// body then streams through), by serving region and status.
async fn forward(State(state): State<SharedState>, request: Request) -> Response {
    let started = Instant::now();
    let (region, response) = forward_to_home(&state, request).await;
    state
        .metrics
        .observe_request(&region, response.status(), started.elapsed());
    response
}

/// The answer to one request and the region that gave it (empty when the
/// router answered by itself before choosing one).
async fn forward_to_home(state: &SharedState, request: Request) -> (String, Response) {
    let (parts, body) = request.into_parts();
    // Put there by the authenticating layer; without it, nothing is sent.
    let Some(tenant) = parts
        .extensions
        .get::<Caller>()
        .map(|c| c.tenant.to_string())
    else {
        return (String::new(), ApiError::Unauthorized.into_response());
    };
    let path = parts.uri.path();
    if let Some(id) = path.strip_prefix("/payments/")
        && !is_id_segment(id)
    {
        return (String::new(), ApiError::PaymentNotFound.into_response());
    }
    if let Some(rest) = path.strip_prefix("/webhook-endpoints/")
        && !is_id_segment(rest.strip_suffix("/rotate-secret").unwrap_or(rest))
    {
        return (String::new(), ApiError::NotFound.into_response());
    }
    let body = match once_edge::body::read(body, &parts.headers, state.config.body_limit).await {
        Ok(body) => body,
        Err(e) => return (String::new(), e.into_response()),
    };
    // Rebuilt from the checked path, never the raw request target.
    let path_and_query = match parts.uri.query() {
        Some(query) => format!("{path}?{query}"),
        None => path.to_owned(),
    };
    let outgoing = Outgoing {
        method: parts.method,
        path_and_query,
        headers: headers::to_node(&parts.headers),
        body,
    };

    let home = home_of(state, &tenant);
    let (region, response) = match send(state, &home, &outgoing).await {
        Ok(response) if response.status() == StatusCode::MISDIRECTED_REQUEST => {
            state.metrics.misdirected.inc();
            let new_home = rehome(state, &tenant, &home, response.headers()).await;
            match send(state, &new_home, &outgoing).await {
                Ok(again) => {
                    if again.status() == StatusCode::MISDIRECTED_REQUEST {
                        state.metrics.misdirected.inc();
                    }
                    (new_home, again)
                }
                Err(e) => return unavailable(e),
            }
        }
        Ok(response) => (home, response),
        Err(e) => return unavailable(e),
    };
    tracing::Span::current().record("region", region.as_str());
    let answer = stream_back(&region, response);
    (region, answer)
}

/// The tenant's home as cached; a tenant without a placement lives in the
/// router's own region.
fn home_of(state: &RouterState, tenant: &str) -> String {
    state
        .placements
        .get(tenant)
        .map_or_else(|| state.config.region.clone(), |p| p.home)
}

/// After a 421: the tenant's home as the store says now. If the store
/// cannot be read, or the router has not loaded its table yet, the node's
/// hint (when it names a region we can reach), else the home we had.
async fn rehome(state: &RouterState, tenant: &str, tried: &str, answer: &HeaderMap) -> String {
    let hint = answer
        .get(X_ONCE_HOME_REGION)
        .and_then(|v| v.to_str().ok())
        .filter(|r| state.config.nodes.contains(r))
        .map(str::to_owned);
    let by_hint = || hint.clone().unwrap_or_else(|| tried.to_owned());
    let home = if !state.placements.is_loaded() {
        // Every tenant homed elsewhere meets a 421 until the table is read
        // (the refresher is at it, on the control runtime). A store read
        // for each on the client's path would only compete with it: under
        // a retry storm a restarted router never loaded its table
        // (RELIABILITY.md, finding 17). The node fenced by placement, so
        // its hint is the placement it holds.
        by_hint()
    } else {
        match state.placements.refresh_tenant(tenant).await {
            Ok(Some(placement)) => placement.home,
            Ok(None) => state.config.region.clone(),
            Err(e) => {
                tracing::warn!(error = %e, "placement re-read after a 421 failed; using the node's hint");
                by_hint()
            }
        }
    };
    tracing::info!(tenant, tried, home = %home, hint = ?hint, "misdirected: re-sending to the home region");
    home
}

/// Sends `outgoing` to a node of `region`: round-robin, moving on to the
/// region's next node only when a connection could not be made (nothing
/// was sent, so nothing can have happened).
async fn send(
    state: &RouterState,
    region: &str,
    outgoing: &Outgoing,
) -> Result<reqwest::Response, ForwardError> {
    let span = tracing::info_span!(
        "forward to a node",
        otel.kind = "client",
        region,
        node = tracing::field::Empty
    );
    async {
        if !state.partition.reachable(region) {
            // As a connect error: nothing sent, so nothing can have happened.
            tracing::warn!("region cut off by a simulated partition; nothing sent");
            state.metrics.unreachable.get_or_create(&Metrics::region(region)).inc();
            return Err(ForwardError::Partitioned(region.to_owned()));
        }
        if region != state.config.region && !state.config.wan_latency.is_zero() {
            // The simulated WAN round trip of `--wan-latency` (local
            // multi-region runs only); the one sleep in the router.
            tokio::time::sleep(state.config.wan_latency).await;
        }
        let mut headers = outgoing.headers.clone();
        // Our span becomes the node's parent; the caller's trace continues.
        once_telemetry::context::inject_current(&mut headers);
        let mut last = None;
        let mut skipped: Option<Duration> = None;
        for url in state.config.nodes.rotation(region) {
            // Held until the attempt is reported: one probe at a time.
            let _probe = match state.reachability.admit(url, Instant::now()) {
                Admission::Dial => None,
                Admission::Probe(probe) => Some(probe),
                Admission::Skip { retry_in } => {
                    skipped = Some(skipped.map_or(retry_in, |s| s.min(retry_in)));
                    continue;
                }
            };
            tracing::Span::current().record("node", url);
            let result = state
                .http
                .request(outgoing.method.clone(), format!("{url}{}", outgoing.path_and_query))
                .headers(headers.clone())
                .body(outgoing.body.clone())
                .timeout(state.config.node_timeout)
                .send()
                .await;
            state.reachability.record(url, &result);
            match result {
                Ok(response) => return Ok(response),
                Err(e) if e.is_connect() => {
                    tracing::warn!(url, error = %e, "node refused the connection; trying the region's next node");
                    last = Some((url.to_owned(), e));
                }
                Err(e) => {
                    last = Some((url.to_owned(), e));
                    break;
                }
            }
        }
        match (last, skipped) {
            (Some((url, source)), _) => {
                state.metrics.unreachable.get_or_create(&Metrics::region(region)).inc();
                Err(ForwardError::Unreachable {
                    region: region.to_owned(),
                    url,
                    source,
                })
            }
            (None, Some(retry_in)) => {
                state.metrics.failed_fast.get_or_create(&Metrics::region(region)).inc();
                Err(ForwardError::KnownDown {
                    region: region.to_owned(),
                    retry_in,
                })
            }
            (None, None) => Err(ForwardError::NoNodes(region.to_owned())),
        }
    }
    .instrument(span)
    .await
}

fn stream_back(region: &str, response: reqwest::Response) -> Response {
    let status = response.status();
    let mut headers = headers::to_client(response.headers());
    if let Ok(v) = HeaderValue::try_from(region) {
        headers.insert(X_ONCE_REGION, v);
    }
    let mut answer = Response::new(Body::from_stream(response.bytes_stream()));
    *answer.status_mut() = status;
    *answer.headers_mut() = headers;
    answer
}

/// The node's 503, with a `Retry-After` (1 s, or the whole seconds until a
/// node known down is tried again): the client retries with the same
/// `Idempotency-Key`, which is safe whatever the node did.
fn unavailable(error: ForwardError) -> (String, Response) {
    let (region, retry_after, known_down) = match &error {
        ForwardError::KnownDown { region, retry_in } => (
            region.clone(),
            retry_in.as_secs_f64().ceil().max(1.0) as u64,
            true,
        ),
        ForwardError::NoNodes(region)
        | ForwardError::Partitioned(region)
        | ForwardError::Unreachable { region, .. } => (region.clone(), 1, false),
    };
    let mut response = ApiError::Unavailable(error.into()).into_response();
    if known_down {
        // Logged once when the node went down, counted in
        // `router_failed_fast_total`: not a log line per retry.
        response.extensions_mut().remove::<InternalCause>();
    }
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(retry_after));
    (region, response)
}
