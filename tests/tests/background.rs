//! `protect_in_background` under mpiexec, in its three modes: XOR applied by a thread of
//! each rank while scr-heat computes, the thread calling MPI itself
//! (MPI_THREAD_MULTIPLE) or, below it (`MPI_Init`), with `protect_below_multiple = calls`,
//! handing its MPI calls to scr-heat's thread at its calls into the library, or with
//! `sockets`, exchanging over the set's own TCP connections; a node lost afterwards
//! rebuilt from it; a process killed at each step of the background apply restarting
//! every rank from the previous checkpoint; the foreground below MPI_THREAD_MULTIPLE by
//! default, said.

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

/// The two background modes: scr-heat's arguments and settings for each.
const MODES: [(&str, &[&str], Option<&str>); 3] = [
    ("thread", &["--thread-multiple"], None),
    ("calls", &[], Some("calls")),
    ("sockets", &[], Some("sockets")),
];

/// `c` with `protect_below_multiple` set to `below` (of an entry of [`MODES`]).
fn in_mode(mut c: Cluster, below: Option<&str>) -> Cluster {
    if let Some(b) = below {
        c.set("SCR_PROTECT_BELOW_MULTIPLE", b);
    }
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
/// as its thread starts, at the apply's first exchange (the other members inside
/// theirs), and after its apply returned but before the set settled it. The
/// relaunch restarts every rank from ckpt.5, the previous checkpoint, and ends in the
/// uninterrupted run's state. In each mode.
#[test]
fn a_kill_during_the_background_apply_restarts_from_the_previous_checkpoint() {
    for (name, mode, below) in MODES {
        for point in ["protect-2", "protecting-2", "protected-2"] {
            kill_at(point, mode, below, name);
        }
    }
}

/// One crash at `point` in background mode `name` (scr-heat's `mode` arguments, the
/// `below` setting), and the relaunch.
fn kill_at(point: &str, mode: &[&str], below: Option<&str>, name: &str) {
    let mut c = in_mode(cluster(), below);
    c.set("SCR_FAULT", &format!("{point}:1"));
    let crashed = heat(&c, 12, &[mode, &["--sleep-ms", "20"]].concat());
    let point = format!("{point} ({name})");
    assert_ne!(crashed.code, 0, "{point}: {crashed}");
    // the job ended for the kill, not for another error
    assert!(
        crashed.stderr.contains("signal 9"),
        "{point}: not killed: {crashed}"
    );
    c.env.remove("SCR_FAULT");
    let out = heat(&c, 20, mode);
    assert_eq!(out.code, 0, "{point}: {out}");
    assert_eq!(
        out.line_after("restarted from "),
        Some("ckpt.5 at step 5"),
        "{point}: {out}"
    );
    assert_eq!(out.final_state(), reference(20), "{point}: {out}");
}

/// Below MPI_THREAD_MULTIPLE (scr-heat's plain `MPI_Init`), with `protect_below_multiple
/// = calls`, the scheme still runs in the background, its MPI calls made by scr-heat's
/// thread at its calls into the library, and init says so and why; each checkpoint's protection ends at a later call of the
/// loop (scr-heat asks `should_exit` every step), and after node n2 is lost the next
/// run rebuilds the newest one from the XOR data written that way, byte-exact.
#[test]
fn below_thread_multiple_the_application_threads_calls_advance_the_background_apply() {
    let _ = below_thread_multiple_in_the_background(
        "calls",
        "protect_below_multiple = calls (environment SCR_PROTECT_BELOW_MULTIPLE): its scheme runs in a background thread after complete_output, whose MPI calls the application's thread makes when it calls the library",
    );
}

/// The same with `protect_below_multiple = sockets`: the thread calls no MPI, the set's
/// members exchange the XOR data over connections of the library's own; init says so,
/// and the XOR data written that way rebuilds the lost node's files byte-exact.
#[test]
fn below_thread_multiple_the_background_apply_runs_over_the_sets_own_connections() {
    let out = below_thread_multiple_in_the_background(
        "sockets",
        "protect_below_multiple = sockets (environment SCR_PROTECT_BELOW_MULTIPLE): its scheme runs in a background thread after complete_output, which calls no MPI: each redundancy set's members exchange its data over TCP connections of the library's own",
    );
    // (once, at init)
    assert_eq!(
        out.stderr
            .matches("descriptor 0 (XOR): the members of each redundancy set are connected for the background protection (protect_below_multiple = sockets)")
            .count(),
        1,
        "{out}"
    );
}

/// A plugin error on rank 1 in the background apply of ckpt.10 (dataset 2, an injected
/// I/O error) discards it on every rank alike, said by rank 0 with the rank and the
/// reason, in each mode; the next checkpoint is protected again (over a fresh set of
/// connections in the `sockets` mode), and a relaunch after node n2 is lost restarts
/// from it, rebuilt byte-exact.
#[test]
fn a_plugin_error_in_the_background_discards_the_dataset_on_every_rank() {
    for (name, mode, below) in MODES {
        let mut c = in_mode(cluster(), below);
        c.set("SCR_FAULT", "protect:1:2");
        let out = heat(&c, 17, mode);
        assert_eq!(out.code, 0, "{name}: {out}");
        assert!(
            out.stderr.contains(
                "complete_output ckpt.10: redundancy could not be applied, dataset discarded: on rank 1"
            ) && out.stderr.contains("injected failure (protect:1:2)")
                && out
                    .stderr
                    .contains("(in the background); the previous checkpoint stays the restart point"),
            "{name}: {out}"
        );
        if name == "sockets" {
            // (at init, and again for ckpt.15 after the failed protection)
            assert!(
                out.stderr.contains("are connected for the background protection")
                    && out.stderr.contains(
                        "the redundancy set of world rank 0 connected its 4 members again for the background protection"
                    ),
                "{name}: {out}"
            );
        }
        c.env.remove("SCR_FAULT");
        c.lose_node("n2");
        let out = heat(&c, 20, mode);
        assert_eq!(out.code, 0, "{name}: {out}");
        assert_eq!(
            out.line_after("restarted from "),
            Some("ckpt.15 at step 15"),
            "{name}: {out}"
        );
        assert_eq!(out.final_state(), reference(20), "{name}: {out}");
    }
}

/// With `sockets`, a rank whose set cannot connect at init (the fault suite's
/// `sockets:1:0`: rank 1 cannot listen) makes the whole job protect inside
/// complete_output, said by rank 0 naming rank 1 and by rank 1 with its reason; the
/// checkpoints are protected as usual and rebuild a lost node byte-exact.
#[test]
fn below_thread_multiple_a_set_that_cannot_connect_at_init_protects_in_the_foreground() {
    let mut c = in_mode(cluster(), Some("sockets"));
    c.set("SCR_FAULT", "sockets:1:0");
    let out = heat(&c, 12, &[]);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stderr.contains(
            "descriptor 0 (XOR): protect_below_multiple = sockets, but rank 1 could not connect the members of its redundancy set (its log says why): its scheme runs inside complete_output"
        ) && out.stderr.contains(
            "rank 1: listening for the set's connections: cannot listen on a TCP port: injected failure (sockets:1:0)"
        ),
        "{out}"
    );
    assert!(!out.stderr.contains("are connected"), "{out}");
    assert!(!out.stderr.contains("applied in the background"), "{out}");
    c.env.remove("SCR_FAULT");
    rebuilt_after_losing_n2(&c, &[]);
}

