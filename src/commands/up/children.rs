//! The processes `once up` runs: each role is this same binary started as a
//! child, its output in `DIR/logs/<name>.log`, waited for until it answers
//! HTTP, and stopped with SIGTERM (SIGKILL only after a grace period), or
//! killed outright when a drill asks for a crash; if `once up` itself is
//! killed, each child sees its stdin close and stops.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use once_drill::control::{Stop, Stopped};
use tokio::process::{Child, Command};

#[derive(Debug)]
pub struct ChildProcess {
    pub name: String,
    pub child: Child,
    /// Kept from the start: `Child::id` forgets it once the exit is reaped,
    /// and the restart answer names the pid a process had.
    pid: u32,
}

/// A process asked to be left alone (`"stop": "none"`) still runs.
#[derive(Debug, thiserror::Error)]
#[error(
    "{name} (pid {pid}) is still running; stop it first, or ask for \"stop\": \"term\" or \"kill\""
)]
pub struct StillRunning {
    pub name: String,
    pub pid: u32,
}

impl ChildProcess {
    /// Starts `once <args>` with `env`, logging to `logs/<name>.log`.
    pub fn spawn(
        logs: &Path,
        name: &str,
        args: &[String],
        env: &[(&str, String)],
    ) -> anyhow::Result<Self> {
        let log_path = logs.join(format!("{name}.log"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("opening {}", log_path.display()))?;
        let exe = std::env::current_exe().context("locating the once binary")?;
        let mut command = Command::new(exe);
        // stdin is the child's lifeline: a pipe whose write end this
        // process keeps (in `Child`) until it exits. If `once up` dies
        // outright, the pipe closes and the child shuts itself down
        // (`once_node::shutdown_signal`); `kill_on_drop` covers every
        // ordinary exit.
        command
            .args(args)
            .stdin(Stdio::piped())
            .stdout(log.try_clone()?)
            .stderr(log)
            .env(once_edge::LIFELINE_ENV, "stdin")
            .kill_on_drop(true);
        for (k, v) in env {
            command.env(k, v);
        }
        let child = command
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        Ok(Self {
            name: name.to_owned(),
            pid: child.id().unwrap_or(0),
            child,
        })
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether it is gone (killed, crashed) and must be started again.
    pub fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// Logs how it ended, for one found gone that `once up` did not stop:
    /// a signal names the kind of killer (RELIABILITY.md, finding 19).
    pub fn log_exit(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            tracing::warn!(process = %self.name, pid = self.pid, %status, "found exited");
        }
    }

    /// Waits until `url` answers 2xx, failing early if the process exits.
    /// `http` presents `once up`'s certificate to a store member.
    pub async fn wait_ready(
        &mut self,
        http: &reqwest::Client,
        url: &str,
        limit: Duration,
    ) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + limit;
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        loop {
            tick.tick().await;
            if let Some(status) = self.child.try_wait()? {
                anyhow::bail!("{} exited ({status}); see its log", self.name);
            }
            if http
                .get(url)
                .timeout(Duration::from_secs(1))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
            {
                return Ok(());
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "{} did not become ready at {url} within {limit:?}",
                self.name
            );
        }
    }

    /// Ends it as `how` says and answers how it ended: SIGTERM with up to
    /// `grace` for a clean exit (then SIGKILL), SIGKILL at once, or nothing
    /// for one that must already be gone. Waits for the exit in every case,
    /// so its listeners are free for the next process.
    pub async fn end(&mut self, how: Stop, grace: Duration) -> Result<Stopped, StillRunning> {
        if self.exited() {
            self.log_exit();
            return Ok(Stopped::AlreadyGone);
        }
        match how {
            Stop::None => Err(StillRunning {
                name: self.name.clone(),
                pid: self.pid,
            }),
            Stop::Kill => {
                self.kill_and_reap(grace).await;
                Ok(Stopped::Sigkill)
            }
            Stop::Term => {
                self.terminate();
                if tokio::time::timeout(grace, self.child.wait()).await.is_ok() {
                    Ok(Stopped::Sigterm)
                } else {
                    self.kill_and_reap(grace).await;
                    Ok(Stopped::Sigkill)
                }
            }
        }
    }

    /// SIGKILL, then up to `limit` for the exit to be reaped. A killed
    /// process whose threads are stuck in the kernel (uninterruptible disk
    /// I/O on a loaded machine) exits only when they return; waiting for it
    /// without a bound held the control endpoint's lock forever in a chaos
    /// run, and every later restart with it. Unreaped, its `Child` goes to
    /// tokio's orphan queue when replaced, which reaps it later.
    async fn kill_and_reap(&mut self, limit: Duration) {
        let _ = self.child.start_kill();
        if tokio::time::timeout(limit, self.child.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                process = %self.name,
                pid = self.pid,
                "killed, but its exit was not reaped within {limit:?}; moving on"
            );
        }
    }

    /// SIGTERM, unless its exit was already reaped (its pid may be someone
    /// else's by now).
    fn terminate(&self) {
        if let Some(pid) = self.child.id() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
    }

    /// SIGTERM, then up to `grace` for a clean exit, then SIGKILL; says
    /// how it ended and how long it took, so a slow stop names its process.
    pub async fn stop(mut self, grace: Duration) {
        let started = std::time::Instant::now();
        // `Stop::Term` never answers `StillRunning`.
        if let Ok(how) = self.end(Stop::Term, grace).await {
            println!(
                "  {}: {how} ({} ms)",
                self.name,
                started.elapsed().as_millis()
            );
        }
    }
}
