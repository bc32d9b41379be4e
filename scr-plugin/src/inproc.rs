//! An in-process implementation of the host services: threads of one process act as the
//! members of a redundancy set, so scheme algorithms can be unit-tested without MPI.
//! `scr scavenge` uses it too, to rebuild a set offline after the job (one process, every
//! member a thread); it forwards [`World::log_records`] to its log. Runtime jobs never do:
//! their sets run on MPI, their transfers on the runtime's one-member host.
//!
//! ```
//! use scr_plugin::{inproc, ReduceOp};
//!
//! // four members on two "nodes"
//! let sums = inproc::run(&["n0", "n0", "n1", "n1"], |host| {
//!     host.all_reduce(u64::from(host.rank()), ReduceOp::Sum)
//! });
//! assert!(sums.into_iter().all(|s| s.unwrap() == 6));
//! ```

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use abi_stable::std_types::{RResult, RSlice, RSliceMut, RStr, RString};

use crate::abi::{HostServices, LogLevel, ReduceOp};
use crate::error::{ErrorCode, PluginError, PluginResult};
use crate::host::{host_ref, Host, MAX_TAG};
use crate::sync::lock;

/// Tags above the plugin range, used by the collectives so they never match plugin traffic.
const REDUCE_TAG: u32 = MAX_TAG + 1;
const RESULT_TAG: u32 = MAX_TAG + 2;
const BCAST_TAG: u32 = MAX_TAG + 3;

/// Messages waiting for one member, keyed by (source member, tag), in send order.
type Queues = HashMap<(u32, u32), VecDeque<Vec<u8>>>;

#[derive(Default)]
struct Mailbox {
    queues: Mutex<Queues>,
    arrived: Condvar,
}

/// The shared state of one in-process "communicator".
pub struct World {
    groups: Vec<String>,
    mailboxes: Vec<Mailbox>,
    cancelled: AtomicBool,
    timeout: Duration,
    log: Mutex<Vec<(u32, LogLevel, String)>>,
    /// The lowest member that failed in the current call, and its error (see
    /// [`World::member_failed`]).
    failure: Mutex<Option<(u32, PluginError)>>,
}

impl World {
    /// A world with one member per entry of `failure_groups` (each entry is that member's
    /// failure-group value, e.g. its node name). A receive that waits longer than
    /// `timeout` fails instead of hanging the test.
    pub fn new(failure_groups: &[&str], timeout: Duration) -> Arc<World> {
        Arc::new(World {
            groups: failure_groups.iter().map(|s| s.to_string()).collect(),
            mailboxes: failure_groups.iter().map(|_| Mailbox::default()).collect(),
            cancelled: AtomicBool::new(false),
            timeout,
            log: Mutex::new(Vec::new()),
            failure: Mutex::new(None),
        })
    }

    /// Member `member` failed in the current collective call with `error` (the message
    /// as every member should see it): what an MPI host's abort notice does. From now on
    /// every receive (and collective) of every member that waits, or would wait, returns
    /// an [`ErrorCode::PEER_FAILED`] error with that message instead, and
    /// [`is_cancelled`](HostServices::is_cancelled) is true. When several members fail,
    /// the lowest one is kept.
    pub fn member_failed(&self, member: u32, error: PluginError) {
        {
            let mut failure = lock(&self.failure);
            if failure.as_ref().is_none_or(|(m, _)| member < *m) {
                *failure = Some((member, error));
            }
        }
        for mailbox in &self.mailboxes {
            // under the queue's lock, so that a receive between its check and its wait
            // cannot miss the wake-up
            let _queues = lock(&mailbox.queues);
            mailbox.arrived.notify_all();
        }
    }

    /// The failure [`World::member_failed`] recorded: the member and its error.
    pub fn failure(&self) -> Option<(u32, PluginError)> {
        lock(&self.failure).clone()
    }

