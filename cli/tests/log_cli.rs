//! `scr log`: the summary of an event log written through `log_event`, as text and JSON,
//! with a damaged line, the default prefix from the configuration, and a missing log.

use std::path::Path;
use std::process::Command;

use scr_host::events::{log_event, Event};

const SCR: &str = env!("CARGO_BIN_EXE_scr");

fn scr(cwd: &Path, args: &[&str], env: &[(&str, String)]) -> (i32, String, String) {
    let empty = cwd.join("empty-system.toml");
    std::fs::write(&empty, "").unwrap();
    let mut cmd = Command::new(SCR);
    cmd.env_clear()
        .current_dir(cwd)
        .args(args)
        .env("SCR_SYSTEM_CONFIG", &empty);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn scr_log_summarises_what_jobs_logged() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("prefix");
    std::fs::create_dir(&prefix).unwrap();
    let p = prefix.to_str().unwrap();

    // no log yet: an error naming it
    let (code, out, err) = scr(dir.path(), &["log", "--prefix", p], &[]);
    assert_eq!(code, 1, "{out}{err}");
    assert_eq!(
        err,
        format!(
            "scr: error: no event log at {p}/.scr/events.jsonl: no job has logged to this prefix yet (check --prefix)\n"
        )
    );

    log_event(
        &prefix,
        "5",
        Event::Init {
            ranks: 4,
            nodes: 2,
            seconds: 0.25,
            restarted_from: None,
        },
    );
    for (id, secs) in [(1u64, 1.0), (2, 3.0)] {
        log_event(
            &prefix,
            "5",
            Event::Checkpoint {
                name: format!("ckpt.{id}"),
                id,
                bytes: 1 << 20,
                seconds: secs,
            },
        );
    }
    log_event(
        &prefix,
        "5",
        Event::Flush {
            name: "ckpt.2".into(),
            id: 2,
            bytes: 4 << 20,
            seconds: 2.0,
            ok: true,
        },
    );
    log_event(
        &prefix,
        "5",
        Event::Failure {
            what: "rank 1 exited".into(),
            rank: Some(1),
        },
    );
    // a torn line, as a full disk leaves it
    let log = prefix.join(".scr/events.jsonl");
    let mut text = std::fs::read_to_string(&log).unwrap();
    text.push_str("{\"time\":1.0,\"job_\n");
    std::fs::write(&log, text).unwrap();
    log_event(&prefix, "6", Event::Finalize { seconds_total: 9.0 });

    let (code, out, err) = scr(dir.path(), &["log", "--prefix", p], &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        err,
        format!("scr: warning: {p}/.scr/events.jsonl:6: damaged event line skipped (EOF while parsing a string at line 1 column 17)\n")
    );
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("jobs: 2 (1 finalized), 6 events, 1 damaged lines skipped"),
        "{out}"
    );
    assert!(
        out.contains(
            "\ncheckpoints: 2, mean cost 2.00s, 2.0 MiB in all (1.0 MiB each on average)\n"
        ),
        "{out}"
    );
    assert!(
        out.contains("\nflushes: 1 (0 failed), 4.0 MiB in 2.00s: 2.0 MiB/s\n"),
        "{out}"
    );
    assert!(out.contains("\nfailures: 1 in "), "{out}");
    assert!(
        out.contains("checkpoint interval: no advice: too few failures to estimate the time between them (1 in "),
        "{out}"
    );

    // JSON, with the prefix from the configuration (SCR_PREFIX)
    let (code, out, err) = scr(
        dir.path(),
        &["log", "--json"],
        &[("SCR_PREFIX", p.to_string())],
    );
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["checkpoints"], 2);
    assert_eq!(v["checkpoint_seconds_mean"], 2.0);
    assert_eq!(v["checkpoint_bytes"], 2 << 20);
    assert_eq!(v["flush_bandwidth"], (2 << 20) as f64);
    assert_eq!(v["failures"], 1);
    assert_eq!(v["damaged_lines"], 1);
    assert_eq!(v["jobs"].as_array().unwrap().len(), 2);
    assert!(v["young_seconds"].is_null());

    let (code, out, _) = scr(dir.path(), &["log", "--help"], &[]);
    assert_eq!(code, 0);
    assert!(out.contains("Young's"), "{out}");
    assert!(out.contains("--json"), "{out}");
}
