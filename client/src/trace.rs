//! W3C trace context for a logical call: the `traceparent` every attempt
//! carries.
//!
//! The server continues the trace it is sent (the node's server span takes
//! the `traceparent` as its remote parent and answers `X-Trace-Id`), so one
//! logical call is one trace however many attempts it takes. A caller that
//! has a span of its own passes its `traceparent` and every attempt is sent
//! with it as is: the server spans become children of the caller's span. A
//! call without one gets a fresh trace id, and each attempt a fresh span id,
//! so the attempts stay apart in the trace view while sharing the trace.

use std::fmt;

use rand::Rng;

/// A parsed `traceparent` header (version `00`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceParent {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    flags: u8,
    /// Given by the caller: sent unchanged on every attempt.
    fixed: bool,
}

/// Why a `traceparent` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>, ids not all zero): {0:?}")]
pub struct InvalidTraceParent(pub String);

/// Flag `01`: sampled. A trace the client starts asks to be recorded.
const SAMPLED: u8 = 0x01;

impl TraceParent {
    /// A new trace, sampled.
    pub fn generate() -> Self {
        let mut rng = rand::rng();
        let mut trace_id = [0u8; 16];
        let mut span_id = [0u8; 8];
        // All-zero ids are invalid; the chance of drawing one is nil, but
        // the loops make it impossible.
        while trace_id == [0; 16] {
            rng.fill(&mut trace_id);
        }
        while span_id == [0; 8] {
            rng.fill(&mut span_id);
        }
        Self {
            trace_id,
            span_id,
            flags: SAMPLED,
            fixed: false,
        }
    }

    /// Parses a caller's `traceparent`; it is then sent unchanged.
    pub fn parse(value: &str) -> Result<Self, InvalidTraceParent> {
        let invalid = || InvalidTraceParent(value.to_owned());
        let mut parts = value.trim().split('-');
        let (Some("00"), Some(trace), Some(span), Some(flags), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(invalid());
        };
        let mut trace_id = [0u8; 16];
        let mut span_id = [0u8; 8];
        let mut flag = [0u8; 1];
        if !(decode_hex(trace, &mut trace_id)
            && decode_hex(span, &mut span_id)
            && decode_hex(flags, &mut flag))
            || trace_id == [0; 16]
            || span_id == [0; 8]
        {
            return Err(invalid());
        }
        Ok(Self {
            trace_id,
            span_id,
            flags: flag[0],
            fixed: true,
        })
    }

    /// The 32-hex trace id: what the server answers in `X-Trace-Id`.
    pub fn trace_id(&self) -> String {
        hex(&self.trace_id)
    }

    /// The header value for one attempt: the caller's own value, or this
    /// trace with a fresh span id.
    pub(crate) fn for_attempt(&self) -> String {
        let span_id = if self.fixed {
            self.span_id
        } else {
            let mut span_id = [0u8; 8];
            while span_id == [0; 8] {
                rand::rng().fill(&mut span_id);
            }
            span_id
        };
        format!(
            "00-{}-{}-{:02x}",
            hex(&self.trace_id),
            hex(&span_id),
            self.flags
        )
    }
}

impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "00-{}-{}-{:02x}",
            hex(&self.trace_id),
            hex(&self.span_id),
            self.flags
        )
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Lower-case hex of exactly `out.len()` bytes (W3C forbids upper case).
fn decode_hex(text: &str, out: &mut [u8]) -> bool {
    if text.len() != out.len() * 2 {
        return false;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    for (byte, pair) in out.iter_mut().zip(text.as_bytes().chunks(2)) {
        match (digit(pair[0]), digit(pair[1])) {
            (Some(high), Some(low)) => *byte = high << 4 | low,
            _ => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIVEN: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_callers_traceparent_is_sent_unchanged_on_every_attempt() {
        let given = TraceParent::parse(GIVEN).unwrap();
        assert_eq!(given.for_attempt(), GIVEN);
        assert_eq!(given.for_attempt(), GIVEN);
        assert_eq!(given.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
    }

    #[test]
    fn a_generated_trace_keeps_its_trace_id_and_changes_span_per_attempt() {
        let trace = TraceParent::generate();
        let (first, second) = (trace.for_attempt(), trace.for_attempt());
        assert_ne!(first, second);
        for header in [&first, &second] {
            let parsed = TraceParent::parse(header).unwrap();
            assert_eq!(parsed.trace_id(), trace.trace_id());
            assert_eq!(header.len(), 55);
            assert!(header.ends_with("-01"), "{header}");
        }
    }

    #[test]
    fn malformed_traceparents_are_refused() {
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "00-4bf92f3577b34da6a3ce929d0e0e47-00f067aa0ba902b7-01",
        ] {
            assert!(TraceParent::parse(bad).is_err(), "{bad:?}");
        }
    }
}
