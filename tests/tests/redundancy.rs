//! Node losses under XOR and PARTNER, end to end: 4 simulated nodes × 2 ranks, sets of
//! 4 across the nodes (one member per node). A tolerated loss is rebuilt at restart and
//! the run resumes byte-exact; a loss beyond the scheme falls back cleanly and says which
//! sets could not be rebuilt.

use scr_e2e::{Cluster, JobOutput};

const NODES: &[&str] = &["n0", "n0", "n1", "n1", "n2", "n2", "n3", "n3"];

fn heat(c: &Cluster, nodes: &[&str], args: &[&str]) -> JobOutput {
    c.run(nodes, "scr-heat", args)
}

fn cluster(scheme: &str) -> Cluster {
    let mut c = Cluster::new();
    // what the cache alone can bring back: nothing is flushed (finalize included)
    c.set("SCR_COPY_TYPE", scheme)
        .set("SCR_SET_SIZE", "4")
        .set("SCR_FLUSH", "0");
    c
}

fn first_run(c: &Cluster) {
    let out = heat(c, NODES, &["--steps", "12", "--cells", "5000"]);
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.contains("checkpoint ckpt.10: kept"), "{out}");
}

fn restarts_from_ckpt10(out: &JobOutput) {
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        out.line_after("restarted from "),
        Some("ckpt.10 at step 10"),
        "{out}"
    );
    assert!(!out.stdout.contains("lost:"), "{out}");
}

#[test]
fn xor_rebuilds_a_lost_node_and_resumes_byte_exact() {
    let c = cluster("XOR");
    first_run(&c);
    c.lose_node("n1");
    let out = heat(&c, NODES, &["--steps", "20", "--cells", "5000"]);
    restarts_from_ckpt10(&out);
    assert_eq!(out.final_state(), reference_5000(20));
    // the node's ranks hold their files and XOR parity again
    let n1 = c.cache_dir("n1");
    let mut sets: Vec<_> = std::fs::read_dir(&n1)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    sets.sort_by_key(|p| {
        p.extension()
            .and_then(|x| x.to_str())
            .and_then(|id| id.parse::<u64>().ok())
    });
    let newest = sets.last().expect("datasets on n1");
    for rank in [2, 3] {
        assert!(newest.join(format!("ckpt.20/rank_{rank}.ckpt")).is_file());
        let parity = std::fs::read_dir(newest)
            .unwrap()
            .filter_map(Result::ok)
            .any(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(&format!("scr.{rank}.xor."))
            });
        assert!(parity, "rank {rank}'s parity in {}", newest.display());
    }
}

/// The reference with 5000 cells per rank, as these tests run.
fn reference_5000(steps: u64) -> String {
    let c = Cluster::new();
    let out = heat(
        &c,
        &["x"; 8],
        &[
            "--steps",
            &steps.to_string(),
            "--every",
            "0",
            "--cells",
            "5000",
        ],
    );
    assert_eq!(out.code, 0, "{out}");
    out.final_state().to_string()
}

#[test]
fn xor_losing_two_nodes_of_a_set_falls_back_and_names_the_sets() {
    let c = cluster("XOR");
    first_run(&c);
    c.lose_node("n1");
    c.lose_node("n2");
    let out = heat(&c, NODES, &["--steps", "20", "--cells", "5000"]);
    assert_eq!(out.code, 0, "{out}");
    let lost: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.starts_with("lost: "))
        .collect();
    assert_eq!(lost.len(), 2, "both cached checkpoints\n{out}");
    for l in &lost {
        for rank in [2, 3, 4, 5] {
            assert!(
                l.contains(&format!(
                    "rank {rank}: no record of the dataset (cache lost)"
                )),
                "{l}"
            );
        }
        assert!(!l.contains("rank 0: ") && !l.contains("rank 7: "), "{l}");
        assert!(l.contains("set 0: ") && l.contains("set 1: "), "{l}");
        assert!(l.contains("XOR rebuilds only one per set"), "{l}");
    }
    assert!(out.stdout.contains("starting fresh"), "{out}");
    assert_eq!(out.final_state(), reference_5000(20));
}

#[test]
fn partner_rebuilds_a_lost_node() {
    let c = cluster("PARTNER");
    first_run(&c);
    c.lose_node("n2");
    let out = heat(&c, NODES, &["--steps", "20", "--cells", "5000"]);
    restarts_from_ckpt10(&out);
    assert_eq!(out.final_state(), reference_5000(20));
}

#[test]
fn partner_losing_a_node_and_its_partner_falls_back() {
    let c = cluster("PARTNER");
    first_run(&c);
    // in each set (one member per node, in node order) n0's partner is n1
    c.lose_node("n0");
    c.lose_node("n1");
    let out = heat(&c, NODES, &["--steps", "20", "--cells", "5000"]);
    assert_eq!(out.code, 0, "{out}");
    let lost: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.starts_with("lost: "))
        .collect();
    assert!(!lost.is_empty(), "{out}");
    assert!(
        lost[0].contains("no partner holds an intact copy"),
        "{}",
        lost[0]
    );
    assert!(out.stdout.contains("starting fresh"), "{out}");
}

#[test]
fn after_a_node_loss_ranks_restart_on_a_spare_node() {
    let c = cluster("XOR");
    first_run(&c);
    c.lose_node("n3");
    let spare = ["n0", "n0", "n1", "n1", "n2", "n2", "spare", "spare"];
    let out = heat(&c, &spare, &["--steps", "20", "--cells", "5000"]);
    restarts_from_ckpt10(&out);
    assert_eq!(out.final_state(), reference_5000(20));
    assert!(
        c.cache_dir("spare").exists(),
        "the spare node's cache holds the rebuilt files"
    );
}
