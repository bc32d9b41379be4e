//! Editing the index as an administrator does (`scr index drop`, `drop-after`,
//! `current NAME`, `clear-failed`, `rebuild`, and the check `scr index add` shares):
//! each change a method on [`Index`] that decides on the index it is given, and a
//! companion that applies it under the prefix lock ([`Index::try_update`]) — a copy read
//! before the lock may be stale by the time it is acted on (a job's flush recorded in
//! between). Here rather than in the `scr` command so every tool edits the index the
//! same way, and the rules are tested without running a process.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::{dataset_dir, FailedNote, Index, IndexEntry, Rank2File, Summary};
use crate::state::StateError;

/// Why an edit of the index is refused, or could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EditError {
    /// No dataset of that name (or id) is in the index.
    #[error("no dataset named `{0}` in the index (see `scr index list`)")]
    NoSuchDataset(String),
    /// Several datasets share the name: it must be given by id.
    #[error("several datasets are named `{name}` (ids {ids:?}); give the id instead")]
    SharedName {
        /// The name.
        name: String,
        /// The ids of the datasets of that name.
        ids: Vec<u64>,
    },
    /// The name is not a complete checkpoint that is not marked failed.
    #[error("`{0}` is not a complete checkpoint in the index (see `scr index list`)")]
    NotACheckpoint(String),
    /// The index holds the dataset complete and usable already.
    #[error("dataset {id} ({name}) is in the index already")]
    AlreadyIndexed {
        /// Its id.
        id: u64,
        /// Its name.
        name: String,
    },
    /// A file beside the index (a failed note) could not be removed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The index could not be read, locked or written.
    #[error("{0}")]
    State(#[from] StateError),
}

/// What dropping datasets removed from the index: their ids and names, and (when their
/// files are to be deleted too) the files to delete once the index no longer lists them.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Dropped {
    /// The dataset ids dropped.
    pub victims: Vec<u64>,
    /// Their names, in id order.
    pub names: Vec<String>,
    /// Their files in the prefix that no remaining dataset lists (empty without
    /// `delete`).
    pub files: Vec<PathBuf>,
}

impl Dropped {
    /// Delete the dropped datasets' files (and their directories once empty), calling
    /// `tick` after each file (there may be many: the `scr` command shows a bar), then
    /// their directories under `.scr`.
    pub fn delete_files(&self, prefix: &Path, tick: &mut dyn FnMut()) {
        for f in &self.files {
            let _ = std::fs::remove_file(f);
            if let Some(parent) = f.parent() {
                let _ = std::fs::remove_dir(parent);
            }
            tick();
        }
        for id in &self.victims {
            let _ = std::fs::remove_dir_all(dataset_dir(prefix, *id));
        }
    }
}

impl Index {
    /// The id of the dataset `name` names: by name, else by id; a name several datasets
    /// share (a rerun after a fetch writes them again) must be given by id.
    pub(crate) fn entry_named(&self, name: &str) -> Result<u64, EditError> {
        let by_name: Vec<u64> = self
            .datasets
            .values()
            .filter(|e| e.name == name)
            .map(|e| e.id)
            .collect();
        match (by_name.as_slice(), name.parse::<u64>()) {
            ([id], _) => Ok(*id),
            ([], Ok(id)) if self.datasets.contains_key(&id) => Ok(id),
            ([], _) => Err(EditError::NoSuchDataset(name.to_string())),
            (ids, _) => Err(EditError::SharedName {
                name: name.to_string(),
                ids: ids.to_vec(),
            }),
        }
    }

    /// Remove from the index the dataset `name` names (with `after`, every dataset newer
    /// than it instead), clearing `current` when it named one of them. With `delete`,
    /// the result lists their files in `prefix` (per rank2file, except paths a remaining
    /// dataset lists), to be deleted only once the index no longer lists them: a crash
    /// in between leaves files, never an index entry whose files are gone.
    pub fn drop_dataset(
        &mut self,
        prefix: &Path,
        name: &str,
        after: bool,
        delete: bool,
    ) -> Result<Dropped, EditError> {
        let anchor = self.entry_named(name)?;
        Ok(self.drop_from(prefix, anchor, after, delete))
    }

