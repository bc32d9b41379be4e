//! Tests of the event log: its format, appending, reading damaged logs and `scr log`'s
//! figures.

use super::*;

fn rec(time: f64, job: &str, event: Event) -> String {
    serde_json::to_string(&Record {
        time,
        job_id: job.into(),
        event,
    })
    .unwrap()
}

fn ckpt(id: u64, bytes: u64, seconds: f64) -> Event {
    Event::Checkpoint {
        name: format!("ckpt.{id}"),
        id,
        bytes,
        seconds,
    }
}

fn init() -> Event {
    Event::Init {
        ranks: 4,
        nodes: 2,
        seconds: 0.5,
        restarted_from: None,
    }
}

#[test]
fn a_line_is_flat_json_with_time_job_and_kind() {
    let line = rec(
        12.5,
        "77",
        Event::Flush {
            name: "ckpt.1".into(),
            id: 1,
            bytes: 10,
            seconds: 0.25,
            ok: true,
        },
    );
    assert_eq!(
        line,
        r#"{"time":12.5,"job_id":"77","event":"flush","name":"ckpt.1","id":1,"bytes":10,"seconds":0.25,"ok":true}"#
    );
    let back: Record = serde_json::from_str(&line).unwrap();
    assert_eq!(back.time, 12.5);
    assert_eq!(
        rec(
            1.0,
            "j",
            Event::LostNodes {
                nodes: vec!["n1".into()]
            }
        ),
        r#"{"time":1.0,"job_id":"j","event":"lost_nodes","nodes":["n1"]}"#
    );
}

#[test]
fn the_summary_of_a_synthetic_log_is_exact() {
    // job A: 3 checkpoints of 2, 4 and 6 s, a failure reported twice (one failure),
    // runs 0..1000; job B (the restart): one checkpoint of 3 s, lost nodes, a second
    // failure, flushes, runs 2000..3000 and finalizes.
    let lines = [
        rec(0.0, "A", init()),
        rec(100.0, "A", ckpt(1, 1000, 2.0)),
        rec(200.0, "A", ckpt(2, 1000, 4.0)),
        rec(
            250.0,
            "A",
            Event::Flush {
                name: "ckpt.2".into(),
                id: 2,
                bytes: 3000,
                seconds: 1.5,
                ok: true,
            },
        ),
        rec(300.0, "A", ckpt(3, 2000, 6.0)),
        rec(
            990.0,
            "A",
            Event::Failure {
                what: "rank 3 died".into(),
                rank: Some(3),
            },
        ),
        rec(
            1000.0,
            "A",
            Event::LostNodes {
                nodes: vec!["n1".into()],
            },
        ),
        rec(2000.0, "B", init()),
        rec(
            2001.0,
            "B",
            Event::Rebuild {
                name: "ckpt.3".into(),
                id: 3,
                ranks: vec![2, 3],
                seconds: 0.5,
            },
        ),
        rec(2500.0, "B", ckpt(4, 0, 3.0)),
        rec(
            2600.0,
            "B",
            Event::Flush {
                name: "ckpt.4".into(),
                id: 4,
                bytes: 1000,
                seconds: 0.5,
                ok: true,
            },
        ),
        rec(
            2700.0,
            "B",
            Event::Flush {
                name: "ckpt.4".into(),
                id: 4,
                bytes: 999,
                seconds: 9.0,
                ok: false,
            },
        ),
        rec(
            2800.0,
            "B",
            Event::Failure {
                what: "node n0 lost".into(),
                rank: None,
            },
        ),
        rec(
            2900.0,
            "B",
            Event::Halt {
                reason: "checkpoints left 0".into(),
            },
        ),
        rec(
            3000.0,
            "B",
            Event::Finalize {
                seconds_total: 1000.0,
            },
        ),
    ];
    // out of order and with a damaged line: sorted, skipped
    let mut text = lines[1..].join("\n");
    text.push_str("\n{\"time\": 5, \"job_id\"\n");
    text.push_str(&lines[0]);
    text.push('\n');
    let (records, damaged) = parse(&text, "test");
    assert_eq!(damaged, 1);
    assert_eq!(records.len(), 15);
    assert_eq!(records[0].time, 0.0);
    let s = summarize(&records, damaged);
    assert_eq!(s.events, 15);
    assert_eq!(s.jobs.len(), 2);
    assert_eq!(
        s.jobs[0],
        JobSummary {
            job_id: "A".into(),
            runs: 1,
            first: 0.0,
            last: 1000.0,
            checkpoints: 3,
            failures: 1,
            finalized: false
        }
    );
    assert_eq!(s.jobs[1].failures, 1);
    assert!(s.jobs[1].finalized);
    assert_eq!(s.checkpoints.count, 4);
    assert_eq!(s.checkpoints.bytes, 4000);
    assert_eq!(s.checkpoints.seconds_mean, Some(3.75)); // (2+4+6+3)/4
    assert_eq!(s.flushes.count, 3);
    assert_eq!(s.flushes.failed, 1);
    assert_eq!(s.flushes.bytes, 4000);
    assert_eq!(s.flushes.seconds, 2.0);
    assert_eq!(s.flushes.bandwidth, Some(2000.0));
    assert_eq!(s.rebuilds, 1);
    assert_eq!(s.halts, vec!["checkpoints left 0".to_string()]);
    assert_eq!(s.failures, 2);
    // run A ran 0..300 (its last checkpoint; the failure reports and the days
    // before B are not run time), run B 2000..3000
    assert_eq!(s.advice.run_seconds, 1300.0);
    assert_eq!(s.advice.mtbf_seconds, Some(650.0));
    // C = 3.75, M = 650: Young sqrt(4875)
    let young = 4875f64.sqrt();
    assert_eq!(s.advice.young_seconds, Some(young));
    let daly = young * (1.0 + (3.75f64 / 1300.0).sqrt() / 3.0 + 3.75 / 11700.0) - 3.75;
    assert_eq!(s.advice.daly_seconds, Some(daly));
    assert!((daly - 67.3436).abs() < 1e-3, "{daly}");
    assert_eq!(s.advice.no_advice, None);
    let text = render(&s);
    assert!(
        text.contains("jobs: 2 (1 finalized), 15 events, 1 damaged lines skipped"),
        "{text}"
    );
    assert!(
        text.contains("checkpoints: 4, mean cost 3.75s, 3.9 KiB in all"),
        "{text}"
    );
    assert!(
        text.contains("flushes: 3 (1 failed), 3.9 KiB in 2.00s: 2.0 KiB/s"),
        "{text}"
    );
    assert!(
        text.contains("mean time between failures 10m 50s"),
        "{text}"
    );
    assert!(
        text.contains("Young 1m 10s (sqrt(2CM)), Daly 1m 07s"),
        "{text}"
    );
}

