//! Redundancy-set formation: split the ranks of a job into sets such that no set holds
//! two ranks of one failure group (two ranks on one node, under one switch, ...).
//!
//! Ranks are ordered by their position within their failure group and then by group, so
//! the i-th ranks of all groups form "level" i; each level holds at most one rank per
//! group and is cut into sets of at least `set_size` members (SCR's meaning of SET_SIZE:
//! the minimum), as equal as possible. A set therefore never spans two levels and never
//! repeats a group. A level with fewer ranks than `set_size` forms one smaller set.

use std::collections::BTreeMap;

/// One redundancy set: its id and members (world ranks), in set order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Set {
    /// Identifier unique within the descriptor.
    pub id: u64,
    /// World ranks of the members, in member order.
    pub members: Vec<u32>,
}

/// Form sets for ranks `0..groups.len()` where `groups[r]` is rank r's failure-group value.
pub fn form_sets(groups: &[String], set_size: usize) -> Vec<Set> {
    let set_size = set_size.max(1);
    // group values in order of first appearance (by lowest rank)
    let mut order: BTreeMap<&str, usize> = BTreeMap::new();
    for g in groups {
        let n = order.len();
        order.entry(g.as_str()).or_insert(n);
    }
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    let mut levels: BTreeMap<usize, Vec<(usize, u32)>> = BTreeMap::new();
    for (rank, g) in groups.iter().enumerate() {
        let level = seen.entry(g.as_str()).or_insert(0);
        levels
            .entry(*level)
            .or_default()
            .push((order[g.as_str()], rank as u32));
        *level += 1;
    }
    let mut sets = Vec::new();
    for (_, mut ranks) in levels {
        ranks.sort();
        let n = ranks.len();
        let count = (n / set_size).max(1);
        // near-equal sizes: the first `n % count` sets get one more member
        let (base, extra) = (n / count, n % count);
        let mut it = ranks.into_iter().map(|(_, r)| r);
        for i in 0..count {
            let size = base + usize::from(i < extra);
            sets.push(Set {
                id: sets.len() as u64,
                members: it.by_ref().take(size).collect(),
            });
        }
    }
    sets
}

#[cfg(test)]
mod tests {
    use super::*;

    fn groups(spec: &[&str]) -> Vec<String> {
        spec.iter().map(|s| s.to_string()).collect()
    }

    fn check(groups: &[String], sets: &[Set]) {
        let mut all: Vec<u32> = sets.iter().flat_map(|s| s.members.clone()).collect();
        all.sort();
        assert_eq!(
            all,
            (0..groups.len() as u32).collect::<Vec<_>>(),
            "every rank once"
        );
        for s in sets {
            let mut gs: Vec<&String> = s.members.iter().map(|&r| &groups[r as usize]).collect();
            gs.sort();
            gs.dedup();
            assert_eq!(gs.len(), s.members.len(), "set {s:?} repeats a group");
        }
    }

    #[test]
    fn no_set_holds_two_ranks_of_one_group() {
        for nodes in 1..=6 {
            for per_node in 1..=4 {
                for set_size in 2..=8 {
                    let g: Vec<String> = (0..nodes * per_node)
                        .map(|r| format!("n{}", r / per_node))
                        .collect();
                    let sets = form_sets(&g, set_size);
                    check(&g, &sets);
                    let level = nodes; // ranks per level
                    for s in &sets {
                        let n = s.members.len();
                        assert!(n >= set_size.min(level), "set {s:?} below the minimum");
                        assert!(n < 2 * set_size.max(1) || n == level, "set {s:?} too big");
                    }
                }
            }
        }
    }

    #[test]
    fn four_nodes_of_two_with_set_size_four() {
        let g = groups(&["a", "a", "b", "b", "c", "c", "d", "d"]);
        let sets = form_sets(&g, 4);
        assert_eq!(
            sets,
            vec![
                Set {
                    id: 0,
                    members: vec![0, 2, 4, 6]
                },
                Set {
                    id: 1,
                    members: vec![1, 3, 5, 7]
                }
            ]
        );
    }

    #[test]
    fn uneven_levels_split_evenly() {
        // 5 nodes: set size 2 gives sets of 3 and 2, never a set of 1
        let g = groups(&["a", "b", "c", "d", "e"]);
        let sizes: Vec<usize> = form_sets(&g, 2).iter().map(|s| s.members.len()).collect();
        assert_eq!(sizes, [3, 2]);
        let sizes: Vec<usize> = form_sets(&g, 4).iter().map(|s| s.members.len()).collect();
        assert_eq!(sizes, [5]);
    }
}
