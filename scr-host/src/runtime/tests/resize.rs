//! A restart by another number of ranks than wrote the checkpoint: the same restart loop
//! reads every writer's files by name, whatever M is, from the prefix; a damaged file
//! makes every rank take the next older checkpoint alike; the next checkpoint is the new
//! job's, and a restart of that size is the ordinary one.

use super::*;

/// Rank `w`'s file of checkpoint `n` and what it holds (different per writer and
/// checkpoint, and long enough that one flipped byte is a CRC32 mismatch).
fn old_file(n: u32, w: u32) -> (String, Vec<u8>) {
    let name = format!("ckpt.{n}/part_{w}.dat");
    let body = (0..2000u32)
        .map(|i| (i.wrapping_mul(13) ^ (w * 31) ^ (n * 7)) as u8)
        .collect();
    (name, body)
}

/// Write checkpoint `ckpt.<n>`: each rank one file ([`old_file`]).
fn write_parts(rt: &mut Runtime, prefix: &Path, n: u32, r: u32) {
    rt.start_output(&format!("ckpt.{n}"), CHECKPOINT)
        .unwrap_or_else(|e| panic!("rank {r}: ckpt.{n}: {e}"));
    let (name, body) = old_file(n, r);
    let p = rt.route_file(&prefix.join(name)).expect("route_file");
    std::fs::write(&p, body).unwrap();
    assert!(
        rt.complete_output(true).expect("complete_output"),
        "rank {r}"
    );
}

/// The restart loop an application runs whatever the job's size: ask how many ranks
/// wrote the checkpoint, list the files of the writers `reads` picks, route and read
/// each; an older checkpoint when a rank could not. Returns (name, writers, whether every
/// byte of every file read was right), or the restart offered none.
fn read_writers_where(
    rt: &mut Runtime,
    reads: impl Fn(u32) -> bool,
) -> Option<(String, u32, bool)> {
    loop {
        let name = restart_name(rt)?;
        rt.start_restart().expect("start_restart");
        let (writers, exact) = read_writers(rt, &name, &reads);
        if rt.complete_restart(exact).expect("complete_restart") {
            return Some((name, writers, exact));
        }
    }
}

/// Inside the restart of `name`: its writers, and whether every file of every writer,
/// listed by `restart_files` and routed by that name, holds what [`old_file`] wrote.
fn read_writers(rt: &mut Runtime, name: &str, reads: impl Fn(u32) -> bool) -> (u32, bool) {
    let n: u32 = name.trim_start_matches("ckpt.").parse().unwrap();
    let writers = rt.restart_writers().expect("restart_writers");
    let mut exact = true;
    for w in (0..writers).filter(|&w| reads(w)) {
        let files = rt.restart_files(w).expect("restart_files");
        let (want_name, want) = old_file(n, w);
        exact &= files.len() == 1 && files[0].ends_with(&want_name);
        for f in files {
            // a file that fails its check is an error here, and the restart cannot
            // complete
            exact &= rt
                .route_file(&f)
                .is_ok_and(|path| std::fs::read(&path).unwrap_or_default() == want);
        }
    }
    (writers, exact)
}

fn nodes(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("n{i}")).collect()
}

fn names(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

const FLUSHED: &[(&str, &str)] = &[("SCR_FLUSH", "1"), ("SCR_COPY_TYPE", "XOR")];

/// Written by 4 ranks, restarted by 3 (fetch on: read in place all the same) and by 6
/// (fetch off): every rank reads every writer's file byte-exact through the same loop;
/// a file is also found by its base name, and a name the checkpoint does not hold is an
/// error on the rank that asked, naming it.
#[test]
fn a_checkpoint_of_four_ranks_restarts_on_three_and_on_six() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("prefix");
    let four = nodes(4);
    let wrote = job(dir.path(), &names(&four), FLUSHED, |rt, r| {
        write_parts(rt, &prefix, 1, r)
    });
    assert!(wrote.iter().all(|(_, end)| end.is_ok()), "{wrote:?}");
    for (m, fetch) in [(3usize, "1"), (6, "0")] {
        let ranks = nodes(m);
        let env = [FLUSHED, &[("SCR_FETCH", fetch)]].concat();
        let out = job_with(
            dir.path(),
            &names(&ranks),
            &env,
            InitOptions {
                fetch_at_have_restart: true,
                recovered: None,
            },
            read_every_writer_keeping_open,
        );
        for (r, (read, end, _)) in out.iter().enumerate() {
            assert_eq!(
                read,
                &(
                    Some(("ckpt.1".to_string(), 4, true)),
                    format!("ckpt.1/part_{}.dat", (r + 1) % 4),
                    format!(
                        "route_file: `{}` is not a file of checkpoint ckpt.1 on rank {r}",
                        prefix.join("ckpt.1/nope.dat").display()
                    )
                ),
                "{m} ranks, rank {r}"
            );
            assert_eq!(end, &Ok(()), "{m} ranks, rank {r}");
        }
        let said0 = &out[0].2;
        assert_eq!(
            said(said0, "(written by 4 ranks, read by").len(),
            1,
            "{said0:#?}"
        );
    }
}

