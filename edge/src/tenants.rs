//! Per-tenant fairness: no tenant can take another's share of a listener.
//!
//! Each tenant has a token bucket (a sustained rate and a burst) and an
//! in-flight quota. The gate runs after authentication and before the
//! handler reads a byte of the body, so a tenant holding thousands of slow
//! bodies holds only its own quota: past it, and past its rate, it is
//! answered `429 RATE_LIMITED` with `Retry-After`, while the listener's
//! in-flight limit ([`crate::server`]) stays available to everyone else.
//!
//! Limits come from defaults (flags) and an optional limits file of
//! per-tenant overrides:
//!
//! ```json
//! {"tenants": {"acme": {"rate": 100, "burst": 200, "inFlight": 32}}}
//! ```
//!
//! Every field of an override is optional; a missing one keeps the default.
//! Gates are made on a tenant's first request; tenants come from the key
//! file, so their number is bounded by configuration, never by traffic.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota};
use serde::Deserialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::api_keys::{ApiKeys, bearer};
use crate::error::ApiError;
use crate::metrics::{EdgeMetrics, TenantLabel, TenantOutcome};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;

/// One tenant's allowance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantLimit {
    /// Requests per second, sustained.
    pub rate: u32,
    /// Requests that may arrive at once above the rate.
    pub burst: u32,
    /// Requests in flight at once.
    pub in_flight: u32,
}

impl Default for TenantLimit {
    fn default() -> Self {
        Self {
            rate: 500,
            burst: 1000,
            in_flight: 256,
        }
    }
}

/// An override in the limits file: each field optional.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct LimitOverride {
    rate: Option<u32>,
    burst: Option<u32>,
    in_flight: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitsFile {
    #[serde(default)]
    tenants: HashMap<String, LimitOverride>,
}

/// The default allowance and the tenants that differ from it.
#[derive(Debug, Clone, Default)]
pub struct TenantLimits {
    default: TenantLimit,
    overrides: HashMap<String, TenantLimit>,
}

impl TenantLimits {
    pub fn new(default: TenantLimit) -> anyhow::Result<Self> {
        validate("the default tenant limit", &default)?;
        Ok(Self {
            default,
            overrides: HashMap::new(),
        })
    }

    /// Adds the overrides of a limits file (JSON, see the module docs).
    pub fn with_file(mut self, path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the tenant limits file {}", path.display()))?;
        let file: LimitsFile = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a tenant limits file", path.display()))?;
        for (tenant, o) in file.tenants {
            let limit = TenantLimit {
                rate: o.rate.unwrap_or(self.default.rate),
                burst: o.burst.unwrap_or(self.default.burst),
                in_flight: o.in_flight.unwrap_or(self.default.in_flight),
            };
            self = self.with_override(&tenant, limit)?;
        }
        Ok(self)
    }

    pub fn with_override(mut self, tenant: &str, limit: TenantLimit) -> anyhow::Result<Self> {
        validate(&format!("tenant {tenant:?}"), &limit)?;
        self.overrides.insert(tenant.to_owned(), limit);
        Ok(self)
    }

    pub fn of(&self, tenant: &str) -> TenantLimit {
        self.overrides.get(tenant).copied().unwrap_or(self.default)
    }

    pub fn overrides(&self) -> usize {
        self.overrides.len()
    }

    pub fn default_limit(&self) -> TenantLimit {
        self.default
    }
}

fn validate(what: &str, limit: &TenantLimit) -> anyhow::Result<()> {
    anyhow::ensure!(
        limit.rate > 0 && limit.burst > 0 && limit.in_flight > 0,
        "{what}: rate, burst and in-flight must all be positive"
    );
    Ok(())
}

/// One tenant's bucket and quota, with its metric handles (looked up once,
/// not per request).
struct Gate {
    bucket: DefaultDirectRateLimiter,
    in_flight: Arc<Semaphore>,
    admitted: Counter,
    rate_limited: Counter,
    over_quota: Counter,
    in_flight_gauge: Gauge,
}

/// The gates of every tenant seen so far, and the keys that say who a
/// request is for; shared by a listener's routes.
pub struct TenantGates {
    keys: Arc<ApiKeys>,
    limits: TenantLimits,
    /// Read on every request, written once per tenant: a read lock on the
    /// hot path, the write lock only for a tenant's first request.
    gates: RwLock<HashMap<String, Arc<Gate>>>,
    metrics: EdgeMetrics,
}

impl std::fmt::Debug for TenantGates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantGates")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// A request admitted through its tenant's gate: holds one unit of the
/// tenant's in-flight quota until dropped.
#[derive(Debug)]
pub struct Admitted {
    _permit: OwnedSemaphorePermit,
    in_flight: Gauge,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.in_flight.dec();
    }
}

impl TenantGates {
    pub fn new(keys: Arc<ApiKeys>, limits: TenantLimits, metrics: EdgeMetrics) -> Arc<Self> {
        Arc::new(Self {
            keys,
            limits,
            gates: RwLock::default(),
            metrics,
        })
    }

    fn gate(&self, tenant: &str) -> Arc<Gate> {
        let known = self.gates.read().unwrap_or_else(|p| p.into_inner());
        if let Some(gate) = known.get(tenant) {
            return gate.clone();
        }
        drop(known);
        let mut gates = self.gates.write().unwrap_or_else(|p| p.into_inner());
        gates
            .entry(tenant.to_owned())
            .or_insert_with(|| Arc::new(self.new_gate(tenant)))
            .clone()
    }

