//! What the prefix directory holds about datasets (the Files chapter): the index
//! (`.scr/index.scr`), the flush file (`.scr/flush.scr`), and per dataset a directory
//! `.scr/scr.dataset.<id>/` with its summary and rank2file map. All are state files:
//! versioned, checksummed, replaced atomically.

use scr_plugin::sync::lock;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::layout;
use crate::state::{read_state, write_state, StateError};

mod edit;
pub use edit::Dropped;
pub use edit::EditError;

/// One dataset in the index.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexEntry {
    /// Dataset id.
    pub id: u64,
    /// Name given by the application.
    pub name: String,
    /// Checkpoint id, for checkpoints.
    pub checkpoint_id: Option<u64>,
    /// Output dataset.
    pub output: bool,
    /// Its directory under `.scr/`.
    pub dir: String,
    /// Ranks that wrote it.
    pub world_size: u32,
    /// Every rank's files reached the prefix and were verified.
    pub complete: bool,
    /// When the flush completed (seconds since the epoch).
    pub flushed: Option<i64>,
    /// When it was last fetched back.
    pub fetched: Option<i64>,
    /// Why it must not be used (a failed fetch, a flush that never completed).
    pub failed: Option<String>,
    /// The `job_name` of the job that wrote it (SCR's JOBNAME), when one was set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_name: Option<String>,
}

/// The index of a prefix directory.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Index {
    /// Entries by dataset id.
    pub datasets: BTreeMap<u64, IndexEntry>,
    /// The checkpoint to restart from, if set (`scr index current`); else the newest
    /// complete one.
    pub current: Option<String>,
}

/// Serializes index updates within one process (the flush thread and the main thread).
static INDEX_LOCK: Mutex<()> = Mutex::new(());

/// How long an update waits for another process's lock on the prefix state.
const LOCK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// An exclusive hold on the prefix's state files (index, flush file), across processes:
/// a job's flushes, `scr index` run by an admin, another job sharing the prefix. Each
/// update is a read-modify-write; without the lock two of them lose one's change.
pub struct PrefixLock {
    _file: std::fs::File,
    _in_process: std::sync::MutexGuard<'static, ()>,
}

impl PrefixLock {
    /// The lock file, `<prefix>/.scr/lock`; it holds the holder's pid and host.
    pub fn path(prefix: &Path) -> PathBuf {
        layout::lock_file(prefix)
    }

    /// Take the lock (an advisory `flock`), waiting up to a minute; the error names the
    /// holder.
    pub fn take(prefix: &Path) -> Result<PrefixLock, StateError> {
        use std::io::{Read, Seek, Write};
        let in_process = lock(&INDEX_LOCK);
        let path = Self::path(prefix);
        let io = |source| StateError::Io {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(scr_dir(prefix)).map_err(io)?;
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        let started = std::time::Instant::now();
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) => {
                    if started.elapsed() >= LOCK_TIMEOUT {
                        let mut holder = String::new();
                        let _ = file.read_to_string(&mut holder);
                        return Err(io(std::io::Error::other(format!(
                            "still locked after {} s by {}; if that process is gone, the lock is released with it",
                            LOCK_TIMEOUT.as_secs(),
                            if holder.trim().is_empty() { "another process" } else { holder.trim() }
                        ))));
                    }
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                Err(std::fs::TryLockError::Error(e))
                    if matches!(e.raw_os_error(), Some(38 | 95 | 37 | 22)) =>
                {
                    // ENOSYS, EOPNOTSUPP, ENOLCK, EINVAL: this file system has no flock
                    // (Lustre without -o flock, NFS with nolock). Updates from this process
                    // stay serialized; across processes they are not: say so once.
                    static SAID: std::sync::Once = std::sync::Once::new();
                    SAID.call_once(|| {
                        tracing::warn!(
                            "{}: no file locking on this file system ({e}); updates of the prefix's index from other processes (scr index, another job) are not serialized with this job's",
                            path.display()
                        )
                    });
                    break;
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
            }
        }
        // say who holds it, for the message of whoever waits
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let _ = file
            .set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| write!(file, "pid {} on {}", std::process::id(), host.trim()));
        Ok(PrefixLock {
            _file: file,
            _in_process: in_process,
        })
    }
}

/// One rank's files of a flushed dataset.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlushedFile {
    /// The file's name: its path relative to the prefix as the application named it, and
    /// its path relative to the dataset directory in cache.
    pub name: String,
    /// Size in bytes.
    pub size: u64,
    /// CRC32 of the flushed bytes, computed by the host from the prefix copy (older
    /// indexes may lack it: then only the size is checked).
    pub crc32: Option<u32>,
    /// Where the bytes are, relative to the prefix, when not at `name`: a flush whose
    /// names were already taken in the prefix (a rerun writing `ckpt.20` again) writes
    /// into its own dataset directory instead, see [`relocated`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored: Option<String>,
}

