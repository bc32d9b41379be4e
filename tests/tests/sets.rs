//! Redundancy sets formed at init without any rank learning every rank's group value
//! (`form_my_set`: splits by value, an exclusive scan) are the sets `form_sets` forms from
//! the whole list, on every rank: same ids, same members in the same order, the members'
//! values; and the ranks sharing a value find each other even when two values collide in
//! the hash that splits them.

use scr_e2e::Cluster;
use scr_host::runtime::form_sets;

/// Run the probe on `values` (one per rank) with `set_size`; check every rank's report
/// against `form_sets`.
fn check(values: &[&str], set_size: usize) {
    check_hop(values, set_size, 1);
}

/// [`check`] with neighbours `hop` groups apart (`hop_distance`).
fn check_hop(values: &[&str], set_size: usize, hop: usize) {
    let c = Cluster::new();
    let out = c.run(
        values,
        "scr-sets-probe",
        &[&set_size.to_string(), &hop.to_string()],
    );
    assert_eq!(out.code, 0, "the probe ran\n{out}");
    let groups: Vec<String> = values.iter().map(|v| v.to_string()).collect();
    let sets = form_sets(&groups, set_size, hop);
    for rank in 0..values.len() {
        let report = std::fs::read_to_string(c.prefix().join(format!("sets_{rank}.txt")))
            .unwrap_or_else(|e| panic!("rank {rank} wrote no report: {e}\n{out}"));
        let set = sets
            .iter()
            .find(|s| s.members.contains(&(rank as u32)))
            .expect("form_sets puts every rank in a set");
        let member = set.members.iter().position(|&m| m == rank as u32).unwrap();
        let member_values: Vec<&str> = set.members.iter().map(|&m| values[m as usize]).collect();
        let same: Vec<usize> = (0..values.len())
            .filter(|&r| values[r] == values[rank])
            .collect();
        assert_eq!(
            report,
            format!(
                "world size {}\nset {} members {:?}\ncomm rank {member} of {}\nvalues {member_values:?}\nsame value {same:?}\n",
                values.len(),
                set.id,
                set.members,
                set.members.len(),
            ),
            "rank {rank} of {values:?}, set size {set_size}, hop {hop}"
        );
    }
}

#[test]
fn sets_formed_by_splits_equal_form_sets_for_uneven_nodes() {
    // 4 nodes with 3, 1, 2 and 2 ranks, interleaved: levels of 4, 3 and 1 ranks
    let nodes = ["a", "b", "a", "c", "d", "a", "c", "d"];
    for set_size in [1, 2, 3, 4, 8] {
        check(&nodes, set_size);
    }
}

/// `hop_distance` under MPI: six nodes of two ranks, neighbours two nodes apart.
#[test]
fn sets_formed_by_splits_equal_form_sets_with_a_hop_distance() {
    let nodes = [
        "n0", "n0", "n1", "n1", "n2", "n2", "n3", "n3", "n4", "n4", "n5", "n5",
    ];
    check_hop(&nodes, 3, 2);
    check_hop(&nodes, 2, 3);
}

#[test]
fn sets_formed_by_splits_equal_form_sets_for_five_nodes_of_two() {
    let nodes = ["n0", "n0", "n1", "n1", "n2", "n2", "n3", "n3", "n4", "n4"];
    check(&nodes, 2);
    check(&nodes, 4);
}

#[test]
fn values_whose_hashes_collide_are_still_told_apart() {
    // (crc32 & 0x7fffffff of these two names is the same: one split group, checked)
    let (x, y) = ("node3985819", "node4420602");
    assert_eq!(
        crc32fast::hash(x.as_bytes()) & 0x7fff_ffff,
        crc32fast::hash(y.as_bytes()) & 0x7fff_ffff,
        "the names collide in the split's hash"
    );
    check(&[x, y, x, y, "other", x], 2);
    check(&[x, y, x, y, "other", x], 3);
}

/// A job whose sets are smaller than its scheme needs keeps what they can hold and says
/// so once at init: PARTNER on one node (sets of one member: no copy anywhere else, so
/// the descriptor protects nothing); XOR over group WORLD (one failure group for the
/// whole job, as in SCR: sets of one member on any number of nodes); PARTNER with three
/// ranks on two nodes (one rank's set is smaller, the others keep their copies).
#[test]
fn sets_too_small_for_the_scheme_are_reported_at_init_with_the_numbers() {
    let mut c = Cluster::new();
    c.set("SCR_COPY_TYPE", "PARTNER");
    let out = c.run(&["n0", "n0"], "scr-heat", &["--steps", "5", "--every", "5"]);
    assert_eq!(out.code, 0, "{out}");
    let said = out.logged(
        Some(0),
        "warning",
        "descriptor 0 (PARTNER, group NODE) protects nothing: every redundancy set has one member and tolerates no lost member, where a full set of set_size = 8 tolerates 1; the job spans a single NODE failure group",
    );
    assert_eq!(said.len(), 1, "{out}");
    let mut c = Cluster::new();
    c.set("SCR_COPY_TYPE", "XOR").set("SCR_GROUP", "WORLD");
    let out = c.run(
        &["n0", "n1", "n2"],
        "scr-heat",
        &["--steps", "5", "--every", "5"],
    );
    assert_eq!(out.code, 0, "{out}");
    let said = out.logged(
        Some(0),
        "warning",
        "descriptor 0 (XOR, group WORLD) protects nothing: every redundancy set has one member",
    );
    assert_eq!(said.len(), 1, "{out}");
    assert!(
        said[0].contains("group WORLD is one failure group for the whole job"),
        "{out}"
    );
    let mut c = Cluster::new();
    c.set("SCR_COPY_TYPE", "PARTNER");
    let out = c.run(
        &["n0", "n0", "n1"],
        "scr-heat",
        &["--steps", "5", "--every", "5"],
    );
    assert_eq!(out.code, 0, "{out}");
    let said = out.logged(
        Some(0),
        "warning",
        "descriptor 0 (PARTNER): the sets of 1 rank(s) (rank 1 the first) tolerate 0 lost member(s) where a full set of set_size = 8 tolerates 1: they have fewer members than the scheme needs",
    );
    assert_eq!(said.len(), 1, "{out}");
    // on two nodes every set of two keeps its copy: nothing to say
    let mut c = Cluster::new();
    c.set("SCR_COPY_TYPE", "PARTNER");
    let out = c.run(&["n0", "n1"], "scr-heat", &["--steps", "5", "--every", "5"]);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.logged(None, "warning", "descriptor 0").is_empty(),
        "{out}"
    );
}
