//! A redundancy set's host services over TCP connections of the library's own, for a
//! background protection where MPI runs below MPI_THREAD_MULTIPLE
//! (`protect_below_multiple = sockets`): the thread may not call MPI there, so its
//! scheme's messages, collectives and settlement travel on sockets that no MPI call
//! touches. The application's thread pays nothing for them (the `calls` mode makes every
//! MPI step of the exchange on it instead).
//!
//! - **Made once, collectively, over MPI** (`connect`): on the application's thread,
//!   through the set's own host (a broadcast of a random token and of each member's
//!   address, one agreement). Every member then holds one connection to every other,
//!   each proven by the token both ways without sending it (`greet`): a process that
//!   does not know it (another user's, a stray connection) is refused and said. Any member that cannot listen,
//!   connect or be reached makes the whole set refuse (agreed), and the caller falls
//!   back.
//! - **One reader per connection.** Each reads the peer's frames as they arrive into
//!   this member's mail (messages by tag, collective contributions, abort notices, settle
//!   votes), so a sender never waits for its receiver: the exchange patterns MPI allows
//!   (a ring of sends then receives) cannot deadlock here either, and a receive matches
//!   the first message of its tag from its source, as MPI's does.
//! - **Failures as the MPI host settles them** (see `MpiHost::settle`): a member that
//!   failed first-hand sends an abort notice to every other, which ends their waits with
//!   its error; each member then votes, and once every member voted (or its connection
//!   closed: a process lost counts as failed) every member returns the lowest failing
//!   member's error, and the call's leftovers are dropped. The runtime agrees on the
//!   outcome over MPI afterwards as for every protection.

use std::collections::VecDeque;
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use abi_stable::std_types::{RResult, RSlice, RSliceMut, RStr, RString};
use scr_plugin::sync::lock;
use scr_plugin::{ErrorCode, HostRef, HostServices, LogLevel, PluginError, ReduceOp};

use super::mpi_host::{member_in, plugin_tag, Notice};
use super::world::{Members, SetHost};
use super::Settled;

mod connect;
mod greet;
mod interfaces;

pub(crate) use connect::connect;

/// Why a set's connections were not made (every member of the set refuses alike).
#[derive(Debug)]
pub(crate) struct Refused {
    /// This member failed itself (its log says why), rather than another of the set.
    pub(crate) own: bool,
    pub(crate) why: String,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}

/// What a frame carries (its first byte).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// A plugin's message (`send`), matched by tag.
    Data = 0,
    /// A contribution to a collective (reduction, broadcast), in call order.
    Coll = 1,
    /// An abort notice: the error code (4 bytes) and the text.
    Notice = 2,
    /// A settle vote: one byte, 1 when the member failed first-hand.
    Vote = 3,
}

/// A frame's header: kind, tag, payload length.
const HEADER: usize = 1 + 4 + 8;

/// The tags of collective contributions (checked: members in different collectives is
/// a plugin's error, said rather than mismatched).
const REDUCE: u32 = 0;
const BCAST: u32 = 1;
const BARRIER: u32 = 2;
const BCAST_LENGTH: u32 = 3;

/// What the readers delivered, per member; changed under `Inbox::mail`.
struct Mail {
    data: Vec<VecDeque<(u32, Vec<u8>)>>,
    coll: Vec<VecDeque<(u32, Vec<u8>)>>,
    notices: Vec<Notice>,
    votes: Vec<Option<bool>>,
    /// Why a member's connection ended (its reader returned).
    closed: Vec<Option<String>>,
}

/// The mail and the condition its waiters sleep on.
struct Inbox {
    mail: Mutex<Mail>,
    arrived: Condvar,
}

impl Inbox {
    fn new(size: usize) -> Inbox {
        Inbox {
            mail: Mutex::new(Mail {
                data: vec![VecDeque::new(); size],
                coll: vec![VecDeque::new(); size],
                notices: Vec::new(),
                votes: vec![None; size],
                closed: vec![None; size],
            }),
            arrived: Condvar::new(),
        }
    }

    /// Change the mail and wake every waiter.
    fn deliver(&self, f: impl FnOnce(&mut Mail)) {
        f(&mut lock(&self.mail));
        self.arrived.notify_all();
    }

