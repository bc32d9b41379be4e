//! The coordinating step (`scr postrun`): read the ranks' manifests, rebuild lost ranks
//! through the scheme plugin's offline `recover`, move the verified files from staging
//! into the prefix (undone on failure), write rank2file and summary, and add the dataset
//! to the index. Apart from the copy because it needs every node's copies at once.

use super::*;
use crate::config::settings;
use crate::state::StateError;

/// Why `scr postrun` did not add a staged dataset to the index.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PostrunError {
    /// `--no-copy` without an id, and nothing is staged.
    #[error("nothing staged in {}: run `scr scavenge` on every node first", .0.display())]
    NothingStaged(PathBuf),
    /// The staging directory cannot be listed.
    #[error("{}: {source}; run `scr scavenge` on the nodes first", stage.display())]
    NotStaged {
        /// The staging directory.
        stage: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A rank's manifest cannot be read.
    #[error("{0}")]
    Manifest(StateError),
    /// No rank's files were staged.
    #[error("dataset {id}: no node's cache held any of its files (nothing was copied to {})", stage.display())]
    NothingCopied {
        /// The dataset.
        id: u64,
        /// The staging directory.
        stage: PathBuf,
    },
    /// Two ranks' records describe different datasets.
    #[error("dataset {id}: the caches disagree about it (rank {rank} holds {name} of {world} ranks, rank {other_rank} holds {other_name} of {other_world} ranks); scavenge it by hand")]
    Disagree {
        /// The dataset id.
        id: u64,
        /// The lowest rank staged.
        rank: u32,
        /// The name its record gives.
        name: String,
        /// The job size its record gives.
        world: u32,
        /// A rank whose record differs.
        other_rank: u32,
        /// The name that record gives.
        other_name: String,
        /// The job size that record gives.
        other_world: u32,
    },
    /// A rank outside the job staged files of it.
    #[error("dataset {id}: rank {rank} holds it but it was written by {world} ranks")]
    RankOutside {
        /// The dataset id.
        id: u64,
        /// The rank.
        rank: u32,
        /// The job size.
        world: u32,
    },
    /// Lost ranks none of whose redundancy set's members left a record.
    #[error("ranks {ranks:?} cannot be rebuilt: no member of their redundancy set survived ({0}); nothing was added to the index", ranks = .0.ranks())]
    Orphans(LostRanks),
    /// Some redundancy sets could not rebuild their lost members.
    #[error("{}; nothing was added to the index", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    NotRebuilt(Vec<SetRefusal>),
    /// A file's name leaves the prefix.
    #[error("{0}")]
    BadName(crate::state::prefix::OutsidePrefix),
    /// The files could not be placed in the prefix or recorded (undone).
    #[error("{0}; nothing was added to the index")]
    NotPlaced(PlaceError),
}

/// Lost ranks with why each is lost (`rank R: why; ...`).
#[derive(Debug, Clone)]
pub struct LostRanks(Vec<(u32, String)>);

impl LostRanks {
    /// The ranks of `ranks` with their reasons in `lost`.
    fn of(ranks: &[u32], lost: &BTreeMap<u32, String>) -> LostRanks {
        LostRanks(ranks.iter().map(|r| (*r, lost[r].clone())).collect())
    }

    /// The ranks.
    pub fn ranks(&self) -> Vec<u32> {
        self.0.iter().map(|(r, _)| *r).collect()
    }
}

impl std::fmt::Display for LostRanks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (r, why)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "rank {r}: {why}")?;
        }
        Ok(())
    }
}

/// Why one redundancy set could not rebuild its lost members.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SetRefusal {
    /// No member of the set left a record to rebuild from.
    #[error("set {set_id} (ranks {members:?}): no member survived, ranks {:?} cannot be rebuilt ({lost})", lost.ranks())]
    NoSurvivor {
        /// The set's id.
        set_id: u64,
        /// Its members.
        members: Vec<u32>,
        /// Its lost members.
        lost: LostRanks,
    },
    /// The scheme's rebuild failed or was refused.
    #[error("set {set_id} (ranks {members:?}): ranks {:?} cannot be rebuilt through {scheme}: {error} [{lost}]", lost.ranks())]
    Failed {
        /// The set's id.
        set_id: u64,
        /// Its members.
        members: Vec<u32>,
        /// The scheme.
        scheme: String,
        /// What failed.
        error: RebuildError,
        /// Its lost members.
        lost: LostRanks,
    },
}

pub use crate::offline::RebuildError;

