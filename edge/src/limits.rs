//! The tunables of one listener, with the defaults every role starts from.
//! The binary turns each into a flag with an environment variable.

use std::time::Duration;

/// What one listener tolerates before it answers or closes. Every bound is
/// there so that a client that sends slowly, sends nothing or sends too
/// much costs the server a bounded amount of memory and time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// From accept (or from the first byte of a later request on a
    /// kept-alive connection) to the end of the request's headers.
    pub header_read_timeout: Duration,
    /// From the end of the headers to the end of the body.
    pub body_read_timeout: Duration,
    /// How long a kept-alive connection may sit between requests.
    pub idle_timeout: Duration,
    /// The whole request, headers to answer; past it, `503` with `Retry-After`.
    pub request_deadline: Duration,
    /// Bytes of request line and headers (hyper's read buffer; at least 8 KiB).
    pub max_header_bytes: usize,
    /// Number of request headers.
    pub max_headers: usize,
    /// Open connections; one more is closed as soon as it is accepted.
    pub max_connections: usize,
    /// Requests in flight on this listener; one more is shed with
    /// `503 SERVICE_OVERLOADED` and `Retry-After`, before any work.
    pub max_in_flight: usize,
    /// Open connections of one peer (`crate::peers::peer_key`); `None`:
    /// a quarter of `max_connections`, so no one peer can fill the listener.
    pub max_connections_per_peer: Option<usize>,
    /// Requests in flight of one peer, over all its connections; `None`: a
    /// quarter of `max_in_flight`. One more is shed as the listener's are.
    pub max_in_flight_per_peer: Option<usize>,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            request_deadline: Duration::from_secs(30),
            max_header_bytes: 16 * 1024,
            max_headers: 64,
            max_connections: 4096,
            max_in_flight: 2048,
            max_connections_per_peer: None,
            max_in_flight_per_peer: None,
        }
    }
}

/// A limit that cannot work.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LimitsError {
    #[error("{0} must be positive")]
    Zero(&'static str),
    #[error("--max-header-bytes must be at least 8192 (hyper's smallest read buffer)")]
    HeaderBytesTooSmall,
    #[error("{per_peer} must not exceed {total}")]
    PeerAboveTotal {
        per_peer: &'static str,
        total: &'static str,
    },
}

/// A quarter of `total`, at least one: what a peer may hold by default.
fn quarter(total: usize) -> usize {
    (total / 4).max(1)
}

impl ServerLimits {
    /// What one peer may hold of `max_connections`.
    pub fn connections_per_peer(&self) -> usize {
        self.max_connections_per_peer
            .unwrap_or_else(|| quarter(self.max_connections))
    }

    /// What one peer may have of `max_in_flight`.
    pub fn in_flight_per_peer(&self) -> usize {
        self.max_in_flight_per_peer
            .unwrap_or_else(|| quarter(self.max_in_flight))
    }

    pub fn validate(&self) -> Result<(), LimitsError> {
        for (value, name) in [
            (self.header_read_timeout, "--header-read-timeout"),
            (self.body_read_timeout, "--body-read-timeout"),
            (self.idle_timeout, "--idle-timeout"),
            (self.request_deadline, "--request-deadline"),
        ] {
            if value.is_zero() {
                return Err(LimitsError::Zero(name));
            }
        }
        for (value, name) in [
            (self.max_headers, "--max-headers"),
            (self.max_connections, "--max-connections"),
            (self.max_in_flight, "--max-in-flight"),
            (self.connections_per_peer(), "--max-connections-per-peer"),
            (self.in_flight_per_peer(), "--max-in-flight-per-peer"),
        ] {
            if value == 0 {
                return Err(LimitsError::Zero(name));
            }
        }
        for (per_peer, total, per_peer_name, total_name) in [
            (
                self.connections_per_peer(),
                self.max_connections,
                "--max-connections-per-peer",
                "--max-connections",
            ),
            (
                self.in_flight_per_peer(),
                self.max_in_flight,
                "--max-in-flight-per-peer",
                "--max-in-flight",
            ),
        ] {
            if per_peer > total {
                return Err(LimitsError::PeerAboveTotal {
                    per_peer: per_peer_name,
                    total: total_name,
                });
            }
        }
        if self.max_header_bytes < 8192 {
            return Err(LimitsError::HeaderBytesTooSmall);
        }
        Ok(())
    }
}
