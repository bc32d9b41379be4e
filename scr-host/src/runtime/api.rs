//! TODO

use super::{Result, Runtime};
use crate::runtime::comm;
use crate::runtime::restart::restarter;

impl Runtime {
    /// Whether a dataset is being written or a checkpoint read (between start and
    /// complete): outside both, SCR 3.x's `SCR_Route_file` returns the name unchanged.
    pub fn in_dataset(&self) -> bool {
        self.output.is_some() || self.restart.in_progress()
    }

    /// The newest complete checkpoint this run can restart from, if any.
    pub fn have_restart(&self) -> Option<String> {
        self.restart.offered(&self.cache)
    }
}

impl Runtime {
    /// SCR 3.x's `SCR_Have_restart` (collective): the first call after an init with
    /// [`InitOptions::fetch_at_have_restart`](super::InitOptions::fetch_at_have_restart) fetches from the prefix (the checkpoint
    /// `current` named, else the newest when no cache holds one); every call then
    /// answers like [`Runtime::have_restart`].
    pub fn have_restart_fetching(&mut self) -> Result<Option<String>> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("have_restart");
        restarter!(self).have_restart_fetching()
    }

    /// Begin reading the restart checkpoint; returns its name.
    pub fn start_restart(&mut self) -> Result<String> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("start_restart");
        restarter!(self).start_restart()
    }

    /// Finish reading (collective). If any rank says `!valid`, this checkpoint is passed
    /// over (and marked failed in the prefix's index, as SCR does, so no later run takes
    /// it) and `have_restart` offers the next older one: from the cache, else from the
    /// prefix (fetched, or read in place with `fetch = false`). A fallback never offers a
    /// checkpoint newer than the one that failed, even when `current` pinned that one.
    /// Returns whether all were valid.
    pub fn complete_restart(&mut self, valid: bool) -> Result<bool> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("complete_restart");
        restarter!(self).complete_restart(valid)
    }

    /// Make the named checkpoint the restart candidate, passing over newer ones
    /// (collective: a name some ranks do not know is an error on every rank).
    pub fn current(&mut self, name: &str) -> Result<()> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("current");
        restarter!(self).current(name)
    }
}
