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
    /// The job lost processes and went on inside its `mpiexec` (online recovery): the
    /// ranks lost, those spares took, the ranks it has now and how long the recovery took
    /// (from the first process that saw the loss to the repaired job).
    Recovery {
        /// The application ranks lost.
        lost: Vec<u32>,
        /// The lost ranks that spares took (the others are gone: the job shrank).
        replaced: Vec<u32>,
        /// Ranks after the recovery.
        ranks: u32,
        /// How long it took, in seconds.
        seconds: f64,
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
    crate::layout::events_file(prefix)
}

/// Where a job's events go, from its configuration (SCR's SCR_LOG_* keys): the text log
/// in the prefix (`log_txt_enable`) and syslog (`log_syslog_enable`), neither without
/// `log_enable`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Sinks {
    /// Append to `<prefix>/.scr/events.jsonl`.
    pub text: bool,
    /// Send to syslog: ident, facility and level.
    pub syslog: Option<(String, libc::c_int, libc::c_int)>,
}

impl Sinks {
    /// The sinks `config` asks for.
    pub(crate) fn from_config(config: &crate::config::Config) -> Sinks {
        use crate::config::settings;
        if !config.get(settings::LOG_ENABLE) {
            return Sinks {
                text: false,
                syslog: None,
            };
        }
        let syslog = config.get(settings::LOG_SYSLOG_ENABLE).then(|| {
            (
                config.get(settings::LOG_SYSLOG_PREFIX),
                syslog::facility(&config.get(settings::LOG_SYSLOG_FACILITY))
                    .unwrap_or(libc::LOG_LOCAL7),
                syslog::level(&config.get(settings::LOG_SYSLOG_LEVEL)).unwrap_or(libc::LOG_INFO),
            )
        });
        Sinks {
            text: config.get(settings::LOG_TXT_ENABLE),
            syslog,
        }
    }

    /// Record `event` of job `job_id` in every sink (never fails: see [`log_event`]).
    pub(crate) fn record(&self, prefix: &Path, job_id: &str, event: Event) {
        if let Some((ident, facility, level)) = &self.syslog {
            let line = line(&stamped(job_id, event.clone()));
            if let Err(e) = syslog::send(ident, *facility, *level, &line) {
                tracing::warn!("could not send an event to syslog: {e}");
            }
        }
        if self.text {
            log_event(prefix, job_id, event);
        }
    }
}

/// `event` of job `job_id`, stamped with the current time.
fn stamped(job_id: &str, event: Event) -> Record {
    let time = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    Record {
        time,
        job_id: job_id.to_string(),
        event,
    }
}

/// A record as the one line the text log holds and syslog is sent (no newline).
pub fn line(record: &Record) -> String {
    serde_json::to_string(record).unwrap_or_else(|e| format!("unprintable event: {e}"))
}

/// Append `event` of job `job_id`, stamped with the current time, to the prefix's event
/// log (creating `<prefix>/.scr` and the log when missing). Never fails: trouble is a
/// warning on stderr, since losing a log line must not lose a checkpoint.
pub fn log_event(prefix: &Path, job_id: &str, event: Event) {
    let record = stamped(job_id, event);
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
    let scr = crate::layout::scr_dir(prefix);
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

mod summary;
pub mod syslog;
pub use summary::*;

#[cfg(test)]
mod tests;
