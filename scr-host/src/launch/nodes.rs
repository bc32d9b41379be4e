//! The allocation's nodes and which of them are down (SCR's `scr_env --nodes` and
//! `scr_list_down_nodes`), for `scr run`, `scr nodes down` and `scr env`.
//!
//! # The node list
//!
//! First match wins:
//! 1. the `nodelist` key (`SCR_NODELIST`, or a configuration file), a host list;
//! 2. SLURM: `SLURM_JOB_NODELIST`, else `SLURM_NODELIST` (host lists);
//! 3. Flux: when `FLUX_URI` is set (inside a Flux instance), the output of
//!    `flux getattr hostlist` (a host list);
//! 4. LSF: `LSB_MCPU_HOSTS` (`host slots host slots ...`), else `LSB_HOSTS` (one name
//!    per slot);
//! 5. PBS/Torque: the file `PBS_NODEFILE` (one name per slot and line);
//! 6. simulated nodes: the distinct names of `node_names` (`SCR_NODE_NAMES`);
//! 7. this host alone.
//!
//! Duplicates are dropped; the order is the resource manager's.
//!
//! # Down nodes
//!
//! `ping` is not available everywhere (nor allowed in containers), and `scr run` runs on
//! one node of the allocation, serially. A node is down when:
//! - `exclude_nodes` lists it;
//! - the site script `down_nodes_script` says so: it is run once with the node names as
//!   arguments and prints `NODE REASON...` lines for the nodes it finds down (a site
//!   knows best: `sinfo`, `pdsh`, a health check); a script that fails is reported and
//!   marks nothing;
//! - it is a real node (not simulated) whose name does not resolve to an address;
//! - its control directory or a node-local store is unusable: the node's base
//!   (`<base>/<node>` for simulated nodes, `<base>` on this host) is not a directory,
//!   is owned by another user (neither root nor this user), or refuses a probe file; the
//!   job's directory `<user>/scr.<jobid>` below it, when it exists, must be a directory
//!   owned by this user. Real nodes other than the one `scr run` runs on cannot be
//!   looked into from here: that is the site script's part;
//! - a node-local store's free space is below what it needs: `cache_free` when set,
//!   else the store's dataset count (`count`, else `cache_size`) times the bytes per node
//!   of the largest dataset in the prefix's index (its bytes over its world size, times
//!   the ranks per node). Checked where the directories are checked.

use crate::config::settings;
use std::path::{Path, PathBuf};
use std::process::Command;

pub use crate::command::CommandError;
use crate::config::{Config, View};
use crate::hostlist::{self, HostlistError};

/// Why the allocation's nodes, or the settings of the down-node checks, cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodesError {
    /// A host list (`nodelist`, SLURM's, Flux's, a list given) is malformed.
    #[error("{origin}: {source}")]
    HostList {
        /// Where the list came from (variable, key or command).
        origin: String,
        /// What is wrong with it.
        source: HostlistError,
    },
    /// A host list given on the command line is malformed.
    #[error("{0}")]
    Given(HostlistError),
    /// The source names no node at all.
    #[error("{0} names no node")]
    NoNode(String),
    /// `flux getattr hostlist` could not be run.
    #[error("FLUX_URI is set but `flux getattr hostlist` did not run: {0}")]
    FluxNotRun(CommandError),
    /// `flux getattr hostlist` failed.
    #[error("`flux getattr hostlist` failed ({status}): {stderr}")]
    FluxFailed {
        /// How it ended.
        status: std::process::ExitStatus,
        /// What it said (trimmed).
        stderr: String,
    },
    /// `LSB_MCPU_HOSTS` is not `host slots` pairs.
    #[error("LSB_MCPU_HOSTS `{0}`: expected pairs `host slots` (e.g. `n1 16 n2 16`)")]
    LsbMcpuHosts(String),
    /// The `PBS_NODEFILE` cannot be read.
    #[error("PBS_NODEFILE {file}: cannot read: {source}")]
    PbsNodefile {
        /// The file, as the variable names it.
        file: String,
        /// Why.
        source: std::io::Error,
    },
    /// `exclude_nodes` is not a host list.
    #[error("exclude_nodes: {0}")]
    ExcludeNodes(HostlistError),
}

