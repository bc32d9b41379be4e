//! The end of a job, end to end: finalize flushes the newest checkpoint, halt conditions
//! flush and end the run, and a flush a crashed run left unfinished is resumed or cleaned
//! up by the next init — each checked against an uninterrupted run's final state.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use scr_e2e::{binary, files_below, wipe_caches, Cluster, JobOutput, TWO_NODES};
use scr_host::state::prefix::Index;

fn heat(c: &Cluster, args: &[&str]) -> JobOutput {
    c.run(TWO_NODES, "scr-heat", args)
}

/// (name, complete, failed) of every index entry, by dataset id.
fn index(c: &Cluster) -> Vec<(String, bool, Option<String>)> {
    scr_e2e::index_entries(&c.prefix())
}

fn current(c: &Cluster) -> Option<String> {
    Index::load(&c.prefix()).unwrap().current
}

/// A fresh cache restarts from `name` and ends in the uninterrupted run's state.
fn restarts_from_prefix(c: &Cluster, name: &str, step: u64) {
    restarts_from_prefix_with(c, name, step, None);
}

/// [`restarts_from_prefix`] for runs of `cells` cells per rank.
fn restarts_from_prefix_with(c: &Cluster, name: &str, step: u64, cells: Option<usize>) {
    wipe_caches(c);
    let cells_arg = cells.map(|n| n.to_string());
    let mut args = vec!["--steps", "30"];
    if let Some(n) = &cells_arg {
        args.extend(["--cells", n.as_str()]);
    }
    let out = heat(c, &args);
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        out.line_after("restarted from "),
        Some(format!("{name} at step {step}").as_str()),
        "{out}"
    );
    assert_eq!(out.final_state(), scr_e2e::reference_state(4, 30, cells));
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
    let why = scr_host::state::halt::Halt::load(&c.prefix()).unwrap();
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

/// Rank `rank`'s ckpt.20 file in its node's cache (ranks 0 and 1 on n0, 2 and 3 on n1).
fn cached_ckpt20(c: &Cluster, rank: usize) -> Vec<u8> {
    let node = if rank < 2 { "n0" } else { "n1" };
    let cached = files_below(&c.cache_dir(node))
        .into_iter()
        .find(|p| p.ends_with(format!("ckpt.20/rank_{rank}.ckpt")))
        .expect("cached file");
    std::fs::read(cached).unwrap()
}

/// The id of the newest complete ckpt.20 in the prefix's index.
fn complete_ckpt20(c: &Cluster) -> u64 {
    Index::load(&c.prefix())
        .unwrap()
        .datasets
        .into_values()
        .filter(|d| d.name == "ckpt.20" && d.complete)
        .map(|d| d.id)
        .max()
        .expect("ckpt.20 recorded")
}

/// A run to step 22 flushes ckpt.20; the index is then set back to ckpt.10 and the
/// caches are lost, so the next run writes ckpt.20 again and finds its names taken: its
/// flush writes to the dataset's own directory, and rank 1 dies right after its part
/// started. Returns the older ckpt.20's files, by rank.
fn crash_a_relocated_flush(c: &mut Cluster) -> Vec<Vec<u8>> {
    let args = ["--steps", "22", "--cells", "200000"];
    assert_eq!(heat(c, &args).code, 0);
    let older: Vec<Vec<u8>> = (0..4)
        .map(|r| std::fs::read(c.prefix().join(format!("ckpt.20/rank_{r}.ckpt"))).unwrap())
        .collect();
    let pin = Command::new(binary("scr"))
        .args(["index", "current", "ckpt.10", "--prefix"])
        .arg(c.prefix())
        .output()
        .unwrap();
    assert!(pin.status.success(), "{pin:?}");
    wipe_caches(c);
    c.set("SCR_FAULT", "flush-dispatched:1");
    let crashed = heat(c, &args);
    assert_ne!(crashed.code, 0, "{crashed}");
    c.env.remove("SCR_FAULT");
    let relocated = files_below(&c.prefix().join(".scr"))
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("/files/"))
        .count();
    assert!(relocated > 0, "the second flush was not relocated");
    older
}

