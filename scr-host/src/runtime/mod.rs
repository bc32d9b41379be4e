//! The checkpoint/restart runtime: what one MPI process runs between `init` and
//! `finalize`.
//!
//! Init reads the configuration on rank 0 and broadcasts it, forms the groups, stores and
//! redundancy sets, reads the filemaps left in the node-local control directory, moves
//! files to the ranks that own them when ranks changed nodes, verifies or rebuilds every
//! cached dataset through its scheme (dropping, on every rank alike, what cannot be
//! rebuilt), and picks the newest complete checkpoint as the restart candidate. Outputs
//! are routed into node-local cache, recorded in the filemap before they exist, and
//! protected by the scheme of the descriptor chosen for the checkpoint id.
//!
//! # Owners
//!
//! [`Runtime`] coordinates parts that each own their state: their fields are private to
//! their module and change only through their verbs, so a phase can touch only what it
//! is handed.
//!
//! | part | module | owns | verbs (examples) |
//! |---|---|---|---|
//! | `Collective` | `collective` | the runtime's communicator, `Health` (uncertain, halt reason, finalized), the last scheme call's credit | `agree_on`, `all`, `begin`, `usable`, `changed`, `settle_call`; its exchanges are the `World` it derefs to |
//! | `Topology` | `topology` | rank, size, node, the node's ranks, node count | found once (`Topology::find`), then read; `info` and `warn` speak for rank 0 |
//! | `Job` | `job` | user, job id, prefix, control directory, the job's directory in each store, where its events go | `place`, `store_dir`, `dataset_dir`, `create_store_dir`, `log_event` |
//! | `Descriptors` | `descriptors` | the redundancy descriptors in force, each with its set, scheme and set host | `create`, `for_dataset`, `for_checkpoint`, `set_host`, `group_value` |
//! | `Cache` | `cache` (+ `cache::deferred_crc`) | the filemap, its journal, the next ids, the background hash | `open`, `get`, `put`, `update`, `forget`, `save`, `append_file`, `id_of`, `newest_checkpoint`, `used`, `settle_crc` |
//! | `RestartState` | `restart::state` | the candidate, skipped checkpoints, a restart in place | `skip`, `reads`, `in_progress`, `candidate_in`, `offer_in_prefix`, `start`, `end`, `start_in_prefix`, `end_in_prefix` |
//! | `Flushing` | `flush` | this run's flushes (in flight, pending, unrecorded, waiters, cancel flag) | `holds`, `in_flight`, `flushed`, `cancel_flag` |
//! | `Policy` | `policy` | need_checkpoint's timing | `checkpoint_done`, `restart_clock` |
//! | `RunReport` | `report` | what init and the run found, for the event log | `add_lost`, `add_lost_nodes`, `crc_note_due` |
//! | `Output` | `output` | the dataset being written | `name`, `record` |
//!
//! (The restart's state lives in a module of its own, `restart::state`, so that the
//! phases that read it do not import the restart phase, which calls them.)
//!
//! # Phases
//!
//! A phase is a view: a struct of borrows of exactly the parts it uses, under the same
//! names as the runtime's fields, built by a macro from the runtime or from another
//! phase that holds those parts (`evictor!(self)`). The borrow checker draws the fences:
//! eviction cannot touch the output in progress, a flush cannot change the restart.
//!
//! | phase | view (macro) | module | borrows (mutably) |
//! |---|---|---|---|
//! | the prefix's index edits (drop, delete, `prefix_purge`, `prefix_size`) | `Prefix` (`prefix!`) | `prefix` | — |
//! | removal from cache, eviction | `Evictor` (`evictor!`) | `evict` | world, cache |
//! | flush (foreground, background, interrupted, recording) | `Flusher` (`flusher!`) | `flush`, `flush::background`, `flush::resume`, `flush::record` | world, cache, flushing |
//! | a store's transfers | `Transfers` (`transfers!`) | `dispatch` | — |
//! | fetch and restart in place from the prefix | `Fetcher` (`fetcher!`) | `fetch` | world, cache, restart |
//! | restart (candidate, start/complete, current, fallback) | `Restarter` (`restarter!`) | `restart` | world, cache, restart, flushing |
//! | init's restore of the cache, distribute | `Restorer` (`restorer!`) | `restore`, `distribute` | world, cache, restart, report |
//! | output (start, route, complete, bypass) | `Writer` (`writer!`) | `output`, `output::bypass`, `output::record` | world, cache, output, restart, flushing, policy |
//!
//! [`Runtime`] is the coordinator. Its methods live in three files: `mod.rs` (queries),
//! `init` (init builds the parts; a disabled library is a `Disabled`, and init returns
//! either as a [`Started`]) and `api` (each call of the application: enter the span,
//! count the exchanges under the call's name, hand the work to a phase; what spans
//! phases — need_checkpoint, should_exit, the halt exit, finalize — is decided there).
//! No two of these modules import each other.
//!
//! Every exchange goes through a `World` (MPI, or threads acting as ranks in the
//! runtime's own tests: `tests`), counted by [`comm`]; typed values cross it through
//! `world::Exchange`; tags come from one table (`tags`). The fault suite's hooks come in
//! as a [`TestHooks`] value. What is on disk lives in [`crate::state`], every path in
//! [`crate::layout`], the size + CRC32 checks in `crate::integrity` and transfers in
//! `crate::transfer`.

