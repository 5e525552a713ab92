//! Paths that could mean two things are refused before routing.
//!
//! A proxy that forwards a path which a later hop normalises differently is
//! a classic way around access rules: `/payments/%2e%2e/metrics` matched the
//! router's `/payments/{*rest}` and then, resolved by the HTTP client,
//! reached the node's `/metrics`. Every role therefore answers
//! `400 INVALID_PATH` to a path with a `.` or `..` segment, an encoded dot,
//! an encoded slash or backslash, a raw backslash or an empty segment, so
//! what is routed is what every hop after it will see.

/// Whether `path` is in the one form every hop reads alike.
pub fn is_canonical(path: &str) -> bool {
    if !path.starts_with('/') || path.contains('\\') {
        return false;
    }
    // Encoded dot, slash, backslash or NUL, in either case; no allocation.
    let encoded_separator = path.as_bytes().windows(3).any(|w| {
        w[0] == b'%'
            && matches!(
                (w[1], w[2].to_ascii_lowercase()),
                (b'2', b'e') | (b'2', b'f') | (b'5', b'c') | (b'0', b'0')
            )
    });
    if encoded_separator {
        return false;
    }
    // The root is "/", whose one segment is empty; elsewhere no segment may be.
    path == "/"
        || path[1..]
            .split('/')
            .all(|segment| !segment.is_empty() && segment != "." && segment != "..")
}

#[cfg(test)]
mod tests {
    use super::is_canonical;

    #[test]
    fn dot_segments_encoded_dots_and_slashes_are_not_canonical() {
        for ok in [
            "/",
            "/payments",
            "/payments/pay_0123",
            "/admin/records",
            "/a.b/c.json",
        ] {
            assert!(is_canonical(ok), "{ok}");
        }
        for bad in [
            "/payments/../admin/records",
            "/payments/./x",
            "/payments/%2e%2e/metrics",
            "/payments/%2E%2E/metrics",
            "/payments/.%2e/metrics",
            "/payments/%2fmetrics",
            "/payments/%5cmetrics",
            "/payments\\..\\metrics",
            "/payments//x",
            "/payments/",
            "/payments/..",
            "payments",
        ] {
            assert!(!is_canonical(bad), "{bad}");
        }
    }
}
