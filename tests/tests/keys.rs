//! Every accepted configuration key works: `enable`, `halt_exit`, `flush_on_restart`,
//! `crc_on_delete`, `distribute = false`, store `mkdir`, `global_restart`, `prefix_size`
//! and `prefix_purge`, each in an MPI job on
//! simulated nodes, each checked for what it must change and what must not be lost.

use scr_e2e::{binary, reference_state, relative_files_below, Cluster, JobOutput};

const NODES: &[&str] = &["n0", "n0", "n1", "n1"];
const CELLS: &str = "64";

fn heat(c: &Cluster, steps: u64, every: u64) -> JobOutput {
    c.run(
        NODES,
        "scr-heat",
        &[
            "--steps",
            &steps.to_string(),
            "--every",
            &every.to_string(),
            "--cells",
            CELLS,
        ],
    )
}

fn reference(steps: u64) -> String {
    reference_state(NODES.len(), steps, Some(64))
}

/// `enable = false`: every call passes through. The application's files land at their
/// own paths, nothing is cached or recorded (no cache, control or .scr directory), and
/// the next run offers no restart.
#[test]
fn a_disabled_library_passes_every_call_through() {
    let mut c = Cluster::new();
    c.set("SCR_ENABLE", "0");
    let out = heat(&c, 12, 5);
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(out.final_state(), reference(12), "{out}");
    assert!(out.stdout.contains("checkpoint ckpt.10: kept"), "{out}");
    let written = relative_files_below(&c.prefix());
    let mut expected = Vec::new();
    for step in [5, 10] {
        for r in 0..4 {
            expected.push(format!("ckpt.{step}/rank_{r}.ckpt"));
        }
    }
    expected.sort();
    assert_eq!(
        written, expected,
        "only the application's files, at their own paths"
    );
    for step in [5u64, 10] {
        let bytes = std::fs::read(c.prefix().join(format!("ckpt.{step}/rank_3.ckpt"))).unwrap();
        assert_eq!(bytes.len(), 8 + 64 * 8);
        assert_eq!(bytes[..8], step.to_le_bytes());
    }
    for base in ["cache", "cntl"] {
        assert!(
            relative_files_below(&c.path(base)).is_empty(),
            "{base}: nothing cached"
        );
        assert_eq!(
            std::fs::read_dir(c.path(base)).unwrap().count(),
            0,
            "{base}"
        );
    }
    let again = heat(&c, 12, 5);
    assert_eq!(again.code, 0, "{again}");
    assert!(
        again.stdout.contains("starting fresh"),
        "no restart offered\n{again}"
    );
}

/// `halt_exit`: with two checkpoints left, the run ends inside complete_output of the
/// second — finalized, status 0 on every rank, the reason recorded — and a later run
/// with the condition still in force exits right in init.
#[test]
fn halt_exit_ends_the_run_inside_the_library() {
    let mut c = Cluster::new();
    c.set("SCR_HALT_EXIT", "1");
    let scr = std::process::Command::new(binary("scr"))
        .args(["halt", "--checkpoints", "2", "--prefix"])
        .arg(c.prefix())
        .output()
        .unwrap();
    assert!(scr.status.success(), "{scr:?}");
    let out = heat(&c, 40, 5);
    assert_eq!(out.code, 0, "{out}");
    // the exit happens inside complete_output of ckpt.10, which is kept
    assert!(out.stdout.contains("checkpoint ckpt.5: kept"), "{out}");
    assert!(
        !out.stdout.contains("checkpoint ckpt.10"),
        "complete_output returned\n{out}"
    );
    for r in 0..2 {
        let f = c
            .cache_dir("n0")
            .join(format!("scr.dataset.2/ckpt.10/rank_{r}.ckpt"));
        assert!(f.is_file(), "{}\n{out}", f.display());
    }
    assert!(!out.stdout.contains("final step"), "the run went on\n{out}");
    assert!(
        out.logged(Some(0), "warning", "halting the run: no checkpoints left (halt_exit = true: flushing the newest checkpoint, finalizing and exiting)").len() == 1,
        "{out}"
    );
    let halt = std::fs::read_to_string(c.prefix().join(".scr/halt.scr")).unwrap();
    assert!(
        halt.contains("SCR_FINALIZE_CALLED (no checkpoints left)"),
        "{halt}"
    );
    // still halted: the next run exits in init, before any step
    let again = heat(&c, 40, 5);
    assert_eq!(again.code, 0, "{again}");
    assert!(!again.stdout.contains("restarted from"), "{again}");
    assert!(!again.stdout.contains("final step"), "{again}");
    assert!(!again.stdout.contains("starting fresh"), "{again}");
    assert!(
        again
            .stderr
            .contains("halting the run: no checkpoints left"),
        "{again}"
    );
}

