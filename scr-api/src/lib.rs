//! The scr-rs application API: checkpoint and restart an MPI application through
//! node-local cache, protected by the redundancy scheme the configuration chooses.
//!
//! ```no_run
//! use scr_api::{mpi, Scr, Flags};
//! use scr_api::mpi::traits::Communicator;
//!
//! let universe = mpi::initialize().expect("MPI");
//! let world = universe.world();
//! let mut scr = Scr::init(&world)?;
//!
//! // restart: try the newest checkpoint, fall back to older ones if it does not read
//! let mut step = 0u64;
//! while let Some(_name) = scr.have_restart() {
//!     scr.start_restart()?;
//!     let path = scr.route_file(format!("state_{}.bin", world.rank()))?;
//!     let read = std::fs::read(&path).ok().filter(|b| b.len() == 8);
//!     if scr.complete_restart(read.is_some())? {
//!         step = u64::from_le_bytes(read.unwrap().try_into().unwrap());
//!         break;
//!     }
//! }
//!
//! while step < 100 {
//!     step += 1; // ... compute ...
//!     if scr.need_checkpoint()? {
//!         scr.start_output(&format!("ckpt.{step}"), Flags::CHECKPOINT)?;
//!         let path = scr.route_file(format!("state_{}.bin", world.rank()))?;
//!         let ok = std::fs::write(&path, step.to_le_bytes()).is_ok();
//!         scr.complete_output(ok)?;
//!     }
//!     if scr.should_exit()? {
//!         break;
//!     }
//! }
//! scr.finalize()?;
//! # Ok::<(), scr_api::ScrError>(())
//! ```
//!
//! Configuration values can also be set before init, as SCR's `SCR_Config("KEY=VALUE")`
//! does, with [`Settings`]; they rank between the user's file and the system file (see
//! [`scr_host::config`]).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::path::{Path, PathBuf};

pub use mpi;
mod resilient;
pub use resilient::{process_lost, recovered, run_resilient};
pub use scr_host::resilient::{Attempt, Finished, Options as ResilientOptions};
pub use scr_host::runtime::ScrError;
pub use scr_host::runtime::{CallStats, CommStats};
use scr_host::runtime::{InitOptions, OutputFlags, Runtime, Started};

use scr_host::config::api::{self, ApiCall};
use scr_host::config::{keys, Loader};

/// The README's Rust example, compiled as a doctest so that it cannot drift from the API
/// (`cargo test -p scr-api --doc`). It is `no_run` here because a doctest runs in this
/// crate's directory, where it would leave its checkpoints; `scr-readme-example` (the
/// same text, built by the examples crate) runs it under mpiexec in the end-to-end tests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeExample;

/// Results of this API.
pub type Result<T, E = ScrError> = std::result::Result<T, E>;

/// What a dataset is (SCR's `SCR_FLAG_CHECKPOINT` and `SCR_FLAG_OUTPUT`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flags {
    checkpoint: bool,
    output: bool,
}

impl Flags {
    /// A checkpoint: the application can restart from it.
    pub const CHECKPOINT: Flags = Flags {
        checkpoint: true,
        output: false,
    };
    /// Output destined for the prefix directory.
    pub const OUTPUT: Flags = Flags {
        checkpoint: false,
        output: true,
    };
}

impl std::ops::BitOr for Flags {
    type Output = Flags;
    fn bitor(self, o: Flags) -> Flags {
        Flags {
            checkpoint: self.checkpoint || o.checkpoint,
            output: self.output || o.output,
        }
    }
}

/// Call `$call` on the library, running or disabled (the two have the same methods).
macro_rules! on {
    ($rt:expr, $lib:ident => $call:expr) => {
        match $rt {
            Started::Running($lib) => $call,
            Started::Disabled($lib) => $call,
        }
    };
}

