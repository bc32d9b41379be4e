//! The files of a checkpoint written by another number of ranks than this job has, as
//! one rank learns them: from the checkpoint's rank2file map in the prefix, a part at a
//! time, when the rank first asks about a writer (`restart_files`) or a name
//! (`route_file`); each file checked (size, and CRC32 with `crc_on_restart`) the first
//! time it is routed.
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

use crate::runtime::fetch::MapLayout;
use crate::state::prefix::{Blocks, FlushedFile, Rank2File, Rank2FileMap, Rank2FilePart};

/// The writers' files of one checkpoint in the prefix, loaded as they are asked about.
#[derive(Debug)]
pub(in crate::runtime) struct WriterLists {
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
    /// Each routed file's check, once: where it is, or why it cannot be read.
    checked: BTreeMap<String, Result<PathBuf, String>>,
    /// The first check or map read that failed here: the checkpoint cannot be read.
    failed: Option<String>,
    check_crc: bool,
    buf: usize,
}

impl WriterLists {
    /// The lists of dataset `id`, written by `writers` ranks, whose rank2file map is laid
    /// out as `layout`; CRC32s checked when `check_crc`, files read `buf` bytes at a time.
    pub(in crate::runtime) fn new(
        prefix: &Path,
        id: u64,
        writers: u32,
        layout: &MapLayout,
        check_crc: bool,
        buf: usize,
    ) -> WriterLists {
        WriterLists {
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
            checked: BTreeMap::new(),
            failed: None,
            check_crc,
            buf,
        }
    }

    /// Why this rank cannot read the checkpoint: the first check of a routed file, or read
    /// of its map, that failed here.
    pub(in crate::runtime) fn failed(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// The names of the files `writer` wrote (its part of the map read first).
    pub(in crate::runtime) fn files_of(&mut self, writer: u32) -> Result<Vec<String>, String> {
        self.load(self.part_of(writer))?;
        Ok(self
            .lists
            .get(&writer)
            .map(|l| l.iter().map(|f| f.name.clone()).collect())
            .unwrap_or_default())
    }

    /// Where the file named `name` (relative to the prefix) is, once checked; `Ok(None)`
    /// when no writer wrote a file of that name. Parts not read yet are read until one
    /// lists it.
    pub(in crate::runtime) fn route(&mut self, name: &str) -> Result<Option<PathBuf>, String> {
        if !self.by_name.contains_key(name) {
            self.load_all()?;
        }
        match self.by_name.get(name) {
            None => Ok(None),
            Some(&(writer, i)) => {
                let f = self.lists[&writer][i].clone();
                self.check(&f, writer).map(Some)
            }
        }
    }

    /// Every file name of the checkpoint (every part read): for a name given by its base
    /// name alone.
    pub(in crate::runtime) fn all_names(&mut self) -> Result<Vec<String>, String> {
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

    /// Read part `n` of the map unless it was (a single-file map: the whole map). A part
    /// that cannot be read makes the checkpoint unreadable here.
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
        };
        let lists = lists.map_err(|why| self.fail(why))?;
        for (writer, list) in lists {
            for (i, f) in list.iter().enumerate() {
                self.by_name.entry(f.name.clone()).or_insert((writer, i));
            }
            self.lists.insert(writer, list);
        }
        Ok(())
    }

    /// Check file `f` of `writer` once: it is in the prefix with the size (and CRC32) the
    /// flush recorded.
    fn check(&mut self, f: &FlushedFile, writer: u32) -> Result<PathBuf, String> {
        if let Some(done) = self.checked.get(&f.name) {
            return done.clone();
        }
        let outcome =
            crate::runtime::fetch::check_flushed(&self.prefix, f, self.check_crc, self.buf)
                .map_err(|why| format!("{why} (a file of rank {writer})"));
        if let Err(why) = &outcome {
            self.fail(why.clone());
        }
        self.checked.insert(f.name.clone(), outcome.clone());
        outcome
    }

    /// Remember the first failure here; `why` back.
    fn fail(&mut self, why: String) -> String {
        if self.failed.is_none() {
            self.failed = Some(why.clone());
        }
        why
    }
}
