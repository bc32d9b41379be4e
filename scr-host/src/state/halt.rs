//! The halt file, `<prefix>/.scr/halt.scr`: conditions under which a run should stop,
//! set by the library and by `scr halt`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::prefix::PrefixLock;
use crate::state::{read_state, write_state, StateError};

/// State-file kind of the halt file.
pub const KIND: &str = "halt";

/// Halt conditions (the Files chapter's CheckpointsLeft, ExitAfter, ExitBefore,
/// HaltSeconds and ExitReason).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Halt {
    /// Stop after this many more checkpoints.
    pub checkpoints_left: Option<i64>,
    /// Stop once the time (seconds since the epoch) is past this.
    pub exit_after: Option<i64>,
    /// Stop `halt_seconds` before this time (seconds since the epoch).
    pub exit_before: Option<i64>,
    /// Margin before `exit_before`.
    pub halt_seconds: Option<i64>,
    /// Stop, for this reason.
    pub exit_reason: Option<String>,
}

impl Halt {
    /// The halt file of a prefix directory.
    pub fn path(prefix: &Path) -> PathBuf {
        crate::layout::halt_file(prefix)
    }

    /// Read it; a missing file means no condition.
    pub fn load(prefix: &Path) -> Result<Halt, StateError> {
        match read_state(&Self::path(prefix), KIND) {
            Err(e) if e.is_not_found() => Ok(Halt::default()),
            other => other,
        }
    }

    /// Read, change and write it back atomically, serialized with every other update of
    /// the prefix's state (index, flush file, halt file) in this process or another
    /// ([`PrefixLock`]): `scr halt` run by an admin while a job decrements
    /// CheckpointsLeft or records its exit reason must not lose either change. `change`
    /// returns whether it changed anything; only then is the file written (a full
    /// prefix does not fail a read). A damaged or unreadable halt file is taken, with a
    /// warning, as no conditions (what `change` makes of them replaces it); one of
    /// another format version is an error.
    pub fn update<T>(
        prefix: &Path,
        change: impl FnOnce(&mut Halt) -> (bool, T),
    ) -> Result<(Halt, T), StateError> {
        let _g = PrefixLock::take(prefix)?;
        let mut halt = match Self::load(prefix) {
            Ok(h) => h,
            // another release's file is not ours to replace
            Err(e) if e.is_other_version() => return Err(e),
            // damaged or unreadable (a flipped byte, a directory in the way): it holds
            // no usable condition, as for every reader of it; a change replaces it
            Err(e) => {
                tracing::warn!("{e}; taken as no halt conditions");
                Halt::default()
            }
        };
        let (changed, out) = change(&mut halt);
        if changed {
            halt.save(prefix).map_err(|source| StateError::Io {
                path: Self::path(prefix),
                source,
            })?;
        }
        Ok((halt, out))
    }

    /// Write it atomically (creating `<prefix>/.scr`). Callers that read it first use
    /// [`Halt::update`] instead, which holds the prefix lock.
    pub fn save(&self, prefix: &Path) -> std::io::Result<()> {
        let path = Self::path(prefix);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        write_state(&path, KIND, self)
    }

    /// Why the run should stop now (`now` in seconds since the epoch), if it should.
    /// `default_halt_seconds` is the `halt_seconds` configuration key, used when the file
    /// sets none.
    pub fn reason(&self, now: i64, default_halt_seconds: i64) -> Option<String> {
        if let Some(r) = &self.exit_reason {
            return Some(format!("exit reason set: {r}"));
        }
        if let Some(n) = self.checkpoints_left {
            if n <= 0 {
                return Some("no checkpoints left".into());
            }
        }
        if let Some(t) = self.exit_after {
            if now >= t {
                return Some(format!("exit-after time {t} has passed"));
            }
        }
        if let Some(t) = self.exit_before {
            let margin = self.halt_seconds.unwrap_or(default_halt_seconds);
            if now >= t - margin {
                return Some(format!("within {margin} s of the exit-before time {t}"));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions() {
        let h = Halt::default();
        assert_eq!(h.reason(100, 0), None);
        let h = Halt {
            checkpoints_left: Some(0),
            ..Halt::default()
        };
        assert_eq!(h.reason(100, 0).as_deref(), Some("no checkpoints left"));
        let h = Halt {
            exit_after: Some(100),
            ..Halt::default()
        };
        assert!(h.reason(99, 0).is_none() && h.reason(100, 0).is_some());
        let h = Halt {
            exit_before: Some(1000),
            halt_seconds: Some(60),
            ..Halt::default()
        };
        assert!(h.reason(939, 0).is_none());
        assert_eq!(
            h.reason(940, 0).as_deref(),
            Some("within 60 s of the exit-before time 1000")
        );
        let h = Halt {
            exit_before: Some(1000),
            ..Halt::default()
        };
        assert!(h.reason(899, 100).is_none() && h.reason(900, 100).is_some());
    }

    #[test]
    fn round_trip_in_a_prefix() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Halt::load(dir.path()).unwrap(), Halt::default());
        let h = Halt {
            exit_reason: Some("maintenance".into()),
            ..Halt::default()
        };
        h.save(dir.path()).unwrap();
        assert_eq!(Halt::load(dir.path()).unwrap(), h);
    }
}
