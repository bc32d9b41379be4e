//! `<prefix>/.scr/run.scr`: what the relaunch loop decided so far in this allocation
//! (job id, allocation, down nodes with reasons, launches, runs left), saved after each
//! decision for `scr env`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// State-file kind of `<prefix>/.scr/run.scr`.
pub const KIND: &str = "run";

/// What `scr run` decided so far in this allocation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunState {
    /// The job (allocation) id.
    pub job_id: String,
    /// The allocation's nodes.
    pub allocation: Vec<String>,
    /// Nodes found down, with the reason, in the order they were found.
    pub down: Vec<(String, String)>,
    /// The nodes of the newest launch.
    pub launched_on: Vec<String>,
    /// Launches made so far.
    pub launches: u64,
    /// Launches still allowed.
    pub runs_left: u64,
}

impl RunState {
    /// `<prefix>/.scr/run.scr`.
    pub fn path(prefix: &Path) -> PathBuf {
        crate::layout::run_state_file(prefix)
    }

    /// The state `scr run` left for job `job_id` in `prefix`, if any.
    pub fn load(prefix: &Path, job_id: &str) -> Option<RunState> {
        crate::state::read_state::<RunState>(&Self::path(prefix), KIND)
            .ok()
            .filter(|s| s.job_id == job_id)
    }

    pub(super) fn save(&self, prefix: &Path) {
        let path = Self::path(prefix);
        let saved = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| crate::state::write_state(&path, KIND, self));
        if let Err(e) = saved {
            tracing::warn!("{}: {e}; `scr env` will not show this run", path.display());
        }
    }
}