    /// Wait until `ready` returns something, or until `deadline` (then `None`).
    fn wait<T>(
        &self,
        deadline: Option<Instant>,
        mut ready: impl FnMut(&mut Mail) -> Option<T>,
    ) -> Option<T> {
        let mut mail: MutexGuard<'_, Mail> = lock(&self.mail);
        loop {
            if let Some(t) = ready(&mut mail) {
                return Some(t);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return None;
            }
            mail = self
                .arrived
                .wait_timeout(mail, Duration::from_millis(100))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

/// Read `peer`'s frames from `stream` into `inbox` until the connection ends, then note
/// why.
fn read_frames(mut stream: TcpStream, peer: usize, inbox: &Inbox) {
    let why = loop {
        let mut head = [0u8; HEADER];
        if let Err(e) = stream.read_exact(&mut head) {
            break match e.kind() {
                std::io::ErrorKind::UnexpectedEof => "its connection closed".to_string(),
                _ => format!("its connection failed: {e}"),
            };
        }
        let tag = u32::from_le_bytes([head[1], head[2], head[3], head[4]]);
        let mut len = [0u8; 8];
        len.copy_from_slice(&head[5..]);
        let len = u64::from_le_bytes(len);
        let mut payload = Vec::new();
        if usize::try_from(len).map_or(true, |n| payload.try_reserve_exact(n).is_err()) {
            break format!("it sent a frame of {len} bytes, more than this process can hold");
        }
        match (&mut stream).take(len).read_to_end(&mut payload) {
            Ok(n) if n as u64 == len => {}
            Ok(_) => break "its connection closed inside a frame".into(),
            Err(e) => break format!("its connection failed: {e}"),
        }
        let frame = match head[0] {
            0 => Kind::Data,
            1 => Kind::Coll,
            2 => Kind::Notice,
            3 => Kind::Vote,
            k => break format!("it sent a frame of unknown kind {k}"),
        };
        inbox.deliver(|m| match frame {
            Kind::Data => m.data[peer].push_back((tag, payload)),
            Kind::Coll => m.coll[peer].push_back((tag, payload)),
            Kind::Notice => m.notices.push(Notice::from_payload(
                u32::try_from(peer).unwrap_or(u32::MAX),
                &payload,
            )),
            Kind::Vote => m.votes[peer] = Some(payload.first() == Some(&1)),
        });
    };
    // (the connection is of no use now: shut it for the writing side too, so that
    // neither end waits on it)
    let _ = stream.shutdown(std::net::Shutdown::Both);
    inbox.deliver(|m| m.closed[peer] = Some(why));
}

/// One member's host services of a set over its own TCP connections.
pub(crate) struct SocketHost {
    rank: u32,
    size: u32,
    members: Members,
    /// This process's world rank, for log lines.
    me: u32,
    /// The writing side of the connection to each other member (`None` for this one).
    peers: Vec<Option<Mutex<TcpStream>>>,
    inbox: Arc<Inbox>,
    readers: Vec<JoinHandle<()>>,
    /// How long `connect` waits for a member (also for the duplicate).
    timeout: Duration,
}

impl SocketHost {
    /// Member `member`'s label in errors: `member M (world rank W)`.
    fn who(&self, member: u32) -> String {
        format!(
            "member {member} (world rank {})",
            self.members.world_rank(member)
        )
    }

    /// `member` as an index, or an error when the set has no such member.
    fn check(&self, member: u32) -> Result<usize, PluginError> {
        member_in(member, self.size).map(|m| m as usize)
    }

    /// `Err` with the first abort notice of this call, if one arrived.
    fn peer_failed(mail: &Mail) -> Option<PluginError> {
        mail.notices.first().map(Notice::to_plugin)
    }

    /// Send one frame to `dest` (to this member's own mail for itself), giving up at
    /// `deadline` (`None`: while the peer may still read it, as an MPI send waits).
    fn put(
        &self,
        dest: usize,
        (kind, tag): (Kind, u32),
        payload: &[u8],
        deadline: Option<Instant>,
    ) -> Result<(), PluginError> {
        if dest == self.rank as usize {
            let owned = payload.to_vec();
            self.inbox.deliver(|m| match kind {
                Kind::Coll => m.coll[dest].push_back((tag, owned)),
                _ => m.data[dest].push_back((tag, owned)),
            });
            return Ok(());
        }
        let Some(Some(stream)) = self.peers.get(dest) else {
            let why = lock(&self.inbox.mail).closed[dest].clone();
            return Err(PluginError::new(
                ErrorCode::PEER_FAILED,
                format!(
                    "{} has no connection: {}",
                    self.who(dest as u32),
                    why.unwrap_or_default()
                ),
            ));
        };
        let mut head = [0u8; HEADER];
        head[0] = kind as u8;
        head[1..5].copy_from_slice(&tag.to_le_bytes());
        head[5..].copy_from_slice(&(payload.len() as u64).to_le_bytes());
        let mut s = lock(stream);
        let cut = |s: &TcpStream, why: String| {
            // (a frame cut short leaves the connection unusable: close it both ways, so
            // that the peer's reader sees it end)
            let _ = s.shutdown(std::net::Shutdown::Both);
            PluginError::new(
                ErrorCode::PEER_FAILED,
                format!(
                    "{} cannot be reached over its socket: {why}",
                    self.who(dest as u32)
                ),
            )
        };
        for mut part in [&head[..], payload] {
            while !part.is_empty() {
                // (std's TcpStream writes with MSG_NOSIGNAL: a peer gone is an error, not
                // SIGPIPE; each write waits at most WRITE_POLL, see `connect`)
                match s.write(part) {
                    Ok(0) => return Err(cut(&s, "the connection accepts no more".into())),
                    Ok(n) => part = &part[n..],
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) =>
                    {
                        // a peer whose node went down reads nothing and closes nothing:
                        // give up when a member failed, MPI saw a process fail, or the
                        // caller's time is up
                        if let Some(e) = Self::peer_failed(&lock(&self.inbox.mail)) {
                            return Err(cut(&s, e.message().to_string()));
                        }
                        if super::ulfm::lost() {
                            return Err(cut(&s, "a process of the job was lost".into()));
                        }
                        if deadline.is_some_and(|d| Instant::now() >= d) {
                            return Err(cut(&s, "it reads nothing".into()));
                        }
                    }
                    Err(e) => return Err(cut(&s, e.to_string())),
                }
            }
        }
        Ok(())
    }

    /// The next frame from `src` that `pick` takes, waiting for it; an abort notice or
    /// `src`'s connection closing ends the wait with an error.
    fn take(
        &self,
        src: usize,
        mut pick: impl FnMut(&mut Mail) -> Option<Vec<u8>>,
    ) -> Result<Vec<u8>, PluginError> {
        let lost = |why: &str| {
            PluginError::new(
                ErrorCode::PEER_FAILED,
                format!("{} was lost: {why}", self.who(src as u32)),
            )
        };
        self.inbox
            .wait(None, |m| {
                if let Some(e) = Self::peer_failed(m) {
                    return Some(Err(e));
                }
                if super::ulfm::lost() {
                    // (MPI saw a process fail: a node that went down closes no
                    // connection, and the runtime recovers without this exchange)
                    return Some(Err(super::mpi_host::process_lost()));
                }
                if let Some(bytes) = pick(m) {
                    return Some(Ok(bytes));
                }
                m.closed[src].as_deref().map(|why| Err(lost(why)))
            })
            .unwrap_or_else(|| Err(lost("no answer")))
    }

    /// Copy `bytes` (from `src`, tag `tag`) into `buf`, refusing another length as the
    /// MPI host does.
    fn fill(buf: &mut [u8], bytes: &[u8], src: u32, tag: u32) -> Result<(), PluginError> {
        if bytes.len() == buf.len() {
            buf.copy_from_slice(bytes);
            return Ok(());
        }
        let n = bytes.len().min(buf.len());
        buf[..n].copy_from_slice(&bytes[..n]);
        Err(PluginError::communication(format!(
            "expected {} bytes from member {src} (tag {tag}) but {} arrived",
            buf.len(),
            bytes.len()
        )))
    }

    /// A collective contribution from `src`: the next one, which must be of `tag`.
    fn take_coll(&self, src: usize, tag: u32) -> Result<Vec<u8>, PluginError> {
        let mut other = None;
        let bytes = self.take(src, |m| {
            let (t, bytes) = m.coll[src].pop_front()?;
            if t != tag {
                other = Some(t);
            }
            Some(bytes)
        })?;
        match other {
            None => Ok(bytes),
            Some(theirs) => Err(PluginError::communication(format!(
                "member {src} is in another collective ({}) than this member ({})",
                coll_name(theirs),
                coll_name(tag)
            ))),
        }
    }

    /// Every other member's index.
    fn others(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.peers.len()).filter(|&m| m != self.rank as usize)
    }

    /// An all-reduce of `value` (collective tag `tag`: [`REDUCE`] or [`BARRIER`]).
    fn reduce(&self, value: u64, op: ReduceOp, tag: u32) -> Result<u64, PluginError> {
        if let Some(e) = Self::peer_failed(&lock(&self.inbox.mail)) {
            return Err(e);
        }
        for m in self.others() {
            self.put(m, (Kind::Coll, tag), &value.to_le_bytes(), None)?;
        }
        let mut acc = value;
        for m in self.others() {
            let bytes = self.take_coll(m, tag)?;
            let v = bytes
                .as_slice()
                .try_into()
                .map(u64::from_le_bytes)
                .map_err(|_| {
                    PluginError::communication(format!(
                        "member {m} sent a reduction of {} bytes",
                        bytes.len()
                    ))
                })?;
            acc = match op {
                ReduceOp::Sum => acc.wrapping_add(v),
                ReduceOp::Min => acc.min(v),
                ReduceOp::Max => acc.max(v),
            };
        }
        Ok(acc)
    }

    fn bcast(&self, root: u32, buf: &mut [u8]) -> Result<(), PluginError> {
        let r = self.check(root)?;
        if let Some(e) = Self::peer_failed(&lock(&self.inbox.mail)) {
            return Err(e);
        }
        let mine = buf.len();
        let arrived = if root == self.rank {
            for m in self.others() {
                self.put(m, (Kind::Coll, BCAST), buf, None)?;
            }
            mine
        } else {
            let bytes = self.take_coll(r, BCAST)?;
            let n = bytes.len().min(mine);
            buf[..n].copy_from_slice(&bytes[..n]);
            bytes.len()
        };
        // a length that differs is an error on every member, the root's too, as over MPI
        if self.reduce(u64::from(arrived == mine), ReduceOp::Min, BCAST_LENGTH)? == 0 {
            return Err(PluginError::communication(format!(
                "broadcast from member {root}: buffers differ in length ({arrived} bytes at the root, {mine} here)"
            )));
        }
        Ok(())
    }
}

/// A collective's name, for the mismatch error.
fn coll_name(tag: u32) -> &'static str {
    match tag {
        REDUCE => "a reduction",
        BARRIER => "a barrier",
        BCAST_LENGTH => "a broadcast's agreement on its length",
        _ => "a broadcast",
    }
}

