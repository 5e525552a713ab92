//! Who leads, and whether it still does: the parts of leadership that
//! raft-store does itself instead of openraft 0.9
//! (docs/decisions/0096-raft-store-stays-on-openraft-0-9.md).
//!
//! - [`election`]: when a member campaigns (its own timer, counting
//!   silence past its own stalls; openraft's is off), with a pre-vote
//!   ([`pre_vote`]) so a member that cannot win raises no term, and, in a
//!   home region's group, [`succession`]: who campaigns first.
//! - [`read_index`]: linearizable reads by raft-store's own leadership
//!   check, within the append budget.
//! - `quorum`: a majority of every voter configuration, and the voters to
//!   ask, shared by the pre-vote and the read index.
//!
//! Their RPCs (`rpc`) go over each peer's [`crate::link::Link`], never
//! through a replication [`crate::network::Connection`]: a read index probe
//! or a pre-vote opens no lane and confirms nothing for replication; so
//! `network` needs nothing from here.

pub mod election;
pub mod pre_vote;
pub(crate) mod quorum;
pub mod read_index;
mod rpc;
pub mod succession;
