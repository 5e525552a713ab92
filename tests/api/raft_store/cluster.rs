//! A raft-store cluster of real `once store` processes for the tests:
//! member N listens on 127.0.0.N with its data in the test's temp dir, and
//! its peers reach its Raft listener through a [`LinkProxy`] the test owns.
//! Every link is mutual TLS, as `once up` runs it: the cluster has a CA of
//! its own, each member a store certificate, and the test talks to the
//! members as an operator (or with the node's or router's certificate
//! where it says so).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use once_store_client::admin;
use once_store_client::client::{ClientOptions, StoreClient};
use once_store_client::command::Record;
use once_store_client::groups::StoreGroups;
use once_store_client::protocol::{RECORDS_PATH, Status};
use once_test_support::fixtures::STORE_ADMIN_TOKEN as ADMIN_TOKEN;
use once_test_support::pki::TestPki;
use once_test_support::ports::port_outside_ephemeral_range;
use once_test_support::process::{self, Process};
use once_test_support::proxy::LinkProxy;
use once_tls::{Role, Tls};

use crate::helpers::{ONCE, eventually};

fn member_ip(id: u64) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, id as u8))
}

/// A port free on 127.0.0.1–5 right now, outside the ephemeral range (the
/// members bind it moments later, and again after a restart).
fn free_port() -> u16 {
    let ips: Vec<String> = (1..=5).map(|i| member_ip(i).to_string()).collect();
    let ips: Vec<&str> = ips.iter().map(String::as_str).collect();
    port_outside_ephemeral_range(&ips)
}

/// Extra environment of each member, by id (`LD_PRELOAD` of libfaketime for
/// a skewed clock, say).
pub type MemberEnv = Vec<(String, String)>;

#[derive(Debug)]
pub struct Member {
    pub raft_addr: SocketAddr,
    pub api_addr: SocketAddr,
    pub admin_addr: SocketAddr,
    pub data_dir: PathBuf,
    pub proxy: LinkProxy,
    process: Option<Process>,
    env: MemberEnv,
    /// The `once` binary it runs (`None`: this build's).
    program: Option<PathBuf>,
}

impl Member {
    pub fn endpoint(&self) -> String {
        self.api_addr.to_string()
    }

    /// The admin listener (operator actions, records, status).
    pub fn admin_endpoint(&self) -> String {
        self.admin_addr.to_string()
    }
}

#[derive(Debug)]
pub struct Cluster {
    pub members: BTreeMap<u64, Member>,
    dir: tempfile::TempDir,
    raft_port: u16,
    api_port: u16,
    admin_port: u16,
    /// Extra `once store` flags for every member.
    extra_args: Vec<String>,
    /// The cluster's CA; each member's certificate is issued at its start.
    pub pki: TestPki,
    /// The test's own identity towards the members.
    operator_tls: Tls,
}

impl Cluster {
    /// Starts `n` founding members and waits for a leader.
    pub async fn start(n: u64) -> Self {
        Self::start_with(n, &[], |_| vec![]).await
    }

    /// As [`Self::start`], with extra flags and each member's extra env.
    pub async fn start_with(n: u64, extra_args: &[&str], env: impl Fn(u64) -> MemberEnv) -> Self {
        Self::start_running(n, extra_args, |id| (env(id), None)).await
    }

