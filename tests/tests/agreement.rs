//! Failures on some ranks only (issue: collective agreement): every rank returns an
//! error, the same one, within the job's time — none waits in a collective step the
//! others left — and the ranks stay in step (or refuse further calls alike when their
//! state may have diverged).

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

/// A rank that cannot record a dataset as complete after every rank decided to keep it
/// (here: an injected control-directory failure on rank 2) makes every rank discard it
/// with the same error; the previous checkpoint stays the restart candidate everywhere
/// and the next checkpoint works.
#[test]
fn a_commit_failing_on_one_rank_discards_the_dataset_everywhere() {
    let mut c = Cluster::new();
    c.set("SCR_FAULT", "commit:2:2")
        .set("SCR_COPY_TYPE", "XOR")
        .set("SCR_SET_SIZE", "4");
    let (out, reports) = probe(&c, "commit-one");
    assert_eq!(out.code, 0, "{out}");
    assert_four_ranks(&c);
    for (r, report) in reports.iter().enumerate() {
        assert_eq!(
            report, &reports[0],
            "rank {r} returned something else\n{out}"
        );
    }
    let lines: Vec<&str> = reports[0].lines().collect();
    assert_eq!(lines[0], "ckpt.1 kept true", "{}", reports[0]);
    assert_eq!(lines[1], "candidate Some(\"ckpt.1\")");
    assert!(
        lines[2].starts_with(
            "ckpt.2 error: complete_output ckpt.2: the dataset could not be recorded as complete on rank 2: "
        ) && lines[2].contains("injected failure (commit:2:2)")
            && lines[2].contains("discarded on every rank"),
        "{}",
        lines[2]
    );
    assert_eq!(lines[3], "candidate Some(\"ckpt.1\")");
    assert_eq!(lines[4], "ckpt.3 kept true");
    assert_eq!(lines[5], "candidate Some(\"ckpt.3\")");
    // nothing of ckpt.2 stays in any cache (dataset 2's directory holds no file)
    for node in FOUR_NODES {
        let dir = c.cache_dir(node).join("scr.dataset.2");
        let left: Vec<_> = std::fs::read_dir(&dir)
            .map(|d| d.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{}: {left:?}", dir.display());
    }
    // a restart finds ckpt.3 on every rank
    let mut again = c;
    again.env.remove("SCR_FAULT");
    let (out, reports) = probe(&again, "candidate");
    assert_eq!(out.code, 0, "{out}");
    for report in &reports {
        assert_eq!(report, "candidate Some(\"ckpt.3\")\n");
    }
}

/// A delete that fails on one rank after the others deleted their files leaves the ranks'
/// caches diverged: that call fails everywhere, and every later call is refused on every
/// rank with an error saying to finalize; finalize still works (with a dataset open)
/// and drops the open dataset.
#[test]
fn after_a_call_leaves_state_uncertain_every_rank_refuses_further_calls() {
    let mut c = Cluster::new();
    c.set("SCR_FAULT", "delete:1:1");
    let (out, reports) = probe(&c, "uncertain");
    assert_eq!(out.code, 0, "finalize worked on every rank\n{out}");
    assert_four_ranks(&c);
    for (r, report) in reports.iter().enumerate() {
        let lines: Vec<&str> = report.lines().collect();
        assert_eq!(lines[0], "kept true", "rank {r}: {report}");
        assert!(lines[1].starts_with("delete: "), "rank {r}: {report}");
        assert!(
            lines[1].contains("injected failure (delete:1:1)"),
            "rank {r}: {report}"
        );
        for (line, call) in lines[2..].iter().zip(["start", "need", "route", "exit"]) {
            let api = match call {
                "start" => "start_output",
                "need" => "need_checkpoint",
                "route" => "route_file",
                _ => "should_exit",
            };
            assert!(
                line.starts_with(&format!(
                    "{call}: {api}: refused, because an earlier call left the ranks' cached state uncertain (delete: "
                )) && line.contains("call finalize (or MPI_Abort)"),
                "rank {r}: {line}"
            );
        }
        assert_eq!(lines.len(), 6, "rank {r}: {report}");
    }
    assert!(
        out.stderr
            .contains("finalize: a dataset was still being written; it is discarded"),
        "{out}"
    );
    for node in FOUR_NODES {
        let open = c.cache_dir(node).join("scr.dataset.2");
        assert!(
            scr_e2e::files_below(&open).is_empty(),
            "{}: the open dataset was not dropped",
            open.display()
        );
    }
}

/// Collective calls misused on some ranks only — a bad dataset name on rank 3, a name
/// rank 1 does not know given to current/drop/delete, complete_restart without
/// start_restart on rank 2 — fail on every rank instead of leaving the others waiting,
/// and the ranks stay in step.
#[test]
fn a_call_misused_on_some_ranks_fails_on_every_rank_and_leaves_them_in_step() {
    let c = Cluster::new();
    let (out, reports) = probe(&c, "diverge");
    assert_eq!(out.code, 0, "{out}");
    assert_four_ranks(&c);
    for (r, report) in reports.iter().enumerate() {
        let lines: Vec<&str> = report.lines().collect();
        let cause = "dataset name `bad/name` must be non-empty and contain no `/`";
        assert!(
            lines[0].starts_with("start: ") && lines[0].contains(cause),
            "rank {r}: {report}"
        );
        assert_eq!(lines[1], "complete: ok true", "rank {r}: {report}");
        for (line, call) in lines[2..5].iter().zip(["current", "drop", "delete"]) {
            assert!(
                line.starts_with(&format!("{call}: "))
                    && line.contains("no dataset named `nope` in cache"),
                "rank {r}: {line}"
            );
        }
        assert!(
            lines[5].starts_with("restart: ")
                && lines[5].contains("complete_restart: no restart in progress"),
            "rank {r}: {report}"
        );
        assert_eq!(lines[6], "candidate Some(\"ckpt.1\")", "rank {r}: {report}");
    }
    // the rank that misused the call names the cause itself; the others name its rank
    assert!(reports[1]
        .lines()
        .nth(2)
        .unwrap()
        .starts_with("current: no dataset named"));
    assert!(reports[0]
        .lines()
        .nth(2)
        .unwrap()
        .contains("rank 1: no dataset named"));
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