    /// Forget the recorded failure and every message not received yet: the in-process
    /// counterpart of the fresh communicator an MPI host takes after a failed call. Call
    /// it once every member returned from the failed call and before any starts the next.
    pub fn reset_after_failure(&self) {
        *lock(&self.failure) = None;
        for mailbox in &self.mailboxes {
            lock(&mailbox.queues).clear();
        }
    }

    /// The host services of member `rank`.
    pub fn member(self: &Arc<World>, rank: u32) -> InProcHost {
        assert!((rank as usize) < self.groups.len(), "no member {rank}");
        InProcHost {
            world: Arc::clone(self),
            rank,
        }
    }

    /// Ask every member's current operation to stop.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
    }

    /// Everything logged so far, as (member, level, message).
    pub fn log_records(&self) -> Vec<(u32, LogLevel, String)> {
        lock(&self.log).clone()
    }

    fn size(&self) -> u32 {
        self.groups.len() as u32
    }
}

/// One member's host services in an in-process [`World`].
pub struct InProcHost {
    world: Arc<World>,
    rank: u32,
}

impl InProcHost {
    fn check(&self, member: u32) -> PluginResult<()> {
        if member < self.world.size() {
            Ok(())
        } else {
            Err(PluginError::communication(format!(
                "member {member} does not exist in a set of {} members",
                self.world.size()
            )))
        }
    }

    fn post(&self, dest: u32, tag: u32, data: &[u8]) -> PluginResult<()> {
        self.check(dest)?;
        if let Some((_, e)) = &*lock(&self.world.failure) {
            return Err(PluginError::new(ErrorCode::PEER_FAILED, e.message()));
        }
        let mailbox = &self.world.mailboxes[dest as usize];
        lock(&mailbox.queues)
            .entry((self.rank, tag))
            .or_default()
            .push_back(data.to_vec());
        mailbox.arrived.notify_all();
        Ok(())
    }

