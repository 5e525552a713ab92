//! `once keys`: produce key-file lines so plaintext keys never sit on disk
//! in production.

use std::io::BufRead;

use anyhow::Context;
use clap::Subcommand;
use once_node::auth::key_file_line;
use once_node::domain::{PrincipalId, TenantId};

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Print the key-file line for a key read from standard input (or a new
    /// random key, printed once to standard error, with --generate).
    Hash {
        #[arg(long)]
        tenant: String,
        #[arg(long)]
        principal: String,
        /// Make a new random key instead of reading one.
        #[arg(long)]
        generate: bool,
    },
}

/// A new random API key: 32 bytes from the OS RNG, hex-encoded.
pub fn generate_key() -> String {
    format!("sk_{}", hex::encode(rand::random::<[u8; 32]>()))
}

pub fn run(cmd: KeysCommand) -> anyhow::Result<()> {
    match cmd {
        KeysCommand::Hash {
            tenant,
            principal,
            generate,
        } => {
            let tenant = TenantId::parse(&tenant)
                .context("tenant must be [A-Za-z0-9_-]{1,64}")
                .map_err(super::config_error)?;
            let principal = PrincipalId::parse(&principal)
                .context("principal must be [A-Za-z0-9_-]{1,64}")
                .map_err(super::config_error)?;
            let key = if generate {
                let key = generate_key();
                eprintln!("new key (shown once): {key}");
                key
            } else {
                let mut line = String::new();
                std::io::stdin()
                    .lock()
                    .read_line(&mut line)
                    .context("reading the key from stdin")?;
                line.trim().to_owned()
            };
            anyhow::ensure!(key.len() >= 16, "keys must be at least 16 characters");
            println!("{}", key_file_line(&tenant, &principal, &key));
            Ok(())
        }
    }
}
