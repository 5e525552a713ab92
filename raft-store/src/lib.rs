//! raft-store (docs written below once the crate stands).

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
