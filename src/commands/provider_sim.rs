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
}

pub async fn run(args: ProviderSimArgs) -> anyhow::Result<()> {
    once_provider_sim::serve(
        args.listen,
        |addr| {
            tracing::info!(%addr, "provider simulator listening");
            println!("listening on http://{addr}");
        },
        once_node::shutdown_signal(),
    )
    .await
}
