//! C and C++ applications through libscr and scr.h, end to end: the examples are built as
//! a user builds them (the MPI compiler wrappers, scr.h and -lscr) and run under mpiexec
//! on simulated nodes through checkpoint, a lost node and a byte-exact restart; and each
//! SCR 3.x behaviour applications rely on is checked by tests/c/semantics.c.

use std::path::{Path, PathBuf};
use std::process::Command;

use scr_e2e::{
    assert_all_ok, assert_world, binary, build_against_libscr as build, files_below, lines_of,
    semantics_c, Cluster, TWO_NODES,
};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `scr ARGS` in the cluster's prefix with the jobs' environment; its standard output.
fn scr_cli(c: &Cluster, args: &[&str]) -> String {
    let out = Command::new(binary("scr"))
        .args(args)
        .current_dir(c.prefix())
        .env("SCR_SYSTEM_CONFIG", "/dev/null")
        .env("SCR_CACHE_BASE", c.path("cache"))
        .env("SCR_CNTL_BASE", c.path("cntl"))
        .env("SCR_JOB_ID", "e2e")
        .env_remove("SCR_CONF_FILE")
        .envs(&c.env)
        .output()
        .unwrap();
    assert!(out.status.success(), "scr {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn results(prefix: &Path) -> Vec<(String, Vec<u8>)> {
    let dir = prefix.join("results");
    files_below(&dir)
        .into_iter()
        .map(|f| {
            let name = f.strip_prefix(&dir).unwrap().display().to_string();
            (name, std::fs::read(&f).unwrap())
        })
        .collect()
}

#[test]
fn the_c_example_restarts_byte_exact_after_a_node_is_lost() {
    let work = tempfile::tempdir().unwrap();
    let exe = build(
        "mpicc",
        &repo().join("examples/c/checkpoint.c"),
        work.path(),
    );
    let args = ["--steps", "30", "--files", "3", "--output-every", "10"];

    let mut reference = Cluster::for_installed();
    reference.set("SCR_CHECKPOINT_INTERVAL", "5");
    let fresh = reference.run_path(TWO_NODES, &exe, &args);
    assert_eq!(fresh.code, 0, "{fresh}");
    assert_world(&fresh, 4);
    assert!(fresh.stdout.contains("starting fresh"), "{fresh}");

    let mut c = Cluster::for_installed();
    c.set("SCR_COPY_TYPE", "XOR")
        .set("SCR_CHECKPOINT_INTERVAL", "5");
    let mut killed_args = args.to_vec();
    killed_args.extend(["--kill-at", "17", "--kill-rank", "1"]);
    let first = c.run_path(TWO_NODES, &exe, &killed_args);
    assert_ne!(first.code, 0, "rank 1 was to be killed\n{first}");
    assert!(first.stdout.contains("checkpoint ckpt.15"), "{first}");
    // every checkpoint file of node1's ranks, as cached before the loss
    let before: Vec<(PathBuf, Vec<u8>)> = files_below(&c.cache_dir("n1"))
        .into_iter()
        .filter(|f| f.to_string_lossy().contains("/ckpt/"))
        .map(|f| (f.clone(), std::fs::read(&f).unwrap()))
        .collect();
    assert!(
        before
            .iter()
            .any(|(f, _)| f.to_string_lossy().contains("rank_3.part2")),
        "{before:?}"
    );
    c.lose_node("n1");

    let second = c.run_path(TWO_NODES, &exe, &args);
    assert_eq!(second.code, 0, "{second}");
    assert_world(&second, 4);
    assert!(
        second.stdout.contains("restarted from ckpt.15 at step 15"),
        "{second}"
    );
    assert_eq!(
        second.line_after("final step "),
        fresh.line_after("final step "),
        "the restarted run must end in the uninterrupted run's state\n{second}"
    );
    // the output datasets reached the prefix exactly as the uninterrupted run wrote them
    let got = results(&c.prefix());
    assert_eq!(
        got.len(),
        12,
        "{:?}",
        got.iter().map(|r| &r.0).collect::<Vec<_>>()
    );
    assert_eq!(got, results(&reference.prefix()));
    // ckpt.15's files that node1 lost were rebuilt byte for byte (ckpt.20 and later
    // replaced them in cache, so the rebuilt ones are compared through the restart: the
    // final state above; the files of the older checkpoint still cached are compared here)
    for (f, bytes) in &before {
        if let Ok(now) = std::fs::read(f) {
            assert_eq!(&now, bytes, "{} changed", f.display());
        }
    }
}

#[test]
fn an_application_linked_with_the_static_libscr_restarts_too() {
    let work = tempfile::tempdir().unwrap();
    let exe = work.path().join("checkpoint-static");
    let out = Command::new("mpicc")
        .arg("-o")
        .arg(&exe)
        .arg(repo().join("examples/c/checkpoint.c"))
        .args(scr_e2e::static_libscr_args())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dynamic = Command::new("ldd").arg(&exe).output().unwrap();
    assert!(
        !String::from_utf8_lossy(&dynamic.stdout).contains("libscr"),
        "linked statically: {}",
        String::from_utf8_lossy(&dynamic.stdout)
    );
    // (a static program finds the plugins through the directory its build baked in:
    // here the development build's)
    let mut c = Cluster::new();
    c.set("SCR_CHECKPOINT_INTERVAL", "3")
        .set("SCR_COPY_TYPE", "PARTNER");
    let first = c.run_path(TWO_NODES, &exe, &["--steps", "7", "--kill-at", "7"]);
    assert!(first.stdout.contains("checkpoint ckpt.6"), "{first}");
    c.lose_node("n0");
    let second = c.run_path(TWO_NODES, &exe, &["--steps", "9"]);
    assert_eq!(second.code, 0, "{second}");
    assert_world(&second, 4);
    assert!(
        second.stdout.contains("restarted from ckpt.6 at step 6"),
        "{second}"
    );
}

#[test]
fn the_cxx_example_restarts_after_a_node_is_lost() {
    let work = tempfile::tempdir().unwrap();
    let exe = build(
        "mpicxx",
        &repo().join("examples/cxx/checkpoint.cpp"),
        work.path(),
    );

    let reference = Cluster::for_installed();
    let fresh = reference.run_path(TWO_NODES, &exe, &["--steps", "12"]);
    assert_eq!(fresh.code, 0, "{fresh}");
    assert_world(&fresh, 4);

    let mut c = Cluster::for_installed();
    c.set("SCR_COPY_TYPE", "PARTNER")
        .set("SCR_CHECKPOINT_INTERVAL", "4");
    let first = c.run_path(TWO_NODES, &exe, &["--steps", "12", "--kill-at", "9"]);
    assert_ne!(first.code, 0, "{first}");
    c.lose_node("n1");
    let second = c.run_path(TWO_NODES, &exe, &["--steps", "12"]);
    assert_eq!(second.code, 0, "{second}");
    assert_world(&second, 4);
    assert!(
        second.stdout.contains("restarted from ckpt.8 at step 8"),
        "{second}"
    );
    assert_eq!(
        second.line_after("final step "),
        fresh.line_after("final step ")
    );
}

#[test]
fn config_sets_queries_and_unsets_values_and_descriptors() {
    let work = tempfile::tempdir().unwrap();
    let exe = semantics_c(work.path());
    let c = Cluster::for_installed();
    let out = c.run_path(TWO_NODES, &exe, &["config"]);
    assert_all_ok(&out, 4);
    for r in 0..4 {
        assert_eq!(
            lines_of(&out, r)
                .iter()
                .filter(|l| l.starts_with("query "))
                .cloned()
                .collect::<Vec<_>>(),
            [
                "query SCR_CACHE_SIZE = 3",
                "query SCR_FLUSH = 4",
                // unset: what another source sets, else none (SCR_Config returns NULL for a key
                // left at its built-in default, as SCR does)
                "query SCR_FLUSH = (null)",
                "query CKPT=0 TYPE = XOR",
                "query CKPT=0 SET_SIZE = 16",
                // descriptors are named by their CKPT index, not their position
                "query CKPT=3 TYPE = PARTNER",
                "query CKPT=1 TYPE = (null)",
                "query STORE COUNT = 2",
                "query SCR_NO_SUCH_KEY = (null)",
                // after init: the values init used; the refused set changed nothing
                "query SCR_CACHE_SIZE = 3",
                "query CKPT=0 TYPE = XOR",
            ],
            "rank {r}\n{out}"
        );
    }
    // `scr config show` and `explain`, run afterwards in the prefix, report what the
    // application set, with the same values its queries returned
    let show = scr_cli(&c, &["config", "show"]);
    for expected in [
        "cache_size = 3                           # API config call 1 (\"SCR_CACHE_SIZE=3\")",
        "flush = 10                               # default",
        "type = \"XOR\"                             # API config call 7 (\"CKPT=0 TYPE=XOR SET_SIZE=16\")",
        "set_size = 16                            # API config call 7 (\"CKPT=0 TYPE=XOR SET_SIZE=16\")",
    ] {
        assert!(show.lines().any(|l| l == expected), "missing `{expected}`\n{show}");
    }
    let explain = scr_cli(&c, &["config", "explain", "--checkpoint", "1"]);
    for expected in [
        "  scheme:  XOR (API config call 7 (\"CKPT=0 TYPE=XOR SET_SIZE=16\"))".to_string(),
        "  param:   set_size = 16 (API config call 7 (\"CKPT=0 TYPE=XOR SET_SIZE=16\"))".to_string(),
        format!(
            "  store:   {} (group NODE, count 2, view node, flush transfer pthread; API config call 8 (\"STORE={} COUNT=2\"))",
            c.path("cache").display(),
            c.path("cache").display()
        ),
    ] {
        assert!(explain.lines().any(|l| l == expected), "missing `{expected}`\n{explain}");
    }
    for expected in [
        "scr-rs[rank=2]: error: SCR_Config: \"SCR_NO_SUCH_KEY=1\": unknown key `SCR_NO_SUCH_KEY`",
        "scr-rs[rank=0]: error: SCR_Config: \"SCR_SET_SIZE=1\": `set_size`: 1 is out of range: expected a whole number in 2..=4096",
        "scr-rs[rank=1]: error: SCR_Config: the configuration string is NULL",
        "scr-rs[rank=3]: error: SCR_Config: \"SCR_CACHE_SIZE=5\": values can only be set before SCR_Init (queries work at any time)",
    ] {
        assert!(out.stderr.contains(expected), "missing `{expected}`\n{out}");
    }
}

/// SCR 3.1's keys through SCR_Config from C: the bare STORE/CKPT/GROUPS queries and the
/// clearing forms, SCR_CONF_FILE naming the user file, the restart, prefix and log keys
/// set and queried; then they act: `current` names nothing (one warning, init goes
/// on), `log_db_enable` is one warning, `prefix_size = 2` leaves two checkpoints.
#[test]
fn config_takes_scr_3_1_keys_bare_descriptor_queries_and_clearing() {
    let work = tempfile::tempdir().unwrap();
    let exe = semantics_c(work.path());
    let mut c = Cluster::for_installed();
    let conf = c.path("user.toml");
    std::fs::write(&conf, "job_name = \"from-the-user-file\"\n").unwrap();
    c.set("SEMANTICS_CONF_FILE", &conf.display().to_string());
    let out = c.run_path(TWO_NODES, &exe, &["config-scr31"]);
    assert_all_ok(&out, 4);
    let cache = c.path("cache").display().to_string();
    for r in 0..4 {
        assert_eq!(
            lines_of(&out, r)
                .iter()
                .filter(|l| l.starts_with("query "))
                .cloned()
                .collect::<Vec<_>>(),
            [
                "query STORE = (null)".to_string(),
                "query CKPT = (null)".into(),
                "query GROUPS = (null)".into(),
                // the first in force: stores by path, checkpoint descriptors by index
                format!("query STORE = {cache}"),
                "query CKPT = 1".into(),
                "query GROUPS = nodeX".into(),
                "query STORE = (null)".into(),
                "query CKPT = (null)".into(),
                "query GROUPS = (null)".into(),
                format!("query SCR_CONF_FILE = {}", conf.display()),
                "query SCR_JOB_NAME = from-the-user-file".into(),
                "query SCR_CURRENT = ckpt.9".into(),
                "query SCR_DROP_AFTER_CURRENT = 1".into(),
                "query SCR_PREFIX_SIZE = 2".into(),
                "query SCR_PREFIX_PURGE = 0".into(),
                "query SCR_GLOBAL_RESTART = 0".into(),
                "query SCR_LOG_ENABLE = 1".into(),
                "query SCR_LOG_TXT_ENABLE = 1".into(),
                "query SCR_LOG_SYSLOG_ENABLE = 0".into(),
                "query SCR_LOG_SYSLOG_PREFIX = scr-e2e".into(),
                "query SCR_LOG_SYSLOG_FACILITY = LOG_USER".into(),
                "query SCR_LOG_SYSLOG_LEVEL = LOG_DEBUG".into(),
                "query SCR_LOG_DB_ENABLE = 0".into(),
                "query SCR_LOG_DB_DEBUG = 0".into(),
                "query SCR_FLUSH_POSTSTAGE = 0".into(),
                "query SCR_HOP_DISTANCE = 2".into(),
                "query SCR_PREFIX_SIZE = 2".into(),
            ],
            "rank {r}\n{out}"
        );
    }
    // said once, by rank 0, and the run went on
    let what = "current = ckpt.9 (SCR_CURRENT)";
    let n = out.stderr.lines().filter(|l| l.contains(what)).count();
    assert_eq!(n, 1, "`{what}` once\n{out}");
    assert!(
        out.stderr
            .lines()
            .any(|l| l.contains(what) && l.starts_with("scr-rs[rank=0 ")),
        "{out}"
    );
    // prefix_size = 2: ckpt.1 deleted from the prefix after ckpt.3 was flushed
    let names: Vec<String> = scr_e2e::index_entries(&c.prefix())
        .into_iter()
        .map(|(name, complete, _)| {
            assert!(complete, "{name}");
            name
        })
        .collect();
    assert_eq!(names, ["ckpt.2", "ckpt.3"]);
    for r in 0..4 {
        assert!(!c.prefix().join(format!("c1_{r}.txt")).exists(), "rank {r}");
        for n in [2, 3] {
            assert_eq!(
                std::fs::read_to_string(c.prefix().join(format!("c{n}_{r}.txt"))).unwrap(),
                format!("ckpt.{n} {r}\n")
            );
        }
    }
}

#[test]
fn route_file_outside_during_output_and_during_restart() {
    let work = tempfile::tempdir().unwrap();
    let exe = semantics_c(work.path());
    let c = Cluster::for_installed();
    let out = c.run_path(TWO_NODES, &exe, &["route"]);
    assert_all_ok(&out, 4);
    for (r, node) in TWO_NODES.iter().enumerate() {
        let lines = lines_of(&out, r);
        let routed = lines
            .iter()
            .find_map(|l| l.strip_prefix("routed "))
            .unwrap_or_else(|| panic!("rank {r}: {lines:?}"));
        assert!(
            routed.starts_with(&c.path(&format!("cache/{node}/")).display().to_string())
                && routed.ends_with(&format!("/data/rank{r}.txt")),
            "rank {r}: {routed}"
        );
        // the dataset one rank called invalid is gone: the restart is the first one
        assert!(
            lines.contains(&"restart name first".to_string()),
            "{lines:?}"
        );
        // the file in cache is what the rank wrote
        assert_eq!(
            std::fs::read_to_string(routed).unwrap(),
            format!("written by rank {r}\n")
        );
    }
    for expected in [
        "scr-rs[rank=1]: error: SCR_Route_file: the file name is NULL",
        "outside the prefix directory",
        "scr-rs[rank=0]: error: SCR_Need_checkpoint: the flag pointer is NULL; pass the address of an int",
        "scr-rs[rank=3]: error: SCR_Start_output: start_output: flags 0x4 hold bits that are not SCR_FLAG_CHECKPOINT (1) or SCR_FLAG_OUTPUT (2)",
        "scr-rs[rank=2]: error: SCR_Route_file: route_file: `data/never.txt` is not a file of checkpoint first on rank 2",
        "SCR_Route_file: the file name is empty",
        "scr-rs[rank=0]: error: SCR_Start_output: SCR_Finalize was already called; no SCR call may follow it",
    ] {
        assert!(out.stderr.contains(expected), "missing `{expected}`\n{out}");
    }
}

#[test]
fn need_checkpoint_interval_and_the_legacy_checkpoint_calls() {
    let work = tempfile::tempdir().unwrap();
    let exe = semantics_c(work.path());
    let c = Cluster::for_installed();
    let out = c.run_path(TWO_NODES, &exe, &["legacy"]);
    assert_all_ok(&out, 4);
    for r in 0..4 {
        let lines = lines_of(&out, r);
        // SCR_CHECKPOINT_INTERVAL=3: every third call, the same on every rank
        assert!(lines.contains(&"need 0010010".to_string()), "{lines:?}");
        assert!(
            lines.contains(&"restart name ckpt.1".to_string()),
            "{lines:?}"
        );
    }
}

#[test]
fn arguments_that_differ_between_ranks_fail_every_rank_without_a_hang() {
    let work = tempfile::tempdir().unwrap();
    let exe = semantics_c(work.path());
    let c = Cluster::for_installed();
    let out = c.run_path(TWO_NODES, &exe, &["mismatch"]);
    assert_all_ok(&out, 4);
    for r in 0..4 {
        assert_eq!(lines_of(&out, r).len(), 9, "rank {r} ran every step\n{out}");
    }
    for expected in [
        "scr-rs[rank=1]: error: SCR_Start_output: start_output: rank 1 passed dataset `b` with flags (checkpoint, output) 10, rank 0 passed `a` with 10; every process must pass the same name and flags",
        "SCR_Start_output: start_output: flags 0x4 hold bits that are not SCR_FLAG_CHECKPOINT (1) or SCR_FLAG_OUTPUT (2)",
        "scr-rs[rank=0]: error: SCR_Should_exit: the flag pointer is NULL; pass the address of an int",
    ] {
        assert!(out.stderr.contains(expected), "missing `{expected}`\n{out}");
    }
}

#[test]
fn flush_on_restart_flushes_at_init_without_the_restart_api() {
    let work = tempfile::tempdir().unwrap();
    let exe = semantics_c(work.path());
    let mut c = Cluster::for_installed();
    c.set("SCR_FLUSH", "0");
    let out = c.run_path(TWO_NODES, &exe, &["write", "2"]);
    assert_all_ok(&out, 4);
    assert!(scr_e2e::index_entries(&c.prefix()).is_empty());
    // a run that never calls SCR_Have_restart (init, should_exit, finalize)
    c.set("SCR_FLUSH_ON_RESTART", "1");
    let out = c.run_path(TWO_NODES, &exe, &["exit"]);
    assert_all_ok(&out, 4);
    let entries = scr_e2e::index_entries(&c.prefix());
    assert!(
        entries
            .iter()
            .any(|(n, complete, _)| n == "ckpt.2" && *complete),
        "{entries:?}\n{out}"
    );
    assert_eq!(
        std::fs::read_to_string(c.prefix().join("state3.txt")).unwrap(),
        "step 2\n"
    );
}

#[test]
fn exiting_without_finalize_is_reported_and_ends_cleanly() {
    let work = tempfile::tempdir().unwrap();
    let exe = semantics_c(work.path());
    let c = Cluster::for_installed();
    let out = c.run_path(&["n0", "n1"], &exe, &["no-finalize"]);
    assert_all_ok(&out, 2);
    for r in 0..2 {
        assert!(
            out.stderr.contains(&format!(
                "scr-rs[rank={r}]: warning: the application exited without calling SCR_Finalize"
            )),
            "{out}"
        );
    }
}

#[test]
fn init_before_mpi_init_fails_saying_why() {
    let work = tempfile::tempdir().unwrap();
    let exe = semantics_c(work.path());
    let out = Command::new(&exe).arg("no-mpi").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "init before MPI_Init: failed\n"
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "scr-rs: error: SCR_Init: MPI is not initialised: call MPI_Init (or MPI_Init_thread) before SCR_Init\n"
    );
}

