//! Who is calling, with the node's keys and the node's answer: the router
//! refuses what the node would refuse, before spending a WAN round trip.

use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use once_node::ApiKeys;
use once_node::error::ApiError;

/// The tenant a request's `Authorization: Bearer <key>` belongs to, or the
/// node's `401 UNAUTHORIZED`.
pub fn tenant_of(keys: &ApiKeys, headers: &HeaderMap) -> Result<String, ApiError> {
    let token = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or(ApiError::Unauthorized)?;
    keys.authenticate(token.trim())
        .map(|caller| caller.tenant.as_str().to_owned())
        .ok_or(ApiError::Unauthorized)
}
