//! The host services over MPI: what every plugin call receives as its redundancy set's
//! communicator. This is the only module that makes MPI handles cross threads, hence the
//! `unsafe impl`s below.
//!
//! # A member that fails cannot leave the others waiting
//!
//! Every exchange a plugin makes goes through these services, so the host can end it.
//! Each set has two communicators: the *data* communicator the plugin's messages and
//! collectives travel on (tags `0..=MAX_TAG`, all the plugin's), and a *control*
//! duplicate that only the host uses — for abort notices (point to point,
//! [`NOTICE_TAG`]) and for [`MpiHost::settle`]'s reduction after each collective plugin
//! call. A separate communicator rather than a reserved tag: plugins own every tag MPI
//! guarantees, and a collective left pending on the data communicator by an abandoned
//! call would be matched against the host's next collective there.
//!
//! - When a plugin call fails on a member (an error, or a panic the guard caught) and that
//!   member saw no notice itself, its [`MpiHost::settle`] sends an abort notice —
//!   `member 1 (world rank 3) failed in apply: ERROR` — to every other member first.
//! - Every blocking service (`send`, `recv`, `sendrecv`, `barrier`, `all_reduce_u64`,
//!   `broadcast`) runs as nonblocking MPI operations polled in a loop that also probes
//!   the control communicator for a notice. On a notice it stops waiting and returns
//!   [`ErrorCode::PEER_FAILED`](scr_plugin::ErrorCode::PEER_FAILED) with the notice's
//!   text, as does every later service of the call; `is_cancelled` turns true (and
//!   itself looks for a notice when the MPI lock is free, for a plugin in a local loop).
//!   Notices are looked for only inside a call ([`MpiHost::begin_call`] to `settle`).
//! - An abandoned operation is never completed: its MPI request and the host-owned buffer
//!   it uses are leaked (a few bytes, on a failed call only) — except a send from the
//!   plugin's own buffer, which may already be matched by a receiver: it is waited for
//!   until it completes or until every member has left its plugin call (the settle
//!   reduction, posted early), after which no member receives on the communicator.
//! - `settle` then agrees (an 8-byte sum on the control communicator) on how many members
//!   failed first-hand; each member receives exactly that many notices (minus its own),
//!   so none is left for a later call, and every member returns the error of the lowest
//!   such member.
//! - **No draining of the data communicator; a fresh one instead.** After a failed call
//!   the data communicator may hold a failed member's unreceived sends, pending
//!   collectives some members entered and others never will, and receives in progress.
//!   Those cannot be drained reliably (a collective cannot be cancelled, nor — on Open
//!   MPI — a send), so every member frees it and takes a duplicate of the control
//!   communicator as the new data communicator (collective over the set, on the failure
//!   path only). A call that succeeded everywhere keeps the communicator: nothing of it
//!   is pending.
#![allow(unsafe_code)]

use scr_plugin::sync::lock;
use std::io::Write as _;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use abi_stable::std_types::{RResult, RSlice, RSliceMut, RStr, RString};
use mpi::datatype::Equivalence as _;
use mpi::point_to_point::MatchedReceiveVec as _;
use mpi::raw::{AsRaw as _, AsRawMut as _};
use mpi::topology::SimpleCommunicator;
use mpi::traits::{Communicator as _, Source as _};
use scr_plugin::{ErrorCode, HostServices, LogLevel, PluginError, ReduceOp, MAX_TAG};

use super::comm::{collective, received, sent};
use super::world::Members;

/// Largest piece sent in one MPI call: counts are C `int`s. Every service counts its MPI
/// calls (see `super::comm`): a piece is one message or one collective.
const PIECE: usize = 1 << 30;

/// The tag of abort notices on a set's control communicator (nothing else is sent point
/// to point there).
pub const NOTICE_TAG: i32 = 1;

/// The longest abort notice sent (a longer error text is cut).
const NOTICE_MAX: usize = 4096;

