//! The state machine's commands, applied through openraft's
//! `RaftStateMachine::apply` on a real redb file: claims, business keys,
//! placement fencing, owner fencing, takeovers, dedup, expiry, determinism.

use once_raft_store::command::{
    Batch, BusinessKey, ClientRequest, NewClaim, Op, Record, RegionStatus, Reply, Scope, Sealed,
    Status, Step, TakeOverKind,
};
use once_raft_store::protocol::PaymentListQuery;
use once_raft_store::state_machine::StateMachine;
use once_raft_store::types::{Entry, LogId};
use openraft::storage::RaftStateMachine;
use openraft::{CommittedLeaderId, EntryPayload};

const T0: i64 = 1_700_000_000_000;
const LEASE: i64 = 10_000;

struct Harness {
    _dir: tempfile::TempDir,
    sm: StateMachine,
    index: u64,
    seq: u64,
}

impl Harness {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let sm = StateMachine::open(&dir.path().join("sm.redb")).unwrap();
        Self {
            _dir: dir,
            sm,
            index: 0,
            seq: 0,
        }
    }

    async fn apply_requests(&mut self, requests: Vec<ClientRequest>) -> Vec<Reply> {
        self.index += 1;
        let entry = Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), self.index),
            payload: EntryPayload::Normal(Batch { requests }),
        };
        let mut replies = self.sm.apply(vec![entry]).await.unwrap();
        replies.pop().unwrap().replies
    }

    /// One new command from client 1, stamped `now`.
    async fn run(&mut self, now: i64, op: Op) -> Reply {
        self.seq += 1;
        let request = ClientRequest {
            client: 1,
            seq: self.seq,
            acked_below: self.seq,
            now,
            op,
        };
        self.apply_requests(vec![request]).await.pop().unwrap()
    }
}

fn scope(key: &str) -> Scope {
    Scope {
        tenant: "acme".into(),
        principal: "checkout".into(),
        operation: "payments.create".into(),
        key: key.into(),
    }
}

fn claim(key: &str, reference: &str, region: &str, epoch: u64) -> NewClaim {
    NewClaim {
        // What the node sends: ciphertext raft-store never opens.
        payload: Some(Sealed(format!("sealed facts of {key}").into_bytes())),
        scope: scope(key),
        fingerprint_version: 1,
        fingerprint: format!("fp-{key}"),
        business_key: Some(BusinessKey {
            tenant: "acme".into(),
            account_id: "acc_1".into(),
            merchant_reference: reference.into(),
        }),
        payment_id: Some(format!("pay_{key}")),
        provider_key: Some(format!("provider_payment_pay_{key}")),
        step: Step::LocalPaymentCreated,
        trace_id: None,
        region: region.into(),
        epoch,
        lease_ms: LEASE,
    }
}

/// A stored answer as the node sends it: sealed, opaque here.
fn response() -> Sealed {
    Sealed(b"sealed answer".to_vec())
}

#[tokio::test]
async fn a_scoped_key_is_claimed_once_and_a_business_key_reserved_once() {
    let mut h = Harness::new();
    let Reply::Claimed(first) = h.run(T0, Op::Claim(claim("k1", "order-1", "eu", 0))).await else {
        panic!("first claim wins");
    };
    assert_eq!(first.fence, 1);
    assert_eq!(first.locked_until, T0 + LEASE);
    assert!(matches!(
        h.run(T0, Op::Claim(claim("k1", "order-1", "eu", 0))).await,
        Reply::Existing(r) if r == first
    ));
    // Same business key under another idempotency key: nothing is written.
    assert_eq!(
        h.run(T0, Op::Claim(claim("k2", "order-1", "eu", 0))).await,
        Reply::BusinessKeyTaken {
            payment_id: Some("pay_k1".into()),
            scope: scope("k1")
        }
    );
    assert_eq!(h.sm.record(&scope("k2")).unwrap(), None);
}

#[tokio::test]
async fn a_claim_from_a_region_that_is_not_home_at_its_epoch_is_misdirected() {
    let mut h = Harness::new();
    let set = |expected_epoch, home: &str| Op::SetPlacement {
        tenant: "acme".into(),
        expected_epoch,
        home: home.into(),
        standbys: vec!["us".into()],
    };
    assert!(matches!(h.run(T0, set(0, "eu")).await, Reply::Placement(p) if p.epoch == 1));
    // A compare-and-set on a stale epoch loses.
    assert!(
        matches!(h.run(T0, set(0, "us")).await, Reply::PlacementConflict { current: Some(p) } if p.home == "eu")
    );
    assert!(matches!(
        h.run(T0, Op::Claim(claim("k1", "o1", "us", 1))).await,
        Reply::Misdirected { placement } if placement.home == "eu"
    ));
    assert!(matches!(
        h.run(T0, Op::Claim(claim("k1", "o1", "eu", 0))).await,
        Reply::Misdirected { .. }
    ));
    assert!(matches!(
        h.run(T0, Op::Claim(claim("k1", "o1", "eu", 1))).await,
        Reply::Claimed(_)
    ));
    // Failover: the epoch moves, and the old home's claims stop counting.
    assert!(matches!(h.run(T0, set(1, "us")).await, Reply::Placement(p) if p.epoch == 2));
    assert!(matches!(
        h.run(T0, Op::Claim(claim("k2", "o2", "eu", 1))).await,
        Reply::Misdirected { .. }
    ));
}