/// The restart loop reading every writer, plus, while the restart is open: the file of the next writer
/// routed by its base name alone, and the error for a name the checkpoint lacks.
fn read_every_writer_keeping_open(
    rt: &mut Runtime,
    r: u32,
) -> (Option<(String, u32, bool)>, String, String) {
    let Some(name) = restart_name(rt) else {
        return (None, String::new(), String::new());
    };
    rt.start_restart().expect("start_restart");
    let n: u32 = name.trim_start_matches("ckpt.").parse().unwrap();
    let (writers, exact) = read_writers(rt, &name, |_| true);
    let next = (r + 1) % writers;
    let prefix = rt.job.prefix().to_path_buf();
    let by_base = rt
        .route_file(&prefix.join(format!("part_{next}.dat")))
        .map(|p| {
            let (want_name, want) = old_file(n, next);
            assert_eq!(std::fs::read(&p).unwrap(), want, "rank {r}");
            want_name
        })
        .unwrap_or_else(|e| e.to_string());
    let missing = error_text(&rt.route_file(&prefix.join(format!("ckpt.{n}/nope.dat"))));
    assert!(rt.complete_restart(exact).expect("complete_restart"));
    (Some((name, writers, exact)), by_base, missing)
}

/// One flipped byte in one writer's file of the newest checkpoint, which one rank of the
/// 3-rank job reads (each reads the writers `w mod 3` picks): every rank passes over it
/// alike and restarts from the older one, which the index then marks failed with the
/// file's name; after the restart the 3-rank job checkpoints, and its own restart (3
/// ranks again) is the ordinary one from cache, where a rank knows its own files only.
#[test]
fn a_damaged_file_makes_every_rank_take_the_older_checkpoint_then_the_new_size_checkpoints_on() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("prefix");
    let four = nodes(4);
    let wrote = job(dir.path(), &names(&four), FLUSHED, |rt, r| {
        write_parts(rt, &prefix, 1, r);
        write_parts(rt, &prefix, 2, r);
    });
    assert!(wrote.iter().all(|(_, end)| end.is_ok()), "{wrote:?}");
    let damaged = prefix.join(old_file(2, 3).0);
    let mut bytes = std::fs::read(&damaged).unwrap();
    bytes[1000] ^= 0x40;
    std::fs::write(&damaged, &bytes).unwrap();

    let three = nodes(3);
    let out = job_logged(dir.path(), &names(&three), FLUSHED, |rt, r| {
        let read = read_writers_where(rt, |w| w % 3 == r);
        write_parts(rt, &prefix, 3, r);
        read
    });
    for (r, (read, end, _)) in out.iter().enumerate() {
        assert_eq!(read, &Some(("ckpt.1".to_string(), 4, true)), "rank {r}");
        assert_eq!(end, &Ok(()), "rank {r}");
    }
    let lines = &out[0].2;
    assert_eq!(
        said(lines, &format!("{} has CRC32", damaged.display())).len(),
        1,
        "{lines:#?}"
    );
    let index = crate::state::prefix::Index::load(&prefix).unwrap();
    let ckpt2 = index
        .datasets
        .values()
        .find(|e| e.name == "ckpt.2")
        .unwrap();
    let failed = ckpt2.failed.as_deref().unwrap_or_default();
    assert!(
        failed.starts_with(&format!("rank 0: {} has CRC32", damaged.display())),
        "{ckpt2:?}"
    );

    // the 3-rank job's own checkpoint, restarted by 3 ranks: from cache
    let again = job(dir.path(), &names(&three), FLUSHED, |rt, r| {
        let name = rt.have_restart();
        rt.start_restart().expect("start_restart");
        let writers = rt.restart_writers().expect("restart_writers");
        let own = rt.restart_files(r).expect("own files");
        let path = rt.route_file(&own[0]).expect("route_file");
        let exact = std::fs::read(&path).unwrap() == old_file(3, r).1;
        let other = error_text(&rt.restart_files((r + 1) % 3));
        let beyond = error_text(&rt.restart_files(3));
        assert!(rt.complete_restart(exact).unwrap());
        (
            name,
            writers,
            exact,
            path.starts_with(&prefix),
            other,
            beyond,
        )
    });
    for (r, ((name, writers, exact, in_prefix, other, beyond), end)) in again.iter().enumerate() {
        assert_eq!(
            (name.as_deref(), *writers, *exact, *in_prefix),
            (Some("ckpt.3"), 3, true, false),
            "rank {r}"
        );
        assert!(
            other.contains(&format!("rank {r} reads back its own files only")),
            "rank {r}: {other}"
        );
        assert_eq!(
            beyond,
            "restart_files: rank 3 did not write the checkpoint being read; it was written by ranks 0..3",
            "rank {r}"
        );
        assert_eq!(end, &Ok(()), "rank {r}");
    }
}

