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

pub(crate) mod cache;
pub mod comm;
mod filemap;
pub(crate) mod flush;
pub mod halt;
mod mpi_exit;
mod mpi_host;
mod names;
pub mod prefix;
pub(crate) mod sets;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Component, Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use mpi::collective::SystemOperation;
use mpi::topology::SimpleCommunicator;
use mpi::traits::Communicator as _;

use crate::config::check_plugins;
use crate::config::{settings, Config, ConfigErrors, Loader, Snapshot, View};
use crate::registry::{LoadedScheme, Registry, RegistryError};
use crate::state::StateError;

pub use filemap::{
    filemap_io, DatasetRecord, DescriptorRecord, FileRecord, Filemap, FilemapIo, JournalEntry,
    JOURNAL_KIND, JOURNAL_VERSION,
};
pub use halt::Halt;
pub use sets::{form_my_set, form_sets, split_by_value, Set};

pub use mpi_host::MpiHost;

pub use comm::{CallStats, CommStats};
// the exchange helpers, counted (see `comm`), under the names every call site uses
use comm::broadcast_bytes;

/// Everything that can go wrong in the runtime.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScrError {
    /// The configuration is invalid (every problem, located).
    #[error("invalid configuration:\n{0}")]
    Config(ConfigErrors),
    /// A plugin could not be found or failed.
    #[error("{0}")]
    Plugin(#[from] RegistryError),
    /// A file operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A state file is unreadable or corrupt.
    #[error("{0}")]
    State(#[from] StateError),
    /// The API was called out of order or with a bad argument.
    #[error("{0}")]
    Usage(String),
    /// Another rank failed; this rank followed it so that every rank returns the same.
    #[error("{0}")]
    Collective(String),
    /// An earlier call failed after ranks had begun to change their state, so the ranks'
    /// caches may no longer agree: every collective call is refused from then on (on
    /// every rank alike) rather than run on diverged state.
    #[error("{0}")]
    StateUncertain(String),
}

/// The exit code of a job the runtime ends with MPI_Abort (see `abort_timeout`).
pub const ABORT_CODE: i32 = 70;

/// The exit reason `finalize` records in the halt file (SCR's name for it).
pub const FINALIZE_REASON: &str = "SCR_FINALIZE_CALLED";

/// Shorthand.
pub type Result<T, E = ScrError> = std::result::Result<T, E>;

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ScrError + '_ {
    move |source| ScrError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Flags of [`Runtime::start_output`], as in SCR's `SCR_FLAG_*`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutputFlags {
    /// The dataset is a checkpoint (restartable).
    pub checkpoint: bool,
    /// The dataset is output destined for the prefix.
    pub output: bool,
}

/// A redundancy descriptor in force in this run.
struct RedDesc {
    index: usize,
    interval: u64,
    record: DescriptorRecord,
    scheme: LoadedScheme,
    host: MpiHost,
    /// Whether the scheme hashes the files in its apply (`crc32_in_apply`) on every
    /// rank: agreed once here, not at each checkpoint (a scheme's answer is fixed).
    hashes_in_apply: bool,
}

/// The dataset being written.
struct Output {
    record: DatasetRecord,
    desc: usize,
    started: Instant,
    /// This rank's redundancy file names (relative), asked of the scheme once at
    /// start_output so route_file can refuse them without asking per file.
    redundancy_names: Vec<String>,
    /// The names routed so far (`record.files`' names), so that a name routed again is
    /// found without a scan of every file.
    routed: HashSet<String>,
}

/// Timing state of `need_checkpoint`.
#[derive(Debug)]
struct Policy {
    calls: u64,
    last_end: Instant,
    last_cost: f64,
}

/// One process's checkpoint/restart runtime.
pub struct Runtime {
    world: SimpleCommunicator,
    rank: u32,
    size: u32,
    node: String,
    /// World ranks on this rank's node, in rank order (from a split by node name: no
    /// rank learns every rank's node).
    node_ranks: Vec<u32>,
    /// Nodes in the job.
    node_count: u32,
    simulated: bool,
    config: Config,
    registry: Registry,
    user: String,
    job_id: String,
    /// Entered in each call: the messages inside carry this rank and the job id.
    span: tracing::Span,
    cntl_dir: PathBuf,
    prefix: PathBuf,
    reddescs: Vec<RedDesc>,
    filemap: Filemap,
    /// Appends `route_file`'s records to the filemap's journal (O(1) per file); every
    /// other change saves the whole filemap through it.
    filemap_journal: filemap::JournalWriter,
    next_dataset: u64,
    next_checkpoint: u64,
    output: Option<Output>,
    restart: Option<u64>,
    skipped: Vec<u64>,
    policy: Policy,
    halt_reason: Option<String>,
    finalized: bool,
    lost: Vec<String>,
    /// Nodes whose cache init found lost (for the event log).
    lost_nodes: BTreeSet<String>,
    /// Nodes lost beyond those [`comm::gather_some`] brought to rank 0 by name.
    lost_nodes_unnamed: u64,
    /// When init began (the finalize event says how long the run was).
    init_started: Instant,
    /// Rank 0: the allocation's end and where it was read from (`halt_seconds` counts
    /// back from it); read once at init.
    allocation_end: Option<(i64, String)>,
    /// Whether rank 0 said that files without a CRC32 are checked by size only.
    crc_note_given: bool,
    flushing: flush::Flushing,
    /// Set (on every rank alike) when a call failed after ranks had begun to change their
    /// state: what failed. Collective calls are refused from then on.
    uncertain: Option<String>,
    /// `Some` when the library is disabled (`enable = false`): the calls pass through.
    passthrough: Option<Passthrough>,
    /// SCR 3.x order: the fetch from the prefix waits for the first
    /// [`Runtime::have_restart_fetching`], so that `current` can choose what is loaded.
    fetch_pending: bool,
    /// The checkpoint `current` chose while the fetch was pending, when no cache holds it.
    wanted: Option<String>,
    /// With `fetch = false`: the checkpoint offered for a restart straight from the prefix.
    prefix_restart: Option<PrefixRestart>,
    /// Between start_restart and complete_restart of `prefix_restart`.
    reading_prefix: bool,
}

/// A checkpoint read in place in the prefix (SCR 3.x with fetch disabled).
#[derive(Debug)]
struct PrefixRestart {
    /// Its dataset id.
    id: u64,
    /// Its name.
    name: String,
    /// This rank's files: the name as the application routes it → where it is stored.
    files: BTreeMap<String, PathBuf>,
}

/// How [`Runtime::init_with`] starts a run.
#[derive(Clone, Copy, Debug, Default)]
pub struct InitOptions {
    /// Fetch at the first [`Runtime::have_restart_fetching`] instead of in init (SCR
    /// 3.0 moved the fetch so that `SCR_Current` between init and `SCR_Have_restart`
    /// chooses the checkpoint to load; the C API works this way).
    pub fetch_at_have_restart: bool,
}

/// The state of a disabled runtime: only what the API's call order needs.
#[derive(Debug, Default)]
struct Passthrough {
    /// The dataset being written, between start_output and complete_output.
    output: Option<String>,
}

/// The outcome of checking the names of a dataset's files across ranks
/// ([`Runtime::check_output_names`]), the same on every rank.
struct NameCheck {
    /// Every rank's files are there, no names clash, the redundancy files are recorded.
    all_valid: bool,
    /// Two ranks routed one name (the first owner's clash): a usage error.
    clash: Option<String>,
    /// Why the redundancy files could not be named or recorded.
    naming_error: Option<String>,
}

impl Runtime {
    /// Initialise on `world` (normally `MPI_COMM_WORLD`; collective). `api` holds the
    /// configuration calls the application made before init, with their call numbers.
    pub fn init(world: &SimpleCommunicator, api: Vec<(usize, String)>) -> Result<Runtime> {
        Self::init_with(world, api, InitOptions::default())
    }

    /// [`Runtime::init`] with options.
    pub fn init_with(
        world: &SimpleCommunicator,
        api: Vec<(usize, String)>,
        options: InitOptions,
    ) -> Result<Runtime> {
        let _counted = comm::scope("init");
        let world = comm::duplicate(world);
        let rank = world.rank() as u32;
        let filter_problem = crate::log::init(crate::log::env_debug());
        let span = crate::log::runtime_span(rank);
        let _log = span.clone().entered();
        if let (0, Some(problem)) = (rank, filter_problem) {
            tracing::warn!("{problem}");
        }

        // Every step below can fail on some ranks only (each rank loads the broadcast
        // configuration with its own environment, opens plugins from its own node's
        // file system, finds its own node name): each outcome is agreed before the next
        // collective step, so every rank returns an error and none waits for the others.
        let recorded_api = api.clone();
        let config = agree_on(&world, load_config(&world, api))?;
        agree_on(&world, same_config(&world, &config))?;
        let job = config.get(settings::JOB_ID);
        if !job.is_empty() {
            span.record("job", job.as_str());
        }
        crate::log::set_debug(config.get(settings::DEBUG));
        let mut rt = Runtime::unstarted(world, config, span);
        let started = rt.init_started;
        if rt.passthrough.is_some() {
            // SCR_ENABLE=0: nothing is cached, protected, flushed or fetched, and no
            // directory or state file is created; every call succeeds and route_file
            // hands back the application's own path
            rt.info("disabled (enable = false): every call passes through; nothing is cached");
            rt.finalized = false;
            return Ok(rt);
        }
        rt.load_plugins()?;
        rt.find_node()?;
        rt.create_job_dirs()?;
        rt.set_up_stores(&recorded_api)?;
        rt.restore_at_init(&options)?;
        rt.report_init(started);
        Ok(rt)
    }

