//! Flush (cache → prefix) and fetch (prefix → cache), through the transfer type of the
//! dataset's store.
//!
//! A flush first records the dataset in the index as incomplete, so a crash in the middle
//! leaves the index pointing at the previous complete checkpoint. Each rank copies its
//! files with a transfer (CRC32 computed while copying when `crc_on_flush` is set and
//! checked against the CRC recorded at `complete_output`); rank 0 then writes the
//! rank2file map and summary and marks the dataset complete in the index and the flush
//! file. An asynchronous flush does the same in the background: each rank's transfer is
//! waited for by a thread that leaves a marker file in the dataset's prefix directory, and
//! a thread on rank 0 records completion as soon as every rank's marker is there — not at
//! the next checkpoint.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mpi::traits::CommunicatorCollectives as _;
use scr_plugin::{inproc, Host, TransferBox, TransferConfig, TransferStatus};

use super::prefix::{self, FlushFile, FlushedFile, Index, IndexEntry, Rank2File, Summary};
use super::{
    all_gather_bytes, broadcast_bytes, cache, now_secs, DatasetRecord, FileRecord, Result, Runtime,
    ScrError,
};
use crate::registry::RegistryError;

/// What one rank's part of a flush produced (also the marker of an async flush).
type RankOutcome = std::result::Result<Vec<FlushedFile>, String>;

