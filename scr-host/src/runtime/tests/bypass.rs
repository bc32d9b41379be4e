//! Cache bypass: a checkpoint written in the prefix itself (a file shared by ranks
//! among its files) and restarted in place, the refusal of a shared file without bypass,
//! and `cache_purge` with `fetch_bypass` reading the prefix in place.

use super::*;
use crate::state::prefix;

/// Every regular file under `dir` (recursively), relative to it.
fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(relative_to_dir(dir, &p));
            }
        }
    }
    out.sort();
    out
}

fn relative_to_dir(dir: &Path, p: &Path) -> String {
    p.strip_prefix(dir).unwrap_or(p).display().to_string()
}

/// One run of 4 ranks on 2 nodes with `SCR_CACHE_BYPASS=1` (and `extra` settings, SCR_Config
/// calls in `api`): write checkpoint `ckpt.1` — one file written by every rank at its own
/// offset (`shared.dat`) and one file per rank — or read it back. Each rank returns what
/// happened, in words.
fn bypass_run(
    dir: &Path,
    write: bool,
    extra: &[(&str, &str)],
    api: &[&str],
) -> Vec<std::result::Result<String, String>> {
    use std::os::unix::fs::FileExt;
    let nodes = ["n0", "n0", "n1", "n1"];
    run_ranks(4, |w: Box<dyn World>| {
        let me = w.rank();
        let mut env = vec![("SCR_CACHE_BYPASS", "1"), ("SCR_COPY_TYPE", "XOR")];
        env.extend_from_slice(extra);
        let mut l = loader(dir, &nodes, &env);
        l.api = api
            .iter()
            .enumerate()
            .map(|(i, s)| (i + 1, s.to_string()))
            .collect();
        let mut rt = init_hooked(w, l, InitOptions::default()).map_err(|e| e.to_string())?;
        let prefix = dir.join("prefix");
        let outcome = (|| {
            if write {
                // outside a dataset the name comes back as it was given
                let outside = rt.route_file(Path::new("shared.dat"))?;
                assert_eq!(outside, Path::new("shared.dat"));
                rt.start_output(
                    "ckpt.1",
                    OutputFlags {
                        checkpoint: true,
                        output: false,
                    },
                )?;
                let shared = rt.route_file(&prefix.join("shared.dat"))?;
                let own = rt.route_file(&prefix.join(format!("sub/rank_{me}.dat")))?;
                let f = std::fs::OpenOptions::new()
                    .create(true)
                    .write(true)
                    .truncate(false)
                    .open(&shared)
                    .map_err(io_err(&shared))?;
                f.write_all_at(&content(me, 1), u64::from(me) * 3000)
                    .map_err(io_err(&shared))?;
                std::fs::write(&own, content(me, 2)).map_err(io_err(&own))?;
                let kept = rt.complete_output(true)?;
                Ok(format!(
                    "kept {kept}, shared at {}, own at {}",
                    relative_to_dir(&prefix, &shared),
                    relative_to_dir(&prefix, &own)
                ))
            } else {
                let Some(name) = rt.have_restart() else {
                    return Ok("no restart".to_string());
                };
                rt.start_restart()?;
                let shared = rt.route_file(&prefix.join("shared.dat"))?;
                // a base name alone finds the rank's own file in its directory
                let own = rt.route_file(&prefix.join(format!("rank_{me}.dat")))?;
                let mut mine = vec![0u8; 3000];
                std::fs::File::open(&shared)
                    .and_then(|f| f.read_exact_at(&mut mine, u64::from(me) * 3000))
                    .map_err(io_err(&shared))?;
                let own_bytes = std::fs::read(&own).map_err(io_err(&own))?;
                let exact = mine == content(me, 1) && own_bytes == content(me, 2);
                rt.complete_restart(exact)?;
                Ok(format!(
                    "restarted from {name} at {} and {}, byte-exact {exact}",
                    relative_to_dir(&prefix, &shared),
                    relative_to_dir(&prefix, &own)
                ))
            }
        })();
        rt.finalize().map_err(|e| e.to_string())?;
        outcome.map_err(|e: ScrError| e.to_string())
    })
}

