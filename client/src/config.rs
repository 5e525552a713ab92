//! The client's settings and [`ClientBuilder`]; `ClientBuilder::build`
//! (in `client.rs`, next to what it builds) checks them once and builds
//! the HTTP connection pool.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use url::Url;

use crate::backoff::Backoff;
use crate::observer::Observer;

/// The `Api-Version` sent when the caller names none: the server's default.
pub const DEFAULT_API_VERSION: &str = "2026-11-01";

/// What one [`Client`](crate::Client) does on every call. Built by [`ClientBuilder`].
#[derive(Clone)]
pub(crate) struct Config {
    /// Base URL of a router (or a node); paths are joined onto it.
    pub base_url: Url,
    /// Sent as `Authorization: Bearer …`; never printed.
    pub api_key: String,
    /// How long one logical call may take, every attempt and wait included.
    pub deadline: Duration,
    /// How long one attempt may take, connect to last body byte.
    pub attempt_timeout: Duration,
    pub backoff: Backoff,
    /// `None`: attempts are bounded by the deadline only.
    pub max_attempts: Option<u32>,
    pub api_version: String,
    pub observer: Option<Arc<dyn Observer>>,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("base_url", &self.base_url.as_str())
            .field("api_key", &"<redacted>")
            .field("deadline", &self.deadline)
            .field("attempt_timeout", &self.attempt_timeout)
            .field("backoff", &self.backoff)
            .field("max_attempts", &self.max_attempts)
            .field("api_version", &self.api_version)
            .field("observer", &self.observer.is_some())
            .finish()
    }
}

/// Why a client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("base URL {url:?} is not an http(s) URL: {reason}")]
    BaseUrl { url: String, reason: String },
    #[error("the API key must be non-empty printable ASCII")]
    ApiKey,
    #[error("{0}")]
    Setting(&'static str),
    #[error("building the HTTP client: {0}")]
    Http(#[from] reqwest::Error),
}

/// Settings of a [`Client`](crate::Client); see the defaults on each method.
#[derive(Debug)]
pub struct ClientBuilder {
    pub(crate) config: Config,
    pub(crate) user_agent: String,
    pub(crate) base_url: String,
}

impl ClientBuilder {
    pub(crate) fn new(base_url: &str, api_key: &str) -> Self {
        Self {
            base_url: base_url.to_owned(),
            user_agent: concat!("once-client/", env!("CARGO_PKG_VERSION")).to_owned(),
            config: Config {
                base_url: Url::parse("http://placeholder.invalid").expect("static URL"),
                api_key: api_key.to_owned(),
                deadline: Duration::from_secs(30),
                attempt_timeout: Duration::from_secs(10),
                backoff: Backoff::default(),
                max_attempts: None,
                api_version: DEFAULT_API_VERSION.to_owned(),
                observer: None,
            },
        }
    }

    /// How long one logical call may take, all attempts and waits included
    /// (default 30 s). Past it the call is `Indeterminate`, never guessed.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.config.deadline = deadline;
        self
    }

    /// How long one attempt may take before it is abandoned and retried
    /// (default 10 s; never past what is left of the deadline).
    pub fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.config.attempt_timeout = timeout;
        self
    }

    /// The backoff between attempts (default 100 ms doubling up to 5 s).
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.config.backoff = backoff;
        self
    }

    /// At most this many attempts per call (default: no limit but the
    /// deadline). `1` turns retries off: the call then reports what one
    /// attempt saw.
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.config.max_attempts = Some(attempts);
        self
    }

    /// The `User-Agent` header (default `once-client/<version>`).
    pub fn user_agent(mut self, user_agent: impl Into<String>) -> Self {
        self.user_agent = user_agent.into();
        self
    }

    /// The `Api-Version` header (default `2026-11-01`). Part of a request's
    /// meaning on the server, so part of what a retry must repeat.
    pub fn api_version(mut self, version: impl Into<String>) -> Self {
        self.config.api_version = version.into();
        self
    }

    /// Told about every attempt of every call (see [`Observer`]).
    pub fn observer(mut self, observer: impl Observer) -> Self {
        self.config.observer = Some(Arc::new(observer));
        self
    }
}