/// Background work of asynchronous flushes.
#[derive(Default)]
pub(super) struct Flushing {
    /// Dataset ids whose transfer is still running on this rank (never evicted).
    pub in_flight: Arc<Mutex<BTreeSet<u64>>>,
    /// Dataset ids this rank's part of a flush copied (an output may then be evicted).
    pub flushed: Arc<Mutex<BTreeSet<u64>>>,
    /// Background flushes of this run, with what each rank's waiter found.
    pub pending: Vec<IndexEntry>,
    pub outcomes: Arc<Mutex<BTreeMap<u64, RankOutcome>>>,
    /// Rank 0: ids whose completion the finisher recorded.
    pub recorded: Arc<Mutex<BTreeSet<u64>>>,
    /// Tells rank 0's finishers to stop waiting for markers (finalize takes over).
    pub stop: Arc<std::sync::atomic::AtomicBool>,
    /// Threads waiting for this rank's transfers.
    pub waiters: Vec<std::thread::JoinHandle<()>>,
    /// Rank 0: threads recording completions.
    pub finishers: Vec<std::thread::JoinHandle<()>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Run a transfer call with a one-member in-process host (transfers need no
/// communicator, only the logging and cancellation services).
fn with_local_host<T>(node: &str, f: impl FnOnce(&Host<'_>) -> T) -> T {
    let world = inproc::World::new(&[node], Duration::from_secs(24 * 3600));
    let services = world.member(0);
    let host = Host::new(scr_plugin::host_ref(&services));
    let out = f(&host);
    drop(host);
    out
}

/// Wait for `transfer` and turn its results into this rank's file list, checking each
/// file's CRC32 against the one recorded at `complete_output`.
fn collect(node: &str, mut transfer: TransferBox, files: &[(FileRecord, PathBuf)]) -> RankOutcome {
    let status = with_local_host(node, |host| transfer.wait(host.raw()).into_result())
        .map_err(|e| e.to_string())?;
    let results = transfer
        .results()
        .into_result()
        .map_err(|e| e.to_string())?;
    if status != TransferStatus::Complete {
        let why = results
            .iter()
            .find_map(|r| r.error.clone().into_option())
            .map(|e| e.into_string())
            .unwrap_or_else(|| format!("{status:?}"));
        return Err(format!("transfer did not complete: {why}"));
    }
    let mut out = Vec::new();
    for ((rec, _), r) in files.iter().zip(results.iter()) {
        let crc = r.crc32.into_option();
        if let (Some(want), Some(got)) = (rec.crc32, crc) {
            if want != got {
                return Err(format!(
                    "{}: CRC32 {got:08x} after the copy, {want:08x} when written",
                    rec.name
                ));
            }
        }
        out.push(FlushedFile {
            name: rec.name.clone(),
            size: rec.size,
            crc32: crc.or(rec.crc32),
        });
    }
    Ok(out)
}

/// Rank 0: every rank's outcome is in; record the dataset as flushed, or as failed.
fn finish(
    prefix: &Path,
    entry: &IndexEntry,
    outcomes: BTreeMap<u32, RankOutcome>,
) -> std::result::Result<(), String> {
    if let Some((rank, Err(why))) = outcomes.iter().find(|(_, o)| o.is_err()) {
        let reason = format!("flush failed on rank {rank}: {why}");
        let _ = Index::update(prefix, |ix| {
            if let Some(e) = ix.datasets.get_mut(&entry.id) {
                e.failed = Some(reason.clone());
            }
        });
        return Err(reason);
    }
    let ranks: BTreeMap<u32, Vec<FlushedFile>> = outcomes
        .into_iter()
        .map(|(r, o)| (r, o.unwrap_or_default()))
        .collect();
    let summary = Summary {
        id: entry.id,
        name: entry.name.clone(),
        checkpoint_id: entry.checkpoint_id,
        world_size: entry.world_size,
        files: ranks.values().map(|v| v.len() as u64).sum(),
        bytes: ranks.values().flatten().map(|f| f.size).sum(),
        complete: true,
    };
    let step = || -> std::result::Result<(), crate::state::StateError> {
        prefix::write(
            &Rank2File::path(prefix, entry.id),
            "rank2file",
            &Rank2File { ranks },
        )?;
        prefix::write(&Summary::path(prefix, entry.id), "summary", &summary)?;
        Index::update(prefix, |ix| {
            let e = ix.datasets.entry(entry.id).or_insert_with(|| entry.clone());
            e.complete = true;
            e.flushed = Some(now_secs());
            e.failed = None;
            // the newest flushed checkpoint is the restart point (as in SCR), replacing
            // one pinned with `scr index current`
            if entry.checkpoint_id.is_some() {
                ix.current = Some(entry.name.clone());
            }
        })?;
        FlushFile::add_location(prefix, entry.id, "PFS")
    };
    step().map_err(|e| e.to_string())
}

impl Runtime {
    /// Flush `rec` if the policy asks for it: every `flush`-th checkpoint and every output
    /// dataset. A flush that fails leaves the dataset in cache and says so; it does not
    /// fail the checkpoint.
    pub(super) fn maybe_flush(&mut self, rec: &DatasetRecord) -> Result<()> {
        let every = self.config.u64("flush");
        let due = rec.output
            || rec
                .checkpoint_id
                .is_some_and(|c| every > 0 && c % every == 0);
        if !due {
            return Ok(());
        }
        // rank 0 opens the index entry first: until the flush completes, the index still
        // points at the previous complete checkpoint
        let entry = IndexEntry {
            id: rec.id,
            name: rec.name.clone(),
            checkpoint_id: rec.checkpoint_id,
            output: rec.output,
            dir: format!("scr.dataset.{}", rec.id),
            world_size: self.size,
            ..IndexEntry::default()
        };
        let opened = if self.rank == 0 {
            Index::update(&self.prefix, |ix| {
                ix.datasets.insert(rec.id, entry.clone());
            })
            .map_err(|e| e.to_string())
        } else {
            Ok(())
        };
        let why = broadcast_bytes(&self.world, opened.err().unwrap_or_default().as_bytes());
        if !why.is_empty() {
            // the checkpoint is kept in cache; only the flush is skipped
            self.warn(&format!(
                "{} is not flushed: {}",
                rec.name,
                String::from_utf8_lossy(&why)
            ));
            return Ok(());
        }
        self.fault_point("flush-started", rec.id);

        let started = self.start_transfer(rec);
        if self.config.bool("flush_async") {
            return self.flush_in_background(rec, entry, started);
        }
        let state = self.transfer_state(rec.id);
        let outcome: RankOutcome = started.and_then(|(t, files)| collect(&self.node, t, &files));
        let _ = std::fs::remove_file(&state);
        if outcome.is_ok() {
            lock(&self.flushing.flushed).insert(rec.id);
        }
        self.fault_point("flush-copied", rec.id);
        let recorded = self.gather_and_finish(&entry, &outcome, true);
        let text = broadcast_bytes(&self.world, recorded.err().unwrap_or_default().as_bytes());
        if text.is_empty() {
            self.info(&format!(
                "flushed {} to {}",
                rec.name,
                self.prefix.display()
            ));
        } else {
            self.warn(&format!(
                "{} stays in cache only: {}",
                rec.name,
                String::from_utf8_lossy(&text)
            ));
        }
        Ok(())
    }

    /// The state file of this rank's transfer of dataset `id`.
    fn transfer_state(&self, id: u64) -> PathBuf {
        self.cntl_dir
            .join(format!("transfer.{id}.{}.state", self.rank))
    }

    /// Create, fill and dispatch this rank's transfer of `rec` to the prefix.
    fn start_transfer(
        &self,
        rec: &DatasetRecord,
    ) -> std::result::Result<(TransferBox, Vec<(FileRecord, PathBuf)>), String> {
        let store = self
            .config
            .store(&rec.descriptor.store)
            .map(|s| self.config.store_transfer(s).0)
            .unwrap_or_else(|| self.config.str("flush_type"));
        let cache_dir = self.dataset_dir(&rec.descriptor.store, rec.id);
        let files: Vec<(FileRecord, PathBuf)> = rec
            .files
            .iter()
            .map(|f| (f.clone(), cache_dir.join(&f.name)))
            .collect();
        let config = TransferConfig {
            transfer_type: store.as_str().into(),
            state_file: self.transfer_state(rec.id).display().to_string().into(),
            crc32: self.config.bool("crc_on_flush"),
            preserve_metadata: true,
            settings: self.config.plugin_settings(&store).into(),
        };
        let mut transfer = with_local_host(&self.node, |host| {
            self.registry.new_transfer(&config, host.raw())
        })
        .map_err(|e: RegistryError| e.to_string())?;
        for (rec_file, src) in &files {
            let dst = self.prefix.join(&rec_file.name);
            transfer
                .add(
                    src.display().to_string().as_str().into(),
                    dst.display().to_string().as_str().into(),
                )
                .into_result()
                .map_err(|e| e.to_string())?;
        }
        with_local_host(&self.node, |host| {
            transfer.dispatch(host.raw()).into_result()
        })
        .map_err(|e| e.to_string())?;
        Ok((transfer, files))
    }

    /// Hand this rank's transfer to a waiter thread; rank 0 also starts the thread that
    /// records completion when every rank's marker is there.
    fn flush_in_background(
        &mut self,
        rec: &DatasetRecord,
        entry: IndexEntry,
        started: std::result::Result<(TransferBox, Vec<(FileRecord, PathBuf)>), String>,
    ) -> Result<()> {
        let marker_dir = prefix::dataset_dir(&self.prefix, rec.id);
        let marker = marker_dir.join(format!("done.{}.scr", self.rank));
        let in_flight = Arc::clone(&self.flushing.in_flight);
        let flushed = Arc::clone(&self.flushing.flushed);
        let outcomes = Arc::clone(&self.flushing.outcomes);
        lock(&in_flight).insert(rec.id);
        self.flushing.pending.push(entry.clone());
        let node = self.node.clone();
        let id = rec.id;
        let state = self.transfer_state(rec.id);
        self.flushing.waiters.push(std::thread::spawn(move || {
            let outcome: RankOutcome = started.and_then(|(t, files)| collect(&node, t, &files));
            let _ = std::fs::remove_file(&state);
            if let Err(e) = prefix::write(&marker, "flush-marker", &outcome) {
                eprintln!("scr-rs: background flush of dataset {id}: {e}");
            }
            if outcome.is_ok() {
                lock(&flushed).insert(id);
            }
            lock(&outcomes).insert(id, outcome);
            lock(&in_flight).remove(&id);
        }));
        if self.rank == 0 {
            let prefix = self.prefix.clone();
            let ranks = self.size;
            let stop = Arc::clone(&self.flushing.stop);
            let recorded = Arc::clone(&self.flushing.recorded);
            self.flushing.finishers.push(std::thread::spawn(move || {
                let markers: Vec<PathBuf> = (0..ranks)
                    .map(|r| marker_dir.join(format!("done.{r}.scr")))
                    .collect();
                // record completion as soon as every rank's marker is there; finalize
                // takes over (collectively) if some never appear
                while !markers.iter().all(|m| m.exists()) {
                    if stop.load(std::sync::atomic::Ordering::SeqCst) {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                let outcomes: BTreeMap<u32, RankOutcome> = markers
                    .iter()
                    .enumerate()
                    .map(|(r, m)| {
                        let o = crate::state::read_state::<RankOutcome>(m, "flush-marker")
                            .unwrap_or_else(|e| Err(e.to_string()));
                        (r as u32, o)
                    })
                    .collect();
                if let Err(why) = finish(&prefix, &entry, outcomes) {
                    eprintln!("scr-rs: warning: {} stays in cache only: {why}", entry.name);
                }
                lock(&recorded).insert(entry.id);
                for m in markers {
                    let _ = std::fs::remove_file(m);
                }
            }));
        }
        Ok(())
    }

    /// Wait for every asynchronous flush (collective: finalize). Each rank's outcome is
    /// also gathered here, so a flush whose markers could not be written is recorded (as
    /// failed) instead of being waited for forever.
    pub(super) fn wait_flushes(&mut self) {
        for w in self.flushing.waiters.drain(..) {
            let _ = w.join();
        }
        self.flushing
            .stop
            .store(true, std::sync::atomic::Ordering::SeqCst);
        for f in self.flushing.finishers.drain(..) {
            let _ = f.join();
        }
        for entry in std::mem::take(&mut self.flushing.pending) {
            let mine = lock(&self.flushing.outcomes)
                .remove(&entry.id)
                .unwrap_or_else(|| Err("no outcome".into()));
            let record = !lock(&self.flushing.recorded).contains(&entry.id);
            if let Err(why) = self.gather_and_finish(&entry, &mine, record) {
                self.warn(&format!("{} stays in cache only: {why}", entry.name));
            }
        }
        self.world.barrier();
    }

    /// Gather every rank's outcome of the flush of `entry` (collective); rank 0 records
    /// it (when `record`) and returns why it failed, if it did.
    fn gather_and_finish(
        &self,
        entry: &IndexEntry,
        mine: &RankOutcome,
        record: bool,
    ) -> std::result::Result<(), String> {
        let all = all_gather_bytes(&self.world, &serde_json::to_vec(mine).expect("serializes"));
        if self.rank != 0 || !record {
            return Ok(());
        }
        let outcomes = all
            .iter()
            .enumerate()
            .map(|(r, b)| {
                (
                    r as u32,
                    serde_json::from_slice(b)
                        .unwrap_or_else(|e| Err(format!("unreadable outcome: {e}"))),
                )
            })
            .collect();
        finish(&self.prefix, entry, outcomes)
    }

    /// Dataset ids whose flush is still running on this rank.
    pub(super) fn flushing_ids(&self) -> BTreeSet<u64> {
        self.flushing
            .in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// With no restartable checkpoint in cache, fetch the newest complete one from the
    /// prefix (falling back to older ones, marking failures in the index) and protect it
    /// again with its redundancy scheme. Collective.
    pub(super) fn fetch(&mut self) -> Result<()> {
        let mut tried: Vec<u64> = Vec::new();
        loop {
            let choice = if self.rank == 0 {
                let index = Index::load(&self.prefix).unwrap_or_else(|e| {
                    eprintln!("scr-rs: warning: {e}; nothing is fetched");
                    Index::default()
                });
                index
                    .fetch_candidates(self.size)
                    .into_iter()
                    .find(|e| !tried.contains(&e.id))
                    .map(|e| {
                        let map = Rank2File::load(&self.prefix, e.id).map_err(|x| x.to_string());
                        (e.clone(), map)
                    })
            } else {
                None
            };
            let bytes = broadcast_bytes(
                &self.world,
                &serde_json::to_vec(&choice).expect("serializes"),
            );
            let choice: Option<(IndexEntry, std::result::Result<Rank2File, String>)> =
                serde_json::from_slice(&bytes).unwrap_or(None);
            let Some((entry, map)) = choice else {
                return Ok(());
            };
            tried.push(entry.id);
            let outcome = match map {
                Ok(map) => self.fetch_one(&entry, &map),
                Err(e) => Err(e),
            };
            let reasons = all_gather_bytes(
                &self.world,
                outcome.as_ref().err().map_or(&[][..], |s| s.as_bytes()),
            );
            let failed =
                reasons
                    .iter()
                    .enumerate()
                    .find(|(_, r)| !r.is_empty())
                    .map(|(rank, r)| {
                        format!(
                            "fetch failed on rank {rank}: {}",
                            String::from_utf8_lossy(r)
                        )
                    });
            // protect it again in cache: a failure there is a failed fetch too
            let failed = match failed {
                None => {
                    let protected = self.protect_fetched(entry.id);
                    let why = all_gather_bytes(
                        &self.world,
                        protected
                            .err()
                            .map(|e| e.to_string())
                            .unwrap_or_default()
                            .as_bytes(),
                    );
                    why.iter()
                        .enumerate()
                        .find(|(_, r)| !r.is_empty())
                        .map(|(rank, r)| {
                            format!(
                                "re-protecting failed on rank {rank}: {}",
                                String::from_utf8_lossy(r)
                            )
                        })
                }
                some => some,
            };
            match failed {
                None => {
                    // ids continue after the fetched dataset
                    self.next_dataset = self.next_dataset.max(entry.id + 1);
                    if let Some(c) = entry.checkpoint_id {
                        self.next_checkpoint = self.next_checkpoint.max(c + 1);
                    }
                    if self.rank == 0 {
                        let _ = Index::update(&self.prefix, |ix| {
                            if let Some(e) = ix.datasets.get_mut(&entry.id) {
                                e.fetched = Some(now_secs());
                            }
                            ix.current = Some(entry.name.clone());
                        });
                    }
                    self.info(&format!(
                        "fetched {} from {}",
                        entry.name,
                        self.prefix.display()
                    ));
                    return Ok(());
                }
                Some(reason) => {
                    if let Some(rec) = self.filemap.datasets.get(&entry.id).cloned() {
                        let removed = self.remove_local(&rec);
                        self.agree(removed)?;
                    } else {
                        self.agree(Ok(()))?;
                    }
                    self.warn(&format!(
                        "{} cannot be fetched: {reason}; trying an older checkpoint",
                        entry.name
                    ));
                    if self.rank == 0 {
                        let _ = Index::update(&self.prefix, |ix| {
                            if let Some(e) = ix.datasets.get_mut(&entry.id) {
                                e.failed = Some(reason.clone());
                            }
                        });
                    }
                }
            }
        }
    }

    /// Copy this rank's files of `entry` from the prefix into cache, recorded in the
    /// filemap first, and verify sizes and CRC32s.
    fn fetch_one(
        &mut self,
        entry: &IndexEntry,
        map: &Rank2File,
    ) -> std::result::Result<(), String> {
        let mine = map.ranks.get(&self.rank).cloned().unwrap_or_default();
        let desc = self.reddesc_for(entry.checkpoint_id);
        let store = self.reddescs[desc].record.store.clone();
        let dir = self.dataset_dir(&store, entry.id);
        let mut record = DatasetRecord {
            id: entry.id,
            name: entry.name.clone(),
            checkpoint_id: entry.checkpoint_id,
            output: entry.output,
            complete: false,
            descriptor: self.reddescs[desc].record.clone(),
            files: mine
                .iter()
                .map(|f| FileRecord {
                    name: f.name.clone(),
                    size: f.size,
                    crc32: f.crc32,
                    ..FileRecord::default()
                })
                .collect(),
            redundancy: Vec::new(),
            world_size: self.size,
        };
        self.filemap.datasets.insert(entry.id, record.clone());
        self.save_filemap().map_err(|e| e.to_string())?;
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let buf = self.config.u64("file_buf_size").max(4096) as usize;
        for (f, rec) in mine.iter().zip(record.files.iter_mut()) {
            let src = self.prefix.join(&f.name);
            let dst = dir.join(&f.name);
            if let Some(parent) = dst.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| format!("{}: {e}", parent.display()))?;
            }
            std::fs::copy(&src, &dst).map_err(|e| format!("{}: {e}", src.display()))?;
            let meta = cache::stat_file(&dst, f.crc32.is_some(), buf)
                .map_err(|e| format!("{}: {e}", dst.display()))?;
            if meta.size != f.size {
                return Err(format!(
                    "{}: {} bytes, the flush recorded {}",
                    src.display(),
                    meta.size,
                    f.size
                ));
            }
            if f.crc32.is_some() && meta.crc32 != f.crc32 {
                return Err(format!(
                    "{}: CRC32 {:08x} does not match the flushed {:08x}",
                    src.display(),
                    meta.crc32.unwrap_or(0),
                    f.crc32.unwrap_or(0)
                ));
            }
            rec.mode = meta.mode;
            rec.mtime = meta.mtime;
        }
        self.filemap.datasets.insert(entry.id, record);
        self.save_filemap().map_err(|e| e.to_string())
    }

    /// Apply the redundancy scheme to a fetched dataset and mark it complete.
    fn protect_fetched(&mut self, id: u64) -> Result<()> {
        let mut rec = self.filemap.datasets[&id].clone();
        let desc = self.reddesc_for(rec.checkpoint_id);
        let dir = self.dataset_dir(&rec.descriptor.store, id);
        let rd = &self.reddescs[desc];
        let ds = cache::dataset_files(&rec, &dir);
        let red = rd
            .scheme
            .raw()
            .apply(scr_plugin::host_ref(&rd.host), &ds)
            .into_result()
            .map_err(|e| ScrError::from(rd.scheme.error("apply", e)))?;
        rec.redundancy = red
            .iter()
            .map(|p| {
                Path::new(p.as_str())
                    .strip_prefix(&dir)
                    .unwrap_or(Path::new(p.as_str()))
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        rec.complete = true;
        self.filemap.datasets.insert(id, rec);
        self.save_filemap()
    }

    /// Testing hook: `SCR_FAULT=<point>:<rank>` kills that rank with SIGKILL at that
    /// point (used by the crash-in-flush tests; never set in production).
    fn fault_point(&self, point: &str, _id: u64) {
        if let Ok(spec) = std::env::var("SCR_FAULT") {
            if spec == format!("{point}:{}", self.rank) {
                let _ = std::process::Command::new("kill")
                    .args(["-9", &std::process::id().to_string()])
                    .status();
                std::process::abort();
            }
        }
    }
}