/// Why the site's `down_nodes_script` gave no verdict.
#[derive(Debug, thiserror::Error)]
enum ScriptError {
    /// It could not be run, or did not end in time.
    #[error("down_nodes_script {}: {source}", script.display())]
    NotRun {
        script: PathBuf,
        source: CommandError,
    },
    /// It failed.
    #[error("down_nodes_script {} failed ({status}); its verdict is ignored: {stderr}", script.display())]
    Failed {
        script: PathBuf,
        status: std::process::ExitStatus,
        /// What it said (trimmed).
        stderr: String,
    },
}

/// Why a node's base directory (or the job's directory below it) cannot be used.
#[derive(Debug, thiserror::Error)]
enum DirError {
    #[error("{} is not a directory", .0.display())]
    NotADirectory(PathBuf),
    /// The base is owned by another user than this one or root.
    #[error("{} is owned by uid {uid}, not by this user (uid {}) or root", path.display(), uid_text(*me))]
    BaseOwner {
        path: PathBuf,
        uid: u32,
        me: Option<u32>,
    },
    /// The job's directory is owned by another user than this one.
    #[error("{} is owned by uid {uid}, not by this user (uid {})", path.display(), uid_text(*me))]
    JobDirOwner {
        path: PathBuf,
        uid: u32,
        me: Option<u32>,
    },
    #[error("{}: no part of the path exists", .0.display())]
    NothingExists(PathBuf),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A probe file could not be made where the job would write.
    #[error("cannot create a file in {}: {source}", dir.display())]
    Probe {
        dir: PathBuf,
        source: std::io::Error,
    },
}

/// This user's uid as a message gives it (`?` when unknown).
fn uid_text(me: Option<u32>) -> String {
    me.map_or("?".into(), |u| u.to_string())
}

/// The allocation's nodes and where the list came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allocation {
    /// Node names, in the resource manager's order.
    pub nodes: Vec<String>,
    /// The variable, key or command the list came from.
    pub source: String,
}

