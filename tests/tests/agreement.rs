//! Failures on some ranks only (issue: collective agreement): every rank returns an
//! error, the same one, within the job's time — none waits in a collective step the
//! others left — and the ranks stay in step (or refuse further calls alike when their
//! state may have diverged).
//!
//! The cases that check the runtime's agreement alone (a commit failing on one rank, a
//! call leaving the state uncertain, calls misused on some ranks) run in-process, on
//! threads acting as ranks, in `scr-host/src/runtime/tests/`; the ones here need
//! separate processes (environments, plugin directories and vendor libraries per node).

use scr_e2e::{Cluster, JobOutput};

const FOUR_NODES: &[&str] = &["n0", "n1", "n2", "n3"];

fn probe(c: &Cluster, mode: &str) -> (JobOutput, Vec<String>) {
    let out = c.run(FOUR_NODES, "scr-probe", &[mode]);
    assert_eq!(out.code, 0, "every rank returned\n{out}");
    (out, c.probe_reports(4))
}

/// A directory holding the stand-in libbbAPI, for LD_LIBRARY_PATH.
fn stand_in_bbapi(c: &Cluster) -> std::path::PathBuf {
    let vendor = c.path("vendor");
    std::fs::create_dir(&vendor).unwrap();
    std::os::unix::fs::symlink(
        scr_e2e::target_dir().join("libscr_fixture_bbapi.so"),
        vendor.join("libbbAPI.so"),
    )
    .unwrap();
    vendor
}

/// The world size the job ran with, from the ranks' reports (a wrong mpiexec runs N
/// singletons, each its own rank 0).
fn assert_four_ranks(c: &Cluster) {
    for r in 0..4 {
        assert!(
            c.prefix().join(format!("probe_{r}.txt")).is_file(),
            "no report from rank {r}: not a 4-rank job"
        );
    }
}

/// A configuration that differs between ranks (an SCR_* variable set on one node only)
/// is an error on every rank at init, naming the key and both values — instead of ranks
/// that disagree on stores and schemes failing later without a word.
#[test]
fn an_environment_that_differs_between_ranks_is_an_init_error_on_every_rank() {
    let c = Cluster::new();
    let out = c.run_wrapped(
        FOUR_NODES,
        &[
            "sh",
            "-c",
            "[ \"$OMPI_COMM_WORLD_RANK\" = 2 ] && export SCR_CACHE_SIZE=3; exec \"$0\" \"$@\"",
        ],
        "scr-probe",
        &["misuse"],
    );
    assert_eq!(out.code, 0, "every rank returned\n{out}");
    assert_four_ranks(&c);
    for r in 0..4 {
        let report = std::fs::read_to_string(c.prefix().join(format!("probe_{r}.txt"))).unwrap();
        assert!(report.starts_with("init error: "), "rank {r}: {report}");
        assert!(
            report.contains(
                "the effective configuration differs between ranks: rank 0 has `cache_size = 2` where rank 2 has `cache_size = 3`"
            ),
            "rank {r}: {report}"
        );
    }
}

/// A vendor library present on some nodes only (libbbAPI missing on rank 2's node, the
/// flush type being bbapi): init fails on every rank, naming the library and the rank,
/// instead of the other ranks waiting in init.
#[test]
fn a_vendor_library_missing_on_one_node_is_an_init_error_on_every_rank() {
    let mut c = Cluster::new();
    let vendor = stand_in_bbapi(&c);
    c.set("SCR_FLUSH_TYPE", "bbapi");
    let script = format!(
        "[ \"$OMPI_COMM_WORLD_RANK\" = 2 ] || export LD_LIBRARY_PATH={}; exec \"$0\" \"$@\"",
        vendor.display()
    );
    let out = c.run_wrapped(
        FOUR_NODES,
        &["sh", "-c", &script],
        "scr-probe",
        &["candidate"],
    );
    assert_eq!(out.code, 0, "every rank returned\n{out}");
    assert_four_ranks(&c);
    for r in 0..4 {
        let report = std::fs::read_to_string(c.prefix().join(format!("probe_{r}.txt"))).unwrap();
        assert!(report.starts_with("init error: "), "rank {r}: {report}");
        assert!(report.contains("libbbAPI.so"), "rank {r}: {report}");
        if r != 2 {
            assert!(
                report.contains("another rank failed, this rank stops with it: rank 2: "),
                "rank {r}: {report}"
            );
        }
    }
    // with the library on every node the same job starts
    let all = format!(
        "export LD_LIBRARY_PATH={}; exec \"$0\" \"$@\"",
        vendor.display()
    );
    let out = c.run_wrapped(FOUR_NODES, &["sh", "-c", &all], "scr-probe", &["candidate"]);
    assert_eq!(out.code, 0, "{out}");
    let report = std::fs::read_to_string(c.prefix().join("probe_2.txt")).unwrap();
    assert_eq!(report, "candidate None\n", "{out}");
}

