//! Init: the collective start of a run (configuration, plugins, node, directories, stores
//! and sets, the cache restored).

use super::flush::flusher;
use super::prefix::prefix;
use super::restart::restarter;
use super::restore::restorer;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Instant;

use mpi::topology::SimpleCommunicator;

use super::descriptors::Descriptors;
use super::job::Job;
use super::report::RunReport;
use super::restart::state::RestartState;
use super::topology::Topology;
use super::world::mpi_world::MpiWorld;
use super::world::{Exchange, World};
use super::{
    agree_on, comm, flush, io_err, Cache, Collective, Disabled, InitOptions, Policy, Result,
    Runtime, ScrError, Started, TestHooks, FINALIZE_REASON,
};
use crate::config::settings;
use crate::config::{check_plugins, Config, ConfigErrors, Loader, Snapshot};
use crate::private_dir::create_private_dir;
use crate::registry::Registry;
use crate::state::halt::Halt;

impl Runtime {
    /// Initialise on `world` (normally `MPI_COMM_WORLD`; collective). `api` holds the
    /// configuration calls the application made before init, with their call numbers.
    /// Returns the running runtime, or, when the configuration says `enable = false`, a
    /// [`Disabled`] library (on every rank alike).
    pub fn init(world: &SimpleCommunicator, api: Vec<(usize, String)>) -> Result<Started> {
        Self::init_with(world, api, InitOptions::default())
    }

    /// [`Runtime::init`] with options.
    pub fn init_with(
        world: &SimpleCommunicator,
        api: Vec<(usize, String)>,
        options: InitOptions,
    ) -> Result<Started> {
        let _counted = comm::scope("init");
        // the runtime's own communicator: its messages never meet the application's
        let world: Box<dyn World> = MpiWorld::with_borrowed(world, |w| w.duplicate());
        let mut loader = Loader::from_process();
        loader.api = api;
        // the fault suite's programs name their hooks in the environment they are
        // started with, read here with the rest of it
        let hooks = TestHooks::from_env(&loader.env);
        // a process lost during init (see `ulfm`) unwinds to here: the parts built so far
        // are dropped without MPI calls of their own, and every rank returns the error
        super::ulfm::catch_lost(|| Self::init_in(world, loader, options, hooks))
            .unwrap_or_else(|why| Err(super::ulfm::lost_error("init", &why)))
    }

    /// [`Runtime::init_with`] on any [`World`] (MPI, or threads acting as ranks in the
    /// runtime's own tests) with the configuration `loader` describes (its `api` holds
    /// the application's configuration calls) and the test `hooks` in force (none in
    /// production).
    pub(crate) fn init_in(
        world: Box<dyn World>,
        loader: Loader,
        options: InitOptions,
        hooks: TestHooks,
    ) -> Result<Started> {
        let rank = world.rank();
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
        let recorded_api = loader.api.clone();
        let config = agree_on(&*world, load_config(&*world, loader))?;
        agree_on(&*world, same_config(&*world, &config))?;
        let job = config.get(settings::JOB_ID);
        if !job.is_empty() {
            span.record("job", job.as_str());
        }
        crate::log::set_debug(config.get(settings::DEBUG));
        if !config.get(settings::ENABLE) {
            // SCR_ENABLE=0: nothing is cached, protected, flushed or fetched, and no
            // directory or state file is created; the calls pass through (`Disabled`)
            // and route_file hands back the application's own path
            if rank == 0 {
                tracing::info!(
                    "disabled (enable = false): every call passes through; nothing is cached"
                );
            }
            return Ok(Started::Disabled(Disabled::new(world, config, span)));
        }
        let mut rt = Runtime::unstarted(world, config, span);
        rt.hooks = hooks;
        let started = rt.report.init_started();
        rt.load_plugins()?;
        rt.find_node()?;
        rt.create_job_dirs()?;
        rt.set_up_stores(&recorded_api, options.recovered.as_ref())?;
        rt.restore_at_init(&options)?;
        rt.report_init(started);
        Ok(Started::Running(rt))
    }

