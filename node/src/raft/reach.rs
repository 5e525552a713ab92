//! Whether raft-store's leader is in reach, as this node last had word of
//! it: a watch that asks the nearest member that has heard the leader
//! for its status every [`ASK_EVERY`] in the background
//! ([`StoreClient::nearest_status`], decision 0065), so
//! `/readyz` judges the store without a network call of its own.
//!
//! A word ages: a member that had heard its leader `ago` ms before it
//! answered is taken to have heard it `ago` plus the time since the
//! question was sent, and past [`READY_LEASES`] of its leases the word no
//! longer says the leader is in reach. So a watch that stops getting
//! answers (its member blackholed, the node starved) turns the node not
//! ready within two leases, never ready on an old answer
//! (docs/decisions/0059-the-node-watches-the-stores-reach.md, 0066).
//!
//! With a Raft group per home region, [`StoreReaches`] watches every group,
//! judges by the directory and the node's own region's group, and tells
//! routers which groups' leaders are in reach (decision 0065).
//!
//! Why not ask in the probe: a region whose own member died asks a member
//! of another region, a WAN round trip inside the router's check budget,
//! while the other regions ask their own members. On a loaded machine three
//! such probes in a row can miss the budget, and the router fails that
//! region over for a member it does not need (the likeliest cause of the
//! one failover a CI run counted, RELIABILITY.md finding 9).

use std::sync::Arc;
use std::time::Duration;

use once_store_client::client::StoreClient;
use once_store_client::groups::{DIRECTORY, StoreGroups};
use once_store_client::protocol::Status;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};

/// How often the watch asks. A tenth of a second: a fraction of any lease,
/// and of the router's check interval, for one small local request.
pub const ASK_EVERY: Duration = Duration::from_millis(100);

/// How many of its member's leases a node stays ready since the leader
/// was last heard. One lease missed — appends timing out on a loaded
/// machine, a leader's hand-off — sent a region's tenants elsewhere for
/// nothing; a node whose leader is really gone waits a lease longer before
/// its router counts it cut off, and one killed with its region fails its
/// probes at once (decision 0066).
pub const READY_LEASES: u64 = 2;

/// The longest one question may take before the watch gives up on it and
/// asks again (meanwhile the last word ages).
const ASK_LIMIT: Duration = Duration::from_secs(2);

/// The latest word from a member, and when the question was sent: the
/// member's `leader_heard_ms_ago` was measured after that, so aging it from
/// then never makes it look fresher than it is.
#[derive(Debug, Clone)]
struct Word {
    asked_at: Instant,
    /// `None`: no member answered.
    status: Option<Status>,
}

/// The watch: asks in the background while it lives.
#[derive(Debug)]
pub struct StoreReach {
    latest: watch::Receiver<Option<Word>>,
    asking: JoinHandle<()>,
}

impl StoreReach {
    /// Starts asking `client`'s nearest member, at once and then every
    /// [`ASK_EVERY`]. Must run inside a Tokio runtime.
    pub fn watch(client: Arc<StoreClient>) -> Self {
        let (tell, latest) = watch::channel(None);
        let asking = tokio::spawn(async move {
            let mut tick = tokio::time::interval(ASK_EVERY);
            // A slow answer delays the next question rather than bunching
            // questions up.
            tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let asked_at = Instant::now();
                // No answer in time: the last word stays, and ages.
                if let Ok(status) = tokio::time::timeout(ASK_LIMIT, client.nearest_status()).await {
                    tell.send_replace(Some(Word { asked_at, status }));
                }
            }
        });
        Self { latest, asking }
    }

    /// `Some(Ok)` while the latest word, aged, says a leader is in reach;
    /// `Some(Err(why))` when it says not. `None` when there is no word to
    /// judge by: none yet, no member answered, or the member predates the
    /// fields — then ask the leader.
    pub fn judge(&self) -> Option<Result<(), String>> {
        // Judged in place: a word is a member's whole status.
        let latest = self.latest.borrow();
        let word = latest.as_ref()?;
        let elapsed = word.asked_at.elapsed();
        let verdict = word
            .status
            .as_ref()?
            .leader_in_reach_within(elapsed, READY_LEASES)?;
        Some(
            verdict.map_err(|why| format!("{why} (word asked for {} ms ago)", elapsed.as_millis())),
        )
    }

    /// How long ago the nearest member's leader was last heard: what the
    /// member said, plus the time since the question was sent. `None`
    /// without a word, or when the member knows no leader or has not heard
    /// it.
    pub fn leader_heard(&self) -> Option<Duration> {
        let latest = self.latest.borrow();
        let word = latest.as_ref()?;
        let ago = word
            .status
            .as_ref()?
            .leader_heard_ms(word.asked_at.elapsed())?;
        Some(Duration::from_millis(ago))
    }
}

