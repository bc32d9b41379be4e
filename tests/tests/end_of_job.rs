//! The end of a job, end to end: finalize flushes the newest checkpoint, halt conditions
//! flush and end the run, and a flush a crashed run left unfinished is resumed or cleaned
//! up by the next init — each checked against an uninterrupted run's final state.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use scr_e2e::{binary, files_below, Cluster, JobOutput};
use scr_host::runtime::prefix::Index;

const TWO_NODES: &[&str] = &["n0", "n0", "n1", "n1"];

fn heat(c: &Cluster, args: &[&str]) -> JobOutput {
    c.run(TWO_NODES, "scr-heat", args)
}

fn reference(steps: u64) -> String {
    scr_e2e::reference_state(4, steps, None)
}

/// (name, complete, failed) of every index entry, by dataset id.
fn index(c: &Cluster) -> Vec<(String, bool, Option<String>)> {
    Index::load(&c.prefix())
        .unwrap()
        .datasets
        .values()
        .map(|e| (e.name.clone(), e.complete, e.failed.clone()))
        .collect()
}

fn current(c: &Cluster) -> Option<String> {
    Index::load(&c.prefix()).unwrap().current
}

fn wipe_caches(c: &Cluster) {
    for node in ["n0", "n1"] {
        c.lose_node(node);
    }
}

/// A fresh cache restarts from `name` and ends in the uninterrupted run's state.
fn restarts_from_prefix(c: &Cluster, name: &str, step: u64) {
    wipe_caches(c);
    let out = heat(c, &["--steps", "30"]);
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        out.line_after("restarted from "),
        Some(format!("{name} at step {step}").as_str()),
        "{out}"
    );
    assert_eq!(out.final_state(), reference(30));
}

#[test]
fn a_clean_finish_leaves_the_newest_checkpoint_in_the_prefix() {
    let mut c = Cluster::new();
    c.set("SCR_FLUSH", "10");
    // checkpoints 5, 10, 15 (ids 1 to 3): the policy flushes none of them (every 10th
    // checkpoint), finalize flushes the newest
    let out = heat(&c, &["--steps", "17"]);
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(index(&c), [("ckpt.15".to_string(), true, None)]);
    assert_eq!(current(&c).as_deref(), Some("ckpt.15"));
    // byte-exact with what the cache holds
    for rank in 0..4 {
        let node = if rank < 2 { "n0" } else { "n1" };
        let cached = files_below(&c.cache_dir(node))
            .into_iter()
            .find(|p| p.ends_with(format!("ckpt.15/rank_{rank}.ckpt")))
            .expect("cached file");
        assert_eq!(
            std::fs::read(c.prefix().join(format!("ckpt.15/rank_{rank}.ckpt"))).unwrap(),
            std::fs::read(cached).unwrap()
        );
    }
    restarts_from_prefix(&c, "ckpt.15", 15);
}

#[test]
fn flush_on_finalize_off_leaves_the_newest_in_cache_only() {
    let mut c = Cluster::new();
    // every 2nd checkpoint: ckpt.10 (id 2) by the policy, ckpt.15 (id 3) not
    c.set("SCR_FLUSH", "2").set("SCR_FLUSH_ON_FINALIZE", "0");
    let out = heat(&c, &["--steps", "17"]);
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(index(&c), [("ckpt.10".to_string(), true, None)]);
    restarts_from_prefix(&c, "ckpt.10", 10);
}

