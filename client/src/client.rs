//! [`Client`]: a cheap handle (clone it freely) on one connection pool and
//! one set of settings. Its operations are in [`crate::payments`].

use std::sync::Arc;

use crate::config::{ClientBuilder, Config};

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