impl FlushedFile {
    /// The path of the flushed bytes under `prefix`, refusing a name that would leave the
    /// prefix (an absolute path or a `..` component read from a damaged or hostile
    /// rank2file map).
    pub fn stored_path(&self, prefix: &Path) -> Result<PathBuf, String> {
        let rel = self.stored.as_deref().unwrap_or(&self.name);
        check_relative(rel)?;
        check_relative(&self.name)?;
        Ok(prefix.join(rel))
    }
}

/// `Err` unless `rel` is a relative path that stays below the directory it is joined to.
pub fn check_relative(rel: &str) -> Result<(), String> {
    if !scr_plugin::redfile::stays_inside(rel) {
        return Err(format!(
            "`{rel}` is not a path inside the prefix; the dataset's records are damaged"
        ));
    }
    Ok(())
}

/// Where a flush of dataset `id` puts the file `name` when the prefix already holds a
/// file at `<prefix>/<name>`, relative to the prefix: `.scr/scr.dataset.<id>/files/<name>`.
///
/// Why this design (rather than staging and renaming after the flush is recorded): a
/// rename over the old path would still destroy the older dataset's bytes that its own
/// index entry and rank2file map keep pointing at, so the older checkpoint would stop
/// being fetchable the moment the newer one is recorded — and a crash between the
/// renames of different ranks would leave neither intact. Writing the clashing dataset
/// into its own directory never touches a byte of any other dataset; rank2file records
/// the location (`FlushedFile::stored`) so fetch finds it, and `scr index drop --delete`
/// removes it with the dataset directory. The common case (fresh names) keeps SCR's
/// layout, files at `<prefix>/<name>` where users expect them; so do pure output datasets
/// (not checkpoints), which replace the previous run's output at its path.
pub fn relocated(id: u64, name: &str) -> String {
    layout::relocated(id, name)
}

/// Which rank wrote which files: the whole rank2file map of a dataset, as the offline
/// tools (`scr index`, scavenge, postrun) read it ([`Rank2File::load`]), whatever its
/// format on disk.
///
/// # On disk: a tree of bounded parts (SCR's rank2file tree)
///
/// A flush writes the map as a root and parts, never as one file holding every rank:
/// at 10^5 ranks one file (and one process gathering it) would hold every rank's list.
/// Ranks are grouped in blocks of at most `block` consecutive ranks ([`Blocks`]; the
/// `rank2file_block` key, default [`RANK2FILE_BLOCK`]). Each block's first rank (its
/// leader) gathers its members' lists and writes the part `rank2file.<n>.scr`
/// ([`Rank2FilePart`], kind `rank2file-part`) for block `n`; rank 0 writes the root
/// `rank2file.scr` ([`Rank2FileRoot`], kind `rank2file-tree`). Both levels are state
/// files (atomic, checksummed).
///
/// The root records only the layout (world size, block size, part count) and the
/// totals (files, bytes), a constant size whatever P: it has no list of parts, so
/// writing it needs no message per part to rank 0 (the totals are sums reduced over
/// the leaders) and reading it tells every leader where its part is (part `n` is
/// `rank2file.<n>.scr`, [`Rank2FilePart::name`]). Each part identifies itself instead:
/// its dataset id, block index, block size, rank range and totals are inside it, under
/// its checksum, so a part of another dataset or another block put in its place is
/// refused naming the file ([`Rank2FilePart::load`]); the sum of the parts' totals must
/// equal the root's, which catches a part missing or swapped for one of other contents.
/// The root records the block size: a map is read with the layout it was written with,
/// whatever the reader's configuration.
///
/// A root of kind `rank2file-root` (a tree whose root listed every part, never
/// released) is refused with an error saying so. A single-file map (kind `rank2file`,
/// this struct itself) is what releases before the tree wrote; it is still read (legacy
/// only), so a prefix flushed before an upgrade restarts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rank2File {
    /// Files by rank.
    pub ranks: BTreeMap<u32, Vec<FlushedFile>>,
}

/// Ranks per rank2file part when the configuration does not say (`rank2file_block`):
/// a part of 256 ranks with a few files each is tens of KiB, and the root lists
/// ceil(P / 256) parts (about 400 at 10^5 ranks).
pub const RANK2FILE_BLOCK: u32 = 256;

/// The blocks of consecutive ranks a rank2file map is split into: block `n` holds ranks
/// `n * block ..` (at most `block` of them, the last one possibly fewer); its first rank
/// is its leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Blocks {
    /// Ranks in all (the job's world size).
    pub ranks: u32,
    /// Ranks per block (at least 1).
    pub block: u32,
}

