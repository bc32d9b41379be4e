//! A restart on another number of ranks than wrote the checkpoint, under mpiexec: the
//! heat example written by 8 ranks on 4 simulated nodes and restarted by 3, 4, 6, 12 and
//! 16 through one unchanged restart loop (`restart_writers`, `restart_files`,
//! `route_file`), each ending in the state of an uninterrupted 8-rank run; and the same
//! through the C API (tests/c/resize.c), from the prefix and from surviving caches.

use std::path::{Path, PathBuf};

use scr_e2e::{
    assert_all_ok, build_against_libscr as build, c_source, files_below, lines_of, Cluster,
    JobOutput,
};

/// tests/c/resize.c built against libscr into `dir`.
fn resize_c(dir: &Path) -> PathBuf {
    build("mpicc", &c_source("resize.c"), dir)
}

/// Ranks on four simulated nodes, consecutive ranks on one node.
fn on_four_nodes(ranks: usize) -> Vec<&'static str> {
    const NODES: [&str; 4] = ["n0", "n1", "n2", "n3"];
    (0..ranks).map(|r| NODES[r * 4 / ranks]).collect()
}

fn heat(c: &Cluster, ranks: usize, args: &[&str]) -> JobOutput {
    let out = c.run(&on_four_nodes(ranks), "scr-heat", args);
    assert_eq!(out.code, 0, "{out}");
    out
}

#[test]
fn heat_written_by_eight_ranks_restarts_on_three_four_six_twelve_and_sixteen() {
    let reference = heat(&Cluster::new(), 8, &["--steps", "14", "--every", "0"]);
    let c = Cluster::new();
    let first = heat(&c, 8, &["--steps", "10"]);
    assert!(first.stdout.contains("checkpoint ckpt.10: kept"), "{first}");
    for m in [3, 4, 6, 12, 16] {
        // no checkpoint of its own: each restarts from the 8-rank one
        let out = heat(&c, m, &["--steps", "14", "--every", "0"]);
        assert_eq!(
            out.line_after("restarted from "),
            Some("ckpt.10 at step 10"),
            "{m} ranks\n{out}"
        );
        assert_eq!(
            out.final_state(),
            reference.final_state(),
            "{m} ranks\n{out}"
        );
    }
}

/// With nothing flushed (flush = 0) and the 8-rank job's caches surviving, 12 ranks on
/// the same 4 nodes and 4 ranks placed on them in reverse restart from those caches
/// alone, each reading the old slices its share overlaps, and end in the state of an
/// uninterrupted 8-rank run.
#[test]
fn heat_restarts_on_twelve_and_on_four_ranks_from_the_old_jobs_caches() {
    let reference = heat(&Cluster::new(), 8, &["--steps", "14", "--every", "0"]);
    let mut c = Cluster::new();
    c.set("SCR_FLUSH", "0");
    let first = heat(&c, 8, &["--steps", "10"]);
    assert!(first.stdout.contains("checkpoint ckpt.10: kept"), "{first}");
    for nodes in [on_four_nodes(12), vec!["n3", "n2", "n1", "n0"]] {
        let m = nodes.len();
        let out = c.run(&nodes, "scr-heat", &["--steps", "14", "--every", "0"]);
        assert_eq!(out.code, 0, "{m} ranks\n{out}");
        assert_eq!(
            out.line_after("restarted from "),
            Some("ckpt.10 at step 10"),
            "{m} ranks\n{out}"
        );
        assert_eq!(
            out.final_state(),
            reference.final_state(),
            "{m} ranks\n{out}"
        );
    }
    assert!(
        scr_e2e::index_entries(&c.prefix()).is_empty(),
        "nothing was flushed"
    );
}

