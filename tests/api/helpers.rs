//! The root suite's harness: a node on port 0 over a fresh database,
//! in-process or as a real `once` process, the provider simulator, the SQL
//! probes — what needs the node's own types or the `once` binary (Cargo
//! builds it only for this package's tests). What every suite shares
//! (processes, waits, ports, PostgreSQL databases, clients, fixtures) is
//! `once-test-support`; its pieces the scenarios use are re-exported below.
//!
//! Every scenario runs once per [`Backend`]: the `sql` store mode on SQLite
//! and on PostgreSQL, and the `raft` store mode (records in a 3-member
//! raft-store cluster of real `once store` processes, payments in SQLite).
//! PostgreSQL tests need
//! `DATABASE_URL` (a server URL; each test creates and drops its own
//! database). Without it they are skipped locally and fail under `CI=true`,
//! so CI can never go green without exercising PostgreSQL.

use std::ffi::OsStr;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use once_node::config::StoreMode;
use once_node::domain::ManualClock;
use once_node::payments::response::ResponseSchema;
use once_node::provider::InProcessProvider;
use once_node::raft::RaftStoreConfig;
use once_node::state::AppState;
use once_node::{ApiKeys, Application, NodeConfig};
use once_store_client::protocol::RecordQuery;
use once_test_support::postgres::PgDatabase;
use once_test_support::process::{self, Process};
use once_test_support::stoppable::Stoppable;
use sqlx::Row;

use crate::raft_store::cluster::Cluster;

// The scenario files' prelude from the shared harness (`use crate::helpers::*`).
pub use once_test_support::client::{Answer, json_of, post, provider_key_of, send};
pub use once_test_support::fixtures::{
    ACME_KEY, ACME_REFUNDS_KEY, API_KEYS, GLOBEX_KEY, payment_body,
};
pub use once_test_support::metrics::{metric, metric_sum, scrape};
pub use once_test_support::services::postgres_available;
pub use once_test_support::wait::eventually;

/// The `once` binary: Cargo builds it for this package's tests and says
/// where at compile time.
pub const ONCE: &str = env!("CARGO_BIN_EXE_once");

/// The data key file every node of this suite seals with, in-process or a
/// real `once node` (`ONCE_DATA_KEYS`): made once per build directory, so
/// a node restarted over the same database opens what it stored.
pub fn test_data_keys() -> &'static std::path::Path {
    static PATH: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("api-data-keys");
        match once_seal::KeyRing::generate().create_file(&path) {
            Ok(()) => {}
            // Made by an earlier run (or a racing test binary): reuse it.
            Err(once_seal::KeyFileError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => panic!("creating {}: {e}", path.display()),
        }
        path
    })
}

/// The suite's data keys, for probes that open what a store holds.
pub fn test_key_ring() -> once_seal::KeyRing {
    once_seal::KeyRing::load(test_data_keys()).expect("the suite's data key file")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
    /// Records in raft-store (3 members), payments in SQLite.
    Raft,
}

/// Generates one `#[tokio::test]` per backend for an `async fn(Backend)`:
/// both sql-mode databases and the raft mode.
#[macro_export]
macro_rules! on_every_backend {
    ($($scenario:ident),+ $(,)?) => {
        $crate::on_backends!([sqlite, postgres, raft] $($scenario),+);
    };
}

/// As [`on_every_backend`], for scenarios about the sql mode's own
/// statements (their premise does not exist in the raft mode).
#[macro_export]
macro_rules! on_sql_backends {
    ($($scenario:ident),+ $(,)?) => {
        $crate::on_backends!([sqlite, postgres] $($scenario),+);
    };
}

/// A module per scenario holding a test per listed backend, named after it
/// (`scenario::sqlite`, `::postgres`, `::raft`).
#[macro_export]
macro_rules! on_backends {
    ($backends:tt $($scenario:ident),+) => {
        $( $crate::on_backends!(@one $scenario $backends); )+
    };
    (@one $scenario:ident [$($backend:ident),+]) => {
        mod $scenario {
            $( $crate::backend_test!($scenario, $backend); )+
        }
    };
}