#[test]
fn a_bypass_checkpoint_is_written_in_the_prefix_shared_file_and_all_and_restarts_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let wrote = bypass_run(dir.path(), true, &[], &[]);
    for (r, o) in wrote.iter().enumerate() {
        assert_eq!(
            o.as_deref(),
            Ok(format!("kept true, shared at shared.dat, own at sub/rank_{r}.dat").as_str()),
            "rank {r}"
        );
    }
    let prefix = dir.path().join("prefix");
    let shared = std::fs::read(prefix.join("shared.dat")).unwrap();
    let expected: Vec<u8> = (0..4).flat_map(|r| content(r, 1)).collect();
    assert_eq!(shared, expected, "every rank's part of the shared file");
    for r in 0..4 {
        assert_eq!(
            std::fs::read(prefix.join(format!("sub/rank_{r}.dat"))).unwrap(),
            content(r, 2)
        );
    }
    // nothing in cache: no file of the dataset, and no redundancy data
    assert_eq!(
        files_under(&dir.path().join("cache")),
        Vec::<String>::new(),
        "the cache holds nothing"
    );
    // recorded as a flushed dataset: complete in the index, with summary and rank2file
    let ix = prefix::Index::load(&prefix).unwrap();
    let entry = ix.datasets.values().find(|e| e.name == "ckpt.1").unwrap();
    assert!(entry.complete && entry.failed.is_none(), "{entry:?}");
    assert_eq!(entry.checkpoint_id, Some(1));
    let summary: prefix::Summary =
        crate::state::read_state(&prefix::Summary::path(&prefix, entry.id), "summary").unwrap();
    // the shared file once per rank that wrote it, and each rank's own
    assert_eq!((summary.files, summary.bytes), (8, 4 * 12000 + 4 * 3000));

    let read = bypass_run(dir.path(), false, &[], &[]);
    for (r, o) in read.iter().enumerate() {
        assert_eq!(
            o.as_deref(),
            Ok(format!(
                "restarted from ckpt.1 at shared.dat and sub/rank_{r}.dat, byte-exact true"
            )
            .as_str()),
            "rank {r}"
        );
    }
    assert_eq!(files_under(&dir.path().join("cache")), Vec::<String>::new());

    // a byte changed in the shared file: the restart check (CRC32 recorded when the
    // dataset completed) refuses it on every rank, and there is no older one
    let mut damaged = shared.clone();
    damaged[7000] ^= 1;
    std::fs::write(prefix.join("shared.dat"), &damaged).unwrap();
    let read = bypass_run(dir.path(), false, &[], &[]);
    for (r, o) in read.iter().enumerate() {
        assert_eq!(o.as_deref(), Ok("no restart"), "rank {r}");
    }
    let ix = prefix::Index::load(&prefix).unwrap();
    let failed = ix.datasets.values().find(|e| e.name == "ckpt.1").unwrap();
    assert!(
        failed
            .failed
            .as_deref()
            .is_some_and(|f| f.contains("CRC32")),
        "{failed:?}"
    );
}

#[test]
fn without_bypass_a_file_written_by_two_ranks_is_refused_and_an_output_descriptor_is_chosen_for_output(
) {
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["n0", "n0", "n1", "n1"];
    let out = run_ranks(4, |w: Box<dyn World>| {
        let me = w.rank();
        let mut l = loader(dir.path(), &nodes, &[("SCR_COPY_TYPE", "SINGLE")]);
        // checkpoints in cache; outputs in the prefix through the descriptor marked output
        l.api = vec![
            (1, "CKPT=0 TYPE=SINGLE".to_string()),
            (2, "CKPT=1 TYPE=SINGLE OUTPUT=1 BYPASS=1".to_string()),
        ];
        let mut rt = init_hooked(w, l, InitOptions::default()).map_err(|e| e.to_string())?;
        let prefix = dir.path().join("prefix");
        let ck = OutputFlags {
            checkpoint: true,
            output: false,
        };
        rt.start_output("ckpt.1", ck).map_err(|e| e.to_string())?;
        let shared = rt
            .route_file(&prefix.join("shared.dat"))
            .map_err(|e| e.to_string())?;
        let in_cache = shared.starts_with(dir.path().join("cache"));
        std::fs::write(&shared, content(me, 1)).unwrap();
        let refused = error_text(&rt.complete_output(true));
        rt.start_output(
            "out.1",
            OutputFlags {
                checkpoint: false,
                output: true,
            },
        )
        .map_err(|e| e.to_string())?;
        let o = rt
            .route_file(&prefix.join(format!("out_{me}.txt")))
            .map_err(|e| e.to_string())?;
        std::fs::write(&o, content(me, 3)).unwrap();
        let kept = rt.complete_output(true).map_err(|e| e.to_string())?;
        rt.finalize().map_err(|e| e.to_string())?;
        Ok::<_, String>((in_cache, refused, relative_to_dir(&prefix, &o), kept))
    });
    for (r, o) in out.into_iter().enumerate() {
        let (in_cache, refused, out_path, kept) = o.expect("every rank runs");
        assert!(in_cache, "rank {r}: a checkpoint's file is routed to cache");
        assert!(
            refused.contains("both routed") && refused.contains("shared.dat"),
            "rank {r}: {refused}"
        );
        assert_eq!(
            out_path,
            format!("out_{r}.txt"),
            "rank {r}: output goes to the prefix"
        );
        assert!(kept, "rank {r}");
        assert_eq!(
            std::fs::read(dir.path().join("prefix").join(&out_path)).unwrap(),
            content(r as u32, 3)
        );
    }
    let ix = prefix::Index::load(&dir.path().join("prefix")).unwrap();
    assert!(ix
        .datasets
        .values()
        .any(|e| e.name == "out.1" && e.complete && e.output));
    assert!(!ix.datasets.values().any(|e| e.name == "ckpt.1"));
}

