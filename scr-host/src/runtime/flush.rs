//! Flush (cache → prefix) and fetch (prefix → cache), through the transfer type of the
//! dataset's store.
//!
//! A flush first records the dataset in the index as incomplete, so a crash in the middle
//! leaves the index pointing at the previous complete checkpoint. Each rank copies its
//! files with a transfer; the leader of each block of ranks then writes its part of the
//! rank2file map, and rank 0 the map's root and the summary, and marks the dataset
//! complete in the index and the flush file. An asynchronous flush does the same
//! in the background: each rank's transfer is waited for by a thread that only keeps
//! its outcome in memory (it makes no MPI call: the runtime's exchanges stay on the
//! application's thread). Completion is detected through MPI, as SCR's
//! `scr_flush_async_test` does, at the API calls every rank makes in the same order
//! anyway (`need_checkpoint`, `start_output`, `complete_output`, `should_exit`): one
//! 8-byte minimum-reduction of "how many of the oldest pending flushes my transfers
//! finished" per call while a flush is pending, none when nothing is; the flushes every
//! rank finished are then completed collectively ([`Flusher::poll_flushes`]), and
//! finalize completes the rest after waiting for the local transfers. No file is
//! written per rank and nothing polls the file system: the earlier design (a marker
//! file `done.<rank>.scr` per rank in the dataset's prefix directory, two fsyncs each,
//! and a thread on rank 0 calling `exists()` on P of them every 50 ms) cost P files in
//! one directory per flush. Markers such a version left in a prefix are ignored (nothing
//! reads them; they go with their dataset's directory when `scr index drop --delete`
//! removes it).
//!
//! Nothing a transfer plugin says is trusted ([`crate::transfer::verify`]): a flush is recorded complete
//! only when every added file has exactly one Complete result, matched by source and
//! destination, and the host re-read the destination and found the size and CRC32 recorded
//! at `complete_output`; rank2file records the CRC32 the host computed. A fetch goes
//! through the same transfer type and is verified the same way against rank2file. Why the
//! host pays a read of every flushed file: a plugin (a vendor's burst-buffer library, a
//! site's own) that reports success for a copy it did not make would otherwise turn the
//! only copy of a checkpoint that survives losing every node into garbage, silently.
//!
//! A flush never writes over a file the prefix already holds: when a dataset's names are
//! taken (a rerun after a restart writes `ckpt.20` again) it goes to its own directory
//! ([`prefix::relocated`] explains the choice), so a failed flush leaves every older
//! flushed checkpoint byte-exact and fetchable.
//!
//! The rank2file map is written and read as SCR's tree ([`Rank2File`] explains it): per
//! rank a flush or a fetch exchanges its own list with its block's leader and takes part
//! in O(1) reductions and broadcasts of constant size; a leader handles R = `rank2file_block`
//! lists and one part file (which names its dataset, block and totals). Rank 0 handles
//! no message per block: the root holds only the layout and totals (sums reduced over
//! the leaders at flush; broadcast with the chosen entry at fetch), so its cost is O(1)
//! messages beyond its own block's whatever P. No rank gathers or receives every rank's
//! list. (A single-file map of an earlier release is still fetched, legacy only, with
//! rank 0 sending each leader its block's lists.)
//!
//! Transfers get a [`LocalHost`](crate::local_host::LocalHost): a one-member host whose log is the runtime's and whose
//! cancellation flag (`Flushing::cancel`) the runtime sets to stop background transfers.

use super::window::{Direction, Window};
use crate::config::settings;
use scr_plugin::sync::lock;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use std::sync::atomic::{AtomicBool, Ordering};

use super::cache::Cache;
use super::collective::Collective;
use super::dispatch::transfers;
use super::job::Job;
use super::restart::state::RestartState;
use super::topology::Topology;
use super::{DatasetRecord, Result, TestHooks};
use crate::config::Config;
use crate::registry::Registry;
use crate::state::prefix::{self, Index, IndexEntry};

mod background;
mod record;
pub(in crate::runtime) use record::rank2file_blocks;
pub(crate) mod resume;
use crate::transfer::{collect, Label, Planned, RankOutcome, StartError, Started};

