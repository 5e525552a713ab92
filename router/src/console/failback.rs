//! Failback from the console: a region in `awaiting-failback` gets its
//! tenants back when an operator asks, naming themselves and why — the
//! same move as `POST /admin/failback` ([`crate::admin::fail_back`]), with
//! an audit entry for every request, granted or refused.
//!
//! The admin token is one shared credential, so the actor is whoever the
//! operator says they are, as for a resolve. A resolve's audit entry is
//! written by the node in its database; a router has none, so its trail is
//! kept in the router's memory ([`crate::audit::FailbackTrail`]) and logged
//! (docs/decisions/0080-console-failback-audit.md).

use serde::Deserialize;

/// The longest actor and reason accepted, as for a resolve.
const ACTOR_MAX: usize = 100;
const REASON_MAX: usize = 500;

/// The failback action as the console sends it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailbackAction {
    pub region: String,
    pub actor: String,
    pub reason: String,
}

impl FailbackAction {
    /// The action with its actor and reason trimmed, or why it is refused
    /// (before anything moves).
    pub fn validated(self) -> Result<Self, String> {
        let actor = self.actor.trim().to_owned();
        let reason = self.reason.trim().to_owned();
        if actor.is_empty() {
            return Err("actor: name who asks for the failback".into());
        }
        if reason.is_empty() {
            return Err("reason: say why the region is failed back".into());
        }
        if actor.chars().count() > ACTOR_MAX {
            return Err(format!("actor: at most {ACTOR_MAX} characters"));
        }
        if reason.chars().count() > REASON_MAX {
            return Err(format!("reason: at most {REASON_MAX} characters"));
        }
        Ok(Self {
            region: self.region,
            actor,
            reason,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn action(actor: &str, reason: &str) -> FailbackAction {
        FailbackAction {
            region: "eu-west".into(),
            actor: actor.into(),
            reason: reason.into(),
        }
    }

    #[test]
    fn an_action_names_who_and_why() {
        assert!(action("  ", "healthy for ten minutes").validated().is_err());
        assert!(action("alice", "").validated().is_err());
        assert!(action(&"a".repeat(101), "why").validated().is_err());
        let ok = action(" alice ", " healthy again ").validated().unwrap();
        assert_eq!(
            (ok.actor.as_str(), ok.reason.as_str()),
            ("alice", "healthy again")
        );
    }
}
