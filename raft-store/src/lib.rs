//! raft-store (docs written below once the crate stands).

// openraft's `StorageError` is over 200 bytes and its storage traits return
// it; our storage helpers return the same type rather than box it and
// convert at every trait boundary.
#![allow(clippy::result_large_err)]

pub mod admin;
pub mod api_service;
pub mod apply;
pub mod client;
pub mod command;
pub mod config;
pub mod group_commit;
pub mod log_store;
pub mod network;
pub mod protocol;
pub mod raft_service;
pub mod read_index;
pub mod server;
pub mod state_machine;
pub mod types;
pub mod wire;
