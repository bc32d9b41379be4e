//! Test hooks: the fault suite's injected failures and the flush/fetch window gauge.
//!
//! They are a value handed to the runtime when it starts (`Runtime::init_in`), never
//! state of its parts and never read from the environment inside the runtime. A
//! program started by the tests under `mpiexec` gets them from its environment at the
//! one place the process's environment is read for the configuration anyway
//! (`Runtime::init_with`, through [`TestHooks::from_env`]); the in-process tests build
//! the value themselves. Production runs carry [`TestHooks::default`], which does
//! nothing.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::ScrError;
use crate::state::filemap::Filemap;

/// The variable naming an injected failure: `<point>:<rank>:<dataset id>` makes `point`
/// fail on that rank for that dataset (as a full control directory would), and
/// `<point>:<rank>` kills that rank with SIGKILL at `point` (the crash tests). The
/// variable of the window gauge: `<dir>[:<hold ms>]` counts the ranks inside each flush
/// and fetch window across processes (see the runtime's `window` module). Both are
/// declared with the configuration loader, which reads the environment.
pub use crate::config::{FAULT_VAR, GAUGE_VAR};

/// The test hooks in force for one runtime (none in production).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TestHooks {
    /// An injected failure ([`FAULT_VAR`]'s syntax).
    pub fault: Option<String>,
    /// The window gauge ([`GAUGE_VAR`]'s syntax).
    pub window_gauge: Option<String>,
}

impl TestHooks {
    /// The hooks named by `env` (a process's environment, or a test's stand-in for one).
    pub fn from_env(env: &BTreeMap<String, String>) -> TestHooks {
        TestHooks {
            fault: env.get(FAULT_VAR).cloned(),
            window_gauge: env.get(GAUGE_VAR).cloned(),
        }
    }

    /// The injected failure of `point` on `rank` for dataset `id`, when one is set: its
    /// spec, for the error that names it.
    pub(crate) fn failure_at(&self, point: &str, rank: u32, id: u64) -> Option<&str> {
        // (several, separated by commas: a failure and what follows from it)
        let wanted = format!("{point}:{rank}:{id}");
        self.fault
            .as_deref()
            .and_then(|specs| specs.split(',').find(|spec| *spec == wanted))
    }

    /// The fault suite's failure of `point` on `rank` for dataset `id`, as a full or
    /// failing control directory `cntl_dir` would give it: an error naming the rank's
    /// filemap there, when the hook names it.
    pub(crate) fn injected(
        &self,
        point: &str,
        rank: u32,
        id: u64,
        cntl_dir: &Path,
    ) -> Result<(), ScrError> {
        match self.failure_at(point, rank, id) {
            Some(spec) => Err(ScrError::Io {
                path: cntl_dir.join(Filemap::file_name(rank)),
                source: std::io::Error::other(format!("injected failure ({spec})")),
            }),
            None => Ok(()),
        }
    }

    /// Wait at `point` until a file exists, when the hook is `hold-<point>:<file>` (the
    /// background protection tests: a thread held while the application goes on).
    pub(crate) fn hold(&self, point: &str) {
        let Some(file) = self
            .fault
            .as_deref()
            .and_then(|s| s.strip_prefix("hold-"))
            .and_then(|s| s.strip_prefix(point))
            .and_then(|s| s.strip_prefix(':'))
        else {
            return;
        };
        while !Path::new(file).exists() {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// Kill this process with SIGKILL when the crash hook names `point` on `rank`
    /// (the crash-in-flush tests: nothing after `point` runs, as in a node failure).
    /// `<point>:<rank>:once:<file>` kills only the first process to get there, the one
    /// that creates `<file>` (a job that recovers inside its `mpiexec` reaches the point
    /// again, with another process as that rank).
    pub(crate) fn crash_at(&self, point: &str, rank: u32) {
        if self.crash_due(point, rank) {
            let _ = std::process::Command::new("kill")
                .args(["-9", &std::process::id().to_string()])
                .status();
            std::process::abort();
        }
    }

    /// Whether [`TestHooks::crash_at`] kills this process at `point` on `rank` (and, for
    /// a `once` hook, the marker that says so is now taken).
    fn crash_due(&self, point: &str, rank: u32) -> bool {
        // (no string is built unless a hook is set: production passes here per flush)
        let Some(spec) = self.fault.as_deref() else {
            return false;
        };
        let here = format!("{point}:{rank}");
        let first = |marker: &str| {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(marker)
                .is_ok()
        };
        match spec.strip_prefix(&here) {
            Some("") => true,
            Some(rest) => rest.strip_prefix(":once:").is_some_and(first),
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crash_hook_names_its_point_and_rank_and_a_once_hook_fires_for_one_process() {
        let dir = tempfile::tempdir().unwrap();
        let hooks = |spec: String| TestHooks {
            fault: Some(spec),
            window_gauge: None,
        };
        let plain = hooks("rebuild:1".into());
        assert!(plain.crash_due("rebuild", 1));
        assert!(!plain.crash_due("rebuild", 12) && !plain.crash_due("flush-copied", 1));
        let marker = dir.path().join("once");
        let once = hooks(format!("rebuild:1:once:{}", marker.display()));
        assert!(!once.crash_due("rebuild", 2));
        assert!(once.crash_due("rebuild", 1));
        assert!(marker.exists());
        assert!(!once.crash_due("rebuild", 1), "a once hook fired twice");
        assert!(!TestHooks::default().crash_due("rebuild", 1));
    }

    #[test]
    fn hooks_match_only_their_point_rank_and_dataset() {
        let env = BTreeMap::from([
            (FAULT_VAR.to_string(), "commit:2:7".to_string()),
            (GAUGE_VAR.to_string(), "/tmp/g:40".to_string()),
        ]);
        let h = TestHooks::from_env(&env);
        assert_eq!(h.window_gauge.as_deref(), Some("/tmp/g:40"));
        assert_eq!(h.failure_at("commit", 2, 7), Some("commit:2:7"));
        assert_eq!(h.failure_at("commit", 1, 7), None);
        assert_eq!(h.failure_at("commit", 2, 8), None);
        assert_eq!(h.failure_at("delete", 2, 7), None);
        // the crash hook's syntax has no dataset: this one must not kill the test
        h.crash_at("commit", 2);
        assert_eq!(TestHooks::default().failure_at("commit", 2, 7), None);
    }
}
