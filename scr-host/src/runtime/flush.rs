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
//! rank finished are then completed collectively ([`Runtime::poll_flushes`]), and
//! finalize completes the rest after waiting for the local transfers. No file is
//! written per rank and nothing polls the file system: the earlier design (a marker
//! file `done.<rank>.scr` per rank in the dataset's prefix directory, two fsyncs each,
//! and a thread on rank 0 calling `exists()` on P of them every 50 ms) cost P files in
//! one directory per flush. Markers such a version left in a prefix are ignored (nothing
//! reads them; they go with their dataset's directory when `scr index drop --delete`
//! removes it).
//!
//! Nothing a transfer plugin says is trusted ([`verify`]): a flush is recorded complete
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
//! Transfers get a [`LocalHost`]: a one-member host whose log is the runtime's and whose
//! cancellation flag (`Flushing::cancel`) the runtime sets to stop background transfers.

use scr_plugin::sync::lock;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::sync::atomic::{AtomicBool, Ordering};

use scr_plugin::{
    host_ref, FileResult, HostServices as _, TransferBox, TransferConfig, TransferStatus,
};

use super::prefix::{
    self, FlushFile, FlushedFile, Index, IndexEntry, Rank2File, Rank2FileMap, Rank2FilePart,
    Rank2FileRoot, Summary,
};
use super::{
    broadcast_bytes, cache, now_secs, DatasetRecord, FileRecord, Result, Runtime, ScrError,
};
use crate::config::{settings, Config};
use crate::events::Event;
use crate::local_host::LocalHost;
use crate::registry::{Kind, Registry, RegistryError};

pub(crate) mod resume;

/// Tag of the outcomes a block's members send its leader ([`Runtime::gather_and_finish`]).
const OUTCOME_TAG: i32 = 7040;
/// Tag of the lists rank 0 sends each block leader at fetch from a single-file map of an
/// earlier release (legacy only, [`Runtime::choose_from_index`]). (7041 tagged the part
/// references leaders sent rank 0 at flush, which the root no longer lists.)
const SOURCE_TAG: i32 = 7042;
/// Tag of the lists a leader sends its block's members at fetch.
const LIST_TAG: i32 = 7043;

/// What rank 0 tells every rank at fetch about the chosen dataset's rank2file map:
/// constant size, whatever P.
#[derive(serde::Serialize, serde::Deserialize)]
enum MapLayout {
    /// A tree: its root (layout and totals); each leader reads its block's part by the
    /// name its block index gives.
    Tree(Rank2FileRoot),
    /// A single-file map of an earlier release (legacy only): rank 0 read it and sends
    /// each leader its block's lists, in blocks of this job's `rank2file_block`.
    Single {
        /// Ranks per block.
        block: u32,
    },
}

/// What rank 0 tells every rank at fetch: the chosen checkpoint's index entry with its
/// map's layout, or why its map cannot be used; `None` when no candidate is left.
type Choice = Option<(IndexEntry, std::result::Result<MapLayout, String>)>;

/// The lists of one block's ranks in a rank2file map, by rank.
type BlockLists = BTreeMap<u32, Vec<FlushedFile>>;

/// Rank 0: `map`, the rank2file map of dataset `id`, when it fits a job of `size` ranks
/// (a tree: its root is sound and lists `size` ranks; a single-file map: every rank
/// 0..`size` has a list, possibly empty); why not otherwise, naming the file.
fn check_map(
    prefix: &Path,
    id: u64,
    size: u32,
    map: Rank2FileMap,
) -> std::result::Result<Rank2FileMap, String> {
    let path = Rank2File::path(prefix, id);
    match &map {
        Rank2FileMap::Tree(root) => {
            root.check(prefix, id).map_err(|x| x.to_string())?;
            if root.ranks != size {
                return Err(format!(
                    "{}: lists {} ranks, the job has {size}",
                    path.display(),
                    root.ranks
                ));
            }
            Ok(map)
        }
        // every rank's list (possibly empty) is recorded by a flush: a map missing one
        // would fetch nothing for it
        Rank2FileMap::Single(single) => {
            if single.ranks.keys().copied().eq(0..size) {
                Ok(map)
            } else {
                Err(format!(
                    "{}: lists ranks {:?}, the job has ranks 0..{size}",
                    path.display(),
                    single.ranks.keys().collect::<Vec<_>>()
                ))
            }
        }
    }
}

/// What one rank's part of a flush produced.
type RankOutcome = std::result::Result<Vec<FlushedFile>, String>;

/// Background work of asynchronous flushes.
#[derive(Default)]
pub(super) struct Flushing {
    /// Dataset ids whose transfer is still running on this rank (never evicted).
    pub in_flight: Arc<Mutex<BTreeSet<u64>>>,
    /// Dataset ids this rank's part of a flush copied (an output may then be evicted).
    pub flushed: Arc<Mutex<BTreeSet<u64>>>,
    /// Dataset ids this run started a flush of (finalize does not start another of one
    /// that failed: a transfer that failed minutes ago is not tried again at the end).
    pub attempted: BTreeSet<u64>,
    /// When each flush of this run started (for its event in the log).
    pub started: BTreeMap<u64, std::time::Instant>,
    /// Background flushes of this run not yet completed collectively, oldest first. The
    /// same list on every rank: flushes start collectively, in the same order, and
    /// [`Runtime::poll_flushes`] and [`Runtime::wait_flushes`] remove them collectively.
    pub pending: Vec<IndexEntry>,
    /// What this rank's waiter found, by dataset id (there once its transfer ended).
    pub outcomes: Arc<Mutex<BTreeMap<u64, RankOutcome>>>,
    /// Per background flush, the prefix files this rank writes that no older dataset
    /// owns (removed if the flush fails anywhere).
    pub removable: Arc<Mutex<BTreeMap<u64, Vec<PathBuf>>>>,
    /// Background flushes fully copied on every rank whose recording failed (a prefix
    /// full of a later flush's files), with this rank's outcome: finalize records them
    /// again once failed flushes gave their space back, so a copied checkpoint is not
    /// lost. The same list on every rank.
    pub unrecorded: Vec<(IndexEntry, RankOutcome)>,
    /// Threads waiting for this rank's transfers, by dataset id.
    pub waiters: Vec<(u64, std::thread::JoinHandle<()>)>,
    /// The cancellation flag of every transfer's host ([`LocalHost`]): set, it stops the
    /// transfers still running (a background waiter then cancels its transfer, which
    /// removes partly written destinations).
    pub cancel: Arc<AtomicBool>,
}

impl Drop for Flushing {
    /// A runtime dropped without `finalize` (an error path) must not leave transfers
    /// writing into the prefix behind it from detached threads: stop them. After
    /// `finalize` every transfer has ended and this changes nothing.
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::SeqCst);
    }
}

/// One file of a transfer and what it must be once the transfer says it is done.
#[derive(Clone, Debug)]
pub(crate) struct Planned {
    /// The file's name (relative to the prefix and to the dataset's cache directory).
    pub name: String,
    pub source: PathBuf,
    pub destination: PathBuf,
    /// Size the destination must have.
    pub size: u64,
    /// CRC32 the destination must have, when one was recorded (at `complete_output` for a
    /// flush, in rank2file for a fetch).
    pub crc32: Option<u32>,
    /// The destination relative to the prefix when a flush relocated it
    /// ([`prefix::relocated`]).
    pub stored: Option<String>,
}

/// Which transfer did it, for messages that must let an admin find the culprit.
#[derive(Clone, Debug)]
pub(crate) struct Label {
    pub transfer_type: String,
    pub plugin: String,
}

impl std::fmt::Display for Label {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "transfer type `{}`, plugin {}",
            self.transfer_type, self.plugin
        )
    }
}

/// A dispatched transfer with what it was asked to do.
pub(crate) struct Started {
    pub transfer: TransferBox,
    pub files: Vec<Planned>,
    pub label: Label,
    pub host: LocalHost,
}

