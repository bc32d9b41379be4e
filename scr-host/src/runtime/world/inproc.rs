//! [`World`] on threads of one process: N threads act as the N ranks of a job, so the
//! runtime's exchanges and the algorithms built on them run in a unit test, without
//! `mpiexec` (as [`scr_plugin::inproc`] does for plugins; a set's host services here are
//! built on it, so real scheme plugins run over the fake too).
//!
//! MPI semantics, kept: collectives of one communicator match in call order (each rank
//! counts its collectives; a rank calling another collective than its peers at the same
//! step fails the run with both names); a split forms one communicator per color, ranks
//! ordered by (key, rank); messages between two ranks on one tag arrive in send order;
//! a duplicate's traffic never mixes with the original's. Sends are buffered (they never
//! block), which MPI allows.
//!
//! Nothing here is counted in [`crate::runtime::comm`]'s process-wide counters: N ranks
//! share one process, and the counter tests rely on exact numbers.
//!
//! A wait that lasts longer than the run's timeout panics naming the operation and the
//! rank, and a rank that panics (or aborts) makes every other rank's waits give up, so a
//! broken algorithm fails its test instead of hanging it; [`run_ranks`] then re-raises
//! the first rank's panic.

use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use abi_stable::std_types::{RResult, RSlice, RSliceMut, RStr, RString};
use scr_plugin::inproc::{InProcHost, World as PluginWorld};
use scr_plugin::sync::lock;
use scr_plugin::{ErrorCode, HostRef, HostServices, LogLevel, PluginError, ReduceOp};

use super::super::Settled;
use super::{Members, Op, SetHost, World};

/// How long a wait lasts before [`run_ranks`] fails the run.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// How often a waiting rank looks whether another rank failed.
const POLL: Duration = Duration::from_millis(10);

/// A message or a collective's contribution or result.
type Payload = Box<dyn Any + Send>;

/// What a message is matched by, besides its sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Key {
    /// A point-to-point message of the runtime, by tag.
    User(i32),
    /// Step `n` of the communicator's collectives.
    Coll(u64),
}

/// Messages waiting for one rank, keyed by (sender, key), in send order.
type Queues = HashMap<(u32, Key), VecDeque<Payload>>;

#[derive(Default)]
struct Mailbox {
    queues: Mutex<Queues>,
    arrived: Condvar,
}

/// What every communicator of one run shares.
struct Universe {
    timeout: Duration,
    /// The first rank (of the run) that failed and why: every wait gives up then.
    failed: Mutex<Option<(u32, String)>>,
}

impl Universe {
    fn fail(&self, rank: u32, why: String) {
        let mut f = lock(&self.failed);
        if f.is_none() {
            *f = Some((rank, why));
        }
    }

    fn failure(&self) -> Option<(u32, String)> {
        lock(&self.failed).clone()
    }
}

/// One communicator: a mailbox per rank.
struct Comm {
    universe: Arc<Universe>,
    boxes: Vec<Mailbox>,
    /// The plugin world of the set this communicator carries, made by the first member
    /// that asks ([`World::set_host`]).
    plugin: OnceLock<Arc<PluginWorld>>,
}

impl Comm {
    fn new(universe: &Arc<Universe>, size: usize) -> Arc<Comm> {
        Arc::new(Comm {
            universe: Arc::clone(universe),
            boxes: (0..size).map(|_| Mailbox::default()).collect(),
            plugin: OnceLock::new(),
        })
    }
}

