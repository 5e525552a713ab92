//! raft-store (docs written below once the crate stands).

pub mod apply;
pub mod command;
pub mod log_store;
pub mod state_machine;
pub mod types;
