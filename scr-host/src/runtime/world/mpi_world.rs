//! [`World`] over an MPI communicator: every method delegates to the counted exchange of
//! [`comm`], so the MPI calls made and the counts kept are exactly those of the code that
//! called `comm` directly (the scale table of docs/benchmarks.md and the scale tests depend
//! on them).
//!
//! `unsafe` here: a borrowed view of a communicator the caller owns (a pointer valid for
//! one call), and the `Send`/`Sync` that the trait requires of a type holding an MPI
//! handle (see the `SAFETY` comments).
#![allow(unsafe_code)]

use std::any::Any;
use std::ptr::NonNull;
use std::sync::MutexGuard;

use mpi::collective::SystemOperation;
use mpi::topology::{Color, SimpleCommunicator};
use mpi::traits::Communicator as _;
use scr_plugin::sync::lock;

use super::{Op, SetHost, World};
use crate::runtime::mpi_host::{MpiHost, SERIAL};
use crate::runtime::{comm, mpi_init, ulfm};

/// The communicator of an [`MpiWorld`].
enum Handle {
    /// Owned: freed when the world drops.
    Owned(SimpleCommunicator),
    /// A communicator someone else owns, for the duration of one
    /// [`MpiWorld::with_borrowed`] call (which may be `MPI_COMM_WORLD`, which rsmpi
    /// refuses to wrap a second time).
    Borrowed(NonNull<SimpleCommunicator>),
    /// Taken out by [`MpiWorld::into_communicator`] (which consumes the world).
    Taken,
}

/// One MPI communicator as a [`World`].
pub(crate) struct MpiWorld {
    handle: Handle,
    /// This process's rank, read once (plain value for every thread).
    rank: u32,
    /// Number of ranks, read once.
    size: u32,
    /// MPI's thread level, read once on the owner thread.
    threading: mpi::Threading,
    /// The thread that made the world (the one that calls into the runtime).
    owner: std::thread::ThreadId,
}

// SAFETY: an MPI communicator handle is a plain value any thread may pass to MPI; MPI
// requires (a) no concurrent calls below MPI_THREAD_MULTIPLE and (b) calls from threads
// other than the main one only at MPI_THREAD_SERIALIZED or above. Every MPI call made
// through an `MpiWorld` holds the global `SERIAL` lock that `MpiHost` takes too, giving
// (a); `enter` refuses a thread other than the owner below MPI_THREAD_SERIALIZED, giving
// (b). A borrowed view's pointer is only reachable by reference inside `with_borrowed`,
// whose borrow of the communicator outlives every use.
unsafe impl Send for MpiWorld {}
// SAFETY: see `Send`: shared access reaches MPI only through `enter`.
unsafe impl Sync for MpiWorld {}

impl MpiWorld {
    /// `comm` as a world that owns it (frees it when dropped).
    pub(crate) fn new(comm: SimpleCommunicator) -> MpiWorld {
        let (rank, size, threading) = MpiWorld::read(&comm);
        {
            let _serial = lock(&SERIAL);
            ulfm::watch(&comm);
        }
        MpiWorld {
            handle: Handle::Owned(comm),
            rank,
            size,
            threading,
            owner: std::thread::current().id(),
        }
    }

    /// Rank, size and MPI's thread level, read once under the MPI lock.
    fn read(comm: &SimpleCommunicator) -> (u32, u32, mpi::Threading) {
        let (rank, size, threading) = {
            let _serial = lock(&SERIAL);
            (
                // a communicator's rank and size are never negative
                u32::try_from(comm.rank()).unwrap_or(0),
                u32::try_from(comm.size()).unwrap_or(0),
                mpi::environment::threading_support(),
            )
        };
        (rank, size, threading)
    }

    /// Run `f` on `comm` as a world, without taking it over: for callers that still hold
    /// a `SimpleCommunicator` (the view never outlives the call, and is not freed).
    pub(crate) fn with_borrowed<R>(comm: &SimpleCommunicator, f: impl FnOnce(&MpiWorld) -> R) -> R {
        let (rank, size, threading) = MpiWorld::read(comm);
        let view = MpiWorld {
            handle: Handle::Borrowed(NonNull::from(comm)),
            rank,
            size,
            threading,
            owner: std::thread::current().id(),
        };
        // (`f` receives only a reference: the view cannot outlive `comm`'s borrow)
        f(&view)
    }