/// Rank 1 is killed right after its transfer of ckpt.20 started (the job dies with it),
/// then the job is started again on the same caches.
fn interrupted_flush(asynchronous: bool) -> Cluster {
    interrupted_flush_in(asynchronous, 256)
}

/// [`interrupted_flush`] with `flush_width` ranks copying at once.
fn interrupted_flush_in(asynchronous: bool, width: u32) -> Cluster {
    let mut c = Cluster::new();
    c.set("SCR_FLUSH", "2")
        .set("SCR_FLUSH_WIDTH", &width.to_string())
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

/// [`interrupted_flush_in`], then the job started again on the same caches: the flush
/// is resumed and recorded, every rank's file byte-exact at its own path, and the job
/// restarts from ckpt.20 in cache (and later from the prefix alone).
fn an_interrupted_flush_is_resumed(asynchronous: bool, width: u32) {
    let c = interrupted_flush_in(asynchronous, width);
    // same caches: the next init finishes the flush from the transfers' saved state
    let out = heat(&c, &["--steps", "22", "--cells", "200000"]);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stderr
            .contains("the flush of ckpt.20 that an earlier run left unfinished was resumed"),
        "{out}"
    );
    assert_eq!(
        out.line_after("restarted from "),
        Some("ckpt.20 at step 20"),
        "{out}"
    );
    assert_eq!(
        out.final_state(),
        scr_e2e::reference_state(4, 22, Some(200000))
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
        assert_eq!(
            std::fs::read(c.prefix().join(format!("ckpt.20/rank_{rank}.ckpt"))).unwrap(),
            cached_ckpt20(&c, rank),
            "rank {rank}"
        );
    }
    // the transfer state files are gone from the control directories
    let states: Vec<_> = files_below(&c.path("cntl"))
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("transfer."))
        .collect();
    assert!(states.is_empty(), "{states:?}");
    restarts_from_prefix_with(&c, "ckpt.20", 20, Some(200000));
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
    an_interrupted_flush_is_resumed(false, 256);
}

#[test]
fn an_interrupted_async_flush_is_resumed_at_the_next_init() {
    an_interrupted_flush_is_resumed(true, 256);
}

#[test]
fn an_interrupted_sync_flush_is_cleaned_up_when_the_caches_are_lost() {
    an_interrupted_flush_is_cleaned_up(false);
}

#[test]
fn an_interrupted_async_flush_is_cleaned_up_when_the_caches_are_lost() {
    an_interrupted_flush_is_cleaned_up(true);
}

/// A background flush killed inside a window of one rank: rank 0's part was copied,
/// rank 1 dies as its turn starts, ranks 2 and 3 never started theirs (no transfer
/// state). The next init resumes it all the same: ranks 0 and 1 reopen their transfers,
/// and ranks 2 and 3 start theirs anew where those write; nothing partial is left, the
/// job restarts from ckpt.20 in cache, and every rank's file in the prefix is byte-exact.
#[test]
fn a_background_flush_killed_inside_a_narrow_window_is_resumed_with_the_parts_never_started() {
    an_interrupted_flush_is_resumed(true, 1);
}

