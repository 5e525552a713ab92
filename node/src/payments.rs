//! The payments resource as data: the command a client sends
//! ([`command`]), the payment as stored ([`model`]), the answers rendered
//! from it ([`response`]), and a listing's query, cursor and page
//! ([`listing`]). No I/O and no engine: the engine that runs a
//! payment under the contract is [`crate::engine`], its handlers
//! [`crate::routes`].

pub mod command;
pub mod listing;
pub mod model;
pub mod response;
