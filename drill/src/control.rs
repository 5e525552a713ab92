//! The client of `once up`'s control endpoint (`cluster.json` →
//! `control.url`), and the messages it exchanges: restart a killed
//! region's processes, or restart one process — gracefully or not, with
//! its wall clock skewed, or (a store member) with its data wiped.
//!
//! ```text
//!   drill ──POST /regions/{region}/restart──────────────────► once up
//!         ──POST /processes/{process}/restart RestartOptions─►   stops it as asked, starts it again
//!         ◄──────────────────────────────── Restarted ────────   (skewed, wiped), waits until ready
//! ```
//!
//! `{process}` is `router`, `node-<region>` or `store-<region>`. `once up`
//! serves these same types, so both sides agree on the wire format. Every
//! request carries the control token (`cluster.json` → `control.token`) as
//! a bearer token and a JSON body; `once up` refuses any other.

use std::time::Duration;

use anyhow::Context;
use secrecy::ExposeSecret as _;
use serde::{Deserialize, Serialize};

pub use crate::cluster::ControlEndpoint;

/// How `once up` stops the process before starting it again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stop {
    /// SIGTERM, then as long as `once up`'s stop grace for the process to
    /// drain and exit, then SIGKILL.
    #[default]
    Term,
    /// SIGKILL at once: a crash.
    Kill,
    /// Nothing: the process must already have exited (killed by the drill,
    /// crashed), or the restart is refused.
    None,
}

/// The body of `POST /processes/{process}/restart`; every field may be
/// left out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RestartOptions {
    pub stop: Stop,
    /// Start it with its wall clock this many seconds off (ahead when
    /// positive), under libfaketime; its monotonic clock (timers) stays
    /// real. `0`: the real clock.
    pub clock_offset_seconds: i64,
    /// Store members only: delete the member's data before starting it, so
    /// it starts blank and waits to be (re-)added to the cluster.
    pub wipe: bool,
}

/// How the previous process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Stopped {
    /// It exited within the grace period after SIGTERM.
    #[serde(rename = "sigterm")]
    Sigterm,
    /// It was killed: asked for, or still running when the grace ran out.
    #[serde(rename = "sigkill")]
    Sigkill,
    /// It had already exited before the restart.
    #[serde(rename = "already gone")]
    AlreadyGone,
}

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Stopped::Sigterm => "exited after SIGTERM",
            Stopped::Sigkill => "SIGKILLed",
            Stopped::AlreadyGone => "already gone",
        })
    }
}

/// The answer to a restart of one process, once the new process is ready.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Restarted {
    pub process: String,
    pub pid: u32,
    pub previous_pid: u32,
    pub stopped: Stopped,
    pub clock_offset_seconds: i64,
    pub wiped: bool,
}

/// `once up`'s control endpoint.
#[derive(Debug, Clone)]
pub struct Control {
    url: String,
    token: secrecy::SecretString,
    http: reqwest::Client,
}

/// A restart stops a process (up to its grace period) and waits until the
/// new one is ready (up to a minute), so answers take long.
const RESTART_TIMEOUT: Duration = Duration::from_secs(180);

impl Control {
    /// The endpoint `cluster.json` names (`control`: its URL and token).
    pub fn new(endpoint: &ControlEndpoint) -> anyhow::Result<Self> {
        Ok(Self {
            url: endpoint.url.trim_end_matches('/').to_owned(),
            token: secrecy::SecretString::from(endpoint.token.clone()),
            http: reqwest::Client::builder()
                .timeout(RESTART_TIMEOUT)
                .build()
                .context("building the control endpoint's client")?,
        })
    }

    /// Starts again whichever of `region`'s processes (store member, node)
    /// are not running, and answers once they serve: what a region's
    /// orchestrator does after an outage.
    pub async fn restart_region(&self, region: &str) -> anyhow::Result<serde_json::Value> {
        let request = self
            .http
            .post(format!("{}/regions/{region}/restart", self.url))
            .json(&serde_json::json!({}));
        let body = self
            .answer(request, &format!("restarting region {region}"))
            .await?;
        serde_json::from_str(&body).context("the control endpoint's answer is not JSON")
    }

    /// Stops `process` as `options` say and starts it again; answers once
    /// the new process is ready.
    pub async fn restart_process(
        &self,
        process: &str,
        options: &RestartOptions,
    ) -> anyhow::Result<Restarted> {
        let request = self
            .http
            .post(format!("{}/processes/{process}/restart", self.url))
            .json(options);
        let body = self
            .answer(request, &format!("restarting {process}"))
            .await?;
        serde_json::from_str(&body)
            .with_context(|| format!("the control endpoint's answer is not a restart: {body}"))
    }

    /// The body of a 2xx answer to `request`, or an error with the status
    /// and the endpoint's message.
    async fn answer(&self, request: reqwest::RequestBuilder, what: &str) -> anyhow::Result<String> {
        let response = request
            .bearer_auth(self.token.expose_secret())
            .send()
            .await
            .with_context(|| format!("{what}: the control endpoint at {}", self.url))?;
        let status = response.status();
        let body = response
            .text()
            .await
            .with_context(|| format!("{what}: reading the answer"))?;
        anyhow::ensure!(
            status.is_success(),
            "{what}: the control endpoint answered {status}: {body}"
        );
        Ok(body)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn options_left_out_are_a_graceful_restart_on_the_real_clock() {
        let options: RestartOptions = serde_json::from_str("{}").unwrap();
        assert_eq!(options, RestartOptions::default());
        assert_eq!(options.stop, Stop::Term);
        let skewed: RestartOptions =
            serde_json::from_value(json!({"stop": "kill", "clock_offset_seconds": -7200})).unwrap();
        assert_eq!(skewed.stop, Stop::Kill);
        assert_eq!(skewed.clock_offset_seconds, -7200);
        assert!(!skewed.wipe);
        assert!(serde_json::from_value::<RestartOptions>(json!({"stop": "gently"})).is_err());
        assert!(serde_json::from_value::<RestartOptions>(json!({"wiped": true})).is_err());
        assert_eq!(
            serde_json::to_value(RestartOptions {
                stop: Stop::None,
                clock_offset_seconds: 0,
                wipe: true
            })
            .unwrap(),
            json!({"stop": "none", "clock_offset_seconds": 0, "wipe": true})
        );
    }

    #[test]
    fn the_answer_reads_as_once_up_writes_it() {
        let answer: Restarted = serde_json::from_value(json!({
            "process": "store-eu-west", "pid": 12, "previous_pid": 11,
            "stopped": "already gone", "clock_offset_seconds": 0, "wiped": true
        }))
        .unwrap();
        assert_eq!(answer.stopped, Stopped::AlreadyGone);
        assert!(answer.wiped);
        assert_eq!(serde_json::to_value(Stopped::Sigterm).unwrap(), "sigterm");
        assert_eq!(serde_json::to_value(Stopped::Sigkill).unwrap(), "sigkill");
    }
}