/// After a failed protection (rank 1's plugin error in ckpt.10's apply) the set connects
/// again at its next protection; a rank that cannot then (`sockets:1:3`, ckpt.15) makes
/// its set fall back to `calls`, said on rank 0 and with its reason on rank 1, and ckpt.15
/// is protected that way and rebuilds a lost node byte-exact.
#[test]
fn below_thread_multiple_a_set_that_cannot_connect_again_falls_back_to_the_calls() {
    let mut c = in_mode(cluster(), Some("sockets"));
    c.set("SCR_FAULT", "protect:1:2,sockets:1:3");
    let out = heat(&c, 17, &[]);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stderr.contains("injected failure (protect:1:2)")
            && out.stderr.contains(
                "descriptor 0 (XOR): the redundancy set of world rank 0 could not connect its members again for protect_below_multiple = sockets (listening for the set's connections: member 1 (world rank 1) could not (its log says why)); its background protection hands its MPI calls to the application's thread instead (calls)"
            )
            && out.stderr.contains(
                "rank 1: listening for the set's connections: cannot listen on a TCP port: injected failure (sockets:1:3)"
            )
            && out.stderr.contains("ckpt.15: its background protection took"),
        "{out}"
    );
    c.env.remove("SCR_FAULT");
    c.lose_node("n2");
    let out = heat(&c, 20, &[]);
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        out.line_after("restarted from "),
        Some("ckpt.15 at step 15"),
        "{out}"
    );
    assert_eq!(out.final_state(), reference(20), "{out}");
}

