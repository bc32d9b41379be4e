//! `scr index add`: record a dataset whose files, summary and rank2file are in the prefix,
//! after checking every file against rank2file (postrun's last step too). The index
//! edit itself is [`Index::add_complete`], shared with the other index edits.
//!
//! A dataset directory with a rank2file map but no summary (SCR's `scr_index --build`
//! case: a flush that ended between the two, a summary removed by hand) gets one built
//! (SCR's `scr_summary_build`): its totals from the map, its name, checkpoint id and
//! provenance from the index's open entry for it; every file is checked (present, size,
//! CRC32) before the summary is written, and a missing or damaged file refuses the
//! dataset by rank and name.

use super::*;
use crate::state::prefix::EditError;
use crate::state::StateError;

/// Why `scr index add` refused a dataset, or could not add it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IndexAddError {
    /// The prefix's `.scr` directory could not be listed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A dataset directory without a summary, whose name nothing records (no index
    /// entry): a summary cannot be built for it.
    #[error("{}: no summary, and the index has no entry naming dataset {id}; index its files with `scr index import {} --name NAME`", dir.display(), dir.display())]
    Unnamed {
        /// The dataset's id.
        id: u64,
        /// Its directory.
        dir: PathBuf,
    },
    /// No summary names the dataset.
    #[error("no dataset `{which}` in {}: no .scr/scr.dataset.<id>/summary.scr names it", prefix.display())]
    NoSuchDataset {
        /// The name or id asked for.
        which: String,
        /// The prefix.
        prefix: PathBuf,
    },
    /// Several summaries name it: it must be given by id.
    #[error("several datasets are named `{which}` (ids {ids:?}); give the id instead")]
    SharedName {
        /// The name asked for.
        which: String,
        /// The ids of the datasets of that name.
        ids: Vec<u64>,
    },
    /// Its rank2file map does not list exactly the ranks of the job.
    #[error("{}: lists ranks {ranks:?}, the dataset was written by {world_size} ranks", path.display())]
    Ranks {
        /// The map's root.
        path: PathBuf,
        /// The ranks it lists.
        ranks: Vec<u32>,
        /// The job's size, as the summary gives it.
        world_size: u32,
    },
    /// Its rank2file map and its summary disagree on the file count or the bytes.
    #[error("{}: {files} files of {bytes} bytes, rank2file lists {listed_files} of {listed_bytes}", path.display())]
    Totals {
        /// The summary.
        path: PathBuf,
        /// Files, as the summary says.
        files: u64,
        /// Bytes, as the summary says.
        bytes: u64,
        /// Files rank2file lists.
        listed_files: u64,
        /// Bytes rank2file lists.
        listed_bytes: u64,
    },
    /// A file of a rank is named outside the prefix.
    #[error("rank {rank}: {why}")]
    Path {
        /// The rank.
        rank: u32,
        /// What is wrong with the name.
        why: crate::state::prefix::OutsidePrefix,
    },
    /// A file of a rank is missing or differs from what rank2file records.
    #[error("rank {rank}: {name} ({}): {why}; the dataset is not added", path.display())]
    File {
        /// The rank.
        rank: u32,
        /// The file's name.
        name: String,
        /// Where it is in the prefix.
        path: PathBuf,
        /// What differs.
        why: scr_plugin::verify::Mismatch,
    },
    /// A state file of the prefix (rank2file, the index) could not be read or written.
    #[error("{0}")]
    State(#[from] StateError),
    /// The index refused the dataset.
    #[error("{0}")]
    Edit(#[from] EditError),
}

/// `scr index add NAME|ID`: add to the index of `prefix` a dataset whose files, summary
/// and rank2file are in the prefix, after checking every rank's files against rank2file
/// (present, size, CRC32 where recorded). Complete; the restart point when no newer
/// complete checkpoint is recorded. Returns the entry and whether it became current.
pub fn index_add(
    prefix: &Path,
    which: &str,
    output: bool,
    job_name: Option<String>,
    buf: usize,
) -> Result<(IndexEntry, bool), IndexAddError> {
    let summary = match find_summary(prefix, which) {
        Err(IndexAddError::NoSuchDataset { .. })
            if which
                .parse::<u64>()
                .is_ok_and(|id| Rank2File::path(prefix, id).exists()) =>
        {
            build_summary(prefix, which.parse().expect("checked"), buf)?
        }
        found => found?,
    };
    let id = summary.id;
    verify_in_prefix(prefix, &summary, buf)?;
    let entry = IndexEntry {
        id,
        name: summary.name.clone(),
        checkpoint_id: summary.checkpoint_id,
        output: output || summary.checkpoint_id.is_none(),
        dir: layout::dataset_dir_name(id),
        world_size: summary.world_size,
        complete: true,
        flushed: Some(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64),
        ),
        job_name: job_name.or(summary.job_name),
        made: summary.made,
        ..IndexEntry::default()
    };
    let current = Index::try_update(prefix, |ix| ix.add_complete(prefix, &entry))??;
    if let Err(e) = FlushFile::add_location(prefix, id, "PFS") {
        tracing::warn!(
            dataset = id,
            "{e}; the flush file does not list the dataset in PFS"
        );
    }
    Ok((entry, current))
}