/// As above, with the names taken: the prefix holds an older ckpt.20 (the run went back
/// to ckpt.10), so the new ckpt.20's background flush writes to its own directory. Ranks
/// 2 and 3, whose part never started, find their files' own paths owned by the older
/// ckpt.20: they copy into the dataset's directory like the reopened parts, and the older
/// checkpoint's files stay byte for byte.
#[test]
fn a_relocated_background_flush_killed_inside_a_narrow_window_is_resumed_into_its_directory() {
    let mut c = Cluster::new();
    c.set("SCR_FLUSH", "2")
        .set("SCR_FLUSH_ASYNC", "1")
        .set("SCR_FLUSH_WIDTH", "1");
    let older = crash_a_relocated_flush(&mut c);
    let out = heat(&c, &["--steps", "22", "--cells", "200000"]);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stderr
            .contains("the flush of ckpt.20 that an earlier run left unfinished was resumed"),
        "{out}"
    );
    no_partial_files(&c.prefix());
    let newer = complete_ckpt20(&c);
    for (rank, older) in older.iter().enumerate() {
        let name = format!("ckpt.20/rank_{rank}.ckpt");
        let moved = c
            .prefix()
            .join(scr_host::state::prefix::relocated(newer, &name));
        assert_eq!(
            std::fs::read(&moved).unwrap_or_default(),
            cached_ckpt20(&c, rank),
            "rank {rank}: {}",
            moved.display()
        );
        assert_eq!(
            std::fs::read(c.prefix().join(&name)).unwrap(),
            *older,
            "rank {rank}'s older ckpt.20 changed"
        );
    }
}

#[test]
fn a_faked_slurm_end_time_triggers_the_halt_seconds_rule() {
    let mut c = Cluster::new();
    // a first run leaves ckpt.5 and ckpt.10 in cache only
    c.set("SCR_FLUSH", "10").set("SCR_FLUSH_ON_FINALIZE", "0");
    let first = heat(&c, &["--steps", "12"]);
    assert_eq!(first.code, 0, "{first}");
    assert!(Index::load(&c.prefix())
        .unwrap_or_default()
        .datasets
        .is_empty());
    // the next run starts 30 s before its allocation ends, within halt_seconds = 60:
    // init flushes the newest checkpoint and ends the run, saying why
    let end = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 30;
    c.env.remove("SCR_FLUSH_ON_FINALIZE");
    c.set("SCR_HALT_SECONDS", "60")
        .set("SCR_HALT_EXIT", "1")
        .set("SLURM_JOB_ID", "4242")
        .set("SLURM_JOB_END_TIME", &end.to_string());
    let out = heat(&c, &["--steps", "200"]);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stderr.contains(&format!(
            "before the allocation ends at {end} (from SLURM_JOB_END_TIME), within halt_seconds = 60"
        )),
        "{out}"
    );
    assert!(out.stderr.contains("halting the run: "), "{out}");
    assert!(out.line_after("final step ").is_none(), "it ran on\n{out}");
    let ix = Index::load(&c.prefix()).unwrap();
    assert_eq!(index(&c), [("ckpt.10".to_string(), true, None)], "{ix:?}");
    assert_eq!(ix.current.as_deref(), Some("ckpt.10"));
    // without a known end (no resource manager) the same settings do not stop a run
    let mut free = Cluster::new();
    free.set("SCR_HALT_SECONDS", "60").set("SCR_HALT_EXIT", "1");
    let out = free.run(TWO_NODES, "scr-heat", &["--steps", "12"]);
    assert_eq!(out.code, 0, "{out}");
    assert!(out.line_after("final step ").is_some(), "{out}");
}