/// A collective's contribution, named so that mismatched collectives are reported.
/// Why a rank's wait or collective step failed (the text a failed rank records for the
/// others' waits and panics with).
#[derive(Debug, thiserror::Error)]
enum Stuck {
    /// Another rank failed while this one waited.
    #[error("rank {me} gave up in {op} (waiting for {waiting_for}): rank {rank} failed: {why}")]
    GaveUp {
        me: u32,
        op: String,
        waiting_for: String,
        rank: u32,
        why: String,
    },
    /// Nothing came within the timeout.
    #[error("rank {me} timed out after {within:?} in {op}, waiting for {waiting_for}")]
    TimedOut {
        me: u32,
        within: Duration,
        op: String,
        waiting_for: String,
    },
    /// Rank 0 sent a result of another type.
    #[error("rank {me}: the result of collective {op} (step {step}) has another type")]
    ResultType {
        me: u32,
        op: &'static str,
        step: u64,
    },
    /// A message in a collective's mailbox is no collective step.
    #[error("rank {me}: a collective step without a name")]
    Unnamed { me: u32 },
    /// Ranks called different collectives at the same step.
    #[error("collectives out of step: rank 0 of a communicator called {op} as its collective {step}, its rank {src} called {other}")]
    OutOfStep {
        op: &'static str,
        step: u64,
        src: u32,
        other: &'static str,
    },
    /// A rank contributed a value of another type.
    #[error("rank {src} contributed another type to collective {op} (step {step})")]
    ContributionType {
        src: u32,
        op: &'static str,
        step: u64,
    },
    /// The root computed no result for rank 0.
    #[error("collective {op} produced no result")]
    NoResult { op: &'static str },
}

struct Contribution {
    op: &'static str,
    value: Payload,
}

/// One rank of an in-process communicator.
pub(crate) struct InprocWorld {
    comm: Arc<Comm>,
    rank: u32,
    /// This thread's rank in the whole run, for messages.
    me: u32,
    /// Collectives this rank made on the communicator (the next one's step).
    seq: AtomicU64,
}

impl InprocWorld {
    fn new(comm: Arc<Comm>, rank: u32, me: u32) -> InprocWorld {
        InprocWorld {
            comm,
            rank,
            me,
            seq: AtomicU64::new(0),
        }
    }

    fn universe(&self) -> &Universe {
        &self.comm.universe
    }

    fn check_rank(&self, op: &str, r: u32) {
        if r >= self.size() {
            panic!(
                "in-process world: rank {} called {op} with rank {r}, in a communicator of {} ranks",
                self.me,
                self.size()
            );
        }
    }

    fn post(&self, dest: u32, key: Key, payload: Payload) {
        let mailbox = &self.comm.boxes[dest as usize];
        lock(&mailbox.queues)
            .entry((self.rank, key))
            .or_default()
            .push_back(payload);
        mailbox.arrived.notify_all();
    }

