//! An apply that fails leaves nothing of the scheme's in the cache: the fixture scheme
//! FAIL_PARTIAL writes part of its declared redundancy file and an undeclared temporary
//! file on every member, then fails on member 1 — at `complete_output`, and when a
//! fetched checkpoint is protected again at init.

use std::path::PathBuf;

use scr_e2e::{files_below, Cluster};

const FOUR_NODES: &[&str] = &["n0", "n1", "n2", "n3"];

/// A cluster loading the panic fixture, with FAIL_PARTIAL in sets of 4.
fn fail_partial() -> Cluster {
    let mut c = Cluster::new();
    c.load_plugins(&["libscr_fixture_panic.so"])
        .set("SCR_COPY_TYPE", "FAIL_PARTIAL")
        .set("SCR_SET_SIZE", "4")
        .set("SCR_ABORT_TIMEOUT", "5");
    c
}

#[test]
fn a_failed_apply_at_complete_output_leaves_no_redundancy_file_on_any_rank() {
    let c = fail_partial();
    let out = c.run(FOUR_NODES, "scr-probe", &["apply-one"]);
    assert_eq!(out.code, 0, "{out}");
    for r in 0..4 {
        let report = std::fs::read_to_string(c.prefix().join(format!("probe_{r}.txt")))
            .unwrap_or_else(|e| panic!("rank {r} wrote no report: {e}\n{out}"));
        assert!(
            report.starts_with("error: complete_output ckpt.1: redundancy could not be applied")
                && report.contains("deliberate failure in apply on member 1")
                && report.contains("restart candidate None"),
            "rank {r}: {report}"
        );
    }
    // nothing at all stays in any node's cache: not the application's files, not the
    // declared redundancy file, not the temporary one
    assert_eq!(
        files_below(&c.path("cache")),
        Vec::<PathBuf>::new(),
        "{out}"
    );
}

#[test]
fn a_failed_apply_of_a_fetched_checkpoint_leaves_no_redundancy_file_on_any_rank() {
    let mut c = fail_partial();
    c.set("SCR_FLUSH", "1").set("SCR_FIXTURE_APPLY_OK", "1");
    let first = c.run(FOUR_NODES, "scr-heat", &["--steps", "6"]);
    assert_eq!(first.code, 0, "{first}");
    assert!(c.prefix().join("ckpt.5/rank_3.ckpt").is_file(), "{first}");
    for node in FOUR_NODES {
        c.lose_node(node);
    }
    // the fetch of ckpt.5 succeeds, protecting it again fails on member 1; two steps
    // write no checkpoint of their own
    c.env.remove("SCR_FIXTURE_APPLY_OK");
    let second = c.run(FOUR_NODES, "scr-heat", &["--steps", "2"]);
    assert_eq!(second.code, 0, "{second}");
    assert!(
        second
            .stderr
            .contains("ckpt.5 cannot be fetched: re-protecting failed on rank 1")
            && second
                .stderr
                .contains("deliberate failure in apply on member 1"),
        "{second}"
    );
    assert_eq!(
        files_below(&c.path("cache")),
        Vec::<PathBuf>::new(),
        "{second}"
    );
}
