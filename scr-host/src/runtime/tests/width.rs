//! `flush_width` and `fetch_width`: no more ranks than the width copy to or read from the
//! prefix at once (counted by the window gauge, `SCR_TEST_WINDOW`), a failed transfer
//! passes the turn on, and a background flush is windowed by agreement at the polls.

use super::*;

/// What the window gauge (`SCR_TEST_WINDOW`) of `dir` counted in `what` (`flush`,
/// `fetch`): (inside now, most inside at once, entries).
fn gauge(dir: &Path, what: &str) -> (i64, i64, i64) {
    let path = dir.join(what);
    window::read_counts(&path).unwrap_or_else(|| panic!("{} holds no counts", path.display()))
}

/// A window gauge in `dir/gauge` whose ranks stay `hold_ms` inside the window: the
/// directory, and the `SCR_TEST_WINDOW` value that turns it on.
fn window_gauge(dir: &Path, hold_ms: u32) -> (PathBuf, String) {
    let counts = dir.join("gauge");
    std::fs::create_dir_all(&counts).unwrap();
    let spec = format!("{}:{hold_ms}", counts.display());
    (counts, spec)
}

/// The flush of `ckpt.1` went through a window of `width` over 4 ranks (the gauge in
/// `counts`: every rank entered once, never more than the width at once, more than one
/// when the width allows) and is the prefix's restart point, byte-exact.
fn assert_flushed_within(counts: &Path, prefix: &Path, width: u32) {
    let (now, most, entries) = gauge(counts, "flush");
    assert_eq!(
        (now, entries),
        (0, 4),
        "width {width}: one flush of 4 ranks"
    );
    assert!(
        most >= 1 && most <= i64::from(width),
        "width {width}: {most} at once"
    );
    if width >= 4 {
        assert!(most > 1, "width {width} >= 4 ranks: only {most} at once");
    }
    let index = crate::state::prefix::Index::load(prefix).unwrap();
    assert_eq!(index.restart_point().as_deref(), Some("ckpt.1"));
    for r in 0..4u32 {
        let flushed = std::fs::read(prefix.join(format!("rank_{r}.dat"))).unwrap();
        assert!(
            flushed == content(r, 1),
            "width {width}: rank {r}'s flushed file"
        );
    }
}

/// Write checkpoint `name` with this rank's `content(rank, step)` in `rank_<r>.dat`.
fn write_content(rt: &mut Runtime, dir: &Path, name: &str, step: u32, r: u32) -> Result<bool> {
    rt.start_output(name, CHECKPOINT)?;
    let p = rt.route_file(&dir.join("prefix").join(format!("rank_{r}.dat")))?;
    std::fs::write(&p, content(r, step)).map_err(io_err(&p))?;
    rt.complete_output(true)
}

/// Read back the restart this runtime offers: its name and whether this rank's file is
/// byte-exact.
fn read_restart(rt: &mut Runtime, dir: &Path, r: u32) -> String {
    let Some(name) = rt.have_restart() else {
        return "no restart".into();
    };
    rt.start_restart().expect("start_restart");
    let path = rt
        .route_file(&dir.join("prefix").join(format!("rank_{r}.dat")))
        .expect("route_file");
    let step: u32 = name.trim_start_matches("ckpt.").parse().unwrap();
    let exact = std::fs::read(&path).is_ok_and(|b| b == content(r, step));
    rt.complete_restart(exact).expect("complete_restart");
    format!("{name} byte-exact {exact}")
}