/// How [`MpiHost::settle`] ended a collective plugin call.
#[derive(Debug)]
pub enum Settled {
    /// Every member returned and none failed first-hand: keep this member's outcome.
    Returned,
    /// A member failed: every member gets this same error (the lowest failing member's,
    /// as its abort notice said: `member M (world rank W) failed in CALL: ERROR`).
    Failed {
        /// That member's number in the set.
        member: u32,
        /// Its `MPI_COMM_WORLD` rank.
        world_rank: u32,
        /// Its error, as every member returns it.
        error: PluginError,
    },
    /// This member failed and the others did not all return within the grace period (a
    /// plugin that keeps blocking outside the host services): the caller must end the job.
    Stuck,
}

/// One member's abort notice, as received.
#[derive(Clone, Debug)]
struct Notice {
    member: u32,
    error: PluginError,
}

impl Notice {
    /// The error a service returns to the plugin while this notice holds.
    fn to_plugin(&self) -> PluginError {
        PluginError::new(ErrorCode::PEER_FAILED, self.error.message())
    }
}

/// The settle reduction once posted, with its host-owned buffer (`[mine, sum]`).
struct Settling {
    req: Req,
    /// Always `Some` until dropped.
    buf: Option<Box<[u64; 2]>>,
}

impl Settling {
    /// The agreed sum (once the request completed).
    fn sum(&self) -> u64 {
        self.buf.as_ref().map_or(0, |b| b[1])
    }
}

impl Drop for Settling {
    fn drop(&mut self) {
        if !self.req.done {
            // MPI may still write the result: leave it the buffer
            std::mem::forget(self.buf.take());
        }
    }
}

/// What this member learned during the current collective call.
#[derive(Default)]
struct CallState {
    /// Abort notices received, in arrival order.
    notices: Vec<Notice>,
    /// The settle reduction when a service posted it early (see the module doc).
    early: Option<Settling>,
}