/// Issue 48: a router's certificate placed a tenant in `nowhere` and
/// marked an invented region. Once the cluster has declared its regions,
/// every command naming another is refused on apply, writes nothing, and
/// is refused the same way when sent again.
#[tokio::test]
async fn once_the_regions_are_declared_no_command_writes_an_invented_one() {
    let mut h = Harness::new();
    let place = |tenant: &str, home: &str, standby: &str| Op::SetPlacement {
        tenant: tenant.into(),
        expected_epoch: 0,
        home: home.into(),
        standbys: vec![standby.into()],
    };
    // A cluster that never declared any checks nothing (development).
    assert!(matches!(
        h.run(T0, place("early", "anywhere", "us")).await,
        Reply::Placement(_)
    ));
    let declare = Op::DeclareRegions {
        regions: vec!["eu".into(), "us".into()],
    };
    assert_eq!(h.run(T0, declare).await, Reply::Ok);
    assert_eq!(
        h.sm.known_regions()
            .unwrap()
            .into_iter()
            .collect::<Vec<_>>(),
        ["eu", "us"]
    );

    let unknown = |region: &str| Reply::UnknownRegion {
        region: region.into(),
    };
    for op in [
        place("acme", "nowhere", "us"),
        place("acme", "eu", "nowhere"),
        Op::SetRegionStatus {
            region: "nowhere".into(),
            status: RegionStatus::Down,
        },
        Op::EvacuateRegion {
            from: "nowhere".into(),
            eligible: vec!["us".into()],
        },
        Op::EvacuateRegion {
            from: "eu".into(),
            eligible: vec!["nowhere".into()],
        },
        Op::MoveRegion {
            from: "eu".into(),
            eligible: vec!["nowhere".into()],
        },
        Op::ReturnHome {
            to: "nowhere".into(),
        },
    ] {
        assert_eq!(h.run(T0, op.clone()).await, unknown("nowhere"), "{op:?}");
    }
    assert_eq!(h.sm.placement("acme").unwrap(), None);
    assert!(h.sm.regions().unwrap().is_empty());

    // The real ones are taken as before.
    assert!(matches!(
        h.run(T0, place("acme", "eu", "us")).await,
        Reply::Placement(p) if p.home == "eu" && p.preferred_home == "eu"
    ));
    let marked = Op::SetRegionStatus {
        region: "us".into(),
        status: RegionStatus::Down,
    };
    assert_eq!(h.run(T0, marked).await, Reply::Ok);
    assert_eq!(
        h.sm.regions().unwrap(),
        [("us".to_owned(), RegionStatus::Down)]
    );
    // A region declared later is known from then on; none is forgotten.
    let more = Op::DeclareRegions {
        regions: vec!["ap".into()],
    };
    assert_eq!(h.run(T0, more).await, Reply::Ok);
    assert!(matches!(
        h.run(T0, place("globex", "ap", "eu")).await,
        Reply::Placement(_)
    ));
}

#[tokio::test]
async fn a_stale_owner_is_fenced_and_a_completion_is_never_overwritten() {
    let mut h = Harness::new();
    h.run(T0, Op::Claim(claim("k1", "o1", "eu", 0))).await;
    let take_over = |fence| Op::TakeOver {
        scope: scope("k1"),
        fence,
        kind: TakeOverKind::LeaseExpired,
        region: "us".into(),
        lease_ms: LEASE,
        renew: None,
    };
    // Inside the lease (by the stamped time): refused.
    assert_eq!(
        h.run(T0 + LEASE - 1, take_over(1)).await,
        Reply::LeaseValid {
            locked_until: T0 + LEASE
        }
    );
    let Reply::Claimed(taken) = h.run(T0 + LEASE, take_over(1)).await else {
        panic!("takeover after the lease");
    };
    assert_eq!(taken.fence, 2);
    // A second takeover racing on the same fence loses.
    assert!(matches!(
        h.run(T0 + LEASE, take_over(1)).await,
        Reply::Fenced { .. }
    ));
    let complete = |fence| Op::Complete {
        scope: scope("k1"),
        fence,
        response: response(),
        expires_after_ms: 86_400_000,
    };
    assert!(matches!(
        h.run(T0 + LEASE, complete(1)).await,
        Reply::Fenced { .. }
    ));
    assert!(
        matches!(h.run(T0 + LEASE, complete(2)).await, Reply::Updated(r) if r.status == Status::Completed)
    );
    // Nothing moves a completed record: not its owner, not a takeover.
    assert!(matches!(
        h.run(T0 + 10 * LEASE, complete(2)).await,
        Reply::Fenced { .. }
    ));
    assert!(matches!(
        h.run(T0 + 10 * LEASE, take_over(2)).await,
        Reply::Fenced { .. }
    ));
    assert!(matches!(
        h.run(
            T0 + 10 * LEASE,
            Op::AdvanceStep {
                scope: scope("k1"),
                fence: 2,
                step: Step::ProviderRequestSent
            }
        )
        .await,
        Reply::Fenced { .. }
    ));
    let record = h.sm.record(&scope("k1")).unwrap().unwrap();
    assert_eq!(record.status, Status::Completed);
    assert_eq!(record.response, Some(response()));
}

#[tokio::test]
async fn a_retried_command_applies_once_and_returns_its_first_reply() {
    let mut h = Harness::new();
    let op = Op::SetPlacement {
        tenant: "acme".into(),
        expected_epoch: 0,
        home: "eu".into(),
        standbys: vec![],
    };
    let request = ClientRequest {
        client: 7,
        seq: 1,
        acked_below: 1,
        now: T0,
        op,
    };
    let first = h.apply_requests(vec![request.clone()]).await;
    // The same (client, seq) again — in a later entry and twice in one batch.
    let again = h
        .apply_requests(vec![request.clone(), request.clone()])
        .await;
    assert_eq!(again, vec![first[0].clone(), first[0].clone()]);
    assert_eq!(h.sm.placement("acme").unwrap().unwrap().epoch, 1);
    // Once the client acknowledges seq 1 (acked_below 2), it is forgotten,
    // and a very late copy of it is refused rather than applied.
    let next = ClientRequest {
        seq: 2,
        acked_below: 2,
        op: Op::Purge { limit: 1 },
        ..request.clone()
    };
    h.apply_requests(vec![next]).await;
    assert_eq!(
        h.apply_requests(vec![request]).await,
        vec![Reply::StaleSequence]
    );
    assert_eq!(h.sm.placement("acme").unwrap().unwrap().epoch, 1);
}

#[tokio::test]
async fn expiry_purges_answers_in_batches_and_keeps_unfinished_records() {
    let mut h = Harness::new();
    for i in 0..5 {
        let key = format!("k{i}");
        let Reply::Claimed(r) = h.run(T0, Op::Claim(claim(&key, &key, "eu", 0))).await else {
            panic!()
        };
        if i < 4 {
            h.run(
                T0,
                Op::Complete {
                    scope: r.scope,
                    fence: 1,
                    response: response(),
                    expires_after_ms: 1_000,
                },
            )
            .await;
        }
    }
    let expire = Op::Expire {
        limit: 3,
        retention_ms: 5_000,
    };
    assert_eq!(h.run(T0 + 999, expire.clone()).await, Reply::Count(0));
    assert_eq!(h.run(T0 + 1_000, expire.clone()).await, Reply::Count(3));
    assert_eq!(h.run(T0 + 1_000, expire.clone()).await, Reply::Count(1));
    assert_eq!(h.run(T0 + 1_000, expire).await, Reply::Count(0));
    let expired = h.sm.record(&scope("k0")).unwrap().unwrap();
    assert_eq!(expired.status, Status::Expired);
    assert_eq!(expired.response, None);
    // Expiry drops the payload with the answer: nothing sealed outlives
    // the replay window.
    assert_eq!(expired.payload, None);
    assert_eq!(
        h.run(T0 + 5_999, Op::Purge { limit: 10 }).await,
        Reply::Count(0)
    );
    assert_eq!(
        h.run(T0 + 6_000, Op::Purge { limit: 10 }).await,
        Reply::Count(4)
    );
    // The unfinished record never expires.
    assert_eq!(
        h.sm.record(&scope("k4")).unwrap().unwrap().status,
        Status::InProgress
    );
    // A purged record no longer answers for its payment; a kept one does.
    assert_eq!(h.sm.record_of_payment("pay_k0").unwrap(), None);
    assert_eq!(
        h.sm.record_of_payment("pay_k4").unwrap().map(|r| r.scope),
        Some(scope("k4"))
    );
    // The business key stays reserved after the record is purged.
    assert!(matches!(
        h.run(T0 + 7_000, Op::Claim(claim("k9", "k0", "eu", 0)))
            .await,
        Reply::BusinessKeyTaken { .. }
    ));
}

