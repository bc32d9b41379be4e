//! The host services over MPI: what every plugin call receives as its redundancy set's
//! communicator. This is the only module that makes MPI handles cross threads, hence the
//! `unsafe impl`s below.
#![allow(unsafe_code)]

use scr_plugin::sync::lock;
use std::io::Write as _;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use abi_stable::std_types::{RResult, RSlice, RSliceMut, RStr, RString};
use mpi::datatype::Equivalence as _;
use mpi::raw::{AsRaw as _, AsRawMut as _};
use mpi::topology::SimpleCommunicator;
use mpi::traits::{
    Communicator as _, CommunicatorCollectives as _, Destination as _, Root as _, Source as _,
};
use scr_plugin::{HostServices, LogLevel, PluginError, ReduceOp, MAX_TAG};

use super::comm::{collective, received, sent};
use super::world::Members;

/// Largest piece sent in one MPI call: counts are C `int`s. Every service counts its MPI
/// calls (see `super::comm`): a piece is one message or one collective.
const PIECE: usize = 1 << 30;

/// One redundancy set's communicator plus what plugins may ask about its members.
pub struct MpiHost {
    /// Freed in `Drop` under the MPI lock (hence not dropped as a plain field).
    comm: ManuallyDrop<SimpleCommunicator>,
    /// This process's member number, read once at construction: plugins ask for it from
    /// any thread, and asking MPI there would call it outside the lock.
    rank: u32,
    /// Number of members, read once at construction (see `rank`).
    size: u32,
    /// MPI's thread level, read once on the owner thread (see `enter`).
    threading: mpi::Threading,
    /// World rank and failure-group value of each member.
    members: Members,
    /// World rank of this process, for log lines.
    me: u32,
    cancelled: AtomicBool,
    /// The thread that made the host (the one that called into the runtime).
    owner: std::thread::ThreadId,
}

/// Serializes every MPI call made through any host, so that plugin threads never call MPI
/// concurrently (what MPI_THREAD_SERIALIZED permits).
/// [`super::world::mpi_world::MpiWorld`] takes it too.
pub(super) static SERIAL: Mutex<()> = Mutex::new(());

// SAFETY: an MPI communicator handle is a plain value that any thread may pass to MPI;
// what MPI requires is (a) no concurrent calls unless initialised with
// MPI_THREAD_MULTIPLE, and (b) calls from threads other than the main one only at
// MPI_THREAD_SERIALIZED or above. Every MPI call made through any `MpiHost` holds the
// global `SERIAL` lock, giving (a); `enter` refuses calls from a thread other than the
// owner unless MPI runs at MPI_THREAD_SERIALIZED or above, giving (b).
unsafe impl Send for MpiHost {}
// SAFETY: see `Send`: shared access reaches MPI only through `enter`.
unsafe impl Sync for MpiHost {}

impl MpiHost {
    /// Wrap `comm` (this set's communicator; the host owns it).
    pub fn new(
        comm: SimpleCommunicator,
        world_ranks: Vec<u32>,
        groups: Vec<String>,
        me: u32,
    ) -> Self {
        let (rank, size, threading) = {
            let _serial = lock(&SERIAL);
            (
                // a communicator's rank and size are never negative
                u32::try_from(comm.rank()).unwrap_or(0),
                u32::try_from(comm.size()).unwrap_or(0),
                mpi::environment::threading_support(),
            )
        };
        MpiHost {
            comm: ManuallyDrop::new(comm),
            rank,
            size,
            threading,
            members: Members::new(world_ranks, groups),
            me,
            cancelled: AtomicBool::new(false),
            owner: std::thread::current().id(),
        }
    }

    /// A host of its own on a duplicate of this set's communicator (collective over the
    /// set: every member calls it in the same order). Why: restoring a cached dataset of
    /// the set this run formed needs no split of the world (whose implementations
    /// all-gather every rank's color and key), only this set-local duplicate.
    pub fn duplicate(&self) -> MpiHost {
        let comm = {
            let _serial = lock(&SERIAL);
            super::comm::duplicate(&self.comm)
        };
        let (world_ranks, groups) = self.members.parts();
        MpiHost::new(comm, world_ranks, groups, self.me)
    }