/// With `SCR_ENABLE=0` SCR's calls fail (`SCR_Init` included) and `SCR_Route_file`
/// passes names through; libscr does the same, saying why once, at `SCR_Init`.
#[test]
fn a_disabled_library_fails_its_calls_as_scr_does() {
    let work = tempfile::tempdir().unwrap();
    let exe = semantics_c(work.path());
    let mut c = Cluster::for_installed();
    c.set("SCR_ENABLE", "0").set("SCR_CACHE_SIZE", "3");
    let out = c.run_path(&["n0", "n1"], &exe, &["disabled"]);
    assert_all_ok(&out, 2);
    for r in 0..2 {
        assert_eq!(
            lines_of(&out, r).len(),
            12,
            "rank {r}: every check ran\n{out}"
        );
    }
    assert_eq!(
        out.stderr.matches("SCR is disabled").count(),
        1,
        "said once for the job, at SCR_Init\n{out}"
    );
    assert!(
        out.stderr.contains(
            "scr-rs[rank=0]: error: SCR_Init: SCR is disabled (SCR_ENABLE=0 or enable = false)"
        ),
        "{out}"
    );
    // nothing was made: no cache, no control directory, no state in the prefix
    for base in ["cache", "cntl"] {
        let made = scr_e2e::files_below(&c.path(base));
        assert!(made.is_empty(), "{base}: {made:?}\n{out}");
    }
}