    /// As [`Self::start_with`], each member also with the `once` binary
    /// it runs (`None`: this build's).
    pub async fn start_running(
        n: u64,
        extra_args: &[&str],
        setup: impl Fn(u64) -> (MemberEnv, Option<PathBuf>),
    ) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let pki = TestPki::new(&dir.path().join("tls"));
        let operator_tls = pki.tls("operator", "test", Role::Operator);
        let mut cluster = Self {
            pki,
            operator_tls,
            dir,
            members: BTreeMap::new(),
            raft_port: free_port(),
            api_port: free_port(),
            admin_port: free_port(),
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
        };
        for id in 1..=n {
            cluster.add_member(id).await;
            let (env, program) = setup(id);
            cluster.set_env(id, env, program);
        }
        let peers = cluster.peers();
        for id in 1..=n {
            cluster.spawn(id, Some(&peers)).await;
        }
        cluster.wait_for_leader(&cluster.ids()).await;
        cluster
    }

    pub fn ids(&self) -> Vec<u64> {
        self.members.keys().copied().collect()
    }

    /// Registers member `id` (its addresses and proxy) without starting it.
    async fn add_member(&mut self, id: u64) {
        let raft_addr = SocketAddr::new(member_ip(id), self.raft_port);
        let api_addr = SocketAddr::new(member_ip(id), self.api_port);
        let admin_addr = SocketAddr::new(member_ip(id), self.admin_port);
        // The proxy lives as long as the test and binds at once, so the
        // kernel may choose its port: nothing can take it between a choice
        // and a bind (a chosen port could be, by a `once up` another test
        // started, whose processes bind the ports it chose seconds later).
        let proxy = LinkProxy::start(SocketAddr::new(member_ip(id), 0), raft_addr)
            .await
            .expect("proxy binds");
        self.members.insert(
            id,
            Member {
                raft_addr,
                api_addr,
                admin_addr,
                data_dir: self.dir.path().join(format!("member-{id}")),
                proxy,
                process: None,
                env: Vec::new(),
                program: None,
            },
        );
    }

    /// The address peers use to reach member `id`: its proxy.
    pub fn advertised(&self, id: u64) -> String {
        self.members[&id].proxy.addr.to_string()
    }

    fn peers(&self) -> String {
        self.members
            .keys()
            .map(|id| format!("{id}={}", self.advertised(*id)))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Starts member `id`'s process; `peers` only for a founding start.
    pub async fn spawn(&mut self, id: u64, peers: Option<&str>) {
        let command = self.command(id, peers);
        let (process, ()) = Process::start(
            command,
            &format!("member {id}"),
            Duration::from_secs(60),
            |line| line.starts_with("listening raft=").then_some(()),
        )
        .await;
        self.members.get_mut(&id).expect("member").process = Some(process);
    }

    /// As [`Self::spawn`], member `id`'s stderr written to `log` instead of
    /// the test's: a test reads back what the member said.
    pub async fn spawn_logging_to(&mut self, id: u64, peers: Option<&str>, log: &std::path::Path) {
        let mut command = self.command(id, peers);
        command.stderr(std::fs::File::create(log).expect("member log file"));
        let (process, ()) = Process::start(
            command,
            &format!("member {id}"),
            Duration::from_secs(60),
            |line| line.starts_with("listening raft=").then_some(()),
        )
        .await;
        self.members.get_mut(&id).expect("member").process = Some(process);
    }

    /// Member `id`'s running process (`None`: stopped), to wait for its
    /// exit.
    pub fn process(&mut self, id: u64) -> Option<&mut Process> {
        self.members.get_mut(&id).expect("member").process.as_mut()
    }

    /// The command that starts member `id` (`peers` only for a founding
    /// start), with a fresh certificate.
    pub fn command(&self, id: u64, peers: Option<&str>) -> tokio::process::Command {
        let certificate = self.pki.issue(
            &format!("member-{id}"),
            &format!("member-{id}"),
            Role::StoreMember,
            &[member_ip(id)],
        );
        let m = &self.members[&id];
        let program = m.program.clone().unwrap_or_else(|| PathBuf::from(ONCE));
        let mut command = process::command(program);
        command
            .args(["store", "--id", &id.to_string()])
            .args(certificate.flags())
            .args(["--raft-addr", &m.raft_addr.to_string()])
            .args(["--api-addr", &m.api_addr.to_string()])
            .args(["--admin-listen", &m.admin_addr.to_string()])
            .env("ONCE_ADMIN_TOKEN", ADMIN_TOKEN)
            // Members on one machine are under a millisecond apart:
            // pipeline anyway, so every scenario runs through lanes.
            .env("ONCE_STORE_PIPELINE_FROM_RTT", "0s")
            .arg("--data-dir")
            .arg(&m.data_dir)
            // Local members: fast elections keep the tests short (unless
            // the test sets its own timing).
            .args(if self.extra_args.iter().any(|a| a == "--heartbeat") {
                &[][..]
            } else {
                &[
                    "--heartbeat",
                    "100ms",
                    "--election-min",
                    "500ms",
                    "--election-max",
                    "1000ms",
                ][..]
            })
            .args(&self.extra_args)
            // openraft warns about every vote race of a fresh election: noise in CI logs.
            .env("RUST_LOG", "warn,openraft=error");
        if let Some(peers) = peers {
            command.args(["--peers", peers]);
        }
        command.envs(m.env.iter().map(|(k, v)| (k, v)));
        command
    }

    /// Replaces member `id`'s extra environment and the `once` binary it
    /// runs (`None`: this build's), from its next start on.
    pub fn set_env(&mut self, id: u64, env: MemberEnv, program: Option<PathBuf>) {
        let m = self.members.get_mut(&id).expect("member");
        m.env = env;
        m.program = program;
    }

    /// SIGKILL: no shutdown, no flush beyond what was already committed.
    pub async fn kill(&mut self, id: u64) {
        if let Some(mut process) = self.members.get_mut(&id).expect("member").process.take() {
            process.kill().await;
        }
    }

    pub fn endpoints(&self) -> Vec<String> {
        self.members.values().map(Member::endpoint).collect()
    }

    pub fn admin_endpoints(&self) -> Vec<String> {
        self.members.values().map(Member::admin_endpoint).collect()
    }

    /// A store client; an operator's unless `options` holds another identity.
    pub fn client(&self, options: ClientOptions) -> StoreClient {
        StoreClient::new(&self.endpoints(), self.with_tls(options)).expect("client")
    }

    /// The groups its members host besides the directory (their
    /// `--groups`).
    pub fn groups(&self) -> Vec<String> {
        self.extra_args
            .iter()
            .position(|a| a == "--groups")
            .and_then(|i| self.extra_args.get(i + 1))
            .map(|g| g.split(',').map(str::to_owned).collect())
            .unwrap_or_default()
    }

    /// An operator's client of every group, routing each tenant to its own.
    pub fn store_groups(&self) -> StoreGroups {
        StoreGroups::new(&self.endpoints(), &self.groups(), self.client_options()).expect("clients")
    }

    /// The flags that name its groups to a node or a router (none for a
    /// cluster of one group).
    pub fn store_groups_flags(&self) -> Vec<String> {
        let groups = self.groups();
        if groups.is_empty() {
            return Vec::new();
        }
        vec!["--store-groups".into(), groups.join(",")]
    }

    /// An operator's store client of group `group` (`once store --groups`):
    /// the members' client API under `/groups/<group>`.
    pub fn group_client(&self, group: &str) -> StoreClient {
        let endpoints = once_store_client::groups::group_endpoints(&self.endpoints(), group);
        StoreClient::new(&endpoints, self.client_options()).expect("client")
    }

    /// `options` with the operator's certificate, unless they hold one.
    pub fn with_tls(&self, mut options: ClientOptions) -> ClientOptions {
        options.tls.get_or_insert_with(|| self.operator_tls.clone());
        options
    }

    /// Client options with the operator's certificate.
    pub fn client_options(&self) -> ClientOptions {
        self.with_tls(ClientOptions::default())
    }

    /// The test's identity: an operator holding [`ADMIN_TOKEN`].
    pub fn operator(&self) -> admin::Operator {
        admin::Operator::with_tls(
            Some(&once_edge::AdminToken::new(ADMIN_TOKEN).unwrap()),
            Some(&self.operator_tls),
        )
    }

    /// A certificate of this cluster's CA for `role` (a node's, a router's).
    pub fn identity(&self, name: &str, role: Role) -> Tls {
        self.pki.tls(name, "test", role)
    }

    /// `--tls-*` flags of a process of `role` (a `once node`, a `once
    /// router`) that uses this cluster.
    pub fn tls_flags(&self, name: &str, role: Role) -> Vec<String> {
        self.pki.issue(name, "test", role, &[]).flags()
    }

    /// An HTTP client presenting a certificate of this cluster's CA for
    /// `role` (a node behind routers answers routers and operators).
    pub fn http_client_as(&self, name: &str, role: Role) -> reqwest::Client {
        self.pki
            .tls(name, "test", role)
            .http_client()
            .build()
            .expect("client")
    }

    pub async fn status(&self, id: u64) -> Option<Status> {
        self.operator()
            .status(&self.members[&id].endpoint())
            .await
            .ok()
    }

    /// Waits until one of `among` leads and every running one of them
    /// agrees; returns the leader.
    pub async fn wait_for_leader(&self, among: &[u64]) -> u64 {
        eventually(Duration::from_secs(30), || async {
            let mut leader = None;
            for id in among {
                let status = self.status(*id).await?;
                let l = status.leader?;
                if leader.is_some_and(|x| x != l) || !among.contains(&l) {
                    return None;
                }
                leader = Some(l);
            }
            let l = leader?;
            (self.status(l).await?.leader == Some(l)).then_some(l)
        })
        .await
    }

    /// Waits until every member in `ids` has applied as far as the leader.
    pub async fn wait_for_convergence(&self, ids: &[u64]) {
        eventually(Duration::from_secs(60), || async {
            let mut applied = Vec::new();
            for id in ids {
                applied.push(self.status(*id).await?.applied_index);
            }
            let first = applied[0];
            (first.is_some() && applied.iter().all(|a| *a == first)).then_some(())
        })
        .await
    }

    /// Member `id`'s applied records, sorted by scope.
    pub async fn records(&self, id: u64) -> Vec<Record> {
        let url = format!("https://{}{RECORDS_PATH}", self.members[&id].admin_addr);
        let bytes = self
            .operator()
            .http()
            .get(url)
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .expect("records")
            .bytes()
            .await
            .expect("body");
        let mut records: Vec<Record> =
            once_store_client::wire::decode(&bytes).expect("decodable records");
        records.sort_by(|a, b| a.scope.cmp(&b.scope));
        records
    }

    /// Cuts member `isolated` off from every other member, both ways.
    pub fn isolate(&self, isolated: u64) {
        for (id, m) in &self.members {
            if *id == isolated {
                for other in self.members.keys().filter(|o| **o != isolated) {
                    m.proxy.block(member_ip(*other));
                }
            } else {
                m.proxy.block(member_ip(isolated));
            }
        }
    }

    pub fn heal(&self) {
        for m in self.members.values() {
            m.proxy.heal();
        }
    }
}