/// Background work of asynchronous flushes.
#[derive(Default)]
pub(super) struct Flushing {
    /// Dataset ids whose transfer is still running on this rank (never evicted).
    in_flight: Arc<Mutex<BTreeSet<u64>>>,
    /// Dataset ids this rank's part of a flush copied (an output may then be evicted).
    flushed: Arc<Mutex<BTreeSet<u64>>>,
    /// Dataset ids this run started a flush of (finalize does not start another of one
    /// that failed: a transfer that failed minutes ago is not tried again at the end).
    attempted: BTreeSet<u64>,
    /// When each flush of this run started (for its event in the log).
    started: BTreeMap<u64, std::time::Instant>,
    /// Background flushes of this run not yet completed collectively, oldest first. The
    /// same list on every rank: flushes start collectively, in the same order, and
    /// [`Flusher::poll_flushes`] and [`Flusher::wait_flushes`] remove them collectively.
    pending: Vec<IndexEntry>,
    /// What this rank's waiter found, by dataset id (there once its transfer ended).
    outcomes: Arc<Mutex<BTreeMap<u64, RankOutcome>>>,
    /// Per background flush, the prefix files this rank writes that no older dataset
    /// owns (removed if the flush fails anywhere).
    removable: Arc<Mutex<BTreeMap<u64, Vec<PathBuf>>>>,
    /// Background flushes fully copied on every rank whose recording failed (a prefix
    /// full of a later flush's files), with this rank's outcome: finalize records them
    /// again once failed flushes gave their space back, so a copied checkpoint is not
    /// lost. The same list on every rank.
    unrecorded: Vec<(IndexEntry, RankOutcome)>,
    /// Threads waiting for this rank's transfers, by dataset id.
    waiters: Vec<(u64, std::thread::JoinHandle<()>)>,
    /// Background flushes whose window (`flush_width` below the job's ranks) has not let
    /// every rank in yet, oldest first: the same list on every rank (a flush is added
    /// collectively and removed by agreement).
    windows: Vec<background::Turns>,
    /// The cancellation flag of every transfer's host ([`LocalHost`](crate::local_host::LocalHost)): set, it stops the
    /// transfers still running (a background waiter then cancels its transfer, which
    /// removes partly written destinations).
    cancel: Arc<AtomicBool>,
}

impl Flushing {
    /// Whether dataset `id` has a flush of this run still open on this rank: copying,
    /// waiting to be completed collectively, or copied but not recorded.
    pub(in crate::runtime) fn holds(&self, id: u64) -> bool {
        lock(&self.in_flight).contains(&id)
            || self.pending.iter().any(|e| e.id == id)
            || self.unrecorded.iter().any(|(e, _)| e.id == id)
    }

    /// Dataset ids whose flush is still running on this rank.
    pub(in crate::runtime) fn in_flight(&self) -> BTreeSet<u64> {
        lock(&self.in_flight).clone()
    }

    /// Dataset ids this rank's part of a flush copied.
    pub(in crate::runtime) fn flushed(&self) -> BTreeSet<u64> {
        lock(&self.flushed).clone()
    }

    /// The flag that cancels every transfer of this run (handed to each transfer's host).
    pub(in crate::runtime) fn cancel_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.cancel)
    }

    /// Background flushes whose transfer has not ended on this rank yet.
    pub(in crate::runtime) fn running_here(&self) -> usize {
        let outcomes = lock(&self.outcomes);
        self.pending
            .iter()
            .filter(|e| !outcomes.contains_key(&e.id))
            .count()
    }
}

impl Drop for Flushing {
    /// A runtime dropped without `finalize` (an error path) must not leave transfers
    /// writing into the prefix behind it from detached threads: stop them. After
    /// `finalize` every transfer has ended and this changes nothing.
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::SeqCst);
    }
}