/// Wait for `transfer`. A background waiter (`poll`) asks with `test` between short
/// sleeps so that it can see the runtime's cancellation flag and stop the transfer even
/// when the plugin's `wait` never looks at `is_cancelled`.
fn wait_transfer(
    transfer: &mut TransferBox,
    host: &LocalHost,
    poll: bool,
) -> std::result::Result<TransferStatus, String> {
    if !poll {
        return transfer
            .wait(host_ref(host))
            .into_result()
            .map_err(|e| e.to_string());
    }
    loop {
        if host.is_cancelled() {
            let _ = transfer.cancel(host_ref(host));
            return Err("cancelled by the runtime (it stopped before the flush ended)".into());
        }
        match transfer.test(host_ref(host)).into_result() {
            Ok(TransferStatus::InProgress) => std::thread::sleep(Duration::from_millis(20)),
            Ok(status) => return Ok(status),
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Check a finished transfer against what it was asked to do, trusting none of its
/// claims: its overall status ([`check_status`]), then exactly one Complete result per
/// added file, matched by source *and* destination ([`match_results`], [`sole_result`]),
/// then the destination itself, re-read by the host ([`check_destination`]): it must
/// exist with the planned size and, where a CRC32 was recorded, that CRC32. A CRC32 the
/// transfer reports must also match what the host computed.
///
/// Returns the CRC32 the host computed for each planned file, in order. `recorded` says
/// where the expected CRC comes from, for the message.
fn verify(
    label: &Label,
    status: TransferStatus,
    results: &[FileResult],
    files: &[Planned],
    recorded: &str,
    buf: usize,
) -> std::result::Result<Vec<u32>, String> {
    check_status(label, status, results)?;
    let matched = match_results(label, results, files)?;
    files
        .iter()
        .zip(&matched)
        .map(|(p, rs)| {
            let r = sole_result(label, p, rs)?;
            check_destination(label, p, r, recorded, buf)
        })
        .collect()
}

/// The transfer's overall status must be Complete: else the first error a file's result
/// gives (or the status itself) says why it is not.
fn check_status(
    label: &Label,
    status: TransferStatus,
    results: &[FileResult],
) -> std::result::Result<(), String> {
    if status == TransferStatus::Complete {
        return Ok(());
    }
    let why = results
        .iter()
        .find_map(|r| r.error.clone().into_option())
        .map(|e| e.into_string())
        .unwrap_or_else(|| format!("{status:?}"));
    Err(format!("transfer did not complete: {why} ({label})"))
}

/// The results the transfer reported for each planned file (by position in `files`),
/// matched by source *and* destination: a plugin may report in any order, but not for
/// a file it was not given.
fn match_results<'r>(
    label: &Label,
    results: &'r [FileResult],
    files: &[Planned],
) -> std::result::Result<Vec<Vec<&'r FileResult>>, String> {
    let index: BTreeMap<(&Path, &Path), usize> = files
        .iter()
        .enumerate()
        .map(|(i, p)| ((p.source.as_path(), p.destination.as_path()), i))
        .collect();
    let mut matched: Vec<Vec<&FileResult>> = vec![Vec::new(); files.len()];
    for r in results {
        let at = index
            .get(&(
                Path::new(r.source.as_str()),
                Path::new(r.destination.as_str()),
            ))
            .copied();
        match at {
            Some(i) => matched[i].push(r),
            None => {
                return Err(format!(
                    "the transfer reported a file it was not given ({} -> {}) ({label})",
                    r.source, r.destination
                ))
            }
        }
    }
    Ok(matched)
}

/// The one result `rs` the transfer reported for planned file `p`, which must say
/// Complete: none, several, or one that is not Complete fails the transfer.
fn sole_result<'r>(
    label: &Label,
    p: &Planned,
    rs: &[&'r FileResult],
) -> std::result::Result<&'r FileResult, String> {
    let r = match rs {
        [r] => *r,
        [] => {
            return Err(format!(
                "{}: the transfer returned no result for it ({} -> {}) ({label})",
                p.name,
                p.source.display(),
                p.destination.display()
            ))
        }
        many => {
            return Err(format!(
                "{}: the transfer returned {} results for it ({label})",
                p.name,
                many.len()
            ))
        }
    };
    if r.status != TransferStatus::Complete {
        let why = r
            .error
            .clone()
            .into_option()
            .map(|e| e.into_string())
            .unwrap_or_else(|| format!("{:?}", r.status));
        return Err(format!("{}: {why} ({label})", p.name));
    }
    Ok(r)
}

/// Re-read the destination of planned file `p` and check it against the size and CRC32
/// it must have (recorded, else computed from the source), and against the CRC32 the
/// transfer's result `r` claims, if it claims one. Returns the CRC32 the host computed.
fn check_destination(
    label: &Label,
    p: &Planned,
    r: &FileResult,
    recorded: &str,
    buf: usize,
) -> std::result::Result<u32, String> {
    // with no CRC32 recorded (crc_on_copy = false), the source is the reference: a
    // copy of the right size with other bytes must not become the recorded truth
    let (expected, from) = match p.crc32 {
        Some(c) => (c, recorded),
        None => (
            cache::file_crc32(&p.source, buf).map_err(|e| {
                format!(
                    "{}: the source {} cannot be read to check the copy: {e} ({label})",
                    p.name,
                    p.source.display()
                )
            })?,
            "of the source",
        ),
    };
    let want = format!("{} bytes CRC32 {expected:08x} ({from})", p.size);
    let meta = cache::stat_file(&p.destination, true, buf).map_err(|e| {
        format!(
            "{}: expected {want}, but {} cannot be read after the transfer reported it complete: {e} ({label})",
            p.name,
            p.destination.display()
        )
    })?;
    let got = meta.crc32.unwrap_or_default();
    if meta.size != p.size || got != expected {
        return Err(format!(
            "{}: expected {want}, {} has {} bytes CRC32 {got:08x} ({label})",
            p.name,
            p.destination.display(),
            meta.size
        ));
    }
    if let Some(claimed) = r.crc32.into_option() {
        if claimed != got {
            return Err(format!(
                "{}: the transfer reported CRC32 {claimed:08x}, {} has CRC32 {got:08x} ({label})",
                p.name,
                p.destination.display()
            ));
        }
    }
    Ok(got)
}

/// Wait for a started transfer and verify it (see [`verify`]); this rank's flushed files
/// with the CRC32s the host computed from the destinations.
pub(crate) fn collect(started: Started, poll: bool, recorded: &str, buf: usize) -> RankOutcome {
    let Started {
        mut transfer,
        files,
        label,
        host,
    } = started;
    let outcome = wait_transfer(&mut transfer, &host, poll)
        .map_err(|e| format!("{e} ({label})"))
        .and_then(|status| {
            let results = transfer
                .results()
                .into_result()
                .map_err(|e| format!("{e} ({label})"))?;
            verify(&label, status, &results, &files, recorded, buf)
        });
    let crcs = match outcome {
        Ok(crcs) => crcs,
        Err(why) => {
            // a transfer that failed (a full prefix, a quota) may leave its partial
            // files (the copy types' `*.scr-part`) holding the space every later flush
            // needs: cancelling is how a plugin is told to remove what it has not
            // finished (the destinations it completed are the caller's to remove)
            if !host.is_cancelled() {
                if let Err(e) = transfer.cancel(host_ref(&host)).into_result() {
                    tracing::warn!(
                        "cancelling the failed transfer ({label}): {e}; it may leave partial files"
                    );
                }
            }
            return Err(why);
        }
    };
    Ok(files
        .into_iter()
        .zip(crcs)
        .map(|(p, crc)| FlushedFile {
            name: p.name,
            size: p.size,
            crc32: Some(crc),
            stored: p.stored,
        })
        .collect())
}