    /// Wait (at most `within`) until `take` finds what it looks for in this rank's
    /// mailbox.
    fn wait<T>(
        &self,
        op: &str,
        waiting_for: &str,
        within: Duration,
        mut take: impl FnMut(&mut Queues) -> Option<T>,
    ) -> Result<T, Stuck> {
        let mailbox = &self.comm.boxes[self.rank as usize];
        let deadline = Instant::now() + within;
        let mut queues = lock(&mailbox.queues);
        loop {
            if let Some(x) = take(&mut queues) {
                return Ok(x);
            }
            if let Some((rank, why)) = self.universe().failure() {
                return Err(Stuck::GaveUp {
                    me: self.me,
                    op: op.to_string(),
                    waiting_for: waiting_for.to_string(),
                    rank,
                    why,
                });
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Stuck::TimedOut {
                    me: self.me,
                    within,
                    op: op.to_string(),
                    waiting_for: waiting_for.to_string(),
                });
            }
            queues = mailbox
                .arrived
                .wait_timeout(queues, (deadline - now).min(POLL))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// The next payload from `src` under `key`.
    fn take(&self, op: &str, src: u32, key: Key, within: Duration) -> Result<Payload, Stuck> {
        self.wait(op, &format!("rank {src} ({key:?})"), within, |q| {
            q.get_mut(&(src, key)).and_then(VecDeque::pop_front)
        })
    }

    /// A failure of this rank: recorded for the others' waits, then raised.
    fn fail(&self, why: String) -> ! {
        self.universe().fail(self.me, why.clone());
        panic!("{why}");
    }

    /// One collective step: rank 0 receives every rank's `mine` (in rank order), `root`
    /// computes each rank's result from them, and every rank gets its own.
    fn try_collective<T: Any + Send, R: Any + Send>(
        &self,
        op: &'static str,
        mine: T,
        root: impl FnOnce(Vec<T>) -> Vec<R>,
        within: Duration,
    ) -> Result<R, Stuck> {
        let step = self.seq.fetch_add(1, Ordering::Relaxed);
        let key = Key::Coll(step);
        if self.rank != 0 {
            self.post(
                0,
                key,
                Box::new(Contribution {
                    op,
                    value: Box::new(mine),
                }),
            );
            let got = self.take(op, 0, key, within)?;
            return got
                .downcast::<R>()
                .map(|r| *r)
                .map_err(|_| Stuck::ResultType {
                    me: self.me,
                    op,
                    step,
                });
        }
        let mut all = Vec::with_capacity(self.size() as usize);
        all.push(mine);
        for src in 1..self.size() {
            let got = self.take(op, src, key, within)?;
            let c = got
                .downcast::<Contribution>()
                .map_err(|_| Stuck::Unnamed { me: self.me })?;
            if c.op != op {
                return Err(Stuck::OutOfStep {
                    op,
                    step,
                    src,
                    other: c.op,
                });
            }
            let v = c
                .value
                .downcast::<T>()
                .map_err(|_| Stuck::ContributionType { src, op, step })?;
            all.push(*v);
        }
        let mut results = root(all).into_iter();
        let own = results.next();
        for (dest, r) in (1..self.size()).zip(results) {
            self.post(dest, key, Box::new(r));
        }
        own.ok_or(Stuck::NoResult { op })
    }

    /// [`InprocWorld::try_collective`] within the run's timeout; a failure fails the run.
    fn collective<T: Any + Send, R: Any + Send>(
        &self,
        op: &'static str,
        mine: T,
        root: impl FnOnce(Vec<T>) -> Vec<R>,
    ) -> R {
        let within = self.universe().timeout;
        self.try_collective(op, mine, root, within)
            .unwrap_or_else(|e| self.fail(e.to_string()))
    }

    /// One message from `src` under `key`, as bytes.
    fn take_bytes(&self, op: &str, src: u32, key: Key) -> Vec<u8> {
        let within = self.universe().timeout;
        match self.take(op, src, key, within) {
            Ok(p) => match p.downcast::<Vec<u8>>() {
                Ok(b) => *b,
                Err(_) => self.fail(format!(
                    "rank {}: {op} got a message that is not bytes",
                    self.me
                )),
            },
            Err(e) => self.fail(e.to_string()),
        }
    }
}

/// Run `f` on `n` ranks, each on its own thread with its rank's world, and return the
/// results in rank order. Waits time out after [`DEFAULT_TIMEOUT`]; a rank's panic is
/// re-raised here (the first rank's to fail, whose message says what went wrong).
pub(crate) fn run_ranks<T, F>(n: u32, f: F) -> Vec<T>
where
    T: Send,
    F: Fn(Box<dyn World>) -> T + Sync,
{
    run_ranks_within(n, DEFAULT_TIMEOUT, f)
}

/// [`run_ranks`] with waits that time out after `timeout`.
pub(crate) fn run_ranks_within<T, F>(n: u32, timeout: Duration, f: F) -> Vec<T>
where
    T: Send,
    F: Fn(Box<dyn World>) -> T + Sync,
{
    let universe = Arc::new(Universe {
        timeout,
        failed: Mutex::new(None),
    });
    let comm = Comm::new(&universe, n as usize);
    let outcomes: Vec<std::thread::Result<T>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..n)
            .map(|rank| {
                let world: Box<dyn World> =
                    Box::new(InprocWorld::new(Arc::clone(&comm), rank, rank));
                let (f, universe) = (&f, &universe);
                std::thread::Builder::new()
                    .name(format!("rank {rank}"))
                    .spawn_scoped(scope, move || {
                        let out = std::panic::catch_unwind(AssertUnwindSafe(|| f(world)));
                        if out.is_err() {
                            universe.fail(rank, "it panicked".into());
                        }
                        out
                    })
                    .expect("a thread per rank")
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(Err))
            .collect()
    });
    let first = universe.failure().map_or(0, |(rank, _)| rank as usize);
    let mut results = Vec::with_capacity(outcomes.len());
    let mut panics: Vec<(usize, Box<dyn Any + Send>)> = Vec::new();
    for (rank, o) in outcomes.into_iter().enumerate() {
        match o {
            Ok(v) => results.push(v),
            Err(p) => panics.push((rank, p)),
        }
    }
    if !panics.is_empty() {
        let at = panics.iter().position(|(r, _)| *r == first).unwrap_or(0);
        std::panic::resume_unwind(panics.swap_remove(at).1);
    }
    results
}

impl World for InprocWorld {
    fn rank(&self) -> u32 {
        self.rank
    }

    fn concurrent_threads(&self) -> std::result::Result<(), String> {
        // (its ranks are threads: every operation is thread-safe)
        Ok(())
    }

    fn size(&self) -> u32 {
        self.comm.boxes.len() as u32
    }

