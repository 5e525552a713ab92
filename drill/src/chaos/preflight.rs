//! What the chosen nemeses need from the machine, checked before the run
//! starts: a nemesis that cannot run would otherwise be drawn, refused
//! fault after fault, and leave a report of faults that never happened.
//!
//! Only `skew` needs something outside the project: libfaketime, which
//! `once up` preloads into the process it restarts with a skewed clock. The
//! drill runs on the machine `once up` runs on (it signals pids from
//! `cluster.json`), so it looks for the library where `once up` does:
//! `ONCE_LIBFAKETIME` if set, else the path of Debian's `faketime` package.

use std::io::Read as _;
use std::path::PathBuf;

use crate::chaos::nemesis::Nemesis;

/// Where Debian's `faketime` package puts the library (`once up` looks
/// there too).
pub const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
/// Names the library elsewhere (another distribution or architecture);
/// `once up` reads the same variable.
pub const LIBFAKETIME_ENV: &str = "ONCE_LIBFAKETIME";

/// A nemesis this machine cannot run.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Unrunnable {
    #[error(
        "the skew nemesis needs libfaketime, which is not at {path} ({why}): install Debian's `faketime` package (`apt-get install faketime`), set {LIBFAKETIME_ENV} to the path of libfaketime.so.1, or leave skew out ({without})"
    )]
    NoLibfaketime {
        path: String,
        why: String,
        /// The `--nemesis` list the run would have without skew.
        without: String,
    },
}

/// The library `once up` would preload.
pub fn libfaketime() -> PathBuf {
    std::env::var_os(LIBFAKETIME_ENV)
        .filter(|path| !path.is_empty())
        .map_or_else(|| PathBuf::from(LIBFAKETIME), PathBuf::from)
}

/// Why `path` is not a loadable library, if it is not one: missing, not a
/// file, unreadable, or not an ELF object (the dynamic loader only warns
/// about a preload it cannot load, and the process would start on the true
/// clock).
fn not_a_library(path: &std::path::Path) -> Option<String> {
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) => return Some(e.to_string()),
    };
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return Some("not a file".to_owned());
    }
    let mut magic = [0u8; 4];
    match file.read_exact(&mut magic) {
        Ok(()) if magic == *b"\x7fELF" => None,
        Ok(()) | Err(_) => Some("not an ELF shared object".to_owned()),
    }
}

/// Refuses a run whose nemeses this machine cannot bring, before anything
/// is sent or struck.
pub fn check(nemeses: &[Nemesis]) -> Result<(), Unrunnable> {
    check_with(nemeses, &libfaketime())
}

fn check_with(nemeses: &[Nemesis], library: &std::path::Path) -> Result<(), Unrunnable> {
    if !nemeses.contains(&Nemesis::Skew) {
        return Ok(());
    }
    let Some(why) = not_a_library(library) else {
        return Ok(());
    };
    let others: Vec<&str> = nemeses
        .iter()
        .filter(|n| **n != Nemesis::Skew)
        .map(|n| n.name())
        .collect();
    Err(Unrunnable::NoLibfaketime {
        path: library.display().to_string(),
        why,
        without: if others.is_empty() {
            "skew is the only nemesis chosen: pick others with --nemesis".to_owned()
        } else {
            format!("--nemesis {}", others.join(","))
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skew_without_the_library_is_refused_and_names_the_package() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("libfaketime.so.1");
        let refused = check_with(&[Nemesis::Kill, Nemesis::Skew], &missing).unwrap_err();
        let said = refused.to_string();
        assert!(said.contains("`faketime` package"), "{said}");
        assert!(said.contains("--nemesis kill"), "{said}");
        assert!(said.contains(LIBFAKETIME_ENV), "{said}");

        // A file that is not a shared object would be ignored by the loader.
        std::fs::write(&missing, b"not a library").unwrap();
        let refused = check_with(&[Nemesis::Skew], &missing).unwrap_err();
        assert!(refused.to_string().contains("not an ELF"), "{refused}");
        assert!(refused.to_string().contains("only nemesis"), "{refused}");
    }

    #[test]
    fn nemeses_without_skew_need_nothing_and_a_library_is_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nowhere.so");
        assert_eq!(
            check_with(&[Nemesis::Kill, Nemesis::Pause], &missing),
            Ok(())
        );
        let library = dir.path().join("libfaketime.so.1");
        std::fs::write(&library, b"\x7fELF\x02\x01\x01").unwrap();
        assert_eq!(check_with(&Nemesis::ALL, &library), Ok(()));
    }
}