    /// The communicator back out of the world (`None` for a borrowed view, which owns
    /// nothing).
    pub(crate) fn into_communicator(mut self) -> Option<SimpleCommunicator> {
        match std::mem::replace(&mut self.handle, Handle::Taken) {
            Handle::Owned(c) => {
                // (its new owner frees it: the error handler stays with it, but it is no
                // longer revoked with the runtime's)
                let _serial = lock(&SERIAL);
                ulfm::unwatch(&c);
                Some(c)
            }
            _ => None,
        }
    }

    /// The communicator.
    fn comm(&self) -> &SimpleCommunicator {
        match &self.handle {
            Handle::Owned(c) => c,
            // SAFETY: a borrowed view exists only inside `with_borrowed`, whose caller
            // lends `comm` for the whole call; the view is never moved out of it.
            Handle::Borrowed(p) => unsafe { p.as_ref() },
            // (taken only by `into_communicator`, which consumes the world)
            Handle::Taken => unreachable!("MPI world used after its communicator was taken"),
        }
    }

    /// The communicator of a `Box<dyn World>` made by an `MpiWorld` (by a split or
    /// duplicate of one); `None` for another implementation.
    pub(crate) fn from_boxed(world: Box<dyn World>) -> Option<SimpleCommunicator> {
        world
            .into_any()
            .downcast::<MpiWorld>()
            .ok()
            .and_then(|w| w.into_communicator())
    }

    /// The MPI lock and the communicator. The lock is the one every plugin's set host
    /// takes (`mpi_host::SERIAL`): a plugin thread still in MPI when its call returned
    /// would otherwise call MPI concurrently with the runtime, which MPI below
    /// `MPI_THREAD_MULTIPLE` forbids. A call from a thread other than the one that made the
    /// world, while MPI runs below `MPI_THREAD_SERIALIZED`, is a misuse MPI does not
    /// survive either: the job is ended with MPI_Abort saying so, on every rank at once,
    /// rather than a panic on this rank that would leave the others waiting in the
    /// collective.
    fn enter(&self, op: &str) -> (MutexGuard<'static, ()>, &SimpleCommunicator) {
        if std::thread::current().id() != self.owner && self.threading < mpi::Threading::Serialized
        {
            tracing::error!(
                "`{op}` called from a thread other than the one that initialised scr-rs, but MPI runs at thread level {:?}; call scr-rs from one thread or initialise MPI with MPI_THREAD_SERIALIZED; ending the job",
                self.threading
            );
            self.comm().abort(super::super::ABORT_CODE);
        }
        (lock(&SERIAL), self.comm())
    }

    /// `f` on the communicator under the MPI lock (see `enter`), refused before and
    /// checked after for a lost process (`ulfm::check` unwinds to the API call), so no
    /// result of a failed call is used.
    fn call<R>(&self, op: &str, f: impl FnOnce(&SimpleCommunicator) -> R) -> R {
        ulfm::check();
        let out = {
            let (_g, c) = self.enter(op);
            f(c)
        };
        ulfm::check();
        out
    }
}

impl Drop for MpiWorld {
    fn drop(&mut self) {
        if let Handle::Owned(c) = std::mem::replace(&mut self.handle, Handle::Taken) {
            let _serial = lock(&SERIAL);
            ulfm::free(c);
        }
    }
}

/// `op` as MPI's operation.
fn system(op: Op) -> SystemOperation {
    match op {
        Op::Min => SystemOperation::min(),
        Op::Max => SystemOperation::max(),
        Op::Sum => SystemOperation::sum(),
        Op::BitOr => SystemOperation::bitwise_or(),
    }
}

/// A rank, root or destination as MPI's `int` (ranks fit: a communicator's size does).
fn mpi_rank(r: u32) -> i32 {
    i32::try_from(r).unwrap_or(i32::MAX)
}

impl World for MpiWorld {
    fn rank(&self) -> u32 {
        self.rank
    }

    fn size(&self) -> u32 {
        self.size
    }

    fn process_index(&self) -> u32 {
        ulfm::process_index().unwrap_or(self.rank)
    }

    fn concurrent_threads(&self) -> std::result::Result<(), String> {
        match self.threading {
            mpi::Threading::Multiple => Ok(()),
            level => Err(mpi_init::below_multiple(&level)),
        }
    }

