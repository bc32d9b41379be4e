//! The nonblocking MPI requests the host posts and polls (`MPI_Isend`, `MPI_Imrecv`,
//! `MPI_Ibarrier`, `MPI_Iallreduce`, `MPI_Ibcast`, raw, so that a request can be left pending with its
//! buffer when a call is abandoned: see the `mpi_host` module doc), messages cut into
//! pieces of at most [`PIECE`] bytes, and the polling loops' backoff. `unsafe` here: the
//! raw MPI calls (each with its `SAFETY` comment; what the callers must keep is under
//! `# Safety`).
#![allow(unsafe_code)]

use mpi::datatype::Equivalence as _;
use mpi::raw::AsRaw as _;
use mpi::topology::SimpleCommunicator;

/// Largest piece sent in one MPI call: counts are C `int`s. Every service counts its MPI
/// calls (see `super::comm`): a piece is one message or one collective.
const PIECE: usize = 1 << 30;

/// Waiting in a polling loop: spin briefly, then yield the core (two ranks often share
/// one), then, after a second, sleep between polls.
/// A funneled host's thread never sleeps: it waits in the funnel for its steps to be
/// made, and a sleep would only slow the application's thread serving it.
pub(super) struct Backoff {
    started: std::time::Instant,
    spins: u32,
    sleeps: bool,
}

impl Backoff {
    pub(super) fn new(sleeps: bool) -> Backoff {
        Backoff {
            started: std::time::Instant::now(),
            spins: 0,
            sleeps,
        }
    }

    pub(super) fn pause(&mut self) {
        if self.spins < 64 {
            self.spins += 1;
            std::hint::spin_loop();
        } else if !self.sleeps || self.started.elapsed() < std::time::Duration::from_secs(1) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }
}

/// A nonblocking MPI request this module posted, and whether it completed. One that is
/// dropped pending is simply left to MPI (with the buffer its poster leaked).
pub(super) struct Req {
    raw: mpi::ffi::MPI_Request,
    pub(super) done: bool,
}

impl Req {
    /// A request MPI just wrote into `raw`.
    fn posted(raw: std::mem::MaybeUninit<mpi::ffi::MPI_Request>) -> Req {
        // SAFETY: every caller passes the request argument of an MPI_I* call that
        // returned (MPI aborts the job on an error), so MPI wrote it.
        let raw = unsafe { raw.assume_init() };
        Req { raw, done: false }
    }

    /// Whether it completed (MPI_Test once; true ever after).
    pub(super) fn test(&mut self) -> bool {
        if !self.done {
            let mut flag = 0;
            let mut st = std::mem::MaybeUninit::uninit();
            // SAFETY: `raw` is a pending request this module posted, under the MPI lock;
            // MPI_Test writes `flag` and `st` and, once complete, frees it in place.
            unsafe { mpi::ffi::MPI_Test(&mut self.raw, &mut flag, st.as_mut_ptr()) };
            self.done = flag != 0;
        }
        self.done
    }
}

/// Post a send of `data` (at most [`PIECE`] bytes) to `dest` on `comm`.
///
/// # Safety
/// `data` must stay allocated and unchanged until the request completes, or for ever
/// when it is abandoned while a receiver may still match it.
pub(super) unsafe fn isend(comm: &SimpleCommunicator, data: &[u8], dest: i32, tag: i32) -> Req {
    let count = i32::try_from(data.len()).unwrap_or(i32::MAX);
    let mut raw = std::mem::MaybeUninit::uninit();
    // SAFETY: `count` <= `data.len()` bytes are read from `data`, which the caller keeps
    // alive (above); MPI writes the request. Under the MPI lock.
    unsafe {
        let dt = u8::equivalent_datatype();
        mpi::ffi::MPI_Isend(
            data.as_ptr().cast(),
            count,
            dt.as_raw(),
            dest,
            tag,
            comm.as_raw(),
            raw.as_mut_ptr(),
        )
    };
    Req::posted(raw)
}

