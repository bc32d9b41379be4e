//! `flush_width` and `fetch_width` under `mpiexec`: the ranks copying to (reading from)
//! the prefix at once, counted by the runtime's window gauge (`SCR_TEST_WINDOW`: a file
//! updated under a lock as each rank enters and leaves the window), never exceed the
//! width; the restart from the prefix is still byte-exact; one rank's failed transfer
//! under a narrow window hangs no rank and fails the flush alike on every rank; a
//! background flush keeps the width too.

use scr_e2e::{wipe_caches, Cluster, JobOutput};

/// Four ranks on four simulated nodes (one rank per node, so every rank copies its own
/// files through its own node's cache).
const FOUR_NODES: &[&str] = &["n0", "n1", "n2", "n3"];

/// The counts the gauge kept in `dir/what`: (inside now, most inside at once, entries).
fn gauge(c: &Cluster, what: &str) -> (i64, i64, i64) {
    let path = c.path("gauge").join(what);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (did the window count?)", path.display()));
    let n: Vec<i64> = text
        .split_whitespace()
        .map(|w| w.parse().unwrap())
        .collect();
    (n[0], n[1], n[2])
}

/// A cluster whose jobs flush every other checkpoint with windows of `flush` and `fetch`
/// ranks, each rank staying `hold_ms` inside a window (so ranks let in together overlap).
fn cluster(flush: u32, fetch: u32, hold_ms: u32) -> Cluster {
    let mut c = Cluster::new();
    std::fs::create_dir(c.path("gauge")).unwrap();
    let spec = format!("{}:{hold_ms}", c.path("gauge").display());
    c.set("SCR_FLUSH", "2")
        .set("SCR_FLUSH_WIDTH", &flush.to_string())
        .set("SCR_FETCH_WIDTH", &fetch.to_string())
        .set("SCR_TEST_WINDOW", &spec);
    c
}

fn heat(c: &Cluster, steps: &str) -> JobOutput {
    // `Cluster::run` checks scr-heat's `ranks N` line: the world has 4 ranks
    let out = c.run(FOUR_NODES, "scr-heat", &["--steps", steps]);
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(out.line_after("ranks "), Some("4"), "{out}");
    out
}

/// The last two rows flush in the background (`flush_async`): there the window moves by
/// MPI reductions at the library's calls instead of messages between ranks, under the
/// same bound.
#[test]
fn the_width_bounds_the_ranks_at_the_prefix_and_the_restart_is_byte_exact() {
    for (flush, fetch, background) in [
        (1, 2, false),
        (2, 1, false),
        (256, 256, false),
        (1, 4, true),
        (4, 4, true),
    ] {
        let mut c = cluster(flush, fetch, 60);
        if background {
            c.set("SCR_FLUSH_ASYNC", "1");
        }
        heat(&c, "22");
        // ckpt.10 and ckpt.20 flushed: two windows of 4 ranks each
        let (now, most, entries) = gauge(&c, "flush");
        assert_eq!((now, entries), (0, 8), "flush_width {flush}");
        assert!(
            most >= 1 && most <= i64::from(flush),
            "flush_width {flush}: {most}"
        );
        if flush >= 4 {
            assert!(most > 1, "flush_width {flush} over 4 ranks: {most} at once");
        }
        let entries = scr_e2e::index_entries(&c.prefix());
        assert_eq!(
            entries,
            [
                ("ckpt.10".to_string(), true, None),
                ("ckpt.20".to_string(), true, None)
            ],
            "flush_width {flush}"
        );

        wipe_caches(&c);
        let out = heat(&c, "30");
        assert_eq!(
            out.line_after("restarted from "),
            Some("ckpt.20 at step 20"),
            "{out}"
        );
        // byte-exact: the heat state after the fetched restart is the uninterrupted run's
        assert_eq!(out.final_state(), scr_e2e::reference_state(4, 30, None));
        let (now, most, entries) = gauge(&c, "fetch");
        assert_eq!((now, entries), (0, 4), "fetch_width {fetch}");
        assert!(
            most >= 1 && most <= i64::from(fetch),
            "fetch_width {fetch}: {most}"
        );
        if fetch >= 4 {
            assert!(most > 1, "fetch_width {fetch} over 4 ranks: {most} at once");
        }
        // the second run's flushes (and finalize's) stayed within the width too
        let (_, most, _) = gauge(&c, "flush");
        assert!(most <= i64::from(flush), "flush_width {flush}: {most}");
    }
}

#[test]
fn a_failed_transfer_under_width_one_hangs_no_rank_and_fails_the_flush_on_every_rank() {
    let mut c = cluster(1, 1, 10);
    // every checkpoint flushed; rank 1's part of the flush of ckpt.1 (dataset 1) fails
    // before it copies: ranks 2 and 3 wait for the turn rank 1 passes on
    c.set("SCR_FLUSH", "1")
        .set("SCR_FAULT", "flush-transfer:1:1");
    let out = c.run(FOUR_NODES, "scr-probe", &["checkpoints", "2"]);
    assert_eq!(out.code, 0, "{out}");
    // every rank returned, and returned the same: both checkpoints kept (a failed flush
    // is a warning), the newest the restart candidate
    for (rank, report) in c.probe_reports(4).iter().enumerate() {
        assert_eq!(
            report, "world 4\nckpt.1 kept true\nckpt.2 kept true\ncandidate Some(\"ckpt.2\")\n",
            "rank {rank}"
        );
    }
    let warned = out.logged(Some(0), "warning", "ckpt.1 stays in cache only");
    assert_eq!(warned.len(), 1, "{out}");
    assert!(
        warned[0].contains("flush failed on rank 1")
            && warned[0].contains("injected failure (flush-transfer:1:1)"),
        "{}",
        warned[0]
    );
    // the index: ckpt.1 failed (naming rank 1), ckpt.2 flushed
    let entries = scr_e2e::index_entries(&c.prefix());
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert_eq!((entries[0].0.as_str(), entries[0].1), ("ckpt.1", false));
    assert!(
        entries[0]
            .2
            .as_deref()
            .is_some_and(|why| why.contains("flush failed on rank 1")),
        "{entries:?}"
    );
    assert_eq!(entries[1], ("ckpt.2".to_string(), true, None));
    // both flushes passed through the window on every rank, one rank at a time
    assert_eq!(gauge(&c, "flush"), (0, 1, 8));
    // nothing of the failed flush stays in the prefix
    for r in 0..4 {
        assert!(!c.prefix().join(format!("ckpt.1/rank_{r}.dat")).exists());
    }

    // every cache lost: ckpt.2 is fetched (one rank at a time) and restarts byte-exact
    wipe_caches(&c);
    c.env.remove("SCR_FAULT");
    let again = c.run(FOUR_NODES, "scr-probe", &["restart-check"]);
    assert_eq!(again.code, 0, "{again}");
    for (rank, report) in c.probe_reports(4).iter().enumerate() {
        assert_eq!(
            report, "world 4\nrestarted ckpt.2 byte-exact true\ncomplete true\n",
            "rank {rank}"
        );
    }
    assert_eq!(gauge(&c, "fetch"), (0, 1, 4));
}
