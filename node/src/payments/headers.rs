//! The headers of `POST /payments` that carry meaning: `Idempotency-Key`
//! (required, names the operation) and `Api-Version` (optional, part of the
//! request's fingerprint). Their parsing and their entries in the API
//! document sit side by side, made from the same constants.

use axum::http::HeaderMap;
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::{ObjectBuilder, Required, Type};

use crate::domain::IdempotencyKey;
use crate::error::ApiError;

pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
pub const API_VERSION: &str = "api-version";
/// The API version assumed when a request names none.
pub const DEFAULT_API_VERSION: &str = "2026-11-01";
pub const SUPPORTED_API_VERSIONS: &[&str] = &[DEFAULT_API_VERSION];

/// `400 IDEMPOTENCY_KEY_REQUIRED` without the header,
/// `400 IDEMPOTENCY_KEY_INVALID` when it is not a key.
pub fn idempotency_key(headers: &HeaderMap) -> Result<IdempotencyKey, ApiError> {
    let raw = headers.get(IDEMPOTENCY_KEY).ok_or(ApiError::KeyRequired)?;
    IdempotencyKey::parse(raw.as_bytes()).map_err(|e| ApiError::KeyInvalid(e.to_string()))
}

/// The default without the header; `400 VALIDATION_FAILED` for a version
/// this build does not serve.
pub fn api_version(headers: &HeaderMap) -> Result<String, ApiError> {
    match headers.get(API_VERSION) {
        None => Ok(DEFAULT_API_VERSION.to_owned()),
        Some(v) => v
            .to_str()
            .ok()
            .filter(|v| SUPPORTED_API_VERSIONS.contains(v))
            .map(str::to_owned)
            .ok_or_else(|| {
                ApiError::MalformedJson(format!(
                    "Api-Version must be one of {SUPPORTED_API_VERSIONS:?}"
                ))
            }),
    }
}

/// The document's header parameters of `POST /payments`.
#[derive(Debug)]
pub struct CreateHeaders;

impl utoipa::IntoParams for CreateHeaders {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        let key = ObjectBuilder::new()
            .schema_type(Type::String)
            .min_length(Some(1))
            .max_length(Some(IdempotencyKey::MAX_LEN))
            .pattern(Some(IdempotencyKey::pattern()))
            .examples([serde_json::json!("order-2026-0001-attempt")]);
        let version = ObjectBuilder::new()
            .schema_type(Type::String)
            .enum_values(Some(SUPPORTED_API_VERSIONS.iter().copied()))
            .default(Some(DEFAULT_API_VERSION.into()));
        vec![
            ParameterBuilder::new()
                .name("Idempotency-Key")
                .parameter_in(ParameterIn::Header)
                .required(Required::True)
                .description(Some(
                    "Names this operation: 1-255 printable ASCII characters (0x20-0x7E). \
                     Every retry of the operation sends the same key; the first request's \
                     answer is replayed to them for the replay window.",
                ))
                .schema(Some(key))
                .build(),
            ParameterBuilder::new()
                .name("Api-Version")
                .parameter_in(ParameterIn::Header)
                .required(Required::False)
                .description(Some(
                    "The API version the request is written against; part of the \
                     request's fingerprint. Any other value is 400 VALIDATION_FAILED.",
                ))
                .schema(Some(version))
                .build(),
        ]
    }
}
