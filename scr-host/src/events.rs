//! The event log, `<prefix>/.scr/events.jsonl`: what every job did, one JSON object a line,
//! and `scr log`'s summary of it.
//!
//! Each line is `{"time": <seconds since the epoch>, "job_id": "...", "event": "<kind>",
//! <the kind's fields>}` (see [`Event`]). Lines are appended with `O_APPEND` in one
//! `write` each, so lines of several processes (the job, `scr scavenge`, a second job on
//! the same prefix) never interleave on a local or parallel file system that honours
//! `O_APPEND`. The file is created 0600 and never written through a symbolic link planted
//! at its name. Writing never fails the caller: a log that cannot be written costs a
//! warning, never a checkpoint. A reader skips a damaged line (a torn write after a
//! full disk, an edit) with a warning naming its line number.
//!
//! The summary gives the figures a user needs to choose a checkpoint interval: the mean
//! cost of a checkpoint C (seconds from start to complete), the mean time between
//! failures M (observed run time divided by the number of failures), and from them
//! Young's interval `sqrt(2CM)` and Daly's refinement
//! `sqrt(2CM) * (1 + sqrt(C/(2M))/3 + C/(18M)) - C` (for `C < 2M`, else `M`).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// One thing a job did or suffered.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The library initialised: world size, node count, how long init took, and the
    /// checkpoint it restarted from (fetched or found in cache), if any.
    Init {
        /// Ranks in the job.
        ranks: u32,
        /// Nodes in the job.
        nodes: u32,
        /// How long it took, in seconds.
        seconds: f64,
        /// The checkpoint the job restarted from, if any.
        restarted_from: Option<String>,
    },
    /// A checkpoint completed (all ranks, redundancy applied): its total bytes and the
    /// seconds from start to complete.
    Checkpoint {
        /// The dataset's name.
        name: String,
        /// The dataset's id.
        id: u64,
        /// Bytes of the dataset (all ranks).
        bytes: u64,
        /// How long it took, in seconds.
        seconds: f64,
    },
    /// The files of `ranks` were rebuilt from redundancy data.
    Rebuild {
        /// The dataset's name.
        name: String,
        /// The dataset's id.
        id: u64,
        /// The ranks whose files were rebuilt.
        ranks: Vec<u32>,
        /// How long it took, in seconds.
        seconds: f64,
    },
    /// A dataset was fetched from the prefix into cache.
    Fetch {
        /// The dataset's name.
        name: String,
        /// The dataset's id.
        id: u64,
        /// Bytes of the dataset (all ranks).
        bytes: u64,
        /// How long it took, in seconds.
        seconds: f64,
    },
    /// A dataset was flushed to the prefix (`ok` false: the flush failed).
    Flush {
        /// The dataset's name.
        name: String,
        /// The dataset's id.
        id: u64,
        /// Bytes of the dataset (all ranks).
        bytes: u64,
        /// How long it took, in seconds.
        seconds: f64,
        /// Whether it succeeded.
        ok: bool,
    },
    /// The job stopped on a halt condition.
    Halt {
        /// Why the job halted.
        reason: String,
    },
    /// Something failed: a rank, a node, a plugin; `rank` when one rank is to blame.
    Failure {
        /// What failed.
        what: String,
        /// The rank to blame, when one is.
        rank: Option<u32>,
    },
    /// Nodes whose cache was lost (found at a restart or by scavenge).
    LostNodes {
        /// The nodes, by name.
        nodes: Vec<String>,
    },
    /// `scr scavenge` copied a dataset out of cache, rebuilding `rebuilt_ranks`.
    Scavenge {
        /// The dataset's name.
        name: String,
        /// The dataset's id.
        id: u64,
        /// Bytes of the dataset (all ranks).
        bytes: u64,
        /// How long it took, in seconds.
        seconds: f64,
        /// Ranks whose files were rebuilt from redundancy data first.
        rebuilt_ranks: Vec<u32>,
    },
    /// The library finalized, `seconds_total` after init.
    Finalize {
        /// Seconds from init to finalize.
        seconds_total: f64,
    },
}

/// One line of the log.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Record {
    /// When, in seconds since the epoch.
    pub time: f64,
    /// The job that logged it.
    pub job_id: String,
    /// What happened.
    #[serde(flatten)]
    pub event: Event,
}

/// The event log of a prefix directory.
pub fn path(prefix: &Path) -> PathBuf {
    prefix.join(".scr").join("events.jsonl")
}

