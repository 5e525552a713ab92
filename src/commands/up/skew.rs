//! A child started with its wall clock skewed, for clock drills:
//! libfaketime preloaded (`LD_PRELOAD`), given an absolute offset
//! (`FAKETIME="+7200s"`) and told to leave the monotonic clock alone
//! (`FAKETIME_DONT_FAKE_MONOTONIC=1`), so the process stamps times that far
//! off while its timers (tokio sleeps and timeouts, Raft elections) keep
//! real time. The library is preloaded directly, not through the
//! `faketime` wrapper, which forks: the pid `once up` records and signals
//! must be the process itself.
//!
//! A skew is checked, never assumed: a missing library is refused before
//! anything is stopped, and the started process's clock is read back from
//! the `Date` header hyper puts on every answer, so a library that did not
//! load (the dynamic loader only warns) is an error, not a process quietly
//! on the real clock.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

/// Where Debian's `faketime` package puts the library.
pub const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
/// Names the library elsewhere (another distribution or architecture).
pub const LIBFAKETIME_ENV: &str = "ONCE_LIBFAKETIME";

/// Further than this is a typo, not a drill.
const LARGEST_OFFSET: Duration = Duration::from_secs(10 * 366 * 24 * 60 * 60);
/// How far the clock read back may be from the one asked for: the `Date`
/// header has whole seconds and hyper refreshes it once a second; the rest
/// is the time the answer took.
const READ_BACK_TOLERANCE: i64 = 30;

#[derive(Debug, thiserror::Error)]
pub enum SkewError {
    #[error(
        "a clock offset of {0} s is more than ten years: refused as a typo (the offset is in seconds)"
    )]
    TooFar(i64),
    #[error(
        "libfaketime is not at {path}: a clock offset cannot be applied (install the faketime package, or set {LIBFAKETIME_ENV} to the path of libfaketime.so.1)"
    )]
    Missing { path: String },
    #[error("{process} gave no readable Date header at {url}: its clock cannot be checked")]
    NoDate { process: String, url: String },
    #[error(
        "{process} was started with its clock {asked:+} s off, but its Date header ({date}) is {seen:+} s off: libfaketime did not take effect (see its log for the loader's warning)"
    )]
    NotApplied {
        process: String,
        asked: i64,
        seen: i64,
        date: String,
    },
}

/// A wall-clock offset for one child, in whole seconds (`0`: the real clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockSkew {
    offset_seconds: i64,
}

impl ClockSkew {
    pub fn new(offset_seconds: i64) -> Result<Self, SkewError> {
        if offset_seconds.unsigned_abs() > LARGEST_OFFSET.as_secs() {
            return Err(SkewError::TooFar(offset_seconds));
        }
        Ok(Self { offset_seconds })
    }

    pub fn offset_seconds(self) -> i64 {
        self.offset_seconds
    }

    /// The library: [`LIBFAKETIME_ENV`] if set, else [`LIBFAKETIME`].
    fn library() -> PathBuf {
        std::env::var_os(LIBFAKETIME_ENV)
            .filter(|path| !path.is_empty())
            .map_or_else(|| PathBuf::from(LIBFAKETIME), PathBuf::from)
    }

    /// The environment to start the child with: nothing for the real
    /// clock; else libfaketime and its settings, or an error if the
    /// library is not there.
    pub fn environment(self) -> Result<Vec<(&'static str, String)>, SkewError> {
        self.environment_with(Self::library())
    }

    fn environment_with(self, library: PathBuf) -> Result<Vec<(&'static str, String)>, SkewError> {
        if self.offset_seconds == 0 {
            return Ok(Vec::new());
        }
        if !library.is_file() {
            return Err(SkewError::Missing {
                path: library.display().to_string(),
            });
        }
        let library = library.display().to_string();
        // Whatever `once up` itself preloads stays preloaded.
        let preload = match std::env::var("LD_PRELOAD") {
            Ok(others) if !others.trim().is_empty() => format!("{library}:{others}"),
            _ => library,
        };
        Ok(vec![
            ("LD_PRELOAD", preload),
            ("FAKETIME", self.faketime()),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_owned()),
        ])
    }

    /// libfaketime's absolute offset: `+7200s`, `-7200s`.
    fn faketime(self) -> String {
        format!("{:+}s", self.offset_seconds)
    }

    /// Reads `process`'s clock back from the `Date` header of its answer
    /// at `url` and fails unless it is this offset off (within a
    /// tolerance). Checked for the real clock too: a child that inherited
    /// a skew is caught as well.
    pub async fn verify(
        self,
        http: &reqwest::Client,
        process: &str,
        url: &str,
    ) -> Result<(), SkewError> {
        let no_date = || SkewError::NoDate {
            process: process.to_owned(),
            url: url.to_owned(),
        };
        let answer = http
            .get(url)
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .map_err(|_| no_date())?;
        let date = answer
            .headers()
            .get(reqwest::header::DATE)
            .and_then(|d| d.to_str().ok())
            .ok_or_else(no_date)?
            .to_owned();
        let seen = httpdate::parse_http_date(&date)
            .map(|theirs| seconds_between(SystemTime::now(), theirs))
            .map_err(|_| no_date())?;
        if (seen - self.offset_seconds).abs() > READ_BACK_TOLERANCE {
            return Err(SkewError::NotApplied {
                process: process.to_owned(),
                asked: self.offset_seconds,
                seen,
                date,
            });
        }
        Ok(())
    }
}

/// `theirs - ours` in whole seconds, negative when theirs is behind.
fn seconds_between(ours: SystemTime, theirs: SystemTime) -> i64 {
    match theirs.duration_since(ours) {
        Ok(ahead) => i64::try_from(ahead.as_secs()).unwrap_or(i64::MAX),
        Err(behind) => -i64::try_from(behind.duration().as_secs()).unwrap_or(i64::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offset_is_written_as_libfaketime_reads_it() {
        assert_eq!(ClockSkew::new(7200).unwrap().faketime(), "+7200s");
        assert_eq!(ClockSkew::new(-7200).unwrap().faketime(), "-7200s");
        assert!(ClockSkew::new(0).unwrap().environment().unwrap().is_empty());
        assert!(matches!(
            ClockSkew::new(-20 * 365 * 24 * 3600),
            Err(SkewError::TooFar(_))
        ));
    }

    #[test]
    fn a_missing_library_is_refused_and_a_present_one_preloaded() {
        let skew = ClockSkew::new(60).unwrap();
        let missing = skew
            .environment_with(PathBuf::from("/nowhere/libfaketime.so.1"))
            .unwrap_err();
        assert!(
            matches!(&missing, SkewError::Missing { path } if path == "/nowhere/libfaketime.so.1")
        );
        assert!(missing.to_string().contains(LIBFAKETIME_ENV), "{missing}");

        let dir = tempfile::tempdir().unwrap();
        let library = dir.path().join("libfaketime.so.1");
        std::fs::write(&library, b"").unwrap();
        let env = skew.environment_with(library.clone()).unwrap();
        let get = |k: &str| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone());
        assert!(
            get("LD_PRELOAD")
                .unwrap()
                .starts_with(&library.display().to_string())
        );
        assert_eq!(get("FAKETIME").as_deref(), Some("+60s"));
        assert_eq!(get("FAKETIME_DONT_FAKE_MONOTONIC").as_deref(), Some("1"));
    }

    #[test]
    fn seconds_between_is_signed() {
        let now = SystemTime::now();
        assert_eq!(seconds_between(now, now + Duration::from_secs(7200)), 7200);
        assert_eq!(seconds_between(now, now - Duration::from_secs(90)), -90);
    }
}
