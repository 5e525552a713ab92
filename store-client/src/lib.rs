//! once-store-client: everything a process needs to *use* raft-store
//! without running a member. The node, the router, the drill and the
//! `once` binary's operator commands link this crate; only a member
//! (`once_raft_store`, behind `once store`) links openraft and redb, and
//! it shares these very types with its clients (it re-exports [`command`],
//! [`protocol`] and [`wire`]), so both sides have one definition of each.
//!
//! # Layout
//!
//! - **records and commands**: [`command`] — the idempotency record (its
//!   status, step and stored response are the node's own: one definition,
//!   with the canonical names its `sql` mode stores), its scope and
//!   business key, tenant placement and region status, the commands a
//!   client proposes (claim, complete, fail, advance step, take over, mark
//!   unknown, resolve, expire, purge, set placement, region status), their
//!   replies, and the `(client id, seq)` envelope and batch the member's log
//!   carries. Plain serde data: no clock, no openraft.
//! - **client protocol**: [`protocol`] — the client API's paths and
//!   messages (`Answer`, `Read`, `RecordQuery`, `ReadReply`, the member
//!   `Status`, membership requests), all in plain types: member ids are
//!   [`NodeId`] (`u64`), a member's raft state is its name.
//! - **wire format**: [`wire`] — postcard bodies (`encode`, `decode`, and
//!   the axum `Postcard` extractor/response the member and test fakes use).
//! - **simulated WAN, client side**: [`wan`] — the header a client declares
//!   its region in, how a partition refusal is recognised, and the
//!   partition switch's messages (the member enforces the WAN).
//! - **store client**: [`client`] — [`client::StoreClient`] with
//!   [`client::ClientOptions`]: leader hint, retries with the same
//!   `(client, seq)`, ambiguity reported rather than guessed.
//! - **groups**: [`groups`] — a deployment with one Raft group per home
//!   region: a client per group, and which group each tenant lives in.
//! - **operator client**: [`admin`] — [`admin::Operator`] and the actions
//!   behind `once store status | add-learner | change-membership |
//!   snapshot | partition`, over each member's admin listener.
//!
//! ```text
//!  node / router / drill / once store <admin> ── this crate ──► member's API and admin listeners
//!                                                                 (once_raft_store: openraft + redb)
//! ```

pub mod admin;
pub mod client;
pub mod command;
pub mod groups;
pub mod protocol;
pub mod wan;
pub mod wire;

/// A member's id: one voter per region, numbered by the operator. The
/// member's openraft type configuration uses this same type.
pub type NodeId = u64;
