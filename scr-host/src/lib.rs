//! The scr-rs runtime and the administration logic around it: everything between the
//! APIs (`scr-api`, `scr-capi`, the `scr` command) and the plugins (`scr-plugin`).
//!
//! The map, from the ground up (a module imports only modules listed above it):
//!
//! - **Ground**: [`layout`] (every path: cache, control directory, prefix), [`log`]
//!   (the library's tracing), [`hostlist`], [`registry`] (finds plugin libraries,
//!   checks their ABI, loads them), `command` (outside commands with a timeout).
//! - **State files**: [`state`]: versioned, CRC-checked, atomically replaced: the
//!   filemap, the prefix's index, summary and rank2file maps, the halt file, the nodes
//!   file, what a flush may write.
//! - **Configuration**: [`config`]: TOML files, environment and API calls merged by
//!   precedence, validated, with one catalog of settings (`config::catalog`).
//! - **Shared pieces**: [`error`] ([`error::ScrError`]), [`events`] (the event log),
//!   [`walltime`], [`remote`] (reaching other nodes), [`show`], `integrity` (size +
//!   CRC32 checks), `private_dir` (0700 directories, no link followed), [`hooks`] (the
//!   fault suite's hooks, a value), `local_host` (host services of one process for
//!   transfers), `transfer` (running and verifying a transfer plugin).
//! - **The runtime**: [`runtime`]: what one MPI process runs between init and finalize,
//!   in parts that own their state (see its docs).
//! - **Offline administration**: [`scavenge`] (postrun, scavenge, `scr index add`),
//!   [`launch`] (`scr run`: launch, watch and relaunch a job step; down nodes), and
//!   [`explain`] (`scr config explain`).
//!
//! Nothing here prints: the `scr` command (crate `scr-cli`) prints what these return.
//! The runtime and the offline logic share the state files, the configuration and the
//! transfer verification, which is why they are one crate; see `ARCHITECTURE.md`.
#![deny(missing_docs)]
#![deny(unsafe_code)]
#![deny(unreachable_pub)]
mod command;
pub mod config;
pub mod error;
pub mod events;
pub mod explain;
pub mod hooks;
pub mod hostlist;
pub(crate) mod integrity;
pub mod launch;
pub mod layout;
/// Host services of one process for transfer plugins (used by flushes, scavenges and
/// `scr config check`, so it sits beside the runtime, not in it).
pub(crate) mod local_host;
pub mod log;
pub(crate) mod offline;
pub(crate) mod os;
pub(crate) mod private_dir;
pub mod registry;
pub mod remote;
pub mod resilient;
pub mod runtime;
pub mod scavenge;
pub mod show;
pub mod state;
pub(crate) mod transfer;
pub mod walltime;
