//! Key files a role refuses to start with: a private key (`--tls-key`,
//! `--public-tls-key`) or the data key file (`--data-keys`) that other
//! users of the machine may read or write, or its group may write.
//!
//! Group read is allowed on purpose: Kubernetes hands a Secret to a
//! non-root pod as `root:<fsGroup>` mode 0440 (decision 0076), so refusing
//! it would refuse every deployment. Anything looser — world-readable (a
//! 0644 left by `cp` under umask 022), group- or world-writable (anyone
//! could swap in their own key) — is a configuration error, exit 64,
//! before anything binds. `once up` writes every file 0600.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use super::config_error;

/// The permission bits a key file must not have: group write and execute,
/// and every bit for others.
const LOOSE: u32 = 0o037;

/// `Ok` for a key file only its owner (and at most its group, reading) can
/// use; a configuration error naming `flag`, the file and its mode
/// otherwise. A file that cannot be read is left to the loader's error.
pub fn refuse_loose(flag: &str, path: &Path) -> anyhow::Result<()> {
    let Ok(metadata) = std::fs::metadata(path) else {
        return Ok(());
    };
    let mode = metadata.permissions().mode() & 0o777;
    if mode & LOOSE != 0 {
        return Err(config_error(anyhow::anyhow!(
            "{flag} {}: mode {mode:04o} lets other users read or replace the key; \
             make it 0600 (chmod 600 {})",
            path.display(),
            path.display()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_mode(mode: u32) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key.pem");
        std::fs::write(&path, "key").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        (dir, path)
    }

    #[test]
    fn owner_only_and_a_kubernetes_secret_are_accepted() {
        for mode in [0o600, 0o400, 0o440, 0o640] {
            let (_dir, path) = with_mode(mode);
            refuse_loose("--tls-key", &path).unwrap();
        }
    }

    #[test]
    fn world_readable_or_writable_and_group_writable_are_refused_as_configuration() {
        for mode in [0o644, 0o604, 0o666, 0o660, 0o602, 0o610, 0o777] {
            let (_dir, path) = with_mode(mode);
            let refused = refuse_loose("--data-keys", &path).unwrap_err();
            assert!(refused.is::<super::super::ConfigError>(), "{mode:o}");
            let text = format!("{refused:#}");
            assert!(
                text.contains(&format!("{mode:04o}")) && text.contains("--data-keys"),
                "{text}"
            );
        }
    }
}