#[tokio::test]
async fn two_members_applying_the_same_log_reach_the_same_state() {
    let mut a = Harness::new();
    let mut b = Harness::new();
    for h in [&mut a, &mut b] {
        for i in 0..20 {
            let key = format!("k{}", i % 7);
            let now = T0 + i * 3_000;
            h.run(now, Op::Claim(claim(&key, &format!("o{}", i % 5), "eu", 0)))
                .await;
            h.run(
                now,
                Op::TakeOver {
                    scope: scope(&key),
                    fence: 1,
                    kind: TakeOverKind::LeaseExpired,
                    region: "us".into(),
                    lease_ms: LEASE,
                    renew: None,
                },
            )
            .await;
        }
    }
    assert_eq!(a.sm.all_records().unwrap(), b.sm.all_records().unwrap());
}

#[tokio::test]
async fn a_recovery_query_for_a_region_sees_only_tenants_homed_there_and_counts_only_them() {
    use once_raft_store::protocol::RecordQuery;
    let mut h = Harness::new();
    let claim_for = |tenant: &str, key: &str, region: &str, epoch: u64| {
        let mut c = claim(key, key, region, epoch);
        c.scope.tenant = tenant.into();
        if let Some(b) = c.business_key.as_mut() {
            b.tenant = tenant.into();
        }
        Op::Claim(c)
    };
    let place = |tenant: &str, expected_epoch, home: &str| Op::SetPlacement {
        tenant: tenant.into(),
        expected_epoch,
        home: home.into(),
        standbys: vec![],
    };
    h.run(T0, place("acme", 0, "eu")).await;
    h.run(T0, place("globex", 0, "us")).await;
    // us-homed globex claimed first: the oldest due records are not eu's.
    for n in 0..3 {
        h.run(T0, claim_for("globex", &format!("g{n}"), "us", 1))
            .await;
    }
    h.run(T0 + 1, claim_for("acme", "a0", "eu", 1)).await;
    h.run(T0 + 2, claim_for("initech", "i0", "eu", 0)).await;

    let due_in = |region: &str| RecordQuery {
        due_at: Some(T0 + 10 * LEASE),
        homed_in: Some(region.into()),
        limit: 2,
        ..RecordQuery::default()
    };
    let tenants = |records: Vec<once_raft_store::command::Record>| -> Vec<String> {
        records.into_iter().map(|r| r.scope.tenant).collect()
    };
    assert_eq!(
        tenants(h.sm.query(&due_in("eu")).unwrap()),
        ["acme", "initech"],
        "eu's own and the unplaced tenant's, though globex's are older"
    );
    assert_eq!(
        tenants(h.sm.query(&due_in("us")).unwrap()),
        ["globex", "globex"]
    );
    // Three of globex and the unplaced initech's: a count ignores the limit.
    assert_eq!(h.sm.count(&due_in("us")).unwrap(), 4);

    // Failover: acme now lives in us, and eu no longer sees its record.
    h.run(T0, place("acme", 1, "us")).await;
    assert_eq!(tenants(h.sm.query(&due_in("eu")).unwrap()), ["initech"]);
}

#[tokio::test]
async fn a_payment_is_found_by_its_id_and_the_index_is_rebuilt_for_state_written_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sm.redb");
    let mut h = Harness::new();
    h.sm = StateMachine::open(&path).unwrap();
    h.run(T0, Op::Claim(claim("k1", "o1", "eu", 0))).await;
    h.run(T0, Op::Claim(claim("k2", "o2", "eu", 0))).await;
    let found = h.sm.record_of_payment("pay_k2").unwrap().unwrap();
    assert_eq!(found.scope, scope("k2"));
    assert_eq!(h.sm.record_of_payment("pay_nope").unwrap(), None);

    // A state machine from a build without the index: it is derived at
    // open, from the records alone.
    drop(h);
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        let index: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("payment_ids");
        txn.open_table(index).unwrap().retain(|_, _| false).unwrap();
        txn.commit().unwrap();
    }
    let reopened = StateMachine::open(&path).unwrap();
    assert_eq!(
        reopened
            .record_of_payment("pay_k1")
            .unwrap()
            .map(|r| r.scope),
        Some(scope("k1"))
    );
}

fn listing(tenant: &str) -> PaymentListQuery {
    PaymentListQuery {
        tenant: tenant.into(),
        limit: 100,
        ..PaymentListQuery::default()
    }
}

fn payment_ids(records: Vec<Record>) -> Vec<String> {
    records.into_iter().filter_map(|r| r.payment_id).collect()
}

#[tokio::test]
async fn a_tenants_payments_are_listed_in_creation_order_after_a_cursor_and_filtered() {
    let mut h = Harness::new();
    // Created out of key order: the listing follows creation time.
    h.run(T0 + 2, Op::Claim(claim("k1", "o1", "eu", 0))).await;
    h.run(T0, Op::Claim(claim("k2", "o2", "eu", 0))).await;
    h.run(T0 + 1, Op::Claim(claim("k3", "o1b", "eu", 0))).await;
    let mut other = claim("k4", "o1", "eu", 0);
    other.scope.tenant = "globex".into();
    other.business_key.as_mut().unwrap().tenant = "globex".into();
    h.run(T0, Op::Claim(other)).await;

    let all = h.sm.tenant_payments(&listing("acme")).unwrap();
    assert_eq!(payment_ids(all), ["pay_k2", "pay_k3", "pay_k1"]);
    assert_eq!(
        payment_ids(h.sm.tenant_payments(&listing("globex")).unwrap()),
        ["pay_k4"]
    );
    let after = PaymentListQuery {
        after: Some((T0, "pay_k2".into())),
        limit: 1,
        ..listing("acme")
    };
    assert_eq!(
        payment_ids(h.sm.tenant_payments(&after).unwrap()),
        ["pay_k3"]
    );
    let by_reference = PaymentListQuery {
        merchant_reference: Some("o1".into()),
        ..listing("acme")
    };
    assert_eq!(
        payment_ids(h.sm.tenant_payments(&by_reference).unwrap()),
        ["pay_k1"]
    );
    let other_account = PaymentListQuery {
        account_id: Some("acc_2".into()),
        ..listing("acme")
    };
    assert!(h.sm.tenant_payments(&other_account).unwrap().is_empty());
}

