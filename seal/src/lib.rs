//! Encryption at rest (docs/decisions/0031-encryption-at-rest.md): what the
//! node seals before anything reaches a store, and the keys it seals with.
//!
//! This crate owns:
//!
//! - [`KeyRing`] (`key_ring`): the data keys and the digest key, read from
//!   the key file, whose format is documented there. The newest (last)
//!   data key seals; every listed one opens. Key material is wiped on drop
//!   and never printed (`Debug` shows key ids only).
//! - the envelope (`envelope`): [`KeyRing::seal`] and [`KeyRing::open`],
//!   AES-256-GCM with a random 96-bit nonce, in a self-describing blob
//!   (format version, key id, nonce, ciphertext and tag). The caller's
//!   associated data binds a blob to its record: a blob moved to another
//!   record, or to another field, does not open. [`key_id_of`] reads a
//!   blob's key id without any key, which is how re-encryption and
//!   `once keys status` tell which records an old key still guards.
//! - keyed digests (`digest`): [`KeyRing::digest`], HMAC-SHA256 under the
//!   digest key, for values a store only ever compares (business keys).
//!   The digest key never rotates: a digest must stay equal to itself
//!   across a rotation, or a business key could be reserved twice.
//!
//! ```text
//!   node ── seal(answer, scope) ──▶ blob ──▶ SQL row / raft-store log,
//!        ◀─ open(blob, scope) ────        state machine, snapshots
//!   node ── digest(account) ─────▶ 32 bytes ──▶ raft-store's business keys
//! ```

mod digest;
mod envelope;
mod key_ring;

pub use envelope::{FORMAT_VERSION, SealError, key_id_of};
pub use key_ring::{KeyFileError, KeyRing};
