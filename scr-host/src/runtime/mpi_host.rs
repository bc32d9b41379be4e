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
//!
//! # A background thread below MPI_THREAD_MULTIPLE
//!
//! A host made by [`MpiHost::funneled`] serves a background thread that may not call MPI:
//! every MPI call above (each a post, a test or a probe, never a wait for a peer) is handed
//! to the application's thread through a [`Funnel`] and made there when it next enters the
//! library (see `funnel`). The code is the same in both forms: each MPI step goes through
//! [`MpiHost::mpi`].
//!
//! The services themselves are in `services` (the `HostServices` impl) and the MPI
//! requests they post and poll in `requests`; both use `unsafe` too (raw MPI requests on
//! buffers that must outlive them), each block with its `SAFETY` comment.
#![allow(unsafe_code)]

use scr_plugin::sync::lock;
use std::io::Write as _;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use mpi::point_to_point::MatchedReceiveVec as _;
use mpi::topology::SimpleCommunicator;
use mpi::traits::{Communicator as _, Source as _};
use scr_plugin::{ErrorCode, PluginError};

use super::comm::{collective, received, sent};
use super::world::Members;

mod funnel;
mod requests;
mod services;

use funnel::Engaged;
pub(crate) use funnel::Funnel;
use requests::{iallreduce_u64, isend, Backoff, Req};

/// The tag of abort notices on a set's control communicator (nothing else is sent point
/// to point there).
pub(super) const NOTICE_TAG: i32 = 1;

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

/// One member's abort notice, as received (also over a set's own connections:
/// `socket_host`).
#[derive(Clone, Debug)]
pub(super) struct Notice {
    pub(super) member: u32,
    pub(super) error: PluginError,
}

impl Notice {
    /// The error a service returns to the plugin while this notice holds.
    pub(super) fn to_plugin(&self) -> PluginError {
        PluginError::new(ErrorCode::PEER_FAILED, self.error.message())
    }

    /// The bytes that carry a notice of `code` and `text`: the code, then the text (cut
    /// at [`NOTICE_MAX`] bytes in all).
    pub(super) fn payload(code: ErrorCode, text: &str) -> Vec<u8> {
        let mut payload = code.0.to_le_bytes().to_vec();
        payload.extend_from_slice(text.as_bytes());
        payload.truncate(NOTICE_MAX);
        payload
    }

    /// The notice of `member` that `bytes` carry (made by [`Notice::payload`]).
    pub(super) fn from_payload(member: u32, bytes: &[u8]) -> Notice {
        let code = bytes
            .get(..4)
            .and_then(|b| b.try_into().ok())
            .map_or(ErrorCode::OTHER, |b| ErrorCode(u32::from_le_bytes(b)));
        let text = String::from_utf8_lossy(bytes.get(4..).unwrap_or_default()).into_owned();
        Notice {
            member,
            error: PluginError::new(code, text),
        }
    }
}

impl Settled {
    /// The outcome of a call that some member failed: the lowest failing member's error
    /// among `notices`, the same on every member (this one, `rank` of `members`, world
    /// rank `me`, answers for itself should none be known).
    pub(super) fn lowest(
        notices: Vec<Notice>,
        members: &Members,
        (rank, me): (u32, u32),
    ) -> Settled {
        match notices.into_iter().min_by_key(|n| n.member) {
            Some(n) => Settled::Failed {
                member: n.member,
                world_rank: members.world_rank(n.member),
                error: n.error,
            },
            None => Settled::Failed {
                member: rank,
                world_rank: me,
                error: PluginError::new(ErrorCode::PEER_FAILED, "a member of the set failed"),
            },
        }
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
    /// A host for a background thread under MPI_THREAD_MULTIPLE ([`MpiHost::background`]):
    /// its MPI calls take no `SERIAL` lock. A thread that waits for a peer while holding
    /// it would keep the runtime's own collectives (which take it) from running, and a
    /// peer's runtime waiting in one of those for this rank would never answer.
    concurrent: bool,
    /// The funnel its MPI calls go through, for a background thread below
    /// MPI_THREAD_MULTIPLE ([`MpiHost::funneled`]).
    funnel: Option<Arc<Funnel>>,
}

/// A service's hold on MPI (see [`MpiHost::enter`]): the `SERIAL` lock, or, for a funneled
/// host, the mark that its thread is inside a service.
struct Entered<'a> {
    _serial: Option<MutexGuard<'static, ()>>,
    _engaged: Option<Engaged<'a>>,
}