/// Why the verified files could not be placed in the prefix and recorded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlaceError {
    /// A file's stored name leaves the prefix.
    #[error("{0}")]
    BadName(crate::state::prefix::OutsidePrefix),
    /// A file appeared at a name meanwhile.
    #[error("{} appeared in the prefix while scavenging; run postrun again", .0.display())]
    Appeared(PathBuf),
    /// A directory could not be made.
    #[error("{}: {source}", path.display())]
    Io {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file could not be moved from staging.
    #[error("rank {rank}: moving {} to {}: {source}", from.display(), to.display())]
    Move {
        /// Its rank.
        rank: u32,
        /// Its staged copy.
        from: PathBuf,
        /// Its place.
        to: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Rank2file or the summary could not be written.
    #[error("{0}")]
    State(#[from] StateError),
    /// `scr index add` refused it.
    #[error("{0}")]
    IndexAdd(#[from] IndexAddError),
}

impl Scavenger {
    /// The coordinating step: from the manifests in the staging directory of dataset
    /// `id`, rebuild lost ranks through the scheme, move the files into the prefix, write
    /// summary and rank2file, and add the dataset to the index. On any failure nothing is
    /// added and the prefix is left as it was; the staging directory is removed either
    /// way (the cache still holds what it held).
    pub fn finish(&self, id: u64) -> Result<Added, PostrunError> {
        let out = self.finish_staged(id);
        let _ = std::fs::remove_dir_all(stage_dir(&self.prefix, id));
        // the dataset's directory goes too when scavenge made it and left nothing else
        let _ = std::fs::remove_dir(dataset_dir(&self.prefix, id));
        out
    }

    /// What [`Scavenger::finish`] does before cleaning up: read every rank's manifest,
    /// check they describe one dataset, rebuild the lost ranks, then place the files.
    fn finish_staged(&self, id: u64) -> Result<Added, PostrunError> {
        let manifests = read_manifests(&stage_dir(&self.prefix, id))?;
        let first = agreed_record(id, &manifests, &stage_dir(&self.prefix, id))?;
        let world = first.world_size;
        let lost = self.lost_ranks(world, &manifests);
        let mut files = copied_files(&manifests);
        let rebuilt: Vec<u32> = lost.keys().copied().collect();
        let node_names = self.config.get(settings::NODE_NAMES);
        let mut lost_nodes: Vec<String> = (0..world)
            .filter(|r| !manifests.contains_key(r))
            .filter_map(|r| node_names.split(',').nth(r as usize))
            .map(|n| n.trim().to_string())
            .collect();
        lost_nodes.dedup();
        if node_names.is_empty() {
            // real hosts: the nodes postrun's copy did not reach
            lost_nodes = self.unreached.lock().map(|u| u.clone()).unwrap_or_default();
        }
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
        let node_names = self.config.get(settings::NODE_NAMES);
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
    ) -> Result<BTreeMap<u32, Vec<FlushedFile>>, PostrunError> {
        let survivors: Vec<&RankManifest> =
            manifests.values().filter(|m| m.copied.is_ok()).collect();
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
            return Err(PostrunError::Orphans(LostRanks::of(&orphans, lost)));
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
                refusals.push(SetRefusal::NoSurvivor {
                    set_id: *set_id,
                    members: members.clone(),
                    lost: LostRanks::of(&lost_here, lost),
                });
                continue;
            };
            match self.rebuild_set(id, &template, members, manifests, lost) {
                Ok(done) => out.extend(done),
                Err(error) => refusals.push(SetRefusal::Failed {
                    set_id: *set_id,
                    members: members.clone(),
                    scheme: template.descriptor.scheme.clone(),
                    error,
                    lost: LostRanks::of(&lost_here, lost),
                }),
            }
        }
        if refusals.is_empty() {
            Ok(out)
        } else {
            Err(PostrunError::NotRebuilt(refusals))
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
    ) -> Result<BTreeMap<u32, Vec<FlushedFile>>, RebuildError> {
        let d = &template.descriptor;
        let groups = self.member_nodes(members, manifests);
        let offline: Vec<crate::offline::Member<'_>> = members
            .iter()
            .zip(groups)
            .map(|(&rank, group)| crate::offline::Member {
                rank,
                group,
                dir: rank_stage(&self.prefix, id, rank),
                // a lost rank rebuilds into an emptied directory: nothing of a failed
                // copy is used
                record: (!lost.contains_key(&rank)).then(|| &manifests[&rank].record),
            })
            .collect();
        // a rank whose copy failed its check still has its filemap record: what the
        // scheme rebuilt must match it too (names, sizes, CRC32s)
        let own: BTreeMap<u32, DatasetRecord> = lost
            .keys()
            .filter_map(|r| manifests.get(r).map(|m| (*r, m.record.clone())))
            .collect();
        let crc_expected = manifests
            .values()
            .any(|m| m.record.files.iter().any(|f| f.crc32.is_some()));
        let rebuilt = crate::offline::recover_set(
            &self.registry,
            &self.config,
            id,
            d,
            &offline,
            &own,
            crc_expected,
        )?;
        Ok(rebuilt
            .into_iter()
            .map(|(rank, recs)| {
                let files = recs
                    .into_iter()
                    .map(|f| FlushedFile {
                        name: f.name,
                        size: f.size,
                        crc32: f.crc32,
                        stored: None,
                    })
                    .collect();
                (rank, files)
            })
            .collect())
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
            .get(settings::NODE_NAMES)
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

    /// Move every rank's verified files from staging to the prefix (their own names, or
    /// the dataset's directory when any name is taken), write rank2file and summary, and
    /// add the dataset to the index. Undone completely on failure.
    fn place(
        &self,
        id: u64,
        rec: &DatasetRecord,
        mut ranks: BTreeMap<u32, Vec<FlushedFile>>,
    ) -> Result<(IndexEntry, bool, bool), PostrunError> {
        let prefix = &self.prefix;
        for f in ranks.values().flatten() {
            check_relative(&f.name).map_err(PostrunError::BadName)?;
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
            return Err(PostrunError::NotPlaced(e));
        }
        match self.record_placed(id, rec, ranks) {
            Ok((entry, current)) => {
                // an interrupted flush's list of writes is settled with it
                crate::state::writes::remove_writes(prefix, id);
                Ok((entry, relocate, current))
            }
            Err(e) => {
                let _ = std::fs::remove_file(Summary::path(prefix, id));
                Rank2File::remove(prefix, id);
                moves.undo();
                Err(PostrunError::NotPlaced(e))
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
    ) -> Result<(IndexEntry, bool), PlaceError> {
        let prefix = &self.prefix;
        let summary = Summary {
            id,
            name: rec.name.clone(),
            checkpoint_id: rec.checkpoint_id,
            world_size: rec.world_size,
            files: ranks.values().map(|v| v.len() as u64).sum(),
            bytes: ranks.values().flatten().map(|f| f.size).sum(),
            complete: true,
            job_name: Some(self.config.get(settings::JOB_NAME)).filter(|n| !n.is_empty()),
            made: crate::runtime::provenance(&self.config, rec.created),
        };
        // (written as a tree like a job's flush, in parts of the default block size: the
        // root records the layout, so a job of any configuration reads it)
        Rank2File { ranks }
            .write(prefix, id, rec.world_size, prefix::RANK2FILE_BLOCK)
            .and_then(|_| prefix::write(&Summary::path(prefix, id), "summary", &summary))
            .map_err(PlaceError::State)
            .and_then(|()| {
                index_add(
                    prefix,
                    &id.to_string(),
                    rec.output,
                    Some(self.config.get(settings::JOB_NAME)).filter(|n| !n.is_empty()),
                    self.config.file_buf_size(),
                )
                .map_err(PlaceError::IndexAdd)
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
        let Ok(Some(writes)) = crate::state::writes::load_writes(prefix, id) else {
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
    pub(crate) fn finish_progress(&self) {
        self.progress.finish();
    }
}

/// Every rank's manifest staged in `stage` (`rank_<r>.scr`), by rank.
pub(super) fn read_manifests(stage: &Path) -> Result<BTreeMap<u32, RankManifest>, PostrunError> {
    let mut manifests: BTreeMap<u32, RankManifest> = BTreeMap::new();
    for e in std::fs::read_dir(stage)
        .map_err(|source| PostrunError::NotStaged {
            stage: stage.to_path_buf(),
            source,
        })?
        .filter_map(Result::ok)
    {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("rank_") && name.ends_with(".scr") {
            let m: RankManifest =
                read_state(&e.path(), MANIFEST).map_err(PostrunError::Manifest)?;
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
) -> Result<DatasetRecord, PostrunError> {
    let Some(first) = manifests.values().next().map(|m| m.record.clone()) else {
        return Err(PostrunError::NothingCopied {
            id,
            stage: stage.to_path_buf(),
        });
    };
    let world = first.world_size;
    if let Some(other) = manifests.values().find(|m| {
        m.record.name != first.name
            || m.record.checkpoint_id != first.checkpoint_id
            || m.record.world_size != world
            || m.record.descriptor.scheme != first.descriptor.scheme
    }) {
        return Err(PostrunError::Disagree {
            id,
            rank: manifests.values().next().map_or(0, |m| m.rank),
            name: first.name.clone(),
            world,
            other_rank: other.rank,
            other_name: other.record.name.clone(),
            other_world: other.record.world_size,
        });
    }
    if let Some(&rank) = manifests.keys().find(|&&r| r >= world) {
        return Err(PostrunError::RankOutside { id, rank, world });
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
    ) -> Result<(), PlaceError> {
        for (&rank, fs) in ranks.iter_mut() {
            for f in fs.iter_mut() {
                let from = rank_stage(prefix, id, rank).join(&f.name);
                f.stored = relocate.then(|| prefix::relocated(id, &f.name));
                let to = f.stored_path(prefix).map_err(PlaceError::BadName)?;
                if !relocate && to.symlink_metadata().is_ok() {
                    return Err(PlaceError::Appeared(to));
                }
                if let Some(dir) = to.parent() {
                    let missing: Vec<PathBuf> = dir
                        .ancestors()
                        .take_while(|a| a.symlink_metadata().is_err())
                        .map(Path::to_path_buf)
                        .collect();
                    self.made.extend(missing.into_iter().rev());
                    std::fs::create_dir_all(dir).map_err(|source| PlaceError::Io {
                        path: dir.to_path_buf(),
                        source,
                    })?;
                }
                std::fs::rename(&from, &to).map_err(|source| PlaceError::Move {
                    rank,
                    from: from.clone(),
                    to: to.clone(),
                    source,
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
