//! Every MPI exchange the runtime makes goes through this module, which counts it, and
//! the byte exchanges it sizes in 64 bits and splits into pieces an MPI count can carry.
//!
//! # What is counted
//!
//! Per rank (per process), per API call name ([`scope`]), with
//! [`Runtime::comm_stats`](super::Runtime::comm_stats) to read and reset them:
//!
//! - `calls`: times the API call (or nested step) was entered;
//! - `collectives`: MPI collective calls this rank made — every all-gather, broadcast,
//!   all-reduce, barrier, communicator split or duplicate, and each round or piece of a
//!   split exchange counts one (so a 3 GiB all-gather counts its length exchange plus two
//!   data rounds);
//! - `msgs_sent`/`msgs_recv`: point-to-point messages (one per MPI send or receive, a
//!   piece of a long message counting one);
//! - `bytes_sent`/`bytes_recv`: the logical payload each MPI call carries for this rank,
//!   length exchanges included: an all-gather sends this rank's bytes once and receives
//!   every other rank's; a broadcast sends the root's bytes on the root and receives
//!   them on every other rank; an all-reduce sends and receives the value's size; a
//!   barrier, split or duplicate carries nothing;
//! - `seconds`: wall time inside the call.
//!
//! Both the world exchanges of the runtime (the free functions here, re-exported by the
//! runtime under the names the call sites use) and the host services plugins call on
//! their redundancy set's communicator ([`super::MpiHost`]) are counted.
//!
//! Steps with their own name nested inside an API call (`flush`, `flush_wait`,
//! `flush_complete`, `fetch`)
//! are counted under their own name only: every name's numbers exclude the nested names
//! inside it, so an API call's whole cost is its name plus the nested ones it ran.
//! Exchanges made outside every API call (the `scr` tools, a runtime's drop) count under
//! [`OUTSIDE`].
//!
//! # Why process-wide atomics
//!
//! The counters are process-wide statics (one process is one rank), not fields of the
//! `Runtime`: the exchange functions receive only a communicator (their signatures are
//! shared by every call site), and host services run on plugin threads as well as on
//! the calling thread, so neither a `Runtime` field nor a thread-local reaches every
//! exchange. Counting costs a relaxed atomic load and two or three relaxed adds per
//! exchange. Several runtimes in one process (tests) share the counters.
//!
//! # 64-bit counts
//!
//! MPI counts are C `int`s. Lengths are exchanged as `u64`; an all-gather whose total,
//! or a broadcast whose length, exceeds [`MAX_COUNT`] is split into rounds of at most
//! that many bytes (never a wrapped count).
//!
//! # Every exchange of the checkpoint, restart, flush and fetch paths
//!
//! One list, kept here next to the counters that measure it: per rank, with P ranks in
//! the job, S members per redundancy set, n ranks per node, D cached datasets, F files of this rank, C bytes of
//! configuration, B bytes of data per rank. "agree" is a 1-byte min-reduction
//! (`Runtime::all_agree`); on its failure path it adds the first failing rank's message
//! (an 8-byte min-reduction and one broadcast of that message). Every world reduction
//! or broadcast takes O(log P) steps; nothing below sends or receives O(P) bytes on any
//! rank, and rank 0 receives at most [`REPORT_LIMIT`] messages from `World::gather_some`.
//!
//! **init**: duplicate the world (nothing); rank 0's configuration broadcast (C); its
//! hash compared by a min- and a max-reduction (8 + 8; on a mismatch the first
//! differing rank's configuration is broadcast, 2C); agreements on the checks; the node
//! found by `sets::split_by_value` (a split, the first
//! rank's name broadcast in the group, a min-reduction) and the node's ranks gathered on
//! the node's communicator (4n) and the nodes counted (8); per redundancy descriptor an
//! agreement on the group value, the set formed by
//! `sets::form_my_set` (3 splits, 2 broadcasts of 4-8 bytes,
//! an exclusive scan, the members gathered on the set's communicator, 4S, and their
//! group values, O(S)), the set's control communicator duplicated from it (for the
//! abort notices of failed scheme calls, see `mpi_host.rs`), an agreement on the scheme
//! and one 8-byte sum-reduction on whether it hashes in apply and whether it tolerates
//! no loss; then the cache (below) and a barrier.
//!
//! **restart from cache** (init's `restore_cache`, per dataset any rank holds: D,
//! bounded by the stores' `count`): ids walked from the largest down by 8-byte
//! max-reductions (one per id, and one that ends the walk); the
//! holders' identity agreed (`World::min_u64` ×2 and one or two `World::broadcast_from` of one
//! record's identity, ~100 bytes); a rank that lost its filemap gets its record from a
//! member of its set (`World::sum_u64`, a split of the holders, their ranks gathered within
//! the set, 4S, and a `World::sparse_exchange` that only the lost ranks receive from); the
//! set's communicator duplicated from the one init formed for the descriptor (set-local;
//! an agreement first; with its own control duplicate) or, when some rank's set is not one this run formed, split off
//! the world and the members' values gathered (O(S)); agreements
//! around the scheme's `recover`, whose own exchanges run on the set's communicator
//! (scheme-specific, O(S) messages and O(B·k) bytes per rank, not P); reports of ranks
//! that lack files or failed by `World::gather_some` (a scan, a sum, at most one message per
//! rank) and rank 0's report broadcast. Distribution to new owners (a node replaced):
//! offers by a `World::sparse_exchange`, filemaps and files point-to-point between the two
//! ranks concerned.
//!
//! **start_output**: rank 0's dataset name and flags broadcast (name length); agreements.
//!
//! **complete_output**: agreements (begin, all files valid and no clash, redundancy
//! files named and recorded, applied, committed); the name-clash check by a distributed
//! hash (`names.rs`: one `World::sparse_exchange` of this rank's F names plus its redundancy
//! names to the ranks owning their hashes, received: the names this rank owns, F on
//! average); the scheme's `apply` on the set's communicator (scheme-specific: O(S) or
//! O(k) messages, O(B) bytes) and its settling, a non-blocking 8-byte sum on the set's
//! control communicator (after a failed call also the abort notices, one per other
//! member from each member that failed, and a duplicate of that communicator); an 8-byte sum of
//! the checkpoint's bytes for the event log; eviction: per cached dataset of the store
//! an 8-byte min-reduction (the next id held) and an agreement (may every holder evict
//! it), one more min-reduction that ends the walk, then an agreement on the outcome;
//! the flush when due (below), and while a background flush is pending one 8-byte
//! min-reduction that polls it (also in start_output and should_exit).
//!
//! **need_checkpoint**: rank 0's decision broadcast (1 byte; with a halt condition its
//! reason, a few bytes); while a background flush is pending, its 8-byte poll. **start_restart / complete_restart**: agreements.
//!
//! **flush** (the rank2file map as SCR's tree, blocks of R = `rank2file_block` ranks):
//! a few agreements and 1-byte broadcasts from rank 0 (whether the index could be
//! opened, whether names are taken; an error's text when one failed); each rank's list of writes and its outcome sent
//! to its block's leader (2 messages, O(F) bytes; a leader receives 2(R - 1)); the
//! first failure by an 8-byte min-reduction (and its text broadcast when one failed);
//! the parts' totals by a 16-byte sum (`World::all_reduce_u64s`; non-leaders add 0). Rank 0 writes
//! the root (layout and totals) with no message per block: O(1) messages beyond its own
//! block's. A background flush adds one 8-byte min-reduction per polling API call while
//! one is pending and rank 0's 1-byte "recorded" broadcast. With `flush_width` W below
//! P, a foreground flush's copy runs in a sliding window (`window.rs`): one 0-byte
//! message received from rank r - W and one sent to rank r + W (none when W >= P).
//!
//! **fetch** (per candidate): the chosen index entry and the rank2file root broadcast
//! from rank 0 (constant size, ~350 bytes); each leader reads its own part and a 24-byte
//! sum checks the parts' totals against the root's; each rank's list from its leader (1
//! message; a leader sends R - 1); agreements on the outcome by min-reductions (and the
//! first failure's text broadcast). Rank 0 sends no message per block (a single-file map
//! of an earlier release, legacy only: one message from rank 0 to each leader, P/R).
//! With `fetch_width` W below P, the copy (or, with `fetch = false`, the check of the
//! files in place) runs in a sliding window: at most one 0-byte message from rank r - W
//! and one to rank r + W.
//!

