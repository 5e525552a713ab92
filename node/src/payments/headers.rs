//! The headers of `POST /payments` that carry meaning: `Idempotency-Key`
//! (required, names the operation; bare or as the IETF draft's RFC 8941
//! sf-string) and `Api-Version` (optional, part of the
//! request's fingerprint). Their parsing and their entries in the API
//! document sit side by side, made from the same constants.

use axum::http::HeaderMap;
use utoipa::openapi::extensions::ExtensionsBuilder;
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::{Object, ObjectBuilder, Ref, Required, Type};

use crate::domain::IdempotencyKey;
use crate::error::ApiError;

pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
pub const API_VERSION: &str = "api-version";
/// The API version assumed when a request names none.
pub const DEFAULT_API_VERSION: &str = "2026-11-01";
pub const SUPPORTED_API_VERSIONS: &[&str] = &[DEFAULT_API_VERSION];

/// `400 IDEMPOTENCY_KEY_REQUIRED` without the header,
/// `400 IDEMPOTENCY_KEY_MALFORMED` for a value that starts as a Structured
/// Field string and is not one, `400 IDEMPOTENCY_KEY_INVALID` when what it
/// carries is not a key.
///
/// Two forms name one key (decision 0074). The IETF draft's: an RFC 8941
/// sf-string, `"8e03978e-…"`, whose key is the string it decodes to. And the
/// bare form every client sent before: the whole value, verbatim. The first
/// byte tells them apart; a bare key never started with a double quote in
/// practice, and one that does and is a well-formed sf-string now names the
/// key inside the quotes.
pub fn idempotency_key(headers: &HeaderMap) -> Result<IdempotencyKey, ApiError> {
    let raw = headers.get(IDEMPOTENCY_KEY).ok_or(ApiError::KeyRequired)?;
    let raw = raw.as_bytes();
    if raw.first() == Some(&b'"') {
        let key = structured_string(raw).map_err(ApiError::KeyMalformed)?;
        IdempotencyKey::parse(key.as_bytes()).map_err(|e| ApiError::KeyInvalid(e.to_string()))
    } else {
        IdempotencyKey::parse(raw).map_err(|e| ApiError::KeyInvalid(e.to_string()))
    }
}

/// The string an RFC 8941 Item that is a bare sf-string decodes to. Any
/// other Item (parameters after the string, a token, trailing bytes) or a
/// value that is no Item (unterminated, a bad escape, a byte outside
/// printable ASCII) is refused with what is wrong: the draft defines the
/// header as exactly an sf-string.
fn structured_string(raw: &[u8]) -> Result<String, String> {
    const NOT: &str = "Idempotency-Key starts with a double quote but is not a Structured Field string (RFC 8941)";
    let item: sfv::Item = sfv::Parser::new(raw)
        .with_version(sfv::Version::Rfc8941)
        .parse()
        .map_err(|e| format!("{NOT}: {e}"))?;
    if !item.params.is_empty() {
        return Err(format!("{NOT}: parameters are not allowed"));
    }
    match item.bare_item {
        sfv::BareItem::String(key) => Ok(key.as_str().to_owned()),
        _ => Err(format!("{NOT}: not a string")),
    }
}

/// What [`idempotency_key`] accepts, as an anchored regular expression for
/// the API document: a bare key (one that does not start with a double
/// quote) or an sf-string of 1–255 characters, each unescaped printable
/// ASCII but `"` and `\`, or one of them escaped.
pub fn idempotency_key_pattern() -> String {
    let max = IdempotencyKey::MAX_LEN;
    format!(
        "^(?:[\\x20\\x21\\x23-\\x7E][\\x20-\\x7E]{{0,{bare}}}|\"(?:[\\x20\\x21\\x23-\\x5B\\x5D-\\x7E]|\\\\[\"\\\\]){{1,{max}}}\")$",
        bare = max - 1
    )
}

/// The longest value [`idempotency_key`] accepts: the quoted form of a
/// 255-character key with every character escaped.
pub const IDEMPOTENCY_KEY_MAX_FIELD_LEN: usize = 2 + 2 * IdempotencyKey::MAX_LEN;

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

/// The component name of [`api_version_schema`].
pub const API_VERSION_SCHEMA: &str = "ApiVersion";

/// The `ApiVersion` component: the versions this build serves, each member
/// named for generators (`x-enum-varnames`: `V2026_11_01`, where a value
/// starting with a digit would otherwise be `VALUE_0`).
pub fn api_version_schema() -> Object {
    let names: Vec<String> = SUPPORTED_API_VERSIONS
        .iter()
        .map(|v| format!("V{}", v.replace('-', "_")))
        .collect();
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some("An API version this build serves."))
        .enum_values(Some(SUPPORTED_API_VERSIONS.iter().copied()))
        .default(Some(DEFAULT_API_VERSION.into()))
        .extensions(Some(
            ExtensionsBuilder::new()
                .add("x-enum-varnames", names)
                .build(),
        ))
        .build()
}

