//! Background (asynchronous) flushes: a waiter thread per transfer keeps its outcome in
//! memory; completion is found by one reduction at the API calls every rank makes, and the
//! flushes finished everywhere are completed collectively.

use crate::runtime::flush::transfers;
use crate::runtime::flush::Flusher;
use std::sync::Arc;

use scr_plugin::sync::lock;

use super::record::remove_written;
use crate::runtime::Result;
use crate::state::filemap::DatasetRecord;
use crate::state::prefix::IndexEntry;
use crate::transfer::{collect, RankOutcome, StartError, Started};

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

    /// Hand this rank's transfer to a waiter thread, which keeps its outcome in memory
    /// for the collective completion ([`Flusher::poll_flushes`], [`Flusher::wait_flushes`]).
    /// The thread makes no MPI call and writes nothing into the prefix.
    pub(in crate::runtime) fn flush_in_background(
        &mut self,
        rec: &DatasetRecord,
        entry: IndexEntry,
        started: std::result::Result<Started, StartError>,
    ) -> Result<()> {
        let in_flight = Arc::clone(&self.flushing.in_flight);
        let outcomes = Arc::clone(&self.flushing.outcomes);
        lock(&in_flight).insert(rec.id);
        self.flushing.pending.push(entry);
        let id = rec.id;
        let buf = self.config.file_buf_size();
        let waiter = std::thread::spawn(move || {
            let outcome: RankOutcome = started
                .map_err(|e| e.to_string())
                .and_then(|s| collect(s, true, "when written", buf));
            // not running any more (the source may be evicted, see `evict`), then
            // finished: a poll that sees the outcome finds the transfer ended. (Not
            // `flushed` yet: whether every rank's part succeeded is known only once the
            // flush is completed collectively.)
            lock(&in_flight).remove(&id);
            lock(&outcomes).insert(id, outcome);
        });
        self.flushing.waiters.push((id, waiter));
        Ok(())
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
        let finished = self.world.min_u64(finished_here);
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
