//! The restart's state, a part of the runtime: what is offered for a restart, what was
//! tried, and a restart read in place. Its fields are private: the restart phase
//! (`restart`) and every other phase change it through its verbs.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::writers::WriterLists;
use crate::runtime::cache::Cache;

/// The restart: what is offered, what was tried, and a restart read in place.
#[derive(Debug, Default)]
pub(in crate::runtime) struct RestartState {
    /// The checkpoint offered for a restart (from cache).
    candidate: Option<u64>,
    /// Checkpoints the application reported invalid, never offered again.
    skipped: Vec<u64>,
    /// SCR 3.x order: the fetch from the prefix waits for the first
    /// [`Runtime::have_restart_fetching`](crate::runtime::Runtime::have_restart_fetching), so that `current` can choose what is loaded.
    fetch_pending: bool,
    /// The checkpoint `current` chose while the fetch was pending, when no cache holds it.
    wanted: Option<String>,
    /// With `fetch = false`: the checkpoint offered for a restart straight from the prefix.
    prefix_restart: Option<PrefixRestart>,
    /// Between start_restart and complete_restart of `prefix_restart`.
    reading_prefix: bool,
    /// Init found a cached dataset written by another number of ranks (agreed): the
    /// restart looks for one in the nodes' caches.
    other_size_cached: bool,
    /// `current` chose the checkpoint: no newer one is looked for.
    pinned: bool,
}

/// A checkpoint read in place in the prefix (SCR 3.x with fetch disabled).
#[derive(Debug)]
pub(in crate::runtime) struct PrefixRestart {
    /// Its dataset id.
    id: u64,
    /// Its name.
    name: String,
    /// Its checkpoint id: a fallback after it is reported invalid takes only older ones.
    checkpoint_id: Option<u64>,
    /// This rank's files: the name as the application routes it → where it is stored
    /// (written by as many ranks as this job has).
    files: BTreeMap<String, PathBuf>,
    /// The number of ranks that wrote it.
    writers: u32,
    /// Written by another number of ranks: every writer's files, as this rank finds them.
    resized: Option<WriterLists>,
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

    /// The checkpoint offered in place is newer than cached ones: those are not offered
    /// (have_restart offers the newest, and the cache's candidate would go first).
    pub(in crate::runtime) fn pass_over_older_cached(&mut self, cache: &Cache) {
        let Some(newer) = self.prefix_restart.as_ref().and_then(|p| p.checkpoint_id) else {
            return;
        };
        let older: Vec<u64> = cache
            .datasets()
            .filter(|d| d.checkpoint_id.is_some_and(|c| c < newer))
            .map(|d| d.id)
            .collect();
        self.skip_all(older);
    }

    /// `current` chose the checkpoint to restart from.
    pub(in crate::runtime) fn pin(&mut self) {
        self.pinned = true;
    }

    /// Whether `current` chose the checkpoint to restart from.
    pub(in crate::runtime) fn pinned(&self) -> bool {
        self.pinned
    }

    /// Init found a cached dataset written by another number of ranks.
    pub(in crate::runtime) fn note_other_size_cached(&mut self) {
        self.other_size_cached = true;
    }

