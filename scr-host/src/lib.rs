//! The scr-rs runtime.
#![deny(missing_docs)]
#![deny(unsafe_code)]
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
pub(crate) mod private_dir;
pub mod registry;
pub mod remote;
pub mod runtime;
pub mod scavenge;
pub mod show;
pub mod state;
pub(crate) mod transfer;
pub mod walltime;