use scr_plugin::sync::lock;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Instant;

use mpi::collective::Operation;
use mpi::datatype::{Buffer, BufferMut, PartitionMut};
use mpi::point_to_point::MatchedReceiveVec as _;
use mpi::topology::{Color, Process, SimpleCommunicator};
use mpi::traits::{
    Communicator, CommunicatorCollectives as _, Destination as _, Root as _, Source as _,
};

/// Largest number of bytes one MPI call of the byte exchanges carries (an MPI count is a
/// C `int`).
pub const MAX_COUNT: usize = i32::MAX as usize;

/// The name exchanges made outside every API call are counted under.
pub const OUTSIDE: &str = "outside";

/// Number of distinct names counted; names beyond it count under [`OUTSIDE`] (the
/// runtime uses about 20).
const SLOTS: usize = 64;

/// One name's counters.
struct Slot {
    calls: AtomicU64,
    collectives: AtomicU64,
    msgs_sent: AtomicU64,
    msgs_recv: AtomicU64,
    bytes_sent: AtomicU64,
    bytes_recv: AtomicU64,
    /// Wall time inside, nested names included.
    nanos: AtomicU64,
    /// Wall time inside the names nested in this one (subtracted when read).
    nested_nanos: AtomicU64,
}

impl Slot {
    const fn new() -> Slot {
        Slot {
            calls: AtomicU64::new(0),
            collectives: AtomicU64::new(0),
            msgs_sent: AtomicU64::new(0),
            msgs_recv: AtomicU64::new(0),
            bytes_sent: AtomicU64::new(0),
            bytes_recv: AtomicU64::new(0),
            nanos: AtomicU64::new(0),
            nested_nanos: AtomicU64::new(0),
        }
    }