/// The document's header parameters of `POST /payments`.
#[derive(Debug)]
pub struct CreateHeaders;

impl utoipa::IntoParams for CreateHeaders {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        let key = ObjectBuilder::new()
            .schema_type(Type::String)
            .min_length(Some(1))
            .max_length(Some(IDEMPOTENCY_KEY_MAX_FIELD_LEN))
            .pattern(Some(idempotency_key_pattern()))
            .examples([
                serde_json::json!("\"8e03978e-40d5-43e8-bc93-6894a57f9324\""),
                serde_json::json!("order-2026-0001-attempt"),
            ]);
        vec![
            ParameterBuilder::new()
                .name("Idempotency-Key")
                .parameter_in(ParameterIn::Header)
                .required(Required::True)
                .description(Some(
                    "Names this operation: a key of 1-255 printable ASCII characters \
                     (0x20-0x7E), sent as the IETF draft's Structured Field string \
                     (`\"8e03978e-...\"`, RFC 8941) or bare (the value verbatim, not \
                     starting with `\"`); both forms of one key are the same key. \
                     Every retry of the operation sends the same key; the first request's \
                     answer is replayed to them for the replay window (24 hours by default). \
                     A value starting with `\"` that is not an sf-string is \
                     400 IDEMPOTENCY_KEY_MALFORMED.",
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
                .schema(Some(Ref::from_schema_name(API_VERSION_SCHEMA)))
                .build(),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(value: &[u8]) -> Result<String, (ErrorCode, String)> {
        let mut headers = HeaderMap::new();
        headers.insert(
            IDEMPOTENCY_KEY,
            axum::http::HeaderValue::from_bytes(value).unwrap(),
        );
        idempotency_key(&headers)
            .map(|k| k.as_str().to_owned())
            .map_err(|e| (e.code(), e.to_string()))
    }

    use crate::error::ErrorCode;

    #[test]
    fn the_quoted_form_names_the_key_inside_the_quotes() {
        assert_eq!(key(br#""8e03978e-40d5""#).unwrap(), "8e03978e-40d5");
        assert_eq!(key(b"8e03978e-40d5").unwrap(), "8e03978e-40d5");
        assert_eq!(key(br#""a \"b\\ c""#).unwrap(), r#"a "b\ c"#);
        // Bare keys stay verbatim, quotes and semicolons inside included.
        assert_eq!(key(br#"order 42 "x";y"#).unwrap(), r#"order 42 "x";y"#);
        let longest = format!("\"{}\"", "\\\"".repeat(IdempotencyKey::MAX_LEN));
        assert_eq!(longest.len(), IDEMPOTENCY_KEY_MAX_FIELD_LEN);
        assert_eq!(key(longest.as_bytes()).unwrap(), "\"".repeat(255));
    }

    #[test]
    fn a_malformed_structured_value_is_refused_with_its_own_code() {
        for value in [
            &br#""unterminated"#[..],
            br#""bad \x escape""#,
            "\"clé\"".as_bytes(),
            br#""k";param=1"#,
            br#""k" trailing"#,
            br#""k", "list""#,
            b"\"tab\there\"",
        ] {
            let (code, message) = key(value).unwrap_err();
            assert_eq!(
                code,
                ErrorCode::IdempotencyKeyMalformed,
                "{}",
                String::from_utf8_lossy(value)
            );
            assert!(message.contains("RFC 8941"), "{message}");
        }
        // Well-formed strings that are no key: the key's own rules.
        for value in [&br#""""#[..], format!("\"{}\"", "k".repeat(256)).as_bytes()] {
            assert_eq!(key(value).unwrap_err().0, ErrorCode::IdempotencyKeyInvalid);
        }
    }

    #[test]
    fn the_documented_pattern_matches_what_parses() {
        let pattern = regex::Regex::new(&idempotency_key_pattern()).unwrap();
        let samples: Vec<Vec<u8>> = vec![
            b"k".to_vec(),
            br#""k""#.to_vec(),
            br#""a \"b\\ c""#.to_vec(),
            br#"order 42 "x";y"#.to_vec(),
            vec![b'k'; 255],
            vec![b'k'; 256],
            format!("\"{}\"", "k".repeat(255)).into_bytes(),
            format!("\"{}\"", "k".repeat(256)).into_bytes(),
            format!("\"{}\"", "\\\\".repeat(255)).into_bytes(),
            br#""""#.to_vec(),
            br#""unterminated"#.to_vec(),
            br#""bad \x escape""#.to_vec(),
            br#""k";param=1"#.to_vec(),
            br#""k" trailing"#.to_vec(),
            b"\"".to_vec(),
            b"tab\there".to_vec(),
            b" leading space".to_vec(),
        ];
        for sample in samples {
            let text = String::from_utf8(sample.clone()).unwrap();
            assert_eq!(
                pattern.is_match(&text),
                key(&sample).is_ok(),
                "{text:?} (len {})",
                text.len()
            );
        }
    }
}