#[test]
fn an_admin_halt_flushes_and_ends_the_run_saying_why() {
    let mut c = Cluster::new();
    c.set("SCR_FLUSH", "10").set("SCR_HALT_EXIT", "1");
    let job = c.spawn(
        TWO_NODES,
        "scr-heat",
        &["--steps", "60", "--sleep-ms", "100"],
    );
    // wait until the job wrote its first checkpoint, then ask it to stop after one more
    let start = Instant::now();
    let first = c.cache_dir("n0").join("scr.dataset.1");
    while !first.exists() {
        assert!(start.elapsed() < Duration::from_secs(60), "no checkpoint");
        std::thread::sleep(Duration::from_millis(20));
    }
    let halt = Command::new(binary("scr"))
        .args(["halt", "--checkpoints", "1", "--prefix"])
        .arg(c.prefix())
        .output()
        .unwrap();
    assert!(halt.status.success(), "{halt:?}");
    let out = scr_e2e::output_of_child(job);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stderr
            .contains("halting the run: no checkpoints left (halt_exit = true"),
        "{out}"
    );
    assert!(out.line_after("final step ").is_none(), "it ran on\n{out}");
    // the checkpoint written after the halt was set is the newest, and in the prefix
    let ix = Index::load(&c.prefix()).unwrap();
    let newest = ix
        .datasets
        .values()
        .filter(|e| e.complete && e.failed.is_none())
        .max_by_key(|e| e.checkpoint_id)
        .expect("a checkpoint in the prefix")
        .clone();
    assert_eq!(ix.current.as_deref(), Some(newest.name.as_str()));
    let step: u64 = newest.name.strip_prefix("ckpt.").unwrap().parse().unwrap();
    assert!(step < 60, "{newest:?}");
    // it is the newest checkpoint the run wrote, and with flush = 10 only the halt
    // flushed it (one flush in all)
    assert_eq!(ix.datasets.len(), 1, "{ix:?}");
    let cached_newest = std::fs::read_dir(c.cache_dir("n0"))
        .unwrap()
        .filter_map(|e| {
            e.unwrap()
                .file_name()
                .to_string_lossy()
                .strip_prefix("scr.dataset.")
                .and_then(|n| n.parse::<u64>().ok())
        })
        .max();
    assert_eq!(cached_newest, Some(newest.id), "{out}");
    let why = scr_host::runtime::Halt::load(&c.prefix()).unwrap();
    assert!(
        why.exit_reason
            .as_deref()
            .is_some_and(|r| r.contains("no checkpoints left")),
        "{why:?}"
    );
    // a later run is halted at init until the admin lifts the condition
    let held = heat(&c, &["--steps", "30"]);
    assert!(held.stderr.contains("halting the run"), "{held}");
    let unset = Command::new(binary("scr"))
        .args(["halt", "--clear", "--prefix"])
        .arg(c.prefix())
        .output()
        .unwrap();
    assert!(unset.status.success(), "{unset:?}");
    c.env.remove("SCR_HALT_EXIT");
    restarts_from_prefix(&c, &newest.name, step);
}

/// No temporary copy (`*.scr-part`) anywhere in the prefix.
fn no_partial_files(prefix: &Path) {
    let parts: Vec<_> = files_below(prefix)
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(".scr-part"))
        .collect();
    assert!(parts.is_empty(), "{parts:?}");
}

/// Rank 1 is killed right after its transfer of ckpt.20 started (the job dies with it),
/// then the job is started again on the same caches.
fn interrupted_flush(asynchronous: bool) -> Cluster {
    let mut c = Cluster::new();
    c.set("SCR_FLUSH", "2")
        .set("SCR_FLUSH_ASYNC", if asynchronous { "1" } else { "0" });
    assert_eq!(heat(&c, &["--steps", "12", "--cells", "200000"]).code, 0);
    c.set("SCR_FAULT", "flush-dispatched:1");
    let crashed = heat(&c, &["--steps", "22", "--cells", "200000"]);
    assert_ne!(crashed.code, 0, "{crashed}");
    assert!(
        index(&c).contains(&("ckpt.20".to_string(), false, None)),
        "{:?}",
        index(&c)
    );
    // the crash left something to settle: transfer states, and files in the prefix
    let states = files_below(&c.path("cntl"))
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("transfer."))
        .count();
    assert!(states > 0, "no transfer state was left");
    let written = files_below(&c.prefix())
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("ckpt.20/"))
        .count();
    assert!(
        written > 0,
        "the crashed flush wrote nothing into the prefix"
    );
    c.env.remove("SCR_FAULT");
    c
}

