//! The payments resource as data: the command a client sends
//! ([`command`]), the payment as stored ([`model`]), and the answers rendered
//! from it ([`response`]). No I/O and no engine: the engine that runs a
//! payment under the contract is [`crate::engine`], its handlers
//! [`crate::routes`].

pub mod command;
pub mod model;
pub mod response;
