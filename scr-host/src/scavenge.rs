//! `scr scavenge`, `scr postrun` and `scr index add`: after a job step ended without
//! flushing its newest checkpoint (killed at its time limit, a node lost, `flush = 0`),
//! copy that checkpoint out of node-local cache into the prefix, rebuild the files of lost
//! nodes through the dataset's redundancy scheme, and record it in the index.
//!
//! # Design: a per-node copy step, then one coordinating step
//!
//! Node-local storage (`/dev/shm`, a local SSD) can only be read on its node, so the
//! copy must run there; the rebuild needs the redundancy data of every member of a set,
//! which lives on several nodes. SCR's `scr_postrun` solves that with `scr_scavenge`, a
//! small parallel job (one process per node). Here the two parts are separate steps:
//!
//! 1. **Per node** (`scr scavenge --node NODE`): read the filemaps in that node's control
//!    directory, and copy each rank's application *and* redundancy files of the dataset
//!    through the store's transfer type (the same plugin a flush uses) into a staging
//!    directory of the prefix, `.scr/scr.dataset.<id>/scavenge/rank_<r>/`. The host
//!    re-reads every copy and checks its size and CRC32 against the filemap (as a flush
//!    does); a rank whose copy fails (a flipped byte, a missing file) is recorded as lost
//!    with the reason, never as good. Each rank's outcome goes into a manifest
//!    (`scavenge/rank_<r>.scr`). A site runs this on every node (`pdsh`, `srun
//!    --ntasks-per-node=1`); it needs no MPI and no other node.
//! 2. **Coordinating** (`scr postrun`, which also runs step 1 on every node of the
//!    allocation first: every simulated node and this host directly, the others through
//!    the remote runner, in two rounds that read redundancy files only where a rebuild
//!    needs them, [`Scavenger::copy_across`]): ranks without a good manifest are lost. For each redundancy set with lost members the
//!    scheme plugin's `recover` runs offline, its members as threads over the in-process
//!    host services ([`scr_plugin::inproc`]), each in its rank's staging directory (the
//!    survivors' copied data and redundancy files, an empty directory for the lost);
//!    what it rebuilds is checked against the CRC32s in the redundancy data. Then the
//!    application files are moved from staging to their place in the prefix, summary and
//!    rank2file are written, and the dataset is added to the index ([`index_add()`], which
//!    checks every file's size and CRC32 against rank2file again) as complete; it becomes
//!    the restart point when it is the newest checkpoint.
//!
//! Why not an MPI job: after the job step ended, launching another one costs a launcher
//! round and fails exactly when scavenge matters most (a node down, an allocation about
//! to end); a serial step per node needs only a shell there, and the staging directory on
//! the shared prefix is where the coordinating step meets the copies — also when a node
//! is reachable only later, or never.
//!
//! A flush of the same dataset that the kill interrupted (its index entry still open)
//! left files at the paths its `writes.scr` lists; those no complete dataset owns are
//! removed before placing, as the next init would have done
//! (`runtime::flush::resume`) — once the entry is complete, init no longer would.
//!
//! Never overwrites: a file the prefix already holds at an application file's name (an
//! older flushed checkpoint of the same name) makes the whole dataset go to its own
//! directory ([`prefix::relocated`]), as a flush does. A failure at any step (two members
//! of one XOR set lost, a rebuild that does not verify, a full prefix) leaves the index,
//! the flush file and every older dataset as they were, and removes the staging copies.

use crate::config::settings;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::config::{Config, View};
use crate::layout;
use crate::local_host::LocalHost;
use crate::registry::Registry;

use crate::state::filemap::{DatasetRecord, Filemap};
use crate::state::prefix::{
    self, check_relative, dataset_dir, FlushFile, FlushedFile, Index, IndexEntry, Rank2File,
    Summary,
};
use crate::state::read_state;
use crate::transfer::{collect, start_transfer, transfer_config, transfer_label, Planned};

/// State-file kind of a rank's scavenge manifest.
const MANIFEST: &str = "scavenge-rank";

/// What the per-node step found for one rank (`scavenge/rank_<r>.scr`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct RankManifest {
    /// World rank.
    pub rank: u32,
    /// The node whose cache held its files.
    pub node: String,
    /// Its filemap record of the dataset.
    pub record: DatasetRecord,
    /// The files copied into its staging directory and verified (application files
    /// first, then redundancy files), or why this rank's copy cannot be used.
    pub copied: Result<Vec<FlushedFile>, String>,
}

/// The outcome of the per-node step on one node (also the report a remote `scr
/// scavenge` ends with).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct NodeReport {
    /// Ranks whose files were copied and verified.
    pub copied: Vec<u32>,
    /// Ranks whose copy failed, with the reason.
    pub failed: Vec<(u32, String)>,
    /// Bytes copied.
    pub bytes: u64,
}

