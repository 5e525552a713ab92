//! Identifiers. Tenants and principals come from the authenticated
//! credential, never from a request body (they are the edge's:
//! `once_edge::identity`); payment ids are minted here.

use std::fmt;

use serde::{Deserialize, Serialize};

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

string_id!(
    /// `pay_` followed by a UUIDv7, so ids sort by creation time.
    PaymentId
);

impl PaymentId {
    const PREFIX: &str = "pay_";
    /// A simple-format UUID: 32 hex digits.
    const HEX_LEN: usize = 32;

    pub fn generate() -> Self {
        Self(format!("{}{}", Self::PREFIX, uuid::Uuid::now_v7().simple()))
    }

    /// Accepts what `generate` makes; anything else cannot name a payment.
    pub fn parse(s: &str) -> Option<Self> {
        let hex = s.strip_prefix(Self::PREFIX)?;
        (hex.len() == Self::HEX_LEN && hex.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| Self(s.to_owned()))
    }

    /// What `parse` accepts, as an anchored regular expression for the API document.
    pub fn pattern() -> String {
        format!("^{}[0-9A-Fa-f]{{{}}}$", Self::PREFIX, Self::HEX_LEN)
    }

    /// Rebuilds an id read back from our own database, unchecked (the node's
    /// `sql` module; public only because that module is in another crate).
    pub fn from_trusted(s: String) -> Self {
        Self(s)
    }

    /// The key the provider dedupes this payment's charge on (DESIGN §7).
    pub fn provider_key(&self) -> String {
        format!("provider_payment_{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_payment_ids_parse_back() {
        let id = PaymentId::generate();
        assert_eq!(PaymentId::parse(id.as_str()), Some(id.clone()));
        assert!(id.provider_key().starts_with("provider_payment_pay_"));
        assert_eq!(PaymentId::parse("pay_../etc"), None);
    }

    #[test]
    fn the_documented_pattern_accepts_exactly_what_parse_accepts() {
        let pattern = regex::Regex::new(&PaymentId::pattern()).unwrap();
        let id = PaymentId::generate().to_string();
        let samples = [
            id.clone(),
            id.to_uppercase().replacen("PAY_", "pay_", 1),
            id.to_uppercase(),
            id[..id.len() - 1].to_owned(),
            format!("{id}0"),
            format!("{id}\n"),
            id.replacen('0', "g", 1),
            id.replacen("pay_", "pa_", 1),
            format!("pay_{}", "f".repeat(32)),
            "pay_".to_owned(),
            String::new(),
        ];
        for sample in samples {
            assert_eq!(
                pattern.is_match(&sample),
                PaymentId::parse(&sample).is_some(),
                "{sample:?}"
            );
        }
    }
}
