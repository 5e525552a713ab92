//! The simulator's HTTP surface.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;

use crate::faults::{FaultMode, FaultSpec, Faults};
pub use crate::ledger::{ChargeBody, ChargeRecord};
use crate::ledger::{Ledger, Presented};

pub const NO_FUNDS_PREFIX: &str = "acc_nofunds";

/// The simulator's state: its ledger and armed faults.
#[derive(Debug, Clone, Default)]
pub struct Simulator {
    ledger: Arc<Ledger>,
    faults: Arc<Faults>,
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        Json(serde_json::json!({ "error": { "code": code, "message": message } })),
    )
        .into_response()
}

fn charge_response(record: &ChargeRecord, replayed: bool) -> Response {
    let status = match record.status {
        crate::ledger::ChargeStatus::Succeeded => StatusCode::CREATED,
        crate::ledger::ChargeStatus::Declined => StatusCode::PAYMENT_REQUIRED,
    };
    let mut response = (status, Json(record)).into_response();
    if replayed {
        response.headers_mut().insert(
            "idempotent-replayed",
            "true".parse().expect("static header"),
        );
    }
    response
}

impl Simulator {
    pub fn router(self) -> Router {
        Router::new()
            .route("/charges", post(charge).get(ledger))
            .route("/charges/{key}", get(lookup))
            .route("/faults", post(arm).delete(clear).get(armed))
            .route("/outage", post(start_outage).delete(end_outage).get(outage))
            .route("/healthz", get(|| async { "ok" }))
            .route("/metrics", get(metrics))
            .layer(axum::middleware::from_fn(server_span))
            .with_state(self)
    }

    pub fn ledger(&self) -> Vec<ChargeRecord> {
        self.ledger.all()
    }

    /// A simulator whose ledger is journaled to `path` and read back from
    /// it ([`crate::ledger`]).
    pub fn with_journal(path: &std::path::Path) -> Result<Self, crate::ledger::JournalError> {
        Ok(Self {
            ledger: Arc::new(Ledger::open(path)?),
            faults: Arc::default(),
        })
    }
}

/// A server span per request, continuing the caller's trace.
async fn server_span(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    use tracing::Instrument;
    let name = format!(
        "{} {}",
        request.method(),
        request
            .uri()
            .path()
            .split('/')
            .take(2)
            .collect::<Vec<_>>()
            .join("/")
    );
    let span = tracing::info_span!("provider request", otel.name = %name, otel.kind = "server", http.response.status_code = tracing::field::Empty);
    once_telemetry::context::set_remote_parent(&span, request.headers());
    let response = next.run(request).instrument(span.clone()).await;
    span.record("http.response.status_code", response.status().as_u16());
    response
}

/// The answer to every charge and lookup during an outage.
fn out_of_service() -> Response {
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        "outage",
        "the provider is out of service; nothing was done",
    )
}

async fn charge(State(sim): State<Simulator>, headers: HeaderMap, body: Bytes) -> Response {
    if sim.faults.in_outage() {
        return out_of_service();
    }
    let Some(key) = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .filter(|k| !k.is_empty())
    else {
        return error(
            StatusCode::BAD_REQUEST,
            "idempotency_key_required",
            "Idempotency-Key header is required",
        );
    };
    let body: ChargeBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => return error(StatusCode::BAD_REQUEST, "invalid_request", &e.to_string()),
    };
    // A repeated key is answered from the ledger before any fault applies:
    // faults model what happens to a *charge*, and a replay charges nothing.
    if let Some(existing) = sim.ledger.get(key) {
        return match sim.ledger.present(key, &body, None) {
            Presented::Conflict => error(
                StatusCode::CONFLICT,
                "idempotency_key_reused",
                "this Idempotency-Key was used with a different request",
            ),
            _ => charge_response(&existing, true),
        };
    }
    let fault = sim.faults.take();
    let declined = body.account_id.starts_with(NO_FUNDS_PREFIX)
        || fault.as_ref().is_some_and(|f| f.mode == FaultMode::Decline);
    if fault
        .as_ref()
        .is_some_and(|f| f.mode == FaultMode::ErrorBeforeCharge)
    {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "temporarily_unavailable",
            "try again later; nothing was charged",
        );
    }
    // Like a real provider, a charge that has started finishes even if the
    // caller hangs up: the work runs detached from the connection.
    let latency = fault
        .as_ref()
        .filter(|f| f.mode == FaultMode::Latency)
        .map(|f| Duration::from_millis(f.ms));
    let ledger = sim.ledger.clone();
    let (key_owned, body_owned) = (key.to_owned(), body.clone());
    let work = tokio::spawn(async move {
        if let Some(latency) = latency {
            tokio::time::sleep(latency).await;
        }
        ledger.present(
            &key_owned,
            &body_owned,
            declined.then_some("insufficient_funds"),
        )
    });
    let record = match work.await {
        Ok(Presented::New(r) | Presented::Replay(r)) => r,
        Ok(Presented::Conflict) => {
            return error(
                StatusCode::CONFLICT,
                "idempotency_key_reused",
                "this Idempotency-Key was used with a different request",
            );
        }
        Err(_) => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "charge task failed",
            );
        }
    };
    tracing::info!(key, status = ?record.status, "charge recorded");
    match fault.map(|f| f.mode) {
        // The charge exists; the answer never comes. The handler parks
        // until the caller hangs up and hyper drops it.
        Some(FaultMode::TimeoutAfterCharge) => std::future::pending().await,
        // The charge exists; the connection dies mid-answer.
        Some(FaultMode::ResetAfterCharge) => {
            let broken = futures::stream::once(async {
                Err::<Bytes, std::io::Error>(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "fault: reset after charge",
                ))
            });
            Response::builder()
                .status(StatusCode::CREATED)
                .header("content-length", "1024")
                .body(Body::from_stream(broken))
                .expect("static response")
        }
        _ => charge_response(&record, false),
    }
}

