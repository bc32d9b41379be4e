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
//! 2. **Coordinating** (`scr postrun`, which also runs step 1 itself for every node whose
//!    directories it can reach — every simulated node here, this host otherwise): ranks
//!    without a good manifest are lost. For each redundancy set with lost members the
//!    scheme plugin's `recover` runs offline, its members as threads over the in-process
//!    host services ([`scr_plugin::inproc`]), each in its rank's staging directory (the
//!    survivors' copied data and redundancy files, an empty directory for the lost);
//!    what it rebuilds is checked against the CRC32s in the redundancy data. Then the
//!    application files are moved from staging to their place in the prefix, summary and
//!    rank2file are written, and the dataset is added to the index ([`index_add`], which
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

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use abi_stable::std_types::{RNone, RSome};
use scr_plugin::RecoverRequest;
use serde::{Deserialize, Serialize};

use crate::config::{Config, View};
use crate::registry::Registry;
use crate::runtime::cache;
use crate::runtime::flush::{collect, start_transfer, transfer_config, transfer_label, Planned};
use crate::runtime::local_host::LocalHost;
use crate::runtime::prefix::{
    self, check_relative, dataset_dir, FlushFile, FlushedFile, Index, IndexEntry, Rank2File,
    Summary,
};
use crate::runtime::{node_local, DatasetRecord, Filemap};
use crate::state::read_state;

/// State-file kind of a rank's scavenge manifest.
const MANIFEST: &str = "scavenge-rank";

/// What the per-node step found for one rank (`scavenge/rank_<r>.scr`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RankManifest {
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

/// The outcome of the per-node step on one node.
#[derive(Debug, Default)]
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
}

/// Where the scavenge tools report progress: each rank's copy as it starts and ends,
/// and notes on what was found on the way (a node without a control directory, files an
/// interrupted flush left). A trait, not printing, because how to show it is the caller's
/// choice: the `scr` command draws a bar on a terminal and plain lines otherwise, a test
/// or another tool may collect or ignore them.
pub trait Progress {
    /// A copy of `bytes` bytes, described by `what` (`<node> rank <r>`), starts.
    fn start(&self, what: &str, bytes: u64);
    /// A step ended (after `bytes` more bytes; 0 for a note): `line` says what happened.
    fn done(&self, line: &str, bytes: u64);
    /// No more copies follow: a display may go away.
    fn finish(&self);
}

/// Progress nobody watches: every report is dropped.
pub struct NoProgress;

impl Progress for NoProgress {
    fn start(&self, _: &str, _: u64) {}
    fn done(&self, _: &str, _: u64) {}
    fn finish(&self) {}
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
    dataset_dir(prefix, id).join("scavenge")
}

fn rank_stage(prefix: &Path, id: u64, rank: u32) -> PathBuf {
    stage_dir(prefix, id).join(format!("rank_{rank}"))
}

fn manifest_path(prefix: &Path, id: u64, rank: u32) -> PathBuf {
    stage_dir(prefix, id).join(format!("rank_{rank}.scr"))
}

impl Scavenger {
    /// Tools for the job `config` describes; `prefix` overrides its `prefix`; `progress`
    /// receives every copy's start and end.
    pub fn new(config: Config, prefix: Option<PathBuf>, progress: Box<dyn Progress>) -> Scavenger {
        let registry = Registry::load(&config.search_path());
        Scavenger {
            prefix: prefix.unwrap_or_else(|| PathBuf::from(config.str("prefix"))),
            simulated: !config.str("node_names").is_empty(),
            registry,
            config,
            progress,
        }
    }

    /// The prefix directory.
    pub fn prefix(&self) -> &Path {
        &self.prefix
    }

