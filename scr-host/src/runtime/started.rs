//! What init returns ([`Started`]): a running [`Runtime`], or a [`Disabled`] library.

use super::{Disabled, Result, Runtime};

/// What init returns: a running runtime, or a disabled library (`enable = false`, SCR's
/// `SCR_ENABLE=0`). The configuration decides, the same on every rank (it is agreed
/// before the choice), so every rank of a job holds the same variant. The API crates
/// hold this and give each call to the variant.
// (one per process, held for the whole run: the running variant's size costs nothing)
#[allow(clippy::large_enum_variant)]
pub enum Started {
    /// The library runs: caching, protecting, flushing and fetching checkpoints.
    Running(Runtime),
    /// The library is disabled: every call passes through, nothing is cached (see
    /// [`Disabled`]).
    Disabled(Disabled),
}

impl Started {
    /// This process's world rank.
    pub fn rank(&self) -> u32 {
        match self {
            Started::Running(rt) => rt.rank(),
            Started::Disabled(d) => d.rank(),
        }
    }

    /// Whether the library is disabled (`enable = false`, SCR's `SCR_ENABLE=0`).
    pub fn is_disabled(&self) -> bool {
        matches!(self, Started::Disabled(_))
    }

    /// The running runtime; `None` when the library is disabled.
    pub fn running(&self) -> Option<&Runtime> {
        match self {
            Started::Running(rt) => Some(rt),
            Started::Disabled(_) => None,
        }
    }

    /// The running runtime, owned; `None` when the library is disabled.
    pub fn into_running(self) -> Option<Runtime> {
        match self {
            Started::Running(rt) => Some(rt),
            Started::Disabled(_) => None,
        }
    }

    /// End the run (collective): [`Runtime::finalize`] or [`Disabled::finalize`].
    pub fn finalize(&mut self) -> Result<()> {
        match self {
            Started::Running(rt) => rt.finalize(),
            Started::Disabled(d) => d.finalize(),
        }
    }

    /// Whether `finalize` ran (or the run was abandoned).
    pub fn is_finalized(&self) -> bool {
        match self {
            Started::Running(rt) => rt.is_finalized(),
            Started::Disabled(d) => d.is_finalized(),
        }
    }
}
