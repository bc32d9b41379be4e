//! The runtime's calls: what the application asks between init and finalize. Each one
//! enters the runtime's span and counts its exchanges under its name ([`comm::scope`]),
//! then hands the work to the phase that does it, over the parts that phase borrows
//! (`writer!`, `restarter!`, `evictor!`, `flusher!`, `prefix!`). What spans phases
//! is decided here, as the coordinator: a halt after a kept checkpoint ends the run
//! (`halt_exit`), finalize completes an open dataset, flushes and records the halt.

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::evict::evictor;
use super::flush::flusher;
use super::output::writer;
use super::policy::{agree_need, halt_reason, load_halt, Rule};
use super::prefix::prefix;
use super::restart::restarter;
use super::{
    comm, mpi_exit, now_secs, ulfm, OutputFlags, Result, Runtime, ScrError, FINALIZE_REASON,
};
use crate::config::settings;
use crate::state::halt::Halt;

// ----- a lost process -----

impl Runtime {
    /// Run the application's call `call`: a process lost meanwhile (the MPI calls unwind
    /// with `ulfm::ProcessLost`, see `ulfm`) becomes [`ScrError::ProcessFailed`] here and
    /// in every later call, on every rank (each sees its revoked communicators fail).
    /// Any other panic goes on unwinding.
    fn guarded<T>(&mut self, call: &str, f: impl FnOnce(&mut Runtime) -> Result<T>) -> Result<T> {
        if let Some(e) = self.world.health().lost_error(call) {
            return Err(e);
        }
        match ulfm::catch_lost(|| f(&mut *self)) {
            Ok(r) => r,
            Err(why) => {
                self.topo
                    .warn(&format!("{call}: a process of the job was lost ({why})"));
                self.world.health_mut().mark_lost(&why);
                Err(ulfm::lost_error(call, &why))
            }
        }
    }
}

// ----- queries -----

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

// ----- restart -----

impl Runtime {
    /// SCR 3.x's `SCR_Have_restart` (collective): the first call after an init with
    /// [`InitOptions::fetch_at_have_restart`](super::InitOptions::fetch_at_have_restart) fetches from the prefix (the checkpoint
    /// `current` named, else the newest when no cache holds one); every call then
    /// answers like [`Runtime::have_restart`].
    pub fn have_restart_fetching(&mut self) -> Result<Option<String>> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("have_restart");
        self.guarded("have_restart", |rt| {
            writer!(rt).settle_protection(true);
            restarter!(rt).have_restart_fetching()
        })
    }

    /// Begin reading the restart checkpoint; returns its name.
    pub fn start_restart(&mut self) -> Result<String> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("start_restart");
        self.guarded("start_restart", |rt| {
            writer!(rt).settle_protection(true);
            let writing = rt.output.is_some();
            restarter!(rt).start_restart(writing)
        })
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
        self.guarded("complete_restart", |rt| {
            restarter!(rt).complete_restart(valid)
        })
    }

    /// The number of ranks that wrote the checkpoint being read (between start_restart
    /// and complete_restart; local). It differs from this job's size when the job grew
    /// or shrank: then [`Runtime::restart_files`] lists every writer's files, and
    /// [`Runtime::route_file`] resolves any of them.
    pub fn restart_writers(&mut self) -> Result<u32> {
        let _log = self.span.clone().entered();
        self.guarded("restart_writers", |rt| restarter!(rt).writers())
    }

    /// The files writer `rank` of the checkpoint being read wrote, as paths inside the
    /// prefix that [`Runtime::route_file`] resolves (between start_restart and
    /// complete_restart; local). Any writer's when the checkpoint was written by another
    /// number of ranks than this job has; this rank's own otherwise, as each rank reads
    /// back what it wrote.
    pub fn restart_files(&mut self, rank: u32) -> Result<Vec<PathBuf>> {
        let _log = self.span.clone().entered();
        self.guarded("restart_files", |rt| restarter!(rt).written_by(rank))
    }

    /// Make the named checkpoint the restart candidate, passing over newer ones
    /// (collective: a name some ranks do not know is an error on every rank).
    pub fn current(&mut self, name: &str) -> Result<()> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("current");
        self.guarded("current", |rt| {
            writer!(rt).settle_protection(true);
            restarter!(rt).current(name)
        })
    }
}

// ----- output -----

impl Runtime {
    /// Begin a dataset (collective). Old datasets are evicted from its store first, as
    /// the store's `count` requires.
    pub fn start_output(&mut self, name: &str, flags: OutputFlags) -> Result<()> {
        self.start_output_or_refuse(name, flags, None)
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
        self.guarded("start_output", |rt| {
            writer!(rt).start_output_or_refuse(name, flags, refused)
        })
    }