/// A dataset added to the index.
#[derive(Debug)]
pub struct Added {
    /// Its index entry.
    pub entry: IndexEntry,
    /// Ranks whose files were rebuilt through the scheme.
    pub rebuilt: Vec<u32>,
    /// Whether the files went to the dataset's own directory (names taken in the prefix).
    pub relocated: bool,
    /// Whether it became the restart point.
    pub current: bool,
    /// Bytes of application files added.
    pub bytes: u64,
    /// Nodes (as `node_names` names them) whose ranks left no copy at all.
    pub lost_nodes: Vec<String>,
}

/// The scavenge tools, for one job (the configuration's `job_id`, `user`, bases).
pub struct Scavenger {
    config: Config,
    registry: Registry,
    prefix: PathBuf,
    simulated: bool,
    progress: Box<dyn Progress>,
    /// How nodes other than this one are reached (see [`Scavenger::with_runner`]).
    runner: Option<crate::remote::Runner>,
    /// Every node given is this one (see [`Scavenger::on_the_node`]).
    per_node: bool,
    /// What each node's cache held when asked (see [`Scavenger::listings`]).
    asked: std::sync::Mutex<BTreeMap<String, Result<Listing, NodeError>>>,
    /// The nodes postrun's copy did not reach (named as lost in the event log).
    unreached: std::sync::Mutex<Vec<String>>,
}

/// Where the scavenge tools report progress: each rank's copy as it starts and ends,
/// and notes on what was found on the way (a node without a control directory, files an
/// interrupted flush left). A trait, not printing, because how to show it is the caller's
/// choice: the `scr` command draws a bar on a terminal and plain lines otherwise, a test
/// or another tool may collect or ignore them.
pub trait Progress: Send + Sync {
    /// A copy of `bytes` bytes, described by `what` (`<node> rank <r>`), starts.
    fn start(&self, what: &str, bytes: u64);
    /// A step ended (after `bytes` more bytes; 0 for a note): `line` says what happened.
    fn done(&self, line: &str, bytes: u64);
    /// No more copies follow: a display may go away.
    fn finish(&self);
}

/// `bytes` over `secs` as a human figure (`1.5 MiB in 0.20 s, 7.5 MiB/s`), for progress
/// lines and the closing summary of a copy.
pub fn rate(bytes: u64, secs: f64) -> String {
    let size = |b: f64| {
        if b >= (1u64 << 30) as f64 {
            format!("{:.2} GiB", b / (1u64 << 30) as f64)
        } else if b >= (1u64 << 20) as f64 {
            format!("{:.1} MiB", b / (1u64 << 20) as f64)
        } else {
            format!("{:.1} KiB", b / 1024.0)
        }
    };
    if secs <= 0.0 {
        size(bytes as f64)
    } else {
        format!(
            "{} in {secs:.2} s, {}/s",
            size(bytes as f64),
            size(bytes as f64 / secs)
        )
    }
}

/// The staging directory of dataset `id` in `prefix`.
pub fn stage_dir(prefix: &Path, id: u64) -> PathBuf {
    layout::stage_dir(prefix, id)
}

/// The staging directory of rank `rank`'s files of dataset `id`.
fn rank_stage(prefix: &Path, id: u64, rank: u32) -> PathBuf {
    layout::rank_stage_dir(prefix, id, rank)
}

/// The manifest of rank `rank`'s staged files of dataset `id`.
fn manifest_path(prefix: &Path, id: u64, rank: u32) -> PathBuf {
    layout::rank_manifest_file(prefix, id, rank)
}

impl Scavenger {
    /// Tools for the job `config` describes; `prefix` overrides its `prefix`; `progress`
    /// receives every copy's start and end.
    pub fn new(config: Config, prefix: Option<PathBuf>, progress: Box<dyn Progress>) -> Scavenger {
        let registry = Registry::load(&config.search_path());
        Scavenger {
            // absolute: a node reached through ssh or pdsh starts in another directory
            prefix: {
                let p = prefix.unwrap_or_else(|| PathBuf::from(config.get(settings::PREFIX)));
                std::path::absolute(&p).unwrap_or(p)
            },
            simulated: !config.get(settings::NODE_NAMES).is_empty(),
            registry,
            config,
            progress,
            runner: None,
            per_node: false,
            asked: Default::default(),
            unreached: Default::default(),
        }
    }

    /// The prefix directory.
    pub fn prefix(&self) -> &Path {
        &self.prefix
    }

