//! Snapshots between state machines on disk: built on one, received chunk
//! by chunk and installed on another, kept across a restart; a damaged one
//! refused with nothing changed; one from a build before snapshot files
//! (one postcard value, fewer tables) still installed, and one such build
//! kept in its table moved to a file.

use std::path::Path;

use once_raft_store::command::Op;
use once_raft_store::protocol::{PaymentListQuery, RecordQuery};
use once_raft_store::snapshot_file::SnapshotContent;
use once_raft_store::state_machine::StateMachine;
use once_raft_store::types::{Snapshot, SnapshotMeta};
use openraft::RaftSnapshotBuilder;
use openraft::storage::RaftStateMachine;
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

#[path = "../examples/common/mod.rs"]
mod common;
use common::{Applier, DAY, T0, scope, send_in_chunks};

const RECORDS: u64 = 2_500;

async fn filled(dir: &Path) -> Applier {
    let mut a = Applier::new(StateMachine::open(&dir.join("state.redb")).unwrap());
    a.fill(RECORDS, |_| DAY).await;
    a.apply(
        T0,
        vec![Op::SetPlacement {
            tenant: "tenant-7".into(),
            expected_epoch: 0,
            home: "us".into(),
            standbys: vec!["eu".into()],
        }],
    )
    .await;
    a
}

/// What a member answers from its state: every check a snapshot must keep.
fn view(sm: &StateMachine) -> (Vec<String>, u64, usize, Vec<String>) {
    let records = sm.query(&RecordQuery {
        limit: u32::MAX,
        ..Default::default()
    });
    let keys = records.unwrap().into_iter().map(|r| r.scope.key).collect();
    let payment = sm
        .record_of_payment(&format!("pay_{:032x}", RECORDS - 1))
        .unwrap()
        .map(|r| r.scope.key);
    assert_eq!(payment, Some(scope(RECORDS - 1).key));
    let listing = sm
        .tenant_payments(&PaymentListQuery {
            tenant: "tenant-7".into(),
            account_id: None,
            merchant_reference: None,
            after: None,
            limit: 1_000,
        })
        .unwrap();
    let homed: Vec<String> = sm.homed_in("us").unwrap();
    (
        keys,
        sm.count(&RecordQuery::default()).unwrap(),
        listing.len(),
        homed,
    )
}

async fn bytes_of(snapshot: &mut Snapshot) -> Vec<u8> {
    let mut out = Vec::new();
    snapshot
        .snapshot
        .seek(std::io::SeekFrom::Start(0))
        .await
        .unwrap();
    snapshot.snapshot.read_to_end(&mut out).await.unwrap();
    out
}

fn snapshot_files(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("state.snapshots"))
        .unwrap()
        .count()
}

#[tokio::test]
async fn a_snapshot_installs_on_another_member_chunk_by_chunk_and_is_kept_across_a_restart() {
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut a = filled(a_dir.path()).await;
    let original = view(&a.sm);
    assert_eq!(original.1, RECORDS);
    assert_eq!(original.2, 25, "tenant-7's payments");
    assert_eq!(original.3, ["tenant-7"]);

    let mut snapshot = a.sm.build_snapshot().await.unwrap();
    let built = bytes_of(&mut snapshot).await;
    let mut b = StateMachine::open(&b_dir.path().join("state.redb")).unwrap();
    // An abandoned stream first (the leader moved on): its file goes.
    drop(b.begin_receiving_snapshot().await.unwrap());
    let (received, _) = send_in_chunks(&mut snapshot, &mut b, 64 << 10).await;
    b.install_snapshot(&snapshot.meta, received).await.unwrap();
    assert_eq!(view(&b), original);
    assert_eq!(
        b.applied_state().await.unwrap().0,
        snapshot.meta.last_log_id
    );
    assert_eq!(snapshot_files(b_dir.path()), 1);

    // A second snapshot replaces the first on the member that built both.
    a.fill(RECORDS + 10, |_| DAY).await;
    let mut newer = a.sm.build_snapshot().await.unwrap();
    assert_ne!(newer.meta.snapshot_id, snapshot.meta.snapshot_id);
    assert_eq!(snapshot_files(a_dir.path()), 1);
    assert_ne!(bytes_of(&mut newer).await, built);

    // Restarted, the receiver still holds the state and serves the same
    // snapshot to a follower.
    drop(b);
    let mut b = StateMachine::open(&b_dir.path().join("state.redb")).unwrap();
    assert_eq!(view(&b), original);
    let mut current = b.get_current_snapshot().await.unwrap().expect("kept");
    assert_eq!(current.meta, snapshot.meta);
    assert_eq!(bytes_of(&mut current).await, built);
}

