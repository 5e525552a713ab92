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

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[NodeId]) -> BTreeSet<NodeId> {
        ids.iter().copied().collect()
    }

    #[test]
    fn a_majority_is_more_than_half_of_the_voters_never_half() {
        let three = [set(&[1, 2, 3])];
        assert!(!majority_of_every(&three, &set(&[1])));
        assert!(majority_of_every(&three, &set(&[1, 2])));
        let four = [set(&[1, 2, 3, 4])];
        assert!(
            !majority_of_every(&four, &set(&[1, 2])),
            "two of four is no majority: the other two could elect another leader"
        );
        assert!(majority_of_every(&four, &set(&[1, 2, 3])));
    }

    #[test]
    fn during_a_joint_change_each_configuration_needs_its_own_majority() {
        let joint = [set(&[1, 2, 3]), set(&[3, 4, 5])];
        assert!(
            !majority_of_every(&joint, &set(&[1, 2, 3])),
            "a majority of the old voters alone does not speak for the new"
        );
        assert!(!majority_of_every(&joint, &set(&[3, 4, 5])));
        assert!(majority_of_every(&joint, &set(&[1, 3, 4])));
    }

    #[test]
    fn answers_from_members_outside_every_configuration_count_for_nothing() {
        let three = [set(&[1, 2, 3])];
        assert!(!majority_of_every(&three, &set(&[1, 7, 8, 9])));
    }
}
