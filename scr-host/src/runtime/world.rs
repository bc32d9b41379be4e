//! The communicator operations the runtime uses, as one object-safe trait: [`World`].
//!
//! Why: the runtime's output, restart, agreement, eviction and halt logic exchanges only
//! bytes and `u64`s with the other ranks, yet holding an MPI communicator directly made
//! every line of it testable under `mpiexec` only. Behind this trait the same logic runs
//! on MPI ([`mpi_world::MpiWorld`], which makes exactly the MPI calls of [`super::comm`] and
//! counts them alike) or on threads of one process (`inproc`, for unit tests).
//!
//! The trait is expressed over bytes and `u64`s: every typed exchange of the runtime
//! (a `u8` agreement, `u64` reductions, `u32` rank gathers, byte broadcasts) maps onto
//! one of its methods with the same MPI call and the same counted bytes. Derived
//! operations (`min_u64`, `gather_some`, `gather_from`, ...) are provided methods built on
//! the primitives, so both implementations share them.
//!
//! Ranks, sizes, roots and destinations are `u32` (an MPI rank is never negative); tags
//! are MPI tags (`i32`, see [`super::tags`]).

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use scr_plugin::{HostRef, HostServices};

use super::Funnel;

#[cfg(test)]
pub(crate) mod inproc;
pub(crate) mod mpi_world;
mod typed;

pub(crate) use typed::{Exchange, ExchangeError};

/// A reduction operation on unsigned integers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    /// The smallest value.
    Min,
    /// The largest value.
    Max,
    /// The sum (wrapping, as MPI's unsigned sum).
    Sum,
    /// The bitwise OR (which of up to 64 conditions hold on some rank).
    BitOr,
}

impl Op {
    /// The value that leaves any other unchanged (what an exclusive scan yields on rank
    /// 0, where MPI leaves it undefined).
    pub(crate) fn identity(self) -> u64 {
        match self {
            Op::Min => u64::MAX,
            Op::Max | Op::Sum | Op::BitOr => 0,
        }
    }

    /// `a` combined with `b` (the in-process world reduces itself; MPI does for MPI).
    #[cfg(test)]
    pub(crate) fn apply(self, a: u64, b: u64) -> u64 {
        match self {
            Op::Min => a.min(b),
            Op::Max => a.max(b),
            Op::Sum => a.wrapping_add(b),
            Op::BitOr => a | b,
        }
    }
}

/// Most reports [`World::gather_some`] brings to rank 0 (the rest are only counted).
pub(crate) const REPORT_LIMIT: u64 = super::comm::REPORT_LIMIT;

/// One communicator as the runtime sees it: this rank among `size` ranks, the
/// collectives and messages the runtime exchanges on it.
///
/// Collectives must be called by every rank of the communicator in the same order (MPI's
/// rule; the in-process fake checks it). Point-to-point messages between two ranks on
/// one tag arrive in the order sent.
pub(crate) trait World: Send + Sync {
    /// This rank's number in `0..size()`.
    fn rank(&self) -> u32;

    /// Number of ranks.
    fn size(&self) -> u32;

    /// The index that names this process's simulated node (`node_names`): the same as
    /// [`World::rank`], except in a resilient run, where it is the process's rank in the
    /// whole job (a spare that took a lost rank's number stays on its own node).
    fn process_index(&self) -> u32 {
        self.rank()
    }

    /// `Ok` when a thread of the library may make MPI calls while the application makes
    /// its own (MPI initialised with `MPI_THREAD_MULTIPLE`), else why not: the
    /// background protection of `protect_in_background` needs it.
    fn concurrent_threads(&self) -> std::result::Result<(), String>;

    /// Wait until every rank entered the barrier (collective).
    fn barrier(&self);

    /// `buf` of rank `root` into `buf` of every rank (collective; every rank passes a
    /// buffer of the same length, known to all in advance).
    fn broadcast_into(&self, root: u32, buf: &mut [u8]);

    /// The bytes of rank `root` on every rank (collective; `root` known to all, `mine`
    /// ignored elsewhere): its length first, then the bytes in pieces an MPI count
    /// carries.
    fn broadcast_from(&self, root: u32, mine: &[u8]) -> Vec<u8>;

    /// Every rank's `mine`, concatenated in rank order (collective; every rank passes
    /// the same number of bytes: fixed-size items such as ranks).
    fn all_gather_fixed(&self, mine: &[u8]) -> Vec<u8>;

    /// Every rank's bytes, in rank order (collective; lengths may differ).
    fn all_gather_bytes(&self, mine: &[u8]) -> Vec<Vec<u8>>;

    /// `v` reduced over the ranks as one byte (collective): the runtime's agreement.
    fn all_reduce_u8(&self, v: u8, op: Op) -> u8;