/// `flush_width` and `fetch_width` bound the ranks copying to and reading from the
/// prefix at once, counted by the window gauge (each rank stays 100 ms inside, so ranks
/// let in together are seen together): never more than the width, and more than one when
/// the width allows it (the window is what limits). The flushed files are byte-exact in
/// the prefix, and a restart with every cache lost fetches them (or, with `fetch =
/// false`, reads them in place) byte-exact, under the same bound.
#[test]
fn no_more_ranks_than_the_width_copy_to_or_read_from_the_prefix_at_once() {
    let nodes = ["n0", "n1", "n2", "n3"];
    for width in [1u32, 2, 4, 256] {
        for fetch in ["1", "0"] {
            let dir = tempfile::tempdir().unwrap();
            let prefix = dir.path().join("prefix");
            let (counts, spec) = window_gauge(dir.path(), 100);
            let w = width.to_string();
            let env = [
                ("SCR_COPY_TYPE", "SINGLE"),
                ("SCR_FLUSH", "1"),
                ("SCR_FLUSH_WIDTH", w.as_str()),
                ("SCR_FETCH_WIDTH", w.as_str()),
                ("SCR_FETCH", fetch),
                ("SCR_TEST_WINDOW", spec.as_str()),
            ];
            let wrote = job(dir.path(), &nodes, &env, |rt, r| {
                show("ckpt.1", write_content(rt, dir.path(), "ckpt.1", 1, r))
            });
            for (r, (line, end)) in wrote.iter().enumerate() {
                assert_eq!(line, "ckpt.1: ok true", "width {width}, rank {r}");
                assert_eq!(end, &Ok(()), "width {width}, rank {r}");
            }
            assert_flushed_within(&counts, &prefix, width);

            // every cache lost: the restart comes from the prefix
            for base in ["cache", "cntl"] {
                std::fs::remove_dir_all(dir.path().join(base)).unwrap();
            }
            let read = job(dir.path(), &nodes, &env, |rt, r| {
                read_restart(rt, dir.path(), r)
            });
            for (r, (line, end)) in read.iter().enumerate() {
                assert_eq!(
                    line, "ckpt.1 byte-exact true",
                    "width {width}, fetch {fetch}, rank {r}"
                );
                assert_eq!(end, &Ok(()), "width {width}, fetch {fetch}, rank {r}");
            }
            let (now, most, entries) = gauge(&counts, "fetch");
            assert_eq!((now, entries), (0, 4), "width {width}, fetch {fetch}");
            assert!(
                most >= 1 && most <= i64::from(width),
                "width {width}, fetch {fetch}: {most} at once"
            );
            if width >= 4 {
                assert!(
                    most > 1,
                    "width {width}, fetch {fetch}: only {most} at once"
                );
            }
            // the restart wrote nothing to the prefix: no second flush was counted
            assert_eq!(gauge(&counts, "flush").2, 4, "width {width}, fetch {fetch}");
        }
    }
}

/// One rank's transfer fails (injected on rank 1, width 1, so ranks 2 and 3 wait for
/// its turn): no rank hangs, every rank completes the checkpoint and returns the same
/// outcome of its flush (not flushed: the dataset stays in cache on every rank, none may
/// evict it as flushed), rank 0 logs the failure naming rank 1, and the index marks it
/// failed; the next flush goes through the window again and is recorded on every rank.
#[test]
fn a_failed_transfer_under_a_narrow_window_passes_the_turn_on_and_fails_alike_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["n0", "n1", "n2", "n3"];
    let prefix = dir.path().join("prefix");
    let (counts, spec) = window_gauge(dir.path(), 20);
    let env = [
        ("SCR_COPY_TYPE", "SINGLE"),
        ("SCR_FLUSH", "1"),
        ("SCR_FLUSH_WIDTH", "1"),
        ("SCR_FAULT", "flush-transfer:1:1"),
        ("SCR_TEST_WINDOW", spec.as_str()),
    ];
    let flushed = |rt: &Runtime, id: u64| rt.flushing.flushed().contains(&id);
    let out = job_logged(dir.path(), &nodes, &env, |rt, r| {
        vec![
            show("ckpt.1", write_content(rt, dir.path(), "ckpt.1", 1, r)),
            format!("ckpt.1 flushed {}", flushed(rt, 1)),
            format!("candidate {:?}", rt.have_restart()),
            show("ckpt.2", write_content(rt, dir.path(), "ckpt.2", 2, r)),
            format!("ckpt.2 flushed {}", flushed(rt, 2)),
        ]
    });
    for (r, (lines, end, _)) in out.iter().enumerate() {
        assert_eq!(
            lines,
            &[
                "ckpt.1: ok true",
                "ckpt.1 flushed false",
                "candidate Some(\"ckpt.1\")",
                "ckpt.2: ok true",
                "ckpt.2 flushed true"
            ],
            "rank {r}"
        );
        assert_eq!(end, &Ok(()), "rank {r}");
    }
    let log = &out[0].2;
    let failed: Vec<&String> = log
        .iter()
        .filter(|l| l.contains("ckpt.1 stays in cache only"))
        .collect();
    assert_eq!(failed.len(), 1, "{log:?}");
    assert!(
        failed[0].contains("flush failed on rank 1")
            && failed[0].contains("injected failure (flush-transfer:1:1)"),
        "{}",
        failed[0]
    );
    let index = crate::state::prefix::Index::load(&prefix).unwrap();
    let why = index.datasets[&1].failed.clone().unwrap_or_default();
    assert!(why.contains("flush failed on rank 1"), "{why}");
    assert_eq!(index.restart_point().as_deref(), Some("ckpt.2"));
    for r in 0..4u32 {
        let flushed = std::fs::read(prefix.join(format!("rank_{r}.dat"))).unwrap();
        assert!(flushed == content(r, 2), "rank {r}'s ckpt.2 in the prefix");
    }
    // both flushes went through the window on every rank, one rank at a time
    assert_eq!(gauge(&counts, "flush"), (0, 1, 8));
}

