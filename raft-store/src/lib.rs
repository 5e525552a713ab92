//! raft-store: a *member* of the small, strongly consistent store that
//! holds idempotency records, business-key reservations and tenant
//! placement across regions (DESIGN §5, §6). One voter per region,
//! replicated with openraft 0.9 (storage-v2), log and state machine on disk
//! in redb. `once store` runs one.
//!
//! Clients do not link this crate: the records, commands, placement and
//! region status, the client API's messages and its postcard wire format,
//! the store client and the operator client are in `once-store-client`
//! (no openraft, no redb), which node, router and drill use. This crate
//! re-exports its [`command`], [`protocol`] and [`wire`] modules and
//! [`NodeId`], so the member and its clients share one definition of each
//! type; openraft's own types (membership, server state, log ids) stay on
//! this side and are converted to the plain ones at the edge (the
//! `/api/status` answer is built in [`api_service`]).
//!
//! # Layout
//!
//! Split like openraft's `raft-kv-rocksdb` example:
//!
//! - **types**: [`types`] — the openraft type configuration and aliases.
//! - **commands**: [`command`] (from `once-store-client`) — what the log
//!   carries (claim, complete, fail, advance step, take over, mark unknown,
//!   resolve, expire, purge, set placement, region status), the record they
//!   act on, and the `(client id, seq)` envelope.
//! - **log store**: [`log_store`] — the Raft log, vote and purge marker in redb.
//!   [`disk_fault`]: a simulated full disk under it, for the storage-fault
//!   tests (`failpoints` builds).
//! - **state machine**: [`state_machine`] (storage, building and installing
//!   snapshots), [`snapshot_file`] (the snapshot format and files, streamed
//!   row by row), [`snapshot_policy`] (when a member builds one: once its
//!   log weighs half the last snapshot) and
//!   [`apply`] (the deterministic apply of one command, with dedup; the
//!   tables and their derived indexes: unfinished records, payments by id,
//!   each tenant's listing, and the sweeper's schedule, so expiry and purge
//!   read only the records that are due), [`sessions`] (the dedup table's
//!   floors, when each client was last seen, forgetting idle clients),
//!   [`evacuation`] (a region's failover as one row that placements are
//!   read through, whatever the number of tenants), [`directory`] (which
//!   group each tenant lives in, in the first group of a deployment that
//!   runs one per home region), [`known_regions`] (the cluster's regions:
//!   a placement, status, move or evacuation naming another is refused on
//!   apply).
//! - **network**: [`network`] (sending Raft RPC over HTTP, error mapping;
//!   one peer's RPC in [`link`]),
//!   [`raft_service`] (receiving it), [`wire`] (postcard bodies, from
//!   `once-store-client`), [`pipeline`] (several appends in flight to a
//!   follower, sent as the leader's log receives them),
//!   [`pipeline_gate`] (the follower handing them to raft in order) and
//!   `append_in_flight` (an append that runs to its answer however long
//!   openraft waits, decision 0070).
//! - **member**: [`server`] (start, listeners), `bootstrap` (a new
//!   cluster's first entry, once every founding peer is blank), [`config`]
//!   (timeouts and limits with WAN defaults), [`api_service`] (client API
//!   and admin endpoints, answering [`protocol`]'s messages),
//!   [`group_commit`], [`metrics`], [`clock`] (leader-stamped time and the
//!   clock checks between members), [`tasks`] (the owner of each group's
//!   background tasks: started, stopped with the member, reported),
//!   [`housekeeping`] (what
//!   the leader proposes on its own: a new wire version, forgetting idle
//!   clients).
//! - **leadership**: [`leadership`] — what raft-store does instead of
//!   openraft 0.9 (decision 0096): [`leadership::election`] (when a member
//!   campaigns: its own timer and a pre-vote, [`leadership::pre_vote`], so
//!   a member that cannot win raises no term; [`leadership::succession`],
//!   who campaigns first in a home region's group),
//!   [`leadership::read_index`] (linearizable reads by its own leadership
//!   check) and `quorum` (a majority of every voter configuration).
//! - **versions**: [`wire_versions`] — which wire version each member
//!   speaks, as heard on Raft RPC; the cluster moves to a new one only once
//!   every member speaks it, so two releases run side by side in a roll.
//! - **trust**: [`authz`] — who may call what, by the identity of the
//!   caller's client certificate: members speak Raft, nodes and routers
//!   use their role's commands and reads, operators the rest. All three
//!   listeners serve mutual TLS (`once-tls`) unless the member runs with
//!   `--insecure-plaintext`.
//! - **simulated WAN**: [`wan`] — member regions, a per-RPC latency between
//!   regions and partitions (an isolated member, regions cut off from a
//!   member), enforced by the transports themselves. The client's side of
//!   it (its region header, recognising a refusal, the partition switch's
//!   messages) is `once_store_client::wan`, which [`wan`] re-exports.
//! - **clients** (in `once-store-client`): `client::StoreClient` (the
//!   library node and router use), `admin` (operator actions). The claim
//!   benchmark behind `once store bench` lives with that command in the
//!   `once` binary.
//!
//! ```text
//!  node / router ── StoreClient ──► member API listener ──► group commit ──► raft.client_write ─┐
//!                   (leader hint,     (postcard)             (one entry,                        │
//!                    same seq on                              many requests)                    ▼
//!                    every retry)                                           leader ── Raft RPC listener ──► followers
//!                                                                             │        (postcard over HTTP)
//!                                        apply (deterministic, dedup) ◄───────┘ committed entries
//! ```
//!
//! # Why redb
//!
//! redb is an embedded, pure-Rust, ACID key-value store: a commit with the
//! default `Durability::Immediate` is atomic and fsynced before it returns,
//! which is exactly the contract openraft needs from `append`, `save_vote`
//! and `purge`, with no C++ toolchain (RocksDB) and no write-ahead log of
//! our own to get right. Its MVCC read transactions never block the writer,
//! so reads and snapshot building run beside apply. The log and the state
//! machine live in two files (`log.redb`, `state.redb`) so a log append
//! never waits for an apply commit. The cost: one fsync per append batch on
//! each member, which group commit amortises; the state machine commits
//! without fsync and catches up from the log after a crash
//! ([`state_machine`] says why that is safe).
//!
//! # Durability contract
//!
//! - `append` fires its `LogFlushed` callback only after its redb commit
//!   returned; `save_vote` returns only after its commit.
//! - `truncate(id)` is inclusive; `purge(id)` writes the last purged id in
//!   the same transaction that deletes the entries.
//! - `apply` commits the effects of its entries and the new `last_applied`
//!   in one transaction, so after a crash the state machine is exactly at
//!   some applied index and openraft replays the rest from the log. Those
//!   commits are durable at least every second and before every snapshot,
//!   not one by one (the log is the durable copy).
//! - openraft's storage conformance suite (`Suite::test_all`) runs against
//!   these files in `tests/conformance.rs`.
//!
//! # Exactly once per command
//!
//! Every client command carries `(client id, seq)`. Apply stores each reply
//! under that pair; the same pair applied again (a retry after a timeout or
//! a leader change, even one that lands in the same batch) returns the
//! stored reply and changes nothing. The client reports `acked_below`, the
//! lowest seq it is still waiting on; replies below it are forgotten, and a
//! copy arriving after that is refused (`StaleSequence`) rather than
//! applied.
//!
//! # Time, leases and clocks
//!
//! Apply never reads a clock: every command carries `now`, and the leader
//! overwrites it with its own clock in group commit, just before
//! proposing ([`clock`], [`group_commit`]). No caller's clock decides a
//! lease, a takeover or an expiry. A leader stamps only while its clock
//! agrees with a majority of the voters' (each Raft RPC carries the
//! sender's clock and each answer the responder's); otherwise it refuses
//! writes and steps down, and a member that knows its clock is off does not
//! campaign. Fencing still makes any clock safe for completions: a finished
//! record accepts no owner write and no lease takeover.
//!
//! # Reads
//!
//! - Linearizable reads use a read index, raft-store's own (openraft's
//!   gives a quorum one heartbeat to answer), coalesced: concurrent readers
//!   share one leadership round and one wait for apply
//!   ([`leadership::read_index`]).
//! - A final record (`COMPLETED`, `FAILED_REPLAYABLE`) may be read from any
//!   member's local copy: inside its replay window a final record never
//!   changes (owner writes and lease takeovers only touch unfinished
//!   records; restart only `FAILED_RETRYABLE`; renew only an expired one),
//!   so any member that has applied it returns the same bytes the leader
//!   would. A member that has not applied it yet says so, and the client
//!   reads from the leader. The one change a final record still undergoes,
//!   expiry, is decided by the reader from `expires_at` anyway.
//!
//! # Simulated WAN
//!
//! Latency and failover drills run on one machine, inside the project's own
//! transports ([`wan`]): `once store --region R --peer-regions 1=eu,2=us
//! --wan-latency MS` makes every Raft RPC to a member of another region
//! wait `MS` before it is sent (default: each member its own region, so
//! every RPC waits); the store client's `ClientOptions::wan_latency`
//! (`once-store-client`) does the same for a client's requests to members
//! beyond its `local_endpoints`.
//! `POST /admin/partition {"isolated": true}` cuts a member's region off:
//! its Raft RPCs to and from other regions (`X-Once-Region`) fail as
//! `Unreachable`, and clients declaring another region
//! (`X-Once-Client-Region`) are refused as never sent.
//! `POST /admin/partition {"cut_regions": ["eu-west"]}` is the same seen
//! from the other side: this member neither sends to nor accepts Raft RPCs
//! from eu-west's members, and refuses clients declaring eu-west.
//! `{"refuse_from": ["eu-west"]}` is half of that, a one-way cut: this
//! member refuses eu-west's Raft RPCs and clients but still sends to
//! eu-west. A partition of one region is isolation plus cuts (the drill's
//! `--mode partition`):
//!
//! ```text
//!  eu-west member: isolated            us-east, ap-south members: cut_regions [eu-west]
//!    ✗ RPC to/from us-east, ap-south      ✗ RPC to/from eu-west    ✓ between themselves
//!    ✗ clients declaring us-east, ...     ✗ clients declaring eu-west
//! ```
//!
//! ```text
//!  client (eu) ──0──► member 1 (eu, leader) ──RTT──► member 2 (us)   quorum = 2: the first
//!  client (eu) ─RTT─► member 3 (ap, leader) ──RTT──► member 1 (eu)   answer commits
//! ```
//!
//! A claim needs one RTT for the quorum, plus one to reach a remote leader.
//! openraft 0.9 keeps one append in flight per follower, and after each
//! commit it sends every follower an empty append with the new commit
//! index; [`network`] answers that notice at once and sends it in the
//! background, so the next write never queues behind it (measured in
//! `BENCHMARKS.md`).
//!
//! # Throughput
//!
//! Group commit ([`group_commit`]) puts every request queued on the leader
//! into one raft entry (up to 512), with up to 8 entries in flight, so one
//! append, one replication round trip and one fsync per member serve many
//! claims; batches grow with load and no timer holds a lone request back.

// openraft's `StorageError` is over 200 bytes and its storage traits return
// it; our storage helpers return the same type rather than box it and
// convert at every trait boundary.
#![allow(clippy::result_large_err)]

pub mod api_service;
pub(crate) mod append_in_flight;
pub mod apply;
pub mod authz;
mod bootstrap;
pub mod clock;
pub mod config;
pub mod directory;
pub mod disk_fault;
pub mod evacuation;
pub mod group_commit;
pub mod housekeeping;
pub mod known_regions;
pub mod leadership;
pub mod link;
pub mod log_store;
pub mod metrics;
pub mod network;
pub mod pipeline;
pub mod pipeline_gate;
pub mod raft_service;
pub mod server;
pub mod sessions;
pub mod snapshot_file;
pub mod snapshot_policy;
pub mod state_machine;
pub mod tasks;
pub mod types;
pub mod wan;
pub mod wire_versions;

/// The types the member shares with its clients, defined once in
/// `once-store-client`.
pub use once_store_client::{NodeId, command, protocol, wire};