#[test]
fn the_event_log_records_failures_rebuilds_and_flushes_and_scr_log_sums_them_up() {
    let mut c = Cluster::new();
    c.set("SCR_COPY_TYPE", "XOR").set("SCR_FLUSH", "10");
    let killed = heat(
        &c,
        &["--steps", "20", "--kill-at", "12", "--kill-rank", "1"],
    );
    assert_ne!(killed.code, 0, "{killed}");
    c.lose_node("n1");
    let out = heat(&c, &["--steps", "20"]);
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        out.line_after("restarted from "),
        Some("ckpt.10 at step 10"),
        "{out}"
    );
    let log = std::fs::read_to_string(c.prefix().join(".scr/events.jsonl")).unwrap();
    let events: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    // first run: init, ckpt.5, ckpt.10, killed; second: the failure found, ckpt.10 and
    // ckpt.5 rebuilt, n1 lost, init, ckpt.15, ckpt.20, the finalize flush of ckpt.20,
    // finalize
    assert_eq!(
        kinds,
        [
            "init",
            "checkpoint",
            "checkpoint",
            "failure",
            "rebuild",
            "rebuild",
            "lost_nodes",
            "init",
            "checkpoint",
            "checkpoint",
            "flush",
            "finalize"
        ],
        "{log}"
    );
    assert!(
        events[3]["what"]
            .as_str()
            .unwrap()
            .contains("ended without finalize"),
        "{log}"
    );
    assert_eq!(events[4]["name"], "ckpt.10");
    assert_eq!(events[4]["ranks"], serde_json::json!([2, 3]));
    assert_eq!(events[5]["name"], "ckpt.5");
    assert_eq!(events[6]["nodes"], serde_json::json!(["n1"]));
    assert_eq!(events[7]["restarted_from"], "ckpt.10");
    assert_eq!(events[10]["name"], "ckpt.20");
    assert_eq!(events[10]["ok"], true);
    // every checkpoint's bytes: 4 ranks' files of equal size
    let file = std::fs::metadata(c.prefix().join("ckpt.20/rank_0.ckpt"))
        .unwrap()
        .len();
    assert_eq!(events[1]["bytes"], 4 * file);
    assert_eq!(events[10]["bytes"], 4 * file);
    let report = Command::new(binary("scr"))
        .args(["log", "--json", "--prefix"])
        .arg(c.prefix())
        .output()
        .unwrap();
    assert!(report.status.success(), "{report:?}");
    let summary: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    assert_eq!(summary["checkpoints"], 4, "{summary}");
    assert_eq!(summary["rebuilds"], 2, "{summary}");
    assert_eq!(summary["flushes"], 1, "{summary}");
    // the failure and the lost node are one failure
    assert_eq!(summary["failures"], 1, "{summary}");
}

#[test]
fn cleaning_up_an_interrupted_relocated_flush_leaves_the_older_checkpoint_of_that_name() {
    let mut c = Cluster::new();
    c.set("SCR_FLUSH", "2");
    let older = crash_a_relocated_flush(&mut c);
    wipe_caches(&c);
    let out = heat(&c, &["--steps", "12", "--cells", "200000"]);
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stderr.contains("cannot be resumed"), "{out}");
    let relocated_after: Vec<_> = files_below(&c.prefix().join(".scr"))
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("/files/"))
        .collect();
    assert!(relocated_after.is_empty(), "{relocated_after:?}");
    no_partial_files(&c.prefix());
    for (r, bytes) in older.iter().enumerate() {
        assert_eq!(
            &std::fs::read(c.prefix().join(format!("ckpt.20/rank_{r}.ckpt"))).unwrap(),
            bytes,
            "rank {r}'s older ckpt.20 changed"
        );
    }
}

#[test]
fn a_resumed_flush_never_writes_over_a_path_a_complete_dataset_owns_now() {
    use scr_host::state::prefix::{self, FlushedFile, IndexEntry, Rank2File};
    let c = interrupted_flush(false);
    // since the crash, a complete dataset (placed by postrun, say) owns rank 0's path
    let owned = c.prefix().join("ckpt.20/rank_0.ckpt");
    let newer = b"a newer dataset's file".to_vec();
    std::fs::write(&owned, &newer).unwrap();
    let entry = IndexEntry {
        id: 99,
        name: "other".into(),
        output: true,
        dir: "scr.dataset.99".into(),
        world_size: 4,
        complete: true,
        ..IndexEntry::default()
    };
    Index::update(&c.prefix(), |ix| {
        ix.datasets.insert(99, entry);
    })
    .unwrap();
    prefix::write(
        &Rank2File::path(&c.prefix(), 99),
        "rank2file",
        &Rank2File {
            ranks: [(
                0,
                vec![FlushedFile {
                    name: "ckpt.20/rank_0.ckpt".into(),
                    size: newer.len() as u64,
                    crc32: Some(crc32fast::hash(&newer)),
                    stored: None,
                }],
            )]
            .into(),
        },
    )
    .unwrap();
    let out = heat(&c, &["--steps", "22", "--cells", "200000"]);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stderr.contains("belongs to a complete dataset now")
            && out
                .stderr
                .contains("ckpt.20 is still in every rank's cache: flushing it again"),
        "{out}"
    );
    assert_eq!(
        std::fs::read(&owned).unwrap(),
        newer,
        "the owned file changed"
    );
    no_partial_files(&c.prefix());
    // flushed again, to the dataset's own directory (its names are taken), and the
    // restart point
    assert_eq!(current(&c).as_deref(), Some("ckpt.20"));
    restarts_from_prefix_with(&c, "ckpt.20", 20, Some(200000));
}

