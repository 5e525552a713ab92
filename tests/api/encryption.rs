//! Encryption at rest (docs/decisions/0031-encryption-at-rest.md): what the
//! stores hold is ciphertext, replays stay byte-identical across a key
//! rotation and the retirement of the old key, a tampered or orphaned blob
//! is refused with a clear error, and expiry drops what was sealed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use once_node::domain::TenantId;
use once_node::store::StoreError;
use once_store_client::protocol::RecordQuery;
use sqlx::Row;

use crate::helpers::*;
use crate::{on_every_backend, on_sql_backends};

on_every_backend!(a_rotation_and_the_old_keys_retirement_keep_replays_byte_identical);
on_sql_backends!(
    the_sql_rows_hold_answers_only_as_ciphertext,
    a_tampered_or_orphaned_answer_is_refused_with_a_clear_error,
);

/// Values a payment of these tests carries, none of which may appear in
/// any store's bytes.
const ACCOUNT: &str = "acct-plaintext-4711";
const REFERENCE: &str = "ref-plaintext-0815";
const AMOUNT: &str = "4711.99";

/// A key file of the test's own, so a rotation touches nobody else.
fn own_key_file(dir: &Path) -> PathBuf {
    let path = dir.join("data-keys");
    once_seal::KeyRing::generate().create_file(&path).unwrap();
    path
}

