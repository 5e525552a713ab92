//! Leadership's own RPCs — campaign requests, pre-votes, the read index's
//! probes — each one call over the peer's [`crate::link::Link`]. None goes
//! through a replication [`crate::network::Connection`]: its answer
//! confirms nothing for replication, and no pipeline lane is opened for it.

use std::time::Duration;

use openraft::network::{RPCOption, RPCTypes};

use crate::leadership::pre_vote::{PreVote, PreVoteError, PreVoteRequest};
use crate::link::{CAMPAIGN_PATH, PREVOTE_PATH};
use crate::network::Network;
use crate::types::{AppendEntriesRequest, AppendEntriesResponse, Node, NodeId, RpcError};

impl Network {
    /// Asks member `target` to start an election now. It answers `false`
    /// without campaigning while its clock disagrees with the cluster's (it
    /// could not win, and its higher term would only depose the leader).
    pub async fn ask_to_campaign(
        &mut self,
        target: NodeId,
        node: &Node,
        timeout: Duration,
    ) -> Result<bool, RpcError> {
        self.election_call(target, node, CAMPAIGN_PATH, &(), timeout)
            .await
    }

    /// Asks voter `target` whether it would vote for this member
    /// ([`crate::leadership::election`]).
    pub async fn pre_vote(
        &mut self,
        target: NodeId,
        node: &Node,
        request: PreVoteRequest,
        timeout: Duration,
    ) -> Result<PreVote, PreVoteError> {
        let answer = self
            .election_call(target, node, PREVOTE_PATH, &request, timeout)
            .await;
        match answer {
            Ok(answer) => Ok(answer),
            Err(e) if crate::link::is_not_served(&e) => Err(PreVoteError::NotServed),
            Err(e) => Err(PreVoteError::Failed(Box::new(e))),
        }
    }

    /// One election RPC (a campaign request, a pre-vote) to member `target`.
    async fn election_call<Req: serde::Serialize, Resp: serde::de::DeserializeOwned>(
        &mut self,
        target: NodeId,
        node: &Node,
        path: &str,
        request: &Req,
        timeout: Duration,
    ) -> Result<Resp, RpcError> {
        self.link_to(target, node)
            .call::<Req, Resp, openraft::error::Infallible>(
                path,
                RPCTypes::Vote,
                request,
                0,
                &RPCOption::new(timeout),
                None,
            )
            .await
    }

    /// Asks voter `target` whether it still takes `probe`'s vote (the read
    /// index's leadership check, [`crate::leadership::read_index`]): one
    /// append over the peer's link, within `budget`. Not through a
    /// [`crate::network::Connection`]: the answer confirms nothing for replication, and no
    /// lane is opened for it.
    pub async fn probe(
        &self,
        target: NodeId,
        node: &Node,
        probe: &AppendEntriesRequest,
        budget: Duration,
    ) -> Result<AppendEntriesResponse, RpcError> {
        self.link_to(target, node)
            .append(probe, &RPCOption::new(budget), None)
            .await
    }
}
