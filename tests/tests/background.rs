//! `protect_in_background` under mpiexec: XOR applied by a thread of each rank while
//! scr-heat computes (MPI_THREAD_MULTIPLE), a node lost afterwards rebuilt from it, a
//! process killed at each step of the background apply restarting every rank from the
//! previous checkpoint, and the foreground fallback below MPI_THREAD_MULTIPLE said.

use scr_e2e::{Cluster, JobOutput};

/// Four ranks on four nodes: one XOR set of four.
const FOUR_NODES: &[&str] = &["n0", "n1", "n2", "n3"];

fn reference(steps: u64) -> String {
    scr_e2e::reference_state(4, steps, None)
}

/// XOR protected in the background, nothing flushed (a restart reads the caches only).
fn cluster() -> Cluster {
    let mut c = Cluster::new();
    c.set("SCR_COPY_TYPE", "XOR")
        .set("SCR_SET_SIZE", "4")
        .set("SCR_FLUSH", "0")
        .set("SCR_PROTECT_IN_BACKGROUND", "1")
        .set("SCR_DEBUG", "1");
    c
}

fn heat(c: &Cluster, steps: u64, extra: &[&str]) -> JobOutput {
    let steps = steps.to_string();
    let mut args = vec!["--steps", steps.as_str(), "--every", "5"];
    args.extend_from_slice(extra);
    c.run(FOUR_NODES, "scr-heat", &args)
}

/// Node n2 lost after a 12-step run: 20 steps restart from ckpt.10, rebuilt through
/// XOR, and end in the uninterrupted run's state.
fn rebuilt_after_losing_n2(c: &Cluster, extra: &[&str]) {
    c.lose_node("n2");
    let out = heat(c, 20, extra);
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        out.line_after("restarted from "),
        Some("ckpt.10 at step 10"),
        "{out}"
    );
    assert_eq!(out.final_state(), reference(20), "{out}");
}

/// The background mode is said and in force: the checkpoints are kept at later calls,
/// and after node n2 is lost the next run rebuilds the newest one from XOR byte-exact.
#[test]
fn a_checkpoint_protected_in_the_background_is_rebuilt_after_a_node_is_lost() {
    let c = cluster();
    let out = heat(&c, 12, &["--thread-multiple"]);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stderr
            .contains("its scheme runs in a background thread after complete_output"),
        "{out}"
    );
    assert!(
        out.stderr.contains("complete_output ckpt.10: written")
            && out.stderr.contains("applied in the background"),
        "{out}"
    );
    rebuilt_after_losing_n2(&c, &["--thread-multiple"]);
}

/// Rank 1 is killed with SIGKILL while ckpt.10 (dataset 2) is protected in the background:
/// as its thread starts, and after its apply returned but before the set settled it. The
/// relaunch restarts every rank from ckpt.5, the previous checkpoint, and ends in the
/// uninterrupted run's state.
#[test]
fn a_kill_during_the_background_apply_restarts_from_the_previous_checkpoint() {
    for point in ["protect-2", "protected-2"] {
        let mut c = cluster();
        c.set("SCR_FAULT", &format!("{point}:1"));
        let crashed = heat(&c, 12, &["--thread-multiple", "--sleep-ms", "20"]);
        assert_ne!(crashed.code, 0, "{point}: {crashed}");
        // the job ended for the kill, not for another error
        assert!(
            crashed.stderr.contains("signal 9"),
            "{point}: not killed: {crashed}"
        );
        c.env.remove("SCR_FAULT");
        let out = heat(&c, 20, &["--thread-multiple"]);
        assert_eq!(out.code, 0, "{point}: {out}");
        assert_eq!(
            out.line_after("restarted from "),
            Some("ckpt.5 at step 5"),
            "{point}: {out}"
        );
        assert_eq!(out.final_state(), reference(20), "{point}: {out}");
    }
}

/// Below MPI_THREAD_MULTIPLE the descriptor protects inside complete_output, and init
/// says why; the checkpoints are kept as usual.
#[test]
fn below_thread_multiple_the_scheme_runs_in_complete_output_and_init_says_why() {
    let c = cluster();
    let out = heat(&c, 12, &[]);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stderr.contains(
            "protect_in_background = true (environment SCR_PROTECT_IN_BACKGROUND), but MPI was initialised with thread level Single, not MPI_THREAD_MULTIPLE"
        )
            && out.stderr.contains("its scheme runs inside complete_output"),
        "{out}"
    );
    assert!(!out.stderr.contains("applied in the background"), "{out}");
    rebuilt_after_losing_n2(&c, &[]);
}

/// Online recovery (Open MPI 5 with ULFM) with the schemes' work in the background: rank
/// 2 is killed after step 17 (ckpt.15's protection settled by scr-heat's call of that
/// step) and its node's storage lost; the spare takes its place inside the same mpiexec,
/// the node's files are rebuilt from the XOR data the background wrote, and the job ends
/// in the uninterrupted run's state.
#[test]
fn online_recovery_rebuilds_from_redundancy_applied_in_the_background() {
    let mut c = Cluster::new();
    c.set("SCR_COPY_TYPE", "XOR")
        .set("SCR_PROTECT_IN_BACKGROUND", "1")
        .set("SCR_DEBUG", "1");
    let nodes = ["n0", "n0", "n1", "n1", "n2", "n2", "n3", "n3", "n4"];
    // rank 2's node loses its storage with it
    let wipe = [c.path("cache").join("n1"), c.path("cntl").join("n1")]
        .map(|p| p.display().to_string())
        .join(",");
    let out = c.run_ulfm(
        &nodes,
        "scr-heat",
        &[
            "--steps",
            "40",
            "--every",
            "5",
            "--spares",
            "1",
            "--kill-at",
            "17",
            "--kill-rank",
            "2",
            "--thread-multiple",
            "--wipe-before-kill",
            &wipe,
        ],
    );
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stderr
            .contains("its scheme runs in a background thread after complete_output"),
        "{out}"
    );
    assert_eq!(out.line_after("recoveries "), Some("1"), "{out}");
    assert_eq!(
        out.line_after("restarted from "),
        Some("ckpt.15 at step 15"),
        "{out}"
    );
    // the spare on n4 held none of rank 2's files: XOR rebuilt them there
    let log = std::fs::read_to_string(c.prefix().join(".scr/events.jsonl")).unwrap_or_default();
    assert!(
        log.lines()
            .any(|l| l.contains("\"event\":\"rebuild\"") && l.contains("\"name\":\"ckpt.15\"")),
        "no rebuild of ckpt.15:\n{log}\n{out}"
    );
    assert_eq!(
        out.final_state(),
        scr_e2e::reference_state(8, 40, None),
        "{out}"
    );
}
