//! Restart: what is offered for a restart (the newest complete checkpoint in cache, or one
//! read in place in the prefix), and start_restart/complete_restart/current, with fallback
//! to an older checkpoint when one is reported invalid.

use super::collective::Collective;
use super::comm;
use super::descriptors::Descriptors;
use super::evict::evictor;
use super::fetch::fetcher;
use super::flush::flusher;
use super::flush::Flushing;
use super::job::Job;
use super::topology::Topology;
use super::TestHooks;
use crate::config::Config;
use crate::registry::Registry;
use std::path::{Path, PathBuf};

use super::world::Exchange;
use super::{Cache, Result, ScrError};
use crate::config::settings;
use crate::state::prefix;

pub(in crate::runtime) mod from_cache;
pub(in crate::runtime) mod staging;
pub(in crate::runtime) mod state;
pub(in crate::runtime) mod writers;
use state::RestartState;
use writers::WriterLists;

/// The restart over the parts it uses, borrowed from a runtime or a phase that holds
/// them ([`restarter!`]).
pub(in crate::runtime) struct Restarter<'a> {
    pub(in crate::runtime) world: &'a mut Collective,
    pub(in crate::runtime) cache: &'a mut Cache,
    pub(in crate::runtime) restart: &'a mut RestartState,
    pub(in crate::runtime) flushing: &'a mut Flushing,
    pub(in crate::runtime) config: &'a Config,
    pub(in crate::runtime) registry: &'a Registry,
    pub(in crate::runtime) job: &'a Job,
    pub(in crate::runtime) topo: &'a Topology,
    pub(in crate::runtime) hooks: &'a TestHooks,
    pub(in crate::runtime) descs: &'a Descriptors,
}

/// A [`Restarter`] over the parts of `$s` (the runtime, or a phase holding them).
macro_rules! restarter {
    ($s:expr) => {
        $crate::runtime::restart::Restarter {
            world: &mut $s.world,
            cache: &mut $s.cache,
            restart: &mut $s.restart,
            flushing: &mut $s.flushing,
            config: &$s.config,
            registry: &$s.registry,
            job: &$s.job,
            topo: &$s.topo,
            hooks: &$s.hooks,
            descs: &$s.descs,
        }
    };
}
pub(in crate::runtime) use restarter;