    fn fields(&self) -> [&AtomicU64; 8] {
        [
            &self.calls,
            &self.collectives,
            &self.msgs_sent,
            &self.msgs_recv,
            &self.bytes_sent,
            &self.bytes_recv,
            &self.nanos,
            &self.nested_nanos,
        ]
    }
}

/// Slot 0 is [`OUTSIDE`]; slot `i > 0` is `NAMES[i - 1]`.
static COUNTERS: [Slot; SLOTS] = [const { Slot::new() }; SLOTS];
/// The names of slots 1.., in the order first entered (only [`scope`] takes the lock).
static NAMES: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
/// The slot exchanges count into now.
static CURRENT: AtomicUsize = AtomicUsize::new(0);

/// Bytes as a counter value (a length always fits in 64 bits).
fn wide(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

fn current() -> &'static Slot {
    &COUNTERS[CURRENT.load(Relaxed)]
}

/// Count one collective call carrying `sent` bytes from and `recv` bytes to this rank.
pub(crate) fn collective(sent: usize, recv: usize) {
    let s = current();
    s.collectives.fetch_add(1, Relaxed);
    s.bytes_sent.fetch_add(wide(sent), Relaxed);
    s.bytes_recv.fetch_add(wide(recv), Relaxed);
}

/// Count one point-to-point message of `bytes` sent.
pub(crate) fn sent(bytes: usize) {
    let s = current();
    s.msgs_sent.fetch_add(1, Relaxed);
    s.bytes_sent.fetch_add(wide(bytes), Relaxed);
}

/// Count one point-to-point message of `bytes` received.
pub(crate) fn received(bytes: usize) {
    let s = current();
    s.msgs_recv.fetch_add(1, Relaxed);
    s.bytes_recv.fetch_add(wide(bytes), Relaxed);
}

/// While alive, exchanges count under its name (see [`scope`]).
#[must_use = "exchanges count under the name only while the scope lives"]
pub struct Scope {
    /// `None` when the name was already current (a call re-entering itself).
    inner: Option<(usize, usize, Instant)>,
}

