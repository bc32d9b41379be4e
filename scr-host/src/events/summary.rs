//! `scr log`'s analysis of the event log: the per-job and overall figures
//! ([`summarize`]), the checkpoint interval they advise (Young's and Daly's formulas),
//! and the text or JSON report. Apart from the log's format ([`super`]) because reading
//! and appending lines is what every job does, while this is only the `scr log` tool's.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{path, read, Event, Record};

/// Failures closer together than this in one job are one failure (a crash is often
/// reported by several ranks, and as lost nodes too).
pub(crate) const SAME_FAILURE_SECONDS: f64 = 60.0;

/// Fewer failures than this give no mean time between failures (one failure in a long
/// log says little about the next).
pub(crate) const MIN_FAILURES: usize = 2;

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

/// The figures `scr log` prints. Its JSON is one flat object: the grouped figures
/// ([`CheckpointFigures`], [`FlushFigures`], [`Intervals`]) are flattened into it under
/// their own keys.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Summary {
    /// Events read.
    pub events: usize,
    /// Lines that could not be read (skipped).
    pub damaged_lines: usize,
    /// Per job.
    pub jobs: Vec<JobSummary>,
    /// The checkpoints completed and their cost.
    #[serde(flatten)]
    pub checkpoints: CheckpointFigures,
    /// The flushes recorded and their bandwidth.
    #[serde(flatten)]
    pub flushes: FlushFigures,
    /// Fetches recorded.
    pub fetches: usize,
    /// Rebuilds recorded.
    pub rebuilds: usize,
    /// Online recoveries recorded (each also counts as a failure).
    pub recoveries: usize,
    /// Scavenges recorded.
    pub scavenges: usize,
    /// The halt reasons, in order.
    pub halts: Vec<String>,
    /// Failures recorded.
    pub failures: usize,
    /// The run time, mean time between failures and the advised checkpoint intervals.
    #[serde(flatten)]
    pub advice: Intervals,
}

/// The checkpoints of a [`Summary`] (JSON keys `checkpoints`, `checkpoint_bytes`,
/// `checkpoint_seconds_mean`).
#[derive(Serialize, Clone, Debug, PartialEq, Default)]
pub struct CheckpointFigures {
    /// Checkpoints completed.
    #[serde(rename = "checkpoints")]
    pub count: usize,
    /// Bytes over all checkpoints.
    #[serde(rename = "checkpoint_bytes")]
    pub bytes: u64,
    /// Mean seconds a checkpoint took (C).
    #[serde(rename = "checkpoint_seconds_mean")]
    pub seconds_mean: Option<f64>,
}

/// The flushes of a [`Summary`] (JSON keys `flushes`, `flushes_failed`, `flush_bytes`,
/// `flush_seconds`, `flush_bandwidth`).
#[derive(Serialize, Clone, Debug, PartialEq, Default)]
pub struct FlushFigures {
    /// Flushes recorded.
    #[serde(rename = "flushes")]
    pub count: usize,
    /// Flushes that failed.
    #[serde(rename = "flushes_failed")]
    pub failed: usize,
    /// Bytes flushed successfully.
    #[serde(rename = "flush_bytes")]
    pub bytes: u64,
    /// Seconds spent in successful flushes.
    #[serde(rename = "flush_seconds")]
    pub seconds: f64,
    /// Bytes per second over the successful flushes.
    #[serde(rename = "flush_bandwidth")]
    pub bandwidth: Option<f64>,
}

