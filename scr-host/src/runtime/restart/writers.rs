//! The files of a checkpoint written by another number of ranks than this job has, as
//! one rank learns them: the old ranks' files its share overlaps that the nodes' caches
//! hold (handed over at the restart, see `restart/from_cache.rs`), and, when the prefix
//! holds the checkpoint, any writer's from its rank2file map, a part at a time, when the
//! rank first asks about a writer (`restart_files`) or a name (`route_file`). Each file
//! is checked (size, and CRC32 with `crc_on_restart`) the first time it is routed, unless
//! it was checked as it was copied here.
//!
//! Why lazily and on each rank: `route_file` is local, so a rank must find any writer's
//! file without asking another rank, and handing every rank every list would make each
//! rank's share of the restart grow with the number of writers. A rank reads the parts
//! that hold the writers it asks about (a few hundred ranks' lists each), and the check
//! reads a file just before the application does: the pass the data makes anyway. A
//! failed check is remembered, and `complete_restart` makes every rank pass over the
//! checkpoint alike.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::runtime::flushed::MapLayout;
use crate::state::prefix::{Blocks, FlushedFile, Rank2File, Rank2FileMap, Rank2FilePart};

/// The writers' files of one checkpoint: from cache, and from the prefix as they are
/// asked about.
#[derive(Debug)]
pub(in crate::runtime) struct WriterLists {
    /// Files in this node's cache: by writer, each with where it is here and whether it
    /// was checked already (as it was copied).
    cached: BTreeMap<u32, Vec<(FlushedFile, PathBuf, bool)>>,
    /// The old ranks whose files are in `cached` (this rank's share), for messages.
    share: Option<std::ops::Range<u32>>,
    /// Where copies made for this restart are (removed when it ends).
    staging: Option<PathBuf>,
    /// The prefix's copy: none when only caches hold the checkpoint.
    in_prefix: Option<InPrefix>,
    /// Each routed file's check, once: where it is, or why it cannot be read.
    checked: BTreeMap<String, Result<PathBuf, String>>,
    /// The first check or map read that failed here: the checkpoint cannot be read.
    failed: Option<String>,
    /// A file in cache failed its check here (the prefix's copy may be sound).
    failed_in_cache: bool,
    check_crc: bool,
    buf: usize,
}

/// The writers' lists in the prefix's rank2file map, loaded as they are asked about.
#[derive(Debug)]
struct InPrefix {
    prefix: PathBuf,
    /// The dataset.
    id: u64,
    /// The ranks that wrote it.
    writers: u32,
    /// The tree's blocks (part `n` holds block `n`'s writers); `None`: a single-file map
    /// of an earlier release, read whole.
    blocks: Option<Blocks>,
    /// The parts read so far (a single-file map is part 0).
    read: BTreeSet<u32>,
    /// The lists loaded so far, by writer.
    lists: BTreeMap<u32, Vec<FlushedFile>>,
    /// Every file loaded so far, by name: its writer and place in the writer's list.
    by_name: BTreeMap<String, (u32, usize)>,
}

impl WriterLists {
    /// The lists of dataset `id` in `prefix`, written by `writers` ranks, whose rank2file
    /// map is laid out as `layout`; CRC32s checked when `check_crc`, files read `buf`
    /// bytes at a time.
    pub(in crate::runtime) fn in_prefix(
        prefix: &Path,
        id: u64,
        writers: u32,
        layout: &MapLayout,
        check_crc: bool,
        buf: usize,
    ) -> WriterLists {
        WriterLists {
            in_prefix: Some(InPrefix::new(prefix, id, writers, layout)),
            ..WriterLists::cached(BTreeMap::new(), None, None, check_crc, buf)
        }
    }

    /// The files of the writers in `share` that this node's cache holds (`cached`: by
    /// writer, each file with its path here and whether it was checked as it was copied),
    /// copies among them in `staging`; the prefix's lists added by
    /// [`WriterLists::with_prefix`] when the prefix holds the checkpoint too.
    pub(in crate::runtime) fn cached(
        cached: BTreeMap<u32, Vec<(FlushedFile, PathBuf, bool)>>,
        share: Option<std::ops::Range<u32>>,
        staging: Option<PathBuf>,
        check_crc: bool,
        buf: usize,
    ) -> WriterLists {
        WriterLists {
            cached,
            share,
            staging,
            in_prefix: None,
            checked: BTreeMap::new(),
            failed: None,
            failed_in_cache: false,
            check_crc,
            buf,
        }
    }