/// `flush_on_restart`: a checkpoint restored from cache is flushed at init, so that
/// after every cache is lost the run still restarts from it.
#[test]
fn flush_on_restart_puts_the_restarted_checkpoint_in_the_prefix() {
    let mut c = Cluster::new();
    c.set("SCR_FLUSH", "0");
    let out = heat(&c, 10, 5);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        !c.prefix().join("ckpt.10").exists(),
        "flush = 0 flushed\n{out}"
    );
    c.set("SCR_FLUSH_ON_RESTART", "1");
    let out = heat(&c, 10, 5);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stdout.contains("restarted from ckpt.10 at step 10"),
        "{out}"
    );
    for r in 0..4 {
        let f = c.prefix().join(format!("ckpt.10/rank_{r}.ckpt"));
        assert!(f.is_file(), "{} not flushed\n{out}", f.display());
    }
    for node in ["n0", "n1"] {
        c.lose_node(node);
    }
    let out = heat(&c, 15, 5);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stdout.contains("restarted from ckpt.10 at step 10"),
        "{out}"
    );
    assert_eq!(out.final_state(), reference(15), "{out}");
}

/// `crc_on_delete`: a cached file damaged while the cache held it is reported when the
/// dataset is evicted (here with the restart check off, so nothing noticed it before).
#[test]
fn crc_on_delete_reports_a_file_damaged_in_cache() {
    let mut c = Cluster::new();
    c.set("SCR_CACHE_SIZE", "3");
    let out = heat(&c, 10, 5);
    assert_eq!(out.code, 0, "{out}");
    let victim = c.cache_dir("n0").join("scr.dataset.1/ckpt.5/rank_1.ckpt");
    let mut bytes = std::fs::read(&victim).unwrap();
    bytes[20] ^= 0x40;
    std::fs::write(&victim, bytes).unwrap();
    c.set("SCR_CACHE_SIZE", "2")
        .set("SCR_CRC_ON_RESTART", "0")
        .set("SCR_CRC_ON_DELETE", "1");
    let out = heat(&c, 15, 5);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stdout.contains("restarted from ckpt.10 at step 10"),
        "{out}"
    );
    assert!(
        out.logged(
            Some(1),
            "warning",
            "crc_on_delete: dataset 1 (ckpt.5) was damaged in cache before it was deleted"
        )
        .len()
            == 1
            && out.stderr.contains("rank_1.ckpt: CRC32"),
        "{out}"
    );
    assert!(
        out.logged(Some(0), "warning", "crc_on_delete").is_empty(),
        "{out}"
    );
    assert!(!victim.exists(), "evicted");
}

/// `distribute = false`: the cache is purged at init and the run restarts from the
/// prefix — here from ckpt.5, the only flushed checkpoint, although the cache held the
/// newer ckpt.10.
#[test]
fn distribute_off_purges_the_cache_and_restarts_from_the_prefix() {
    let mut c = Cluster::new();
    c.set("SCR_FLUSH", "1");
    let out = heat(&c, 5, 5);
    assert_eq!(out.code, 0, "{out}");
    c.set("SCR_FLUSH", "0");
    let out = heat(&c, 10, 5);
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.contains("restarted from ckpt.5"), "{out}");
    c.set("SCR_DISTRIBUTE", "0");
    let out = heat(&c, 15, 5);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stdout.contains("restarted from ckpt.5 at step 5"),
        "{out}"
    );
    assert_eq!(out.final_state(), reference(15), "{out}");
    assert!(
        out.stderr
            .contains("distribute = false: purged the cache of node n0: ckpt.10, ckpt.5;"),
        "{out}"
    );
    // the flush file no longer says the purged ckpt.10 (dataset 2) is in cache
    let location = std::process::Command::new(binary("scr"))
        .args(["flush-file", "--prefix"])
        .arg(c.prefix())
        .args(["location", "2"])
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&location.stdout).contains("CACHE"),
        "{location:?}"
    );
    // the previous run's ckpt.10 (dataset 2) is gone from every cache (this run wrote
    // its own ckpt.10 and ckpt.15 as datasets 3 and 4)
    for node in ["n0", "n1"] {
        let left = relative_files_below(&c.cache_dir(node));
        assert!(
            !left.iter().any(|f| f.starts_with("scr.dataset.2/")),
            "{node}: the purged ckpt.10 is still cached: {left:?}"
        );
        assert!(
            left.iter().any(|f| f.starts_with("scr.dataset.4/ckpt.15/")),
            "{node}: {left:?}"
        );
    }
}