    /// `values` reduced element-wise over the ranks in one reduction (collective; every
    /// rank passes as many values).
    fn all_reduce_u64s(&self, values: &[u64], op: Op) -> Vec<u64>;

    /// `v` of the ranks below this one, reduced (collective); `op`'s identity on rank 0.
    fn exclusive_scan_u64(&self, v: u64, op: Op) -> u64;

    /// The ranks of equal `color` as a communicator of their own, ordered by (`key`,
    /// rank); `None` for a rank whose color is `None` (collective). Colors and keys are
    /// below 2^31 (MPI's are C `int`s).
    fn split(&self, color: Option<u32>, key: u32) -> Option<Box<dyn World>>;

    /// A communicator of the same ranks whose traffic never mixes with this one's
    /// (collective).
    fn duplicate(&self) -> Box<dyn World>;

    /// Send `data` to `dest` on `tag` (blocking until it may be reused).
    fn send(&self, dest: u32, tag: i32, data: &[u8]);

    /// The next message from `src` on `tag`, whatever its length.
    fn recv(&self, src: u32, tag: i32) -> Vec<u8>;

    /// The next message from `src` on `tag` into `buf`, which it fills exactly.
    fn recv_into(&self, src: u32, tag: i32, buf: &mut [u8]);

    /// The next message on `tag` from any rank, with its sender.
    fn recv_any(&self, tag: i32) -> (u32, Vec<u8>);

    /// Sparse exchange: each rank sends `sends` (destination, bytes) and receives
    /// whatever the others sent it, without anyone knowing in advance who sends to whom
    /// (collective). Received messages come back ordered by sender. Two consecutive
    /// exchanges on one communicator use different tags (see
    /// [`super::comm::sparse_exchange`]).
    fn sparse_exchange(&self, sends: &[(u32, Vec<u8>)], tag: i32) -> Vec<(u32, Vec<u8>)>;

    /// End the whole job with `code` (every rank, whatever it is doing).
    fn abort(&self, code: i32) -> !;

    /// This communicator as the host services of a redundancy set, for plugin calls:
    /// `world_ranks[m]` and `groups[m]` are member m's world rank and failure-group
    /// value, `me` this process's world rank (for log lines).
    fn set_host(
        self: Box<Self>,
        world_ranks: Vec<u32>,
        groups: Vec<String>,
        me: u32,
    ) -> Box<dyn SetHost>;

    /// This communicator as `Any`, so that code still holding the implementation's own
    /// handle (an MPI communicator) can take it back out of a `Box<dyn World>`.
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send>;

    /// Smallest `v` over the ranks (collective, 8 bytes).
    fn min_u64(&self, v: u64) -> u64 {
        self.all_reduce_u64s(&[v], Op::Min)[0]
    }

    /// Largest `v` over the ranks (collective, 8 bytes).
    fn max_u64(&self, v: u64) -> u64 {
        self.all_reduce_u64s(&[v], Op::Max)[0]
    }

    /// Sum of `v` over the ranks (collective, 8 bytes).
    fn sum_u64(&self, v: u64) -> u64 {
        self.all_reduce_u64s(&[v], Op::Sum)[0]
    }

    /// Bitwise OR of `v` over the ranks (collective, 8 bytes).
    fn or_u64(&self, v: u64) -> u64 {
        self.all_reduce_u64s(&[v], Op::BitOr)[0]
    }

    /// Whether `ok` holds on every rank (collective, a 1-byte min-reduction).
    fn agree(&self, ok: bool) -> bool {
        self.all_reduce_u8(u8::from(ok), Op::Min) == 1
    }

    /// Rank 0's bytes on every rank (collective).
    fn broadcast_bytes(&self, mine: &[u8]) -> Vec<u8> {
        self.broadcast_from(0, mine)
    }

