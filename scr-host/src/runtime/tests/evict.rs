//! Datasets leaving: the oldest checkpoint evicted from every cache alike, SCR's Drop and
//! Delete reaching the prefix, and a delete racing a background flush's recording.

use super::*;

/// A store of `cache_size` 2: the oldest checkpoint is evicted from every rank's cache
/// when a third is written, and the newest two stay.
#[test]
fn the_oldest_checkpoint_is_evicted_from_every_rank_alike() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["n0", "n1", "n2"];
    let out = job(dir.path(), &nodes, &[("SCR_CACHE_SIZE", "2")], |rt, r| {
        for n in 1..=3 {
            write_checkpoint(rt, dir.path(), &format!("ckpt.{n}"), &format!("f{n}_{r}"))
                .expect("checkpoint");
        }
        let mut held: Vec<u64> = rt.cache.ids();
        held.sort_unstable();
        held
    });
    for (r, (held, end)) in out.iter().enumerate() {
        assert_eq!(held, &[2, 3], "rank {r}: the filemap keeps the newest two");
        assert_eq!(end, &Ok(()), "rank {r}");
    }
    for node in nodes {
        // on disk too: exactly the newest two, each with this node's file
        let job = cache_job_dir(dir.path(), node);
        assert_eq!(listing(&job), ["scr.dataset.2", "scr.dataset.3"], "{node}");
        for id in [2, 3] {
            let files = listing(&crate::layout::cache_dataset_dir(&job, id));
            assert!(
                files.iter().any(|f| f.starts_with(&format!("f{id}_"))),
                "{node}: dataset {id} holds {files:?}"
            );
        }
    }
}

/// A store never holds more than its count, the dataset being written included, as in
/// SCR: with `cache_size` 1 the previous checkpoint leaves the cache when the next one
/// starts (the trade-off the default of 2 avoids), on every rank alike. An output
/// dataset does not push out the newest checkpoint while that one is not flushed (its
/// only copy): the store then goes over its count and says so.
#[test]
fn a_store_of_count_one_holds_one_dataset_the_one_being_written_included() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["n0", "n1"];
    let env = [("SCR_CACHE_SIZE", "1"), ("SCR_FLUSH", "0")];
    let out = job_with(dir.path(), &nodes, &env, InitOptions::default(), |rt, r| {
        write_checkpoint(rt, dir.path(), "ckpt.1", &format!("f1_{r}")).expect("ckpt.1");
        rt.start_output("ckpt.2", CHECKPOINT).expect("start ckpt.2");
        let while_writing = rt.cache.ids();
        let p = rt
            .route_file(&dir.path().join("prefix").join(format!("f2_{r}")))
            .unwrap();
        std::fs::write(&p, "two").unwrap();
        assert!(rt.complete_output(true).unwrap());
        let after = rt.cache.ids();
        // an output: the newest checkpoint, never flushed, stays beside it
        write_dataset(rt, dir.path(), "out.3", &format!("o3_{r}"), OUTPUT).expect("out.3");
        let mut with_output = rt.cache.ids();
        with_output.sort_unstable();
        (while_writing, after, with_output)
    });
    for (r, ((writing, after, with_output), end, logs)) in out.iter().enumerate() {
        assert_eq!(writing, &[2], "rank {r}: ckpt.1 left when ckpt.2 started");
        assert_eq!(after, &[2], "rank {r}");
        assert_eq!(
            with_output,
            &[2, 3],
            "rank {r}: the unflushed checkpoint stays"
        );
        assert_eq!(end, &Ok(()), "rank {r}");
        let over = said(logs, "goes over its count (1): ckpt.2 may not leave it");
        assert_eq!(over.len(), usize::from(r == 0), "rank {r}: {logs:?}");
    }
    for node in nodes {
        let job = cache_job_dir(dir.path(), node);
        assert_eq!(listing(&job), ["scr.dataset.2", "scr.dataset.3"], "{node}");
    }
}