/// A store with `mkdir = false` uses a job directory made by someone else (a prolog)
/// and never creates it: missing, init fails on every rank naming the store, the
/// directory and what to do; present, the job runs.
#[test]
fn a_store_with_mkdir_false_needs_its_directory_made_beforehand() {
    let mut c = Cluster::new();
    let conf = c.path("user.toml");
    std::fs::write(
        &conf,
        format!(
            "[[store]]\npath = \"{}\"\nmkdir = false\n",
            c.path("cache").display()
        ),
    )
    .unwrap();
    c.set("SCR_CONF_FILE", &conf.display().to_string());
    let out = c.run(NODES, "scr-probe", &["candidate"]);
    assert_eq!(out.code, 0, "{out}");
    for r in 0..4 {
        let report = std::fs::read_to_string(c.prefix().join(format!("probe_{r}.txt"))).unwrap();
        assert!(report.starts_with("init error: "), "rank {r}: {report}");
    }
    let rank0 = std::fs::read_to_string(c.prefix().join("probe_0.txt")).unwrap();
    assert!(
        rank0.contains(&format!(
            "store {}: mkdir = false, but the job's directory {} does not exist on node n0; create it before the job starts",
            c.path("cache").display(),
            c.cache_dir("n0").display()
        )),
        "{rank0}"
    );
    assert!(!c.cache_dir("n0").exists(), "created anyway");
    for node in ["n0", "n1"] {
        let d = c.cache_dir(node);
        std::fs::create_dir_all(&d).unwrap();
        for p in [
            d.as_path(),
            d.parent().unwrap(),
            d.parent().unwrap().parent().unwrap(),
        ] {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o700)).unwrap();
        }
    }
    let out = heat(&c, 10, 5);
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(out.final_state(), reference(10), "{out}");
}

