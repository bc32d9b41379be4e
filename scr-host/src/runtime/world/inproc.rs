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
use scr_plugin::{HostRef, HostServices, LogLevel, PluginError, ReduceOp};

use super::{Op, SetHost, World};

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
    ) -> Result<T, String> {
        let mailbox = &self.comm.boxes[self.rank as usize];
        let deadline = Instant::now() + within;
        let mut queues = lock(&mailbox.queues);
        loop {
            if let Some(x) = take(&mut queues) {
                return Ok(x);
            }
            if let Some((rank, why)) = self.universe().failure() {
                return Err(format!(
                    "rank {} gave up in {op} (waiting for {waiting_for}): rank {rank} failed: {why}",
                    self.me
                ));
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(format!(
                    "rank {} timed out after {within:?} in {op}, waiting for {waiting_for}",
                    self.me
                ));
            }
            queues = mailbox
                .arrived
                .wait_timeout(queues, (deadline - now).min(POLL))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// The next payload from `src` under `key`.
    fn take(&self, op: &str, src: u32, key: Key, within: Duration) -> Result<Payload, String> {
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
    ) -> Result<R, String> {
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
            return got.downcast::<R>().map(|r| *r).map_err(|_| {
                format!(
                    "rank {}: the result of collective {op} (step {step}) has another type",
                    self.me
                )
            });
        }
        let mut all = Vec::with_capacity(self.size() as usize);
        all.push(mine);
        for src in 1..self.size() {
            let got = self.take(op, src, key, within)?;
            let c = got
                .downcast::<Contribution>()
                .map_err(|_| format!("rank {}: a collective step without a name", self.me))?;
            if c.op != op {
                return Err(format!(
                    "collectives out of step: rank 0 of a communicator called {op} as its collective {step}, its rank {src} called {}",
                    c.op
                ));
            }
            let v = c.value.downcast::<T>().map_err(|_| {
                format!("rank {src} contributed another type to collective {op} (step {step})")
            })?;
            all.push(*v);
        }
        let mut results = root(all).into_iter();
        let own = results.next();
        for (dest, r) in (1..self.size()).zip(results) {
            self.post(dest, key, Box::new(r));
        }
        own.ok_or_else(|| format!("collective {op} produced no result"))
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
            .unwrap_or_else(|e| self.fail(e))
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
            Err(e) => self.fail(e),
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
            Err(e) => self.fail(e),
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
            world_ranks,
            groups,
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
    world_ranks: Vec<u32>,
    groups: Vec<String>,
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
        self.world
            .duplicate()
            .set_host(self.world_ranks.clone(), self.groups.clone(), self.me)
    }

    fn size_matches(&self, members: usize) -> bool {
        usize::try_from(self.world.size()).is_ok_and(|s| s == members)
    }

    fn settle(&self, failed: bool, grace: Duration) -> bool {
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
            Ok(()) => true,
            Err(_) if failed => false,
            Err(e) => self.world.fail(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIZES: [u32; 5] = [1, 2, 3, 4, 7];

    #[test]
    fn rank_size_barrier_and_reductions() {
        for n in SIZES {
            let out = run_ranks(n, |w| {
                w.barrier();
                let r = u64::from(w.rank());
                (
                    w.rank(),
                    w.size(),
                    w.min_u64(r + 5),
                    w.max_u64(r + 5),
                    w.sum_u64(r),
                    w.or_u64(1 << r),
                    w.all_reduce_u64s(&[r, 1, 100 - r], Op::Sum),
                    w.agree(w.rank() != 1),
                    w.all_reduce_u8(u8::from(w.rank() == 0), Op::Max),
                )
            });
            let sum: u64 = (0..u64::from(n)).sum();
            for (rank, o) in out.into_iter().enumerate() {
                assert_eq!((o.0, o.1), (rank as u32, n));
                assert_eq!((o.2, o.3, o.4), (5, u64::from(n) + 4, sum), "n={n}");
                assert_eq!(o.5, (1u64 << n) - 1);
                assert_eq!(o.6, vec![sum, u64::from(n), 100 * u64::from(n) - sum]);
                assert_eq!(o.7, n == 1, "agree at n={n}");
                assert_eq!(o.8, 1);
            }
        }
    }

    #[test]
    fn exclusive_scans_start_from_the_identity() {
        for n in SIZES {
            let out = run_ranks(n, |w| {
                let r = u64::from(w.rank());
                (
                    w.exclusive_scan_u64(r + 1, Op::Sum),
                    w.exclusive_scan_u64(10 - r, Op::Min),
                )
            });
            for (rank, (sum, min)) in out.into_iter().enumerate() {
                let r = rank as u64;
                assert_eq!(sum, r * (r + 1) / 2, "n={n} rank={rank}");
                assert_eq!(min, if rank == 0 { u64::MAX } else { 11 - r });
            }
        }
    }

    #[test]
    fn broadcasts_and_gathers() {
        for n in SIZES {
            let root = n - 1;
            let out = run_ranks(n, |w| {
                let r = w.rank();
                let mut fixed = if r == root { *b"root" } else { [0u8; 4] };
                w.broadcast_into(root, &mut fixed);
                let long = vec![r as u8; 3 * r as usize];
                (
                    fixed,
                    w.broadcast_from(root, &long),
                    w.broadcast_bytes(format!("zero{r}").as_bytes()),
                    w.broadcast_from(0, &[]),
                    w.all_gather_bytes(&long),
                    w.all_gather_u32(r * 10),
                    w.all_gather_fixed(&[r as u8, 7]),
                )
            });
            for o in out {
                assert_eq!(&o.0, b"root");
                assert_eq!(o.1, vec![root as u8; 3 * root as usize]);
                assert_eq!(o.2, b"zero0");
                assert!(o.3.is_empty());
                let lens: Vec<usize> = o.4.iter().map(Vec::len).collect();
                assert_eq!(lens, (0..n as usize).map(|r| 3 * r).collect::<Vec<_>>());
                assert_eq!(o.5, (0..n).map(|r| r * 10).collect::<Vec<_>>());
                let fixed: Vec<u8> = (0..n).flat_map(|r| [r as u8, 7]).collect();
                assert_eq!(o.6, fixed);
            }
        }
    }

    #[test]
    fn split_orders_by_key_then_rank_and_leaves_undefined_out() {
        for n in SIZES {
            // colors: rank % 3, but rank 1 undefined; keys descending so order reverses,
            // except ranks 4.. share one key (ties ordered by rank)
            let out = run_ranks(n, |w| {
                let r = w.rank();
                let color = (r != 1).then_some(r % 3);
                let key = if r >= 4 { 0 } else { 100 - r };
                let sub = w.split(color, key)?;
                // the sub-communicator works on its own: gather the world ranks
                let members = sub.all_gather_u32(r);
                sub.barrier();
                Some((sub.rank(), sub.size(), members))
            });
            for (r, o) in out.into_iter().enumerate() {
                let r = r as u32;
                if r == 1 {
                    assert!(o.is_none());
                    continue;
                }
                let mut expect: Vec<(u32, u32)> = (0..n)
                    .filter(|&q| q != 1 && q % 3 == r % 3)
                    .map(|q| (if q >= 4 { 0 } else { 100 - q }, q))
                    .collect();
                expect.sort();
                let expect: Vec<u32> = expect.into_iter().map(|(_, q)| q).collect();
                let (rank, size, members) = o.unwrap();
                assert_eq!(members, expect, "n={n} rank={r}");
                assert_eq!(size as usize, expect.len());
                assert_eq!(members[rank as usize], r);
            }
        }
    }

    #[test]
    fn a_duplicate_keeps_its_traffic_apart() {
        for n in SIZES {
            let out = run_ranks(n, |w| {
                let dup = w.duplicate();
                let next = (w.rank() + 1) % w.size();
                let prev = (w.rank() + w.size() - 1) % w.size();
                w.send(next, 5, b"original");
                dup.send(next, 5, b"duplicate");
                let a = dup.recv(prev, 5);
                let b = w.recv(prev, 5);
                (dup.rank(), dup.size(), dup.sum_u64(1), a, b)
            });
            for (r, o) in out.into_iter().enumerate() {
                assert_eq!((o.0, o.1, o.2), (r as u32, n, u64::from(n)));
                assert_eq!((&o.3[..], &o.4[..]), (&b"duplicate"[..], &b"original"[..]));
            }
        }
    }

    #[test]
    fn messages_keep_their_order_per_sender_and_tag() {
        for n in SIZES.into_iter().filter(|&n| n > 1) {
            let out = run_ranks(n, |w| {
                if w.rank() == 0 {
                    // receive tag 2 first although tag 1 was sent first; then tag 1 in order
                    let mut got = Vec::new();
                    for src in 1..w.size() {
                        let mut b = [0u8; 2];
                        w.recv_into(src, 2, &mut b);
                        got.push(b.to_vec());
                        got.push(w.recv(src, 1));
                        got.push(w.recv(src, 1));
                    }
                    got
                } else {
                    let r = w.rank() as u8;
                    w.send(0, 1, &[r, 1]);
                    w.send(0, 1, &[r, 2, 2]);
                    w.send(0, 2, &[r, 9]);
                    Vec::new()
                }
            });
            let expect: Vec<Vec<u8>> = (1..n as u8)
                .flat_map(|r| [vec![r, 9], vec![r, 1], vec![r, 2, 2]])
                .collect();
            assert_eq!(out[0], expect);
        }
    }

    #[test]
    fn sparse_exchanges_deliver_everything_ordered_by_sender() {
        for n in SIZES {
            let out = run_ranks(n, |w| {
                let (r, size) = (w.rank(), w.size());
                // nobody sends
                let none = w.sparse_exchange(&[], 11);
                // everyone sends to everyone (itself included), two messages to rank 0
                let mut sends: Vec<(u32, Vec<u8>)> =
                    (0..size).map(|d| (d, vec![r as u8, d as u8])).collect();
                sends.push((0, vec![r as u8, 99]));
                let all = w.sparse_exchange(&sends, 12);
                // the same tag again at once: no message of one exchange leaks into the next
                let one = w.sparse_exchange(&[((r + 1) % size, vec![r as u8])], 12);
                (none, all, one)
            });
            for (r, (none, all, one)) in out.into_iter().enumerate() {
                assert!(none.is_empty());
                let mut expect: Vec<(u32, Vec<u8>)> = Vec::new();
                for s in 0..n {
                    expect.push((s, vec![s as u8, r as u8]));
                    if r == 0 {
                        expect.push((s, vec![s as u8, 99]));
                    }
                }
                assert_eq!(all, expect, "n={n} rank={r}");
                let from = (r as u32 + n - 1) % n;
                assert_eq!(one, vec![(from, vec![from as u8])]);
            }
        }
    }

    #[test]
    fn gather_some_gather_from_and_scatter_to() {
        for n in SIZES {
            let out = run_ranks(n, |w| {
                let r = w.rank();
                let odd = (r % 2 == 1).then(|| vec![r as u8]);
                let (reports, total) = w.gather_some(odd.as_deref());
                let members: Vec<u32> = (0..w.size()).rev().collect();
                let gathered = w.gather_from(0, &members, &[r as u8; 2], 30);
                let parts: Vec<Vec<u8>> = members.iter().map(|&m| vec![m as u8 + 1]).collect();
                let part = w.scatter_to(0, &members, &parts, 31);
                (reports, total, gathered, part)
            });
            let odd: Vec<u32> = (0..n).filter(|r| r % 2 == 1).collect();
            for (r, (reports, total, gathered, part)) in out.into_iter().enumerate() {
                assert_eq!(total, odd.len() as u64);
                assert_eq!(part, vec![r as u8 + 1]);
                if r == 0 {
                    let expect: Vec<(u32, Vec<u8>)> =
                        odd.iter().map(|&o| (o, vec![o as u8])).collect();
                    assert_eq!(reports, expect);
                    let expect: Vec<Vec<u8>> = (0..n).rev().map(|m| vec![m as u8; 2]).collect();
                    assert_eq!(gathered.unwrap(), expect);
                } else {
                    assert!(reports.is_empty() && gathered.is_none());
                }
            }
        }
    }

    #[test]
    fn set_hosts_run_plugin_collectives_and_settle() {
        let out = run_ranks(4, |w| {
            let me = w.rank();
            let set = w.split(Some(me % 2), me).unwrap();
            let members = set.all_gather_u32(me);
            let groups: Vec<String> = members.iter().map(|m| format!("n{m}")).collect();
            let host = set.set_host(members.clone(), groups, me);
            let h = scr_plugin::Host::new(host.services());
            let sum = h.all_reduce(u64::from(me), ReduceOp::Sum).unwrap();
            let dup = host.duplicate();
            let hd = scr_plugin::Host::new(dup.services());
            let max = hd.all_reduce(u64::from(me), ReduceOp::Max).unwrap();
            let settled = host.settle(false, Duration::from_secs(1));
            (
                sum,
                max,
                h.world_rank(1).unwrap(),
                h.failure_group(0).unwrap(),
                host.size_matches(2),
                settled,
            )
        });
        assert_eq!(out[0], (2, 2, 2, "n0".to_string(), true, true));
        assert_eq!(out[1], (4, 3, 3, "n1".to_string(), true, true));
    }

    #[test]
    fn a_failed_member_settles_false_after_its_grace() {
        let out = run_ranks(2, |w| {
            let host = w.set_host(vec![0, 1], vec!["a".into(), "b".into()], 0);
            if host.rank() == 0 {
                // member 1 never settles: member 0 failed, gives up after its grace
                host.settle(true, Duration::from_millis(50))
            } else {
                true
            }
        });
        assert_eq!(out, [false, true]);
    }

    #[test]
    fn a_wait_times_out_naming_the_op_and_rank() {
        let err = std::panic::catch_unwind(|| {
            run_ranks_within(2, Duration::from_millis(100), |w| {
                if w.rank() == 1 {
                    w.recv(0, 3);
                }
            })
        })
        .unwrap_err();
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(
            msg.contains("rank 1 timed out") && msg.contains("in recv"),
            "{msg}"
        );
    }

    #[test]
    fn mismatched_collectives_and_aborts_fail_the_run_at_once() {
        let err = std::panic::catch_unwind(|| {
            run_ranks(3, |w| {
                if w.rank() == 2 {
                    w.barrier();
                } else {
                    w.sum_u64(1);
                }
            })
        })
        .unwrap_err();
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("out of step"), "{msg}");
        let started = Instant::now();
        let err = std::panic::catch_unwind(|| {
            run_ranks(3, |w| {
                if w.rank() == 1 {
                    w.abort(4);
                }
                w.barrier();
            })
        })
        .unwrap_err();
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert_eq!(msg, "rank 1 aborted the job with code 4");
        assert!(started.elapsed() < Duration::from_secs(10));
    }
}
