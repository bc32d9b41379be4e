//! `scr env` and `scr halt --check`: what a job script asks about its allocation between
//! launches (job id, nodes, down nodes, prefix, runs left) and whether to stop retrying.
//! Apart from the relaunch loop ([`super`]) because these are one-shot queries that share
//! its settings, not its state.

use crate::config::settings;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::*;

/// Whether a job should stop retrying, with the reason (SCR's `scr_retries_halt`):
/// a condition of the prefix's halt file ([`Halt::reason`]; a job that called finalize
/// left one), or fewer than `halt_seconds` left before the allocation's end
/// ([`crate::walltime`]: the `end_time` key, else the resource manager), the rule the
/// library applies inside the job. `Ok(Some(why))`: stop.
pub fn halt_reason(
    prefix: &Path,
    config: &Config,
) -> Result<Option<String>, crate::state::StateError> {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let margin = config.get(settings::HALT_SECONDS) as i64;
    let halt = Halt::load(prefix)?;
    if let Some(why) = halt.reason(now, margin) {
        return Ok(Some(why));
    }
    if margin > 0 {
        if let Some((end, source)) = crate::walltime::from_config_and_env(config) {
            if now >= end - margin {
                return Ok(Some(format!(
                    "within {margin} s (halt_seconds) of the allocation's end {end} ({source})"
                )));
            }
        }
    }
    Ok(None)
}

/// `scr env`'s fields.
#[derive(Debug)]
pub struct Env {
    /// The user the job runs as (the `user` key: `$USER`, else the uid).
    pub user: String,
    /// Job id.
    pub job_id: String,
    /// The allocation's nodes (compressed) and their source.
    pub nodes: Result<Allocation, nodes::NodesError>,
    /// Down nodes: those `scr run` found in this job, else `exclude_nodes`.
    pub down: Vec<(String, String)>,
    /// The prefix directory.
    pub prefix: PathBuf,
    /// Launches `scr run` may still make (the `runs` key before it started).
    pub runs_left: u64,
    /// Nodes the last run used (its init's nodes file in the prefix; SCR's
    /// `scr_env --runnodes`), when one ran in this allocation.
    pub run_nodes: Option<u64>,
}

/// What `scr env` prints.
pub fn env(config: &Config, prefix: &Path, getenv: &dyn Fn(&str) -> Option<String>) -> Env {
    let job_id = config.get(settings::JOB_ID);
    let state = RunState::load(prefix, &job_id);
    let mut down: Vec<(String, String)> =
        state.as_ref().map(|s| s.down.clone()).unwrap_or_default();
    if let Ok(ex) = hostlist::expand(&config.get(settings::EXCLUDE_NODES)) {
        for n in ex {
            if !down.iter().any(|(d, _)| *d == n) {
                down.push((n, "listed in exclude_nodes".into()));
            }
        }
    }
    Env {
        user: config.get(settings::USER),
        run_nodes: nodes::previous_run_nodes(prefix),
        nodes: allocation(config, getenv),
        runs_left: state.map_or_else(|| config.get(settings::RUNS), |s| s.runs_left),
        job_id,
        down,
        prefix: prefix.to_path_buf(),
    }
}

impl std::fmt::Display for Env {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{:<11} {}", "user", self.user)?;
        writeln!(f, "{:<11} {}", "job id", self.job_id)?;
        match &self.nodes {
            Ok(a) => writeln!(
                f,
                "{:<11} {} ({})",
                "nodes",
                hostlist::compress(&a.nodes),
                a.source
            )?,
            Err(e) => writeln!(f, "{:<11} unknown: {e}", "nodes")?,
        }
        if self.down.is_empty() {
            writeln!(f, "{:<11} none", "down")?;
        }
        for (n, why) in &self.down {
            writeln!(f, "{:<11} {n}: {why}", "down")?;
        }
        writeln!(f, "{:<11} {}", "prefix", self.prefix.display())?;
        writeln!(f, "{:<11} {}", "runs left", self.runs_left)?;
        match self.run_nodes {
            Some(n) => writeln!(f, "{:<11} {n}", "run nodes"),
            None => writeln!(f, "{:<11} none yet in this allocation", "run nodes"),
        }
    }
}