#[tokio::test]
async fn a_damaged_snapshot_is_refused_and_the_state_stays_as_it_was() {
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut a = filled(a_dir.path()).await;
    let mut snapshot = a.sm.build_snapshot().await.unwrap();

    let mut b = Applier::new(StateMachine::open(&b_dir.path().join("state.redb")).unwrap());
    b.fill(3, |_| DAY).await;
    let before =
        b.sm.query(&RecordQuery {
            limit: 100,
            ..Default::default()
        })
        .unwrap();
    let applied = b.sm.applied_state().await.unwrap();

    let (mut received, _) = send_in_chunks(&mut snapshot, &mut b.sm, 1 << 20).await;
    let len = received.seek(std::io::SeekFrom::End(0)).await.unwrap();
    // One bit of one row, well past the header.
    received
        .seek(std::io::SeekFrom::Start(len / 2))
        .await
        .unwrap();
    let mut byte = [0u8];
    received.read_exact(&mut byte).await.unwrap();
    received
        .seek(std::io::SeekFrom::Start(len / 2))
        .await
        .unwrap();
    received.write_all(&[byte[0] ^ 0x10]).await.unwrap();
    received.flush().await.unwrap();
    let refused = b.sm.install_snapshot(&snapshot.meta, received).await;
    assert!(refused.is_err(), "a damaged snapshot was installed");

    assert_eq!(
        b.sm.query(&RecordQuery {
            limit: 100,
            ..Default::default()
        })
        .unwrap(),
        before
    );
    assert_eq!(b.sm.applied_state().await.unwrap(), applied);
    assert!(b.sm.get_current_snapshot().await.unwrap().is_none());
}

/// The snapshot as a build before snapshot files wrote it: every data
/// table's rows in one postcard value, here with only the first `tables`.
fn legacy_bytes(file: std::fs::File, tables: usize) -> Vec<u8> {
    let SnapshotContent::Rows(mut rows) = SnapshotContent::open(file).unwrap() else {
        panic!("this build writes rows")
    };
    let mut out: Vec<Vec<(Vec<u8>, Vec<u8>)>> = vec![Vec::new(); tables];
    while let Some(row) = rows.next_row().unwrap() {
        if let Some(table) = out.get_mut(usize::from(row.table)) {
            table.push((row.key, row.value));
        }
    }
    postcard::to_allocvec(&out).unwrap()
}