mod api;
mod cache;
mod collective;
pub mod comm;
mod descriptors;
mod disabled;
mod dispatch;
mod distribute;
mod evict;
mod fetch;
pub(crate) mod flush;
mod flushed;
mod init;
mod job;
mod mpi_exit;
mod mpi_host;
pub mod mpi_init;
mod names;
mod output;
mod policy;
mod prefix;
mod report;
mod restart;
mod restore;
pub(crate) mod sets;
mod socket_host;
mod started;
mod tags;
#[cfg(test)]
mod tests;
mod topology;
pub mod ulfm;
pub(crate) mod window;
mod world;

#[cfg(test)]
use cache::deferred_crc;
use cache::Cache;
use collective::{agree_on, first_failure, Collective};
use descriptors::Descriptors;
use job::Job;
use output::Output;
use policy::Policy;
use report::RunReport;
use restart::state::RestartState;
use topology::Topology;

use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::config::Config;
pub use crate::hooks::TestHooks;
use crate::registry::Registry;

pub use crate::state::filemap::{
    filemap_io, DatasetRecord, DescriptorRecord, FileRecord, Filemap, FilemapIo, JournalEntry,
    JOURNAL_KIND, JOURNAL_VERSION,
};
pub use crate::state::halt::Halt;
pub use job::provenance;
pub use sets::{form_my_set, form_sets, split_by_value, Set};

pub(crate) use mpi_host::Funnel;
pub use mpi_host::{MpiHost, Settled};

pub use disabled::Disabled;
pub use started::Started;

pub use comm::{CallStats, CommStats};

pub(crate) use crate::error::io_err;
pub use crate::error::{Result, ScrError};

/// The exit code of a job the runtime ends with MPI_Abort (see `abort_timeout`).
pub const ABORT_CODE: i32 = 70;

/// The exit reason `finalize` records in the halt file (SCR's name for it).
pub const FINALIZE_REASON: &str = "SCR_FINALIZE_CALLED";

/// Flags of [`Runtime::start_output`], as in SCR's `SCR_FLAG_*`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutputFlags {
    /// The dataset is a checkpoint (restartable).
    pub checkpoint: bool,
    /// The dataset is output destined for the prefix.
    pub output: bool,
}

/// One process's checkpoint/restart runtime, running: init found the library enabled
/// (a disabled one is a [`Disabled`]; [`Runtime::init`] returns either, as a
/// [`Started`]).
pub struct Runtime {
    /// The runtime's own communicator, with agreement and health.
    world: Collective,
    /// Where this rank is: rank, size, node and the node's ranks.
    topo: Topology,
    config: Config,
    registry: Registry,
    /// The job's identity and directories, and the redundancy descriptors in force.
    job: Job,
    /// The redundancy descriptors in force and this rank's sets.
    descs: Descriptors,
    /// Entered in each call: the messages inside carry this rank and the job id.
    span: tracing::Span,
    /// The cached datasets (filemap) and the ids of the next ones.
    cache: Cache,
    /// The output in progress, between start_output and complete_output.
    output: Option<Output>,
    /// The dataset whose redundancy is being applied in the background, if any.
    protection: output::Protection,
    /// The restart in progress and what is offered for one.
    restart: RestartState,
    policy: Policy,
    /// What init and the run found, for the event log and the application.
    report: RunReport,
    flushing: flush::Flushing,
    /// The fault suite's hooks (none in production), given to `init_in`.
    hooks: TestHooks,
}

/// How [`Runtime::init_with`] starts a run.
#[derive(Clone, Debug, Default)]
pub struct InitOptions {
    /// Fetch at the first [`Runtime::have_restart_fetching`] instead of in init (SCR
    /// 3.0 moved the fetch so that `SCR_Current` between init and `SCR_Have_restart`
    /// chooses the checkpoint to load; the C API works this way).
    pub fetch_at_have_restart: bool,
    /// This init follows an online recovery inside the job's `mpiexec` (a resilient run):
    /// the event log records it, in place of the "previous run ended without finalize"
    /// that a relaunch's init reports.
    pub recovered: Option<Recovered>,
}