    /// Whether init found a cached dataset written by another number of ranks.
    pub(in crate::runtime) fn other_size_cached(&self) -> bool {
        self.other_size_cached
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
    /// Whether the fetch from the prefix still waits for the first have_restart.
    pub(in crate::runtime) fn fetch_pending(&self) -> bool {
        self.fetch_pending
    }

    /// The checkpoint `current` chose while the fetch was pending (only the prefix holds
    /// it), taken: the fetch about to run loads it.
    pub(in crate::runtime) fn take_wanted(&mut self) -> Option<String> {
        self.wanted.take()
    }

    /// `current` chose `name`, which only the prefix holds, while the fetch was pending
    /// (`Some`), or one the cache holds (`None`: an earlier prefix choice is void).
    pub(in crate::runtime) fn want(&mut self, name: Option<String>) {
        self.wanted = name;
    }

    /// Pass over every checkpoint in `ids` (never offered again in this run).
    pub(in crate::runtime) fn skip_all(&mut self, ids: impl IntoIterator<Item = u64>) {
        self.skipped.extend(ids);
    }

    /// The cached checkpoint being read, between start_restart and complete_restart.
    pub(in crate::runtime) fn reading(&self) -> Option<u64> {
        self.candidate
    }

    /// The checkpoint read in place in the prefix, between start_restart and
    /// complete_restart.
    pub(in crate::runtime) fn reading_in_prefix(&self) -> Option<&PrefixRestart> {
        self.prefix_restart.as_ref().filter(|_| self.reading_prefix)
    }

    /// The checkpoint offered in place in the prefix, being read or not.
    pub(in crate::runtime) fn offered_in_prefix(&self) -> Option<&PrefixRestart> {
        self.prefix_restart.as_ref()
    }

    /// [`RestartState::offered_in_prefix`], to end what its reading needed.
    pub(in crate::runtime) fn offered_in_prefix_mut(&mut self) -> Option<&mut PrefixRestart> {
        self.prefix_restart.as_mut()
    }

    /// [`RestartState::reading_in_prefix`], to read more of its lists.
    pub(in crate::runtime) fn reading_in_prefix_mut(&mut self) -> Option<&mut PrefixRestart> {
        self.prefix_restart.as_mut().filter(|_| self.reading_prefix)
    }

    /// start_restart: read the checkpoint offered in place from the prefix when the
    /// cache offers none; its name, or `None` when there is none to read there.
    pub(in crate::runtime) fn start_in_prefix(&mut self, cache: &Cache) -> Option<String> {
        if self.candidate_in(cache).is_some() {
            return None;
        }
        let name = self.prefix_restart.as_ref()?.name.clone();
        self.reading_prefix = true;
        Some(name)
    }

    /// start_restart: read cached checkpoint `id`.
    pub(in crate::runtime) fn start(&mut self, id: u64) {
        self.candidate = Some(id);
    }

    /// complete_restart: a reading in place in the prefix ends; whether one was going on
    /// (else the restart being read, if any, is a cached one).
    pub(in crate::runtime) fn end_in_prefix(&mut self) -> bool {
        std::mem::take(&mut self.reading_prefix)
    }

    /// complete_restart of a cached checkpoint: the reading ends either way (a rank
    /// that was reading is not left inside a restart the others failed); the id read.
    pub(in crate::runtime) fn end(&mut self) -> Option<u64> {
        self.candidate.take()
    }

    /// The checkpoint read in place, no longer offered (reported invalid).
    pub(in crate::runtime) fn take_in_prefix(&mut self) -> Option<PrefixRestart> {
        self.prefix_restart.take()
    }
}

impl PrefixRestart {
    /// Checkpoint `id` (`name`, checkpoint id `checkpoint_id`) read in place, written by
    /// `writers` ranks: this rank's `files` by the name the application routes → where
    /// each is stored, or, written by another number of ranks than this job has, every
    /// writer's as `resized` finds them.
    pub(in crate::runtime) fn new(
        id: u64,
        name: String,
        checkpoint_id: Option<u64>,
        files: BTreeMap<String, PathBuf>,
        writers: u32,
        resized: Option<WriterLists>,
    ) -> PrefixRestart {
        PrefixRestart {
            id,
            name,
            checkpoint_id,
            files,
            writers,
            resized,
        }
    }
}

impl PrefixRestart {
    /// Its dataset id.
    pub(in crate::runtime) fn id(&self) -> u64 {
        self.id
    }

    /// Its name.
    pub(in crate::runtime) fn name(&self) -> &str {
        &self.name
    }

    /// Its checkpoint id.
    pub(in crate::runtime) fn checkpoint_id(&self) -> Option<u64> {
        self.checkpoint_id
    }

    /// This rank's files (written by as many ranks as this job has): the name as the
    /// application routes it → where it is stored.
    pub(in crate::runtime) fn files(&self) -> &BTreeMap<String, PathBuf> {
        &self.files
    }

    /// The number of ranks that wrote it.
    pub(in crate::runtime) fn writers(&self) -> u32 {
        self.writers
    }

    /// Written by another number of ranks than this job has: every writer's files.
    pub(in crate::runtime) fn resized(&mut self) -> Option<&mut WriterLists> {
        self.resized.as_mut()
    }

    /// Why this rank cannot read it (a routed file of another number of ranks' checkpoint
    /// failed its check), if so.
    pub(in crate::runtime) fn failed_here(&self) -> Option<&str> {
        self.resized.as_ref().and_then(WriterLists::failed)
    }
}