    fn take(&self, src: u32, tag: u32) -> PluginResult<Vec<u8>> {
        self.check(src)?;
        let mailbox = &self.world.mailboxes[self.rank as usize];
        let deadline = Instant::now() + self.world.timeout;
        let mut queues = lock(&mailbox.queues);
        loop {
            if let Some((_, e)) = &*lock(&self.world.failure) {
                return Err(PluginError::new(ErrorCode::PEER_FAILED, e.message()));
            }
            if let Some(msg) = queues.get_mut(&(src, tag)).and_then(VecDeque::pop_front) {
                return Ok(msg);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(PluginError::communication(format!(
                    "member {} timed out after {:?} waiting for member {src} (tag {tag})",
                    self.rank, self.world.timeout
                )));
            }
            queues = mailbox
                .arrived
                .wait_timeout(queues, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn take_into(&self, src: u32, tag: u32, buf: &mut [u8]) -> PluginResult<()> {
        let msg = self.take(src, tag)?;
        if msg.len() != buf.len() {
            return Err(PluginError::communication(format!(
                "member {} expected {} bytes from member {src} (tag {tag}) but {} arrived",
                self.rank,
                buf.len(),
                msg.len()
            )));
        }
        buf.copy_from_slice(&msg);
        Ok(())
    }

    fn reduce(&self, value: u64, op: ReduceOp) -> PluginResult<u64> {
        if self.rank == 0 {
            let mut acc = value;
            for src in 1..self.world.size() {
                let mut b = [0u8; 8];
                self.take_into(src, REDUCE_TAG, &mut b)?;
                let v = u64::from_le_bytes(b);
                acc = match op {
                    ReduceOp::Sum => acc.wrapping_add(v),
                    ReduceOp::Min => acc.min(v),
                    ReduceOp::Max => acc.max(v),
                };
            }
            for dest in 1..self.world.size() {
                self.post(dest, RESULT_TAG, &acc.to_le_bytes())?;
            }
            Ok(acc)
        } else {
            self.post(0, REDUCE_TAG, &value.to_le_bytes())?;
            let mut b = [0u8; 8];
            self.take_into(0, RESULT_TAG, &mut b)?;
            Ok(u64::from_le_bytes(b))
        }
    }
}

impl HostServices for InProcHost {
    fn rank(&self) -> u32 {
        self.rank
    }

    fn size(&self) -> u32 {
        self.world.size()
    }

    fn world_rank(&self, member: u32) -> u32 {
        member
    }

    fn failure_group(&self, member: u32) -> RString {
        self.world
            .groups
            .get(member as usize)
            .map(|s| RString::from(s.as_str()))
            .unwrap_or_default()
    }

    fn send(&self, dest: u32, tag: u32, data: RSlice<'_, u8>) -> RResult<(), PluginError> {
        self.post(dest, tag, data.as_slice()).into()
    }

    fn recv(&self, src: u32, tag: u32, mut buf: RSliceMut<'_, u8>) -> RResult<(), PluginError> {
        self.take_into(src, tag, buf.as_mut_slice()).into()
    }

    fn sendrecv(
        &self,
        dest: u32,
        data: RSlice<'_, u8>,
        src: u32,
        mut buf: RSliceMut<'_, u8>,
        tag: u32,
    ) -> RResult<(), PluginError> {
        // Sends are buffered, so posting first can never deadlock a ring.
        self.post(dest, tag, data.as_slice())
            .and_then(|()| self.take_into(src, tag, buf.as_mut_slice()))
            .into()
    }

    fn barrier(&self) -> RResult<(), PluginError> {
        self.reduce(0, ReduceOp::Sum).map(|_| ()).into()
    }

    fn all_reduce_u64(&self, value: u64, op: ReduceOp) -> RResult<u64, PluginError> {
        self.reduce(value, op).into()
    }

    fn broadcast(&self, root: u32, mut buf: RSliceMut<'_, u8>) -> RResult<(), PluginError> {
        let mut run = || -> PluginResult<()> {
            self.check(root)?;
            if self.rank == root {
                for dest in (0..self.world.size()).filter(|&d| d != root) {
                    self.post(dest, BCAST_TAG, buf.as_slice())?;
                }
                Ok(())
            } else {
                self.take_into(root, BCAST_TAG, buf.as_mut_slice())
            }
        };
        run().into()
    }

    fn log(&self, level: LogLevel, message: RStr<'_>) {
        lock(&self.world.log).push((self.rank, level, message.to_string()));
    }

    fn is_cancelled(&self) -> bool {
        self.world.cancelled.load(Ordering::SeqCst) || lock(&self.world.failure).is_some()
    }
}

/// Run `f` once per member, each on its own thread, and return the results in member
/// order. `failure_groups[i]` is member i's failure-group value. Receives time out after
/// 30 s so a broken algorithm fails its test instead of hanging it.
pub fn run<T, F>(failure_groups: &[&str], f: F) -> Vec<T>
where
    T: Send,
    F: Fn(&Host<'_>) -> T + Sync,
{
    run_in(&World::new(failure_groups, Duration::from_secs(30)), f)
}

/// Like [`run`], in a world the caller made (to set the timeout, cancel or read logs).
pub fn run_in<T, F>(world: &Arc<World>, f: F) -> Vec<T>
where
    T: Send,
    F: Fn(&Host<'_>) -> T + Sync,
{
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..world.size())
            .map(|rank| {
                let services = world.member(rank);
                let f = &f;
                scope.spawn(move || f(&Host::new(host_ref(&services))))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_exchange_passes_every_block_around_the_ring() {
        // Each member starts with a block naming itself; after size-1 ring steps every
        // member has seen every other member's block exactly once, in ring order.
        let groups = ["n0", "n0", "n1", "n1", "n2", "n2", "n3"];
        let seen = run(&groups, |host| -> PluginResult<Vec<u32>> {
            let n = host.size();
            let mut block = vec![host.rank() as u8; 1000 + host.rank() as usize];
            let mut seen = Vec::new();
            for step in 1..n {
                let from = host.left(step);
                let mut incoming = vec![0u8; 1000 + from as usize];
                host.sendrecv(host.right(1), &block, host.left(1), &mut incoming, 7)?;
                assert!(incoming.iter().all(|&b| b == from as u8));
                seen.push(from);
                block = incoming;
            }
            Ok(seen)
        });
        for (rank, s) in seen.into_iter().enumerate() {
            let s = s.unwrap();
            let n = groups.len() as u32;
            let expect: Vec<u32> = (1..n).map(|k| (rank as u32 + n - k) % n).collect();
            assert_eq!(s, expect, "member {rank}");
        }
    }

    #[test]
    fn all_reduce_and_broadcast_agree_on_every_member() {
        let out = run(&["a", "b", "c", "d", "e"], |host| -> PluginResult<_> {
            let r = u64::from(host.rank());
            let sum = host.all_reduce(r * 10, ReduceOp::Sum)?;
            let min = host.all_reduce(r + 3, ReduceOp::Min)?;
            let max = host.all_reduce(r + 3, ReduceOp::Max)?;
            let agree = host.all_agree(host.rank() != 2)?;
            let mut buf = if host.rank() == 3 {
                *b"from three"
            } else {
                [0u8; 10]
            };
            host.broadcast(3, &mut buf)?;
            host.barrier()?;
            Ok((sum, min, max, agree, buf))
        });
        for o in out {
            assert_eq!(o.unwrap(), (100, 3, 7, false, *b"from three"));
        }
    }

    #[test]
    fn failure_groups_and_world_ranks_are_reported() {
        let out = run(&["node-a", "node-b"], |host| {
            (host.failure_group(1 - host.rank()), host.world_rank(1))
        });
        assert_eq!(out[0].0.as_deref().unwrap(), "node-b");
        assert_eq!(out[1].0.as_deref().unwrap(), "node-a");
        assert!(matches!(out[0].1, Ok(1)));
    }

    #[test]
    fn bad_member_tag_and_size_are_errors_not_hangs() {
        let world = World::new(&["a", "b"], Duration::from_millis(200));
        let out = run_in(&world, |host| {
            let bad_member = host.send(5, 0, b"x").unwrap_err();
            let bad_tag = host.send(0, MAX_TAG + 1, b"x").unwrap_err();
            let mut short = [0u8; 2];
            let size = if host.rank() == 0 {
                host.send(1, 3, b"four").unwrap();
                None
            } else {
                Some(host.recv(0, 3, &mut short).unwrap_err())
            };
            let mut one = [0u8; 1];
            let timeout = host.recv(1 - host.rank(), 9, &mut one).unwrap_err();
            (bad_member, bad_tag, size, timeout)
        });
        assert_eq!(
            out[0].0.message(),
            "member 5 does not exist in a set of 2 members"
        );
        assert!(out[0].1.message().contains("tag 32768"));
        assert_eq!(
            out[1].2.as_ref().unwrap().message(),
            "member 1 expected 2 bytes from member 0 (tag 3) but 4 arrived"
        );
        assert!(out[1].3.message().contains("timed out"), "{}", out[1].3);
    }

    #[test]
    fn cancellation_and_logging_reach_the_world() {
        let world = World::new(&["a", "b"], Duration::from_secs(5));
        world.cancel();
        let out = run_in(&world, |host| {
            host.log(LogLevel::Info, &format!("hello from {}", host.rank()));
            host.check_cancelled()
        });
        assert!(out
            .iter()
            .all(|r| r.as_ref().unwrap_err().code == crate::ErrorCode::CANCELLED));
        let mut logs = world.log_records();
        logs.sort_by_key(|r| r.0);
        assert_eq!(logs[1], (1, LogLevel::Info, "hello from 1".to_string()));
    }
}
