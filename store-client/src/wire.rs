//! Compact binary bodies for the Raft RPC and the client API: postcard
//! (serde) in an `application/octet-stream` body, one extractor and one
//! response type, so no handler touches encoding.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;

pub const CONTENT_TYPE: &str = "application/octet-stream";

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
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(IntoResponse::into_response)?;
        postcard::from_bytes(&bytes).map(Postcard).map_err(|e| {
            (StatusCode::BAD_REQUEST, format!("undecodable body: {e}")).into_response()
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