impl Blocks {
    /// Blocks of `block` ranks (0 is taken as 1) over `ranks` ranks.
    pub fn new(ranks: u32, block: u32) -> Blocks {
        Blocks {
            ranks,
            block: block.max(1),
        }
    }

    /// How many blocks.
    pub fn count(&self) -> u32 {
        self.ranks.div_ceil(self.block)
    }

    /// The block of `rank`.
    pub fn of(&self, rank: u32) -> u32 {
        rank / self.block
    }

    /// The ranks of block `n`.
    pub fn members(&self, n: u32) -> std::ops::Range<u32> {
        let first = n.saturating_mul(self.block).min(self.ranks);
        first..first.saturating_add(self.block).min(self.ranks)
    }

    /// The leader (first rank) of block `n`.
    pub fn leader(&self, n: u32) -> u32 {
        self.members(n).start
    }

    /// Every block's leader, in order.
    pub fn leaders(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.count()).map(|n| self.leader(n))
    }
}

/// The root of a rank2file map (`rank2file.scr`): the layout of its parts and the
/// totals, constant size (no per-part entry).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rank2FileRoot {
    /// Ranks the map covers (the world size that wrote it).
    pub ranks: u32,
    /// Ranks per part ([`Blocks`]).
    pub block: u32,
    /// How many parts (`ceil(ranks / block)`; part `n` is [`Rank2FilePart::name`]`(n)`).
    pub parts: u32,
    /// Files in all (the sum of the parts' `files`).
    pub files: u64,
    /// Bytes in all (the sum of the parts' `bytes`).
    pub bytes: u64,
}

/// One part of a rank2file map (`rank2file.<n>.scr`): the lists of the ranks of one
/// block, and what identifies it (checked by [`Rank2FilePart::load`]: the root lists no
/// parts, so a part must say itself which dataset and block it is).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rank2FilePart {
    /// The dataset it belongs to.
    pub dataset: u64,
    /// Its block's index `n` (its file is `rank2file.<n>.scr`).
    pub index: u32,
    /// Ranks per block of the layout it was written in.
    pub block: u32,
    /// Its first rank.
    pub first: u32,
    /// How many ranks it lists.
    pub count: u32,
    /// Files it lists in all.
    pub files: u64,
    /// Bytes of those files.
    pub bytes: u64,
    /// Files by rank (exactly the block's ranks, each possibly with no file).
    pub ranks: BTreeMap<u32, Vec<FlushedFile>>,
}

/// A rank2file map's root as found on disk: the tree's root, or a single-file map of
/// an earlier release.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rank2FileMap {
    /// The root of a tree (part `n` is [`Rank2FilePart::name`]`(n)`).
    Tree(Rank2FileRoot),
    /// A whole map in one file (written before the tree).
    Single(Rank2File),
}

/// State-file kind of a rank2file root (layout and totals, no list of parts).
pub const ROOT_KIND: &str = "rank2file-tree";
/// State-file kind of the root of an unreleased development format that listed every
/// part: refused with an error saying so ([`Rank2FileMap::load`]).
pub const LISTING_ROOT_KIND: &str = "rank2file-root";
/// State-file kind of a rank2file part.
pub const PART_KIND: &str = "rank2file-part";
/// State-file kind of a single-file rank2file map (earlier releases).
pub const SINGLE_KIND: &str = "rank2file";

/// The summary of a flushed dataset (`summary.scr`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// Dataset id.
    pub id: u64,
    /// Name.
    pub name: String,
    /// Checkpoint id.
    pub checkpoint_id: Option<u64>,
    /// Ranks.
    pub world_size: u32,
    /// Files in all.
    pub files: u64,
    /// Bytes in all.
    pub bytes: u64,
    /// Every rank's files are there and verified.
    pub complete: bool,
}

/// The flush file's location of a dataset in cache.
pub const CACHE: &str = "CACHE";
/// The flush file's location of a dataset in the prefix (the parallel file system).
pub const PFS: &str = "PFS";

/// Where a dataset is (`flush.scr`): SCR's flush file, read by `scr flush-file` (whether
/// the newest dataset still needs a flush). `CACHE` is added when a dataset completes in
/// cache and taken off when it leaves it; at init the whole file is made to match what
/// the cache holds ([`FlushFile::rebuild`]). `PFS` is added when a flush or scavenge
/// completes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlushFile {
    /// Locations (`CACHE`, `PFS`) and directory by dataset id.
    pub datasets: BTreeMap<u64, (Vec<String>, String)>,
}