/// Append `event` of job `job_id`, stamped with the current time, to the prefix's event
/// log (creating `<prefix>/.scr` and the log when missing). Never fails: trouble is a
/// warning on stderr, since losing a log line must not lose a checkpoint.
pub fn log_event(prefix: &Path, job_id: &str, event: Event) {
    let time = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let record = Record {
        time,
        job_id: job_id.to_string(),
        event,
    };
    if let Err(e) = append(prefix, &record) {
        tracing::warn!(
            "could not append to the event log {}: {e}; the event is not recorded",
            path(prefix).display()
        );
    }
}

/// Append one record: one `write` of the whole line on an `O_APPEND` descriptor.
pub fn append(prefix: &Path, record: &Record) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(record).map_err(std::io::Error::other)?;
    line.push(b'\n');
    let scr = prefix.join(".scr");
    if !scr.is_dir() {
        std::fs::create_dir_all(&scr)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path(prefix))
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                std::io::Error::other("it is a symbolic link; remove it")
            } else {
                e
            }
        })?;
    let n = file.write(&line)?;
    if n != line.len() {
        // a short write (full disk) left a torn line, which readers skip; end it so the
        // next line stays readable
        let _ = file.write(b"\n");
        return Err(std::io::Error::other(format!(
            "short write ({n} of {} bytes; is the file system full?)",
            line.len()
        )));
    }
    Ok(())
}

/// The records of the log `text` (named `origin` in warnings), in time order, and the
/// number of damaged lines skipped (each with a warning on stderr).
pub fn parse(text: &str, origin: &str) -> (Vec<Record>, usize) {
    let mut records = Vec::new();
    let mut skipped = 0;
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Record>(line) {
            Ok(r) => records.push(r),
            Err(e) => {
                skipped += 1;
                tracing::warn!("{origin}:{}: damaged event line skipped ({e})", i + 1);
            }
        }
    }
    records.sort_by(|a, b| a.time.total_cmp(&b.time));
    (records, skipped)
}

/// Read the event log of `prefix`.
pub fn read(prefix: &Path) -> std::io::Result<(Vec<Record>, usize)> {
    let p = path(prefix);
    let text = std::fs::read(&p)?;
    Ok(parse(
        &String::from_utf8_lossy(&text),
        &p.display().to_string(),
    ))
}

/// Failures closer together than this in one job are one failure (a crash is often
/// reported by several ranks, and as lost nodes too).
pub const SAME_FAILURE_SECONDS: f64 = 60.0;

/// Fewer failures than this give no mean time between failures (one failure in a long
/// log says little about the next).
pub const MIN_FAILURES: usize = 2;

/// What one job did.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct JobSummary {
    /// The job id.
    pub job_id: String,
    /// Inits (runs of the job; more than one when `scr run` relaunched it).
    pub runs: usize,
    /// Time of its first event, in seconds since the epoch.
    pub first: f64,
    /// Time of its last event, in seconds since the epoch.
    pub last: f64,
    /// Checkpoints completed.
    pub checkpoints: usize,
    /// Failures recorded.
    pub failures: usize,
    /// Whether its last run finalized.
    pub finalized: bool,
}

/// The figures `scr log` prints.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Summary {
    /// Events read.
    pub events: usize,
    /// Lines that could not be read (skipped).
    pub damaged_lines: usize,
    /// Per job.
    pub jobs: Vec<JobSummary>,
    /// Checkpoints completed.
    pub checkpoints: usize,
    /// Bytes over all checkpoints.
    pub checkpoint_bytes: u64,
    /// Mean seconds a checkpoint took (C).
    pub checkpoint_seconds_mean: Option<f64>,
    /// Flushes recorded.
    pub flushes: usize,
    /// Flushes that failed.
    pub flushes_failed: usize,
    /// Bytes flushed successfully.
    pub flush_bytes: u64,
    /// Seconds spent in successful flushes.
    pub flush_seconds: f64,
    /// Bytes per second over the successful flushes.
    pub flush_bandwidth: Option<f64>,
    /// Fetches recorded.
    pub fetches: usize,
    /// Rebuilds recorded.
    pub rebuilds: usize,
    /// Scavenges recorded.
    pub scavenges: usize,
    /// The halt reasons, in order.
    pub halts: Vec<String>,
    /// Failures recorded.
    pub failures: usize,
    /// The time the runs ran (see `run_seconds`).
    pub run_seconds: f64,
    /// Mean time between failures (M).
    pub mtbf_seconds: Option<f64>,
    /// Young's interval, sqrt(2CM).
    pub young_seconds: Option<f64>,
    /// Daly's interval.
    pub daly_seconds: Option<f64>,
    /// Why there is no advice, when there is none.
    pub no_advice: Option<String>,
}

