//! `once up`'s data directory is its owner's alone: the directory 0700 and
//! every file in it 0600 — databases, store logs and snapshots, process
//! logs, the provider ledger, `cluster.json`, keys and certificates —
//! whatever umask `once up` was started with.
//!
//! Two things make it so. `once up` sets its umask to 0077 before it
//! creates anything; its children inherit it, so every file a child makes
//! later (a SQLite `-wal`, a snapshot, a rotated log) is born private. And
//! on every start the directory is walked once: whatever an older `once up`
//! (or a `cp` under umask 022) left looser is tightened before any child
//! starts.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use anyhow::Context;
use nix::sys::stat::{Mode, umask};

/// The bits no file or directory under the data directory keeps.
const GROUP_AND_OTHERS: u32 = 0o077;

/// Makes `dir` (and its parents) if missing, and makes it and everything in
/// it private; from here on, this process and its children create files
/// for their owner only.
pub(crate) fn enclose(dir: &Path) -> anyhow::Result<()> {
    umask(Mode::from_bits_truncate(
        GROUP_AND_OTHERS as nix::libc::mode_t,
    ));
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    tighten(dir)
}

/// `path` and, for a directory, everything under it without any group or
/// others bit; symbolic links are left alone (their target is not ours to
/// change, and a link's own mode means nothing).
fn tighten(path: &Path) -> anyhow::Result<()> {
    let metadata =
        std::fs::symlink_metadata(path).with_context(|| format!("reading {}", path.display()))?;
    if metadata.file_type().is_symlink() {
        return Ok(());
    }
    let mode = metadata.permissions().mode();
    if mode & GROUP_AND_OTHERS != 0 {
        std::fs::set_permissions(
            path,
            std::fs::Permissions::from_mode(mode & !GROUP_AND_OTHERS & 0o7777),
        )
        .with_context(|| format!("restricting {}", path.display()))?;
    }
    if metadata.is_dir() {
        for entry in
            std::fs::read_dir(path).with_context(|| format!("listing {}", path.display()))?
        {
            tighten(&entry?.path())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path)
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    }

    #[test]
    fn what_an_older_once_up_left_open_is_closed_and_new_files_are_born_private() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("data");
        std::fs::create_dir_all(dir.join("store-eu-west/snapshots")).unwrap();
        let set = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        let db = dir.join("region-eu-west.db");
        let snapshot = dir.join("store-eu-west/snapshots/1.bin");
        std::fs::write(&db, "db").unwrap();
        std::fs::write(&snapshot, "snap").unwrap();
        set(&db, 0o644);
        set(&snapshot, 0o666);
        set(&dir, 0o755);
        set(&dir.join("store-eu-west"), 0o775);
        let outside = root.path().join("outside");
        std::fs::write(&outside, "not ours").unwrap();
        set(&outside, 0o644);
        std::os::unix::fs::symlink(&outside, dir.join("link")).unwrap();

        enclose(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join("store-eu-west")), 0o700);
        assert_eq!(mode(&dir.join("store-eu-west/snapshots")), 0o700);
        assert_eq!(mode(&db), 0o600);
        assert_eq!(mode(&snapshot), 0o600);
        assert_eq!(mode(&outside), 0o644, "a link's target is left alone");

        // The umask now set: a file made the ordinary way is private.
        let later = dir.join("logs.log");
        std::fs::write(&later, "line").unwrap();
        assert_eq!(mode(&later), 0o600);
        std::fs::create_dir(dir.join("later")).unwrap();
        assert_eq!(mode(&dir.join("later")), 0o700);
        // The test binary's other tests expect the usual umask.
        let ours = umask(Mode::from_bits_truncate(0o022));
        assert_eq!(ours.bits() as u32, GROUP_AND_OTHERS);
    }
}