#[tokio::test]
async fn the_listing_index_follows_renewals_and_purges_and_is_rebuilt_when_missing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sm.redb");
    let mut h = Harness::new();
    h.sm = StateMachine::open(&path).unwrap();
    for key in ["k1", "k2"] {
        let Reply::Claimed(r) = h.run(T0, Op::Claim(claim(key, key, "eu", 0))).await else {
            panic!()
        };
        h.run(
            T0,
            Op::Complete {
                scope: r.scope,
                fence: 1,
                response: response(),
                expires_after_ms: 1_000,
            },
        )
        .await;
    }
    assert_eq!(
        payment_ids(h.sm.tenant_payments(&listing("acme")).unwrap()),
        ["pay_k1", "pay_k2"]
    );

    // k1 renewed past its window: its record now names a new payment,
    // created later; the listing shows that one, once.
    let mut renewal = claim("k1", "k1-renewed", "eu", 0);
    renewal.payment_id = Some("pay_k1b".into());
    let renewed = h
        .run(
            T0 + 2_000,
            Op::TakeOver {
                scope: scope("k1"),
                fence: 1,
                kind: TakeOverKind::Renew,
                region: "eu".into(),
                lease_ms: LEASE,
                renew: Some(renewal),
            },
        )
        .await;
    assert!(matches!(renewed, Reply::Claimed(_)), "{renewed:?}");
    assert_eq!(
        payment_ids(h.sm.tenant_payments(&listing("acme")).unwrap()),
        ["pay_k2", "pay_k1b"]
    );

    // k2 expires and is purged: it leaves the listing.
    h.run(
        T0 + 2_000,
        Op::Expire {
            limit: 10,
            retention_ms: 1_000,
        },
    )
    .await;
    assert_eq!(
        h.run(T0 + 3_000, Op::Purge { limit: 10 }).await,
        Reply::Count(1)
    );
    assert_eq!(
        payment_ids(h.sm.tenant_payments(&listing("acme")).unwrap()),
        ["pay_k1b"]
    );

    // A state machine from a build without the listing index (or one that
    // installed an older snapshot): derived again from the records.
    drop(h);
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        let index: redb::TableDefinition<&[u8], &[u8]> =
            redb::TableDefinition::new("tenant_payments");
        txn.delete_table(index).unwrap();
        txn.commit().unwrap();
    }
    let reopened = StateMachine::open(&path).unwrap();
    assert_eq!(
        payment_ids(reopened.tenant_payments(&listing("acme")).unwrap()),
        ["pay_k1b"]
    );
}

#[tokio::test]
async fn expiry_and_purge_take_the_records_that_are_due_oldest_first_and_the_schedule_is_rebuilt_when_missing()
 {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sm.redb");
    let mut h = Harness::new();
    h.sm = StateMachine::open(&path).unwrap();
    // Windows that end in the reverse order of the keys: a sweep that
    // walked the records table would meet the latest first.
    for (i, window) in [(0, 5_000), (1, 4_000), (2, 3_000), (3, 2_000), (4, 1_000)] {
        let key = format!("k{i}");
        let Reply::Claimed(r) = h.run(T0, Op::Claim(claim(&key, &key, "eu", 0))).await else {
            panic!()
        };
        h.run(
            T0,
            Op::Complete {
                scope: r.scope,
                fence: 1,
                response: response(),
                expires_after_ms: window,
            },
        )
        .await;
    }
    // One still in progress: never due.
    h.run(T0, Op::Claim(claim("busy", "busy", "eu", 0))).await;
    let status = |h: &Harness, key: &str| h.sm.record(&scope(key)).unwrap().unwrap().status;
    let expire = |limit| Op::Expire {
        limit,
        retention_ms: 10_000,
    };

    assert_eq!(h.run(T0 + 2_000, expire(1)).await, Reply::Count(1));
    assert_eq!(status(&h, "k4"), Status::Expired, "the oldest window first");
    assert_eq!(h.run(T0 + 2_000, expire(10)).await, Reply::Count(1));
    assert_eq!(status(&h, "k3"), Status::Expired);
    assert_eq!(status(&h, "k2"), Status::Completed, "not due yet");
    assert_eq!(h.run(T0 + 2_000, expire(10)).await, Reply::Count(0));

    // A state machine without the schedule (an older build's): derived
    // again from the records, and the sweep goes on from it.
    drop(h);
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        let due: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("due");
        txn.delete_table(due).unwrap();
        txn.commit().unwrap();
    }
    let mut h = Harness::new();
    h.sm = StateMachine::open(&path).unwrap();
    h.seq = 100;
    assert_eq!(h.run(T0 + 10_000, expire(10)).await, Reply::Count(3));
    assert_eq!(status(&h, "busy"), Status::InProgress);
    // Purged in the order they became purgeable: k4, k3 (expired at
    // T0 + 2 s) are due at T0 + 12 s, the other three at T0 + 20 s.
    assert_eq!(
        h.run(T0 + 12_000, Op::Purge { limit: 10 }).await,
        Reply::Count(2)
    );
    assert!(h.sm.record(&scope("k4")).unwrap().is_none());
    assert_eq!(status(&h, "k0"), Status::Expired);
    assert_eq!(
        h.run(T0 + 20_000, Op::Purge { limit: 10 }).await,
        Reply::Count(3)
    );
    assert_eq!(status(&h, "busy"), Status::InProgress);
}

