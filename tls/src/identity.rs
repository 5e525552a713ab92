//! Who a process is: a role in a region, written into its certificate as a
//! SPIFFE-like URI SAN `spiffe://once/<region>/<role>`, and read back from the
//! certificate a peer presented.

use std::fmt;
use std::str::FromStr;

/// The trust domain of every identity (`spiffe://once/...`).
pub const TRUST_DOMAIN: &str = "once";

/// What a process is allowed to be. The string forms appear in URIs and on
/// command lines (`once certs issue --role`): add roles, never rename them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// A raft-store member: speaks Raft to the other members.
    StoreMember,
    /// A region's payments node: the store's record operations.
    Node,
    /// A region's router: placements and region marks.
    Router,
    /// A person or a tool acting for one (`once store ...`, `once up`, the
    /// drills): membership, elections, partitions, snapshots, record dumps.
    Operator,
}

impl Role {
    pub const ALL: [Role; 4] = [Self::StoreMember, Self::Node, Self::Router, Self::Operator];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::StoreMember => "store",
            Self::Node => "node",
            Self::Router => "router",
            Self::Operator => "operator",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = IdentityError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| IdentityError::UnknownRole(s.to_owned()))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    #[error("not an identity URI (expected spiffe://once/<region>/<role>): {0:?}")]
    NotAnIdentity(String),
    #[error("unknown role {0:?} (one of store, node, router, operator)")]
    UnknownRole(String),
    #[error("invalid region {0:?} (letters, digits and '-', at most 63)")]
    InvalidRegion(String),
}

/// A role in a region. Parse, don't validate: a value of this type always
/// formats to a URI that parses back to it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Identity {
    region: String,
    role: Role,
}

impl Identity {
    pub fn new(region: &str, role: Role) -> Result<Self, IdentityError> {
        let valid = !region.is_empty()
            && region.len() <= 63
            && region
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if !valid {
            return Err(IdentityError::InvalidRegion(region.to_owned()));
        }
        Ok(Self {
            region: region.to_owned(),
            role,
        })
    }

    pub fn region(&self) -> &str {
        &self.region
    }

    pub fn role(&self) -> Role {
        self.role
    }

    /// `spiffe://once/<region>/<role>`.
    pub fn uri(&self) -> String {
        format!("spiffe://{TRUST_DOMAIN}/{}/{}", self.region, self.role)
    }

    pub fn parse(uri: &str) -> Result<Self, IdentityError> {
        let not = || IdentityError::NotAnIdentity(uri.to_owned());
        let rest = uri
            .strip_prefix("spiffe://")
            .and_then(|r| r.strip_prefix(TRUST_DOMAIN))
            .and_then(|r| r.strip_prefix('/'))
            .ok_or_else(not)?;
        let (region, role) = rest.split_once('/').ok_or_else(not)?;
        Self::new(region, role.parse()?)
    }

    /// The identity in a DER certificate's URI SANs: the first SAN that is
    /// one. `None` for a certificate that names no identity (or does not
    /// parse), which is then authorised for nothing.
    pub fn of_certificate(der: &[u8]) -> Option<Self> {
        use x509_parser::extensions::GeneralName;
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        let sans = cert.subject_alternative_name().ok()??;
        sans.value.general_names.iter().find_map(|name| match name {
            GeneralName::URI(uri) => Self::parse(uri).ok(),
            _ => None,
        })
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.uri())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_identity_formats_to_a_uri_that_parses_back() {
        for role in Role::ALL {
            let id = Identity::new("eu-west", role).unwrap();
            assert_eq!(Identity::parse(&id.uri()).unwrap(), id);
        }
        assert_eq!(
            Identity::new("us-east", Role::StoreMember).unwrap().uri(),
            "spiffe://once/us-east/store"
        );
    }

    #[test]
    fn uris_outside_the_trust_domain_or_with_unknown_roles_are_refused() {
        for bad in [
            "spiffe://other/eu-west/node",
            "https://once/eu-west/node",
            "spiffe://once/eu-west",
            "spiffe://once//node",
            "spiffe://once/eu west/node",
            "spiffe://once/eu-west/node/extra",
            "spiffe://once/eu-west/admin",
            "spiffe://oncex/eu-west/node",
        ] {
            assert!(Identity::parse(bad).is_err(), "{bad} parsed");
        }
    }
}