/// The allocation's nodes (see the module documentation for the sources, in order).
/// `env` reads an environment variable (the process environment in use; a map in tests).
pub fn allocation(
    config: &Config,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Allocation, NodesError> {
    let set = |v: &str| env(v).filter(|s| !s.trim().is_empty());
    let key = config.get(settings::NODELIST);
    if !key.is_empty() {
        let origin = &config.setting_of(settings::NODELIST).origin;
        return from_hostlist(&key, format!("nodelist ({origin})"));
    }
    for var in ["SLURM_JOB_NODELIST", "SLURM_NODELIST"] {
        if let Some(v) = set(var) {
            return from_hostlist(&v, var.into());
        }
    }
    if set("FLUX_URI").is_some() {
        return from_flux();
    }
    if let Some(v) = set("LSB_MCPU_HOSTS") {
        return from_lsb_mcpu_hosts(&v);
    }
    if let Some(v) = set("LSB_HOSTS") {
        return distinct(v.split_whitespace().collect(), "LSB_HOSTS".into());
    }
    if let Some(f) = set("PBS_NODEFILE") {
        return from_pbs_nodefile(&f);
    }
    let simulated = config.get(settings::NODE_NAMES);
    if !simulated.is_empty() {
        return distinct(
            simulated.split(',').map(str::trim).collect(),
            "node_names (simulated nodes)".into(),
        );
    }
    Ok(Allocation {
        nodes: vec![this_host()],
        source: "this host (no resource manager found)".into(),
    })
}

/// The nodes of a SLURM-style host list (`n[1-4]`) from `source`; refused when it is
/// malformed or names no node.
fn from_hostlist(list: &str, source: String) -> Result<Allocation, NodesError> {
    let nodes = hostlist::expand(list).map_err(|e| NodesError::HostList {
        origin: source.clone(),
        source: e,
    })?;
    if nodes.is_empty() {
        return Err(NodesError::NoNode(source));
    }
    Ok(Allocation { nodes, source })
}

/// Flux's allocation: `flux getattr hostlist` (run with a time limit).
fn from_flux() -> Result<Allocation, NodesError> {
    let out = crate::command::output_within(
        Command::new("flux").args(["getattr", "hostlist"]),
        crate::walltime::COMMAND_TIMEOUT,
    )
    .map_err(NodesError::FluxNotRun)?;
    if !out.status.success() {
        return Err(NodesError::FluxFailed {
            status: out.status,
            stderr: out.stderr.trim().to_string(),
        });
    }
    let text = out.stdout.as_str();
    from_hostlist(text.trim(), "flux getattr hostlist".into())
}

/// LSF's `LSB_MCPU_HOSTS` (`host slots` pairs): its hosts.
fn from_lsb_mcpu_hosts(v: &str) -> Result<Allocation, NodesError> {
    let words: Vec<&str> = v.split_whitespace().collect();
    if !words.len().is_multiple_of(2) || words.chunks(2).any(|p| p[1].parse::<u64>().is_err()) {
        return Err(NodesError::LsbMcpuHosts(v.to_string()));
    }
    distinct(
        words.iter().step_by(2).copied().collect(),
        "LSB_MCPU_HOSTS".into(),
    )
}

/// PBS's node file `f` (one line per slot): its hosts.
fn from_pbs_nodefile(f: &str) -> Result<Allocation, NodesError> {
    let text = std::fs::read_to_string(f).map_err(|source| NodesError::PbsNodefile {
        file: f.to_string(),
        source,
    })?;
    distinct(
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect(),
        format!("PBS_NODEFILE ({f})"),
    )
}

/// The distinct names among `names` (a host listed once per slot), in their first
/// order; refused when there is none.
fn distinct(names: Vec<&str>, source: String) -> Result<Allocation, NodesError> {
    let mut nodes: Vec<String> = Vec::new();
    for n in names {
        if !nodes.iter().any(|m| m == n) {
            nodes.push(n.to_string());
        }
    }
    if nodes.is_empty() {
        return Err(NodesError::NoNode(source));
    }
    Ok(Allocation { nodes, source })
}

/// This host's name.
pub fn this_host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

/// How many nodes the previous run (job step) in this allocation used: the prefix's nodes
/// file ([`crate::layout::prefix_nodes_file`]), written by the step's rank 0 at init.
/// With `min_nodes` unset, a relaunch needs that many (SCR's rule: the step may have
/// used fewer nodes than `scr run` gave it). `None` when there is no such file, or when
/// it cannot be read (said why; then the file is treated as absent) or records no node.
pub fn previous_run_nodes(prefix: &Path) -> Option<u64> {
    let path = crate::layout::prefix_nodes_file(prefix);
    match crate::state::nodes::Nodes::read(&path) {
        Ok(n) if n.nodes > 0 => Some(n.nodes),
        Ok(_) => {
            tracing::warn!(
                "{}: records no node; ignoring the nodes file",
                path.display()
            );
            None
        }
        Err(e) if e.is_not_found() => None,
        Err(e) => {
            tracing::warn!("{e}; ignoring the nodes file");
            None
        }
    }
}

/// Remove the prefix's nodes file before the first launch in an allocation (SCR's
/// `scr_prerun` does): a count left by a run in an earlier allocation says nothing about
/// this one, and a first launch that fails before init would leave it in force for the
/// relaunch. A failure to remove it is said (the relaunch may then use the old count).
pub fn forget_previous_run_nodes(prefix: &Path) {
    let path = crate::layout::prefix_nodes_file(prefix);
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            tracing::warn!(
                "{}: {e}; a relaunch may need as many nodes as a run of an earlier allocation used",
                path.display()
            );
        }
        _ => {}
    }
}

#[cfg(test)]
mod previous_run_tests {
    use super::*;
    use crate::state::nodes::Nodes;

    #[test]
    fn the_previous_runs_node_count_comes_from_the_prefix_nodes_file() {
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path();
        let path = crate::layout::prefix_nodes_file(prefix);
        assert_eq!(previous_run_nodes(prefix), None, "no file");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        Nodes { nodes: 3 }.write(&path, false).unwrap();
        assert_eq!(previous_run_nodes(prefix), Some(3));
        // damaged (the body no longer matches its checksum): warned, treated as absent
        let text = std::fs::read_to_string(&path).unwrap().replace('3', "7");
        std::fs::write(&path, text).unwrap();
        assert_eq!(previous_run_nodes(prefix), None, "corrupt");
        Nodes { nodes: 0 }.write(&path, false).unwrap();
        assert_eq!(previous_run_nodes(prefix), None, "no node recorded");
        Nodes { nodes: 2 }.write(&path, false).unwrap();
        forget_previous_run_nodes(prefix);
        assert!(!path.exists());
        assert_eq!(previous_run_nodes(prefix), None, "forgotten");
        forget_previous_run_nodes(prefix);
    }
}