    /// SCR's legacy `SCR_Start_checkpoint`: a checkpoint named `ckpt.<checkpoint id>`.
    pub fn start_checkpoint(&mut self) -> Result<String> {
        let name = format!("ckpt.{}", self.cache.next_checkpoint());
        let flags = OutputFlags {
            checkpoint: true,
            output: false,
        };
        self.start_output(&name, flags)?;
        Ok(name)
    }

    /// Where to write (during output) or read (during restart) file `name` (relative to
    /// the working directory, or absolute; it must lie inside the prefix). During output
    /// the file is recorded in the filemap before this returns, and its parent
    /// directories are created: in cache, or in the prefix for a dataset that bypasses
    /// the cache. Outside both phases `name` comes back unchanged, as in SCR 3.x.
    pub fn route_file(&mut self, name: &Path) -> Result<PathBuf> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("route_file");
        self.guarded("route_file", |rt| writer!(rt).route_file(name))
    }

    /// Finish the dataset (collective): it is kept only if every rank says `valid`, its
    /// files exist, and the redundancy scheme applied everywhere; otherwise it is deleted
    /// on every rank. Returns whether it was kept.
    pub fn complete_output(&mut self, valid: bool) -> Result<bool> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("complete_output");
        self.guarded("complete_output", |rt| {
            let checkpoint = rt
                .output
                .as_ref()
                .is_some_and(|o| o.record().checkpoint_id.is_some());
            let kept = writer!(rt).complete_output(valid)?;
            if kept && checkpoint {
                // with halt_exit, a halt condition ends the run once a checkpoint is kept
                rt.exit_if_halted();
            }
            Ok(kept)
        })
    }
}

// ----- drop and delete -----

impl Runtime {
    /// SCR's `SCR_Drop` (collective): the named dataset is removed from the prefix's
    /// index (its files stay) and, when the cache holds it, not offered for a restart
    /// again in this run (nor, from the prefix, in later ones). A name neither holds is
    /// not an error (as in SCR); a name that differs between ranks, or a dataset being
    /// written or read, is, on every rank.
    pub fn drop_dataset(&mut self, name: &str) -> Result<()> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("drop");
        self.guarded("drop", |rt| {
            let cached = rt.cache.id_of(name).ok();
            let pre = rt
                .same_name("drop", name)
                .and_then(|()| rt.not_in_use("drop", name, cached));
            rt.world.begin("drop", pre)?;
            writer!(rt).settle_protection(true);
            if let Some(id) = cached {
                flusher!(rt).settle_flush_of(id);
                rt.restart.skip(id);
            }
            rt.restart.forget_in_prefix(name);
            prefix!(rt).remove("drop", name, cached, false)
        })
    }

    /// SCR's `SCR_Delete` (collective): the named dataset's files are deleted from cache
    /// and from the prefix, and its index entry with them. A name neither holds is not an
    /// error (as in SCR); a name that differs between ranks, or a dataset being read or
    /// written, is, on every rank, before anything is deleted. A background flush of it
    /// is waited for and recorded first, so that recording it cannot bring it back.
    pub fn delete(&mut self, name: &str) -> Result<()> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("delete");
        self.guarded("delete", |rt| {
            let cached = rt.cache.id_of(name).ok();
            let pre = rt
                .same_name("delete", name)
                .and_then(|()| rt.not_in_use("delete", name, cached));
            rt.world.begin("delete", pre)?;
            writer!(rt).settle_protection(true);
            if let Some(id) = cached {
                flusher!(rt).settle_flush_of(id);
            }
            let local = match cached.and_then(|id| rt.cache.get(id).cloned()) {
                Some(rec) => evictor!(rt).delete_dataset(&rec),
                None => Ok(()),
            };
            rt.world.changed("delete", local)?;
            rt.restart.forget_in_prefix(name);
            prefix!(rt).remove("delete", name, cached, true)
        })
    }

    /// `Err` when the dataset `name` (`cached` here) is being written or read on this
    /// rank.
    fn not_in_use(&self, call: &str, name: &str, cached: Option<u64>) -> Result<()> {
        let writing = self.output.as_ref().is_some_and(|o| o.name() == name);
        let reading = self.restart.reads(name, cached);
        if writing || reading {
            return Err(ScrError::Usage(format!(
                "{call}: dataset `{name}` is being {}; complete it first",
                if writing { "written" } else { "read" }
            )));
        }
        Ok(())
    }

    /// `Ok` when every rank passed `name` (rank 0's, broadcast); else the ranks that
    /// differ say so.
    fn same_name(&self, call: &str, name: &str) -> Result<()> {
        let root = self.world.broadcast_bytes(name.as_bytes());
        if root == name.as_bytes() {
            Ok(())
        } else {
            Err(ScrError::Usage(format!(
                "{call}: this rank names dataset `{name}`, rank 0 `{}`; every rank must name the same dataset",
                String::from_utf8_lossy(&root)
            )))
        }
    }
}