#[test]
fn the_days_between_runs_of_one_job_id_are_not_run_time() {
    // no resource manager: every run is job 0; a day passes between the runs
    let text = [
        rec(0.0, "0", init()),
        rec(100.0, "0", ckpt(1, 5, 1.0)),
        rec(
            200.0,
            "0",
            Event::Finalize {
                seconds_total: 200.0,
            },
        ),
        rec(
            86_399.0,
            "0",
            Event::Failure {
                what: "the previous run ended without finalize".into(),
                rank: None,
            },
        ),
        rec(86_400.0, "0", init()),
        rec(86_500.0, "0", ckpt(2, 5, 1.0)),
    ]
    .join("\n");
    let (r, _) = parse(&text, "t");
    assert_eq!(summarize(&r, 0).advice.run_seconds, 300.0);
}

#[test]
fn daly_falls_back_to_m_when_checkpoints_cost_more_than_2m() {
    assert_eq!(daly(300.0, 100.0), 100.0);
    assert_eq!(daly(200.0, 100.0), 100.0);
    assert!(daly(199.0, 100.0) < 200.0);
    assert_eq!(young(2.0, 100.0), 20.0);
}

#[test]
fn too_few_failures_say_so() {
    let text = [
        rec(0.0, "A", init()),
        rec(10.0, "A", ckpt(1, 5, 1.0)),
        rec(
            70.0,
            "A",
            Event::Failure {
                what: "x".into(),
                rank: None,
            },
        ),
    ]
    .join("\n");
    let (r, d) = parse(&text, "t");
    let s = summarize(&r, d);
    assert_eq!(s.failures, 1);
    assert_eq!(s.advice.mtbf_seconds, None);
    assert_eq!(s.advice.young_seconds, None);
    assert_eq!(
        s.advice.no_advice.as_deref(),
        Some("too few failures to estimate the time between them (1 in 10.0s of run time; at least 2 needed)")
    );
    let s = summarize(&[], 0);
    assert_eq!(
        s.advice.no_advice.as_deref(),
        Some("no checkpoint recorded: the cost of a checkpoint is not known")
    );
}

