//! Who must answer for a round to speak for the cluster: a majority of
//! every voter configuration (two during a joint membership change), and
//! the other voters to ask. Shared by the pre-vote ([`crate::leadership::election`])
//! and the read index's leadership check ([`crate::leadership::read_index`]).

use std::collections::BTreeSet;

use crate::types::{Node, NodeId, RaftMetrics};

/// The voter configurations of `metrics`' membership, and every voter in
/// them but `me`, with its address.
pub(crate) fn voters_but(
    metrics: &RaftMetrics,
    me: NodeId,
) -> (Vec<BTreeSet<NodeId>>, Vec<(NodeId, Node)>) {
    let membership = metrics.membership_config.membership();
    let configs = membership.get_joint_config().clone();
    let others = membership
        .nodes()
        .filter(|(peer, _)| **peer != me && configs.iter().any(|c| c.contains(peer)))
        .map(|(peer, node)| (*peer, node.clone()))
        .collect();
    (configs, others)
}

/// Whether `yes` holds a majority of every configuration in `configs`.
pub(crate) fn majority_of_every(configs: &[BTreeSet<NodeId>], yes: &BTreeSet<NodeId>) -> bool {
    configs
        .iter()
        .all(|c| c.iter().filter(|v| yes.contains(v)).count() > c.len() / 2)
}
