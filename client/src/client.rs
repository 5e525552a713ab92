//! [`Client`]: a cheap handle (clone it freely) on one connection pool and
//! one set of settings. Its operations are in [`crate::payments`].

use std::sync::Arc;

use url::Url;

use crate::config::{BuildError, ClientBuilder, Config};

/// A client of the once payments API. Clones share the connection pool.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    config: Arc<Config>,
}

impl Client {
    /// Settings for a client of the API at `base_url` (a router, or a
    /// node), authenticating with `api_key`.
    pub fn builder(base_url: &str, api_key: &str) -> ClientBuilder {
        ClientBuilder::new(base_url, api_key)
    }

    pub(crate) fn new(http: reqwest::Client, config: Config) -> Self {
        Self {
            http,
            config: Arc::new(config),
        }
    }

    pub(crate) fn http(&self) -> &reqwest::Client {
        &self.http
    }

    pub(crate) fn config(&self) -> &Config {
        &self.config
    }
}

impl ClientBuilder {
    /// Checks every setting and builds the connection pool.
    pub fn build(mut self) -> Result<Client, BuildError> {
        let base_url_error = |reason: String| BuildError::BaseUrl {
            url: self.base_url.clone(),
            reason,
        };
        let mut url = Url::parse(&self.base_url).map_err(|e| base_url_error(e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") || url.cannot_be_a_base() {
            return Err(base_url_error("scheme must be http or https".into()));
        }
        // `join` keeps a base path only up to its last slash.
        if !url.path().ends_with('/') {
            url.set_path(&format!("{}/", url.path()));
        }
        self.config.base_url = url;
        let key = &self.config.api_key;
        if key.is_empty() || !key.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
            return Err(BuildError::ApiKey);
        }
        if self.config.deadline.is_zero() || self.config.attempt_timeout.is_zero() {
            return Err(BuildError::Setting(
                "the deadline and the attempt timeout must be positive",
            ));
        }
        if self.config.max_attempts == Some(0) {
            return Err(BuildError::Setting("max_attempts must be at least 1"));
        }
        let backoff = &self.config.backoff;
        if !(backoff.multiplier.is_finite() && backoff.multiplier >= 1.0) {
            return Err(BuildError::Setting(
                "the backoff multiplier must be a finite number ≥ 1",
            ));
        }
        if backoff.initial > backoff.max {
            return Err(BuildError::Setting(
                "the initial backoff must not exceed the maximum",
            ));
        }
        if reqwest::header::HeaderValue::from_str(&self.config.api_version).is_err() {
            return Err(BuildError::Setting(
                "the Api-Version must be a valid header value",
            ));
        }
        let http = reqwest::Client::builder()
            .user_agent(self.user_agent)
            // A redirect would re-send a payment somewhere the caller did
            // not name; the API never answers one.
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(self.config.attempt_timeout)
            .build()?;
        Ok(Client::new(http, self.config))
    }
}