    /// Every rank's `v`, in rank order (collective, 4 bytes per rank).
    fn all_gather_u32(&self, v: u32) -> Vec<u32> {
        self.all_gather_fixed(&v.to_ne_bytes())
            .chunks_exact(4)
            .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    /// Reports of the ranks that have one (`Some`), on rank 0: the lowest-ranked
    /// [`REPORT_LIMIT`] of them in rank order, with the count of all (on every rank).
    /// Collective: an exclusive scan and a sum of one `u64`, then at most `REPORT_LIMIT`
    /// messages to rank 0 on [`REPORT_TAG`](super::tags::REPORT_TAG) — no rank receives
    /// O(P).
    fn gather_some(&self, mine: Option<&[u8]>) -> (Vec<(u32, Vec<u8>)>, u64) {
        let tag = super::tags::REPORT_TAG;
        let flag = u64::from(mine.is_some());
        let index = self.exclusive_scan_u64(flag, Op::Sum);
        let total = self.sum_u64(flag);
        let mut got = Vec::new();
        if self.rank() == 0 {
            if let Some(m) = mine {
                got.push((0, m.to_vec()));
            }
            while (got.len() as u64) < total.min(REPORT_LIMIT) {
                got.push(self.recv_any(tag));
            }
            got.sort_by_key(|(r, _)| *r);
        } else if let Some(m) = mine.filter(|_| index < REPORT_LIMIT) {
            self.send(0, tag, m);
        }
        (got, total)
    }

    /// The bytes of each of `members` (`root` among them) on `root`, in the order of
    /// `members`; `None` elsewhere. Only `members` take part: each sends `root` its
    /// bytes on `tag` (point to point, no collective).
    fn gather_from(
        &self,
        root: u32,
        members: &[u32],
        mine: &[u8],
        tag: i32,
    ) -> Option<Vec<Vec<u8>>> {
        if self.rank() != root {
            self.send(root, tag, mine);
            return None;
        }
        Some(
            members
                .iter()
                .map(|&m| {
                    if m == root {
                        mine.to_vec()
                    } else {
                        self.recv(m, tag)
                    }
                })
                .collect(),
        )
    }

    /// The inverse of [`World::gather_from`]: `root` sends `parts[i]` to `members[i]`;
    /// every member returns its part (`parts` is read on `root` only).
    fn scatter_to(&self, root: u32, members: &[u32], parts: &[Vec<u8>], tag: i32) -> Vec<u8> {
        if self.rank() != root {
            return self.recv(root, tag);
        }
        let mut own = Vec::new();
        for (&m, part) in members.iter().zip(parts) {
            if m == root {
                own = part.clone();
            } else {
                self.send(m, tag, part);
            }
        }
        own
    }
}

/// The host services of one redundancy set, as plugin calls receive them, plus what the
/// runtime itself asks of the set.
pub(crate) trait SetHost: HostServices + Send + Sync {
    /// These services as the FFI object one collective plugin call receives (panics of
    /// the host's own code caught, see [`scr_plugin::host_ref`]); the call begins here
    /// and the caller ends it with [`SetHost::settle`] (see [`super::MpiHost::begin_call`]).
    fn services(&self) -> HostRef<'_>;

    /// A host of its own on a duplicate of this set's communicator (collective over the
    /// set); see [`super::MpiHost::duplicate`].
    fn duplicate(&self) -> Box<dyn SetHost>;

    /// A host of its own for a thread that runs plugin calls in the background, beside
    /// the application and the runtime (collective over the set, as `duplicate`). With
    /// `funnel` (where [`World::concurrent_threads`] does not allow that thread to call
    /// MPI), the host hands its MPI calls to the thread serving `funnel`.
    fn background(&self, funnel: Option<Arc<Funnel>>) -> Box<dyn SetHost> {
        let _ = funnel;
        self.duplicate()
    }

    /// Whether the set has `members` members.
    fn size_matches(&self, members: usize) -> bool;

    /// Settle a collective plugin call `call` that returned on this member with `failure`
    /// (`None`: it succeeded): abort notices to the others when it failed first-hand, and
    /// the outcome every member returns alike (waiting at most `grace` when this one
    /// failed); see [`super::MpiHost::settle`].
    fn settle(
        &self,
        call: &str,
        failure: Option<&scr_plugin::PluginError>,
        grace: Duration,
    ) -> super::Settled;
}

/// A redundancy set's members as its plugin sees them: the world rank and failure-group
/// value of each, in member order. Both set hosts (MPI and in-process) answer a plugin's
/// `world_rank`/`failure_group` from it, the same way: a member out of range is
/// `u32::MAX` and an empty group, never a panic inside a plugin call.
#[derive(Clone, Debug, Default)]
pub(crate) struct Members {
    world_ranks: Vec<u32>,
    groups: Vec<String>,
}

impl Members {
    /// Members with these world ranks and failure-group values.
    pub(crate) fn new(world_ranks: Vec<u32>, groups: Vec<String>) -> Members {
        Members {
            world_ranks,
            groups,
        }
    }

    /// World rank of `member` (`u32::MAX` when there is no such member).
    pub(crate) fn world_rank(&self, member: u32) -> u32 {
        self.world_ranks
            .get(member as usize)
            .copied()
            .unwrap_or(u32::MAX)
    }

    /// Failure-group value of `member` (empty when there is no such member).
    pub(crate) fn failure_group(&self, member: u32) -> abi_stable::std_types::RString {
        self.groups
            .get(member as usize)
            .map(|s| s.as_str().into())
            .unwrap_or_default()
    }

    /// The world ranks and group values, to make the same set's host again.
    pub(crate) fn parts(&self) -> (Vec<u32>, Vec<String>) {
        (self.world_ranks.clone(), self.groups.clone())
    }
}