    /// The runtime before any collective step of init: configuration and identity only
    /// (no plugin, node, set or directory yet). Dropping it is not a missed finalize.
    fn unstarted(world: SimpleCommunicator, config: Config, span: tracing::Span) -> Runtime {
        let rank = world.rank() as u32;
        let size = world.size() as u32;
        Runtime {
            rank,
            size,
            node: String::new(),
            node_ranks: Vec::new(),
            node_count: 0,
            simulated: false,
            registry: Registry::default(),
            user: config.get(settings::USER),
            job_id: config.get(settings::JOB_ID),
            span: span.clone(),
            cntl_dir: PathBuf::new(),
            prefix: PathBuf::from(config.get(settings::PREFIX)),
            reddescs: Vec::new(),
            filemap: Filemap {
                rank,
                datasets: BTreeMap::new(),
            },
            filemap_journal: filemap::JournalWriter::default(),
            next_dataset: 1,
            next_checkpoint: 1,
            output: None,
            restart: None,
            skipped: Vec::new(),
            policy: Policy {
                calls: 0,
                last_end: Instant::now(),
                last_cost: 0.0,
            },
            halt_reason: None,
            // until init succeeds, dropping the half-built runtime is not a missed finalize
            finalized: true,
            lost: Vec::new(),
            lost_nodes: BTreeSet::new(),
            lost_nodes_unnamed: 0,
            init_started: Instant::now(),
            allocation_end: None,
            crc_note_given: false,
            flushing: flush::Flushing::default(),
            uncertain: None,
            passthrough: (!config.get(settings::ENABLE)).then(Passthrough::default),
            fetch_pending: false,
            wanted: None,
            prefix_restart: None,
            reading_prefix: false,
            world,
            config,
        }
    }

    /// Load the plugins from the search path and check the configuration against them
    /// (agreed: a plugin missing on one node fails init on every rank).
    fn load_plugins(&mut self) -> Result<()> {
        self.registry = Registry::load(&self.config.search_path());
        let findings = check_plugins(&self.config, &self.registry);
        let checked = if findings.errors.is_empty() {
            Ok(())
        } else {
            Err(ScrError::Config(ConfigErrors(findings.errors)))
        };
        self.agree(checked)
    }

    /// This rank's node (the testing override `node_names`, else the host name; agreed),
    /// the ranks on it and the number of nodes.
    fn find_node(&mut self) -> Result<()> {
        let (rank, size) = (self.rank, self.size);
        let node_names = self.config.get(settings::NODE_NAMES);
        self.simulated = !node_names.is_empty();
        let node = if self.simulated {
            let names: Vec<&str> = node_names.split(',').map(str::trim).collect();
            match names.get(rank as usize) {
                Some(n) if !n.is_empty() => Ok(n.to_string()),
                _ => Err(ScrError::Usage(format!(
                    "node_names lists {} node(s) but the job has {size} ranks; give one name per rank",
                    names.len()
                ))),
            }
        } else {
            Ok(std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "localhost".into()))
        };
        self.node = self.agree(node)?;
        // the ranks of this node find each other by a split by node name (see
        // sets::split_by_value) and count the nodes with one reduction: per rank
        // O(log P) steps and O(ranks per node) bytes (was: every rank's node name on
        // every rank, O(P))
        {
            let node_comm = sets::split_by_value(&self.world, &self.node);
            let mut ranks = vec![0u32; node_comm.size() as usize];
            comm::all_gather_into(&node_comm, &self.rank, &mut ranks[..]);
            self.node_ranks = ranks;
            let first = u64::from(node_comm.rank() == 0);
            self.node_count = u32::try_from(comm::sum_u64(&self.world, first)).unwrap_or(u32::MAX);
        }

