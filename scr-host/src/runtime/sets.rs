//! Redundancy-set formation: split the ranks of a job into sets such that no set holds
//! two ranks of one failure group (two ranks on one node, under one switch, ...).
//!
//! Ranks are ordered by their position within their failure group and then by group, so
//! the i-th ranks of all groups form "level" i; each level holds at most one rank per
//! group and is cut into sets of at least `set_size` members (SCR's meaning of SET_SIZE:
//! the minimum), as equal as possible. A set therefore never spans two levels and never
//! repeats a group. A level with fewer ranks than `set_size` forms one smaller set.
//!
//! `hop_distance` h (SCR's HOP_DISTANCE) first deals a level's ranks out to h classes by
//! their position (position mod h), each class cut on its own: a set's neighbours are
//! then h groups apart in group order (with h = 2 on nodes n0..n7, sets of n0,n2,n4,n6
//! and n1,n3,n5,n7). h = 1 is plain formation.

use std::collections::BTreeMap;

use mpi::topology::SimpleCommunicator;

use super::world::mpi_world::MpiWorld;
use super::world::{Op, World};

/// One redundancy set: its id and members (world ranks), in set order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Set {
    /// Identifier unique within the descriptor.
    pub id: u64,
    /// World ranks of the members, in member order.
    pub members: Vec<u32>,
}

/// Where position `pos` of a level of `n` ranks goes: (its set's index among the
/// level's sets, the level's number of sets). The level's positions are dealt out to
/// `hop` classes (position mod `hop`), and each class is cut into
/// `(size / set_size).max(1)` sets of near-equal size, the first sets one larger;
/// classes come in order, so one rule serves [`form_sets`] and [`form_my_set_in`].
fn place(n: usize, set_size: usize, hop: usize, pos: usize) -> (usize, usize) {
    let set_size = set_size.max(1);
    let hop = hop.clamp(1, n.max(1));
    let class_size = |c: usize| (n - c).div_ceil(hop);
    let sets_of = |size: usize| (size / set_size).max(1);
    let class = pos % hop;
    let before: usize = (0..class).map(|c| sets_of(class_size(c))).sum();
    let total: usize = (0..hop).map(|c| sets_of(class_size(c))).sum();
    let (size, q) = (class_size(class), pos / hop);
    let count = sets_of(size);
    // near-equal sizes: the first `size % count` sets get one more member
    let (base, extra) = (size / count, size % count);
    let index = if q < extra * (base + 1) {
        q / (base + 1)
    } else {
        extra + (q - extra * (base + 1)) / base
    };
    (before + index, total)
}

/// Form sets for ranks `0..groups.len()` where `groups[r]` is rank r's failure-group
/// value, neighbours `hop` groups apart (see the module's documentation).
pub fn form_sets(groups: &[String], set_size: usize, hop: usize) -> Vec<Set> {
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
    let mut sets: Vec<Set> = Vec::new();
    for (_, mut ranks) in levels {
        ranks.sort();
        let n = ranks.len();
        let first = sets.len();
        for (pos, (_, rank)) in ranks.into_iter().enumerate() {
            let (index, count) = place(n, set_size, hop, pos);
            while sets.len() < first + count {
                sets.push(Set {
                    id: sets.len() as u64,
                    members: Vec::new(),
                });
            }
            sets[first + index].members.push(rank);
        }
    }
    sets
}

/// The ranks of `world` whose `value` equals this rank's, ordered by world rank
/// (collective): `split_by_value_in` on an MPI communicator.
pub fn split_by_value(world: &SimpleCommunicator, value: &str) -> SimpleCommunicator {
    MpiWorld::with_borrowed(world, |w| MpiWorld::from_boxed(split_by_value_in(w, value)))
        .expect("an MPI communicator splits into MPI communicators")
}