/// What the down-node checks need to know about the job.
#[derive(Clone, Debug)]
pub struct NodeCheck {
    /// Nodes are directories (`node_names` is set): no name resolution; every node's
    /// directories are checked under `<base>/<node>`.
    pub simulated: bool,
    /// `exclude_nodes`.
    pub excluded: Vec<String>,
    /// `down_nodes_script`, if set.
    pub script: Option<PathBuf>,
    /// The control base and every enabled node-local store: (base, bytes it must have
    /// free, why that many).
    pub bases: Vec<(PathBuf, Option<(u64, String)>)>,
    /// `<user>/scr.<jobid>`: the job's directory under each base.
    pub job_dir: PathBuf,
    /// The host this runs on (its directories can be checked from here).
    pub this_host: String,
    /// How other nodes are reached ([`NodeCheck::with_runner`]): then a node is down
    /// when the runner cannot reach it within `remote_timeout`, and its directories are
    /// checked there (`scr nodes down --here`); without one, by name resolution only.
    pub runner: Option<crate::remote::Runner>,
    /// The prefix whose index sizes the free-space check (passed to a node's own check).
    pub prefix: PathBuf,
    /// Ranks per node (sizes the free-space check; passed to a node's own check).
    pub ranks_per_node: u64,
}

impl NodeCheck {
    /// From the configuration in force and the prefix's index; `ranks_per_node` sizes
    /// the capacity estimate.
    pub fn new(
        config: &Config,
        prefix: &Path,
        ranks_per_node: u64,
    ) -> Result<NodeCheck, NodesError> {
        let excluded = hostlist::expand(&config.get(settings::EXCLUDE_NODES))
            .map_err(NodesError::ExcludeNodes)?;
        let script = Some(config.get(settings::DOWN_NODES_SCRIPT))
            .filter(|s| !s.is_empty())
            .map(PathBuf::from);
        let fixed = match config.setting_of(settings::CACHE_FREE).value {
            Some(crate::config::keys::Value::UInt(n)) => Some(n),
            _ => None,
        };
        let per_node = largest_dataset_per_node(prefix, ranks_per_node.max(1));
        let mut bases = vec![(PathBuf::from(config.get(settings::CNTL_BASE)), None)];
        for s in config.stores.iter().filter(|s| s.enabled) {
            if config.store_view(s) != View::Node {
                continue;
            }
            let count = config.store_count(s);
            let need = match (fixed, &per_node) {
                (Some(n), _) => Some((n, "cache_free".to_string())),
                (None, Some((bytes, name))) if *bytes > 0 => Some((
                    bytes.saturating_mul(count),
                    format!("{count} dataset(s) of {bytes} bytes per node, as {name}"),
                )),
                _ => None,
            };
            let path = PathBuf::from(&s.path);
            if let Some(b) = bases.iter_mut().find(|(p, _)| *p == path) {
                b.1 = need;
            } else {
                bases.push((path, need));
            }
        }
        let simulated = !config.get(settings::NODE_NAMES).is_empty();
        Ok(NodeCheck {
            simulated,
            excluded,
            script,
            bases,
            job_dir: crate::layout::job_subdir(
                &config.get(settings::USER),
                &config.get(settings::JOB_ID),
            ),
            this_host: this_host(),
            runner: None,
            // absolute: a node reached through ssh or pdsh starts in another directory
            prefix: std::path::absolute(prefix).unwrap_or_else(|_| prefix.to_path_buf()),
            ranks_per_node: ranks_per_node.max(1),
        })
    }

    /// Check nodes other than this one through `runner` (see [`NodeCheck::runner`]).
    pub fn with_runner(mut self, runner: Option<crate::remote::Runner>) -> NodeCheck {
        self.runner = runner;
        self
    }

    /// Whether `node` is the host this runs on (see [`crate::remote::same_host`]).
    pub(crate) fn is_here(&self, node: &str) -> bool {
        crate::remote::same_host(node, &self.this_host)
    }