    /// The runtime before any collective step of init: configuration and identity only
    /// (no plugin, node, set or directory yet). Dropping it is not a missed finalize.
    fn unstarted(world: Box<dyn World>, config: Config, span: tracing::Span) -> Runtime {
        let rank = world.rank();
        Runtime {
            topo: Topology::unplaced(&*world),
            registry: Registry::default(),
            descs: Descriptors::default(),
            job: Job::new(&config, rank),
            span: span.clone(),
            cache: Cache::new(rank),
            output: None,
            protection: Default::default(),
            hooks: TestHooks::default(),
            restart: RestartState::default(),
            policy: Policy::new(),
            report: RunReport::new(),
            flushing: flush::Flushing::default(),
            world: Collective::new(
                world,
                std::time::Duration::from_secs(config.get(settings::ABORT_TIMEOUT)),
            ),
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
        self.world.agree_on(checked)
    }

    /// This rank's node, the ranks on it and the number of nodes (agreed).
    fn find_node(&mut self) -> Result<()> {
        self.topo = Topology::find(self.world.as_dyn(), &self.config)?;
        Ok(())
    }

    /// This job's control directory on this node (private, every level checked) and the
    /// prefix's `.scr`; a run that ended in finalize left that as the halt file's exit
    /// reason, which a new run starting clears. Agreed.
    fn create_job_dirs(&mut self) -> Result<()> {
        let cntl_base = PathBuf::from(self.config.get(settings::CNTL_BASE));
        self.job.place(&self.config, &self.topo);
        let prefix = self.job.prefix().to_path_buf();
        let local = create_private_dir(&cntl_base, self.job.cntl_dir()).and_then(|()| {
            if self.topo.rank() == 0 {
                let scr = crate::layout::scr_dir(&prefix);
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
        self.world.agree_on(local)
    }

    /// The redundancy descriptors and their sets, a job directory in every store in use
    /// (SCR makes its cache directories in init: a store that cannot be used fails the
    /// start, not a later checkpoint), the nodes file, the recorded configuration calls
    /// and, on rank 0, the allocation's end.
    fn set_up_stores(
        &mut self,
        recorded_api: &[(usize, String)],
        recovered: Option<&super::Recovered>,
    ) -> Result<()> {
        // (the fault suite's: this rank cannot connect its sets for `sockets` at init)
        let injected = self.hooks.failure_at("sockets", self.topo.rank(), 0);
        self.descs = Descriptors::create(
            self.world.as_dyn(),
            &self.config,
            &self.registry,
            &self.topo,
            injected,
        )?;
        let stores: BTreeSet<String> = self
            .descs
            .iter()
            .map(|d| d.record().store.clone())
            .collect();
        let made = stores.iter().try_for_each(|s| self.job.create_store_dir(s));
        self.world.agree_on(made)?;
        self.write_nodes_file()?;
        if self.topo.rank() == 0 {
            // what the application set, for `scr config show` and `explain` to report
            if let Err(e) = crate::config::api::record(self.job.prefix(), recorded_api) {
                self.topo.warn(&format!(
                    "the configuration calls could not be recorded in {} ({e}); `scr config show` will not list them",
                    crate::config::api::record_path(self.job.prefix()).display()
                ));
            }
        }
        if self.topo.rank() == 0 {
            // asked once, on one rank: thousands of ranks each running `squeue` would
            // load the resource manager
            self.report
                .set_allocation_end(crate::walltime::from_config_and_env(&self.config));
            if let Some((end, source)) = self.report.allocation_end() {
                self.topo
                    .info(&format!("the allocation ends at {end} (from {source})"));
            }
            match recovered {
                Some(r) => self.job.log_event(crate::events::Event::Recovery {
                    lost: r.lost.clone(),
                    replaced: r.replaced.clone(),
                    ranks: self.topo.size(),
                    seconds: r.seconds,
                }),
                None => self.job.log_previous_run_failure(),
            }
            self.warn_unpaced();
        }
        Ok(())
    }

    /// Rank 0, once at init: the stores whose transfer type cannot be held to
    /// `flush_async_bw` / `flush_async_percent` (another library's type: it is given no
    /// setting it might refuse), when background flushes are paced at all.
    fn warn_unpaced(&self) {
        if !self.config.get(settings::FLUSH_ASYNC) || !crate::transfer::pacing_asked(&self.config) {
            return;
        }
        for store in self.config.stores.iter().filter(|s| s.enabled) {
            let kind = self.config.store_transfer(store).0;
            if let Some(lib) = self
                .registry
                .provider(crate::registry::Kind::Transfer, &kind)
                .ok()
                .filter(|l| l.name != crate::transfer::BUILTIN_TRANSFERS)
            {
                self.topo.warn(&format!(
                    "flush_async_bw / flush_async_percent: store {} flushes with transfer type {kind} of plugin {} ({}), which is not the built-in copy engine: its background flushes are not paced",
                    store.path,
                    lib.name,
                    lib.path.display()
                ));
            }
        }
    }

    /// Restore what the cache holds (verify, rebuild, or drop each dataset), settle
    /// flushes an earlier run left interrupted, and choose the restart (or leave the
    /// fetch to the first have_restart).
    fn restore_at_init(&mut self, options: &InitOptions) -> Result<()> {
        restorer!(self).restore_cache()?;
        if self.report.lost_nodes_unnamed() > 0 {
            self.topo.warn(&format!(
                "{} more nodes lost their cache than the event log names ({} named)",
                self.report.lost_nodes_unnamed(),
                self.report.lost_nodes().len()
            ));
        }
        if !self.report.lost_nodes().is_empty() {
            self.job.log_event(crate::events::Event::LostNodes {
                nodes: self.report.lost_nodes().iter().cloned().collect(),
            });
        }
        flusher!(self).settle_interrupted_flushes()?;
        // from here on, dropping the runtime without finalize is a missed finalize
        self.world.health_mut().set_finalized(false);
        // before a restart is chosen: what the prefix held is gone (prefix_purge), and
        // with global_restart the cache is flushed and cleared
        prefix!(self).purge()?;
        let global = self.config.get(settings::GLOBAL_RESTART);
        if global {
            restarter!(self).leave_cache_for_prefix()?;
        }
        // `current` (SCR_CURRENT) is applied as a `current` call made while the fetch
        // is pending, in both orders
        self.restart.set_fetch_pending(true);
        if options.fetch_at_have_restart {
            // only the fetch waits for have_restart: flush_on_restart flushes what the
            // cache holds now (SCR does it in init, for applications that restart
            // without the restart API; global_restart did already)
            if self.config.get(settings::FLUSH_ON_RESTART) && !global {
                flusher!(self).flush_newest("flush_on_restart")?;
            }
            restarter!(self).apply_current_setting();
        } else {
            restarter!(self).apply_current_setting();
            self.restart.set_fetch_pending(false);
            restarter!(self).settle_restart(true)?;
        }
        Ok(())
    }

    /// Log the init event and, at debug level 1, each descriptor and the init summary;
    /// exit here when the run is halted.
    fn report_init(&mut self, started: Instant) {
        self.job.log_event(crate::events::Event::Init {
            ranks: self.topo.size(),
            nodes: self.topo.node_count(),
            seconds: started.elapsed().as_secs_f64(),
            restarted_from: self.have_restart(),
        });
        self.exit_if_halted();
        // time-based checkpoint policies count from the end of init
        self.policy.restart_clock();
        self.world.barrier();
        for rd in self.descs.iter() {
            self.topo.info(&format!(
                "descriptor {}: interval {}, scheme {}, store {}, group {}, this rank in set {} of {} member(s)",
                rd.index(),
                rd.interval(),
                rd.record().scheme,
                rd.record().store,
                rd.record().group,
                rd.record().set_id,
                rd.record().members.len()
            ));
        }
        self.topo.info(&format!(
            "init: {} ranks on {} node(s), {} descriptor(s), restart candidate {:?}, {:.3} s",
            self.topo.size(),
            self.topo.node_count(),
            self.descs.len(),
            self.have_restart(),
            started.elapsed().as_secs_f64()
        ));
    }

    /// The nodes file (Files chapter): how many nodes this run uses, written by the
    /// first rank of each node into its control directory, and by rank 0 into the
    /// prefix, where `scr run` reads it before a relaunch (a relaunch needs as many
    /// nodes as this run used; see [`crate::layout::prefix_nodes_file`]). The control
    /// directories' copies are agreed; the prefix's is warned about when it cannot be
    /// written.
    fn write_nodes_file(&self) -> Result<()> {
        let nodes = crate::state::nodes::Nodes {
            nodes: u64::from(self.topo.node_count()),
        };
        let mut written = Ok(());
        if self.topo.first_on_node() {
            let path = crate::layout::nodes_file(self.job.cntl_dir());
            written = nodes.write(&path, true).map_err(io_err(&path));
        }
        if self.topo.rank() == 0 {
            // the prefix's copy only sizes `scr run`'s next relaunch: a full or read-only
            // prefix must not keep the job from starting (a flush would say so anyway)
            let path = crate::layout::prefix_nodes_file(self.job.prefix());
            if let Err(e) = nodes.write(&path, false) {
                tracing::warn!(
                    "{}: {e}; `scr run` will size a relaunch by the first launch instead",
                    path.display()
                );
            }
        }
        self.world.agree_on(written)
    }
}

/// Rank 0 reads the configuration files and broadcasts their contents; every rank then
/// loads from that snapshot (with its own environment), so only one process touches the
/// file system and all see the same files.
pub(in crate::runtime) fn load_config(world: &dyn World, mut loader: Loader) -> Result<Config> {
    if world.rank() == 0 {
        for w in loader.unknown_env() {
            tracing::warn!("{w}");
        }
    }
    let snapshot = if world.rank() == 0 {
        let _ = loader.load();
        Some(loader.seen())
    } else {
        None
    };
    let snap: Snapshot = world
        .broadcast_value(0, snapshot.as_ref(), "configuration snapshot")
        .unwrap_or_default();
    loader.snapshot = Some(snap);
    loader.load().map_err(ScrError::Config)
}

/// The effective configuration without where each value came from: what must be the
/// same on every rank.
pub(in crate::runtime) fn config_fingerprint(config: &Config) -> String {
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
pub(in crate::runtime) fn same_config(world: &dyn World, config: &Config) -> Result<()> {
    use std::hash::{Hash as _, Hasher as _};
    let text = config_fingerprint(config);
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    let mine = h.finish();
    let (lo, hi) = (world.min_u64(mine), world.max_u64(mine));
    if lo == hi {
        return Ok(());
    }
    // (on the mismatch path only: rank 0's text broadcast, compared on every rank, the
    // lowest differing rank found by a min-reduction and its text broadcast — per rank
    // two configurations and O(log P) steps; was an all-gather of every rank's, O(P))
    let first = String::from_utf8_lossy(&world.broadcast_bytes(text.as_bytes())).into_owned();
    let me = if text == first {
        u64::MAX
    } else {
        u64::from(world.rank())
    };
    let differing = world.min_u64(me);
    let (rank, other) = if differing == u64::MAX {
        (0, first.clone())
    } else {
        let other = world.broadcast_from(differing as u32, text.as_bytes());
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