/// `once keys rotate --file …`, the operator's command.
fn rotate(path: &Path) {
    let out = std::process::Command::new(ONCE)
        .args(["keys", "rotate", "--file"])
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

/// The key file without the line of `id` (an operator retiring it).
fn retire(path: &Path, id: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    let kept: String = text
        .lines()
        .filter(|l| !l.starts_with(&format!("{id} ")))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_ne!(kept, text, "{id} was listed");
    std::fs::write(path, kept).unwrap();
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

async fn a_rotation_and_the_old_keys_retirement_keep_replays_byte_identical(backend: Backend) {
    let db = TestDb::new(backend).await;
    let dir = tempfile::tempdir().unwrap();
    let keys = own_key_file(dir.path());
    let app = TestApp::spawn_with(&db, |c| {
        c.data_keys = Some(keys.clone());
        // Every replay below is read from the store, not the node's cache.
        c.replay_cache_bytes = 0;
        // The test drives re-encryption itself.
        c.key_poll_interval = Duration::from_secs(3600);
    })
    .await;
    let body = payment_body(ACCOUNT, AMOUNT, REFERENCE);
    let first = send(app.post(ACME_KEY, Some("k-rotate"), &body)).await;
    assert_eq!(first.status, 201);
    let other_body = payment_body(ACCOUNT, "1.00", "ref-declined");
    let reencryption = &app.state.store.reencryption;
    assert_eq!(reencryption.sealed_count().await.unwrap().stale, 0);

    rotate(&keys);
    assert!(app.state.data_keys.reload_if_changed().unwrap());
    assert_eq!(app.state.data_keys.ring().sealing_key_id(), "k2");
    assert_eq!(
        reencryption.sealed_count().await.unwrap().stale,
        1,
        "the first answer is still under k1"
    );
    // Before re-encryption, old answers replay under the old key.
    let replay = send(app.post(ACME_KEY, Some("k-rotate"), &body)).await;
    assert!(replay.replayed);
    assert_eq!(replay.body, first.body);
    // New answers are sealed under the new key.
    let second = send(app.post(ACME_KEY, Some("k-after"), &other_body)).await;
    assert_eq!(second.status, 201);

    let resealed = once_node::reencryption::reseal_once(&app.state)
        .await
        .unwrap();
    assert_eq!(resealed, 1, "only the record sealed under k1");
    assert_eq!(reencryption.sealed_count().await.unwrap().stale, 0);
    assert_eq!(app.metric("idempotency_sealed_stale_records").await, 0.0);

    // No record needs k1 any more: the operator removes it.
    retire(&keys, "k1");
    assert!(app.state.data_keys.reload_if_changed().unwrap());
    assert_eq!(app.state.data_keys.ring().key_ids(), ["k2"]);
    for (key, body, answer) in [
        ("k-rotate", &body, &first),
        ("k-after", &other_body, &second),
    ] {
        let replay = send(app.post(ACME_KEY, Some(key), body)).await;
        assert!(replay.replayed, "{key} replays");
        assert_eq!(
            (replay.status, &replay.body),
            (answer.status, &answer.body),
            "{key}: byte for byte after the rotation and the retirement"
        );
    }
    // And the business key still guards: digests do not rotate.
    let duplicate = send(app.post(ACME_KEY, Some("k-dup"), &body)).await;
    assert_eq!(
        (duplicate.status, duplicate.error_code().as_str()),
        (409, "DUPLICATE_MERCHANT_REFERENCE")
    );
    app.stop().await;
}

async fn the_sql_rows_hold_answers_only_as_ciphertext(backend: Backend) {
    let db = TestDb::new(backend).await;
    let app = TestApp::spawn(&db).await;
    let answer = send(app.post(
        ACME_KEY,
        Some("k-raw"),
        &payment_body(ACCOUNT, AMOUNT, REFERENCE),
    ))
    .await;
    assert_eq!(answer.status, 201);
    let pool = db.pool().await;
    let row = sqlx::query(
        "SELECT response_sealed, sealed_with FROM idempotency_requests WHERE idempotency_key = 'k-raw'",
    )
    .fetch_one(&pool.pool)
    .await
    .unwrap();
    let sealed: Vec<u8> = row.try_get("response_sealed").unwrap();
    let key_id: String = row.try_get("sealed_with").unwrap();
    assert_eq!(key_id, test_key_ring().sealing_key_id());
    assert_eq!(once_seal::key_id_of(&sealed), Ok(key_id.as_str()));
    for plain in [
        ACCOUNT.as_bytes(),
        REFERENCE.as_bytes(),
        AMOUNT.as_bytes(),
        &answer.body,
    ] {
        assert!(
            !contains(&sealed, plain),
            "the stored answer holds {}",
            String::from_utf8_lossy(plain)
        );
    }
    // The whole row, as text, shows none of it either.
    let row = sqlx::query(
        "SELECT tenant_id, principal_id, operation, idempotency_key, fingerprint, status, step, \
         payment_id, provider_key, error_code, region FROM idempotency_requests",
    )
    .fetch_one(&pool.pool)
    .await
    .unwrap();
    for column in 0..row.len() {
        let value: Option<String> = row.try_get(column).unwrap();
        let value = value.unwrap_or_default();
        assert!(!value.contains(ACCOUNT) && !value.contains(REFERENCE) && !value.contains(AMOUNT));
    }
    pool.pool.close().await;
    app.stop().await;
}

async fn a_tampered_or_orphaned_answer_is_refused_with_a_clear_error(backend: Backend) {
    let db = TestDb::new(backend).await;
    let app = TestApp::spawn_with(&db, |c| c.replay_cache_bytes = 0).await;
    let body = payment_body(ACCOUNT, AMOUNT, REFERENCE);
    assert_eq!(
        send(app.post(ACME_KEY, Some("k-tamper"), &body))
            .await
            .status,
        201
    );
    let pool = db.pool().await;
    let read = || async {
        let row = sqlx::query(
            "SELECT response_sealed FROM idempotency_requests WHERE idempotency_key = 'k-tamper'",
        )
        .fetch_one(&pool.pool)
        .await
        .unwrap();
        row.try_get::<Vec<u8>, _>("response_sealed").unwrap()
    };
    let write = |blob: Vec<u8>| async {
        sqlx::query(
            "UPDATE idempotency_requests SET response_sealed = $1 WHERE idempotency_key = 'k-tamper'",
        )
        .bind(blob)
        .execute(&pool.pool)
        .await
        .unwrap();
    };
    let find = || async {
        app.state
            .store
            .operators
            .find(&TenantId::parse("acme").unwrap(), "k-tamper")
            .await
    };
    let original = read().await;

    let mut tampered = original.clone();
    *tampered.last_mut().unwrap() ^= 1;
    write(tampered).await;
    match find().await {
        Err(StoreError::Corrupt(why)) => assert!(
            why.contains("failed authentication"),
            "a tampered answer says so: {why}"
        ),
        other => panic!("a tampered answer must not open: {other:?}"),
    }
    assert_eq!(
        send(app.post(ACME_KEY, Some("k-tamper"), &body))
            .await
            .status,
        500,
        "never a wrong replay"
    );

    // Sealed under a key this node's file does not list.
    let stranger = once_seal::KeyRing::generate().rotated().rotated();
    write(stranger.seal(b"answer", b"elsewhere")).await;
    match find().await {
        Err(StoreError::Corrupt(why)) => assert!(
            why.contains("sealed under key \"k3\", which the key file does not list"),
            "an orphaned answer names its key: {why}"
        ),
        other => panic!("an answer under an unknown key must not open: {other:?}"),
    }

    // Put back, it replays again.
    write(original).await;
    assert!(find().await.is_ok());
    pool.pool.close().await;
    app.stop().await;
}

/// Every byte of a member's data directory: the redb log, the state
/// machine and the snapshot it keeps.
fn files_under(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push((path.clone(), std::fs::read(&path).unwrap()));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raft_stores_log_state_machine_and_snapshots_hold_no_plaintext() {
    let db = TestDb::new(Backend::Raft).await;
    let app = TestApp::spawn(&db).await;
    let body = payment_body(ACCOUNT, AMOUNT, REFERENCE);
    let answer = send(app.post(ACME_KEY, Some("k-files"), &body)).await;
    assert_eq!(answer.status, 201);
    assert!(
        send(app.post(ACME_KEY, Some("k-files"), &body))
            .await
            .replayed
    );
    let duplicate = send(app.post(ACME_KEY, Some("k-files-2"), &body)).await;
    assert_eq!(
        duplicate.status, 409,
        "the business key, compared as a digest"
    );
    // Listing by account and merchant reference goes through the digests.
    let listed = app
        .client
        .get(format!(
            "{}/payments?accountId={ACCOUNT}&merchantReference={REFERENCE}",
            app.url
        ))
        .bearer_auth(ACME_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(listed.status(), 200);
    let listed: serde_json::Value = listed.json().await.unwrap();
    assert_eq!(listed["data"].as_array().map(Vec::len), Some(1), "{listed}");

    // Every group's snapshot: the directory's and the one acme lives in.
    let cluster = db.store.as_ref().unwrap();
    for id in cluster.ids() {
        let admin = cluster.members[&id].admin_endpoint();
        for endpoint in [admin.clone(), format!("{admin}/groups/{RAFT_TEST_GROUP}")] {
            once_store_client::admin::snapshot(&cluster.operator(), &endpoint)
                .await
                .expect("snapshot");
        }
    }
    let group = cluster.group_client(RAFT_TEST_GROUP);
    for (i, id) in cluster.ids().into_iter().enumerate() {
        eventually(Duration::from_secs(20), || async {
            cluster.status(id).await?.snapshot_index?;
            group.status_of(i).await.ok()?.snapshot_index.map(|_| ())
        })
        .await;
    }
    let needles: [(&str, &[u8]); 4] = [
        ("account id", ACCOUNT.as_bytes()),
        ("merchant reference", REFERENCE.as_bytes()),
        ("amount", AMOUNT.as_bytes()),
        ("answer body", &answer.body),
    ];
    for id in cluster.ids() {
        let files = files_under(&cluster.members[&id].data_dir);
        assert!(!files.is_empty());
        // The scan reads what is there: the scope's key is plain by design.
        assert!(
            files.iter().any(|(_, bytes)| contains(bytes, b"k-files")),
            "member {id}'s files hold the records"
        );
        for (path, bytes) in &files {
            for (what, needle) in needles {
                assert!(
                    !contains(bytes, needle),
                    "{} holds the {what} in plaintext",
                    path.display()
                );
            }
        }
    }

    // Expiry drops the payload as well as the answer.
    app.advance(Duration::from_secs(24 * 3600 + 1)).await;
    once_node::sweeper::sweep_once(&app.state).await.unwrap();
    let records = group
        .records(RecordQuery {
            limit: u32::MAX,
            ..RecordQuery::default()
        })
        .await
        .unwrap();
    let expired = records
        .iter()
        .find(|r| r.scope.key == "k-files")
        .expect("the record");
    assert_eq!(expired.status.as_str(), "EXPIRED");
    assert_eq!((&expired.response, &expired.payload), (&None, &None));
    app.stop().await;
}