    /// The prefix's copy too, for the files not in cache here.
    pub(in crate::runtime) fn with_prefix(
        mut self,
        prefix: &Path,
        id: u64,
        writers: u32,
        layout: &MapLayout,
    ) -> WriterLists {
        self.in_prefix = Some(InPrefix::new(prefix, id, writers, layout));
        self
    }

    /// Why this rank cannot read the checkpoint: the first check of a routed file, or read
    /// of its map, that failed here.
    pub(in crate::runtime) fn failed(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// Whether it is read from the nodes' caches (else from the prefix only).
    pub(in crate::runtime) fn read_from_caches(&self) -> bool {
        self.share.is_some()
    }

    /// Whether a file in cache failed its check here.
    pub(in crate::runtime) fn failed_in_cache(&self) -> bool {
        self.failed_in_cache
    }

    /// The copies made for this restart are no longer needed: removed (a failure is a
    /// warning; the next init of the job removes what is left).
    pub(in crate::runtime) fn remove_staging(&mut self) {
        if let Some(dir) = self.staging.take() {
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(
                        "{}: {e}; the copies made for the restart stay",
                        dir.display()
                    );
                }
            }
        }
    }

    /// The names of the files `writer` wrote: from cache, else from the prefix's map.
    pub(in crate::runtime) fn files_of(&mut self, writer: u32) -> Result<Vec<String>, String> {
        if let Some(files) = self.cached.get(&writer) {
            return Ok(files.iter().map(|(f, _, _)| f.name.clone()).collect());
        }
        match self.in_prefix.as_mut() {
            Some(p) => p
                .files_of(writer)
                .map_err(|why| fail(&mut self.failed, why)),
            None => Err(self.not_here(writer)),
        }
    }

    /// Where the file named `name` (relative to the prefix) is, once checked; `Ok(None)`
    /// when no writer wrote a file of that name that this rank can reach.
    pub(in crate::runtime) fn route(&mut self, name: &str) -> Result<Option<PathBuf>, String> {
        if let Some((writer, f, path, checked)) = self.cached_file(name) {
            if let Some(done) = self.checked.get(name) {
                return done.clone().map(Some);
            }
            let outcome = if checked {
                Ok(path)
            } else {
                scr_plugin::verify::check_file(
                    &path,
                    f.size,
                    f.crc32.filter(|_| self.check_crc),
                    self.buf,
                )
                .map(|_| path.clone())
                .map_err(|m| format!("{} in cache: {m} (a file of rank {writer})", path.display()))
            };
            self.failed_in_cache |= outcome.is_err();
            return self.settle(name, outcome).map(Some);
        }
        let Some(p) = self.in_prefix.as_mut() else {
            return Ok(None);
        };
        let found = p.find(name).map_err(|why| fail(&mut self.failed, why))?;
        match found {
            None => Ok(None),
            Some((writer, f)) => {
                if let Some(done) = self.checked.get(name) {
                    return done.clone().map(Some);
                }
                let outcome =
                    crate::runtime::flushed::check_flushed(&p.prefix, &f, self.check_crc, self.buf)
                        .map_err(|why| format!("{why} (a file of rank {writer})"));
                self.settle(name, outcome).map(Some)
            }
        }
    }

    /// Every file name this rank can reach (every part of the prefix's map read): for a
    /// name given by its base name alone.
    pub(in crate::runtime) fn all_names(&mut self) -> Result<Vec<String>, String> {
        let mut names: BTreeSet<String> = self
            .cached
            .values()
            .flatten()
            .map(|(f, _, _)| f.name.clone())
            .collect();
        if let Some(p) = self.in_prefix.as_mut() {
            names.extend(p.all_names().map_err(|why| fail(&mut self.failed, why))?);
        }
        Ok(names.into_iter().collect())
    }

    /// What this rank can read, for an error about a name or writer it cannot.
    pub(in crate::runtime) fn reach(&self) -> String {
        match (&self.share, &self.in_prefix) {
            (_, Some(_)) => String::new(),
            (Some(share), None) => format!(
                " (the checkpoint is in the nodes' caches only: this rank reads the files of old ranks {}..{}, the ones its share of the work overlaps; flush the checkpoint to read any)",
                share.start, share.end
            ),
            (None, None) => String::new(),
        }
    }

    /// A cached file of this name: its writer, record, path here, and whether it was
    /// checked as it was copied.
    fn cached_file(&self, name: &str) -> Option<(u32, FlushedFile, PathBuf, bool)> {
        self.cached.iter().find_map(|(w, files)| {
            files
                .iter()
                .find(|(f, _, _)| f.name == name)
                .map(|(f, p, c)| (*w, f.clone(), p.clone(), *c))
        })
    }

    /// Why `writer`'s files are out of this rank's reach.
    fn not_here(&self, writer: u32) -> String {
        format!(
            "the files of rank {writer} are in another node's cache{}",
            self.reach()
        )
    }

    /// Record the check of `name` (its first failure makes the checkpoint unreadable
    /// here).
    fn settle(&mut self, name: &str, outcome: Result<PathBuf, String>) -> Result<PathBuf, String> {
        if let Err(why) = &outcome {
            fail(&mut self.failed, why.clone());
        }
        self.checked.insert(name.to_string(), outcome.clone());
        outcome
    }
}

