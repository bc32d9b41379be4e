//! The scr-rs runtime.
#![deny(missing_docs)]
#![deny(unsafe_code)]
mod command;
pub mod config;
pub mod events;
pub mod explain;
pub mod hostlist;
pub mod launch;
pub mod layout;
pub mod local_mpi;
pub mod log;
pub mod registry;
pub mod runtime;
pub mod scavenge;
pub mod show;
pub mod state;
pub mod walltime;
