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

/// 8 ranks on nodes n0..n3 and a spare on `spare_node`: rank 2 killed after step 17 with
/// its node n1's directories; the job must recover once, rebuild ckpt.15 from cache and
/// end in the uninterrupted run's state.
fn eight_ranks_lose_rank_2_and_its_node(c: &Cluster, spare_node: &str) -> JobOutput {
    let nodes = ["n0", "n0", "n1", "n1", "n2", "n2", "n3", "n3", spare_node];
    let wipe = node_dirs(c, &["n1"]);
    let out = heat_losing(c, &nodes, 1, "2", false, &wipe);
    assert_recovered(
        c,
        &out,
        &reference_state(8, 40, None),
        "ckpt.15",
        "lost rank(s) [2], spares took [2], 8 rank(s) now",
        true,
    );
    out
}

#[test]
fn xor_eight_ranks_and_a_spare_rebuild_a_killed_ranks_node_from_cache_in_the_same_mpiexec() {
    let mut c = Cluster::new();
    c.set("SCR_COPY_TYPE", "XOR");
    // 8 ranks on 4 nodes, the spare on a fifth
    eight_ranks_lose_rank_2_and_its_node(&c, "n4");
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

/// 8 ranks and a spare on 4 nodes, RS with two losses per set: the lost rank's node
/// loses both of its ranks' files (rank 3 lives on), and both are rebuilt, rank 2's onto
/// the spare's node, which then runs three ranks: the set the third forms alone keeps
/// what it can (no checksum) rather than fail the job, and the library says so.
#[test]
fn rs_eight_ranks_and_a_spare_on_four_nodes_rebuild_a_killed_ranks_node_from_cache() {
    let mut c = Cluster::new();
    c.set("SCR_COPY_TYPE", "RS").set("SCR_SET_FAILURES", "2");
    let out = eight_ranks_lose_rank_2_and_its_node(&c, "n3");
    // n3 now runs ranks 2, 6 and 7: rank 7's set has no other node to span, keeps no
    // checksum, and the library says so once per init after the recovery (ckpt.20 to
    // ckpt.40 are written with it)
    let said = out.logged(
        Some(0),
        "warning",
        "descriptor 0 (RS): the sets of 1 rank(s) (rank 7 the first) tolerate 0 lost member(s) where a full set of set_size = 8 tolerates 2",
    );
    assert_eq!(said.len(), 1, "{out}");
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

/// A lost process whose node lives on is replaced by the spare on that node, not by the
/// lowest spare: the rank's files are still in the node's cache, so the restart reads
/// them where they are and nothing is rebuilt.
#[test]
fn a_spare_on_the_lost_processs_own_node_takes_its_rank_and_nothing_is_rebuilt() {
    let reference = reference_state(4, 40, None);
    let mut c = Cluster::new();
    c.set("SCR_COPY_TYPE", "XOR");
    // spares: process 4 on n2 (the lowest) and process 5 on n1, rank 2's node
    let nodes = ["n0", "n0", "n1", "n1", "n2", "n1"];
    let out = heat_losing(&c, &nodes, 2, "2", false, "");
    assert_recovered(
        &c,
        &out,
        &reference,
        "ckpt.15",
        "lost rank(s) [2], spares took [2], 4 rank(s) now",
        false,
    );
    let rebuilt = events(&c, "rebuild");
    assert!(rebuilt.is_empty(), "{rebuilt:?}\n{out}");
    // the spare on n2 stayed one: it says so at the end
    assert!(
        out.stderr
            .contains("scr-heat: process 4 stayed a spare through 1 recoveries"),
        "{out}"
    );
}

/// The Fortran binding (`SCR_RUN_RESILIENT`) through the same loss: the C program calls
/// it as gfortran does (the wheel's Open MPI 5 has no Fortran library for a Fortran
/// program to run on; tests/tests/fortran.rs builds and runs a real one under Debian's
/// MPI), its body converting the Fortran handle and the ATTEMPT array back.
#[test]
fn the_fortran_binding_recovers_online_too() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let exe = build_against_libscr("mpicc", &root.join("tests/c/resilient.c"), dir.path());
    let nodes = ["n0", "n0", "n1", "n1", "n2"];
    let reference = Cluster::new().run_path(&nodes, &exe, &["1", "40", "-1", "-1", "fortran"]);
    let expected = scr_e2e::ulfm::uninterrupted_final(&reference);
    let mut c = Cluster::new();
    c.set("SCR_COPY_TYPE", "XOR");
    let out = c.run_ulfm_path(&nodes, &exe, &["1", "40", "17", "2", "fortran"]);
    scr_e2e::ulfm::assert_recovered_once(&out, expected);
}

/// On the multi-host bed (`scripts/hosts.sh`: hosts told apart by `gethostname`, each
/// with storage of its own), 4 hosts × 2 processes, host3's two the spares: once host1
/// caches ckpt.10, every process of the application in it is SIGKILLed and its storage
/// discarded. The job goes on in the same `mpiexec`: host3's spares take ranks 2 and 3,
/// their files are rebuilt there through XOR from hosts 0 and 2, and the job ends in the
/// uninterrupted run's state without reading the prefix.
///
/// Host1's Open MPI daemon is spared: PRRTE 3.0, Open MPI 5.0's launcher, ends the whole
/// job when it loses a daemon ("PRTE has lost communication with a remote daemon ... We
/// cannot recover from this failure"), so a host lost with its daemon is recovered from
/// by `scr run`'s relaunch (tests/tests/hosts.rs), not online.
#[test]
fn on_the_multi_host_bed_a_hosts_lost_processes_are_rebuilt_on_the_spare_host() {
    let Some(bed) = scr_e2e::TestBed::up_or_skip(4) else {
        return;
    };
    let mut c = bed.cluster();
    // nothing flushed: whatever the restart reads comes from the hosts' caches
    c.set("SCR_COPY_TYPE", "XOR").set("SCR_FLUSH", "0");
    let hosts = [
        "host0", "host0", "host1", "host1", "host2", "host2", "host3", "host3",
    ];
    let args = [
        "--steps",
        "40",
        "--every",
        "5",
        "--spares",
        "2",
        "--sleep-ms",
        "150",
    ];
    let exe = scr_e2e::binary("scr-heat");
    let mut child = c
        .ulfm_command(&hosts, &exe, &args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("mpiexec starts");
    let cached = c
        .cache_dir("host1")
        .join("scr.dataset.2/ckpt.10/rank_3.ckpt");
    let started = std::time::Instant::now();
    while !cached.exists() {
        if child.try_wait().expect("the job's status").is_some() {
            panic!(
                "the job ended before host1 cached ckpt.10\n{}",
                scr_e2e::output_of_child(child)
            );
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(90),
            "host1 never cached ckpt.10"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // the host's application processes, seen from inside it (its own PID namespace)
    let killed = bed.on("host1", "pkill -KILL -x scr-heat");
    assert_eq!(killed.code, 0, "no scr-heat killed in host1\n{killed}");
    for e in std::fs::read_dir(bed.store_dir("host1")).unwrap().flatten() {
        std::fs::remove_dir_all(e.path()).unwrap();
    }
    let out = scr_e2e::output_of_child(child);
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(out.line_after("ranks "), Some("8"), "{out}");
    assert_eq!(out.final_state(), reference_state(6, 40, None), "{out}");
    assert_eq!(out.line_after("recoveries "), Some("1"), "{out}");
    assert!(
        out.line_after("recovered (attempt 1): ").is_some_and(
            |l| l.starts_with("lost rank(s) [2, 3], spares took [2, 3], 6 rank(s) now")
        ),
        "{out}"
    );
    // the restart came from the caches, rebuilt by XOR, with nothing fetched
    let restarted = out
        .line_after("restarted from ")
        .unwrap_or_else(|| panic!("no restart\n{out}"));
    let ckpt = restarted.split(' ').next().unwrap();
    assert!(
        ["ckpt.5", "ckpt.10", "ckpt.15"].contains(&ckpt),
        "{restarted}\n{out}"
    );
    assert!(
        events(&c, "rebuild")
            .iter()
            .any(|e| e.contains(&format!("\"name\":\"{ckpt}\""))),
        "no rebuild of {ckpt}\n{out}"
    );
    assert!(events(&c, "fetch").is_empty(), "{out}");
    assert!(index_entries(&c.prefix()).is_empty(), "{out}");
    // ranks 2 and 3 ended on host3, the spares' host; host1 was never written again
    for rank in [2, 3] {
        let f = c
            .cache_dir("host3")
            .join(format!("scr.dataset.8/ckpt.40/rank_{rank}.ckpt"));
        assert!(f.is_file(), "{} is missing\n{out}", f.display());
    }
    assert_eq!(
        std::fs::read_dir(bed.store_dir("host1")).unwrap().count(),
        0,
        "{out}"
    );
}
