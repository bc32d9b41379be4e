//! Postrun across the allocation: from the launch host, reach every node's cache — the
//! ones this process can read itself (this host, every simulated node) directly, the
//! others by running `scr scavenge` there through the remote runner
//! ([`crate::remote`]), at most `remote_fanout` nodes at once.
//!
//! Two rounds, so that redundancy data is read only where it is needed:
//! 1. every node copies its ranks' application files (`scr scavenge --data-only`);
//! 2. the ranks without a good copy are known now. In each redundancy set that lost a
//!    member, the survivors' redundancy files (a PARTNER copy, XOR or RS parity) are
//!    copied (`scr scavenge --redundancy-of RANKS`) on the nodes holding them. A set that
//!    lost nothing costs no redundancy read at all.
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
    /// Why it could not be reached (or its `scr scavenge` failed to run), if so.
    pub unreached: Option<String>,
    /// Ranks whose files were copied and verified there.
    pub copied: Vec<u32>,
    /// Ranks whose copy was refused there, with the reason.
    pub refused: Vec<(u32, String)>,
    /// Ranks whose redundancy files were copied there in the second round.
    pub redundancy_of: Vec<u32>,
    /// Bytes copied there (both rounds).
    pub bytes: u64,
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
    /// the node `scr scavenge` runs on, and this host (also when one of the two names is
    /// fully qualified).
    pub fn is_here(&self, node: &str) -> bool {
        let here = crate::launch::nodes::this_host();
        let short = |n: &str| n.split('.').next().unwrap_or(n).to_string();
        self.simulated || self.per_node || node == here || short(node) == short(&here)
    }

    /// The complete datasets in the caches of `nodes`: read here, or listed there by
    /// `scr scavenge --list`. Nodes that could not be asked, with the reason.
    pub fn cached_records(&self, nodes: &[String]) -> (Vec<DatasetRecord>, Vec<(String, String)>) {
        let answers = crate::remote::fan_out(nodes, self.width(), |node| {
            if self.is_here(node) {
                return Ok(self.listed(node));
            }
            if self.runner.is_none() {
                return Err(no_runner(node));
            }
            let args = self.args(node, &["--list"]);
            let out = self.remote(node, &args)?;
            out.stdout
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(|l| {
                    serde_json::from_str::<DatasetRecord>(l)
                        .map_err(|e| format!("{node}: `scr scavenge --list` printed `{l}`: {e}"))
                })
                .collect::<Result<Vec<_>, String>>()
        });
        let mut records = Vec::new();
        let mut unreached = Vec::new();
        for (node, a) in nodes.iter().zip(answers) {
            match a {
                Ok(r) => records.extend(r),
                Err(why) => unreached.push((node.clone(), why)),
            }
        }
        (records, unreached)
    }

    /// The complete datasets in `node`'s cache, one record per dataset (`scr scavenge
    /// --list` prints them).
    pub fn listed(&self, node: &str) -> Vec<DatasetRecord> {
        let mut by_id: BTreeMap<u64, DatasetRecord> = BTreeMap::new();
        for m in self.filemaps(node) {
            for d in m.datasets.into_values().filter(|d| d.complete) {
                by_id.entry(d.id).or_insert(d);
            }
        }
        by_id.into_values().collect()
    }

    /// [`Scavenger::listed`] as `scr scavenge --list` prints it: one JSON line per
    /// dataset, read back by [`Scavenger::cached_records`] on the launch host.
    pub fn listing(&self, node: &str) -> Vec<String> {
        self.listed(node)
            .iter()
            .filter_map(|r| serde_json::to_string(r).ok())
            .collect()
    }

    /// Postrun's copy of dataset `id` from every node of `nodes`, in two rounds (see the
    /// module documentation), into a staging directory made afresh.
    pub fn copy_across(&self, nodes: &[String], id: u64) -> Vec<NodeCopy> {
        let _ = std::fs::remove_dir_all(stage_dir(&self.prefix, id));
        let mut out: Vec<NodeCopy> = crate::remote::fan_out(nodes, self.width(), |node| {
            self.round(node, id, &Parts::Data)
        });
        let manifests =
            super::rebuild::read_manifests(&stage_dir(&self.prefix, id)).unwrap_or_default();
        let needed = redundancy_needed(&manifests, |members, lost| {
            self.rebuild_sources(members, lost, &manifests)
        });
        // the nodes holding the survivors whose redundancy a rebuild reads
        let mut by_node: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
        for (rank, node) in needed {
            by_node.entry(node).or_default().insert(rank);
        }
        let second: Vec<String> = by_node.keys().cloned().collect();
        let done = crate::remote::fan_out(&second, self.width(), |node| {
            self.round(node, id, &Parts::RedundancyOf(by_node[node].clone()))
        });
        for r in done {
            if let Some(c) = out.iter_mut().find(|c| c.node == r.node) {
                c.redundancy_of = r.copied;
                c.refused.extend(r.refused);
                c.bytes += r.bytes;
                if c.unreached.is_none() {
                    c.unreached = r.unreached;
                }
            }
        }
        self.finish_progress();
        out
    }

    /// One round of the copy on `node`: here, or through the runner.
    fn round(&self, node: &str, id: u64, parts: &Parts) -> NodeCopy {
        let mut c = NodeCopy {
            node: node.to_string(),
            ..NodeCopy::default()
        };
        if !self.is_here(node) && self.runner.is_none() {
            let why = no_runner(node);
            self.progress.done(&why, 0);
            c.unreached = Some(why);
            return c;
        }
        if self.is_here(node) {
            let r = self.copy_parts(node, id, parts);
            c.copied = r.copied;
            c.refused = r.failed;
            c.bytes = r.bytes;
            return c;
        }
        let id_arg = id.to_string();
        let ranks;
        let mut extra = vec!["--id", id_arg.as_str(), "--quiet"];
        match parts {
            Parts::Data => extra.push("--data-only"),
            Parts::RedundancyOf(rs) => {
                ranks = rs.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
                extra.extend(["--redundancy-of", ranks.as_str()]);
            }
            Parts::All => {}
        }
        match self.remote(node, &self.args(node, &extra)) {
            Err(why) => {
                // (`why` names the node)
                self.progress.done(&why, 0);
                c.unreached = Some(why);
            }
            Ok(out) => {
                for line in out.stdout.lines().filter(|l| !l.starts_with("dataset ")) {
                    self.progress.done(line, 0);
                }
                // exit 1 is "some rank's copy failed": the manifests say which
                if !matches!(out.code, Some(0 | 1)) {
                    let why = format!(
                        "`scr scavenge` there ended with {}: {}",
                        out.code
                            .map_or("a signal".into(), |c| format!("status {c}")),
                        out.stderr.trim()
                    );
                    self.progress.done(&format!("{node}: {why}"), 0);
                    c.unreached = Some(why);
                }
                // what it staged, as its manifests say
                let manifests = super::rebuild::read_manifests(&stage_dir(&self.prefix, id))
                    .unwrap_or_default();
                let wanted = |r: u32| match parts {
                    Parts::RedundancyOf(rs) => rs.contains(&r),
                    _ => true,
                };
                for m in manifests
                    .values()
                    .filter(|m| m.node == node && wanted(m.rank))
                {
                    match &m.copied {
                        Ok(files) => {
                            c.copied.push(m.rank);
                            let names: BTreeSet<&str> =
                                m.record.redundancy.iter().map(String::as_str).collect();
                            // this round's files: the redundancy ones in the second
                            let redundancy = matches!(parts, Parts::RedundancyOf(_));
                            c.bytes += files
                                .iter()
                                .filter(|f| names.contains(f.name.as_str()) == redundancy)
                                .map(|f| f.size)
                                .sum::<u64>();
                        }
                        Err(why) => c.refused.push((m.rank, why.clone())),
                    }
                }
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

    /// Run `scr ARGS` on `node` through the runner (no limit: a copy takes what it
    /// takes); an error when it cannot be reached.
    fn remote(&self, node: &str, args: &[String]) -> Result<crate::remote::RemoteOutput, String> {
        let runner = self
            .runner
            .as_ref()
            .expect("a remote node implies a runner");
        let out = runner.run(node, args, None)?;
        // the runner itself failed to reach the node (ssh's 255, an agent's refusal):
        // `scr scavenge` exits 0, 1 or 2 only
        match out.code {
            Some(0..=2) => Ok(out),
            code => Err(format!(
                "{node} not reached through {} ({}): {}",
                runner.source,
                code.map_or("killed by a signal".into(), |c| format!("status {c}")),
                out.stderr.trim()
            )),
        }
    }

    /// Nodes worked on at once: the runner's fan-out, or one at a time here.
    fn width(&self) -> usize {
        self.runner.as_ref().map_or(1, |r| r.fanout)
    }
}

/// Why `node` is not reached when no remote runner is known.
fn no_runner(node: &str) -> String {
    format!(
        "{node} is another host and no remote runner is known (no srun, flux or pdsh here): set remote_runner (e.g. `ssh {{node}} {{cmd}}`), or run `scr scavenge` on it and then `scr postrun --no-copy`"
    )
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
            .new_scheme(&d.scheme_config(&self.config, member as u32, m.rank))
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