/// Flushing over the parts it uses, borrowed from a runtime or a phase that holds them
/// ([`flusher!`]): the flush family (`flush`, `background`, `record`, `resume`) is
/// written on it.
pub(in crate::runtime) struct Flusher<'a> {
    pub(in crate::runtime) world: &'a mut Collective,
    pub(in crate::runtime) cache: &'a mut Cache,
    pub(in crate::runtime) flushing: &'a mut Flushing,
    pub(in crate::runtime) restart: &'a RestartState,
    pub(in crate::runtime) config: &'a Config,
    pub(in crate::runtime) registry: &'a Registry,
    pub(in crate::runtime) job: &'a Job,
    pub(in crate::runtime) topo: &'a Topology,
    pub(in crate::runtime) hooks: &'a TestHooks,
}

/// A [`Flusher`] over the parts of `$s` (the runtime, or a phase holding them).
macro_rules! flusher {
    ($s:expr) => {
        $crate::runtime::flush::Flusher {
            world: &mut $s.world,
            cache: &mut $s.cache,
            flushing: &mut $s.flushing,
            restart: &$s.restart,
            config: &$s.config,
            registry: &$s.registry,
            job: &$s.job,
            topo: &$s.topo,
            hooks: &$s.hooks,
        }
    };
}
pub(in crate::runtime) use flusher;

/// Where a flush writes its dataset's files ([`Flusher::placement`]): the same choice on
/// every rank.
pub(in crate::runtime) struct Placement {
    /// A pure output dataset (no checkpoint): written at its own paths even over older
    /// files.
    pure_output: bool,
    /// This rank's destinations at the files' own paths that are taken (on disk, or a
    /// destination of a background flush still running).
    existing: BTreeSet<PathBuf>,
    /// Every rank writes into the dataset's own directory ([`prefix::relocated`]).
    relocate: bool,
}

impl Placement {
    /// The prefix paths (relative) this rank's part of the flush of `rec` may write, for
    /// the list recorded before anything is written: names taken in the prefix are not
    /// this flush's to clean up (unless a pure output is written over them).
    fn writes(&self, rec: &DatasetRecord, prefix: &Path) -> Vec<String> {
        rec.files
            .iter()
            .filter_map(|f| {
                if self.relocate {
                    Some(prefix::relocated(rec.id, &f.name))
                } else {
                    (self.pure_output || !self.existing.contains(&prefix.join(&f.name)))
                        .then(|| f.name.clone())
                }
            })
            .collect()
    }