#[test]
fn version_and_should_exit() {
    let work = tempfile::tempdir().unwrap();
    let exe = semantics_c(work.path());
    let c = Cluster::for_installed();
    let out = c.run_path(&["n0", "n1"], &exe, &["version"]);
    assert_eq!(out.code, 0, "{out}");
    assert_world(&out, 2);
    assert_eq!(
        lines_of(&out, 1),
        ["version scr-rs 0.1.0 (SCR API v3.1.0) header v3.1.0 3.1.0"]
    );

    let out = c.run_path(&["n0", "n1"], &exe, &["exit"]);
    assert_all_ok(&out, 2);
    assert!(
        lines_of(&out, 1).contains(&"should exit 0".to_string()),
        "{out}"
    );
    let halt = Command::new(binary("scr"))
        .args(["halt", "--reason", "maintenance", "--prefix"])
        .arg(c.prefix())
        .output()
        .unwrap();
    assert!(halt.status.success(), "{halt:?}");
    let out = c.run_path(&["n0", "n1"], &exe, &["exit"]);
    assert_all_ok(&out, 2);
    for r in 0..2 {
        assert!(
            lines_of(&out, r).contains(&"should exit 1".to_string()),
            "{out}"
        );
    }
}

#[test]
fn current_before_have_restart_chooses_the_checkpoint_even_one_only_the_prefix_holds() {
    let work = tempfile::tempdir().unwrap();
    let exe = semantics_c(work.path());
    let mut c = Cluster::for_installed();
    c.set("SCR_FLUSH", "1").set("SCR_CACHE_SIZE", "2");
    let out = c.run_path(TWO_NODES, &exe, &["write", "3"]);
    assert_all_ok(&out, 4);

    // cache holds ckpt.2 and ckpt.3: current picks the older cached one
    let out = c.run_path(TWO_NODES, &exe, &["current", "ckpt.2"]);
    assert_all_ok(&out, 4);
    for r in 0..4 {
        let lines = lines_of(&out, r);
        assert!(lines.contains(&"current ckpt.2: ok".to_string()), "{out}");
        assert!(
            lines.contains(&"restarted ckpt.2 holding \"step 2\"".to_string()),
            "{out}"
        );
    }
    // ckpt.1 was evicted from cache: only the prefix has it; the fetch in Have_restart
    // loads it because Current named it
    let out = c.run_path(TWO_NODES, &exe, &["current", "ckpt.1"]);
    assert_all_ok(&out, 4);
    for r in 0..4 {
        assert!(
            lines_of(&out, r).contains(&"restarted ckpt.1 holding \"step 1\"".to_string()),
            "{out}"
        );
    }
    // a name nobody has is refused on every rank; what is offered is the prefix's
    // current checkpoint, which the last run's restart from ckpt.1 made it (SCR's
    // index marker), not the newest
    scr_e2e::wipe_caches(&c);
    let out = c.run_path(TWO_NODES, &exe, &["current", "ckpt.9"]);
    assert_all_ok(&out, 4);
    for r in 0..4 {
        let lines = lines_of(&out, r);
        assert!(
            lines.contains(&"current ckpt.9: refused".to_string()),
            "{out}"
        );
        assert!(
            lines.contains(&"restarted ckpt.1 holding \"step 1\"".to_string()),
            "{out}"
        );
    }
    assert!(
        out.stderr.contains(
            "SCR_Current: current: no checkpoint named `ckpt.9` in cache or in the prefix"
        ),
        "{out}"
    );
}

