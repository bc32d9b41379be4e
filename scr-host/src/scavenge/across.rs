//! Postrun across the allocation: from the launch host, reach every node's cache — the
//! ones this process can read itself (this host, every simulated node) directly, the
//! others by running `scr scavenge` there through the remote runner
//! ([`crate::remote`]), at most `remote_fanout` nodes at once.
//!
//! First every node is asked what its cache holds (`scr scavenge --list`, within
//! `remote_timeout`: a node that does not answer is not reached and is left out), and
//! each rank of the dataset is given to one node that holds it (a rank whose filemap is
//! on two nodes, after a relaunch, is copied once). Then two rounds, so that redundancy
//! data is read only where it is needed:
//! 1. every node copies its ranks' application files (`scr scavenge --data-only --ranks`);
//! 2. the ranks without a good copy are known now. In each redundancy set that lost a
//!    member, the redundancy files of the survivors the scheme reads for that rebuild
//!    (`Scheme::rebuild_sources`: PARTNER's partner holding each lost rank's copy; every
//!    survivor for XOR and RS) are copied (`scr scavenge --redundancy-of RANKS`) on the
//!    nodes holding them. A set that lost nothing costs no redundancy read at all. When
//!    such a copy fails, that survivor counts as lost too and the scheme is asked again,
//!    until nothing more is needed.
//!
//! A remote `scr` ends with a report line ([`crate::remote::REPORT_MARK`]); without it
//! the node counts as not reached, whatever the runner's exit status.
//!
//! The staging directory on the shared prefix is where the rounds meet: every node writes
//! its ranks' manifests there, and the coordinating step ([`Scavenger::finish`]) reads
//! them. Each node's outcome (copied, refused with the reason, not reached) is returned
//! for the command to report.

use super::*;
use crate::remote::Runner;

/// What postrun's copy did on one node.
#[derive(Clone, Debug, Default)]
pub struct NodeCopy {
    /// The node.
    pub node: String,
    /// Why it could not be reached (or its `scr scavenge` did not run to its end), if so.
    pub unreached: Option<NodeError>,
    /// Ranks whose application files were copied and verified there.
    pub copied: Vec<u32>,
    /// Ranks whose copy was refused there, with the reason.
    pub refused: Vec<(u32, String)>,
    /// Ranks whose redundancy files were copied there in the second round.
    pub redundancy_of: Vec<u32>,
    /// Ranks it holds that another node's copy was taken for.
    pub also_on: Vec<(u32, String)>,
    /// Bytes copied there (both rounds).
    pub bytes: u64,
}

/// What a node's cache holds (`scr scavenge --list`): the complete datasets, one record
/// each, and for each the ranks whose filemap there holds it complete.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Listing {
    /// One record per dataset.
    pub records: Vec<DatasetRecord>,
    /// By dataset id, the ranks holding it there.
    pub ranks: BTreeMap<u64, Vec<u32>>,
}

impl Scavenger {
    /// Reach nodes other than this one through `runner` (none: only the nodes this
    /// process can read itself).
    pub fn with_runner(mut self, runner: Option<Runner>) -> Scavenger {
        self.runner = runner;
        self
    }

    /// The remote runner in use, if any.
    pub fn runner(&self) -> Option<&Runner> {
        self.runner.as_ref()
    }

    /// The per-node step (`scr scavenge`, run on the node it names): every node given
    /// is read here, whatever name the allocation gives this host.
    pub fn on_the_node(mut self) -> Scavenger {
        self.per_node = true;
        self
    }

    /// Whether `node`'s directories are read by this process itself: simulated nodes,
    /// the node `scr scavenge` runs on, and this host.
    pub(crate) fn is_here(&self, node: &str) -> bool {
        self.simulated
            || self.per_node
            || crate::remote::same_host(node, &crate::launch::nodes::this_host())
    }

    /// What the caches of `nodes` hold: read here, or listed there by `scr scavenge
    /// --list` within `remote_timeout`. Nodes that could not be asked, with the reason.
    /// Kept for the copy that follows (a node is asked once).
    pub(crate) fn listings(&self, nodes: &[String]) -> Vec<(String, Result<Listing, NodeError>)> {
        let answers = crate::remote::fan_out(nodes, self.width(), |node| {
            if let Some(known) = self.asked.lock().ok().and_then(|l| l.get(node).cloned()) {
                return known;
            }
            let answer = if self.is_here(node) {
                Ok(self.listed(node))
            } else if let Some(r) = &self.runner {
                r.run_scr(node, &self.args(node, &["--list"]), Some(r.timeout))
                    .and_then(|(lines, report)| {
                        // (its notes: a missing control directory, an untrusted one)
                        for line in &lines {
                            self.progress.done(line, 0);
                        }
                        crate::remote::parse_report(node, &report)
                    })
                    .map_err(|e| NodeError::Remote(std::sync::Arc::new(e)))
            } else {
                Err(NodeError::NoRunner(node.to_string()))
            };
            if let Ok(mut l) = self.asked.lock() {
                l.insert(node.to_string(), answer.clone());
            }
            answer
        });
        nodes.iter().cloned().zip(answers).collect()
    }

