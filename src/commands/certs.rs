//! `once certs`: the CA and certificates of a deployment. `init` makes a
//! CA in a directory (its key 0600, never replaced); `issue` writes one
//! process's `ca.pem`, `cert.pem` and `key.pem` (0600) for its identity
//! `spiffe://once/<region>/<role>`, valid for the names and addresses it
//! is reached at — the three files a Kubernetes Secret holds and the
//! process reads with `--tls-ca`, `--tls-cert`, `--tls-key`. `once up`
//! does the same for a local cluster by itself.

use std::net::IpAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use once_tls::{Identity, LocalCa, Role, TlsFiles};

use super::config_error;

#[derive(Debug, Subcommand)]
pub enum CertsCommand {
    /// Make a CA in DIR (`ca.pem`, and `ca-key.pem` at 0600). Refuses to
    /// replace one already there.
    Init {
        #[arg(long)]
        dir: PathBuf,
        /// The CA's common name.
        #[arg(long, default_value = "once CA")]
        name: String,
    },
    /// Issue one process's certificate from the CA in --ca into --out.
    Issue(IssueArgs),
}

#[derive(Debug, Args)]
pub struct IssueArgs {
    /// The CA's directory (`once certs init --dir`).
    #[arg(long)]
    ca: PathBuf,
    /// The process's region (letters, digits, '-').
    #[arg(long)]
    region: String,
    /// store, node, router or operator.
    #[arg(long)]
    role: String,
    /// A DNS name the process is reached at (repeat or comma-separate).
    #[arg(long, value_delimiter = ',')]
    dns: Vec<String>,
    /// An address the process is reached at (repeat or comma-separate).
    #[arg(long, value_delimiter = ',')]
    ip: Vec<IpAddr>,
    /// Where `ca.pem`, `cert.pem` and `key.pem` go (created if missing).
    #[arg(long)]
    out: PathBuf,
}

pub fn run(command: CertsCommand) -> anyhow::Result<()> {
    match command {
        CertsCommand::Init { dir, name } => {
            LocalCa::create(&dir, &name)
                .with_context(|| format!("making a CA in {}", dir.display()))?;
            println!("CA in {} (keep ca-key.pem offline)", dir.display());
        }
        CertsCommand::Issue(args) => {
            let role: Role = args.role.parse().map_err(config_error)?;
            let identity = Identity::new(&args.region, role).map_err(config_error)?;
            let ca = LocalCa::open(&args.ca)
                .with_context(|| format!("opening the CA in {}", args.ca.display()))?;
            let files = TlsFiles::in_dir(&args.out);
            ca.issue_to(&identity, &args.dns, &args.ip, &files)
                .with_context(|| format!("issuing {identity}"))?;
            println!("{identity} in {}", args.out.display());
        }
    }
    Ok(())
}