/// Post a barrier on `comm` (no buffer).
pub(super) fn ibarrier(comm: &SimpleCommunicator) -> Req {
    let mut raw = std::mem::MaybeUninit::uninit();
    // SAFETY: a barrier on this host's communicator; MPI writes the request only.
    unsafe { mpi::ffi::MPI_Ibarrier(comm.as_raw(), raw.as_mut_ptr()) };
    Req::posted(raw)
}

/// Post an all-reduce of `buf[0]` into `buf[1]` with `op` on `comm`.
///
/// # Safety
/// `buf` must stay allocated until the request completes, or for ever when abandoned.
pub(super) unsafe fn iallreduce_u64(
    comm: &SimpleCommunicator,
    buf: &mut [u64; 2],
    op: mpi::ffi::MPI_Op,
) -> Req {
    let mut raw = std::mem::MaybeUninit::uninit();
    let (send, recv) = buf.split_at_mut(1);
    // SAFETY: one u64 read from `send` and written to `recv`, kept alive by the caller
    // (above); MPI writes the request. Under the MPI lock.
    unsafe {
        let dt = u64::equivalent_datatype();
        mpi::ffi::MPI_Iallreduce(
            send.as_ptr().cast(),
            recv.as_mut_ptr().cast(),
            1,
            dt.as_raw(),
            op,
            comm.as_raw(),
            raw.as_mut_ptr(),
        )
    };
    Req::posted(raw)
}

/// Post a broadcast of `buf` (at most [`PIECE`] bytes) from `root` on `comm`.
///
/// # Safety
/// `buf`'s heap buffer must stay allocated until the request completes, or for ever
/// when abandoned.
pub(super) unsafe fn ibcast(comm: &SimpleCommunicator, buf: &mut [u8], root: i32) -> Req {
    let count = i32::try_from(buf.len()).unwrap_or(i32::MAX);
    let mut raw = std::mem::MaybeUninit::uninit();
    // SAFETY: `count` <= `buf.len()` bytes, kept alive by the caller (above); MPI writes
    // the request. Under the MPI lock.
    unsafe {
        let dt = u8::equivalent_datatype();
        mpi::ffi::MPI_Ibcast(
            buf.as_mut_ptr().cast(),
            count,
            dt.as_raw(),
            root,
            comm.as_raw(),
            raw.as_mut_ptr(),
        )
    };
    Req::posted(raw)
}

/// Post the receive of `msg` (a message a probe matched, of at most `buf.len()` bytes)
/// into `buf`; MPI sets `msg` to `MPI_MESSAGE_NULL`.
///
/// # Safety
/// `buf` must stay allocated, and be neither read nor written, until the request
/// completes.
pub(super) unsafe fn imrecv(msg: &mut mpi::point_to_point::Message, buf: &mut [u8]) -> Req {
    use mpi::raw::AsRawMut as _;
    let count = i32::try_from(buf.len()).unwrap_or(i32::MAX);
    let mut raw = std::mem::MaybeUninit::uninit();
    // SAFETY: at most `count` <= `buf.len()` bytes are written into `buf`, which the
    // caller keeps for MPI (above); `msg` is a matched message, received exactly once;
    // MPI writes the request. Under the MPI lock.
    unsafe {
        let dt = u8::equivalent_datatype();
        mpi::ffi::MPI_Imrecv(
            buf.as_mut_ptr().cast(),
            count,
            dt.as_raw(),
            msg.as_raw_mut(),
            raw.as_mut_ptr(),
        )
    };
    Req::posted(raw)
}

/// Byte ranges of at most [`PIECE`] bytes covering `len` (one empty range for 0).
pub(super) fn pieces(len: usize) -> Vec<std::ops::Range<usize>> {
    if len == 0 {
        // one empty piece, so an empty message is still sent and received
        return std::iter::once(0..0).collect();
    }
    (0..len)
        .step_by(PIECE)
        .map(|s| s..(s + PIECE).min(len))
        .collect()
}