/// A shared file routed into cache loses that checkpoint (the runtime cannot tell before
/// it is written: routing is not collective, and each rank's cache holds only its own
/// part of the file), but only that one: the descriptor bypasses the cache from then
/// on, so the next checkpoint's shared file goes to the prefix whole, is kept and
/// restarts in place; the error says so and how to have it from the first.
#[test]
fn after_a_shared_file_in_cache_the_descriptor_bypasses_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["n0", "n0", "n1", "n1"];
    let prefix = dir.path().join("prefix");
    let out = run_ranks(4, |w: Box<dyn World>| {
        let me = w.rank();
        let l = loader(dir.path(), &nodes, &[("SCR_COPY_TYPE", "SINGLE")]);
        let mut rt = init_hooked(w, l, InitOptions::default()).map_err(|e| e.to_string())?;
        let ck = OutputFlags {
            checkpoint: true,
            output: false,
        };
        let mut outcome = Vec::new();
        for n in 1..=2u32 {
            rt.start_output(&format!("ckpt.{n}"), ck)
                .map_err(|e| e.to_string())?;
            let shared = rt
                .route_file(&prefix.join("shared.dat"))
                .map_err(|e| e.to_string())?;
            let in_cache = shared.starts_with(dir.path().join("cache"));
            // every rank writes its own 8-byte part of the one file
            let f = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&shared)
                .unwrap();
            std::os::unix::fs::FileExt::write_all_at(&f, &content(me, n)[..8], u64::from(me) * 8)
                .unwrap();
            drop(f);
            outcome.push((in_cache, error_text(&rt.complete_output(true))));
        }
        rt.finalize().map_err(|e| e.to_string())?;
        Ok::<_, String>(outcome)
    });
    for (r, o) in out.into_iter().enumerate() {
        let o = o.expect("every rank runs");
        let (in_cache, refused) = &o[0];
        assert!(in_cache, "rank {r}: ckpt.1's file is routed to cache");
        assert!(
            refused.contains("both routed `shared.dat`")
                && refused
                    .contains("the later datasets of checkpoint descriptor 0 bypass the cache")
                && refused.contains("set bypass = true on it"),
            "rank {r}: {refused}"
        );
        assert_eq!(
            o[1],
            (false, String::new()),
            "rank {r}: ckpt.2 in the prefix, kept"
        );
    }
    let want: Vec<u8> = (0..4u32)
        .flat_map(|r| content(r, 2)[..8].to_vec())
        .collect();
    assert_eq!(std::fs::read(prefix.join("shared.dat")).unwrap(), want);
    let ix = prefix::Index::load(&prefix).unwrap();
    let names: Vec<(&str, bool)> = ix
        .datasets
        .values()
        .map(|e| (e.name.as_str(), e.complete))
        .collect();
    assert_eq!(names, [("ckpt.2", true)]);
}

#[test]
fn cache_purge_empties_the_cache_at_init_and_fetch_bypass_reads_the_prefix_in_place() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("prefix")).unwrap();
    let nodes = ["n0", "n0", "n1", "n1"];
    let flushed = [("SCR_COPY_TYPE", "SINGLE"), ("SCR_FLUSH", "1")];
    let cached_only = [
        ("SCR_COPY_TYPE", "SINGLE"),
        ("SCR_FLUSH", "0"),
        ("SCR_FLUSH_ON_FINALIZE", "0"),
    ];
    // ckpt.1 reaches the prefix; ckpt.2 stays in cache only
    assert!(run_with(dir.path(), &nodes, &flushed, Some(1))
        .iter()
        .all(|o| o.is_ok()));
    assert!(run_with(dir.path(), &nodes, &cached_only, Some(2))
        .iter()
        .all(|o| o.is_ok()));
    // cache_purge: the cached ckpt.2 is gone, the restart comes from the prefix,
    // read in place there with fetch_bypass (nothing copied into cache)
    let purge = [
        ("SCR_COPY_TYPE", "SINGLE"),
        ("SCR_FLUSH", "0"),
        ("SCR_CACHE_PURGE", "1"),
        ("SCR_FETCH_BYPASS", "1"),
    ];
    let restarted = run_with(dir.path(), &nodes, &purge, None);
    assert_eq!(
        restarted,
        vec![Ok("restarted from ckpt.1, byte-exact".to_string()); 4],
        "{restarted:?}"
    );
    let cached: Vec<String> = files_under(&dir.path().join("cache"))
        .into_iter()
        .filter(|f| f.contains("rank_"))
        .collect();
    assert!(cached.is_empty(), "{cached:?}");
}
