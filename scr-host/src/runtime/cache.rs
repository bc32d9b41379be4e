//! The cache: this rank's cached datasets (its filemap, saved as a snapshot plus an
//! append-only journal in the node's control directory) and the ids the next dataset and
//! checkpoint take.
//!
//! Every change to what the cache holds goes through [`Cache`]'s verbs, so that the
//! record and its file on disk cannot drift apart by a path that forgot one of them.
//! The questions every phase asks of the cache (which dataset has this name, which
//! checkpoint is the newest) are answered here, once.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub(in crate::runtime) mod deferred_crc;
pub(in crate::runtime) mod reaper;

use deferred_crc::CrcJob;

use super::{io_err, Result, ScrError};
use crate::integrity::is_inside;
use crate::state::filemap::{self, DatasetRecord, FileRecord, Filemap};

/// This rank's cached datasets and the ids the next ones take.
pub(in crate::runtime) struct Cache {
    filemap: Filemap,
    /// Appends `route_file`'s records to the filemap's journal (O(1) per file); every
    /// other change saves the whole filemap through it.
    journal: filemap::JournalWriter,
    /// The control directory the filemap is saved in (set when the job's directories
    /// exist).
    cntl_dir: PathBuf,
    next_dataset: u64,
    next_checkpoint: u64,
    /// The background hash of the last dataset kept, until its CRC32s are recorded (see
    /// `deferred_crc`; at most one).
    crc: Option<CrcJob>,
    /// Unlinks evicted files off the application's path (see `reaper`).
    reaper: reaper::Reaper,
}

impl Cache {
    /// An empty cache of `rank`, not yet bound to a control directory.
    pub(in crate::runtime) fn new(rank: u32) -> Cache {
        Cache {
            filemap: Filemap {
                rank,
                datasets: BTreeMap::new(),
            },
            journal: filemap::JournalWriter::default(),
            cntl_dir: PathBuf::new(),
            next_dataset: 1,
            next_checkpoint: 1,
            crc: None,
            reaper: reaper::Reaper::default(),
        }
    }

    /// [`remove_files`], each file moved into `trash` and unlinked by this rank's
    /// deleting thread (see `reaper`); a file that cannot be moved is deleted here.
    pub(in crate::runtime) fn retire_files(
        &mut self,
        dir: &Path,
        names: &[PathBuf],
        trash: &Path,
    ) -> Result<()> {
        let reaper = &mut self.reaper;
        remove_files_with(dir, names, |path| match reaper.retire(path, trash) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(_) => std::fs::remove_file(path),
        })
    }

    /// Wait until every evicted file is unlinked (finalize: the run leaves no trash).
    pub(in crate::runtime) fn drain_retired(&mut self) {
        self.reaper.drain();
    }

    /// Read the filemap this rank left in `cntl_dir` (a damaged or unreadable one counts
    /// as a lost cache, with a warning), and save there from now on.
    pub(in crate::runtime) fn open(&mut self, cntl_dir: &Path) {
        let rank = self.filemap.rank;
        self.cntl_dir = cntl_dir.to_path_buf();
        self.filemap = match Filemap::load(cntl_dir, rank) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!("{e}; treating this rank's cache as lost");
                Filemap {
                    rank,
                    datasets: BTreeMap::new(),
                }
            }
        };
    }

    /// The record of dataset `id`, when the cache holds it.
    pub(in crate::runtime) fn get(&self, id: u64) -> Option<&DatasetRecord> {
        self.filemap.datasets.get(&id)
    }

    /// The record of dataset `id`, which the cache holds (a caller's invariant).
    pub(in crate::runtime) fn record(&self, id: u64) -> &DatasetRecord {
        &self.filemap.datasets[&id]
    }

    /// Every cached dataset, oldest first.
    pub(in crate::runtime) fn datasets(&self) -> impl Iterator<Item = &DatasetRecord> {
        self.filemap.datasets.values()
    }

    /// Every cached dataset's id, oldest first.
    pub(in crate::runtime) fn ids(&self) -> Vec<u64> {
        self.filemap.datasets.keys().copied().collect()
    }

    /// The id of the cached dataset named `name`.
    pub(in crate::runtime) fn id_of(&self, name: &str) -> Result<u64> {
        self.datasets()
            .find(|d| d.name == name)
            .map(|d| d.id)
            .ok_or_else(|| ScrError::Usage(format!("no dataset named `{name}` in cache")))
    }

    /// The newest complete checkpoint not in `skipped`.
    pub(in crate::runtime) fn newest_checkpoint(&self, skipped: &[u64]) -> Option<u64> {
        self.filemap.newest_checkpoint(skipped)
    }

    /// Hold `rec` (in memory: [`Cache::save`] writes it).
    pub(in crate::runtime) fn put(&mut self, rec: DatasetRecord) {
        self.filemap.datasets.insert(rec.id, rec);
    }

    /// Change the record of dataset `id` in memory; `false` when the cache lacks it.
    pub(in crate::runtime) fn update(
        &mut self,
        id: u64,
        f: impl FnOnce(&mut DatasetRecord),
    ) -> bool {
        match self.filemap.datasets.get_mut(&id) {
            Some(rec) => {
                f(rec);
                true
            }
            None => false,
        }
    }

    /// Forget dataset `id` (in memory), returning its record.
    pub(in crate::runtime) fn forget(&mut self, id: u64) -> Option<DatasetRecord> {
        self.filemap.datasets.remove(&id)
    }

    /// Save the whole filemap (compacting its journal).
    pub(in crate::runtime) fn save(&mut self) -> Result<()> {
        self.journal
            .save(&self.filemap, &self.cntl_dir)
            .map_err(io_err(
                &self.cntl_dir.join(Filemap::file_name(self.filemap.rank)),
            ))
    }

    /// Record `file` as routed into dataset `id` (held already): one journal record, not
    /// a rewrite of the whole filemap. On failure the record is as before.
    pub(in crate::runtime) fn append_file(&mut self, id: u64, file: &FileRecord) -> Result<()> {
        let Some(d) = self.filemap.datasets.get_mut(&id) else {
            return Err(ScrError::Usage(format!(
                "dataset {id} is not in the cache; start_output records it first"
            )));
        };
        d.files.push(file.clone());
        let appended = self
            .journal
            .append(&self.filemap, &self.cntl_dir, id, file)
            .map_err(io_err(
                &self.cntl_dir.join(Filemap::journal_name(self.filemap.rank)),
            ));
        if appended.is_err() {
            if let Some(d) = self.filemap.datasets.get_mut(&id) {
                d.files.retain(|f| f.name != file.name);
            }
        }
        appended
    }

    /// The id the next dataset takes.
    pub(in crate::runtime) fn next_dataset(&self) -> u64 {
        self.next_dataset
    }

    /// The id the next checkpoint takes.
    pub(in crate::runtime) fn next_checkpoint(&self) -> u64 {
        self.next_checkpoint
    }

    /// The largest dataset and checkpoint ids this cache holds (0 when none).
    pub(in crate::runtime) fn largest_ids(&self) -> (u64, u64) {
        let dataset = self.filemap.datasets.keys().max().copied().unwrap_or(0);
        let checkpoint = self
            .datasets()
            .filter_map(|d| d.checkpoint_id)
            .max()
            .unwrap_or(0);
        (dataset, checkpoint)
    }

    /// The next ids come right after `dataset` and `checkpoint` (agreed by the caller).
    pub(in crate::runtime) fn continue_after(&mut self, dataset: u64, checkpoint: u64) {
        self.next_dataset = dataset + 1;
        self.next_checkpoint = checkpoint + 1;
    }

    /// Dataset `dataset` and checkpoint `checkpoint` exist, here or in the prefix: the
    /// next ids never take them again.
    pub(in crate::runtime) fn used(&mut self, dataset: Option<u64>, checkpoint: Option<u64>) {
        if let Some(id) = dataset {
            self.next_dataset = self.next_dataset.max(id.saturating_add(1));
        }
        if let Some(c) = checkpoint {
            self.next_checkpoint = self.next_checkpoint.max(c.saturating_add(1));
        }
    }
}