/// The `.scr` directory of a prefix.
pub fn scr_dir(prefix: &Path) -> PathBuf {
    layout::scr_dir(prefix)
}

/// The directory of dataset `id` under `.scr`.
pub fn dataset_dir(prefix: &Path, id: u64) -> PathBuf {
    layout::prefix_dataset_dir(prefix, id)
}

/// Read a state file, treating "absent" as the default value.
fn load_or_default<T: serde::de::DeserializeOwned + Default>(
    path: &Path,
    kind: &str,
) -> Result<T, StateError> {
    match read_state(path, kind) {
        Err(e) if e.is_not_found() => Ok(T::default()),
        other => other,
    }
}

impl Index {
    /// The index file.
    pub fn path(prefix: &Path) -> PathBuf {
        layout::index_file(prefix)
    }

    /// Read it (an absent index is empty).
    pub fn load(prefix: &Path) -> Result<Index, StateError> {
        load_or_default(&Self::path(prefix), "index")
    }

    /// Read it; when it is damaged (a flipped byte, a truncated write), rebuild it from
    /// the per-dataset summaries instead, with a warning: a damaged index must not
    /// disable fetch and every later flush. What the summaries cannot say (the pinned
    /// `current`, fetch times) is lost; the newest complete checkpoint not marked failed
    /// ([`FailedNote`]) becomes the restart point.
    pub fn load_or_rebuild(prefix: &Path) -> Result<Index, StateError> {
        match Self::load(prefix) {
            Err(damaged @ StateError::Corrupt { .. }) if !damaged.is_other_version() => {
                let rebuilt = Self::rebuild(prefix)?;
                tracing::warn!(
                    "{damaged}; rebuilt from {} dataset summaries",
                    rebuilt.datasets.len()
                );
                Ok(rebuilt)
            }
            other => other,
        }
    }

