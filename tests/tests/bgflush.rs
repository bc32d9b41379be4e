//! Background flush completion through MPI, under `mpiexec -n 4` on
//! four simulated nodes with `scr-bgflush-probe`: a background flush is recorded at the
//! first collective call after every rank's transfer ended (not by a thread, not before),
//! with the rank2file map, summary and data exactly what was written; no `done.*.scr`
//! marker file appears in the prefix; and polling costs nothing while nothing is pending
//! and one 8-byte reduction per call while something is.

use scr_e2e::comm_report::Report;
use scr_e2e::Cluster;
use scr_host::state::prefix::{FlushedFile, Index, Rank2File, Summary};

const FOUR_NODES: &[&str] = &["n0", "n1", "n2", "n3"];

/// Rank r's file as the probe writes it: 100 bytes, each `r * 16 + i`.
fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn bytes_of(r: usize) -> Vec<u8> {
    (0..100).map(|i| (r * 16 + i) as u8).collect()
}

fn run(c: &Cluster) -> Vec<Report> {
    let out = c.run(FOUR_NODES, "scr-bgflush-probe", &[]);
    assert_eq!(out.code, 0, "{out}");
    (0..4)
        .map(|r| {
            let text = std::fs::read_to_string(c.prefix().join(format!("bgflush_{r}.txt")))
                .unwrap_or_else(|e| panic!("rank {r} wrote no report: {e}\n{out}"));
            let report = Report::parse(&text);
            assert_eq!(
                report.lines[0], "world size 4",
                "rank {r}: not a 4-rank job\n{out}"
            );
            report
        })
        .collect()
}

#[test]
fn a_background_flush_is_recorded_at_the_next_collective_call_with_one_reduction() {
    let mut c = Cluster::new();
    c.set("SCR_FLUSH", "1")
        .set("SCR_FLUSH_ASYNC", "1")
        .set("SCR_CLUSTER_NAME", "quartz");
    let began = now_secs();
    let reports = run(&c);
    for (r, rep) in reports.iter().enumerate() {
        assert!(rep.has("kept true"), "rank {r}: {:?}", rep.lines);
        assert!(
            !rep.lines
                .iter()
                .any(|l| l.starts_with("transfer did not end")),
            "rank {r}: {:?}",
            rep.lines
        );
        // no marker file, neither while the flush was pending nor once it was recorded
        assert!(rep.has("before markers []"), "rank {r}: {:?}", rep.lines);
        assert!(rep.has("after markers []"), "rank {r}: {:?}", rep.lines);

        // need_checkpoint decides on rank 0 and broadcasts one byte; with nothing
        // pending that is all (no exchange for the poll)
        let need = if r == 0 {
            [1, 1, 0, 0, 1, 0]
        } else {
            [1, 1, 0, 0, 0, 1]
        };
        assert_eq!(rep.names("idle"), ["need_checkpoint"], "rank {r}");
        assert_eq!(rep.get("idle", "need_checkpoint"), need, "rank {r}");
        // with a flush pending: exactly one more collective, an all-reduce of a u64
        // (8 bytes each way); completing the flush counts under its own name
        let mut polled = need;
        polled[1] += 1;
        polled[4] += 8;
        polled[5] += 8;
        assert_eq!(rep.get("pending", "need_checkpoint"), polled, "rank {r}");
        assert_eq!(
            rep.names("pending"),
            ["flush_complete", "need_checkpoint"],
            "rank {r}"
        );
        assert_eq!(rep.get("pending", "flush_complete")[0], 1, "rank {r}");
        // recorded: nothing pending any more, no exchange for the poll again
        assert_eq!(rep.names("again"), ["need_checkpoint"], "rank {r}");
        assert_eq!(rep.get("again", "need_checkpoint"), need, "rank {r}");
    }
    // the flush was not recorded before the call, and was by it
    assert!(
        reports[0].has("before flushed false"),
        "{:?}",
        reports[0].lines
    );
    assert!(
        reports[0].has("after flushed true"),
        "{:?}",
        reports[0].lines
    );

    // what it recorded is exactly what each rank wrote
    let prefix = c.prefix();
    let ix = Index::load(&prefix).unwrap();
    let entry = ix
        .datasets
        .values()
        .find(|e| e.name == "ckpt.1")
        .expect("ckpt.1 in the index");
    assert!(entry.complete && entry.failed.is_none(), "{entry:?}");
    assert_eq!(ix.current.as_deref(), Some("ckpt.1"));
    let expected = Rank2File {
        ranks: (0..4u32)
            .map(|r| {
                (
                    r,
                    vec![FlushedFile {
                        name: format!("state_{r}.dat"),
                        size: 100,
                        crc32: Some(crc32fast::hash(&bytes_of(r as usize))),
                        stored: None,
                    }],
                )
            })
            .collect(),
    };
    assert_eq!(Rank2File::load(&prefix, entry.id).unwrap(), expected);
    // who made it, where and when: this job, on this machine, since the test began
    let written: Summary =
        scr_host::state::read_state(&Summary::path(&prefix, entry.id), "summary").unwrap();
    assert_eq!(written.made.job_id.as_deref(), Some("e2e"));
    assert_eq!(written.made.user.as_deref(), Some(scr_e2e::USER));
    assert_eq!(written.made.cluster.as_deref(), Some("quartz"));
    assert_eq!(
        entry.made, written.made,
        "the index records what the summary does"
    );
    let created = written.made.created.expect("a creation time");
    assert!((began..=now_secs()).contains(&created), "{created}");
    let summary = Summary {
        id: entry.id,
        name: "ckpt.1".into(),
        checkpoint_id: Some(1),
        world_size: 4,
        files: 4,
        bytes: 400,
        complete: true,
        job_name: None,
        made: written.made.clone(),
    };
    // byte for byte what the runtime writes for that summary
    let want = c.path("summary.expected");
    scr_host::state::write_state(&want, "summary", &summary).unwrap();
    assert_eq!(
        std::fs::read(Summary::path(&prefix, entry.id)).unwrap(),
        std::fs::read(&want).unwrap()
    );
    for r in 0..4 {
        assert_eq!(
            std::fs::read(prefix.join(format!("state_{r}.dat"))).unwrap(),
            bytes_of(r),
            "rank {r}'s flushed file"
        );
    }
    let left: Vec<String> = scr_e2e::relative_files_below(&prefix)
        .into_iter()
        .filter(|f| f.rsplit('/').next().is_some_and(|n| n.starts_with("done.")))
        .collect();
    assert!(left.is_empty(), "marker files in the prefix: {left:?}");
}
