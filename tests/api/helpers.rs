//! Test harness: a node on port 0 over a fresh database, in-process or as a
//! real `once` process, plus the clients and SQL probes the scenarios use.
//!
//! Every scenario runs once per [`Backend`]: the `sql` store mode on SQLite
//! and on PostgreSQL, and the `raft` store mode (records in a 3-member
//! raft-store cluster of real `once store` processes, payments in SQLite).
//! PostgreSQL tests need
//! `DATABASE_URL` (a server URL; each test creates and drops its own
//! database). Without it they are skipped locally and fail under `CI=true`,
//! so CI can never go green without exercising PostgreSQL.

use std::net::SocketAddr;
use std::process::Stdio;
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

use crate::raft_store::cluster::Cluster;
use sqlx::{Connection, Executor, Row};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::oneshot;

pub const ACME_KEY: &str = "sk_test_acme_checkout_0001";
pub const ACME_REFUNDS_KEY: &str = "sk_test_acme_refunds_00001";
pub const GLOBEX_KEY: &str = "sk_test_globex_checkout_01";
pub const API_KEYS: &str = "acme:checkout:sk_test_acme_checkout_0001,acme:refunds:sk_test_acme_refunds_00001,globex:checkout:sk_test_globex_checkout_01";

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
        $(
            mod $scenario {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::$scenario($crate::helpers::Backend::Sqlite).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    if $crate::helpers::postgres_available() {
                        super::$scenario($crate::helpers::Backend::Postgres).await
                    }
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn raft() {
                    super::$scenario($crate::helpers::Backend::Raft).await
                }
            }
        )+
    };
}

/// As [`on_every_backend`], for scenarios about the sql mode's own
/// statements (their premise does not exist in the raft mode).
#[macro_export]
macro_rules! on_sql_backends {
    ($($scenario:ident),+ $(,)?) => {
        $(
            mod $scenario {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::$scenario($crate::helpers::Backend::Sqlite).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    if $crate::helpers::postgres_available() {
                        super::$scenario($crate::helpers::Backend::Postgres).await
                    }
                }
            }
        )+
    };
}

/// True when PostgreSQL tests can run; panics under CI if they cannot.
pub fn postgres_available() -> bool {
    if std::env::var("DATABASE_URL").is_ok() {
        return true;
    }
    assert!(
        std::env::var("CI").is_err(),
        "CI must set DATABASE_URL so the PostgreSQL scenarios run"
    );
    eprintln!("DATABASE_URL unset: skipping the PostgreSQL variant");
    false
}

/// A database of the test's own: a SQLite file in a temp dir, or a fresh
/// PostgreSQL database dropped when the test ends.
#[derive(Debug)]
pub struct TestDb {
    pub url: String,
    /// The raft-store cluster of the raft mode.
    pub store: Option<Cluster>,
    pg_name: Option<String>,
    _dir: tempfile::TempDir,
}