/// Remove what a failed flush wrote into the prefix (files already gone are fine), and
/// the directories that leaves empty below a relocated dataset's `files/` (directories
/// at the application's own paths are left: they may be the user's).
fn remove_written(prefix: &Path, paths: &[PathBuf]) {
    let scr = prefix.join(".scr");
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

/// Rank 0: the flush's event in the log (`done`: the bytes recorded, or why not).
fn log_flush(
    prefix: &Path,
    entry: &IndexEntry,
    started: &FlushStart,
    done: &std::result::Result<u64, String>,
) {
    let (bytes, ok) = match done {
        Ok(bytes) => (*bytes, true),
        Err(_) => (0, false),
    };
    crate::events::log_event(
        prefix,
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

/// Where a flush writes its dataset's files ([`Runtime::placement`]): the same choice on
/// every rank.
struct Placement {
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
    fn removable(&self, started: &std::result::Result<Started, String>) -> Vec<PathBuf> {
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

/// Rank 0: the flush of `entry` failed (`reason` names the rank): marked in the index.
fn record_failure(prefix: &Path, entry: &IndexEntry, reason: &str) {
    let _ = Index::update(prefix, |ix| {
        if let Some(e) = ix.datasets.get_mut(&entry.id) {
            e.failed = Some(reason.to_string());
        }
    });
}

/// Rank 0: every part of the rank2file map of `entry` is written (`root` holds their
/// layout and totals):
/// write the root and the summary and mark the dataset complete in the index. Returns
/// the bytes recorded. When it cannot be recorded, the map (root and parts) and the
/// summary are removed: no index rebuilt from the summaries may bring it back.
fn record_complete(
    prefix: &Path,
    entry: &IndexEntry,
    root: &Rank2FileRoot,
) -> std::result::Result<u64, String> {
    let summary = Summary {
        id: entry.id,
        name: entry.name.clone(),
        checkpoint_id: entry.checkpoint_id,
        world_size: entry.world_size,
        files: root.files,
        bytes: root.bytes,
        complete: true,
    };
    let step = || -> std::result::Result<(), crate::state::StateError> {
        root.write(prefix, entry.id)?;
        prefix::write(&Summary::path(prefix, entry.id), "summary", &summary)?;
        Index::update(prefix, |ix| {
            let e = ix.datasets.entry(entry.id).or_insert_with(|| entry.clone());
            e.complete = true;
            e.flushed = Some(now_secs());
            e.failed = None;
            let _ = std::fs::remove_file(prefix::FailedNote::path(prefix, entry.id));
            // the newest flushed checkpoint is the restart point (finalize recording a
            // background flush again whose first recording failed may record them out
            // of order)
            ix.make_current_if_newest(entry);
        })?;
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
            resume::remove_writes(prefix, entry.id);
            bytes
        })
        .map_err(|e| {
            // not recorded: no summary or map may bring it back when an index is rebuilt
            let _ = std::fs::remove_file(Summary::path(prefix, entry.id));
            Rank2File::remove(prefix, entry.id);
            e.to_string()
        })
}

/// The transfer type of `store` (its own `type`, else `flush_type`), and a label naming
/// it and the library that provides it.
pub(crate) fn transfer_label(config: &Config, registry: &Registry, store: &str) -> Label {
    let transfer_type = config
        .store(store)
        .map(|s| config.store_transfer(s).0)
        .unwrap_or_else(|| config.get(settings::FLUSH_TYPE));
    let plugin = registry
        .provider(Kind::Transfer, &transfer_type)
        .map(|l| l.path.display().to_string())
        .unwrap_or_else(|e| format!("(none: {e})"));
    Label {
        transfer_type,
        plugin,
    }
}

/// The configuration of a transfer of `label`'s type persisting its state in
/// `state_file`.
pub(crate) fn transfer_config(config: &Config, label: &Label, state_file: &Path) -> TransferConfig {
    TransferConfig {
        transfer_type: label.transfer_type.as_str().into(),
        state_file: state_file.display().to_string().into(),
        // the host re-reads every destination and checks its CRC32 whatever the
        // transfer says; crc_on_flush adds the transfer's own CRC as a second check
        crc32: config.get(settings::CRC_ON_FLUSH),
        preserve_metadata: true,
        settings: config.plugin_settings(&label.transfer_type).into(),
    }
}

/// Create a transfer through `registry`, add `files` and dispatch it (flush, fetch and
/// scavenge all start theirs here).
pub(crate) fn start_transfer(
    registry: &Registry,
    config: &TransferConfig,
    host: LocalHost,
    label: Label,
    files: Vec<Planned>,
) -> std::result::Result<Started, String> {
    let mut transfer = registry
        .new_transfer(config, host_ref(&host))
        .map_err(|e: RegistryError| e.to_string())?;
    for p in &files {
        transfer
            .add(
                p.source.display().to_string().as_str().into(),
                p.destination.display().to_string().as_str().into(),
            )
            .into_result()
            .map_err(|e| format!("{e} ({label})"))?;
    }
    transfer
        .dispatch(host_ref(&host))
        .into_result()
        .map_err(|e| format!("{e} ({label})"))?;
    Ok(Started {
        transfer,
        files,
        label,
        host,
    })
}

impl Runtime {
    /// Flush `rec` if the policy asks for it: every `flush`-th checkpoint and every output
    /// dataset. A flush that fails leaves the dataset in cache and says so; it does not
    /// fail the checkpoint.
    pub(super) fn maybe_flush(&mut self, rec: &DatasetRecord) -> Result<()> {
        let every = self.config.get(settings::FLUSH);
        let due = rec.output
            || rec
                .checkpoint_id
                .is_some_and(|c| every > 0 && c % every == 0);
        if !due {
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
        let Some(id) = self.restart_candidate() else {
            return Ok(());
        };
        if self.flushing.attempted.contains(&id) {
            // flushed by this run already, still running, or failed earlier in this run
            // (the index says why; it stays in cache for the next run or scavenge)
            return Ok(());
        }
        let held = if self.rank == 0 {
            // (a damaged index is rebuilt from the summaries first: taking it for empty
            // would flush the checkpoint a second time beside its first copy)
            Index::load_or_rebuild(&self.prefix)
                .ok()
                .and_then(|ix| ix.datasets.get(&id).cloned())
                .is_some_and(|e| e.complete && e.failed.is_none())
        } else {
            false
        };
        let held = !broadcast_bytes(&self.world, if held { b"1" } else { b"" }).is_empty();
        if held {
            return Ok(());
        }
        let rec = self.filemap.datasets[&id].clone();
        self.info(&format!(
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
        self.begin_flush(rec.id);
        let Some(entry) = self.open_index_entry(rec) else {
            return Ok(());
        };
        self.fault_point("flush-started", rec.id);
        let place = self.placement(rec);
        // what this flush may write, recorded in the prefix before anything is written:
        // if the run dies mid-flush, the next init cleans it up even when every cache is
        // lost with the filemaps that name the files (see `resume`)
        self.record_writes(rec.id, &place.writes(rec, &self.prefix));
        let started = self.start_transfer(rec, place.relocate);
        self.fault_point("flush-dispatched", rec.id);
        let removable = place.removable(&started);
        if self.config.get(settings::FLUSH_ASYNC) {
            lock(&self.flushing.removable).insert(rec.id, removable);
            return self.flush_in_background(rec, entry, started);
        }
        self.flush_in_foreground(rec, &entry, started, &removable);
        Ok(())
    }

    /// This run's bookkeeping of a flush of dataset `id` starting: attempted (finalize
    /// does not try it again), when it started (for its event), and no outcome of an
    /// earlier attempt.
    fn begin_flush(&mut self, id: u64) {
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
    fn open_index_entry(&self, rec: &DatasetRecord) -> Option<IndexEntry> {
        let entry = IndexEntry {
            id: rec.id,
            name: rec.name.clone(),
            checkpoint_id: rec.checkpoint_id,
            output: rec.output,
            dir: format!("scr.dataset.{}", rec.id),
            world_size: self.size,
            job_name: Some(self.config.get(settings::JOB_NAME)).filter(|n| !n.is_empty()),
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
            return None;
        }
        Some(entry)
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
            .map(|f| self.prefix.join(&f.name))
            .filter(|p| p.symlink_metadata().is_ok() || in_flight.contains(p))
            .collect();
        let taken = !pure_output && !existing.is_empty();
        let relocate = !self.all_agree(!taken);
        if relocate {
            self.info(&format!(
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

    /// Wait for this rank's transfer of `rec` and record the flush collectively
    /// ([`Runtime::gather_and_finish`]); when it failed anywhere, remove what this rank
    /// wrote that no older dataset owns (`removable`). Either way the dataset stays in
    /// cache and the checkpoint stands: a failed flush is a warning.
    fn flush_in_foreground(
        &mut self,
        rec: &DatasetRecord,
        entry: &IndexEntry,
        started: std::result::Result<Started, String>,
        removable: &[PathBuf],
    ) {
        let state = self.transfer_state(rec.id);
        let buf = self.buf_size();
        let outcome: RankOutcome = started.and_then(|s| collect(s, false, "when written", buf));
        self.fault_point("flush-copied", rec.id);
        let recorded = self.gather_and_finish(entry, &outcome);
        let text = broadcast_bytes(&self.world, recorded.err().unwrap_or_default().as_bytes());
        // the transfer's state stays until the flush is settled: a crash before this
        // point leaves it for the next init to resume (see `resume`)
        let _ = std::fs::remove_file(&state);
        if text.is_empty() {
            // only a flush recorded for every rank lets an output leave the cache: one
            // that failed elsewhere is cleaned out of the prefix below
            lock(&self.flushing.flushed).insert(rec.id);
            self.info(&format!(
                "flushed {} to {}",
                rec.name,
                self.prefix.display()
            ));
        } else {
            remove_written(&self.prefix, removable);
            self.warn(&format!(
                "{} stays in cache only: {}",
                rec.name,
                String::from_utf8_lossy(&text)
            ));
        }
    }

    /// The state file of this rank's transfer of dataset `id`.
    fn transfer_state(&self, id: u64) -> PathBuf {
        self.cntl_dir
            .join(format!("transfer.{id}.{}.state", self.rank))
    }

    /// Read buffer for the host's CRC32 of transferred files.
    fn buf_size(&self) -> usize {
        self.config
            .get(settings::FILE_BUF_SIZE)
            .clamp(4096, 64 << 20) as usize
    }

    /// The transfer type of `store` and the library providing it ([`transfer_label`]).
    fn transfer_of(&self, store: &str) -> Label {
        transfer_label(&self.config, &self.registry, store)
    }

    /// The host a transfer of `label`'s type gets: its log is the runtime's and its
    /// cancellation flag is `flushing.cancel`.
    fn transfer_host(&self, label: &Label) -> LocalHost {
        LocalHost::new(
            self.rank,
            &self.node,
            &format!("transfer {}", label.transfer_type),
            Arc::clone(&self.flushing.cancel),
        )
    }

    /// The configuration of a transfer of `label`'s type persisting its state in
    /// `state_file` ([`transfer_config`]).
    fn transfer_config(&self, label: &Label, state_file: &Path) -> TransferConfig {
        transfer_config(&self.config, label, state_file)
    }

    /// Create, fill and dispatch a transfer of `label`'s type for `files`, with a host
    /// whose log is the runtime's and whose cancellation flag is `flushing.cancel`.
    fn dispatch(
        &self,
        label: Label,
        files: Vec<Planned>,
        state_file: &Path,
    ) -> std::result::Result<Started, String> {
        let host = self.transfer_host(&label);
        let config = self.transfer_config(&label, state_file);
        start_transfer(&self.registry, &config, host, label, files)
    }

    /// Start this rank's transfer of `rec` to the prefix: to `<prefix>/<name>`, or into
    /// the dataset's own directory when `relocate`.
    fn start_transfer(
        &self,
        rec: &DatasetRecord,
        relocate: bool,
    ) -> std::result::Result<Started, String> {
        let label = self.transfer_of(&rec.descriptor.store);
        let cache_dir = self.dataset_dir(&rec.descriptor.store, rec.id);
        let files: Vec<Planned> = rec
            .files
            .iter()
            .map(|f| {
                let stored = relocate.then(|| prefix::relocated(rec.id, &f.name));
                Planned {
                    name: f.name.clone(),
                    source: cache_dir.join(&f.name),
                    destination: self.prefix.join(stored.as_deref().unwrap_or(&f.name)),
                    size: f.size,
                    crc32: f.crc32,
                    stored,
                }
            })
            .collect();
        self.dispatch(label, files, &self.transfer_state(rec.id))
    }

    /// Hand this rank's transfer to a waiter thread, which keeps its outcome in memory
    /// for the collective completion ([`Runtime::poll_flushes`], [`Runtime::wait_flushes`]).
    /// The thread makes no MPI call and writes nothing into the prefix.
    fn flush_in_background(
        &mut self,
        rec: &DatasetRecord,
        entry: IndexEntry,
        started: std::result::Result<Started, String>,
    ) -> Result<()> {
        let in_flight = Arc::clone(&self.flushing.in_flight);
        let outcomes = Arc::clone(&self.flushing.outcomes);
        lock(&in_flight).insert(rec.id);
        self.flushing.pending.push(entry);
        let id = rec.id;
        let buf = self.buf_size();
        let waiter = std::thread::spawn(move || {
            let outcome: RankOutcome = started.and_then(|s| collect(s, true, "when written", buf));
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
    /// list on every rank (see [`Flushing::pending`]), so every rank returns here alike
    /// without an exchange — and otherwise one 8-byte minimum-reduction of the number of
    /// leading pending flushes whose transfer ended on this rank, however many are
    /// pending; the flushes that minimum covers (the oldest ones, finished everywhere)
    /// are then completed under the nested name `flush_complete`.
    pub(super) fn poll_flushes(&mut self) {
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
        let finished = super::comm::min_u64(&self.world, finished_here);
        if finished == 0 {
            return;
        }
        let _counted = super::comm::scope("flush_complete");
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
    pub(super) fn wait_flushes(&mut self, last: bool) {
        let _counted = super::comm::scope("flush_wait");
        for (_, w) in self.flushing.waiters.drain(..) {
            let _ = w.join();
        }
        // every waiter ended on every rank: every outcome is here
        let all = self.flushing.pending.len();
        self.complete_flushes(all, last);
        super::comm::barrier(&self.world);
    }

    /// Complete the `n` oldest pending background flushes (collective; every rank's
    /// transfer of each ended): agree on which failed and remove what those wrote, then
    /// record each in order through [`Runtime::gather_and_finish`], as a synchronous
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
            let everywhere = self.all_agree(mine.is_ok());
            if !everywhere {
                remove_written(&self.prefix, &removable);
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
            && !broadcast_bytes(&self.world, if recorded.is_ok() { b"1" } else { b"" }).is_empty();
        let why = recorded.err().unwrap_or_default();
        if in_index {
            // only a flush recorded for every rank lets an output leave the cache
            lock(&self.flushing.flushed).insert(entry.id);
            self.info(&format!(
                "flushed {} to {} (in the background)",
                entry.name,
                self.prefix.display()
            ));
        } else if copied && !last {
            // fully copied, but recording it failed (a prefix full of another flush's
            // files): finalize tries again once failed flushes gave their space back;
            // the transfer state stays, so that a crash before then leaves the flush
            // for the next init to resume
            self.warn(&format!(
                "{} is copied but not yet recorded: {why}; finalize tries again",
                entry.name
            ));
            self.flushing.unrecorded.push((entry, mine));
            return;
        } else {
            // a failed transfer is recorded as such: final
            self.warn(&format!("{} stays in cache only: {why}", entry.name));
        }
        // settled: nothing is left to resume (kept until now so that a crash before the
        // flush was recorded leaves it for the next init)
        let _ = std::fs::remove_file(self.transfer_state(entry.id));
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
    fn gather_and_finish(
        &self,
        entry: &IndexEntry,
        mine: &RankOutcome,
    ) -> std::result::Result<(), String> {
        let blocks = self.rank2file_blocks();
        let n = blocks.of(self.rank);
        let leader = blocks.leader(n);
        let members: Vec<i32> = blocks.members(n).map(|r| r as i32).collect();
        let gathered = super::comm::gather_from(
            &self.world,
            leader as i32,
            &members,
            &serde_json::to_vec(mine).expect("serializes"),
            OUTCOME_TAG,
        );
        let (part, failure) = match gathered.map(|all| self.write_block_part(entry, blocks, n, all))
        {
            Some(Ok(totals)) => (Some(totals), None),
            Some(Err(failed)) => (None, Some(failed)),
            None => (None, None),
        };
        let started = || FlushStart {
            job_id: self.job_id.clone(),
            at: self
                .flushing
                .started
                .get(&entry.id)
                .copied()
                .unwrap_or_else(std::time::Instant::now),
        };
        let first = super::comm::min_u64(
            &self.world,
            failure.as_ref().map_or(u64::MAX, |(r, _)| u64::from(*r)),
        );
        if first != u64::MAX {
            // the leader of the failed rank's block holds the text
            let holder = blocks.leader(blocks.of(first as u32));
            let text = failure.map(|(_, why)| why).unwrap_or_default();
            let why = super::comm::broadcast_from(&self.world, holder as i32, text.as_bytes());
            if part.is_some() {
                let _ = std::fs::remove_file(Rank2FilePart::path(&self.prefix, entry.id, n));
            }
            if self.rank != 0 {
                return Ok(());
            }
            let reason = format!(
                "flush failed on rank {first}: {}",
                String::from_utf8_lossy(&why)
            );
            record_failure(&self.prefix, entry, &reason);
            let done = Err(reason);
            log_flush(&self.prefix, entry, &started(), &done);
            return done.map(|_| ());
        }
        // the root's totals: every part's, summed over the leaders (the others add 0)
        let [files, bytes] = super::comm::sum_u64s(&self.world, {
            let (files, bytes) = part.unwrap_or_default();
            [files, bytes]
        });
        if self.rank != 0 {
            return Ok(());
        }
        let done = record_complete(
            &self.prefix,
            entry,
            &Rank2FileRoot::new(blocks, files, bytes),
        );
        if done.is_err() {
            Rank2File::remove(&self.prefix, entry.id);
        }
        log_flush(&self.prefix, entry, &started(), &done);
        done.map(|_| ())
    }

    /// A block leader's share of finishing a flush: its members' outcomes (`all`, in
    /// member order) checked, and its rank2file part written. Its part's (files, bytes),
    /// or the block's first failure as (rank, why).
    fn write_block_part(
        &self,
        entry: &IndexEntry,
        blocks: prefix::Blocks,
        n: u32,
        all: Vec<Vec<u8>>,
    ) -> std::result::Result<(u64, u64), (u32, String)> {
        let mut ranks = BTreeMap::new();
        for (r, bytes) in blocks.members(n).zip(all) {
            match serde_json::from_slice::<RankOutcome>(&bytes)
                .unwrap_or_else(|e| Err(format!("unreadable outcome: {e}")))
            {
                Ok(files) => {
                    ranks.insert(r, files);
                }
                Err(why) => return Err((r, why)),
            }
        }
        let p = Rank2FilePart::new(entry.id, blocks, n, ranks);
        p.write(&self.prefix)
            .map(|()| (p.files, p.bytes))
            .map_err(|e| (self.rank, format!("its rank2file part: {e}")))
    }

    /// The blocks this job's rank2file maps are written in (`rank2file_block`).
    fn rank2file_blocks(&self) -> prefix::Blocks {
        let block = u32::try_from(self.config.get(settings::RANK2FILE_BLOCK)).unwrap_or(u32::MAX);
        prefix::Blocks::new(self.size, block)
    }

    /// Background flushes whose transfer has not ended on this rank yet (local, no
    /// exchange). Once it is 0 on every rank, the next collective call
    /// (`need_checkpoint`, `start_output`, `complete_output`, `should_exit`) records
    /// every pending background flush: for applications and tests that want to know
    /// whether that call will.
    pub fn flushes_running_here(&self) -> usize {
        let outcomes = lock(&self.flushing.outcomes);
        self.flushing
            .pending
            .iter()
            .filter(|e| !outcomes.contains_key(&e.id))
            .count()
    }

    /// Dataset ids whose flush is still running on this rank.
    pub(super) fn flushing_ids(&self) -> BTreeSet<u64> {
        lock(&self.flushing.in_flight).clone()
    }

    /// The checkpoint in the prefix to restart from next (collective; chosen on rank 0):
    /// `wanted` first, then the index's current one, then the newest, skipping `tried`;
    /// with this rank's list of files from its rank2file map, or why the map cannot be
    /// used (the same error on every rank, naming the file).
    ///
    /// No rank receives the whole map, and rank 0 no message per block: rank 0 reads the
    /// root and broadcasts the choice with the root (the index entry, the layout and the
    /// totals: constant size); each block leader computes its part's name from its block
    /// index, reads it and checks that it is that dataset's part for that block and those
    /// ranks ([`Rank2FilePart::load`]) — one reader per part, as SCR bounds the readers
    /// of a file and the bytes each reads, rather than every rank opening the same part
    /// (R readers per file) — and one reduction sums the parts' totals, which must be
    /// the root's (a part missing, or swapped for another flush's of other contents);
    /// then each leader sends each member its list. Whether every rank got its list is
    /// agreed by a min-reduction.
    ///
    /// A single-file map of an earlier release (legacy only) is read by rank 0, which
    /// sends each leader its block's lists instead (P/R messages from rank 0): kept so
    /// a prefix flushed before the tree restarts, not a path a current flush takes.
    ///
    /// Per rank: one broadcast of the entry and root (about 350 bytes), one 24-byte sum
    /// and one min-reduction (O(log P) steps each), one message with its own list; a
    /// leader also R - 1 messages sent and one part (R ranks) read. Rank 0: the root
    /// read, and as a leader — O(1) messages beyond its own block's whatever P. Plus one
    /// broadcast of the error's text when a part is refused. The last value is the map's
    /// bytes in all (on rank 0, which logs it).
    pub(super) fn choose_from_index(
        &self,
        tried: &[u64],
        wanted: Option<&str>,
    ) -> Option<(
        IndexEntry,
        std::result::Result<Vec<FlushedFile>, String>,
        u64,
    )> {
        // rank 0: the choice and its map's layout; a single-file map itself (legacy)
        let (choice, single) = if self.rank == 0 {
            self.pick_from_index(tried, wanted)
        } else {
            (None, None)
        };
        let bytes = broadcast_bytes(
            &self.world,
            &serde_json::to_vec(&choice).expect("serializes"),
        );
        let (entry, layout): (IndexEntry, std::result::Result<MapLayout, String>) =
            serde_json::from_slice::<Option<_>>(&bytes).unwrap_or(None)?;
        let layout = match layout {
            Ok(l) => l,
            Err(why) => return Some((entry, Err(why), 0)),
        };
        let (blocks, total) = match &layout {
            MapLayout::Tree(root) => (root.blocks(), root.bytes),
            MapLayout::Single { block } => (
                prefix::Blocks::new(self.size, *block),
                single
                    .as_ref()
                    .map_or(0, |m| m.ranks.values().flatten().map(|f| f.size).sum()),
            ),
        };
        let block_lists = self.read_block_lists(&entry, &layout, single.as_ref(), blocks);
        let mine = self.hand_out_lists(blocks, block_lists.as_ref());
        Some((entry, mine, total))
    }

    /// Rank 0: the checkpoint [`Runtime::choose_from_index`] takes — `wanted` first, then
    /// the index's order of fetch candidates, skipping `tried` — with its map's layout (or
    /// why its map cannot be used), and a single-file map itself (legacy). `None` when no
    /// candidate is left.
    fn pick_from_index(&self, tried: &[u64], wanted: Option<&str>) -> (Choice, Option<Rank2File>) {
        let index = Index::load_or_rebuild(&self.prefix).unwrap_or_else(|e| {
            tracing::warn!("{e}; no checkpoint is taken from the prefix");
            Index::default()
        });
        let mut candidates = index.fetch_candidates(self.size);
        // the checkpoint `current` named is tried first
        if let Some(pos) = candidates
            .iter()
            .position(|e| Some(e.name.as_str()) == wanted)
        {
            let e = candidates.remove(pos);
            candidates.insert(0, e);
        }
        match candidates.into_iter().find(|e| !tried.contains(&e.id)) {
            None => (None, None),
            Some(e) => {
                let (layout, single) = self.map_layout(e);
                (Some((e.clone(), layout)), single)
            }
        }
    }

    /// Rank 0: the layout of the rank2file map of `entry` that every rank is told, once
    /// the map is loaded and fits this job ([`check_map`]); a single-file map (legacy)
    /// also itself, since rank 0 sends its lists.
    fn map_layout(
        &self,
        entry: &IndexEntry,
    ) -> (std::result::Result<MapLayout, String>, Option<Rank2File>) {
        let map = Rank2FileMap::load(&self.prefix, entry.id)
            .map_err(|x| x.to_string())
            .and_then(|m| check_map(&self.prefix, entry.id, self.size, m));
        match map {
            Ok(Rank2FileMap::Tree(root)) => (Ok(MapLayout::Tree(root)), None),
            Ok(Rank2FileMap::Single(m)) => (
                Ok(MapLayout::Single {
                    block: self.rank2file_blocks().block,
                }),
                Some(m),
            ),
            Err(why) => (Err(why), None),
        }
    }

    /// A leader: its block's lists of the map of `entry`, read from its part (a tree) or
    /// received from rank 0 (a single-file map, legacy: rank 0 holds it in `single`);
    /// `None` on the other ranks (collective). For a tree, the parts' totals must add up
    /// to the root's (when every part was read: an unreadable one says why itself); every
    /// leader then fails its block alike.
    fn read_block_lists(
        &self,
        entry: &IndexEntry,
        layout: &MapLayout,
        single: Option<&Rank2File>,
        blocks: prefix::Blocks,
    ) -> Option<std::result::Result<BlockLists, String>> {
        let n = blocks.of(self.rank);
        let leader = self.rank == blocks.leader(n);
        match layout {
            MapLayout::Tree(root) => {
                let part = leader.then(|| Rank2FilePart::load(&self.prefix, entry.id, blocks, n));
                // a leader: its part's totals [files, bytes, unreadable]
                let totals = match &part {
                    Some(Ok(part)) => [part.files, part.bytes, 0],
                    Some(Err(_)) => [0, 0, 1],
                    None => [0; 3],
                };
                let [files, bytes, unreadable] = super::comm::sum_u64s(&self.world, totals);
                let sums = if unreadable == 0 {
                    root.check_totals(&self.prefix, entry.id, files, bytes)
                        .map_err(|e| e.to_string())
                } else {
                    Ok(())
                };
                part.map(|part| sums.and(part.map(|p| p.ranks).map_err(|e| e.to_string())))
            }
            MapLayout::Single { .. } => leader.then(|| self.receive_legacy_lists(single, blocks)),
        }
    }

    /// A leader, from a single-file map (legacy): its block's lists, which rank 0 (holding
    /// the map in `single`) sends each leader.
    fn receive_legacy_lists(
        &self,
        single: Option<&Rank2File>,
        blocks: prefix::Blocks,
    ) -> std::result::Result<BlockLists, String> {
        let leaders: Vec<i32> = blocks.leaders().map(|r| r as i32).collect();
        let sources: Vec<Vec<u8>> = match single {
            Some(m) => (0..blocks.count())
                .map(|b| {
                    let lists: BlockLists = blocks
                        .members(b)
                        .map(|r| (r, m.ranks.get(&r).cloned().unwrap_or_default()))
                        .collect();
                    serde_json::to_vec(&lists).expect("serializes")
                })
                .collect(),
            None => Vec::new(),
        };
        let got = super::comm::scatter_to(&self.world, 0, &leaders, &sources, SOURCE_TAG);
        serde_json::from_slice::<BlockLists>(&got)
            .map_err(|e| format!("rank 0 sent unreadable rank2file lists: {e}"))
    }

    /// Each leader sends each member of its block its list (or the block's error), from
    /// `block_lists` (the leader's, `None` elsewhere); then every rank takes the lowest
    /// failing rank's error, so that all give the same answer (collective).
    fn hand_out_lists(
        &self,
        blocks: prefix::Blocks,
        block_lists: Option<&std::result::Result<BlockLists, String>>,
    ) -> std::result::Result<Vec<FlushedFile>, String> {
        let n = blocks.of(self.rank);
        let leader = blocks.leader(n);
        let members: Vec<i32> = blocks.members(n).map(|r| r as i32).collect();
        let lists: Vec<Vec<u8>> = match block_lists {
            None => Vec::new(),
            Some(block_lists) => blocks
                .members(n)
                .map(|r| {
                    let mine: std::result::Result<Vec<FlushedFile>, String> = match block_lists {
                        Ok(l) => Ok(l.get(&r).cloned().unwrap_or_default()),
                        Err(why) => Err(why.clone()),
                    };
                    serde_json::to_vec(&mine).expect("serializes")
                })
                .collect(),
        };
        let got = super::comm::scatter_to(&self.world, leader as i32, &members, &lists, LIST_TAG);
        let mine: std::result::Result<Vec<FlushedFile>, String> = serde_json::from_slice(&got)
            .unwrap_or_else(|e| {
                Err(format!(
                    "rank {leader} sent an unreadable rank2file list: {e}"
                ))
            });
        // the same answer everywhere: the lowest failing rank's error
        match super::first_failure(&self.world, mine.as_ref().err().map(String::as_str)) {
            Some((_, why)) => Err(why),
            None => mine,
        }
    }

    /// Rank 0 marks a checkpoint that cannot be restarted from as failed in the index
    /// (kept through a rebuild of the index from the summaries), so no later run tries
    /// it again; a failure to do so is a warning.
    fn mark_failed_in_index(&self, entry: &IndexEntry, reason: &str) {
        if self.rank == 0 {
            if let Err(e) = Index::mark_failed(&self.prefix, entry.id, reason) {
                tracing::warn!("{e}; {} is not marked failed in the index", entry.name);
            }
        }
    }

    /// With `fetch = false` and no checkpoint in cache, restart straight from the prefix
    /// (SCR 3.x): offer the checkpoint `choose_from_index` picks, after every rank found
    /// its files there with the recorded size (and CRC32, with `crc_on_restart`);
    /// `route_file` then returns their prefix paths. One that fails is marked failed in
    /// the index and the next older one is tried. Collective. Per rank and candidate:
    /// [`Runtime::choose_from_index`]'s cost (O(log P) steps, its own list) plus one
    /// min-reduction, and a broadcast of the first failure's text when one failed.
    pub(super) fn open_prefix_restart(&mut self, wanted: Option<&str>) -> Result<()> {
        let mut tried: Vec<u64> = Vec::new();
        let check_crc = self.config.get(settings::CRC_ON_RESTART);
        let buf = self.buf_size();
        while let Some((entry, list, _)) = self.choose_from_index(&tried, wanted) {
            tried.push(entry.id);
            let mine = list.and_then(|list| {
                let mut files = BTreeMap::new();
                for f in &list {
                    let path = f.stored_path(&self.prefix)?;
                    let meta =
                        std::fs::metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
                    if meta.len() != f.size {
                        return Err(format!(
                            "{} is {} bytes, the flush recorded {}",
                            path.display(),
                            meta.len(),
                            f.size
                        ));
                    }
                    if let (true, Some(want)) = (check_crc, f.crc32) {
                        let got = super::cache::file_crc32(&path, buf)
                            .map_err(|e| format!("{}: {e}", path.display()))?;
                        if got != want {
                            return Err(format!(
                                "{} has CRC32 {got:08x}, the flush recorded {want:08x}",
                                path.display()
                            ));
                        }
                    }
                    files.insert(f.name.clone(), path);
                }
                Ok(files)
            });
            let failed = super::first_failure(&self.world, mine.as_ref().err().map(String::as_str))
                .map(|(rank, why)| format!("rank {rank}: {why}"));
            match (failed, mine) {
                (None, Ok(files)) => {
                    self.next_dataset = self.next_dataset.max(entry.id + 1);
                    if let Some(c) = entry.checkpoint_id {
                        self.next_checkpoint = self.next_checkpoint.max(c + 1);
                    }
                    self.info(&format!(
                        "restarting from {} in the prefix {} (fetch = false)",
                        entry.name,
                        self.prefix.display()
                    ));
                    self.prefix_restart = Some(super::PrefixRestart {
                        id: entry.id,
                        name: entry.name.clone(),
                        files,
                    });
                    return Ok(());
                }
                (failed, _) => {
                    let reason = failed.unwrap_or_default();
                    self.warn(&format!(
                        "{} in the prefix cannot be read for a restart: {reason}; trying an older checkpoint",
                        entry.name
                    ));
                    self.mark_failed_in_index(&entry, &reason);
                }
            }
        }
        Ok(())
    }

    /// With no restartable checkpoint in cache, fetch the newest complete one from the
    /// prefix (falling back to older ones, marking failures in the index) and protect it
    /// again with its redundancy scheme. Collective. Per rank and candidate:
    /// [`Runtime::choose_from_index`]'s cost (O(log P) steps, its own list) and two
    /// agreements on failure (a min-reduction each, and a broadcast of the first
    /// failure's text when one failed; were all-gathers of every rank's reason, O(P)),
    /// besides what re-protecting costs in the redundancy sets.
    pub(super) fn fetch(&mut self, wanted: Option<&str>) -> Result<()> {
        let _counted = super::comm::scope("fetch");
        let mut tried: Vec<u64> = Vec::new();
        loop {
            let choice = self.choose_from_index(&tried, wanted);
            let Some((entry, list, fetch_bytes)) = choice else {
                return Ok(());
            };
            tried.push(entry.id);
            let fetch_started = std::time::Instant::now();
            let outcome = list.and_then(|list| self.fetch_one(&entry, list));
            // the lowest failing rank's reason, on every rank (O(log P), not a gather)
            let failed =
                super::first_failure(&self.world, outcome.as_ref().err().map(String::as_str))
                    .map(|(rank, why)| format!("fetch failed on rank {rank}: {why}"));
            // protect it again in cache: a failure there is a failed fetch too
            let failed = match failed {
                None => {
                    let protected = self.protect_fetched(entry.id).err().map(|e| e.to_string());
                    super::first_failure(&self.world, protected.as_deref())
                        .map(|(rank, why)| format!("re-protecting failed on rank {rank}: {why}"))
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
                    self.log_event(Event::Fetch {
                        name: entry.name.clone(),
                        id: entry.id,
                        bytes: fetch_bytes,
                        seconds: fetch_started.elapsed().as_secs_f64(),
                    });
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
                    self.mark_failed_in_index(&entry, &reason);
                }
            }
        }
    }

    /// Copy this rank's files of `entry` from the prefix into cache, recorded in the
    /// filemap first, and verify sizes and CRC32s.
    fn fetch_one(
        &mut self,
        entry: &IndexEntry,
        mine: Vec<FlushedFile>,
    ) -> std::result::Result<(), String> {
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
        // every directory from the store down 0700 and checked, none a link
        let base = Path::new(&store);
        super::create_private_dir(base, &dir).map_err(|e| e.to_string())?;
        let mut files = Vec::with_capacity(mine.len());
        for f in &mine {
            let source = f.stored_path(&self.prefix)?;
            let destination = dir.join(&f.name);
            if let Some(parent) = destination.parent() {
                super::create_private_dir(base, parent).map_err(|e| e.to_string())?;
            }
            files.push(Planned {
                name: f.name.clone(),
                source,
                destination,
                size: f.size,
                crc32: f.crc32,
                stored: None,
            });
        }
        // the same transfer type as the flush from this store, verified the same way
        let label = self.transfer_of(&store);
        let state = self
            .cntl_dir
            .join(format!("fetch.{}.{}.state", entry.id, self.rank));
        let started = self.dispatch(label, files, &state);
        let buf = self.buf_size();
        let fetched = started.and_then(|s| collect(s, false, "recorded by the flush", buf));
        let _ = std::fs::remove_file(&state);
        let fetched = fetched?;
        for (f, rec) in fetched.iter().zip(record.files.iter_mut()) {
            let dst = dir.join(&f.name);
            let meta = cache::stat_file(&dst, false, buf)
                .map_err(|e| format!("{}: {e}", dst.display()))?;
            rec.mode = meta.mode;
            rec.mtime = meta.mtime;
            rec.crc32 = f.crc32;
        }
        self.filemap.datasets.insert(entry.id, record);
        self.save_filemap().map_err(|e| e.to_string())
    }

    /// Apply the redundancy scheme to a fetched dataset and mark it complete.
    /// Collective. When apply fails on some rank, the dataset is discarded on every rank
    /// (the redundancy files declared before apply among its names) and the ranks where
    /// it failed return their error.
    fn protect_fetched(&mut self, id: u64) -> Result<()> {
        let mut rec = self.filemap.datasets[&id].clone();
        let desc = self.reddesc_for(rec.checkpoint_id);
        let dir = self.dataset_dir(&rec.descriptor.store, id);
        // the redundancy files are recorded before they exist, like every file
        let declared = cache::declare_redundancy(&self.reddescs[desc].scheme, &mut rec, &dir)
            .and_then(|()| {
                self.filemap.datasets.insert(id, rec.clone());
                self.save_filemap()
            });
        self.agree(declared)?;
        let rd = &self.reddescs[desc];
        let ds = cache::dataset_files(&rec, &dir);
        let result = rd
            .scheme
            .raw()
            .apply(scr_plugin::host_ref(&rd.host), &ds)
            .into_result();
        let label = format!("{id} ({})", rec.name);
        let red = self
            .settle_call(&rd.host, &rd.scheme, "apply", &label, result)
            .map_err(ScrError::from);
        if !self.all_agree(red.is_ok()) {
            // discarded on every rank, what the scheme wrote with it (its `remove` takes
            // what it did not declare); this rank's own error only, as the caller
            // gathers every rank's to name the one that failed
            self.discard_failed_apply(Some(desc), &rec)?;
            return red.map(|_| ());
        }
        let red = red?;
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

#[cfg(test)]
mod tests {
    use super::*;

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
            dir: format!("scr.dataset.{id}"),
            world_size: 1,
            ..IndexEntry::default()
        };
        // one rank, no files: one part, then the root, summary and index entry
        let record = |id: u64| {
            let blocks = prefix::Blocks::new(1, prefix::RANK2FILE_BLOCK);
            Rank2FilePart::new(id, blocks, 0, BTreeMap::from([(0, Vec::new())]))
                .write(dir.path())
                .unwrap();
            record_complete(dir.path(), &entry(id), &Rank2FileRoot::new(blocks, 0, 0)).unwrap();
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

    fn label() -> Label {
        Label {
            transfer_type: "LIAR".into(),
            plugin: "/lib/libliar.so".into(),
        }
    }

    /// Two source files and their planned destinations (not yet written).
    fn plan(dir: &Path) -> Vec<Planned> {
        ["a.ckpt", "b.ckpt"]
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let data = vec![i as u8 + 1; 100 + i];
                let source = dir.join(format!("src_{name}"));
                std::fs::write(&source, &data).unwrap();
                Planned {
                    name: name.to_string(),
                    source,
                    destination: dir.join(format!("dst_{name}")),
                    size: data.len() as u64,
                    crc32: Some(crc32fast::hash(&data)),
                    stored: None,
                }
            })
            .collect()
    }

    fn copy_all(files: &[Planned]) {
        for p in files {
            std::fs::copy(&p.source, &p.destination).unwrap();
        }
    }

    fn result(p: &Planned) -> FileResult {
        FileResult {
            source: p.source.display().to_string().into(),
            destination: p.destination.display().to_string().into(),
            bytes: p.size,
            crc32: p.crc32.into(),
            status: TransferStatus::Complete,
            error: None.into(),
        }
    }

    fn check(files: &[Planned], results: &[FileResult]) -> std::result::Result<Vec<u32>, String> {
        verify(
            &label(),
            TransferStatus::Complete,
            results,
            files,
            "when written",
            4096,
        )
    }

    #[test]
    fn results_in_any_order_are_matched_by_source_and_destination() {
        let dir = tempfile::tempdir().unwrap();
        let files = plan(dir.path());
        copy_all(&files);
        let mut results: Vec<FileResult> = files.iter().map(result).collect();
        results.reverse();
        let crcs = check(&files, &results).unwrap();
        assert_eq!(crcs, vec![files[0].crc32.unwrap(), files[1].crc32.unwrap()]);
    }

    #[test]
    fn a_missing_destination_is_refused_naming_file_sizes_and_transfer() {
        let dir = tempfile::tempdir().unwrap();
        let files = plan(dir.path());
        let results: Vec<FileResult> = files.iter().map(result).collect();
        let err = check(&files, &results).unwrap_err();
        assert!(
            err.starts_with("a.ckpt: expected 100 bytes CRC32")
                && err.contains("cannot be read")
                && err.contains("transfer type `LIAR`, plugin /lib/libliar.so"),
            "{err}"
        );
    }

    #[test]
    fn missing_duplicate_and_foreign_results_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let files = plan(dir.path());
        copy_all(&files);
        let err = check(&files, &[]).unwrap_err();
        assert!(
            err.contains("a.ckpt: the transfer returned no result"),
            "{err}"
        );
        let r = result(&files[0]);
        let err = check(&files, &[r.clone(), r.clone()]).unwrap_err();
        assert!(
            err.contains("a.ckpt: the transfer returned 2 results"),
            "{err}"
        );
        // the right destination under another source is not a result for the file
        let mut foreign = result(&files[1]);
        foreign.source = "/elsewhere".into();
        let err = check(&files, &[r, foreign]).unwrap_err();
        assert!(err.contains("a file it was not given (/elsewhere"), "{err}");
    }

    #[test]
    fn a_short_or_flipped_copy_is_refused_whatever_the_transfer_claims() {
        let dir = tempfile::tempdir().unwrap();
        let files = plan(dir.path());
        copy_all(&files);
        let results: Vec<FileResult> = files.iter().map(result).collect();
        let mut bytes = std::fs::read(&files[1].destination).unwrap();
        bytes[0] ^= 1;
        std::fs::write(&files[1].destination, &bytes).unwrap();
        let err = check(&files, &results).unwrap_err();
        assert!(
            err.starts_with(&format!(
                "b.ckpt: expected 101 bytes CRC32 {:08x} (when written), ",
                files[1].crc32.unwrap()
            )) && err.contains(&format!(
                "has 101 bytes CRC32 {:08x}",
                crc32fast::hash(&bytes)
            )),
            "{err}"
        );
        bytes.pop();
        bytes[0] ^= 1;
        std::fs::write(&files[1].destination, &bytes).unwrap();
        let err = check(&files, &results).unwrap_err();
        assert!(err.contains("has 100 bytes"), "{err}");
    }

    #[test]
    fn without_a_recorded_crc_the_source_is_the_reference() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = plan(dir.path());
        copy_all(&files);
        for p in &mut files {
            p.crc32 = None;
        }
        // right size, other bytes (a transfer that wrote zeros): refused
        let len = std::fs::metadata(&files[1].destination).unwrap().len() as usize;
        std::fs::write(&files[1].destination, vec![0u8; len]).unwrap();
        let mut results: Vec<FileResult> = files.iter().map(result).collect();
        results[1].crc32 = None.into();
        let err = check(&files, &results).unwrap_err();
        assert!(
            err.contains("b.ckpt: expected 101 bytes CRC32")
                && err.contains("(of the source)")
                && err.contains(" has 101 bytes CRC32 "),
            "{err}"
        );
    }

    #[test]
    fn without_a_recorded_crc_sizes_are_compared_and_the_computed_crc_kept() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = plan(dir.path());
        copy_all(&files);
        let want: Vec<u32> = files.iter().map(|p| p.crc32.unwrap()).collect();
        for p in &mut files {
            p.crc32 = None;
        }
        let results: Vec<FileResult> = files.iter().map(result).collect();
        assert_eq!(check(&files, &results).unwrap(), want);
        // but a CRC the transfer claims must be the destination's
        let mut lying = results.clone();
        lying[0].crc32 = Some(0xdead_beef).into();
        let err = check(&files, &lying).unwrap_err();
        assert!(
            err.contains("the transfer reported CRC32 deadbeef"),
            "{err}"
        );
    }

    #[test]
    fn a_failed_status_names_the_transfer() {
        let dir = tempfile::tempdir().unwrap();
        let files = plan(dir.path());
        let mut r = result(&files[0]);
        r.status = TransferStatus::Failed;
        r.error = Some(abi_stable::std_types::RString::from("disk full")).into();
        let err = verify(
            &label(),
            TransferStatus::Failed,
            &[r],
            &files,
            "when written",
            4096,
        )
        .unwrap_err();
        assert!(
            err.contains("did not complete: disk full (transfer type `LIAR`"),
            "{err}"
        );
    }

    /// A transfer that never finishes unless cancelled, and says whether it was.
    struct Endless(Arc<AtomicBool>);

    impl scr_plugin::Transfer for Endless {
        fn add(&mut self, _: &str, _: &str) -> scr_plugin::PluginResult<()> {
            Ok(())
        }
        fn dispatch(&mut self, _: &scr_plugin::Host<'_>) -> scr_plugin::PluginResult<()> {
            Ok(())
        }
        fn test(&mut self, _: &scr_plugin::Host<'_>) -> scr_plugin::PluginResult<TransferStatus> {
            Ok(TransferStatus::InProgress)
        }
        fn wait(&mut self, _: &scr_plugin::Host<'_>) -> scr_plugin::PluginResult<TransferStatus> {
            Ok(TransferStatus::InProgress)
        }
        fn cancel(&mut self, _: &scr_plugin::Host<'_>) -> scr_plugin::PluginResult<()> {
            self.0.store(true, Ordering::SeqCst);
            Ok(())
        }
        fn results(&self) -> scr_plugin::PluginResult<Vec<FileResult>> {
            Ok(Vec::new())
        }
    }

    struct EndlessLib;
    impl scr_plugin::PluginLibrary for EndlessLib {
        const NAME: &'static str = "endless";
        const VERSION: &'static str = "0";
    }

    #[test]
    fn the_runtimes_cancel_flag_stops_a_background_transfer() {
        let cancelled = Arc::new(AtomicBool::new(false));
        let flag = Arc::new(AtomicBool::new(false));
        let host = LocalHost::new(0, "n0", "transfer endless", Arc::clone(&flag));
        let mut t =
            scr_plugin::transfer_box::<EndlessLib>(Box::new(Endless(Arc::clone(&cancelled))));
        let waiter = std::thread::spawn(move || wait_transfer(&mut t, &host, true));
        std::thread::sleep(Duration::from_millis(100));
        assert!(!waiter.is_finished(), "the transfer is still running");
        flag.store(true, Ordering::SeqCst);
        let out = waiter.join().unwrap();
        assert!(out.unwrap_err().contains("cancelled by the runtime"));
        assert!(
            cancelled.load(Ordering::SeqCst),
            "the plugin was told to cancel"
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
