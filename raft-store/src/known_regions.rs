//! The cluster's regions: the only ones a placement, a region status, a
//! move or an evacuation may name
//! (docs/decisions/0098-regions-validated-on-apply.md).
//!
//! The leader declares them ([`Op::DeclareRegions`], from its members'
//! configured regions, `once store --peer-regions`); each is one row of the
//! `cluster` table, `regions/‖name` → nothing, so they travel in the log
//! and in snapshots like the cluster's other agreements. Apply refuses a
//! command naming any other region ([`Reply::UnknownRegion`]) in the same
//! apply that would have written it, on every member alike, so a log
//! replayed anywhere makes the same refusal. A cluster that never declared
//! a region (members started without `--peer-regions`: development) checks
//! nothing.
//!
//! [`Op::DeclareRegions`]: crate::command::Op::DeclareRegions
//! [`Reply::UnknownRegion`]: crate::command::Reply::UnknownRegion

use std::collections::BTreeSet;

use redb::{ReadableTable, Table};

type Bytes = &'static [u8];

/// In the `cluster` table: `PREFIX ‖ region` → nothing. Sorts apart from
/// the assignments' and evacuations' keys.
const PREFIX: &[u8] = b"regions/";

fn key(region: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(PREFIX.len() + region.len());
    key.extend_from_slice(PREFIX);
    key.extend_from_slice(region.as_bytes());
    key
}

/// Every region declared in `cluster` (empty: none ever was).
pub(crate) fn known_in(
    cluster: &impl ReadableTable<Bytes, Bytes>,
) -> Result<BTreeSet<String>, redb::StorageError> {
    let mut known = BTreeSet::new();
    for item in cluster.range(PREFIX..)? {
        let (k, _) = item?;
        let Some(name) = k.value().strip_prefix(PREFIX) else {
            break;
        };
        known.insert(String::from_utf8_lossy(name).into_owned());
    }
    Ok(known)
}

/// Adds `regions` to the declared ones.
pub(crate) fn declare(
    cluster: &mut Table<'_, Bytes, Bytes>,
    regions: &[String],
) -> Result<(), redb::StorageError> {
    for region in regions {
        cluster.insert(key(region).as_slice(), [].as_slice())?;
    }
    Ok(())
}

/// The first of `named` that `known` lacks, when `known` holds any.
pub(crate) fn first_unknown<'a>(known: &BTreeSet<String>, named: &[&'a str]) -> Option<&'a str> {
    if known.is_empty() {
        return None;
    }
    named.iter().copied().find(|r| !known.contains(*r))
}

#[cfg(test)]
mod tests {
    use super::*;
    use redb::TableDefinition;

    const T: TableDefinition<Bytes, Bytes> = TableDefinition::new("t");

    #[test]
    fn declared_regions_read_back_apart_from_other_agreements() {
        let dir = tempfile::tempdir().unwrap();
        let db = redb::Database::create(dir.path().join("db.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut table = txn.open_table(T).unwrap();
            assert!(known_in(&table).unwrap().is_empty());
            table
                .insert(b"assignments/acme".as_slice(), b"eu".as_slice())
                .unwrap();
            table
                .insert(b"wire_version".as_slice(), [0, 6].as_slice())
                .unwrap();
            declare(&mut table, &["us".into(), "eu".into()]).unwrap();
            declare(&mut table, &["eu".into()]).unwrap();
            let known = known_in(&table).unwrap();
            assert_eq!(known.iter().collect::<Vec<_>>(), ["eu", "us"]);
            assert_eq!(
                first_unknown(&known, &["eu", "nowhere", "us"]),
                Some("nowhere")
            );
            assert_eq!(first_unknown(&known, &["us", "eu"]), None);
            assert_eq!(first_unknown(&BTreeSet::new(), &["nowhere"]), None);
        }
        txn.commit().unwrap();
    }
}
