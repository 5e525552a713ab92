//! Who may use `once up`'s control endpoint: the drills on this machine that
//! read `cluster.json`, nobody else. A restart (or a member's wipe) is a
//! POST to 127.0.0.1, which any local user, container or web page the
//! developer visits can send ("simple" cross-site requests need no CORS
//! preflight), so every request is checked, in this order, before any
//! handler runs:
//!
//! 1. `Host` names the endpoint itself (`127.0.0.1:PORT` or
//!    `localhost:PORT`), else `421 Misdirected Request`: a DNS-rebound
//!    page sends its own host name.
//! 2. An `Origin`, if sent, is the endpoint's own, else `403 Forbidden`:
//!    browsers send one with every cross-site POST.
//! 3. `Authorization: Bearer <control token>` (a fresh random token each
//!    run, only in `cluster.json`, mode 0600), else `401 Unauthorized`.
//! 4. `Content-Type: application/json`, else `415 Unsupported Media Type`:
//!    the content types a page may send without a preflight (`text/plain`,
//!    forms) are refused even with the token.
//!
//! A refusal is plain text like the endpoint's other errors, its status
//! the stable part, and it changes nothing.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use once_edge::AdminToken;

/// What the control endpoint admits.
#[derive(Debug, Clone)]
pub(crate) struct Perimeter {
    token: AdminToken,
    port: u16,
}

/// Why a request to the control endpoint was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum Refused {
    #[error("this is once up's control endpoint on port {port}; Host {host:?} is not it")]
    Misdirected { host: String, port: u16 },
    #[error("cross-origin requests are refused (Origin {0:?})")]
    CrossOrigin(String),
    #[error("the control token is required: Authorization: Bearer <cluster.json control.token>")]
    Unauthorized,
    #[error("the body must be application/json (got {0:?})")]
    UnsupportedMediaType(String),
}

impl Refused {
    fn status(&self) -> StatusCode {
        match self {
            Self::Misdirected { .. } => StatusCode::MISDIRECTED_REQUEST,
            Self::CrossOrigin(_) => StatusCode::FORBIDDEN,
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        }
    }
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        let status = self.status();
        let mut response = (status, self.to_string()).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

impl Perimeter {
    /// The endpoint on 127.0.0.1:`port`, opened by `token`.
    pub(crate) fn new(token: AdminToken, port: u16) -> Self {
        Self { token, port }
    }

    /// The names the endpoint answers to, as `Host` and inside an `Origin`.
    fn own_authorities(&self) -> [String; 2] {
        [
            format!("127.0.0.1:{}", self.port),
            format!("localhost:{}", self.port),
        ]
    }