/// scr-heat (plain `MPI_Init`) with `protect_below_multiple = below`: init says `said`,
/// the checkpoints are protected in the background, and a lost node is rebuilt from
/// them.
fn below_thread_multiple_in_the_background(below: &str, said: &str) -> JobOutput {
    let c = in_mode(cluster(), Some(below));
    let out = heat(&c, 12, &[]);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stderr.contains(
            "protect_in_background = true (environment SCR_PROTECT_IN_BACKGROUND); MPI was initialised with thread level Single, not MPI_THREAD_MULTIPLE"
        ) && out.stderr.contains(said),
        "{out}"
    );
    assert!(
        !out.stderr.contains("could not connect its members"),
        "{out}"
    );
    for name in ["ckpt.5", "ckpt.10"] {
        assert!(
            out.stderr
                .contains(&format!("complete_output {name}: written"))
                && out
                    .stderr
                    .contains(&format!("{name}: its background protection took")),
            "{name}: {out}"
        );
    }
    rebuilt_after_losing_n2(&c, &[]);
    out
}

/// Below MPI_THREAD_MULTIPLE by default (`protect_below_multiple = sockets`) the scheme
/// runs in the background over the sets' own connections, and init says why it is not the
/// thread mode (a Rust program initialises MPI itself, not through libscr's MPI_Init).
#[test]
fn below_thread_multiple_by_default_the_sets_own_connections_carry_the_background_apply() {
    let c = cluster();
    let out = heat(&c, 12, &[]);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stderr.contains(
            "protect_in_background = true (environment SCR_PROTECT_IN_BACKGROUND); MPI was initialised with thread level Single, not MPI_THREAD_MULTIPLE: SCR_PROTECT_IN_BACKGROUND is set in the environment, but MPI was not initialised through libscr's MPI_Init"
        ) && out.stderr.contains(
            "and protect_below_multiple = sockets (default): its scheme runs in a background thread after complete_output, which calls no MPI"
        ) && out.stderr.contains(
            "descriptor 0 (XOR): the members of each redundancy set are connected for the background protection (protect_below_multiple = sockets)"
        ),
        "{out}"
    );
    assert!(
        out.stderr.contains("complete_output ckpt.10: written")
            && out.stderr.contains("applied in the background"),
        "{out}"
    );
    rebuilt_after_losing_n2(&c, &[]);
}

/// PARTNER and RS too (their exchanges, reductions and broadcasts over the sets' own
/// connections, by default below MPI_THREAD_MULTIPLE): after node n2 is lost, the
/// redundancy the background wrote rebuilds ckpt.10 byte-exact.
#[test]
fn partner_and_rs_applied_over_the_sets_own_connections_rebuild_a_lost_node() {
    for scheme in ["PARTNER", "RS"] {
        let mut c = cluster();
        c.set("SCR_COPY_TYPE", scheme);
        let out = heat(&c, 12, &[]);
        assert_eq!(out.code, 0, "{scheme}: {out}");
        assert!(
            out.stderr.contains(&format!(
                "descriptor 0 ({scheme}): the members of each redundancy set are connected for the background protection"
            )) && out
                .stderr
                .contains("ckpt.10: its background protection took"),
            "{scheme}: {out}"
        );
        c.lose_node("n2");
        let out = heat(&c, 20, &[]);
        assert_eq!(out.code, 0, "{scheme}: {out}");
        assert_eq!(
            out.line_after("restarted from "),
            Some("ckpt.10 at step 10"),
            "{scheme}: {out}"
        );
        assert!(
            out.stderr
                .contains(&format!("rebuilt the files of ranks [2] through {scheme}")),
            "{scheme}: not rebuilt: {out}"
        );
        assert_eq!(out.final_state(), reference(20), "{scheme}: {out}");
    }
}

/// With `protect_below_multiple = foreground` the descriptor protects inside
/// complete_output below MPI_THREAD_MULTIPLE, and init says why and what else it can do.
#[test]
fn below_thread_multiple_in_the_foreground_the_scheme_runs_in_complete_output_and_init_says_why() {
    let c = in_mode(cluster(), Some("foreground"));
    let out = heat(&c, 12, &[]);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stderr.contains(
            "protect_in_background = true (environment SCR_PROTECT_IN_BACKGROUND), but MPI was initialised with thread level Single, not MPI_THREAD_MULTIPLE: SCR_PROTECT_IN_BACKGROUND is set in the environment, but MPI was not initialised through libscr's MPI_Init"
        ) && out.stderr.contains(
            "its scheme runs inside complete_output (protect_below_multiple = foreground, environment SCR_PROTECT_BELOW_MULTIPLE; `sockets` runs it in the background over the library's own connections)"
        ),
        "{out}"
    );
    assert!(!out.stderr.contains("applied in the background"), "{out}");
    rebuilt_after_losing_n2(&c, &[]);
}