/// One redundancy set's communicator plus what plugins may ask about its members.
pub struct MpiHost {
    /// The data communicator (plugins' traffic), replaced after a failed call; freed
    /// under the MPI lock.
    comm: Mutex<Option<SimpleCommunicator>>,
    /// The control communicator (notices and settling); freed in `Drop` under the MPI
    /// lock (hence not dropped as a plain field).
    ctl: ManuallyDrop<SimpleCommunicator>,
    /// The current call's notices and early settle.
    call: Mutex<CallState>,
    /// Whether a collective plugin call is running ([`MpiHost::begin_call`] up to
    /// [`MpiHost::settle`]): only then do services look for notices, so that a member
    /// still in an exchange of its own between calls (the conformance harness makes
    /// some on these services) never takes the next call's notice for its own.
    in_call: AtomicBool,
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
        let (rank, size, threading, ctl) = {
            let _serial = lock(&SERIAL);
            (
                // a communicator's rank and size are never negative
                u32::try_from(comm.rank()).unwrap_or(0),
                u32::try_from(comm.size()).unwrap_or(0),
                mpi::environment::threading_support(),
                super::comm::duplicate(&comm),
            )
        };
        MpiHost {
            comm: Mutex::new(Some(comm)),
            ctl: ManuallyDrop::new(ctl),
            call: Mutex::new(CallState::default()),
            in_call: AtomicBool::new(false),
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
            super::comm::duplicate(&self.ctl)
        };
        let (world_ranks, groups) = self.members.parts();
        MpiHost::new(comm, world_ranks, groups, self.me)
    }

    /// Whether the communicator has `members` members (a set recorded by an earlier run
    /// may no longer match the job).
    pub fn size_matches(&self, members: usize) -> bool {
        usize::try_from(self.size).is_ok_and(|s| s == members)
    }

    /// A collective plugin call on these services starts (on every member): from now
    /// until [`MpiHost::settle`], a service waiting for another member also watches for
    /// its abort notice.
    pub fn begin_call(&self) {
        self.in_call.store(true, Ordering::SeqCst);
    }

    /// After a collective plugin call (`call`, for the notice) returned on this member
    /// with `failure` (`None`: it succeeded), settle it with the other members of the set
    /// (collective over the set; see the module doc).
    ///
    /// A member that failed first-hand (it received no notice during the call) first
    /// sends every other member an abort notice, so that those waiting in a host service
    /// for it get an error at once instead of waiting forever. Then the members agree on
    /// how many failed first-hand (a non-blocking 8-byte sum on the control
    /// communicator), each receives the notices meant for it, and every member returns
    /// the same [`Settled`]: [`Settled::Failed`] with the lowest failing member's error, or
    /// [`Settled::Returned`]. A member that succeeded waits for the others as long as it
    /// takes (saying so on stderr after `grace`); a member that failed waits at most
    /// `grace` and returns [`Settled::Stuck`] when some member still has not returned (a
    /// plugin blocking outside the host services): the caller must then end the job.
    #[must_use = "when settle returns Stuck the job must be aborted: a pending reduction is left on the set"]
    pub fn settle(
        &self,
        call: &str,
        failure: Option<&PluginError>,
        grace: std::time::Duration,
    ) -> Settled {
        let started = std::time::Instant::now();
        let first_hand = failure.is_some() && lock(&self.call).notices.is_empty();
        let mut told = false;
        let _serial = lock(&SERIAL);
        // the notices go out before this member's share of the reduction, so that every
        // member that waits in a service for this one hears of it
        let mut notices: Vec<Req> = Vec::new();
        let mut payload = Vec::new();
        if let (true, Some(e)) = (first_hand, failure) {
            let text = format!(
                "member {} (world rank {}) failed in {call}: {}",
                self.rank,
                self.members.world_rank(self.rank),
                e.message()
            );
            payload = e.code.0.to_le_bytes().to_vec();
            payload.extend_from_slice(text.as_bytes());
            payload.truncate(NOTICE_MAX);
            for m in (0..self.size).filter(|&m| m != self.rank) {
                // SAFETY: `payload` is neither changed nor freed before every request is
                // completed below, or leaked with them (`Stuck`).
                notices.push(unsafe { isend(&self.ctl, &payload, m as i32, NOTICE_TAG) });
                sent(payload.len());
            }
            lock(&self.call).notices.push(Notice {
                member: self.rank,
                error: PluginError::new(e.code, text),
            });
        }
        let early = lock(&self.call).early.take();
        let mut settling = early.unwrap_or_else(|| self.post_settle(first_hand));
        let mut backoff = Backoff::new();
        while !settling.req.test() {
            if failure.is_some() && started.elapsed() >= grace {
                // the reduction can never complete now; leave it (and the notices' buffers)
                // to MPI rather than free what MPI may still use (the caller aborts next)
                std::mem::forget(settling);
                std::mem::forget(payload);
                return Settled::Stuck;
            }
            if failure.is_none() && !told && started.elapsed() >= grace {
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
            backoff.pause();
        }
        collective(8, 8);
        self.in_call.store(false, Ordering::SeqCst);
        let failed = settling.sum();
        let mut state = std::mem::take(&mut *lock(&self.call));
        if failed == 0 {
            return Settled::Returned;
        }
        // exactly `failed` members sent a notice to each other member: receive the rest
        // of them, so none is left on the control communicator for a later call
        let expected = usize::try_from(failed).unwrap_or(usize::MAX);
        let mut backoff = Backoff::new();
        while state.notices.len() < expected {
            match self.take_notice() {
                Some(n) => state.notices.push(n),
                None => backoff.pause(),
            }
        }
        for req in &mut notices {
            req.wait();
        }
        drop(payload);
        // a fresh data communicator: the old one may hold messages and collectives of the
        // abandoned exchanges (see the module doc)
        let fresh = super::comm::duplicate(&self.ctl);
        let old = lock(&self.comm).replace(fresh);
        drop(old);
        self.cancelled.store(false, Ordering::SeqCst);
        match state.notices.into_iter().min_by_key(|n| n.member) {
            Some(n) => Settled::Failed {
                member: n.member,
                world_rank: self.members.world_rank(n.member),
                error: n.error,
            },
            // (not reached: `failed` > 0 notices were received or sent)
            None => Settled::Failed {
                member: self.rank,
                world_rank: self.me,
                error: PluginError::new(ErrorCode::PEER_FAILED, "a member of the set failed"),
            },
        }
    }

    /// Post this member's share of the settle reduction (1 when it failed first-hand).
    /// Under the MPI lock.
    fn post_settle(&self, first_hand: bool) -> Settling {
        let mut buf = Box::new([u64::from(first_hand), 0]);
        // SAFETY: the box moves into the `Settling` with its request (a move keeps the
        // heap address); `Settling`'s drop leaks the box while the request is pending.
        let req = unsafe { iallreduce_u64(&self.ctl, &mut buf, mpi::ffi::RSMPI_SUM) };
        Settling {
            req,
            buf: Some(buf),
        }
    }

    /// Receive one abort notice if one has arrived (under the MPI lock).
    fn take_notice(&self) -> Option<Notice> {
        let probed = self
            .ctl
            .any_process()
            .immediate_matched_probe_with_tag(NOTICE_TAG)?;
        // (sent by another member's host, never longer than NOTICE_MAX)
        let (bytes, status) = probed.matched_receive_vec::<u8>();
        received(bytes.len());
        let member = u32::try_from(status.source_rank()).unwrap_or(u32::MAX);
        let code = bytes
            .get(..4)
            .and_then(|b| b.try_into().ok())
            .map_or(ErrorCode::OTHER, |b| ErrorCode(u32::from_le_bytes(b)));
        let text = String::from_utf8_lossy(bytes.get(4..).unwrap_or_default()).into_owned();
        Some(Notice {
            member,
            error: PluginError::new(code, text),
        })
    }

    /// `Err` when a member failed in this call (a notice held or just arrived; under the
    /// MPI lock): what every service returns from then on.
    fn peer_failed(&self) -> Result<(), PluginError> {
        if !self.in_call.load(Ordering::SeqCst) {
            return Ok(());
        }
        let mut state = lock(&self.call);
        if let Some(n) = state.notices.first() {
            return Err(n.to_plugin());
        }
        match self.take_notice() {
            Some(n) => {
                self.cancelled.store(true, Ordering::SeqCst);
                let e = n.to_plugin();
                state.notices.push(n);
                Err(e)
            }
            None => Ok(()),
        }
    }

    /// Poll `req` until it completes (`Ok`) or a member failed (`Err`, the request left
    /// pending: its buffer must be the host's and must outlive it, see the module doc).
    fn poll(&self, req: &mut Req) -> Result<(), PluginError> {
        let mut backoff = Backoff::new();
        loop {
            if req.test() {
                return Ok(());
            }
            self.peer_failed()?;
            backoff.pause();
        }
    }

    /// Poll a send from the plugin's buffer until it completes. When a member failed
    /// meanwhile, keep waiting until the send completes or until every member has left
    /// its plugin call (this member's share of the settle reduction posted now): only
    /// then can no receiver still be reading the buffer.
    fn poll_send(&self, req: &mut Req) -> Result<(), PluginError> {
        let Err(e) = self.poll(req) else {
            return Ok(());
        };
        let mut state = lock(&self.call);
        if state.early.is_none() {
            state.early = Some(self.post_settle(false));
        }
        let Some(settling) = state.early.as_mut() else {
            return Err(e);
        };
        let mut backoff = Backoff::new();
        while !req.test() && !settling.req.test() {
            backoff.pause();
        }
        Err(e)
    }

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
        let mut req = unsafe { iallreduce_u64(comm, &mut buf, op.as_raw()) };
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
        let mut req = unsafe { ibcast(comm, buf, root) };
        match self.poll(&mut req) {
            Ok(()) => Ok(()),
            Err(e) => {
                std::mem::forget(std::mem::take(buf));
                Err(e)
            }
        }
    }

    /// The data communicator (under the MPI lock: it is replaced only there).
    fn data(&self) -> MutexGuard<'_, Option<SimpleCommunicator>> {
        lock(&self.comm)
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
        let mut backoff = Backoff::new();
        let (mut msg, status) = loop {
            if let Some(m) = comm
                .process_at_rank(src)
                .immediate_matched_probe_with_tag(tag)
            {
                break m;
            }
            self.peer_failed()?;
            backoff.pause();
        };
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
        let comm = comm.as_raw();
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
        drop(lock(&self.comm).take());
        // SAFETY: `ctl` is dropped exactly once, here, and never used afterwards.
        unsafe { ManuallyDrop::drop(&mut self.ctl) };
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
            self.peer_failed()?;
            let comm = self.data();
            let comm = comm.as_ref().ok_or_else(gone)?;
            for piece in pieces(data.len()) {
                sent(piece.len());
                // SAFETY: `poll_send` returns only once the send completed or no member
                // can receive it any more (see the module doc): `data` outlives its use.
                let mut req = unsafe { isend(comm, &data[piece], d, tag) };
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
                    unsafe { isend(comm, &data[sp.clone()], d, tag) }
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
            let mut req = ibarrier(comm);
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
            let is_root = r == comm.rank();
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
            && self.in_call.load(Ordering::SeqCst)
            && (std::thread::current().id() == self.owner
                || self.threading >= mpi::Threading::Serialized)
        {
            if let Ok(_serial) = SERIAL.try_lock() {
                let _ = self.peer_failed();
            }
        }
        self.cancelled.load(Ordering::SeqCst)
    }
}