    fn barrier(&self) {
        let n = self.size() as usize;
        self.collective("barrier", (), |_| vec![(); n]);
    }

    fn broadcast_into(&self, root: u32, buf: &mut [u8]) {
        self.check_rank("broadcast_into", root);
        let n = self.size() as usize;
        let mine = (self.rank == root).then(|| buf.to_vec());
        let got: Vec<u8> = self.collective("broadcast_into", mine, |all| {
            let b = all[root as usize].clone().unwrap_or_default();
            vec![b; n]
        });
        if got.len() != buf.len() {
            self.fail(format!(
                "rank {}: broadcast_into from rank {root} of {} bytes into a buffer of {}",
                self.me,
                got.len(),
                buf.len()
            ));
        }
        buf.copy_from_slice(&got);
    }

    fn broadcast_from(&self, root: u32, mine: &[u8]) -> Vec<u8> {
        self.check_rank("broadcast_from", root);
        let n = self.size() as usize;
        let mine = (self.rank == root).then(|| mine.to_vec());
        self.collective("broadcast_from", mine, |all| {
            let b = all[root as usize].clone().unwrap_or_default();
            vec![b; n]
        })
    }

    fn all_gather_fixed(&self, mine: &[u8]) -> Vec<u8> {
        let n = self.size() as usize;
        let out: Result<Vec<u8>, String> =
            self.collective("all_gather_fixed", mine.to_vec(), |all| {
                let out = if all.iter().all(|v| v.len() == all[0].len()) {
                    Ok(all.concat())
                } else {
                    Err(format!(
                        "all_gather_fixed with items of different lengths: {:?}",
                        all.iter().map(Vec::len).collect::<Vec<_>>()
                    ))
                };
                vec![out; n]
            });
        out.unwrap_or_else(|e| self.fail(e))
    }

    fn all_gather_bytes(&self, mine: &[u8]) -> Vec<Vec<u8>> {
        let n = self.size() as usize;
        self.collective("all_gather_bytes", mine.to_vec(), |all| vec![all; n])
    }

    fn all_reduce_u8(&self, v: u8, op: Op) -> u8 {
        let n = self.size() as usize;
        self.collective("all_reduce_u8", v, |all| {
            let r = all
                .into_iter()
                .map(u64::from)
                .reduce(|a, b| op.apply(a, b))
                .unwrap_or(0);
            // (a u8 operation stays within a u8 but for a sum, which MPI wraps too)
            vec![r as u8; n]
        })
    }

    fn all_reduce_u64s(&self, values: &[u64], op: Op) -> Vec<u64> {
        let n = self.size() as usize;
        let out: Result<Vec<u64>, String> =
            self.collective("all_reduce_u64s", values.to_vec(), |all| {
                let out = if all.iter().all(|v| v.len() == all[0].len()) {
                    let mut acc = all[0].clone();
                    for v in &all[1..] {
                        for (a, b) in acc.iter_mut().zip(v) {
                            *a = op.apply(*a, *b);
                        }
                    }
                    Ok(acc)
                } else {
                    Err("all_reduce_u64s with different numbers of values".to_string())
                };
                vec![out; n]
            });
        out.unwrap_or_else(|e| self.fail(e))
    }

    fn exclusive_scan_u64(&self, v: u64, op: Op) -> u64 {
        self.collective("exclusive_scan_u64", v, |all| {
            all.iter()
                .scan(op.identity(), |acc, &x| {
                    let before = *acc;
                    *acc = op.apply(*acc, x);
                    Some(before)
                })
                .collect()
        })
    }

    fn split(&self, color: Option<u32>, key: u32) -> Option<Box<dyn World>> {
        let universe = Arc::clone(&self.comm.universe);
        let part: Option<(Arc<Comm>, u32)> = self.collective("split", (color, key), |all| {
            let mut out: Vec<Option<(Arc<Comm>, u32)>> = vec![None; all.len()];
            let mut colors: Vec<u32> = all.iter().filter_map(|(c, _)| *c).collect();
            colors.sort_unstable();
            colors.dedup();
            for c in colors {
                let mut members: Vec<(u32, usize)> = all
                    .iter()
                    .enumerate()
                    .filter(|(_, (cc, _))| *cc == Some(c))
                    .map(|(r, (_, k))| (*k, r))
                    .collect();
                members.sort_unstable();
                let comm = Comm::new(&universe, members.len());
                for (new_rank, (_, r)) in members.into_iter().enumerate() {
                    out[r] = Some((Arc::clone(&comm), new_rank as u32));
                }
            }
            out
        });
        part.map(|(comm, rank)| Box::new(InprocWorld::new(comm, rank, self.me)) as Box<dyn World>)
    }

