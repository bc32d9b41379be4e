//! SCR 3.1's restart and prefix keys: `current`, `drop_after_current`, `prefix_size`,
//! `prefix_purge`, `global_restart` (and the restart in place they decide).

use super::*;

/// The names the prefix's index lists, in id order.
fn indexed(prefix: &Path) -> Vec<String> {
    crate::state::prefix::Index::load(prefix)
        .unwrap()
        .datasets
        .values()
        .map(|e| e.name.clone())
        .collect()
}

const C_ORDER: InitOptions = InitOptions {
    fetch_at_have_restart: true,
    recovered: None,
};

/// `current` (SCR_CURRENT) picks the restart as an early `current` call would: from the
/// prefix when the cache is gone, from the cache when it holds it, in both init orders;
/// a name nothing holds is one warning from rank 0 and the newest is taken. It is
/// applied once per job: a relaunch with the control directories kept restarts from its
/// own newest checkpoint.
#[test]
fn the_current_setting_chooses_the_restart_in_both_init_orders() {
    for options in [InitOptions::default(), C_ORDER] {
        for cache_kept in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let nodes = ["n0", "n1"];
            let prefix = dir.path().join("prefix");
            let env = [("SCR_FLUSH", "1")];
            job(dir.path(), &nodes, &env, |rt, r| {
                write_range(rt, dir.path(), r, 1..=3)
            });
            if !cache_kept {
                for base in ["cache", "cntl"] {
                    std::fs::remove_dir_all(dir.path().join(base)).unwrap();
                }
            }
            let case = format!("{options:?}, cache kept {cache_kept}");
            // marks of an earlier run of the job gone, as in a new allocation
            let forget_marks = || {
                let mut found = 0;
                let mut dirs = vec![dir.path().join("cntl")];
                while let Some(d) = dirs.pop() {
                    for e in std::fs::read_dir(&d).unwrap().flatten() {
                        let p = e.path();
                        if p.is_dir() {
                            dirs.push(p);
                        } else if p.file_name().is_some_and(|n| n == "current.applied") {
                            std::fs::remove_file(&p).unwrap();
                            found += 1;
                        }
                    }
                }
                assert_eq!(found, nodes.len(), "one mark per node's control directory");
            };

            // a name nothing holds: init goes on with the newest, rank 0 says it once
            let env = [("SCR_FLUSH", "1"), ("SCR_CURRENT", "ckpt.9")];
            let out = job_with(dir.path(), &nodes, &env, options.clone(), |rt, r| {
                read_back(rt, &prefix, r)
            });
            let warned: usize = out.iter().map(|o| said(&o.2, "ckpt.9").len()).sum();
            assert_eq!(warned, 1, "{case}: {:?}", out[0].2);
            assert!(
                out[0]
                    .2
                    .iter()
                    .any(|l| l.contains("no checkpoint named `ckpt.9`")),
                "{case}: {:?}",
                out[0].2
            );
            for (r, (line, end, _)) in out.iter().enumerate() {
                assert_eq!(line, "ckpt.3 exact=true from cache", "{case} rank {r}");
                assert_eq!(end, &Ok(()), "{case} rank {r}");
            }

            forget_marks();
            let env = [("SCR_FLUSH", "1"), ("SCR_CURRENT", "ckpt.2")];
            let out = job_with(dir.path(), &nodes, &env, options.clone(), |rt, r| {
                let read = read_back(rt, &prefix, r);
                write_range(rt, dir.path(), r, 4..=4);
                read
            });
            // held in cache, or fetched into it from the prefix, then read there
            for (r, (line, end, _)) in out.iter().enumerate() {
                assert_eq!(line, "ckpt.2 exact=true from cache", "{case} rank {r}");
                assert_eq!(end, &Ok(()), "{case} rank {r}");
            }
            assert_eq!(said(&out[0].2, "current = ckpt.2").len(), 1, "{case}");

            // the relaunch of the same job: not back to ckpt.2, but its own newest
            let out = job_with(dir.path(), &nodes, &env, options.clone(), |rt, r| {
                read_back(rt, &prefix, r)
            });
            for (r, (line, end, _)) in out.iter().enumerate() {
                assert_eq!(line, "ckpt.4 exact=true from cache", "{case} rank {r}");
                assert_eq!(end, &Ok(()), "{case} rank {r}");
            }
            let told = said(&out[0].2, "applied by an earlier run of job");
            assert_eq!(told.len(), 1, "{case}: {:?}", out[0].2);
        }
    }
}