    /// The complete datasets in the caches of `nodes` (see [`Scavenger::listings`]),
    /// and the nodes that could not be asked, with the reason.
    pub(crate) fn cached_records(
        &self,
        nodes: &[String],
    ) -> (Vec<DatasetRecord>, Vec<(String, NodeError)>) {
        let mut records = Vec::new();
        let mut unreached = Vec::new();
        for (node, a) in self.listings(nodes) {
            match a {
                Ok(l) => records.extend(l.records),
                Err(why) => unreached.push((node, why)),
            }
        }
        (records, unreached)
    }

    /// What `node`'s cache holds, read here (`scr scavenge --list` prints it).
    pub fn listed(&self, node: &str) -> Listing {
        self.note_missing_cntl(node);
        let mut l = Listing::default();
        let mut by_id: BTreeMap<u64, DatasetRecord> = BTreeMap::new();
        for m in self.filemaps(node) {
            let rank = m.rank;
            for d in m.datasets.into_values().filter(|d| d.complete) {
                l.ranks.entry(d.id).or_default().push(rank);
                by_id.entry(d.id).or_insert(d);
            }
        }
        l.records = by_id.into_values().collect();
        l
    }

    /// Say so when `node` has no control directory (its ranks count as lost).
    pub(super) fn note_missing_cntl(&self, node: &str) {
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
    }

    /// Postrun's copy of dataset `id` from every node of `nodes` (see the module
    /// documentation), into a staging directory made afresh.
    pub fn copy_across(&self, nodes: &[String], id: u64) -> Vec<NodeCopy> {
        let _ = std::fs::remove_dir_all(stage_dir(&self.prefix, id));
        let mut out: Vec<NodeCopy> = Vec::new();
        // each rank from the first node (in the allocation's order) that holds it
        let mut owner: BTreeMap<u32, String> = BTreeMap::new();
        let mut assigned: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
        for (node, answer) in self.listings(nodes) {
            let mut c = NodeCopy {
                node: node.clone(),
                ..NodeCopy::default()
            };
            match answer {
                // (said when the caches were listed, and in the node's report line)
                Err(why) => c.unreached = Some(why),
                Ok(l) => {
                    for r in l.ranks.get(&id).into_iter().flatten() {
                        match owner.get(r) {
                            Some(first) => c.also_on.push((*r, first.clone())),
                            None => {
                                owner.insert(*r, node.clone());
                                assigned.entry(node.clone()).or_default().insert(*r);
                            }
                        }
                    }
                }
            }
            out.push(c);
        }
        let first: Vec<String> = assigned.keys().cloned().collect();
        let done = crate::remote::fan_out(&first, self.width(), |node| {
            self.round(node, id, &Parts::Data, Some(&assigned[node]))
        });
        merge(&mut out, done, false);
        // the second round, again while a failed redundancy copy makes more needed
        let mut fetched: BTreeSet<u32> = BTreeSet::new();
        loop {
            let manifests =
                super::rebuild::read_manifests(&stage_dir(&self.prefix, id)).unwrap_or_default();
            let needed: Vec<(u32, String)> = redundancy_needed(&manifests, |members, lost| {
                self.rebuild_sources(members, lost, &manifests)
            })
            .into_iter()
            .filter(|(r, _)| !fetched.contains(r))
            .collect();
            if needed.is_empty() {
                break;
            }
            let mut by_node: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
            for (rank, node) in needed {
                fetched.insert(rank);
                by_node.entry(node).or_default().insert(rank);
            }
            let second: Vec<String> = by_node.keys().cloned().collect();
            let done = crate::remote::fan_out(&second, self.width(), |node| {
                self.round(node, id, &Parts::RedundancyOf(by_node[node].clone()), None)
            });
            merge(&mut out, done, true);
        }
        if let Ok(mut u) = self.unreached.lock() {
            *u = out
                .iter()
                .filter(|c| c.unreached.is_some())
                .map(|c| c.node.clone())
                .collect();
        }
        self.finish_progress();
        out
    }

