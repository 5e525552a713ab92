//! The node's data keys (encryption at rest,
//! docs/decisions/0031-encryption-at-rest.md): where they come from, how a
//! changed key file is picked up, and what the node seals with them.
//!
//! - Source ([`DataKeys::open`]): the key file named by `--data-keys`
//!   (`ONCE_DATA_KEYS`); without one, the `sql` mode on a SQLite file
//!   creates `data-keys` beside the database (mode 0600) on first start and
//!   reuses it after; PostgreSQL and the `raft` mode refuse to start, since
//!   several nodes must share the keys and a generated one could not be.
//! - Reload ([`DataKeys::reload_if_changed`], polled by the re-encryption
//!   worker): a rotated file (`once keys rotate`) takes effect without a
//!   restart. A file that does not parse, or whose digest key changed, is
//!   refused and the keys in use are kept.
//! - Sealing: the stored answer and the command payload are sealed bound
//!   to their record's scope and field ([`associated`]), so a blob copied
//!   into another record or field does not open. Business keys become keyed
//!   digests ([`DataKeys::business_key`]).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::SystemTime;

use anyhow::Context;
use once_seal::{KeyRing, SealError};
use once_store_client::command::{self as rs, Sealed, StoredResponse};
use tracing::{error, info};

use crate::store::StoreError;

/// The key file the node creates beside its SQLite database.
pub const DEFAULT_FILE_NAME: &str = "data-keys";

pub use once_store_client::command::SealedField as Field;

/// The associated data of a blob of `field` in the record at `scope`
/// ([`rs::Scope::associated_data`]).
pub fn associated(field: Field, scope: &rs::Scope) -> Vec<u8> {
    scope.associated_data(field)
}

/// The key file being watched, and the modification time last read.
#[derive(Debug)]
struct WatchedFile {
    path: PathBuf,
    modified: Mutex<Option<SystemTime>>,
}

/// The ring in use (swapped whole on reload) and where it came from.
/// std locks, not tokio's: each is held only to copy an `Arc` or a
/// timestamp, never across an `.await`.
#[derive(Debug)]
pub struct DataKeys {
    ring: RwLock<Arc<KeyRing>>,
    file: Option<WatchedFile>,
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

fn corrupt(what: &str, e: SealError) -> StoreError {
    StoreError::Corrupt(format!("sealed {what}: {e}"))
}

impl DataKeys {
    /// Keys held in memory only (tests, and an in-memory database whose
    /// records die with the process anyway).
    pub fn in_memory(ring: KeyRing) -> Self {
        Self {
            ring: RwLock::new(Arc::new(ring)),
            file: None,
        }
    }

    /// Reads the key file at `path`, and watches it for changes.
    pub fn from_file(path: &Path) -> anyhow::Result<Self> {
        let ring = KeyRing::load(path)?;
        Ok(Self {
            ring: RwLock::new(Arc::new(ring)),
            file: Some(WatchedFile {
                path: path.to_owned(),
                modified: Mutex::new(modified(path)),
            }),
        })
    }

    /// The keys a node is configured with (see the module docs): `file`
    /// when given, else the default beside a SQLite `database_url`, else
    /// an error naming the flag.
    pub fn open(file: Option<&Path>, database_url: &str, raft_mode: bool) -> anyhow::Result<Self> {
        if let Some(path) = file {
            return Self::from_file(path).with_context(|| {
                format!("loading the data keys (--data-keys {})", path.display())
            });
        }
        let sqlite = once_db::sqlite_file(database_url).filter(|_| !raft_mode);
        let Some(database) = sqlite else {
            anyhow::bail!(
                "encryption at rest needs a data key file shared by every node: pass --data-keys FILE \
                 (ONCE_DATA_KEYS; `once keys init --file FILE` makes one). Only the sql mode on a \
                 SQLite file creates its own"
            );
        };
        let path = database
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .join(DEFAULT_FILE_NAME);
        if !path.exists() {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
            }
            KeyRing::generate()
                .create_file(&path)
                .with_context(|| format!("creating the data key file {}", path.display()))?;
            info!(path = %path.display(), "created a data key file beside the SQLite database (mode 0600): back it up with the database, the stored answers cannot be read without it");
        } else {
            info!(path = %path.display(), "using the data key file beside the SQLite database");
        }
        Self::from_file(&path).with_context(|| format!("loading the data keys {}", path.display()))
    }

    /// The ring in use now.
    pub fn ring(&self) -> Arc<KeyRing> {
        self.ring.read().expect("key ring lock").clone()
    }

    /// Re-reads the key file if its modification time changed. `Ok(true)`
    /// when new keys are in use. A file that does not parse or changes the
    /// digest key is refused (logged), and the keys in use stay.
    pub fn reload_if_changed(&self) -> anyhow::Result<bool> {
        let Some(file) = &self.file else {
            return Ok(false);
        };
        let now = modified(&file.path);
        {
            let mut seen = file.modified.lock().expect("key file lock");
            if *seen == now {
                return Ok(false);
            }
            *seen = now;
        }
        let ring = match KeyRing::load(&file.path) {
            Ok(ring) => ring,
            Err(e) => {
                error!(path = %file.path.display(), error = %e, "the changed data key file is unusable; keeping the keys in use");
                return Err(e.into());
            }
        };
        if !ring.same_digest_key(&self.ring()) {
            error!(path = %file.path.display(), "the changed data key file has another digest key; refused (stored business keys would stop matching), keeping the keys in use");
            anyhow::bail!("the digest key of a data key file must never change");
        }
        info!(path = %file.path.display(), keys = ?ring.key_ids(), sealing = ring.sealing_key_id(), "data key file reloaded");
        *self.ring.write().expect("key ring lock") = Arc::new(ring);
        Ok(true)
    }