fn an_interrupted_flush_is_resumed(asynchronous: bool) {
    let c = interrupted_flush(asynchronous);
    // same caches: the next init finishes the flush from the transfers' saved state
    let out = heat(&c, &["--steps", "22", "--cells", "200000"]);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stderr
            .contains("the flush of ckpt.20 that an earlier run left unfinished was resumed"),
        "{out}"
    );
    assert!(
        index(&c).contains(&("ckpt.20".to_string(), true, None)),
        "{:?}",
        index(&c)
    );
    assert_eq!(current(&c).as_deref(), Some("ckpt.20"));
    no_partial_files(&c.prefix());
    // every rank's file in the prefix is byte-exact with its cached copy
    for rank in 0..4 {
        let node = if rank < 2 { "n0" } else { "n1" };
        let cached = files_below(&c.cache_dir(node))
            .into_iter()
            .find(|p| p.ends_with(format!("ckpt.20/rank_{rank}.ckpt")))
            .expect("cached file");
        assert_eq!(
            std::fs::read(c.prefix().join(format!("ckpt.20/rank_{rank}.ckpt"))).unwrap(),
            std::fs::read(cached).unwrap(),
            "rank {rank}"
        );
    }
    // the transfer state files are gone from the control directories
    let states: Vec<_> = files_below(&c.path("cntl"))
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("transfer."))
        .collect();
    assert!(states.is_empty(), "{states:?}");
    wipe_caches(&c);
    let out = heat(&c, &["--steps", "30", "--cells", "200000"]);
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        out.line_after("restarted from "),
        Some("ckpt.20 at step 20"),
        "{out}"
    );
    assert_eq!(
        out.final_state(),
        scr_e2e::reference_state(4, 30, Some(200000))
    );
}

fn an_interrupted_flush_is_cleaned_up(asynchronous: bool) {
    let c = interrupted_flush(asynchronous);
    // every cache lost: nothing to resume from; what the flush wrote goes
    wipe_caches(&c);
    // (to step 12 only: no new checkpoint writes ckpt.20 again before the checks)
    let out = heat(&c, &["--steps", "12", "--cells", "200000"]);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stderr
            .contains("the flush of ckpt.20 that an earlier run left unfinished cannot be resumed"),
        "{out}"
    );
    let entries = index(&c);
    let failed = entries.iter().find(|e| e.0 == "ckpt.20").expect("entry");
    assert!(
        failed
            .2
            .as_deref()
            .is_some_and(|w| w.contains("flush interrupted")),
        "{entries:?}"
    );
    no_partial_files(&c.prefix());
    for rank in 0..4 {
        assert!(
            !c.prefix()
                .join(format!("ckpt.20/rank_{rank}.ckpt"))
                .exists(),
            "rank {rank}'s file of the interrupted flush is still there"
        );
        // the older flushed checkpoint is untouched
        assert!(c
            .prefix()
            .join(format!("ckpt.10/rank_{rank}.ckpt"))
            .is_file());
    }
    assert_eq!(
        out.line_after("restarted from "),
        Some("ckpt.10 at step 10"),
        "{out}"
    );
    assert_eq!(
        out.final_state(),
        scr_e2e::reference_state(4, 12, Some(200000))
    );
    let out = heat(&c, &["--steps", "30", "--cells", "200000"]);
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        out.final_state(),
        scr_e2e::reference_state(4, 30, Some(200000))
    );
}

#[test]
fn an_interrupted_sync_flush_is_resumed_at_the_next_init() {
    an_interrupted_flush_is_resumed(false);
}

#[test]
fn an_interrupted_async_flush_is_resumed_at_the_next_init() {
    an_interrupted_flush_is_resumed(true);
}

#[test]
fn an_interrupted_sync_flush_is_cleaned_up_when_the_caches_are_lost() {
    an_interrupted_flush_is_cleaned_up(false);
}

#[test]
fn an_interrupted_async_flush_is_cleaned_up_when_the_caches_are_lost() {
    an_interrupted_flush_is_cleaned_up(true);
}