/// Node n3 of the 8-rank job lost with its cache, nothing flushed: 6 ranks on the three
/// nodes left rebuild old ranks 6 and 7 through XOR in the old sets' geometry, read their
/// shares from the caches, and end in the state of an uninterrupted 8-rank run.
#[test]
fn heat_on_six_ranks_rebuilds_a_lost_nodes_old_ranks_then_restarts_from_the_caches() {
    let reference = heat(&Cluster::new(), 8, &["--steps", "14", "--every", "0"]);
    let mut c = Cluster::new();
    c.set("SCR_FLUSH", "0").set("SCR_COPY_TYPE", "XOR");
    let first = heat(&c, 8, &["--steps", "10"]);
    assert!(first.stdout.contains("checkpoint ckpt.10: kept"), "{first}");
    c.lose_node("n3");
    let six = ["n0", "n0", "n1", "n1", "n2", "n2"];
    let out = c.run(&six, "scr-heat", &["--steps", "14", "--every", "0"]);
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        out.line_after("restarted from "),
        Some("ckpt.10 at step 10"),
        "{out}"
    );
    assert_eq!(out.final_state(), reference.final_state(), "{out}");
    assert!(
        scr_e2e::index_entries(&c.prefix()).is_empty(),
        "nothing was flushed"
    );
}

/// Back and forth in one allocation, nothing flushed: 8 ranks checkpoint, 4 ranks restart
/// from their caches and checkpoint on, then 8 ranks again restart from the 4-rank job's
/// newest checkpoint (not from their own older one, which the caches hold too), and end
/// in the state of an uninterrupted run.
#[test]
fn eight_then_four_then_eight_ranks_each_restart_from_the_newest_checkpoint_in_the_caches() {
    let reference = heat(&Cluster::new(), 8, &["--steps", "24", "--every", "0"]);
    let mut c = Cluster::new();
    // room for every checkpoint: the 8-rank job's own ckpt.10 stays cached beside ckpt.20
    c.set("SCR_FLUSH", "0").set("SCR_CACHE_SIZE", "6");
    let first = heat(&c, 8, &["--steps", "10"]);
    assert!(first.stdout.contains("checkpoint ckpt.10: kept"), "{first}");
    let four = heat(&c, 4, &["--steps", "20"]);
    assert_eq!(
        four.line_after("restarted from "),
        Some("ckpt.10 at step 10"),
        "{four}"
    );
    assert!(four.stdout.contains("checkpoint ckpt.20: kept"), "{four}");
    let eight = heat(&c, 8, &["--steps", "24", "--every", "0"]);
    assert_eq!(
        eight.line_after("restarted from "),
        Some("ckpt.20 at step 20"),
        "{eight}"
    );
    assert_eq!(eight.final_state(), reference.final_state(), "{eight}");
}