/// A background flush (`flush_async`) is bounded by `flush_width` too: with width 1 or
/// 2 over 4 ranks, no more ranks than the width copy at once (each stays 20 ms inside)
/// and with width 4 more than one does. The window moves at the calls that poll
/// background flushes: the flush is recorded, byte-exact, before finalize, by
/// `need_checkpoint` alone (the same number of calls on every rank, agreed by a
/// reduction each), and the job's finalize then has nothing left to wait for.
#[test]
fn a_background_flush_is_bounded_by_the_width_and_moves_at_polls() {
    let nodes = ["n0", "n1", "n2", "n3"];
    for width in [1u32, 2, 4] {
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path().join("prefix");
        let (counts, spec) = window_gauge(dir.path(), 20);
        let w = width.to_string();
        let env = [
            ("SCR_COPY_TYPE", "SINGLE"),
            ("SCR_FLUSH", "1"),
            ("SCR_FLUSH_ASYNC", "1"),
            ("SCR_FLUSH_WIDTH", w.as_str()),
            ("SCR_TEST_WINDOW", spec.as_str()),
        ];
        let out = job(dir.path(), &nodes, &env, |rt, r| {
            let wrote = show("ckpt.1", write_content(rt, dir.path(), "ckpt.1", 1, r));
            // poll until the index holds it on rank 0, told to every rank by one byte
            let mut polls = 0;
            let recorded = loop {
                rt.need_checkpoint().unwrap();
                polls += 1;
                let here = r == 0
                    && crate::state::prefix::Index::load(&prefix)
                        .is_ok_and(|i| i.restart_point().as_deref() == Some("ckpt.1"));
                if rt.world.broadcast_bytes(if here { b"1" } else { b"" }) == b"1" || polls == 500 {
                    break polls < 500;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            };
            format!(
                "{wrote}; recorded before finalize {recorded}; running {}",
                rt.flushes_running_here()
            )
        });
        for (r, (line, end)) in out.iter().enumerate() {
            assert_eq!(
                line, "ckpt.1: ok true; recorded before finalize true; running 0",
                "width {width}, rank {r}"
            );
            assert_eq!(end, &Ok(()), "width {width}, rank {r}");
        }
        assert_flushed_within(&counts, &prefix, width);
    }
}

/// Two background flushes with a narrow window (width 1): no more than one rank copies
/// at once across both, whether the second checkpoint's start must evict the first
/// (`cache_size = 1`: it waits for the first flush, driving its window to the end) or
/// not (`cache_size = 2`: the second flush waits behind the first's window); finalize
/// drives what is left to its end, and both are recorded byte-exact.
#[test]
fn two_narrow_background_windows_never_copy_more_than_the_width() {
    let nodes = ["n0", "n1", "n2", "n3"];
    for cache_size in ["1", "2"] {
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path().join("prefix");
        let (counts, spec) = window_gauge(dir.path(), 20);
        let env = [
            ("SCR_COPY_TYPE", "SINGLE"),
            ("SCR_FLUSH", "1"),
            ("SCR_FLUSH_ASYNC", "1"),
            ("SCR_FLUSH_WIDTH", "1"),
            ("SCR_CACHE_SIZE", cache_size),
            ("SCR_TEST_WINDOW", spec.as_str()),
        ];
        let out = job(dir.path(), &nodes, &env, |rt, r| {
            vec![
                show("ckpt.1", write_content(rt, dir.path(), "ckpt.1", 1, r)),
                show("ckpt.2", write_content(rt, dir.path(), "ckpt.2", 2, r)),
            ]
        });
        for (r, (lines, end)) in out.iter().enumerate() {
            assert_eq!(
                lines,
                &["ckpt.1: ok true", "ckpt.2: ok true"],
                "cache_size {cache_size}, rank {r}"
            );
            assert_eq!(end, &Ok(()), "cache_size {cache_size}, rank {r}");
        }
        assert_eq!(
            gauge(&counts, "flush"),
            (0, 1, 8),
            "cache_size {cache_size}: two flushes of 4 ranks, one rank at a time"
        );
        let index = crate::state::prefix::Index::load(&prefix).unwrap();
        assert_eq!(index.restart_point().as_deref(), Some("ckpt.2"));
        for r in 0..4u32 {
            let name = format!("rank_{r}.dat");
            let first = std::fs::read(prefix.join(&name)).unwrap();
            assert!(first == content(r, 1), "rank {r}'s ckpt.1 in the prefix");
            // the names were taken by ckpt.1: ckpt.2 went to its own directory
            let second =
                std::fs::read(prefix.join(crate::state::prefix::relocated(2, &name))).unwrap();
            assert!(second == content(r, 2), "rank {r}'s ckpt.2 in the prefix");
        }
    }
}
