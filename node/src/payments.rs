//! The payments resource as data: the command a client sends
//! ([`command`]) and the headers that go with it ([`headers`]), the payment
//! as stored ([`model`]), the answers rendered from it ([`response`]), and
//! a listing's query, cursor and page ([`listing`]). What the API document
//! says of all of them is here too, made from the same constants: each
//! one's schema beside it (`command::schema`, `response::schema`) and every
//! answer of every operation ([`answers`]). No I/O and no engine: the
//! engine that runs a
//! payment under the contract is [`crate::engine`], its handlers
//! [`crate::routes`].

pub mod answers;
pub mod command;
pub mod headers;
pub mod listing;
pub mod model;
pub mod response;