#[test]
fn with_fetch_off_a_restart_reads_the_prefix_in_place_after_checking_it() {
    let work = tempfile::tempdir().unwrap();
    let exe = semantics_c(work.path());
    let mut c = Cluster::for_installed();
    c.set("SCR_FLUSH", "1");
    let out = c.run_path(TWO_NODES, &exe, &["write", "3"]);
    assert_all_ok(&out, 4);
    scr_e2e::wipe_caches(&c);
    // one byte of rank 1's file of ckpt.3 in the prefix flipped: ckpt.3 is refused
    let r2f = scr_host::state::prefix::Rank2File::load(&c.prefix(), 3).unwrap();
    let victim = r2f.ranks[&1][0].stored_path(&c.prefix()).unwrap();
    let mut bytes = std::fs::read(&victim).unwrap();
    assert_eq!(bytes, b"step 3\n");
    bytes[5] = b'8';
    std::fs::write(&victim, &bytes).unwrap();

    c.set("SCR_FETCH", "0");
    let out = c.run_path(TWO_NODES, &exe, &["current", "ckpt.3"]);
    assert_all_ok(&out, 4);
    assert!(
        out.stderr
            .contains("ckpt.3 in the prefix cannot be read for a restart: rank 1:")
            && out.stderr.contains("has CRC32"),
        "{out}"
    );
    // ckpt.2 is read in place in the prefix: nothing is copied into cache
    for r in 0..4 {
        let lines = lines_of(&out, r);
        assert!(
            lines.contains(&"restarted ckpt.2 holding \"step 2\"".to_string()),
            "{out}"
        );
        let path = lines
            .iter()
            .find_map(|l| l.strip_prefix("reads "))
            .unwrap_or_else(|| panic!("{out}"));
        assert!(
            path.starts_with(&c.prefix().display().to_string()),
            "rank {r} reads {path}"
        );
    }
    assert!(
        files_below(&c.path("cache")).is_empty(),
        "{:?}",
        files_below(&c.path("cache"))
    );
    let entries = scr_e2e::index_entries(&c.prefix());
    assert!(
        entries
            .iter()
            .any(|(n, _, failed)| n == "ckpt.3" && failed.is_some()),
        "{entries:?}"
    );
}