    /// An index made from the summaries in `<prefix>/.scr/scr.dataset.<id>/summary.scr`
    /// (a summary is written only once a flush is complete on every rank). Summaries that
    /// cannot be read are skipped with a warning.
    pub fn rebuild(prefix: &Path) -> Result<Index, StateError> {
        let dir = scr_dir(prefix);
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Index::default()),
            Err(source) => return Err(StateError::Io { path: dir, source }),
        };
        let mut index = Index::default();
        for e in entries.filter_map(Result::ok) {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(id) = layout::parse_dataset_dir_name(&name) else {
                continue;
            };
            match read_state::<Summary>(&Summary::path(prefix, id), "summary") {
                Ok(sum) if sum.id == id => {
                    let failed =
                        match read_state::<String>(&FailedNote::path(prefix, id), FailedNote::KIND)
                        {
                            Ok(why) => Some(why),
                            Err(e) if e.is_not_found() => None,
                            // an unreadable note still says something went wrong with it
                            Err(e) => Some(format!("marked failed; the note is unreadable: {e}")),
                        };
                    index.datasets.insert(
                        id,
                        IndexEntry {
                            id,
                            name: sum.name,
                            checkpoint_id: sum.checkpoint_id,
                            output: sum.checkpoint_id.is_none(),
                            dir: name,
                            world_size: sum.world_size,
                            complete: sum.complete,
                            failed,
                            ..IndexEntry::default()
                        },
                    );
                }
                Ok(_) => tracing::warn!(
                    "{}: summary of another dataset; skipped",
                    Summary::path(prefix, id).display()
                ),
                Err(e) if e.is_not_found() => {}
                Err(e) => tracing::warn!("{e}; skipped"),
            }
        }
        Ok(index)
    }

    /// Read, change and write it back atomically, serialized with every other update of
    /// the prefix's state, in this process or another ([`PrefixLock`]).
    pub fn update<T>(prefix: &Path, change: impl FnOnce(&mut Index) -> T) -> Result<T, StateError> {
        Self::try_update(prefix, |ix| Ok::<T, std::convert::Infallible>(change(ix)))
            .map(|r| r.unwrap_or_else(|never| match never {}))
    }

    /// Like [`Index::update`], but `change` may refuse: then nothing is written and its
    /// error is returned inside `Ok`. For decisions that must be made on the index as it
    /// is under the lock (an admin command checking a name, choosing what to drop), not
    /// on a copy read earlier that a job's flush may have changed since.
    pub fn try_update<T, E>(
        prefix: &Path,
        change: impl FnOnce(&mut Index) -> Result<T, E>,
    ) -> Result<Result<T, E>, StateError> {
        let _g = PrefixLock::take(prefix)?;
        // a damaged index is repaired by the next update; the damaged file is kept
        // beside it (index.scr.damaged) for whoever wants to look
        let damaged = matches!(Self::load(prefix), Err(StateError::Corrupt { .. }));
        let mut index = Self::load_or_rebuild(prefix)?;
        let out = match change(&mut index) {
            Ok(out) => out,
            Err(refused) => return Ok(Err(refused)),
        };
        if damaged {
            // a second name for the damaged bytes (a link needs no space on a full
            // prefix); the write below replaces index.scr atomically, so until it
            // succeeds readers still find the damaged file and rebuild from summaries,
            // never an absent, empty index
            let kept = Self::path(prefix).with_extension("scr.damaged");
            let _ = std::fs::remove_file(&kept);
            let _ = std::fs::hard_link(Self::path(prefix), &kept);
        }
        std::fs::create_dir_all(scr_dir(prefix)).map_err(|source| StateError::Io {
            path: scr_dir(prefix),
            source,
        })?;
        write_state(&Self::path(prefix), "index", &index).map_err(|source| StateError::Io {
            path: Self::path(prefix),
            source,
        })?;
        Ok(Ok(out))
    }

    /// Mark dataset `id` as not to be used (a fetch that failed), in the index and in a
    /// note beside its summary (`failed.scr`), so that an index rebuilt from the
    /// summaries keeps the mark: without it a rebuild would offer a checkpoint known to
    /// be bad as the restart point again.
    pub fn mark_failed(prefix: &Path, id: u64, reason: &str) -> Result<(), StateError> {
        Self::try_update(prefix, |ix| ix.mark_failed_here(prefix, id, reason))?
    }

    /// [`Index::mark_failed`] only when the index lists dataset `id` under `name` (a
    /// checkpoint that was flushed or fetched; one only ever cached has no entry and gets
    /// no note), checked under the same lock as the edit. Returns whether it marked it.
    pub fn mark_failed_if_held(
        prefix: &Path,
        id: u64,
        name: &str,
        reason: &str,
    ) -> Result<bool, StateError> {
        // no index, nothing held: the prefix is left untouched (not even locked)
        if !Self::path(prefix).exists() {
            return Ok(false);
        }
        let marked = Self::try_update(prefix, |ix| {
            if ix.datasets.get(&id).is_none_or(|e| e.name != name) {
                // refused inside the update: the index is not written again
                return Err(None);
            }
            ix.mark_failed_here(prefix, id, reason).map_err(Some)
        })?;
        match marked {
            Ok(()) => Ok(true),
            Err(None) => Ok(false),
            Err(Some(e)) => Err(e),
        }
    }

    fn mark_failed_here(&mut self, prefix: &Path, id: u64, reason: &str) -> Result<(), StateError> {
        // the note first: an index rebuilt between the two steps must keep the mark
        write(&FailedNote::path(prefix, id), FailedNote::KIND, &reason)?;
        if let Some(e) = self.datasets.get_mut(&id) {
            e.failed = Some(reason.to_string());
        }
        Ok(())
    }

    /// The checkpoint a restart would fetch, for a job of any size: `current` when it
    /// names a complete checkpoint not marked failed, else the newest such one.
    pub fn restart_point(&self) -> Option<String> {
        let usable =
            |e: &&IndexEntry| e.complete && e.checkpoint_id.is_some() && e.failed.is_none();
        self.current
            .clone()
            .filter(|c| self.datasets.values().filter(usable).any(|e| &e.name == c))
            .or_else(|| {
                self.datasets
                    .values()
                    .filter(usable)
                    .max_by_key(|e| e.checkpoint_id)
                    .map(|e| e.name.clone())
            })
    }

    /// Make `entry` (just recorded complete) the restart point, as SCR does for the
    /// newest flushed checkpoint, replacing one pinned with `scr index current` — unless
    /// a newer complete checkpoint is recorded already (background flushes may be
    /// recorded out of order, and a scavenged dataset may be older than a flushed one):
    /// an older one never takes the place of a newer one. Returns whether it did.
    pub fn make_current_if_newest(&mut self, entry: &IndexEntry) -> bool {
        let Some(c) = entry.checkpoint_id else {
            return false;
        };
        let newer_recorded = self.datasets.values().any(|d| {
            d.id != entry.id
                && d.complete
                && d.failed.is_none()
                && d.checkpoint_id.is_some_and(|x| x > c)
        });
        if !newer_recorded {
            self.current = Some(entry.name.clone());
        }
        !newer_recorded
    }

    /// Complete checkpoints that may be fetched, newest first (`current` first when set),
    /// for a job of `world_size` ranks.
    pub fn fetch_candidates(&self, world_size: u32) -> Vec<&IndexEntry> {
        let mut v: Vec<&IndexEntry> = self
            .datasets
            .values()
            .filter(|e| {
                e.complete
                    && e.checkpoint_id.is_some()
                    && e.failed.is_none()
                    && e.world_size == world_size
            })
            .collect();
        v.sort_by_key(|e| std::cmp::Reverse(e.checkpoint_id));
        if let Some(cur) = &self.current {
            if let Some(pos) = v.iter().position(|e| &e.name == cur) {
                let e = v.remove(pos);
                v.insert(0, e);
            }
        }
        v
    }
}