impl Drop for StoreReach {
    fn drop(&mut self) {
        self.asking.abort();
    }
}

/// The groups a node's readiness judges (decision 0063): the directory —
/// every tenant's first request and the regions' status go there — and the
/// group homed in the node's region, which holds its tenants' records. A
/// node whose tenants' group has no leader in reach cannot serve them, even
/// while the directory's leader answers. Other regions' groups are watched
/// but not judged: their tenants come here only after a failover, and a
/// region must not look down for an election in a group it does not
/// serve; what this node sees of them tells a router whether a region
/// waiting on its own group is cut off from it or the group has no leader
/// anywhere (decision 0065).
#[derive(Debug)]
pub struct StoreReaches {
    /// The directory's first.
    watches: Vec<Watched>,
}

#[derive(Debug)]
struct Watched {
    /// The group's name as routers and metrics know it: `directory`, or
    /// the region it is homed in.
    group: String,
    /// Whether readiness judges by it.
    judged: bool,
    watch: StoreReach,
}

impl Watched {
    /// How a verdict names the group.
    fn label(&self) -> String {
        if self.group == DIRECTORY {
            "the directory".to_owned()
        } else {
            format!("group {}", self.group)
        }
    }
}

impl StoreReaches {
    /// Starts watching the directory and every group of `groups`; the
    /// directory and the one named `region`, if any, are judged.
    pub fn watch(groups: &StoreGroups, region: &str) -> Self {
        let watches = groups
            .all()
            .map(|(name, client)| Watched {
                group: name.unwrap_or(DIRECTORY).to_owned(),
                judged: name.is_none_or(|name| name == region),
                watch: StoreReach::watch(client.clone()),
            })
            .collect();
        Self { watches }
    }

    fn judged(&self) -> impl Iterator<Item = &Watched> {
        self.watches.iter().filter(|w| w.judged)
    }

    /// The judged watches' verdicts ([`StoreReach::judge`]) together: the
    /// first that says a leader is out of reach, named by its group; else
    /// `None` if any has no word to judge by; else in reach.
    pub fn judge(&self) -> Option<Result<(), String>> {
        let mut every_word = true;
        for watched in self.judged() {
            match watched.watch.judge() {
                Some(Err(why)) => return Some(Err(format!("{}: {why}", watched.label()))),
                Some(Ok(())) => {}
                None => every_word = false,
            }
        }
        every_word.then_some(Ok(()))
    }

    /// Every watched group whose leader is in reach, and the judged ones
    /// whose leader is not (or that have no word to judge by).
    pub fn groups(&self) -> once_edge::ops::StoreGroups {
        let mut groups = once_edge::ops::StoreGroups::default();
        for watched in &self.watches {
            let in_reach = watched.watch.judge() == Some(Ok(()));
            if in_reach {
                groups.in_reach.insert(watched.group.clone());
            } else if watched.judged {
                groups.waiting_on.insert(watched.group.clone());
            }
        }
        groups
    }