/// The checkpoint/restart library, initialised on an MPI communicator. Dropping it
/// finalizes (collectively); call [`Scr::finalize`] to see finalize's errors.
///
/// When the configuration disables the library (`enable = false`, SCR's `SCR_ENABLE=0`;
/// [`Scr::is_disabled`] tells) the calls pass through: nothing is cached, flushed or
/// recorded, [`Scr::route_file`] hands back the application's own path (absolute; its
/// directories made during output), no restart is offered, and the other calls succeed
/// — the calls' order is still checked, in the same words.
pub struct Scr {
    rt: Started,
    /// A call failed on this rank: finalizing on drop could wait forever for ranks that
    /// went on, so `drop` then only warns.
    failed: bool,
}

impl Scr {
    /// Initialise on `world` (collective; after MPI init). Reads the configuration,
    /// restores what the cache holds and finds the restart candidate.
    pub fn init(world: &mpi::topology::SimpleCommunicator) -> Result<Scr> {
        Self::init_with(world, &Settings::new())
    }

    /// Like [`Scr::init`], with configuration values set by the application.
    pub fn init_with(
        world: &mpi::topology::SimpleCommunicator,
        settings: &Settings,
    ) -> Result<Scr> {
        Self::init_options(world, settings, InitOptions::default())
    }

    /// [`Scr::init_with`] with the runtime's init options (a resilient run's report of
    /// the recovery before it).
    fn init_options(
        world: &mpi::topology::SimpleCommunicator,
        settings: &Settings,
        options: InitOptions,
    ) -> Result<Scr> {
        let api = settings
            .calls
            .iter()
            .map(|(n, text, _, _)| (*n, text.clone()))
            .collect();
        Ok(Scr {
            rt: Runtime::init_with(world, api, options)?,
            failed: false,
        })
    }

    /// Remember a failure, so that dropping does not start a collective finalize. API
    /// misuse is reported before any collective step and leaves the ranks in step.
    fn track<T>(&mut self, r: Result<T>) -> Result<T> {
        if matches!(&r, Err(e) if !matches!(e, ScrError::Usage(_))) {
            self.failed = true;
        }
        r
    }

    /// The name of the newest checkpoint this run can restart from.
    pub fn have_restart(&self) -> Option<String> {
        on!(&self.rt, rt => rt.have_restart())
    }

    /// Begin reading the restart checkpoint; returns its name.
    pub fn start_restart(&mut self) -> Result<String> {
        let r = on!(&mut self.rt, rt => rt.start_restart());
        self.track(r)
    }

    /// The number of ranks that wrote the checkpoint being read (between
    /// [`Scr::start_restart`] and [`Scr::complete_restart`]; local). It differs from
    /// this job's size when the job grew or shrank since: then [`Scr::restart_files`]
    /// lists every old rank's files and [`Scr::route_file`] resolves any of them, so
    /// each rank reads the old slices its new share of the work overlaps.
    pub fn restart_writers(&mut self) -> Result<u32> {
        let r = on!(&mut self.rt, rt => rt.restart_writers());
        self.track(r)
    }

    /// The files old rank `rank` wrote of the checkpoint being read, as paths inside the
    /// prefix to pass to [`Scr::route_file`] (local). Any old rank's when the job's size
    /// changed; this rank's own otherwise (each rank reads back what it wrote).
    pub fn restart_files(&mut self, rank: u32) -> Result<Vec<PathBuf>> {
        let r = on!(&mut self.rt, rt => rt.restart_files(rank));
        self.track(r)
    }

    /// Finish reading (collective). `false` on any rank passes this checkpoint over;
    /// [`Scr::have_restart`] then offers the next older one. Returns whether all ranks
    /// read it.
    pub fn complete_restart(&mut self, valid: bool) -> Result<bool> {
        let r = on!(&mut self.rt, rt => rt.complete_restart(valid));
        self.track(r)
    }

    /// Whether to checkpoint now (collective): `checkpoint_interval`, `_seconds`,
    /// `_overhead` or a halt condition says so. With none of the three rules set,
    /// `false`, as SCR 3 answers: the application keeps its own cadence.
    pub fn need_checkpoint(&mut self) -> Result<bool> {
        let r = on!(&mut self.rt, rt => rt.need_checkpoint());
        self.track(r)
    }

