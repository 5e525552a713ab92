//! `once up`: the whole system on this machine with embedded storage and
//! nothing to install. Today that is one region: a node on a SQLite file,
//! the provider simulator (reached over HTTP) and demo tenants. A second `once up --dir
//! DIR` resumes from the same data and keys.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use once_node::provider::HttpProviderConfig;
use once_node::{ApiKeys, Application, NodeConfig};
use serde_json::json;

use super::keys::generate_key;

#[derive(Debug, Args)]
pub struct UpArgs {
    /// Where data, keys and cluster.json live.
    #[arg(long, default_value = "once-data")]
    pub dir: PathBuf,
    /// Address of the API.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
}

const REGION: &str = "local";
const DEMO_TENANTS: &[&str] = &["acme", "globex"];

/// Demo keys are made once and kept in `DIR/demo-keys.txt` (plaintext, for
/// development only; production uses hashed key files).
fn demo_keys(dir: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let path = dir.join("demo-keys.txt");
    if let Ok(text) = std::fs::read_to_string(&path) {
        let keys: Vec<(String, String)> = text
            .lines()
            .filter_map(|l| l.split_once(':'))
            .map(|(t, k)| (t.to_owned(), k.to_owned()))
            .collect();
        if !keys.is_empty() {
            return Ok(keys);
        }
    }
    let keys: Vec<(String, String)> = DEMO_TENANTS
        .iter()
        .map(|t| ((*t).to_owned(), generate_key()))
        .collect();
    let text: String = keys.iter().map(|(t, k)| format!("{t}:{k}\n")).collect();
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(keys)
}

/// The admin token, made once and kept in `DIR/admin-token`.
fn demo_admin_token(dir: &Path) -> anyhow::Result<String> {
    let path = dir.join("admin-token");
    if let Ok(token) = std::fs::read_to_string(&path) {
        if token.trim().len() >= 16 {
            return Ok(token.trim().to_owned());
        }
    }
    let token = format!("adm_{}", generate_key().trim_start_matches("sk_"));
    std::fs::write(&path, &token).with_context(|| format!("writing {}", path.display()))?;
    Ok(token)
}

pub async fn run(args: UpArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    let keys = demo_keys(&args.dir)?;
    let list: Vec<String> = keys.iter().map(|(t, k)| format!("{t}:demo:{k}")).collect();
    let api_keys = ApiKeys::from_plaintext_list(&list.join(","))?;

    // The provider simulator, in this process: the node reaches it over
    // real HTTP, exactly as it would a real provider.
    let (provider_addr_tx, provider_addr_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(once_provider_sim::serve(
        "127.0.0.1:0".parse().expect("static address"),
        move |addr| {
            let _ = provider_addr_tx.send(addr);
        },
        std::future::pending(),
    ));
    let provider_url = format!(
        "http://{}",
        provider_addr_rx
            .await
            .context("starting the provider simulator")?
    );
    let admin_token = demo_admin_token(&args.dir)?;

    let database_url = args
        .dir
        .join(format!("region-{REGION}.db"))
        .display()
        .to_string();
    let mut config = NodeConfig::new(args.listen, REGION, &database_url);
    config.provider = Some(HttpProviderConfig::new(&provider_url));
    config.admin_token = Some(admin_token.clone());
    let app = Application::builder(config, api_keys).build().await?;
    let url = format!("http://{}", app.address());

    let cluster = json!({
        "router": { "url": url },
        "provider": { "url": provider_url },
        "admin_token": admin_token,
        "tenants": keys.iter().map(|(t, k)| json!({ "id": t, "api_key": k, "home_region": REGION })).collect::<Vec<_>>(),
        "regions": [{
            "name": REGION,
            "node": { "url": url, "pid": std::process::id() },
            "database_url": database_url,
        }],
    });
    let cluster_path = args.dir.join("cluster.json");
    std::fs::write(&cluster_path, serde_json::to_vec_pretty(&cluster)?)?;

    let (tenant, key) = &keys[0];
    println!(
        "once is up: {url}  (region {REGION}, data in {})",
        args.dir.display()
    );
    for (t, k) in &keys {
        println!("  tenant {t:<8} API key {k}");
    }
    println!("  provider simulator {provider_url}  (ledger: GET {provider_url}/charges)");
    println!("  admin token {admin_token}  (once records list --node {url} --admin-token …)");
    println!("  cluster description: {}", cluster_path.display());
    println!();
    println!("Create a payment as {tenant} (run it twice: the second answer is a replay):");
    println!(
        "  curl -si {url}/payments -H 'Authorization: Bearer {key}' -H 'Idempotency-Key: order-1' \\\n    \
         -H 'Content-Type: application/json' \\\n    \
         -d '{{\"accountId\":\"acc_1\",\"amount\":\"10.00\",\"currency\":\"EUR\",\"merchantReference\":\"order-1\"}}'"
    );
    println!(
        "Ctrl-C stops it; `once up --dir {}` resumes from the same data.",
        args.dir.display()
    );
    app.run_until(once_node::shutdown_signal()).await
}
