//! Recording a flush in the prefix: its index entry opened, the rank2file map and the
//! list of what it may write gathered by blocks of ranks, the entry completed (or
//! marked failed), its event logged, and what a failed flush wrote removed. Shared by
//! the foreground and background flushes, the flushes a crashed run left open, and the
//! bypass datasets (written in the prefix itself), so none of them calls another for it.

use crate::runtime::flush::Flusher;
use crate::runtime::job::Job;
use crate::runtime::prefix::prefix;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use scr_plugin::sync::lock;

use crate::config::settings;
use crate::events::Event;
use crate::runtime::tags::{OUTCOME_TAG, WRITES_TAG};
use crate::runtime::world::{Exchange, ExchangeError, Op};
use crate::runtime::{now_secs, DatasetRecord};
use crate::state::prefix::{
    self, FlushFile, Index, IndexEntry, Rank2File, Rank2FilePart, Rank2FileRoot, Summary,
};
use crate::state::writes::{writes_part_path, WritesPart, WRITES_KIND};
use crate::transfer::RankOutcome;

/// Remove what a failed flush wrote into the prefix (files already gone are fine), and
/// the directories that leaves empty below a relocated dataset's `files/` (directories
/// at the application's own paths are left: they may be the user's).
pub(super) fn remove_written(prefix: &Path, paths: &[PathBuf]) {
    let scr = crate::layout::scr_dir(prefix);
    for p in paths {
        let _ = std::fs::remove_file(p);
        let relocated = p.starts_with(&scr);
        if !relocated {
            continue;
        }
        let mut dir = p.parent();
        while let Some(d) = dir {
            if d.file_name().is_some_and(|n| n == "files") || std::fs::remove_dir(d).is_err() {
                break;
            }
            dir = d.parent();
        }
    }
}

/// Rank 0: the flush's event in the log (`done`: the bytes recorded, `None` when it was
/// not recorded).
fn log_flush(job: &Job, entry: &IndexEntry, started: &FlushStart, done: Option<u64>) {
    let (bytes, ok) = match done {
        Some(bytes) => (bytes, true),
        None => (0, false),
    };
    job.log_event_of(
        &started.job_id,
        Event::Flush {
            name: entry.name.clone(),
            id: entry.id,
            bytes,
            seconds: started.at.elapsed().as_secs_f64(),
            ok,
        },
    );
}

/// When and by which job a flush started (for its event in the log).
#[derive(Clone)]
struct FlushStart {
    job_id: String,
    at: std::time::Instant,
}

/// Rank 0: the flush of `entry` failed (`reason` names the rank): marked in the index.
fn record_failure(prefix: &Path, entry: &IndexEntry, reason: &str) {
    let _ = Index::update(prefix, |ix| ix.flush_failed(entry.id, reason));
}

/// Rank 0: every part of the rank2file map of `entry` is written (`root` holds their
/// layout and totals):
/// write the root and the summary and mark the dataset complete in the index. Returns
/// the bytes recorded. When it cannot be recorded, the map (root and parts) and the
/// summary are removed: no index rebuilt from the summaries may bring it back.
pub(super) fn record_complete(
    prefix: &Path,
    entry: &IndexEntry,
    root: &Rank2FileRoot,
) -> std::result::Result<u64, crate::state::StateError> {
    let summary = Summary {
        id: entry.id,
        name: entry.name.clone(),
        checkpoint_id: entry.checkpoint_id,
        world_size: entry.world_size,
        files: root.files,
        bytes: root.bytes,
        complete: true,
        job_name: entry.job_name.clone(),
        made: entry.made.clone(),
    };
    let step = || -> std::result::Result<(), crate::state::StateError> {
        root.write(prefix, entry.id)?;
        prefix::write(&Summary::path(prefix, entry.id), "summary", &summary)?;
        Index::update(prefix, |ix| ix.flush_complete(prefix, entry, now_secs()))?;
        // the index records the flush: from here it stands, whatever happens to the
        // flush file (a hint for scripts, not what fetch trusts)
        if let Err(e) = FlushFile::add_location(prefix, entry.id, "PFS") {
            tracing::warn!(
                "{e}; the flush file does not list dataset {} in PFS",
                entry.id
            );
        }
        Ok(())
    };
    let bytes = summary.bytes;
    step()
        .map(|()| {
            // recorded: the list of what an interrupted flush would have to clean is moot
            crate::state::writes::remove_writes(prefix, entry.id);
            bytes
        })
        .inspect_err(|_| {
            // not recorded: no summary or map may bring it back when an index is rebuilt
            let _ = std::fs::remove_file(Summary::path(prefix, entry.id));
            Rank2File::remove(prefix, entry.id);
        })
}

/// Why a flush is not recorded complete (rank 0, [`Flusher::gather_and_finish`]). The
/// callers tell every rank its text.
#[derive(Debug, thiserror::Error)]
pub(in crate::runtime) enum FinishError {
    /// A rank's part of the flush failed (the text its block's leader broadcast).
    #[error("flush failed on rank {rank}: {why}")]
    Failed {
        /// The lowest failing rank.
        rank: u64,
        /// Why, as broadcast.
        why: String,
    },
    /// The root, the summary or the index could not be written.
    #[error(transparent)]
    NotRecorded(crate::state::StateError),
}