impl HostServices for SocketHost {
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
            let tag = plugin_tag(tag)?;
            if let Some(e) = Self::peer_failed(&lock(&self.inbox.mail)) {
                return Err(e);
            }
            self.put(d, (Kind::Data, tag), &data, None)
        };
        run().into()
    }

    fn recv(&self, src: u32, tag: u32, mut buf: RSliceMut<'_, u8>) -> RResult<(), PluginError> {
        let mut run = || {
            let s = self.check(src)?;
            let tag = plugin_tag(tag)?;
            let bytes = self.take(s, |m| {
                let at = m.data[s].iter().position(|(t, _)| *t == tag)?;
                m.data[s].remove(at).map(|(_, b)| b)
            })?;
            Self::fill(&mut buf, &bytes, src, tag)
        };
        run().into()
    }

    fn sendrecv(
        &self,
        dest: u32,
        data: RSlice<'_, u8>,
        src: u32,
        buf: RSliceMut<'_, u8>,
        tag: u32,
    ) -> RResult<(), PluginError> {
        // (a send never waits for its receiver here: every connection's reader takes
        // what arrives)
        match self.send(dest, tag, data).into_result() {
            Ok(()) => self.recv(src, tag, buf),
            Err(e) => RResult::RErr(e),
        }
    }

    fn barrier(&self) -> RResult<(), PluginError> {
        self.reduce(0, ReduceOp::Sum, BARRIER).map(|_| ()).into()
    }

    fn all_reduce_u64(&self, value: u64, op: ReduceOp) -> RResult<u64, PluginError> {
        self.reduce(value, op, REDUCE).into()
    }

    fn broadcast(&self, root: u32, mut buf: RSliceMut<'_, u8>) -> RResult<(), PluginError> {
        self.bcast(root, &mut buf).into()
    }

    fn log(&self, level: LogLevel, message: RStr<'_>) {
        crate::log::plugin_message(level, self.me, "scheme", message.as_str());
    }

    fn is_cancelled(&self) -> bool {
        !lock(&self.inbox.mail).notices.is_empty()
    }
}