    fn barrier(&self) {
        self.call("barrier", comm::barrier);
    }

    fn broadcast_into(&self, root: u32, buf: &mut [u8]) {
        self.call("broadcast_into", |c| {
            comm::broadcast_into(c, mpi_rank(root), buf)
        });
    }

    fn broadcast_from(&self, root: u32, mine: &[u8]) -> Vec<u8> {
        self.call("broadcast_from", |c| {
            comm::broadcast_from(c, mpi_rank(root), mine)
        })
    }

    fn all_gather_fixed(&self, mine: &[u8]) -> Vec<u8> {
        let mut out = vec![0u8; mine.len() * self.size as usize];
        self.call("all_gather_fixed", |c| {
            comm::all_gather_into(c, mine, &mut out[..])
        });
        out
    }

    fn all_gather_bytes(&self, mine: &[u8]) -> Vec<Vec<u8>> {
        self.call("all_gather_bytes", |c| comm::all_gather_bytes(c, mine))
    }

    fn all_reduce_u8(&self, v: u8, op: Op) -> u8 {
        let mut out = 0u8;
        self.call("all_reduce_u8", |c| {
            comm::all_reduce_into(c, &v, &mut out, system(op))
        });
        out
    }

    fn all_reduce_u64s(&self, values: &[u64], op: Op) -> Vec<u64> {
        let mut out = vec![0u64; values.len()];
        self.call("all_reduce_u64s", |c| {
            comm::all_reduce_into(c, values, &mut out[..], system(op))
        });
        out
    }

    fn exclusive_scan_u64(&self, v: u64, op: Op) -> u64 {
        let mut out = 0u64;
        self.call("exclusive_scan_u64", |c| {
            comm::exclusive_scan_into(c, &v, &mut out, system(op))
        });
        if self.rank == 0 {
            // (MPI leaves rank 0's exclusive scan undefined)
            op.identity()
        } else {
            out
        }
    }

    fn split(&self, color: Option<u32>, key: u32) -> Option<Box<dyn World>> {
        let color = match color {
            Some(c) => Color::with_value(
                i32::try_from(c).expect("a split's color is below 2^31 (an MPI int)"),
            ),
            None => Color::undefined(),
        };
        let key = i32::try_from(key).expect("a split's key is below 2^31 (an MPI int)");
        let part = self.call("split", |c| comm::split_by_color_with_key(c, color, key));
        part.map(|p| Box::new(MpiWorld::new(p)) as Box<dyn World>)
    }

    fn duplicate(&self) -> Box<dyn World> {
        let dup = self.call("duplicate", comm::duplicate);
        Box::new(MpiWorld::new(dup))
    }

    fn send(&self, dest: u32, tag: i32, data: &[u8]) {
        self.call("send", |c| {
            comm::send(&c.process_at_rank(mpi_rank(dest)), data, tag)
        });
    }

    fn recv(&self, src: u32, tag: i32) -> Vec<u8> {
        self.call("recv", |c| {
            comm::receive_vec(&c.process_at_rank(mpi_rank(src)), tag)
        })
    }

    fn recv_into(&self, src: u32, tag: i32, buf: &mut [u8]) {
        self.call("recv_into", |c| {
            comm::receive_into(&c.process_at_rank(mpi_rank(src)), buf, tag)
        });
    }

    fn recv_any(&self, tag: i32) -> (u32, Vec<u8>) {
        self.call("recv_any", |c| comm::receive_any_vec(c, tag))
    }

    fn sparse_exchange(&self, sends: &[(u32, Vec<u8>)], tag: i32) -> Vec<(u32, Vec<u8>)> {
        self.call("sparse_exchange", |c| comm::sparse_exchange(c, sends, tag))
    }

    fn abort(&self, code: i32) -> ! {
        // (without the lock: ending the job must not wait for anything)
        self.comm().abort(code)
    }

    fn set_host(
        self: Box<Self>,
        world_ranks: Vec<u32>,
        groups: Vec<String>,
        me: u32,
    ) -> Box<dyn SetHost> {
        let comm = self
            .into_communicator()
            .expect("a borrowed MPI view is never boxed");
        Box::new(MpiHost::new(comm, world_ranks, groups, me))
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
}