/// One backend's test of `scenario`; the PostgreSQL one runs only where
/// [`postgres_available`] says so.
#[macro_export]
macro_rules! backend_test {
    ($scenario:ident, sqlite) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn sqlite() {
            super::$scenario($crate::helpers::Backend::Sqlite).await
        }
    };
    ($scenario:ident, postgres) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn postgres() {
            if $crate::helpers::postgres_available() {
                super::$scenario($crate::helpers::Backend::Postgres).await
            }
        }
    };
    ($scenario:ident, raft) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn raft() {
            super::$scenario($crate::helpers::Backend::Raft).await
        }
    };
}

/// A database of the test's own: a SQLite file in a temp dir, or a fresh
/// The group besides the directory that every raft-mode scenario's
/// cluster hosts (docs/decisions/0063-a-raft-group-per-home-region.md).
pub const RAFT_TEST_GROUP: &str = "elsewhere";

/// The raft mode's cluster: three members hosting the directory and
/// [`RAFT_TEST_GROUP`], with tenant `acme` assigned to that group and
/// `globex` left in the directory, so every scenario runs through both and
/// a node that routes each tenant to its group.
async fn split_cluster() -> Cluster {
    let cluster = Cluster::start_with(
        3,
        &[
            "--max-clock-offset",
            "1000days",
            "--groups",
            RAFT_TEST_GROUP,
        ],
        |_| vec![],
    )
    .await;
    let directory = cluster.client(cluster.client_options());
    eventually(Duration::from_secs(30), || async {
        // Refused until the cluster has moved to the wire version that
        // carries assignments (its leader does within a second).
        match directory.assign_tenant("acme", RAFT_TEST_GROUP).await {
            Ok(once_store_client::command::Reply::Assigned { .. }) => Some(()),
            _ => None,
        }
    })
    .await;
    cluster
}

/// PostgreSQL database dropped when the test ends.
#[derive(Debug)]
pub struct TestDb {
    pub url: String,
    /// The raft-store cluster of the raft mode.
    pub store: Option<Cluster>,
    _postgres: Option<PgDatabase>,
    _dir: tempfile::TempDir,
}

impl TestDb {
    pub async fn new(backend: Backend) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        match backend {
            Backend::Sqlite | Backend::Raft => {
                let url = dir.path().join("node.db").display().to_string();
                // Scenarios move the store's clocks with the node's
                // (`TestApp::advance`), one member after another: a bound
                // wider than any move keeps the moment in between from
                // looking like a skewed member.
                let store = match backend {
                    Backend::Raft => Some(split_cluster().await),
                    _ => None,
                };
                Self {
                    url,
                    store,
                    _postgres: None,
                    _dir: dir,
                }
            }
            Backend::Postgres => {
                let database = PgDatabase::create().await;
                Self {
                    url: database.url.clone(),
                    store: None,
                    _postgres: Some(database),
                    _dir: dir,
                }
            }
        }
    }

    /// A fresh connection for probes.
    pub async fn pool(&self) -> once_node::sql::Database {
        once_node::sql::Database::connect(&self.url, 2)
            .await
            .expect("probe connection")
    }

    /// `once node` flags that select this backend's store mode.
    pub fn node_args(&self) -> Vec<String> {
        match &self.store {
            None => vec![],
            Some(cluster) => [
                "--idempotency-store".into(),
                "raft".into(),
                "--store-endpoints".into(),
                cluster.endpoints().join(","),
            ]
            .into_iter()
            .chain(cluster.store_groups_flags())
            .chain(cluster.tls_flags("node", once_tls::Role::Node))
            .collect(),
        }
    }

    /// Every idempotency record, from whichever store holds them.
    pub async fn records(&self) -> Vec<RecordRow> {
        match &self.store {
            Some(cluster) => {
                let mut records = Vec::new();
                for client in [
                    cluster.client(Default::default()),
                    cluster.group_client(RAFT_TEST_GROUP),
                ] {
                    let query = RecordQuery {
                        limit: u32::MAX,
                        ..RecordQuery::default()
                    };
                    records.extend(client.records(query).await.expect("raft-store records"));
                }
                records
                    .into_iter()
                    .map(|r| RecordRow {
                        status: r.status.as_str().to_owned(),
                        fence: r.fence as i64,
                        has_response: r.response.is_some(),
                        schema_version: r.response.as_ref().map(|x| {
                            x.open_answer(&test_key_ring(), &r.scope)
                                .expect("a stored answer opens")
                                .schema_version
                        }),
                    })
                    .collect()
            }
            None => {
                let db = self.pool().await;
                let rows = sqlx::query(
                    "SELECT tenant_id, principal_id, operation, idempotency_key, status, fence, \
                     response_sealed FROM idempotency_requests",
                )
                .fetch_all(&db.pool)
                .await
                .expect("records");
                db.pool.close().await;
                let ring = test_key_ring();
                rows.iter()
                    .map(|row| {
                        let sealed: Option<Vec<u8>> = row.try_get("response_sealed").unwrap();
                        let scope = once_store_client::command::Scope {
                            tenant: row.try_get("tenant_id").unwrap(),
                            principal: row.try_get("principal_id").unwrap(),
                            operation: row.try_get("operation").unwrap(),
                            key: row.try_get("idempotency_key").unwrap(),
                        };
                        RecordRow {
                            status: row.try_get("status").unwrap(),
                            fence: row.try_get("fence").unwrap(),
                            has_response: sealed.is_some(),
                            schema_version: sealed.map(|blob| {
                                once_store_client::command::Sealed(blob)
                                    .open_answer(&ring, &scope)
                                    .expect("a stored answer opens")
                                    .schema_version
                            }),
                        }
                    })
                    .collect()
            }
        }
    }

    /// How many records are in `status`.
    pub async fn count_records(&self, status: &str) -> i64 {
        self.records()
            .await
            .iter()
            .filter(|r| r.status == status)
            .count() as i64
    }

    pub async fn count(&self, sql: &str) -> i64 {
        let db = self.pool().await;
        let row = sqlx::query(sql).fetch_one(&db.pool).await.expect(sql);
        let n: i64 = row.try_get(0).expect("count");
        db.pool.close().await;
        n
    }
}

