//! Background (asynchronous) flushes: a waiter thread per transfer keeps its outcome in
//! memory; completion is found by one reduction at the API calls every rank makes, and the
//! flushes finished everywhere are completed collectively.

use crate::runtime::flush::transfers;
use crate::runtime::flush::{Flusher, Placement};
use crate::runtime::window::Window;
use crate::runtime::world::Op;
use std::sync::Arc;

use scr_plugin::sync::lock;

use super::record::remove_written;
use crate::state::filemap::DatasetRecord;
use crate::state::prefix::IndexEntry;
use crate::transfer::{collect, RankOutcome};

/// A background flush still passing its window (`flush_width` below the job's ranks).
pub(in crate::runtime) struct Turns {
    /// The dataset flushed.
    id: u64,
    /// Agreed: the lowest rank whose part has not ended (the ranks below `low + width`
    /// may copy); the job's size once every part ended.
    low: u64,
    window: Window,
    /// This rank's part, while the window has not let it in.
    queued: Option<Queued>,
}

/// A rank's part of a background flush waiting for its turn.
struct Queued {
    rec: DatasetRecord,
    place: Placement,
}

impl Flusher<'_> {
    /// Let a background flush of dataset `id` end and be recorded before the dataset is
    /// changed (collective; agreed: the transfer may still run on some ranks only).
    /// Recording a flush marks its dataset complete in the index, so a drop, delete or
    /// "reported invalid" mark made before it would be undone.
    pub(in crate::runtime) fn settle_flush_of(&mut self, id: u64) {
        let busy = self.flushing.holds(id);
        if !self.world.all(!busy) {
            self.wait_flushes(false);
        }
    }

    /// Start the background flush of `rec` (collective: every rank adds it to its
    /// pending flushes): this rank's transfer starts now when the window lets it in,
    /// else at the poll that does ([`Flusher::poll_flushes`], [`Flusher::wait_flushes`]).
    /// Its outcome is kept in memory for the collective completion.
    pub(in crate::runtime) fn flush_in_background(
        &mut self,
        rec: &DatasetRecord,
        entry: IndexEntry,
        place: Placement,
        window: Window,
    ) {
        lock(&self.flushing.in_flight).insert(rec.id);
        self.flushing.pending.push(entry);
        let (rank, size) = (self.world.rank(), self.world.size());
        if !window.narrower_than(size) {
            self.start_background(rec, &place, &window);
            return;
        }
        if rank == 0 {
            self.topo.info(&format!(
                "{}: flushing in the background {} of {size} ranks at a time \
                 (flush_width); the others start at later library calls",
                rec.name,
                window.width()
            ));
        }
        // an earlier background flush still in its window goes first: two flushes
        // copying at once would let twice the width in (the list is the same on every
        // rank, so every rank decides alike)
        let first = self.flushing.windows.is_empty();
        let queued = if first && rank < window.width() {
            self.start_background(rec, &place, &window);
            None
        } else {
            // a later flush must not write where this one will (see `placement`)
            let planned = place
                .writes(rec, self.job.prefix())
                .iter()
                .map(|name| self.job.prefix().join(name))
                .collect();
            lock(&self.flushing.removable).insert(rec.id, planned);
            Some(Queued {
                rec: rec.clone(),
                place,
            })
        };
        self.flushing.windows.push(Turns {
            id: rec.id,
            low: 0,
            window,
            queued,
        });
    }

    /// Start this rank's transfer of `rec` and hand it to a waiter thread, which makes
    /// no MPI call and writes nothing into the prefix itself.
    fn start_background(&mut self, rec: &DatasetRecord, place: &Placement, window: &Window) {
        let gauge = window.gauge().cloned();
        if let Some(g) = &gauge {
            g.enter("flush");
        }
        let started = transfers!(self).start(rec, place.relocate, true);
        self.hooks.crash_at("flush-dispatched", self.topo.rank());
        lock(&self.flushing.removable).insert(rec.id, place.removable(&started));
        let in_flight = Arc::clone(&self.flushing.in_flight);
        let outcomes = Arc::clone(&self.flushing.outcomes);
        let id = rec.id;
        let buf = self.config.file_buf_size();
        let waiter = std::thread::spawn(move || {
            let outcome: RankOutcome = started
                .map_err(|e| e.to_string())
                .and_then(|s| collect(s, true, "when written", buf));
            if let Some(g) = gauge {
                g.leave("flush");
            }
            // not running any more (the source may be evicted, see `evict`), then
            // finished: a poll that sees the outcome finds the transfer ended. (Not
            // `flushed` yet: whether every rank's part succeeded is known only once the
            // flush is completed collectively.)
            lock(&in_flight).remove(&id);
            lock(&outcomes).insert(id, outcome);
        });
        self.flushing.waiters.push((id, waiter));
    }

    /// This rank's value for each window still moving: its rank while its part has not
    /// ended (queued or copying), else the job's size.
    fn unended_here(&self) -> Vec<u64> {
        let outcomes = lock(&self.flushing.outcomes);
        let (rank, size) = (self.world.rank(), self.world.size());
        self.flushing
            .windows
            .iter()
            .map(|t| {
                let ended = t.queued.is_none() && outcomes.contains_key(&t.id);
                u64::from(if ended { size } else { rank })
            })
            .collect()
    }

    /// Move each window to `lows` (agreed: per window the lowest rank whose part has not
    /// ended): in the oldest window not yet passed, the ranks below `low + width` start
    /// their part (a later one waits for it, so that no more than the width copy at
    /// once whatever the number of flushes); a window every rank passed is dropped (on
    /// every rank alike).
    fn advance_windows(&mut self, lows: &[u64]) {
        let rank = u64::from(self.world.rank());
        let size = u64::from(self.world.size());
        let mut windows = std::mem::take(&mut self.flushing.windows);
        let mut earlier_open = false;
        for (t, &low) in windows.iter_mut().zip(lows) {
            t.low = low;
            if low >= size {
                continue;
            }
            if !earlier_open && rank < low + u64::from(t.window.width()) {
                if let Some(q) = t.queued.take() {
                    self.start_background(&q.rec, &q.place, &t.window);
                }
            }
            earlier_open = true;
        }
        windows.retain(|t| t.low < size);
        self.flushing.windows = windows;
    }

    /// Complete the background flushes every rank's transfer finished (collective; at
    /// the API calls every rank makes in the same order, as SCR polls in
    /// `SCR_Need_checkpoint`, `SCR_Start_output` and `SCR_Complete_output`).
    ///
    /// Cost per call: nothing when no background flush is pending — `pending` is the same
    /// list on every rank (see [`Flushing::pending`](super::Flushing::pending)), so every rank returns here alike
    /// without an exchange — and otherwise one 8-byte minimum-reduction of the number of
    /// leading pending flushes whose transfer ended on this rank, however many are
    /// pending; the flushes that minimum covers (the oldest ones, finished everywhere)
    /// are then completed under the nested name `flush_complete`.
    pub(in crate::runtime) fn poll_flushes(&mut self) {
        if self.flushing.pending.is_empty() {
            return;
        }
        let finished_here = {
            let outcomes = lock(&self.flushing.outcomes);
            self.flushing
                .pending
                .iter()
                .take_while(|e| outcomes.contains_key(&e.id))
                .count() as u64
        };
        // one reduction for both: the flushes finished everywhere, and where each
        // window stands (a flush still in its window is finished nowhere but below it)
        let mut mine = vec![finished_here];
        mine.extend(self.unended_here());
        let agreed = self.world.all_reduce_u64s(&mine, Op::Min);
        self.advance_windows(&agreed[1..]);
        let finished = agreed[0];
        if finished == 0 {
            return;
        }
        let _counted = crate::runtime::comm::scope("flush_complete");
        // (at most `pending.len()` on every rank: the minimum of counts that are)
        self.complete_flushes(finished as usize, false);
    }

    /// Wait for every background flush (collective: finalize, and `should_exit` before
    /// the application exits): this rank's transfers end, then every pending flush is
    /// completed collectively, and the flushes copied but not recorded earlier are
    /// recorded again.
    ///
    /// `last` (finalize only): the flushes copied but not recorded are tried once more
    /// and then left unrecorded for good; `should_exit`, after which the application
    /// may go on, leaves that last try to finalize.
    pub(in crate::runtime) fn wait_flushes(&mut self, last: bool) {
        let _counted = crate::runtime::comm::scope("flush_wait");
        // the windows first: each round, this rank's part of each ends, then one
        // reduction lets the next `width` ranks in (at most P / W rounds; the same
        // number on every rank, as the windows are dropped by agreement)
        while !self.flushing.windows.is_empty() {
            let copying: Vec<u64> = self
                .flushing
                .windows
                .iter()
                .filter(|t| t.queued.is_none())
                .map(|t| t.id)
                .collect();
            let (ending, running): (Vec<_>, Vec<_>) = std::mem::take(&mut self.flushing.waiters)
                .into_iter()
                .partition(|(id, _)| copying.contains(id));
            self.flushing.waiters = running;
            for (_, w) in ending {
                let _ = w.join();
            }
            let lows = self.world.all_reduce_u64s(&self.unended_here(), Op::Min);
            self.advance_windows(&lows);
        }
        for (_, w) in self.flushing.waiters.drain(..) {
            let _ = w.join();
        }
        // every waiter ended on every rank: every outcome is here
        let all = self.flushing.pending.len();
        self.complete_flushes(all, last);
        self.world.barrier();
    }

    /// Complete the `n` oldest pending background flushes (collective; every rank's
    /// transfer of each ended): agree on which failed and remove what those wrote, then
    /// record each in order through [`Flusher::gather_and_finish`], as a synchronous
    /// flush is recorded. `last` (finalize): the flushes copied but not recorded earlier
    /// are recorded again, and what cannot be recorded now stays unrecorded for good.
    fn complete_flushes(&mut self, n: usize, last: bool) {
        let settled: Vec<IndexEntry> = self.flushing.pending.drain(..n).collect();
        // their waiters stored their outcome as the last thing they did: they end now
        let (done, running): (Vec<_>, Vec<_>) = std::mem::take(&mut self.flushing.waiters)
            .into_iter()
            .partition(|(id, _)| settled.iter().any(|e| e.id == *id));
        self.flushing.waiters = running;
        for (_, w) in done {
            let _ = w.join();
        }
        let mine: Vec<RankOutcome> = settled
            .iter()
            .map(|entry| {
                lock(&self.flushing.outcomes)
                    .remove(&entry.id)
                    .unwrap_or_else(|| Err("no outcome".into()))
            })
            .collect();
        // first, a background flush that failed on any rank leaves nothing of its own in
        // the prefix, like a synchronous one; done before any flush is recorded, so that
        // the space a failed one took (a prefix that filled up) is there again for
        // recording the ones that were fully copied
        let mut copied = Vec::with_capacity(settled.len());
        for (entry, mine) in settled.iter().zip(&mine) {
            let removable = lock(&self.flushing.removable)
                .remove(&entry.id)
                .unwrap_or_default();
            let everywhere = self.world.all(mine.is_ok());
            if !everywhere {
                remove_written(self.job.prefix(), &removable);
            }
            copied.push(everywhere);
        }
        // then the ones copied earlier whose recording failed (older than these), and
        // these, in order: the newest recorded is the restart point
        let mut todo: Vec<(IndexEntry, RankOutcome, bool)> = Vec::new();
        if last {
            todo.extend(
                std::mem::take(&mut self.flushing.unrecorded)
                    .into_iter()
                    .map(|(entry, mine)| (entry, mine, true)),
            );
        }
        todo.extend(
            settled
                .into_iter()
                .zip(mine)
                .zip(copied)
                .map(|((entry, mine), copied)| (entry, mine, copied)),
        );
        for (entry, mine, copied) in todo {
            self.record_background(entry, mine, copied, last);
        }
    }

    /// Record one completed background flush (collective): in the index as flushed when
    /// every rank copied its part (`copied`, agreed), else as failed.
    fn record_background(
        &mut self,
        entry: IndexEntry,
        mine: RankOutcome,
        copied: bool,
        last: bool,
    ) {
        let recorded = self.gather_and_finish(&entry, &mine);
        // only rank 0 knows whether recording a fully copied flush worked: one byte tells
        // every rank (a failed transfer is failed on every rank alike, no byte needed)
        let in_index = copied
            && !self
                .world
                .broadcast_bytes(if recorded.is_ok() { b"1" } else { b"" })
                .is_empty();
        let why = recorded.err().map(|e| e.to_string()).unwrap_or_default();
        if in_index {
            // only a flush recorded for every rank lets an output leave the cache
            lock(&self.flushing.flushed).insert(entry.id);
            self.topo.info(&format!(
                "flushed {} to {} (in the background)",
                entry.name,
                self.job.prefix().display()
            ));
        } else if copied && !last {
            // fully copied, but recording it failed (a prefix full of another flush's
            // files): finalize tries again once failed flushes gave their space back;
            // the transfer state stays, so that a crash before then leaves the flush
            // for the next init to resume
            self.topo.warn(&format!(
                "{} is copied but not yet recorded: {why}; finalize tries again",
                entry.name
            ));
            self.flushing.unrecorded.push((entry, mine));
            return;
        } else {
            // a failed transfer is recorded as such: final
            self.topo
                .warn(&format!("{} stays in cache only: {why}", entry.name));
        }
        // settled: nothing is left to resume (kept until now so that a crash before the
        // flush was recorded leaves it for the next init)
        let _ = std::fs::remove_file(transfers!(self).state_file(entry.id));
    }
}
