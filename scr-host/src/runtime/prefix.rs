//! What the prefix directory holds about datasets (the Files chapter): the index
//! (`.scr/index.scr`), the flush file (`.scr/flush.scr`), and per dataset a directory
//! `.scr/scr.dataset.<id>/` with its summary and rank2file map. All are state files:
//! versioned, checksummed, replaced atomically.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::state::{read_state, write_state, StateError};

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
        scr_dir(prefix).join("lock")
    }

    /// Take the lock (an advisory `flock`), waiting up to a minute; the error names the
    /// holder.
    pub fn take(prefix: &Path) -> Result<PrefixLock, StateError> {
        use std::io::{Read, Seek, Write};
        let in_process = INDEX_LOCK.lock().unwrap_or_else(|e| e.into_inner());
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
                        eprintln!(
                            "scr-rs: warning: {}: no file locking on this file system ({e}); updates of the prefix's index from other processes (scr index, another job) are not serialized with this job's",
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
    format!(".scr/scr.dataset.{id}/files/{name}")
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
/// `rank2file.scr` ([`Rank2FileRoot`], kind `rank2file-root`), which lists each part
/// with the CRC32 of its contents, so a part swapped for another intact one (another
/// dataset's, an older flush's) is refused as surely as a damaged one. Both levels are
/// state files (atomic, checksummed). The root records the block size: a map is read
/// with the layout it was written with, whatever the reader's configuration.
///
/// A single-file map (kind `rank2file`, this struct itself) is what releases before the
/// tree wrote; it is still read, so a prefix flushed before an upgrade restarts.
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

/// One part of a rank2file map as its root lists it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartRef {
    /// The part's file, relative to the dataset's directory (`rank2file.<n>.scr`).
    pub file: String,
    /// Its first rank.
    pub first: u32,
    /// How many ranks it lists.
    pub count: u32,
    /// Files it lists in all.
    pub files: u64,
    /// Bytes of those files.
    pub bytes: u64,
    /// CRC32 of its contents (the one its state-file header carries).
    pub crc32: u32,
}

/// The root of a rank2file map (`rank2file.scr`): the parts, in rank order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rank2FileRoot {
    /// Ranks the map covers (the world size that wrote it).
    pub ranks: u32,
    /// Ranks per part ([`Blocks`]).
    pub block: u32,
    /// Files in all.
    pub files: u64,
    /// Bytes in all.
    pub bytes: u64,
    /// Part `n` lists block `n`.
    pub parts: Vec<PartRef>,
}

/// One part of a rank2file map (`rank2file.<n>.scr`): the lists of the ranks of one
/// block.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rank2FilePart {
    /// Files by rank (exactly the block's ranks, each possibly with no file).
    pub ranks: BTreeMap<u32, Vec<FlushedFile>>,
}

/// A rank2file map's root as found on disk: the tree's root, or a single-file map of
/// an earlier release.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rank2FileMap {
    /// The root of a tree (read the parts it lists).
    Tree(Rank2FileRoot),
    /// A whole map in one file (written before the tree).
    Single(Rank2File),
}

/// State-file kind of a rank2file root.
pub const ROOT_KIND: &str = "rank2file-root";
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

/// Where a dataset is (`flush.scr`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlushFile {
    /// Locations (`CACHE`, `PFS`) and directory by dataset id.
    pub datasets: BTreeMap<u64, (Vec<String>, String)>,
}

/// The `.scr` directory of a prefix.
pub fn scr_dir(prefix: &Path) -> PathBuf {
    prefix.join(".scr")
}

