//! `once`: one binary, every role a subcommand. `main` parses the command
//! line, starts logging and hands over to a library; nothing here decides
//! anything about payments.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod commands;

/// Every role of the binary allocates through mimalloc (decision 0038).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(name = "once", version, about = "Exactly-once payments API")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the whole system locally on embedded storage.
    Up(commands::up::UpArgs),
    /// Run a node: the payments API of one region.
    Node(Box<commands::node::NodeArgs>),
    /// Apply database migrations and exit.
    Migrate(commands::migrate::MigrateArgs),
    /// Run a router: authenticate, forward to the tenant's home region, fail over.
    Router(commands::router::RouterArgs),
    /// Run a raft-store member, or administer a cluster.
    Store(commands::store::StoreArgs),
    /// Manage API keys.
    #[command(subcommand)]
    Keys(commands::keys::KeysCommand),
    /// Make a CA and issue the certificates of the internal links (mutual TLS).
    #[command(subcommand)]
    Certs(commands::certs::CertsCommand),
    /// Run the payment-provider simulator.
    ProviderSim(commands::provider_sim::ProviderSimArgs),
    /// Inspect and resolve idempotency records through a node's admin API.
    Records(commands::records::RecordsArgs),
    /// Inspect the event path: dead letters, redrive.
    Events(commands::events::EventsArgs),
    /// Drive load at a running node and report throughput and latency.
    Bench(once_loadgen::BenchArgs),
    /// Failover drills against a running cluster (`once up`).
    #[command(subcommand)]
    Drill(commands::drill::DrillCommand),
}

impl Command {
    /// Who this process is, for telemetry's resource attributes.
    fn role(&self) -> once_telemetry::Role {
        let (service, region) = match self {
            Command::Up(_) => ("once-up", None),
            Command::Node(args) => ("once-node", Some(args.region.clone())),
            Command::Router(args) => ("once-router", Some(args.region.clone())),
            Command::ProviderSim(_) => ("once-provider-sim", None),
            Command::Store(_) => ("once-store", None),
            Command::Migrate(_)
            | Command::Keys(_)
            | Command::Certs(_)
            | Command::Records(_)
            | Command::Events(_)
            | Command::Bench(_)
            | Command::Drill(_) => ("once-cli", None),
        };
        once_telemetry::Role { service, region }
    }
}

/// Exit code for invalid configuration (sysexits' EX_CONFIG is 78, EX_USAGE
/// 64): the process stops before binding anything.
const EXIT_CONFIG: u8 = 64;

fn main() -> ExitCode {
    once_node::failpoints::arm_from_env();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        // Telemetry starts inside the runtime (its exporters run on it) and
        // is dropped, flushing spans, before the runtime shuts down.
        let _telemetry = once_telemetry::init(&cli.command.role()).map_err(|e| {
            eprintln!("error: starting telemetry: {e:#}");
            e
        })?;
        match cli.command {
            Command::Up(args) => commands::up::run(args).await,
            Command::Node(args) => commands::node::run(*args).await,
            Command::Migrate(args) => commands::migrate::run(args).await,
            Command::Router(args) => commands::router::run(args).await,
            Command::Store(args) => commands::store::run(args).await,
            Command::Keys(cmd) => commands::keys::run(cmd),
            Command::Certs(cmd) => commands::certs::run(cmd),
            Command::ProviderSim(args) => commands::provider_sim::run(args).await,
            Command::Records(args) => commands::records::run(args).await,
            Command::Events(args) => commands::events::run(args).await,
            Command::Bench(args) => once_loadgen::run(args).await,
            Command::Drill(cmd) => commands::drill::run(cmd).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is::<commands::ConfigError>() => {
            eprintln!("configuration error: {e:#}");
            ExitCode::from(EXIT_CONFIG)
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
