//! A disabled library (`enable = false`, SCR's `SCR_ENABLE=0`): what init returns instead
//! of a running [`Runtime`](super::Runtime) when the configuration says so.
//!
//! Nothing is cached, protected, flushed or fetched, and no directory or state file is
//! created: every call succeeds, [`Disabled::route_file`] hands back the application's
//! own path, and no restart is ever offered. The API's call order still holds (a
//! dataset is started once and completed once, the ranks pass the same name), in the
//! running runtime's words: the same refusals ([`output_refused`], [`routable`]) and the
//! same agreement ([`agree_on`]), so an application behaves the same with the library
//! enabled or not. `need_checkpoint` and `should_exit` still follow the configuration's
//! checkpoint rules and the halt file, as the running runtime does.

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::collective::agree_on;
use super::output::{output_refused, routable};
use super::policy::{agree_need, halt_reason, load_halt, Policy, Rule};
use super::restart::no_restart;
use super::world::World;
use super::{comm, io_err, mpi_exit, now_secs, CommStats, OutputFlags, Result, ScrError};
use crate::config::{settings, Config};
use crate::private_dir::lexical_normalize;

/// The ids a cache starts from, which a disabled library never moves past (it keeps no
/// dataset): the legacy `start_checkpoint` names its checkpoint with the next one.
const FIRST_ID: u64 = 1;

/// One process's library when it is disabled: only what the API's call order and the
/// checkpoint rules need.
pub struct Disabled {
    world: Box<dyn World>,
    config: Config,
    /// Entered in each call: the messages inside carry this rank and the job id.
    span: tracing::Span,
    /// The dataset being written, between start_output and complete_output.
    output: Option<String>,
    /// need_checkpoint's timing (its clock starts at init).
    policy: Policy,
    /// Whether finalize ran (or the library was abandoned).
    finalized: bool,
    /// MPI's words for a lost process, once one was lost (see `ulfm`): every call then
    /// fails so, and no finalize is owed.
    lost: Option<String>,
}

impl Disabled {
    /// Run the application's call `call`, as the running runtime's `guarded` does: a
    /// process lost meanwhile becomes [`ScrError::ProcessFailed`](super::ScrError) here
    /// and in every later call.
    fn guarded<T>(&mut self, call: &str, f: impl FnOnce(&mut Disabled) -> Result<T>) -> Result<T> {
        if let Some(why) = &self.lost {
            return Err(super::ulfm::lost_error(call, why));
        }
        match super::ulfm::catch_lost(|| f(&mut *self)) {
            Ok(r) => r,
            Err(why) => {
                self.finalized = true;
                let e = super::ulfm::lost_error(call, &why);
                self.lost = Some(why);
                Err(e)
            }
        }
    }

    /// The disabled library on `world`, once `config` (agreed on every rank) said
    /// `enable = false`.
    pub(in crate::runtime) fn new(
        world: Box<dyn World>,
        config: Config,
        span: tracing::Span,
    ) -> Disabled {
        Disabled {
            world,
            config,
            span,
            output: None,
            policy: Policy::new(),
            finalized: false,
            lost: None,
        }
    }

    /// This process's world rank.
    pub fn rank(&self) -> u32 {
        self.world.rank()
    }

    /// The effective configuration (the one that said `enable = false`).
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Reports of datasets init dropped: none (nothing is cached).
    pub fn lost_datasets(&self) -> &[String] {
        &[]
    }

    /// As [`Runtime::comm_stats`](super::Runtime::comm_stats).
    pub fn comm_stats(&self) -> CommStats {
        comm::snapshot()
    }

    /// As [`Runtime::reset_comm_stats`](super::Runtime::reset_comm_stats).
    pub fn reset_comm_stats(&self) {
        comm::reset();
    }

    /// Begin a dataset (collective): refused as the running runtime refuses it (a
    /// dataset already being written, a bad name, ranks passing different names or
    /// flags), else nothing is made and the dataset is open until `complete_output`.
    pub fn start_output(&mut self, name: &str, flags: OutputFlags) -> Result<()> {
        let _log = self.span.clone().entered();
        self.start_output_or_refuse(name, flags, None)
    }