#[test]
fn log_event_appends_lines_0600_and_creates_dot_scr() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("p");
    std::fs::create_dir(&prefix).unwrap();
    log_event(&prefix, "9", Event::Halt { reason: "r".into() });
    log_event(&prefix, "9", Event::Finalize { seconds_total: 2.0 });
    let p = path(&prefix);
    let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let (records, damaged) = read(&prefix).unwrap();
    assert_eq!(damaged, 0);
    assert_eq!(
        records.iter().map(|r| r.event.clone()).collect::<Vec<_>>(),
        vec![
            Event::Halt { reason: "r".into() },
            Event::Finalize { seconds_total: 2.0 }
        ]
    );
    assert!(records[0].time > 1.7e9);
    let text = std::fs::read_to_string(&p).unwrap();
    assert_eq!(text.lines().count(), 2);
    assert!(
        text.ends_with("\"event\":\"finalize\",\"seconds_total\":2.0}\n"),
        "{text}"
    );
}

#[test]
fn concurrent_writers_never_interleave_lines() {
    // each log_event opens its own descriptor, as separate processes do
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().to_path_buf();
    let threads: Vec<_> = (0..8u32)
        .map(|t| {
            let prefix = prefix.clone();
            std::thread::spawn(move || {
                for i in 0..100u32 {
                    log_event(
                        &prefix,
                        &format!("job{t}"),
                        Event::Failure {
                            what: format!("{t}:{i}:").repeat(400),
                            rank: Some(i),
                        },
                    );
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let (records, damaged) = read(&prefix).unwrap();
    assert_eq!(damaged, 0);
    assert_eq!(records.len(), 800);
    for r in &records {
        let Event::Failure { what, rank } = &r.event else {
            panic!("{r:?}")
        };
        let t = r.job_id.strip_prefix("job").unwrap();
        assert_eq!(what, &format!("{t}:{}:", rank.unwrap()).repeat(400));
    }
}

#[test]
fn a_link_at_the_log_is_refused_and_nothing_written_through_it() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path();
    std::fs::create_dir(prefix.join(".scr")).unwrap();
    let target = prefix.join("elsewhere");
    std::fs::write(&target, "").unwrap();
    std::os::unix::fs::symlink(&target, path(prefix)).unwrap();
    let rec = Record {
        time: 1.0,
        job_id: "j".into(),
        event: Event::Halt { reason: "r".into() },
    };
    let err = append(prefix, &rec).unwrap_err();
    assert!(err.to_string().contains("symbolic link"), "{err}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "");
    // log_event only warns
    log_event(prefix, "j", Event::Halt { reason: "r".into() });
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "");
}

#[test]
fn a_prefix_that_cannot_hold_the_log_only_warns() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, "x").unwrap();
    log_event(&file, "j", Event::Halt { reason: "r".into() });
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
}

#[test]
fn an_online_recovery_counts_as_a_failure_and_as_a_recovery() {
    let recovery = |at: f64| {
        rec(
            at,
            "A",
            Event::Recovery {
                lost: vec![2],
                replaced: vec![2],
                ranks: 8,
                seconds: 0.01,
            },
        )
    };
    let text = [
        rec(0.0, "A", init()),
        recovery(100.0),
        rec(100.5, "A", init()),
        recovery(400.0),
        rec(400.5, "A", init()),
    ]
    .join("\n");
    assert!(text.contains("\"event\":\"recovery\",\"lost\":[2],\"replaced\":[2],\"ranks\":8"));
    let (r, damaged) = parse(&text, "t");
    assert_eq!(damaged, 0);
    let s = summarize(&r, 0);
    assert_eq!((s.failures, s.recoveries), (2, 2));
    assert!(
        render(&s).contains("online recoveries: 2,"),
        "{}",
        render(&s)
    );
}
