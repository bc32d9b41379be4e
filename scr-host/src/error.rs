//! [`ScrError`], what can go wrong in the runtime, and the I/O error that names its path.
//!
//! It sits below the runtime and above the configuration, the registry and the state
//! files (whose errors it carries), so that the modules the runtime builds on
//! (`integrity`, `private_dir`) report in the runtime's terms without importing from it.

use std::path::{Path, PathBuf};

use crate::config::ConfigErrors;
use crate::registry::RegistryError;
use crate::state::StateError;

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
    /// A process of the job was lost (MPI with ULFM reported a process failure): the
    /// runtime's communicators are revoked and every call of this runtime fails so, on
    /// every rank alike; recover (a resilient run) or end the job.
    #[error("{0}")]
    ProcessFailed(String),
}

/// Shorthand.
pub type Result<T, E = ScrError> = std::result::Result<T, E>;

/// An I/O error on `path` as an [`ScrError`] naming it.
pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ScrError + '_ {
    move |source| ScrError::Io {
        path: path.to_path_buf(),
        source,
    }
}