    /// [`Disabled::start_output`] where the caller may already have refused its own
    /// arguments on this rank (`refused`: why), agreed as
    /// [`Runtime::start_output_or_refuse`](super::Runtime::start_output_or_refuse) does.
    pub fn start_output_or_refuse(
        &mut self,
        name: &str,
        flags: OutputFlags,
        refused: Option<String>,
    ) -> Result<()> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("start_output");
        self.guarded("start_output_or_refuse", |d| {
            // (no restart is ever read: start_restart always fails)
            let pre = output_refused(&*d.world, name, flags, refused, false, d.output.is_some());
            agree_on(&*d.world, pre)?;
            d.output = Some(name.to_string());
            Ok(())
        })
    }

    /// SCR's legacy `SCR_Start_checkpoint`: a checkpoint named `ckpt.<checkpoint id>`,
    /// the first id always (no checkpoint is kept, so the ids do not move).
    pub fn start_checkpoint(&mut self) -> Result<String> {
        let _log = self.span.clone().entered();
        let name = format!("ckpt.{FIRST_ID}");
        self.start_output(
            &name,
            OutputFlags {
                checkpoint: true,
                output: false,
            },
        )?;
        Ok(name)
    }

    /// Whether a dataset is being written (between start and complete; no checkpoint is
    /// ever read).
    pub fn in_dataset(&self) -> bool {
        self.output.is_some()
    }

    /// The application's own path of file `name`: during output its absolute form (made
    /// from the working directory), with its parent directories made, as they are in
    /// cache, so that the application behaves the same either way; outside a dataset
    /// `name` unchanged, as in SCR 3.x. A name no file can have is refused.
    pub fn route_file(&mut self, name: &Path) -> Result<PathBuf> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("route_file");
        routable(name)?;
        if !self.in_dataset() {
            return Ok(name.to_path_buf());
        }
        let cwd = std::env::current_dir().map_err(io_err(Path::new(".")))?;
        let path = lexical_normalize(&cwd.join(name));
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io_err(parent))?;
        }
        Ok(path)
    }

    /// Finish the dataset (collective): refused when none is being written (on every
    /// rank, when on any); else whether every rank says `valid`.
    pub fn complete_output(&mut self, valid: bool) -> Result<bool> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("complete_output");
        self.guarded("complete_output", |d| {
            let pre = if d.output.is_some() {
                Ok(())
            } else {
                Err(ScrError::Usage(
                    "complete_output: no dataset is being written; call start_output first".into(),
                ))
            };
            agree_on(&*d.world, pre)?;
            d.output = None;
            Ok(d.world.agree(valid))
        })
    }

    /// Whether the application should checkpoint now (collective; decided on rank 0), by
    /// the configuration's rules as [`Runtime::need_checkpoint`](super::Runtime::need_checkpoint)
    /// decides: every `checkpoint_interval` calls, after `checkpoint_seconds`, under
    /// `checkpoint_overhead` (no checkpoint costs time here), or when a halt condition
    /// of the halt file holds — with `halt_exit`, the run then ends in the call.
    pub fn need_checkpoint(&mut self) -> Result<bool> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("need_checkpoint");
        self.guarded("need_checkpoint", |d| {
            d.policy.count_call();
            let (need, exit, _) = agree_need(
                &*d.world,
                || {
                    let halt = d.halt_check();
                    let need = d.policy.need(&Rule::of(&d.config), Instant::now());
                    (halt, need, false)
                },
                d.config.get(settings::HALT_EXIT),
            );
            if let Some(reason) = exit {
                d.halt_and_exit(reason);
            }
            Ok(need)
        })
    }

    /// Whether the run should stop now (collective): a halt condition of the halt file
    /// holds (rank 0's view, on every rank).
    pub fn should_exit(&mut self) -> Result<bool> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("should_exit");
        self.guarded("should_exit", |d| {
            let reason = if d.rank() == 0 { d.halt_check() } else { None };
            let text = d
                .world
                .broadcast_bytes(reason.unwrap_or_default().as_bytes());
            if text.is_empty() {
                return Ok(false);
            }
            if d.rank() == 0 {
                tracing::warn!("should_exit: yes, {}", String::from_utf8_lossy(&text));
            }
            if d.config.get(settings::FLUSH) > 0 && d.config.get(settings::FLUSH_ON_FINALIZE) {
                // where a running runtime waits for its flushes before the application exits
                // (none here): the same step, so that the calls' exchanges count alike
                let _counted = comm::scope("flush_wait");
                d.world.barrier();
            }
            Ok(true)
        })
    }

    /// Rank 0's view of the halt conditions: the halt file's (no allocation end is
    /// looked up for a disabled library).
    fn halt_check(&self) -> Option<String> {
        let prefix = PathBuf::from(self.config.get(settings::PREFIX));
        halt_reason(
            &load_halt(&prefix),
            now_secs(),
            self.config.get(settings::HALT_SECONDS) as i64,
            None,
        )
    }

    /// End the run for `reason` (collective; halt_exit): finalize, finalize MPI and exit
    /// with status 0, as the running runtime does.
    fn halt_and_exit(&mut self, reason: String) -> ! {
        if self.rank() == 0 {
            tracing::warn!(
                "halting the run: {reason} (halt_exit = true: flushing the newest checkpoint, finalizing and exiting)"
            );
        }
        if let Err(e) = self.finalize() {
            tracing::error!("finalize before the halt exit: {e}");
        }
        mpi_exit::finalize_mpi_and_exit(0)
    }

    /// SCR 3.x's `SCR_Have_restart` (collective in a running runtime): none.
    pub fn have_restart_fetching(&mut self) -> Result<Option<String>> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("have_restart");
        self.guarded("have_restart_fetching", |d| Ok(d.have_restart()))
    }

    /// The checkpoint to restart from: none (nothing is cached or fetched).
    pub fn have_restart(&self) -> Option<String> {
        None
    }

    /// Begin reading the restart checkpoint: refused, there is none (in the words a
    /// running runtime without a checkpoint uses).
    pub fn start_restart(&mut self) -> Result<String> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("start_restart");
        Err(ScrError::Usage(
            "start_restart: no checkpoint to restart from (have_restart said none)".into(),
        ))
    }

    /// Refused: no restart is ever in progress.
    pub fn restart_writers(&mut self) -> Result<u32> {
        Err(no_restart("restart_writers"))
    }

    /// Refused: no restart is ever in progress.
    pub fn restart_files(&mut self, _rank: u32) -> Result<Vec<PathBuf>> {
        Err(no_restart("restart_files"))
    }

    /// Finish reading (collective): refused on every rank, no restart is in progress.
    pub fn complete_restart(&mut self, _valid: bool) -> Result<bool> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("complete_restart");
        self.guarded("complete_restart", |d| {
            agree_on(
                &*d.world,
                Err(ScrError::Usage(
                    "complete_restart: no restart in progress; call start_restart first".into(),
                )),
            )
        })
    }

    /// SCR's `SCR_Current`: succeeds, changing nothing.
    pub fn current(&mut self, _name: &str) -> Result<()> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("current");
        Ok(())
    }

    /// SCR's `SCR_Drop`: succeeds, changing nothing.
    pub fn drop_dataset(&mut self, _name: &str) -> Result<()> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("drop");
        Ok(())
    }

    /// SCR's `SCR_Delete`: succeeds, deleting nothing (the library made nothing).
    pub fn delete(&mut self, _name: &str) -> Result<()> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("delete");
        Ok(())
    }

    /// End the run: nothing to write; later calls of it do nothing.
    pub fn finalize(&mut self) -> Result<()> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("finalize");
        self.guarded("finalize", |d| {
            d.finalized = true;
            Ok(())
        })
    }

    /// Whether `finalize` ran (or the library was abandoned).
    pub fn is_finalized(&self) -> bool {
        self.finalized
    }

    /// Give up without finalizing: dropping says nothing more.
    pub fn abandon(&mut self) {
        self.finalized = true;
    }
}

impl Drop for Disabled {
    fn drop(&mut self) {
        // as a running runtime says it (finalize is owed either way)
        if !self.finalized && !std::thread::panicking() {
            tracing::warn!(rank = self.rank(), "runtime dropped without finalize");
        }
    }
}