    /// The down nodes among `nodes`, each with its reason, in `nodes`' order.
    pub fn down(&self, nodes: &[String]) -> Vec<(String, String)> {
        let mut script_says = std::collections::BTreeMap::new();
        if let Some(script) = &self.script {
            match run_script(script, nodes) {
                Ok(found) => script_says = found,
                Err(e) => tracing::warn!("{e}"),
            }
        }
        let manager_says = manager_down(nodes, &|v| std::env::var(v).ok());
        // every node is checked at once, `remote_fanout` at a time: a node that does not
        // answer costs `remote_timeout` once, not once per node
        let width = self.runner.as_ref().map_or(1, |r| r.fanout);
        let verdicts = crate::remote::fan_out(nodes, width, |node| {
            if self.excluded.iter().any(|n| n == node) {
                Some("listed in exclude_nodes".to_string())
            } else if let Some(r) = script_says.get(node) {
                Some(format!("down_nodes_script: {r}"))
            } else if let Some(r) = manager_says.get(node) {
                Some(r.clone())
            } else {
                self.check_node(node)
            }
        });
        nodes
            .iter()
            .zip(verdicts)
            .filter_map(|(n, why)| why.map(|w| (n.clone(), w)))
            .collect()
    }

    /// Why this host is down, as its own check sees it (`scr nodes down --here`, run on
    /// a node through the remote runner): its directories and their free space only.
    pub fn down_here(&self) -> Option<String> {
        self.check_dirs(&self.this_host)
    }

    /// The first reason `node` is down that can be seen from here, if any.
    fn check_node(&self, node: &str) -> Option<String> {
        if let (false, Some(runner)) = (self.simulated, &self.runner) {
            if self.is_here(node) {
                return self.check_dirs(node);
            }
            return self.check_remote(runner, node);
        }
        if !self.simulated {
            use std::net::ToSocketAddrs;
            if (node, 0u16)
                .to_socket_addrs()
                .map_or(true, |mut a| a.next().is_none())
            {
                return Some(format!("host name `{node}` does not resolve to an address"));
            }
            if node != self.this_host {
                return None;
            }
        }
        self.check_dirs(node)
    }

    /// Ask `node` through `runner` (`scr nodes down --here`), within `remote_timeout`,
    /// twice before it counts as not reached (a busy resource manager refuses a step now
    /// and then, and a node found down stays excluded for the allocation): not reached,
    /// or its own check's reason.
    fn check_remote(&self, runner: &crate::remote::Runner, node: &str) -> Option<String> {
        let args: Vec<String> = vec![
            "nodes".into(),
            "down".into(),
            "--here".into(),
            "--ranks-per-node".into(),
            self.ranks_per_node.to_string(),
            "--prefix".into(),
            self.prefix.display().to_string(),
        ];
        let ask = || {
            runner
                .run_scr(node, &args, Some(runner.timeout))
                .and_then(|(_, report)| crate::remote::parse_report::<HereReport>(node, &report))
        };
        match ask().or_else(|_| ask()) {
            Ok(r) => r.down,
            // (said after the node's name already)
            Err(why) => {
                let why = why.to_string();
                Some(
                    why.strip_prefix(&format!("{node} "))
                        .map_or(why.clone(), String::from),
                )
            }
        }
    }

    /// Whether `node`'s control directory and node-local stores can be used (checked
    /// here: a simulated node, or this host).
    fn check_dirs(&self, node: &str) -> Option<String> {
        self.bases.iter().find_map(|(base, need)| {
            let dir = if self.simulated {
                base.join(node)
            } else {
                base.clone()
            };
            check_dir(&dir, &self.job_dir)
                .err()
                .map(|e| e.to_string())
                .or_else(|| {
                    need.as_ref().and_then(|(n, why)| {
                        // what this job's datasets already hold there is reused or
                        // evicted by the relaunch: it counts as free
                        let own = used_bytes(&dir.join(&self.job_dir));
                        check_free(&dir, n.saturating_sub(own), why)
                    })
                })
        })
    }
}

