//! Compact binary bodies for the Raft RPC and the client API: postcard
//! (serde) in an `application/octet-stream` body, one extractor and one
//! response type, so no handler touches encoding; and the wire version
//! every request and answer declares.
//!
//! # Wire versions
//!
//! Postcard carries no field names and no version: a peer decodes what it
//! knows and refuses the rest. Messages therefore only ever grow at their
//! ends (a new [`crate::command::Op`] variant goes last), and each release
//! that adds one raises [`WIRE_VERSION`]. Every request and every answer
//! carries the sender's version in [`VERSION_HEADER`]; a message without
//! it comes from the build before versions (version 1).
//!
//! A member decodes every version up to its own, so an old node keeps
//! working against new members. The other way round is the cluster's
//! business: the leader proposes a command of version N only once every
//! member has declared N and the cluster has moved to it
//! (`once_raft_store::housekeeping`; docs/decisions/0041-wire-versions.md).

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;

pub const CONTENT_TYPE: &str = "application/octet-stream";

/// The newest wire version this build speaks and decodes. 2 added
/// [`crate::command::Op::RaiseWireVersion`] and
/// [`crate::command::Op::ForgetIdleClients`]; 3, pipelined appends on Raft
/// RPC (a member orders the appends of a leader's lane by their
/// `x-once-lane` and `x-once-lane-seq` headers; no message changed); 4,
/// [`crate::command::Op::EvacuateRegion`]; 5, [`crate::command::Op::AssignTenant`]
/// and [`crate::protocol::Read::Assignment`]; 6,
/// [`crate::command::Op::DeclareRegions`] and
/// [`crate::command::Reply::UnknownRegion`].
pub const WIRE_VERSION: u16 = 6;

/// The header every request and answer declares its sender's version in.
pub const VERSION_HEADER: &str = "x-once-wire-version";

/// The version `headers` declare: 1 (the build before versions) when they
/// declare none, or nothing readable.
pub fn version_in(headers: &axum::http::HeaderMap) -> u16 {
    headers
        .get(VERSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

/// A postcard-encoded request or response body.
#[derive(Debug)]
pub struct Postcard<T>(pub T);

impl<T, S> FromRequest<S> for Postcard<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        // `Bytes` enforces the router's body limit and answers 413 past it,
        // which the sending member maps to `PayloadTooLarge`.
        let sender = version_in(req.headers());
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(IntoResponse::into_response)?;
        postcard::from_bytes(&bytes).map(Postcard).map_err(|e| {
            let message = if sender > WIRE_VERSION {
                format!(
                    "wire_version_unsupported: the sender speaks wire version {sender}, \
                     this member only up to {WIRE_VERSION}; upgrade this member ({e})"
                )
            } else {
                format!("undecodable body: {e}")
            };
            (StatusCode::BAD_REQUEST, message).into_response()
        })
    }
}

impl<T: Serialize> IntoResponse for Postcard<T> {
    fn into_response(self) -> Response {
        match postcard::to_allocvec(&self.0) {
            Ok(bytes) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], bytes).into_response(),
            Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("encoding: {e}")).into_response(),
        }
    }
}

pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, postcard::Error> {
    postcard::to_allocvec(value)
}

pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, postcard::Error> {
    postcard::from_bytes(bytes)
}