impl Rank2File {
    /// The rank2file map of dataset `id`: its root (or, written by an earlier release,
    /// the whole map).
    pub fn path(prefix: &Path, id: u64) -> PathBuf {
        layout::rank2file_file(prefix, id)
    }

    /// Read the whole map, every part of it (for the offline tools; a job's leader
    /// reads only its own block's part, see [`Rank2FilePart::load`]): the root, then
    /// part `n` for each of its `parts` by its computed name. Per call: every part read,
    /// O(P) bytes — offline tools only. A part that is missing, damaged, of another
    /// dataset or block, or listing other ranks is refused naming the file; parts whose
    /// totals do not add up to the root's are refused naming the root.
    pub fn load(prefix: &Path, id: u64) -> Result<Rank2File, StateError> {
        match Rank2FileMap::load(prefix, id)? {
            Rank2FileMap::Single(map) => Ok(map),
            Rank2FileMap::Tree(root) => {
                root.check(prefix, id)?;
                let blocks = root.blocks();
                let mut ranks = BTreeMap::new();
                let (mut files, mut bytes) = (0u64, 0u64);
                for n in 0..root.parts {
                    let part = Rank2FilePart::load(prefix, id, blocks, n)?;
                    files = files.saturating_add(part.files);
                    bytes = bytes.saturating_add(part.bytes);
                    ranks.extend(part.ranks);
                }
                root.check_totals(prefix, id, files, bytes)?;
                Ok(Rank2File { ranks })
            }
        }
    }

    /// Write this whole map as a tree of parts of `block` ranks over `world_size` ranks
    /// (one process holding every list: scavenge), parts first, the root last; the root
    /// written.
    pub fn write(
        &self,
        prefix: &Path,
        id: u64,
        world_size: u32,
        block: u32,
    ) -> Result<Rank2FileRoot, StateError> {
        let blocks = Blocks::new(world_size, block);
        let (mut files, mut bytes) = (0u64, 0u64);
        for n in 0..blocks.count() {
            let ranks = blocks
                .members(n)
                .map(|r| (r, self.ranks.get(&r).cloned().unwrap_or_default()))
                .collect();
            let part = Rank2FilePart::new(id, blocks, n, ranks);
            part.write(prefix)?;
            files += part.files;
            bytes += part.bytes;
        }
        let root = Rank2FileRoot::new(blocks, files, bytes);
        root.write(prefix, id)?;
        Ok(root)
    }

