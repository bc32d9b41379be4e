//! `scr index add`: record a dataset whose files, summary and rank2file are in the prefix,
//! after checking every file against rank2file (postrun's last step too). The index
//! edit itself is [`Index::add_complete`], shared with the other index edits.

use super::*;

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
) -> Result<(IndexEntry, bool), String> {
    let summary = find_summary(prefix, which)?;
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
        job_name,
        ..IndexEntry::default()
    };
    let current = Index::try_update(prefix, |ix| ix.add_complete(prefix, &entry))
        .map_err(|e| e.to_string())??;
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
fn find_summary(prefix: &Path, which: &str) -> Result<Summary, String> {
    let summaries: Vec<Summary> = std::fs::read_dir(prefix::scr_dir(prefix))
        .map_err(|e| format!("{}: {e}", prefix::scr_dir(prefix).display()))?
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
        ([], []) => Err(format!(
            "no dataset `{which}` in {}: no .scr/scr.dataset.<id>/summary.scr names it",
            prefix.display()
        )),
        (_, many) => Err(format!(
            "several datasets are named `{which}` (ids {:?}); give the id instead",
            many.iter().map(|s| s.id).collect::<Vec<_>>()
        )),
    }
}

/// Check a dataset in the prefix against its summary before it is indexed: rank2file
/// lists every rank of the job, the file count and bytes agree with the summary, and
/// every file is present with its size and CRC32 (where recorded).
fn verify_in_prefix(prefix: &Path, summary: &Summary, buf: usize) -> Result<(), String> {
    let id = summary.id;
    let map = Rank2File::load(prefix, id).map_err(|e| e.to_string())?;
    if !map.ranks.keys().copied().eq(0..summary.world_size) {
        return Err(format!(
            "{}: lists ranks {:?}, the dataset was written by {} ranks",
            Rank2File::path(prefix, id).display(),
            map.ranks.keys().collect::<Vec<_>>(),
            summary.world_size
        ));
    }
    let (count, bytes) = map
        .ranks
        .values()
        .flatten()
        .fold((0u64, 0u64), |(n, b), f| (n + 1, b + f.size));
    if (count, bytes) != (summary.files, summary.bytes) {
        return Err(format!(
            "{}: {} files of {} bytes, rank2file lists {count} of {bytes}",
            Summary::path(prefix, id).display(),
            summary.files,
            summary.bytes
        ));
    }
    for (rank, files) in &map.ranks {
        for f in files {
            let path = f
                .stored_path(prefix)
                .map_err(|e| format!("rank {rank}: {e}"))?;
            crate::integrity::check_file(&path, f.size, f.crc32, true, buf).map_err(|why| {
                format!(
                    "rank {rank}: {} ({}): {why}; the dataset is not added",
                    f.name,
                    path.display()
                )
            })?;
        }
    }
    Ok(())
}