/// Young's checkpoint interval for checkpoint cost `c` and mean time between failures `m`.
pub fn young(c: f64, m: f64) -> f64 {
    (2.0 * c * m).sqrt()
}

/// Daly's higher-order checkpoint interval (J. T. Daly, 2006), for `c < 2m`; else `m`.
pub fn daly(c: f64, m: f64) -> f64 {
    if c < 2.0 * m {
        (2.0 * c * m).sqrt() * (1.0 + (c / (2.0 * m)).sqrt() / 3.0 + c / (18.0 * m)) - c
    } else {
        m
    }
}

/// Summarise `records` (in time order), `damaged` lines having been skipped.
pub fn summarize(records: &[Record], damaged: usize) -> Summary {
    let mut s = Summary::empty(records.len(), damaged);
    let ckpt_seconds = count_events(records, &mut s);
    s.run_seconds = run_seconds(records);
    derive_figures(&mut s, ckpt_seconds);
    s
}

impl Summary {
    /// A summary of `events` events with nothing counted yet.
    fn empty(events: usize, damaged: usize) -> Summary {
        Summary {
            events,
            damaged_lines: damaged,
            jobs: Vec::new(),
            checkpoints: 0,
            checkpoint_bytes: 0,
            checkpoint_seconds_mean: None,
            flushes: 0,
            flushes_failed: 0,
            flush_bytes: 0,
            flush_seconds: 0.0,
            flush_bandwidth: None,
            fetches: 0,
            rebuilds: 0,
            scavenges: 0,
            halts: Vec::new(),
            failures: 0,
            run_seconds: 0.0,
            mtbf_seconds: None,
            young_seconds: None,
            daly_seconds: None,
            no_advice: None,
        }
    }
}

/// Count every event into `s` and its job's [`JobSummary`] (the jobs in id order into
/// `s.jobs`); reports of one failure within [`SAME_FAILURE_SECONDS`] count once. The
/// seconds all checkpoints took.
fn count_events(records: &[Record], s: &mut Summary) -> f64 {
    let mut jobs: BTreeMap<&str, JobSummary> = BTreeMap::new();
    let mut ckpt_seconds = 0.0;
    let mut last_failure: BTreeMap<&str, f64> = BTreeMap::new();
    for r in records {
        let job = jobs.entry(&r.job_id).or_insert_with(|| JobSummary {
            job_id: r.job_id.clone(),
            runs: 0,
            first: r.time,
            last: r.time,
            checkpoints: 0,
            failures: 0,
            finalized: false,
        });
        job.first = job.first.min(r.time);
        job.last = job.last.max(r.time);
        match &r.event {
            Event::Init { .. } => job.runs += 1,
            Event::Checkpoint { bytes, seconds, .. } => {
                s.checkpoints += 1;
                job.checkpoints += 1;
                s.checkpoint_bytes += bytes;
                ckpt_seconds += seconds;
            }
            Event::Flush {
                bytes, seconds, ok, ..
            } => {
                s.flushes += 1;
                if *ok {
                    s.flush_bytes += bytes;
                    s.flush_seconds += seconds;
                } else {
                    s.flushes_failed += 1;
                }
            }
            Event::Fetch { .. } => s.fetches += 1,
            Event::Rebuild { .. } => s.rebuilds += 1,
            Event::Scavenge { .. } => s.scavenges += 1,
            Event::Halt { reason } => s.halts.push(reason.clone()),
            Event::Failure { .. } | Event::LostNodes { .. } => {
                let prev = last_failure.insert(&r.job_id, r.time);
                if prev.is_none_or(|t| r.time - t >= SAME_FAILURE_SECONDS) {
                    s.failures += 1;
                    job.failures += 1;
                } else {
                    // the same failure: keep counting the window from its first report
                    last_failure.insert(&r.job_id, prev.unwrap_or(r.time));
                }
            }
            Event::Finalize { .. } => job.finalized = true,
        }
    }
    s.jobs = jobs.into_values().collect();
    ckpt_seconds
}