/// A CMake project finds the installed library with `find_package(scr)` and builds the C
/// example against `scr::scr`; the program runs and checkpoints. (The C++ and Fortran
/// targets are the same library: `scr::scrf` is checked to exist.)
#[test]
fn a_cmake_project_builds_with_find_package_scr() {
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::copy(
        repo().join("examples/c/checkpoint.c"),
        src.join("checkpoint.c"),
    )
    .unwrap();
    std::fs::write(
        src.join("CMakeLists.txt"),
        "cmake_minimum_required(VERSION 3.13)\n\
         project(app C)\n\
         find_package(MPI REQUIRED COMPONENTS C)\n\
         find_package(scr 0.1 REQUIRED)\n\
         if(NOT TARGET scr::scrf)\n  message(FATAL_ERROR \"no scr::scrf\")\nendif()\n\
         add_executable(checkpoint checkpoint.c)\n\
         target_link_libraries(checkpoint PRIVATE scr::scr MPI::MPI_C)\n",
    )
    .unwrap();
    let prefix = scr_e2e::install::install_tree();
    let build = work.path().join("build");
    let run = |args: &[&str]| {
        let out = Command::new("cmake")
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cmake cannot run ({e}): run scripts/setup.sh"));
        assert!(
            out.status.success(),
            "cmake {args:?}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&[
        "-S",
        src.to_str().unwrap(),
        "-B",
        build.to_str().unwrap(),
        &format!("-DCMAKE_PREFIX_PATH={}", prefix.display()),
    ]);
    run(&["--build", build.to_str().unwrap()]);
    let exe = build.join("checkpoint");
    let c = Cluster::for_installed();
    let out = c.run_path(TWO_NODES, &exe, &["--steps", "6"]);
    assert_eq!(out.code, 0, "{out}");
    assert_world(&out, 4);
    assert!(out.stdout.contains("starting fresh"), "{out}");
    // the program needs `libscr.so` by name (not an absolute path: the install tree can
    // move) and finds the installed one through its rpath (cargo's LD_LIBRARY_PATH, which
    // names the build's copy, left out)
    let dynamic = Command::new("readelf")
        .arg("-d")
        .arg(&exe)
        .output()
        .unwrap();
    let dynamic = String::from_utf8_lossy(&dynamic.stdout);
    assert!(dynamic.contains("Shared library: [libscr.so]"), "{dynamic}");
    let ldd = Command::new("ldd")
        .arg(&exe)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    let ldd = String::from_utf8_lossy(&ldd.stdout);
    assert!(
        ldd.contains(&format!(
            "libscr.so => {}",
            prefix.join("lib/libscr.so").display()
        )),
        "{ldd}"
    );
}