/// An idempotency record as the probes compare it across store modes.
#[derive(Debug, Clone)]
pub struct RecordRow {
    pub status: String,
    pub fence: i64,
    /// Whether the answer to replay is still stored.
    pub has_response: bool,
    /// Schema version of the stored answer, while there is one.
    pub schema_version: Option<i32>,
}

/// A node running inside the test process.
#[derive(Debug)]
pub struct TestApp {
    pub url: String,
    /// The admin listener: `/metrics`, `/admin/*`.
    pub admin_url: String,
    pub state: AppState,
    pub clock: ManualClock,
    /// The raft-store members' admin endpoints and their operator (raft
    /// mode), whose clocks [`Self::advance`] moves with the node's.
    store_admins: Option<(Vec<String>, once_store_client::admin::Operator)>,
    /// The node's provider: its ledger is the test's count of charges.
    pub provider: Arc<InProcessProvider>,
    pub client: reqwest::Client,
    running: Stoppable<anyhow::Error>,
}

pub fn test_config(db: &TestDb) -> NodeConfig {
    let mut config = NodeConfig::new("127.0.0.1:0".parse().unwrap(), "test", &db.url);
    config.max_db_connections = 8;
    config.lease = Duration::from_secs(5);
    config.sweep_interval = Duration::from_secs(3600);
    // Scenarios drive takeovers themselves with the manual clock; the
    // recovery worker (real-time ticks) would race them for the record.
    config.recovery_interval = Duration::from_secs(3600);
    config.drain_timeout = Duration::from_secs(5);
    config.data_keys = Some(test_data_keys().to_owned());
    if let Some(cluster) = &db.store {
        config.idempotency_store = StoreMode::Raft(RaftStoreConfig {
            endpoints: cluster.endpoints(),
            groups: vec![RAFT_TEST_GROUP.to_owned()],
            client: once_store_client::client::ClientOptions {
                tls: Some(cluster.identity("node", once_tls::Role::Node)),
                ..Default::default()
            },
        });
    }
    config
}

impl TestApp {
    /// Moves time forward by `by`: the node's clock, and in the raft mode
    /// every raft-store member's, whose leader stamps the time leases and
    /// replay windows are judged by.
    pub async fn advance(&self, by: Duration) {
        self.clock.advance(by);
        if let Some((admins, operator)) = &self.store_admins {
            for admin in admins {
                once_store_client::admin::advance_clock(operator, admin, by.as_millis() as i64)
                    .await
                    .expect("move a member's clock");
            }
        }
    }

    pub async fn spawn(db: &TestDb) -> Self {
        Self::spawn_with(db, |_| {}).await
    }