/// `job_name` is recorded with each flushed dataset in the index (SCR's JOBNAME) and
/// shown by `scr index list`.
#[test]
fn job_name_is_recorded_in_the_index() {
    let mut c = Cluster::new();
    c.set("SCR_FLUSH", "1").set("SCR_JOB_NAME", "heat-study-7");
    let out = heat(&c, 5, 5);
    assert_eq!(out.code, 0, "{out}");
    let list = std::process::Command::new(binary("scr"))
        .args(["index", "list", "--prefix"])
        .arg(c.prefix())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(list.status.success(), "{list:?}");
    let line = text
        .lines()
        .find(|l| l.contains("ckpt.5"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("complete,job=heat-study-7"), "{line}");
    let index = std::fs::read_to_string(c.prefix().join(".scr/index.scr")).unwrap();
    assert!(index.contains("\"job_name\": \"heat-study-7\""), "{index}");
}

/// A misspelt `SCR_*` variable is named in one warning (rank 0's) with the key it
/// probably meant, instead of being ignored in silence.
#[test]
fn a_misspelt_environment_variable_is_warned_about_once() {
    let mut c = Cluster::new();
    c.set("SCR_CACHSIZE", "3");
    let out = heat(&c, 5, 5);
    assert_eq!(out.code, 0, "{out}");
    let warning = "environment variable SCR_CACHSIZE names no scr-rs setting and is ignored; did you mean SCR_CACHE_SIZE?";
    assert_eq!(out.logged(Some(0), "warning", warning).len(), 1, "{out}");
    assert_eq!(
        out.stderr.matches(warning).count(),
        1,
        "rank 0 alone says it\n{out}"
    );
}

/// Messages go through tracing: `SCR_DEBUG` chooses the level, `RUST_LOG` overrides it
/// with tracing's directives (a module of its own included), a `RUST_LOG` that is no
/// filter is said so, and every line names the rank and the job.
#[test]
fn scr_debug_and_rust_log_choose_what_is_logged() {
    let summary = "init: 4 ranks on 2 node(s)";
    // the default: errors and warnings only
    let out = heat(&Cluster::new(), 5, 5);
    assert_eq!(out.code, 0, "{out}");
    assert!(out.logged(None, "info", "").is_empty(), "{out}");
    // SCR_DEBUG=1: rank 0's init summary, at info, with the rank and the job id
    let mut c = Cluster::new();
    c.set("SCR_DEBUG", "1");
    let out = heat(&c, 5, 5);
    let lines = out.logged(Some(0), "info", summary);
    assert_eq!(lines.len(), 1, "{out}");
    assert!(lines[0].starts_with("scr-rs[rank=0 job="), "{}", lines[0]);
    // RUST_LOG overrides SCR_DEBUG
    c.set("RUST_LOG", "warn");
    let out = heat(&c, 5, 5);
    assert_eq!(out.code, 0, "{out}");
    assert!(out.logged(None, "info", "").is_empty(), "{out}");
    // a directive for one module shows its messages without SCR_DEBUG
    let mut c = Cluster::new();
    c.set("RUST_LOG", "warn,scr_host::runtime=info");
    let out = heat(&c, 5, 5);
    assert_eq!(out.logged(Some(0), "info", summary).len(), 1, "{out}");
    // a RUST_LOG that is no filter: said, and SCR_DEBUG decides
    let mut c = Cluster::new();
    c.set("RUST_LOG", "scr_host=loudest");
    let out = heat(&c, 5, 5);
    assert_eq!(out.code, 0, "{out}");
    // once, by rank 0, not once per process
    let said = "RUST_LOG=\"scr_host=loudest\" is not a valid filter";
    assert_eq!(out.logged(Some(0), "warning", said).len(), 1, "{out}");
    assert_eq!(out.stderr.matches(said).count(), 1, "{out}");
    assert!(out.logged(None, "info", "").is_empty(), "{out}");
}

/// `global_restart`: the restart comes from the prefix. The newest cached checkpoint,
/// never flushed (flush = 0), is flushed at init, the cache is cleared, and the run
/// restarts from the checkpoint read in place in the prefix, byte-exact.
#[test]
fn global_restart_flushes_clears_the_cache_and_restarts_from_the_prefix() {
    let mut c = Cluster::new();
    c.set("SCR_FLUSH", "0");
    let out = heat(&c, 10, 5);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        !c.prefix().join("ckpt.10").exists(),
        "flush = 0 flushed\n{out}"
    );
    c.set("SCR_GLOBAL_RESTART", "1");
    let out = heat(&c, 12, 5);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stdout.contains("restarted from ckpt.10 at step 10"),
        "{out}"
    );
    assert_eq!(out.final_state(), reference(12), "{out}");
    for r in 0..4 {
        let f = c.prefix().join(format!("ckpt.10/rank_{r}.ckpt"));
        assert!(f.is_file(), "{} not flushed\n{out}", f.display());
    }
    // the earlier run's ckpt.5 and ckpt.10 (datasets 1 and 2) left every cache
    for node in ["n0", "n1"] {
        let left = relative_files_below(&c.cache_dir(node));
        assert!(
            !left
                .iter()
                .any(|f| f.starts_with("scr.dataset.1/") || f.starts_with("scr.dataset.2/")),
            "{node}: {left:?}"
        );
    }
}

/// `prefix_size = 1` keeps only the newest flushed checkpoint in the prefix; then
/// `prefix_purge` (every cache lost) deletes what the prefix holds at init and the run
/// starts over.
#[test]
fn prefix_size_keeps_the_newest_and_prefix_purge_starts_over() {
    let mut c = Cluster::new();
    c.set("SCR_FLUSH", "1").set("SCR_PREFIX_SIZE", "1");
    let out = heat(&c, 15, 5);
    assert_eq!(out.code, 0, "{out}");
    let entries: Vec<String> = scr_e2e::index_entries(&c.prefix())
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(entries, ["ckpt.15"], "{out}");
    for step in [5, 10] {
        assert!(!c.prefix().join(format!("ckpt.{step}")).exists(), "{out}");
    }
    for node in ["n0", "n1"] {
        c.lose_node(node);
    }
    c.set("SCR_PREFIX_SIZE", "0").set("SCR_PREFIX_PURGE", "1");
    let out = heat(&c, 5, 5);
    assert_eq!(out.code, 0, "{out}");
    assert!(!out.stdout.contains("restarted from"), "{out}");
    assert_eq!(out.final_state(), reference(5), "{out}");
    assert!(!c.prefix().join("ckpt.15").exists(), "{out}");
    let entries: Vec<String> = scr_e2e::index_entries(&c.prefix())
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(entries, ["ckpt.5"], "only this run's checkpoint\n{out}");
}