/// Re-encryption's compare-and-set: new blobs replace the ones read only
/// while the record is exactly as read; an owner's write in between wins.
#[tokio::test]
async fn a_reseal_applies_only_to_the_record_as_it_was_read() {
    let mut h = Harness::new();
    let Reply::Claimed(claimed) = h.run(T0, Op::Claim(claim("k1", "r1", "eu", 0))).await else {
        panic!()
    };
    let reseal = |seen: &Record, payload: &[u8]| Op::Reseal {
        scope: seen.scope.clone(),
        fence: seen.fence,
        updated_at: seen.updated_at,
        seen_payload: seen.payload.clone(),
        seen_response: seen.response.clone(),
        payload: Some(Sealed(payload.to_vec())),
        response: seen.response.clone(),
    };
    // The owner finishes after the re-encryptor read the record: its
    // reseal is refused and the answer stays.
    let Reply::Updated(completed) = h
        .run(
            T0 + 1,
            Op::Complete {
                scope: scope("k1"),
                fence: 1,
                response: response(),
                expires_after_ms: 86_400_000,
            },
        )
        .await
    else {
        panic!()
    };
    assert!(matches!(
        h.run(T0 + 2, reseal(&claimed, b"resealed facts")).await,
        Reply::Fenced { .. }
    ));
    // Read again, it applies, changing nothing but the blob.
    let Reply::Updated(resealed) = h.run(T0 + 3, reseal(&completed, b"resealed facts")).await
    else {
        panic!()
    };
    assert_eq!(resealed.payload, Some(Sealed(b"resealed facts".to_vec())));
    assert_eq!(resealed.response, completed.response);
    assert_eq!(
        Record {
            payload: completed.payload.clone(),
            ..resealed
        },
        completed
    );
}

fn place(tenant: &str, home: &str, standbys: &[&str]) -> Op {
    Op::SetPlacement {
        tenant: tenant.into(),
        expected_epoch: 0,
        home: home.into(),
        standbys: standbys.iter().map(|s| s.to_string()).collect(),
    }
}

/// A placement written over the one at `expected_epoch`.
fn place_again(tenant: &str, expected_epoch: u64, home: &str, standbys: &[&str]) -> Op {
    Op::SetPlacement {
        tenant: tenant.into(),
        expected_epoch,
        home: home.into(),
        standbys: standbys.iter().map(|s| s.to_string()).collect(),
    }
}

fn move_region(from: &str, eligible: &[&str]) -> Op {
    Op::MoveRegion {
        from: from.into(),
        eligible: eligible.iter().map(|s| s.to_string()).collect(),
    }
}

/// `(tenant, from, to, epoch)` of one tenant a bulk move moved.
type Move = (String, String, String, u64);

/// Each tenant a bulk move moved, and the stranded ones.
fn moves(reply: Reply) -> (Vec<Move>, Vec<String>) {
    let Reply::Moved { moved, stranded } = reply else {
        panic!("a bulk move answers Moved: {reply:?}");
    };
    let moved = moved
        .into_iter()
        .map(|m| (m.tenant, m.from, m.placement.home, m.placement.epoch))
        .collect();
    (moved, stranded)
}

fn moved(tenant: &str, from: &str, to: &str, epoch: u64) -> Move {
    (tenant.into(), from.into(), to.into(), epoch)
}

#[tokio::test]
async fn a_region_fails_over_in_one_command_that_moves_only_its_tenants_once() {
    let mut h = Harness::new();
    h.run(T0, place("acme", "eu", &["us", "ap"])).await;
    h.run(T0, place("globex", "eu", &["ap", "us"])).await;
    h.run(T0, place("initech", "us", &["eu"])).await;
    h.run(T0, place("hooli", "eu", &["eu-2"])).await;
    // acme moves a second time before the failover: epoch 2.
    h.run(
        T0,
        Op::SetPlacement {
            tenant: "acme".into(),
            expected_epoch: 1,
            home: "eu".into(),
            standbys: vec!["us".into(), "ap".into()],
        },
    )
    .await;
    assert_eq!(
        h.sm.homed_in("eu").unwrap(),
        ["acme", "globex", "hooli"],
        "the home index follows every placement write"
    );

    // ap is not eligible (say, just back): globex skips it for us.
    let (moved_now, stranded) = moves(h.run(T0, move_region("eu", &["us", "eu-2x"])).await);
    assert_eq!(
        moved_now,
        [moved("acme", "eu", "us", 3), moved("globex", "eu", "us", 2),]
    );
    assert_eq!(stranded, ["hooli"], "no eligible standby: it stays");
    let acme = h.sm.placement("acme").unwrap().unwrap();
    assert_eq!(
        (
            acme.home.as_str(),
            acme.standbys.as_slice(),
            acme.preferred_home.as_str()
        ),
        ("us", ["ap".to_owned(), "eu".to_owned()].as_slice(), "eu"),
        "the failed region goes last; the preferred home is kept"
    );
    let globex = h.sm.placement("globex").unwrap().unwrap();
    assert_eq!(globex.standbys, ["ap", "eu"]);
    assert_eq!(
        h.sm.placement("initech").unwrap().unwrap().epoch,
        1,
        "homed elsewhere"
    );
    assert_eq!(h.sm.placement("hooli").unwrap().unwrap().epoch, 1);
    assert_eq!(h.sm.homed_in("eu").unwrap(), ["hooli"]);
    assert_eq!(h.sm.homed_in("us").unwrap(), ["acme", "globex", "initech"]);

    // A second router's identical move (a new command, not a retry): the
    // tenants have left, nothing moves, no epoch bumps twice.
    let (again, stranded) = moves(h.run(T0, move_region("eu", &["us", "eu-2x"])).await);
    assert_eq!(again, []);
    assert_eq!(stranded, ["hooli"]);
    assert_eq!(h.sm.placement("acme").unwrap().unwrap().epoch, 3);
    assert_eq!(h.sm.placement("globex").unwrap().unwrap().epoch, 2);

    // A claim at the old home at the old epoch is misdirected, at the new
    // home at the new epoch it counts.
    assert!(matches!(
        h.run(T0, Op::Claim(claim("k1", "o1", "eu", 2))).await,
        Reply::Misdirected { placement } if placement.home == "us" && placement.epoch == 3
    ));
    assert!(matches!(
        h.run(T0, Op::Claim(claim("k1", "o1", "us", 3))).await,
        Reply::Claimed(_)
    ));
}

#[tokio::test]
async fn failback_in_one_command_sends_home_only_the_tenants_that_prefer_it() {
    let mut h = Harness::new();
    h.run(T0, place("acme", "eu", &["us", "ap"])).await;
    h.run(T0, place("globex", "eu", &["ap"])).await;
    h.run(T0, place("initech", "us", &["eu"])).await;
    h.run(T0, move_region("eu", &["us", "ap"])).await;
    h.run(T0, move_region("us", &["eu", "ap"])).await;
    // initech (prefers us) now lives in eu; acme moved on from us to ap.
    assert_eq!(h.sm.placement("initech").unwrap().unwrap().home, "eu");
    assert_eq!(h.sm.placement("acme").unwrap().unwrap().home, "ap");

    let (back, stranded) = moves(h.run(T0, Op::ReturnHome { to: "eu".into() }).await);
    assert_eq!(
        back,
        [moved("acme", "ap", "eu", 4), moved("globex", "ap", "eu", 3)]
    );
    assert_eq!(stranded, Vec::<String>::new());
    let acme = h.sm.placement("acme").unwrap().unwrap();
    assert_eq!(
        acme.standbys,
        ["ap", "us"],
        "the region it left is the first standby"
    );
    assert_eq!(
        h.sm.placement("initech").unwrap().unwrap().home,
        "eu",
        "prefers us"
    );
    assert_eq!(h.sm.homed_in("eu").unwrap(), ["acme", "globex", "initech"]);
    assert_eq!(h.sm.homed_in("ap").unwrap(), Vec::<String>::new());

    let (again, _) = moves(h.run(T0, Op::ReturnHome { to: "eu".into() }).await);
    assert_eq!(again, [], "a second failback finds everyone home");
    assert_eq!(h.sm.placement("acme").unwrap().unwrap().epoch, 4);
}