/// Count what follows, until the returned scope drops, under `name` (an API call, or a
/// step such as a flush nested in one); one more call of `name`.
pub fn scope(name: &'static str) -> Scope {
    let me = {
        let mut names = lock(&NAMES);
        match names.iter().position(|n| *n == name) {
            Some(i) => i + 1,
            None if names.len() + 1 < SLOTS => {
                names.push(name);
                names.len()
            }
            None => 0,
        }
    };
    let prev = CURRENT.load(Relaxed);
    if prev == me {
        return Scope { inner: None };
    }
    COUNTERS[me].calls.fetch_add(1, Relaxed);
    CURRENT.store(me, Relaxed);
    Scope {
        inner: Some((me, prev, Instant::now())),
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        if let Some((me, prev, started)) = self.inner {
            let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
            COUNTERS[me].nanos.fetch_add(nanos, Relaxed);
            if prev != 0 {
                COUNTERS[prev].nested_nanos.fetch_add(nanos, Relaxed);
            }
            CURRENT.store(prev, Relaxed);
        }
    }
}

/// One API call's (or nested step's) exchanges on this rank (see the module docs for
/// what each number counts).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CallStats {
    /// Times the call was entered.
    pub calls: u64,
    /// MPI collective calls (each round or piece of a split exchange counts one).
    pub collectives: u64,
    /// Point-to-point messages sent.
    pub msgs_sent: u64,
    /// Point-to-point messages received.
    pub msgs_recv: u64,
    /// Payload bytes sent, collectives and messages together.
    pub bytes_sent: u64,
    /// Payload bytes received, collectives and messages together.
    pub bytes_recv: u64,
    /// Wall time inside the call, nested named steps excluded.
    pub seconds: f64,
}

impl CallStats {
    fn add(&mut self, o: &CallStats) {
        self.calls += o.calls;
        self.collectives += o.collectives;
        self.msgs_sent += o.msgs_sent;
        self.msgs_recv += o.msgs_recv;
        self.bytes_sent += o.bytes_sent;
        self.bytes_recv += o.bytes_recv;
        self.seconds += o.seconds;
    }
}

/// This rank's exchanges per API call name since the start or the last reset.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CommStats {
    /// Per name (`init`, `start_output`, `route_file`, `complete_output`, `flush`,
    /// `flush_wait`, `flush_complete`, `fetch`, `have_restart`, `start_restart`,
    /// `complete_restart`, `need_checkpoint`, `should_exit`, `current`, `drop`, `delete`, `finalize`,
    /// [`OUTSIDE`]): only names with something counted.
    pub per_call: BTreeMap<String, CallStats>,
}

impl CommStats {
    /// The numbers of `call` (all zero when it was not counted).
    pub fn get(&self, call: &str) -> CallStats {
        self.per_call.get(call).cloned().unwrap_or_default()
    }

    /// Every name's numbers added up (`calls` counts nested steps too).
    pub fn total(&self) -> CallStats {
        let mut t = CallStats::default();
        for s in self.per_call.values() {
            t.add(s);
        }
        t
    }
}

/// One line per name, aligned: what a benchmark prints per rank and step.
impl std::fmt::Display for CommStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{:<18} {:>6} {:>11} {:>9} {:>9} {:>12} {:>12} {:>10}",
            "call",
            "calls",
            "collectives",
            "msgs_sent",
            "msgs_recv",
            "bytes_sent",
            "bytes_recv",
            "seconds"
        )?;
        for (name, s) in &self.per_call {
            writeln!(
                f,
                "{:<18} {:>6} {:>11} {:>9} {:>9} {:>12} {:>12} {:>10.6}",
                name,
                s.calls,
                s.collectives,
                s.msgs_sent,
                s.msgs_recv,
                s.bytes_sent,
                s.bytes_recv,
                s.seconds
            )?;
        }
        Ok(())
    }
}

/// This process's counters now.
pub fn snapshot() -> CommStats {
    let names = lock(&NAMES).clone();
    let mut per_call = BTreeMap::new();
    for (i, slot) in COUNTERS.iter().enumerate() {
        let name = match i {
            0 => OUTSIDE,
            _ => match names.get(i - 1) {
                Some(n) => n,
                None => break,
            },
        };
        let nanos = slot
            .nanos
            .load(Relaxed)
            .saturating_sub(slot.nested_nanos.load(Relaxed));
        let s = CallStats {
            calls: slot.calls.load(Relaxed),
            collectives: slot.collectives.load(Relaxed),
            msgs_sent: slot.msgs_sent.load(Relaxed),
            msgs_recv: slot.msgs_recv.load(Relaxed),
            bytes_sent: slot.bytes_sent.load(Relaxed),
            bytes_recv: slot.bytes_recv.load(Relaxed),
            seconds: nanos as f64 / 1e9,
        };
        if s != CallStats::default() {
            per_call.insert(name.to_string(), s);
        }
    }
    CommStats { per_call }
}