    /// Begin a dataset (collective).
    pub fn start_output(&mut self, name: &str, flags: Flags) -> Result<()> {
        let r = on!(&mut self.rt, rt => rt.start_output(
            name,
            OutputFlags {
                checkpoint: flags.checkpoint,
                output: flags.output,
            },
        ));
        self.track(r)
    }

    /// SCR's legacy form: begin a checkpoint named `ckpt.<checkpoint id>`; returns the
    /// name. Finish it with [`Scr::complete_checkpoint`].
    pub fn start_checkpoint(&mut self) -> Result<String> {
        let r = on!(&mut self.rt, rt => rt.start_checkpoint());
        self.track(r)
    }

    /// SCR's legacy form of [`Scr::complete_output`].
    pub fn complete_checkpoint(&mut self, valid: bool) -> Result<bool> {
        let r = on!(&mut self.rt, rt => rt.complete_output(valid));
        self.track(r)
    }

    /// Where to write (during output) or read (during restart) the file `name`, which
    /// must lie inside the prefix directory (relative names are relative to the working
    /// directory): in cache, or in the prefix itself when the dataset bypasses the cache.
    /// Outside both phases the name comes back unchanged, as SCR 3.x's `SCR_Route_file`
    /// does.
    pub fn route_file(&mut self, name: impl AsRef<Path>) -> Result<PathBuf> {
        let r = on!(&mut self.rt, rt => rt.route_file(name.as_ref()));
        self.track(r)
    }

    /// Finish the dataset (collective); it is kept only if every rank says `valid`.
    /// Returns whether it was kept.
    pub fn complete_output(&mut self, valid: bool) -> Result<bool> {
        let r = on!(&mut self.rt, rt => rt.complete_output(valid));
        self.track(r)
    }

    /// Whether the run should stop now (collective): a halt condition holds.
    pub fn should_exit(&mut self) -> Result<bool> {
        let r = on!(&mut self.rt, rt => rt.should_exit());
        self.track(r)
    }

    /// Make the named checkpoint the one to restart from.
    pub fn current(&mut self, name: &str) -> Result<()> {
        let r = on!(&mut self.rt, rt => rt.current(name));
        self.track(r)
    }

    /// Stop offering the named checkpoint for restart.
    pub fn drop_dataset(&mut self, name: &str) -> Result<()> {
        let r = on!(&mut self.rt, rt => rt.drop_dataset(name));
        self.track(r)
    }

    /// Delete the named dataset from cache (collective).
    pub fn delete(&mut self, name: &str) -> Result<()> {
        let r = on!(&mut self.rt, rt => rt.delete(name));
        self.track(r)
    }

    /// Datasets that init found beyond repair and dropped, one report each.
    pub fn lost_datasets(&self) -> &[String] {
        on!(&self.rt, rt => rt.lost_datasets())
    }

    /// This rank's MPI traffic per API call since init or the last
    /// [`Scr::reset_comm_stats`]: calls, collectives, point-to-point messages sent and
    /// received, payload bytes each way and wall time, keyed by the call's name (`init`,
    /// `start_output`, `route_file`, `complete_output`, `flush`, `fetch`, ...). Local (no
    /// communication); for measuring how the library's per-rank cost grows with the job.
    /// Nested steps (a flush inside `complete_output`) count under their own name only.
    /// The counters belong to the process (one rank), shared by every [`Scr`] in it.
    pub fn comm_stats(&self) -> CommStats {
        on!(&self.rt, rt => rt.comm_stats())
    }

    /// Zero the counters [`Scr::comm_stats`] reads (local), e.g. before a step measured
    /// on its own.
    pub fn reset_comm_stats(&self) {
        on!(&self.rt, rt => rt.reset_comm_stats());
    }

