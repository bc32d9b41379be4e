//! Agreement in whole runtimes: a failure on some ranks, a rank configured otherwise, a
//! commit or a delete failing on one rank, a call misused on some ranks, a file name two
//! ranks route — each reaches every rank alike, and the ranks stay in step.

use super::*;

#[test]
fn a_failure_on_some_ranks_reaches_every_rank_as_the_first_failing_ranks_error() {
    let out = run_ranks(4, |w: Box<dyn World>| {
        let me = w.rank();
        let local: Result<u32> = if me == 1 || me == 3 {
            Err(ScrError::Usage(format!("rank {me} refused")))
        } else {
            Ok(me)
        };
        let agreed = collective::agree_on(&*w, local);
        let all_ok = collective::agree_on(&*w, Ok::<u32, ScrError>(me));
        (error_text(&agreed), all_ok.ok())
    });
    assert_eq!(out.len(), 4, "one outcome per rank");
    // failing ranks keep their own error; the others learn rank 1's, the first
    assert_eq!(out[1].0, "rank 1 refused");
    assert_eq!(out[3].0, "rank 3 refused");
    for r in [0, 2] {
        assert_eq!(
            out[r].0,
            "another rank failed, this rank stops with it: rank 1: rank 1 refused"
        );
    }
    let ok: Vec<Option<u32>> = out.iter().map(|o| o.1).collect();
    assert_eq!(ok, vec![Some(0), Some(1), Some(2), Some(3)]);
}

#[test]
fn a_rank_with_another_configuration_is_named_on_every_rank() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["n0", "n0", "n1", "n1"];
    let out = run_ranks(4, |w: Box<dyn World>| {
        let extra: &[(&str, &str)] = if w.rank() == 2 {
            &[("SCR_CACHE_SIZE", "7")]
        } else {
            &[]
        };
        let config = init::load_config(&*w, loader(dir.path(), &nodes, extra));
        let config = collective::agree_on(&*w, config).expect("every rank loads a configuration");
        error_text(&collective::agree_on(&*w, init::same_config(&*w, &config)))
    });
    for (rank, text) in out.iter().enumerate() {
        assert!(
            text.contains("rank 2") && text.contains("cache_size"),
            "rank {rank}: {text}"
        );
    }
}

/// A rank that cannot record a dataset as complete after every rank decided to keep it
/// (an injected control-directory failure on rank 2) makes every rank discard it, keeps
/// the previous checkpoint as the restart candidate, and the next checkpoint works.
/// (Moved here from the end-to-end suite: it checks the runtime's agreement only.)
#[test]
fn a_commit_failing_on_one_rank_discards_the_dataset_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["n0", "n1", "n2", "n3"];
    let faulty = [
        ("SCR_FAULT", "commit:2:2"),
        ("SCR_COPY_TYPE", "XOR"),
        ("SCR_SET_SIZE", "4"),
    ];
    let out = job(dir.path(), &nodes, &faulty, |rt, r| {
        let mut lines = Vec::new();
        for n in 1..=3 {
            let name = format!("ckpt.{n}");
            lines.push(
                match write_checkpoint(rt, dir.path(), &name, &format!("c{n}_{r}.dat")) {
                    Ok(kept) => format!("{name} kept {kept}"),
                    Err(e) => format!("{name} error: {e}"),
                },
            );
            lines.push(format!("candidate {:?}", rt.have_restart()));
        }
        lines
    });
    for (r, (lines, end)) in out.iter().enumerate() {
        assert_eq!(lines, &out[0].0, "rank {r} returned something else");
        assert_eq!(end, &Ok(()), "rank {r}: finalize");
    }
    let lines = &out[0].0;
    assert_eq!(lines[0], "ckpt.1 kept true");
    assert_eq!(lines[1], "candidate Some(\"ckpt.1\")");
    assert!(
        lines[2].starts_with(
            "ckpt.2 error: complete_output ckpt.2: the dataset could not be recorded as complete on rank 2: "
        ) && lines[2].contains("injected failure (commit:2:2)")
            && lines[2].contains("discarded on every rank"),
        "{}",
        lines[2]
    );
    assert_eq!(lines[3], "candidate Some(\"ckpt.1\")");
    assert_eq!(lines[4], "ckpt.3 kept true");
    assert_eq!(lines[5], "candidate Some(\"ckpt.3\")");
    for node in nodes {
        // the job directory is there (with ckpt.1 and ckpt.3); nothing of ckpt.2 is
        let job = cache_job_dir(dir.path(), node);
        let held = listing(&job);
        assert!(
            held.contains(&"scr.dataset.3".to_string()),
            "{node}: {held:?}"
        );
        let ds2 = crate::layout::cache_dataset_dir(&job, 2);
        let left = if ds2.exists() {
            listing(&ds2)
        } else {
            Vec::new()
        };
        assert!(left.is_empty(), "{}: {left:?}", ds2.display());
    }
    // a restart finds ckpt.3 on every rank
    let again = job(dir.path(), &nodes, &faulty[1..], |rt, _| {
        format!("candidate {:?}", rt.have_restart())
    });
    for (report, _) in &again {
        assert_eq!(report, "candidate Some(\"ckpt.3\")");
    }
}

