//! SCR's flush file (`.scr/flush.scr`): where each dataset is, in cache and in the
//! prefix, for `scr flush-file`; made to match what the cache holds at init.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{load_or_default, PrefixLock};
use crate::layout;
use crate::state::{write_state, StateError};

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
    pub(crate) fn add_location(prefix: &Path, id: u64, location: &str) -> Result<(), StateError> {
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
    pub(crate) fn remove_location(
        prefix: &Path,
        id: u64,
        location: &str,
    ) -> Result<(), StateError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::prefix::scr_dir;

    /// A flush file's entries as `id: LOCATIONS` lines.
    fn flush_entries(prefix: &Path) -> Vec<String> {
        FlushFile::load(prefix)
            .unwrap()
            .datasets
            .iter()
            .map(|(id, (at, dir))| {
                assert_eq!(dir, &layout::dataset_dir_name(*id));
                format!("{id}: {}", at.join(" "))
            })
            .collect()
    }

    #[test]
    fn a_flush_file_rebuild_lists_exactly_the_cached_datasets_and_keeps_pfs() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        for (id, at) in [(1, PFS), (2, CACHE), (3, PFS), (3, CACHE), (4, CACHE)] {
            FlushFile::add_location(p, id, at).unwrap();
        }
        FlushFile::rebuild(p, &BTreeSet::from([4, 5])).unwrap();
        assert_eq!(
            flush_entries(p),
            ["1: PFS", "3: PFS", "4: CACHE", "5: CACHE"],
            "2 (cache only, gone) removed, 3 loses CACHE, 4 kept, 5 added"
        );
        // nothing cached any more: only the flushed ones stay
        FlushFile::rebuild(p, &BTreeSet::new()).unwrap();
        assert_eq!(flush_entries(p), ["1: PFS", "3: PFS"]);
    }

    #[test]
    fn a_damaged_flush_file_is_rewritten_at_rebuild_but_another_version_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        std::fs::create_dir_all(scr_dir(p)).unwrap();
        std::fs::write(FlushFile::path(p), "scr-rs flush 1 crc32=00000000\n{}").unwrap();
        assert!(FlushFile::load(p).is_err(), "the checksum is wrong");
        FlushFile::rebuild(p, &BTreeSet::from([7])).unwrap();
        assert_eq!(flush_entries(p), ["7: CACHE"]);

        let newer = "scr-rs flush 999 crc32=00000000\n{}";
        std::fs::write(FlushFile::path(p), newer).unwrap();
        let e = FlushFile::rebuild(p, &BTreeSet::from([7])).unwrap_err();
        assert!(e.is_other_version(), "{e}");
        assert_eq!(std::fs::read_to_string(FlushFile::path(p)).unwrap(), newer);
    }

    #[test]
    fn a_flush_file_rebuild_that_changes_nothing_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        FlushFile::rebuild(p, &BTreeSet::new()).unwrap();
        assert!(
            !FlushFile::path(p).exists(),
            "no file made for an empty cache"
        );
        FlushFile::add_location(p, 3, CACHE).unwrap();
        // an atomic write replaces the file: a new inode
        use std::os::unix::fs::MetadataExt as _;
        let inode = || std::fs::metadata(FlushFile::path(p)).unwrap().ino();
        let before = inode();
        FlushFile::rebuild(p, &BTreeSet::from([3])).unwrap();
        assert_eq!(inode(), before, "unchanged: not rewritten");
        FlushFile::rebuild(p, &BTreeSet::from([3, 4])).unwrap();
        assert_ne!(inode(), before, "changed: rewritten");
    }
}