/// Remember `why` in `failed` unless a failure is there already; `why` back.
fn fail(failed: &mut Option<String>, why: String) -> String {
    if failed.is_none() {
        *failed = Some(why.clone());
    }
    why
}

impl InPrefix {
    fn new(prefix: &Path, id: u64, writers: u32, layout: &MapLayout) -> InPrefix {
        InPrefix {
            prefix: prefix.to_path_buf(),
            id,
            writers,
            blocks: match layout {
                MapLayout::Tree(root) => Some(root.blocks()),
                MapLayout::Single { .. } => None,
            },
            read: BTreeSet::new(),
            lists: BTreeMap::new(),
            by_name: BTreeMap::new(),
        }
    }

    /// The names of the files `writer` wrote (its part of the map read first).
    fn files_of(&mut self, writer: u32) -> Result<Vec<String>, String> {
        self.load(self.part_of(writer))?;
        Ok(self
            .lists
            .get(&writer)
            .map(|l| l.iter().map(|f| f.name.clone()).collect())
            .unwrap_or_default())
    }

    /// The file named `name` and its writer; parts not read yet are read until one lists
    /// it.
    fn find(&mut self, name: &str) -> Result<Option<(u32, FlushedFile)>, String> {
        if !self.by_name.contains_key(name) {
            self.load_all()?;
        }
        Ok(self
            .by_name
            .get(name)
            .map(|&(writer, i)| (writer, self.lists[&writer][i].clone())))
    }

    /// Every file name (every part read).
    fn all_names(&mut self) -> Result<Vec<String>, String> {
        self.load_all()?;
        Ok(self.by_name.keys().cloned().collect())
    }

    /// The part that lists `writer`.
    fn part_of(&self, writer: u32) -> u32 {
        self.blocks.map_or(0, |b| b.of(writer))
    }

    /// Read the parts not read yet, stopping at the first that fails.
    fn load_all(&mut self) -> Result<(), String> {
        let parts = self.blocks.map_or(1, |b| b.count());
        (0..parts).try_for_each(|n| self.load(n))
    }

    /// Read part `n` of the map unless it was (a single-file map: the whole map).
    fn load(&mut self, n: u32) -> Result<(), String> {
        if !self.read.insert(n) {
            return Ok(());
        }
        let lists = match self.blocks {
            Some(blocks) => Rank2FilePart::load(&self.prefix, self.id, blocks, n)
                .map(|p| p.ranks)
                .map_err(|e| e.to_string()),
            None => match Rank2FileMap::load(&self.prefix, self.id) {
                Ok(Rank2FileMap::Single(m)) if m.ranks.keys().copied().eq(0..self.writers) => {
                    Ok(m.ranks)
                }
                Ok(Rank2FileMap::Single(m)) => Err(format!(
                    "{}: lists ranks {:?}, the index records ranks 0..{} as its writers",
                    Rank2File::path(&self.prefix, self.id).display(),
                    m.ranks.keys().collect::<Vec<_>>(),
                    self.writers
                )),
                Ok(Rank2FileMap::Tree(_)) => Err(format!(
                    "{}: was a single-file map when the restart began and is a tree now; the prefix changed under the restart",
                    Rank2File::path(&self.prefix, self.id).display()
                )),
                Err(e) => Err(e.to_string()),
            },
        }?;
        for (writer, list) in lists {
            for (i, f) in list.iter().enumerate() {
                self.by_name.entry(f.name.clone()).or_insert((writer, i));
            }
            self.lists.insert(writer, list);
        }
        Ok(())
    }
}
