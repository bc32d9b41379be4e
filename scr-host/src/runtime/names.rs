//! Name-clash detection for a dataset at `complete_output`, by a distributed hash: each
//! name is checked by the rank that owns its hash, so no rank learns every rank's names.
//!
//! Two ranks routing one name would overwrite each other (in cache on a shared node, and
//! in the prefix when the dataset is flushed); a routed name equal to another rank's
//! redundancy file would be overwritten by the scheme. Both refuse the dataset.
//!
//! Per rank and checkpoint: one message per distinct owner of its names (at most its
//! number of files plus redundancy files, each carrying those names) and the O(log P)
//! steps of one non-blocking barrier ([`World::sparse_exchange`]); an owner receives the
//! names that hash to it, on average as many as it sent. Was an all-gather of every
//! rank's names: O(P) bytes on every rank.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::world::{Exchange, World};

/// Tag of the name messages. Consecutive checks on one communicator cannot mix theirs:
/// complete_output makes a world reduction right after the exchange, which no rank
/// leaves before every rank ended its exchange.
use super::tags::{NAME_TAG, SHARED_TAGS};

/// What a name is to the rank that declares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
enum Kind {
    /// A file the application routed.
    Routed,
    /// A redundancy file the scheme will write.
    Redundancy,
}

/// The clashes found among the names a rank owns, as the messages every rank reports.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Clashes {
    /// Two ranks (or one rank twice) routed one name.
    pub routed: Option<String>,
    /// A rank routed the name of another rank's redundancy file; the message starts with
    /// the rank whose redundancy file it is (`on rank N: ...`).
    pub redundancy: Option<String>,
}

/// For each of this rank's `names` (the files of a dataset that bypasses the cache),
/// whether this rank is the lowest that routed it (collective over `world`). Several
/// ranks may write one file in the prefix; its size and CRC32 are then read back by one
/// of them only, not by every writer. By the same distributed hash as [`check_in`]:
/// each name goes to the rank owning its hash, which answers every writer but the
/// lowest. Per rank: one message per distinct owner of its names and at most one
/// answer per name it sent, and the O(log P) steps of two non-blocking barriers.
pub(crate) fn lowest_writers(world: &dyn World, names: &[String]) -> Vec<bool> {
    let ranks = world.size();
    let mut out: BTreeMap<u32, Vec<&str>> = BTreeMap::new();
    for n in names {
        out.entry(owner(n, ranks)).or_default().push(n.as_str());
    }
    let sends: Vec<(u32, Vec<&str>)> = out.into_iter().collect();
    let got = world.sparse_exchange_values(&sends, SHARED_TAGS[0], "names written");
    let mut writers: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for (from, names) in got {
        // (a message this runtime serialized: unreadable only through a bug, and then
        // every writer reads the file back, as without this exchange)
        let names: Vec<String> = names.unwrap_or_default();
        for n in names {
            writers.entry(n).or_default().push(from);
        }
    }
    let mut answers: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for (name, mut from) in writers {
        from.sort_unstable();
        from.dedup();
        for r in from.into_iter().skip(1) {
            answers.entry(r).or_default().push(name.clone());
        }
    }
    let sends: Vec<(u32, Vec<String>)> = answers.into_iter().collect();
    let not_lowest: std::collections::HashSet<String> = world
        .sparse_exchange_values::<_, Vec<String>>(&sends, SHARED_TAGS[1], "names not lowest")
        .into_iter()
        .flat_map(|(_, names)| names.unwrap_or_default())
        .collect();
    names.iter().map(|n| !not_lowest.contains(n)).collect()
}

/// The rank of `comm` that checks `name`: a hash every rank computes alike.
fn owner(name: &str, ranks: u32) -> u32 {
    crc32fast::hash(name.as_bytes()) % ranks.max(1)
}

/// Send this rank's `routed` and `redundancy` names to their owners and check the names
/// this rank owns (collective over `world`). `scheme` names the redundancy scheme in
/// messages. Returns the clashes among the names this rank owns: another rank may have
/// found others, so the caller agrees on them (a reduction) before acting.
pub(crate) fn check_in(
    world: &dyn World,
    routed: &[String],
    redundancy: &[String],
    scheme: &str,
) -> Clashes {
    let ranks = world.size();
    let mut out: BTreeMap<u32, Vec<(Kind, &str)>> = BTreeMap::new();
    for (kind, names) in [(Kind::Routed, routed), (Kind::Redundancy, redundancy)] {
        for n in names {
            out.entry(owner(n, ranks))
                .or_default()
                .push((kind, n.as_str()));
        }
    }
    let sends: Vec<(u32, Vec<(Kind, &str)>)> = out.into_iter().collect();
    let got = world.sparse_exchange_values(&sends, NAME_TAG, "names");
    let received: Vec<(u32, Vec<(Kind, String)>)> = got
        .into_iter()
        .map(|(from, names)| {
            // (a message this runtime serialized; unreadable only through a bug, and then
            // it cannot clash with anything)
            (from, names.unwrap_or_default())
        })
        .collect();
    find(&received, scheme)
}