    fn duplicate(&self) -> Box<dyn World> {
        let universe = Arc::clone(&self.comm.universe);
        let n = self.size() as usize;
        let comm = self.collective("duplicate", (), |_| vec![Comm::new(&universe, n); n]);
        Box::new(InprocWorld::new(comm, self.rank, self.me))
    }

    fn send(&self, dest: u32, tag: i32, data: &[u8]) {
        self.check_rank("send", dest);
        self.post(dest, Key::User(tag), Box::new(data.to_vec()));
    }

    fn recv(&self, src: u32, tag: i32) -> Vec<u8> {
        self.check_rank("recv", src);
        self.take_bytes("recv", src, Key::User(tag))
    }

    fn recv_into(&self, src: u32, tag: i32, buf: &mut [u8]) {
        self.check_rank("recv_into", src);
        let got = self.take_bytes("recv_into", src, Key::User(tag));
        if got.len() != buf.len() {
            self.fail(format!(
                "rank {}: recv_into expected {} bytes from rank {src} (tag {tag}) but {} arrived",
                self.me,
                buf.len(),
                got.len()
            ));
        }
        buf.copy_from_slice(&got);
    }

    fn recv_any(&self, tag: i32) -> (u32, Vec<u8>) {
        let within = self.universe().timeout;
        let got = self.wait("recv_any", &format!("any rank (tag {tag})"), within, |q| {
            let mut from: Vec<u32> = q
                .iter()
                .filter(|((_, k), msgs)| *k == Key::User(tag) && !msgs.is_empty())
                .map(|((src, _), _)| *src)
                .collect();
            from.sort_unstable();
            let src = *from.first()?;
            q.get_mut(&(src, Key::User(tag)))
                .and_then(VecDeque::pop_front)
                .map(|p| (src, p))
        });
        match got {
            Ok((src, p)) => match p.downcast::<Vec<u8>>() {
                Ok(b) => (src, *b),
                Err(_) => self.fail(format!(
                    "rank {}: recv_any got a message that is not bytes",
                    self.me
                )),
            },
            Err(e) => self.fail(e.to_string()),
        }
    }

    fn sparse_exchange(&self, sends: &[(u32, Vec<u8>)], tag: i32) -> Vec<(u32, Vec<u8>)> {
        for (to, bytes) in sends {
            self.send(*to, tag, bytes);
        }
        // who sends to whom, learnt by a collective (MPI's NBX learns it from the
        // barrier instead); each rank then takes exactly its messages, sender by sender
        let n = self.size() as usize;
        let dests: Vec<u32> = sends.iter().map(|(to, _)| *to).collect();
        let sources: Vec<u32> = self.collective("sparse_exchange", dests, |all| {
            let mut from: Vec<Vec<u32>> = vec![Vec::new(); n];
            for (src, ds) in all.iter().enumerate() {
                for &d in ds {
                    if let Some(f) = from.get_mut(d as usize) {
                        f.push(src as u32);
                    }
                }
            }
            from
        });
        sources
            .into_iter()
            .map(|src| (src, self.take_bytes("sparse_exchange", src, Key::User(tag))))
            .collect()
    }

    fn abort(&self, code: i32) -> ! {
        self.fail(format!("rank {} aborted the job with code {code}", self.me))
    }

    fn set_host(
        self: Box<Self>,
        world_ranks: Vec<u32>,
        groups: Vec<String>,
        me: u32,
    ) -> Box<dyn SetHost> {
        let plugin = Arc::clone(self.comm.plugin.get_or_init(|| {
            let g: Vec<&str> = groups.iter().map(String::as_str).collect();
            PluginWorld::new(&g, self.universe().timeout)
        }));
        let inner = plugin.member(self.rank);
        Box::new(InprocSetHost {
            world: self,
            inner,
            plugin,
            members: Members::new(world_ranks, groups),
            me,
        })
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
}

/// One member's host services of a set in an in-process run: messages, reductions and
/// broadcasts by [`scr_plugin::inproc`], the set's own questions on its [`InprocWorld`].
pub(crate) struct InprocSetHost {
    world: Box<InprocWorld>,
    inner: InProcHost,
    /// The set's in-process communicator (for failures: see `settle`).
    plugin: Arc<PluginWorld>,
    members: Members,
    me: u32,
}

impl HostServices for InprocSetHost {
    fn rank(&self) -> u32 {
        self.inner.rank()
    }

