//! The host services over MPI: what every plugin call receives as its redundancy set's
//! communicator. This is the only module that makes MPI handles cross threads, hence the
//! `unsafe impl`s below.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use abi_stable::std_types::{RResult, RSlice, RSliceMut, RStr, RString};
use mpi::datatype::Equivalence as _;
use mpi::topology::SimpleCommunicator;
use mpi::traits::{
    Communicator as _, CommunicatorCollectives as _, Destination as _, Root as _, Source as _,
};
use scr_plugin::{HostServices, LogLevel, PluginError, ReduceOp};

/// Largest piece sent in one MPI call: counts are C `int`s.
const PIECE: usize = 1 << 30;

/// One redundancy set's communicator plus what plugins may ask about its members.
pub struct MpiHost {
    comm: SimpleCommunicator,
    /// World rank of each member.
    world_ranks: Vec<u32>,
    /// Failure-group value of each member.
    groups: Vec<String>,
    /// World rank of this process, for log lines.
    me: u32,
    /// Highest level printed (0: errors and warnings only).
    debug: u64,
    cancelled: AtomicBool,
    /// The thread that made the host (the one that called into the runtime).
    owner: std::thread::ThreadId,
}

/// Serializes every MPI call made through any host, so that plugin threads never call MPI
/// concurrently (what MPI_THREAD_SERIALIZED permits).
static SERIAL: Mutex<()> = Mutex::new(());

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
        debug: u64,
    ) -> Self {
        MpiHost {
            comm,
            world_ranks,
            groups,
            me,
            debug,
            cancelled: AtomicBool::new(false),
            owner: std::thread::current().id(),
        }
    }

    /// Whether the communicator has `members` members (a set recorded by an earlier run
    /// may no longer match the job).
    pub fn size_matches(&self, members: usize) -> bool {
        self.comm.size() as usize == members
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
            let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
            self.comm.immediate_barrier()
        };
        loop {
            let polled = {
                let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
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
                eprintln!(
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
            let level = mpi::environment::threading_support();
            if level < mpi::Threading::Serialized {
                return Err(PluginError::communication(format!(
                    "host services were called from a plugin thread, but MPI was initialised with thread level {level:?}; initialise MPI with Threading::Serialized or Multiple, or call from the calling thread"
                )));
            }
        }
        Ok(SERIAL.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn check(&self, member: u32) -> Result<i32, PluginError> {
        if member < self.comm.size() as u32 {
            Ok(member as i32)
        } else {
            Err(PluginError::communication(format!(
                "member {member} does not exist in a set of {} members",
                self.comm.size()
            )))
        }
    }

    /// Receive one piece from `src`, refusing a message of another size instead of
    /// letting MPI fail the whole job with a truncation error.
    fn recv_piece(&self, src: i32, tag: i32, buf: &mut [u8]) -> Result<(), PluginError> {
        let (msg, status) = self.comm.process_at_rank(src).matched_probe_with_tag(tag);
        let count = status.count(u8::equivalent_datatype());
        let count = usize::try_from(count).unwrap_or(usize::MAX);
        if count != buf.len() {
            let mut sink = vec![0u8; count];
            msg.matched_receive_into(&mut sink[..]);
            return Err(PluginError::communication(format!(
                "expected {} bytes from member {src} (tag {tag}) but {count} arrived",
                buf.len()
            )));
        }
        msg.matched_receive_into(buf);
        Ok(())
    }
}

impl HostServices for MpiHost {
    fn rank(&self) -> u32 {
        self.comm.rank() as u32
    }

    fn size(&self) -> u32 {
        self.comm.size() as u32
    }

    fn world_rank(&self, member: u32) -> u32 {
        self.world_ranks
            .get(member as usize)
            .copied()
            .unwrap_or(u32::MAX)
    }

    fn failure_group(&self, member: u32) -> RString {
        self.groups
            .get(member as usize)
            .map(|s| s.as_str().into())
            .unwrap_or_default()
    }

    fn send(&self, dest: u32, tag: u32, data: RSlice<'_, u8>) -> RResult<(), PluginError> {
        let run = || {
            let d = self.check(dest)?;
            let _g = self.enter()?;
            let p = self.comm.process_at_rank(d);
            for piece in pieces(data.len()) {
                p.send_with_tag(&data[piece], tag as i32);
            }
            Ok(())
        };
        run().into()
    }

    fn recv(&self, src: u32, tag: u32, mut buf: RSliceMut<'_, u8>) -> RResult<(), PluginError> {
        let mut run = || {
            let s = self.check(src)?;
            let _g = self.enter()?;
            let len = buf.len();
            for piece in pieces(len) {
                self.recv_piece(s, tag as i32, &mut buf.as_mut_slice()[piece])?;
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
            let _g = self.enter()?;
            let send = pieces(data.len());
            let recv = pieces(buf.len());
            // Each receive goes through a probe, so a message of the wrong size is an
            // error rather than an MPI truncation that aborts the job.
            for i in 0..send.len().max(recv.len()) {
                match (send.get(i), recv.get(i)) {
                    (Some(sp), Some(rp)) => {
                        let out = &data[sp.clone()];
                        let into = &mut buf.as_mut_slice()[rp.clone()];
                        mpi::request::scope(|scope| -> Result<(), PluginError> {
                            let req = self
                                .comm
                                .process_at_rank(d)
                                .immediate_send_with_tag(scope, out, tag as i32);
                            let r = self.recv_piece(s, tag as i32, into);
                            req.wait();
                            r
                        })?;
                    }
                    (Some(sp), None) => self
                        .comm
                        .process_at_rank(d)
                        .send_with_tag(&data[sp.clone()], tag as i32),
                    (None, Some(rp)) => {
                        self.recv_piece(s, tag as i32, &mut buf.as_mut_slice()[rp.clone()])?
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
            let mine_ok = u8::from(len == buf.len() as u64);
            let mut all_ok = 0u8;
            self.comm.all_reduce_into(
                &mine_ok,
                &mut all_ok,
                mpi::collective::SystemOperation::min(),
            );
            if all_ok == 0 {
                return Err(PluginError::communication(format!(
                    "broadcast from member {root}: buffers differ in length ({len} bytes at the root, {} here)",
                    buf.len()
                )));
            }
            if len > 0 {
                for piece in pieces(buf.len()) {
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
        let shown = match level {
            LogLevel::Error | LogLevel::Warn => true,
            LogLevel::Info => self.debug >= 1,
            LogLevel::Debug => self.debug >= 2,
        };
        if shown {
            eprintln!("scr-rs[{}] {level:?}: {message}", self.me);
        }
    }

    fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
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