/// Prometheus text: the ledger by outcome, requests under repeated keys,
/// faults still armed — what a drill compares against the nodes' numbers.
async fn metrics(State(sim): State<Simulator>) -> Response {
    use prometheus_client::encoding::EncodeLabelSet;
    use prometheus_client::metrics::family::Family;
    use prometheus_client::metrics::gauge::Gauge;

    #[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
    struct ByStatus {
        status: String,
    }
    let ledger = sim.ledger.all();
    let charges = Family::<ByStatus, Gauge>::default();
    for charge in &ledger {
        let status = format!("{:?}", charge.status).to_ascii_lowercase();
        charges.get_or_create(&ByStatus { status }).inc();
    }
    let repeated = Gauge::<i64>::default();
    repeated.set(
        ledger
            .iter()
            .map(|c| i64::from(c.requests.saturating_sub(1)))
            .sum(),
    );
    let armed = Gauge::<i64>::default();
    armed.set(i64::try_from(sim.faults.armed().len()).unwrap_or(i64::MAX));
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register(
        "provider_charges",
        "Charges in the ledger, by outcome",
        charges,
    );
    registry.register(
        "provider_repeated_requests",
        "Requests answered from the ledger under an already-used key",
        repeated,
    );
    registry.register("provider_faults_armed", "Faults still armed", armed);
    let mut body = String::new();
    prometheus_client::encoding::text::encode(&mut body, &registry)
        .expect("writing to a String cannot fail");
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

async fn lookup(State(sim): State<Simulator>, Path(key): Path<String>) -> Response {
    if sim.faults.in_outage() {
        return out_of_service();
    }
    match sim.ledger.get(&key) {
        Some(record) => (StatusCode::OK, Json(record)).into_response(),
        None => error(
            StatusCode::NOT_FOUND,
            "not_found",
            "no charge under this key",
        ),
    }
}

async fn ledger(State(sim): State<Simulator>) -> Json<Vec<ChargeRecord>> {
    Json(sim.ledger.all())
}

async fn arm(
    State(sim): State<Simulator>,
    Json(spec): Json<FaultSpec>,
) -> Result<StatusCode, Infallible> {
    tracing::info!(?spec, "fault armed");
    sim.faults.arm(spec);
    Ok(StatusCode::NO_CONTENT)
}

/// The faults still armed: a test can tell that a charge has arrived by
/// watching its fault get consumed.
async fn armed(State(sim): State<Simulator>) -> Json<Vec<FaultSpec>> {
    Json(sim.faults.armed())
}

async fn start_outage(State(sim): State<Simulator>) -> StatusCode {
    tracing::warn!("provider outage started");
    sim.faults.set_outage(true);
    StatusCode::NO_CONTENT
}

async fn end_outage(State(sim): State<Simulator>) -> StatusCode {
    tracing::warn!("provider outage ended");
    sim.faults.set_outage(false);
    StatusCode::NO_CONTENT
}

/// `{"out": true}` while the provider is out of service.
async fn outage(State(sim): State<Simulator>) -> Json<serde_json::Value> {
    Json(serde_json::json!({ "out": sim.faults.in_outage() }))
}

async fn clear(State(sim): State<Simulator>) -> StatusCode {
    sim.faults.clear();
    StatusCode::NO_CONTENT
}
