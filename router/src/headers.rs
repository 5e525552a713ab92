//! Which headers cross the router: end-to-end ones (Authorization,
//! Idempotency-Key, Content-Type, traceparent, …) pass both ways;
//! hop-by-hop ones (RFC 9110 §7.6.1) describe one connection and stop here.

use axum::http::{HeaderMap, HeaderName, header};

/// Hop-by-hop by definition, whatever `Connection` says.
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
];

fn is_hop_by_hop(name: &HeaderName, listed_in_connection: &[String]) -> bool {
    HOP_BY_HOP.contains(name)
        || *name == header::UPGRADE
        || listed_in_connection.iter().any(|l| l == name.as_str())
}

/// Header names the `Connection` header declares hop-by-hop.
fn connection_options(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|o| o.trim().to_ascii_lowercase())
        .filter(|o| !o.is_empty())
        .collect()
}

/// The request headers to send to the node. `Host` and `Content-Length`
/// are the new connection's own (the HTTP client sets them).
pub fn to_node(incoming: &HeaderMap) -> HeaderMap {
    let listed = connection_options(incoming);
    let mut out = HeaderMap::with_capacity(incoming.len());
    for (name, value) in incoming {
        if is_hop_by_hop(name, &listed) || *name == header::HOST || *name == header::CONTENT_LENGTH
        {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    out
}

/// The node's answer headers to pass back. `Content-Length` stays: the body
/// is streamed through byte for byte (the client does not decompress).
pub fn to_client(from_node: &HeaderMap) -> HeaderMap {
    let listed = connection_options(from_node);
    let mut out = HeaderMap::with_capacity(from_node.len() + 1);
    for (name, value) in from_node {
        if !is_hop_by_hop(name, &listed) {
            out.append(name.clone(), value.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    #[test]
    fn end_to_end_headers_pass_and_hop_by_hop_ones_stop() {
        let mut h = HeaderMap::new();
        for (n, v) in [
            ("authorization", "Bearer k"),
            ("idempotency-key", "k-1"),
            ("content-type", "application/json"),
            (
                "traceparent",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            ),
            ("tracestate", "a=b"),
            ("connection", "keep-alive, x-private"),
            ("x-private", "1"),
            ("keep-alive", "timeout=5"),
            ("transfer-encoding", "chunked"),
            ("host", "router"),
            ("content-length", "10"),
        ] {
            h.append(HeaderName::from_static(n), HeaderValue::from_static(v));
        }
        let out = to_node(&h);
        let names: Vec<_> = out.keys().map(HeaderName::as_str).collect();
        assert_eq!(
            names,
            [
                "authorization",
                "idempotency-key",
                "content-type",
                "traceparent",
                "tracestate"
            ]
        );
        let back = to_client(&h);
        assert!(back.contains_key("content-length"));
        assert!(!back.contains_key("x-private"));
    }
}