    /// The running runtime underneath (configuration, node, control directory).
    ///
    /// # Panics
    ///
    /// When the library is disabled ([`Scr::is_disabled`]): no runtime runs then. Use
    /// [`Scr::try_runtime`], or [`Scr::config`] for the configuration, where the library
    /// may be disabled.
    pub fn runtime(&self) -> &Runtime {
        self.try_runtime().expect(
            "Scr::runtime: the library is disabled (enable = false, SCR_ENABLE=0), so no runtime runs; use Scr::try_runtime or Scr::config",
        )
    }

    /// The running runtime underneath; `None` when the library is disabled.
    pub fn try_runtime(&self) -> Option<&Runtime> {
        self.rt.running()
    }

    /// Whether the library is disabled (`enable = false`, SCR's `SCR_ENABLE=0`): the
    /// calls pass through and nothing is cached (see [`Scr`]).
    pub fn is_disabled(&self) -> bool {
        self.rt.is_disabled()
    }

    /// The effective configuration, running or disabled.
    pub fn config(&self) -> &scr_host::config::Config {
        match &self.rt {
            Started::Running(rt) => rt.config(),
            Started::Disabled(d) => d.config(),
        }
    }

    /// End the run (collective).
    pub fn finalize(mut self) -> Result<()> {
        self.rt.finalize()
    }
}

impl Drop for Scr {
    fn drop(&mut self) {
        if self.rt.is_finalized() {
            return;
        }
        if std::thread::panicking() || self.failed {
            // finalize is collective: after a panic or a failed call, other ranks may
            // not be there to meet this one
            tracing::warn!(
                rank = self.rt.rank(),
                "not finalized (dropped after an error); the run's state stays as the last completed dataset left it"
            );
            on!(&mut self.rt, rt => rt.abandon());
            return;
        }
        if let Err(e) = self.rt.finalize() {
            tracing::error!(rank = self.rt.rank(), "finalize: {e}");
        }
    }
}

/// A value the application tried to set was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("configuration call {call} (\"{text}\"): {message}")]
pub struct SettingsError {
    /// 1-based number of the call.
    pub call: usize,
    /// The text passed.
    pub text: String,
    /// What is wrong.
    pub message: String,
}

/// Configuration values set by the application before init, in call order.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// Accepted calls: (call number, text as given, key, value or `None` for unset).
    calls: Vec<(usize, String, &'static str, Option<String>)>,
    attempts: usize,
}

impl Settings {
    /// No values set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Set (`key=value`) or unset (`key=`) one scalar key, or define a descriptor as
    /// SCR's `SCR_Config` does (`CKPT=0 TYPE=XOR SET_SIZE=16`, `STORE=/dev/shm COUNT=2`).
    /// The key may be written as in the TOML files (`cache_size`) or as SCR's parameter
    /// (`SCR_CACHE_SIZE`); the value is checked against the key's type at once, so a
    /// mistake is reported at the call.
    pub fn set(&mut self, text: &str) -> Result<(), SettingsError> {
        self.attempts += 1;
        let err = |message: String| SettingsError {
            call: self.attempts,
            text: text.to_string(),
            message,
        };
        let (name, value) = match api::parse(text).map_err(|e| err(e.to_string()))? {
            ApiCall::Set { key, value } => (key.name, value.map(|v| v.to_param())),
            // descriptors are not scalars: `get` does not answer for them
            ApiCall::Descriptor { .. } | ApiCall::ClearDescriptors(_) => ("", None),
            ApiCall::Query(_) | ApiCall::FirstDescriptor(_) | ApiCall::DescriptorQuery { .. } => {
                return Err(err(
                    "this is a query, not a setting: expected `key=value` (or `key=` to unset); read values with `Settings::get` or the runtime's configuration".into(),
                ))
            }
        };
        self.calls
            .push((self.attempts, text.to_string(), name, value));
        Ok(())
    }

    /// The value last set for `key` (any spelling), unless it was unset since.
    pub fn get(&self, key: &str) -> Option<String> {
        let name = keys::find_api(key)?.name;
        debug_assert!(!name.is_empty());
        self.calls
            .iter()
            .rev()
            .find(|(_, _, k, _)| *k == name)
            .and_then(|(_, _, _, v)| v.clone())
    }