/// The directory of dataset `id` under `.scr`.
pub fn dataset_dir(prefix: &Path, id: u64) -> PathBuf {
    scr_dir(prefix).join(format!("scr.dataset.{id}"))
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
        scr_dir(prefix).join("index.scr")
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
                eprintln!(
                    "scr-rs: warning: {damaged}; rebuilt from {} dataset summaries",
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
            let Some(id) = name
                .strip_prefix("scr.dataset.")
                .and_then(|n| n.parse::<u64>().ok())
            else {
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
                Ok(_) => eprintln!(
                    "scr-rs: warning: {}: summary of another dataset; skipped",
                    Summary::path(prefix, id).display()
                ),
                Err(e) if e.is_not_found() => {}
                Err(e) => eprintln!("scr-rs: warning: {e}; skipped"),
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
        Self::try_update(prefix, |ix| {
            // the note first: an index rebuilt between the two steps must keep the mark
            write(&FailedNote::path(prefix, id), FailedNote::KIND, &reason)?;
            if let Some(e) = ix.datasets.get_mut(&id) {
                e.failed = Some(reason.to_string());
            }
            Ok(())
        })?
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
        dataset_dir(prefix, id).join("rank2file.scr")
    }

    /// Read the whole map, every part of it (for the offline tools; a job reads only its
    /// own block's part, see [`Rank2FileRoot::load_part`]). Per call: every part read,
    /// O(P) bytes — offline tools only. A part that is missing,
    /// damaged, not the one the root lists, or listing other ranks is refused, naming
    /// the file.
    pub fn load(prefix: &Path, id: u64) -> Result<Rank2File, StateError> {
        match Rank2FileMap::load(prefix, id)? {
            Rank2FileMap::Single(map) => Ok(map),
            Rank2FileMap::Tree(root) => {
                root.check(prefix, id)?;
                let mut ranks = BTreeMap::new();
                for part in &root.parts {
                    ranks.extend(Rank2FileRoot::load_part(prefix, id, part)?);
                }
                Ok(Rank2File { ranks })
            }
        }
    }

    /// Write this whole map as a tree of parts of `block` ranks over `world_size` ranks
    /// (rank 0 holding every list: scavenge, a finisher reading markers), parts first,
    /// the root last; the root written.
    pub fn write(
        &self,
        prefix: &Path,
        id: u64,
        world_size: u32,
        block: u32,
    ) -> Result<Rank2FileRoot, StateError> {
        let blocks = Blocks::new(world_size, block);
        let mut parts = Vec::with_capacity(blocks.count() as usize);
        for n in 0..blocks.count() {
            let ranks = blocks
                .members(n)
                .map(|r| (r, self.ranks.get(&r).cloned().unwrap_or_default()))
                .collect();
            parts.push(Rank2FilePart::write(prefix, id, blocks, n, ranks)?);
        }
        let root = Rank2FileRoot::new(blocks, parts);
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
    /// Read dataset `id`'s root: a tree's root or a single-file map.
    pub fn load(prefix: &Path, id: u64) -> Result<Rank2FileMap, StateError> {
        let path = Rank2File::path(prefix, id);
        match crate::state::state_kind(&path)?.as_str() {
            SINGLE_KIND => read_state(&path, SINGLE_KIND).map(Rank2FileMap::Single),
            _ => read_state(&path, ROOT_KIND).map(Rank2FileMap::Tree),
        }
    }
}

impl Rank2FileRoot {
    /// The root of parts written for `blocks` (in block order).
    pub fn new(blocks: Blocks, parts: Vec<PartRef>) -> Rank2FileRoot {
        Rank2FileRoot {
            ranks: blocks.ranks,
            block: blocks.block,
            files: parts.iter().map(|p| p.files).sum(),
            bytes: parts.iter().map(|p| p.bytes).sum(),
            parts,
        }
    }

    /// The layout it was written with.
    pub fn blocks(&self) -> Blocks {
        Blocks::new(self.ranks, self.block)
    }

    /// Write it as dataset `id`'s root (after every part it lists).
    pub fn write(&self, prefix: &Path, id: u64) -> Result<(), StateError> {
        write(&Rank2File::path(prefix, id), ROOT_KIND, self)
    }

    /// `Err` unless it lists exactly the parts of its layout, each under its own name
    /// (a damaged or forged root must not send a reader to another file).
    pub fn check(&self, prefix: &Path, id: u64) -> Result<(), StateError> {
        let corrupt = |why: String| StateError::Corrupt {
            path: Rank2File::path(prefix, id),
            why,
        };
        if self.block == 0 {
            return Err(corrupt("block size 0".into()));
        }
        let blocks = self.blocks();
        if self.parts.len() != blocks.count() as usize {
            return Err(corrupt(format!(
                "lists {} part(s), {} ranks in blocks of {} need {}",
                self.parts.len(),
                self.ranks,
                self.block,
                blocks.count()
            )));
        }
        for (n, p) in (0u32..).zip(&self.parts) {
            let want = blocks.members(n);
            if p.file != Rank2FilePart::name(n)
                || p.first != want.start
                || p.count != want.len() as u32
            {
                return Err(corrupt(format!(
                    "part {n} is `{}` for ranks {}..{}, expected `{}` for ranks {}..{}",
                    p.file,
                    p.first,
                    u64::from(p.first) + u64::from(p.count),
                    Rank2FilePart::name(n),
                    want.start,
                    want.end
                )));
            }
        }
        Ok(())
    }

    /// Read the part `part` of dataset `id` (one block's lists) and check that it is
    /// the one the root lists (CRC32) and lists exactly its ranks; the error names the
    /// file. A block leader calls it with the reference rank 0 sent it, without reading
    /// the root.
    pub fn load_part(
        prefix: &Path,
        id: u64,
        part: &PartRef,
    ) -> Result<BTreeMap<u32, Vec<FlushedFile>>, StateError> {
        let path = dataset_dir(prefix, id).join(&part.file);
        check_relative(&part.file).map_err(|why| StateError::Corrupt {
            path: Rank2File::path(prefix, id),
            why,
        })?;
        let (body, crc) = crate::state::read_state_crc::<Rank2FilePart>(&path, PART_KIND)?;
        let corrupt = |why: String| StateError::Corrupt {
            path: path.clone(),
            why,
        };
        if crc != part.crc32 {
            return Err(corrupt(format!(
                "not the part {} lists (CRC32 {crc:08x}, the root records {:08x})",
                Rank2File::path(prefix, id).display(),
                part.crc32
            )));
        }
        let want = part.first..part.first.saturating_add(part.count);
        if !body.ranks.keys().copied().eq(want.clone()) {
            return Err(corrupt(format!(
                "lists ranks {:?}, expected {}..{}",
                body.ranks.keys().collect::<Vec<_>>(),
                want.start,
                want.end
            )));
        }
        Ok(body.ranks)
    }
}

impl Rank2FilePart {
    /// The file name of part `n` (relative to the dataset's directory).
    pub fn name(n: u32) -> String {
        format!("rank2file.{n}.scr")
    }

    /// Write part `n` of `blocks` for dataset `id` holding `ranks` (the block's lists),
    /// atomically; what the root must say of it.
    pub fn write(
        prefix: &Path,
        id: u64,
        blocks: Blocks,
        n: u32,
        ranks: BTreeMap<u32, Vec<FlushedFile>>,
    ) -> Result<PartRef, StateError> {
        let members = blocks.members(n);
        let path = dataset_dir(prefix, id).join(Self::name(n));
        let io = |source| StateError::Io {
            path: path.clone(),
            source,
        };
        let part = Rank2FilePart { ranks };
        let (bytes, crc32) = crate::state::state_bytes_crc(PART_KIND, &part).map_err(io)?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| StateError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        crate::state::write_atomic(&path, &bytes).map_err(io)?;
        Ok(PartRef {
            file: Self::name(n),
            first: members.start,
            count: members.len() as u32,
            files: part.ranks.values().map(|v| v.len() as u64).sum(),
            bytes: part.ranks.values().flatten().map(|f| f.size).sum(),
            crc32,
        })
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
        dataset_dir(prefix, id).join("failed.scr")
    }
}

impl Summary {
    /// The summary of dataset `id`.
    pub fn path(prefix: &Path, id: u64) -> PathBuf {
        dataset_dir(prefix, id).join("summary.scr")
    }
}

impl FlushFile {
    /// The flush file.
    pub fn path(prefix: &Path) -> PathBuf {
        scr_dir(prefix).join("flush.scr")
    }

    /// Read it (absent: empty).
    pub fn load(prefix: &Path) -> Result<FlushFile, StateError> {
        load_or_default(&Self::path(prefix), "flush")
    }

    /// Record that dataset `id` is (also) at `location`.
    pub fn add_location(prefix: &Path, id: u64, location: &str) -> Result<(), StateError> {
        let _g = PrefixLock::take(prefix)?;
        let mut f = Self::load(prefix)?;
        let entry = f
            .datasets
            .entry(id)
            .or_insert_with(|| (Vec::new(), format!("scr.dataset.{id}")));
        if !entry.0.iter().any(|l| l == location) {
            entry.0.push(location.to_string());
            entry.0.sort();
        }
        write_state(&Self::path(prefix), "flush", &f).map_err(|source| StateError::Io {
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
        write_state(&Self::path(prefix), "flush", &f).map_err(|source| StateError::Io {
            path: Self::path(prefix),
            source,
        })
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
mod tests {
    use super::*;

    /// Rank `r` of `ranks` with `r % 3` files (rank 0, 3, 6: none).
    fn map(ranks: u32) -> Rank2File {
        Rank2File {
            ranks: (0..ranks)
                .map(|r| {
                    let files = (0..r % 3)
                        .map(|i| FlushedFile {
                            name: format!("ckpt.1/rank_{r}.{i}"),
                            size: u64::from(r * 10 + i),
                            crc32: Some(r),
                            stored: None,
                        })
                        .collect();
                    (r, files)
                })
                .collect(),
        }
    }

    #[test]
    fn blocks_cover_every_rank_once_with_an_uneven_last_block() {
        let b = Blocks::new(7, 3);
        assert_eq!(b.count(), 3);
        assert_eq!(
            (0..3).map(|n| b.members(n)).collect::<Vec<_>>(),
            [0..3, 3..6, 6..7]
        );
        assert_eq!(b.leaders().collect::<Vec<_>>(), [0, 3, 6]);
        assert_eq!(
            (0..7).map(|r| b.of(r)).collect::<Vec<_>>(),
            [0, 0, 0, 1, 1, 1, 2]
        );
        // a block larger than the job: one block; 0 is taken as 1
        assert_eq!(Blocks::new(4, 256).count(), 1);
        assert_eq!(Blocks::new(4, 0).count(), 4);
    }

    #[test]
    fn a_map_written_as_a_tree_reads_back_whole_with_totals_in_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let m = map(7);
        let root = m.write(dir.path(), 5, 7, 3).unwrap();
        assert_eq!((root.ranks, root.block, root.parts.len()), (7, 3, 3));
        assert_eq!(root.files, 6); // ranks 1, 4: one file; 2, 5: two
        assert_eq!(root.bytes, 10 + 20 + 21 + 40 + 50 + 51);
        assert_eq!(
            root.parts.iter().map(|p| p.files).collect::<Vec<_>>(),
            [3, 3, 0]
        );
        assert_eq!(Rank2File::load(dir.path(), 5).unwrap(), m);
        assert_eq!(
            Rank2FileMap::load(dir.path(), 5).unwrap(),
            Rank2FileMap::Tree(root.clone())
        );
        // one block's part, as a leader reads it
        let part = Rank2FileRoot::load_part(dir.path(), 5, &root.parts[2]).unwrap();
        assert_eq!(part, BTreeMap::from([(6, Vec::new())]));
        Rank2File::remove(dir.path(), 5);
        let left: Vec<_> = std::fs::read_dir(dataset_dir(dir.path(), 5))
            .unwrap()
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn a_missing_swapped_or_misplaced_part_is_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let root = map(7).write(dir.path(), 5, 7, 3).unwrap();
        let part1 = dataset_dir(dir.path(), 5).join("rank2file.1.scr");

        // another dataset's intact part 1 (other contents) in its place
        let mut other = map(7);
        other.ranks.get_mut(&4).unwrap()[0].size += 1;
        other.write(dir.path(), 6, 7, 3).unwrap();
        let good = std::fs::read(&part1).unwrap();
        std::fs::copy(dataset_dir(dir.path(), 6).join("rank2file.1.scr"), &part1).unwrap();
        let e = Rank2File::load(dir.path(), 5).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{}: not the part ", part1.display()))
                && e.contains(&format!("the root records {:08x}", root.parts[1].crc32)),
            "{e}"
        );

        // a part listing other ranks (its reference forged to match)
        let mut shifted = root.clone();
        shifted.parts[1].first = 2;
        std::fs::write(&part1, &good).unwrap();
        let e = Rank2FileRoot::load_part(dir.path(), 5, &shifted.parts[1])
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!(
                "{}: lists ranks [3, 4, 5], expected 2..5",
                part1.display()
            )),
            "{e}"
        );
        // and such a root is refused before any part is read
        let e = shifted.check(dir.path(), 5).unwrap_err().to_string();
        assert!(
            e.contains("rank2file.scr: part 1 is `rank2file.1.scr` for ranks 2..5, expected `rank2file.1.scr` for ranks 3..6"),
            "{e}"
        );

        // missing
        std::fs::remove_file(&part1).unwrap();
        let e = Rank2File::load(dir.path(), 5).unwrap_err();
        assert!(e.is_not_found(), "{e}");
        assert!(
            e.to_string().starts_with(&part1.display().to_string()),
            "{e}"
        );
    }

    #[test]
    fn a_single_file_map_of_an_earlier_release_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let m = map(4);
        write(&Rank2File::path(dir.path(), 2), SINGLE_KIND, &m).unwrap();
        assert_eq!(Rank2File::load(dir.path(), 2).unwrap(), m);
        assert_eq!(
            Rank2FileMap::load(dir.path(), 2).unwrap(),
            Rank2FileMap::Single(m)
        );
    }
}