/// The summary of the dataset `which` names: by id, else by name among the summaries
/// under `.scr` (a name several datasets share must be given by id).
fn find_summary(prefix: &Path, which: &str) -> Result<Summary, IndexAddError> {
    let summaries: Vec<Summary> = std::fs::read_dir(prefix::scr_dir(prefix))
        .map_err(|source| IndexAddError::Io {
            path: prefix::scr_dir(prefix),
            source,
        })?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let id = layout::parse_dataset_dir_name(&e.file_name().to_string_lossy())?;
            read_state::<Summary>(&Summary::path(prefix, id), "summary")
                .ok()
                .filter(|s| s.id == id)
        })
        .collect();
    let by_id: Vec<&Summary> = summaries
        .iter()
        .filter(|s| which.parse::<u64>().is_ok_and(|id| id == s.id))
        .collect();
    let by_name: Vec<&Summary> = summaries.iter().filter(|s| s.name == which).collect();
    match (by_id.as_slice(), by_name.as_slice()) {
        ([s], _) | ([], [s]) => Ok((*s).clone()),
        ([], []) => Err(IndexAddError::NoSuchDataset {
            which: which.to_string(),
            prefix: prefix.to_path_buf(),
        }),
        (_, many) => Err(IndexAddError::SharedName {
            which: which.to_string(),
            ids: many.iter().map(|s| s.id).collect(),
        }),
    }
}

/// The summary of dataset `id`, whose directory holds a rank2file map but no summary,
/// built from the map's totals and the index's open entry for it (name, checkpoint id,
/// ranks, provenance), written once every file checks out (see the module's
/// documentation).
fn build_summary(prefix: &Path, id: u64, buf: usize) -> Result<Summary, IndexAddError> {
    let dir = prefix::dataset_dir(prefix, id);
    let entry = Index::load_or_rebuild(prefix)?
        .datasets
        .remove(&id)
        .ok_or_else(|| IndexAddError::Unnamed {
            id,
            dir: dir.clone(),
        })?;
    let map = Rank2File::load(prefix, id)?;
    let (files, bytes) = map
        .ranks
        .values()
        .flatten()
        .fold((0u64, 0u64), |(n, b), f| (n + 1, b + f.size));
    let summary = Summary {
        id,
        name: entry.name,
        checkpoint_id: entry.checkpoint_id,
        world_size: entry.world_size,
        files,
        bytes,
        complete: true,
        job_name: entry.job_name,
        made: entry.made,
    };
    verify_in_prefix(prefix, &summary, buf)?;
    prefix::write(&Summary::path(prefix, id), "summary", &summary)?;
    tracing::info!(
        dataset = id,
        "{}: summary built from rank2file ({files} files, {bytes} bytes, every file checked)",
        Summary::path(prefix, id).display()
    );
    Ok(summary)
}

/// Check a dataset in the prefix against its summary before it is indexed: rank2file
/// lists every rank of the job, the file count and bytes agree with the summary, and
/// every file is present with its size and CRC32 (where recorded).
fn verify_in_prefix(prefix: &Path, summary: &Summary, buf: usize) -> Result<(), IndexAddError> {
    let id = summary.id;
    let map = Rank2File::load(prefix, id)?;
    if !map.ranks.keys().copied().eq(0..summary.world_size) {
        return Err(IndexAddError::Ranks {
            path: Rank2File::path(prefix, id),
            ranks: map.ranks.keys().copied().collect(),
            world_size: summary.world_size,
        });
    }
    let (count, bytes) = map
        .ranks
        .values()
        .flatten()
        .fold((0u64, 0u64), |(n, b), f| (n + 1, b + f.size));
    if (count, bytes) != (summary.files, summary.bytes) {
        return Err(IndexAddError::Totals {
            path: Summary::path(prefix, id),
            files: summary.files,
            bytes: summary.bytes,
            listed_files: count,
            listed_bytes: bytes,
        });
    }
    for (rank, files) in &map.ranks {
        for f in files {
            let path = f
                .stored_path(prefix)
                .map_err(|why| IndexAddError::Path { rank: *rank, why })?;
            crate::integrity::check_file(&path, f.size, f.crc32, true, buf).map_err(|why| {
                IndexAddError::File {
                    rank: *rank,
                    name: f.name.clone(),
                    path: path.clone(),
                    why,
                }
            })?;
        }
    }
    Ok(())
}