// ----- policy and halt -----

impl Runtime {
    /// Whether the application should checkpoint now (collective; decided on rank 0):
    /// every `checkpoint_interval` calls, after `checkpoint_seconds`, while checkpoint
    /// time stays under `checkpoint_overhead` percent, or when a halt condition holds.
    /// With none of these set, never (SCR 3's answer): the application keeps its own
    /// cadence.
    pub fn need_checkpoint(&mut self) -> Result<bool> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("need_checkpoint");
        self.guarded("need_checkpoint", |rt| {
            rt.world.usable("need_checkpoint")?;
            writer!(rt).serve_protection();
            flusher!(rt).poll_flushes();
            rt.cache.poll_crc();
            rt.policy.count_call();
            let (need, exit, poll) = agree_need(
                rt.world.as_dyn(),
                || {
                    let halt = rt.halt_check();
                    let need = rt.policy.need(&Rule::of(&rt.config), Instant::now());
                    (halt, need, rt.protection.wants_poll())
                },
                rt.config.get(settings::HALT_EXIT),
            );
            if poll {
                // a background protection every rank finished is settled now
                writer!(rt).settle_protection(false);
            }
            if let Some(reason) = exit {
                rt.halt_and_exit(reason);
            }
            Ok(need)
        })
    }

    /// Rank 0's view of the halt conditions.
    fn halt_check(&self) -> Option<String> {
        halt_reason(
            &load_halt(self.job.prefix()),
            now_secs(),
            self.config.get(settings::HALT_SECONDS) as i64,
            self.report.allocation_end(),
        )
    }

    /// Whether the run should stop now (collective; a halt condition holds). The reason
    /// is recorded for `finalize`.
    pub fn should_exit(&mut self) -> Result<bool> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("should_exit");
        self.guarded("should_exit", |rt| {
            rt.world.usable("should_exit")?;
            writer!(rt).serve_protection();
            flusher!(rt).poll_flushes();
            rt.cache.poll_crc();
            let (reason, poll) = rt.agreed_halt_and_poll(true);
            if poll {
                // a background protection every rank finished is settled now (an
                // application that goes on computing leaves a running one running)
                writer!(rt).settle_protection(false);
            }
            match reason {
                None => Ok(false),
                Some(reason) => {
                    // the application may exit next: the last dataset's protection ends
                    // now (the reason is agreed: every rank waits here)
                    writer!(rt).settle_protection(true);
                    if rt.topo.rank() == 0 {
                        tracing::warn!("should_exit: yes, {reason}");
                    }
                    if rt.world.health().halt_reason().is_none() {
                        rt.job.log_event(crate::events::Event::Halt {
                            reason: reason.clone(),
                        });
                    }
                    rt.world.health_mut().set_halt_reason(reason);
                    // an application that exits now without finalize leaves the CRC32s of
                    // its last dataset recorded
                    rt.cache.settle_crc();
                    // the run is about to end: its newest checkpoint goes to the prefix now
                    // (finalize would otherwise; an application that exits without it
                    // still leaves it saved)
                    if rt.flush_at_end() {
                        flusher!(rt).flush_newest("should_exit")?;
                        // (a background flush dies with a process that exits now: wait)
                        flusher!(rt).wait_flushes(false);
                    }
                    Ok(true)
                }
            }
        })
    }

    /// Rank 0's view of the halt conditions, on every rank (collective).
    fn agreed_halt_reason(&self) -> Option<String> {
        self.agreed_halt_and_poll(false).0
    }

    /// [`Runtime::agreed_halt_reason`], and, with `poll`, whether rank 0 asks every rank
    /// to poll the pending background protection (`Protection::wants_poll`), in the same
    /// broadcast (collective).
    fn agreed_halt_and_poll(&self, poll: bool) -> (Option<String>, bool) {
        let mut mine = vec![0u8];
        if self.topo.rank() == 0 {
            mine[0] = u8::from(poll && self.protection.wants_poll());
            mine.extend_from_slice(self.halt_check().unwrap_or_default().as_bytes());
        }
        let text = self.world.broadcast_bytes(&mine);
        let poll = text.first().is_some_and(|&b| b != 0);
        let reason = String::from_utf8_lossy(text.get(1..).unwrap_or_default()).into_owned();
        ((!reason.is_empty()).then_some(reason), poll)
    }

    /// With `halt_exit`, a halt condition ends the run inside the library, as SCR's
    /// SCR_HALT_EXIT does: checked at the end of init and after every checkpoint kept
    /// (collective). Every rank finalizes (recording the reason in the halt file),
    /// finalizes MPI and exits with status 0; the application does not return from the
    /// call. Without `halt_exit` the application asks `should_exit`.
    pub(in crate::runtime) fn exit_if_halted(&mut self) {
        if !self.config.get(settings::HALT_EXIT) {
            return;
        }
        let Some(reason) = self.agreed_halt_reason() else {
            return;
        };
        self.halt_and_exit(reason)
    }

    /// End the run for `reason` (collective; halt_exit): finalize (which flushes the
    /// newest checkpoint), finalize MPI and exit with status 0.
    fn halt_and_exit(&mut self, reason: String) -> ! {
        self.job.log_event(crate::events::Event::Halt {
            reason: reason.clone(),
        });
        if self.topo.rank() == 0 {
            tracing::warn!(
                "halting the run: {reason} (halt_exit = true: flushing the newest checkpoint, finalizing and exiting)"
            );
        }
        self.world.health_mut().set_halt_reason(reason);
        if let Err(e) = self.finalize() {
            tracing::error!("finalize before the halt exit: {e}");
        }
        mpi_exit::finalize_mpi_and_exit(0)
    }
}

