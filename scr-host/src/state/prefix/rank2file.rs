//! The rank2file map of a flushed dataset: which rank wrote which files ([`Rank2File`];
//! its on-disk tree of a root and bounded parts is documented there), the blocks of
//! ranks its parts cover ([`Blocks`]), and where a flushed file's bytes are
//! ([`FlushedFile`], [`relocated`], [`check_relative`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{dataset_dir, write};
use crate::layout;
use crate::state::{read_state, StateError};

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
    pub fn stored_path(&self, prefix: &Path) -> Result<PathBuf, OutsidePrefix> {
        let rel = self.stored.as_deref().unwrap_or(&self.name);
        check_relative(rel)?;
        check_relative(&self.name)?;
        Ok(prefix.join(rel))
    }
}

/// A name read from a dataset's records that would leave the prefix (an absolute path or
/// a `..` component): the records are damaged or hostile, and the name is not used. A
/// type so callers can tell it from their other failures and add the rank or dataset.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a path inside the prefix; the dataset's records are damaged")]
pub struct OutsidePrefix(pub String);

/// `Err` unless `rel` is a relative path that stays below the directory it is joined to.
pub fn check_relative(rel: &str) -> Result<(), OutsidePrefix> {
    if !scr_plugin::redfile::stays_inside(rel) {
        return Err(OutsidePrefix(rel.to_string()));
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
    pub(crate) fn check_totals(
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

#[cfg(test)]
mod tests;