/// A delete that fails on one rank after the others deleted their files leaves the
/// ranks' caches diverged: that call fails everywhere, every later call is refused on
/// every rank saying to finalize, and finalize still works with a dataset open.
/// (Moved here from the end-to-end suite.)
#[test]
fn after_a_call_leaves_state_uncertain_every_rank_refuses_further_calls() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["n0", "n1", "n2", "n3"];
    let out = job_logged(
        dir.path(),
        &nodes,
        &[("SCR_FAULT", "delete:1:1")],
        |rt, r| {
            let mut lines = vec![show(
                "kept",
                write_checkpoint(rt, dir.path(), "ckpt.1", &format!("c_{r}.dat")),
            )];
            rt.start_output("ckpt.2", CHECKPOINT).expect("start");
            let p = rt
                .route_file(&dir.path().join("prefix").join(format!("d_{r}.dat")))
                .unwrap();
            std::fs::write(&p, b"two").unwrap();
            lines.push(show("delete", rt.delete("ckpt.1").map(|_| "")));
            lines.push(show(
                "start",
                rt.start_output("ckpt.2", CHECKPOINT).map(|_| ""),
            ));
            lines.push(show("need", rt.need_checkpoint()));
            lines.push(show(
                "route",
                rt.route_file(Path::new("x.dat"))
                    .map(|p| p.display().to_string()),
            ));
            lines.push(show("exit", rt.should_exit()));
            lines
        },
    );
    // rank 0 says it (the runtime's warnings are rank 0's)
    assert!(
        out[0]
            .2
            .iter()
            .any(|l| l.contains("finalize: a dataset was still being written; it is discarded")),
        "{:?}",
        out[0].2
    );
    for (r, (lines, end, _)) in out.iter().enumerate() {
        assert_eq!(end, &Ok(()), "rank {r}: finalize worked");
        assert_eq!(lines[0], "kept: ok true", "rank {r}: {lines:?}");
        assert!(
            lines[1].starts_with("delete: ") && lines[1].contains("injected failure (delete:1:1)"),
            "rank {r}: {lines:?}"
        );
        for (line, (call, api)) in lines[2..].iter().zip([
            ("start", "start_output"),
            ("need", "need_checkpoint"),
            ("route", "route_file"),
            ("exit", "should_exit"),
        ]) {
            assert!(
                line.starts_with(&format!(
                    "{call}: {api}: refused, because an earlier call left the ranks' cached state uncertain (delete: "
                )) && line.contains("call finalize (or MPI_Abort)"),
                "rank {r}: {line}"
            );
        }
        assert_eq!(lines.len(), 6, "rank {r}: {lines:?}");
    }
    for node in nodes {
        // the job directory is there (listing panics otherwise); the open ckpt.2 is gone
        let job = cache_job_dir(dir.path(), node);
        listing(&job);
        let open = crate::layout::cache_dataset_dir(&job, 2);
        let left = if open.exists() {
            listing(&open)
        } else {
            Vec::new()
        };
        assert!(
            left.is_empty(),
            "{}: the open dataset was not dropped: {left:?}",
            open.display()
        );
    }
}

