//! `once keys`: produce API key-file lines so plaintext keys never sit on
//! disk in production (`hash`), and manage the data key file of encryption
//! at rest (`init`, `rotate`, `status`; docs/decisions/0031).

use std::io::BufRead;
use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;
use once_node::auth::key_file_line;
use once_node::domain::{PrincipalId, TenantId};
use once_seal::KeyRing;

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
    /// Create a new data key file (mode 0600): a digest key, fixed for the
    /// life of the data, and a first data key. Fails if FILE exists.
    Init {
        #[arg(long, env = "ONCE_DATA_KEYS")]
        file: PathBuf,
    },
    /// Append a new random data key to the file: it seals from now on.
    /// Running nodes pick the file up and re-seal older records in the
    /// background; remove an older key's line only once `GET /admin/keys`
    /// (or the `idempotency_sealed_stale_records` gauge) reports 0 stale.
    Rotate {
        #[arg(long, env = "ONCE_DATA_KEYS")]
        file: PathBuf,
    },
    /// Show the key ids in the file and which one seals (never the keys).
    Status {
        #[arg(long, env = "ONCE_DATA_KEYS")]
        file: PathBuf,
    },
}

/// A new random API key: 32 bytes from the OS RNG, hex-encoded.
pub fn generate_key() -> String {
    format!("sk_{}", hex::encode(rand::random::<[u8; 32]>()))
}

pub fn run(cmd: KeysCommand) -> anyhow::Result<()> {
    match cmd {
        KeysCommand::Init { file } => {
            KeyRing::generate().create_file(&file)?;
            println!("created {}", file.display());
            Ok(())
        }
        KeysCommand::Rotate { file } => {
            let ring = KeyRing::load(&file)?.rotated();
            ring.replace_file(&file)?;
            println!(
                "{}: {} now seals; keys {}",
                file.display(),
                ring.sealing_key_id(),
                ring.key_ids().join(", ")
            );
            Ok(())
        }
        KeysCommand::Status { file } => {
            let ring = KeyRing::load(&file)?;
            println!(
                "{}",
                serde_json::json!({
                    "file": file.display().to_string(),
                    "keys": ring.key_ids(),
                    "sealingKey": ring.sealing_key_id(),
                })
            );
            Ok(())
        }
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