/// The queries outside a restart are refused, saying when to call them.
#[test]
fn the_restart_queries_outside_a_restart_say_when_to_call_them() {
    let dir = tempfile::tempdir().unwrap();
    let out = job(dir.path(), &["n0", "n1"], &[], |rt, _| {
        (
            error_text(&rt.restart_writers()),
            error_text(&rt.restart_files(0)),
        )
    });
    for (r, ((writers, files), _)) in out.iter().enumerate() {
        assert_eq!(
            writers,
            "restart_writers: no restart in progress; call it between start_restart and complete_restart",
            "rank {r}"
        );
        assert!(
            files.starts_with("restart_files: no restart"),
            "rank {r}: {files}"
        );
    }
}

/// Eight ranks, two per node on n0..n3.
const EIGHT: [&str; 8] = ["n0", "n0", "n1", "n1", "n2", "n2", "n3", "n3"];

/// The share of old ranks (of 8) a rank `r` of 4 reads.
fn half_share(r: u32) -> impl Fn(u32) -> bool {
    move |w| w / 2 == r
}

/// Every directory below the caches named like a restart's copies.
fn staging_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.join("cache")];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                if e.file_name().to_string_lossy().starts_with("scr.resize.") {
                    found.push(p.clone());
                }
                todo.push(p);
            }
        }
    }
    found
}

/// With nothing in the prefix (flush off), a checkpoint of 8 ranks on 4 nodes restarts 4
/// ranks placed on the nodes in reverse: each reads the two old ranks its share overlaps
/// from the caches, byte-exact, copied from the node that holds them and checked; files
/// outside its share are refused saying what it can read; the copies are gone after.
#[test]
fn the_caches_of_eight_ranks_serve_a_restart_by_four_on_other_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("prefix");
    let unflushed = [("SCR_FLUSH", "0"), ("SCR_COPY_TYPE", "XOR")];
    let wrote = job(dir.path(), &EIGHT, &unflushed, |rt, r| {
        write_parts(rt, &prefix, 1, r)
    });
    assert!(wrote.iter().all(|(_, end)| end.is_ok()), "{wrote:?}");
    let reversed = ["n3", "n2", "n1", "n0"];
    let out = job_logged(dir.path(), &reversed, &unflushed, |rt, r| {
        let name = rt.have_restart();
        rt.start_restart().expect("start_restart");
        let (writers, exact) = read_writers(rt, "ckpt.1", half_share(r));
        // where its files are: not in the prefix
        let own = rt.restart_files(2 * r).expect("in the share");
        let path = rt.route_file(&own[0]).expect("route_file");
        let copies = staging_dirs(dir.path()).len();
        let outside = error_text(&rt.restart_files((2 * r + 4) % 8));
        let routed_outside =
            error_text(&rt.route_file(&prefix.join(old_file(1, (2 * r + 4) % 8).0)));
        assert!(rt.complete_restart(exact).expect("complete_restart"));
        (
            name,
            writers,
            exact,
            path.starts_with(&prefix),
            copies,
            outside,
            routed_outside,
        )
    });
    for (r, (got, end, _)) in out.iter().enumerate() {
        let (name, writers, exact, in_prefix, copies, outside, routed_outside) = got;
        assert_eq!(
            (name.as_deref(), *writers, *exact, *in_prefix),
            (Some("ckpt.1"), 8, true, false),
            "rank {r}"
        );
        assert!(*copies > 0, "rank {r}: the share was copied across nodes");
        let share = format!(
            "this rank reads the files of old ranks {}..{}",
            2 * r,
            2 * r + 2
        );
        assert!(outside.contains(&share), "rank {r}: {outside}");
        assert!(
            routed_outside.contains(&share),
            "rank {r}: {routed_outside}"
        );
        assert_eq!(end, &Ok(()), "rank {r}");
    }
    assert_eq!(
        said(&out[0].2, "from the nodes' caches").len(),
        1,
        "{:#?}",
        out[0].2
    );
    assert!(
        staging_dirs(dir.path()).is_empty(),
        "the copies are removed"
    );
    assert!(crate::state::prefix::Index::load(&prefix).map_or(true, |ix| ix.datasets.is_empty()));
}

