//! API-key authentication lives in the edge crate, shared with the router:
//! see [`once_edge::api_keys`]. Re-exported so node code says `crate::auth`.

pub use once_edge::api_keys::*;