/// The ranks of `world` whose `value` equals this rank's, ordered by world rank
/// (collective). A split by a hash of the value, then a check inside the split group: the
/// group's first rank broadcasts its value and every rank compares; only when a hash
/// collided (some rank differs) are the group's values gathered and the group split
/// again by the first rank holding each value. Per rank: one split, one broadcast of one
/// value and one reduction — O(log P) steps, bytes independent of P (the collision path
/// adds an all-gather over the colliding group only).
pub(crate) fn split_by_value_in(world: &dyn World, value: &str) -> Box<dyn World> {
    let hash = crc32fast::hash(value.as_bytes()) & 0x7fff_ffff;
    let key = world.rank();
    let group = world
        .split(Some(hash), key)
        .expect("every rank has a color");
    let first = group.broadcast_from(0, value.as_bytes());
    if group.min_u64(u64::from(first == value.as_bytes())) == 1 {
        return group;
    }
    // a hash collision: split the group by the first rank holding each value
    let all = group.all_gather_bytes(value.as_bytes());
    let first_holder = all.iter().position(|v| v == value.as_bytes()).unwrap_or(0);
    group
        .split(Some(first_holder as u32), key)
        .expect("every rank has a color")
}

/// This rank's set as [`form_sets`] forms it (collective): `form_my_set_in` on an MPI
/// communicator, returning the set's communicator.
pub fn form_my_set(
    world: &SimpleCommunicator,
    value: &str,
    set_size: usize,
    hop: usize,
) -> (Set, SimpleCommunicator, Vec<String>) {
    MpiWorld::with_borrowed(world, |w| {
        let (set, comm, values) = form_my_set_in(w, value, set_size, hop);
        let comm =
            MpiWorld::from_boxed(comm).expect("an MPI communicator splits into MPI communicators");
        (set, comm, values)
    })
}

/// This rank's set as [`form_sets`] forms it, computed without any rank learning every
/// rank's group value (collective over `world`; `value` is this rank's failure-group
/// value). Returns the set, its communicator (members in set order) and the members'
/// group values.
///
/// The ranks of one group find each other (`split_by_value_in`); a rank's level is its
/// position among them and its group's order the group's lowest world rank. The ranks of
/// one level form a communicator ordered by group order, cut as `form_sets` cuts a level;
/// the sets of lower levels are counted by an exclusive scan over the first ranks of each
/// level. Per rank: three splits, a few reductions and broadcasts, an exclusive scan and
/// an all-gather over its own set — O(log P) steps and O(set size) bytes (was: every
/// rank's node name on every rank, O(P)).
pub(crate) fn form_my_set_in(
    world: &dyn World,
    value: &str,
    set_size: usize,
    hop: usize,
) -> (Set, Box<dyn World>, Vec<String>) {
    let me = world.rank();
    let group = split_by_value_in(world, value);
    let level = group.rank();
    // (4 bytes, as the MPI `int` rank this broadcast carried)
    let mut group_first = me.to_ne_bytes();
    group.broadcast_into(0, &mut group_first);
    let group_first = u32::from_ne_bytes(group_first);
    let level_comm = world
        .split(Some(level), group_first)
        .expect("every rank has a color");
    let n = level_comm.size() as usize;
    let pos = level_comm.rank() as usize;
    let (index, count) = place(n, set_size, hop, pos);
    // sets of the levels below: an exclusive scan over each level's first rank, in
    // level order, then handed to the rest of the level
    let leaders = world.split((pos == 0).then_some(0), level);
    let below = leaders
        .as_ref()
        .map_or(0, |l| l.exclusive_scan_u64(count as u64, Op::Sum));
    let mut below = below.to_ne_bytes();
    level_comm.broadcast_into(0, &mut below);
    let below = u64::from_ne_bytes(below);
    let set_comm = level_comm
        .split(Some(index as u32), pos as u32)
        .expect("every rank has a color");
    let members = set_comm.all_gather_u32(me);
    let values = gather_strings_in(&*set_comm, value);
    let set = Set {
        id: below + index as u64,
        members,
    };
    (set, set_comm, values)
}