    fn new_gate(&self, tenant: &str) -> Gate {
        let limit = self.limits.of(tenant);
        let quota = Quota::per_second(NonZeroU32::new(limit.rate).unwrap_or(NonZeroU32::MIN))
            .allow_burst(NonZeroU32::new(limit.burst).unwrap_or(NonZeroU32::MIN));
        let counter = |outcome| {
            self.metrics
                .tenant_requests
                .get_or_create(&TenantOutcome {
                    tenant: tenant.to_owned(),
                    outcome,
                })
                .clone()
        };
        Gate {
            bucket: DefaultDirectRateLimiter::direct(quota),
            in_flight: Arc::new(Semaphore::new(limit.in_flight as usize)),
            admitted: counter("admitted"),
            rate_limited: counter("rate_limited"),
            over_quota: counter("over_quota"),
            in_flight_gauge: self
                .metrics
                .tenant_in_flight
                .get_or_create(&TenantLabel {
                    tenant: tenant.to_owned(),
                })
                .clone(),
        }
    }

    /// Admits one request of `tenant`, or says why not and when to retry.
    /// The quota is checked first, so a refused request spends no token.
    pub fn admit(&self, tenant: &str) -> Result<Admitted, ApiError> {
        let gate = self.gate(tenant);
        let Ok(permit) = gate.in_flight.clone().try_acquire_owned() else {
            gate.over_quota.inc();
            return Err(ApiError::TenantBusy {
                retry_after: Duration::from_secs(1),
            });
        };
        if let Err(not_until) = gate.bucket.check() {
            gate.rate_limited.inc();
            return Err(ApiError::RateLimited {
                retry_after: not_until.wait_time_from(DefaultClock::default().now()),
            });
        }
        gate.admitted.inc();
        gate.in_flight_gauge.inc();
        Ok(Admitted {
            _permit: permit,
            in_flight: gate.in_flight_gauge.clone(),
        })
    }
}

/// The middleware of the tenant-facing routes: who is calling, from the
/// headers alone (`401` for a missing or unknown key), then that tenant's
/// gate (`429`), both before a byte of the body is read. The caller goes
/// into the request's extensions for the handler ([`Caller`] is an
/// extractor); the admission is held until the answer is made.
pub async fn admit(
    State(gates): State<Arc<TenantGates>>,
    mut request: Request,
    next: Next,
) -> Response {
    let Some(caller) = bearer(request.headers()).and_then(|token| gates.keys.authenticate(token))
    else {
        return ApiError::Unauthorized.into_response();
    };
    tracing::Span::current().record("tenant", caller.tenant.as_str());
    match gates.admit(caller.tenant.as_str()) {
        Ok(admitted) => {
            request.extensions_mut().insert(caller.clone());
            let response = next.run(request).await;
            drop(admitted);
            response
        }
        Err(refused) => refused.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gates(limit: TenantLimit) -> Arc<TenantGates> {
        TenantGates::new(
            Arc::new(ApiKeys::default()),
            TenantLimits::new(limit).unwrap(),
            EdgeMetrics::default(),
        )
    }

    #[test]
    fn a_tenant_over_its_quota_is_refused_and_others_are_not() {
        let gates = gates(TenantLimit {
            rate: 1000,
            burst: 1000,
            in_flight: 2,
        });
        let a1 = gates.admit("a").unwrap();
        let _a2 = gates.admit("a").unwrap();
        assert!(matches!(gates.admit("a"), Err(ApiError::TenantBusy { .. })));
        let _b = gates.admit("b").unwrap();
        drop(a1);
        gates.admit("a").unwrap();
    }

    #[test]
    fn a_tenant_over_its_rate_gets_a_retry_after() {
        let gates = gates(TenantLimit {
            rate: 1,
            burst: 3,
            in_flight: 100,
        });
        for _ in 0..3 {
            gates.admit("a").unwrap();
        }
        match gates.admit("a") {
            Err(ApiError::RateLimited { retry_after }) => {
                assert!(retry_after > Duration::ZERO && retry_after <= Duration::from_secs(1));
            }
            other => panic!("expected RATE_LIMITED, got {other:?}"),
        }
        gates.admit("b").unwrap();
    }

    #[test]
    fn the_limits_file_overrides_some_fields_of_some_tenants() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("limits.json");
        std::fs::write(
            &path,
            r#"{"tenants": {"acme": {"rate": 5, "inFlight": 1}}}"#,
        )
        .unwrap();
        let limits = TenantLimits::new(TenantLimit::default())
            .unwrap()
            .with_file(&path)
            .unwrap();
        assert_eq!(
            limits.of("acme"),
            TenantLimit {
                rate: 5,
                burst: TenantLimit::default().burst,
                in_flight: 1
            }
        );
        assert_eq!(limits.of("other"), TenantLimit::default());
        std::fs::write(&path, r#"{"tenants": {"acme": {"rate": 0}}}"#).unwrap();
        assert!(
            TenantLimits::new(TenantLimit::default())
                .unwrap()
                .with_file(&path)
                .is_err()
        );
        std::fs::write(&path, r#"{"tenants": {"acme": {"rat": 5}}}"#).unwrap();
        assert!(
            TenantLimits::new(TenantLimit::default())
                .unwrap()
                .with_file(&path)
                .is_err()
        );
    }
}
