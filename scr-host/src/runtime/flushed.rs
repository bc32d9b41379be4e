//! The prefix's copy of a checkpoint as a restart reads it: its rank2file map's layout
//! ([`MapLayout`], checked by [`check_map`]) and a flushed file checked against what the
//! flush recorded ([`check_flushed`]). Shared by the fetch and by the lists a restart of
//! another size reads (`restart/writers.rs`), below both.

use std::path::Path;

use crate::state::prefix::{FlushedFile, IndexEntry, Rank2File, Rank2FileMap, Rank2FileRoot};

/// What rank 0 tells every rank at fetch about the chosen dataset's rank2file map:
/// constant size, whatever P.
#[derive(serde::Serialize, serde::Deserialize)]
pub(in crate::runtime) enum MapLayout {
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

/// Why the rank2file map of a checkpoint cannot be used by this job ([`check_map`]),
/// naming the file. Rank 0 finds it; every rank is told it as text with the choice.
#[derive(Debug, thiserror::Error)]
pub(in crate::runtime) enum MapError {
    /// The map (or its root) is unreadable or unsound.
    #[error(transparent)]
    State(crate::state::StateError),
    /// A tree's root lists another number of ranks than the index says wrote it.
    #[error("{}: lists {ranks} ranks, the index records {size} writers", path.display())]
    RankCount {
        /// The map's file.
        path: std::path::PathBuf,
        /// The ranks it lists.
        ranks: u32,
        /// The writers the index records.
        size: u32,
    },
    /// A single-file map does not list exactly the ranks that wrote it.
    #[error("{}: lists ranks {ranks:?}, the index records ranks 0..{size} as its writers", path.display())]
    Ranks {
        /// The map's file.
        path: std::path::PathBuf,
        /// The ranks it lists.
        ranks: Vec<u32>,
        /// The writers the index records.
        size: u32,
    },
}

/// The layout of `entry`'s rank2file map in `prefix`, when it is sound and lists the
/// writers the index records ([`check_map`]); a single-file map (legacy) as `Single`
/// (its lists are read whole where needed).
pub(in crate::runtime) fn layout_of(prefix: &Path, entry: &IndexEntry) -> Option<MapLayout> {
    let map = Rank2FileMap::load(prefix, entry.id).ok()?;
    match check_map(prefix, entry.id, entry.world_size, map).ok()? {
        Rank2FileMap::Tree(root) => Some(MapLayout::Tree(root)),
        Rank2FileMap::Single(_) => Some(MapLayout::Single { block: 0 }),
    }
}

/// Rank 0: `map`, the rank2file map of dataset `id`, when it fits the `size` ranks the
/// index records as its writers (a tree: its root is sound and lists `size` ranks; a
/// single-file map: every rank 0..`size` has a list, possibly empty); why not otherwise,
/// naming the file.
pub(in crate::runtime) fn check_map(
    prefix: &Path,
    id: u64,
    size: u32,
    map: Rank2FileMap,
) -> std::result::Result<Rank2FileMap, MapError> {
    let path = Rank2File::path(prefix, id);
    match &map {
        Rank2FileMap::Tree(root) => {
            root.check(prefix, id).map_err(MapError::State)?;
            if root.ranks != size {
                return Err(MapError::RankCount {
                    path,
                    ranks: root.ranks,
                    size,
                });
            }
            Ok(map)
        }
        // every rank's list (possibly empty) is recorded by a flush: a map missing one
        // would fetch nothing for it
        Rank2FileMap::Single(single) => {
            if single.ranks.keys().copied().eq(0..size) {
                Ok(map)
            } else {
                Err(MapError::Ranks {
                    path,
                    ranks: single.ranks.keys().copied().collect(),
                    size,
                })
            }
        }
    }
}

/// The path of flushed file `f` in `prefix`, once it is there with the size (and, with
/// `check_crc`, the CRC32) the flush recorded; why not otherwise, naming the file. Reads
/// the whole file when its CRC32 is checked, `buf` bytes at a time.
pub(in crate::runtime) fn check_flushed(
    prefix: &Path,
    f: &FlushedFile,
    check_crc: bool,
    buf: usize,
) -> std::result::Result<std::path::PathBuf, String> {
    let path = f.stored_path(prefix).map_err(|e| e.to_string())?;
    let crc = f.crc32.filter(|_| check_crc);
    scr_plugin::verify::check_file(&path, f.size, crc, buf).map_err(|m| {
        use scr_plugin::verify::Mismatch;
        match m {
            Mismatch::Size { found, recorded } => format!(
                "{} is {found} bytes, the flush recorded {recorded}",
                path.display()
            ),
            Mismatch::Crc { found, recorded } => format!(
                "{} has CRC32 {found:08x}, the flush recorded {recorded:08x}",
                path.display()
            ),
            other => format!("{}: {other}", path.display()),
        }
    })?;
    Ok(path)
}
