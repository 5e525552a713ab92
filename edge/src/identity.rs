//! Who a request is for: tenant and principal names. They come from the
//! authenticated credential, never from a request body.

use std::fmt;

use serde::{Deserialize, Serialize};

macro_rules! name_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// A name an operator may type in a key file: 1–64 of
            /// `[A-Za-z0-9_-]`.
            pub fn parse(s: &str) -> Option<Self> {
                is_valid_name(s).then(|| Self(s.to_owned()))
            }

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

name_id!(
    /// The merchant that owns a credential; every record and payment is scoped to one.
    TenantId
);
name_id!(
    /// The caller inside a tenant (one API key, one service account).
    PrincipalId
);

fn is_valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_restricted() {
        assert!(TenantId::parse("acme-eu_1").is_some());
        assert!(TenantId::parse("").is_none());
        assert!(TenantId::parse("a:b").is_none());
        assert!(PrincipalId::parse(&"x".repeat(65)).is_none());
    }
}