    /// What the `started` transfer writes that no older dataset owns: removed if the
    /// flush fails (names taken in the prefix were relocated; a pure output written over
    /// an older file leaves that path alone).
    fn removable(&self, started: &std::result::Result<Started, StartError>) -> Vec<PathBuf> {
        started
            .as_ref()
            .map(|s| {
                s.files
                    .iter()
                    .map(|p| p.destination.clone())
                    .filter(|p| self.relocate || !self.existing.contains(p))
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Flusher<'_> {
    /// Flush `rec` if the policy asks for it: every `flush`-th checkpoint and every output
    /// dataset. A flush that fails leaves the dataset in cache and says so; it does not
    /// fail the checkpoint.
    pub(super) fn maybe_flush(&mut self, rec: &DatasetRecord) -> Result<()> {
        if !flush_due(self.config, rec) {
            return Ok(());
        }
        self.flush_dataset(rec)
    }

    /// Flush the newest checkpoint in cache unless the prefix holds it already or a
    /// background flush of it is running (collective; `why` says who asks, for the log).
    /// Used by `flush_on_restart` (a job restarted from cache leaves its restart point
    /// on the parallel file system too), by finalize (SCR's behaviour: a clean finish
    /// never leaves the newest checkpoint in node-local cache only) and when a halt
    /// condition holds (the job is about to end).
    pub(super) fn flush_newest(&mut self, why: &str) -> Result<()> {
        let Some(id) = self.restart.candidate_in(self.cache) else {
            return Ok(());
        };
        if self.flushing.attempted.contains(&id) {
            // flushed by this run already, still running, or failed earlier in this run
            // (the index says why; it stays in cache for the next run or scavenge)
            return Ok(());
        }
        let held = if self.topo.rank() == 0 {
            // (a damaged index is rebuilt from the summaries first: taking it for empty
            // would flush the checkpoint a second time beside its first copy)
            Index::load_or_rebuild(self.job.prefix())
                .ok()
                .and_then(|ix| ix.datasets.get(&id).cloned())
                .is_some_and(|e| e.complete && e.failed.is_none())
        } else {
            false
        };
        let held = !self
            .world
            .broadcast_bytes(if held { b"1" } else { b"" })
            .is_empty();
        if held {
            return Ok(());
        }
        let rec = self.cache.record(id).clone();
        self.topo.info(&format!(
            "{why}: flushing {} (the newest checkpoint, not yet in the prefix)",
            rec.name
        ));
        self.flush_dataset(&rec)
    }

    /// Flush `rec` to the prefix now (collective): open its index entry, decide where its
    /// files go, record what it may write, then copy them in the foreground or hand the
    /// transfer to a background waiter (`flush_async`).
    fn flush_dataset(&mut self, rec: &DatasetRecord) -> Result<()> {
        let _dataset = crate::log::dataset_span(rec.id).entered();
        let _counted = super::comm::scope("flush");
        // the flush compares what it copies against the CRC32s: a background hash of
        // this dataset is recorded first (this rank's own thread: no other rank waits)
        let settled;
        let rec = if self.cache.settle_crc_of(rec.id) {
            let mut r = rec.clone();
            if let Some(now) = self.cache.get(rec.id) {
                for f in &mut r.files {
                    f.crc32 = now
                        .files
                        .iter()
                        .find(|n| n.name == f.name)
                        .and_then(|n| n.crc32);
                }
                r.crc32_pending = now.crc32_pending;
            }
            settled = r;
            &settled
        } else {
            rec
        };
        self.begin_flush(rec.id);
        let Some(entry) = self.open_index_entry(rec) else {
            return Ok(());
        };
        self.hooks.crash_at("flush-started", self.topo.rank());
        let place = self.placement(rec);
        // what this flush may write, recorded in the prefix before anything is written:
        // if the run dies mid-flush, the next init cleans it up even when every cache is
        // lost with the filemaps that name the files (see `resume`)
        self.record_writes(rec.id, &place.writes(rec, self.job.prefix()));
        let window = Window::of(self.config, self.hooks, Direction::Flush);
        if self.config.get(settings::FLUSH_ASYNC) {
            // the ranks the window lets in start now, the others at later polls (see
            // `background`: its waiters make no MPI call to pass a turn on)
            self.flush_in_background(rec, entry, place, window);
            return Ok(());
        }
        // at most `flush_width` ranks copy at once; a rank whose part fails (or is
        // refused before it starts) passes its turn on all the same
        let buf = self.config.file_buf_size();
        let mut removable = Vec::new();
        let outcome = window.run(self.world.as_dyn(), || {
            self.hooks
                .injected(
                    "flush-transfer",
                    self.topo.rank(),
                    rec.id,
                    self.job.cntl_dir(),
                )
                .map_err(|e| e.to_string())?;
            let started = transfers!(self).start(rec, place.relocate, false);
            self.hooks.crash_at("flush-dispatched", self.topo.rank());
            removable = place.removable(&started);
            started
                .map_err(|e| e.to_string())
                .and_then(|s| collect(s, false, "when written", buf))
        });
        self.flush_in_foreground(rec, &entry, outcome, &removable);
        Ok(())
    }

    /// Where the flush of `rec` writes (collective: whether to relocate is agreed).
    ///
    /// It never overwrites what the prefix already holds (an older flushed checkpoint of
    /// the same name): if any rank's file name is taken, the whole dataset goes to its
    /// own directory (see `prefix::relocated` for why). A pure output dataset (no
    /// checkpoint) is the exception: it is flushed so that users find it at its path,
    /// as the previous run's output was, and no restart depends on the older copy.
    fn placement(&self, rec: &DatasetRecord) -> Placement {
        let pure_output = rec.output && rec.checkpoint_id.is_none();
        // taken: on disk already, or a destination of a background flush still running
        // (whose transfer may not have created it yet; writing it again would race it,
        // and a failure of either would remove the other's file)
        let in_flight: BTreeSet<PathBuf> = lock(&self.flushing.removable)
            .values()
            .flatten()
            .cloned()
            .collect();
        let existing: BTreeSet<PathBuf> = rec
            .files
            .iter()
            .map(|f| self.job.prefix().join(&f.name))
            .filter(|p| p.symlink_metadata().is_ok() || in_flight.contains(p))
            .collect();
        let taken = !pure_output && !existing.is_empty();
        let relocate = !self.world.all(!taken);
        if relocate {
            self.topo.info(&format!(
                "{}: the prefix already holds files of that name; this flush writes to {}",
                rec.name,
                prefix::relocated(rec.id, "")
            ));
        }
        Placement {
            pure_output,
            existing,
            relocate,
        }
    }

    /// Record the flush of `rec` collectively, given this rank's `outcome` (its transfer
    /// waited for and verified, [`Flusher::gather_and_finish`]); when it failed anywhere,
    /// remove what this rank wrote that no older dataset owns (`removable`). Either way
    /// the dataset stays in cache and the checkpoint stands: a failed flush is a warning.
    fn flush_in_foreground(
        &mut self,
        rec: &DatasetRecord,
        entry: &IndexEntry,
        outcome: RankOutcome,
        removable: &[PathBuf],
    ) {
        let state = transfers!(self).state_file(rec.id);
        self.hooks.crash_at("flush-copied", self.topo.rank());
        let text = self.finish_agreed(entry, &outcome);
        // the transfer's state stays until the flush is settled: a crash before this
        // point leaves it for the next init to resume (see `resume`)
        let _ = std::fs::remove_file(&state);
        if text.is_empty() {
            // only a flush recorded for every rank lets an output leave the cache: one
            // that failed elsewhere is cleaned out of the prefix below
            lock(&self.flushing.flushed).insert(rec.id);
            self.topo.info(&format!(
                "flushed {} to {}",
                rec.name,
                self.job.prefix().display()
            ));
        } else {
            record::remove_written(self.job.prefix(), removable);
            self.topo.warn(&format!(
                "{} stays in cache only: {}",
                rec.name,
                String::from_utf8_lossy(&text)
            ));
        }
    }
}

/// Whether the policy flushes `rec` at its `complete_output`: every output dataset
/// and every `flush`-th checkpoint.
pub(in crate::runtime) fn flush_due(config: &Config, rec: &DatasetRecord) -> bool {
    let every = config.get(settings::FLUSH);
    rec.output
        || rec
            .checkpoint_id
            .is_some_and(|c| every > 0 && c % every == 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::prefix::{Rank2FilePart, Rank2FileRoot};

    /// Flushes recorded out of order (ckpt.2's before ckpt.1's, as when a copied but
    /// unrecorded flush is recorded at finalize): the restart point stays the newer
    /// checkpoint.
    #[test]
    fn an_older_flush_recorded_late_never_becomes_the_restart_point() {
        let dir = tempfile::tempdir().unwrap();
        let entry = |id: u64| IndexEntry {
            id,
            name: format!("ckpt.{id}"),
            checkpoint_id: Some(id),
            dir: crate::layout::dataset_dir_name(id),
            world_size: 1,
            ..IndexEntry::default()
        };
        // one rank, no files: one part, then the root, summary and index entry
        let record = |id: u64| {
            let blocks = prefix::Blocks::new(1, prefix::RANK2FILE_BLOCK);
            Rank2FilePart::new(id, blocks, 0, BTreeMap::from([(0, Vec::new())]))
                .write(dir.path())
                .unwrap();
            record::record_complete(dir.path(), &entry(id), &Rank2FileRoot::new(blocks, 0, 0))
                .unwrap();
        };
        record(2);
        record(1);
        let ix = Index::load(dir.path()).unwrap();
        assert_eq!(ix.current.as_deref(), Some("ckpt.2"));
        assert!(ix.datasets[&1].complete && ix.datasets[&2].complete);
        record(3);
        assert_eq!(
            Index::load(dir.path()).unwrap().current.as_deref(),
            Some("ckpt.3")
        );
    }

    #[test]
    fn dropping_the_flushing_state_sets_the_cancel_flag() {
        let flushing = Flushing::default();
        let flag = Arc::clone(&flushing.cancel);
        drop(flushing);
        assert!(flag.load(Ordering::SeqCst));
    }
}