/// A plugin directory other users can write to (here 0777, holding a library someone
/// dropped there): the library is never opened — not one rank maps it, so its
/// constructors never ran — and the job starts with the trusted plugins.
#[test]
fn a_library_in_a_plugin_directory_others_can_write_is_never_opened() {
    use std::os::unix::fs::PermissionsExt;
    let mut c = Cluster::new();
    let planted = c.path("planted");
    std::fs::create_dir(&planted).unwrap();
    std::fs::copy(
        scr_e2e::target_dir().join("libscr_fixture_liar.so"),
        planted.join("libplanted_by_someone.so"),
    )
    .unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o777)).unwrap();
    let system = c.path("system.toml");
    std::fs::write(
        &system,
        format!("[plugins]\ndirectories = [\"{}\"]\n", planted.display()),
    )
    .unwrap();
    c.set("SCR_SYSTEM_CONFIG", &system.display().to_string())
        .set("PROBE_MAPS", "libplanted_by_someone");
    let (out, reports) = probe(&c, "maps");
    assert_eq!(out.code, 0, "{out}");
    assert_four_ranks(&c);
    for (r, report) in reports.iter().enumerate() {
        assert_eq!(report, "mapped false\ncandidate None\n", "rank {r}\n{out}");
    }
    // the control: the same library in a private directory is opened
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o700)).unwrap();
    let (out, reports) = probe(&c, "maps");
    assert_eq!(out.code, 0, "{out}");
    assert!(
        reports[0].starts_with("mapped true"),
        "{}\n{out}",
        reports[0]
    );
}

/// Eviction is decided together. A background flush of ckpt.1 still running on rank 1
/// (its vendor transfer is slow there) while rank 0's finished: when ckpt.3 needs room,
/// ckpt.1 may not go on rank 1, so it goes nowhere — instead of leaving ckpt.1 in one
/// node's cache and not the other's. The job is killed right after, to look at the
/// caches as eviction left them.
#[test]
fn eviction_leaves_no_dataset_on_some_ranks_only() {
    let mut c = Cluster::new();
    let vendor = stand_in_bbapi(&c);
    c.set("SCR_FLUSH_TYPE", "bbapi")
        .set("SCR_FLUSH", "1")
        .set("SCR_FLUSH_ASYNC", "1")
        .set("SCR_CACHE_SIZE", "2");
    let script = format!(
        "export LD_LIBRARY_PATH={}; [ \"$OMPI_COMM_WORLD_RANK\" = 1 ] && export FAKE_BBAPI_DELAY_MS=4000; exec \"$0\" \"$@\"",
        vendor.display()
    );
    let out = c.run_wrapped(
        &["n0", "n1"],
        &["sh", "-c", &script],
        "scr-heat",
        &[
            "--steps",
            "6",
            "--every",
            "1",
            "--cells",
            "64",
            "--sleep-ms",
            "300",
            "--kill-at",
            "4",
            "--kill-rank",
            "0",
        ],
    );
    assert_ne!(out.code, 0, "the job was to be killed\n{out}");
    let held = |node: &str| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(c.cache_dir(node))
            .map(|d| {
                d.flatten()
                    .filter(|e| std::fs::read_dir(e.path()).is_ok_and(|mut f| f.next().is_some()))
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    };
    let (n0, n1) = (held("n0"), held("n1"));

    assert_eq!(n0, n1, "the caches differ after eviction\n{out}");
    // (ckpt.1 normally stays, rank 1 still flushing it; on a machine so loaded that the
    // 4 s flush ended first it is gone from both — never from one only)
    assert!(
        n0.contains(&"scr.dataset.3".to_string()),
        "ckpt.3 kept: {n0:?}\n{out}"
    );
}

/// A store holds its count, the dataset being written included, also while background
/// flushes run: when the dataset that must leave is still being flushed (a slow vendor
/// transfer), the next checkpoint waits for that flush, says so once on rank 0, and then
/// evicts it — rather than keep count + 1 datasets. Every checkpoint still reaches the
/// prefix, and the job ends in an uninterrupted run's state.
#[test]
fn a_full_store_waits_for_the_flush_of_the_dataset_it_must_evict() {
    let mut c = Cluster::new();
    let vendor = stand_in_bbapi(&c);
    c.set("SCR_FLUSH_TYPE", "bbapi")
        .set("SCR_FLUSH", "1")
        .set("SCR_FLUSH_ASYNC", "1")
        .set("SCR_CACHE_SIZE", "2");
    let script = format!(
        "export LD_LIBRARY_PATH={}; export FAKE_BBAPI_DELAY_MS=1500; exec \"$0\" \"$@\"",
        vendor.display()
    );
    let out = c.run_wrapped(
        &["n0", "n1"],
        &["sh", "-c", &script],
        "scr-heat",
        &["--steps", "4", "--every", "1", "--cells", "64"],
    );
    assert_eq!(out.code, 0, "{out}");
    let waited = out.logged(
        Some(0),
        "warning",
        "holds its count (2) and the dataset that must leave it, ckpt.1, is being flushed: waiting for that flush",
    );
    assert_eq!(waited.len(), 1, "{out}");
    assert!(out
        .logged(Some(1), "warning", "waiting for that flush")
        .is_empty());
    // the caches hold the newest two, on both nodes alike
    for node in ["n0", "n1"] {
        let mut held: Vec<String> = std::fs::read_dir(c.cache_dir(node))
            .unwrap()
            .flatten()
            .filter(|e| std::fs::read_dir(e.path()).is_ok_and(|mut f| f.next().is_some()))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        held.sort();
        assert_eq!(held, ["scr.dataset.3", "scr.dataset.4"], "{node}\n{out}");
    }
    let flushed: Vec<String> = scr_e2e::index_entries(&c.prefix())
        .into_iter()
        .filter(|(_, complete, _)| *complete)
        .map(|(name, _, _)| name)
        .collect();
    assert_eq!(flushed, ["ckpt.1", "ckpt.2", "ckpt.3", "ckpt.4"], "{out}");
    assert_eq!(
        out.final_state(),
        scr_e2e::reference_state(2, 4, Some(64)),
        "{out}"
    );
}
