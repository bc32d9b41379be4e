//! RS end to end: 4 simulated nodes, one rank each, one RS set of 4 with
//! `set_failures = 2`. Two lost nodes are rebuilt at restart byte for byte (files and
//! redundancy) and the run resumes exactly; three lost nodes are refused with a message
//! that names the members and the limit, and nothing is left looking recovered.

use std::collections::BTreeMap;
use std::path::Path;

use scr_e2e::{files_below, reference_state, Cluster, JobOutput};

const NODES: &[&str] = &["n0", "n1", "n2", "n3"];
const CELLS: &str = "5000";

fn heat(c: &Cluster, steps: u64) -> JobOutput {
    c.run(
        NODES,
        "scr-heat",
        &["--steps", &steps.to_string(), "--cells", CELLS],
    )
}

fn cluster() -> Cluster {
    let mut c = Cluster::new();
    // what the cache alone can bring back: nothing is flushed (finalize included)
    c.set("SCR_COPY_TYPE", "RS")
        .set("SCR_SET_SIZE", "4")
        .set("SCR_SET_FAILURES", "2")
        .set("SCR_FLUSH", "0");
    c
}

/// The checkpoint files (not redundancy data) under a node's cache, by path, with
/// their bytes.
fn checkpoint_files(c: &Cluster, node: &str) -> BTreeMap<String, Vec<u8>> {
    let dir = c.cache_dir(node);
    files_below(&dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "ckpt"))
        .map(|p| {
            let rel = p.strip_prefix(&dir).unwrap().display().to_string();
            (rel, std::fs::read(&p).unwrap())
        })
        .collect()
}

/// The RS redundancy files under a node's cache, by name.
fn rs_files(dir: &Path) -> Vec<String> {
    files_below(dir)
        .into_iter()
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .filter(|n| n.contains(".rs.mem_") && n.ends_with(".redset"))
        .collect()
}

fn first_run(c: &Cluster) {
    let out = heat(c, 12);
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.contains("checkpoint ckpt.10: kept"), "{out}");
}

#[test]
fn two_lost_nodes_are_rebuilt_byte_exact_and_the_run_resumes() {
    let c = cluster();
    first_run(&c);
    let before: Vec<BTreeMap<String, Vec<u8>>> = ["n1", "n2"]
        .iter()
        .map(|n| checkpoint_files(&c, n))
        .collect();
    for (node, files) in ["n1", "n2"].iter().zip(&before) {
        assert!(
            files
                .keys()
                .any(|p| p.ends_with("ckpt.10/rank_1.ckpt") || p.ends_with("ckpt.10/rank_2.ckpt")),
            "{node}: {:?}",
            files.keys()
        );
        assert_eq!(
            rs_files(&c.cache_dir(node)).len(),
            2,
            "{node}: two datasets, one RS file each"
        );
    }
    c.lose_node("n1");
    c.lose_node("n2");

    // restart at step 10 and stop there: the rebuild alone
    let out = heat(&c, 10);
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        out.line_after("restarted from "),
        Some("ckpt.10 at step 10"),
        "{out}"
    );
    assert!(!out.stdout.contains("lost:"), "{out}");
    for (node, want) in ["n1", "n2"].iter().zip(&before) {
        let got = checkpoint_files(&c, node);
        // the restart dataset's files are back, byte for byte
        let newest: Vec<&String> = want.keys().filter(|p| p.contains("ckpt.10/")).collect();
        assert!(!newest.is_empty(), "{node}");
        for p in newest {
            assert!(
                got.get(p) == want.get(p),
                "{node}: {p} differs from what was checkpointed (or is missing)"
            );
        }
        // and so is the node's RS redundancy for it: the set is protected again
        let dataset_dir = c.cache_dir(node).join(
            Path::new(want.keys().find(|p| p.contains("ckpt.10/")).unwrap())
                .iter()
                .next()
                .unwrap(),
        );
        assert_eq!(rs_files(&dataset_dir).len(), 1, "{}", dataset_dir.display());
    }

    // losing two other nodes now is rebuilt too, and the run ends exactly as an
    // uninterrupted one
    c.lose_node("n0");
    c.lose_node("n3");
    let out = heat(&c, 20);
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        out.line_after("restarted from "),
        Some("ckpt.10 at step 10"),
        "{out}"
    );
    assert_eq!(out.final_state(), reference_state(4, 20, Some(5000)));
}

#[test]
fn three_lost_nodes_are_refused_clearly_and_nothing_looks_recovered() {
    let c = cluster();
    first_run(&c);
    for node in ["n0", "n1", "n2"] {
        c.lose_node(node);
    }
    // restart without running a step, so that no new checkpoint is written
    let out = heat(&c, 0);
    assert_eq!(out.code, 0, "{out}");
    let lost: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.starts_with("lost: "))
        .collect();
    assert_eq!(lost.len(), 2, "both cached checkpoints\n{out}");
    for l in &lost {
        assert!(
            l.contains("members [0, 1, 2] of 4 lost files and RS with set_failures = 2 rebuilds at most 2 per set"),
            "{l}"
        );
    }
    assert!(out.stdout.contains("starting fresh"), "{out}");
    assert!(out.line_after("restarted from ").is_none(), "{out}");
    for node in ["n0", "n1", "n2"] {
        assert!(
            checkpoint_files(&c, node).is_empty(),
            "{node}: a lost checkpoint file exists again"
        );
    }
}