    /// How long ago the judged leader heard least recently was heard:
    /// `None` if any judged watch cannot say.
    pub fn leader_heard(&self) -> Option<Duration> {
        self.judged()
            .map(|watched| watched.watch.leader_heard())
            .try_fold(Duration::ZERO, |worst, heard| Some(worst.max(heard?)))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use axum::Json;
    use axum::extract::State;
    use once_store_client::client::ClientOptions;
    use once_store_client::protocol::STATUS_PATH;

    use super::*;

    /// What the fake member does with a status request.
    #[derive(Clone)]
    enum Member {
        Answers(Box<Status>),
        /// Takes the question and never answers.
        Hangs,
    }

    type Shared = Arc<Mutex<Member>>;

    async fn status(State(member): State<Shared>) -> Json<Status> {
        let now = member.lock().unwrap().clone();
        match now {
            Member::Answers(status) => Json(*status),
            Member::Hangs => std::future::pending().await,
        }
    }

    async fn fake_member(member: Shared) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let app = axum::Router::new()
            .route(STATUS_PATH, axum::routing::get(status))
            .with_state(member);
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        url
    }

    fn heard(ago_ms: u64, lease_ms: Option<u64>) -> Status {
        Status {
            id: 2,
            leader: Some(1),
            leader_heard_ms_ago: Some(ago_ms),
            leader_lease_ms: lease_ms,
            ..Status::default()
        }
    }

    /// Polls `judge` until `done` says it is what the test waits for.
    async fn until(
        judge: impl Fn() -> Option<Result<(), String>>,
        done: impl Fn(&Option<Result<(), String>>) -> bool,
    ) -> Option<Result<(), String>> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let verdict = judge();
            if done(&verdict) {
                return verdict;
            }
            assert!(Instant::now() < deadline, "still {verdict:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn the_last_word_ages_past_the_lease_when_the_member_stops_answering() {
        let member: Shared = Arc::new(Mutex::new(Member::Answers(Box::new(heard(10, Some(300))))));
        let url = fake_member(member.clone()).await;
        let client = Arc::new(StoreClient::new(&[url], ClientOptions::default()).unwrap());
        let reach = StoreReach::watch(client);
        assert_eq!(reach.judge(), None, "no word yet: ask the leader");

        until(|| reach.judge(), |v| *v == Some(Ok(()))).await;

        // The member goes silent: no new word, and the last one, heard
        // 10 ms before it answered, is past two 300 ms leases soon after.
        *member.lock().unwrap() = Member::Hangs;
        let stale = until(|| reach.judge(), |v| matches!(v, Some(Err(_)))).await;
        let why = stale.unwrap().unwrap_err();
        assert!(why.contains("past 2 of its 300 ms leases"), "{why}");
        assert!(why.contains("word asked for"), "{why}");
    }

    #[tokio::test]
    async fn a_member_that_predates_the_fields_leaves_it_to_the_leader() {
        let member: Shared = Arc::new(Mutex::new(Member::Answers(Box::new(heard(10, None)))));
        let url = fake_member(member.clone()).await;
        let client = Arc::new(StoreClient::new(&[url], ClientOptions::default()).unwrap());
        let reach = StoreReach::watch(client);
        // A word arrives (the question is answered) but judges nothing.
        reach.latest.clone().changed().await.unwrap();
        assert_eq!(reach.judge(), None);

        // Then a newer member, which has lost its leader.
        *member.lock().unwrap() = Member::Answers(Box::new(Status {
            leader: None,
            ..heard(10, Some(300))
        }));
        let verdict = until(|| reach.judge(), Option::is_some).await;
        assert!(verdict.unwrap().unwrap_err().contains("knows no leader"));
    }

