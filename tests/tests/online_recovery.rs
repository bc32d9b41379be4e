//! Online recovery under Open MPI 5 with ULFM (`mpiexec --with-ft ulfm`, installed by
//! `scripts/setup.sh`): `scr-heat --spares N` loses processes (SIGKILL, their node's cache
//! and control directories removed first) and goes on inside the same `mpiexec`. Each
//! test checks the job's final state against an uninterrupted run's, the recovery the
//! example reports, and from the event log that the restart came from the cache,
//! rebuilt by the scheme (a rebuild event for it, no fetch).

use scr_e2e::{build_against_libscr, index_entries, reference_state, Cluster, JobOutput};

/// The events of `kind` in the cluster's event log, as JSON lines.
fn events(c: &Cluster, kind: &str) -> Vec<String> {
    let log = std::fs::read_to_string(c.prefix().join(".scr/events.jsonl")).unwrap_or_default();
    log.lines()
        .filter(|l| l.contains(&format!("\"event\":\"{kind}\"")))
        .map(str::to_string)
        .collect()
}

/// The directories a node's loss removes, as `--wipe-before-kill` takes them.
fn node_dirs(c: &Cluster, nodes: &[&str]) -> String {
    nodes
        .iter()
        .flat_map(|n| [c.path("cache").join(n), c.path("cntl").join(n)])
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// `scr-heat` under ULFM on `nodes`: 40 steps, a checkpoint every 5, the last `spares`
/// processes spares, rank(s) `kill` killed after step 17 in the first run (the
/// directories `wipe` names, comma-separated, removed first), `--shrink` when `shrink`.
fn heat_losing(
    c: &Cluster,
    nodes: &[&str],
    spares: u32,
    kill: &str,
    shrink: bool,
    wipe: &str,
) -> JobOutput {
    let spares = spares.to_string();
    let mut args = vec![
        "--steps",
        "40",
        "--every",
        "5",
        "--spares",
        &spares,
        "--kill-at",
        "17",
        "--kill-rank",
        kill,
    ];
    if !wipe.is_empty() {
        args.extend(["--wipe-before-kill", wipe]);
    }
    if shrink {
        args.push("--shrink");
    }
    c.run_ulfm(nodes, "scr-heat", &args)
}

/// What every recovered run must show: exit 0, the reference's final state, one
/// recovery reported, a restart from `ckpt`, which the prefix never held, without a
/// fetch; with `rebuilt_by_init` (the same number of ranks), init's rebuild of it.
fn assert_recovered(
    c: &Cluster,
    out: &JobOutput,
    reference: &str,
    ckpt: &str,
    lost: &str,
    rebuilt_by_init: bool,
) {
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(out.final_state(), reference, "{out}");
    assert_eq!(out.line_after("recoveries "), Some("1"), "{out}");
    let recovered = out
        .line_after("recovered (attempt 1): ")
        .unwrap_or_else(|| panic!("no recovery reported\n{out}"));
    assert!(recovered.starts_with(lost), "{recovered}\n{out}");
    assert_eq!(
        out.line_after("restarted from "),
        Some(format!("{ckpt} at step {}", &ckpt[5..]).as_str()),
        "{out}"
    );
    // the prefix never held the checkpoint (flushed every 10th): it came from the cache
    let in_prefix = index_entries(&c.prefix());
    assert!(
        in_prefix.iter().all(|(name, _, _)| name != ckpt),
        "{ckpt} is in the prefix's index: {in_prefix:?}"
    );
    if rebuilt_by_init {
        let rebuilt = events(c, "rebuild");
        assert!(
            rebuilt
                .iter()
                .any(|e| e.contains(&format!("\"name\":\"{ckpt}\""))),
            "no rebuild of {ckpt}: {rebuilt:?}\n{out}"
        );
    }
    let recovery = events(c, "recovery");
    assert_eq!(recovery.len(), 1, "{recovery:?}\n{out}");
    let fetched = events(c, "fetch");
    assert!(
        fetched.is_empty(),
        "the restart read from the prefix: {fetched:?}\n{out}"
    );
}

#[test]
fn xor_eight_ranks_and_a_spare_rebuild_a_killed_ranks_node_from_cache_in_the_same_mpiexec() {
    let reference = reference_state(8, 40, None);
    let mut c = Cluster::new();
    c.set("SCR_COPY_TYPE", "XOR");
    // 8 ranks on 4 nodes, the spare on a fifth
    let nodes = ["n0", "n0", "n1", "n1", "n2", "n2", "n3", "n3", "n4"];
    let wipe = node_dirs(&c, &["n1"]);
    let out = heat_losing(&c, &nodes, 1, "2", false, &wipe);
    assert_recovered(
        &c,
        &out,
        &reference,
        "ckpt.15",
        "lost rank(s) [2], spares took [2], 8 rank(s) now",
        true,
    );
    // the event log records the recovery, and `scr log` counts it
    let recovery = &events(&c, "recovery")[0];
    assert!(
        recovery.contains("\"lost\":[2],\"replaced\":[2],\"ranks\":8,"),
        "{recovery}"
    );
    let log = c.scr(&["log"]).output().expect("scr log runs");
    let log = String::from_utf8_lossy(&log.stdout);
    assert!(log.contains("online recoveries: 1,"), "{log}");
}

#[test]
fn rs_survives_two_ranks_of_each_set_lost_at_once_with_two_spares() {
    let reference = reference_state(8, 40, None);
    let mut c = Cluster::new();
    c.set("SCR_COPY_TYPE", "RS")
        .set("SCR_SET_SIZE", "4")
        .set("SCR_SET_FAILURES", "2");
    // two nodes lost at once: each set of 4 (one rank per node) loses two members
    let nodes = ["n0", "n0", "n1", "n1", "n2", "n2", "n3", "n3", "n4", "n4"];
    let wipe = node_dirs(&c, &["n0", "n1"]);
    let out = heat_losing(&c, &nodes, 2, "0,2", false, &wipe);
    assert_recovered(
        &c,
        &out,
        &reference,
        "ckpt.15",
        "lost rank(s) [0, 2], spares took [0, 2], 8 rank(s) now",
        true,
    );
}

#[test]
fn with_no_spare_left_the_job_shrinks_and_ends_in_the_same_state() {
    let reference = reference_state(4, 40, None);
    let mut c = Cluster::new();
    c.set("SCR_COPY_TYPE", "XOR");
    let nodes = ["n0", "n0", "n1", "n1"];
    let wipe = node_dirs(&c, &["n1"]);
    let out = heat_losing(&c, &nodes, 0, "2", true, &wipe);
    assert_recovered(
        &c,
        &out,
        &reference,
        "ckpt.15",
        "lost rank(s) [2], spares took [], 3 rank(s) now",
        false,
    );
}

#[test]
fn without_ulfm_the_spares_wait_and_the_library_says_once_why_recovery_is_off() {
    let reference = reference_state(4, 20, None);
    let c = Cluster::new();
    // Debian's Open MPI 4.1: no MPIX_Comm_revoke
    let out = c.run(
        &["n0", "n0", "n1", "n1", "n2"],
        "scr-heat",
        &["--steps", "20", "--every", "5", "--spares", "1"],
    );
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(out.final_state(), reference, "{out}");
    let off = out.logged(None, "warning", "online recovery is off: ");
    assert_eq!(off.len(), 1, "{out}");
    assert!(off[0].contains("has no MPIX_Comm_revoke"), "{out}");
}

#[test]
fn a_second_loss_while_the_first_is_rebuilt_is_recovered_from_too() {
    let reference = reference_state(8, 40, None);
    let mut c = Cluster::new();
    c.set("SCR_COPY_TYPE", "XOR");
    // rank 5 dies inside the rebuild that the first recovery's init runs (its set lost
    // rank 3 with node n1), once: the spare that takes its place rebuilds unharmed
    let marker = c.path("rebuild-killed");
    c.set("SCR_FAULT", &format!("rebuild:5:once:{}", marker.display()));
    let nodes = ["n0", "n0", "n1", "n1", "n2", "n2", "n3", "n3", "n4", "n4"];
    let wipe = node_dirs(&c, &["n1"]);
    let out = heat_losing(&c, &nodes, 2, "2", false, &wipe);
    assert!(marker.exists(), "the hook never fired\n{out}");
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(out.final_state(), reference, "{out}");
    assert_eq!(out.line_after("recoveries "), Some("2"), "{out}");
    assert!(
        out.line_after("recovered (attempt 2): ")
            .is_some_and(|l| l.starts_with("lost rank(s) [5], spares took [5], 8 rank(s) now")),
        "{out}"
    );
    assert_eq!(
        out.line_after("restarted from "),
        Some("ckpt.15 at step 15"),
        "{out}"
    );
    assert!(events(&c, "fetch").is_empty(), "{out}");
    assert_eq!(events(&c, "recovery").len(), 2, "{out}");
}

#[test]
fn with_no_spare_and_no_shrink_every_process_ends_with_the_same_reason() {
    let mut c = Cluster::new();
    c.set("SCR_COPY_TYPE", "XOR");
    let nodes = ["n0", "n0", "n1", "n1"];
    let out = heat_losing(&c, &nodes, 0, "2", false, "");
    assert_ne!(out.code, 0, "{out}");
    assert_ne!(out.code, 124, "the job hung\n{out}");
    // every survivor (3 of 4) says it, in the library's words, before any of them ends
    let why = "lost rank(s) [2] with 0 spare(s) left, and the application does not go on with fewer ranks";
    let said: Vec<&str> = out
        .logged(None, "error", why)
        .into_iter()
        .filter(|l| l.starts_with("scr-rs["))
        .collect();
    assert_eq!(said.len(), 3, "{said:?}\n{out}");
    assert!(out.line_after("final step ").is_none(), "{out}");
}

#[test]
fn a_c_application_recovers_online_through_scr_run_resilient() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let exe = build_against_libscr("mpicc", &root.join("tests/c/resilient.c"), dir.path());
    // the same job uninterrupted, under Debian's MPI (no ULFM: the spare waits)
    let nodes = ["n0", "n0", "n1", "n1", "n2"];
    let reference = Cluster::new().run_path(&nodes, &exe, &["1", "40"]);
    let expected = scr_e2e::ulfm::uninterrupted_final(&reference);
    // rank 2 killed after step 17, under MPI with ULFM: a spare takes its place
    let mut c = Cluster::new();
    c.set("SCR_COPY_TYPE", "XOR");
    let out = c.run_ulfm_path(&nodes, &exe, &["1", "40", "17", "2"]);
    scr_e2e::ulfm::assert_recovered_once(&out, expected);
}