#[tokio::test]
async fn a_retried_bulk_move_gets_its_first_reply_and_moves_nothing_more() {
    let mut h = Harness::new();
    h.run(T0, place("acme", "eu", &["us"])).await;
    let request = ClientRequest {
        client: 9,
        seq: 1,
        acked_below: 1,
        now: T0,
        op: move_region("eu", &["us"]),
    };
    let first = h.apply_requests(vec![request.clone()]).await;
    // acme is placed back in eu by hand; the retry must not move it again.
    h.run(T0, place_again("acme", 2, "eu", &["us"])).await;
    let retried = h.apply_requests(vec![request]).await;
    assert_eq!(retried, first);
    assert_eq!(
        moves(first.into_iter().next().unwrap()).0,
        [moved("acme", "eu", "us", 2)]
    );
    let acme = h.sm.placement("acme").unwrap().unwrap();
    assert_eq!((acme.home.as_str(), acme.epoch), ("eu", 3));
}

#[tokio::test]
async fn the_home_index_is_rebuilt_for_placements_written_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sm.redb");
    let mut h = Harness::new();
    h.sm = StateMachine::open(&path).unwrap();
    h.run(T0, place("acme", "eu", &["us"])).await;
    h.run(T0, place("initech", "us", &["eu"])).await;
    drop(h);
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        let index: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("homes");
        txn.open_table(index).unwrap().retain(|_, _| false).unwrap();
        txn.commit().unwrap();
    }
    let reopened = StateMachine::open(&path).unwrap();
    assert_eq!(reopened.homed_in("eu").unwrap(), ["acme"]);
    assert_eq!(reopened.homed_in("us").unwrap(), ["initech"]);
}

const TENANTS: usize = 100_000;

/// Places `tenants` tenants (`tenant-000000` …), the even ones in eu and
/// the odd ones in us, each with standbys us and ap.
async fn place_alternately_in_eu_and_us(h: &mut Harness, tenants: usize) {
    let requests: Vec<ClientRequest> = (0..tenants)
        .map(|i| ClientRequest {
            client: 2,
            seq: i as u64 + 1,
            acked_below: i as u64 + 1,
            now: T0,
            op: place(
                &format!("tenant-{i:06}"),
                if i % 2 == 0 { "eu" } else { "us" },
                &["us", "ap"],
            ),
        })
        .collect();
    for chunk in requests.chunks(10_000) {
        h.apply_requests(chunk.to_vec()).await;
    }
}

/// The cost of one bulk failover of 100,000 tenants (one write
/// transaction); printed, and bounded loosely so a quadratic apply fails.
#[tokio::test]
async fn a_hundred_thousand_tenants_fail_over_in_one_apply() {
    let mut h = Harness::new();
    place_alternately_in_eu_and_us(&mut h, TENANTS).await;
    let started = std::time::Instant::now();
    let (moved_now, _) = moves(h.run(T0, move_region("eu", &["us", "ap"])).await);
    let took = started.elapsed();
    eprintln!(
        "bulk failover of {} tenants (of {TENANTS}) applied in {took:?}",
        moved_now.len()
    );
    assert_eq!(moved_now.len(), TENANTS / 2);
    assert!(
        moved_now
            .iter()
            .all(|(_, from, to, epoch)| from == "eu" && to == "us" && *epoch == 2)
    );
    assert_eq!(h.sm.homed_in("eu").unwrap(), Vec::<String>::new());
    assert!(took < std::time::Duration::from_secs(60), "{took:?}");
}

/// Wire version 2: every member records when each client was last seen,
/// and `ForgetIdleClients` forgets the replies and floor of clients idle
/// past the limit, and no one else's. Before the cluster moves to 2 it
/// forgets nothing (members of the build before keep no such stamp).
#[tokio::test]
async fn idle_clients_are_forgotten_once_the_cluster_moved_to_wire_version_2() {
    const HOUR: i64 = 3_600_000;
    const DAY: i64 = 24 * HOUR;
    let mut h = Harness::new();
    let placement = |client, tenant: &str, now| ClientRequest {
        client,
        seq: 1,
        acked_below: 1,
        now,
        op: Op::SetPlacement {
            tenant: tenant.into(),
            expected_epoch: 0,
            home: "eu".into(),
            standbys: vec![],
        },
    };
    let forget = Op::ForgetIdleClients {
        idle_ms: DAY,
        limit: 100,
    };
    // Client 7 writes under version 1 and goes quiet.
    let first = h.apply_requests(vec![placement(7, "acme", T0)]).await;
    assert!(matches!(first[0], Reply::Placement(_)));
    assert_eq!(h.run(T0 + 2 * DAY, forget.clone()).await, Reply::Count(0));
    assert_eq!(
        h.apply_requests(vec![placement(7, "acme", T0)]).await,
        first
    );

    // The cluster moves to 2: client 7 counts as seen at the move.
    assert_eq!(h.sm.wire_version().unwrap(), 1);
    let moved_at = T0 + 2 * DAY;
    assert_eq!(
        h.run(moved_at, Op::RaiseWireVersion { version: 2 }).await,
        Reply::Ok
    );
    assert_eq!(h.sm.wire_version().unwrap(), 2);
    assert_eq!(
        h.run(moved_at + HOUR, forget.clone()).await,
        Reply::Count(0)
    );

    // A day after the move clients 1 and 8 write; client 7 stays quiet.
    h.run(moved_at + DAY, Op::Purge { limit: 1 }).await;
    let recent = h
        .apply_requests(vec![placement(8, "globex", moved_at + DAY)])
        .await;
    assert_eq!(h.sm.remembered_clients().unwrap(), 3, "clients 1, 7 and 8");
    assert_eq!(
        h.run(moved_at + DAY + HOUR, forget.clone()).await,
        Reply::Count(1),
        "client 7 only"
    );
    assert_eq!(h.sm.remembered_clients().unwrap(), 2);
    // Client 8's reply is still deduplicated ...
    assert_eq!(
        h.apply_requests(vec![placement(8, "globex", moved_at + DAY)])
            .await,
        recent
    );
    // ... client 7's is gone: the same (client, seq) now runs again
    // (which is why the limit must be far above any client's retries).
    assert!(matches!(
        h.apply_requests(vec![placement(7, "acme", T0)]).await[0],
        Reply::PlacementConflict { .. }
    ));
    // Never back to version 1.
    h.run(moved_at + DAY, Op::RaiseWireVersion { version: 1 })
        .await;
    assert_eq!(h.sm.wire_version().unwrap(), 2);
}