        Ok(())
    }

    /// This job's control directory on this node (private, every level checked) and the
    /// prefix's `.scr`; a run that ended in finalize left that as the halt file's exit
    /// reason, which a new run starting clears. Agreed.
    fn create_job_dirs(&mut self) -> Result<()> {
        let job_dir = PathBuf::from(&self.user).join(format!("scr.{}", self.job_id));
        let cntl_base = PathBuf::from(self.config.get(settings::CNTL_BASE));
        self.cntl_dir = node_local(&cntl_base, self.simulated, &self.node).join(&job_dir);
        let prefix = self.prefix.clone();
        let local = create_private_dir(&cntl_base, &self.cntl_dir).and_then(|()| {
            if self.rank == 0 {
                let scr = prefix.join(".scr");
                std::fs::create_dir_all(&scr).map_err(io_err(&scr))?;
                // A run that ended in finalize left that as its reason; a new run
                // starting means it no longer holds. Reasons set by `scr halt` stay
                // (finalize never overwrites them).
                // (under the prefix lock: `scr halt` may be setting a condition now)
                Halt::update(&prefix, |halt| {
                    let stale = halt
                        .exit_reason
                        .as_deref()
                        .is_some_and(|r| r.starts_with(FINALIZE_REASON));
                    if stale {
                        halt.exit_reason = None;
                    }
                    (stale, ())
                })
                .or_else(|e| match e {
                    // ignored, as every reader of the halt file does
                    e if e.is_other_version() => {
                        tracing::warn!("{e}; ignoring the halt file");
                        Ok((Halt::default(), ()))
                    }
                    e => Err(ScrError::from(e)),
                })?;
            }
            Ok(())
        });
        self.agree(local)
    }

    /// The redundancy descriptors and their sets, a job directory in every store in use
    /// (SCR makes its cache directories in init: a store that cannot be used fails the
    /// start, not a later checkpoint), the nodes file, the recorded configuration calls
    /// and, on rank 0, the allocation's end.
    fn set_up_stores(&mut self, recorded_api: &[(usize, String)]) -> Result<()> {
        self.create_reddescs()?;
        let stores: BTreeSet<String> = self
            .reddescs
            .iter()
            .map(|d| d.record.store.clone())
            .collect();
        let made = stores.iter().try_for_each(|s| self.create_store_dir(s));
        self.agree(made)?;
        self.write_nodes_file()?;
        if self.rank == 0 {
            // what the application set, for `scr config show` and `explain` to report
            if let Err(e) = crate::config::api::record(&self.prefix, recorded_api) {
                self.warn(&format!(
                    "the configuration calls could not be recorded in {} ({e}); `scr config show` will not list them",
                    crate::config::api::record_path(&self.prefix).display()
                ));
            }
        }
        if self.rank == 0 {
            // asked once, on one rank: thousands of ranks each running `squeue` would
            // load the resource manager
            self.allocation_end = crate::walltime::from_config_and_env(&self.config);
            if let Some((end, source)) = &self.allocation_end {
                self.info(&format!("the allocation ends at {end} (from {source})"));
            }
            self.log_previous_run_failure();
        }
        Ok(())
    }

    /// Restore what the cache holds (verify, rebuild, or drop each dataset), settle
    /// flushes an earlier run left interrupted, and choose the restart (or leave the
    /// fetch to the first have_restart).
    fn restore_at_init(&mut self, options: &InitOptions) -> Result<()> {
        self.restore_cache()?;
        if self.lost_nodes_unnamed > 0 {
            self.warn(&format!(
                "{} more nodes lost their cache than the event log names ({} named)",
                self.lost_nodes_unnamed,
                self.lost_nodes.len()
            ));
        }
        if !self.lost_nodes.is_empty() {
            self.log_event(crate::events::Event::LostNodes {
                nodes: self.lost_nodes.iter().cloned().collect(),
            });
        }
        self.settle_interrupted_flushes()?;
        // from here on, dropping the runtime without finalize is a missed finalize
        self.finalized = false;
        if options.fetch_at_have_restart {
            // only the fetch waits for have_restart: flush_on_restart flushes what the
            // cache holds now (SCR does it in init, for applications that restart
            // without the restart API)
            self.fetch_pending = true;
            if self.config.get(settings::FLUSH_ON_RESTART) {
                self.flush_newest("flush_on_restart")?;
            }
        } else {
            self.settle_restart(true)?;
        }
        Ok(())
    }

    /// Log the init event and, at debug level 1, each descriptor and the init summary;
    /// exit here when the run is halted.
    fn report_init(&mut self, started: Instant) {
        self.log_event(crate::events::Event::Init {
            ranks: self.size,
            nodes: self.node_count,
            seconds: started.elapsed().as_secs_f64(),
            restarted_from: self.have_restart(),
        });
        self.exit_if_halted();
        // time-based checkpoint policies count from the end of init
        self.policy.last_end = Instant::now();
        comm::barrier(&self.world);
        for rd in &self.reddescs {
            self.info(&format!(
                "descriptor {}: interval {}, scheme {}, store {}, group {}, this rank in set {} of {} member(s)",
                rd.index,
                rd.interval,
                rd.record.scheme,
                rd.record.store,
                rd.record.group,
                rd.record.set_id,
                rd.record.members.len()
            ));
        }
        self.info(&format!(
            "init: {} ranks on {} node(s), {} descriptor(s), restart candidate {:?}, {:.3} s",
            self.size,
            self.node_count,
            self.reddescs.len(),
            self.have_restart(),
            started.elapsed().as_secs_f64()
        ));
    }

    /// This process's world rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The effective configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// This process's node name (simulated or real).
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The control directory of this process's node.
    pub fn control_dir(&self) -> &Path {
        &self.cntl_dir
    }

    /// Reports of datasets that init found damaged beyond repair and dropped.
    pub fn lost_datasets(&self) -> &[String] {
        &self.lost
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

    /// A message at info level from rank 0 alone (the same on every rank: one line, not
    /// one per rank). Whether it is printed is the subscriber's choice (`SCR_DEBUG`, or
    /// `RUST_LOG`): never filtered here, so a `RUST_LOG` directive can show it.
    fn info(&self, msg: &str) {
        if self.rank == 0 {
            tracing::info!("{msg}");
        }
    }

    /// Whether the end of the run (finalize, a halt) flushes the newest checkpoint:
    /// `flush_on_finalize`, unless `flush = 0` turns flushing off.
    fn flush_at_end(&self) -> bool {
        self.config.get(settings::FLUSH) > 0 && self.config.get(settings::FLUSH_ON_FINALIZE)
    }

    /// Append `event` to the prefix's event log (rank 0; see [`crate::events`]).
    fn log_event(&self, event: crate::events::Event) {
        if self.rank == 0 && self.passthrough.is_none() {
            crate::events::log_event(&self.prefix, &self.job_id, event);
        }
    }

    /// Rank 0 at init: when the event log's last run started and never finalized (or
    /// halted), that run failed — killed, a node lost, a rank crashed. Logged as a
    /// failure so that `scr log` can count the time between failures.
    fn log_previous_run_failure(&self) {
        let Ok((records, _)) = crate::events::read(&self.prefix) else {
            return;
        };
        use crate::events::Event;
        let last_init = records
            .iter()
            .rposition(|r| matches!(r.event, Event::Init { .. }));
        let Some(i) = last_init else {
            return;
        };
        let ended = records[i..]
            .iter()
            .any(|r| matches!(r.event, Event::Finalize { .. } | Event::Halt { .. }));
        if !ended {
            self.log_event(Event::Failure {
                what: format!(
                    "the previous run (job {}, started at {:.0}) ended without finalize",
                    records[i].job_id, records[i].time
                ),
                rank: None,
            });
        }
    }

    fn warn(&self, msg: &str) {
        if self.rank == 0 {
            tracing::warn!("{msg}");
        }
    }

    /// Make a local outcome collective: every rank gets `Ok` only when every rank did,
    /// so no rank leaves a sequence of collectives that the others continue.
    fn agree<T>(&self, local: Result<T>) -> Result<T> {
        agree_on(&self.world, local)
    }

    /// All ranks true?
    fn all_agree(&self, ok: bool) -> bool {
        let mut out = 0u8;
        comm::all_reduce_into(&self.world, &u8::from(ok), &mut out, SystemOperation::min());
        out == 1
    }

    /// The first step of every collective call: refuse it when an earlier call left the
    /// ranks' state uncertain (the same on every rank), and agree on this rank's checks
    /// of the call's preconditions, so that a call misused on some ranks only fails on
    /// every rank instead of leaving the others waiting in its first collective step.
    fn begin<T>(&self, call: &str, local: Result<T>) -> Result<T> {
        self.usable(call)?;
        self.agree(local)
    }

    /// Refuse `call` when an earlier call left the ranks' state uncertain (local: that
    /// state is the same on every rank).
    fn usable(&self, call: &str) -> Result<()> {
        match &self.uncertain {
            Some(why) => Err(ScrError::StateUncertain(format!(
                "{call}: refused, because an earlier call left the ranks' cached state uncertain ({why}); call finalize (or MPI_Abort) and restart the job, which restores what every rank agrees on"
            ))),
            None => Ok(()),
        }
    }

    /// Agree on a local step taken after the ranks began to change their state: when it
    /// failed on any rank, the state is uncertain from then on, on every rank (see
    /// [`Runtime::begin`]).
    fn agree_changed(&mut self, what: &str, local: Result<()>) -> Result<()> {
        let agreed = self.agree(local);
        if let Err(e) = &agreed {
            self.uncertain = Some(format!("{what}: {e}"));
        }
        agreed
    }

    /// Settle a collective scheme call that returned `out` on this member: when every
    /// member of the set returned, `out` is handed back (the caller agrees on it as usual);
    /// when this member failed and the others did not return within `abort_timeout`
    /// seconds — they wait inside the plugin for a message this member will never send —
    /// the job is ended with MPI_Abort, naming the plugin, the call and the dataset. A
    /// hang would lose the whole allocation; the abort at least says why.
    fn settle_call<T>(
        &self,
        host: &MpiHost,
        scheme: &LoadedScheme,
        call: &'static str,
        dataset: &str,
        out: std::result::Result<T, scr_plugin::PluginError>,
    ) -> std::result::Result<T, RegistryError> {
        let out = out.map_err(|e| scheme.error(call, e));
        let grace = std::time::Duration::from_secs(self.config.get(settings::ABORT_TIMEOUT));
        if !host.settle(out.is_err(), grace) {
            let why = out
                .as_ref()
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            tracing::error!("{why}");
            tracing::error!(
                "{call} of dataset {dataset} failed on this rank while other members of its redundancy set did not return within {} s (abort_timeout); ending the job with MPI_Abort so that none of them waits forever",
                grace.as_secs()
            );
            self.world.abort(ABORT_CODE);
        }
        out
    }

    fn store_dir(&self, store: &str) -> PathBuf {
        let view = self
            .config
            .store(store)
            .map(|s| self.config.store_view(s))
            .unwrap_or(View::Node);
        node_local(
            Path::new(store),
            self.simulated && view == View::Node,
            &self.node,
        )
        .join(&self.user)
        .join(format!("scr.{}", self.job_id))
    }

    /// Create this job's directory in `store` (see [`create_private_dir`]). A store with
    /// `mkdir = false` (SCR's MKDIR=0: a job prolog or the burst buffer makes it) must
    /// hold it already; it is checked all the same.
    fn create_store_dir(&self, store: &str) -> Result<()> {
        let dir = self.store_dir(store);
        if self.config.store(store).is_some_and(|s| !s.mkdir) && !dir.is_dir() {
            return Err(ScrError::Usage(format!(
                "store {store}: mkdir = false, but the job's directory {} does not exist on node {}; create it before the job starts (as a job prolog would) or set mkdir = true",
                dir.display(),
                self.node
            )));
        }
        create_private_dir(Path::new(store), &dir)
    }

    fn dataset_dir(&self, store: &str, id: u64) -> PathBuf {
        self.store_dir(store).join(format!("scr.dataset.{id}"))
    }

    /// Whether this rank is the first (lowest) on its node.
    fn first_on_node(&self) -> bool {
        self.node_ranks.first() == Some(&self.rank)
    }

    /// This rank's failure-group value for group `name`.
    fn group_value(&self, name: &str) -> Result<String> {
        self.config
            .failure_group(name, &self.node, self.rank)
            .map_err(ScrError::Usage)
    }

    /// Build a set communicator and its host services for `set` (collective over world:
    /// every rank passes its own set and failure-group value, or `None` to take no
    /// part). The members' group values are gathered within the set: O(set size).
    fn set_host(&self, set: Option<&Set>, group: &str) -> Option<MpiHost> {
        // (a set id from a filemap or another rank's record that is no MPI color —
        // negative as an i32 — leaves this rank without a set: the caller's agreement
        // then refuses the dataset on every rank, where MPI would abort this rank alone)
        let set = set.filter(|s| i32::try_from(s.id).is_ok());
        let color = match set {
            Some(s) => mpi::topology::Color::with_value(s.id as i32),
            None => mpi::topology::Color::undefined(),
        };
        let key = set
            .and_then(|s| s.members.iter().position(|&m| m == self.rank))
            .unwrap_or(0) as i32;
        let comm = comm::split_by_color_with_key(&self.world, color, key)?;
        let set = set?;
        let groups = sets::gather_strings(&comm, group);
        Some(MpiHost::new(comm, set.members.clone(), groups, self.rank))
    }

    fn create_reddescs(&mut self) -> Result<()> {
        for i in 0..self.config.checkpoints.len() {
            let d = self.config.descriptor(i);
            if !d.checkpoint.enabled {
                continue;
            }
            let value = self.agree(self.group_value(&d.group.0))?;
            let (mine, comm, groups) =
                sets::form_my_set(&self.world, &value, d.set_size() as usize);
            let host = MpiHost::new(comm, mine.members.clone(), groups, self.rank);
            let member = mine
                .members
                .iter()
                .position(|&m| m == self.rank)
                .expect("a member of its own set") as u32;
            let config =
                d.scheme_config(&self.config, mine.members.len() as u32, member, self.rank);
            // a scheme may refuse one set (e.g. its size) but not another: agree first
            let scheme = self.agree(self.registry.new_scheme(&config).map_err(ScrError::from))?;
            let record = DescriptorRecord {
                index: i,
                scheme: d.scheme.0.clone(),
                params: d
                    .params
                    .iter()
                    .map(|(k, v, _)| (k.clone(), v.clone()))
                    .collect(),
                group: d.group.0.clone(),
                store: d.store_path.clone(),
                set_id: mine.id,
                members: mine.members.clone(),
            };
            // agreed by every rank, whatever its own answer, so that every member of a
            // set makes the same call
            let hashes_in_apply = self.all_agree(scheme.raw().crc32_in_apply());
            self.reddescs.push(RedDesc {
                index: i,
                interval: d.checkpoint.interval,
                record,
                scheme,
                host,
                hashes_in_apply,
            });
        }
        Ok(())
    }

    /// The nodes file (Files chapter): how many nodes this run uses, written by the
    /// first rank of each node into its control directory.
    fn write_nodes_file(&self) -> Result<()> {
        let mut written = Ok(());
        if self.first_on_node() {
            let path = self.cntl_dir.join("nodes.scr");
            written = crate::state::write_private_state(
                &path,
                "nodes",
                &BTreeMap::from([("NODES", self.node_count as usize)]),
            )
            .map_err(io_err(&path));
        }
        self.agree(written)
    }

    // ----- output -----

    /// The descriptor for checkpoint id `id`: largest interval dividing it.
    fn reddesc_for(&self, checkpoint_id: Option<u64>) -> usize {
        let id = checkpoint_id.unwrap_or(1);
        self.reddescs
            .iter()
            .enumerate()
            .filter(|(_, d)| id.is_multiple_of(d.interval))
            .max_by_key(|(_, d)| d.interval)
            .map(|(i, _)| i)
            .expect("validation guarantees an interval-1 descriptor")
    }

    /// Begin a dataset (collective). Old datasets are evicted from its store first, as
    /// the store's `count` requires.
    pub fn start_output(&mut self, name: &str, flags: OutputFlags) -> Result<()> {
        let _log = self.span.clone().entered();
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
        let pre = self.output_refused(name, flags, refused);
        self.begin("start_output", pre)?;
        if let Some(pt) = self.passthrough.as_mut() {
            pt.output = Some(name.to_string());
            return Ok(());
        }
        // background flushes finished everywhere are recorded before eviction looks
        // at what the prefix holds
        self.poll_flushes();
        let checkpoint_id = flags.checkpoint.then_some(self.next_checkpoint);
        let desc = self.reddesc_for(checkpoint_id);
        let store = self.reddescs[desc].record.store.clone();
        let id = self.next_dataset;
        let record = DatasetRecord {
            id,
            name: name.to_string(),
            checkpoint_id,
            output: flags.output,
            complete: false,
            descriptor: self.reddescs[desc].record.clone(),
            files: Vec::new(),
            redundancy: Vec::new(),
            world_size: self.size,
        };
        self.evict(&store, 1, None)?;
        let local = self.open_dataset(&store, &record);
        if let Err(e) = self.agree(local) {
            // nothing was written into the dataset yet: forget it on every rank, so the
            // ranks stay in step and the next start_output may try again
            self.filemap.datasets.remove(&id);
            let _ = std::fs::remove_dir(self.dataset_dir(&store, id));
            let undone = self.save_filemap();
            self.agree_changed("start_output", undone)?;
            return Err(e);
        }
        let dir = self.dataset_dir(&store, id);
        let redundancy_names = self.reddescs[desc]
            .scheme
            .raw()
            .redundancy_files(&cache::dataset_files(&record, &dir))
            .into_result()
            .map(|v| v.iter().map(|p| relative_to(&dir, p)).collect())
            .unwrap_or_default();
        self.output = Some(Output {
            record,
            desc,
            started: Instant::now(),
            redundancy_names,
            routed: HashSet::new(),
        });
        self.info(&format!(
            "start_output {name}: dataset {id}, checkpoint {checkpoint_id:?}, descriptor {}",
            self.reddescs[desc].index
        ));
        Ok(())
    }

    /// Why `start_output(name, flags)` is refused on this rank, if it is (collective: rank
    /// 0's arguments are broadcast). This rank's own arguments and state come first (the
    /// more precise reason), then whether they are rank 0's; `refused` is a reason the
    /// caller found already (an API-level check).
    fn output_refused(
        &self,
        name: &str,
        flags: OutputFlags,
        refused: Option<String>,
    ) -> Result<()> {
        let mine = format!(
            "{name}\0{}{}",
            u8::from(flags.checkpoint),
            u8::from(flags.output)
        );
        let root =
            String::from_utf8_lossy(&broadcast_bytes(&self.world, mine.as_bytes())).into_owned();
        if let Some(why) = refused {
            Err(ScrError::Usage(format!("start_output: {why}")))
        } else if name.len() >= 1024 {
            Err(ScrError::Usage(format!(
                "start_output: the dataset name is {} bytes; names must be shorter than SCR_MAX_FILENAME (1024)",
                name.len()
            )))
        } else if self.reading_prefix || self.restart.is_some() {
            Err(ScrError::Usage(
                "start_output: a restart is in progress; call complete_restart first".into(),
            ))
        } else if self.writing() {
            Err(ScrError::Usage(
                "start_output: a dataset is already being written; call complete_output first"
                    .into(),
            ))
        } else if name.is_empty() || name.contains('/') {
            Err(ScrError::Usage(format!(
                "start_output: dataset name `{name}` must be non-empty and contain no `/`"
            )))
        } else if root != mine {
            let (root_name, root_flags) = root.split_once('\0').unwrap_or((&root, ""));
            Err(ScrError::Usage(format!(
                "start_output: rank {} passed dataset `{name}` with flags (checkpoint, output) {}{}, rank 0 passed `{root_name}` with {root_flags}; every process must pass the same name and flags",
                self.rank,
                u8::from(flags.checkpoint),
                u8::from(flags.output)
            )))
        } else {
            Ok(())
        }
    }

    /// Whether a dataset is being written (between start_output and complete_output).
    fn writing(&self) -> bool {
        self.output.is_some()
            || self
                .passthrough
                .as_ref()
                .is_some_and(|p| p.output.is_some())
    }

    /// This rank's part of `start_output`: create the directory, record the dataset in
    /// the filemap.
    fn open_dataset(&mut self, store: &str, record: &DatasetRecord) -> Result<()> {
        self.create_store_dir(store)?;
        let dir = self.dataset_dir(store, record.id);
        // every level from the store to the dataset directory 0700, none a link
        create_private_dir(Path::new(store), &dir)?;
        self.filemap.datasets.insert(record.id, record.clone());
        self.save_filemap()
    }

    /// The name a dataset started without one gets (SCR's `SCR_Start_output(NULL, ..)`):
    /// `scr.dataset.<id>`, with the id it will have.
    pub fn default_dataset_name(&self) -> String {
        format!("scr.dataset.{}", self.next_dataset)
    }

    /// SCR's legacy `SCR_Start_checkpoint`: a checkpoint named `ckpt.<checkpoint id>`.
    pub fn start_checkpoint(&mut self) -> Result<String> {
        let _log = self.span.clone().entered();
        let name = format!("ckpt.{}", self.next_checkpoint);
        self.start_output(
            &name,
            OutputFlags {
                checkpoint: true,
                output: false,
            },
        )?;
        Ok(name)
    }

    /// The prefix-relative form of an application file name, refusing names that leave
    /// the prefix (and so the dataset directory).
    fn relative_name(&self, name: &Path) -> Result<PathBuf> {
        let cwd = std::env::current_dir().map_err(io_err(Path::new(".")))?;
        let full = lexical_normalize(&cwd.join(name));
        let prefix = lexical_normalize(&self.prefix);
        match full.strip_prefix(&prefix) {
            Ok(rel) if !rel.as_os_str().is_empty() => Ok(rel.to_path_buf()),
            _ => Err(ScrError::Usage(format!(
                "route_file: `{}` resolves to {}, outside the prefix directory {}; name files inside the prefix",
                name.display(),
                full.display(),
                prefix.display()
            ))),
        }
    }

    /// Where to write (during output) or read (during restart) file `name` (relative to
    /// the working directory, or absolute; it must lie inside the prefix). During output
    /// the file is recorded in the filemap before this returns, and its parent
    /// directories are created.
    pub fn route_file(&mut self, name: &Path) -> Result<PathBuf> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("route_file");
        use std::os::unix::ffi::OsStrExt;
        self.usable("route_file")?;
        if name.as_os_str().is_empty() {
            return Err(ScrError::Usage(
                "route_file: the file name is empty; name a file inside the prefix".into(),
            ));
        }
        if name.as_os_str().as_bytes().contains(&0) {
            return Err(ScrError::Usage(format!(
                "route_file: `{}` contains a NUL byte, which no file name may hold",
                name.display()
            )));
        }
        if let Some(pt) = &self.passthrough {
            // disabled: the application's own path (absolute), read and written in
            // place; during output its directories are made, as they are in cache, so
            // the application behaves the same either way
            let cwd = std::env::current_dir().map_err(io_err(Path::new(".")))?;
            let path = lexical_normalize(&cwd.join(name));
            if pt.output.is_some() {
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).map_err(io_err(parent))?;
                }
            }
            return Ok(path);
        }
        let rel = self.relative_name(name)?;
        if rel
            .components()
            .next()
            .is_some_and(|c| c.as_os_str() == ".scr")
        {
            return Err(ScrError::Usage(format!(
                "route_file: `{}` is inside the prefix's .scr directory, which holds scr-rs's own state (index, flush file, summaries); name files elsewhere in the prefix",
                name.display()
            )));
        }
        if self.output.is_some() {
            self.route_output(&rel)
        } else {
            self.route_restart(name, &rel)
        }
    }

    /// [`Runtime::route_file`] during output: the path of `rel` in this dataset's cache
    /// directory, recorded and with its directories made (private, never through a link).
    fn route_output(&mut self, rel: &Path) -> Result<PathBuf> {
        let key = rel.to_string_lossy().into_owned();
        let out = self.output.as_ref().expect("during output");
        let dir = self.dataset_dir(&out.record.descriptor.store, out.record.id);
        let path = dir.join(rel);
        // a name the scheme uses for this rank's redundancy data would be overwritten by
        // it (other ranks' names, and names that depend on the files, are checked at
        // complete_output)
        if out.redundancy_names.contains(&key) {
            return Err(ScrError::Usage(format!(
                "route_file: `{key}` is the name of this rank's redundancy file under scheme {}; choose another name",
                self.reddescs[out.desc].record.scheme
            )));
        }
        // nested names: no directory level that exists is a link (or anyone else's), nor
        // is the file itself a link (the application would write through it); judged
        // before the name is recorded, so a refused name leaves no record
        if let Some(parent) = path.parent() {
            scr_plugin::cachefs::check_dirs(&dir, parent, crate::registry::effective_uid())
                .map_err(cachefs_err)?;
        }
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(ScrError::Usage(format!(
                "route_file: {} is a symbolic link; it is not written through: remove it",
                path.display()
            )));
        }
        self.record_routed(&key)?;
        // each directory of a nested name 0700, never through a link in place of one
        // (from the dataset directory down: start_output made and judged the levels above
        // it, and this runs per file)
        if let Some(parent) = path.parent() {
            scr_plugin::cachefs::create_dirs(&dir, parent, crate::registry::effective_uid())
                .map_err(cachefs_err)?;
        }
        Ok(path)
    }

    /// Record routed file `key` of the dataset being written, once: in the filemap's
    /// journal (one appended record, not a rewrite of the whole filemap, which grows with
    /// every file). A name that could not be recorded is refused and may be routed again.
    fn record_routed(&mut self, key: &str) -> Result<()> {
        let out = self.output.as_mut().expect("during output");
        if !out.routed.insert(key.to_string()) {
            return Ok(());
        }
        let file = FileRecord {
            name: key.to_string(),
            ..FileRecord::default()
        };
        out.record.files.push(file.clone());
        let id = out.record.id;
        let appended = match self.filemap.datasets.get_mut(&id) {
            Some(d) => {
                d.files.push(file.clone());
                self.filemap_journal
                    .append(&self.filemap, &self.cntl_dir, id, &file)
                    .map_err(io_err(
                        &self.cntl_dir.join(Filemap::journal_name(self.rank)),
                    ))
            }
            None => {
                // (start_output records the dataset first: not reached) a full snapshot,
                // never a journal record whose dataset the snapshot lacks
                self.filemap.datasets.insert(id, out.record.clone());
                self.save_filemap()
            }
        };
        if appended.is_err() {
            let out = self.output.as_mut().expect("during output");
            out.routed.remove(key);
            out.record.files.retain(|f| f.name != key);
            if let Some(d) = self.filemap.datasets.get_mut(&id) {
                d.files.retain(|f| f.name != key);
            }
        }
        appended
    }

    /// [`Runtime::route_file`] during restart: where file `rel` of the checkpoint being
    /// read is (in the prefix, or in cache), refused when it is not one of its files.
    fn route_restart(&self, name: &Path, rel: &Path) -> Result<PathBuf> {
        let key = rel.to_string_lossy();
        let not_a_file = |checkpoint: &str| {
            ScrError::Usage(format!(
                "route_file: `{}` is not a file of checkpoint {checkpoint} on rank {}",
                name.display(),
                self.rank
            ))
        };
        if let (true, Some(p)) = (self.reading_prefix, &self.prefix_restart) {
            return p
                .files
                .get(key.as_ref())
                .cloned()
                .ok_or_else(|| not_a_file(&p.name));
        }
        if let Some(id) = self.restart {
            let rec = &self.filemap.datasets[&id];
            if rec.files.iter().any(|f| f.name == key) {
                return Ok(self.dataset_dir(&rec.descriptor.store, id).join(rel));
            }
            return Err(not_a_file(&rec.name));
        }
        Err(ScrError::Usage(
            "route_file: call start_output or start_restart first".into(),
        ))
    }

    /// Finish the dataset (collective): it is kept only if every rank says `valid`, its
    /// files exist, and the redundancy scheme applied everywhere; otherwise it is deleted
    /// on every rank. Returns whether it was kept.
    pub fn complete_output(&mut self, valid: bool) -> Result<bool> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("complete_output");
        let pre = if self.writing() {
            Ok(())
        } else {
            Err(ScrError::Usage(
                "complete_output: no dataset is being written; call start_output first".into(),
            ))
        };
        self.begin("complete_output", pre)?;
        if let Some(pt) = self.passthrough.as_mut() {
            pt.output = None;
            return Ok(self.all_agree(valid));
        }
        self.poll_flushes();
        let mut out = self.output.take().expect("checked by every rank");
        let _dataset = crate::log::dataset_span(out.record.id).entered();
        let dir = self.dataset_dir(&out.record.descriptor.store, out.record.id);
        let crc = self.config.get(settings::CRC_ON_COPY);
        let buf = self.config.get(settings::FILE_BUF_SIZE).max(4096) as usize;
        // With a scheme that hashes the files in the pass it makes over them anyway
        // (`crc32_in_apply`), the CRC32s come back from its apply and the files are not
        // read here: one read of the data instead of two (the configuration is the same
        // on every rank, the scheme's answer agreed at init).
        let fused = crc && self.reddescs[out.desc].hashes_in_apply;
        let local_ok = valid && self.stat_output_files(&mut out, &dir, crc && !fused, buf);
        let named = self.check_output_names(&mut out, &dir, local_ok);
        if let Some(c) = named.clash {
            self.drop_output(&out.record)?;
            return Err(ScrError::Usage(format!(
                "complete_output {}: {c}; dataset discarded",
                out.record.name
            )));
        }
        let applied = if named.all_valid {
            self.apply_output(&mut out, &dir, fused, buf)
        } else {
            Err(String::new())
        };
        let kept = self.all_agree(applied.is_ok());
        // every rank returns the same error: the first failing rank's, by rank
        let apply_error = if named.all_valid && !kept {
            first_failure(&self.world, applied.err().as_deref())
                .map(|(r, e)| format!("on rank {r}: {e}"))
        } else {
            None
        };
        if !kept {
            return self.discard_output(&out, named, apply_error);
        }
        self.keep_output(&mut out)?;
        if self.rank == 0 {
            if let Err(e) = prefix::FlushFile::add_location(&self.prefix, out.record.id, "CACHE") {
                tracing::warn!("{e}");
            }
        }
        self.maybe_flush(&out.record)?;
        self.info(&format!(
            "complete_output {}: kept, {:.3} s",
            out.record.name,
            out.started.elapsed().as_secs_f64()
        ));
        if out.record.checkpoint_id.is_some() {
            self.exit_if_halted();
        }
        Ok(true)
    }

    /// Delete a refused output's files and record on every rank (collective): what a
    /// clash or a failed commit leaves of complete_output.
    fn drop_output(&mut self, rec: &DatasetRecord) -> Result<()> {
        let local = self.delete_dataset(rec);
        self.dataset_done(rec.id);
        self.agree_changed("complete_output", local)
    }

    /// Discard a dataset that is not kept (collective: every rank is here alike) and say
    /// why: a naming error, the first failing rank's apply error, or a rank said invalid.
    fn discard_output(
        &mut self,
        out: &Output,
        named: NameCheck,
        apply_error: Option<String>,
    ) -> Result<bool> {
        // what the scheme wrote before a failed apply goes too, not only the names
        // it declared (collective: every rank is in this branch alike)
        let local = self.discard_failed_apply(named.all_valid.then_some(out.desc), &out.record);
        self.dataset_done(out.record.id);
        self.agree_changed("complete_output", local)?;
        match (named.naming_error, apply_error) {
            (Some(e), _) => Err(ScrError::Usage(format!(
                "complete_output {}: dataset discarded: {e}",
                out.record.name
            ))),
            (None, Some(e)) => Err(ScrError::Collective(format!(
                "complete_output {}: redundancy could not be applied, dataset discarded: {e}",
                out.record.name
            ))),
            (None, None) => {
                self.info(&format!(
                    "complete_output {}: a rank said invalid, dataset discarded",
                    out.record.name
                ));
                Ok(false)
            }
        }
    }

    /// Record the size, mode, mtime and (with `crc`) CRC32 of each routed file of `out`
    /// as it is in `dir`; false, with a warning naming the file, when one is missing or
    /// unreadable (this rank's part is then invalid).
    fn stat_output_files(&self, out: &mut Output, dir: &Path, crc: bool, buf: usize) -> bool {
        for f in &mut out.record.files {
            match cache::stat_file(&dir.join(&f.name), crc, buf) {
                Ok(meta) => {
                    f.size = meta.size;
                    f.mode = meta.mode;
                    f.mtime = meta.mtime;
                    f.crc32 = meta.crc32;
                }
                Err(e) => {
                    tracing::warn!("rank {}: {}: {e}", self.rank, f.name);
                    return false;
                }
            }
        }
        true
    }

    /// Check the names every rank declares and record the redundancy files before they
    /// exist (collective). The names a rank declares are what it routed and, when its
    /// files are there (`local_ok`), the redundancy files the scheme will write (naming is
    /// local to each rank). Two ranks writing one name would overwrite each other (in
    /// cache on a shared node, and in the prefix), as would a routed file named like
    /// another rank's redundancy file: refuse the dataset rather than lose one of them.
    /// Checked by a distributed hash (see names.rs: O(own names) bytes per rank, not
    /// O(P)). Why the dataset is refused is the same on every rank: the first owner's
    /// clash (reductions on the failure path only).
    fn check_output_names(&mut self, out: &mut Output, dir: &Path, local_ok: bool) -> NameCheck {
        let routed: Vec<String> = out.record.files.iter().map(|f| f.name.clone()).collect();
        let scheme_name = self.reddescs[out.desc].record.scheme.clone();
        let redundancy: Option<Result<Vec<String>>> = local_ok.then(|| {
            let rd = &self.reddescs[out.desc];
            let ds = cache::dataset_files(&out.record, dir);
            rd.scheme
                .raw()
                .redundancy_files(&ds)
                .into_result()
                .map_err(|e| ScrError::from(rd.scheme.error("redundancy_files", e)))
                .map(|red| red.iter().map(|s| relative_to(dir, s)).collect())
        });
        let declared = match &redundancy {
            Some(Ok(red)) => red.as_slice(),
            _ => &[],
        };
        let clashes = names::check(&self.world, &routed, declared, &scheme_name);
        let all_valid =
            self.all_agree(local_ok && clashes.routed.is_none() && clashes.redundancy.is_none());
        if !all_valid {
            let clash = first_failure(&self.world, clashes.routed.as_deref()).map(|(_, c)| c);
            let naming_error = match clash {
                None => first_failure(&self.world, clashes.redundancy.as_deref()).map(|(_, e)| e),
                Some(_) => None,
            };
            return NameCheck {
                all_valid,
                clash,
                naming_error,
            };
        }
        // the redundancy files are recorded before they exist, like every file
        let named = redundancy
            .expect("every rank's files are there")
            .and_then(|red| {
                out.record.redundancy = red;
                self.filemap
                    .datasets
                    .insert(out.record.id, out.record.clone());
                self.save_filemap()
            });
        let all_valid = self.all_agree(named.is_ok());
        // why the redundancy files could not be named and recorded
        let naming_error = (!all_valid)
            .then(|| {
                let mine = named.err().map(|e| e.to_string());
                first_failure(&self.world, mine.as_deref())
                    .map(|(r, e)| format!("on rank {r}: {e}"))
            })
            .flatten();
        NameCheck {
            all_valid,
            clash: None,
            naming_error,
        }
    }

    /// Run the scheme's apply on this rank's files (its part of a collective call; not
    /// agreed: the caller agrees) and record the redundancy files it wrote and, from a
    /// scheme that hashes in apply (`fused`), the files' CRC32s. The error says why.
    fn apply_output(
        &self,
        out: &mut Output,
        dir: &Path,
        fused: bool,
        buf: usize,
    ) -> std::result::Result<(), String> {
        let rd = &self.reddescs[out.desc];
        let ds = cache::dataset_files(&out.record, dir);
        let host = scr_plugin::host_ref(&rd.host);
        let result = if fused {
            rd.scheme.raw().apply_with_crc(host, &ds).into_result()
        } else {
            rd.scheme
                .raw()
                .apply(host, &ds)
                .into_result()
                .map(|redundancy| scr_plugin::Applied {
                    redundancy,
                    crc32: Default::default(),
                })
        };
        let label = format!("{} ({})", out.record.id, out.record.name);
        let call = if fused { "apply_with_crc" } else { "apply" };
        let done = self
            .settle_call(&rd.host, &rd.scheme, call, &label, result)
            .map_err(|e| e.to_string())?;
        out.record.redundancy = done
            .redundancy
            .iter()
            .map(|s| relative_to(dir, s))
            .collect();
        if fused {
            self.record_crcs(out.desc, &mut out.record, dir, &done.crc32, buf)?;
        }
        Ok(())
    }

    /// Keep the applied dataset (collective): the keep decision is only final once every
    /// rank recorded the dataset as complete; a rank that could not (a full control
    /// directory, say) makes every rank discard it, while the previous checkpoint is still
    /// in cache. Then the checkpoint is counted and logged, and older datasets evicted.
    fn keep_output(&mut self, out: &mut Output) -> Result<()> {
        let committed = self.commit_dataset(out);
        if !self.all_agree(committed.is_ok()) {
            // every rank returns the same error: the first failing rank's
            let why = committed.err().map(|e| e.to_string());
            let why = first_failure(&self.world, why.as_deref())
                .map(|(r, e)| format!("on rank {r}: {e}"))
                .unwrap_or_default();
            out.record.complete = false;
            self.drop_output(&out.record)?;
            return Err(ScrError::Collective(format!(
                "complete_output {}: the dataset could not be recorded as complete {why}; it is discarded on every rank, and the previous checkpoint stays the restart candidate",
                out.record.name
            )));
        }
        if let Some(c) = out.record.checkpoint_id {
            self.next_checkpoint = c + 1;
            let bytes: u64 = out.record.files.iter().map(|f| f.size).sum();
            self.checkpoint_done(out.started);
            let mut total = 0u64;
            comm::all_reduce_into(&self.world, &bytes, &mut total, SystemOperation::sum());
            self.log_event(crate::events::Event::Checkpoint {
                name: out.record.name.clone(),
                id: out.record.id,
                bytes: total,
                seconds: out.started.elapsed().as_secs_f64(),
            });
        }
        self.dataset_done(out.record.id);
        let store = out.record.descriptor.store.clone();
        // the dataset is kept whatever eviction does: a failure there marks the state
        // uncertain (every later call says so) but does not unsay the keep
        if let Err(e) = self.evict(&store, 0, Some(out.record.id)) {
            self.warn(&format!(
                "complete_output {}: kept, but evicting older datasets failed: {e}",
                out.record.name
            ));
        }
        Ok(())
    }

    /// Record in `rec` the CRC32s a scheme computed during its apply (`crcs`, one per
    /// file of `rec`, in order), reading each file it gave none for. A list of another
    /// length breaks the contract of `apply_with_crc`: refused, naming the plugin.
    fn record_crcs(
        &self,
        desc: usize,
        rec: &mut DatasetRecord,
        dir: &Path,
        crcs: &[abi_stable::std_types::ROption<u32>],
        buf: usize,
    ) -> std::result::Result<(), String> {
        if !crcs.is_empty() && crcs.len() != rec.files.len() {
            return Err(format!(
                "rank {}: plugin {} returned {} CRC32s from apply_with_crc for {} files",
                self.rank,
                self.reddescs[desc].scheme.file(),
                crcs.len(),
                rec.files.len()
            ));
        }
        for (i, f) in rec.files.iter_mut().enumerate() {
            f.crc32 = match crcs.get(i).and_then(|c| c.into_option()) {
                Some(c) => Some(c),
                None => Some(
                    cache::file_crc32(&dir.join(&f.name), buf)
                        .map_err(|e| format!("rank {}: {}: {e}", self.rank, f.name))?,
                ),
            };
        }
        Ok(())
    }

    /// This rank's part of keeping a dataset: mark it complete in the filemap.
    fn commit_dataset(&mut self, out: &mut Output) -> Result<()> {
        self.injected_failure("commit", out.record.id)?;
        out.record.complete = true;
        self.filemap
            .datasets
            .insert(out.record.id, out.record.clone());
        self.save_filemap()
    }

    /// Dataset `id` is finished (kept or not): the next one gets a new id, and rank 0
    /// records the ids in the prefix so that later runs never reuse them, even when every
    /// cache is lost.
    fn dataset_done(&mut self, id: u64) {
        self.next_dataset = id + 1;
        if self.rank == 0 {
            let ids = Ids {
                dataset: id,
                checkpoint: self.next_checkpoint.saturating_sub(1),
            };
            let path = Ids::path(&self.prefix);
            if let Err(e) = crate::state::write_state(&path, Ids::KIND, &ids) {
                tracing::warn!("{}: {e}", path.display());
            }
        }
    }

    fn checkpoint_done(&mut self, started: Instant) {
        self.policy.last_cost = started.elapsed().as_secs_f64();
        self.policy.last_end = Instant::now();
        if self.rank == 0 {
            // a read-modify-write under the prefix lock: a concurrent `scr halt` must
            // neither lose this decrement nor have its own change lost
            let decremented =
                Halt::update(&self.prefix, |halt| match halt.checkpoints_left.as_mut() {
                    Some(n) => {
                        *n -= 1;
                        (true, ())
                    }
                    None => (false, ()),
                });
            if let Err(e) = decremented {
                tracing::warn!("{e}; CheckpointsLeft not decremented");
            }
        }
    }

    // ----- restart -----

    /// Fetch when the cache holds no checkpoint (or `current` chose one only the prefix
    /// holds), then flush the restart checkpoint when `flush_on_restart` asks for it.
    fn settle_restart(&mut self, flush_on_restart: bool) -> Result<()> {
        let wanted = self.wanted.take();
        if self.restart_candidate().is_none() || wanted.is_some() {
            if self.config.get(settings::FETCH) {
                self.fetch(wanted.as_deref())?;
            } else {
                self.open_prefix_restart(wanted.as_deref())?;
            }
        }
        if flush_on_restart && self.config.get(settings::FLUSH_ON_RESTART) {
            self.flush_newest("flush_on_restart")?;
        }
        Ok(())
    }

    /// SCR 3.x's `SCR_Have_restart` (collective): the first call after an init with
    /// [`InitOptions::fetch_at_have_restart`] fetches from the prefix (the checkpoint
    /// `current` named, else the newest when no cache holds one); every call then
    /// answers like [`Runtime::have_restart`].
    pub fn have_restart_fetching(&mut self) -> Result<Option<String>> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("have_restart");
        if self.fetch_pending && self.passthrough.is_none() {
            self.usable("have_restart")?;
            self.fetch_pending = false;
            self.settle_restart(false)?;
        }
        Ok(self.have_restart())
    }

    /// Whether a dataset is being written or a checkpoint read (between start and
    /// complete): outside both, SCR 3.x's `SCR_Route_file` returns the name unchanged.
    pub fn in_dataset(&self) -> bool {
        self.output.is_some()
            || self.restart.is_some()
            || self.reading_prefix
            || self
                .passthrough
                .as_ref()
                .is_some_and(|p| p.output.is_some())
    }

    /// The newest complete checkpoint this run can restart from, if any.
    pub fn have_restart(&self) -> Option<String> {
        self.restart_candidate()
            .map(|id| self.filemap.datasets[&id].name.clone())
            .or_else(|| self.prefix_restart.as_ref().map(|p| p.name.clone()))
    }

    fn restart_candidate(&self) -> Option<u64> {
        self.filemap
            .datasets
            .values()
            .filter(|d| d.complete && d.checkpoint_id.is_some() && !self.skipped.contains(&d.id))
            .max_by_key(|d| d.checkpoint_id)
            .map(|d| d.id)
    }

    /// Begin reading the restart checkpoint; returns its name.
    pub fn start_restart(&mut self) -> Result<String> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("start_restart");
        self.usable("start_restart")?;
        if self.output.is_some() || self.restart.is_some() || self.reading_prefix {
            return Err(ScrError::Usage(
                "start_restart: another output or restart is in progress".into(),
            ));
        }
        if let (None, Some(p)) = (self.restart_candidate(), &self.prefix_restart) {
            self.reading_prefix = true;
            return Ok(p.name.clone());
        }
        let id = self.restart_candidate().ok_or_else(|| {
            ScrError::Usage(
                "start_restart: no checkpoint to restart from (have_restart said none)".into(),
            )
        })?;
        self.restart = Some(id);
        Ok(self.filemap.datasets[&id].name.clone())
    }

    /// Finish reading (collective). If any rank says `!valid`, this checkpoint is passed
    /// over and `have_restart` offers the next older one. Returns whether all were valid.
    pub fn complete_restart(&mut self, valid: bool) -> Result<bool> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("complete_restart");
        if self.reading_prefix {
            let agreed = self.begin("complete_restart", Ok(()));
            self.reading_prefix = false;
            agreed?;
            let ok = self.all_agree(valid);
            if !ok {
                let p = self.prefix_restart.take().expect("reading it");
                self.warn(&format!(
                    "restart from {} (dataset {}, in the prefix) reported invalid; no older checkpoint is offered from the prefix in this run",
                    p.name, p.id
                ));
            }
            return Ok(ok);
        }
        let pre = self.restart.ok_or_else(|| {
            ScrError::Usage(
                "complete_restart: no restart in progress; call start_restart first".into(),
            )
        });
        let agreed = self.begin("complete_restart", pre);
        // ended either way: a rank that was reading is not left inside a restart that
        // the others failed
        self.restart = None;
        let id = agreed?;
        let ok = self.all_agree(valid);
        if !ok {
            self.skipped.push(id);
            self.warn(&format!(
                "restart from {} reported invalid; falling back to an older checkpoint",
                self.filemap.datasets[&id].name
            ));
        }
        Ok(ok)
    }

    /// Make the named checkpoint the restart candidate, passing over newer ones
    /// (collective: a name some ranks do not know is an error on every rank).
    pub fn current(&mut self, name: &str) -> Result<()> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("current");
        if self.passthrough.is_some() {
            return Ok(());
        }
        if self.fetch_pending {
            self.usable("current")?;
            let cached = self.all_agree(self.id_of(name).is_ok());
            if cached {
                // a checkpoint the cache holds: an earlier call's prefix choice is void
                self.wanted = None;
            } else {
                // only the prefix has it: the pending fetch loads it, and cached
                // datasets written after it are passed over
                let found: std::result::Result<Option<u64>, String> = if self.rank == 0 {
                    prefix::Index::load_or_rebuild(&self.prefix)
                        .map_err(|e| e.to_string())
                        .map(|ix| {
                            ix.fetch_candidates(self.size)
                                .into_iter()
                                .find(|e| e.name == name)
                                .map(|e| e.id)
                        })
                } else {
                    Ok(None)
                };
                let bytes = broadcast_bytes(
                    &self.world,
                    &serde_json::to_vec(&found).expect("serializes"),
                );
                let found: std::result::Result<Option<u64>, String> =
                    serde_json::from_slice(&bytes).unwrap_or(Ok(None));
                let found = found.map_err(|e| {
                    ScrError::Usage(format!(
                        "current: `{name}` is not in cache and the prefix's index cannot be read: {e}"
                    ))
                })?;
                if found.is_none() {
                    return Err(ScrError::Usage(format!(
                        "current: no checkpoint named `{name}` in cache or in the prefix {} (complete, not failed, and written by {} ranks)",
                        self.prefix.display(),
                        self.size
                    )));
                }
                // the named checkpoint is the one restarted: every cached one is passed
                // over (the newer ones as SCR deletes them; older ones too, so that a
                // restart in place from the prefix does not prefer them)
                let cached: Vec<u64> = self.filemap.datasets.keys().copied().collect();
                self.skipped.extend(cached);
                self.wanted = Some(name.to_string());
                return Ok(());
            }
        }
        let id = self.begin("current", self.id_of(name))?;
        let newer: Vec<u64> = self
            .filemap
            .datasets
            .values()
            .filter(|d| d.id > id)
            .map(|d| d.id)
            .collect();
        self.skipped.extend(newer);
        self.skipped.retain(|&s| s != id);
        Ok(())
    }

    /// Forget the named dataset as a restart candidate (its files stay until evicted;
    /// collective, like `current`).
    pub fn drop_dataset(&mut self, name: &str) -> Result<()> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("drop");
        if self.passthrough.is_some() {
            return Ok(());
        }
        let id = self.begin("drop", self.id_of(name))?;
        self.skipped.push(id);
        Ok(())
    }

    /// Delete the named dataset from cache (collective).
    pub fn delete(&mut self, name: &str) -> Result<()> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("delete");
        if self.passthrough.is_some() {
            return Ok(());
        }
        // a name some ranks do not know (or a dataset busy on some) is an error on every
        // rank, agreed before anything is deleted
        let id = self.id_of(name).and_then(|id| {
            if self.restart == Some(id) || self.output.as_ref().is_some_and(|o| o.record.id == id) {
                Err(ScrError::Usage(format!(
                    "delete: dataset `{name}` is being read or written; complete it first"
                )))
            } else if self.flushing_ids().contains(&id) {
                // the background transfer still reads it (on this rank, maybe not on
                // others: agreed below); deleting now would fail the flush
                Err(ScrError::Usage(format!(
                    "delete: dataset `{name}` is being flushed in the background on rank {}; delete it once the flush is done (or at the next run)",
                    self.rank
                )))
            } else {
                Ok(id)
            }
        });
        let id = self.begin("delete", id)?;
        let rec = self.filemap.datasets[&id].clone();
        let local = self.delete_dataset(&rec);
        self.agree_changed("delete", local)
    }

    fn id_of(&self, name: &str) -> Result<u64> {
        self.filemap
            .datasets
            .values()
            .find(|d| d.name == name)
            .map(|d| d.id)
            .ok_or_else(|| ScrError::Usage(format!("no dataset named `{name}` in cache")))
    }

    // ----- policy -----

    /// Whether the application should checkpoint now (collective; decided on rank 0):
    /// every `checkpoint_interval` calls, after `checkpoint_seconds`, while checkpoint
    /// time stays under `checkpoint_overhead` percent, or when a halt condition holds.
    /// With none of these set, always.
    pub fn need_checkpoint(&mut self) -> Result<bool> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("need_checkpoint");
        self.usable("need_checkpoint")?;
        self.poll_flushes();
        self.policy.calls += 1;
        // one broadcast decides (applications may ask every iteration): 0 no, 1 yes, 2 a
        // halt condition holds (SCR checks them here too) — then, with halt_exit, the
        // reason follows and the run ends now
        let mut decision = [0u8];
        let mut halt = None;
        if self.rank == 0 {
            halt = self.halt_check();
            let interval = self.config.get(settings::CHECKPOINT_INTERVAL);
            let seconds = self.config.get(settings::CHECKPOINT_SECONDS);
            let overhead = self.config.get(settings::CHECKPOINT_OVERHEAD);
            let since = self.policy.last_end.elapsed().as_secs_f64();
            let need = if interval == 0 && seconds == 0 && overhead == 0.0 {
                true
            } else {
                (interval > 0 && self.policy.calls.is_multiple_of(interval))
                    || (seconds > 0 && since >= seconds as f64)
                    || (overhead > 0.0 && self.policy.last_cost <= since * overhead / 100.0)
            };
            decision[0] = if halt.is_some() { 2 } else { u8::from(need) };
        }
        comm::broadcast_into(&self.world, 0, &mut decision[..]);
        if decision[0] == 2 && self.config.get(settings::HALT_EXIT) {
            let text = broadcast_bytes(&self.world, halt.unwrap_or_default().as_bytes());
            self.halt_and_exit(String::from_utf8_lossy(&text).into_owned());
        }
        Ok(decision[0] != 0)
    }

    /// Rank 0's view of the halt conditions.
    fn halt_check(&self) -> Option<String> {
        let now = now_secs();
        let margin = self.config.get(settings::HALT_SECONDS) as i64;
        load_halt(&self.prefix).reason(now, margin).or_else(|| {
            // SCR_HALT_SECONDS: stop while there is time left to flush
            let (end, source) = self.allocation_end.as_ref()?;
            (margin > 0 && now >= end - margin).then(|| {
                format!(
                    "{} s left before the allocation ends at {end} (from {source}), within halt_seconds = {margin}",
                    (end - now).max(0)
                )
            })
        })
    }

    /// Whether the run should stop now (collective; a halt condition holds). The reason
    /// is recorded for `finalize`.
    pub fn should_exit(&mut self) -> Result<bool> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("should_exit");
        self.usable("should_exit")?;
        self.poll_flushes();
        match self.agreed_halt_reason() {
            None => Ok(false),
            Some(reason) => {
                if self.rank == 0 {
                    tracing::warn!("should_exit: yes, {reason}");
                }
                if self.halt_reason.is_none() {
                    self.log_event(crate::events::Event::Halt {
                        reason: reason.clone(),
                    });
                }
                self.halt_reason = Some(reason);
                // the run is about to end: its newest checkpoint goes to the prefix now
                // (finalize would otherwise; an application that exits without it
                // still leaves it saved)
                if self.flush_at_end() {
                    self.flush_newest("should_exit")?;
                    // (a background flush dies with a process that exits now: wait)
                    self.wait_flushes(false);
                }
                Ok(true)
            }
        }
    }

    /// Rank 0's view of the halt conditions, on every rank (collective).
    fn agreed_halt_reason(&self) -> Option<String> {
        let reason = if self.rank == 0 {
            self.halt_check()
        } else {
            None
        };
        let text = broadcast_bytes(&self.world, reason.unwrap_or_default().as_bytes());
        let reason = String::from_utf8_lossy(&text).into_owned();
        (!reason.is_empty()).then_some(reason)
    }

    /// With `halt_exit`, a halt condition ends the run inside the library, as SCR's
    /// SCR_HALT_EXIT does: checked at the end of init and after every checkpoint kept
    /// (collective). Every rank finalizes (recording the reason in the halt file),
    /// finalizes MPI and exits with status 0; the application does not return from the
    /// call. Without `halt_exit` the application asks `should_exit`.
    fn exit_if_halted(&mut self) {
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
        self.log_event(crate::events::Event::Halt {
            reason: reason.clone(),
        });
        if self.rank == 0 {
            tracing::warn!(
                "halting the run: {reason} (halt_exit = true: flushing the newest checkpoint, finalizing and exiting)"
            );
        }
        self.halt_reason = Some(reason);
        if let Err(e) = self.finalize() {
            tracing::error!("finalize before the halt exit: {e}");
        }
        mpi_exit::finalize_mpi_and_exit(0)
    }

    /// End the run (collective): records the exit reason in the halt file.
    pub fn finalize(&mut self) -> Result<()> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("finalize");
        if self.finalized {
            return Ok(());
        }
        self.finalized = true;
        if self.passthrough.is_some() {
            return Ok(());
        }
        if let Some(out) = self.output.take() {
            self.warn("finalize: a dataset was still being written; it is discarded");
            if self.uncertain.is_some() {
                // complete_output is refused now; each rank drops its part (no collective
                // step: the ranks' state is uncertain already)
                if let Err(e) = self.delete_dataset(&out.record) {
                    tracing::warn!("{e}");
                }
            } else {
                self.output = Some(out);
                // agreed on every rank; the flushes are waited for and the exit reason
                // recorded all the same
                if let Err(e) = self.complete_output(false) {
                    self.warn(&format!("finalize: discarding the open dataset: {e}"));
                }
            }
        }
        self.wait_flushes(true);
        // a clean finish (or a halt) leaves the newest checkpoint in the prefix, not in
        // node-local cache only; a flush that fails is reported and leaves it cached
        // (scavenge can still save it), never failing finalize
        if self.uncertain.is_none() && self.flush_at_end() {
            if let Err(e) = self.flush_newest("finalize") {
                self.warn(&format!("finalize: flushing the newest checkpoint: {e}"));
            }
            self.wait_flushes(true);
        }
        self.log_event(crate::events::Event::Finalize {
            seconds_total: self.init_started.elapsed().as_secs_f64(),
        });
        if self.rank == 0 {
            // record why the run ended, unless someone set a reason of their own (read
            // and written under the prefix lock, like every halt file update)
            let reason = match &self.halt_reason {
                Some(why) => format!("{FINALIZE_REASON} ({why})"),
                None => FINALIZE_REASON.into(),
            };
            let recorded = Halt::update(&self.prefix, |halt| {
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
    }

    /// Whether `finalize` ran (or the runtime was abandoned).
    pub fn is_finalized(&self) -> bool {
        self.finalized
    }

    /// Give up without finalizing (after an error on this rank): no collective call is
    /// made, and dropping says nothing more.
    pub fn abandon(&mut self) {
        let _log = self.span.clone().entered();
        self.finalized = true;
    }

    /// The fault suite's hook: `SCR_FAULT=<point>:<rank>:<dataset id>` makes `point`
    /// fail on that rank for that dataset, as a full or failing control directory would,
    /// so that failures on one rank only can be tested deterministically.
    pub(super) fn injected_failure(&self, point: &str, id: u64) -> Result<()> {
        match std::env::var("SCR_FAULT") {
            Ok(spec) if spec == format!("{point}:{}:{id}", self.rank) => Err(ScrError::Io {
                path: self.cntl_dir.join(Filemap::file_name(self.rank)),
                source: std::io::Error::other(format!("injected failure ({spec})")),
            }),
            _ => Ok(()),
        }
    }

    /// Save the whole filemap (compacting its journal).
    fn save_filemap(&mut self) -> Result<()> {
        self.filemap_journal
            .save(&self.filemap, &self.cntl_dir)
            .map_err(io_err(&self.cntl_dir.join(Filemap::file_name(self.rank))))
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        // Finalizing is collective; an implicit finalize during a panic could hang, so a
        // runtime dropped without `finalize` only says so.
        if !self.finalized && !std::thread::panicking() {
            tracing::warn!(rank = self.rank, "runtime dropped without finalize");
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
        prefix.join(".scr").join("ids.scr")
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

/// `path` relative to `dir` (as recorded in the filemap); a path outside `dir` unchanged.
pub(super) fn relative_to(dir: &Path, path: &str) -> String {
    let p = Path::new(path);
    p.strip_prefix(dir)
        .unwrap_or(p)
        .to_string_lossy()
        .into_owned()
}

/// `<base>/<node>` when nodes are simulated, else `<base>`.
pub(crate) fn node_local(base: &Path, simulated: bool, node: &str) -> PathBuf {
    if simulated {
        base.join(node)
    } else {
        base.to_path_buf()
    }
}

/// [`Runtime::agree`] before the runtime exists. When some rank failed, every rank
/// learns the first failing rank's error (one gather, on the failure path only), so the
/// reason reaches the application on every rank — not only on the rank that may be
/// killed first when the application aborts.
fn agree_on<T>(world: &SimpleCommunicator, local: Result<T>) -> Result<T> {
    let mut all = 0u8;
    comm::all_reduce_into(
        world,
        &u8::from(local.is_ok()),
        &mut all,
        SystemOperation::min(),
    );
    if all == 1 {
        return local;
    }
    let mine = local.as_ref().err().map(|e| e.to_string());
    let first = first_failure(world, mine.as_deref());
    match local {
        Err(e) => Err(e),
        Ok(_) => Err(ScrError::Collective(match first {
            Some((rank, why)) => {
                format!("another rank failed, this rank stops with it: rank {rank}: {why}")
            }
            None => "another rank failed; this rank stops with it".into(),
        })),
    }
}

/// The first failing rank and its error, given each rank's own (`None`: it did not fail).
/// Collective: every rank calls it, on a path every rank takes (after agreeing that some
/// rank failed). A failure with an empty message still counts (a flag goes with it).
fn first_failure(world: &SimpleCommunicator, mine: Option<&str>) -> Option<(usize, String)> {
    // the lowest failing rank by a min-reduction, then its message broadcast from it:
    // per rank O(log P) steps and one message (was an all-gather of every rank's, O(P))
    let me = if mine.is_some() {
        u64::from(world.rank().unsigned_abs())
    } else {
        u64::MAX
    };
    let first = comm::min_u64(world, me);
    if first == u64::MAX {
        return None;
    }
    let text = comm::broadcast_from(world, first as i32, mine.unwrap_or_default().as_bytes());
    Some((first as usize, String::from_utf8_lossy(&text).into_owned()))
}

/// The halt file, or no conditions (with a warning) when it cannot be read: a damaged
/// halt file must not stop some ranks and not others.
fn load_halt(prefix: &Path) -> Halt {
    Halt::load(prefix).unwrap_or_else(|e| {
        tracing::warn!("{e}; ignoring the halt file");
        Halt::default()
    })
}

/// Create `dir` below `base` (a shared base such as /dev/shm, which other users can
/// write to) one level at a time, each new level with mode 0700, and check every level
/// that already exists: a symbolic link, a directory owned by another user, or one that
/// group or others can write is refused, naming it. Another user could otherwise plant
/// `<base>/<user>` in advance — as a link to a directory of theirs (our checkpoints would
/// be written there) or as an open directory (they could read our checkpoints and forge
/// our filemaps). `base` itself is created (as an ordinary directory) when missing, and
/// judged by [`check_base`].
///
/// Every directory the runtime makes in cache goes through here (job, dataset and nested
/// directories alike), so no level below the base is ever followed through a link; the
/// plugins use the same rules ([`scr_plugin::cachefs`]).
pub(crate) fn create_private_dir(base: &Path, dir: &Path) -> Result<()> {
    if !base.exists() {
        std::fs::create_dir_all(base).map_err(io_err(base))?;
    }
    check_base(base)?;
    scr_plugin::cachefs::create_dirs(base, dir, crate::registry::effective_uid())
        .map_err(cachefs_err)
}

/// A [`scr_plugin::cachefs`] refusal is a usage error (the user must remove what was
/// planted or choose another base); anything else is an I/O error.
fn cachefs_err(e: scr_plugin::cachefs::CacheFsError) -> ScrError {
    use scr_plugin::cachefs::CacheFsError;
    match e {
        CacheFsError::Io { path, source } => ScrError::Io { path, source },
        refused => ScrError::Usage(refused.to_string()),
    }
}

/// A shared base (`cache_base`, `cntl_base`, a store) that someone other than this user
/// can write to must have the sticky bit, as /tmp and /dev/shm do (mode 1777): without
/// it anyone who can write there can rename this user's directory away and put their
/// own in its place at any moment, after every check. The owner of a directory can do
/// that whatever its mode, so the base must also be owned by root or this user.
///
/// The same holds for every ancestor of the base, judged after resolving symbolic links
/// in the configured path (the path itself is the site's or user's choice; where it
/// leads is what others could change): renaming an ancestor moves the whole tree. "Others"
/// are group members unless the group is root's or this user's private group, and all
/// other users.
fn check_base(base: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let real = base.canonicalize().map_err(io_err(base))?;
    let me = crate::registry::effective_uid();
    for at in real.ancestors() {
        let md = std::fs::metadata(at).map_err(io_err(at))?;
        let mode = md.mode() & 0o7777;
        let what = if at == real {
            format!("the shared base {}", at.display())
        } else {
            format!(
                "{}, above the shared base {},",
                at.display(),
                base.display()
            )
        };
        if md.uid() != 0 && me.is_some_and(|u| u != md.uid()) {
            return Err(ScrError::Usage(format!(
                "{what} (mode {mode:04o}) is owned by uid {}, neither root nor this user: its owner could rename or replace this job's directory in it at any time; choose a base owned by root or by you",
                md.uid()
            )));
        }
        let group_writes =
            mode & 0o020 != 0 && md.gid() != 0 && !crate::registry::private_group(md.gid());
        let others_write = mode & 0o002 != 0 || group_writes;
        if others_write && mode & 0o1000 == 0 {
            return Err(ScrError::Usage(format!(
                "{what} (owner uid {}, mode {mode:04o}) can be written by other users and has no sticky bit, so another user could rename or replace this job's directory in it: set the sticky bit (chmod +t {}, as /tmp and /dev/shm are: mode 1777), make it writable by its owner only, or choose another cache_base / cntl_base / store",
                md.uid(),
                at.display()
            )));
        }
    }
    Ok(())
}

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Resolve `.` and `..` without touching the file system (the file may not exist yet).
fn lexical_normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Rank 0 reads the configuration files and broadcasts their contents; every rank then
/// loads from that snapshot (with its own environment), so only one process touches the
/// file system and all see the same files.
fn load_config(world: &SimpleCommunicator, api: Vec<(usize, String)>) -> Result<Config> {
    let mut loader = Loader::from_process();
    if world.rank() == 0 {
        for w in loader.unknown_env() {
            tracing::warn!("{w}");
        }
    }
    loader.api = api;
    let snapshot = if world.rank() == 0 {
        let _ = loader.load();
        serde_json::to_vec(&loader.seen()).expect("a snapshot serializes")
    } else {
        Vec::new()
    };
    let bytes = broadcast_bytes(world, &snapshot);
    let snap: Snapshot = serde_json::from_slice(&bytes).unwrap_or_default();
    loader.snapshot = Some(snap);
    loader.load().map_err(ScrError::Config)
}

/// The effective configuration without where each value came from: what must be the
/// same on every rank.
fn config_fingerprint(config: &Config) -> String {
    let shown = crate::config::render(config);
    // the rendering is valid TOML; reading it back drops the comments naming sources
    match shown.parse::<toml::Table>() {
        Ok(table) => table.to_string(),
        Err(_) => shown,
    }
}

/// Check (collectively) that every rank loaded the same effective configuration. Each
/// rank loads rank 0's files with its own environment, so an `SCR_*` variable set on
/// some nodes only, or a different working directory (the default prefix), would make
/// ranks disagree on stores, schemes or the prefix and fail later in ways that name
/// nothing; this names the first difference. Costs two reductions; the gather runs only
/// when the configurations differ.
fn same_config(world: &SimpleCommunicator, config: &Config) -> Result<()> {
    use std::hash::{Hash as _, Hasher as _};
    let text = config_fingerprint(config);
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    let mine = h.finish();
    let (mut lo, mut hi) = (0u64, 0u64);
    comm::all_reduce_into(world, &mine, &mut lo, SystemOperation::min());
    comm::all_reduce_into(world, &mine, &mut hi, SystemOperation::max());
    if lo == hi {
        return Ok(());
    }
    // (on the mismatch path only: rank 0's text broadcast, compared on every rank, the
    // lowest differing rank found by a min-reduction and its text broadcast — per rank
    // two configurations and O(log P) steps; was an all-gather of every rank's, O(P))
    let first = String::from_utf8_lossy(&broadcast_bytes(world, text.as_bytes())).into_owned();
    let me = if text == first {
        u64::MAX
    } else {
        u64::from(world.rank().unsigned_abs())
    };
    let differing = comm::min_u64(world, me);
    let (rank, other) = if differing == u64::MAX {
        (0, first.clone())
    } else {
        let other = comm::broadcast_from(world, differing as i32, text.as_bytes());
        (
            differing as usize,
            String::from_utf8_lossy(&other).into_owned(),
        )
    };
    let a: Vec<&str> = first.lines().collect();
    let b: Vec<&str> = other.lines().collect();
    let at = (0..a.len().max(b.len()))
        .find(|&i| a.get(i) != b.get(i))
        .unwrap_or(0);
    Err(ScrError::Usage(format!(
        "the effective configuration differs between ranks: rank 0 has `{}` where rank {rank} has `{}`; every rank must see the same configuration files, SCR_* environment and working directory (see `scr config show` on each node)",
        a.get(at).copied().unwrap_or("(nothing)"),
        b.get(at).copied().unwrap_or("(nothing)")
    )))
}