/// The nodes of `nodes` the resource manager reports down, each with the reason (as
/// SCR's `scr_list_down_nodes` asks): inside SLURM (`SLURM_JOB_ID`),
/// `sinfo -ho %N -t down -n NODES`; inside Flux (`FLUX_URI`),
/// `flux resource list -s down -n -o {nodelist}`. Each prints host lists. A manager that
/// cannot be asked (not installed, an error, no answer within the command timeout)
/// reports nothing, with a warning: the other checks still run.
fn manager_down(
    nodes: &[String],
    env: &dyn Fn(&str) -> Option<String>,
) -> std::collections::BTreeMap<String, String> {
    let list = nodes.join(",");
    let (argv, who): (Vec<&str>, &str) = if env("SLURM_JOB_ID").is_some() {
        (
            vec!["sinfo", "-ho", "%N", "-t", "down", "-n", &list],
            "SLURM (sinfo)",
        )
    } else if env("FLUX_URI").is_some() {
        (
            vec![
                "flux",
                "resource",
                "list",
                "-s",
                "down",
                "-n",
                "-o",
                "{nodelist}",
            ],
            "Flux (flux resource list)",
        )
    } else {
        return Default::default();
    };
    if nodes.is_empty() {
        return Default::default();
    }
    let out = crate::command::output_within(
        std::process::Command::new(argv[0]).args(&argv[1..]),
        crate::walltime::COMMAND_TIMEOUT,
    );
    let text = match out {
        Ok(o) if o.status.success() => o.stdout,
        Ok(o) => {
            tracing::warn!(
                "`{}` failed ({}): {}; its down nodes are not known",
                argv.join(" "),
                o.status,
                o.stderr.trim()
            );
            return Default::default();
        }
        Err(e) => {
            tracing::warn!("{e}; the resource manager's down nodes are not known");
            return Default::default();
        }
    };
    let mut down = std::collections::BTreeMap::new();
    for word in text.split_whitespace() {
        match hostlist::expand(word) {
            Ok(hosts) => {
                for h in hosts.into_iter().filter(|h| nodes.contains(h)) {
                    down.insert(h, format!("reported down by {who}"));
                }
            }
            Err(e) => tracing::warn!("`{}` printed `{word}`: {e}", argv.join(" ")),
        }
    }
    down
}

/// What `scr nodes down --here` reports to `scr run` (its last line, through the remote
/// runner): why this host is down, if it is.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct HereReport {
    /// The reason, when down.
    pub down: Option<String>,
}

/// The largest complete dataset in the prefix's index, in bytes per node
/// (bytes ÷ world size × ranks per node), with its name.
fn largest_dataset_per_node(prefix: &Path, ranks_per_node: u64) -> Option<(u64, String)> {
    use crate::state::prefix::{Index, Summary};
    let index = Index::load(prefix).ok()?;
    index
        .datasets
        .values()
        .filter(|e| e.complete)
        .filter_map(|e| {
            let s: Summary =
                crate::state::read_state(&Summary::path(prefix, e.id), "summary").ok()?;
            let per_rank = s.bytes.div_ceil(u64::from(s.world_size.max(1)));
            Some((per_rank * ranks_per_node, format!("dataset {}", s.name)))
        })
        .max_by_key(|(b, _)| *b)
}

/// How long the site's `down_nodes_script` may take.
const SCRIPT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Run the site script with the node names; its `NODE REASON...` lines.
fn run_script(
    script: &Path,
    nodes: &[String],
) -> Result<std::collections::BTreeMap<String, String>, ScriptError> {
    // (a site script that hangs must not hold up every launch)
    let out = crate::command::output_within(Command::new(script).args(nodes), SCRIPT_TIMEOUT)
        .map_err(|source| ScriptError::NotRun {
            script: script.to_path_buf(),
            source,
        })?;
    if !out.status.success() {
        return Err(ScriptError::Failed {
            script: script.to_path_buf(),
            status: out.status,
            stderr: out.stderr.trim().to_string(),
        });
    }
    Ok(out
        .stdout
        .as_str()
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let (node, why) = l.split_once(char::is_whitespace).unwrap_or((l, ""));
            let why = why.trim();
            (!node.is_empty()).then(|| {
                let why = if why.is_empty() { "reported down" } else { why };
                (node.to_string(), why.to_string())
            })
        })
        .collect())
}