    /// The nodes whose directories this process can reach: every simulated node
    /// (`node_names`, in order of first appearance), else this host.
    pub fn reachable_nodes(&self) -> Vec<String> {
        if self.simulated {
            let mut seen = BTreeSet::new();
            self.config
                .str("node_names")
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

    fn job_dir(&self) -> PathBuf {
        PathBuf::from(self.config.str("user")).join(format!("scr.{}", self.config.str("job_id")))
    }

    /// The job's control directory on `node`.
    pub fn cntl_dir(&self, node: &str) -> PathBuf {
        node_local(
            Path::new(&self.config.str("cntl_base")),
            self.simulated,
            node,
        )
        .join(self.job_dir())
    }

    /// The job's directory in `store` on `node` (as the runtime's `store_dir`).
    fn store_dir(&self, store: &str, node: &str) -> PathBuf {
        let view = self
            .config
            .store(store)
            .map(|s| self.config.store_view(s))
            .unwrap_or(View::Node);
        node_local(Path::new(store), self.simulated && view == View::Node, node)
            .join(self.job_dir())
    }

    /// Every rank's filemap in `node`'s control directory (unreadable ones are reported
    /// and skipped: that rank then counts as lost).
    fn filemaps(&self, node: &str) -> Vec<Filemap> {
        let dir = self.cntl_dir(node);
        // the filemaps say which files to copy where: only from a control directory the
        // runtime made (this user's, private, no link on the way; see
        // runtime::create_private_dir), never from one another user could have planted
        if dir.is_dir() {
            if let Err(e) =
                crate::runtime::create_private_dir(Path::new(&self.config.str("cntl_base")), &dir)
            {
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
    pub fn newest_cached(&self, nodes: &[String]) -> Option<(u64, String, bool)> {
        let newest = to_scavenge(
            nodes
                .iter()
                .flat_map(|n| self.filemaps(n))
                .flat_map(|m| m.datasets.into_values()),
        )?;
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

    /// The per-node step: copy every rank's files of dataset `id` held on `node` into
    /// the staging directory, verified, and write each rank's manifest.
    pub fn copy_node(&self, node: &str, id: u64) -> NodeReport {
        let mut report = NodeReport::default();
        let buf = self.config.u64("file_buf_size").clamp(4096, 64 << 20) as usize;
        let cntl = self.cntl_dir(node);
        if !cntl.is_dir() {
            self.progress.done(
                &format!(
                    "{node}: no control directory {}: the ranks that ran there count as lost",
                    cntl.display()
                ),
                0,
            );
        }
        for map in self.filemaps(node) {
            let Some(record) = map.datasets.get(&id).filter(|d| d.complete).cloned() else {
                continue;
            };
            let rank = map.rank;
            let stage = rank_stage(&self.prefix, id, rank);
            let path = manifest_path(&self.prefix, id, rank);
            // a rank whose filemap is on two nodes (a relaunch on other nodes left the
            // old one): a verified copy of the same record from the other node stands,
            // rather than being removed for a second copy that may fail
            if let Ok(prev) = read_state::<RankManifest>(&path, MANIFEST) {
                if prev.node != node && prev.copied.is_ok() && prev.record == record {
                    self.progress.done(
                        &format!(
                            "{node}: rank {rank}: already copied from {}; this node's copy is not used",
                            prev.node
                        ),
                        0,
                    );
                    continue;
                }
            }
            let _ = std::fs::remove_dir_all(&stage);
            let bytes: u64 = record.files.iter().map(|f| f.size).sum();
            self.progress.start(&format!("{node} rank {rank}"), bytes);
            let started = Instant::now();
            let copied = self.copy_rank(node, &record, &stage, buf);
            if copied.is_err() {
                // nothing of a failed copy stays: the rank counts as lost
                let _ = std::fs::remove_dir_all(&stage);
            }
            let line = match &copied {
                Ok(files) => format!(
                    "{node}: rank {rank}: {} file(s) and {} redundancy file(s) of {}, {}",
                    record.files.len(),
                    files.len() - record.files.len(),
                    record.name,
                    rate(bytes, started.elapsed().as_secs_f64())
                ),
                Err(why) => format!("{node}: rank {rank}: NOT copied: {why}"),
            };
            self.progress.done(&line, bytes);
            let manifest = RankManifest {
                rank,
                node: node.to_string(),
                record,
                copied: copied.clone(),
            };
            if let Err(e) = prefix::write(&path, MANIFEST, &manifest) {
                report.failed.push((rank, e.to_string()));
                continue;
            }
            match copied {
                Ok(_) => {
                    report.copied.push(rank);
                    report.bytes += bytes;
                }
                Err(why) => report.failed.push((rank, why)),
            }
        }
        report
    }

    /// Copy one rank's application and redundancy files through the store's transfer
    /// type, each verified by the host after the copy (size and the CRC32 the filemap
    /// recorded; the source's CRC32 for redundancy files, which have no record).
    fn copy_rank(
        &self,
        node: &str,
        record: &DatasetRecord,
        stage: &Path,
        buf: usize,
    ) -> Result<Vec<FlushedFile>, String> {
        let store = &record.descriptor.store;
        // a store the configuration defines, in a dataset directory the runtime made
        // (private, this user's, no link on the way): a damaged or forged filemap must not
        // make scavenge copy other files into the prefix
        if self.config.store(store).is_none() {
            return Err(format!(
                "the filemap names store {store}, which the configuration does not define; run postrun with the job's configuration"
            ));
        }
        let cache = self
            .store_dir(store, node)
            .join(format!("scr.dataset.{}", record.id));
        if cache.is_dir() {
            crate::runtime::create_private_dir(Path::new(store), &cache)
                .map_err(|e| e.to_string())?;
        }
        let mut files = Vec::new();
        for f in &record.files {
            check_relative(&f.name)?;
            files.push(Planned {
                name: f.name.clone(),
                source: cache.join(&f.name),
                destination: stage.join(&f.name),
                size: f.size,
                crc32: f.crc32,
                stored: None,
            });
        }
        for r in &record.redundancy {
            check_relative(r)?;
            let source = cache.join(r);
            let size = std::fs::metadata(&source)
                .map_err(|e| format!("redundancy file {}: {e}", source.display()))?
                .len();
            files.push(Planned {
                name: r.clone(),
                source,
                destination: stage.join(r),
                size,
                crc32: None,
                stored: None,
            });
        }
        std::fs::create_dir_all(stage).map_err(|e| format!("{}: {e}", stage.display()))?;
        let label = transfer_label(&self.config, &self.registry, store);
        let host = LocalHost::new(
            record.descriptor.members.first().copied().unwrap_or(0),
            node,
            &format!("transfer {}", label.transfer_type),
            Arc::new(AtomicBool::new(false)),
        );
        let state = stage.with_extension("transfer.state");
        let config = transfer_config(&self.config, &label, &state);
        let started = start_transfer(&self.registry, &config, host, label, files)?;
        let out = collect(started, false, "recorded in the filemap", buf);
        let _ = std::fs::remove_file(&state);
        out
    }

    /// The coordinating step: from the manifests in the staging directory of dataset
    /// `id`, rebuild lost ranks through the scheme, move the files into the prefix, write
    /// summary and rank2file, and add the dataset to the index. On any failure nothing is
    /// added and the prefix is left as it was; the staging directory is removed either
    /// way (the cache still holds what it held).
    pub fn finish(&self, id: u64) -> Result<Added, String> {
        let out = self.finish_staged(id);
        let _ = std::fs::remove_dir_all(stage_dir(&self.prefix, id));
        // the dataset's directory goes too when scavenge made it and left nothing else
        let _ = std::fs::remove_dir(dataset_dir(&self.prefix, id));
        out
    }

    /// What [`Scavenger::finish`] does before cleaning up: read every rank's manifest,
    /// check they describe one dataset, rebuild the lost ranks, then place the files.
    fn finish_staged(&self, id: u64) -> Result<Added, String> {
        let manifests = read_manifests(&stage_dir(&self.prefix, id))?;
        let first = agreed_record(id, &manifests, &stage_dir(&self.prefix, id))?;
        let world = first.world_size;
        let lost = self.lost_ranks(world, &manifests);
        let mut files = copied_files(&manifests);
        let rebuilt: Vec<u32> = lost.keys().copied().collect();
        let node_names = self.config.str("node_names");
        let mut lost_nodes: Vec<String> = (0..world)
            .filter(|r| !manifests.contains_key(r))
            .filter_map(|r| node_names.split(',').nth(r as usize))
            .map(|n| n.trim().to_string())
            .collect();
        lost_nodes.dedup();
        if !lost.is_empty() {
            for (rank, fs) in self.rebuild(id, &manifests, &lost)? {
                files.insert(rank, fs);
            }
        }
        let bytes = files.values().flatten().map(|f| f.size).sum();
        self.place(id, &first, files)
            .map(|(entry, relocated, current)| Added {
                entry,
                rebuilt,
                relocated,
                current,
                bytes,
                lost_nodes,
            })
    }

    /// The ranks to rebuild and why: every rank of the job without a manifest (its
    /// node's cache was not reached or is gone; the node named when simulated), and
    /// every rank whose copy failed.
    fn lost_ranks(
        &self,
        world: u32,
        manifests: &BTreeMap<u32, RankManifest>,
    ) -> BTreeMap<u32, String> {
        let node_names = self.config.str("node_names");
        let node_of = |r: u32| {
            node_names
                .split(',')
                .nth(r as usize)
                .map(|n| format!(" (node {})", n.trim()))
                .unwrap_or_default()
        };
        let mut lost: BTreeMap<u32, String> = (0..world)
            .filter(|r| !manifests.contains_key(r))
            .map(|r| {
                (
                    r,
                    format!(
                        "no copy: its node's cache or control directory is gone or was not reachable{}",
                        node_of(r)
                    ),
                )
            })
            .collect();
        for m in manifests.values() {
            if let Err(why) = &m.copied {
                lost.insert(m.rank, why.clone());
            }
        }
        lost
    }

    /// Rebuild the files of the `lost` ranks, one redundancy set at a time, through the
    /// dataset's scheme run offline (members as threads). Returns each rebuilt rank's
    /// files, verified against the CRC32s carried in the redundancy data.
    fn rebuild(
        &self,
        id: u64,
        manifests: &BTreeMap<u32, RankManifest>,
        lost: &BTreeMap<u32, String>,
    ) -> Result<BTreeMap<u32, Vec<FlushedFile>>, String> {
        let survivors: Vec<&RankManifest> =
            manifests.values().filter(|m| m.copied.is_ok()).collect();
        let describe = |ranks: &[u32]| -> String {
            ranks
                .iter()
                .map(|r| format!("rank {r}: {}", lost[r]))
                .collect::<Vec<_>>()
                .join("; ")
        };
        // the sets, as every record names its own
        let mut sets: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
        for m in manifests.values() {
            sets.insert(
                m.record.descriptor.set_id,
                m.record.descriptor.members.clone(),
            );
        }
        let orphans: Vec<u32> = lost
            .keys()
            .copied()
            .filter(|r| !sets.values().any(|ms| ms.contains(r)))
            .collect();
        if !orphans.is_empty() {
            return Err(format!(
                "ranks {orphans:?} cannot be rebuilt: no member of their redundancy set survived ({}); nothing was added to the index",
                describe(&orphans)
            ));
        }
        let mut out = BTreeMap::new();
        let mut refusals = Vec::new();
        for (set_id, members) in &sets {
            let lost_here: Vec<u32> = members
                .iter()
                .copied()
                .filter(|r| lost.contains_key(r))
                .collect();
            if lost_here.is_empty() {
                continue;
            }
            let template = survivors
                .iter()
                .find(|m| m.record.descriptor.set_id == *set_id)
                .map(|m| m.record.clone());
            let Some(template) = template else {
                refusals.push(format!(
                    "set {set_id} (ranks {members:?}): no member survived, ranks {lost_here:?} cannot be rebuilt ({})",
                    describe(&lost_here)
                ));
                continue;
            };
            match self.rebuild_set(id, &template, members, manifests, lost) {
                Ok(done) => out.extend(done),
                Err(why) => refusals.push(format!(
                    "set {set_id} (ranks {members:?}): ranks {lost_here:?} cannot be rebuilt through {}: {why} [{}]",
                    template.descriptor.scheme,
                    describe(&lost_here)
                )),
            }
        }
        if refusals.is_empty() {
            Ok(out)
        } else {
            Err(format!(
                "{}; nothing was added to the index",
                refusals.join("; ")
            ))
        }
    }

    /// Rebuild the `lost` ranks of one redundancy set (`members`, described by
    /// `template`, a survivor's record): every member's scheme runs `recover` as a
    /// thread of an in-process world, the survivors from their staged files, the lost
    /// from empty directories. Each lost rank's rebuilt files, verified.
    fn rebuild_set(
        &self,
        id: u64,
        template: &DatasetRecord,
        members: &[u32],
        manifests: &BTreeMap<u32, RankManifest>,
        lost: &BTreeMap<u32, String>,
    ) -> Result<BTreeMap<u32, Vec<FlushedFile>>, String> {
        let d = &template.descriptor;
        let groups = self.member_nodes(members, manifests);
        let mut schemes = Vec::new();
        let mut requests = Vec::new();
        let mut dirs = Vec::new();
        for member in 0..members.len() {
            let (scheme, request, dir) =
                self.member_recovery(id, d, members, member, manifests, lost)?;
            requests.push(request);
            schemes.push(scheme);
            dirs.push(dir);
        }
        let group_refs: Vec<&str> = groups.iter().map(String::as_str).collect();
        let timeout = Duration::from_secs(self.config.u64("abort_timeout").max(60));
        let world = scr_plugin::inproc::World::new(&group_refs, timeout);
        let results = scr_plugin::inproc::run_in(&world, |host| {
            let m = host.rank() as usize;
            schemes[m]
                .raw()
                .recover(host.raw(), &requests[m])
                .into_result()
                .map(|v| v.into_vec())
                .map_err(|e| schemes[m].error("recover", e).to_string())
        });
        // what the scheme logged while rebuilding goes to this command's log, with the
        // rank it ran for
        let label = format!("scheme {}", d.scheme);
        for (member, level, message) in world.log_records() {
            let rank = members.get(member as usize).copied().unwrap_or(member);
            crate::log::plugin_message(level, rank, &label, &message);
        }
        let crc_expected = manifests
            .values()
            .any(|m| m.record.files.iter().any(|f| f.crc32.is_some()));
        let buf = self.config.u64("file_buf_size").clamp(4096, 64 << 20) as usize;
        let mut out = BTreeMap::new();
        for (member, (&rank, result)) in members.iter().zip(results).enumerate() {
            let metas = result?;
            if !lost.contains_key(&rank) {
                continue;
            }
            // a rank whose copy failed its check still has its filemap record: what the
            // scheme rebuilt must match it too (names, sizes, CRC32s)
            let own = manifests.get(&rank).map(|m| &m.record);
            let recs = cache::verify_rebuilt(rank, &metas, own, &dirs[member], crc_expected, buf)
                .map_err(|why| format!("{} rebuilt wrong data: {why}", d.scheme))?;
            out.insert(
                rank,
                recs.into_iter()
                    .map(|f| FlushedFile {
                        name: f.name,
                        size: f.size,
                        crc32: f.crc32,
                        stored: None,
                    })
                    .collect(),
            );
        }
        Ok(out)
    }

    /// The node of each member of a set (the group its scheme sees): where its manifest
    /// was found, else its simulated node name, else a placeholder for a lost rank.
    fn member_nodes(
        &self,
        members: &[u32],
        manifests: &BTreeMap<u32, RankManifest>,
    ) -> Vec<String> {
        let node_names: Vec<String> = self
            .config
            .str("node_names")
            .split(',')
            .map(|s| s.trim().to_string())
            .collect();
        members
            .iter()
            .map(|r| {
                manifests
                    .get(r)
                    .map(|m| m.node.clone())
                    .or_else(|| node_names.get(*r as usize).cloned())
                    .unwrap_or_else(|| format!("lost-rank-{r}"))
            })
            .collect()
    }

    /// What member `member` of a set needs to take part in the recovery: its scheme
    /// object, its recover request and its staging directory (emptied for a lost rank:
    /// nothing of a failed copy is used; a survivor's files as its record lists them).
    fn member_recovery(
        &self,
        id: u64,
        d: &crate::runtime::DescriptorRecord,
        members: &[u32],
        member: usize,
        manifests: &BTreeMap<u32, RankManifest>,
        lost: &BTreeMap<u32, String>,
    ) -> Result<(crate::registry::LoadedScheme, RecoverRequest, PathBuf), String> {
        let rank = members[member];
        let scheme = self
            .registry
            .new_scheme(&d.scheme_config(&self.config, member as u32, rank))
            .map_err(|e| e.to_string())?;
        let dir = rank_stage(&self.prefix, id, rank);
        let files = if lost.contains_key(&rank) {
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            RNone
        } else {
            RSome(cache::dataset_files(&manifests[&rank].record, &dir).files)
        };
        let request = RecoverRequest {
            dataset_id: id,
            dir: dir.display().to_string().into(),
            files,
        };
        Ok((scheme, request, dir))
    }

    /// Move every rank's verified files from staging to the prefix (their own names, or
    /// the dataset's directory when any name is taken), write rank2file and summary, and
    /// add the dataset to the index. Undone completely on failure.
    fn place(
        &self,
        id: u64,
        rec: &DatasetRecord,
        mut ranks: BTreeMap<u32, Vec<FlushedFile>>,
    ) -> Result<(IndexEntry, bool, bool), String> {
        let prefix = &self.prefix;
        for f in ranks.values().flatten() {
            check_relative(&f.name)?;
        }
        self.clear_interrupted_flush(id, rec);
        // never over an older dataset's files: any name taken sends all to the
        // dataset's own directory (prefix::relocated explains why)
        let relocate = ranks
            .values()
            .flatten()
            .any(|f| prefix.join(&f.name).symlink_metadata().is_ok());
        let mut moves = Moves::default();
        if let Err(e) = moves.move_all(prefix, id, relocate, &mut ranks) {
            moves.undo();
            return Err(format!("{e}; nothing was added to the index"));
        }
        match self.record_placed(id, rec, ranks) {
            Ok((entry, current)) => {
                // an interrupted flush's list of writes is settled with it
                crate::runtime::flush::resume::remove_writes(prefix, id);
                Ok((entry, relocate, current))
            }
            Err(e) => {
                let _ = std::fs::remove_file(Summary::path(prefix, id));
                Rank2File::remove(prefix, id);
                moves.undo();
                Err(format!("{e}; nothing was added to the index"))
            }
        }
    }

    /// Write the placed dataset's rank2file and summary, and add it to the index; the
    /// entry and whether it became the restart point.
    fn record_placed(
        &self,
        id: u64,
        rec: &DatasetRecord,
        ranks: BTreeMap<u32, Vec<FlushedFile>>,
    ) -> Result<(IndexEntry, bool), String> {
        let prefix = &self.prefix;
        let summary = Summary {
            id,
            name: rec.name.clone(),
            checkpoint_id: rec.checkpoint_id,
            world_size: rec.world_size,
            files: ranks.values().map(|v| v.len() as u64).sum(),
            bytes: ranks.values().flatten().map(|f| f.size).sum(),
            complete: true,
        };
        // (written as a tree like a job's flush, in parts of the default block size: the
        // root records the layout, so a job of any configuration reads it)
        Rank2File { ranks }
            .write(prefix, id, rec.world_size, prefix::RANK2FILE_BLOCK)
            .and_then(|_| prefix::write(&Summary::path(prefix, id), "summary", &summary))
            .map_err(|e| e.to_string())
            .and_then(|()| {
                index_add(
                    prefix,
                    &id.to_string(),
                    rec.output,
                    Some(self.config.str("job_name")).filter(|n| !n.is_empty()),
                    self.config.u64("file_buf_size").clamp(4096, 64 << 20) as usize,
                )
            })
    }

    /// A flush of dataset `id` that the killed job left open (index entry incomplete,
    /// not marked failed) wrote some of its files into the prefix, at the paths it listed
    /// in `writes.scr` (see `runtime::flush::resume`). Scavenge completes that dataset, so
    /// the next init will not clean them up: remove them here (and the transfers'
    /// `*.scr-part` files), except any path a complete dataset's rank2file names — the
    /// same rule init applies — so the dataset lands at its own names instead of being
    /// relocated beside the debris. When the owners cannot all be read, only the
    /// dataset's own directory is cleaned.
    fn clear_interrupted_flush(&self, id: u64, rec: &DatasetRecord) {
        let prefix = &self.prefix;
        let open = Index::load_or_rebuild(prefix)
            .ok()
            .and_then(|ix| ix.datasets.get(&id).cloned())
            .is_some_and(|e| !e.complete && e.failed.is_none());
        if !open {
            return;
        }
        let Ok(Some(writes)) = crate::runtime::flush::resume::load_writes(prefix, id) else {
            return;
        };
        let owned: Option<BTreeSet<PathBuf>> = (|| {
            let ix = Index::load_or_rebuild(prefix).ok()?;
            let mut owned = BTreeSet::new();
            for e in ix.datasets.values().filter(|e| e.complete) {
                for f in Rank2File::load(prefix, e.id).ok()?.ranks.values().flatten() {
                    owned.insert(f.stored_path(prefix).ok()?);
                }
            }
            Some(owned)
        })();
        let pure_output = rec.output && rec.checkpoint_id.is_none();
        let mut removed = 0;
        for w in writes.iter().filter(|w| check_relative(w).is_ok()) {
            let p = prefix.join(w);
            let own_dir = p.starts_with(dataset_dir(prefix, id));
            if !own_dir && (pure_output || owned.as_ref().is_none_or(|o| o.contains(&p))) {
                continue;
            }
            let mut part = p.clone().into_os_string();
            part.push(".scr-part");
            for q in [p, PathBuf::from(part)] {
                if q.symlink_metadata().is_ok_and(|m| m.is_file())
                    && std::fs::remove_file(&q).is_ok()
                {
                    removed += 1;
                }
            }
        }
        if removed > 0 {
            self.progress.done(
                &format!(
                    "removed {removed} file(s) that an interrupted flush of {} left in the prefix",
                    rec.name
                ),
                0,
            );
        }
    }

    /// Finish the progress display.
    pub fn finish_progress(&self) {
        self.progress.finish();
    }
}

/// Every rank's manifest staged in `stage` (`rank_<r>.scr`), by rank.
fn read_manifests(stage: &Path) -> Result<BTreeMap<u32, RankManifest>, String> {
    let mut manifests: BTreeMap<u32, RankManifest> = BTreeMap::new();
    for e in std::fs::read_dir(stage)
        .map_err(|e| {
            format!(
                "{}: {e}; run `scr scavenge` on the nodes first",
                stage.display()
            )
        })?
        .filter_map(Result::ok)
    {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("rank_") && name.ends_with(".scr") {
            let m: RankManifest = read_state(&e.path(), MANIFEST).map_err(|e| e.to_string())?;
            manifests.insert(m.rank, m);
        }
    }
    Ok(manifests)
}

/// The dataset record every manifest agrees on (name, checkpoint id, world size,
/// scheme), with no rank outside the job; refused when none was staged or they
/// disagree.
fn agreed_record(
    id: u64,
    manifests: &BTreeMap<u32, RankManifest>,
    stage: &Path,
) -> Result<DatasetRecord, String> {
    let Some(first) = manifests.values().next().map(|m| m.record.clone()) else {
        return Err(format!(
            "dataset {id}: no node's cache held any of its files (nothing was copied to {})",
            stage.display()
        ));
    };
    let world = first.world_size;
    if let Some(other) = manifests.values().find(|m| {
        m.record.name != first.name
            || m.record.checkpoint_id != first.checkpoint_id
            || m.record.world_size != world
            || m.record.descriptor.scheme != first.descriptor.scheme
    }) {
        return Err(format!(
            "dataset {id}: the caches disagree about it (rank {} holds {} of {} ranks, rank {} holds {} of {} ranks); scavenge it by hand",
            manifests.values().next().map_or(0, |m| m.rank),
            first.name,
            world,
            other.rank,
            other.record.name,
            other.record.world_size
        ));
    }
    if let Some(r) = manifests.keys().find(|&&r| r >= world) {
        return Err(format!(
            "dataset {id}: rank {r} holds it but it was written by {world} ranks"
        ));
    }
    Ok(first)
}

/// The files each rank's copy staged (those its record lists), for the ranks whose copy
/// succeeded.
fn copied_files(manifests: &BTreeMap<u32, RankManifest>) -> BTreeMap<u32, Vec<FlushedFile>> {
    manifests
        .values()
        .filter_map(|m| {
            let names: BTreeSet<&str> = m.record.files.iter().map(|f| f.name.as_str()).collect();
            m.copied.as_ref().ok().map(|v| {
                (
                    m.rank,
                    v.iter()
                        .filter(|f| names.contains(f.name.as_str()))
                        .cloned()
                        .collect(),
                )
            })
        })
        .collect()
}

/// The files moved from staging into the prefix so far and the directories made for
/// them (outermost first), so a failed placement can be undone.
#[derive(Default)]
struct Moves {
    moved: Vec<(PathBuf, PathBuf)>,
    made: Vec<PathBuf>,
}

impl Moves {
    /// Move every rank's staged files to their place in the prefix (the dataset's own
    /// directory when `relocate`), recording each file's stored path; refused when a
    /// name appeared in the prefix meanwhile.
    fn move_all(
        &mut self,
        prefix: &Path,
        id: u64,
        relocate: bool,
        ranks: &mut BTreeMap<u32, Vec<FlushedFile>>,
    ) -> Result<(), String> {
        for (&rank, fs) in ranks.iter_mut() {
            for f in fs.iter_mut() {
                let from = rank_stage(prefix, id, rank).join(&f.name);
                f.stored = relocate.then(|| prefix::relocated(id, &f.name));
                let to = f.stored_path(prefix)?;
                if !relocate && to.symlink_metadata().is_ok() {
                    return Err(format!(
                        "{} appeared in the prefix while scavenging; run postrun again",
                        to.display()
                    ));
                }
                if let Some(dir) = to.parent() {
                    let missing: Vec<PathBuf> = dir
                        .ancestors()
                        .take_while(|a| a.symlink_metadata().is_err())
                        .map(Path::to_path_buf)
                        .collect();
                    self.made.extend(missing.into_iter().rev());
                    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
                }
                std::fs::rename(&from, &to).map_err(|e| {
                    format!(
                        "rank {rank}: moving {} to {}: {e}",
                        from.display(),
                        to.display()
                    )
                })?;
                self.moved.push((from, to));
            }
        }
        Ok(())
    }

    /// Move every file back to staging (or remove it when that fails) and remove the
    /// directories made, innermost first.
    fn undo(&self) {
        for (from, to) in self.moved.iter().rev() {
            if std::fs::rename(to, from).is_err() {
                let _ = std::fs::remove_file(to);
            }
        }
        for d in self.made.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
    }
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
) -> Result<(IndexEntry, bool), String> {
    let summary = find_summary(prefix, which)?;
    let id = summary.id;
    verify_in_prefix(prefix, &summary, buf)?;
    let entry = IndexEntry {
        id,
        name: summary.name.clone(),
        checkpoint_id: summary.checkpoint_id,
        output: output || summary.checkpoint_id.is_none(),
        dir: format!("scr.dataset.{id}"),
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
            let id = e
                .file_name()
                .to_string_lossy()
                .strip_prefix("scr.dataset.")?
                .parse::<u64>()
                .ok()?;
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
            cache::check_file(&path, f.size, f.crc32, true, buf).map_err(|why| {
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

/// The per-node step on every node of `nodes` (`scr scavenge`): copy dataset `id` into
/// staging, keeping what earlier runs staged for other nodes. The report sums the nodes.
pub fn scavenge(sc: &Scavenger, nodes: &[String], id: u64) -> NodeReport {
    let mut all = NodeReport::default();
    for node in nodes {
        let r = sc.copy_node(node, id);
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
) -> Result<Result<u64, NothingToDo>, String> {
    if no_copy && id.is_none() {
        return match newest_staged(sc.prefix()) {
            Some(id) => Ok(Ok(id)),
            None => Err(format!(
                "nothing staged in {}: run `scr scavenge` on every node first",
                prefix::scr_dir(sc.prefix()).display()
            )),
        };
    }
    Ok(choose(sc, nodes, id))
}

/// The newest dataset id with a staging directory in `prefix`.
pub fn newest_staged(prefix: &Path) -> Option<u64> {
    std::fs::read_dir(prefix::scr_dir(prefix))
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| {
            e.file_name()
                .to_string_lossy()
                .strip_prefix("scr.dataset.")?
                .parse::<u64>()
                .ok()
        })
        .filter(|&id| stage_dir(prefix, id).is_dir())
        .max()
}

/// Postrun's own copy step: stage dataset `id` from every node in `nodes` afresh (copies
/// left by an earlier, interrupted scavenge are not used). The report sums the nodes.
pub fn copy_afresh(sc: &Scavenger, nodes: &[String], id: u64) -> NodeReport {
    let _ = std::fs::remove_dir_all(stage_dir(sc.prefix(), id));
    scavenge(sc, nodes, id)
}

/// Record the scavenge, and the nodes found lost, in the event log (`scr log` counts
/// them).
pub fn log_scavenge(sc: &Scavenger, added: &Added, started: Instant) {
    let e = &added.entry;
    let job = sc.config.str("job_id");
    if !added.lost_nodes.is_empty() {
        crate::events::log_event(
            sc.prefix(),
            &job,
            crate::events::Event::LostNodes {
                nodes: added.lost_nodes.clone(),
            },
        );
    }
    crate::events::log_event(
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
/// size, the job name recorded in the entry): see [`index_add`].
pub fn index_add_with(
    config: Option<&Config>,
    prefix: &Path,
    which: &str,
) -> Result<(IndexEntry, bool), String> {
    let buf = config.map_or(1 << 20, |c| {
        c.u64("file_buf_size").clamp(4096, 64 << 20) as usize
    });
    let job = config.map(|c| c.str("job_name")).filter(|n| !n.is_empty());
    index_add(prefix, which, false, job, buf)
}

/// Write a state file, for the tests of this module.
/// Which cached dataset scavenge saves: the newest complete checkpoint, else the newest
/// complete output (see [`Scavenger::newest_cached`]).
fn to_scavenge(datasets: impl Iterator<Item = DatasetRecord>) -> Option<DatasetRecord> {
    datasets
        .filter(|d| d.complete)
        .max_by_key(|d| (d.checkpoint_id.is_some(), d.checkpoint_id, d.id))
}

#[cfg(test)]
fn put(path: &Path, kind: &str, v: &impl Serialize) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    crate::state::write_state(path, kind, v).unwrap();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dataset(prefix: &Path, id: u64, name: &str, files: &[(&str, &[u8])]) {
        let mut ranks = BTreeMap::new();
        for (r, (n, data)) in files.iter().enumerate() {
            std::fs::create_dir_all(prefix.join(n).parent().unwrap()).unwrap();
            std::fs::write(prefix.join(n), data).unwrap();
            ranks.insert(
                r as u32,
                vec![FlushedFile {
                    name: n.to_string(),
                    size: data.len() as u64,
                    crc32: Some(crc32fast::hash(data)),
                    stored: None,
                }],
            );
        }
        let summary = Summary {
            id,
            name: name.into(),
            checkpoint_id: Some(id),
            world_size: files.len() as u32,
            files: files.len() as u64,
            bytes: files.iter().map(|f| f.1.len() as u64).sum(),
            complete: true,
        };
        put(
            &Rank2File::path(prefix, id),
            "rank2file",
            &Rank2File { ranks },
        );
        put(&Summary::path(prefix, id), "summary", &summary);
    }

    #[test]
    fn the_newest_checkpoint_is_scavenged_even_when_an_output_came_after_it() {
        let rec = |id: u64, ckpt: Option<u64>, complete: bool| DatasetRecord {
            id,
            name: format!("d{id}"),
            checkpoint_id: ckpt,
            output: ckpt.is_none(),
            complete,
            ..DatasetRecord::default()
        };
        let pick = |v: Vec<DatasetRecord>| to_scavenge(v.into_iter()).map(|d| d.id);
        // ckpt 3, then an output (id 4, always flushed), then an incomplete checkpoint
        assert_eq!(
            pick(vec![
                rec(3, Some(2), true),
                rec(4, None, true),
                rec(5, Some(3), false)
            ]),
            Some(3)
        );
        // outputs only: the newest output
        assert_eq!(pick(vec![rec(1, None, true), rec(2, None, true)]), Some(2));
        assert_eq!(pick(vec![rec(1, Some(1), false)]), None);
    }

    #[test]
    fn index_add_checks_every_file_then_adds_it_as_the_restart_point() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        dataset(p, 3, "ckpt.3", &[("c3/a", b"alpha"), ("c3/b", b"beta")]);
        let (entry, current) = index_add(p, "ckpt.3", false, None, 4096).unwrap();
        assert!(entry.complete && current);
        let ix = Index::load(p).unwrap();
        assert_eq!(ix.current.as_deref(), Some("ckpt.3"));
        assert!(ix.datasets[&3].complete);
        // twice: refused
        let err = index_add(p, "3", false, None, 4096).unwrap_err();
        assert!(err.contains("in the index already"), "{err}");
        // an older one is added but does not become the restart point
        dataset(p, 2, "ckpt.2", &[("c2/a", b"one"), ("c2/b", b"two")]);
        let (_, current) = index_add(p, "2", false, None, 4096).unwrap();
        assert!(!current);
        assert_eq!(Index::load(p).unwrap().current.as_deref(), Some("ckpt.3"));
    }

    #[test]
    fn index_add_refuses_a_flipped_byte_naming_rank_and_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        dataset(p, 4, "ckpt.4", &[("c4/a", b"alpha"), ("c4/b", b"beta")]);
        std::fs::write(p.join("c4/b"), b"bexa").unwrap();
        let err = index_add(p, "ckpt.4", false, None, 4096).unwrap_err();
        assert!(
            err.starts_with("rank 1: c4/b (") && err.contains("CRC32"),
            "{err}"
        );
        assert!(Index::load(p).unwrap().datasets.is_empty());
        let err = index_add(p, "ckpt.9", false, None, 4096).unwrap_err();
        assert!(err.contains("no dataset `ckpt.9`"), "{err}");
    }
}