/// Application and redundancy files of a dataset, relative to its directory.
pub(in crate::runtime) fn file_names(rec: &DatasetRecord) -> Vec<PathBuf> {
    rec.files
        .iter()
        .map(|f| PathBuf::from(&f.name))
        .chain(rec.redundancy.iter().map(PathBuf::from))
        .collect()
}

/// Delete `names` (relative to `dir`), then every directory from their parents up to
/// `dir` that is left empty. Files already gone are fine.
///
/// A name that would leave `dir` (absolute, or through `..`: a damaged or forged filemap,
/// a rank2file map, a plugin's answer) is never followed: it is skipped with a warning.
///
/// Nothing is deleted through a symbolic link: the dataset directory and every level
/// below it down to the file are judged first (`lstat`), and a link in place of one is
/// refused with an error naming it ([`scr_plugin::cachefs::check_dirs`]).
pub(in crate::runtime) fn remove_files(dir: &Path, names: &[PathBuf]) -> Result<()> {
    remove_files_with(dir, names, |path| std::fs::remove_file(path))
}

/// [`remove_files`] with `unlink` deleting each file (or moving it away).
fn remove_files_with(
    dir: &Path,
    names: &[PathBuf],
    mut unlink: impl FnMut(&Path) -> std::io::Result<()>,
) -> Result<()> {
    use scr_plugin::cachefs::check_dirs;
    let me = crate::registry::effective_uid();
    if let Some(above) = dir.parent() {
        check_dirs(above, dir, me).map_err(crate::private_dir::cachefs_err)?;
    }
    for name in names {
        if !is_inside(&name.to_string_lossy()) {
            tracing::warn!(
                "`{}` is recorded in {} but leaves it; not deleted",
                name.display(),
                dir.display()
            );
            continue;
        }
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            check_dirs(dir, parent, me).map_err(crate::private_dir::cachefs_err)?;
        }
        match unlink(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(ScrError::Io { path, source: e }),
        }
        let mut parent = path.parent();
        while let Some(p) = parent.filter(|p| p.starts_with(dir) && *p != dir) {
            if std::fs::remove_dir(p).is_err() {
                break; // not empty: another rank's file still lives here
            }
            parent = p.parent();
        }
    }
    let _ = std::fs::remove_dir(dir); // only when empty
    Ok(())
}