impl SetHost for SocketHost {
    fn services(&self) -> HostRef<'_> {
        scr_plugin::host_ref(self)
    }

    /// A fresh mesh of connections, made over these (collective over the set). When it
    /// cannot be made, a host whose every connection is closed: its services fail with
    /// the reason.
    fn duplicate(&self) -> Box<dyn SetHost> {
        match connect(self, self.me, self.timeout, None) {
            Ok(h) => Box::new(h),
            Err(e) => Box::new(SocketHost::refused(self, &e.why)),
        }
    }

    fn size_matches(&self, members: usize) -> bool {
        usize::try_from(self.size).is_ok_and(|s| s == members)
    }

    /// As `MpiHost::settle`, over the connections (see the module doc).
    fn settle(&self, call: &str, failure: Option<&PluginError>, grace: Duration) -> Settled {
        let started = Instant::now();
        let first_hand = failure.is_some() && lock(&self.inbox.mail).notices.is_empty();
        let mut mine = None;
        if let (true, Some(e)) = (first_hand, failure) {
            let text = format!("{} failed in {call}: {}", self.who(self.rank), e.message());
            let payload = Notice::payload(e.code, &text);
            for m in self.others() {
                // (a member that cannot be reached is lost: its vote never comes, which
                // counts as a failure below)
                let _ = self.put(m, (Kind::Notice, 0), &payload, Some(started + grace));
            }
            mine = Some(Notice {
                member: self.rank,
                error: PluginError::new(e.code, text),
            });
        }
        for m in self.others() {
            let _ = self.put(
                m,
                (Kind::Vote, 0),
                &[u8::from(first_hand)],
                Some(started + grace),
            );
        }
        let mut told = false;
        let everyone = loop {
            let step = Instant::now() + Duration::from_millis(200);
            let done = self.inbox.wait(Some(step), |m| {
                self.others()
                    .all(|p| m.votes[p].is_some() || m.closed[p].is_some())
                    .then_some(())
            });
            if done.is_some() {
                break true;
            }
            if super::ulfm::lost() {
                // (as `MpiHost::settle`: a member lost for MPI never votes; unwinds to
                // whoever waits for this thread, which then has no answer)
                super::ulfm::raise();
            }
            if failure.is_some() && started.elapsed() >= grace {
                break false;
            }
            if failure.is_none() && !told && started.elapsed() >= grace {
                told = true;
                let _ = writeln!(
                    std::io::stderr().lock(),
                    "scr-rs[{}]: waiting for other members of the redundancy set to return from the plugin call ({} s so far)",
                    self.me,
                    grace.as_secs()
                );
            }
        };
        if !everyone {
            return Settled::Stuck;
        }
        let mut mail = lock(&self.inbox.mail);
        let mut notices = std::mem::take(&mut mail.notices);
        notices.extend(mine);
        let mut failed = usize::from(first_hand);
        for p in self.others() {
            match (mail.votes[p].take(), &mail.closed[p]) {
                (Some(v), _) => failed += usize::from(v),
                (None, Some(why)) => {
                    failed += 1;
                    notices.push(Notice {
                        member: p as u32,
                        error: PluginError::new(
                            ErrorCode::PEER_FAILED,
                            format!("{} was lost in {call}: {why}", self.who(p as u32)),
                        ),
                    });
                }
                (None, None) => {}
            }
        }
        // what the call left (a failed member's unreceived messages) goes with it
        mail.data.iter_mut().for_each(VecDeque::clear);
        mail.coll.iter_mut().for_each(VecDeque::clear);
        drop(mail);
        if failed == 0 {
            return Settled::Returned;
        }
        Settled::lowest(notices, &self.members, (self.rank, self.me))
    }
}

impl SocketHost {
    /// A host of `like`'s set with no connections: every service fails with `why`.
    fn refused(like: &SocketHost, why: &str) -> SocketHost {
        let size = like.peers.len();
        let inbox = Arc::new(Inbox::new(size));
        inbox.deliver(|m| {
            for c in &mut m.closed {
                *c = Some(format!("no connection could be made ({why})"));
            }
        });
        SocketHost {
            rank: like.rank,
            size: like.size,
            members: like.members.clone(),
            me: like.me,
            peers: (0..size).map(|_| None).collect(),
            inbox,
            readers: Vec::new(),
            timeout: like.timeout,
        }
    }
}

impl Drop for SocketHost {
    /// Close every connection (its reader then returns) and wait for the readers.
    fn drop(&mut self) {
        for s in self.peers.iter().flatten() {
            let _ = lock(s).shutdown(std::net::Shutdown::Both);
        }
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
    }
}

#[cfg(test)]
mod tests;