/// A flipped byte in a cached file: copied across nodes, the copy's check fails and every
/// rank takes the prefix's copy of the same checkpoint instead; read where it lies (the
/// node's own cache), the routed check fails, complete_restart passes over the cached
/// copy on every rank, and the prefix's copy of the same checkpoint is offered next (not
/// marked failed: it is sound).
#[test]
fn a_damaged_cached_file_makes_every_rank_read_the_prefixs_copy_instead() {
    for (case, nodes) in [
        ("copied", ["n3", "n2", "n1", "n0"]),
        ("in place", ["n0", "n1", "n2", "n3"]),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path().join("prefix");
        let wrote = job(dir.path(), &EIGHT, FLUSHED, |rt, r| {
            write_parts(rt, &prefix, 1, r)
        });
        assert!(
            wrote.iter().all(|(_, end)| end.is_ok()),
            "{case}: {wrote:?}"
        );
        // old rank 5's file, in n2's cache
        let cached = crate::runtime::tests::cache_job_dir(dir.path(), "n2");
        let file = std::fs::read_dir(&cached)
            .unwrap()
            .flatten()
            .map(|e| e.path().join(old_file(1, 5).0))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("{case}: old rank 5's file in {}", cached.display()));
        let mut bytes = std::fs::read(&file).unwrap();
        bytes[7] ^= 0x10;
        std::fs::write(&file, &bytes).unwrap();
        let out = job_logged(dir.path(), &nodes, FLUSHED, |rt, r| {
            read_writers_where(rt, half_share(r))
        });
        for (r, (read, end, _)) in out.iter().enumerate() {
            assert_eq!(
                read,
                &Some(("ckpt.1".to_string(), 8, true)),
                "{case}: rank {r}"
            );
            assert_eq!(end, &Ok(()), "{case}: rank {r}");
        }
        let lines = &out[0].2;
        let named = said(lines, "part_5.dat");
        assert!(
            named.len() == 1 && named[0].contains("CRC32") && named[0].contains("in cache"),
            "{case}: {lines:#?}"
        );
        assert_eq!(
            said(lines, "read in place in the prefix").len(),
            1,
            "{case}: {lines:#?}"
        );
        let index = crate::state::prefix::Index::load(&prefix).unwrap();
        assert!(
            index.datasets.values().all(|e| e.failed.is_none()),
            "{case}: {index:?}"
        );
    }
}

