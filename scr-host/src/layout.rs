//! Where everything lives: every cache, control and prefix path of scr-rs, in one place.
//!
//! The runtime, `scr scavenge`/`postrun`, `scr run`'s node checks and the `scr` tools all
//! build their paths here, so a directory's name is written once and a tool can never look
//! somewhere the runtime does not write. The names follow SCR's layout:
//!
//! ```text
//! <store>[/<node>]/<user>/scr.<job>/                job directory in a cache store
//!     scr.dataset.<id>/                             one cached dataset
//! <cntl_base>[/<node>]/<user>/scr.<job>/            control directory (filemaps, nodes file,
//!     filemap_<rank>.scr, nodes.scr, transfer.<id>.<rank>.state)
//! <prefix>/.scr/                                    the prefix's state (index, flush, halt,
//!     index.scr  flush.scr  halt.scr  ids.scr  events.jsonl  app.conf  lock  run.scr
//!     nodes.scr
//!     scr.dataset.<id>/                             one flushed dataset's records
//!         summary.scr  rank2file.scr  rank2file.<n>.scr  writes.scr  writes.<n>.scr
//!         failed.scr
//!         files/<name>                              a file relocated by a name clash
//!         scavenge/rank_<r>/  scavenge/rank_<r>.scr  scavenge's staging
//! ```
//!
//! `[/<node>]` appears only when nodes are simulated (`node_names`): one machine then
//! holds every "node's" local storage side by side.

use std::path::{Path, PathBuf};

/// Name of a cached or flushed dataset's directory: `scr.dataset.<id>`.
pub(crate) fn dataset_dir_name(id: u64) -> String {
    format!("scr.dataset.{id}")
}

/// The id of a directory named [`dataset_dir_name`], `None` for any other name.
pub(crate) fn parse_dataset_dir_name(name: &str) -> Option<u64> {
    name.strip_prefix("scr.dataset.")?.parse().ok()
}

/// `<base>/<node>` when nodes are simulated, else `<base>`: node-local storage.
pub(crate) fn node_local(base: &Path, simulated: bool, node: &str) -> PathBuf {
    if simulated {
        base.join(node)
    } else {
        base.to_path_buf()
    }
}

/// A job's directory below a node-local base, relative to it: `<user>/scr.<job>`.
pub(crate) fn job_subdir(user: &str, job_id: &str) -> PathBuf {
    PathBuf::from(user).join(format!("scr.{job_id}"))
}

/// A job's directory in a node-local base (a cache store or `cntl_base`):
/// `<base>[/<node>]/<user>/scr.<job>`.
pub(crate) fn job_dir(
    base: &Path,
    simulated: bool,
    node: &str,
    user: &str,
    job_id: &str,
) -> PathBuf {
    node_local(base, simulated, node).join(job_subdir(user, job_id))
}

/// A cached dataset's directory in a store's job directory ([`job_dir`]).
pub(crate) fn cache_dataset_dir(store_job_dir: &Path, id: u64) -> PathBuf {
    store_job_dir.join(dataset_dir_name(id))
}

/// The mark that the `current` setting (SCR_CURRENT) was applied by a run of this job:
/// later runs of the job (relaunches in the same allocation) restart as usual instead of
/// going back to the named checkpoint again, as SCR applies SCR_CURRENT once.
pub(crate) fn current_applied_file(cntl_dir: &Path) -> PathBuf {
    cntl_dir.join("current.applied")
}

/// The nodes file in a control directory (SCR's `nodes.scr`: `NODES`, how many nodes the
/// run uses), written by the first rank of each node; [`prefix_nodes_file`] is the copy
/// `scr run` reads.
pub fn nodes_file(cntl_dir: &Path) -> PathBuf {
    cntl_dir.join("nodes.scr")
}

/// The prefix's nodes file: how many nodes the newest run used, written by its rank 0 at
/// init. `scr run` reads it before a relaunch: with `min_nodes` unset, the relaunch
/// needs as many nodes as that run used (SCR's rule; the step may have used fewer than
/// `scr run` gave it). `scr run` removes it before its first launch, as SCR's
/// `scr_prerun` does, so a count from an earlier allocation is never used.
pub fn prefix_nodes_file(prefix: &Path) -> PathBuf {
    scr_dir(prefix).join("nodes.scr")
}

/// A transfer's persisted state in a control directory: `transfer.<id>.<rank>.state`.
pub(crate) fn transfer_state(cntl_dir: &Path, id: u64, rank: u32) -> PathBuf {
    cntl_dir.join(format!("transfer.{id}.{rank}.state"))
}

/// A fetch's persisted transfer state in a control directory: `fetch.<id>.<rank>.state`.
pub(crate) fn fetch_state(cntl_dir: &Path, id: u64, rank: u32) -> PathBuf {
    cntl_dir.join(format!("fetch.{id}.{rank}.state"))
}

/// The `.scr` directory of a prefix.
pub(crate) fn scr_dir(prefix: &Path) -> PathBuf {
    prefix.join(".scr")
}

/// A flushed dataset's directory of records: `<prefix>/.scr/scr.dataset.<id>`.
pub(crate) fn prefix_dataset_dir(prefix: &Path, id: u64) -> PathBuf {
    scr_dir(prefix).join(dataset_dir_name(id))
}

/// The prefix's index of flushed datasets.
pub(crate) fn index_file(prefix: &Path) -> PathBuf {
    scr_dir(prefix).join("index.scr")
}

/// The prefix's flush file (which dataset is where).
pub(crate) fn flush_file(prefix: &Path) -> PathBuf {
    scr_dir(prefix).join("flush.scr")
}

/// The prefix's halt file.
pub fn halt_file(prefix: &Path) -> PathBuf {
    scr_dir(prefix).join("halt.scr")
}