    /// A loader over this process's environment with these calls as the API source; its
    /// errors (a locked key, say) name the call by its number and text. (What
    /// [`Scr::init_with`] uses, for inspecting the configuration before init.)
    pub fn loader(&self) -> Loader {
        let mut loader = Loader::from_process();
        loader.api = self
            .calls
            .iter()
            .map(|(n, text, _, _)| (*n, text.clone()))
            .collect();
        loader
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use scr_host::config::{keys::Value, settings, Config, ConfigErrors, Origin};

    /// Load `settings` over a system file with `system_text` and no other source.
    fn load_with_system(settings: &Settings, system_text: &str) -> Result<Config, ConfigErrors> {
        let dir = tempfile::tempdir().unwrap();
        let system = dir.path().join("system.toml");
        std::fs::write(&system, system_text).unwrap();
        let mut loader = settings.loader();
        loader.env = [(
            "SCR_SYSTEM_CONFIG".to_string(),
            system.display().to_string(),
        )]
        .into();
        loader.cwd = dir.path().to_path_buf();
        loader.load()
    }

    #[test]
    fn bad_calls_name_the_call_and_the_problem() {
        let mut s = Settings::new();
        s.set("set_size=4").unwrap();
        let e = s.set("set_size=1").unwrap_err();
        assert_eq!(
            e.to_string(),
            "configuration call 2 (\"set_size=1\"): `set_size`: 1 is out of range: expected a whole number in 2..=4096"
        );
        let e = s.set("flush").unwrap_err();
        assert_eq!(e.call, 3);
        assert!(e.message.contains("expected `key=value`"));
        assert_eq!(s.get("SCR_SET_SIZE").as_deref(), Some("4"));
    }

    #[test]
    fn unset_removes_a_value_and_errors_name_the_original_call() {
        let mut s = Settings::new();
        s.set("debug=1").unwrap();
        assert!(s.set("debug=x").is_err());
        s.set("debug=").unwrap();
        s.set("SCR_MPI_BUF_SIZE=1MiB").unwrap();
        assert_eq!(s.get("debug"), None);
        let errors = load_with_system(&s, "locked = [\"mpi_buf_size\"]\n")
            .unwrap_err()
            .0;
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(
            errors[0].origin,
            Origin::Api(4, "SCR_MPI_BUF_SIZE=1MiB".into())
        );
        assert!(errors[0].message.contains("`mpi_buf_size` is locked"));
    }

    #[test]
    fn descriptors_set_through_the_api_replace_the_files_descriptors() {
        let mut s = Settings::new();
        s.set("CKPT=0 TYPE=PARTNER").unwrap();
        s.set("CKPT=1 INTERVAL=4 TYPE=XOR SET_SIZE=4").unwrap();
        assert!(s
            .set("CKPT=1 INTERVAL=x")
            .unwrap_err()
            .message
            .contains("INTERVAL"));
        let c = load_with_system(&s, "[[checkpoint]]\ntype = \"SINGLE\"\n").unwrap();
        let schemes: Vec<_> = c.checkpoints.iter().map(|d| d.scheme.clone()).collect();
        assert_eq!(schemes, [Some("PARTNER".into()), Some("XOR".into())]);
        assert_eq!(c.checkpoints[1].interval, 4);
        assert_eq!(
            c.checkpoints[1].origin,
            Origin::Api(2, "CKPT=1 INTERVAL=4 TYPE=XOR SET_SIZE=4".into())
        );
    }

    #[test]
    fn values_rank_between_user_and_system_files() {
        let mut s = Settings::new();
        s.set("cache_size=3").unwrap();
        let c = load_with_system(&s, "cache_size = 7\nset_size = 16\n").unwrap();
        assert_eq!(
            c.setting_of(settings::CACHE_SIZE).value,
            Some(Value::UInt(3))
        );
        assert_eq!(
            c.setting_of(settings::CACHE_SIZE).origin,
            Origin::Api(1, "cache_size=3".into())
        );
        assert_eq!(c.get(settings::SET_SIZE), 16);
    }
}