/// The figures derived from the counts (run time already set): mean checkpoint cost C,
/// flush bandwidth, mean time between failures M, and Young's and Daly's intervals from
/// C and M, or why there is no advice.
fn derive_figures(s: &mut Summary, ckpt_seconds: f64) {
    if s.checkpoints > 0 {
        s.checkpoint_seconds_mean = Some(ckpt_seconds / s.checkpoints as f64);
    }
    if s.flush_seconds > 0.0 {
        s.flush_bandwidth = Some(s.flush_bytes as f64 / s.flush_seconds);
    }
    if s.failures >= MIN_FAILURES && s.run_seconds > 0.0 {
        s.mtbf_seconds = Some(s.run_seconds / s.failures as f64);
    }
    match (s.checkpoint_seconds_mean, s.mtbf_seconds) {
        (Some(c), Some(m)) => {
            s.young_seconds = Some(young(c, m));
            s.daly_seconds = Some(daly(c, m));
        }
        (None, _) => s.no_advice = Some("no checkpoint recorded: the cost of a checkpoint is not known".into()),
        (Some(_), None) => {
            s.no_advice = Some(format!(
                "too few failures to estimate the time between them ({} in {} of run time; at least {MIN_FAILURES} needed)",
                s.failures,
                duration(s.run_seconds)
            ))
        }
    }
}

/// The time the runs ran: for each run (an `init` of a job to its next `init`), from its
/// `init` to its last event of the run's own (checkpoint, flush, fetch, halt, finalize).
/// Not from a job's first event to its last: without a resource manager every run has
/// job id 0, and the days between runs are not run time (they would inflate the mean
/// time between failures, and with it the advised interval). The failure, lost-node and
/// rebuild events logged while a run starts belong to the time before it.
fn run_seconds(records: &[Record]) -> f64 {
    // per job: (start of its current run, its latest event of its own)
    let mut open: BTreeMap<&str, (f64, f64)> = BTreeMap::new();
    let mut total = 0.0;
    for r in records {
        match &r.event {
            Event::Init { .. } => {
                if let Some((start, last)) = open.insert(&r.job_id, (r.time, r.time)) {
                    total += last - start;
                }
            }
            Event::Checkpoint { .. }
            | Event::Flush { .. }
            | Event::Fetch { .. }
            | Event::Halt { .. }
            | Event::Finalize { .. } => {
                if let Some(run) = open.get_mut(r.job_id.as_str()) {
                    run.1 = run.1.max(r.time);
                }
            }
            _ => {}
        }
    }
    total + open.values().map(|(start, last)| last - start).sum::<f64>()
}

/// `seconds` as `1h 02m 03s` (or `4.2s` under a minute).
pub fn duration(seconds: f64) -> String {
    if seconds < 60.0 {
        return format!("{seconds:.1}s");
    }
    let t = seconds.round() as u64;
    let (h, m, s) = (t / 3600, t / 60 % 60, t % 60);
    if h > 0 {
        format!("{h}h {m:02}m {s:02}s")
    } else {
        format!("{m}m {s:02}s")
    }
}

/// `n` bytes with a binary unit.
pub fn bytes(n: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n:.0} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// The summary as `scr log` prints it.
pub fn render(s: &Summary) -> String {
    let mut out = String::new();
    let mut line = |l: String| {
        out.push_str(&l);
        out.push('\n');
    };
    render_jobs(s, &mut line);
    render_data(s, &mut line);
    render_failures(s, &mut line);
    out
}

/// The jobs line of [`render`] (how many, finalized, events, damaged lines) and one
/// line per job.
fn render_jobs(s: &Summary, line: &mut dyn FnMut(String)) {
    let finished = s.jobs.iter().filter(|j| j.finalized).count();
    let ids: BTreeSet<&str> = s.jobs.iter().map(|j| j.job_id.as_str()).collect();
    line(format!(
        "jobs: {} ({finished} finalized), {} events{}",
        ids.len(),
        s.events,
        if s.damaged_lines > 0 {
            format!(", {} damaged lines skipped", s.damaged_lines)
        } else {
            String::new()
        }
    ));
    for j in &s.jobs {
        line(format!(
            "  job {}: {} run(s), {} checkpoint(s), {} failure(s), {}{}",
            j.job_id,
            j.runs,
            j.checkpoints,
            j.failures,
            duration(j.last - j.first),
            if j.finalized { ", finalized" } else { "" }
        ));
    }
}

