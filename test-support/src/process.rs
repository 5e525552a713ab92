//! Child processes of a test. Each starts with an environment of the test's
//! choosing (nothing inherited that would change how it behaves), is read on
//! stdout until it says it is ready (never a sleep standing in for that),
//! has its stdout drained from then on so it never blocks on a full pipe,
//! and is killed when dropped, the test passed or not.

use std::ffi::OsStr;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// What a child never inherits from the developer's shell or CI: crash
/// points and telemetry export. A test that wants one sets it on the
/// command after [`command`].
const NOT_INHERITED: [&str; 4] = [
    "FAILPOINTS",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
];

/// How long a process may take to exit after SIGTERM.
const TERMINATE_LIMIT: Duration = Duration::from_secs(20);

/// `program`, ready for [`Process::start`]: `RUST_LOG=warn` (a test may set
/// another), none of the crash-point and OTLP variables, stdout piped (the
/// ready line is read there), stderr the test's own, killed on drop.
pub fn command(program: impl AsRef<OsStr>) -> Command {
    let mut command = Command::new(program);
    command
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    for name in NOT_INHERITED {
        command.env_remove(name);
    }
    command
}

/// A running child process, killed when dropped.
#[derive(Debug)]
pub struct Process {
    child: Child,
}

impl Process {
    /// Spawns `command` (made by [`command`]) and reads its stdout until
    /// `ready` finds what it waits for in a line, within `limit`; returns
    /// the process and what `ready` found. Panics, naming `what`, if the
    /// process exits or stays silent first.
    pub async fn start<T>(
        mut command: Command,
        what: &str,
        limit: Duration,
        mut ready: impl FnMut(&str) -> Option<T>,
    ) -> (Self, T) {
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
        let stdout = child
            .stdout
            .take()
            .expect("stdout piped (a command from process::command)");
        let mut lines = BufReader::new(stdout).lines();
        let found = tokio::time::timeout(limit, async {
            while let Some(line) = lines.next_line().await.expect("read stdout") {
                if let Some(found) = ready(&line) {
                    return found;
                }
            }
            panic!("{what} exited before it was ready");
        })
        .await
        .unwrap_or_else(|_| panic!("{what} ready within {limit:?}"));
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        (Self { child }, found)
    }

    /// A process that does nothing for five minutes: a stand-in for a
    /// role's process where only its pid matters (a drill signals it).
    pub fn idle() -> Self {
        let child = Command::new("sleep")
            .arg("300")
            .kill_on_drop(true)
            .spawn()
            .expect("spawn sleep");
        Self { child }
    }

    pub fn pid(&self) -> u32 {
        self.child.id().expect("a running process")
    }

    /// SIGTERM, then waits for the exit (a clean one flushes what it
    /// buffered: telemetry, the drain of requests in flight).
    pub async fn terminate(&mut self) -> ExitStatus {
        self.try_terminate()
            .await
            .unwrap_or_else(|| panic!("the process exits within {TERMINATE_LIMIT:?} of SIGTERM"))
    }

    /// [`Self::terminate`] that answers `None` instead of failing when the
    /// exit takes longer than a clean stop may: the caller says why first.
    pub async fn try_terminate(&mut self) -> Option<ExitStatus> {
        let pid = Pid::from_raw(self.pid() as i32);
        kill(pid, Signal::SIGTERM).expect("SIGTERM");
        self.exit_by(TERMINATE_LIMIT).await
    }

    /// SIGKILL: no shutdown, no flush; returns once the process is reaped.
    pub async fn kill(&mut self) {
        self.child.start_kill().expect("SIGKILL");
        self.child.wait().await.expect("reaped");
    }

    /// Waits for the process to exit on its own (a failpoint's abort, a
    /// signal from someone else), failing after `limit`.
    pub async fn exit_within(&mut self, limit: Duration) -> ExitStatus {
        self.exit_by(limit)
            .await
            .unwrap_or_else(|| panic!("the process exits within {limit:?}"))
    }

    /// The exit status if the process exits within `limit`.
    async fn exit_by(&mut self, limit: Duration) -> Option<ExitStatus> {
        tokio::time::timeout(limit, self.child.wait())
            .await
            .ok()
            .map(|status| status.expect("wait"))
    }
}

/// Whether `pid` is a running process (a zombie, exited but not reaped,
/// is not).
pub fn alive(pid: i32) -> bool {
    kill(Pid::from_raw(pid), None).is_ok()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s.split_whitespace().nth(2) == Some("Z"))
}
