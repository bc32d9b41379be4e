//! The stable ABI contract between the scr-rs runtime and its plugins.
//!
//! A *plugin* is a shared library that provides redundancy schemes (SINGLE, PARTNER, XOR,
//! RS, or a vendor's own) and/or transfer types (sync, pthread, bbapi, dw, ...). The
//! runtime loads it at run time; because every type crossing the boundary is checked by
//! [`abi_stable`] at load, a plugin built separately from the runtime is either refused
//! with a clear reason or works.
//!
//! The pieces:
//!
//! - [`PluginLibrary`]: what a library provides; export it with [`export_plugin!`].
//! - [`Scheme`]: one redundancy scheme instance for one redundancy set — `apply`,
//!   `recover`, `redundancy_files`, `remove`, and `describe` (including how many lost
//!   members per set it tolerates).
//! - [`Transfer`]: copies (source, destination) pairs — `add`, `dispatch`, `test`,
//!   `wait`, `cancel`, `results`; resumable from a state file.
//! - [`Host`]: the host services every call receives — the redundancy set's communicator
//!   (the plugin never links MPI), logging and cancellation.
//! - [`inproc`]: an in-process host (threads as members) for unit-testing algorithms.
//! - [`Params`]: typed access to descriptor parameters and plugin settings.
//! - Helpers shared by the shipped schemes: [`lofi`] (a member's files as one
//!   zero-padded logical file, and [`FileCrcs`](lofi::FileCrcs), their CRC32s computed
//!   from the pieces a scheme reads anyway), [`redfile`] (redundancy files with a checksummed header),
//!   [`collect`] (flags and variable-length exchanges over the host services),
//!   [`ring`] (a member's bytes streamed around its set in pieces: a scheme writes only
//!   the per-piece arithmetic) and [`verify`] (files checked against their recorded
//!   size and CRC32).
//! - [`copy_engine`]: the reusable copy engine of transfer types (thread, persisted state,
//!   cancel, resume, temporary file + rename + fsync, CRC32, metadata, logging from the
//!   copy thread): a vendor writes only how to copy one chunk.
//! - [`manual`]: how to write, test and ship a plugin (docs only).
//! - [`conformance`]: the scheme cases `scr-conformance` runs, usable from a plugin's own
//!   unit tests over [`inproc`]; [`crc_cases`]: the cases of a scheme that computes its
//!   files' CRC32s in its own pass ([`Scheme::apply_with_crc`]).
//!
//! Every exported entry point runs under [`guard`], so a panic inside a plugin comes
//! back to the host as a [`PluginError`] with code [`ErrorCode::PANIC`] naming the plugin
//! and the call, instead of aborting the job.
//!
//! # A complete (tiny) scheme, tested without MPI
//!
//! ```
//! use scr_plugin::*;
//!
//! /// Keeps no redundancy: tolerates no loss.
//! struct Nothing;
//! impl Scheme for Nothing {
//!     fn describe(&self) -> PluginResult<SchemeDescription> {
//!         Ok(SchemeDescription { name: "NOTHING".into(), tolerated_losses: 0,
//!                                summary: "no redundancy".into() })
//!     }
//!     fn apply(&self, host: &Host<'_>, _: &DatasetFiles) -> PluginResult<Vec<String>> {
//!         host.barrier()?;
//!         Ok(vec![])
//!     }
//!     fn recover(&self, host: &Host<'_>, req: &RecoverRequest) -> PluginResult<Vec<FileMeta>> {
//!         let mine = req.files.clone().into_option();
//!         if host.all_agree(mine.is_some())? {
//!             Ok(mine.map(|v| v.into_vec()).unwrap_or_default())
//!         } else {
//!             Err(PluginError::new(ErrorCode::UNRECOVERABLE, "a member lost its files"))
//!         }
//!     }
//!     fn redundancy_files(&self, _: &DatasetFiles) -> PluginResult<Vec<String>> { Ok(vec![]) }
//!     fn remove(&self, _: &Host<'_>, _: &DatasetFiles) -> PluginResult<()> { Ok(()) }
//! }
//!
//! struct Lib;
//! impl PluginLibrary for Lib {
//!     const NAME: &'static str = "nothing";
//!     const VERSION: &'static str = "1.0.0";
//!     const SCHEMES: &'static [&'static str] = &["NOTHING"];
//!     fn new_scheme(_: &SchemeConfig) -> PluginResult<Box<dyn Scheme>> { Ok(Box::new(Nothing)) }
//! }
//! // In the cdylib: scr_plugin::export_plugin!(Lib);
//!
//! // Drive it through the same FFI shims the host uses, on four in-process members.
//! let root = root_module::<Lib>();
//! let config = SchemeConfig { scheme: "nothing".into(), params: Default::default(),
//!                             settings: Default::default(), members: 4, member: 0,
//!                             world_rank: 0 };
//! let scheme = (root.new_scheme())(&config).into_result()?;
//! let lost = inproc::run(&["n0", "n0", "n1", "n1"], |host| {
//!     let req = RecoverRequest { dataset_id: 1, dir: "/tmp".into(),
//!         files: if host.rank() == 2 { abi_stable::std_types::RNone }
//!                else { abi_stable::std_types::RSome(Default::default()) } };
//!     scheme.recover(host.raw(), &req).into_result().unwrap_err().code
//! });
//! assert!(lost.iter().all(|c| *c == ErrorCode::UNRECOVERABLE));
//! # Ok::<(), PluginError>(())
//! ```
#![deny(missing_docs)]
#![allow(non_local_definitions)] // emitted by #[sabi_trait] on recent compilers

pub mod abi;
pub mod cachefs;
pub mod collect;
pub mod conformance;
pub mod copy_engine;
pub mod crc_cases;
mod error;
mod host;
pub mod inproc;
pub mod lofi;
pub mod manual;
mod params;
mod plugin;
pub mod redfile;
pub mod ring;
pub mod sync;
pub mod verify;

pub use abi::{
    Applied, DatasetFiles, FfiScheme, FfiTransfer, FileMeta, FileResult, HostRef, HostServices,
    LibraryInfo, LogLevel, Param, PluginMod, PluginModRef, RecoverRequest, ReduceOp, SchemeBox,
    SchemeConfig, SchemeDescription, SurvivorCheck, TransferBox, TransferConfig, TransferStatus,
    ABI_VERSION,
};
pub use error::{ErrorCode, PluginError, PluginResult};
pub use host::{host_ref, Guarded, Host, SurvivorsVerified, MAX_TAG};
pub use params::Params;
pub use plugin::{guard, root_module, scheme_box, transfer_box, PluginLibrary, Scheme, Transfer};

/// The `abi_stable` scr-plugin is built with, for the few `abi_stable` types a plugin
/// names itself (`RSome`/`RNone`, `RString`, `RVec`), so that they are exactly
/// scr-plugin's. It does not replace a plugin's own dependency: [`export_plugin!`]
/// expands to `#[::abi_stable::export_root_module]`, which resolves only against a crate
/// the plugin depends on directly, so a plugin also needs `abi_stable = "0.11.x"` (the
/// same minor, unified by Cargo into this one copy). See [`manual`].
pub use abi_stable;

/// This SDK's version: what a refusal tells a plugin author to rebuild against, and what
/// `manual::versions` promises per release.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
