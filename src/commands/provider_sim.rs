//! `once provider-sim`: the payment-provider simulator as a process.

use std::net::SocketAddr;

use clap::Args;

#[derive(Debug, Args)]
pub struct ProviderSimArgs {
    #[arg(
        long,
        env = "ONCE_PROVIDER_SIM_LISTEN",
        default_value = "127.0.0.1:8090"
    )]
    pub listen: SocketAddr,
    /// Journal the ledger to this JSON-lines file and read it back at
    /// start, so a restarted simulator remembers its charges like a real
    /// provider. Without it the ledger lives in memory.
    #[arg(long, env = "ONCE_PROVIDER_SIM_LEDGER")]
    pub ledger_file: Option<std::path::PathBuf>,
    /// Print the effective configuration as JSON and exit without binding:
    /// CI runs the manifests' flags through this.
    #[arg(long)]
    pub check_config: bool,
}

pub async fn run(args: ProviderSimArgs) -> anyhow::Result<()> {
    if args.check_config {
        println!(
            "{}",
            serde_json::json!({
                "role": "provider-sim",
                "listen": args.listen.to_string(),
                "ledger_file": args.ledger_file.as_ref().map(|p| p.display().to_string()),
            })
        );
        return Ok(());
    }
    let simulator = match &args.ledger_file {
        Some(path) => once_provider_sim::Simulator::with_journal(path)?,
        None => once_provider_sim::Simulator::default(),
    };
    once_provider_sim::serve(
        simulator,
        args.listen,
        |addr| {
            tracing::info!(%addr, "provider simulator listening");
            println!("listening on http://{addr}");
        },
        once_edge::shutdown_signal(),
    )
    .await
}