/// `drop_after_current`: once `current` (the setting, or the call before the first
/// have_restart) chose a checkpoint, every newer dataset leaves the prefix's index — an
/// output among them — while their files stay; without it the index keeps them.
#[test]
fn drop_after_current_drops_the_newer_datasets_from_the_index_only() {
    for (how, drop) in [("setting", "1"), ("call", "1"), ("call", "0")] {
        let dir = tempfile::tempdir().unwrap();
        let nodes = ["n0", "n1"];
        let prefix = dir.path().join("prefix");
        job(dir.path(), &nodes, &[("SCR_FLUSH", "1")], |rt, r| {
            write_range(rt, dir.path(), r, 1..=3);
            assert!(write_dataset(rt, dir.path(), "out.4", &format!("o4_{r}"), OUTPUT).unwrap());
        });
        assert_eq!(indexed(&prefix), ["ckpt.1", "ckpt.2", "ckpt.3", "out.4"]);
        for base in ["cache", "cntl"] {
            std::fs::remove_dir_all(dir.path().join(base)).unwrap();
        }
        let mut env = vec![("SCR_FLUSH", "1"), ("SCR_DROP_AFTER_CURRENT", drop)];
        if how == "setting" {
            env.push(("SCR_CURRENT", "ckpt.2"));
        }
        let out = job_with(dir.path(), &nodes, &env, C_ORDER, |rt, r| {
            if how == "call" {
                rt.current("ckpt.2").expect("current");
            }
            read_back(rt, &prefix, r)
        });
        for (r, (line, end, _)) in out.iter().enumerate() {
            assert_eq!(
                line, "ckpt.2 exact=true from cache",
                "{how} {drop} rank {r}"
            );
            assert_eq!(end, &Ok(()), "{how} {drop} rank {r}");
        }
        let expect: &[&str] = if drop == "1" {
            &["ckpt.1", "ckpt.2"]
        } else {
            &["ckpt.1", "ckpt.2", "ckpt.3", "out.4"]
        };
        assert_eq!(indexed(&prefix), expect, "{how} {drop}");
        for r in 0..2 {
            assert!(prefix.join(format!("f3_{r}")).is_file(), "files stay");
            assert!(prefix.join(format!("o4_{r}")).is_file(), "files stay");
        }
    }
}

/// `prefix_size = 2`: after each checkpoint's flush is recorded, checkpoints outside the
/// window of two go from the prefix (files, index entry, .scr directory); one also
/// flagged output stays; the same when the flushes run in the background.
#[test]
fn prefix_size_keeps_a_window_of_checkpoints_in_the_prefix() {
    for asynchronous in ["0", "1"] {
        let dir = tempfile::tempdir().unwrap();
        let nodes = ["n0", "n1"];
        let prefix = dir.path().join("prefix");
        let env = [
            ("SCR_FLUSH", "1"),
            ("SCR_PREFIX_SIZE", "2"),
            ("SCR_FLUSH_ASYNC", asynchronous),
        ];
        let out = job(dir.path(), &nodes, &env, |rt, r| {
            write_range(rt, dir.path(), r, 1..=1);
            // ckpt.2 is a checkpoint and an output: never deleted by the window
            let both = OutputFlags {
                checkpoint: true,
                output: true,
            };
            assert!(write_dataset(rt, dir.path(), "ckpt.2", &format!("f2_{r}"), both).unwrap());
            write_range(rt, dir.path(), r, 3..=5);
        });
        assert!(out.iter().all(|(_, end)| end.is_ok()), "{out:?}");
        assert_eq!(
            indexed(&prefix),
            ["ckpt.2", "ckpt.4", "ckpt.5"],
            "async {asynchronous}"
        );
        for r in 0..2 {
            for (n, kept) in [(1, false), (2, true), (3, false), (4, true), (5, true)] {
                assert_eq!(
                    prefix.join(format!("f{n}_{r}")).is_file(),
                    kept,
                    "async {asynchronous}: f{n}_{r}"
                );
            }
        }
        for (id, kept) in [(1, false), (3, false), (5, true)] {
            assert_eq!(
                crate::layout::prefix_dataset_dir(&prefix, id).exists(),
                kept,
                "async {asynchronous}: .scr/scr.dataset.{id}"
            );
        }
    }
}

/// `prefix_purge`: init deletes every dataset the index lists (files and entries,
/// outputs too) before the restart is chosen; a restart then comes only from cache.
#[test]
fn prefix_purge_deletes_every_indexed_dataset_before_the_restart_is_chosen() {
    for cache_kept in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let nodes = ["n0", "n1"];
        let prefix = dir.path().join("prefix");
        job(dir.path(), &nodes, &[("SCR_FLUSH", "1")], |rt, r| {
            write_range(rt, dir.path(), r, 1..=2);
            assert!(write_dataset(rt, dir.path(), "out.3", &format!("o3_{r}"), OUTPUT).unwrap());
        });
        assert_eq!(indexed(&prefix), ["ckpt.1", "ckpt.2", "out.3"]);
        if !cache_kept {
            for base in ["cache", "cntl"] {
                std::fs::remove_dir_all(dir.path().join(base)).unwrap();
            }
        }
        let env = [("SCR_FLUSH", "0"), ("SCR_PREFIX_PURGE", "1")];
        let out = job_with(dir.path(), &nodes, &env, InitOptions::default(), |rt, r| {
            read_back(rt, &prefix, r)
        });
        let expect = if cache_kept {
            "ckpt.2 exact=true from cache"
        } else {
            "no restart"
        };
        for (r, (line, end, _)) in out.iter().enumerate() {
            assert_eq!(line, expect, "cache kept {cache_kept}, rank {r}");
            assert_eq!(end, &Ok(()), "rank {r}");
        }
        let told = said(&out[0].2, "prefix_purge: deleted 3 dataset(s)");
        assert_eq!(told.len(), 1, "{:?}", out[0].2);
        assert!(told[0].contains("ckpt.1, ckpt.2, out.3"), "{}", told[0]);
        assert!(indexed(&prefix).is_empty());
        for r in 0..2 {
            for f in ["f1", "f2", "o3"] {
                assert!(!prefix.join(format!("{f}_{r}")).exists(), "{f}_{r}");
            }
        }
        for id in 1..=3 {
            assert!(!crate::layout::prefix_dataset_dir(&prefix, id).exists());
        }
    }
}

