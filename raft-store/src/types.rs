//! The openraft type configuration of raft-store and short aliases for the
//! generic openraft types it is used with, so the rest of the crate reads
//! `LogId` instead of `openraft::LogId<NodeId>`.

use crate::command::{Batch, BatchReply};

/// A member's id: one voter per region, numbered by the operator (a plain
/// `u64`, defined beside the client protocol that carries it).
pub use once_store_client::NodeId;

openraft::declare_raft_types!(
    /// raft-store's type configuration: a log entry carries one [`Batch`] of
    /// client requests (group commit) and applying it yields one reply each.
    pub TypeConfig:
        D = Batch,
        R = BatchReply,
        NodeId = NodeId,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = tokio::fs::File,
        AsyncRuntime = openraft::TokioRuntime,
);

pub type Raft = openraft::Raft<TypeConfig>;
pub type Node = openraft::BasicNode;
pub type Entry = openraft::Entry<TypeConfig>;
pub type LogId = openraft::LogId<NodeId>;
pub type Vote = openraft::Vote<NodeId>;
pub type StoredMembership = openraft::StoredMembership<NodeId, Node>;
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, Node>;
pub type Snapshot = openraft::Snapshot<TypeConfig>;
/// A snapshot's bytes: a file of [`crate::snapshot_file`]'s format.
pub type SnapshotData = tokio::fs::File;
pub type StorageError = openraft::StorageError<NodeId>;
pub type StorageIOError = openraft::StorageIOError<NodeId>;
pub type LogState = openraft::storage::LogState<TypeConfig>;
pub type RaftMetrics = openraft::RaftMetrics<NodeId, Node>;

pub type RaftError<E = openraft::error::Infallible> = openraft::error::RaftError<NodeId, E>;
pub type RpcError<E = openraft::error::Infallible> =
    openraft::error::RPCError<NodeId, Node, RaftError<E>>;
pub type ClientWriteError = openraft::error::ClientWriteError<NodeId, Node>;
pub type CheckIsLeaderError = openraft::error::CheckIsLeaderError<NodeId, Node>;
pub type InstallSnapshotError = openraft::error::InstallSnapshotError;

pub type AppendEntriesRequest = openraft::raft::AppendEntriesRequest<TypeConfig>;
pub type AppendEntriesResponse = openraft::raft::AppendEntriesResponse<NodeId>;
pub type VoteRequest = openraft::raft::VoteRequest<NodeId>;
pub type VoteResponse = openraft::raft::VoteResponse<NodeId>;
pub type InstallSnapshotRequest = openraft::raft::InstallSnapshotRequest<TypeConfig>;
pub type InstallSnapshotResponse = openraft::raft::InstallSnapshotResponse<NodeId>;