    /// Whether the communicator has `members` members (a set recorded by an earlier run
    /// may no longer match the job).
    pub fn size_matches(&self, members: usize) -> bool {
        usize::try_from(self.size).is_ok_and(|s| s == members)
    }

    /// After a collective plugin call returned on this member, learn whether every member
    /// of the set returned too (a non-blocking barrier on the set's communicator).
    ///
    /// A member whose call succeeded waits for the others: if one of them is stuck, the
    /// member that failed ends the job. A member whose call failed (an error or a caught
    /// panic) cannot tell whether the others returned or wait inside the plugin for a
    /// message it will never send: it waits at most `grace` and returns `false` when the
    /// barrier did not complete, and the caller must then abort the job. Returns `true`
    /// when every member is known to have returned.
    #[must_use = "when settle returns false the job must be aborted: a pending barrier is left on the set"]
    pub fn settle(&self, failed: bool, grace: std::time::Duration) -> bool {
        let started = std::time::Instant::now();
        let mut told = false;
        let mut request = {
            let _serial = lock(&SERIAL);
            self.comm.immediate_barrier()
        };
        collective(0, 0);
        loop {
            let polled = {
                let _serial = lock(&SERIAL);
                request.test()
            };
            match polled {
                Ok(_) => return true,
                Err(pending) => request = pending,
            }
            if !failed && !told && started.elapsed() >= grace {
                // a member that succeeded waits for one still inside the plugin: that
                // member ends the job if it failed; say why this one waits meanwhile
                told = true;
                let _ = writeln!(
                    std::io::stderr().lock(),
                    "scr-rs[{}]: waiting for other members of the redundancy set to return from the plugin call ({} s so far)",
                    self.me,
                    grace.as_secs()
                );
            }
            if failed && started.elapsed() >= grace {
                // the request can never complete now; forget it rather than let rsmpi's
                // drop panic (the caller aborts the job next)
                std::mem::forget(request);
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Take the MPI lock, refusing a foreign thread when MPI's thread level forbids it.
    fn enter(&self) -> Result<MutexGuard<'static, ()>, PluginError> {
        if std::thread::current().id() != self.owner {
            let level = self.threading;
            if level < mpi::Threading::Serialized {
                return Err(PluginError::communication(format!(
                    "host services were called from a plugin thread, but MPI was initialised with thread level {level:?}; initialise MPI with Threading::Serialized or Multiple, or call from the calling thread"
                )));
            }
        }
        Ok(lock(&SERIAL))
    }

    /// `member` as an MPI rank of the set, or an error when the set has no such member.
    fn check(&self, member: u32) -> Result<i32, PluginError> {
        match i32::try_from(member) {
            Ok(r) if member < self.size => Ok(r),
            _ => Err(PluginError::communication(format!(
                "member {member} does not exist in a set of {} members",
                self.size
            ))),
        }
    }

    /// Receive one piece from `src`, refusing a message of another size instead of
    /// letting MPI fail the whole job with a truncation error.
    ///
    /// A longer message than `buf` is consumed without allocating its length (the peer
    /// chose it, up to 2 GiB): it is received truncated into `buf` with the set's
    /// communicator returning errors instead of aborting, so the next receive of the tag
    /// sees the next message.
    fn recv_piece(&self, src: i32, tag: i32, buf: &mut [u8]) -> Result<(), PluginError> {
        let (mut msg, status) = self.comm.process_at_rank(src).matched_probe_with_tag(tag);
        let arrived = status.count(u8::equivalent_datatype());
        let count = usize::try_from(arrived).unwrap_or(usize::MAX);
        received(count);
        if count == buf.len() {
            msg.matched_receive_into(buf);
            return Ok(());
        }
        let expected = buf.len();
        let mismatch = |extra: &str| {
            PluginError::communication(format!(
                "expected {expected} bytes from member {src} (tag {tag}) but {arrived} arrived{extra}"
            ))
        };
        if count < buf.len() {
            // a shorter message fits: take it into the front of the buffer
            msg.matched_receive_into(&mut buf[..count]);
            return Err(mismatch(""));
        }
        // a longer one: receive it truncated, with truncation an error code rather than
        // fatal on this communicator for the one call
        let len = i32::try_from(buf.len()).unwrap_or(i32::MAX);
        let comm = self.comm.as_raw();
        // `old` is written by MPI_Comm_get_errhandler before it is read and freed once
        // after it is set back. `msg` is the handle the probe just matched, received
        // exactly once here (then forgotten, MPI having set it to MPI_MESSAGE_NULL;
        // forgetting it also skips rsmpi's drop assertion, which would panic should an
        // MPI leave it set after an error).
        // SAFETY: plain MPI calls on this host's own communicator, under the caller's MPI
        // lock; the receive writes at most `len` <= `buf.len()` bytes into `buf`.
        let rc = unsafe {
            let mut old = std::mem::MaybeUninit::uninit();
            mpi::ffi::MPI_Comm_get_errhandler(comm, old.as_mut_ptr());
            let mut old = old.assume_init();
            mpi::ffi::MPI_Comm_set_errhandler(comm, mpi::ffi::RSMPI_ERRORS_RETURN);
            let mut st = std::mem::MaybeUninit::uninit();
            let rc = mpi::ffi::MPI_Mrecv(
                buf.as_mut_ptr().cast(),
                len,
                u8::equivalent_datatype().as_raw(),
                msg.as_raw_mut(),
                st.as_mut_ptr(),
            );
            mpi::ffi::MPI_Comm_set_errhandler(comm, old);
            mpi::ffi::MPI_Errhandler_free(&mut old);
            rc
        };
        std::mem::forget(msg);
        Err(mismatch(&format!(
            " (message discarded{})",
            if rc == 0 { "" } else { ", truncated" }
        )))
    }
}

impl Drop for MpiHost {
    fn drop(&mut self) {
        let _serial = lock(&SERIAL);
        // SAFETY: `comm` is dropped exactly once, here, and never used afterwards.
        unsafe { ManuallyDrop::drop(&mut self.comm) };
    }
}

/// A plugin's tag as an MPI tag: `0..=MAX_TAG` (the smallest `MPI_TAG_UB` MPI allows),
/// an error otherwise — never truncated into a negative or out-of-range MPI tag, which
/// MPI treats as a fatal error.
fn mpi_tag(tag: u32) -> Result<i32, PluginError> {
    match i32::try_from(tag) {
        Ok(t) if tag <= MAX_TAG => Ok(t),
        _ => Err(PluginError::communication(format!(
            "tag {tag} is above the largest plugin tag {MAX_TAG}"
        ))),
    }
}

impl HostServices for MpiHost {
    fn rank(&self) -> u32 {
        self.rank
    }

    fn size(&self) -> u32 {
        self.size
    }

    fn world_rank(&self, member: u32) -> u32 {
        self.members.world_rank(member)
    }

    fn failure_group(&self, member: u32) -> RString {
        self.members.failure_group(member)
    }

    fn send(&self, dest: u32, tag: u32, data: RSlice<'_, u8>) -> RResult<(), PluginError> {
        let run = || {
            let d = self.check(dest)?;
            let tag = mpi_tag(tag)?;
            let _g = self.enter()?;
            let p = self.comm.process_at_rank(d);
            for piece in pieces(data.len()) {
                sent(piece.len());
                p.send_with_tag(&data[piece], tag);
            }
            Ok(())
        };
        run().into()
    }

    fn recv(&self, src: u32, tag: u32, mut buf: RSliceMut<'_, u8>) -> RResult<(), PluginError> {
        let mut run = || {
            let s = self.check(src)?;
            let tag = mpi_tag(tag)?;
            let _g = self.enter()?;
            let len = buf.len();
            for piece in pieces(len) {
                self.recv_piece(s, tag, &mut buf.as_mut_slice()[piece])?;
            }
            Ok(())
        };
        run().into()
    }

    fn sendrecv(
        &self,
        dest: u32,
        data: RSlice<'_, u8>,
        src: u32,
        mut buf: RSliceMut<'_, u8>,
        tag: u32,
    ) -> RResult<(), PluginError> {
        let mut run = || {
            let d = self.check(dest)?;
            let s = self.check(src)?;
            let tag = mpi_tag(tag)?;
            let _g = self.enter()?;
            let send = pieces(data.len());
            let recv = pieces(buf.len());
            // Each receive goes through a probe, so a message of the wrong size is an
            // error rather than an MPI truncation that aborts the job.
            for i in 0..send.len().max(recv.len()) {
                match (send.get(i), recv.get(i)) {
                    (Some(sp), Some(rp)) => {
                        sent(sp.len());
                        let out = &data[sp.clone()];
                        let into = &mut buf.as_mut_slice()[rp.clone()];
                        mpi::request::scope(|scope| -> Result<(), PluginError> {
                            let req = self
                                .comm
                                .process_at_rank(d)
                                .immediate_send_with_tag(scope, out, tag);
                            let r = self.recv_piece(s, tag, into);
                            req.wait();
                            r
                        })?;
                    }
                    (Some(sp), None) => {
                        sent(sp.len());
                        self.comm
                            .process_at_rank(d)
                            .send_with_tag(&data[sp.clone()], tag)
                    }
                    (None, Some(rp)) => {
                        self.recv_piece(s, tag, &mut buf.as_mut_slice()[rp.clone()])?
                    }
                    (None, None) => {}
                }
            }
            Ok(())
        };
        run().into()
    }

    fn barrier(&self) -> RResult<(), PluginError> {
        let run = || {
            let _g = self.enter()?;
            self.comm.barrier();
            collective(0, 0);
            Ok(())
        };
        run().into()
    }

    fn all_reduce_u64(&self, value: u64, op: ReduceOp) -> RResult<u64, PluginError> {
        let run = || {
            let _g = self.enter()?;
            let mut out = 0u64;
            let op = match op {
                ReduceOp::Sum => mpi::collective::SystemOperation::sum(),
                ReduceOp::Min => mpi::collective::SystemOperation::min(),
                ReduceOp::Max => mpi::collective::SystemOperation::max(),
            };
            self.comm.all_reduce_into(&value, &mut out, op);
            collective(8, 8);
            Ok(out)
        };
        run().into()
    }

    fn broadcast(&self, root: u32, mut buf: RSliceMut<'_, u8>) -> RResult<(), PluginError> {
        let mut run = || {
            let r = self.check(root)?;
            let _g = self.enter()?;
            // agree on the length first: a mismatch is an error on every member
            let mut len = buf.len() as u64;
            self.comm.process_at_rank(r).broadcast_into(&mut len);
            let is_root = r == self.comm.rank();
            let counted = |n: usize| {
                if is_root {
                    collective(n, 0)
                } else {
                    collective(0, n)
                }
            };
            counted(8);
            let mine_ok = u8::from(len == buf.len() as u64);
            let mut all_ok = 0u8;
            self.comm.all_reduce_into(
                &mine_ok,
                &mut all_ok,
                mpi::collective::SystemOperation::min(),
            );
            collective(1, 1);
            if all_ok == 0 {
                return Err(PluginError::communication(format!(
                    "broadcast from member {root}: buffers differ in length ({len} bytes at the root, {} here)",
                    buf.len()
                )));
            }
            if len > 0 {
                for piece in pieces(buf.len()) {
                    counted(piece.len());
                    self.comm
                        .process_at_rank(r)
                        .broadcast_into(&mut buf.as_mut_slice()[piece]);
                }
            }
            Ok(())
        };
        run().into()
    }

    fn log(&self, level: LogLevel, message: RStr<'_>) {
        // through tracing (filtered by SCR_DEBUG or RUST_LOG there); never `eprintln!`,
        // which panics when stderr is closed
        crate::log::plugin_message(level, self.me, "scheme", message.as_str());
    }

    fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }
}

/// What the runtime asks of a set on MPI: the inherent methods above.
impl super::world::SetHost for MpiHost {
    fn services(&self) -> scr_plugin::HostRef<'_> {
        scr_plugin::host_ref(self)
    }

    fn duplicate(&self) -> Box<dyn super::world::SetHost> {
        Box::new(MpiHost::duplicate(self))
    }

    fn size_matches(&self, members: usize) -> bool {
        MpiHost::size_matches(self, members)
    }

    fn settle(&self, failed: bool, grace: std::time::Duration) -> bool {
        MpiHost::settle(self, failed, grace)
    }
}

/// Byte ranges of at most [`PIECE`] bytes covering `len` (one empty range for 0).
fn pieces(len: usize) -> Vec<std::ops::Range<usize>> {
    if len == 0 {
        // one empty piece, so an empty message is still sent and received
        return std::iter::once(0..0).collect();
    }
    (0..len)
        .step_by(PIECE)
        .map(|s| s..(s + PIECE).min(len))
        .collect()
}
