//! Which group each tenant lives in: the directory's assignments
//! (docs/decisions/0063-a-raft-group-per-home-region.md).
//!
//! A deployment runs one Raft group per home region. The first group is
//! the *directory*: a tenant lives there unless the directory assigned it
//! to another group, once and for good ([`Op::AssignTenant`]). An
//! assignment is one row of the `cluster` table, `assignments/‖tenant` →
//! the group's name, so it travels in the log and in snapshots like the
//! cluster's other agreements, and a snapshot's format does not change.
//!
//! What keeps a tenant's state in one group: the directory assigns a tenant
//! only while it holds nothing of it, and from then on refuses its claims
//! and placements ([`Reply::OtherGroup`]); the check and the refusal are in
//! the same apply as the write they guard. Every group runs the same apply,
//! so only the directory ever holds assignments (only its clients send
//! them), and the other groups' checks find none.
//!
//! [`Op::AssignTenant`]: crate::command::Op::AssignTenant
//! [`Reply::OtherGroup`]: crate::command::Reply::OtherGroup

use redb::{ReadableTable, Table};

type Bytes = &'static [u8];

/// In the `cluster` table: `PREFIX ‖ tenant` → the group's name (UTF-8).
/// Sorts before the evacuations' keys and never inside their range.
const PREFIX: &[u8] = b"assignments/";

fn key(tenant: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(PREFIX.len() + tenant.len());
    key.extend_from_slice(PREFIX);
    key.extend_from_slice(tenant.as_bytes());
    key
}

/// The group `tenant` is assigned to in `cluster`, if any.
pub(crate) fn assignment_in(
    cluster: &impl ReadableTable<Bytes, Bytes>,
    tenant: &str,
) -> Result<Option<String>, redb::StorageError> {
    Ok(cluster
        .get(key(tenant).as_slice())?
        .map(|v| String::from_utf8_lossy(v.value()).into_owned()))
}

/// Records that `tenant` lives in `group`.
pub(crate) fn assign(
    cluster: &mut Table<'_, Bytes, Bytes>,
    tenant: &str,
    group: &str,
) -> Result<(), redb::StorageError> {
    cluster.insert(key(tenant).as_slice(), group.as_bytes())?;
    Ok(())
}

/// Whether `table` holds a key that starts with `prefix`.
pub(crate) fn holds_prefix(
    table: &impl ReadableTable<Bytes, Bytes>,
    prefix: &[u8],
) -> Result<bool, redb::StorageError> {
    match table.range(prefix..)?.next() {
        Some(item) => Ok(item?.0.value().starts_with(prefix)),
        None => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redb::TableDefinition;

    const T: TableDefinition<Bytes, Bytes> = TableDefinition::new("t");

    #[test]
    fn an_assignment_reads_back_and_a_prefix_is_matched_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let db = redb::Database::create(dir.path().join("db.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut table = txn.open_table(T).unwrap();
            assert_eq!(assignment_in(&table, "acme").unwrap(), None);
            assign(&mut table, "acme", "us-east").unwrap();
            assert_eq!(
                assignment_in(&table, "acme").unwrap().as_deref(),
                Some("us-east")
            );
            assert_eq!(assignment_in(&table, "acm").unwrap(), None);
            table
                .insert(b"records/abc".as_slice(), b"".as_slice())
                .unwrap();
            assert!(holds_prefix(&table, b"records/ab").unwrap());
            assert!(!holds_prefix(&table, b"records/abd").unwrap());
            assert!(!holds_prefix(&table, b"zzz").unwrap());
        }
        txn.commit().unwrap();
    }
}