    /// Seals a stored answer for the record at `scope`.
    pub fn seal_answer(&self, scope: &rs::Scope, answer: &StoredResponse) -> Sealed {
        Sealed::seal_answer(&self.ring(), scope, answer)
    }

    pub fn open_answer(
        &self,
        scope: &rs::Scope,
        blob: &Sealed,
    ) -> Result<StoredResponse, StoreError> {
        blob.open_answer(&self.ring(), scope)
            .map_err(|e| corrupt("answer", e))
    }

    /// Seals a command payload for the record at `scope`.
    pub fn seal_payload(&self, scope: &rs::Scope, payload: &[u8]) -> Sealed {
        Sealed(
            self.ring()
                .seal(payload, &associated(Field::Payload, scope)),
        )
    }

    pub fn open_payload(&self, scope: &rs::Scope, blob: &Sealed) -> Result<Vec<u8>, StoreError> {
        self.ring()
            .open(&blob.0, &associated(Field::Payload, scope))
            .map_err(|e| corrupt("payload", e))
    }

    /// Opens and seals again under the newest key (re-encryption).
    pub fn reseal(
        &self,
        field: Field,
        scope: &rs::Scope,
        blob: &Sealed,
    ) -> Result<Sealed, StoreError> {
        let ring = self.ring();
        let ad = associated(field, scope);
        let plain = zeroizing(ring.open(&blob.0, &ad).map_err(|e| corrupt("blob", e))?);
        Ok(Sealed(ring.seal(&plain, &ad)))
    }

    /// A business key as raft-store reserves it: the tenant in clear (it
    /// is in every scope anyway), account and merchant reference as keyed
    /// digests bound to the tenant. Equal inputs give equal digests across
    /// rotations.
    pub fn business_key(
        &self,
        tenant: &str,
        account_id: &str,
        merchant_reference: &str,
    ) -> rs::BusinessKey {
        rs::BusinessKey {
            tenant: tenant.to_owned(),
            account_id: self.account_digest(tenant, account_id),
            merchant_reference: self.reference_digest(tenant, merchant_reference),
        }
    }

    /// The digest raft-store holds for an account id (listing filters).
    pub fn account_digest(&self, tenant: &str, account_id: &str) -> String {
        self.ring()
            .digest(&[b"account", tenant.as_bytes(), account_id.as_bytes()])
    }

    /// The digest raft-store holds for a merchant reference.
    pub fn reference_digest(&self, tenant: &str, merchant_reference: &str) -> String {
        self.ring().digest(&[
            b"merchant_reference",
            tenant.as_bytes(),
            merchant_reference.as_bytes(),
        ])
    }
}

/// Plaintext buffers are wiped when dropped.
fn zeroizing(bytes: Vec<u8>) -> zeroize::Zeroizing<Vec<u8>> {
    zeroize::Zeroizing::new(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(key: &str) -> rs::Scope {
        rs::Scope {
            tenant: "acme".into(),
            principal: "app".into(),
            operation: "payments.create".into(),
            key: key.into(),
        }
    }

    #[test]
    fn an_answer_opens_only_in_its_own_record_and_field() {
        let keys = DataKeys::in_memory(KeyRing::generate());
        let answer = StoredResponse {
            status: 201,
            headers: vec![("Location".into(), "/payments/p1".into())],
            body: b"{\"amount\":\"12.50\"}".to_vec(),
            schema_version: 2,
        };
        let blob = keys.seal_answer(&scope("k1"), &answer);
        assert_eq!(keys.open_answer(&scope("k1"), &blob).unwrap(), answer);
        assert!(keys.open_answer(&scope("k2"), &blob).is_err());
        assert!(keys.open_payload(&scope("k1"), &blob).is_err());
    }

    #[test]
    fn the_default_is_a_private_file_beside_sqlite_and_other_stores_need_a_file() {
        let dir = tempfile_dir();
        let db = dir.join("node.db");
        let first = DataKeys::open(None, db.to_str().unwrap(), false).unwrap();
        let path = dir.join(DEFAULT_FILE_NAME);
        assert!(path.exists());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let again = DataKeys::open(None, db.to_str().unwrap(), false).unwrap();
        assert!(
            again.ring().same_digest_key(&first.ring()),
            "reused on resume"
        );
        let pg = DataKeys::open(None, "postgres://u@h/db", false).unwrap_err();
        assert!(format!("{pg:#}").contains("--data-keys"), "{pg:#}");
        let raft = DataKeys::open(None, db.to_str().unwrap(), true).unwrap_err();
        assert!(format!("{raft:#}").contains("--data-keys"), "{raft:#}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn tempfile_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("once-data-keys-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