#[test]
fn a_shared_file_written_by_every_rank_works_with_cache_bypass_as_in_scrs_test_api() {
    let work = tempfile::tempdir().unwrap();
    let exe = semantics_c(work.path());
    let c = Cluster::for_installed();
    let out = c.run_path(TWO_NODES, &exe, &["shared", "write"]);
    assert_all_ok(&out, 4);
    let prefix = c.prefix();
    for r in 0..4 {
        // SCR returns the file's own path in the prefix in bypass
        assert!(
            lines_of(&out, r).contains(&format!(
                "routed ckpt.2/shared.ckpt to {}",
                prefix.join("ckpt.2/shared.ckpt").display()
            )),
            "{out}"
        );
    }
    let slice = |step: u32, r: u32| {
        let mut s = format!("step {step} written by rank {r}").into_bytes();
        s.resize(64, 0);
        s
    };
    for step in 1..=2 {
        let expected: Vec<u8> = (0..4).flat_map(|r| slice(step, r)).collect();
        assert_eq!(
            std::fs::read(prefix.join(format!("ckpt.{step}/shared.ckpt"))).unwrap(),
            expected,
            "ckpt.{step}"
        );
    }
    // nothing went through the node-local caches
    let cached: Vec<_> = files_below(&c.path("cache"))
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("shared.ckpt"))
        .collect();
    assert!(cached.is_empty(), "{cached:?}");
    // recorded in the prefix as flushed datasets
    let index = scr_cli(&c, &["index", "list"]);
    for name in ["ckpt.1", "ckpt.2"] {
        assert!(
            index
                .lines()
                .any(|l| l.contains(name) && !l.contains("failed")),
            "{index}"
        );
    }
    // a new run (every cache empty) restarts from the newest, read in place
    scr_e2e::wipe_caches(&c);
    let out = c.run_path(TWO_NODES, &exe, &["shared", "read"]);
    assert_all_ok(&out, 4);
    for r in 0..4 {
        assert!(
            lines_of(&out, r).contains(&format!(
                "restarted ckpt.2 from {}, byte-exact 1",
                prefix.join("ckpt.2/shared.ckpt").display()
            )),
            "{out}"
        );
    }
    // in cache (no bypass) the same file is refused, naming the ranks and the file
    let out = c.run_path(TWO_NODES, &exe, &["shared", "cached"]);
    assert_all_ok(&out, 4);
    assert!(
        out.stderr.contains("both routed") && out.stderr.contains("ckpt.1/shared.ckpt"),
        "{out}"
    );
}
