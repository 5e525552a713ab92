//! The flags every serving role shares: the edge's limits of each listener,
//! the per-tenant limits of the roles that answer tenants, and the admin
//! token, which is read from the environment only (`ONCE_ADMIN_TOKEN`):
//! a command line shows in `ps` and in a pod's spec.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use once_edge::{AdminToken, ServerLimits, TenantLimit, TenantLimits};

/// The environment variable the admin token is read from, in every role.
pub const ADMIN_TOKEN_ENV: &str = "ONCE_ADMIN_TOKEN";

#[derive(Debug, Args)]
pub struct EdgeArgs {
    /// Time from accept (or a request's first byte) to the end of its headers.
    #[arg(long, env = "ONCE_HEADER_READ_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub header_read_timeout: Duration,
    /// Time from the end of the headers to the end of the body (408 past it).
    #[arg(long, env = "ONCE_BODY_READ_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub body_read_timeout: Duration,
    /// How long a kept-alive connection may sit idle between requests.
    #[arg(long, env = "ONCE_IDLE_TIMEOUT", default_value = "60s", value_parser = humantime::parse_duration)]
    pub idle_timeout: Duration,
    /// The whole request, headers to answer (503 with Retry-After past it).
    #[arg(long, env = "ONCE_REQUEST_DEADLINE", default_value = "30s", value_parser = humantime::parse_duration)]
    pub request_deadline: Duration,
    /// Bytes of request line and headers (431 past it; at least 8192).
    #[arg(long, env = "ONCE_MAX_HEADER_BYTES", default_value_t = 16 * 1024)]
    pub max_header_bytes: usize,
    /// Number of request headers (431 past it).
    #[arg(long, env = "ONCE_MAX_HEADERS", default_value_t = 64)]
    pub max_headers: usize,
    /// Open connections per listener; one more is closed on accept.
    #[arg(long, env = "ONCE_MAX_CONNECTIONS", default_value_t = 4096)]
    pub max_connections: usize,
    /// Requests in flight per listener; one more is shed (503 SERVICE_OVERLOADED).
    #[arg(long, env = "ONCE_MAX_IN_FLIGHT", default_value_t = 2048)]
    pub max_in_flight: usize,
    /// Open connections of one peer (IPv4 address, IPv6 /64) per listener;
    /// default a quarter of --max-connections. Behind a proxy that is every
    /// client's peer, raise it to what the proxy opens.
    #[arg(long, env = "ONCE_MAX_CONNECTIONS_PER_PEER")]
    pub max_connections_per_peer: Option<usize>,
    /// Requests in flight of one peer per listener; default a quarter of
    /// --max-in-flight. One more is shed (503 SERVICE_OVERLOADED).
    #[arg(long, env = "ONCE_MAX_IN_FLIGHT_PER_PEER")]
    pub max_in_flight_per_peer: Option<usize>,
}

impl EdgeArgs {
    pub fn limits(&self) -> anyhow::Result<ServerLimits> {
        let limits = ServerLimits {
            header_read_timeout: self.header_read_timeout,
            body_read_timeout: self.body_read_timeout,
            idle_timeout: self.idle_timeout,
            request_deadline: self.request_deadline,
            max_header_bytes: self.max_header_bytes,
            max_headers: self.max_headers,
            max_connections: self.max_connections,
            max_in_flight: self.max_in_flight,
            max_connections_per_peer: self.max_connections_per_peer,
            max_in_flight_per_peer: self.max_in_flight_per_peer,
        };
        limits.validate()?;
        Ok(limits)
    }
}

#[derive(Debug, Args)]
pub struct TenantArgs {
    /// Each tenant's sustained requests per second (429 RATE_LIMITED past it).
    #[arg(long, env = "ONCE_TENANT_RATE", default_value_t = TenantLimit::default().rate)]
    pub tenant_rate: u32,
    /// Requests a tenant may send at once above its rate.
    #[arg(long, env = "ONCE_TENANT_BURST", default_value_t = TenantLimit::default().burst)]
    pub tenant_burst: u32,
    /// Each tenant's requests in flight at once (429 past it).
    #[arg(long, env = "ONCE_TENANT_IN_FLIGHT", default_value_t = TenantLimit::default().in_flight)]
    pub tenant_in_flight: u32,
    /// JSON file of per-tenant overrides:
    /// `{"tenants": {"acme": {"rate": 100, "burst": 200, "inFlight": 32}}}`.
    #[arg(long, env = "ONCE_TENANT_LIMITS_FILE")]
    pub tenant_limits_file: Option<PathBuf>,
}

impl TenantArgs {
    pub fn limits(&self) -> anyhow::Result<TenantLimits> {
        let limits = TenantLimits::new(TenantLimit {
            rate: self.tenant_rate,
            burst: self.tenant_burst,
            in_flight: self.tenant_in_flight,
        })?;
        match &self.tenant_limits_file {
            Some(path) => limits.with_file(path),
            None => Ok(limits),
        }
    }

    /// What `--check-config` prints of them.
    pub fn describe(limits: &TenantLimits) -> serde_json::Value {
        let d = limits.default_limit();
        serde_json::json!({
            "rate": d.rate, "burst": d.burst, "inFlight": d.in_flight,
            "overrides": limits.overrides(),
        })
    }
}

/// The token a router presents to the nodes' admin listeners (its console
/// reads and resolves records there), when the nodes have their own.
pub const NODE_ADMIN_TOKEN_ENV: &str = "ONCE_NODE_ADMIN_TOKEN";

/// `ONCE_ADMIN_TOKEN`, if set: at least 16 characters and not guessable
/// (`AdminToken::new`), or the role refuses to start.
pub fn admin_token() -> anyhow::Result<Option<AdminToken>> {
    token_from(ADMIN_TOKEN_ENV)
}

/// The admin token in environment variable `name`, checked as
/// [`admin_token`] checks `ONCE_ADMIN_TOKEN`.
pub fn token_from(name: &str) -> anyhow::Result<Option<AdminToken>> {
    match std::env::var(name) {
        Ok(token) if !token.is_empty() => Ok(Some(
            AdminToken::new(token).with_context(|| format!("{name} is not usable"))?,
        )),
        Ok(_) | Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => {
            anyhow::bail!("{name} is not valid UTF-8")
        }
    }
}

/// What `--check-config` prints of a listener's limits.
pub fn describe(limits: &ServerLimits) -> serde_json::Value {
    let d = |d: Duration| humantime::format_duration(d).to_string();
    serde_json::json!({
        "headerReadTimeout": d(limits.header_read_timeout),
        "bodyReadTimeout": d(limits.body_read_timeout),
        "idleTimeout": d(limits.idle_timeout),
        "requestDeadline": d(limits.request_deadline),
        "maxHeaderBytes": limits.max_header_bytes,
        "maxHeaders": limits.max_headers,
        "maxConnections": limits.max_connections,
        "maxInFlight": limits.max_in_flight,
        "maxConnectionsPerPeer": limits.connections_per_peer(),
        "maxInFlightPerPeer": limits.in_flight_per_peer(),
    })
}
