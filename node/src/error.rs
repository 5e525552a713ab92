//! The API's error type lives in the edge crate, shared with the router:
//! see [`once_edge::error`]. Re-exported so node code says `crate::error`.

pub use once_edge::error::*;