/// Online recovery (Open MPI 5 with ULFM) with the schemes' work in the background, in
/// each mode: rank 2 is killed after step 17 and its node's storage lost; the spare takes
/// its place inside the same mpiexec, the node's files are rebuilt from the XOR data the
/// background wrote, and the job ends in the uninterrupted run's state. The restart
/// point is the newest checkpoint kept before the kill: ckpt.15 when one of the loop's
/// calls settled its protection by then, else ckpt.10 (a protection still pending is not
/// a checkpoint).
#[test]
fn online_recovery_rebuilds_from_redundancy_applied_in_the_background() {
    for (name, mode, below) in MODES {
        let mut c = in_mode(Cluster::new(), below);
        c.set("SCR_COPY_TYPE", "XOR")
            .set("SCR_PROTECT_IN_BACKGROUND", "1")
            .set("SCR_DEBUG", "1");
        let nodes = ["n0", "n0", "n1", "n1", "n2", "n2", "n3", "n3", "n4"];
        // rank 2's node loses its storage with it
        let wipe = [c.path("cache").join("n1"), c.path("cntl").join("n1")]
            .map(|p| p.display().to_string())
            .join(",");
        let mut args = vec![
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
            "--sleep-ms",
            "20",
            "--wipe-before-kill",
            &wipe,
        ];
        args.extend_from_slice(mode);
        let out = c.run_ulfm(&nodes, "scr-heat", &args);
        assert_eq!(out.code, 0, "{name}: {out}");
        assert!(
            out.stderr
                .contains("its scheme runs in a background thread after complete_output"),
            "{name}: {out}"
        );
        assert_eq!(out.line_after("recoveries "), Some("1"), "{name}: {out}");
        // the restart point is the newest checkpoint kept (its protection settled, the
        // event logged) before the loss
        let log = std::fs::read_to_string(c.prefix().join(".scr/events.jsonl")).unwrap_or_default();
        let before_loss = log
            .split("\"event\":\"recovery\"")
            .next()
            .unwrap_or_default();
        let kept = ["ckpt.15", "ckpt.10"]
            .into_iter()
            .find(|k| {
                before_loss.lines().any(|l| {
                    l.contains("\"event\":\"checkpoint\"")
                        && l.contains(&format!("\"name\":\"{k}\""))
                })
            })
            .unwrap_or_else(|| panic!("{name}: neither ckpt.15 nor ckpt.10 kept:\n{log}"));
        let step = kept.trim_start_matches("ckpt.");
        assert_eq!(
            out.line_after("restarted from "),
            Some(format!("{kept} at step {step}").as_str()),
            "{name}: {out}"
        );
        // the spare on n4 held none of rank 2's files: XOR rebuilt them there
        assert!(
            log.lines().any(|l| l.contains("\"event\":\"rebuild\"")
                && l.contains(&format!("\"name\":\"{kept}\""))),
            "{name}: no rebuild of {kept}:\n{log}\n{out}"
        );
        assert_eq!(
            out.final_state(),
            scr_e2e::reference_state(8, 40, None),
            "{name}: {out}"
        );
    }
}

/// While every rank's background thread is held (its protection running), need_checkpoint
/// costs exactly what it costs with nothing pending: rank 0's one-byte broadcast, no
/// collective of the protection's own (it asks only once rank 0's thread has returned).
/// Once every thread has returned, one need_checkpoint settles it and ckpt.1 is offered.
#[test]
fn need_checkpoint_pays_no_collective_of_its_own_while_a_protection_runs() {
    let c = cluster();
    let gate = c.path("gate");
    let mut c = c;
    c.set("SCR_FAULT", &format!("hold-protect:{}", gate.display()));
    let out = c.run(FOUR_NODES, "scr-protect-probe", &[]);
    assert_eq!(out.code, 0, "{out}");
    for r in 0..4 {
        let text = std::fs::read_to_string(c.prefix().join(format!("protect_{r}.txt")))
            .unwrap_or_else(|e| panic!("rank {r} wrote no report: {e}\n{out}"));
        let rep = scr_e2e::comm_report::Report::parse(&text);
        assert_eq!(rep.lines[0], "world size 4", "rank {r}: {out}");
        assert!(rep.has("kept true"), "rank {r}: {:?}", rep.lines);
        assert!(rep.has("protecting true"), "rank {r}: {:?}", rep.lines);
        assert!(
            rep.has("held have_restart None"),
            "rank {r}: {:?}",
            rep.lines
        );
        let idle = rep.get("idle", "need_checkpoint");
        assert_eq!(idle[..2], [1, 1], "rank {r}: one broadcast");
        assert_eq!(rep.names("held"), ["need_checkpoint"], "rank {r}");
        assert_eq!(rep.get("held", "need_checkpoint"), idle, "rank {r}");
        assert!(
            rep.has("settled after 1 calls"),
            "rank {r}: {:?}",
            rep.lines
        );
        assert!(
            rep.has("have_restart Some(\"ckpt.1\")"),
            "rank {r}: {:?}",
            rep.lines
        );
    }
}