/// The last dataset and checkpoint ids used with a prefix.
pub(crate) fn ids_file(prefix: &Path) -> PathBuf {
    scr_dir(prefix).join("ids.scr")
}

/// `scr run`'s state across relaunches (runs left, nodes used).
pub(crate) fn run_state_file(prefix: &Path) -> PathBuf {
    scr_dir(prefix).join("run.scr")
}

/// The prefix's event log (one JSON object per line).
pub(crate) fn events_file(prefix: &Path) -> PathBuf {
    scr_dir(prefix).join("events.jsonl")
}

/// The configuration calls the application made, recorded for the `scr` tools.
pub(crate) fn app_conf_file(prefix: &Path) -> PathBuf {
    scr_dir(prefix).join("app.conf")
}

/// The lock file serializing updates of the prefix's state files (index, flush file).
pub(crate) fn lock_file(prefix: &Path) -> PathBuf {
    scr_dir(prefix).join("lock")
}

/// The note beside a flushed dataset's summary that marks it failed (kept so a rebuilt
/// index keeps the mark).
pub(crate) fn failed_note_file(prefix: &Path, id: u64) -> PathBuf {
    prefix_dataset_dir(prefix, id).join("failed.scr")
}

/// A flushed dataset's summary.
pub(crate) fn summary_file(prefix: &Path, id: u64) -> PathBuf {
    prefix_dataset_dir(prefix, id).join("summary.scr")
}

/// A flushed dataset's rank2file map (its root, or the whole map of an earlier release).
pub(crate) fn rank2file_file(prefix: &Path, id: u64) -> PathBuf {
    prefix_dataset_dir(prefix, id).join("rank2file.scr")
}

/// Name of part `n` of a rank2file tree: `rank2file.<n>.scr`.
pub(crate) fn rank2file_part_name(n: u32) -> String {
    format!("rank2file.{n}.scr")
}

/// Part `n` of a flushed dataset's rank2file tree.
pub(crate) fn rank2file_part_file(prefix: &Path, id: u64, n: u32) -> PathBuf {
    prefix_dataset_dir(prefix, id).join(rank2file_part_name(n))
}

/// What the flush of dataset `id` may write, as earlier releases recorded it.
pub(crate) fn writes_file(prefix: &Path, id: u64) -> PathBuf {
    prefix_dataset_dir(prefix, id).join("writes.scr")
}

/// What the ranks of rank2file block `n` may write in the flush of dataset `id`.
pub(crate) fn writes_part_file(prefix: &Path, id: u64, n: u32) -> PathBuf {
    prefix_dataset_dir(prefix, id).join(format!("writes.{n}.scr"))
}

/// Where a flush of dataset `id` puts the file `name` when the prefix already holds a
/// file at `<prefix>/<name>`, relative to the prefix: `.scr/scr.dataset.<id>/files/<name>`
/// (see `runtime::prefix::relocated` for why).
pub fn relocated(id: u64, name: &str) -> String {
    format!(".scr/{}/files/{name}", dataset_dir_name(id))
}

/// The staging directory of dataset `id` for scavenge.
pub fn stage_dir(prefix: &Path, id: u64) -> PathBuf {
    prefix_dataset_dir(prefix, id).join("scavenge")
}

/// Scavenge's staging directory of rank `rank`'s files.
pub(crate) fn rank_stage_dir(prefix: &Path, id: u64, rank: u32) -> PathBuf {
    stage_dir(prefix, id).join(format!("rank_{rank}"))
}

/// Scavenge's manifest of rank `rank`'s staged files.
pub(crate) fn rank_manifest_file(prefix: &Path, id: u64, rank: u32) -> PathBuf {
    stage_dir(prefix, id).join(format!("rank_{rank}.scr"))
}

/// `path` relative to `dir` (as recorded in the filemap); a path outside `dir` unchanged.
pub(crate) fn relative_to(dir: &Path, path: &str) -> String {
    let p = Path::new(path);
    p.strip_prefix(dir)
        .unwrap_or(p)
        .to_string_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_follow_scrs_layout() {
        let p = Path::new("/p");
        assert_eq!(
            job_dir(Path::new("/dev/shm"), true, "n1", "u", "42"),
            Path::new("/dev/shm/n1/u/scr.42")
        );
        assert_eq!(
            job_dir(Path::new("/dev/shm"), false, "n1", "u", "42"),
            Path::new("/dev/shm/u/scr.42")
        );
        assert_eq!(
            cache_dataset_dir(Path::new("/c/u/scr.1"), 7),
            Path::new("/c/u/scr.1/scr.dataset.7")
        );
        assert_eq!(
            summary_file(p, 3),
            Path::new("/p/.scr/scr.dataset.3/summary.scr")
        );
        assert_eq!(
            rank2file_part_file(p, 3, 2),
            Path::new("/p/.scr/scr.dataset.3/rank2file.2.scr")
        );
        assert_eq!(relocated(3, "a/b"), ".scr/scr.dataset.3/files/a/b");
        assert_eq!(
            rank_manifest_file(p, 3, 5),
            Path::new("/p/.scr/scr.dataset.3/scavenge/rank_5.scr")
        );
        assert_eq!(
            transfer_state(Path::new("/c"), 4, 2),
            Path::new("/c/transfer.4.2.state")
        );
    }

    #[test]
    fn dataset_dir_names_round_trip_and_others_are_refused() {
        assert_eq!(parse_dataset_dir_name(&dataset_dir_name(12)), Some(12));
        assert_eq!(parse_dataset_dir_name("scr.dataset.x"), None);
        assert_eq!(parse_dataset_dir_name("scr.12"), None);
    }
}
