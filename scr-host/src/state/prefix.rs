//! What the prefix directory holds about datasets (the Files chapter): the index
//! (`.scr/index.scr`), the flush file (`.scr/flush.scr`), and per dataset a directory
//! `.scr/scr.dataset.<id>/` with its summary and rank2file map. All are state files:
//! versioned, checksummed, replaced atomically.
//!
//! The index, the per-dataset summaries and failure notes are here; the rank2file map in
//! `rank2file`, the flush file in `flush_file`, the lock every update takes in `lock`,
//! and the administrator's edits of the index in `edit`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::layout;
use crate::state::{read_state, write_state, StateError};

mod edit;
mod flush_file;
mod lock;
mod rank2file;
pub use edit::Dropped;
pub use edit::EditError;
pub use flush_file::{FlushFile, CACHE, PFS};
pub use lock::PrefixLock;
pub use rank2file::{
    check_relative, relocated, Blocks, FlushedFile, OutsidePrefix, Rank2File, Rank2FileMap,
    Rank2FilePart, Rank2FileRoot, LISTING_ROOT_KIND, PART_KIND, RANK2FILE_BLOCK, ROOT_KIND,
    SINGLE_KIND,
};

/// Who made a dataset, in which job, on which cluster and when (SCR's USER, JOBID,
/// CLUSTER and CREATED): what an operator looks for in `scr index list`. Recorded in the
/// index and in the dataset's summary, so an index rebuilt from the summaries keeps it.
/// Each part is unknown (`None`) in datasets recorded by earlier releases.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// The user whose job wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The job id of that job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// The cluster it ran on (`cluster_name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// When the application started writing it (`start_output`; seconds since the
    /// epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<i64>,
}

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
    /// Who made it, where and when.
    #[serde(default, flatten)]
    pub made: Provenance,
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
    /// The job's name (`job_name`), when one was set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_name: Option<String>,
    /// Who made it, where and when.
    #[serde(default, flatten)]
    pub made: Provenance,
}

/// The `.scr` directory of a prefix.
pub(crate) fn scr_dir(prefix: &Path) -> PathBuf {
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
                            job_name: sum.job_name,
                            made: sum.made,
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
    pub(crate) fn mark_failed_if_held(
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
    pub(crate) fn make_current_if_newest(&mut self, entry: &IndexEntry) -> bool {
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

    /// Complete checkpoints a job may restart from, newest first (`current` first when
    /// set), whatever number of ranks wrote them: a job of another size reads them in
    /// place.
    pub fn restart_candidates(&self) -> Vec<&IndexEntry> {
        let mut v: Vec<&IndexEntry> = self
            .datasets
            .values()
            .filter(|e| e.complete && e.checkpoint_id.is_some() && e.failed.is_none())
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
