//! The list of prefix paths a flush may write (`writes.<n>.scr` per rank2file block, or
//! `writes.scr` of an earlier release): what the cleanup of an interrupted flush, at the
//! next init or by `scr scavenge`, may remove.

use std::path::{Path, PathBuf};

/// State-file kind of the list of prefix paths a flush may write.
pub(crate) const WRITES_KIND: &str = "flush-writes";

/// `<prefix>/.scr/scr.dataset.<id>/writes.scr`: what the flush of dataset `id` may
/// write, as earlier releases recorded it (one file for every rank).
pub(crate) fn writes_path(prefix: &Path, id: u64) -> PathBuf {
    crate::layout::writes_file(prefix, id)
}

/// `<prefix>/.scr/scr.dataset.<id>/writes.<n>.scr`: what the ranks of block `n` (of the
/// rank2file blocks) may write in the flush of dataset `id`.
pub(crate) fn writes_part_path(prefix: &Path, id: u64, n: u32) -> PathBuf {
    crate::layout::writes_part_file(prefix, id, n)
}

/// One block's part of the list of what a flush may write.
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct WritesPart {
    /// How many parts the list has (every one must be there for it to be complete).
    pub parts: u32,
    /// Prefix paths (relative) the block's ranks may write.
    pub writes: Vec<String>,
}

/// Remove the list of what the flush of dataset `id` may write (every part of it):
/// the flush is recorded, or settled.
pub(crate) fn remove_writes(prefix: &Path, id: u64) {
    let _ = std::fs::remove_file(writes_path(prefix, id));
    if let Ok(dir) = std::fs::read_dir(crate::layout::prefix_dataset_dir(prefix, id)) {
        for e in dir.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name.starts_with("writes.") && name.ends_with(".scr") {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// Rank 0: the whole list of what the flush of dataset `id` may write, when it is there
/// (every block's part, or the single file of an earlier release); why not otherwise
/// (`Ok(None)`: no list was recorded).
pub(crate) fn load_writes(
    prefix: &Path,
    id: u64,
) -> std::result::Result<Option<Vec<String>>, crate::state::StateError> {
    match crate::state::read_state::<Vec<String>>(&writes_path(prefix, id), WRITES_KIND) {
        Ok(w) => return Ok(Some(w)),
        Err(e) if !e.is_not_found() => return Err(e),
        Err(_) => {}
    }
    let first =
        match crate::state::read_state::<WritesPart>(&writes_part_path(prefix, id, 0), WRITES_KIND)
        {
            Ok(p) => p,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e),
        };
    let mut all = first.writes;
    for n in 1..first.parts {
        let part: WritesPart =
            crate::state::read_state(&writes_part_path(prefix, id, n), WRITES_KIND)?;
        all.extend(part.writes);
    }
    Ok(Some(all))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::prefix;

    #[test]
    fn the_list_of_writes_is_whole_only_with_every_part_or_the_older_single_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        assert_eq!(load_writes(p, 3).unwrap(), None);
        let part = |n: u32, writes: &[&str]| {
            let w = WritesPart {
                parts: 2,
                writes: writes.iter().map(|s| s.to_string()).collect(),
            };
            prefix::write(&writes_part_path(p, 3, n), WRITES_KIND, &w).unwrap();
        };
        part(0, &["ckpt.1/rank_0", "ckpt.1/rank_1"]);
        // part 1 of 2 is missing: not the whole list, and the error names it
        let e = load_writes(p, 3).unwrap_err().to_string();
        assert!(
            e.starts_with(&writes_part_path(p, 3, 1).display().to_string()),
            "{e}"
        );
        part(1, &["ckpt.1/rank_2"]);
        assert_eq!(
            load_writes(p, 3).unwrap().unwrap(),
            ["ckpt.1/rank_0", "ckpt.1/rank_1", "ckpt.1/rank_2"]
        );
        remove_writes(p, 3);
        assert_eq!(load_writes(p, 3).unwrap(), None);
        // an earlier release's single file
        prefix::write(&writes_path(p, 3), WRITES_KIND, &vec!["a/b".to_string()]).unwrap();
        assert_eq!(load_writes(p, 3).unwrap().unwrap(), ["a/b"]);
    }
}
