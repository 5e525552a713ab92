//! A PostgreSQL server of the test's own (`initdb` + `pg_ctl` into a temp
//! dir, on a free port of 127.0.0.1), for what the shared server at
//! `DATABASE_URL` cannot be made to do: serve TLS with a certificate the
//! test made, refuse plaintext. Stopped and removed on drop. Check
//! [`available`] first.
//!
//! Run as root, the server runs as the `postgres` user (`initdb` refuses
//! root), and its files are handed to that user.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::ports::port_outside_ephemeral_range;
use crate::services::present_or_skipped;
pub use crate::web_pki::ServerTls;

/// True when `initdb` and `pg_ctl` are on the `PATH`.
pub fn available() -> bool {
    let found = |tool: &str| {
        Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    present_or_skipped(
        found("initdb") && found("pg_ctl"),
        "CI must have PostgreSQL's initdb and pg_ctl on the PATH",
        "no initdb/pg_ctl: skipping the throwaway PostgreSQL scenario",
    )
}

#[derive(Debug)]
pub struct PgServer {
    pub port: u16,
    dir: tempfile::TempDir,
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

/// `program`, to run as the server's owner (`postgres` when this is root).
fn as_owner(program: &str) -> Command {
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--", program]);
        c
    } else {
        Command::new(program)
    }
}

/// Runs `program args` as the server's owner; panics with its output if it
/// fails.
fn run_as_owner(program: &str, args: &[&str]) {
    let output = as_owner(program).args(args).output().expect(program);
    assert!(
        output.status.success(),
        "{program} {args:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn give_to_owner(path: &Path) {
    if is_root() {
        let status = Command::new("chown")
            .args(["-R", "postgres:", &path.display().to_string()])
            .status()
            .expect("chown");
        assert!(status.success(), "chown {}", path.display());
    }
}

impl PgServer {
    /// Starts a server that accepts only TLS connections from 127.0.0.1
    /// (user `postgres`, trust authentication once the session is
    /// encrypted), presenting `tls`.
    pub fn start_tls_only(tls: &ServerTls) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let data = dir.path().join("data");
        give_to_owner(dir.path());
        run_as_owner(
            "initdb",
            &[
                "-D",
                &data.display().to_string(),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
            ],
        );
        let cert = data.join("server.crt");
        let key = data.join("server.key");
        std::fs::write(&cert, &tls.cert_pem).expect("write certificate");
        std::fs::write(&key, &tls.key_pem).expect("write key");
        set_mode(&key, 0o600);
        std::fs::write(
            data.join("pg_hba.conf"),
            "local all all trust\n\
             hostssl all all 127.0.0.1/32 trust\n\
             hostnossl all all 0.0.0.0/0 reject\n",
        )
        .expect("write pg_hba.conf");
        give_to_owner(dir.path());
        let port = port_outside_ephemeral_range(&["127.0.0.1"]);
        let options = format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c ssl=on -c ssl_cert_file={} -c ssl_key_file={} -c fsync=off",
            dir.path().display(),
            cert.display(),
            key.display()
        );
        run_as_owner(
            "pg_ctl",
            &[
                "-D",
                &data.display().to_string(),
                "-o",
                &options,
                "-l",
                &dir.path().join("log").display().to_string(),
                "-w",
                "start",
            ],
        );
        Self { port, dir }
    }

    /// The data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let data = self.data_dir().display().to_string();
        let mut command = if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--", "pg_ctl"]);
            c
        } else {
            Command::new("pg_ctl")
        };
        let _ = command
            .args(["-D", &data, "-m", "immediate", "stop"])
            .output();
    }
}
