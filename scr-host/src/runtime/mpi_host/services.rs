//! The `HostServices` a plugin call receives over MPI: each blocking service runs as
//! nonblocking MPI operations polled together with the control communicator's abort
//! notices (see the `mpi_host` module doc); and the runtime's `SetHost` view of the
//! host. `unsafe` here: sends posted from the plugin's buffer, collectives on buffers
//! that must outlive them, and one raw truncating receive (each with its `SAFETY`
//! comment).
#![allow(unsafe_code)]

use std::sync::atomic::Ordering;

use abi_stable::std_types::{RResult, RSlice, RSliceMut, RStr, RString};
use mpi::datatype::Equivalence as _;
use mpi::raw::{AsRaw as _, AsRawMut as _};
use mpi::topology::SimpleCommunicator;
use mpi::traits::{Communicator as _, Source as _};
use scr_plugin::{HostServices, LogLevel, PluginError, ReduceOp};

use super::requests::{iallreduce_u64, ibarrier, ibcast, imrecv, isend, pieces};
use super::{MpiHost, Settled, SERIAL};
use crate::runtime::comm::{collective, received, sent};

impl MpiHost {
    /// An all-reduce of one `u64` on `comm`, polled (under the MPI lock).
    fn reduce(
        &self,
        comm: &SimpleCommunicator,
        value: u64,
        op: ReduceOp,
    ) -> Result<u64, PluginError> {
        let op = match op {
            ReduceOp::Sum => mpi::collective::SystemOperation::sum(),
            ReduceOp::Min => mpi::collective::SystemOperation::min(),
            ReduceOp::Max => mpi::collective::SystemOperation::max(),
        };
        let mut buf = Box::new([value, 0]);
        // SAFETY: the box is freed only after the request completed; when the call is
        // abandoned it is leaked (MPI may still write it).
        let mut req = self.mpi(|| unsafe { iallreduce_u64(comm, &mut buf, op.as_raw()) });
        collective(8, 8);
        match self.poll(&mut req) {
            Ok(()) => Ok(buf[1]),
            Err(e) => {
                std::mem::forget(buf);
                Err(e)
            }
        }
    }

    /// A broadcast of `buf` (the host's own) from `root` on `comm`, polled (under the
    /// MPI lock).
    fn bcast(
        &self,
        comm: &SimpleCommunicator,
        root: i32,
        buf: &mut Vec<u8>,
    ) -> Result<(), PluginError> {
        // SAFETY: the vector's heap buffer is freed only after the request completed; when
        // the call is abandoned it is leaked (MPI may still read or write it).
        let mut req = self.mpi(|| unsafe { ibcast(comm, buf, root) });
        match self.poll(&mut req) {
            Ok(()) => Ok(()),
            Err(e) => {
                std::mem::forget(std::mem::take(buf));
                Err(e)
            }
        }
    }

    /// Receive one piece from `src`, refusing a message of another size instead of
    /// letting MPI fail the whole job with a truncation error.
    ///
    /// A longer message than `buf` is consumed without allocating its length (the peer
    /// chose it, up to 2 GiB): it is received truncated into `buf` with the set's
    /// communicator returning errors instead of aborting, so the next receive of the tag
    /// sees the next message.
    ///
    /// The probe is polled, together with the control communicator's notices: a member
    /// that failed ends the wait with its error (no receive is posted before the message
    /// is there, so nothing is left to cancel).
    fn recv_piece(
        &self,
        comm: &SimpleCommunicator,
        src: i32,
        tag: i32,
        buf: &mut [u8],
    ) -> Result<(), PluginError> {
        let mut backoff = self.backoff();
        let (mut msg, status) = loop {
            let mut probed = None;
            self.mpi_test(|| {
                probed = comm
                    .process_at_rank(src)
                    .immediate_matched_probe_with_tag(tag);
                probed.is_some()
            });
            if let Some(m) = probed {
                if crate::runtime::ulfm::lost() {
                    // (a failed probe matched nothing MPI holds)
                    std::mem::forget(m);
                    return Err(super::process_lost());
                }
                break m;
            }
            self.peer_failed()?;
            backoff.pause();
        };
        let arrived = status.count(u8::equivalent_datatype());
        let count = usize::try_from(arrived).unwrap_or(usize::MAX);
        received(count);
        if count == buf.len() {
            return self.receive_matched(msg, buf);
        }
        let expected = buf.len();
        let mismatch = |extra: &str| {
            PluginError::communication(format!(
                "expected {expected} bytes from member {src} (tag {tag}) but {arrived} arrived{extra}"
            ))
        };
        if count < buf.len() {
            // a shorter message fits: take it into the front of the buffer
            self.receive_matched(msg, &mut buf[..count])?;
            return Err(mismatch(""));
        }
        // a longer one: receive it truncated, with truncation an error code rather than
        // fatal on this communicator for the one call (a blocking receive of a message
        // already matched: only a plugin's wrong length takes this path)
        let len = i32::try_from(buf.len()).unwrap_or(i32::MAX);
        let comm = comm.as_raw();
        // `old` is written by MPI_Comm_get_errhandler before it is read and freed once
        // after it is set back. `msg` is the handle the probe just matched, received
        // exactly once here (then forgotten, MPI having set it to MPI_MESSAGE_NULL;
        // forgetting it also skips rsmpi's drop assertion, which would panic should an
        // MPI leave it set after an error).
        // SAFETY: plain MPI calls on this host's own communicator, under the caller's MPI
        // lock; the receive writes at most `len` <= `buf.len()` bytes into `buf`.
        let rc = self.mpi(|| unsafe {
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
        });
        std::mem::forget(msg);
        Err(mismatch(&format!(
            " (message discarded{})",
            if rc == 0 { "" } else { ", truncated" }
        )))
    }
}