    /// Remove dataset `id`'s map: the root and every part (a flush that failed or could
    /// not be recorded).
    pub fn remove(prefix: &Path, id: u64) {
        let _ = std::fs::remove_file(Self::path(prefix, id));
        if let Ok(dir) = std::fs::read_dir(dataset_dir(prefix, id)) {
            for e in dir.flatten() {
                let name = e.file_name();
                let name = name.to_string_lossy();
                if name.starts_with("rank2file.") && name.ends_with(".scr") {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
    }
}

impl Rank2FileMap {
    /// Read dataset `id`'s root: a tree's root or a single-file map. A root of the
    /// unreleased format that listed its parts is refused, saying so.
    pub fn load(prefix: &Path, id: u64) -> Result<Rank2FileMap, StateError> {
        let path = Rank2File::path(prefix, id);
        match crate::state::state_kind(&path)?.as_str() {
            SINGLE_KIND => read_state(&path, SINGLE_KIND).map(Rank2FileMap::Single),
            LISTING_ROOT_KIND => Err(StateError::Corrupt {
                path,
                why: format!(
                    "a `{LISTING_ROOT_KIND}` root (a development format listing every part, never released), this release reads `{ROOT_KIND}` roots; flush the dataset again or drop it (`scr index drop`)"
                ),
            }),
            _ => read_state(&path, ROOT_KIND).map(Rank2FileMap::Tree),
        }
    }
}

impl Rank2FileRoot {
    /// The root of the parts written for `blocks`, holding `files` files of `bytes`
    /// bytes in all.
    pub fn new(blocks: Blocks, files: u64, bytes: u64) -> Rank2FileRoot {
        Rank2FileRoot {
            ranks: blocks.ranks,
            block: blocks.block,
            parts: blocks.count(),
            files,
            bytes,
        }
    }

    /// The layout it was written with.
    pub fn blocks(&self) -> Blocks {
        Blocks::new(self.ranks, self.block)
    }

    /// Write it as dataset `id`'s root (after every part).
    pub fn write(&self, prefix: &Path, id: u64) -> Result<(), StateError> {
        write(&Rank2File::path(prefix, id), ROOT_KIND, self)
    }

    /// `Err` unless its part count is the one its layout needs (a damaged or forged root
    /// must not send readers to parts that do not exist, or leave some unread).
    pub fn check(&self, prefix: &Path, id: u64) -> Result<(), StateError> {
        let corrupt = |why: String| StateError::Corrupt {
            path: Rank2File::path(prefix, id),
            why,
        };
        if self.block == 0 {
            return Err(corrupt("block size 0".into()));
        }
        let need = self.blocks().count();
        if self.parts != need {
            return Err(corrupt(format!(
                "records {} part(s), {} ranks in blocks of {} need {need}",
                self.parts, self.ranks, self.block
            )));
        }
        Ok(())
    }

    /// `Err` naming the root unless `files` and `bytes`, the sums of every part's
    /// totals, are the root's: a part missing from the sums or one of other contents
    /// (another flush's) shows here.
    pub fn check_totals(
        &self,
        prefix: &Path,
        id: u64,
        files: u64,
        bytes: u64,
    ) -> Result<(), StateError> {
        if (files, bytes) == (self.files, self.bytes) {
            return Ok(());
        }
        Err(StateError::Corrupt {
            path: Rank2File::path(prefix, id),
            why: format!(
                "records {} file(s) of {} bytes, its {} part(s) list {files} file(s) of {bytes} bytes (a part is missing or not this flush's)",
                self.files, self.bytes, self.parts
            ),
        })
    }
}

impl Rank2FilePart {
    /// The file name of part `n` (relative to the dataset's directory).
    pub fn name(n: u32) -> String {
        layout::rank2file_part_name(n)
    }

    /// The file of part `n` of dataset `id`.
    pub fn path(prefix: &Path, id: u64, n: u32) -> PathBuf {
        layout::rank2file_part_file(prefix, id, n)
    }

    /// Part `n` of `blocks` for dataset `id`, holding `ranks` (the block's lists), with
    /// its totals.
    pub fn new(
        id: u64,
        blocks: Blocks,
        n: u32,
        ranks: BTreeMap<u32, Vec<FlushedFile>>,
    ) -> Rank2FilePart {
        let members = blocks.members(n);
        Rank2FilePart {
            dataset: id,
            index: n,
            block: blocks.block,
            first: members.start,
            count: members.len() as u32,
            files: ranks.values().map(|v| v.len() as u64).sum(),
            bytes: ranks.values().flatten().map(|f| f.size).sum(),
            ranks,
        }
    }

    /// Write it (atomically) as `rank2file.<index>.scr` of its dataset.
    pub fn write(&self, prefix: &Path) -> Result<(), StateError> {
        write(
            &Self::path(prefix, self.dataset, self.index),
            PART_KIND,
            self,
        )
    }

    /// Read part `n` of dataset `id` written in `blocks` (the layout its root records)
    /// and check that it says it is that part — of dataset `id`, block `n` of blocks of
    /// that size, listing exactly that block's ranks, with totals that are its lists' —
    /// so a part of another dataset or block in its place is refused; the error names
    /// the file. A block leader calls it knowing only the root's layout.
    pub fn load(
        prefix: &Path,
        id: u64,
        blocks: Blocks,
        n: u32,
    ) -> Result<Rank2FilePart, StateError> {
        let path = Self::path(prefix, id, n);
        let part: Rank2FilePart = read_state(&path, PART_KIND)?;
        let corrupt = |why: String| StateError::Corrupt {
            path: path.clone(),
            why,
        };
        if part.dataset != id {
            return Err(corrupt(format!(
                "is a part of dataset {}, not of dataset {id}",
                part.dataset
            )));
        }
        if (part.index, part.block) != (n, blocks.block) {
            return Err(corrupt(format!(
                "is part {} of blocks of {} ranks, expected part {n} of blocks of {}",
                part.index, part.block, blocks.block
            )));
        }
        let want = blocks.members(n);
        if part.first != want.start
            || part.count as usize != want.len()
            || !part.ranks.keys().copied().eq(want.clone())
        {
            return Err(corrupt(format!(
                "lists ranks {:?} (records {}..{}), expected {}..{}",
                part.ranks.keys().collect::<Vec<_>>(),
                part.first,
                u64::from(part.first) + u64::from(part.count),
                want.start,
                want.end
            )));
        }
        let files = part.ranks.values().map(|v| v.len() as u64).sum::<u64>();
        let bytes = part
            .ranks
            .values()
            .flatten()
            .fold(0u64, |a, f| a.saturating_add(f.size));
        if (files, bytes) != (part.files, part.bytes) {
            return Err(corrupt(format!(
                "records {} file(s) of {} bytes, its lists hold {files} of {bytes}",
                part.files, part.bytes
            )));
        }
        Ok(part)
    }
}

/// The note that dataset `id` must not be used (`failed.scr` beside its summary), kept
/// so that [`Index::rebuild`] restores the index's `failed` mark: a state file holding
/// the reason.
pub struct FailedNote;

impl FailedNote {
    /// State-file kind.
    pub const KIND: &'static str = "failed";

    /// The note of dataset `id`.
    pub fn path(prefix: &Path, id: u64) -> PathBuf {
        layout::failed_note_file(prefix, id)
    }
}

impl Summary {
    /// The summary of dataset `id`.
    pub fn path(prefix: &Path, id: u64) -> PathBuf {
        layout::summary_file(prefix, id)
    }
}

impl FlushFile {
    /// The flush file.
    pub fn path(prefix: &Path) -> PathBuf {
        layout::flush_file(prefix)
    }

    /// Read it (absent: empty).
    pub fn load(prefix: &Path) -> Result<FlushFile, StateError> {
        load_or_default(&Self::path(prefix), "flush")
    }

    /// Record that dataset `id` is (also) at `location`.
    pub fn add_location(prefix: &Path, id: u64, location: &str) -> Result<(), StateError> {
        let _g = PrefixLock::take(prefix)?;
        let mut f = Self::load(prefix)?;
        f.add(id, location);
        f.save(prefix)
    }

    /// Make the file say that exactly the datasets `cached` are in cache (SCR's
    /// `scr_flush_file_rebuild`, called by init once the cache is restored): CACHE is
    /// added to each of them and taken off every other dataset, an entry left with no
    /// location is removed, PFS is kept. Without it, CACHE entries of caches that are
    /// gone (a new allocation, lost nodes, a dataset dropped at rebuild) would stay, and
    /// `scr flush-file need-flush` would ask for flushes of data that no longer exists.
    ///
    /// A damaged file is replaced (its PFS entries are lost with it; the index still
    /// lists what was flushed); one of another format version is left alone (error).
    /// Written (atomically, under the prefix lock) only when it changes.
    pub fn rebuild(prefix: &Path, cached: &BTreeSet<u64>) -> Result<(), StateError> {
        let _g = PrefixLock::take(prefix)?;
        let before = match Self::load(prefix) {
            Err(e @ StateError::Corrupt { .. }) if !e.is_other_version() => {
                tracing::warn!("{e}; rewriting the flush file from what the cache holds");
                None
            }
            other => Some(other?),
        };
        let mut f = before.clone().unwrap_or_default();
        f.datasets.retain(|id, (at, _)| {
            if !cached.contains(id) {
                at.retain(|l| l != CACHE);
            }
            !at.is_empty()
        });
        for &id in cached {
            f.add(id, CACHE);
        }
        if before.as_ref() == Some(&f) {
            return Ok(());
        }
        f.save(prefix)
    }

    /// Add `location` to dataset `id`'s entry (made when absent).
    fn add(&mut self, id: u64, location: &str) {
        let entry = self
            .datasets
            .entry(id)
            .or_insert_with(|| (Vec::new(), layout::dataset_dir_name(id)));
        if !entry.0.iter().any(|l| l == location) {
            entry.0.push(location.to_string());
            entry.0.sort();
        }
    }

    /// Replace the file with this one (atomically).
    fn save(&self, prefix: &Path) -> Result<(), StateError> {
        write_state(&Self::path(prefix), "flush", self).map_err(|source| StateError::Io {
            path: Self::path(prefix),
            source,
        })
    }
}

impl FlushFile {
    /// Record that dataset `id` is no longer at `location`.
    pub fn remove_location(prefix: &Path, id: u64, location: &str) -> Result<(), StateError> {
        let _g = PrefixLock::take(prefix)?;
        let mut f = Self::load(prefix)?;
        let Some(entry) = f.datasets.get_mut(&id) else {
            return Ok(());
        };
        entry.0.retain(|l| l != location);
        if entry.0.is_empty() {
            f.datasets.remove(&id);
        }
        f.save(prefix)
    }
}

/// Write a state file under a prefix, creating its directory.
pub fn write(path: &Path, kind: &str, value: &impl Serialize) -> Result<(), StateError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|source| StateError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    write_state(path, kind, value).map_err(|source| StateError::Io {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests;