/// Why a block's part of a flush failed, found by its leader
/// ([`Flusher::write_block_part`]) and broadcast as text to every rank.
#[derive(Debug, thiserror::Error)]
enum PartError {
    /// A member's flush failed (its own text).
    #[error("{0}")]
    Rank(String),
    /// A member's outcome did not parse.
    #[error("unreadable outcome: {0}")]
    Unreadable(serde_json::Error),
    /// The block's rank2file part could not be written.
    #[error("its rank2file part: {0}")]
    Write(crate::state::StateError),
}

/// The blocks a job of `size` ranks writes its rank2file maps in (`rank2file_block`).
pub(in crate::runtime) fn rank2file_blocks(
    config: &crate::config::Config,
    size: u32,
) -> prefix::Blocks {
    let block = u32::try_from(config.get(settings::RANK2FILE_BLOCK)).unwrap_or(u32::MAX);
    prefix::Blocks::new(size, block)
}

impl Flusher<'_> {
    /// This run's bookkeeping of a flush of dataset `id` starting: attempted (finalize
    /// does not try it again), when it started (for its event), and no outcome of an
    /// earlier attempt.
    pub(in crate::runtime) fn begin_flush(&mut self, id: u64) {
        self.flushing.attempted.insert(id);
        self.flushing.started.insert(id, std::time::Instant::now());
        // (a dataset flushed a second time in one run, `scr index drop` between the two,
        // starts with nothing of the first attempt's outcome)
        lock(&self.flushing.outcomes).remove(&id);
    }

    /// Open the index entry of the flush of `rec`, incomplete (collective; rank 0 writes
    /// it first: until the flush completes, the index still points at the previous
    /// complete checkpoint). `None` when it cannot be written: the flush is skipped (with
    /// a warning on every rank) and the checkpoint kept in cache.
    pub(in crate::runtime) fn open_index_entry(&self, rec: &DatasetRecord) -> Option<IndexEntry> {
        let entry = IndexEntry {
            id: rec.id,
            name: rec.name.clone(),
            checkpoint_id: rec.checkpoint_id,
            output: rec.output,
            dir: crate::layout::dataset_dir_name(rec.id),
            world_size: self.topo.size(),
            job_name: Some(self.config.get(settings::JOB_NAME)).filter(|n| !n.is_empty()),
            made: crate::runtime::provenance(self.config, rec.created),
            ..IndexEntry::default()
        };
        let opened = if self.topo.rank() == 0 {
            Index::update(self.job.prefix(), |ix| ix.begin_flush(&entry)).map_err(|e| e.to_string())
        } else {
            Ok(())
        };
        let why = self
            .world
            .broadcast_bytes(opened.err().unwrap_or_default().as_bytes());
        if !why.is_empty() {
            // the checkpoint is kept in cache; only the flush is skipped
            self.topo.warn(&format!(
                "{} is not flushed: {}",
                rec.name,
                String::from_utf8_lossy(&why)
            ));
            return None;
        }
        Some(entry)
    }

    /// [`Flusher::gather_and_finish`], its outcome then known on every rank: empty when
    /// the flush was recorded, else why not (the text rank 0 found, broadcast: it alone
    /// records the flush).
    pub(in crate::runtime) fn finish_agreed(
        &self,
        entry: &IndexEntry,
        outcome: &RankOutcome,
    ) -> Vec<u8> {
        let recorded = self.gather_and_finish(entry, outcome);
        let why = recorded.err().map(|e| e.to_string()).unwrap_or_default();
        self.world.broadcast_bytes(why.as_bytes())
    }

    /// Gather every rank's outcome of the flush of `entry` (collective); rank 0 records
    /// it (when `record`: rank 0's flag decides for all) and returns why it failed, if it
    /// did (every other rank returns `Ok`).
    ///
    /// As SCR's rank2file tree, without any rank receiving every rank's list: each block
    /// of ranks ([`prefix::Blocks`], `rank2file_block` = R ranks) sends its outcomes to
    /// its leader, which writes the block's part of the map (which says itself which
    /// dataset and block it is, and its totals) when none failed; the first failure
    /// anywhere is found by a min-reduction and its text broadcast from the leader that
    /// holds it; only when none failed the parts' totals (files, bytes) are summed by
    /// one reduction (non-leaders add 0), and rank 0 writes the root (layout and totals,
    /// no list of parts), the summary and the index.
    ///
    /// Per rank: an 8-byte min-reduction and a 16-byte sum (O(log P) steps each), one message (its own list) to its leader, plus one broadcast of the
    /// failure's text when one failed. A leader: R - 1 messages received, one part file
    /// of R ranks written. Rank 0: nothing more than a leader — O(1) messages beyond its
    /// own block's, whatever P (was: one part reference received from every leader,
    /// P/R messages).
    pub(in crate::runtime) fn gather_and_finish(
        &self,
        entry: &IndexEntry,
        mine: &RankOutcome,
    ) -> std::result::Result<(), FinishError> {
        let blocks = rank2file_blocks(self.config, self.topo.size());
        let n = blocks.of(self.topo.rank());
        let leader = blocks.leader(n);
        let members: Vec<u32> = blocks.members(n).collect();
        let gathered = self
            .world
            .gather_values(leader, &members, mine, OUTCOME_TAG, "outcome");
        let (part, failure) = match gathered.map(|all| self.write_block_part(entry, blocks, n, all))
        {
            Some(Ok(totals)) => (Some(totals), None),
            Some(Err(failed)) => (None, Some(failed)),
            None => (None, None),
        };
        let started = || FlushStart {
            job_id: self.job.job_id().to_string(),
            at: self
                .flushing
                .started
                .get(&entry.id)
                .copied()
                .unwrap_or_else(std::time::Instant::now),
        };
        let first = self
            .world
            .min_u64(failure.as_ref().map_or(u64::MAX, |(r, _)| u64::from(*r)));
        if first != u64::MAX {
            // the leader of the failed rank's block holds the text
            let holder = blocks.leader(blocks.of(first as u32));
            let text = failure.map(|(_, why)| why.to_string()).unwrap_or_default();
            let why = self.world.broadcast_from(holder, text.as_bytes());
            if part.is_some() {
                let _ = std::fs::remove_file(Rank2FilePart::path(self.job.prefix(), entry.id, n));
            }
            if self.topo.rank() != 0 {
                return Ok(());
            }
            let failed = FinishError::Failed {
                rank: first,
                why: String::from_utf8_lossy(&why).into_owned(),
            };
            record_failure(self.job.prefix(), entry, &failed.to_string());
            log_flush(self.job, entry, &started(), None);
            return Err(failed);
        }
        // the root's totals: every part's, summed over the leaders (the others add 0)
        let (files, bytes) = part.unwrap_or_default();
        let [files, bytes] =
            <[u64; 2]>::try_from(self.world.all_reduce_u64s(&[files, bytes], Op::Sum))
                .expect("two sums");
        if self.topo.rank() != 0 {
            return Ok(());
        }
        let done = record_complete(
            self.job.prefix(),
            entry,
            &Rank2FileRoot::new(blocks, files, bytes),
        );
        if done.is_err() {
            Rank2File::remove(self.job.prefix(), entry.id);
        }
        log_flush(self.job, entry, &started(), done.as_ref().ok().copied());
        if done.is_ok() {
            prefix!(self).trim(entry);
        }
        done.map(|_| ()).map_err(FinishError::NotRecorded)
    }

    /// A block leader's share of finishing a flush: its members' outcomes (`all`, in
    /// member order) checked, and its rank2file part written. Its part's (files, bytes),
    /// or the block's first failure as (rank, why).
    fn write_block_part(
        &self,
        entry: &IndexEntry,
        blocks: prefix::Blocks,
        n: u32,
        all: Vec<std::result::Result<RankOutcome, ExchangeError>>,
    ) -> std::result::Result<(u64, u64), (u32, PartError)> {
        let mut ranks = BTreeMap::new();
        for (r, outcome) in blocks.members(n).zip(all) {
            match outcome {
                Ok(Ok(files)) => {
                    ranks.insert(r, files);
                }
                Ok(Err(why)) => return Err((r, PartError::Rank(why))),
                Err(e) => return Err((r, PartError::Unreadable(e.source))),
            }
        }
        let p = Rank2FilePart::new(entry.id, blocks, n, ranks);
        p.write(self.job.prefix())
            .map(|()| (p.files, p.bytes))
            .map_err(|e| (self.topo.rank(), PartError::Write(e)))
    }

    /// Record, in the dataset's directory under `.scr`, the prefix paths (relative) every
    /// rank's part of the flush of dataset `id` may write (collective over each block of
    /// the rank2file layout; each block's leader writes its block's part
    /// `writes.<n>.scr`). A pure output's own paths are listed too: they are what the
    /// flush writes, but the cleanup never removes a pure output's own paths (they may
    /// be the user's). Per rank: one message with its own names to its leader; a leader
    /// receives R - 1 and writes one file; no world-wide exchange.
    pub(in crate::runtime) fn record_writes(&self, id: u64, mine: &[String]) {
        let blocks = rank2file_blocks(self.config, self.topo.size());
        let n = blocks.of(self.topo.rank());
        let members: Vec<u32> = blocks.members(n).collect();
        let Some(all) =
            self.world
                .gather_values(blocks.leader(n), &members, mine, WRITES_TAG, "writes")
        else {
            return;
        };
        let part = WritesPart {
            parts: blocks.count(),
            writes: all
                .into_iter()
                .flat_map(|names: std::result::Result<Vec<String>, _>| names.unwrap_or_default())
                .collect(),
        };
        if let Err(e) = prefix::write(
            &writes_part_path(self.job.prefix(), id, n),
            WRITES_KIND,
            &part,
        ) {
            tracing::warn!(
                "{e}; if this flush is interrupted, its files are cleaned up only while the dataset is in cache"
            );
        }
    }
}