impl Restarter<'_> {
    /// [`Runtime::route_file`](crate::runtime::Runtime::route_file) during restart: where file `rel` of the checkpoint being
    /// read is (in the prefix, or in cache), refused when it is not one of its files.
    pub(in crate::runtime) fn route_restart(&mut self, name: &Path, rel: &Path) -> Result<PathBuf> {
        let key = rel.to_string_lossy();
        let me = self.topo.rank();
        let not_a_file = |checkpoint: &str| {
            ScrError::Usage(format!(
                "route_file: `{}` is not a file of checkpoint {checkpoint} on rank {me}",
                name.display(),
            ))
        };
        if let Some(p) = self.restart.reading_in_prefix_mut() {
            let checkpoint = p.name().to_string();
            if let Some(lists) = p.resized() {
                let reach = lists.reach();
                return route_resized(lists, name, rel)?
                    .ok_or_else(|| not_a_file(&format!("{checkpoint}{reach}")));
            }
        }
        if let Some(p) = self.restart.reading_in_prefix() {
            let files = p.files();
            let found = match files.get(key.as_ref()) {
                Some(path) => Some(path.clone()),
                None => by_basename(files.keys().map(String::as_str), rel, name)?
                    .map(|k| files[k].clone()),
            };
            return found.ok_or_else(|| not_a_file(p.name()));
        }
        if let Some(id) = self.restart.reading() {
            let rec = &self.cache.record(id);
            let dir = self.job.dataset_dir(&rec.descriptor.store, id);
            if rec.files.iter().any(|f| f.name == key) {
                return Ok(dir.join(rel));
            }
            return match by_basename(rec.files.iter().map(|f| f.name.as_str()), rel, name)? {
                Some(found) => Ok(dir.join(found)),
                None => Err(not_a_file(&rec.name)),
            };
        }
        Err(ScrError::Usage(
            "route_file: no dataset is being written or read (not reached: route_file passes such names through)".into(),
        ))
    }

    /// [`Runtime::restart_writers`](crate::runtime::Runtime::restart_writers): the number of ranks that wrote the checkpoint
    /// being read.
    pub(in crate::runtime) fn writers(&self) -> Result<u32> {
        self.writers_for("restart_writers")
    }

    /// [`Restarter::writers`], refused outside a restart naming `call`.
    fn writers_for(&self, call: &str) -> Result<u32> {
        if let Some(p) = self.restart.reading_in_prefix() {
            return Ok(p.writers());
        }
        match self.restart.reading() {
            Some(id) => Ok(self.cache.record(id).world_size),
            None => Err(no_restart(call)),
        }
    }

    /// [`Runtime::restart_files`](crate::runtime::Runtime::restart_files): the files writer `rank` of the checkpoint being
    /// read wrote, as paths in the prefix that [`Restarter::route_restart`] resolves.
    /// Every writer's when the checkpoint was written by another number of ranks; this
    /// rank's own otherwise (each rank reads back what it wrote, as in SCR: the others'
    /// lists were never exchanged).
    pub(in crate::runtime) fn written_by(&mut self, rank: u32) -> Result<Vec<PathBuf>> {
        let writers = self.writers_for("restart_files")?;
        if rank >= writers {
            return Err(ScrError::Usage(format!(
                "restart_files: rank {rank} did not write the checkpoint being read; it was written by ranks 0..{writers}"
            )));
        }
        let me = self.topo.rank();
        let names: Option<Vec<String>> = if let Some(p) = self.restart.reading_in_prefix_mut() {
            match p.resized() {
                Some(lists) => Some(lists.files_of(rank).map_err(|why| {
                    ScrError::Usage(format!(
                        "restart_files: the files of rank {rank} cannot be read: {why}"
                    ))
                })?),
                None => (rank == me).then(|| p.files().keys().cloned().collect()),
            }
        } else {
            let id = self.restart.reading().expect("a restart is being read");
            (rank == me).then(|| {
                let rec = self.cache.record(id);
                rec.files.iter().map(|f| f.name.clone()).collect()
            })
        };
        let names = names.ok_or_else(|| {
            ScrError::Usage(format!(
                "restart_files: rank {me} reads back its own files only: the checkpoint was written by as many ranks as this job has ({writers}), and each rank restarts from what it wrote, as in SCR; ask for rank {me}"
            ))
        })?;
        Ok(names.iter().map(|n| self.job.prefix().join(n)).collect())
    }

    /// Fetch when the cache holds no checkpoint (or `current` chose one only the prefix
    /// holds), then flush the restart checkpoint when `flush_on_restart` asks for it.
    ///
    /// The newest checkpoint is offered whatever number of ranks wrote it: one of
    /// another number of ranks that the nodes' caches hold comes first when it is newer
    /// than the cache's own and at least as new as the prefix's newest
    /// ([`Restarter::restart_from_old_caches`]); the prefix's when it is newer than the
    /// cache's own (a job of another size checkpointed since, elsewhere). The prefix's
    /// newest is asked only when something newer than the cache's own may exist: another
    /// size's datasets in cache, or a checkpoint id used beyond the cache's newest (as
    /// init agreed); a restart where neither holds exchanges nothing more.
    pub(in crate::runtime) fn settle_restart(&mut self, flush_on_restart: bool) -> Result<()> {
        let wanted = self.restart.take_wanted();
        let own = self
            .restart
            .candidate_in(self.cache)
            .and_then(|id| self.cache.record(id).checkpoint_id);
        let used = self.cache.next_checkpoint().saturating_sub(1);
        let maybe_newer = own.is_some_and(|c| used > c);
        // (`current` chose: nothing newer is looked for)
        let look = wanted.is_none() && !self.restart.pinned();
        let in_prefix = if look && (self.restart.other_size_cached() || maybe_newer) {
            self.newest_in_prefix()
        } else {
            None
        };
        let from_old = look
            && self.restart.other_size_cached()
            && self.restart_from_old_caches(own, in_prefix, None)?;
        let prefix_newer = own.is_some() && in_prefix > own;
        if !from_old
            && (self.restart.candidate_in(self.cache).is_none() || wanted.is_some() || prefix_newer)
        {
            if self.restart_in_place() {
                fetcher!(self).open_prefix_restart(wanted.as_deref(), None)?;
            } else {
                fetcher!(self).fetch(wanted.as_deref(), None)?;
            }
        }
        // a checkpoint offered in place (from the caches of another job size, or from
        // the prefix) newer than the cache's own goes first
        self.restart.pass_over_older_cached(self.cache);
        if flush_on_restart && self.config.get(settings::FLUSH_ON_RESTART) {
            flusher!(self).flush_newest("flush_on_restart")?;
        }
        Ok(())
    }

    /// [`Runtime::have_restart_fetching`](crate::runtime::Runtime::have_restart_fetching), over the view.
    pub(in crate::runtime) fn have_restart_fetching(&mut self) -> Result<Option<String>> {
        // the checkpoint about to be offered has its CRC32s recorded
        self.cache.settle_crc();
        if self.restart.fetch_pending() {
            self.world.usable("have_restart")?;
            self.restart.set_fetch_pending(false);
            self.settle_restart(false)?;
        }
        Ok(self.restart.offered(self.cache))
    }

    /// [`Runtime::start_restart`](crate::runtime::Runtime::start_restart), over the view.
    pub(in crate::runtime) fn start_restart(&mut self, writing: bool) -> Result<String> {
        self.world.usable("start_restart")?;
        // the files about to be read have their CRC32s recorded
        self.cache.settle_crc();
        if writing || self.restart.in_progress() {
            return Err(ScrError::Usage(
                "start_restart: another output or restart is in progress".into(),
            ));
        }
        if let Some(name) = self.restart.start_in_prefix(self.cache) {
            return Ok(name);
        }
        let id = self.restart.candidate_in(self.cache).ok_or_else(|| {
            ScrError::Usage(
                "start_restart: no checkpoint to restart from (have_restart said none)".into(),
            )
        })?;
        self.restart.start(id);
        Ok(self.cache.record(id).name.clone())
    }

    /// [`Runtime::complete_restart`](crate::runtime::Runtime::complete_restart), over the view.
    pub(in crate::runtime) fn complete_restart(&mut self, valid: bool) -> Result<bool> {
        if self.restart.end_in_prefix() {
            let agreed = self.world.begin("complete_restart", Ok(()));
            agreed?;
            // a file of another number of ranks' checkpoint that failed its check on
            // some rank: every rank passes over it alike, naming the file
            let failed_here = self
                .restart
                .offered_in_prefix()
                .and_then(|p| p.failed_here().map(str::to_string));
            let damaged = super::first_failure(self.world.as_dyn(), failed_here.as_deref());
            let all_valid = self.world.all(valid);
            let ok = all_valid && damaged.is_none();
            // read from the nodes' caches (the same on every rank): the copies made for it
            // were read, or will not be; a cached file that failed its check says nothing
            // of the prefix's copy, which is tried next, and is not marked failed
            let lists = self
                .restart
                .offered_in_prefix_mut()
                .and_then(|p| p.resized());
            let from_caches = lists.as_ref().is_some_and(|l| l.read_from_caches());
            let cache_damaged = match lists {
                Some(lists) if from_caches => {
                    lists.remove_staging();
                    let here = lists.failed_in_cache();
                    !self.world.all(!here)
                }
                _ => false,
            };
            if !ok {
                let p = self.restart.take_in_prefix().expect("reading it");
                let reason = match &damaged {
                    Some((rank, why)) => format!("rank {rank}: {why}"),
                    None => "reported invalid by the application at restart".to_string(),
                };
                // (an application whose read failed on the damaged file says invalid too)
                let retry_prefix = cache_damaged;
                let place = if from_caches {
                    "in the nodes' caches"
                } else {
                    "in the prefix"
                };
                let next = if retry_prefix {
                    "trying its copy in the prefix, else an older checkpoint"
                } else {
                    "falling back to an older checkpoint"
                };
                self.topo.warn(&format!(
                    "restart from {} (dataset {}, {place}): {reason}; {next}",
                    p.name(),
                    p.id()
                ));
                if !retry_prefix {
                    self.mark_failed_in_index(p.id(), p.name(), &reason);
                }
                self.fall_back(p.checkpoint_id(), retry_prefix)?;
            }
            return Ok(ok);
        }
        // ended either way: a rank that was reading is not left inside a restart that
        // the others failed
        let pre = self.restart.end().ok_or_else(|| {
            ScrError::Usage(
                "complete_restart: no restart in progress; call start_restart first".into(),
            )
        });
        let id = self.world.begin("complete_restart", pre)?;
        let ok = self.world.all(valid);
        if !ok {
            self.restart.skip(id);
            let rec = self.cache.record(id).clone();
            let (name, checkpoint) = (rec.name.clone(), rec.checkpoint_id);
            self.topo.warn(&format!(
                "restart from {name} reported invalid; falling back to an older checkpoint"
            ));
            // gone from cache too, as SCR deletes it (a later run must not offer it
            // again); a flush of it ends and is recorded first, or recording it would
            // clear the mark
            flusher!(self).settle_flush_of(id);
            self.mark_failed_in_index(id, &name, "reported invalid by the application at restart");
            let removed = evictor!(self).remove_local(&rec);
            self.world
                .changed("removing the checkpoint reported invalid", removed)?;
            // an older one in cache comes first; with none on some rank, the prefix's
            if !self
                .world
                .all(self.restart.candidate_in(self.cache).is_some())
            {
                self.fall_back(checkpoint, false)?;
            }
        }
        Ok(ok)
    }

    /// The checkpoint id a restart from the prefix would start with (rank 0 reads the
    /// index, every rank is told; collective): the current one, else the newest.
    fn newest_in_prefix(&self) -> Option<u64> {
        let newest = if self.topo.rank() == 0 {
            prefix::Index::load(self.job.prefix()).ok().and_then(|ix| {
                ix.restart_candidates()
                    .first()
                    .and_then(|e| e.checkpoint_id)
            })
        } else {
            None
        };
        self.world
            .broadcast_value(0, Some(&newest), "newest in the prefix")
            .ok()
            .flatten()
    }

    /// Rank 0: the checkpoint a restart failed on (`why`: the application reported it
    /// invalid, or a file failed its check) is marked failed in the prefix's index when
    /// the index holds it (a flushed or fetched checkpoint), so that no later fetch takes
    /// it.
    fn mark_failed_in_index(&self, id: u64, name: &str, why: &str) {
        if self.topo.rank() != 0 {
            return;
        }
        if let Err(e) = prefix::Index::mark_failed_if_held(self.job.prefix(), id, name, why) {
            tracing::warn!("{e}; {name} is not marked failed in the index");
        }
    }

    /// Offer the next checkpoint older than `checkpoint` from the prefix, as the restart
    /// at init would (fetched, or read in place with `fetch = false`). Collective.
    ///
    /// With `same_in_prefix` (a cached copy of another number of ranks' checkpoint
    /// failed its check) the prefix's copy of that same checkpoint comes first.
    fn fall_back(&mut self, checkpoint: Option<u64>, same_in_prefix: bool) -> Result<()> {
        let older_than = checkpoint.or(Some(0));
        if !same_in_prefix
            && self.restart.other_size_cached()
            && self.restart_from_old_caches(None, None, older_than)?
        {
            return Ok(());
        }
        let bound = match (same_in_prefix, checkpoint) {
            (true, Some(c)) => Some(c + 1),
            _ => older_than,
        };
        if self.restart_in_place() {
            fetcher!(self).open_prefix_restart(None, bound)
        } else {
            fetcher!(self).fetch(None, bound)
        }
    }

    /// `global_restart` at init, after the cache was restored (SCR's
    /// SCR_GLOBAL_RESTART): the application restarts from the prefix. The newest cached
    /// checkpoint is flushed first unless the prefix holds it (flush_on_restart forced
    /// on; a background flush is waited for), then the cache is cleared on every rank,
    /// so the restart reads the checkpoint in place in the prefix
    /// ([`Restarter::restart_in_place`]). Collective.
    ///
    /// Unlike SCR, which purges the cache whatever happened, a dataset the prefix does
    /// not hold complete after this — the newest checkpoint whose flush failed, an output
    /// never flushed — stays in cache (for a later flush or `scr scavenge`), is not
    /// offered for the restart, and rank 0 names it in a warning: clearing it would lose
    /// the only copy.
    pub(in crate::runtime) fn leave_cache_for_prefix(&mut self) -> Result<()> {
        let newest = self.restart.candidate_in(self.cache);
        flusher!(self).flush_newest("global_restart")?;
        flusher!(self).wait_flushes(false);
        let held: Vec<u64> = if self.topo.rank() == 0 {
            match prefix::Index::load_or_rebuild(self.job.prefix()) {
                Ok(ix) => self
                    .cache
                    .ids()
                    .into_iter()
                    .filter(|id| {
                        ix.datasets
                            .get(id)
                            .is_some_and(|e| e.complete && e.failed.is_none())
                    })
                    .collect(),
                Err(e) => {
                    tracing::warn!("{e}; global_restart keeps every cached dataset");
                    Vec::new()
                }
            }
        } else {
            Vec::new()
        };
        let held: Vec<u64> = self
            .world
            .broadcast_value(0, Some(&held), "held ids")
            .unwrap_or_default();
        let mut kept = Vec::new();
        let mut removed = Ok(());
        let cached: Vec<_> = self.cache.datasets().cloned().collect();
        for rec in cached {
            let only_copy = !held.contains(&rec.id) && (rec.output || Some(rec.id) == newest);
            if only_copy {
                self.restart.skip(rec.id);
                kept.push(rec.name);
            } else if let Err(e) = evictor!(self).remove_local(&rec) {
                removed = Err(e);
            }
        }
        self.world
            .changed("clearing the cache for global_restart", removed)?;
        if !kept.is_empty() {
            self.topo.warn(&format!(
                "global_restart: {} stay(s) in cache, not offered for the restart: the prefix {} does not hold them complete (flush them or run `scr scavenge`)",
                kept.join(", "),
                self.job.prefix().display()
            ));
        }
        Ok(())
    }

    /// The `current` setting (SCR's SCR_CURRENT) at init, applied exactly as an
    /// application's `current(name)` before its first `have_restart`: the named
    /// checkpoint is restarted from (from cache, else from the prefix). A name nothing
    /// holds is the same error `current` gives, said once by rank 0 as a warning, and
    /// the run goes on with the usual choice. Collective; call while the fetch is
    /// pending (`restart.fetch_pending`).
    ///
    /// Once per job, as SCR does (it skips SCR_CURRENT once its cache records a current
    /// checkpoint): a relaunch of the same job (`scr run` in one allocation, the control
    /// directories kept) restarts from its own newest checkpoint, not from the named one
    /// again, which would throw away what the earlier run computed. The mark is in every
    /// node's control directory; a rank without it (a replaced node) is not enough to
    /// apply it again.
    pub(in crate::runtime) fn apply_current_setting(&mut self) {
        let name = self.config.get(settings::CURRENT);
        if name.is_empty() {
            return;
        }
        let mark = crate::layout::current_applied_file(self.job.cntl_dir());
        if !self.world.all(!mark.exists()) {
            self.topo.info(&format!(
                "current = {name}: applied by an earlier run of job {} already (SCR_CURRENT is applied once per job); the restart is chosen as usual",
                self.job.job_id()
            ));
            return;
        }
        let chosen = {
            // counted as the `current` call it stands for
            let _counted = comm::scope("current");
            self.current(&name)
        };
        if let Err(e) = crate::state::write_atomic(&mark, name.as_bytes()) {
            tracing::warn!(
                "{}: {e}; a relaunch of this job would apply current = {name} again",
                mark.display()
            );
        }
        match chosen {
            Ok(()) => self.topo.info(&format!(
                "current = {name}: the restart starts from it (SCR_CURRENT)"
            )),
            Err(e) => self.topo.warn(&format!(
                "current = {name} (SCR_CURRENT): {e}; the newest usable checkpoint is taken instead"
            )),
        }
    }

    /// `drop_after_current`, once `current` chose checkpoint `name` (the dataset
    /// `anchor` when known): rank 0 drops every dataset newer than it from the prefix's
    /// index ([`prefix::Index::drop_after_for_app_in`]; their files stay, as in SCR). A
    /// failure is a warning: the choice of checkpoint stands.
    fn drop_after_current(&self, name: &str, anchor: Option<u64>) {
        if self.topo.rank() != 0 || !self.config.get(settings::DROP_AFTER_CURRENT) {
            return;
        }
        match prefix::Index::drop_after_for_app_in(self.job.prefix(), name, anchor) {
            Ok(Some(d)) if !d.names.is_empty() => self.topo.info(&format!(
                "drop_after_current: dropped {} (newer than {name}) from the index of {}; their files stay",
                d.names.join(", "),
                self.job.prefix().display()
            )),
            Ok(_) => {}
            Err(e) => tracing::warn!(
                "drop_after_current: the datasets newer than {name} could not be dropped from the index of {}: {e}",
                self.job.prefix().display()
            ),
        }
    }

    /// Whether a checkpoint only the prefix holds is read where it lies
    /// ([`Fetcher::open_prefix_restart`](crate::runtime::fetch::Fetcher::open_prefix_restart)) rather than fetched into cache: with
    /// `fetch = false` (SCR 3.x), `fetch_bypass` or `global_restart` (SCR's fetch in
    /// bypass mode), and when this run's checkpoints bypass the cache (the descriptor
    /// the next checkpoint takes has `bypass`): copying into a cache the run does not use
    /// would only cost time and room. The one place this is decided, for the restart at
    /// init and the fallback after an invalid restart alike; the same on every rank (the
    /// configuration is).
    pub(in crate::runtime) fn restart_in_place(&self) -> bool {
        let next = self
            .descs
            .for_checkpoint(Some(self.cache.next_checkpoint()));
        !self.config.get(settings::FETCH)
            || self.config.get(settings::FETCH_BYPASS)
            || self.config.get(settings::GLOBAL_RESTART)
            || self.descs[next].record().bypass
    }

    /// [`Runtime::current`](crate::runtime::Runtime::current), over the view.
    pub(in crate::runtime) fn current(&mut self, name: &str) -> Result<()> {
        if self.restart.fetch_pending() {
            self.world.usable("current")?;
            let cached = self.world.all(self.cache.id_of(name).is_ok());
            if cached {
                // a checkpoint the cache holds: an earlier call's prefix choice is void
                self.restart.want(None);
            } else {
                // only the prefix has it: the pending fetch loads it, and cached
                // datasets written after it are passed over
                let found: std::result::Result<Option<u64>, String> = if self.topo.rank() == 0 {
                    prefix::Index::load_or_rebuild(self.job.prefix())
                        .map_err(|e| e.to_string())
                        .map(|ix| {
                            ix.restart_candidates()
                                .into_iter()
                                .find(|e| e.name == name)
                                .map(|e| e.id)
                        })
                } else {
                    Ok(None)
                };
                let found = self
                    .world
                    .broadcast_value(0, Some(&found), "prefix checkpoint")
                    .unwrap_or(Ok(None));
                let found = found.map_err(|e| {
                    ScrError::Usage(format!(
                        "current: `{name}` is not in cache and the prefix's index cannot be read: {e}"
                    ))
                })?;
                if found.is_none() {
                    return Err(ScrError::Usage(format!(
                        "current: no checkpoint named `{name}` in cache or in the prefix {} (complete and not failed)",
                        self.job.prefix().display(),
                    )));
                }
                // the named checkpoint is the one restarted: every cached one is passed
                // over (the newer ones as SCR deletes them; older ones too, so that a
                // restart in place from the prefix does not prefer them)
                let cached: Vec<u64> = self.cache.ids();
                self.restart.skip_all(cached);
                self.restart.want(Some(name.to_string()));
                self.drop_after_current(name, found);
                if let Some(anchor) = found {
                    self.drop_newer_cached(anchor)?;
                }
                return Ok(());
            }
        }
        let id = self.world.begin("current", self.cache.id_of(name))?;
        let newer: Vec<u64> = self
            .cache
            .datasets()
            .filter(|d| d.id > id)
            .map(|d| d.id)
            .collect();
        self.restart.skip_all(newer);
        self.restart.unskip(id);
        self.restart.pin();
        self.drop_after_current(name, Some(id));
        self.drop_newer_cached(id)
    }

    /// With `drop_after_current`: the cached datasets newer than the chosen one (dataset
    /// `anchor`) leave the cache too, not only the index (collective). Passing them over
    /// in this run is not enough: a relaunch of the same job, which does not apply
    /// `current` again, would otherwise restart from one of them. Background flushes end
    /// first (one of them may be of such a dataset, and recording it would bring it back
    /// into the index).
    fn drop_newer_cached(&mut self, anchor: u64) -> Result<()> {
        if !self.config.get(settings::DROP_AFTER_CURRENT) {
            return Ok(());
        }
        flusher!(self).wait_flushes(false);
        let newer: Vec<_> = self
            .cache
            .datasets()
            .filter(|d| d.id > anchor)
            .cloned()
            .collect();
        let mut removed = Ok(());
        for rec in &newer {
            if let Err(e) = evictor!(self).remove_local(rec) {
                removed = Err(e);
            }
        }
        self.world.changed("drop_after_current", removed)
    }
}