// ----- finalize -----

impl Runtime {
    /// Whether the end of the run (finalize, a halt) flushes the newest checkpoint:
    /// `flush_on_finalize`, unless `flush = 0` turns flushing off.
    fn flush_at_end(&self) -> bool {
        self.config.get(settings::FLUSH) > 0 && self.config.get(settings::FLUSH_ON_FINALIZE)
    }

    /// End the run (collective): records the exit reason in the halt file.
    pub fn finalize(&mut self) -> Result<()> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("finalize");
        self.guarded("finalize", |rt| {
            if rt.world.health().is_finalized() {
                return Ok(());
            }
            // the last dataset's protection ends before the run does
            if !rt.world.health().is_uncertain() {
                writer!(rt).settle_protection(true);
            }
            rt.world.health_mut().set_finalized(true);
            if let Some(out) = rt.output.take() {
                rt.topo
                    .warn("finalize: a dataset was still being written; it is discarded");
                if rt.world.health().is_uncertain() {
                    // complete_output is refused now; each rank drops its part (no collective
                    // step: the ranks' state is uncertain already)
                    if let Err(e) = evictor!(rt).delete_dataset(out.record()) {
                        tracing::warn!("{e}");
                    }
                } else {
                    rt.output = Some(out);
                    // agreed on every rank; the flushes are waited for and the exit reason
                    // recorded all the same
                    if let Err(e) = rt.complete_output(false) {
                        rt.topo
                            .warn(&format!("finalize: discarding the open dataset: {e}"));
                    }
                }
            }
            // every dataset kept leaves its CRC32s recorded, before the flush at the end
            // compares against them
            rt.cache.settle_crc();
            flusher!(rt).wait_flushes(true);
            // a clean finish (or a halt) leaves the newest checkpoint in the prefix, not in
            // node-local cache only; a flush that fails is reported and leaves it cached
            // (scavenge can still save it), never failing finalize
            if !rt.world.health().is_uncertain() && rt.flush_at_end() {
                if let Err(e) = flusher!(rt).flush_newest("finalize") {
                    rt.topo
                        .warn(&format!("finalize: flushing the newest checkpoint: {e}"));
                }
                flusher!(rt).wait_flushes(true);
            }
            // the run leaves no evicted file behind
            rt.cache.drain_retired();
            rt.job.log_event(crate::events::Event::Finalize {
                seconds_total: rt.report.init_started().elapsed().as_secs_f64(),
            });
            if rt.topo.rank() == 0 {
                // record why the run ended, unless someone set a reason of their own (read
                // and written under the prefix lock, like every halt file update)
                let reason = match rt.world.health().halt_reason() {
                    Some(why) => format!("{FINALIZE_REASON} ({why})"),
                    None => FINALIZE_REASON.into(),
                };
                let recorded = Halt::update(rt.job.prefix(), |halt| {
                    let unset = halt.exit_reason.is_none();
                    if unset {
                        halt.exit_reason = Some(reason);
                    }
                    (unset, ())
                });
                // the job's work is done: a full or failing prefix here is reported, never
                // turned into a failed finalize (which applications abort on)
                if let Err(e) = recorded {
                    tracing::warn!("{e}; the exit reason is not recorded");
                }
            }
            Ok(())
        })
    }

    /// Whether `finalize` ran (or the runtime was abandoned).
    pub fn is_finalized(&self) -> bool {
        self.world.health().is_finalized()
    }

    /// Give up without finalizing (after an error on this rank): no collective call is
    /// made, and dropping says nothing more.
    pub fn abandon(&mut self) {
        let _log = self.span.clone().entered();
        self.world.health_mut().set_finalized(true);
    }
}