/// Whether a node's base `dir` (and the job's directory below it) can be used.
fn check_dir(dir: &Path, job_dir: &Path) -> Result<(), DirError> {
    use std::os::unix::fs::MetadataExt;
    let me = crate::registry::effective_uid();
    let owned_ok = |uid: u32| uid == 0 || Some(uid) == me;
    // a base not there yet is made by the job: its nearest existing ancestor must take it
    let mut probe_in = dir.to_path_buf();
    match std::fs::symlink_metadata(dir) {
        Ok(m) if !m.is_dir() => return Err(DirError::NotADirectory(dir.to_path_buf())),
        Ok(m) if !owned_ok(m.uid()) => {
            return Err(DirError::BaseOwner {
                path: dir.to_path_buf(),
                uid: m.uid(),
                me,
            })
        }
        Ok(_) => {
            let jd = dir.join(job_dir);
            match std::fs::symlink_metadata(&jd) {
                Ok(m) if !m.is_dir() => return Err(DirError::NotADirectory(jd)),
                Ok(m) if Some(m.uid()) != me => {
                    return Err(DirError::JobDirOwner {
                        path: jd,
                        uid: m.uid(),
                        me,
                    })
                }
                Ok(_) => probe_in = jd,
                Err(_) => {}
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            while !probe_in.is_dir() {
                if !probe_in.pop() {
                    return Err(DirError::NothingExists(dir.to_path_buf()));
                }
            }
        }
        Err(source) => {
            return Err(DirError::Io {
                path: dir.to_path_buf(),
                source,
            })
        }
    }
    // permission bits say little as root; a file actually made there says it all
    // (read-only mounts, full devices, a dead NFS server's EIO). Its name is this check's
    // own: simulated nodes not made yet share their nearest ancestor, and are checked
    // at once on several threads
    static PROBES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let probe = probe_in.join(format!(".scr-probe.{}.{n}", std::process::id()));
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
    {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(source) => Err(DirError::Probe {
            dir: probe_in,
            source,
        }),
    }
}

/// Bytes of the regular files below `dir` (links not followed; 0 when it is missing).
fn used_bytes(dir: &Path) -> u64 {
    let mut total = 0u64;
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            match e.path().symlink_metadata() {
                Ok(m) if m.is_dir() => todo.push(e.path()),
                Ok(m) if m.is_file() => total = total.saturating_add(m.len()),
                _ => {}
            }
        }
    }
    total
}

/// Why `dir`'s file system has too little free space for `need` bytes, if it has.
fn check_free(dir: &Path, need: u64, why: &str) -> Option<String> {
    let mut at = dir.to_path_buf();
    while !at.exists() && at.pop() {}
    let free = free_bytes(&at)?;
    (free < need).then(|| {
        format!(
            "{} has {free} bytes free, below the {need} needed ({why})",
            dir.display()
        )
    })
}

/// `scr nodes down [HOSTLIST]`: the nodes of `list` (a host list; default: the
/// allocation's) that are down, each with the reason, checked as `scr run` checks them
/// before a launch (with `prefix`'s index sizing the free-space check). An error when the
/// list, the allocation or the checks' settings are invalid.
pub fn down_nodes(
    config: &Config,
    list: Option<&str>,
    prefix: &Path,
) -> Result<Vec<(String, String)>, NodesError> {
    let list = match list {
        Some(l) => hostlist::expand(l).map_err(NodesError::Given)?,
        None => allocation(config, &|v| std::env::var(v).ok())?.nodes,
    };
    let per_node = super::simulated_layout(&config.get(settings::NODE_NAMES))
        .ok()
        .flatten()
        .map_or(1, |(_, r)| r);
    let env = |v: &str| std::env::var(v).ok();
    let runner = crate::remote::Runner::from_config(config, &list, &env);
    let check = NodeCheck::new(config, prefix, per_node)?.with_runner(runner);
    Ok(check.down(&list))
}