/// What an online recovery did, for the event log (see [`crate::resilient`]).
#[derive(Clone, Debug, Default)]
pub struct Recovered {
    /// The application ranks lost.
    pub lost: Vec<u32>,
    /// The lost ranks that spares took.
    pub replaced: Vec<u32>,
    /// How long the recovery took, in seconds.
    pub seconds: f64,
}

/// The outcome of checking the names of a dataset's files across ranks
/// (`check_output_names`, in `output`), the same on every rank.
struct NameCheck {
    /// Every rank's files are there, no names clash, the redundancy files are recorded.
    all_valid: bool,
    /// Two ranks routed one name (the first owner's clash): a usage error.
    clash: Option<String>,
    /// Why the redundancy files could not be named or recorded.
    naming_error: Option<String>,
}

impl Runtime {
    /// This process's world rank.
    pub fn rank(&self) -> u32 {
        self.topo.rank()
    }

    /// The effective configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// This process's node name (simulated or real).
    pub fn node(&self) -> &str {
        self.topo.node()
    }

    /// The control directory of this process's node.
    pub fn control_dir(&self) -> &Path {
        self.job.cntl_dir()
    }

    /// Reports of datasets that init found damaged beyond repair and dropped.
    pub fn lost_datasets(&self) -> &[String] {
        self.report.lost()
    }

    /// This rank's MPI exchanges per API call since init or [`Runtime::reset_comm_stats`]:
    /// collectives, point-to-point messages and payload bytes each way, and wall time
    /// (see [`comm`] for what is counted and how). Local. The counters belong to the
    /// process, so several runtimes in one process share them.
    pub fn comm_stats(&self) -> CommStats {
        comm::snapshot()
    }

    /// Zero the counters [`Runtime::comm_stats`] reads (local), e.g. before a step to be
    /// measured on its own.
    pub fn reset_comm_stats(&self) {
        comm::reset();
    }

    /// Background flushes whose transfer has not ended on this rank yet (local, no
    /// exchange). Once it is 0 on every rank, the next collective call
    /// (`need_checkpoint`, `start_output`, `complete_output`, `should_exit`) records
    /// every pending background flush: for applications and tests that want to know
    /// whether that call will.
    pub fn flushes_running_here(&self) -> usize {
        self.flushing.running_here()
    }

    /// Whether a background protection (`protect_in_background`) is pending and its
    /// thread on this rank has not returned yet (local, no exchange): for applications
    /// and tests that want to know whether the next `need_checkpoint` may settle it.
    pub fn protecting_here(&self) -> bool {
        self.protection.running_here()
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        // Finalizing is collective; an implicit finalize during a panic could hang, so a
        // runtime dropped without `finalize` only says so.
        if !self.world.health().is_finalized() && !std::thread::panicking() {
            tracing::warn!(rank = self.topo.rank(), "runtime dropped without finalize");
        }
    }
}

/// The last dataset and checkpoint ids used with a prefix (`<prefix>/.scr/ids.scr`).
#[derive(Clone, Copy, Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Ids {
    pub dataset: u64,
    pub checkpoint: u64,
}

impl Ids {
    const KIND: &'static str = "ids";

    fn path(prefix: &Path) -> PathBuf {
        crate::layout::ids_file(prefix)
    }

    /// The ids recorded in `prefix`, for the tools (`scr index import`): as [`Ids::load`].
    pub(crate) fn load_at(prefix: &Path) -> Ids {
        Ids::load(prefix)
    }

    /// Record in `prefix` that dataset ids up to `dataset` and checkpoint ids up to
    /// `checkpoint` are used (written atomically), so a job continues after them.
    pub(crate) fn record_at(
        prefix: &Path,
        dataset: u64,
        checkpoint: u64,
    ) -> std::result::Result<(), crate::state::StateError> {
        crate::state::prefix::write(
            &Self::path(prefix),
            Self::KIND,
            &Ids {
                dataset,
                checkpoint,
            },
        )
    }

    /// The recorded ids, or zeros (with a warning when the file is damaged).
    fn load(prefix: &Path) -> Ids {
        match crate::state::read_state(&Self::path(prefix), Self::KIND) {
            Ok(ids) => ids,
            Err(e) if e.is_not_found() => Ids::default(),
            Err(e) => {
                tracing::warn!("{e}; dataset ids restart from the cache's");
                Ids::default()
            }
        }
    }
}

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}