/// Lose node `node` of the job in `dir`: its cache and control directories.
fn lose(dir: &Path, node: &str) {
    for base in ["cache", "cntl"] {
        let d = dir.join(base).join(node);
        std::fs::remove_dir_all(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
    }
}

/// Node n3 of the 8-rank job is lost with its cache, nothing was flushed: a job of 6
/// ranks on the three nodes left rebuilds old ranks 6 and 7 from their sets' redundancy
/// (XOR, and RS), in the old sets' geometry, then every rank reads its share byte-exact
/// from the caches. Losing two nodes is one beyond what XOR tolerates: no rank is offered
/// the checkpoint, every rank alike, and the reason is said.
#[test]
fn a_lost_nodes_old_ranks_are_rebuilt_from_redundancy_then_served() {
    for (scheme, lost, rebuilt) in [
        ("XOR", &["n3"][..], true),
        ("RS", &["n3"][..], true),
        ("XOR", &["n2", "n3"][..], false),
    ] {
        let case = format!("{scheme} losing {lost:?}");
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path().join("prefix");
        let env = [("SCR_FLUSH", "0"), ("SCR_COPY_TYPE", scheme)];
        let wrote = job(dir.path(), &EIGHT, &env, |rt, r| {
            write_parts(rt, &prefix, 1, r)
        });
        assert!(
            wrote.iter().all(|(_, end)| end.is_ok()),
            "{case}: {wrote:?}"
        );
        for node in lost {
            lose(dir.path(), node);
        }
        let left = ["n0", "n0", "n1", "n1", "n2", "n2"];
        let nodes = &left[..if rebuilt { 6 } else { 4 }];
        let m = nodes.len() as u32;
        let out = job_logged(dir.path(), nodes, &env, |rt, r| {
            let share = super::super::restart::from_cache::share_of(r, 8, m);
            read_writers_where(rt, |w| share.contains(&w))
        });
        for (r, (read, end, _)) in out.iter().enumerate() {
            let want = rebuilt.then(|| ("ckpt.1".to_string(), 8, true));
            assert_eq!(read, &want, "{case}: rank {r}");
            assert_eq!(end, &Ok(()), "{case}: rank {r}");
        }
        let lines: Vec<String> = out.iter().flat_map(|o| o.2.clone()).collect();
        if rebuilt {
            assert!(
                !said(&lines, "rebuilt old rank(s)").is_empty(),
                "{case}: {lines:#?}"
            );
            assert_eq!(said(&out[0].2, "from the nodes' caches").len(), 1, "{case}");
        } else {
            let why = said(&out[0].2, "cannot be read from the nodes' caches");
            assert!(
                why.len() == 1 && why[0].contains("more than XOR tolerates (1)"),
                "{case}: {:#?}",
                out[0].2
            );
        }
        assert!(
            staging_dirs(dir.path()).is_empty(),
            "{case}: the copies are removed"
        );
    }
}

/// A filemap on one node names a file outside the dataset's directory (damaged or
/// hostile): the rank offered it refuses before building a path from it, every rank
/// passes over the caches alike, naming the file, and (nothing flushed) no checkpoint is
/// offered.
#[test]
fn a_cached_record_naming_a_file_outside_its_directory_is_refused_by_every_rank() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("prefix");
    let env = [("SCR_FLUSH", "0"), ("SCR_COPY_TYPE", "XOR")];
    let wrote = job(dir.path(), &EIGHT, &env, |rt, r| {
        write_parts(rt, &prefix, 1, r)
    });
    assert!(wrote.iter().all(|(_, end)| end.is_ok()), "{wrote:?}");
    // old rank 5's record, on n2
    let cntl = crate::layout::job_dir(&dir.path().join("cntl"), true, "n2", USER, JOB);
    let mut map = Filemap::load(&cntl, 5).unwrap();
    for rec in map.datasets.values_mut() {
        rec.files[0].name = "../../escape.dat".into();
    }
    map.save(&cntl).unwrap();
    let four = ["n0", "n1", "n2", "n3"];
    let out = job_logged(dir.path(), &four, &env, |rt, r| {
        read_writers_where(rt, half_share(r))
    });
    for (r, (read, end, _)) in out.iter().enumerate() {
        assert_eq!(read, &None, "rank {r}");
        assert_eq!(end, &Ok(()), "rank {r}");
    }
    let why = said(&out[0].2, "cannot be read from the nodes' caches");
    assert!(
        why.len() == 1 && why[0].contains("offered old rank 5's file at `../../escape.dat`"),
        "{:#?}",
        out[0].2
    );
}

/// What a restart of another size left in a store (a run that ended inside it) is
/// removed by the next init, on every node.
#[test]
fn a_restarts_leftover_copies_are_removed_at_the_next_init() {
    let dir = tempfile::tempdir().unwrap();
    for node in ["n0", "n1"] {
        let left = cache_job_dir(dir.path(), node).join("scr.resize.7.1/ckpt.7");
        std::fs::create_dir_all(&left).unwrap();
        std::fs::write(left.join("part_3.dat"), b"a copy").unwrap();
    }
    assert_eq!(staging_dirs(dir.path()).len(), 2);
    let out = job(dir.path(), &["n0", "n1"], &[], |rt, _| rt.have_restart());
    for (r, (offered, end)) in out.iter().enumerate() {
        assert_eq!((offered, end), (&None, &Ok(())), "rank {r}");
    }
    assert!(
        staging_dirs(dir.path()).is_empty(),
        "{:?}",
        staging_dirs(dir.path())
    );
}