/// Collective calls misused on some ranks only — a bad dataset name on rank 3, a name
/// rank 1 does not know given to current/drop/delete, complete_restart without
/// start_restart on rank 2 — fail on every rank instead of leaving the others waiting,
/// and the ranks stay in step. (Moved here from the end-to-end suite.)
#[test]
fn a_call_misused_on_some_ranks_fails_on_every_rank_and_leaves_them_in_step() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["n0", "n1", "n2", "n3"];
    let out = job(dir.path(), &nodes, &[], |rt, r| {
        let name = if r == 3 { "bad/name" } else { "ckpt.1" };
        let mut lines = vec![show("start", rt.start_output(name, CHECKPOINT).map(|_| ""))];
        lines.push(show(
            "complete",
            write_checkpoint(rt, dir.path(), "ckpt.1", &format!("c_{r}.dat")),
        ));
        let name = if r == 1 { "nope" } else { "ckpt.1" };
        lines.push(show("current", rt.current(name).map(|_| "")));
        lines.push(show("drop", rt.drop_dataset(name).map(|_| "")));
        lines.push(show("delete", rt.delete(name).map(|_| "")));
        let restart = if r == 2 {
            rt.complete_restart(true)
        } else {
            rt.start_restart().and_then(|_| rt.complete_restart(true))
        };
        lines.push(show("restart", restart));
        lines.push(format!("candidate {:?}", rt.have_restart()));
        lines
    });
    for (r, (lines, _)) in out.iter().enumerate() {
        let cause = "dataset name `bad/name` must be non-empty and contain no `/`";
        assert!(
            lines[0].starts_with("start: ") && lines[0].contains(cause),
            "rank {r}: {lines:?}"
        );
        assert_eq!(lines[1], "complete: ok true", "rank {r}: {lines:?}");
        assert!(
            lines[2].starts_with("current: ")
                && lines[2].contains("no dataset named `nope` in cache"),
            "rank {r}: {}",
            lines[2]
        );
        // drop and delete accept a name nothing holds (as SCR does), but not names that
        // differ between ranks
        for (line, call) in lines[3..5].iter().zip(["drop", "delete"]) {
            assert!(
                line.starts_with(&format!("{call}: "))
                    && line.contains(&format!(
                        "{call}: this rank names dataset `nope`, rank 0 `ckpt.1`; every rank must name the same dataset"
                    )),
                "rank {r}: {line}"
            );
        }
        assert!(
            lines[5].starts_with("restart: ")
                && lines[5].contains("complete_restart: no restart in progress"),
            "rank {r}: {lines:?}"
        );
        assert_eq!(
            lines[6], "candidate Some(\"ckpt.1\")",
            "rank {r}: {lines:?}"
        );
    }
    // the rank that misused the call names the cause itself; the others name its rank
    assert!(
        out[1].0[2].starts_with("current: no dataset named"),
        "{:?}",
        out[1].0
    );
    assert!(
        out[0].0[2].contains("rank 1: no dataset named"),
        "{:?}",
        out[0].0
    );
}

/// Two ranks routing one file name into one dataset is a usage error on every rank, naming
/// both ranks; the dataset is not kept and the previous checkpoint stays the candidate.
/// (Moved here from the end-to-end suite, with the same message.)
#[test]
fn a_name_routed_by_two_ranks_is_refused_on_every_rank() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["n0", "n0", "n1", "n1"];
    let out = job(dir.path(), &nodes, &[], |rt, r| {
        let first = show(
            "ckpt.1",
            write_checkpoint(rt, dir.path(), "ckpt.1", &format!("a_{r}.dat")),
        );
        // ranks 1 and 2 both write shared.dat
        let file = if r == 1 || r == 2 {
            "shared.dat".to_string()
        } else {
            format!("b_{r}.dat")
        };
        let second = show("ckpt.2", write_checkpoint(rt, dir.path(), "ckpt.2", &file));
        (first, second, rt.have_restart())
    });
    for (r, ((first, second, candidate), end)) in out.iter().enumerate() {
        assert_eq!(first, "ckpt.1: ok true", "rank {r}");
        assert_eq!(
            second,
            "ckpt.2: complete_output ckpt.2: ranks 1 and 2 both routed `shared.dat`; each rank must write files of its own in cache: for a file several ranks write (a shared file), set `bypass = true` on this checkpoint descriptor (SCR_CACHE_BYPASS=1 for every descriptor) to write it straight to the prefix, as SCR 3.1 does by default; dataset discarded; the later datasets of checkpoint descriptor 0 bypass the cache for the rest of this run (their files go straight to the prefix, where ranks may share a file): set bypass = true on it to keep that from the first",
            "rank {r}"
        );
        assert_eq!(candidate.as_deref(), Some("ckpt.1"), "rank {r}");
        assert_eq!(end, &Ok(()), "rank {r}");
    }
}