/// The checkpoint interval a [`Summary`] advises and the figures it comes from (JSON keys
/// as the field names).
#[derive(Serialize, Clone, Debug, PartialEq, Default)]
pub struct Intervals {
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
pub(crate) fn young(c: f64, m: f64) -> f64 {
    (2.0 * c * m).sqrt()
}

/// Daly's higher-order checkpoint interval (J. T. Daly, 2006), for `c < 2m`; else `m`.
pub(crate) fn daly(c: f64, m: f64) -> f64 {
    if c < 2.0 * m {
        (2.0 * c * m).sqrt() * (1.0 + (c / (2.0 * m)).sqrt() / 3.0 + c / (18.0 * m)) - c
    } else {
        m
    }
}

/// Summarise `records` (in time order), `damaged` lines having been skipped.
pub(crate) fn summarize(records: &[Record], damaged: usize) -> Summary {
    let mut s = Summary::empty(records.len(), damaged);
    let ckpt_seconds = count_events(records, &mut s);
    s.advice.run_seconds = run_seconds(records);
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
            checkpoints: CheckpointFigures::default(),
            flushes: FlushFigures::default(),
            fetches: 0,
            rebuilds: 0,
            recoveries: 0,
            scavenges: 0,
            halts: Vec::new(),
            failures: 0,
            advice: Intervals::default(),
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
                s.checkpoints.count += 1;
                job.checkpoints += 1;
                s.checkpoints.bytes += bytes;
                ckpt_seconds += seconds;
            }
            Event::Flush {
                bytes, seconds, ok, ..
            } => {
                s.flushes.count += 1;
                if *ok {
                    s.flushes.bytes += bytes;
                    s.flushes.seconds += seconds;
                } else {
                    s.flushes.failed += 1;
                }
            }
            Event::Fetch { .. } => s.fetches += 1,
            Event::Rebuild { .. } => s.rebuilds += 1,
            Event::Scavenge { .. } => s.scavenges += 1,
            Event::Halt { reason } => s.halts.push(reason.clone()),
            Event::Failure { .. } | Event::LostNodes { .. } | Event::Recovery { .. } => {
                if matches!(r.event, Event::Recovery { .. }) {
                    s.recoveries += 1;
                }
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
    if s.checkpoints.count > 0 {
        s.checkpoints.seconds_mean = Some(ckpt_seconds / s.checkpoints.count as f64);
    }
    if s.flushes.seconds > 0.0 {
        s.flushes.bandwidth = Some(s.flushes.bytes as f64 / s.flushes.seconds);
    }
    if s.failures >= MIN_FAILURES && s.advice.run_seconds > 0.0 {
        s.advice.mtbf_seconds = Some(s.advice.run_seconds / s.failures as f64);
    }
    match (s.checkpoints.seconds_mean, s.advice.mtbf_seconds) {
        (Some(c), Some(m)) => {
            s.advice.young_seconds = Some(young(c, m));
            s.advice.daly_seconds = Some(daly(c, m));
        }
        (None, _) => s.advice.no_advice = Some("no checkpoint recorded: the cost of a checkpoint is not known".into()),
        (Some(_), None) => {
            s.advice.no_advice = Some(format!(
                "too few failures to estimate the time between them ({} in {} of run time; at least {MIN_FAILURES} needed)",
                s.failures,
                duration(s.advice.run_seconds)
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
pub(crate) fn duration(seconds: f64) -> String {
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
    match s.checkpoints.seconds_mean {
        Some(c) => line(format!(
            "checkpoints: {}, mean cost {c:.2}s, {} in all ({} each on average)",
            s.checkpoints.count,
            bytes(s.checkpoints.bytes as f64),
            bytes(s.checkpoints.bytes as f64 / s.checkpoints.count as f64)
        )),
        None => line("checkpoints: none".into()),
    }
    let ok = s.flushes.count - s.flushes.failed;
    match s.flushes.bandwidth {
        Some(bw) => line(format!(
            "flushes: {} ({} failed), {} in {:.2}s: {}/s",
            s.flushes.count,
            s.flushes.failed,
            bytes(s.flushes.bytes as f64),
            s.flushes.seconds,
            bytes(bw)
        )),
        None => line(format!("flushes: {} ({ok} succeeded)", s.flushes.count)),
    }
    line(format!(
        "fetches: {}, rebuilds: {}, online recoveries: {}, scavenges: {}, halts: {}",
        s.fetches,
        s.rebuilds,
        s.recoveries,
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
    match s.advice.mtbf_seconds {
        Some(m) => line(format!(
            "failures: {} in {} of run time: mean time between failures {}",
            s.failures,
            duration(s.advice.run_seconds),
            duration(m)
        )),
        None => line(format!(
            "failures: {} in {} of run time",
            s.failures,
            duration(s.advice.run_seconds)
        )),
    }
    match (
        s.advice.young_seconds,
        s.advice.daly_seconds,
        &s.advice.no_advice,
    ) {
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

/// Why `scr log` has no report.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LogReportError {
    /// The prefix has no event log.
    #[error("no event log at {}: no job has logged to this prefix yet (check --prefix)", .0.display())]
    NoLog(PathBuf),
    /// The event log cannot be read.
    #[error("cannot read the event log {}: {source}", path.display())]
    Unreadable {
        /// The log.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The summary does not serialize as JSON.
    #[error("{0}")]
    Json(serde_json::Error),
}

/// `scr log`: the summary of `prefix`'s event log as text, or with `json` as one JSON
/// object; an error names the log when it cannot be read.
pub fn log_report(prefix: &Path, json: bool) -> Result<String, LogReportError> {
    let p = path(prefix);
    let (records, damaged) = match read(prefix) {
        Ok(r) => r,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(LogReportError::NoLog(p)),
        Err(source) => return Err(LogReportError::Unreadable { path: p, source }),
    };
    let summary = summarize(&records, damaged);
    if json {
        serde_json::to_string_pretty(&summary)
            .map(|mut t| {
                t.push('\n');
                t
            })
            .map_err(LogReportError::Json)
    } else {
        Ok(render(&summary))
    }
}