/// `global_restart`: the newest cached checkpoint (never flushed, flush = 0) is flushed
/// at init, the cache is cleared, and the restart reads it in place in the prefix — in
/// both init orders, and the fallback after an invalid restart reads in place too.
#[test]
fn global_restart_flushes_clears_the_cache_and_reads_in_place() {
    for options in [InitOptions::default(), C_ORDER] {
        let dir = tempfile::tempdir().unwrap();
        let nodes = ["n0", "n1"];
        let prefix = dir.path().join("prefix");
        job(dir.path(), &nodes, &[("SCR_FLUSH", "0")], |rt, r| {
            write_range(rt, dir.path(), r, 1..=2)
        });
        assert!(
            !crate::state::prefix::Index::path(&prefix).exists(),
            "nothing flushed"
        );
        let env = [("SCR_FLUSH", "0"), ("SCR_GLOBAL_RESTART", "1")];
        let out = job_with(dir.path(), &nodes, &env, options.clone(), |rt, r| {
            let cached: Vec<String> = nodes
                .iter()
                .flat_map(|n| listing(&cache_job_dir(dir.path(), n)))
                .filter(|n| n.starts_with("scr.dataset."))
                .collect();
            (read_back(rt, &prefix, r), cached)
        });
        for (r, ((line, cached), end, _)) in out.iter().enumerate() {
            assert_eq!(
                line, "ckpt.2 exact=true from prefix",
                "{options:?} rank {r}"
            );
            assert!(
                cached.is_empty(),
                "{options:?} rank {r}: cache holds {cached:?}"
            );
            assert_eq!(end, &Ok(()), "rank {r}");
        }
        assert_eq!(indexed(&prefix), ["ckpt.2"], "{options:?}");
        let entry = crate::state::prefix::Index::load(&prefix).unwrap();
        assert!(entry.datasets.values().all(|e| e.complete));
    }
}

/// The decision is one method: `fetch = false` or `global_restart` read in place.
#[test]
fn restart_in_place_follows_fetch_and_global_restart() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["n0"];
    for (fetch, global, in_place) in [
        ("1", "0", false),
        ("0", "0", true),
        ("1", "1", true),
        ("0", "1", true),
    ] {
        let env = [("SCR_FETCH", fetch), ("SCR_GLOBAL_RESTART", global)];
        let out = job(dir.path(), &nodes, &env, |rt, _| {
            crate::runtime::restart::restarter!(rt).restart_in_place()
        });
        assert_eq!(out[0].0, in_place, "fetch {fetch}, global_restart {global}");
    }
}

/// `drop_after_current` with the newer checkpoints still in cache: they leave the cache as
/// well as the index, so a relaunch of the job (which does not choose again) restarts
/// from the chosen checkpoint, not from a newer cached one; without it, the relaunch
/// takes the newest cached one.
#[test]
fn drop_after_current_drops_the_newer_cached_datasets_so_a_relaunch_keeps_the_choice() {
    for (drop, relaunch) in [("1", "ckpt.2"), ("0", "ckpt.3")] {
        let dir = tempfile::tempdir().unwrap();
        let nodes = ["n0", "n1"];
        let prefix = dir.path().join("prefix");
        let env = [
            ("SCR_FLUSH", "0"),
            ("SCR_CACHE_SIZE", "3"),
            ("SCR_DROP_AFTER_CURRENT", drop),
        ];
        job(dir.path(), &nodes, &env, |rt, r| {
            write_range(rt, dir.path(), r, 1..=3)
        });
        let out = job_with(dir.path(), &nodes, &env, C_ORDER, |rt, r| {
            rt.current("ckpt.2").expect("current");
            read_back(rt, &prefix, r)
        });
        for (r, (line, end, _)) in out.iter().enumerate() {
            assert_eq!(line, "ckpt.2 exact=true from cache", "drop {drop} rank {r}");
            assert_eq!(end, &Ok(()), "drop {drop} rank {r}");
        }
        let out = job_with(dir.path(), &nodes, &env, C_ORDER, |rt, r| {
            read_back(rt, &prefix, r)
        });
        for (r, (line, end, _)) in out.iter().enumerate() {
            assert_eq!(
                line,
                &format!("{relaunch} exact=true from cache"),
                "drop {drop} rank {r}"
            );
            assert_eq!(end, &Ok(()), "drop {drop} rank {r}");
        }
    }
}
