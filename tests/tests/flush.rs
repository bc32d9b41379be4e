//! Flush to the prefix and fetch back, end to end: the index, damaged prefix data, a crash
//! in the middle of a flush, and background flushes.

use std::time::{Duration, Instant};

use scr_e2e::{wipe_caches, Cluster, JobOutput, TWO_NODES};
use scr_host::state::prefix::Index;

fn heat(c: &Cluster, args: &[&str]) -> JobOutput {
    c.run(TWO_NODES, "scr-heat", args)
}

fn reference(steps: u64) -> String {
    scr_e2e::reference_state(4, steps, None)
}

/// (name, complete, failed) of every index entry, by dataset id.
fn index(c: &Cluster) -> Vec<(String, bool, Option<String>)> {
    scr_e2e::index_entries(&c.prefix())
}

#[test]
fn every_nth_checkpoint_is_flushed_and_fetched_after_all_caches_are_lost() {
    let mut c = Cluster::new();
    c.set("SCR_FLUSH", "2");
    let first = heat(&c, &["--steps", "22"]);
    assert_eq!(first.code, 0, "{first}");
    assert_eq!(
        index(&c),
        [
            ("ckpt.10".to_string(), true, None),
            ("ckpt.20".to_string(), true, None)
        ]
    );
    for rank in 0..4 {
        assert!(c
            .prefix()
            .join(format!("ckpt.20/rank_{rank}.ckpt"))
            .is_file());
        assert!(!c
            .prefix()
            .join(format!("ckpt.15/rank_{rank}.ckpt"))
            .exists());
    }
    wipe_caches(&c);
    let second = heat(&c, &["--steps", "30"]);
    assert_eq!(second.code, 0, "{second}");
    assert_eq!(
        second.line_after("restarted from "),
        Some("ckpt.20 at step 20"),
        "{second}"
    );
    assert_eq!(second.final_state(), reference(30));
}

#[test]
fn a_flipped_byte_in_the_prefix_is_caught_and_the_previous_checkpoint_is_fetched() {
    let mut c = Cluster::new();
    c.set("SCR_FLUSH", "2");
    assert_eq!(heat(&c, &["--steps", "22"]).code, 0);
    wipe_caches(&c);
    let victim = c.prefix().join("ckpt.20/rank_1.ckpt");
    let mut bytes = std::fs::read(&victim).unwrap();
    bytes[100] ^= 0x01;
    std::fs::write(&victim, &bytes).unwrap();
    let out = heat(&c, &["--steps", "30"]);
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        out.line_after("restarted from "),
        Some("ckpt.10 at step 10"),
        "{out}"
    );
    assert!(out.stderr.contains("ckpt.20 cannot be fetched"), "{out}");
    let entries = index(&c);
    let failed = entries.iter().find(|e| e.0 == "ckpt.20").unwrap();
    let why = failed.2.clone().expect("the index marks the failure");
    assert!(
        why.contains("fetch failed on rank 1") && why.contains("CRC32"),
        "{why}"
    );
    assert_eq!(out.final_state(), reference(30));
}

#[test]
fn a_crash_during_a_flush_leaves_the_index_at_the_previous_checkpoint() {
    let mut c = Cluster::new();
    c.set("SCR_FLUSH", "2");
    assert_eq!(heat(&c, &["--steps", "12"]).code, 0);
    // rank 1 dies after copying its files of the next flush, before it is recorded
    c.set("SCR_FAULT", "flush-copied:1");
    let crashed = heat(&c, &["--steps", "22"]);
    assert_ne!(crashed.code, 0, "{crashed}");
    let entries = index(&c);
    assert!(
        entries.contains(&("ckpt.10".to_string(), true, None)),
        "{entries:?}"
    );
    assert!(
        entries.contains(&("ckpt.20".to_string(), false, None)),
        "{entries:?}"
    );
    let ix = Index::load(&c.prefix()).unwrap();
    assert_eq!(ix.restart_candidates()[0].name, "ckpt.10");
    // with every cache lost, the run fetches the previous complete checkpoint
    c.env.remove("SCR_FAULT");
    wipe_caches(&c);
    let out = heat(&c, &["--steps", "30"]);
    assert_eq!(
        out.line_after("restarted from "),
        Some("ckpt.10 at step 10"),
        "{out}"
    );
    assert_eq!(out.final_state(), reference(30));
}