/// The error of a restart query (`call`) outside a restart; the disabled library's
/// too.
pub(in crate::runtime) fn no_restart(call: &str) -> ScrError {
    ScrError::Usage(format!(
        "{call}: no restart in progress; call it between start_restart and complete_restart"
    ))
}

/// [`Restarter::route_restart`] for a checkpoint written by another number of ranks: the
/// checked path of `rel` (a path of the checkpoint, or the base name of exactly one of
/// its files); `None` when it names no file of it. A file that fails its check is an
/// error naming it, and the restart cannot complete on any rank.
fn route_resized(lists: &mut WriterLists, name: &Path, rel: &Path) -> Result<Option<PathBuf>> {
    let unreadable = |why: String| {
        ScrError::Usage(format!(
            "route_file: `{}`: {why}; this checkpoint cannot be restarted from (complete_restart passes over it on every rank)",
            name.display()
        ))
    };
    let key = rel.to_string_lossy();
    if let Some(path) = lists.route(&key).map_err(unreadable)? {
        return Ok(Some(path));
    }
    let names = lists.all_names().map_err(unreadable)?;
    match by_basename(names.iter().map(String::as_str), rel, name)? {
        Some(found) => {
            let found = found.to_string();
            lists.route(&found).map_err(unreadable)
        }
        None => Ok(None),
    }
}

/// The one file among `names` (a checkpoint's files, relative to its directory) whose
/// file name is `rel`'s, for a name given during a restart that is not a path of the
/// checkpoint: SCR 3.x lets an application name a file by its base name alone when
/// reading it back (`SCR_Route_file("rank_0.ckpt")` for `ckpt.5/rank_0.ckpt`). Two files
/// of one base name in different directories make the name ambiguous: refused, naming
/// both, rather than one picked at random.
fn by_basename<'a>(
    names: impl Iterator<Item = &'a str>,
    rel: &Path,
    name: &Path,
) -> Result<Option<&'a str>> {
    let Some(base) = rel.file_name() else {
        return Ok(None);
    };
    let mut found = names.filter(|n| Path::new(n).file_name() == Some(base));
    match (found.next(), found.next()) {
        (Some(one), None) => Ok(Some(one)),
        (Some(a), Some(b)) => Err(ScrError::Usage(format!(
            "route_file: `{}` names no file of the checkpoint, and its base name matches both `{a}` and `{b}`; give the file's path",
            name.display()
        ))),
        _ => Ok(None),
    }
}