/// What the runtime asks of a set on MPI: the inherent methods above.
impl super::world::SetHost for MpiHost {
    fn services(&self) -> scr_plugin::HostRef<'_> {
        self.begin_call();
        scr_plugin::host_ref(self)
    }

    fn duplicate(&self) -> Box<dyn super::world::SetHost> {
        Box::new(MpiHost::duplicate(self))
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

/// Waiting in a polling loop: spin briefly, then yield the core (two ranks often share
/// one), then, after a second, sleep between polls.
struct Backoff {
    started: std::time::Instant,
    spins: u32,
}

impl Backoff {
    fn new() -> Backoff {
        Backoff {
            started: std::time::Instant::now(),
            spins: 0,
        }
    }

    fn pause(&mut self) {
        if self.spins < 64 {
            self.spins += 1;
            std::hint::spin_loop();
        } else if self.started.elapsed() < std::time::Duration::from_secs(1) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }
}

/// A nonblocking MPI request this module posted, and whether it completed. One that is
/// dropped pending is simply left to MPI (with the buffer its poster leaked).
struct Req {
    raw: mpi::ffi::MPI_Request,
    done: bool,
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
    fn test(&mut self) -> bool {
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

    /// Wait until it completes.
    fn wait(&mut self) {
        if !self.done {
            let mut st = std::mem::MaybeUninit::uninit();
            // SAFETY: as in `test`; MPI_Wait completes and frees the request in place.
            unsafe { mpi::ffi::MPI_Wait(&mut self.raw, st.as_mut_ptr()) };
            self.done = true;
        }
    }
}

/// Post a send of `data` (at most [`PIECE`] bytes) to `dest` on `comm`.
///
/// # Safety
/// `data` must stay allocated and unchanged until the request completes, or for ever
/// when it is abandoned while a receiver may still match it.
unsafe fn isend(comm: &SimpleCommunicator, data: &[u8], dest: i32, tag: i32) -> Req {
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
fn ibarrier(comm: &SimpleCommunicator) -> Req {
    let mut raw = std::mem::MaybeUninit::uninit();
    // SAFETY: a barrier on this host's communicator; MPI writes the request only.
    unsafe { mpi::ffi::MPI_Ibarrier(comm.as_raw(), raw.as_mut_ptr()) };
    Req::posted(raw)
}

/// Post an all-reduce of `buf[0]` into `buf[1]` with `op` on `comm`.
///
/// # Safety
/// `buf` must stay allocated until the request completes, or for ever when abandoned.
unsafe fn iallreduce_u64(
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
unsafe fn ibcast(comm: &SimpleCommunicator, buf: &mut [u8], root: i32) -> Req {
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
