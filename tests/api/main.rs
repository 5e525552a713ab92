//! Integration tests of `once`: each scenario of the idempotency contract
//! against a real node (in-process on port 0, or a real `once` process),
//! on SQLite and on PostgreSQL.

mod client;
mod concurrency;
mod console;
mod contract;
mod crash;
mod database_clock;
mod deploy;
mod drills;
mod edge;
mod email_sink;
mod encryption;
mod events;
mod exposure;
mod group_commit;
mod helpers;
mod isolation;
mod lookups;
mod monitoring;
mod ops;
mod postgres_tls;
mod provider;
mod query_plans;
mod raft_store;
mod regions;
mod resolve;
mod roles;
mod router;
mod settling;
mod telemetry;
mod up;
mod validation;
mod webhooks;
