//! `once certs`: the CA and certificates of a deployment. `init` makes a
//! CA in a directory (its key 0600, never replaced); `issue` writes one
//! process's `ca.pem`, `cert.pem` and `key.pem` (0600) for its identity
//! `spiffe://once/<region>/<role>`, valid for the names and addresses it
//! is reached at — the three files a Kubernetes Secret holds and the
//! process reads with `--tls-ca`, `--tls-cert`, `--tls-key`. `once up`
//! does the same for a local cluster by itself.
//!
//! Everything expires: a leaf after `--days` (90 by default, at most
//! [`MAX_LEAF_DAYS`]), the CA after its own `--days` (five years), and no
//! leaf outlives its CA. The CA signs leaves only (`pathlen:0`), and
//! `--permit-dns`/`--permit-ip` confine the names its leaves may carry.
//! Rotating them is `deploy/README.md`'s runbook.

use std::net::IpAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use once_tls::ca::CaPolicy;
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
        /// How many days the CA lives.
        #[arg(long, default_value_t = 5 * 365, value_parser = clap::value_parser!(u32).range(1..=10 * 365))]
        days: u32,
        /// A DNS name (and its subdomains) the CA's leaves may carry; given
        /// any, no other is valid (repeat or comma-separate).
        #[arg(long, value_delimiter = ',')]
        permit_dns: Vec<String>,
        /// An address range (`10.0.0.0/8`) the CA's leaves may carry; given
        /// any, no other is valid.
        #[arg(long, value_delimiter = ',', value_parser = parse_cidr)]
        permit_ip: Vec<(IpAddr, u8)>,
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
    /// How many days the certificate lives (never past the CA).
    #[arg(long, default_value_t = 90, value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_LEAF_DAYS)))]
    days: u32,
}

/// The longest a leaf may be issued for: a leaked key is good for at most
/// this long, revocation or not.
pub const MAX_LEAF_DAYS: u32 = 398;

const DAY: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// `ADDRESS/PREFIX` (or a bare address: that address alone).
fn parse_cidr(text: &str) -> Result<(IpAddr, u8), String> {
    let (addr, prefix) = match text.split_once('/') {
        Some((addr, prefix)) => (addr, Some(prefix)),
        None => (text, None),
    };
    let addr: IpAddr = addr.parse().map_err(|e| format!("{text}: {e}"))?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let prefix = match prefix {
        Some(p) => p.parse::<u8>().map_err(|e| format!("{text}: {e}"))?,
        None => max,
    };
    if prefix > max {
        return Err(format!("{text}: a prefix of at most {max}"));
    }
    Ok((addr, prefix))
}

pub fn run(command: CertsCommand) -> anyhow::Result<()> {
    match command {
        CertsCommand::Init {
            dir,
            name,
            days,
            permit_dns,
            permit_ip,
        } => {
            let policy = CaPolicy {
                name,
                lifetime: DAY * days,
                permitted_dns: permit_dns,
                permitted_ips: permit_ip,
            };
            LocalCa::create_with(&dir, &policy)
                .with_context(|| format!("making a CA in {}", dir.display()))?;
            println!(
                "CA in {} for {days} days (keep ca-key.pem offline)",
                dir.display()
            );
        }
        CertsCommand::Issue(args) => {
            let role: Role = args.role.parse().map_err(config_error)?;
            let identity = Identity::new(&args.region, role).map_err(config_error)?;
            let ca = LocalCa::open(&args.ca)
                .with_context(|| format!("opening the CA in {}", args.ca.display()))?
                .with_leaf_lifetime(DAY * args.days);
            let files = TlsFiles::in_dir(&args.out);
            ca.issue_to(&identity, &args.dns, &args.ip, &files)
                .with_context(|| format!("issuing {identity}"))?;
            let expires = once_tls::Validity::of_file(&files.cert)?.not_after;
            println!(
                "{identity} in {}, valid until {}",
                args.out.display(),
                humantime::format_rfc3339_seconds(expires)
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_ranges_parse_with_or_without_a_prefix() {
        assert_eq!(
            parse_cidr("10.0.0.0/8").unwrap(),
            ("10.0.0.0".parse().unwrap(), 8)
        );
        assert_eq!(
            parse_cidr("10.1.2.3").unwrap(),
            ("10.1.2.3".parse().unwrap(), 32)
        );
        assert_eq!(
            parse_cidr("fd00::/8").unwrap(),
            ("fd00::".parse().unwrap(), 8)
        );
        assert!(parse_cidr("10.0.0.0/33").is_err());
        assert!(parse_cidr("nowhere/8").is_err());
    }
}