fn evacuate(from: &str, eligible: &[&str]) -> Op {
    Op::EvacuateRegion {
        from: from.into(),
        eligible: eligible.iter().map(|s| s.to_string()).collect(),
    }
}

/// An evacuation (decision 0055) leaves every placement as the bulk move it
/// replaces would have: one state machine fails regions over with
/// `MoveRegion`, another with `EvacuateRegion` (and now and then the older
/// move, which writes the evacuations out first), through the same seeded
/// mix of placement writes, failovers and failbacks; after every step both
/// read the same placements, one by one and listed, and refuse or take a
/// claim alike.
#[tokio::test]
async fn an_evacuation_reads_like_the_bulk_move_it_replaces() {
    const REGIONS: [&str; 4] = ["eu", "us", "ap", "sa"];
    let tenants: Vec<String> = (0..12).map(|i| format!("tenant-{i:02}")).collect();
    let (mut moves, mut evacuations) = (Harness::new(), Harness::new());
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let mut pending = 0;
    for step in 0..400 {
        let region = REGIONS[next(REGIONS.len())];
        let eligible: Vec<&str> = REGIONS
            .iter()
            .copied()
            .filter(|r| *r != region && next(3) > 0)
            .collect();
        let (op_moves, op_evacuations) = match next(10) {
            0..=3 => {
                let tenant = &tenants[next(tenants.len())];
                let epoch = moves.sm.placement(tenant).unwrap().map_or(0, |p| p.epoch);
                let mut standbys: Vec<String> = REGIONS
                    .iter()
                    .filter(|r| **r != region)
                    .map(|r| r.to_string())
                    .collect();
                standbys.rotate_left(next(3));
                let op = Op::SetPlacement {
                    tenant: tenant.clone(),
                    expected_epoch: epoch,
                    home: region.into(),
                    standbys,
                };
                (op.clone(), op)
            }
            4..=7 => {
                let evacuation = if next(5) == 0 {
                    move_region(region, &eligible)
                } else {
                    pending += 1;
                    evacuate(region, &eligible)
                };
                (move_region(region, &eligible), evacuation)
            }
            _ => {
                let op = Op::ReturnHome { to: region.into() };
                (op.clone(), op)
            }
        };
        let (a, b) = (
            moves.run(T0, op_moves.clone()).await,
            evacuations.run(T0, op_evacuations.clone()).await,
        );
        match (&a, &b) {
            (Reply::Moved { .. }, Reply::Evacuated { .. }) => {}
            _ => assert_eq!(a, b, "step {step}: {op_moves:?} / {op_evacuations:?}"),
        }
        assert_eq!(
            moves.sm.placements().unwrap(),
            evacuations.sm.placements().unwrap(),
            "step {step}: after {op_moves:?} / {op_evacuations:?}"
        );
        for tenant in &tenants {
            assert_eq!(
                moves.sm.placement(tenant).unwrap(),
                evacuations.sm.placement(tenant).unwrap()
            );
        }
    }
    assert!(pending > 50, "the mix evacuated {pending} times");
    // A claim where each placement is now: misdirected alike, taken alike.
    for (i, tenant) in tenants.iter().enumerate() {
        let Some(placement) = moves.sm.placement(tenant).unwrap() else {
            continue;
        };
        let mut claim = claim(&format!("k{i}"), &format!("r{i}"), "eu", placement.epoch);
        claim.scope.tenant = tenant.clone();
        if let Some(key) = &mut claim.business_key {
            key.tenant = tenant.clone();
        }
        let stale = NewClaim {
            epoch: placement.epoch.saturating_sub(1),
            ..claim.clone()
        };
        for c in [stale, claim] {
            assert_eq!(
                moves.run(T0, Op::Claim(c.clone())).await,
                evacuations.run(T0, Op::Claim(c)).await
            );
        }
    }
}

/// A failover of 100,000 tenants as one evacuation: one row, whatever the
/// number of tenants; every placement reads moved, a claim from the new
/// home at the new epoch counts, and a failback writes them all home.
#[tokio::test]
async fn a_hundred_thousand_tenants_evacuate_in_one_apply() {
    let mut h = Harness::new();
    place_alternately_in_eu_and_us(&mut h, TENANTS).await;
    let started = std::time::Instant::now();
    let reply = h.run(T0, evacuate("eu", &["us", "ap"])).await;
    let took = started.elapsed();
    eprintln!(
        "evacuation of a region homing {} tenants applied in {took:?}",
        TENANTS / 2
    );
    assert_eq!(
        reply,
        Reply::Evacuated {
            number: 1,
            again: false
        }
    );
    // A second router's: nothing more to move, nothing recorded.
    assert_eq!(
        h.run(T0, evacuate("eu", &["us"])).await,
        Reply::Evacuated {
            number: 1,
            again: true
        }
    );
    let placements = h.sm.placements().unwrap();
    assert_eq!(placements.len(), TENANTS);
    assert!(
        placements
            .iter()
            .all(|(_, p)| p.home == "us" && p.epoch == if p.preferred_home == "eu" { 2 } else { 1 })
    );
    assert!(
        matches!(
            h.run(T0, Op::Claim(claim("k1", "r1", "us", 0))).await,
            Reply::Claimed(_)
        ),
        "acme has no placement: any region"
    );
    let mut moved = claim("k2", "r2", "eu", 1);
    moved.scope.tenant = "tenant-000000".into();
    assert!(matches!(
        h.run(T0, Op::Claim(moved.clone())).await,
        Reply::Misdirected { placement } if placement.home == "us" && placement.epoch == 2
    ));
    moved.region = "us".into();
    moved.epoch = 2;
    assert!(matches!(
        h.run(T0, Op::Claim(moved)).await,
        Reply::Claimed(_)
    ));

    let (back, _) = moves(h.run(T0, Op::ReturnHome { to: "eu".into() }).await);
    assert_eq!(back.len(), TENANTS / 2);
    assert!(
        back.iter()
            .all(|(_, from, to, epoch)| from == "us" && to == "eu" && *epoch == 3)
    );
    assert_eq!(h.sm.homed_in("eu").unwrap().len(), TENANTS / 2);
    assert_eq!(h.sm.homed_in("us").unwrap().len(), TENANTS / 2);
}