    /// [`Index::drop_dataset`] of the dataset `anchor` (an id).
    fn drop_from(&mut self, prefix: &Path, anchor: u64, after: bool, delete: bool) -> Dropped {
        let victims: Vec<u64> = self
            .datasets
            .keys()
            .copied()
            .filter(|&id| if after { id > anchor } else { id == anchor })
            .collect();
        self.drop_ids(prefix, victims, delete)
    }

    /// Remove the datasets `victims` from the index, clearing `current` when it named one
    /// of them; with `delete`, list their files (see [`Index::drop_dataset`]).
    fn drop_ids(&mut self, prefix: &Path, victims: Vec<u64>, delete: bool) -> Dropped {
        let files = if delete {
            self.files_to_delete(prefix, &victims)
        } else {
            Vec::new()
        };
        let names: Vec<String> = victims
            .iter()
            .filter_map(|id| self.datasets.get(id).map(|e| e.name.clone()))
            .collect();
        for id in &victims {
            self.datasets.remove(id);
        }
        if self.current.as_ref().is_some_and(|c| names.contains(c)) {
            self.current = None;
        }
        Dropped {
            victims,
            names,
            files,
        }
    }

    /// The entry an application's `SCR_Drop`/`SCR_Delete` of `name` means: the cached
    /// dataset's own (`cached`) when the index lists it under that name, else the newest
    /// of that name (a rerun may have flushed a second dataset of one name). Never by
    /// id: a dataset may be named like another's id.
    fn entry_for_app(&self, name: &str, cached: Option<u64>) -> Option<u64> {
        let named = |id: &u64| self.datasets.get(id).is_some_and(|e| e.name == name);
        cached.filter(named).or_else(|| {
            self.datasets
                .values()
                .filter(|e| e.name == name)
                .map(|e| e.id)
                .max()
        })
    }

