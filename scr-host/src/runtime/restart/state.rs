//! The restart's state, a part of the runtime: what is offered for a restart, what was
//! tried, and a restart read in place. Its fields are the restart phase's alone
//! (`restart`); every other phase asks through its verbs.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::runtime::cache::Cache;

/// The restart: what is offered, what was tried, and a restart read in place.
#[derive(Debug, Default)]
pub(in crate::runtime) struct RestartState {
    /// The checkpoint offered for a restart (from cache).
    pub(super) candidate: Option<u64>,
    /// Checkpoints the application reported invalid, never offered again.
    pub(super) skipped: Vec<u64>,
    /// SCR 3.x order: the fetch from the prefix waits for the first
    /// [`Runtime::have_restart_fetching`](crate::runtime::Runtime::have_restart_fetching), so that `current` can choose what is loaded.
    pub(super) fetch_pending: bool,
    /// The checkpoint `current` chose while the fetch was pending, when no cache holds it.
    pub(super) wanted: Option<String>,
    /// With `fetch = false`: the checkpoint offered for a restart straight from the prefix.
    pub(super) prefix_restart: Option<PrefixRestart>,
    /// Between start_restart and complete_restart of `prefix_restart`.
    pub(super) reading_prefix: bool,
}

/// A checkpoint read in place in the prefix (SCR 3.x with fetch disabled).
#[derive(Debug)]
pub(in crate::runtime) struct PrefixRestart {
    /// Its dataset id.
    pub(super) id: u64,
    /// Its name.
    pub(super) name: String,
    /// Its checkpoint id: a fallback after it is reported invalid takes only older ones.
    pub(super) checkpoint_id: Option<u64>,
    /// This rank's files: the name as the application routes it → where it is stored.
    pub(super) files: BTreeMap<String, PathBuf>,
}

impl RestartState {
    /// Checkpoint `id` is never offered again in this run (reported invalid, dropped,
    /// or lost).
    pub(in crate::runtime) fn skip(&mut self, id: u64) {
        self.skipped.push(id);
    }

    /// Checkpoint `id` may be offered again (fetched from the prefix after a `current`
    /// passed it over).
    pub(in crate::runtime) fn unskip(&mut self, id: u64) {
        self.skipped.retain(|&s| s != id);
    }

    /// Whether a restart is being read (between start_restart and complete_restart).
    pub(in crate::runtime) fn in_progress(&self) -> bool {
        self.reading_prefix || self.candidate.is_some()
    }

    /// The name of the checkpoint offered for a restart: the newest cached one not
    /// skipped, else one the prefix holds.
    pub(in crate::runtime) fn offered(&self, cache: &Cache) -> Option<String> {
        self.candidate_in(cache)
            .map(|id| cache.record(id).name.clone())
            .or_else(|| self.prefix_restart.as_ref().map(|p| p.name.clone()))
    }

    /// Whether the dataset `name` (cached as `cached`) is the one being read.
    pub(in crate::runtime) fn reads(&self, name: &str, cached: Option<u64>) -> bool {
        cached.is_some_and(|id| self.candidate == Some(id))
            || (self.reading_prefix && self.prefix_restart.as_ref().is_some_and(|p| p.name == name))
    }

    /// Offer `p`, read in place in the prefix, for the restart.
    pub(in crate::runtime) fn offer_in_prefix(&mut self, p: PrefixRestart) {
        self.prefix_restart = Some(p);
    }

    /// A checkpoint offered in place from the prefix that was just dropped or deleted is
    /// no longer offered.
    pub(in crate::runtime) fn forget_in_prefix(&mut self, name: &str) {
        if self.prefix_restart.as_ref().is_some_and(|p| p.name == name) {
            self.prefix_restart = None;
        }
    }

    /// The checkpoint `cache` offers for a restart: its newest complete one not skipped.
    pub(in crate::runtime) fn candidate_in(&self, cache: &Cache) -> Option<u64> {
        cache.newest_checkpoint(&self.skipped)
    }

    /// Whether the fetch from the prefix waits for the first have_restart.
    pub(in crate::runtime) fn set_fetch_pending(&mut self, pending: bool) {
        self.fetch_pending = pending;
    }
}

impl PrefixRestart {
    /// Checkpoint `id` (`name`, checkpoint id `checkpoint_id`) read in place, this
    /// rank's `files` by the name the application routes → where each is stored.
    pub(in crate::runtime) fn new(
        id: u64,
        name: String,
        checkpoint_id: Option<u64>,
        files: BTreeMap<String, PathBuf>,
    ) -> PrefixRestart {
        PrefixRestart {
            id,
            name,
            checkpoint_id,
            files,
        }
    }
}