/// The clashes among `received` (sender rank, its names), reported deterministically:
/// for each kind the clash of the smallest name, between the lowest ranks involved.
fn find(received: &[(u32, Vec<(Kind, String)>)], scheme: &str) -> Clashes {
    // name -> (ranks that routed it, ranks whose redundancy file it is), each ascending
    let mut by_name: BTreeMap<&str, (Vec<u32>, Vec<u32>)> = BTreeMap::new();
    let mut from_lowest: Vec<&(u32, Vec<(Kind, String)>)> = received.iter().collect();
    from_lowest.sort_by_key(|(from, _)| *from);
    for (from, names) in from_lowest {
        for (kind, n) in names {
            let e = by_name.entry(n.as_str()).or_default();
            match kind {
                Kind::Routed => e.0.push(*from),
                Kind::Redundancy => e.1.push(*from),
            }
        }
    }
    let mut clashes = Clashes::default();
    for (n, (routers, holders)) in &by_name {
        if clashes.routed.is_none() && routers.len() > 1 {
            clashes.routed = Some(format!(
                "ranks {} and {} both routed `{n}`; each rank must write files of its own in cache: for a file several ranks write (a shared file), set `bypass = true` on this checkpoint descriptor (SCR_CACHE_BYPASS=1 for every descriptor) to write it straight to the prefix, as SCR 3.1 does by default",
                routers[0], routers[1]
            ));
        }
        if let (None, Some(&router), Some(&holder)) =
            (&clashes.redundancy, routers.first(), holders.first())
        {
            clashes.redundancy = Some(format!(
                "on rank {holder}: rank {router} routed `{n}`, the name of rank {holder}'s redundancy file under scheme {scheme}; choose another name"
            ));
        }
    }
    clashes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[(Kind, &str)]) -> Vec<(Kind, String)> {
        list.iter().map(|(k, n)| (*k, n.to_string())).collect()
    }

    #[test]
    fn the_lowest_writer_of_each_shared_name_is_found_on_every_rank() {
        use crate::runtime::world::inproc::run_ranks;
        let got = run_ranks(5, |w: Box<dyn World>| {
            let me = w.rank();
            // every rank: "shared" and its own file; ranks 2..: "late" as well
            let mut mine = vec!["shared".to_string(), format!("own_{me}")];
            if me >= 2 {
                mine.push("late".into());
            }
            (mine.clone(), lowest_writers(&*w, &mine))
        });
        for (rank, (mine, lowest)) in got.into_iter().enumerate() {
            for (name, first) in mine.iter().zip(lowest) {
                let expected = match name.as_str() {
                    "shared" => rank == 0,
                    "late" => rank == 2,
                    _ => true,
                };
                assert_eq!(first, expected, "rank {rank}, {name}");
            }
        }
    }

    #[test]
    fn distinct_names_do_not_clash() {
        let got = find(
            &[
                (0, names(&[(Kind::Routed, "a"), (Kind::Redundancy, "r0")])),
                (1, names(&[(Kind::Routed, "b"), (Kind::Redundancy, "r1")])),
            ],
            "XOR",
        );
        assert_eq!(got, Clashes::default());
    }

    #[test]
    fn two_routers_are_named_lowest_first_whatever_the_arrival_order() {
        let got = find(
            &[
                (5, names(&[(Kind::Routed, "shared.dat")])),
                (3, names(&[(Kind::Routed, "shared.dat")])),
                (4, names(&[(Kind::Routed, "shared.dat")])),
            ],
            "XOR",
        );
        assert_eq!(
            got.routed.as_deref(),
            Some("ranks 3 and 4 both routed `shared.dat`; each rank must write files of its own in cache: for a file several ranks write (a shared file), set `bypass = true` on this checkpoint descriptor (SCR_CACHE_BYPASS=1 for every descriptor) to write it straight to the prefix, as SCR 3.1 does by default")
        );
        assert_eq!(got.redundancy, None);
    }

    #[test]
    fn one_rank_routing_a_name_twice_clashes_with_itself() {
        let got = find(
            &[(2, names(&[(Kind::Routed, "x"), (Kind::Routed, "x")]))],
            "SINGLE",
        );
        assert_eq!(
            got.routed.as_deref(),
            Some("ranks 2 and 2 both routed `x`; each rank must write files of its own in cache: for a file several ranks write (a shared file), set `bypass = true` on this checkpoint descriptor (SCR_CACHE_BYPASS=1 for every descriptor) to write it straight to the prefix, as SCR 3.1 does by default")
        );
    }

    #[test]
    fn a_routed_name_of_a_redundancy_file_names_both_ranks_and_the_scheme() {
        let got = find(
            &[
                (1, names(&[(Kind::Redundancy, "scr.1.xor.redset")])),
                (0, names(&[(Kind::Routed, "scr.1.xor.redset")])),
            ],
            "XOR",
        );
        assert_eq!(got.routed, None);
        assert_eq!(
            got.redundancy.as_deref(),
            Some("on rank 1: rank 0 routed `scr.1.xor.redset`, the name of rank 1's redundancy file under scheme XOR; choose another name")
        );
    }

    #[test]
    fn two_redundancy_files_of_one_name_are_not_a_clash() {
        // (they live in different nodes' caches and are never flushed)
        let got = find(
            &[
                (0, names(&[(Kind::Redundancy, "partner.redset")])),
                (1, names(&[(Kind::Redundancy, "partner.redset")])),
            ],
            "PARTNER",
        );
        assert_eq!(got, Clashes::default());
    }

    #[test]
    fn the_smallest_clashing_name_is_reported() {
        let got = find(
            &[
                (0, names(&[(Kind::Routed, "b"), (Kind::Routed, "a")])),
                (1, names(&[(Kind::Routed, "b"), (Kind::Routed, "a")])),
            ],
            "XOR",
        );
        assert_eq!(
            got.routed.as_deref(),
            Some("ranks 0 and 1 both routed `a`; each rank must write files of its own in cache: for a file several ranks write (a shared file), set `bypass = true` on this checkpoint descriptor (SCR_CACHE_BYPASS=1 for every descriptor) to write it straight to the prefix, as SCR 3.1 does by default")
        );
    }

    #[test]
    fn owners_spread_over_the_ranks_and_agree_everywhere() {
        let mut hits = vec![0u32; 8];
        for i in 0..800 {
            hits[owner(&format!("rank_{i}.ckpt"), 8) as usize] += 1;
        }
        // every rank owns some names (a hash, not a range)
        assert!(hits.iter().all(|&h| h > 50), "{hits:?}");
        assert_eq!(owner("x", 1), 0);
        assert_eq!(owner("x", 0), 0);
    }

    /// The whole check over thread ranks: names sent to their owners, clashes found by
    /// whichever rank owns the name and agreed on as `complete_output` agrees.
    fn check_ranks(n: u32, routed: &[&[&str]], redundancy: &[&[&str]]) -> Clashes {
        use crate::runtime::world::inproc::run_ranks;
        let out = run_ranks(n, |w| {
            let r = w.rank() as usize;
            let own = |l: &[&[&str]]| -> Vec<String> {
                l.get(r)
                    .map_or(Vec::new(), |v| v.iter().map(|s| s.to_string()).collect())
            };
            let c = check_in(w.as_ref(), &own(routed), &own(redundancy), "XOR");
            // every rank learns each kind's first clash, as the runtime's agreement does
            let first = |mine: Option<String>| {
                let me = if mine.is_some() {
                    u64::from(w.rank())
                } else {
                    u64::MAX
                };
                let first = w.min_u64(me);
                (first != u64::MAX).then(|| {
                    let b = w.broadcast_from(first as u32, mine.unwrap_or_default().as_bytes());
                    String::from_utf8_lossy(&b).into_owned()
                })
            };
            Clashes {
                routed: first(c.routed),
                redundancy: first(c.redundancy),
            }
        });
        for o in &out[1..] {
            assert_eq!(o, &out[0], "every rank agrees");
        }
        out.into_iter().next().unwrap()
    }

    #[test]
    fn clashes_are_found_end_to_end_over_thread_ranks() {
        // distinct names: none
        let c = check_ranks(
            4,
            &[&["a0", "b0"], &["a1"], &[], &["a3", "b3", "c3"]],
            &[&["r0"], &["r1"], &["r2"], &["r3"]],
        );
        assert_eq!(c, Clashes::default());
        // two ranks routing one name, among many
        let c = check_ranks(
            7,
            &[&["x", "shared"], &[], &["y"], &[], &[], &["shared"], &["z"]],
            &[],
        );
        assert_eq!(
            c.routed.as_deref(),
            Some("ranks 0 and 5 both routed `shared`; each rank must write files of its own in cache: for a file several ranks write (a shared file), set `bypass = true` on this checkpoint descriptor (SCR_CACHE_BYPASS=1 for every descriptor) to write it straight to the prefix, as SCR 3.1 does by default")
        );
        assert_eq!(c.redundancy, None);
        // a routed name that is another rank's redundancy file
        let c = check_ranks(3, &[&[], &["scr.xor.2"], &[]], &[&[], &[], &["scr.xor.2"]]);
        assert_eq!(c.routed, None);
        assert_eq!(
            c.redundancy.as_deref(),
            Some("on rank 2: rank 1 routed `scr.xor.2`, the name of rank 2's redundancy file under scheme XOR; choose another name")
        );
        // one rank alone routing a name twice
        let c = check_ranks(1, &[&["twice", "twice"]], &[]);
        assert!(c
            .routed
            .unwrap()
            .starts_with("ranks 0 and 0 both routed `twice`"));
    }
}