    /// The files of the `victims`, per rank2file (where each was stored: a flush whose
    /// names clashed went under .scr), except paths a dataset that stays in the index
    /// still lists; a name that would leave the prefix (a damaged or forged map) is
    /// refused with a warning, never deleted.
    fn files_to_delete(&self, prefix: &Path, victims: &[u64]) -> Vec<PathBuf> {
        let paths_of = |id: &u64| -> Vec<PathBuf> {
            Rank2File::load(prefix, *id)
                .map(|m| {
                    m.ranks
                        .into_values()
                        .flatten()
                        .filter_map(|f| {
                            f.stored_path(prefix)
                                .map_err(|e| tracing::warn!(dataset = id, "{e}; not deleted"))
                                .ok()
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        let kept: BTreeSet<PathBuf> = self
            .datasets
            .keys()
            .filter(|id| !victims.contains(id))
            .flat_map(paths_of)
            .collect();
        victims
            .iter()
            .flat_map(paths_of)
            .filter(|p| !kept.contains(p))
            .collect()
    }

    /// Make complete checkpoint `name` (not marked failed) the restart point.
    pub fn set_current(&mut self, name: &str) -> Result<(), EditError> {
        let usable = |e: &IndexEntry| {
            e.name == name && e.complete && e.checkpoint_id.is_some() && e.failed.is_none()
        };
        if !self.datasets.values().any(usable) {
            return Err(EditError::NotACheckpoint(name.to_string()));
        }
        self.current = Some(name.to_string());
        Ok(())
    }

    /// Clear dataset `name`'s failed mark, in the index and the note beside its summary
    /// in `prefix` (or a rebuilt index would mark it again). Returns what the mark said,
    /// `None` when it had none.
    pub fn clear_failed(&mut self, prefix: &Path, name: &str) -> Result<Option<String>, EditError> {
        let Some(e) = self.datasets.values_mut().find(|e| e.name == name) else {
            return Err(EditError::NoSuchDataset(name.to_string()));
        };
        let was = e.failed.take();
        let note = FailedNote::path(prefix, e.id);
        match std::fs::remove_file(&note) {
            Err(source) if source.kind() != std::io::ErrorKind::NotFound => {
                Err(EditError::Io { path: note, source })
            }
            _ => Ok(was),
        }
    }

    /// `scr index drop[-after] NAME [--delete]` on `prefix`: [`Index::drop_dataset`]
    /// under the lock, then the dropped datasets' summaries removed (with or without
    /// `delete`): no summary may bring a dropped dataset back when a damaged index is
    /// rebuilt, and a delete interrupted halfway must leave none that a rebuilt index
    /// would take for a complete dataset. The files are left to [`Dropped::delete_files`].
    pub fn drop_in(
        prefix: &Path,
        name: &str,
        after: bool,
        delete: bool,
    ) -> Result<Dropped, EditError> {
        let dropped =
            Index::try_update(prefix, |ix| ix.drop_dataset(prefix, name, after, delete))??;
        Ok(Self::without_summaries(prefix, dropped))
    }

    /// The application's `SCR_Drop` (`delete` false) or `SCR_Delete` of `name` on
    /// `prefix`: the entry `entry_for_app` chooses, chosen and dropped under one
    /// lock, summaries removed as [`Index::drop_in`] does. `None` when the index holds no
    /// dataset of that name (not an error, as in SCR); a prefix without an index is left
    /// untouched, not even locked.
    pub(crate) fn drop_for_app_in(
        prefix: &Path,
        name: &str,
        cached: Option<u64>,
        delete: bool,
    ) -> Result<Option<Dropped>, StateError> {
        if !Self::path(prefix).exists() {
            return Ok(None);
        }
        let dropped = Index::try_update(prefix, |ix| {
            // none of that name: refused inside the update, so nothing is written
            let target = ix.entry_for_app(name, cached).ok_or(())?;
            Ok::<_, ()>(ix.drop_from(prefix, target, false, delete))
        })?;
        Ok(dropped
            .ok()
            .map(|dropped| Self::without_summaries(prefix, dropped)))
    }

    /// The checkpoints `prefix_size = window` deletes once checkpoint `newest` is
    /// recorded, as SCR's sliding window does: walking the complete checkpoints not
    /// marked failed that are older than `newest` (by dataset id), newest first, the
    /// first `window - 1` stay (`newest` is the window's first member); beyond them every
    /// one goes except a checkpoint also flagged output and the one `current` names.
    /// Incomplete or failed entries, outputs that are not checkpoints, and anything
    /// newer than `newest` are not considered.
    pub(crate) fn outside_window(&self, newest: u64, window: u64) -> Vec<u64> {
        let mut older: Vec<&IndexEntry> = self
            .datasets
            .values()
            .filter(|e| {
                e.id < newest && e.complete && e.failed.is_none() && e.checkpoint_id.is_some()
            })
            .collect();
        older.sort_by_key(|e| std::cmp::Reverse(e.id));
        let mut room = window.saturating_sub(1);
        let mut victims = Vec::new();
        for e in older {
            if room > 0 {
                room -= 1;
            } else if !e.output && self.current.as_deref() != Some(e.name.as_str()) {
                victims.push(e.id);
            }
        }
        victims.sort_unstable();
        victims
    }

    /// `prefix_size` after checkpoint `newest`'s flush was recorded: the checkpoints
    /// [`Index::outside_window`] names are dropped under the prefix lock, their
    /// summaries removed as [`Index::drop_in`] does; their files are left to
    /// [`Dropped::delete_files`]. A prefix without an index is left untouched.
    pub(crate) fn delete_outside_window_in(
        prefix: &Path,
        newest: u64,
        window: u64,
    ) -> Result<Dropped, StateError> {
        if !Self::path(prefix).exists() {
            return Ok(Dropped::default());
        }
        let dropped = Index::update(prefix, |ix| {
            let victims = ix.outside_window(newest, window);
            ix.drop_ids(prefix, victims, true)
        })?;
        Ok(Self::without_summaries(prefix, dropped))
    }

    /// `prefix_purge` at init (SCR's `scr_prefix_delete_all`): every dataset the index
    /// lists, checkpoints and outputs, complete or not, dropped under the prefix lock
    /// with their summaries; their files are left to [`Dropped::delete_files`]. A prefix
    /// without an index is left untouched.
    pub(crate) fn purge_in(prefix: &Path) -> Result<Dropped, StateError> {
        if !Self::path(prefix).exists() {
            return Ok(Dropped::default());
        }
        let dropped = Index::update(prefix, |ix| {
            let all: Vec<u64> = ix.datasets.keys().copied().collect();
            let dropped = ix.drop_ids(prefix, all, true);
            ix.current = None;
            dropped
        })?;
        Ok(Self::without_summaries(prefix, dropped))
    }

    /// `drop_after_current` (SCR's `scr_index_remove_later`): every dataset newer than the
    /// checkpoint `name` (the entry SCR_Drop of that name would take, else the cached
    /// dataset `cached` when the index does not list it) dropped from the index under
    /// the prefix lock, checkpoints and outputs alike, their summaries removed and their
    /// files left in place. `None` when neither names an anchor or there is no index.
    pub(crate) fn drop_after_for_app_in(
        prefix: &Path,
        name: &str,
        cached: Option<u64>,
    ) -> Result<Option<Dropped>, StateError> {
        if !Self::path(prefix).exists() {
            return Ok(None);
        }
        let dropped = Index::update(prefix, |ix| {
            let anchor = ix.entry_for_app(name, cached).or(cached)?;
            Some(ix.drop_from(prefix, anchor, true, false))
        })?;
        Ok(dropped.map(|d| Self::without_summaries(prefix, d)))
    }

    /// Remove the dropped datasets' summaries (see [`Index::drop_in`]).
    fn without_summaries(prefix: &Path, dropped: Dropped) -> Dropped {
        for id in &dropped.victims {
            let _ = std::fs::remove_file(Summary::path(prefix, *id));
        }
        dropped
    }

    /// `scr index current NAME` on `prefix`: [`Index::set_current`] under the lock.
    pub fn set_current_in(prefix: &Path, name: &str) -> Result<(), EditError> {
        Index::try_update(prefix, |ix| ix.set_current(name))?
    }

    /// `scr index clear-failed NAME` on `prefix`: [`Index::clear_failed`] under the lock.
    pub fn clear_failed_in(prefix: &Path, name: &str) -> Result<Option<String>, EditError> {
        Index::try_update(prefix, |ix| ix.clear_failed(prefix, name))?
    }

    /// `scr index rebuild` on `prefix`: the index written again from the per-dataset
    /// summaries, under the lock. Returns how many datasets it lists.
    pub fn rebuild_in(prefix: &Path) -> Result<usize, StateError> {
        Index::try_update(prefix, |ix| {
            let rebuilt = Index::rebuild(prefix)?;
            let n = rebuilt.datasets.len();
            *ix = rebuilt;
            Ok::<_, StateError>(n)
        })
        .and_then(|r| r)
    }

    /// Record dataset `entry` as complete (`scr index add`, postrun) unless the index
    /// holds it complete and usable already, clearing a failed note left beside its
    /// summary; it becomes the restart point when it is the newest checkpoint. Returns
    /// whether it did.
    pub(crate) fn add_complete(
        &mut self,
        prefix: &Path,
        entry: &IndexEntry,
    ) -> Result<bool, EditError> {
        let id = entry.id;
        if self
            .datasets
            .get(&id)
            .is_some_and(|e| e.complete && e.failed.is_none())
        {
            return Err(EditError::AlreadyIndexed {
                id,
                name: entry.name.clone(),
            });
        }
        let _ = std::fs::remove_file(FailedNote::path(prefix, id));
        self.datasets.insert(id, entry.clone());
        // the newest complete checkpoint is the restart point, as after a flush
        Ok(self.make_current_if_newest(entry))
    }

    /// A flush of `entry` begins: recorded incomplete, so that a crash in the middle
    /// leaves the restart point on the previous complete checkpoint.
    pub(crate) fn begin_flush(&mut self, entry: &IndexEntry) {
        self.datasets.insert(entry.id, entry.clone());
    }

    /// The flush of dataset `id` failed (`reason` names the rank).
    pub(crate) fn flush_failed(&mut self, id: u64, reason: &str) {
        if let Some(e) = self.datasets.get_mut(&id) {
            e.failed = Some(reason.to_string());
        }
    }

    /// Every file of `entry` is in the prefix and its rank2file map and summary are
    /// written: complete, flushed at `now`, no longer failed, and the restart point when
    /// it is the newest checkpoint (finalize recording a background flush again, whose
    /// first recording failed, may record flushes out of order). Returns whether it
    /// became the restart point.
    pub fn flush_complete(&mut self, prefix: &Path, entry: &IndexEntry, now: i64) -> bool {
        let e = self
            .datasets
            .entry(entry.id)
            .or_insert_with(|| entry.clone());
        e.complete = true;
        e.flushed = Some(now);
        e.failed = None;
        let _ = std::fs::remove_file(FailedNote::path(prefix, entry.id));
        self.make_current_if_newest(entry)
    }

    /// Dataset `id`, named `name`, was fetched at `now` and is what the job restarts
    /// from.
    pub fn fetched(&mut self, id: u64, name: &str, now: i64) {
        if let Some(e) = self.datasets.get_mut(&id) {
            e.fetched = Some(now);
        }
        self.current = Some(name.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::super::write;
    use super::*;

    /// Write the failed note of dataset `id`, as `Index::mark_failed` does.
    fn note(prefix: &Path, id: u64, why: &str) {
        write(&FailedNote::path(prefix, id), FailedNote::KIND, &why).unwrap();
    }

    fn entry(id: u64, name: &str, ckpt: Option<u64>) -> IndexEntry {
        IndexEntry {
            id,
            name: name.into(),
            checkpoint_id: ckpt,
            complete: true,
            world_size: 1,
            ..IndexEntry::default()
        }
    }

    /// An index of checkpoints ckpt.1..=n (ids 1..=n), the newest current.
    fn index(n: u64) -> Index {
        let mut ix = Index::default();
        for id in 1..=n {
            ix.datasets
                .insert(id, entry(id, &format!("ckpt.{id}"), Some(id)));
        }
        ix.current = Some(format!("ckpt.{n}"));
        ix
    }

    #[test]
    fn a_dataset_is_named_by_name_or_id_and_a_shared_name_needs_the_id() {
        let mut ix = index(3);
        assert_eq!(ix.entry_named("ckpt.2").unwrap(), 2);
        assert_eq!(ix.entry_named("3").unwrap(), 3);
        let err = ix.entry_named("ckpt.9").unwrap_err().to_string();
        assert!(err.contains("no dataset named `ckpt.9`"), "{err}");
        ix.datasets.insert(4, entry(4, "ckpt.2", Some(4)));
        let err = ix.entry_named("ckpt.2").unwrap_err().to_string();
        assert!(
            err.contains("several datasets are named `ckpt.2` (ids [2, 4])"),
            "{err}"
        );
    }

    #[test]
    fn drop_by_name_or_id_removes_one_and_clears_current_when_it_named_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut ix = index(3);
        let d = ix.drop_dataset(dir.path(), "ckpt.3", false, false).unwrap();
        assert_eq!((d.victims, d.names), (vec![3], vec!["ckpt.3".to_string()]));
        assert_eq!(ix.current, None);
        let d = ix.drop_dataset(dir.path(), "1", false, false).unwrap();
        assert_eq!(d.victims, [1]);
        assert_eq!(ix.datasets.keys().collect::<Vec<_>>(), [&2]);
        let err = ix
            .drop_dataset(dir.path(), "ckpt.7", false, false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("`ckpt.7`"), "{err}");
    }

    #[test]
    fn drop_after_removes_every_newer_dataset_and_keeps_the_anchor() {
        let dir = tempfile::tempdir().unwrap();
        let mut ix = index(4);
        let d = ix.drop_dataset(dir.path(), "ckpt.2", true, false).unwrap();
        assert_eq!(d.names, ["ckpt.3", "ckpt.4"]);
        assert_eq!(ix.datasets.keys().copied().collect::<Vec<_>>(), [1, 2]);
        assert_eq!(ix.current, None);
        assert!(d.files.is_empty());
    }

    #[test]
    fn drop_in_removes_the_summaries_and_delete_spares_files_others_list() {
        use super::super::FlushedFile;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        let file = |name: &str| FlushedFile {
            name: name.into(),
            size: 1,
            ..FlushedFile::default()
        };
        for (id, names) in [(1u64, vec!["shared", "a"]), (2, vec!["shared", "b"])] {
            let summary = Summary {
                id,
                name: format!("ckpt.{id}"),
                checkpoint_id: Some(id),
                world_size: 1,
                files: 2,
                bytes: 2,
                complete: true,
                ..Summary::default()
            };
            write(&Summary::path(p, id), "summary", &summary).unwrap();
            let ranks = [(0, names.iter().map(|n| file(n)).collect())].into();
            Rank2File { ranks }.write(p, id, 1, 256).unwrap();
            for n in names {
                std::fs::write(p.join(n), "x").unwrap();
            }
        }
        assert_eq!(Index::rebuild_in(p).unwrap(), 2);
        let d = Index::drop_in(p, "ckpt.2", false, true).unwrap();
        assert_eq!(d.files, [p.join("b")]);
        assert!(!Summary::path(p, 2).exists());
        let mut ticks = 0;
        d.delete_files(p, &mut || ticks += 1);
        assert_eq!(ticks, 1);
        assert!(!p.join("b").exists() && p.join("shared").exists());
        assert!(!dataset_dir(p, 2).exists());
        assert_eq!(
            Index::load(p).unwrap().datasets.keys().collect::<Vec<_>>(),
            [&1]
        );
    }

    #[test]
    fn only_a_complete_usable_checkpoint_becomes_current() {
        let mut ix = index(2);
        ix.datasets.insert(3, entry(3, "out.3", None));
        ix.datasets.get_mut(&1).unwrap().failed = Some("bad".into());
        ix.set_current("ckpt.2").unwrap();
        assert_eq!(ix.current.as_deref(), Some("ckpt.2"));
        for bad in ["ckpt.1", "out.3", "nope"] {
            let err = ix.set_current(bad).unwrap_err().to_string();
            assert!(
                err.contains(&format!("`{bad}` is not a complete checkpoint")),
                "{err}"
            );
        }
        assert_eq!(ix.current.as_deref(), Some("ckpt.2"));
    }

    #[test]
    fn clear_failed_clears_the_mark_and_the_note() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        let mut ix = index(2);
        ix.datasets.get_mut(&2).unwrap().failed = Some("fetch failed".into());
        note(p, 2, "fetch failed");
        assert_eq!(
            ix.clear_failed(p, "ckpt.2").unwrap(),
            Some("fetch failed".into())
        );
        assert!(!FailedNote::path(p, 2).exists());
        assert_eq!(ix.datasets[&2].failed, None);
        assert_eq!(ix.clear_failed(p, "ckpt.2").unwrap(), None);
        let err = ix.clear_failed(p, "ckpt.5").unwrap_err().to_string();
        assert!(err.contains("no dataset named `ckpt.5`"), "{err}");
    }

    /// An application's drop takes its cached dataset's own entry, else the newest of
    /// that name, and never resolves a name by id: the dataset named `2` below is not
    /// dataset 2. No index: nothing done, nothing created.
    #[test]
    fn drop_for_app_in_takes_its_own_entry_else_the_newest_of_the_name() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        assert_eq!(
            Index::drop_for_app_in(p, "ckpt.2", Some(2), false).unwrap(),
            None
        );
        assert!(!p.join(".scr").exists());
        Index::try_update(p, |ix| {
            *ix = index(3);
            ix.datasets.insert(4, entry(4, "2", Some(4)));
            ix.datasets.insert(5, entry(5, "ckpt.1", Some(5)));
            ix.datasets.insert(6, entry(6, "ckpt.1", Some(6)));
            Ok::<_, ()>(())
        })
        .unwrap()
        .unwrap();
        let victims = |name: &str, cached: Option<u64>| {
            Index::drop_for_app_in(p, name, cached, false)
                .unwrap()
                .map(|d| d.victims)
        };
        assert_eq!(victims("ckpt.2", Some(2)), Some(vec![2]));
        assert_eq!(victims("2", None), Some(vec![4]));
        assert_eq!(victims("ckpt.1", Some(5)), Some(vec![5]));
        // a cached id the index lists under another name does not count
        assert_eq!(victims("ckpt.1", Some(3)), Some(vec![6]));
        assert_eq!(victims("ckpt.1", None), Some(vec![1]));
        assert_eq!(victims("ckpt.1", None), None);
        let left: Vec<u64> = Index::load(p).unwrap().datasets.into_keys().collect();
        assert_eq!(left, vec![3]);
    }

    /// A restart reported invalid is marked failed only when the index lists it under
    /// that name; a prefix without an index is left untouched, not even locked.
    #[test]
    fn mark_failed_if_held_marks_only_the_named_entry() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!Index::mark_failed_if_held(dir.path(), 2, "ckpt.2", "bad").unwrap());
        assert!(!dir.path().join(".scr").exists());
        Index::try_update(dir.path(), |ix| {
            *ix = index(2);
            Ok::<_, ()>(())
        })
        .unwrap()
        .unwrap();
        // another dataset under that id, and an id the index does not hold
        assert!(!Index::mark_failed_if_held(dir.path(), 2, "other", "bad").unwrap());
        assert!(!Index::mark_failed_if_held(dir.path(), 7, "ckpt.7", "bad").unwrap());
        assert!(!FailedNote::path(dir.path(), 2).exists());
        assert!(!FailedNote::path(dir.path(), 7).exists());
        assert!(Index::mark_failed_if_held(dir.path(), 2, "ckpt.2", "bad").unwrap());
        let ix = Index::load(dir.path()).unwrap();
        assert_eq!(ix.datasets[&2].failed.as_deref(), Some("bad"));
        assert_eq!(ix.datasets[&1].failed, None);
        assert!(FailedNote::path(dir.path(), 2).exists());
    }

    #[test]
    fn add_complete_refuses_a_dataset_held_and_makes_the_newest_current() {
        let dir = tempfile::tempdir().unwrap();
        let mut ix = index(2);
        let err = ix
            .add_complete(dir.path(), &entry(2, "ckpt.2", Some(2)))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("dataset 2 (ckpt.2) is in the index already"),
            "{err}"
        );
        assert!(ix
            .add_complete(dir.path(), &entry(3, "ckpt.3", Some(3)))
            .unwrap());
        assert_eq!(ix.current.as_deref(), Some("ckpt.3"));
    }

    #[test]
    fn a_flush_is_incomplete_until_recorded_and_then_the_newest_is_current() {
        let dir = tempfile::tempdir().unwrap();
        let mut ix = Index::default();
        let e3 = entry(3, "ckpt.3", Some(3));
        ix.begin_flush(&IndexEntry {
            complete: false,
            ..e3.clone()
        });
        assert!(!ix.datasets[&3].complete);
        assert_eq!(ix.restart_point(), None);
        ix.flush_failed(3, "rank 2: disk full");
        assert_eq!(ix.datasets[&3].failed.as_deref(), Some("rank 2: disk full"));
        note(dir.path(), 3, "rank 2: disk full");
        assert!(ix.flush_complete(dir.path(), &e3, 100));
        assert!(ix.datasets[&3].complete && ix.datasets[&3].failed.is_none());
        assert_eq!(ix.datasets[&3].flushed, Some(100));
        assert!(
            !FailedNote::path(dir.path(), 3).exists(),
            "the failed note goes"
        );
        // an older flush recorded late does not become the restart point
        assert!(!ix.flush_complete(dir.path(), &entry(2, "ckpt.2", Some(2)), 101));
        assert_eq!(ix.restart_point().as_deref(), Some("ckpt.3"));
        ix.fetched(2, "ckpt.2", 102);
        assert_eq!(ix.datasets[&2].fetched, Some(102));
        assert_eq!(ix.current.as_deref(), Some("ckpt.2"));
    }

    #[test]
    fn the_window_keeps_the_newest_checkpoints_and_spares_outputs_and_current() {
        let mut ix = Index::default();
        for (id, name, output) in [
            (1, "c1", false),
            (2, "c2", true),
            (3, "c3", false),
            (4, "c4", false),
            (5, "c5", false),
            (6, "c6", false),
        ] {
            let mut e = entry(id, name, Some(id));
            e.output = output;
            ix.datasets.insert(id, e);
        }
        // an output that is no checkpoint, an incomplete and a failed checkpoint: never
        ix.datasets.insert(7, entry(7, "out", None));
        ix.datasets.get_mut(&7).unwrap().output = true;
        ix.datasets.get_mut(&3).unwrap().failed = Some("bad".into());
        // newest 6, window 2: 6 and 5 stay; 4 and 1 go; 2 (output) and 3 (failed) stay
        assert_eq!(ix.outside_window(6, 2), vec![1, 4]);
        // a window of 1 is the newest alone
        assert_eq!(ix.outside_window(6, 1), vec![1, 4, 5]);
        // an output within the window takes its place there (SCR's order)
        assert_eq!(ix.outside_window(6, 4), vec![1]);
        // newer than the flushed one: untouched
        assert_eq!(ix.outside_window(4, 1), vec![1]);
        ix.current = Some("c1".into());
        assert_eq!(ix.outside_window(6, 2), vec![4], "current stays");
        assert!(ix.outside_window(6, 10).is_empty());
    }
}