    #[tokio::test]
    async fn a_member_that_has_not_heard_the_leader_is_passed_over_for_one_that_has() {
        // This region's member just restarted: it knows no leader yet. The
        // next member has heard it, and the node can reach the leader
        // through that one.
        let restarted: Shared = Arc::new(Mutex::new(Member::Answers(Box::new(Status {
            leader: None,
            ..heard(10, Some(300))
        }))));
        let next: Shared = Arc::new(Mutex::new(Member::Answers(Box::new(heard(10, Some(300))))));
        let urls = [
            fake_member(restarted.clone()).await,
            fake_member(next.clone()).await,
        ];
        let client = Arc::new(StoreClient::new(&urls, ClientOptions::default()).unwrap());
        let reach = StoreReach::watch(client);
        until(|| reach.judge(), |v| *v == Some(Ok(()))).await;

        // Neither has heard it: the nearest one's word, which says why.
        *next.lock().unwrap() = Member::Answers(Box::new(Status {
            id: 3,
            leader: None,
            ..heard(10, Some(300))
        }));
        let verdict = until(|| reach.judge(), |v| matches!(v, Some(Err(_)))).await;
        let why = verdict.unwrap().unwrap_err();
        assert!(why.contains("member 2 knows no leader"), "{why}");
    }

    /// A member hosting the directory (at its root) and group `us-east`.
    async fn member_with_a_group(directory: Shared, group: Shared) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let group = axum::Router::new()
            .route(STATUS_PATH, axum::routing::get(status))
            .with_state(group);
        let app = axum::Router::new()
            .route(STATUS_PATH, axum::routing::get(status))
            .with_state(directory)
            .nest("/groups/us-east", group);
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        url
    }

    #[tokio::test]
    async fn a_node_is_not_ready_while_its_regions_group_has_no_leader_in_reach() {
        let directory: Shared =
            Arc::new(Mutex::new(Member::Answers(Box::new(heard(10, Some(300))))));
        let group: Shared = Arc::new(Mutex::new(Member::Answers(Box::new(Status {
            leader: None,
            ..heard(10, Some(300))
        }))));
        let url = member_with_a_group(directory, group.clone()).await;
        let groups =
            StoreGroups::new(&[url], &["us-east".to_owned()], ClientOptions::default()).unwrap();

        // us-east's node judges its own group too; ap-south's does not.
        let us_east = StoreReaches::watch(&groups, "us-east");
        let verdict = until(|| us_east.judge(), Option::is_some).await;
        let why = verdict.unwrap().unwrap_err();
        assert!(why.starts_with("group us-east:"), "{why}");
        assert!(why.contains("knows no leader"), "{why}");
        let ap_south = StoreReaches::watch(&groups, "ap-south");
        assert_eq!(
            until(|| ap_south.judge(), Option::is_some).await,
            Some(Ok(()))
        );
        // What each tells a router: us-east waits on its group; ap-south
        // watches it too, and does not reach its leader either — so no
        // router takes us-east for cut off from it.
        let named = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect();
        let us_east_groups = us_east.groups();
        assert_eq!(us_east_groups.in_reach, named(&["directory"]));
        assert_eq!(us_east_groups.waiting_on, named(&["us-east"]));
        let ap_south_groups = ap_south.groups();
        assert_eq!(ap_south_groups.in_reach, named(&["directory"]));
        assert!(ap_south_groups.waiting_on.is_empty());

        // The group elects a leader: us-east is ready again.
        *group.lock().unwrap() = Member::Answers(Box::new(heard(40, Some(300))));
        assert_eq!(
            until(|| us_east.judge(), |v| *v == Some(Ok(()))).await,
            Some(Ok(()))
        );
        until(
            || {
                ap_south
                    .groups()
                    .in_reach
                    .contains("us-east")
                    .then_some(Ok(()))
            },
            Option::is_some,
        )
        .await;
        let oldest = us_east.leader_heard().unwrap();
        assert!(
            oldest >= Duration::from_millis(40),
            "the older word: {oldest:?}"
        );
    }
}