/// The lines of [`render`] on data: checkpoints and their mean cost, flushes and their
/// bandwidth, fetches, rebuilds, scavenges and halts (each halt's reason).
fn render_data(s: &Summary, line: &mut dyn FnMut(String)) {
    match s.checkpoint_seconds_mean {
        Some(c) => line(format!(
            "checkpoints: {}, mean cost {c:.2}s, {} in all ({} each on average)",
            s.checkpoints,
            bytes(s.checkpoint_bytes as f64),
            bytes(s.checkpoint_bytes as f64 / s.checkpoints as f64)
        )),
        None => line("checkpoints: none".into()),
    }
    let ok = s.flushes - s.flushes_failed;
    match s.flush_bandwidth {
        Some(bw) => line(format!(
            "flushes: {} ({} failed), {} in {:.2}s: {}/s",
            s.flushes,
            s.flushes_failed,
            bytes(s.flush_bytes as f64),
            s.flush_seconds,
            bytes(bw)
        )),
        None => line(format!("flushes: {} ({ok} succeeded)", s.flushes)),
    }
    line(format!(
        "fetches: {}, rebuilds: {}, scavenges: {}, halts: {}",
        s.fetches,
        s.rebuilds,
        s.scavenges,
        s.halts.len()
    ));
    for h in &s.halts {
        line(format!("  halt: {h}"));
    }
}

/// The failure line of [`render`] (with the mean time between failures when known) and
/// the advised checkpoint interval, or why there is none.
fn render_failures(s: &Summary, line: &mut dyn FnMut(String)) {
    match s.mtbf_seconds {
        Some(m) => line(format!(
            "failures: {} in {} of run time: mean time between failures {}",
            s.failures,
            duration(s.run_seconds),
            duration(m)
        )),
        None => line(format!(
            "failures: {} in {} of run time",
            s.failures,
            duration(s.run_seconds)
        )),
    }
    match (s.young_seconds, s.daly_seconds, &s.no_advice) {
        (Some(y), Some(d), _) => {
            line(format!(
                "checkpoint interval advised: Young {} (sqrt(2CM)), Daly {}",
                duration(y),
                duration(d)
            ));
        }
        (_, _, Some(why)) => line(format!("checkpoint interval: no advice: {why}")),
        _ => {}
    }
}

/// `scr log`: the summary of `prefix`'s event log as text, or with `json` as one JSON
/// object; an error names the log when it cannot be read.
pub fn log_report(prefix: &Path, json: bool) -> Result<String, String> {
    let p = path(prefix);
    let (records, damaged) = match read(prefix) {
        Ok(r) => r,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!(
                "no event log at {}: no job has logged to this prefix yet (check --prefix)",
                p.display()
            ))
        }
        Err(e) => return Err(format!("cannot read the event log {}: {e}", p.display())),
    };
    let summary = summarize(&records, damaged);
    if json {
        serde_json::to_string_pretty(&summary)
            .map(|mut t| {
                t.push('\n');
                t
            })
            .map_err(|e| e.to_string())
    } else {
        Ok(render(&summary))
    }
}

#[cfg(test)]
mod tests {
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
        assert_eq!(s.checkpoints, 4);
        assert_eq!(s.checkpoint_bytes, 4000);
        assert_eq!(s.checkpoint_seconds_mean, Some(3.75)); // (2+4+6+3)/4
        assert_eq!(s.flushes, 3);
        assert_eq!(s.flushes_failed, 1);
        assert_eq!(s.flush_bytes, 4000);
        assert_eq!(s.flush_seconds, 2.0);
        assert_eq!(s.flush_bandwidth, Some(2000.0));
        assert_eq!(s.rebuilds, 1);
        assert_eq!(s.halts, vec!["checkpoints left 0".to_string()]);
        assert_eq!(s.failures, 2);
        // run A ran 0..300 (its last checkpoint; the failure reports and the days
        // before B are not run time), run B 2000..3000
        assert_eq!(s.run_seconds, 1300.0);
        assert_eq!(s.mtbf_seconds, Some(650.0));
        // C = 3.75, M = 650: Young sqrt(4875)
        let young = 4875f64.sqrt();
        assert_eq!(s.young_seconds, Some(young));
        let daly = young * (1.0 + (3.75f64 / 1300.0).sqrt() / 3.0 + 3.75 / 11700.0) - 3.75;
        assert_eq!(s.daly_seconds, Some(daly));
        assert!((daly - 67.3436).abs() < 1e-3, "{daly}");
        assert_eq!(s.no_advice, None);
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
        assert_eq!(summarize(&r, 0).run_seconds, 300.0);
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
        assert_eq!(s.mtbf_seconds, None);
        assert_eq!(s.young_seconds, None);
        assert_eq!(
            s.no_advice.as_deref(),
            Some("too few failures to estimate the time between them (1 in 10.0s of run time; at least 2 needed)")
        );
        let s = summarize(&[], 0);
        assert_eq!(
            s.no_advice.as_deref(),
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
}