/// A second evacuation of the same region is recorded only when it could
/// move someone: a placement written into the region since, or a region
/// it allows that the first did not.
#[tokio::test]
async fn a_repeated_evacuation_is_recorded_only_when_it_could_move_someone() {
    let mut h = Harness::new();
    h.run(T0, place("acme", "eu", &["us", "ap"])).await;
    h.run(T0, place("globex", "eu", &["ap"])).await;
    let first = h.run(T0, evacuate("eu", &["us"])).await;
    assert_eq!(
        first,
        Reply::Evacuated {
            number: 1,
            again: false
        }
    );
    // globex has no standby the first allowed: stranded in eu.
    assert_eq!(h.sm.placement("globex").unwrap().unwrap().home, "eu");
    assert_eq!(
        h.run(T0, evacuate("eu", &["us"])).await,
        Reply::Evacuated {
            number: 1,
            again: true
        }
    );
    // Allowing ap too moves globex.
    assert_eq!(
        h.run(T0, evacuate("eu", &["us", "ap"])).await,
        Reply::Evacuated {
            number: 2,
            again: false
        }
    );
    let globex = h.sm.placement("globex").unwrap().unwrap();
    assert_eq!((globex.home.as_str(), globex.epoch), ("ap", 2));
    // acme is placed back in eu by hand: the same evacuation again moves it.
    let acme = h.sm.placement("acme").unwrap().unwrap();
    assert_eq!((acme.home.as_str(), acme.epoch), ("us", 2));
    h.run(T0, place_again("acme", 2, "eu", &["us"])).await;
    assert_eq!(
        h.run(T0, evacuate("eu", &["us", "ap"])).await,
        Reply::Evacuated {
            number: 3,
            again: false
        }
    );
    let acme = h.sm.placement("acme").unwrap().unwrap();
    assert_eq!((acme.home.as_str(), acme.epoch), ("us", 4));
    assert_eq!(h.sm.placement("globex").unwrap().unwrap().epoch, 2);
}

/// `claim` for another tenant: its scope and business key.
fn claim_of(tenant: &str, key: &str, reference: &str) -> NewClaim {
    let mut c = claim(key, reference, "eu", 0);
    c.scope.tenant = tenant.into();
    if let Some(business_key) = c.business_key.as_mut() {
        business_key.tenant = tenant.into();
    }
    c
}

fn assign(tenant: &str, group: &str) -> Op {
    Op::AssignTenant {
        tenant: tenant.into(),
        group: group.into(),
    }
}

/// The directory (docs/decisions/0063-a-raft-group-per-home-region.md):
/// a tenant is assigned to another group only while this group holds
/// nothing of it, for good, and from then on this group refuses its
/// claims and placements, writing nothing.
#[tokio::test]
async fn a_tenant_is_assigned_elsewhere_only_while_this_group_holds_nothing_of_it() {
    let mut h = Harness::new();
    assert_eq!(
        h.run(T0, assign("globex", "us-east")).await,
        Reply::Assigned {
            group: "us-east".into()
        }
    );
    // Repeatable; never to another group.
    assert_eq!(
        h.run(T0, assign("globex", "us-east")).await,
        Reply::Assigned {
            group: "us-east".into()
        }
    );
    assert_eq!(
        h.run(T0, assign("globex", "ap-south")).await,
        Reply::TenantInUse {
            assigned: Some("us-east".into())
        }
    );
    assert_eq!(
        h.sm.assignment("globex").unwrap().as_deref(),
        Some("us-east")
    );

    // Its claims and placements are refused here, and nothing is written.
    let other = Reply::OtherGroup {
        group: "us-east".into(),
    };
    let globex_claim = claim_of("globex", "k1", "order-1");
    assert_eq!(h.run(T0, Op::Claim(globex_claim.clone())).await, other);
    assert_eq!(h.sm.record(&globex_claim.scope).unwrap(), None);
    assert_eq!(h.run(T0, place("globex", "eu", &["us"])).await, other);
    assert_eq!(h.sm.placement("globex").unwrap(), None);

    // A tenant this group holds a record of stays here.
    assert!(matches!(
        h.run(T0, Op::Claim(claim("k1", "order-1", "eu", 0))).await,
        Reply::Claimed(_)
    ));
    assert_eq!(
        h.run(T0, assign("acme", "us-east")).await,
        Reply::TenantInUse { assigned: None }
    );
    assert_eq!(h.sm.assignment("acme").unwrap(), None);
    assert!(matches!(
        h.run(T0, Op::Claim(claim("k2", "order-2", "eu", 0))).await,
        Reply::Claimed(_)
    ));
    // So does a tenant it holds only a placement of.
    h.run(T0, place("initech", "eu", &["us"])).await;
    assert_eq!(
        h.run(T0, assign("initech", "us-east")).await,
        Reply::TenantInUse { assigned: None }
    );
    // A tenant whose name only starts like one held here is its own.
    assert_eq!(
        h.run(T0, assign("acm", "us-east")).await,
        Reply::Assigned {
            group: "us-east".into()
        }
    );
    assert!(matches!(
        h.run(T0, Op::Claim(claim("k3", "order-3", "eu", 0))).await,
        Reply::Claimed(_)
    ));
}

/// A business key outlives its record (I1): a tenant whose records were
/// purged but whose keys are still held stays in this group.
#[tokio::test]
async fn a_tenant_with_only_a_held_business_key_left_is_not_assigned_elsewhere() {
    let mut h = Harness::new();
    let Reply::Claimed(record) = h
        .run(T0, Op::Claim(claim_of("hooli", "k1", "order-1")))
        .await
    else {
        panic!("claimed");
    };
    h.run(
        T0,
        Op::Complete {
            scope: record.scope.clone(),
            fence: record.fence,
            response: response(),
            expires_after_ms: 1,
        },
    )
    .await;
    // Expired, then purged a retention later: the record is gone.
    assert_eq!(
        h.run(
            T0 + 10,
            Op::Expire {
                limit: 10,
                retention_ms: 1
            }
        )
        .await,
        Reply::Count(1)
    );
    assert_eq!(
        h.run(T0 + 1_000, Op::Purge { limit: 10 }).await,
        Reply::Count(1)
    );
    assert_eq!(h.sm.record(&record.scope).unwrap(), None);
    assert_eq!(
        h.run(T0 + 1_000, assign("hooli", "us-east")).await,
        Reply::TenantInUse { assigned: None }
    );
}