#[test]
fn need_checkpoint_ends_the_run_when_an_admin_halts_it() {
    // the halt lands at a random point of a step; in the rare case it falls between
    // need_checkpoint and should_exit, should_exit sees it first: try again
    for _attempt in 0..5 {
        if let Some(out) = halted_by_need_checkpoint() {
            assert!(
                out.stderr
                    .contains("halting the run: exit reason set: maintenance (halt_exit = true"),
                "{out}"
            );
            assert!(out.line_after("final step ").is_none(), "it ran on\n{out}");
            return;
        }
    }
    panic!("should_exit saw the halt first five times in a row");
}

/// One job halted by `scr halt --reason` while it asks need_checkpoint every step; `None`
/// when should_exit saw the halt first.
fn halted_by_need_checkpoint() -> Option<JobOutput> {
    let mut c = Cluster::new();
    // need_checkpoint alone decides, and says no for 1000 calls: only the halt stops it
    c.set("SCR_HALT_EXIT", "1")
        .set("SCR_CHECKPOINT_INTERVAL", "1000");
    let job = c.spawn(
        TWO_NODES,
        "scr-heat",
        &["--steps", "600", "--need", "--sleep-ms", "50"],
    );
    let log = c.prefix().join(".scr/events.jsonl");
    let start = Instant::now();
    while !std::fs::read_to_string(&log).is_ok_and(|l| l.contains("\"init\"")) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the job did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let halt = Command::new(binary("scr"))
        .args(["halt", "--reason", "maintenance", "--prefix"])
        .arg(c.prefix())
        .output()
        .unwrap();
    assert!(halt.status.success(), "{halt:?}");
    let out = scr_e2e::output_of_child(job);
    assert_eq!(out.code, 0, "{out}");
    assert!(std::fs::read_to_string(&log).unwrap().contains("\"halt\""));
    (!out.stdout.contains("halted at step")).then_some(out)
}

/// A flush the 4-rank job left unfinished is cleaned up by a job of 2 ranks (it cannot
/// resume another job size's transfers), which restarts from the 4-rank job's newest
/// checkpoint in the caches (ckpt.20, whose flush was interrupted) and ends in the state
/// of an uninterrupted 4-rank run.
#[test]
fn an_interrupted_flush_is_cleaned_up_by_a_job_of_another_size_which_restarts_from_the_caches() {
    let c = interrupted_flush(false);
    let two = c.run(
        &["n0", "n1"],
        "scr-heat",
        &["--steps", "22", "--cells", "200000"],
    );
    assert_eq!(two.code, 0, "{two}");
    assert!(
        two.stderr
            .contains("the flush of ckpt.20 that an earlier run left unfinished cannot be resumed"),
        "{two}"
    );
    no_partial_files(&c.prefix());
    for rank in 0..4 {
        assert!(
            !c.prefix()
                .join(format!("ckpt.20/rank_{rank}.ckpt"))
                .exists(),
            "rank {rank}'s file of the interrupted flush is still there"
        );
    }
    assert_eq!(
        two.line_after("restarted from "),
        Some("ckpt.20 at step 20"),
        "{two}"
    );
    assert_eq!(
        two.final_state(),
        scr_e2e::reference_state(4, 22, Some(200000))
    );
}
