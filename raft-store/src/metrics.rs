//! A member's metrics in Prometheus text: per group it hosts, Raft leader,
//! term, commit and applied index, apply lag and each follower's
//! replication lag, wire versions and remembered clients, what pipelined
//! replication and the election timer did, which background tasks run
//! ([`crate::tasks`]), each series labelled
//! `group="<name>"` (`directory` for the first group); plus the edge's, one
//! set for the process. Rendered from each group's status at scrape time
//! (openraft's own metrics), so there is nothing to keep in sync;
//! `api_service` serves it: `/metrics` every group of the member,
//! `/groups/<name>/metrics` that group alone.

use std::borrow::Cow;

use axum::http::header;
use axum::response::IntoResponse;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use once_edge::EdgeMetrics;

use crate::leadership::election::ElectionMetrics;
use crate::pipeline::PipelineMetrics;
use crate::protocol::Status;
use crate::tasks::{TaskReport, TaskState};

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct Follower {
    follower: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct Task {
    task: String,
}

fn gauge(registry: &mut Registry, name: &str, help: &str, value: i64) {
    let g = Gauge::<i64>::default();
    g.set(value);
    registry.register(name, help, g);
}

/// The `group` label of the directory's series.
pub const DIRECTORY_LABEL: &str = once_store_client::groups::DIRECTORY;

/// What one group of a member reports.
#[derive(Debug)]
pub struct GroupReport<'a> {
    /// `directory`, or the group's name.
    pub group: String,
    pub status: Status,
    pub pipeline: &'a PipelineMetrics,
    pub elections: &'a ElectionMetrics,
    pub tasks: Vec<TaskReport>,
}

/// The member's metrics: the edge's once, then each group's under its
/// `group` label.
pub fn render(edge: &EdgeMetrics, groups: &[GroupReport<'_>]) -> impl IntoResponse + use<> {
    let mut registry = Registry::default();
    edge.register(&mut registry);
    for report in groups {
        let labelled = registry
            .sub_registry_with_label((Cow::Borrowed("group"), Cow::Owned(report.group.clone())));
        register_group(labelled, report);
    }
    let mut body = String::new();
    encode(&mut body, &registry).expect("writing to a String cannot fail");
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
}

fn register_group(registry: &mut Registry, report: &GroupReport<'_>) {
    report.pipeline.register(registry);
    report.elections.register(registry);
    let status = &report.status;
    let index = |i: Option<u64>| i64::try_from(i.unwrap_or(0)).unwrap_or(i64::MAX);
    gauge(
        registry,
        "raft_is_leader",
        "1 when this member leads",
        i64::from(status.leader == Some(status.id)),
    );
    gauge(
        registry,
        "raft_leader_id",
        "The member this one believes leads (0: none)",
        status.leader.map_or(0, |l| l as i64),
    );
    gauge(registry, "raft_term", "Current term", status.term as i64);
    gauge(
        registry,
        "raft_last_log_index",
        "Last log index",
        index(status.last_log_index),
    );
    gauge(
        registry,
        "raft_committed_index",
        "Committed index",
        index(status.committed_index),
    );
    gauge(
        registry,
        "raft_applied_index",
        "Applied index",
        index(status.applied_index),
    );
    gauge(
        registry,
        "raft_apply_lag",
        "Committed entries not yet applied to the state machine",
        index(status.committed_index).saturating_sub(index(status.applied_index)),
    );
    gauge(
        registry,
        "raft_wire_version",
        "The newest wire version this member speaks",
        i64::from(status.wire.speaks),
    );
    gauge(
        registry,
        "raft_cluster_wire_version",
        "The wire version the cluster has moved to, as this member applied it",
        i64::from(status.wire.cluster),
    );
    gauge(
        registry,
        "raft_remembered_clients",
        "Clients whose dedup entries the state machine remembers",
        index(status.remembered_clients),
    );
    let lag = Family::<Follower, Gauge>::default();
    for (id, behind) in &status.follower_lag {
        lag.get_or_create(&Follower {
            follower: id.to_string(),
        })
        .set(behind.map_or(-1, |b| b as i64));
    }
    registry.register(
        "raft_follower_lag",
        "Entries each follower is behind the leader (-1: none matched yet)",
        lag,
    );
    register_tasks(registry, &report.tasks);
}

fn register_tasks(registry: &mut Registry, tasks: &[TaskReport]) {
    let (running, failed) = (
        Family::<Task, Gauge>::default(),
        Family::<Task, Gauge>::default(),
    );
    for t in tasks {
        let label = Task {
            task: t.name.to_owned(),
        };
        running
            .get_or_create(&label)
            .set(i64::from(t.state == TaskState::Running));
        failed
            .get_or_create(&label)
            .set(i64::from(t.state == TaskState::Failed));
    }
    registry.register(
        "raft_background_task_running",
        "1 while the group's background task runs",
        running,
    );
    registry.register(
        "raft_background_task_failed",
        "1 when the task ended, or panicked, while its group ran",
        failed,
    );
}