impl TestDb {
    pub async fn new(backend: Backend) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        match backend {
            Backend::Sqlite | Backend::Raft => {
                let url = dir.path().join("node.db").display().to_string();
                let store = match backend {
                    Backend::Raft => Some(Cluster::start(3).await),
                    _ => None,
                };
                Self {
                    url,
                    store,
                    pg_name: None,
                    _dir: dir,
                }
            }
            Backend::Postgres => {
                let server = std::env::var("DATABASE_URL").expect("DATABASE_URL");
                let name = format!("t_{}", uuid::Uuid::new_v4().simple());
                let mut admin = sqlx::PgConnection::connect(&server)
                    .await
                    .expect("connect to PostgreSQL");
                admin
                    .execute(format!("CREATE DATABASE {name}").as_str())
                    .await
                    .expect("create test database");
                let url = with_database(&server, &name);
                Self {
                    url,
                    store: None,
                    pg_name: Some(name),
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
            Some(cluster) => vec![
                "--idempotency-store".into(),
                "raft".into(),
                "--store-endpoints".into(),
                cluster.endpoints().join(","),
            ],
        }
    }

    /// Every idempotency record, from whichever store holds them.
    pub async fn records(&self) -> Vec<RecordRow> {
        match &self.store {
            Some(cluster) => cluster
                .client(Default::default())
                .records(RecordQuery {
                    limit: u32::MAX,
                    ..RecordQuery::default()
                })
                .await
                .expect("raft-store records")
                .into_iter()
                .map(|r| RecordRow {
                    status: r.status.as_str().to_owned(),
                    fence: r.fence as i64,
                    has_response: r.response.is_some(),
                    schema_version: r.response.as_ref().map(|x| x.schema_version),
                })
                .collect(),
            None => {
                let db = self.pool().await;
                let rows = sqlx::query(
                    "SELECT status, fence, response_schema_version, \
                     CASE WHEN response_body IS NULL THEN 0 ELSE 1 END AS has_response \
                     FROM idempotency_requests",
                )
                .fetch_all(&db.pool)
                .await
                .expect("records");
                db.pool.close().await;
                rows.iter()
                    .map(|row| RecordRow {
                        status: row.try_get("status").unwrap(),
                        fence: row.try_get("fence").unwrap(),
                        has_response: row.try_get::<i32, _>("has_response").unwrap() == 1,
                        schema_version: row
                            .try_get::<Option<i64>, _>("response_schema_version")
                            .unwrap()
                            .map(|v| v as i32),
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

impl Drop for TestDb {
    fn drop(&mut self) {
        let Some(name) = self.pg_name.take() else {
            return;
        };
        let server = std::env::var("DATABASE_URL").expect("DATABASE_URL");
        // Drop runs outside any runtime guarantee: use a small one of our own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                if let Ok(mut admin) = sqlx::PgConnection::connect(&server).await {
                    let _ = admin
                        .execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
                        .await;
                }
            });
        })
        .join();
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

fn with_database(server: &str, name: &str) -> String {
    let (base, query) = server
        .split_once('?')
        .map_or((server, None), |(b, q)| (b, Some(q)));
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let base = match base[scheme_end..].find('/') {
        Some(slash) => &base[..scheme_end + slash],
        None => base,
    };
    match query {
        Some(q) => format!("{base}/{name}?{q}"),
        None => format!("{base}/{name}"),
    }
}

/// A node running inside the test process.
#[derive(Debug)]
pub struct TestApp {
    pub url: String,
    /// The admin listener: `/metrics`, `/admin/*`.
    pub admin_url: String,
    pub state: AppState,
    pub clock: ManualClock,
    /// The node's provider: its ledger is the test's count of charges.
    pub provider: Arc<InProcessProvider>,
    pub client: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
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
    if let Some(cluster) = &db.store {
        config.idempotency_store = StoreMode::Raft(RaftStoreConfig {
            endpoints: cluster.endpoints(),
            client: Default::default(),
        });
    }
    config
}

impl TestApp {
    pub async fn spawn(db: &TestDb) -> Self {
        Self::spawn_with(db, |_| {}).await
    }

    pub async fn spawn_with(db: &TestDb, adjust: impl FnOnce(&mut NodeConfig)) -> Self {
        let mut config = test_config(db);
        adjust(&mut config);
        let clock = ManualClock::starting_now();
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
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(app.run_until(async {
            let _ = stopped.await;
        }));
        Self {
            url,
            admin_url,
            state,
            clock,
            provider,
            client: reqwest::Client::new(),
            stop: Some(stop),
            task: Some(task),
        }
    }

    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.expect("node task").expect("node stops cleanly");
        }
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

pub fn post(
    client: &reqwest::Client,
    url: &str,
    api_key: &str,
    key: Option<&str>,
    body: &str,
) -> reqwest::RequestBuilder {
    let mut request = client
        .post(format!("{url}/payments"))
        .header("authorization", format!("Bearer {api_key}"))
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    request
}

/// The Prometheus text at `{url}/metrics`.
async fn scrape(client: &reqwest::Client, url: &str) -> String {
    client
        .get(format!("{url}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The sum of a metric's samples whose line contains `filter` (a label, say).
pub async fn metric_sum(client: &reqwest::Client, url: &str, name: &str, filter: &str) -> f64 {
    scrape(client, url)
        .await
        .lines()
        .filter(|l| l.starts_with(name) && l.contains(filter))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A metric's value from `/metrics` (0 when absent).
pub async fn metric(client: &reqwest::Client, url: &str, name: &str) -> f64 {
    let text = scrape(client, url).await;
    text.lines()
        .find_map(|l| {
            l.strip_prefix(name)
                .and_then(|rest| rest.strip_prefix(' '))
                .map(|v| v.trim().parse().unwrap())
        })
        .unwrap_or(0.0)
}

/// A standard valid body.
pub fn payment_body(account: &str, amount: &str, reference: &str) -> String {
    format!(
        r#"{{"accountId":"{account}","amount":"{amount}","currency":"EUR","merchantReference":"{reference}"}}"#
    )
}

/// Status, selected headers and exact body bytes of an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub replayed: bool,
    pub retry_after: Option<String>,
    pub body: Vec<u8>,
}

impl Answer {
    pub async fn of(response: reqwest::Response) -> Self {
        let status = response.status().as_u16();
        let replayed = response
            .headers()
            .get("idempotent-replayed")
            .is_some_and(|v| v == "true");
        let retry_after = response
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_owned());
        let body = response.bytes().await.unwrap().to_vec();
        Self {
            status,
            replayed,
            retry_after,
            body,
        }
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    pub fn error_code(&self) -> String {
        self.json()["errorCode"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

pub async fn send(request: reqwest::RequestBuilder) -> Answer {
    Answer::of(request.send().await.expect("request reaches the node")).await
}

/// Reads a starting role's stdout up to its `listening on` line: its
/// public and admin addresses (`admin on` comes first).
pub async fn listening_addresses(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    role: &str,
) -> (SocketAddr, SocketAddr) {
    tokio::time::timeout(Duration::from_secs(60), async {
        let mut admin = None;
        while let Some(line) = lines.next_line().await.expect("read stdout") {
            if let Some(addr) = line.strip_prefix("admin on http://") {
                admin = Some(addr.parse().expect("address"));
            }
            if let Some(addr) = line.strip_prefix("listening on http://") {
                let admin = admin.expect("the admin listener is printed first");
                return (admin, addr.parse().expect("address"));
            }
        }
        panic!("{role} exited before listening");
    })
    .await
    .unwrap_or_else(|_| panic!("{role} starts within a minute"))
}

/// A real `once node` process.
#[derive(Debug)]
pub struct NodeProcess {
    pub url: String,
    /// The admin listener: `/metrics`, `/admin/*`.
    pub admin_url: String,
    pub child: Child,
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
        let mut command = Command::new(env!("CARGO_BIN_EXE_once"));
        command
            .args([
                "node",
                "--listen",
                "127.0.0.1:0",
                "--admin-listen",
                "127.0.0.1:0",
                "--region",
                region,
                "--database-url",
                database_url,
            ])
            .args(store_args)
            .args(extra_args)
            .env("ONCE_API_KEYS", API_KEYS)
            .env("RUST_LOG", "warn")
            .env_remove("FAILPOINTS")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("spawn once node");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let (admin, addr) = listening_addresses(&mut lines, "node").await;
        // Keep draining stdout so the child never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Self {
            url: format!("http://{addr}"),
            admin_url: format!("http://{admin}"),
            child,
        }
    }

    /// SIGTERM, then wait for a clean exit (flushing telemetry on the way).
    pub async fn terminate(mut self) -> std::process::ExitStatus {
        terminate(&mut self.child).await
    }

    /// Waits for the process to exit on its own (a failpoint abort).
    #[cfg(feature = "failpoints")]
    pub async fn wait_for_exit(&mut self) -> std::process::ExitStatus {
        tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("node exits")
            .expect("wait")
    }

    pub async fn kill(mut self) {
        let _ = self.child.kill().await;
    }
}

/// Polls `condition` until it holds, failing after `limit`. This is a wait
/// for a state, not a sleep standing in for one.
pub async fn eventually<T, F, Fut>(limit: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition not reached within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn schema(v: i32) -> ResponseSchema {
    ResponseSchema::from_version(v).unwrap()
}

/// A real `once provider-sim` process.
#[derive(Debug)]
pub struct ProviderSim {
    pub url: String,
    pub child: Child,
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

    /// Starts on a fixed address (to bring a killed simulator back where
    /// the node expects it).
    pub async fn start_on(listen: &str) -> Self {
        Self::start_with(listen, &[]).await
    }

    pub async fn start_with(listen: &str, env: &[(&str, &str)]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_once"))
            .args(["provider-sim", "--listen", listen])
            .env("RUST_LOG", "warn")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn once provider-sim");
        let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let url = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(line) = lines.next_line().await.expect("read stdout") {
                if let Some(url) = line.strip_prefix("listening on ") {
                    return url.to_owned();
                }
            }
            panic!("provider-sim exited before listening");
        })
        .await
        .expect("provider-sim starts");
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Self {
            url,
            child,
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
        let armed: Vec<serde_json::Value> = self
            .client
            .get(format!("{}/faults", self.url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        armed.len()
    }

    pub async fn ledger(&self) -> Vec<LedgerCharge> {
        self.client
            .get(format!("{}/charges", self.url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }
}

/// `provider_payment_<id>` for a payment answer's id.
pub fn provider_key_of(answer: &Answer) -> String {
    let json = answer.json();
    let id = json["id"]
        .as_str()
        .or_else(|| json["paymentId"].as_str())
        .map(str::to_owned);
    format!("provider_payment_{}", id.expect("answer names its payment"))
}

/// Sends SIGTERM and waits for the process to exit.
pub async fn terminate(child: &mut Child) -> std::process::ExitStatus {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let pid = Pid::from_raw(child.id().expect("running child") as i32);
    kill(pid, Signal::SIGTERM).expect("SIGTERM");
    tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .expect("exits after SIGTERM")
        .expect("wait")
}

/// A port free on every address in `ips` now, below the kernel's ephemeral
/// range: a child process binds it seconds later (and again after a
/// restart), and no other test's port-0 listener or outgoing connection can
/// be handed a port outside that range in between.
pub fn port_outside_ephemeral_range(ips: &[&str]) -> u16 {
    let ephemeral_start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768)
        .max(10_001);
    loop {
        let port = rand::random_range(10_000..ephemeral_start);
        if ips
            .iter()
            .all(|ip| std::net::TcpListener::bind((*ip, port)).is_ok())
        {
            return port;
        }
    }
}