#[test]
fn a_background_flush_is_recorded_without_a_further_checkpoint() {
    let mut c = Cluster::new();
    c.set("SCR_FLUSH", "1").set("SCR_FLUSH_ASYNC", "1");
    // one checkpoint, at step 5, then 1.5 s more of computing with no checkpoint: the
    // flush is recorded at a should_exit (every step calls it) once every rank's
    // transfer ended
    let mut job = c.spawn(
        TWO_NODES,
        "scr-heat",
        &[
            "--steps",
            "8",
            "--every",
            "5",
            "--sleep-ms",
            "500",
            "--cells",
            "200000",
        ],
    );
    let start = Instant::now();
    let mut seen_while_running = false;
    while start.elapsed() < Duration::from_secs(60) {
        if job.try_wait().unwrap().is_some() {
            break;
        }
        let ix = Index::load(&c.prefix()).unwrap_or_default();
        if ix
            .datasets
            .values()
            .any(|e| e.name == "ckpt.5" && e.complete && e.flushed.is_some())
        {
            seen_while_running = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = job.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        seen_while_running,
        "ckpt.5's flush was recorded only at the end of the job"
    );
    let entries = index(&c);
    assert!(
        entries.iter().all(|e| e.1),
        "finalize waited for every flush: {entries:?}"
    );
}

#[test]
fn output_datasets_are_always_flushed() {
    let c = Cluster::new();
    let out = c.run(TWO_NODES, "scr-probe", &["output-kept"]);
    assert_eq!(out.code, 0, "{out}");
    let ix = Index::load(&c.prefix()).unwrap();
    let e = ix
        .datasets
        .values()
        .find(|e| e.name == "out")
        .expect("the output is indexed");
    assert!(e.output && e.complete, "{e:?}");
    for rank in 0..4 {
        assert_eq!(
            std::fs::read(c.prefix().join(format!("o_{rank}.dat"))).unwrap(),
            b"output"
        );
    }
}

fn scr(c: &Cluster, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(scr_e2e::binary("scr"))
        .args(args)
        .arg("--prefix")
        .arg(c.prefix())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn scr_index_and_flush_file_answer_from_the_prefix() {
    let mut c = Cluster::new();
    c.set("SCR_FLUSH", "2");
    let began = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert_eq!(heat(&c, &["--steps", "22"]).code, 0);
    let (code, list, _) = scr(&c, &["index", "list"]);
    assert_eq!(code, 0);
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(lines.len(), 3, "{list}");
    assert!(
        lines[1].contains("ckpt.10") && lines[1].contains("complete"),
        "{list}"
    );
    assert!(
        lines[2].contains("ckpt.20") && lines[2].ends_with("<- restart"),
        "{list}"
    );
    // who made each, where and when: this job's user and id (no cluster name is known
    // here), created (in UTC) while the job ran
    let head: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        head,
        ["id", "ckpt", "name", "created", "(UTC)", "user", "job", "cluster", "state"],
        "{list}"
    );
    let epoch = |utc: &str| -> u64 {
        let out = std::process::Command::new("date")
            .args(["-u", "-d", utc, "+%s"])
            .output()
            .unwrap();
        assert!(out.status.success(), "not a time: {utc}");
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    for line in &lines[1..] {
        let f: Vec<&str> = line.split_whitespace().collect();
        assert!((began..=now).contains(&epoch(f[3])), "{list}");
        assert_eq!(&f[4..7], [scr_e2e::USER, "e2e", "-"], "{list}");
    }
    assert_eq!(scr(&c, &["index", "current"]).1, "ckpt.20\n");
    let (code, out, _) = scr(&c, &["index", "current", "ckpt.10"]);
    assert_eq!((code, out.as_str()), (0, "restart point set to ckpt.10\n"));
    assert_eq!(scr(&c, &["index", "current"]).1, "ckpt.10\n");
    let (code, _, err) = scr(&c, &["index", "current", "ckpt.15"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("`ckpt.15` is not a complete checkpoint in the index"),
        "{err}"
    );

    // flush file: datasets 2 (ckpt.10) and 4 (ckpt.20) went to the prefix; the cache
    // (count 2) still holds 3 (ckpt.15, never flushed) and 4; 2 was evicted from it
    assert_eq!(scr(&c, &["flush-file", "latest"]).1, "4\n");
    assert_eq!(scr(&c, &["flush-file", "location", "4"]).1, "CACHE PFS\n");
    assert_eq!(scr(&c, &["flush-file", "location", "2"]).1, "PFS\n");
    assert_eq!(scr(&c, &["flush-file", "location", "3"]).1, "CACHE\n");
    assert_eq!(scr(&c, &["flush-file", "subdir", "4"]).1, "scr.dataset.4\n");
    // a yes/no query: 0 "yes", 3 "no" (1 is kept for "cannot tell": invalid input)
    let (code, out, _) = scr(&c, &["flush-file", "need-flush", "3"]);
    assert_eq!((code, out.as_str()), (0, "yes\n"));
    let (code, out, _) = scr(&c, &["flush-file", "need-flush", "4"]);
    assert_eq!((code, out.as_str()), (3, "no\n"));
    let (code, _, err) = scr(&c, &["flush-file", "location", "1"]);
    assert_eq!(code, 1, "dataset 1 was evicted and never flushed: {err}");

    let (code, out, _) = scr(&c, &["index", "drop-after", "ckpt.10", "--delete"]);
    assert_eq!((code, out.as_str()), (0, "dropped ckpt.20\n"));
    assert!(!c.prefix().join("ckpt.20/rank_0.ckpt").exists());
    assert!(c.prefix().join("ckpt.10/rank_0.ckpt").exists());
    let (code, out, _) = scr(&c, &["index", "drop", "ckpt.10"]);
    assert_eq!((code, out.as_str()), (0, "dropped ckpt.10\n"));
    assert_eq!(scr(&c, &["index", "list"]).1.lines().count(), 1);
}

#[test]
fn a_flush_that_cannot_write_fails_cleanly_and_the_run_goes_on() {
    // sync: a file where the checkpoint's prefix directory should be
    let mut c = Cluster::new();
    c.set("SCR_FLUSH", "2");
    std::fs::write(c.prefix().join("ckpt.10"), b"in the way").unwrap();
    let out = heat(&c, &["--steps", "12"]);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stderr
            .contains("ckpt.10 stays in cache only: flush failed on rank"),
        "{out}"
    );
    assert!(index(&c)[0].2.is_some(), "the index marks the failed flush");

    // background: the dataset's directory under `.scr` (its rank2file map and summary)
    // cannot be created, so the copied flush cannot be recorded, at the poll nor again at
    // finalize
    let mut c = Cluster::new();
    c.set("SCR_FLUSH", "2").set("SCR_FLUSH_ASYNC", "1");
    std::fs::create_dir_all(c.prefix().join(".scr")).unwrap();
    std::fs::write(c.prefix().join(".scr/scr.dataset.2"), b"in the way").unwrap();
    let out = heat(&c, &["--steps", "12"]);
    assert_eq!(out.code, 0, "finalize must not wait forever\n{out}");
    assert!(out.stdout.contains("final step 12"), "{out}");
    assert!(
        !out.logged(Some(0), "warning", "ckpt.10 stays in cache only: ")
            .is_empty(),
        "{out}"
    );
    let entries = index(&c);
    assert!(
        entries.iter().any(|e| e.0 == "ckpt.10" && !e.1),
        "ckpt.10 is not recorded complete: {entries:?}"
    );
}

/// A damaged index is not a dead end: the next flush rebuilds it from the summaries and
/// records itself in it.
#[test]
fn a_damaged_index_is_repaired_by_the_next_flush() {
    let mut c = Cluster::new();
    c.set("SCR_FLUSH", "1");
    assert_eq!(heat(&c, &["--steps", "5"]).code, 0);
    let ix = c.prefix().join(".scr/index.scr");
    let mut bytes = std::fs::read(&ix).unwrap();
    bytes.extend_from_slice(b"garbage");
    std::fs::write(&ix, bytes).unwrap();
    let out = heat(&c, &["--steps", "10"]);
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.contains("checkpoint ckpt.10: kept"), "{out}");
    assert!(
        out.stderr.contains("index.scr") && out.stderr.contains("rebuilt from 1 dataset summaries"),
        "{out}"
    );
    assert_eq!(
        index(&c),
        [
            ("ckpt.5".to_string(), true, None),
            ("ckpt.10".to_string(), true, None)
        ]
    );
}

#[test]
fn the_restart_point_follows_new_flushes_and_duplicate_names_need_an_id() {
    let mut c = Cluster::new();
    c.set("SCR_FLUSH", "2");
    assert_eq!(heat(&c, &["--steps", "22"]).code, 0);
    assert_eq!(scr(&c, &["index", "current", "ckpt.10"]).0, 0);
    wipe_caches(&c);
    // restarts from the pinned ckpt.10 and writes ckpt.15 and ckpt.20 again
    let out = heat(&c, &["--steps", "22"]);
    assert_eq!(
        out.line_after("restarted from "),
        Some("ckpt.10 at step 10"),
        "{out}"
    );
    // the new flush moved the restart point on
    assert_eq!(scr(&c, &["index", "current"]).1, "ckpt.20\n");
    let ix = Index::load(&c.prefix()).unwrap();
    let ids: Vec<u64> = ix
        .datasets
        .values()
        .filter(|e| e.name == "ckpt.20")
        .map(|e| e.id)
        .collect();
    assert_eq!(ids.len(), 2, "{ix:?}");
    let (code, _, err) = scr(&c, &["index", "drop", "ckpt.20", "--delete"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("several datasets are named `ckpt.20`"),
        "{err}"
    );
    // the rerun's flush did not overwrite the old files: it went beside them, under
    // .scr; dropping the old one by id deletes only the old files
    let new = scr_host::state::prefix::Rank2File::load(&c.prefix(), ids[1]).unwrap();
    let stored = new.ranks[&0][0].stored_path(&c.prefix()).unwrap();
    assert_ne!(stored, c.prefix().join("ckpt.20/rank_0.ckpt"));
    let (code, out, _) = scr(&c, &["index", "drop", &ids[0].to_string(), "--delete"]);
    assert_eq!((code, out.as_str()), (0, "dropped ckpt.20\n"));
    assert!(!c.prefix().join("ckpt.20/rank_0.ckpt").exists());
    assert!(stored.is_file(), "a file the new ckpt.20 lists was deleted");
    // and the new ckpt.20 is still what a restart fetches
    wipe_caches(&c);
    let out = heat(&c, &["--steps", "30"]);
    assert_eq!(
        out.line_after("restarted from "),
        Some("ckpt.20 at step 20"),
        "{out}"
    );
    assert_eq!(out.final_state(), reference(30));
}

/// `scr index drop --delete` deletes what rank2file lists, so a forged or damaged map
/// naming a file outside the prefix (absolute, or through `..`) must not reach it: that
/// entry is refused with a message and the file stays.
#[test]
fn index_drop_delete_never_follows_a_name_out_of_the_prefix() {
    use scr_host::state::prefix::{self, FlushedFile, Rank2File};
    let mut c = Cluster::new();
    c.set("SCR_FLUSH", "2");
    assert_eq!(heat(&c, &["--steps", "12"]).code, 0);
    let id = Index::load(&c.prefix())
        .unwrap()
        .datasets
        .values()
        .find(|e| e.name == "ckpt.10")
        .expect("ckpt.10 flushed")
        .id;
    let victim = c.path("outside.dat");
    std::fs::write(&victim, b"not the library's").unwrap();
    let mut map = Rank2File::load(&c.prefix(), id).unwrap();
    let forged = [
        victim.display().to_string(),
        "../outside.dat".to_string(),
        "ckpt.10/../../outside.dat".to_string(),
    ];
    for name in &forged {
        map.ranks.entry(0).or_default().push(FlushedFile {
            name: name.clone(),
            size: 17,
            ..FlushedFile::default()
        });
    }
    prefix::write(&Rank2File::path(&c.prefix(), id), "rank2file", &map).unwrap();
    let (code, out, err) = scr(&c, &["index", "drop", "ckpt.10", "--delete"]);
    assert_eq!((code, out.as_str()), (0, "dropped ckpt.10\n"), "{err}");
    assert_eq!(std::fs::read(&victim).unwrap(), b"not the library's");
    assert_eq!(err.matches("not deleted").count(), forged.len(), "{err}");
    // the genuine files are gone
    assert!(!c.prefix().join("ckpt.10/rank_0.ckpt").exists());
}
