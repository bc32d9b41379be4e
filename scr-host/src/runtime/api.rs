//! TODO

use super::{Result, Runtime};
use crate::runtime::comm;
use crate::runtime::output::writer;
use crate::runtime::restart::restarter;
use crate::runtime::OutputFlags;
use std::path::Path;
use std::path::PathBuf;

impl Runtime {
    /// The name a dataset started without one gets (SCR's `SCR_Start_output(NULL, ..)`):
    /// `scr.dataset.<id>`, with the id it will have.
    pub fn default_dataset_name(&self) -> String {
        // SCR names an unnamed dataset as its directory is named
        crate::layout::dataset_dir_name(self.cache.next_dataset())
    }

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

impl Runtime {
    /// Begin a dataset (collective). Old datasets are evicted from its store first, as
    /// the store's `count` requires.
    pub fn start_output(&mut self, name: &str, flags: OutputFlags) -> Result<()> {
        let _log = self.span.clone().entered();
        writer!(self).start_output(name, flags)
    }

    /// [`Runtime::start_output`] where the caller may already have refused its own
    /// arguments on this rank (`refused`: why; the C layer's flag bits, say): the
    /// refusal is agreed like any precondition, so every rank returns the error and none
    /// waits in a collective the refusing rank skipped. Every rank must also pass rank
    /// 0's name and flags (SCR checks the same).
    pub fn start_output_or_refuse(
        &mut self,
        name: &str,
        flags: OutputFlags,
        refused: Option<String>,
    ) -> Result<()> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("start_output");
        writer!(self).start_output_or_refuse(name, flags, refused)
    }

    /// SCR's legacy `SCR_Start_checkpoint`: a checkpoint named `ckpt.<checkpoint id>`.
    pub fn start_checkpoint(&mut self) -> Result<String> {
        let _log = self.span.clone().entered();
        writer!(self).start_checkpoint()
    }

    /// Where to write (during output) or read (during restart) file `name` (relative to
    /// the working directory, or absolute; it must lie inside the prefix). During output
    /// the file is recorded in the filemap before this returns, and its parent
    /// directories are created: in cache, or in the prefix for a dataset that bypasses
    /// the cache. Outside both phases `name` comes back unchanged, as in SCR 3.x.
    pub fn route_file(&mut self, name: &Path) -> Result<PathBuf> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("route_file");
        writer!(self).route_file(name)
    }

    /// Finish the dataset (collective): it is kept only if every rank says `valid`, its
    /// files exist, and the redundancy scheme applied everywhere; otherwise it is deleted
    /// on every rank. Returns whether it was kept.
    pub fn complete_output(&mut self, valid: bool) -> Result<bool> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("complete_output");
        let checkpoint = self
            .output
            .as_ref()
            .is_some_and(|o| o.record().checkpoint_id.is_some());
        let kept = writer!(self).complete_output(valid)?;
        if kept && checkpoint {
            // with halt_exit, a halt condition ends the run once a checkpoint is kept
            self.exit_if_halted();
        }
        Ok(kept)
    }
}
