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
    /// The job's control directory on a node (`<cntl_base>/<user>/scr.<jobid>`; with
    /// simulated nodes `<cntl_base>/<node>/...`, the node left as `<node>`).
    pub control: PathBuf,
    /// The job's directory in each store (`<store>/<user>/scr.<jobid>`, node-local ones
    /// as `control`), with whether the store is node-local: where its cached datasets
    /// are, for a script that inspects or cleans them.
    pub cache: Vec<(PathBuf, bool)>,
}

/// The job's directory below `base` on a node (`<node>` for a simulated one).
fn job_dir_of(config: &Config, base: &str, per_node: bool) -> PathBuf {
    let simulated = per_node && !config.get(settings::NODE_NAMES).is_empty();
    crate::layout::job_dir(
        Path::new(base),
        simulated,
        "<node>",
        &config.get(settings::USER),
        &config.get(settings::JOB_ID),
    )
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
    let cache = config
        .stores
        .iter()
        .filter(|s| s.enabled)
        .map(|s| {
            let per_node = config.store_view(s) == crate::config::View::Node;
            (job_dir_of(config, &s.path, per_node), per_node)
        })
        .collect();
    Env {
        control: job_dir_of(config, &config.get(settings::CNTL_BASE), true),
        cache,
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
        writeln!(f, "{:<11} {}", "control", self.control.display())?;
        for (dir, per_node) in &self.cache {
            let view = if *per_node { "node-local" } else { "global" };
            writeln!(f, "{:<11} {} ({view})", "cache", dir.display())?;
        }
        writeln!(f, "{:<11} {}", "runs left", self.runs_left)?;
        match self.run_nodes {
            Some(n) => writeln!(f, "{:<11} {n}", "run nodes"),
            None => writeln!(f, "{:<11} none yet in this allocation", "run nodes"),
        }
    }
}