/// Zero this process's counters.
pub fn reset() {
    for slot in &COUNTERS {
        for f in slot.fields() {
            f.store(0, Relaxed);
        }
    }
}

/// Rank 0's bytes on every rank (collective).
pub fn broadcast_bytes(world: &SimpleCommunicator, mine: &[u8]) -> Vec<u8> {
    broadcast_bytes_limited(world, mine, MAX_COUNT)
}

/// [`broadcast_bytes`] in pieces of at most `limit` bytes (at least 1, at most
/// [`MAX_COUNT`]): public so that tests exercise the split path without gigabytes.
pub fn broadcast_bytes_limited(world: &SimpleCommunicator, mine: &[u8], limit: usize) -> Vec<u8> {
    broadcast_from_limited(world, 0, mine, limit)
}

/// The bytes of rank `root` of `comm` on every rank of `comm` (collective; `root` known
/// to all, e.g. from a reduction; `mine` is ignored on the other ranks). Per rank: 8 +
/// the root's length in bytes, O(log P) steps.
pub fn broadcast_from(comm: &SimpleCommunicator, root: i32, mine: &[u8]) -> Vec<u8> {
    broadcast_from_limited(comm, root, mine, MAX_COUNT)
}

fn broadcast_from_limited(
    comm: &SimpleCommunicator,
    root: i32,
    mine: &[u8],
    limit: usize,
) -> Vec<u8> {
    let limit = limit.clamp(1, MAX_COUNT);
    let is_root = comm.rank() == root;
    let mut len = wide(mine.len());
    broadcast_into(comm, root, &mut len);
    // (a failed broadcast's length is not a length)
    super::ulfm::check();
    // (a length is a usize on its sender; one that does not fit here cannot be held)
    let len = usize::try_from(len).unwrap_or(usize::MAX);
    let mut buf = if is_root { mine.to_vec() } else { Vec::new() };
    // grown piece by piece as the bytes arrive: the root's word for its length is not
    // allocated before the bytes come; nothing is broadcast for 0 bytes (an empty Vec's
    // dangling pointer is refused by some MPI builds)
    let mut at = 0;
    while at < len {
        let n = (len - at).min(limit);
        if !is_root {
            buf.resize(at + n, 0);
        }
        broadcast_into(comm, root, &mut buf[at..at + n]);
        super::ulfm::check();
        at += n;
    }
    buf
}

/// Every rank's bytes, in rank order (collective).
pub fn all_gather_bytes(world: &SimpleCommunicator, mine: &[u8]) -> Vec<Vec<u8>> {
    all_gather_bytes_limited(world, mine, MAX_COUNT)
}

/// [`all_gather_bytes`] in rounds of at most `limit` bytes in total (at least 1, at most
/// [`MAX_COUNT`]): public so that tests exercise the split path without gigabytes.
pub fn all_gather_bytes_limited(
    world: &SimpleCommunicator,
    mine: &[u8],
    limit: usize,
) -> Vec<Vec<u8>> {
    let limit = limit.clamp(1, MAX_COUNT);
    let n = usize::try_from(world.size()).unwrap_or(0);
    let me = usize::try_from(world.rank()).unwrap_or(0);
    let mut lens = vec![0u64; n];
    world.all_gather_into(&wide(mine.len()), &mut lens[..]);
    super::ulfm::check();
    let word = std::mem::size_of::<u64>();
    collective(word, word * n.saturating_sub(1));
    // (each grown as the rounds bring its bytes: a peer's word for its length is not
    // allocated up front; a round's buffer holds at most `limit` bytes)
    let mut out: Vec<Vec<u8>> = vec![Vec::new(); n];
    let mut done = vec![0u64; n];
    while let Some(counts) = next_round(&lens, &done, limit) {
        let displs: Vec<i32> = counts
            .iter()
            .scan(0i32, |acc, &c| {
                let d = *acc;
                // within a round the counts add up to at most `limit` <= i32::MAX
                *acc += c;
                Some(d)
            })
            .collect();
        let total: usize = counts.iter().map(|&c| c as usize).sum();
        let from = done[me] as usize;
        let piece = &mine[from..from + counts[me] as usize];
        let mut buf = vec![0u8; total];
        {
            let mut part = PartitionMut::new(&mut buf[..], &counts[..], &displs[..]);
            world.all_gather_varcount_into(piece, &mut part);
        }
        super::ulfm::check();
        collective(piece.len(), total - piece.len());
        for (r, (&c, &d)) in counts.iter().zip(&displs).enumerate() {
            out[r].extend_from_slice(&buf[d as usize..d as usize + c as usize]);
            done[r] += c as u64;
        }
    }
    out
}