    /// One round of the copy on `node` (of the ranks `only`, when given): here, or
    /// through the runner.
    fn round(&self, node: &str, id: u64, parts: &Parts, only: Option<&BTreeSet<u32>>) -> NodeCopy {
        let mut c = NodeCopy {
            node: node.to_string(),
            ..NodeCopy::default()
        };
        let report = if self.is_here(node) {
            Ok(self.copy_parts(node, id, parts, only))
        } else if let Some(r) = &self.runner {
            let id_arg = id.to_string();
            let list =
                |rs: &BTreeSet<u32>| rs.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
            let mut extra: Vec<String> = vec!["--id".into(), id_arg, "--quiet".into()];
            match parts {
                Parts::Data => extra.push("--data-only".into()),
                Parts::RedundancyOf(rs) => extra.extend(["--redundancy-of".into(), list(rs)]),
                Parts::All => {}
            }
            if let Some(rs) = only {
                extra.extend(["--ranks".into(), list(rs)]);
            }
            let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
            r.run_scr(node, &self.args(node, &extra), None)
                .and_then(|(lines, report)| {
                    for line in lines.iter().filter(|l| !l.starts_with("dataset ")) {
                        self.progress.done(line, 0);
                    }
                    crate::remote::parse_report::<NodeReport>(node, &report)
                })
                .map_err(|e| NodeError::Remote(std::sync::Arc::new(e)))
        } else {
            Err(NodeError::NoRunner(node.to_string()))
        };
        match report {
            Ok(r) => {
                c.copied = r.copied;
                c.refused = r.failed;
                c.bytes = r.bytes;
            }
            Err(why) => {
                // (`why` names the node)
                self.progress.done(&why.to_string(), 0);
                c.unreached = Some(why);
            }
        }
        c
    }

    /// `scr scavenge --node NODE --prefix P` and `extra`.
    fn args(&self, node: &str, extra: &[&str]) -> Vec<String> {
        let mut a: Vec<String> = vec![
            "scavenge".into(),
            "--node".into(),
            node.into(),
            "--prefix".into(),
            self.prefix.display().to_string(),
        ];
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    }

    /// Nodes worked on at once: the runner's fan-out, or one at a time here.
    fn width(&self) -> usize {
        self.runner.as_ref().map_or(1, |r| r.fanout)
    }
}

/// Add a round's outcome per node (`second`: the redundancy round) to `out`.
fn merge(out: &mut [NodeCopy], done: Vec<NodeCopy>, second: bool) {
    for r in done {
        let Some(c) = out.iter_mut().find(|c| c.node == r.node) else {
            continue;
        };
        if second {
            c.redundancy_of.extend(r.copied);
        } else {
            c.copied = r.copied;
        }
        c.refused.extend(r.refused);
        c.bytes += r.bytes;
        if c.unreached.is_none() {
            c.unreached = r.unreached;
        }
    }
}

/// Why `node` is not reached when no remote runner is known.
/// Why a node's cache could not be listed or its copy not run there: the text names the
/// node. A type so callers can tell a node that failed from one nobody could reach;
/// `Clone` (the remote error shared) because a node's answer is kept and handed out again.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// Running `scr scavenge` there failed, or its report did not parse.
    #[error(transparent)]
    Remote(std::sync::Arc<crate::remote::RemoteError>),
    /// The node is another host and no remote runner is known.
    #[error("{0} is another host and no remote runner is known (no srun, flux or pdsh here): set remote_runner (e.g. `ssh {{node}} {{cmd}}`), or run `scr scavenge` on it and then `scr postrun --no-copy`")]
    NoRunner(String),
}

impl Scavenger {
    /// Which members of the set `members` (world ranks, in set order) the scheme reads
    /// redundancy from to rebuild the members at positions `lost`, as the scheme says
    /// (`Scheme::rebuild_sources`, asked of one surviving member's instance); `None`:
    /// every survivor's (the scheme does not say, or cannot be loaded here — the rebuild
    /// then says why).
    fn rebuild_sources(
        &self,
        members: &[u32],
        lost: &[u32],
        manifests: &BTreeMap<u32, RankManifest>,
    ) -> Option<Vec<u32>> {
        let (member, m) = members.iter().enumerate().find_map(|(i, r)| {
            manifests
                .get(r)
                .filter(|m| m.copied.is_ok())
                .map(|m| (i, m))
        })?;
        let d = &m.record.descriptor;
        let scheme = self
            .registry
            .new_scheme(&self.config.recorded_scheme_config(d, member as u32, m.rank))
            .ok()?;
        let said = scheme
            .raw()
            .rebuild_sources(abi_stable::std_types::RSlice::from_slice(lost))
            .into_option()?;
        Some(said.into_iter().collect())
    }
}