    fn size(&self) -> u32 {
        self.inner.size()
    }

    fn world_rank(&self, member: u32) -> u32 {
        self.members.world_rank(member)
    }

    fn failure_group(&self, member: u32) -> RString {
        self.members.failure_group(member)
    }

    fn send(&self, dest: u32, tag: u32, data: RSlice<'_, u8>) -> RResult<(), PluginError> {
        self.inner.send(dest, tag, data)
    }

    fn recv(&self, src: u32, tag: u32, buf: RSliceMut<'_, u8>) -> RResult<(), PluginError> {
        self.inner.recv(src, tag, buf)
    }

    fn sendrecv(
        &self,
        dest: u32,
        data: RSlice<'_, u8>,
        src: u32,
        buf: RSliceMut<'_, u8>,
        tag: u32,
    ) -> RResult<(), PluginError> {
        self.inner.sendrecv(dest, data, src, buf, tag)
    }

    fn barrier(&self) -> RResult<(), PluginError> {
        self.inner.barrier()
    }

    fn all_reduce_u64(&self, value: u64, op: ReduceOp) -> RResult<u64, PluginError> {
        self.inner.all_reduce_u64(value, op)
    }

    fn broadcast(&self, root: u32, buf: RSliceMut<'_, u8>) -> RResult<(), PluginError> {
        self.inner.broadcast(root, buf)
    }

    fn log(&self, level: LogLevel, message: RStr<'_>) {
        // as the MPI host logs: through the runtime's log, under this process's rank
        crate::log::plugin_message(level, self.me, "scheme", message.as_str());
    }

    fn is_cancelled(&self) -> bool {
        self.inner.is_cancelled()
    }
}

impl SetHost for InprocSetHost {
    fn services(&self) -> HostRef<'_> {
        scr_plugin::host_ref(self)
    }

    fn duplicate(&self) -> Box<dyn SetHost> {
        let (world_ranks, groups) = self.members.parts();
        self.world
            .duplicate()
            .set_host(world_ranks, groups, self.me)
    }

    fn size_matches(&self, members: usize) -> bool {
        usize::try_from(self.world.size()).is_ok_and(|s| s == members)
    }

    /// As [`super::super::MpiHost::settle`] settles a call, in process: a member that
    /// failed first-hand (an error other than the [`ErrorCode::PEER_FAILED`] its services
    /// returned, or a cancellation after a failure was recorded) records its failure on the set's in-process communicator, which wakes
    /// and fails the others' waits; once every member returned (a collective), each
    /// takes the lowest failing member's error, and after a second collective member 0
    /// clears the communicator (its failure and unreceived messages) before a third lets
    /// any member go on.
    fn settle(&self, call: &str, failure: Option<&PluginError>, grace: Duration) -> Settled {
        let failed = failure.is_some();
        // (a member that stopped because `is_cancelled` said so failed second-hand too)
        let second_hand = |e: &PluginError| {
            e.code == ErrorCode::PEER_FAILED
                || (e.code == ErrorCode::CANCELLED && self.plugin.failure().is_some())
        };
        if let Some(e) = failure.filter(|e| !second_hand(e)) {
            let me = self.inner.rank();
            let text = format!(
                "member {me} (world rank {}) failed in {call}: {}",
                self.members.world_rank(me),
                e.message()
            );
            self.plugin
                .member_failed(me, PluginError::new(e.code, text));
        }
        let n = self.world.size() as usize;
        let within = if failed {
            grace
        } else {
            self.world.universe().timeout
        };
        match self
            .world
            .try_collective("settle", (), |_| vec![(); n], within)
        {
            Ok(()) => {}
            Err(_) if failed => return Settled::Stuck,
            Err(e) => self.world.fail(e.to_string()),
        }
        let Some((member, error)) = self.plugin.failure() else {
            return Settled::Returned;
        };
        self.world.barrier();
        if self.inner.rank() == 0 {
            self.plugin.reset_after_failure();
        }
        self.world.barrier();
        Settled::Failed {
            member,
            world_rank: self.members.world_rank(member),
            error,
        }
    }
}

#[cfg(test)]
mod tests;