/// The next round of a split all-gather: how many bytes each rank contributes, given
/// each rank's length and how much of it earlier rounds carried; `None` when every byte
/// was carried. Ranks take their bytes in rank order until the round holds `limit`
/// bytes, so every round but the last is full: ceil(total / limit) rounds.
pub(crate) fn next_round(lens: &[u64], done: &[u64], limit: usize) -> Option<Vec<i32>> {
    let mut budget = wide(limit.clamp(1, MAX_COUNT));
    let mut any = false;
    let counts = lens
        .iter()
        .zip(done)
        .map(|(&l, &d)| {
            let take = (l - d).min(budget);
            budget -= take;
            any |= take > 0;
            // take <= limit <= i32::MAX
            i32::try_from(take).unwrap_or(i32::MAX)
        })
        .collect();
    any.then_some(counts)
}

/// `comm.all_reduce_into`, counted.
pub fn all_reduce_into<C, S, R, O>(comm: &C, send: &S, recv: &mut R, op: O)
where
    C: Communicator,
    S: Buffer + ?Sized,
    R: BufferMut + ?Sized,
    O: Operation,
{
    comm.all_reduce_into(send, recv, op);
    collective(std::mem::size_of_val(send), std::mem::size_of_val(recv));
}

/// `comm.process_at_rank(root).broadcast_into(buf)`, counted.
pub fn broadcast_into<C, B>(comm: &C, root: i32, buf: &mut B)
where
    C: Communicator,
    B: BufferMut + ?Sized,
{
    comm.process_at_rank(root).broadcast_into(buf);
    let n = std::mem::size_of_val(buf);
    if comm.rank() == root {
        collective(n, 0);
    } else {
        collective(0, n);
    }
}

/// `comm.barrier()`, counted.
pub fn barrier<C: Communicator>(comm: &C) {
    comm.barrier();
    collective(0, 0);
}

/// `comm.split_by_color_with_key(color, key)`, counted.
pub fn split_by_color_with_key(
    comm: &SimpleCommunicator,
    color: Color,
    key: i32,
) -> Option<SimpleCommunicator> {
    let out = comm.split_by_color_with_key(color, key);
    collective(0, 0);
    out
}

/// `comm.duplicate()`, counted.
pub fn duplicate(comm: &SimpleCommunicator) -> SimpleCommunicator {
    let out = comm.duplicate();
    collective(0, 0);
    out
}

/// `comm.all_gather_into(send, recv)`, counted (fixed-size items; a redundancy set's or
/// a node's communicator, never the world's on a checkpoint path).
pub fn all_gather_into<C, S, R>(comm: &C, send: &S, recv: &mut R)
where
    C: Communicator,
    S: Buffer + ?Sized,
    R: BufferMut + ?Sized,
{
    comm.all_gather_into(send, recv);
    let n = std::mem::size_of_val(send);
    collective(n, std::mem::size_of_val(recv).saturating_sub(n));
}

/// `comm.exclusive_scan_into(send, recv, op)`, counted.
pub fn exclusive_scan_into<C, S, R, O>(comm: &C, send: &S, recv: &mut R, op: O)
where
    C: Communicator,
    S: Buffer + ?Sized,
    R: BufferMut + ?Sized,
    O: Operation,
{
    comm.exclusive_scan_into(send, recv, op);
    collective(std::mem::size_of_val(send), std::mem::size_of_val(recv));
}

