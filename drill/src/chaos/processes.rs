//! What the chaos drill does to processes, and how it sees that it took:
//! signals to a pid `cluster.json` names (SIGKILL, SIGSTOP, SIGCONT), the
//! process's state as the kernel reports it (`/proc/<pid>/stat`: `T` while
//! stopped, `Z` or gone once killed), and the wall clock a process runs on
//! as its HTTP `Date` header shows it (a skewed process reports the offset).

use std::time::{Duration, SystemTime};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

/// A process's state, from the third field of `/proc/<pid>/stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcState {
    /// Running, sleeping or waiting: anything that will run again.
    Alive(char),
    /// `T` (stopped by a signal) or `t` (traced).
    Stopped,
    /// `Z` or `X`: killed, not yet reaped by its parent.
    Dead,
    /// No such process.
    Gone,
}

impl ProcState {
    pub fn is_dead(self) -> bool {
        matches!(self, ProcState::Dead | ProcState::Gone)
    }
}

impl std::fmt::Display for ProcState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProcState::Alive(c) => write!(f, "state {c}"),
            ProcState::Stopped => f.write_str("state T"),
            ProcState::Dead => f.write_str("state Z"),
            ProcState::Gone => f.write_str("gone"),
        }
    }
}

/// Parses the state out of a `/proc/<pid>/stat` line. The command name is
/// in parentheses and may hold spaces or parentheses itself, so the state
/// is the first field after the *last* `)`.
pub fn parse_stat(stat: &str) -> Option<ProcState> {
    let after = &stat[stat.rfind(')')? + 1..];
    let state = after.split_whitespace().next()?.chars().next()?;
    Some(match state {
        'T' | 't' => ProcState::Stopped,
        'Z' | 'X' | 'x' => ProcState::Dead,
        c => ProcState::Alive(c),
    })
}

/// The state of `pid` now.
pub fn state(pid: i32) -> ProcState {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => parse_stat(&stat).unwrap_or(ProcState::Gone),
        Err(_) => ProcState::Gone,
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SignalError {
    #[error("refusing to signal pid {0}: not a single other process")]
    UnsafePid(i32),
    #[error("{signal} to pid {pid}: {source}")]
    Failed {
        signal: Signal,
        pid: i32,
        source: nix::Error,
    },
    #[error("pid {pid} is in {state} {limit:?} after {signal}, not {wanted}")]
    NoEffect {
        signal: Signal,
        pid: i32,
        state: ProcState,
        wanted: &'static str,
        limit: Duration,
    },
}

/// Sends `signal` to `pid` (never to pid 0 or 1, a group, or this process).
pub fn signal(pid: i32, signal: Signal) -> Result<(), SignalError> {
    if pid <= 1 || pid == std::process::id() as i32 {
        return Err(SignalError::UnsafePid(pid));
    }
    kill(Pid::from_raw(pid), signal).map_err(|source| SignalError::Failed {
        signal,
        pid,
        source,
    })
}

/// How long a signal may take to show in the process's state.
const SIGNAL_LIMIT: Duration = Duration::from_secs(3);

/// Sends `sig` and waits until the kernel shows its effect (`wanted`
/// decides); answers the state seen.
pub async fn signal_and_see(
    pid: i32,
    sig: Signal,
    wanted: &'static str,
    took: fn(ProcState) -> bool,
) -> Result<ProcState, SignalError> {
    signal(pid, sig)?;
    let deadline = Instant::now() + SIGNAL_LIMIT;
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    loop {
        tick.tick().await;
        let now = state(pid);
        if took(now) {
            return Ok(now);
        }
        if Instant::now() >= deadline {
            return Err(SignalError::NoEffect {
                signal: sig,
                pid,
                state: now,
                wanted,
                limit: SIGNAL_LIMIT,
            });
        }
    }
}

/// SIGKILL, seen dead.
pub async fn kill_seen(pid: i32) -> Result<ProcState, SignalError> {
    signal_and_see(pid, Signal::SIGKILL, "dead", ProcState::is_dead).await
}

/// SIGSTOP, seen stopped (`T`).
pub async fn stop_seen(pid: i32) -> Result<ProcState, SignalError> {
    signal_and_see(pid, Signal::SIGSTOP, "stopped (T)", |s| {
        s == ProcState::Stopped
    })
    .await
}

/// SIGCONT, seen running again.
pub async fn continue_seen(pid: i32) -> Result<ProcState, SignalError> {
    signal_and_see(pid, Signal::SIGCONT, "running", |s| {
        matches!(s, ProcState::Alive(_))
    })
    .await
}

/// How far the wall clock of the process serving `url` is from ours, in
/// whole seconds, read from its `Date` header (second resolution: ±1 s).
pub async fn clock_offset(http: &reqwest::Client, url: &str) -> anyhow::Result<i64> {
    let before = SystemTime::now();
    let response = http.get(url).send().await?;
    let after = SystemTime::now();
    let date = response
        .headers()
        .get(reqwest::header::DATE)
        .ok_or_else(|| anyhow::anyhow!("{url} answered without a Date header"))?
        .to_str()?
        .to_owned();
    let theirs = httpdate::parse_http_date(&date)?;
    let ours = before + after.duration_since(before).unwrap_or_default() / 2;
    Ok(signed_seconds(theirs, ours))
}

/// `theirs - ours` in whole seconds, rounded to the nearest.
pub fn signed_seconds(theirs: SystemTime, ours: SystemTime) -> i64 {
    match theirs.duration_since(ours) {
        Ok(ahead) => (ahead.as_secs_f64().round()) as i64,
        Err(behind) => -(behind.duration().as_secs_f64().round() as i64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_is_read_after_the_last_parenthesis() {
        let stat = "4242 (once (node) x) T 1 4242 4242 0 -1";
        assert_eq!(parse_stat(stat), Some(ProcState::Stopped));
        assert_eq!(parse_stat("7 (once) S 1 7"), Some(ProcState::Alive('S')));
        assert_eq!(parse_stat("7 (once) Z 1 7"), Some(ProcState::Dead));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn this_process_is_alive_and_a_free_pid_is_gone() {
        assert!(matches!(
            state(std::process::id() as i32),
            ProcState::Alive(_)
        ));
        assert_eq!(state(i32::MAX), ProcState::Gone);
    }

    #[test]
    fn signals_to_init_or_to_ourselves_are_refused() {
        assert!(matches!(
            signal(1, Signal::SIGSTOP),
            Err(SignalError::UnsafePid(1))
        ));
        let me = std::process::id() as i32;
        assert!(matches!(
            signal(me, Signal::SIGKILL),
            Err(SignalError::UnsafePid(_))
        ));
    }

    #[tokio::test]
    async fn a_stopped_child_is_seen_in_state_t_and_a_killed_one_dead() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let pid = child.id() as i32;
        assert_eq!(stop_seen(pid).await.unwrap(), ProcState::Stopped);
        assert!(matches!(
            continue_seen(pid).await.unwrap(),
            ProcState::Alive(_)
        ));
        assert!(kill_seen(pid).await.unwrap().is_dead());
        child.wait().unwrap();
    }

    #[test]
    fn offsets_are_signed_and_rounded() {
        let now = SystemTime::now();
        assert_eq!(
            signed_seconds(now + Duration::from_millis(7_200_400), now),
            7200
        );
        assert_eq!(
            signed_seconds(now - Duration::from_millis(120_600), now),
            -121
        );
        assert_eq!(signed_seconds(now, now), 0);
    }
}