/// The survivors whose redundancy files a rebuild reads, with their nodes: in every set
/// in which some member has no good copy, the survivors `sources(members, lost
/// positions)` names (member positions; `None`: every survivor of the set). The world
/// size is the manifests' own (`agreed_record` checks them later).
fn redundancy_needed(
    manifests: &BTreeMap<u32, RankManifest>,
    sources: impl Fn(&[u32], &[u32]) -> Option<Vec<u32>>,
) -> Vec<(u32, String)> {
    let Some(world) = manifests.values().map(|m| m.record.world_size).max() else {
        return Vec::new();
    };
    let good = |r: &u32| manifests.get(r).is_some_and(|m| m.copied.is_ok());
    let mut sets: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
    for m in manifests.values() {
        sets.insert(
            m.record.descriptor.set_id,
            m.record.descriptor.members.clone(),
        );
    }
    let lost: BTreeSet<u32> = (0..world).filter(|r| !good(r)).collect();
    let mut out = Vec::new();
    for members in sets.values() {
        let lost_here: Vec<u32> = (0..members.len() as u32)
            .filter(|&i| lost.contains(&members[i as usize]))
            .collect();
        if lost_here.is_empty() {
            continue;
        }
        let named: Vec<u32> = match sources(members, &lost_here) {
            // only survivors of this set: a scheme's answer is not trusted beyond that
            Some(positions) => positions
                .iter()
                .filter_map(|&i| members.get(i as usize).copied())
                .filter(good)
                .collect(),
            None => members.iter().copied().filter(good).collect(),
        };
        out.extend(named.into_iter().map(|r| (r, manifests[&r].node.clone())));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(rank: u32, node: &str, set: u64, members: &[u32], ok: bool) -> RankManifest {
        let mut record = DatasetRecord {
            id: 3,
            world_size: 8,
            complete: true,
            ..DatasetRecord::default()
        };
        record.descriptor.set_id = set;
        record.descriptor.members = members.to_vec();
        RankManifest {
            rank,
            node: node.into(),
            record,
            copied: if ok {
                Ok(Vec::new())
            } else {
                Err("flipped".into())
            },
        }
    }

    #[test]
    fn only_sets_that_lost_a_member_read_redundancy() {
        // 4 nodes x 2 ranks, sets {0,2,4,6} and {1,3,5,7}; node n2 (ranks 4, 5) is lost
        let mut m = BTreeMap::new();
        for r in [0u32, 1, 2, 3, 6, 7] {
            let set = u64::from(r % 2);
            let members: Vec<u32> = (0..8).filter(|x| x % 2 == r % 2).collect();
            m.insert(r, manifest(r, &format!("n{}", r / 2), set, &members, true));
        }
        let mut need = redundancy_needed(&m, |_, _| None);
        need.sort();
        let want: Vec<(u32, String)> = [0u32, 1, 2, 3, 6, 7]
            .iter()
            .map(|&r| (r, format!("n{}", r / 2)))
            .collect();
        assert_eq!(need, want);
        // nothing lost: no redundancy read at all
        let mut all = m.clone();
        for r in [4u32, 5] {
            let members: Vec<u32> = (0..8).filter(|x| x % 2 == r % 2).collect();
            all.insert(r, manifest(r, "n2", u64::from(r % 2), &members, true));
        }
        assert!(redundancy_needed(&all, |_, _| panic!("nothing was lost")).is_empty());
        // one refused copy (rank 5, set 1): only set 1's survivors
        all.insert(5, manifest(5, "n2", 1, &[1, 3, 5, 7], false));
        let mut need = redundancy_needed(&all, |_, _| None);
        need.sort();
        assert_eq!(
            need.iter().map(|(r, _)| *r).collect::<Vec<_>>(),
            vec![1, 3, 7]
        );
        // a scheme that names its sources (PARTNER: the right-hand neighbour of the lost
        // member 2 of set 1 = [1, 3, 5, 7] is member 3, rank 7); a name outside the set
        // or of a lost member is ignored
        let need = redundancy_needed(&all, |members, lost| {
            assert_eq!((members, lost), (&[1, 3, 5, 7][..], &[2][..]));
            Some(vec![3, 2, 9])
        });
        assert_eq!(need, vec![(7, "n3".to_string())]);
    }
}