/// Every member's string within `set_comm` (a redundancy set: O(set size) bytes).
pub(crate) fn gather_strings_in(set_comm: &dyn World, mine: &str) -> Vec<String> {
    set_comm
        .all_gather_bytes(mine.as_bytes())
        .into_iter()
        .map(|v| String::from_utf8_lossy(&v).into_owned())
        .collect()
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
                    let sets = form_sets(&g, set_size, 1);
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
        let sets = form_sets(&g, 4, 1);
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
        let sizes: Vec<usize> = form_sets(&g, 2, 1)
            .iter()
            .map(|s| s.members.len())
            .collect();
        assert_eq!(sizes, [3, 2]);
        let sizes: Vec<usize> = form_sets(&g, 4, 1)
            .iter()
            .map(|s| s.members.len())
            .collect();
        assert_eq!(sizes, [5]);
    }

    /// With hop_distance 2 on eight nodes, neighbours in a set are two nodes apart (SCR's
    /// HOP_DISTANCE); every hop keeps each rank once, no set repeating a group, and sets
    /// at least `set_size` where the class of positions is that large.
    #[test]
    fn hop_distance_puts_neighbours_hop_groups_apart() {
        let g: Vec<String> = (0..8).map(|r| format!("n{r}")).collect();
        let members: Vec<Vec<u32>> = form_sets(&g, 4, 2).into_iter().map(|s| s.members).collect();
        assert_eq!(members, [vec![0, 2, 4, 6], vec![1, 3, 5, 7]]);
        let members: Vec<Vec<u32>> = form_sets(&g, 2, 2).into_iter().map(|s| s.members).collect();
        assert_eq!(members, [vec![0, 2], vec![4, 6], vec![1, 3], vec![5, 7]]);
        // two ranks per node: each level alike, set ids run on
        let g2: Vec<String> = (0..8).map(|r| format!("n{}", r / 2)).collect();
        let sets = form_sets(&g2, 2, 2);
        let members: Vec<Vec<u32>> = sets.iter().map(|s| s.members.clone()).collect();
        assert_eq!(members, [vec![0, 4], vec![2, 6], vec![1, 5], vec![3, 7]]);
        assert_eq!(sets.iter().map(|s| s.id).collect::<Vec<_>>(), [0, 1, 2, 3]);
        for nodes in 1..=9usize {
            for hop in 1..=5 {
                for set_size in 2..=4 {
                    let g: Vec<String> = (0..nodes).map(|r| format!("n{r}")).collect();
                    let sets = form_sets(&g, set_size, hop);
                    check(&g, &sets);
                    for s in &sets {
                        let class = nodes.div_ceil(hop.min(nodes));
                        assert!(
                            s.members.len() >= set_size.min(nodes / hop.min(nodes)),
                            "{nodes} nodes, hop {hop}, size {set_size}: {s:?} (class {class})"
                        );
                        for w in s.members.windows(2) {
                            assert_eq!((w[1] - w[0]) as usize, hop.min(nodes), "{s:?}");
                        }
                    }
                }
            }
        }
    }

    /// `form_my_set_in` over thread ranks gives every rank its set of `form_sets`, its
    /// members' values, and a set communicator ordered like the set; `split_by_value_in`
    /// finds exactly the ranks of equal value.
    #[test]
    fn form_my_set_in_process_equals_form_sets() {
        use crate::runtime::world::inproc::run_ranks;
        for n in 6..=10u32 {
            for per_node in [1usize, 2, 3] {
                for (set_size, hop) in [(2usize, 1usize), (3, 1), (4, 1), (2, 2), (3, 3), (2, 4)] {
                    // nodes of `per_node` ranks, the last one possibly smaller, and names
                    // not in rank order
                    let g: Vec<String> = (0..n as usize)
                        .map(|r| format!("node{}", 9 - r / per_node))
                        .collect();
                    let expect = form_sets(&g, set_size, hop);
                    let out = run_ranks(n, |w| {
                        let value = &g[w.rank() as usize];
                        let same = split_by_value_in(w.as_ref(), value);
                        let same = same.all_gather_u32(w.rank());
                        let (set, comm, values) = form_my_set_in(w.as_ref(), value, set_size, hop);
                        (set, comm.rank(), comm.size(), values, same)
                    });
                    for (r, (set, crank, csize, values, same)) in out.into_iter().enumerate() {
                        let want = expect
                            .iter()
                            .find(|s| s.members.contains(&(r as u32)))
                            .unwrap();
                        assert_eq!(
                            &set, want,
                            "n={n} per_node={per_node} size={set_size} hop={hop}"
                        );
                        assert_eq!(csize as usize, set.members.len());
                        assert_eq!(set.members[crank as usize], r as u32);
                        let vals: Vec<String> =
                            set.members.iter().map(|&m| g[m as usize].clone()).collect();
                        assert_eq!(values, vals);
                        let peers: Vec<u32> = (0..n).filter(|&q| g[q as usize] == g[r]).collect();
                        assert_eq!(same, peers);
                    }
                }
            }
        }
    }
}