/// Sparse exchange (the NBX algorithm: synchronous sends, then a non-blocking barrier
/// entered once they are matched): each rank sends `sends` (destination, bytes) and
/// receives whatever others sent it, without anyone knowing in advance who sends to
/// whom. Collective over `comm`. Per rank: its own messages plus the O(log P) steps of
/// one barrier — nothing grows with P. Received messages come back ordered by sender.
///
/// Two consecutive exchanges on one communicator must use different tags: a rank may
/// begin the next exchange while another still receives in this one (alternating two
/// tags suffices, a rank cannot be two exchanges ahead).
pub fn sparse_exchange(
    comm: &SimpleCommunicator,
    sends: &[(u32, Vec<u8>)],
    tag: i32,
) -> Vec<(u32, Vec<u8>)> {
    let mut got = Vec::new();
    mpi::request::scope(|scope| {
        let mut pending: Vec<_> = sends
            .iter()
            .map(|(to, bytes)| {
                sent(bytes.len());
                comm.process_at_rank(*to as i32)
                    .immediate_synchronous_send_with_tag(scope, &bytes[..], tag)
            })
            .collect();
        let mut barrier = None;
        loop {
            if super::ulfm::lost() {
                // a process was lost and the communicator revoked: every request still
                // pending completes (with an error) at once; wait for them, so none is
                // dropped pending, and unwind after the scope
                for r in pending {
                    r.wait();
                }
                if let Some(b) = barrier.take() {
                    let b: mpi::request::Request<'_, (), _> = b;
                    b.wait();
                }
                return;
            }
            if let Some(probed) = comm.any_process().immediate_matched_probe_with_tag(tag) {
                if super::ulfm::lost() {
                    // (a failed probe matched nothing: its message is not one MPI holds)
                    std::mem::forget(probed);
                    continue;
                }
                let (bytes, status) = probed.matched_receive_vec::<u8>();
                received(bytes.len());
                got.push((status.source_rank() as u32, bytes));
                continue;
            }
            match barrier.take() {
                None => {
                    pending = pending.into_iter().filter_map(|r| r.test().err()).collect();
                    if pending.is_empty() {
                        barrier = Some(comm.immediate_barrier());
                        collective(0, 0);
                    }
                }
                Some(b) => match b.test() {
                    Ok(_) => break,
                    Err(b) => barrier = Some(b),
                },
            }
            std::thread::yield_now();
        }
    });
    super::ulfm::check();
    got.sort_by_key(|(from, _)| *from);
    got
}

/// Most reports `World::gather_some` brings to rank 0 (the rest are only counted).
pub const REPORT_LIMIT: u64 = 256;

/// `peer.send_with_tag(buf, tag)`, counted.
pub fn send<B: Buffer + ?Sized>(peer: &Process<'_>, buf: &B, tag: i32) {
    peer.send_with_tag(buf, tag);
    sent(std::mem::size_of_val(buf));
}

/// `peer.receive_into_with_tag(buf, tag)`, counted.
pub fn receive_into<B: BufferMut + ?Sized>(peer: &Process<'_>, buf: &mut B, tag: i32) {
    peer.receive_into_with_tag(buf, tag);
    received(std::mem::size_of_val(buf));
}

/// `peer.receive_vec_with_tag::<u8>(tag)`, counted.
pub fn receive_vec(peer: &Process<'_>, tag: i32) -> Vec<u8> {
    // (probe, then receive: a failed probe's message is not received)
    let v = received_after_probe(peer.matched_probe_with_tag(tag)).0;
    received(v.len());
    v
}

/// The message a probe matched, unless a process was lost: then the probe failed, its
/// message is not one MPI holds (forgotten, never received or dropped) and this unwinds
/// (`ulfm::check`).
fn received_after_probe(
    probed: (mpi::point_to_point::Message, mpi::point_to_point::Status),
) -> (Vec<u8>, mpi::point_to_point::Status) {
    if super::ulfm::lost() {
        std::mem::forget(probed);
        super::ulfm::raise();
    }
    probed.matched_receive_vec::<u8>()
}

