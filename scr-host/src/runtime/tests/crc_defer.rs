//! `crc_on_copy_defer`: SINGLE's CRC32s hashed in the background, recorded at a later
//! call, waited for by a restart, finalize and delete, and checked by the flush and by a
//! new run (which does not restore what nothing vouches for).

use super::*;

/// SINGLE on four simulated nodes, no flush, with `extra` settings.
fn single_env<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut env = vec![("SCR_COPY_TYPE", "SINGLE"), ("SCR_FLUSH", "0")];
    env.extend_from_slice(extra);
    env
}

const FOUR: [&str; 4] = ["n0", "n1", "n2", "n3"];

/// This rank's record of dataset `name` as its control directory holds it (what a new
/// process would find).
fn on_disk(rt: &Runtime, name: &str) -> DatasetRecord {
    Filemap::load(rt.control_dir(), rt.rank())
        .unwrap()
        .datasets
        .into_values()
        .find(|d| d.name == name)
        .unwrap_or_else(|| panic!("rank {}: no record of {name} on disk", rt.rank()))
}

/// Call need_checkpoint (a polling call, collective) until every rank's background hash
/// is recorded: the loop ends on every rank in the same round.
fn poll_until_recorded(rt: &mut Runtime) {
    let started = std::time::Instant::now();
    loop {
        rt.need_checkpoint().unwrap();
        if rt.world.sum_u64(u64::from(rt.cache.hashing())) == 0 {
            return;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "rank {}: the background hash never finished",
            rt.rank()
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// The CRC32s of a SINGLE checkpoint are not read in complete_output: the record is
/// committed pending, the hash runs in a thread, a polling call records the files' real
/// CRC32s in the filemap on disk, and the pending flag is cleared. With
/// `crc_on_copy_defer = false`, and with XOR (which hashes in its apply), complete_output
/// records them itself and leaves no job.
#[test]
fn a_single_checkpoints_crc32s_are_hashed_in_the_background_and_recorded_at_a_later_call() {
    let dir = tempfile::tempdir().unwrap();
    let out = job(dir.path(), &FOUR, &single_env(&[]), |rt, me| {
        let file = format!("f1_{me}");
        assert!(write_checkpoint(rt, dir.path(), "ckpt.1", &file).unwrap());
        let pending = rt.cache.hashing();
        // the snapshot as committed (`Filemap::load` would apply the thread's note, which
        // it may have written by now)
        let committed = crate::state::read_state::<Filemap>(
            &rt.control_dir().join(Filemap::file_name(me)),
            crate::state::filemap::KIND,
        )
        .unwrap()
        .datasets
        .into_values()
        .next()
        .unwrap();
        assert!(
            committed.complete && committed.crc32_pending,
            "{committed:?}"
        );
        assert_eq!(committed.files[0].crc32, None);
        poll_until_recorded(rt);
        // in the filemap itself now: the thread's note has served and is gone
        let note = rt.control_dir().join(Filemap::crc_note_name(me));
        assert!(!note.exists(), "{}", note.display());
        let recorded = on_disk(rt, "ckpt.1");
        let real = crc32fast::hash(format!("ckpt.1 {file}").as_bytes());
        (
            pending,
            recorded.crc32_pending,
            recorded.files[0].crc32 == Some(real),
        )
    });
    for (rank, ((pending, still, equal), end)) in out.iter().enumerate() {
        assert!(
            pending,
            "rank {rank}: complete_output left no background hash"
        );
        assert!(!still, "rank {rank}: still pending after the join");
        assert!(equal, "rank {rank}: the recorded CRC32 is not the file's");
        assert_eq!(end, &Ok(()), "rank {rank}");
    }

    for env in [
        single_env(&[("SCR_CRC_ON_COPY_DEFER", "0")]),
        vec![("SCR_COPY_TYPE", "XOR"), ("SCR_FLUSH", "0")],
    ] {
        let dir = tempfile::tempdir().unwrap();
        let out = job(dir.path(), &FOUR, &env, |rt, me| {
            let file = format!("f1_{me}");
            assert!(write_checkpoint(rt, dir.path(), "ckpt.1", &file).unwrap());
            let rec = on_disk(rt, "ckpt.1");
            let real = crc32fast::hash(format!("ckpt.1 {file}").as_bytes());
            (
                rt.cache.hashing(),
                rec.crc32_pending,
                rec.files[0].crc32 == Some(real),
            )
        });
        for (rank, (r, _)) in out.iter().enumerate() {
            assert_eq!(r, &(false, false, true), "rank {rank} with {env:?}");
        }
    }
}

/// A restart in the same run and finalize wait for the hash: start_restart finds the
/// CRC32s recorded before a file is routed for reading, and a hash still running at
/// finalize is recorded before it returns.
#[test]
fn start_restart_and_finalize_record_a_pending_hash_first() {
    let dir = tempfile::tempdir().unwrap();
    let out = job(dir.path(), &FOUR, &single_env(&[]), |rt, me| {
        let file = format!("f1_{me}");
        assert!(write_checkpoint(rt, dir.path(), "ckpt.1", &file).unwrap());
        assert_eq!(rt.have_restart().as_deref(), Some("ckpt.1"));
        rt.start_restart().unwrap();
        let joined = !rt.cache.hashing();
        let rec = rt.cache.datasets().next().unwrap().clone();
        let path = rt
            .route_file(&dir.path().join("prefix").join(&file))
            .unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert!(rt.complete_restart(true).unwrap());
        // the next checkpoint's hash is still pending when finalize runs
        assert!(write_checkpoint(rt, dir.path(), "ckpt.2", &format!("f2_{me}")).unwrap());
        (
            joined,
            !rec.crc32_pending && rec.files[0].crc32 == Some(crc32fast::hash(&bytes)),
        )
    });
    for (rank, (r, end)) in out.iter().enumerate() {
        assert_eq!(r, &(true, true), "rank {rank}");
        assert_eq!(end, &Ok(()), "rank {rank}");
    }
    // after finalize, what a new process finds: ckpt.2's CRC32s recorded
    for (rank, node) in FOUR.iter().enumerate() {
        let cntl = dir
            .path()
            .join("cntl")
            .join(node)
            .join(USER)
            .join(format!("scr.{JOB}"));
        // recorded in the filemap by finalize, not only noted by the thread
        assert!(!cntl.join(Filemap::crc_note_name(rank as u32)).exists());
        let map = Filemap::load(&cntl, rank as u32).unwrap();
        let rec = map.datasets.values().find(|d| d.name == "ckpt.2").unwrap();
        assert!(!rec.crc32_pending, "rank {rank}: {rec:?}");
        assert_eq!(
            rec.files[0].crc32,
            Some(crc32fast::hash(format!("ckpt.2 f2_{rank}").as_bytes())),
            "rank {rank}"
        );
    }
}

/// A byte damaged in cache after the background hash read it is caught by the flush,
/// which compares what it copies against the recorded CRC32 (finalize flushes the newest
/// checkpoint, `flush = 10`, so complete_output itself flushed nothing and deferred).
#[test]
fn a_flush_after_a_deferred_hash_catches_a_byte_damaged_in_cache() {
    let dir = tempfile::tempdir().unwrap();
    let env = [("SCR_COPY_TYPE", "SINGLE"), ("SCR_FLUSH", "10")];
    let out = job_logged(dir.path(), &FOUR, &env, |rt, me| {
        let file = format!("f1_{me}");
        assert!(write_checkpoint(rt, dir.path(), "ckpt.1", &file).unwrap());
        let deferred = rt.cache.hashing();
        poll_until_recorded(rt);
        // every rank's hash is recorded before rank 1 damages its file
        rt.world.barrier();
        if me == 1 {
            let rec = rt.cache.datasets().next().unwrap().clone();
            let path = rt
                .job
                .dataset_dir(&rec.descriptor.store, rec.id)
                .join(&rec.files[0].name);
            let mut bytes = std::fs::read(&path).unwrap();
            bytes[0] ^= 0x01;
            std::fs::write(&path, bytes).unwrap();
        }
        rt.world.barrier();
        deferred
    });
    for (rank, (deferred, end, _)) in out.iter().enumerate() {
        assert!(deferred, "rank {rank}");
        assert_eq!(
            end,
            &Ok(()),
            "rank {rank}: finalize never fails for a flush"
        );
    }
    let all: Vec<&String> = out.iter().flat_map(|o| o.2.iter()).collect();
    let real = crc32fast::hash(b"ckpt.1 f1_1");
    let caught: Vec<&&String> = all
        .iter()
        .filter(|l| l.contains("f1_1") && l.contains(&format!("CRC32 {real:08x}")))
        .collect();
    assert!(!caught.is_empty(), "no rank reported the damage: {all:#?}");
    assert!(
        !indexed_complete(&dir.path().join("prefix"), "ckpt.1"),
        "the damaged checkpoint was recorded as flushed"
    );
}

/// Whether the prefix's index holds dataset `name` as completely flushed.
fn indexed_complete(prefix: &Path, name: &str) -> bool {
    crate::state::prefix::Index::load(prefix)
        .map(|ix| {
            ix.datasets
                .values()
                .any(|e| e.name == name && e.complete && e.failed.is_none())
        })
        .unwrap_or(false)
}

/// Write ckpt.1 and ckpt.2 (SINGLE, `cache_size = 3`), let only rank 0 record ckpt.2's
/// CRC32s, and end the job without finalize: the other ranks' records stay pending on
/// disk, as when a job dies before its hash is recorded. With `noted`, their threads
/// finished and wrote their notes first (the job died while the application computed);
/// without, they are stopped and their notes removed (it died before the hash was done).
fn die_with_a_pending_hash(dir: &Path, noted: bool) {
    std::fs::create_dir_all(dir.join("prefix")).unwrap();
    let env = single_env(&[("SCR_CACHE_SIZE", "3")]);
    let pending = run_ranks(4, |w: Box<dyn World>| {
        let me = w.rank();
        let mut rt = init_hooked(w, loader(dir, &FOUR, &env), InitOptions::default())
            .unwrap_or_else(|e| panic!("rank {me}: init: {e}"));
        write_range(&mut rt, dir, me, 1..=2);
        if me == 0 {
            rt.cache.settle_crc();
        } else if let Some(job) = rt.cache.take_crc_job() {
            if noted {
                // done, never recorded by the runtime
                drop(job.join());
            } else {
                job.cancel();
                crate::state::filemap::CrcNote::remove(rt.control_dir(), me).unwrap();
            }
        }
        let pending = on_disk(&rt, "ckpt.2").crc32_pending;
        let snapshot = crate::state::read_state::<Filemap>(
            &rt.control_dir().join(Filemap::file_name(me)),
            crate::state::filemap::KIND,
        )
        .unwrap();
        let in_snapshot = snapshot.datasets.values().any(|d| d.crc32_pending);
        rt.abandon();
        (pending, in_snapshot)
    });
    // what a new process loads: rank 0 recorded, the others pending unless noted
    let want: Vec<(bool, bool)> = (0..4).map(|r| (r != 0 && !noted, r != 0)).collect();
    assert_eq!(pending, want);
}

/// A new run finds ckpt.2's CRC32s never recorded on ranks 1-3: with `crc_on_restart`
/// those ranks' files are not used, SINGLE drops the dataset everywhere with one warning
/// naming it and why, and the restart falls back to ckpt.1 (read back exactly). With
/// `crc_on_restart = false` ckpt.2 is restarted from, as files without CRC32 are.
#[test]
fn a_new_run_does_not_restore_a_dataset_whose_crc32s_were_never_recorded() {
    let dir = tempfile::tempdir().unwrap();
    die_with_a_pending_hash(dir.path(), false);
    let prefix = dir.path().join("prefix");
    let env = single_env(&[("SCR_CACHE_SIZE", "3")]);
    let out = job_logged(dir.path(), &FOUR, &env, |rt, me| {
        (rt.lost_datasets().to_vec(), read_back(rt, &prefix, me))
    });
    let why = "its CRC32s were never recorded";
    for (rank, ((lost, read), end, lines)) in out.iter().enumerate() {
        assert_eq!(read, "ckpt.1 exact=true from cache", "rank {rank}");
        assert_eq!(end, &Ok(()), "rank {rank}");
        assert_eq!(lost.len(), 1, "rank {rank}: {lost:?}");
        assert!(
            lost[0].starts_with("dataset 2 (ckpt.2) cannot be restored and was dropped")
                && lost[0].contains(&format!("rank 1: {why}"))
                && lost[0].contains(&format!("rank 3: {why}"))
                && !lost[0].contains(&format!("rank 0: {why}")),
            "rank {rank}: {}",
            lost[0]
        );
        let warned = said(lines, why);
        let expected = usize::from(rank == 0);
        assert_eq!(warned.len(), expected, "rank {rank}: {lines:#?}");
    }

    let dir = tempfile::tempdir().unwrap();
    die_with_a_pending_hash(dir.path(), false);
    let prefix = dir.path().join("prefix");
    let env = single_env(&[("SCR_CACHE_SIZE", "3"), ("SCR_CRC_ON_RESTART", "0")]);
    let out = job(dir.path(), &FOUR, &env, |rt, me| {
        (rt.lost_datasets().to_vec(), read_back(rt, &prefix, me))
    });
    for (rank, ((lost, read), end)) in out.iter().enumerate() {
        assert_eq!(read, "ckpt.2 exact=true from cache", "rank {rank}");
        assert!(lost.is_empty(), "rank {rank}: {lost:?}");
        assert_eq!(end, &Ok(()), "rank {rank}");
    }
}

/// A job that dies after its background hashes finished (the application computing)
/// but before they were recorded keeps its newest checkpoint: the threads' notes give the
/// next run the CRC32s, which verify the files — a byte damaged in cache since is caught
/// (ckpt.2 dropped, restart from ckpt.1), an intact cache restarts from ckpt.2.
#[test]
fn a_new_run_restores_a_dataset_whose_crc32s_were_noted_and_checks_them() {
    for damage in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        die_with_a_pending_hash(dir.path(), true);
        if damage {
            let victim = cache_job_dir(dir.path(), "n2")
                .join("scr.dataset.2")
                .join("f2_2");
            let mut bytes = std::fs::read(&victim).unwrap();
            bytes[0] ^= 0x20;
            std::fs::write(&victim, bytes).unwrap();
        }
        let prefix = dir.path().join("prefix");
        let env = single_env(&[("SCR_CACHE_SIZE", "3")]);
        let out = job(dir.path(), &FOUR, &env, |rt, me| {
            (rt.lost_datasets().to_vec(), read_back(rt, &prefix, me))
        });
        for (rank, ((lost, read), end)) in out.iter().enumerate() {
            assert_eq!(end, &Ok(()), "rank {rank}");
            if damage {
                assert_eq!(read, "ckpt.1 exact=true from cache", "rank {rank}");
                assert!(
                    lost.len() == 1
                        && lost[0].contains("[rank 2: ")
                        && lost[0].contains("scr.dataset.2/f2_2: CRC32")
                        && lost[0].contains("recorded]"),
                    "rank {rank}: {lost:?}"
                );
            } else {
                assert_eq!(read, "ckpt.2 exact=true from cache", "rank {rank}");
                assert!(lost.is_empty(), "rank {rank}: {lost:?}");
            }
        }
    }
}

/// Deleting a dataset whose hash is still pending stops the hash first: nothing is
/// recorded for files that are gone, no warning says they vanished, and with
/// `crc_on_delete` no damage is reported.
#[test]
fn deleting_a_dataset_whose_hash_is_pending_cancels_the_hash() {
    let dir = tempfile::tempdir().unwrap();
    let env = single_env(&[("SCR_CRC_ON_DELETE", "1")]);
    let out = job_logged(dir.path(), &FOUR, &env, |rt, me| {
        assert!(write_checkpoint(rt, dir.path(), "ckpt.1", &format!("f1_{me}")).unwrap());
        let pending = rt.cache.hashing();
        rt.delete("ckpt.1").unwrap();
        (pending, !rt.cache.hashing(), rt.cache.ids().is_empty())
    });
    for (rank, (r, end, lines)) in out.iter().enumerate() {
        assert_eq!(r, &(true, true, true), "rank {rank}");
        assert_eq!(end, &Ok(()), "rank {rank}");
        assert!(
            said(lines, "CRC32").is_empty() && said(lines, "crc_on_delete").is_empty(),
            "rank {rank}: {lines:#?}"
        );
    }
}

/// A file the background hash cannot read is named in a warning with its rank and
/// recorded without a CRC32, and the record stays pending: nothing vouches for the
/// file's bytes, so a later run does not restore this rank's files of the dataset.
#[test]
fn a_file_the_background_hash_cannot_read_is_named_and_leaves_the_dataset_unverifiable() {
    let dir = tempfile::tempdir().unwrap();
    let out = job_logged(dir.path(), &FOUR, &single_env(&[]), |rt, me| {
        assert!(write_checkpoint(rt, dir.path(), "ckpt.1", &format!("f1_{me}")).unwrap());
        rt.cache.settle_crc();
        // as if the file vanished under the thread: a job over a path that is not there
        let id = rt.cache.ids()[0];
        let mut file = String::new();
        rt.cache.update(id, |rec| {
            rec.crc32_pending = true;
            file = rec.files[0].name.clone();
        });
        let gone = dir.path().join(format!("vanished_{me}"));
        rt.cache.set_crc_job(
            deferred_crc::CrcJob::spawn(id, "ckpt.1", vec![(file, gone)], 4096, None).unwrap(),
        );
        poll_until_recorded(rt);
        let rec = on_disk(rt, "ckpt.1");
        (rec.crc32_pending, rec.files[0].crc32)
    });
    for (rank, (r, end, lines)) in out.iter().enumerate() {
        // still pending: a later run does not restore files nothing vouches for
        assert_eq!(r, &(true, None), "rank {rank}");
        assert_eq!(end, &Ok(()), "rank {rank}");
        let warned = said(
            lines,
            &format!("rank {rank}: dataset 1 (ckpt.1): f1_{rank}: its CRC32 could not be computed"),
        );
        assert_eq!(warned.len(), 1, "rank {rank}: {lines:#?}");
        assert!(warned[0].contains("No such file"), "{}", warned[0]);
    }
}