    pub async fn spawn_with(db: &TestDb, adjust: impl FnOnce(&mut NodeConfig)) -> Self {
        let mut config = test_config(db);
        adjust(&mut config);
        // Beside raft-store, whose leader stamps the time leases are judged
        // by, the node's clock runs with the leader's: both follow the wall
        // clock and move together (`Self::advance`).
        let clock = if db.store.is_some() {
            ManualClock::following_real_time()
        } else {
            ManualClock::starting_now()
        };
        let provider = Arc::new(InProcessProvider::default());
        let keys = ApiKeys::from_plaintext_list(API_KEYS).unwrap();
        let app = Application::builder(config, keys)
            .clock(Arc::new(clock.clone()))
            .provider(provider.clone())
            .build()
            .await
            .expect("node builds");
        let url = format!("http://{}", app.address());
        let admin_url = format!("http://{}", app.admin_address());
        let state = app.state().clone();
        let store_admins = db
            .store
            .as_ref()
            .map(|c| (c.admin_endpoints(), c.operator()));
        Self {
            url,
            admin_url,
            state,
            clock,
            store_admins,
            provider,
            client: reqwest::Client::new(),
            running: Stoppable::spawn(|stopped| app.run_until(stopped)),
        }
    }

    pub async fn stop(self) {
        self.running.stop().await
    }

    pub fn post(
        &self,
        api_key: &str,
        idempotency_key: Option<&str>,
        body: &str,
    ) -> reqwest::RequestBuilder {
        post(&self.client, &self.url, api_key, idempotency_key, body)
    }

    pub async fn metric(&self, name: &str) -> f64 {
        metric(&self.client, &self.admin_url, name).await
    }
}