#[tokio::test]
async fn a_snapshot_from_a_build_before_snapshot_files_installs_and_one_kept_in_its_table_moves_to_a_file()
 {
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut a = filled(a_dir.path()).await;
    let original = view(&a.sm);
    let snapshot = a.sm.build_snapshot().await.unwrap();
    let file = std::fs::File::open(
        std::fs::read_dir(a_dir.path().join("state.snapshots"))
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path(),
    )
    .unwrap();
    // The build of records, business keys, placements, regions, sessions,
    // floors and the unfinished index: the newer indexes are derived.
    let legacy = legacy_bytes(file, 7);

    let mut b = StateMachine::open(&b_dir.path().join("state.redb")).unwrap();
    let mut received = b.begin_receiving_snapshot().await.unwrap();
    received.write_all(&legacy).await.unwrap();
    received.shutdown().await.unwrap();
    b.install_snapshot(&snapshot.meta, received).await.unwrap();
    assert_eq!(view(&b), original);

    // A state machine of that build kept its current snapshot in its meta
    // table; opened by this build, the snapshot is served from a file.
    drop(b);
    let c_dir = tempfile::tempdir().unwrap();
    let path = c_dir.path().join("state.redb");
    drop(StateMachine::open(&path).unwrap());
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        let meta: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("sm_meta");
        let mut table = txn.open_table(meta).unwrap();
        let encoded = postcard::to_allocvec::<SnapshotMeta>(&snapshot.meta).unwrap();
        table.insert("snapshot_meta", encoded.as_slice()).unwrap();
        table.insert("snapshot_data", legacy.as_slice()).unwrap();
        drop(table);
        txn.commit().unwrap();
    }
    let mut c = StateMachine::open(&path).unwrap();
    let mut current = c.get_current_snapshot().await.unwrap().expect("moved");
    assert_eq!(current.meta, snapshot.meta);
    assert_eq!(bytes_of(&mut current).await, legacy);
}

/// The tables a snapshot file says it carries.
async fn tables_in(snapshot: &mut Snapshot) -> u16 {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("copy.snap");
    std::fs::write(&path, bytes_of(snapshot).await).unwrap();
    match SnapshotContent::open(std::fs::File::open(&path).unwrap()).unwrap() {
        SnapshotContent::Rows(rows) => rows.tables(),
        SnapshotContent::Legacy(_) => panic!("this build writes rows"),
    }
}

/// Until the cluster moves past wire version 1 its snapshots carry the
/// tables of the build before (which refuses a snapshot with more), so a
/// member of that build can still catch up by one during a roll; after the
/// move, the version travels in the snapshot.
#[tokio::test]
async fn the_cluster_table_travels_in_a_snapshot_only_once_the_cluster_moved_to_version_2() {
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut a = filled(a_dir.path()).await;
    let mut at_v1 = a.sm.build_snapshot().await.unwrap();
    assert_eq!(tables_in(&mut at_v1).await, 11);

    a.apply(T0, vec![Op::RaiseWireVersion { version: 2 }]).await;
    assert_eq!(a.sm.wire_version().unwrap(), 2);
    let mut at_v2 = a.sm.build_snapshot().await.unwrap();
    assert_eq!(tables_in(&mut at_v2).await, 12);

    let mut b = StateMachine::open(&b_dir.path().join("state.redb")).unwrap();
    assert_eq!(b.wire_version().unwrap(), 1);
    let (received, _) = send_in_chunks(&mut at_v2, &mut b, 1 << 20).await;
    b.install_snapshot(&at_v2.meta, received).await.unwrap();
    assert_eq!(b.wire_version().unwrap(), 2);
    assert_eq!(view(&b), view(&a.sm));
}

/// A failover recorded as an evacuation (decision 0055) travels in the
/// `cluster` table: the member that installs the snapshot reads every
/// placement moved, and a failback there writes them home.
#[tokio::test]
async fn an_evacuation_travels_in_a_snapshot() {
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut a = filled(a_dir.path()).await;
    a.apply(T0, vec![Op::RaiseWireVersion { version: 4 }]).await;
    a.apply(
        T0,
        vec![Op::EvacuateRegion {
            from: "us".into(),
            eligible: vec!["eu".into()],
        }],
    )
    .await;
    let moved = a.sm.placement("tenant-7").unwrap().unwrap();
    assert_eq!((moved.home.as_str(), moved.epoch), ("eu", 2));

    let mut snapshot = a.sm.build_snapshot().await.unwrap();
    let mut b = StateMachine::open(&b_dir.path().join("state.redb")).unwrap();
    let (received, _) = send_in_chunks(&mut snapshot, &mut b, 1 << 20).await;
    b.install_snapshot(&snapshot.meta, received).await.unwrap();
    assert_eq!(b.placements().unwrap(), a.sm.placements().unwrap());
    assert_eq!(b.placement("tenant-7").unwrap(), Some(moved));
}
