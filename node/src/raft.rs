//! The `raft` store mode: idempotency records, business-key reservations
//! and tenant placement live in raft-store, replicated across regions, and
//! the regional database keeps the payments (and their outbox rows) this
//! region executes or recovers — a materialized view of the records.
//!
//! - [`RaftStore`]: the traits of [`crate::store`] on a
//!   [`once_store_client::client::StoreClient`] plus the regional database.
//! - [`convert`]: raft-store's record parsed into the node's typed one
//!   (status, step and response are already one type), and the payment
//!   facts a record carries so any region can finish it.
//! - [`placement`]: the placement epoch this node believes per tenant, stated
//!   in every claim and corrected by the store's `Misdirected` answers.
//! - [`reach`]: whether raft-store's leader is in reach, watched in the
//!   background from the nearest member, for `/readyz`.
//!
//! Write order: raft-store decides (fenced), the regional database follows.
//! A claim is claimed in raft-store first and its pending payment upserted
//! locally after; a finish completes the record in raft-store first and then
//! applies the payment's final state and outbox event locally in one
//! transaction. A stale owner therefore never touches the regional database,
//! and a region taking a record over materializes the payment from the facts
//! stored in the record (upsert by payment id).
//! A row a crash left pending behind its finished record is settled by the
//! recovery worker's settling pass (`crate::settling`).

pub mod convert;
pub mod placement;
pub mod reach;
mod store;

pub use store::{RaftStore, RaftStoreConfig};
