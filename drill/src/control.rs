//! STUB (replaced by the ctl branch).
use serde::{Deserialize, Serialize};
#[derive(Debug, Clone)]
pub struct Control {
    url: String,
}
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub enum Stop {
    Term,
    Kill,
    None,
}
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RestartOptions {
    pub stop: Stop,
    pub clock_offset_seconds: i64,
    pub wipe: bool,
}
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Restarted {
    pub process: String,
    pub pid: i32,
    pub previous_pid: i32,
    pub stopped: String,
    pub clock_offset_seconds: i64,
    pub wiped: bool,
}
impl Control {
    pub fn new(url: &str) -> anyhow::Result<Self> {
        Ok(Self {
            url: url.to_owned(),
        })
    }
    pub async fn restart_region(&self, _r: &str) -> anyhow::Result<serde_json::Value> {
        anyhow::bail!("{}", self.url)
    }
    pub async fn restart_process(
        &self,
        _p: &str,
        _o: &RestartOptions,
    ) -> anyhow::Result<Restarted> {
        anyhow::bail!("stub")
    }
}