/// Free bytes of the file system holding `dir`, as `df` reports them (no `unsafe`
/// statvfs call for a serial check); `None` when df cannot tell.
pub fn free_bytes(dir: &Path) -> Option<u64> {
    // (df blocks on a hung network file system: then the free space is not known)
    let out = crate::command::output_within(
        Command::new("df").args(["--output=avail", "-B1"]).arg(dir),
        crate::walltime::COMMAND_TIMEOUT,
    )
    .ok()?;
    out.stdout
        .as_str()
        .lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn config(vars: &[(&str, &str)]) -> Config {
        Config::from_vars(vars)
    }

    fn alloc(cfg: &[(&str, &str)], env: &[(&str, &str)]) -> Result<Allocation, NodesError> {
        let env: BTreeMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        allocation(&config(cfg), &|k| env.get(k).cloned())
    }

    #[test]
    fn node_list_sources_in_order() {
        let a = alloc(
            &[("SCR_NODELIST", "n[1-2]")],
            &[("SLURM_JOB_NODELIST", "s1")],
        )
        .unwrap();
        assert_eq!(a.nodes, ["n1", "n2"]);
        assert!(
            a.source.starts_with("nodelist (environment SCR_NODELIST"),
            "{}",
            a.source
        );
        let a = alloc(&[], &[("SLURM_NODELIST", "s[3-4]"), ("LSB_HOSTS", "x")]).unwrap();
        assert_eq!(
            (a.nodes, a.source.as_str()),
            (vec!["s3".into(), "s4".into()], "SLURM_NODELIST")
        );
        let a = alloc(
            &[],
            &[("LSB_MCPU_HOSTS", "l1 16 l2 16"), ("LSB_HOSTS", "x")],
        )
        .unwrap();
        assert_eq!(a.nodes, ["l1", "l2"]);
        let a = alloc(&[], &[("LSB_HOSTS", "l1 l1 l2 l2")]).unwrap();
        assert_eq!(a.nodes, ["l1", "l2"]);
        let e = alloc(&[], &[("LSB_MCPU_HOSTS", "l1 16 l2")])
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("LSB_MCPU_HOSTS `l1 16 l2`: expected pairs"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("nodes");
        std::fs::write(&f, "p1\np1\np2\n\n").unwrap();
        let a = alloc(&[], &[("PBS_NODEFILE", f.to_str().unwrap())]).unwrap();
        assert_eq!(a.nodes, ["p1", "p2"]);
        let a = alloc(&[("SCR_NODE_NAMES", "a,a,b,b")], &[]).unwrap();
        assert_eq!(a.nodes, ["a", "b"]);
        let e = alloc(&[], &[("SLURM_JOB_NODELIST", "n[1-")])
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "SLURM_JOB_NODELIST: host list `n[1-`: `[` never closed in `[1-`"
        );
        let a = alloc(&[], &[]).unwrap();
        assert_eq!(a.nodes, [this_host()]);
    }

    #[test]
    fn unusable_directories_are_named() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let job = Path::new("u/scr.1");
        let check = |d: &Path| check_dir(d, job).map_err(|e| e.to_string());
        assert_eq!(check(&dir.path().join("new")), Ok(()));
        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        assert_eq!(
            check(&file),
            Err(format!("{} is not a directory", file.display()))
        );
        let theirs = dir.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::os::unix::fs::chown(&theirs, Some(12345), None).unwrap();
        let e = check(&theirs).unwrap_err();
        assert!(e.contains("is owned by uid 12345, not by this user"), "{e}");
        let ok = dir.path().join("ok");
        std::fs::create_dir_all(ok.join(job)).unwrap();
        assert_eq!(check(&ok), Ok(()));
        std::os::unix::fs::chown(ok.join(job), Some(12345), None).unwrap();
        let e = check(&ok).unwrap_err();
        assert!(
            e.starts_with(&format!("{} is owned by uid 12345", ok.join(job).display())),
            "{e}"
        );
        // a read-only tmpfs refuses the probe even to root
        let ro = dir.path().join("ro");
        std::fs::create_dir(&ro).unwrap();
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();
        if Command::new("mount")
            .args(["-t", "tmpfs", "-o", "ro,size=64k", "tmpfs"])
            .arg(&ro)
            .status()
            .is_ok_and(|s| s.success())
        {
            let e = check(&ro);
            let _ = Command::new("umount").arg(&ro).status();
            let e = e.unwrap_err();
            assert!(
                e.starts_with(&format!("cannot create a file in {}", ro.display())),
                "{e}"
            );
        }
    }
}