/// A message from any rank of `comm` with `tag`: its sender and bytes, counted.
pub fn receive_any_vec(comm: &SimpleCommunicator, tag: i32) -> (u32, Vec<u8>) {
    let (v, status) = received_after_probe(comm.any_process().matched_probe_with_tag(tag));
    received(v.len());
    (u32::try_from(status.source_rank()).unwrap_or(0), v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every round of a split all-gather, as (counts) lists.
    fn rounds(lens: &[u64], limit: usize) -> Vec<Vec<i32>> {
        let mut done = vec![0u64; lens.len()];
        let mut all = Vec::new();
        while let Some(c) = next_round(lens, &done, limit) {
            for (d, &x) in done.iter_mut().zip(&c) {
                *d += x as u64;
            }
            all.push(c);
        }
        all
    }

    /// Nested names count apart, a name re-entering itself is one call, and what runs
    /// outside every scope counts under `outside`. (The counters are process-wide: this
    /// is the only test here that touches them.)
    #[test]
    fn scopes_count_exclusively_and_reset_zeroes() {
        reset();
        {
            let _outer = scope("t_outer");
            collective(1, 2);
            {
                let _inner = scope("t_inner");
                sent(5);
                received(7);
                collective(0, 0);
            }
            {
                let _again = scope("t_outer");
                collective(0, 0);
            }
        }
        collective(3, 3);
        let stats = snapshot();
        let counts = |name: &str| {
            let s = stats.get(name);
            [
                s.calls,
                s.collectives,
                s.msgs_sent,
                s.msgs_recv,
                s.bytes_sent,
                s.bytes_recv,
            ]
        };
        assert_eq!(counts("t_outer"), [1, 2, 0, 0, 1, 2]);
        assert_eq!(counts("t_inner"), [1, 1, 1, 1, 5, 7]);
        assert_eq!(counts(OUTSIDE), [0, 1, 0, 0, 3, 3]);
        assert_eq!(stats.total().collectives, 4);
        reset();
        assert_eq!(snapshot(), CommStats::default());
    }

    #[test]
    fn stats_print_one_aligned_line_per_name() {
        let mut stats = CommStats::default();
        stats.per_call.insert(
            "complete_output".into(),
            CallStats {
                calls: 1,
                collectives: 14,
                msgs_sent: 2,
                msgs_recv: 3,
                bytes_sent: 62,
                bytes_recv: 140,
                seconds: 0.5,
            },
        );
        let text = stats.to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(
            lines[1].split_whitespace().collect::<Vec<_>>(),
            [
                "complete_output",
                "1",
                "14",
                "2",
                "3",
                "62",
                "140",
                "0.500000"
            ]
        );
        assert_eq!(lines[0].len(), lines[1].len(), "{text}");
        assert_eq!(stats.get("nope"), CallStats::default());
        assert_eq!(stats.total().bytes_recv, 140);
    }

    #[test]
    fn rounds_carry_every_byte_in_full_rounds() {
        // 5 + 0 + 9 + 2 = 16 bytes in rounds of 7: 7, 7, 2
        assert_eq!(
            rounds(&[5, 0, 9, 2], 7),
            vec![vec![5, 0, 2, 0], vec![0, 0, 7, 0], vec![0, 0, 0, 2]]
        );
        // everything fits: one round with the lengths themselves
        assert_eq!(rounds(&[1, 2, 3], 100), vec![vec![1, 2, 3]]);
        // nothing to carry: no round
        assert!(rounds(&[0, 0], 4).is_empty());
    }

    #[test]
    fn lengths_beyond_an_mpi_count_split_without_wrapping() {
        // 3 ranks of 1.5 GiB: 4.5 GiB total needs ceil(4.5 GiB / (2 GiB - 1)) = 3 rounds,
        // each count within i32
        let big = 3u64 << 29;
        let r = rounds(&[big, big, big], MAX_COUNT);
        assert_eq!(r.len(), 3);
        for (i, len) in [big, big, big].iter().enumerate() {
            let sum: u64 = r.iter().map(|c| c[i] as u64).sum();
            assert_eq!(sum, *len, "rank {i}");
        }
        assert!(r.iter().all(|c| c.iter().all(|&x| x >= 0)));
        assert_eq!(
            r[0].iter().map(|&x| x as u64).sum::<u64>(),
            MAX_COUNT as u64
        );
    }
}