    /// The nodes whose caches postrun reaches: every simulated node (`node_names`, in
    /// order of first appearance); with a remote runner, every node of the allocation;
    /// else this host.
    pub fn reachable_nodes(&self) -> Vec<String> {
        if !self.simulated && self.runner.is_some() {
            if let Ok(a) = crate::launch::allocation(&self.config, &|v| std::env::var(v).ok()) {
                return a.nodes;
            }
        }
        if self.simulated {
            let mut seen = BTreeSet::new();
            self.config
                .get(settings::NODE_NAMES)
                .split(',')
                .map(|n| n.trim().to_string())
                .filter(|n| !n.is_empty() && seen.insert(n.clone()))
                .collect()
        } else {
            vec![std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "localhost".into())]
        }
    }

    /// The job's directory below the node-local `base` on `node` (`simulated`: when
    /// nodes are simulated and `base` is node-local).
    fn job_dir(&self, base: &Path, simulated: bool, node: &str) -> PathBuf {
        layout::job_dir(
            base,
            simulated,
            node,
            &self.config.get(settings::USER),
            &self.config.get(settings::JOB_ID),
        )
    }

    /// The job's control directory on `node`.
    pub(crate) fn cntl_dir(&self, node: &str) -> PathBuf {
        self.job_dir(
            Path::new(&self.config.get(settings::CNTL_BASE)),
            self.simulated,
            node,
        )
    }

    /// The job's directory in `store` on `node` (as the runtime's `store_dir`).
    fn store_dir(&self, store: &str, node: &str) -> PathBuf {
        let view = self
            .config
            .store(store)
            .map(|s| self.config.store_view(s))
            .unwrap_or(View::Node);
        self.job_dir(Path::new(store), self.simulated && view == View::Node, node)
    }

    /// Every rank's filemap in `node`'s control directory (unreadable ones are reported
    /// and skipped: that rank then counts as lost).
    fn filemaps(&self, node: &str) -> Vec<Filemap> {
        let dir = self.cntl_dir(node);
        // the filemaps say which files to copy where: only from a control directory the
        // runtime made (this user's, private, no link on the way; see
        // runtime::create_private_dir), never from one another user could have planted
        if dir.is_dir() {
            if let Err(e) = crate::private_dir::create_private_dir(
                Path::new(&self.config.get(settings::CNTL_BASE)),
                &dir,
            ) {
                tracing::warn!(
                    node = %node,
                    "{e}; its filemaps are not trusted and its ranks count as lost"
                );
                return Vec::new();
            }
        }
        Filemap::owners_in(&dir)
            .into_iter()
            .filter_map(|(rank, _)| match Filemap::load(&dir, rank) {
                Ok(m) => Some(m),
                Err(e) => {
                    tracing::warn!(node = %node, rank, "{e}; its files are treated as lost");
                    None
                }
            })
            .collect()
    }

    /// The newest checkpoint complete in the filemaps of `nodes` (the newest output only
    /// when no checkpoint is cached), with its name, and whether the prefix's index
    /// already holds it complete. A checkpoint comes first: an output written after it
    /// (and flushed, as outputs always are) must not hide the checkpoint the next run
    /// restarts from.
    pub(crate) fn newest_cached(&self, nodes: &[String]) -> Option<(u64, String, bool)> {
        let (records, unreached) = self.cached_records(nodes);
        for (_, why) in unreached {
            // (`why` names the node)
            self.progress.done(&format!("cache not listed: {why}"), 0);
        }
        let newest = to_scavenge(records.into_iter())?;
        let index = Index::load_or_rebuild(&self.prefix).unwrap_or_else(|e| {
            tracing::warn!("{e}; treating the index as empty");
            Index::default()
        });
        let held = index
            .datasets
            .get(&newest.id)
            .is_some_and(|e| e.complete && e.failed.is_none());
        Some((newest.id, newest.name, held))
    }
}

mod across;
mod copy;
mod index_add;
mod index_import;
pub use across::{Listing, NodeCopy, NodeError};
pub use copy::Parts;
mod rebuild;
/// What [`RebuildError::WrongData`] says is wrong.
pub use crate::integrity::VerifyError;
pub use index_add::{index_add, IndexAddError};
pub use index_import::{index_import, Import, ImportError};
pub use rebuild::{LostRanks, PlaceError, PostrunError, RebuildError, SetRefusal};

/// Why there is nothing to scavenge; not a failure (`scr scavenge` and `scr postrun`
/// say it and exit 0). Its text is the sentence the command prints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NothingToDo {
    /// The dataset asked for is complete in the prefix's index already.
    InPrefix(u64),
    /// The nodes' caches hold no complete dataset.
    NothingCached(Vec<String>),
    /// The newest dataset in cache is complete in the prefix already.
    NewestInPrefix {
        /// Its id.
        id: u64,
        /// Its name.
        name: String,
    },
}

impl std::fmt::Display for NothingToDo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NothingToDo::InPrefix(id) => {
                write!(f, "dataset {id} is in the prefix already; nothing to scavenge")
            }
            NothingToDo::NothingCached(nodes) => write!(
                f,
                "nothing to scavenge: no complete dataset in the cache of node(s) {}",
                nodes.join(", ")
            ),
            NothingToDo::NewestInPrefix { id, name } => write!(
                f,
                "{name} (dataset {id}), the newest in cache, is in the prefix already; nothing to scavenge"
            ),
        }
    }
}