/// Starts `once ROLE` with the test keys, its public and admin listeners
/// on port 0, `args` after those, then `env`; waits for its `listening on`
/// line. The process, its public URL and its admin URL.
pub async fn start_role(
    role: &str,
    args: impl IntoIterator<Item = impl AsRef<OsStr>>,
    env: &[(&str, &str)],
) -> (Process, String, String) {
    let mut command = process::command(ONCE);
    command
        .args([
            role,
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .args(args)
        .env("ONCE_API_KEYS", API_KEYS)
        .env("ONCE_DATA_KEYS", test_data_keys())
        .envs(env.iter().copied());
    let (process, (admin, public)) = Process::start(
        command,
        role,
        Duration::from_secs(60),
        listening_addresses(),
    )
    .await;
    (process, public, format!("http://{admin}"))
}

/// Reads a starting role's stdout up to its `listening on` line: its admin
/// address (`admin on` comes first) and its public URL, `http://` or
/// `https://` as the role serves it.
fn listening_addresses() -> impl FnMut(&str) -> Option<(SocketAddr, String)> {
    let mut admin = None;
    move |line| {
        if let Some(addr) = line.strip_prefix("admin on http://") {
            admin = Some(addr.parse().expect("address"));
        }
        let public = line.strip_prefix("listening on ")?;
        let admin = admin.expect("the admin listener is printed first");
        Some((admin, public.to_owned()))
    }
}

/// A real `once node` process.
#[derive(Debug)]
pub struct NodeProcess {
    pub url: String,
    /// The admin listener: `/metrics`, `/admin/*`.
    pub admin_url: String,
    pub process: Process,
}

impl NodeProcess {
    /// A node over `db` (and its raft-store, in the raft mode).
    pub async fn start(db: &TestDb, extra_args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::start_in("test", &db.url, &db.node_args(), extra_args, env).await
    }

    /// A node of `region` over `database_url`, with `store_args` choosing
    /// its store mode.
    pub async fn start_in(
        region: &str,
        database_url: &str,
        store_args: &[String],
        extra_args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let args = ["--region", region, "--database-url", database_url]
            .into_iter()
            .chain(store_args.iter().map(String::as_str))
            .chain(extra_args.iter().copied());
        let (process, url, admin_url) = start_role("node", args, env).await;
        Self {
            url,
            admin_url,
            process,
        }
    }

    /// SIGTERM, then wait for a clean exit (flushing telemetry on the way).
    pub async fn terminate(mut self) -> std::process::ExitStatus {
        self.process.terminate().await
    }

    /// Waits for the process to exit on its own (a failpoint abort).
    #[cfg(feature = "failpoints")]
    pub async fn wait_for_exit(&mut self) -> std::process::ExitStatus {
        self.process.exit_within(Duration::from_secs(30)).await
    }

    /// Sends `request` to this node, started with a failpoint that aborts
    /// it on the way: no answer comes back, and the process exits
    /// unsuccessfully.
    #[cfg(feature = "failpoints")]
    pub async fn dies_answering(&mut self, request: reqwest::RequestBuilder, what: &str) {
        assert!(request.send().await.is_err(), "{what} died mid-request");
        assert!(
            !self.wait_for_exit().await.success(),
            "{what} exited with failure"
        );
    }

    pub async fn kill(mut self) {
        self.process.kill().await
    }
}

pub fn schema(v: i32) -> ResponseSchema {
    ResponseSchema::from_version(v).unwrap()
}

/// A real `once provider-sim` process.
#[derive(Debug)]
pub struct ProviderSim {
    pub url: String,
    pub process: Process,
    client: reqwest::Client,
}

/// A charge as the simulator's ledger shows it.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LedgerCharge {
    /// The provider's charge id (`ch_…`), what the node stores as the
    /// payment's `provider_charge_id`.
    pub id: String,
    pub idempotency_key: String,
    pub status: String,
    pub requests: u32,
}

impl ProviderSim {
    pub async fn start() -> Self {
        Self::start_on("127.0.0.1:0").await
    }

    /// `once node` flags of the crash scenarios: this simulator with tight
    /// timeouts and a short lease, so that after a restart the retry (or the
    /// recovery worker) takes the dead owner's record over within seconds.
    pub fn crash_node_args(&self) -> [&str; 8] {
        [
            "--lease",
            "2s",
            "--provider-url",
            &self.url,
            "--provider-connect-timeout",
            "200ms",
            "--provider-timeout",
            "300ms",
        ]
    }

    /// Starts on a fixed address (to bring a killed simulator back where
    /// the node expects it).
    pub async fn start_on(listen: &str) -> Self {
        Self::start_with(listen, &[]).await
    }

    pub async fn start_with(listen: &str, env: &[(&str, &str)]) -> Self {
        let mut command = process::command(ONCE);
        command
            .args(["provider-sim", "--listen", listen])
            .envs(env.iter().copied());
        let (process, url) =
            Process::start(command, "provider-sim", Duration::from_secs(30), |line| {
                line.strip_prefix("listening on ").map(str::to_owned)
            })
            .await;
        Self {
            url,
            process,
            client: reqwest::Client::new(),
        }
    }

    pub fn addr(&self) -> String {
        self.url.trim_start_matches("http://").to_owned()
    }

    pub async fn arm(&self, mode: &str, count: u32, ms: u64) {
        let r = self
            .client
            .post(format!("{}/faults", self.url))
            .json(&serde_json::json!({ "mode": mode, "count": count, "ms": ms }))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success());
    }

    /// How many faults are still armed (each arriving charge consumes one).
    pub async fn armed_faults(&self) -> usize {
        let armed: Vec<serde_json::Value> =
            json_of(self.client.get(format!("{}/faults", self.url))).await;
        armed.len()
    }

    pub async fn ledger(&self) -> Vec<LedgerCharge> {
        json_of(self.client.get(format!("{}/charges", self.url))).await
    }

    pub async fn kill(&mut self) {
        self.process.kill().await
    }
}

/// A finish with a made-up answer, for owners that must be refused.
pub fn forged_finish(now: once_node::domain::UnixMillis) -> once_node::store::Finish {
    once_node::store::Finish {
        status: once_node::idempotency::Status::Completed,
        response: once_node::idempotency::StoredResponse {
            status: 201,
            headers: vec![],
            body: b"{\"forged\":true}".to_vec(),
            schema_version: 2,
        },
        payment: None,
        event: None,
        now,
        expires_at: now,
    }
}

/// Sends `request()` like a client retrying: again while the answer is
/// `409 IDEMPOTENCY_REQUEST_IN_PROGRESS` (an owner's lease still running, a
/// finish still being written), up to `limit`; the first other answer.
pub async fn answer_once_not_in_progress(
    limit: Duration,
    request: impl Fn() -> reqwest::RequestBuilder,
) -> Answer {
    eventually(limit, || {
        let request = request();
        async move {
            let answer = send(request).await;
            match answer.status {
                409 => {
                    assert_eq!(answer.error_code(), "IDEMPOTENCY_REQUEST_IN_PROGRESS");
                    None
                }
                _ => Some(answer),
            }
        }
    })
    .await
}
