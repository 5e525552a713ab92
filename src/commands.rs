//! One module per subcommand.

pub mod api_keys;
pub mod certs;
pub mod cluster_file;
pub mod drill;
pub mod edge;
pub mod events;
pub mod key_files;
pub mod keys;
pub mod migrate;
pub mod node;
pub mod plaintext;
pub mod provider_sim;
pub mod records;
pub mod router;
pub mod store;
pub mod tls;
pub mod up;

/// Marks an error as bad configuration: `main` exits with code 64 before
/// anything binds.
#[derive(Debug, thiserror::Error)]
#[error("{0:#}")]
pub struct ConfigError(pub anyhow::Error);

pub fn config_error(e: impl Into<anyhow::Error>) -> anyhow::Error {
    anyhow::Error::new(ConfigError(e.into()))
}