impl MpiHost {
    /// Receive `msg`, which a probe matched, into `buf` (its length): posted, then polled
    /// to its end whatever the other members do (the message is on its way already).
    fn receive_matched(
        &self,
        mut msg: mpi::point_to_point::Message,
        buf: &mut [u8],
    ) -> Result<(), PluginError> {
        // SAFETY: `buf` is neither used nor freed before the request completed below.
        let mut req = self.mpi(|| unsafe { imrecv(&mut msg, buf) });
        // (MPI set it to MPI_MESSAGE_NULL; see `recv_piece` on rsmpi's drop)
        std::mem::forget(msg);
        let mut backoff = self.backoff();
        while !self.mpi_test(|| req.test()) {
            backoff.pause();
        }
        match crate::runtime::ulfm::lost() {
            true => Err(super::process_lost()),
            false => Ok(()),
        }
    }
}

/// A plugin's tag as an MPI tag: `0..=MAX_TAG` (the smallest `MPI_TAG_UB` MPI allows),
/// an error otherwise — never truncated into a negative or out-of-range MPI tag, which
/// MPI treats as a fatal error.
fn mpi_tag(tag: u32) -> Result<i32, PluginError> {
    // (at most MAX_TAG, which an i32 holds)
    super::plugin_tag(tag).map(|t| t as i32)
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
            self.peer_failed()?;
            let comm = self.data();
            let comm = comm.as_ref().ok_or_else(gone)?;
            for piece in pieces(data.len()) {
                sent(piece.len());
                // SAFETY: `poll_send` returns only once the send completed or no member
                // can receive it any more (see the module doc): `data` outlives its use.
                let mut req = self.mpi(|| unsafe { isend(comm, &data[piece], d, tag) });
                self.poll_send(&mut req)?;
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
            self.peer_failed()?;
            let comm = self.data();
            let comm = comm.as_ref().ok_or_else(gone)?;
            let len = buf.len();
            for piece in pieces(len) {
                self.recv_piece(comm, s, tag, &mut buf.as_mut_slice()[piece])?;
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
            self.peer_failed()?;
            let comm = self.data();
            let comm = comm.as_ref().ok_or_else(gone)?;
            let send = pieces(data.len());
            let recv = pieces(buf.len());
            // Each receive goes through a probe, so a message of the wrong size is an
            // error rather than an MPI truncation that aborts the job.
            for i in 0..send.len().max(recv.len()) {
                let mut req = send.get(i).map(|sp| {
                    sent(sp.len());
                    // SAFETY: `poll_send` below returns only once the send completed or
                    // no member can receive it any more: `data` outlives its use.
                    self.mpi(|| unsafe { isend(comm, &data[sp.clone()], d, tag) })
                });
                let got = match recv.get(i) {
                    Some(rp) => self.recv_piece(comm, s, tag, &mut buf.as_mut_slice()[rp.clone()]),
                    None => Ok(()),
                };
                let sent_ok = match req.as_mut() {
                    Some(r) => self.poll_send(r),
                    None => Ok(()),
                };
                got?;
                sent_ok?;
            }
            Ok(())
        };
        run().into()
    }

    fn barrier(&self) -> RResult<(), PluginError> {
        let run = || {
            let _g = self.enter()?;
            self.peer_failed()?;
            let comm = self.data();
            let comm = comm.as_ref().ok_or_else(gone)?;
            let mut req = self.mpi(|| ibarrier(comm));
            collective(0, 0);
            self.poll(&mut req)
        };
        run().into()
    }

    fn all_reduce_u64(&self, value: u64, op: ReduceOp) -> RResult<u64, PluginError> {
        let run = || {
            let _g = self.enter()?;
            self.peer_failed()?;
            let comm = self.data();
            let comm = comm.as_ref().ok_or_else(gone)?;
            self.reduce(comm, value, op)
        };
        run().into()
    }

    fn broadcast(&self, root: u32, mut buf: RSliceMut<'_, u8>) -> RResult<(), PluginError> {
        let mut run = || {
            let r = self.check(root)?;
            let _g = self.enter()?;
            self.peer_failed()?;
            let comm = self.data();
            let comm = comm.as_ref().ok_or_else(gone)?;
            let is_root = root == self.rank;
            let counted = |n: usize| {
                if is_root {
                    collective(n, 0)
                } else {
                    collective(0, n)
                }
            };
            // agree on the length first: a mismatch is an error on every member
            let mine = buf.len() as u64;
            let mut len = mine.to_le_bytes().to_vec();
            self.bcast(comm, r, &mut len)?;
            counted(8);
            let len = u64::from_le_bytes(len[..8].try_into().unwrap_or_default());
            if self.reduce(comm, u64::from(len == mine), ReduceOp::Min)? == 0 {
                return Err(PluginError::communication(format!(
                    "broadcast from member {root}: buffers differ in length ({len} bytes at the root, {mine} here)"
                )));
            }
            if len > 0 {
                for piece in pieces(buf.len()) {
                    counted(piece.len());
                    // through a buffer of the host's own: an abandoned broadcast may
                    // still be written (or read) by MPI after the call returned
                    let mut own = buf.as_slice()[piece.clone()].to_vec();
                    self.bcast(comm, r, &mut own)?;
                    buf.as_mut_slice()[piece].copy_from_slice(&own);
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

    /// True once a notice arrived in this call. A plugin in a long local loop makes no
    /// other service call, so this one looks for a notice too — without blocking: only
    /// when no other thread holds the MPI lock and MPI's thread level allows this thread.
    fn is_cancelled(&self) -> bool {
        if !self.cancelled.load(Ordering::SeqCst)
            && self.funnel.is_none()
            && self.in_call.load(Ordering::SeqCst)
            && (std::thread::current().id() == self.owner
                || self.threading >= mpi::Threading::Serialized)
        {
            if self.concurrent {
                let _ = self.peer_failed();
            } else if let Ok(_serial) = SERIAL.try_lock() {
                let _ = self.peer_failed();
            }
        }
        self.cancelled.load(Ordering::SeqCst)
    }
}

/// What the runtime asks of a set on MPI: the inherent methods (in `mpi_host.rs`).
impl crate::runtime::world::SetHost for MpiHost {
    fn services(&self) -> scr_plugin::HostRef<'_> {
        self.begin_call();
        scr_plugin::host_ref(self)
    }

    fn duplicate(&self) -> Box<dyn crate::runtime::world::SetHost> {
        Box::new(MpiHost::duplicate(self))
    }

    fn background(
        &self,
        funnel: Option<std::sync::Arc<super::Funnel>>,
    ) -> Box<dyn crate::runtime::world::SetHost> {
        match funnel {
            Some(funnel) => Box::new(self.funneled(funnel)),
            None => Box::new(MpiHost::background(self)),
        }
    }

    fn size_matches(&self, members: usize) -> bool {
        MpiHost::size_matches(self, members)
    }

    fn settle(
        &self,
        call: &str,
        failure: Option<&PluginError>,
        grace: std::time::Duration,
    ) -> Settled {
        MpiHost::settle(self, call, failure, grace)
    }
}

/// The error of a service called after the host let its communicator go (never while a
/// plugin call runs).
fn gone() -> PluginError {
    PluginError::communication("the redundancy set's communicator is closed")
}