/// The dataset to work on: the one asked for, else the newest complete one in `nodes`'
/// cache; [`NothingToDo`] when it is in the prefix already or nothing is cached.
pub fn choose(sc: &Scavenger, nodes: &[String], id: Option<u64>) -> Result<u64, NothingToDo> {
    if let Some(id) = id {
        let held = Index::load_or_rebuild(sc.prefix())
            .ok()
            .and_then(|ix| ix.datasets.get(&id).cloned())
            .is_some_and(|e| e.complete && e.failed.is_none());
        if held {
            return Err(NothingToDo::InPrefix(id));
        }
        return Ok(id);
    }
    match sc.newest_cached(nodes) {
        None => Err(NothingToDo::NothingCached(nodes.to_vec())),
        Some((id, name, true)) => Err(NothingToDo::NewestInPrefix { id, name }),
        Some((id, _, false)) => Ok(id),
    }
}

/// The per-node step on every node of `nodes` (`scr scavenge`): copy `parts` of dataset
/// `id` (of the ranks `only`, when given) into staging, keeping what earlier runs staged
/// for other nodes. The report sums the nodes.
pub fn scavenge(
    sc: &Scavenger,
    nodes: &[String],
    id: u64,
    parts: &Parts,
    only: Option<&BTreeSet<u32>>,
) -> NodeReport {
    let mut all = NodeReport::default();
    for node in nodes {
        let r = sc.copy_parts(node, id, parts, only);
        all.copied.extend(r.copied);
        all.failed.extend(r.failed);
        all.bytes += r.bytes;
    }
    sc.finish_progress();
    all
}

/// The dataset `scr postrun` works on: with `no_copy` and no id, the newest one staged
/// (an error when none is); else as [`choose`] says.
pub fn postrun_target(
    sc: &Scavenger,
    nodes: &[String],
    id: Option<u64>,
    no_copy: bool,
) -> Result<Result<u64, NothingToDo>, PostrunError> {
    if no_copy && id.is_none() {
        return match newest_staged(sc.prefix()) {
            Some(id) => Ok(Ok(id)),
            None => Err(PostrunError::NothingStaged(prefix::scr_dir(sc.prefix()))),
        };
    }
    Ok(choose(sc, nodes, id))
}

/// The newest dataset id with a staging directory in `prefix`.
pub(crate) fn newest_staged(prefix: &Path) -> Option<u64> {
    std::fs::read_dir(prefix::scr_dir(prefix))
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| layout::parse_dataset_dir_name(&e.file_name().to_string_lossy()))
        .filter(|&id| stage_dir(prefix, id).is_dir())
        .max()
}

/// Record the scavenge, and the nodes found lost, in the event log (`scr log` counts
/// them).
pub fn log_scavenge(sc: &Scavenger, added: &Added, started: Instant) {
    let e = &added.entry;
    let job = sc.config.get(settings::JOB_ID);
    // where the configuration's `log_*` keys send events
    let sinks = crate::events::Sinks::from_config(&sc.config);
    if !added.lost_nodes.is_empty() {
        sinks.record(
            sc.prefix(),
            &job,
            crate::events::Event::LostNodes {
                nodes: added.lost_nodes.clone(),
            },
        );
    }
    sinks.record(
        sc.prefix(),
        &job,
        crate::events::Event::Scavenge {
            name: e.name.clone(),
            id: e.id,
            bytes: added.bytes,
            seconds: started.elapsed().as_secs_f64(),
            rebuilt_ranks: added.rebuilt.clone(),
        },
    );
}

/// `scr index add NAME|ID` with the settings of `config` when it loads (the copy buffer
/// size, the job name recorded in the entry): see [`index_add()`].
pub fn index_add_with(
    config: Option<&Config>,
    prefix: &Path,
    which: &str,
) -> Result<(IndexEntry, bool), IndexAddError> {
    let buf = config.map_or(1 << 20, Config::file_buf_size);
    let job = config
        .map(|c| c.get(settings::JOB_NAME))
        .filter(|n| !n.is_empty());
    index_add(prefix, which, false, job, buf)
}

/// Which cached dataset scavenge saves: the newest complete checkpoint, else the newest
/// complete output (see [`Scavenger::newest_cached`]).
fn to_scavenge(datasets: impl Iterator<Item = DatasetRecord>) -> Option<DatasetRecord> {
    datasets
        .filter(|d| d.complete)
        .max_by_key(|d| (d.checkpoint_id.is_some(), d.checkpoint_id, d.id))
}

#[cfg(test)]
mod tests;