/// `scr index import` on `c`'s prefix with `args`; its output.
fn import(c: &Cluster, args: &[&str]) -> JobOutput {
    let out = c.scr(&["index", "import"]).args(args).output().unwrap();
    JobOutput {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A directory `ckpt.10` in `c`'s prefix holding the files of a 4-rank heat checkpoint
/// at step 10, as plain files: copied out of another prefix, never seen by `c`.
fn plain_checkpoint(c: &Cluster) -> std::path::PathBuf {
    let source = Cluster::new();
    let wrote = heat(&source, 4, &["--steps", "10"]);
    assert!(wrote.stdout.contains("checkpoint ckpt.10: kept"), "{wrote}");
    let dir = c.prefix().join("ckpt.10");
    std::fs::create_dir_all(&dir).unwrap();
    for r in 0..4 {
        let name = format!("rank_{r}.ckpt");
        std::fs::copy(source.prefix().join("ckpt.10").join(&name), dir.join(&name)).unwrap();
    }
    dir
}

/// Files that were not written through the library, imported with `scr index import`:
/// a job of 6 ranks restarts from them (its share of the 4 old slices), checkpoints on,
/// and ends in the state of an uninterrupted run; a later job restarts from its own
/// checkpoint.
#[test]
fn imported_files_are_restarted_from_by_any_number_of_ranks_and_the_job_goes_on() {
    let c = Cluster::new();
    let dir = plain_checkpoint(&c);
    let out = import(&c, &[dir.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        out.stdout,
        "imported ckpt.10 (dataset 1, checkpoint 1, written by 4 ranks), restart point\n",
        "{out}"
    );
    let reference = heat(&Cluster::new(), 4, &["--steps", "20", "--every", "0"]);
    let six = heat(&c, 6, &["--steps", "20"]);
    assert_eq!(
        six.line_after("restarted from "),
        Some("ckpt.10 at step 10"),
        "{six}"
    );
    assert!(six.stdout.contains("checkpoint ckpt.20: kept"), "{six}");
    assert_eq!(six.final_state(), reference.final_state(), "{six}");
    let again = heat(&c, 6, &["--steps", "20"]);
    assert_eq!(
        again.line_after("restarted from "),
        Some("ckpt.20 at step 20"),
        "{again}"
    );
}

/// An imported file changed afterwards is refused by name at the restart, on every rank
/// alike (the job starts fresh); a list naming a missing file imports nothing, naming it.
#[test]
fn a_corrupted_or_missing_imported_file_is_refused_by_name() {
    let c = Cluster::new();
    let dir = plain_checkpoint(&c);
    // a list naming a file that is not there
    let list = c.path("ranks.txt");
    std::fs::write(
        &list,
        "# rank path\n0 rank_0.ckpt\n1 rank_1.ckpt\n2 rank_2.ckpt\n3 rank_9.ckpt\n",
    )
    .unwrap();
    let missing = import(
        &c,
        &[dir.to_str().unwrap(), "--list", list.to_str().unwrap()],
    );
    assert_eq!(missing.code, 1, "{missing}");
    assert!(
        missing.stderr.contains(&format!(
            "{}: No such file or directory (os error 2); nothing is imported",
            dir.join("rank_9.ckpt").display()
        )),
        "{missing}"
    );
    assert!(scr_e2e::index_entries(&c.prefix()).is_empty());
    // imported through a list, then one byte changed
    std::fs::write(
        &list,
        "0 rank_0.ckpt\n1 rank_1.ckpt\n2 rank_2.ckpt\n3 rank_3.ckpt\n",
    )
    .unwrap();
    let out = import(
        &c,
        &[dir.to_str().unwrap(), "--list", list.to_str().unwrap()],
    );
    assert_eq!(out.code, 0, "{out}");
    let damaged = dir.join("rank_2.ckpt");
    let mut bytes = std::fs::read(&damaged).unwrap();
    bytes[100] ^= 1;
    std::fs::write(&damaged, &bytes).unwrap();
    let run = heat(&c, 3, &["--steps", "12", "--every", "0"]);
    assert!(run.stdout.contains("starting fresh"), "{run}");
    assert!(
        run.stderr
            .contains(&format!("{} has CRC32", damaged.display())),
        "{run}"
    );
    let entries = scr_e2e::index_entries(&c.prefix());
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert!(entries[0].2.is_some(), "marked failed: {entries:?}");
}

/// A checkpoint written by 8 ranks on 4 nodes, restarted by 3, 4, 6, 12 and 16 through
/// one unchanged C restart loop (tests/c/resize.c): every rank lists every old rank's
/// files with the scr-rs extensions, routes and reads each, byte-exact; the old job's
/// cached datasets are not restored by another number of ranks, so every file comes
/// from the prefix. A job of 8 again restarts from cache, each rank listing its own file.
#[test]
fn a_checkpoint_of_eight_ranks_restarts_on_any_number_through_the_c_api() {
    let work = tempfile::tempdir().unwrap();
    let exe = resize_c(work.path());
    let c = Cluster::for_installed();
    let wrote = c.run_path(&on_four_nodes(8), &exe, &["write", "1"]);
    assert_all_ok(&wrote, 8);
    for m in [3usize, 4, 6, 12, 16] {
        let out = c.run_path(&on_four_nodes(m), &exe, &["read"]);
        assert_all_ok(&out, m);
        for r in 0..m {
            assert_eq!(
                lines_of(&out, r),
                ["restarted ckpt.1 writers 8 files 8 exact"],
                "{m} ranks, rank {r}\n{out}"
            );
        }
    }
    // the same size: its own file only (the others' lists were never exchanged)
    let same = c.run_path(&on_four_nodes(8), &exe, &["read"]);
    assert_eq!(same.code, 1, "{same}");
    for r in 0..8 {
        assert_eq!(
            lines_of(&same, r),
            ["FAILED restart_num_files"],
            "rank {r}\n{same}"
        );
    }
    assert!(
        same.stderr.contains(
            "SCR_Restart_num_files: restart_files: rank 0 reads back its own files only: the checkpoint was written by as many ranks as this job has (8)"
        ),
        "{same}"
    );
}

/// With the old job's caches surviving and nothing flushed (flush = 0), a checkpoint of
/// 8 ranks on 4 nodes restarts 4 ranks placed on the nodes in reverse and 12 ranks (3 per
/// node): each reads its share of the old ranks' files byte-exact from the caches,
/// copied from the node that holds them where it runs elsewhere, with nothing in the
/// prefix to read. Then flushed as well, with every byte of the prefix's copy damaged: the
/// restart reads the caches' copy (no byte of the prefix's, which would fail its check).
#[test]
fn with_the_caches_surviving_a_checkpoint_of_eight_ranks_restarts_on_four_and_twelve_from_cache() {
    let work = tempfile::tempdir().unwrap();
    let exe = resize_c(work.path());
    let mut c = Cluster::for_installed();
    c.set("SCR_FLUSH", "0");
    let wrote = c.run_path(&on_four_nodes(8), &exe, &["write", "1", "share"]);
    assert_all_ok(&wrote, 8);
    let reversed = ["n3", "n2", "n1", "n0"];
    for nodes in [reversed.to_vec(), on_four_nodes(12)] {
        let m = nodes.len();
        let out = c.run_path(&nodes, &exe, &["read", "share"]);
        assert_all_ok(&out, m);
        for r in 0..m {
            let lines = lines_of(&out, r);
            assert_eq!(lines.len(), 1, "{m} ranks, rank {r}\n{out}");
            assert!(
                lines[0].starts_with("restarted ckpt.1 writers 8 files ")
                    && lines[0].ends_with(" exact from cache"),
                "{m} ranks, rank {r}: {lines:?}\n{out}"
            );
        }
    }
    assert!(
        scr_e2e::index_entries(&c.prefix()).is_empty(),
        "nothing was flushed"
    );

    // flushed too, but every byte of the prefix's copy is damaged: a restart that read
    // any of it would fail its check; the caches' copy is read, and it is exact
    let mut c = Cluster::for_installed();
    c.set("SCR_FLUSH", "1");
    let wrote = c.run_path(&on_four_nodes(8), &exe, &["write", "1", "share"]);
    assert_all_ok(&wrote, 8);
    let flushed: Vec<PathBuf> = files_below(&c.prefix().join("ckpt.1"));
    assert_eq!(flushed.len(), 8, "{flushed:?}");
    for f in &flushed {
        let mut bytes = std::fs::read(f).unwrap();
        for b in bytes.iter_mut() {
            *b ^= 0xff;
        }
        std::fs::write(f, &bytes).unwrap();
    }
    let out = c.run_path(&reversed, &exe, &["read", "share"]);
    assert_all_ok(&out, 4);
    for r in 0..4 {
        assert_eq!(
            lines_of(&out, r),
            ["restarted ckpt.1 writers 8 files 2 exact from cache"],
            "rank {r}\n{out}"
        );
    }
}