    /// `Ok` when `headers` may reach a handler; the first rule broken
    /// otherwise (see the module's list).
    pub(crate) fn admit(&self, headers: &HeaderMap) -> Result<(), Refused> {
        let text = |name: header::HeaderName| {
            headers
                .get(name)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        };
        let own = self.own_authorities();
        let host = text(header::HOST).unwrap_or_default();
        if !own.iter().any(|a| a.eq_ignore_ascii_case(&host)) {
            return Err(Refused::Misdirected {
                host,
                port: self.port,
            });
        }
        if let Some(origin) = text(header::ORIGIN) {
            let ours = own
                .iter()
                .any(|a| origin.eq_ignore_ascii_case(&format!("http://{a}")));
            if !ours {
                return Err(Refused::CrossOrigin(origin));
            }
        }
        if !self.token.admits(headers) {
            return Err(Refused::Unauthorized);
        }
        let content_type = text(header::CONTENT_TYPE).unwrap_or_default();
        let essence = content_type.split(';').next().unwrap_or_default().trim();
        if !essence.eq_ignore_ascii_case("application/json") {
            return Err(Refused::UnsupportedMediaType(content_type));
        }
        Ok(())
    }
}

/// [`Perimeter::admit`] as the middleware of every control route.
pub(crate) async fn guard(
    State(perimeter): State<Arc<Perimeter>>,
    request: Request,
    next: Next,
) -> Response {
    match perimeter.admit(request.headers()) {
        Ok(()) => next.run(request).await,
        Err(refused) => {
            tracing::warn!(reason = %refused, "control: request refused");
            refused.into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    const TOKEN: &str = "ctl_7f3a9c1e5b2d8f4a6c0e9b3d";

    fn perimeter() -> Perimeter {
        Perimeter::new(AdminToken::new(TOKEN).unwrap(), 4711)
    }

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(n, v)| (n.clone(), HeaderValue::from_str(v).unwrap()))
            .collect()
    }

    fn drill_request() -> Vec<(header::HeaderName, &'static str)> {
        vec![
            (header::HOST, "127.0.0.1:4711"),
            (header::AUTHORIZATION, "Bearer ctl_7f3a9c1e5b2d8f4a6c0e9b3d"),
            (header::CONTENT_TYPE, "application/json"),
        ]
    }

    /// `drill_request` with `name` set to `value` (`None`: left out).
    fn with(name: header::HeaderName, value: Option<&'static str>) -> HeaderMap {
        let mut pairs: Vec<_> = drill_request()
            .into_iter()
            .filter(|(n, _)| *n != name)
            .collect();
        if let Some(value) = value {
            pairs.push((name, value));
        }
        headers(&pairs)
    }

    #[test]
    fn the_drills_request_is_admitted_by_either_loopback_name() {
        let p = perimeter();
        assert_eq!(p.admit(&headers(&drill_request())), Ok(()));
        assert_eq!(p.admit(&with(header::HOST, Some("LocalHost:4711"))), Ok(()));
        let charset = with(
            header::CONTENT_TYPE,
            Some("application/json; charset=utf-8"),
        );
        assert_eq!(p.admit(&charset), Ok(()));
        let own_origin = {
            let mut h = headers(&drill_request());
            h.insert(
                header::ORIGIN,
                HeaderValue::from_static("http://127.0.0.1:4711"),
            );
            h
        };
        assert_eq!(p.admit(&own_origin), Ok(()));
    }

    #[test]
    fn another_host_or_port_is_misdirected() {
        let p = perimeter();
        for host in [
            Some("evil.example:4711"),
            Some("127.0.0.1:80"),
            Some("127.0.0.1"),
            None,
        ] {
            let refused = p.admit(&with(header::HOST, host)).unwrap_err();
            assert_eq!(
                refused.status(),
                StatusCode::MISDIRECTED_REQUEST,
                "{host:?}"
            );
        }
    }

    #[test]
    fn a_foreign_origin_is_forbidden_even_with_the_token() {
        let p = perimeter();
        for origin in ["https://evil.example", "http://127.0.0.1:4712", "null"] {
            let mut h = headers(&drill_request());
            h.insert(header::ORIGIN, HeaderValue::from_str(origin).unwrap());
            assert_eq!(p.admit(&h), Err(Refused::CrossOrigin(origin.into())));
        }
    }

    #[test]
    fn no_token_or_another_is_unauthorized() {
        let p = perimeter();
        for auth in [
            None,
            Some("Bearer ctl_7f3a9c1e5b2d8f4a6c0e9b3e"),
            Some(TOKEN),
        ] {
            assert_eq!(
                p.admit(&with(header::AUTHORIZATION, auth)),
                Err(Refused::Unauthorized),
                "{auth:?}"
            );
        }
    }

    #[test]
    fn any_body_but_json_is_refused_even_with_the_token() {
        let p = perimeter();
        for content_type in [
            Some("text/plain"),
            Some("application/x-www-form-urlencoded"),
            Some("multipart/form-data; boundary=x"),
            None,
        ] {
            let refused = p
                .admit(&with(header::CONTENT_TYPE, content_type))
                .unwrap_err();
            assert_eq!(
                refused.status(),
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "{content_type:?}"
            );
        }
    }
}