/// Serializes every MPI call made through any host, so that plugin threads never call MPI
/// concurrently (what MPI_THREAD_SERIALIZED permits).
/// `MpiWorld` takes it too.
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
        {
            let _serial = lock(&SERIAL);
            super::ulfm::watch(&comm);
            super::ulfm::watch(&ctl);
        }
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
            concurrent: false,
            funnel: None,
        }
    }

    /// A host of its own for a background thread below MPI_THREAD_MULTIPLE: a duplicate
    /// of this set's communicator (collective over the set) whose every MPI call is made
    /// by the thread serving `funnel` (the one calling this: the application's).
    pub(crate) fn funneled(&self, funnel: Arc<Funnel>) -> MpiHost {
        let mut host = self.duplicate();
        // (the serving thread takes the MPI lock around each call it runs)
        host.concurrent = true;
        host.funnel = Some(funnel);
        host
    }

    /// [`MpiHost::mpi`] of a test (a request's, a probe's): whether it completed, noted in
    /// the funnel (see `Funnel::note`).
    fn mpi_test(&self, f: impl FnOnce() -> bool) -> bool {
        self.mpi(|| {
            let completed = f();
            if let Some(funnel) = &self.funnel {
                funnel.note(completed);
            }
            completed
        })
    }

    /// A polling loop's backoff (see `Backoff`).
    fn backoff(&self) -> Backoff {
        Backoff::new(self.funnel.is_none())
    }

    /// Make one MPI step (a post, a test, a probe: never a wait for another member):
    /// here, or, for a funneled host, on the thread serving its funnel.
    fn mpi<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.funnel {
            Some(funnel) => funnel.run(f),
            None => f(),
        }
    }

    /// A host of its own for a background thread (see `concurrent`): a duplicate of this
    /// set's communicator (collective over the set), used only by that thread, whose
    /// calls run alongside the application's and the runtime's own. Only where MPI runs
    /// at MPI_THREAD_MULTIPLE (the caller checks).
    pub fn background(&self) -> MpiHost {
        let mut host = self.duplicate();
        host.concurrent = true;
        host
    }

    /// The `SERIAL` lock, unless this host's calls may run concurrently (see
    /// `concurrent`).
    fn serial(&self) -> Option<MutexGuard<'static, ()>> {
        (!self.concurrent).then(|| lock(&SERIAL))
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
        // (a funneled host's members advance steadily only while their applications wait
        // for the work: see `Funnel::waited`)
        let elapsed = || match &self.funnel {
            Some(funnel) => funnel.waited(),
            None => started.elapsed(),
        };
        let first_hand = failure.is_some() && lock(&self.call).notices.is_empty();
        let mut told = false;
        let _serial = self.serial();
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
            payload = Notice::payload(e.code, &text);
            for m in (0..self.size).filter(|&m| m != self.rank) {
                // SAFETY: `payload` is neither changed nor freed before every request is
                // completed below, or leaked with them (`Stuck`).
                notices
                    .push(self.mpi(|| unsafe { isend(&self.ctl, &payload, m as i32, NOTICE_TAG) }));
                sent(payload.len());
            }
            lock(&self.call).notices.push(Notice {
                member: self.rank,
                error: PluginError::new(e.code, text),
            });
        }
        let early = lock(&self.call).early.take();
        let _engaged = self.funnel.as_ref().map(|f| f.engage());
        let mut settling = early.unwrap_or_else(|| self.post_settle(first_hand));
        let mut backoff = self.backoff();
        while !self.mpi_test(|| settling.req.test()) {
            if failure.is_some() && elapsed() >= grace {
                // the reduction can never complete now; leave it (and the notices' buffers)
                // to MPI rather than free what MPI may still use (the caller aborts next)
                std::mem::forget(settling);
                std::mem::forget(payload);
                return Settled::Stuck;
            }
            if failure.is_none() && !told && elapsed() >= grace {
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
        if super::ulfm::lost() {
            // the set's communicators were revoked: the reduction completed with an
            // error and its sum is not one; MPI may still hold the notices' buffers
            std::mem::forget(settling);
            std::mem::forget(payload);
            std::mem::forget(notices);
            self.in_call.store(false, Ordering::SeqCst);
            drop(_serial);
            // (on the runtime's thread, after the plugin call returned: unwinds to the
            // API call, see `ulfm`)
            super::ulfm::raise();
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
        let mut backoff = self.backoff();
        while state.notices.len() < expected {
            match self.mpi(|| self.take_notice()) {
                Some(n) => state.notices.push(n),
                None => backoff.pause(),
            }
        }
        for req in &mut notices {
            while !self.mpi_test(|| req.test()) {
                backoff.pause();
            }
        }
        drop(payload);
        // a fresh data communicator: the old one may hold messages and collectives of the
        // abandoned exchanges (see the module doc). A funneled host cannot make one (a
        // duplicate waits for every member's application thread); its owner drops the
        // host after a failed call and makes a new one at the next use instead.
        if self.funnel.is_none() {
            let fresh = super::comm::duplicate(&self.ctl);
            super::ulfm::watch(&fresh);
            let old = lock(&self.comm).replace(fresh);
            if let Some(old) = old {
                super::ulfm::free(old);
            }
        }
        self.cancelled.store(false, Ordering::SeqCst);
        // (`failed` > 0 notices were received or sent)
        Settled::lowest(state.notices, &self.members, (self.rank, self.me))
    }

    /// Post this member's share of the settle reduction (1 when it failed first-hand).
    /// Under the MPI lock.
    fn post_settle(&self, first_hand: bool) -> Settling {
        let mut buf = Box::new([u64::from(first_hand), 0]);
        // SAFETY: the box moves into the `Settling` with its request (a move keeps the
        // heap address); `Settling`'s drop leaks the box while the request is pending.
        let req = self.mpi(|| unsafe { iallreduce_u64(&self.ctl, &mut buf, mpi::ffi::RSMPI_SUM) });
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
        if super::ulfm::lost() {
            // a probe on a revoked communicator failed and matched nothing MPI holds (a
            // funneled host's step may run after the loss its thread has not yet seen)
            std::mem::forget(probed);
            return None;
        }
        // (sent by another member's host, never longer than NOTICE_MAX)
        let (bytes, status) = probed.matched_receive_vec::<u8>();
        received(bytes.len());
        let member = u32::try_from(status.source_rank()).unwrap_or(u32::MAX);
        Some(Notice::from_payload(member, &bytes))
    }

    /// `Err` when a member failed in this call (a notice held or just arrived; under the
    /// MPI lock): what every service returns from then on.
    fn peer_failed(&self) -> Result<(), PluginError> {
        if super::ulfm::lost() {
            return Err(process_lost());
        }
        if !self.in_call.load(Ordering::SeqCst) {
            return Ok(());
        }
        let mut state = lock(&self.call);
        if let Some(n) = state.notices.first() {
            return Err(n.to_plugin());
        }
        match self.mpi(|| self.take_notice()) {
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
        let mut backoff = self.backoff();
        loop {
            if self.mpi_test(|| req.test()) {
                // (a request on a revoked communicator completes with an error)
                return match super::ulfm::lost() {
                    true => Err(process_lost()),
                    false => Ok(()),
                };
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
        let mut backoff = self.backoff();
        while !self.mpi_test(|| req.test() || settling.req.test()) {
            backoff.pause();
        }
        Err(e)
    }

    /// The data communicator (under the MPI lock: it is replaced only there).
    fn data(&self) -> MutexGuard<'_, Option<SimpleCommunicator>> {
        lock(&self.comm)
    }

    /// Take the MPI lock, refusing a foreign thread when MPI's thread level forbids it; a
    /// funneled host's thread calls no MPI itself and marks that it is inside a service.
    fn enter(&self) -> Result<Entered<'_>, PluginError> {
        if let Some(funnel) = &self.funnel {
            return Ok(Entered {
                _serial: None,
                _engaged: Some(funnel.engage()),
            });
        }
        if std::thread::current().id() != self.owner {
            let level = self.threading;
            if level < mpi::Threading::Serialized {
                return Err(PluginError::communication(format!(
                    "host services were called from a plugin thread, but MPI was initialised with thread level {level:?}; initialise MPI with Threading::Serialized or Multiple, or call from the calling thread"
                )));
            }
        }
        Ok(Entered {
            _serial: self.serial(),
            _engaged: None,
        })
    }

    /// `member` as an MPI rank of the set, or an error when the set has no such member.
    fn check(&self, member: u32) -> Result<i32, PluginError> {
        // (a member below the size, which MPI gave as an i32)
        member_in(member, self.size).map(|m| m as i32)
    }
}

/// `member` when a set of `size` members has it; the error a plugin gets otherwise (from
/// every set host alike).
pub(super) fn member_in(member: u32, size: u32) -> Result<u32, PluginError> {
    match member < size {
        true => Ok(member),
        false => Err(PluginError::communication(format!(
            "member {member} does not exist in a set of {size} members"
        ))),
    }
}

/// A plugin's tag: `0..=MAX_TAG` (the smallest `MPI_TAG_UB` MPI allows), an error
/// otherwise (from every set host alike).
pub(super) fn plugin_tag(tag: u32) -> Result<u32, PluginError> {
    match tag <= scr_plugin::MAX_TAG {
        true => Ok(tag),
        false => Err(PluginError::communication(format!(
            "tag {tag} is above the largest plugin tag {}",
            scr_plugin::MAX_TAG
        ))),
    }
}

impl Drop for MpiHost {
    fn drop(&mut self) {
        let comm = lock(&self.comm).take();
        // SAFETY: `ctl` is taken exactly once, here, and never used afterwards.
        let ctl = unsafe { ManuallyDrop::take(&mut self.ctl) };
        let free = move || {
            if let Some(c) = comm {
                super::ulfm::free(c);
            }
            super::ulfm::free(ctl);
        };
        match &self.funnel {
            Some(funnel) => funnel.run(free),
            None => {
                let _serial = self.serial();
                free();
            }
        }
    }
}

/// What a host service returns to the plugin once a process of the job was lost: the
/// set's communicators are revoked (see `ulfm`), and the runtime's next call unwinds.
pub(super) fn process_lost() -> PluginError {
    PluginError::communication(format!(
        "a process of the job was lost ({})",
        super::ulfm::error_string(super::ulfm::lost_code())
    ))
}