/// SCR's Drop and Delete: drop removes the dataset's index entry (its files stay), delete
/// removes its files from cache and prefix and its entry; a name nothing holds is no
/// error.
#[test]
fn drop_and_delete_reach_the_prefix_and_a_name_nothing_holds_is_no_error() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["n0", "n1"];
    let prefix = dir.path().join("prefix");
    let out = job(dir.path(), &nodes, &[("SCR_FLUSH", "1")], |rt, r| {
        for n in 1..=3 {
            write_checkpoint(rt, dir.path(), &format!("ckpt.{n}"), &format!("f{n}_{r}"))
                .expect("checkpoint");
        }
        vec![
            show("drop", rt.drop_dataset("ckpt.1").map(|_| "")),
            show("delete", rt.delete("ckpt.2").map(|_| "")),
            show("drop unknown", rt.drop_dataset("nope").map(|_| "")),
            show("delete unknown", rt.delete("nope").map(|_| "")),
            format!("candidate {:?}", rt.have_restart()),
        ]
    });
    for (r, (lines, end)) in out.iter().enumerate() {
        assert_eq!(
            lines,
            &[
                "drop: ok ",
                "delete: ok ",
                "drop unknown: ok ",
                "delete unknown: ok ",
                "candidate Some(\"ckpt.3\")"
            ],
            "rank {r}"
        );
        assert_eq!(end, &Ok(()), "rank {r}");
    }
    let index = crate::state::prefix::Index::load(&prefix).unwrap();
    let names: Vec<&str> = index.datasets.values().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["ckpt.3"], "the index keeps only ckpt.3");
    for r in 0..2 {
        // dropped: its files stay in the prefix; deleted: gone
        assert!(
            prefix.join(format!("f1_{r}")).is_file(),
            "ckpt.1 of rank {r} stays"
        );
        assert!(
            !prefix.join(format!("f2_{r}")).exists(),
            "ckpt.2 of rank {r} deleted"
        );
        assert!(
            prefix.join(format!("f3_{r}")).is_file(),
            "ckpt.3 of rank {r} stays"
        );
    }
    assert!(!crate::layout::prefix_dataset_dir(&prefix, 2).exists());
    for node in nodes {
        let held = listing(&cache_job_dir(dir.path(), node));
        assert!(
            !held.contains(&"scr.dataset.2".to_string()),
            "{node}: {held:?}"
        );
        assert!(
            held.contains(&"scr.dataset.3".to_string()),
            "{node}: {held:?}"
        );
    }
}

/// A delete (or an invalid restart) of a dataset whose background flush has not been
/// recorded yet waits for it: recording it afterwards would otherwise bring the dataset
/// back into the index as complete and current.
#[test]
fn a_delete_during_a_background_flush_is_not_undone_by_its_recording() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["n0", "n1"];
    let prefix = dir.path().join("prefix");
    let env = [("SCR_FLUSH", "1"), ("SCR_FLUSH_ASYNC", "1")];
    let out = job(dir.path(), &nodes, &env, |rt, r| {
        write_checkpoint(rt, dir.path(), "ckpt.1", &format!("f1_{r}")).expect("ckpt.1");
        write_checkpoint(rt, dir.path(), "ckpt.2", &format!("f2_{r}")).expect("ckpt.2");
        show("delete", rt.delete("ckpt.2").map(|_| ""))
    });
    for (r, (line, end)) in out.iter().enumerate() {
        assert_eq!(line, "delete: ok ", "rank {r}");
        assert_eq!(end, &Ok(()), "rank {r}");
    }
    // finalize completed every flush: ckpt.1 recorded, ckpt.2 gone for good
    let index = crate::state::prefix::Index::load(&prefix).unwrap();
    let names: Vec<&str> = index.datasets.values().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["ckpt.1"]);
    assert_eq!(index.restart_point().as_deref(), Some("ckpt.1"));
    for r in 0..2 {
        assert!(prefix.join(format!("f1_{r}")).is_file(), "rank {r}");
        assert!(!prefix.join(format!("f2_{r}")).exists(), "rank {r}");
    }
}

/// Evicted files are moved into the rank's trash directory and unlinked by its deleting
/// thread: the evicted dataset's directory is gone at once, and after finalize so are
/// its files and the trash directory. A trash directory a crashed run left is removed by
/// the next init.
#[test]
fn evicted_files_are_deleted_off_the_application_path_and_a_crashs_trash_goes_at_init() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["n0", "n1"];
    let env = [
        ("SCR_COPY_TYPE", "SINGLE"),
        ("SCR_FLUSH", "0"),
        ("SCR_CACHE_SIZE", "2"),
    ];
    let out = job(dir.path(), &nodes, &env, |rt, me| {
        write_range(rt, dir.path(), me, 1..=3);
        let store = cache_job_dir(dir.path(), nodes[me as usize]);
        // ckpt.1 (dataset 1) left for ckpt.3
        (
            store.join("scr.dataset.1").exists(),
            store.join("scr.dataset.2").is_dir() && store.join("scr.dataset.3").is_dir(),
        )
    });
    for (rank, ((first, later), end)) in out.iter().enumerate() {
        assert!(
            !first,
            "rank {rank}: the evicted dataset's directory is still there"
        );
        assert!(later, "rank {rank}");
        assert_eq!(end, &Ok(()), "rank {rank}");
    }
    for node in nodes {
        let names = listing(&cache_job_dir(dir.path(), node));
        assert_eq!(names, ["scr.dataset.2", "scr.dataset.3"], "{node}");
    }
    // a crash's leftovers: a file in rank 0's trash
    let trash = cache_job_dir(dir.path(), "n0").join("scr.trash.0");
    std::fs::create_dir_all(&trash).unwrap();
    std::fs::write(trash.join("7"), b"left by a crash").unwrap();
    let prefix = dir.path().join("prefix");
    let out = job(dir.path(), &nodes, &env, |rt, me| {
        read_back(rt, &prefix, me)
    });
    for (rank, (r, _)) in out.iter().enumerate() {
        assert_eq!(r, "ckpt.3 exact=true from cache", "rank {rank}");
    }
    assert!(!trash.exists(), "{} survived init", trash.display());
}
