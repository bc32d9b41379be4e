//! The host services over MPI: what every plugin call receives as its redundancy set's
//! communicator. This is the only module that makes MPI handles cross threads, hence the
//! `unsafe impl`s below.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use abi_stable::std_types::{RResult, RSlice, RSliceMut, RStr, RString};
use mpi::datatype::Equivalence as _;
use mpi::point_to_point as p2p;
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
    /// Serializes MPI calls when several plugin threads use the services at once.
    serial: Mutex<()>,
}

// SAFETY: an MPI communicator handle is a plain value that any thread may pass to MPI;
// what MPI requires is that calls are not concurrent unless the library was initialised
// with MPI_THREAD_MULTIPLE. Every MPI call made through an `MpiHost` holds `serial`, so
// calls through one host are never concurrent, which MPI_THREAD_SERIALIZED permits.
unsafe impl Send for MpiHost {}
// SAFETY: see `Send`: shared access only reaches MPI through the `serial` lock.
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
            serial: Mutex::new(()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, ()> {
        self.serial.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn check(&self, member: u32) -> Result<i32, PluginError> {
        if (member as usize) < self.world_ranks.len() {
            Ok(member as i32)
        } else {
            Err(PluginError::communication(format!(
                "member {member} does not exist in a set of {} members",
                self.world_ranks.len()
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
            let _g = self.lock();
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
            let _g = self.lock();
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
            let _g = self.lock();
            let send = pieces(data.len());
            let recv = pieces(buf.len());
            // Pair pieces; an extra piece on either side goes alone.
            for i in 0..send.len().max(recv.len()) {
                match (send.get(i), recv.get(i)) {
                    (Some(sp), Some(rp)) => {
                        let out = &data[sp.clone()];
                        let into = &mut buf.as_mut_slice()[rp.clone()];
                        if sp.len() == rp.len() {
                            p2p::send_receive_into_with_tags(
                                out,
                                &self.comm.process_at_rank(d),
                                tag as i32,
                                into,
                                &self.comm.process_at_rank(s),
                                tag as i32,
                            );
                        } else {
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
        let _g = self.lock();
        self.comm.barrier();
        RResult::ROk(())
    }

    fn all_reduce_u64(&self, value: u64, op: ReduceOp) -> RResult<u64, PluginError> {
        let _g = self.lock();
        let mut out = 0u64;
        match op {
            ReduceOp::Sum => {
                self.comm
                    .all_reduce_into(&value, &mut out, mpi::collective::SystemOperation::sum())
            }
            ReduceOp::Min => {
                self.comm
                    .all_reduce_into(&value, &mut out, mpi::collective::SystemOperation::min())
            }
            ReduceOp::Max => {
                self.comm
                    .all_reduce_into(&value, &mut out, mpi::collective::SystemOperation::max())
            }
        }
        RResult::ROk(out)
    }

    fn broadcast(&self, root: u32, mut buf: RSliceMut<'_, u8>) -> RResult<(), PluginError> {
        let mut run = || {
            let r = self.check(root)?;
            let _g = self.lock();
            let len = buf.len();
            for piece in pieces(len) {
                self.comm
                    .process_at_rank(r)
                    .broadcast_into(&mut buf.as_mut_slice()[piece]);
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
