//! `scr run`: launch a job step, and relaunch it inside the same allocation after a
//! failure (SCR's `scr_srun`/`scr_run`), with `scr env` and `scr halt --check`
//! (SCR's `scr_env` and `scr_retries_halt`).
//!
//! # The loop
//!
//! Before every launch the allocation's nodes are checked ([`NodeCheck`]); a node found
//! down once stays excluded for the rest of the allocation (it failed once: SCR's rule).
//! The step is launched on the nodes left; when it fails, the loop launches again while
//! runs remain (`--runs`, key `runs`), at least `min_nodes` nodes are left (0: as many
//! as the previous run used, from the nodes file its rank 0 wrote in the prefix at init,
//! else as many as the first launch used; the nodes file is removed before the first
//! launch, as SCR's `scr_prerun` does) and no halt condition holds in the prefix's halt
//! file ([`Halt::reason`]; a job that called `SCR_Finalize` left one). A watchdog
//! (`watchdog_timeout`) kills a step that shows no progress. A termination signal to
//! `scr run` (Ctrl-C, SLURM's `--signal=B:TERM@120` before the time limit) is passed on
//! to the step and ends the retries; postrun still runs. Then `scr postrun` runs
//! (with `--postrun false`, not) on the last launch's nodes: `scr postrun --prefix P`,
//! with `--node N` for each node of the last launch when the nodes are simulated.
//!
//! # Telling the step where it runs
//!
//! Each argument of the launcher command may hold placeholders, replaced per launch:
//! `{hosts}` (the nodes, comma-separated), `{hostlist}` (the same compressed:
//! `n[0,2-3]`), `{nodes}` (their count), `{ranks}` (nodes × ranks per node) and
//! `{exclude}` (the down nodes, compressed; empty when none). A launcher named `srun`
//! with down nodes and no `{exclude}` in its arguments gets `--exclude=<down nodes>`
//! right after `srun`, as SCR's scr_srun does.
//!
//! A launch uses `--nodes` nodes (default: as many as the first launch; all usable
//! nodes when nothing says how many), the others are spares.
//! With simulated nodes (`node_names`/`SCR_NODE_NAMES` set for `scr run`), the names
//! describe the first launch: its distinct nodes and the ranks on each (the same on
//! every node). A relaunch uses the same number of nodes: the survivors first, in their
//! order, then spare nodes of the allocation in its order (fewer when too few are left
//! but at least `min_nodes`), and the step gets `SCR_NODE_NAMES` for them with as many
//! ranks per node as the first launch.
//!
//! What the loop decided is kept in `<prefix>/.scr/run.scr` (job id, allocation, down
//! nodes with reasons, runs left) for `scr env`; failed launches, down nodes and a halt
//! that ends the retries are also appended to the prefix's event log (`scr log`).

use crate::config::settings;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};

pub mod clean;
mod env;
pub mod nodes;
pub use env::{env, halt_reason, Env};
mod signals;

use crate::config::Config;
use crate::hostlist;
use crate::state::halt::Halt;
pub use nodes::{allocation, down_nodes, Allocation, NodeCheck};

/// State-file kind of `<prefix>/.scr/run.scr`.
pub const KIND: &str = "run";

/// What `scr run` decided so far in this allocation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunState {
    /// The job (allocation) id.
    pub job_id: String,
    /// The allocation's nodes.
    pub allocation: Vec<String>,
    /// Nodes found down, with the reason, in the order they were found.
    pub down: Vec<(String, String)>,
    /// The nodes of the newest launch.
    pub launched_on: Vec<String>,
    /// Launches made so far.
    pub launches: u64,
    /// Launches still allowed.
    pub runs_left: u64,
}

impl RunState {
    /// `<prefix>/.scr/run.scr`.
    pub fn path(prefix: &Path) -> PathBuf {
        crate::layout::run_state_file(prefix)
    }

    /// The state `scr run` left for job `job_id` in `prefix`, if any.
    pub fn load(prefix: &Path, job_id: &str) -> Option<RunState> {
        crate::state::read_state::<RunState>(&Self::path(prefix), KIND)
            .ok()
            .filter(|s| s.job_id == job_id)
    }

    fn save(&self, prefix: &Path) {
        let path = Self::path(prefix);
        let saved = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| crate::state::write_state(&path, KIND, self));
        if let Err(e) = saved {
            tracing::warn!("{}: {e}; `scr env` will not show this run", path.display());
        }
    }
}

/// Where [`run`] reports its own progress lines (launches, down nodes, why it stops):
/// called once per line with the line's text, without a newline and without the
/// `scr run: ` the command shows before it. The library prints nothing itself; the
/// command decides where the lines go (the step's own output is passed through to
/// stdout and stderr meanwhile, so a hook that prints should flush each line).
pub type Report = Arc<dyn Fn(&str) + Send + Sync>;

/// Where the launched step's own output goes: called from a reader thread per stream
/// with each whole line as the step wrote it (newline included) and whether it came on
/// its standard error. The command relays it to its own stdout and stderr; the library
/// writes neither.
pub type Relay = Arc<dyn Fn(bool, &[u8]) + Send + Sync>;

/// `scr run`'s options.
#[derive(Clone)]
pub struct RunOptions {
    /// Launches in all (else the `runs` key).
    pub runs: Option<u64>,
    /// Fewest nodes to relaunch on (else the `min_nodes` key).
    pub min_nodes: Option<u64>,
    /// Nodes per launch (else as many as `node_names` names, else every usable node).
    pub nodes: Option<u64>,
    /// Ranks per node for `{ranks}` and simulated nodes (else from `node_names`, else 1).
    pub ranks_per_node: Option<u64>,
    /// Run `scr postrun` at the end.
    pub postrun: bool,
    /// The launcher command and its arguments.
    pub launcher: Vec<String>,
    /// The prefix directory.
    pub prefix: PathBuf,
    /// Where the loop's own progress lines go (see [`Report`]).
    pub report: Report,
    /// Where the launched step's output goes (see [`Relay`]).
    pub relay: Relay,
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("runs", &self.runs)
            .field("min_nodes", &self.min_nodes)
            .field("nodes", &self.nodes)
            .field("ranks_per_node", &self.ranks_per_node)
            .field("postrun", &self.postrun)
            .field("launcher", &self.launcher)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl RunOptions {
    /// Report a line of the loop's own through [`RunOptions::report`].
    fn say(&self, msg: impl std::fmt::Display) {
        (self.report)(&msg.to_string());
    }
}

/// The first launch's nodes and ranks per node from `node_names`, when it is set.
pub fn simulated_layout(node_names: &str) -> Result<Option<(Vec<String>, u64)>, String> {
    if node_names.trim().is_empty() {
        return Ok(None);
    }
    let mut nodes: Vec<(String, u64)> = Vec::new();
    for n in node_names.split(',').map(str::trim) {
        if n.is_empty() {
            return Err(format!("node_names `{node_names}` has an empty name"));
        }
        match nodes.iter_mut().find(|(m, _)| m == n) {
            Some((_, c)) => *c += 1,
            None => nodes.push((n.to_string(), 1)),
        }
    }
    let per = nodes[0].1;
    if let Some((n, c)) = nodes.iter().find(|(_, c)| *c != per) {
        return Err(format!(
            "node_names gives {} {per} rank(s) but {n} {c}: scr run relaunches with the same number of ranks on every node",
            nodes[0].0
        ));
    }
    Ok(Some((nodes.into_iter().map(|(n, _)| n).collect(), per)))
}

/// The nodes of the next launch: the previous launch's nodes that are still up, in
/// their order, then the other nodes left, in the allocation's order; at most `want`.
pub fn choose_nodes(previous: &[String], left: &[String], want: usize) -> Vec<String> {
    let mut out: Vec<String> = previous
        .iter()
        .filter(|n| left.contains(n))
        .cloned()
        .collect();
    out.extend(left.iter().filter(|n| !previous.contains(n)).cloned());
    out.truncate(want);
    out
}

/// The launcher command with its placeholders replaced (see the module documentation).
pub fn launch_command(
    launcher: &[String],
    nodes: &[String],
    ranks_per_node: u64,
    down: &[String],
) -> Vec<String> {
    let exclude = hostlist::compress(down);
    let fill = |a: &String| {
        a.replace("{hosts}", &nodes.join(","))
            .replace("{hostlist}", &hostlist::compress(nodes))
            .replace("{nodes}", &nodes.len().to_string())
            .replace(
                "{ranks}",
                &(nodes.len() as u64 * ranks_per_node).to_string(),
            )
            .replace("{exclude}", &exclude)
    };
    let mut out: Vec<String> = launcher.iter().map(fill).collect();
    let is_srun = launcher
        .first()
        .is_some_and(|l| Path::new(l).file_name().is_some_and(|f| f == "srun"));
    if is_srun && !down.is_empty() && !launcher.iter().any(|a| a.contains("{exclude}")) {
        out.insert(1, format!("--exclude={exclude}"));
    }
    out
}

/// How a step ended.
enum Ended {
    Status(std::process::ExitStatus),
    Watchdog(u64),
    /// `scr run` received this signal and passed it on.
    Signalled(i32),
}

/// How `scr run` ended; the command turns it into its exit status (a value, not a code,
/// so the library says what happened and the command alone decides how to exit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunOutcome {
    /// The step completed (and postrun, when asked for, succeeded).
    Completed,
    /// The step did not complete, postrun failed, or the launch could not be set up;
    /// the reason was logged.
    Failed,
    /// No launcher command was given (a usage error).
    NoLauncher,
}

/// `scr run`: launch the step, relaunch it after failures, then run postrun.
pub fn run(config: &Config, opts: &RunOptions) -> RunOutcome {
    if opts.launcher.is_empty() {
        tracing::error!("no launcher command given (scr run -- mpiexec -n 4 ./app)");
        return RunOutcome::NoLauncher;
    }
    let plan = match Plan::new(config) {
        Ok(p) => p.with_ranks_per_node(opts.ranks_per_node),
        Err(code) => return code,
    };
    if !config.get(settings::ENABLE) {
        return launch_once(opts, &plan);
    }
    let mut relaunch = match Relaunch::new(config, opts, &plan) {
        Ok(r) => r,
        Err(code) => return code,
    };
    // from here on a Ctrl-C or SIGTERM ends the step and the retries, not the loop:
    // postrun still runs (SLURM's --signal=B:TERM@120 before the time limit)
    signals::catch_termination();
    let completed = relaunch.launches();
    relaunch.state.save(&opts.prefix);
    // (a real node found down is not asked: it would only cost the runner's timeout;
    // simulated nodes keep their places, which name each rank's node)
    let up: Vec<String> = relaunch
        .previous
        .iter()
        .filter(|n| plan.layout.is_some() || !relaunch.state.down.iter().any(|(d, _)| d == *n))
        .cloned()
        .collect();
    let postrun_ok = !opts.postrun || postrun(opts, &plan, &up);
    if completed && postrun_ok {
        RunOutcome::Completed
    } else {
        RunOutcome::Failed
    }
}

/// Where `scr run` launches, decided once before the first launch: the allocation, the
/// first launch's simulated nodes (when `node_names` is set) and the ranks per node.
struct Plan {
    alloc: Allocation,
    /// The simulated nodes of the first launch and their ranks per node.
    layout: Option<(Vec<String>, u64)>,
    ranks_per_node: u64,
}

impl Plan {
    /// Read the allocation and the simulated layout and check that the layout's nodes
    /// are in the allocation; `Err(outcome)` once the reason is logged.
    fn new(config: &Config) -> Result<Plan, RunOutcome> {
        let alloc = match allocation(config, &|v| std::env::var(v).ok()) {
            Ok(a) => a,
            Err(e) => {
                tracing::error!("{e}");
                return Err(RunOutcome::Failed);
            }
        };
        let layout = match simulated_layout(&config.get(settings::NODE_NAMES)) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!("{e}");
                return Err(RunOutcome::Failed);
            }
        };
        if let Some((nodes, _)) = &layout {
            if let Some(n) = nodes.iter().find(|n| !alloc.nodes.contains(n)) {
                tracing::error!(
                    node = %n,
                    "node_names names {n}, which is not in the allocation {} ({}); fix node_names or run inside the allocation",
                    hostlist::compress(&alloc.nodes),
                    alloc.source
                );
                return Err(RunOutcome::Failed);
            }
        }
        let ranks_per_node = layout.as_ref().map_or(1, |(_, r)| *r);
        Ok(Plan {
            alloc,
            layout,
            ranks_per_node,
        })
    }

    /// `--ranks-per-node`, when given, overrides what the layout says.
    fn with_ranks_per_node(mut self, given: Option<u64>) -> Plan {
        if let Some(r) = given {
            self.ranks_per_node = r;
        }
        self
    }

    /// `SCR_NODE_NAMES` for a step on `nodes` (simulated nodes): each node named once
    /// per rank it runs.
    fn node_names(&self, nodes: &[String]) -> String {
        let names: Vec<&str> = nodes
            .iter()
            .flat_map(|n| std::iter::repeat_n(n.as_str(), self.ranks_per_node as usize))
            .collect();
        names.join(",")
    }
}

/// `enable = false`: launch the step once on the first launch's nodes, without node
/// checks, relaunches or postrun (SCR's scr_srun too: with the library off there is
/// nothing to relaunch from). The outcome of [`run`].
fn launch_once(opts: &RunOptions, plan: &Plan) -> RunOutcome {
    opts.say("enable = false: launching once, without node checks or relaunches");
    let nodes = plan.layout.as_ref().map_or(&plan.alloc.nodes, |(n, _)| n);
    let argv = launch_command(&opts.launcher, nodes, plan.ranks_per_node, &[]);
    match Command::new(&argv[0]).args(&argv[1..]).status() {
        Ok(s) if s.success() => RunOutcome::Completed,
        Ok(s) => {
            opts.say(format!("launch failed ({s})"));
            RunOutcome::Failed
        }
        Err(e) => {
            opts.say(format!("cannot start `{}`: {e}", argv[0]));
            RunOutcome::Failed
        }
    }
}

/// How one launch of the relaunch loop ended, as the loop sees it.
enum Outcome {
    /// The step completed: no relaunch.
    Completed,
    /// The step failed: relaunch while runs remain and no halt condition holds.
    Failed,
    /// `scr run` was signalled: no relaunch.
    Stopped,
}

/// The relaunch loop's state across launches (see the module documentation).
struct Relaunch<'a> {
    config: &'a Config,
    opts: &'a RunOptions,
    plan: &'a Plan,
    check: NodeCheck,
    /// Launches in all.
    runs: u64,
    /// `watchdog_timeout` and `watchdog_timeout_pfs` in seconds (0: none).
    watchdog: Watchdog,
    /// What is kept in `run.scr` for `scr env`.
    state: RunState,
    /// The nodes of the previous launch (before the first: the simulated layout's).
    previous: Vec<String>,
    /// Nodes per launch, once known.
    want: Option<usize>,
    /// Fewest nodes to launch on (`min_nodes`; 0: unset, see [`Relaunch::needed`]).
    min_nodes: u64,
    /// The launcher is Open MPI's on real nodes: it gets `-x SCR_RUN_STEP`, since its
    /// daemons on other nodes do not pass their environment to the ranks.
    forward_tag: bool,
}

/// Whether `launcher` is Open MPI's `mpirun`/`mpiexec` (its `--version` says so). Open
/// MPI passes a variable to ranks on other nodes only when told (`-x`); MPICH's hydra,
/// srun and flux pass the whole environment.
fn is_open_mpi(launcher: &str) -> bool {
    let name = Path::new(launcher)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    ["mpirun", "mpiexec", "orterun"].contains(&name.as_str())
        && crate::command::output_within(
            Command::new(launcher).arg("--version"),
            crate::walltime::COMMAND_TIMEOUT,
        )
        .is_ok_and(|o| o.stdout.contains("Open MPI") || o.stderr.contains("Open MPI"))
}

impl<'a> Relaunch<'a> {
    /// Read the loop's settings and announce the allocation; `Err(outcome)` when the
    /// node checks cannot be set up (the reason printed).
    fn new(config: &'a Config, opts: &'a RunOptions, plan: &'a Plan) -> Result<Self, RunOutcome> {
        let env = |v: &str| std::env::var(v).ok();
        // (simulated nodes are all here: no runner)
        let runner = plan
            .layout
            .is_none()
            .then(|| crate::remote::Runner::from_config(config, &plan.alloc.nodes, &env))
            .flatten();
        if let Some(r) = &runner {
            opts.say(format!("reaching the nodes through {}", r.source));
        }
        let check = match NodeCheck::new(config, &opts.prefix, plan.ranks_per_node) {
            Ok(c) => c.with_runner(runner),
            Err(e) => {
                tracing::error!("{e}");
                return Err(RunOutcome::Failed);
            }
        };
        let runs = opts
            .runs
            .unwrap_or_else(|| config.get(settings::RUNS))
            .max(1);
        let watchdog = Watchdog {
            secs: config.get(settings::WATCHDOG_TIMEOUT),
            pfs_secs: config.get(settings::WATCHDOG_TIMEOUT_PFS),
            prefix: opts.prefix.clone(),
        };
        opts.say(format!(
            "allocation {} ({}), {runs} run(s){}",
            hostlist::compress(&plan.alloc.nodes),
            plan.alloc.source,
            match (watchdog.secs, watchdog.pfs_secs) {
                (0, _) => String::new(),
                (w, p) if p > w => format!(", watchdog {w} s ({p} s while a flush is open)"),
                (w, _) => format!(", watchdog {w} s"),
            }
        ));
        let forward_tag =
            check.runner.is_some() && opts.launcher.first().is_some_and(|l| is_open_mpi(l));
        Ok(Relaunch {
            forward_tag,
            config,
            opts,
            plan,
            check,
            runs,
            watchdog,
            state: RunState {
                job_id: config.get(settings::JOB_ID),
                allocation: plan.alloc.nodes.clone(),
                runs_left: runs,
                ..RunState::default()
            },
            previous: plan
                .layout
                .as_ref()
                .map(|(n, _)| n.clone())
                .unwrap_or_default(),
            want: opts
                .nodes
                .map(|n| n as usize)
                .or_else(|| plan.layout.as_ref().map(|(n, _)| n.len())),
            min_nodes: opts
                .min_nodes
                .unwrap_or_else(|| config.get(settings::MIN_NODES)),
        })
    }

    /// Append `event` to the prefix's event log, where `scr log` counts failures and
    /// lost nodes (and to syslog), as the configuration's `log_*` keys say.
    fn log(&self, event: crate::events::Event) {
        crate::events::Sinks::from_config(self.config).record(
            &self.opts.prefix,
            &self.state.job_id,
            event,
        );
    }

    /// Launch until a launch completes, no run is left, too few nodes are left, a halt
    /// condition holds or `scr run` is signalled; whether a launch completed.
    fn launches(&mut self) -> bool {
        // the newest launch whose leftovers were ended
        let mut cleaned = 0;
        for attempt in 1..=self.runs {
            if let Some(sig) = signals::take() {
                self.opts.say(format!(
                    "stopping: scr run received {}; no relaunch",
                    signals::name(sig)
                ));
                break;
            }
            if attempt > 1 {
                self.end_previous(attempt - 1);
                cleaned = attempt - 1;
            }
            let Some(nodes) = self.next_nodes() else {
                break;
            };
            let Some(ended) = self.start(attempt, &nodes) else {
                break;
            };
            self.previous = nodes;
            match self.outcome(attempt, ended) {
                Outcome::Completed => return true,
                Outcome::Stopped => break,
                Outcome::Failed => {}
            }
            if attempt == self.runs {
                self.opts
                    .say(format!("stopping: no runs left (runs = {})", self.runs));
                break;
            }
            if self.halted() {
                break;
            }
        }
        // the last launch failed: what it left must not run on while postrun reads the
        // caches
        if self.state.launches > cleaned {
            self.end_previous(self.state.launches);
        }
        false
    }

    /// Before a relaunch, and after a last launch that failed: end what launch
    /// `attempt` left running on each of its nodes (see [`clean`]): this host and
    /// simulated nodes directly, the others through the remote runner (none: said, and
    /// left). A node that cannot be reached is left to the down-node check that follows.
    fn end_previous(&self, attempt: u64) {
        let tag = self.step_tag(attempt);
        let grace = Duration::from_secs(5);
        let simulated = self.plan.layout.is_some();
        let here = |n: &str| simulated || self.check.is_here(n);
        let ended = crate::remote::fan_out(
            &self.previous,
            self.check.runner.as_ref().map_or(1, |r| r.fanout),
            |node| {
                if here(node) {
                    return String::new();
                }
                let Some(r) = &self.check.runner else {
                    return "not cleaned: another host and no remote runner (set remote_runner)"
                        .into();
                };
                let args = vec!["nodes".into(), "clean".into(), "--step".into(), tag.clone()];
                match r
                    .run_scr(node, &args, Some(r.timeout + grace))
                    .and_then(|(_, report)| {
                        crate::remote::parse_report::<clean::CleanReport>(node, &report)
                    }) {
                    Ok(c) => describe_ended((c.found, c.left)),
                    Err(why) => format!("its processes could not be ended: {why}"),
                }
            },
        );
        let mut lines: Vec<(String, String)> = self.previous.iter().cloned().zip(ended).collect();
        // this host (and every simulated node: their processes all run here), also when
        // only the launcher ran here
        let local = describe_ended(clean::end_step(&tag, grace));
        if !local.is_empty() {
            let name = if simulated {
                "this host (the simulated nodes)".to_string()
            } else {
                self.check.this_host.clone()
            };
            lines.push((name, local));
        }
        for (node, what) in lines.into_iter().filter(|(_, w)| !w.is_empty()) {
            self.opts
                .say(format!("node {node}: launch {attempt}: {what}"));
        }
    }

    /// The tag of launch `attempt` in the step's environment ([`clean::STEP_VAR`]):
    /// unique to this `scr run` and launch.
    fn step_tag(&self, attempt: u64) -> String {
        format!("{}.{}.{attempt}", self.state.job_id, std::process::id())
    }

    /// Check the nodes not yet found down, record the ones down now (they stay
    /// excluded), and choose the next launch's nodes: the survivors of the previous
    /// launch, then spares. `None` when fewer than `min_nodes` are left (said why, state
    /// saved).
    fn next_nodes(&mut self) -> Option<Vec<String>> {
        let up: Vec<String> = self
            .plan
            .alloc
            .nodes
            .iter()
            .filter(|n| !self.state.down.iter().any(|(d, _)| d == *n))
            .cloned()
            .collect();
        let found = self.check.down(&up);
        for (node, why) in &found {
            self.opts.say(format!("node {node} is down: {why}"));
        }
        if !found.is_empty() {
            self.log(crate::events::Event::LostNodes {
                nodes: found.iter().map(|(n, _)| n.clone()).collect(),
            });
        }
        self.state.down.extend(found);
        let left: Vec<String> = up
            .into_iter()
            .filter(|n| !self.state.down.iter().any(|(d, _)| d == n))
            .collect();
        let want_now = *self.want.get_or_insert(left.len());
        if self.state.launches == 0 {
            nodes::forget_previous_run_nodes(&self.opts.prefix);
        }
        let need = self.needed(want_now);
        let nodes = choose_nodes(&self.previous, &left, want_now);
        if (nodes.len() as u64) < need.0 || nodes.is_empty() {
            self.say_too_few(&nodes, need);
            self.state.save(&self.opts.prefix);
            return None;
        }
        Some(nodes)
    }

    /// How many nodes the next launch needs, and why: `min_nodes` when set; else, for a
    /// relaunch, as many as the previous run used when its nodes file says
    /// ([`nodes::previous_run_nodes`]: SCR's rule, the step may have used fewer nodes
    /// than it was given); else as many as the first launch was given (`want`).
    fn needed(&self, want: usize) -> (u64, &'static str) {
        if self.min_nodes > 0 {
            return (self.min_nodes, "min_nodes");
        }
        if self.state.launches > 0 {
            if let Some(n) = nodes::previous_run_nodes(&self.opts.prefix) {
                return (n, "the previous run's node count, from its nodes file");
            }
        }
        (want as u64, "the first launch's node count")
    }

    /// Say why the loop stops for lack of nodes (`need`: how many, and why), with every
    /// down node and its reason.
    fn say_too_few(&self, nodes: &[String], need: (u64, &str)) {
        let down: Vec<String> = self
            .state
            .down
            .iter()
            .map(|(n, why)| format!("{n} ({why})"))
            .collect();
        let down = if down.is_empty() {
            "none".into()
        } else {
            down.join(", ")
        };
        if nodes.is_empty() {
            self.opts
                .say(format!("stopping: no usable node left; down: {down}"));
        } else {
            self.opts.say(format!(
                "stopping: {} node(s) left ({}), fewer than the {} needed ({}); down: {down}",
                nodes.len(),
                hostlist::compress(nodes),
                need.0,
                need.1,
            ));
        }
    }

    /// Record launch `attempt` on `nodes` in `run.scr`, start the step there and wait
    /// for it; `None` when it cannot be started (said why, state saved).
    fn start(&mut self, attempt: u64, nodes: &[String]) -> Option<Ended> {
        let down_names: Vec<String> = self.state.down.iter().map(|(n, _)| n.clone()).collect();
        let mut argv = launch_command(
            &self.opts.launcher,
            nodes,
            self.plan.ranks_per_node,
            &down_names,
        );
        if self.forward_tag {
            argv.splice(1..1, ["-x".to_string(), clean::STEP_VAR.to_string()]);
        }
        self.state.launches = attempt;
        self.state.runs_left = self.runs - attempt;
        self.state.launched_on = nodes.to_vec();
        self.state.save(&self.opts.prefix);
        self.opts.say(format!(
            "launch {attempt} of {} on {} node(s) {}: {}",
            self.runs,
            nodes.len(),
            hostlist::compress(nodes),
            argv.join(" ")
        ));
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..]);
        cmd.env(clean::STEP_VAR, self.step_tag(attempt));
        if self.plan.layout.is_some() {
            cmd.env("SCR_NODE_NAMES", self.plan.node_names(nodes));
        }
        let watched = watched_dirs(self.config, &self.opts.prefix, &self.check, nodes);
        match launch(cmd, &self.watchdog, &watched, self.opts) {
            Ok(e) => Some(e),
            Err(e) => {
                self.opts
                    .say(format!("stopping: cannot start `{}`: {e}", argv[0]));
                self.state.save(&self.opts.prefix);
                None
            }
        }
    }

    /// Say how launch `attempt` ended and log a failure or a signal to the event log.
    fn outcome(&self, attempt: u64, ended: Ended) -> Outcome {
        match ended {
            Ended::Status(s) if s.success() => {
                self.opts.say(format!("launch {attempt} completed"));
                Outcome::Completed
            }
            Ended::Status(s) => {
                let what = format!("launch {attempt} failed ({s})");
                self.opts.say(&what);
                self.log(crate::events::Event::Failure {
                    what: format!("scr run: {what}"),
                    rank: None,
                });
                Outcome::Failed
            }
            Ended::Signalled(sig) => {
                let why = format!("scr run received {}", signals::name(sig));
                self.opts.say(format!("stopping: {why}; no relaunch"));
                self.log(crate::events::Event::Halt {
                    reason: format!("scr run: {why}"),
                });
                Outcome::Stopped
            }
            Ended::Watchdog(secs) => {
                let what =
                    format!("launch {attempt} killed by the watchdog: no progress for {secs} s");
                self.opts.say(&what);
                self.log(crate::events::Event::Failure {
                    what: format!("scr run: {what}"),
                    rank: None,
                });
                Outcome::Failed
            }
        }
    }

    /// Whether a halt condition in the prefix ends the retries (said and logged); an
    /// unreadable halt file does not.
    fn halted(&self) -> bool {
        match halt_reason(&self.opts.prefix, self.config) {
            Ok(Some(why)) => {
                self.opts.say(format!("stopping: halt condition: {why}"));
                self.log(crate::events::Event::Halt {
                    reason: format!("scr run: {why}"),
                });
                true
            }
            Ok(None) => false,
            Err(e) => {
                self.opts.say(format!("warning: {e}; relaunching"));
                false
            }
        }
    }
}

/// What [`clean::end_step`] did, for `scr run`'s report (empty: nothing was left).
pub fn describe_ended((found, left): (usize, Vec<u32>)) -> String {
    match (found, left.is_empty()) {
        (0, _) => String::new(),
        (n, true) => format!("ended {n} process(es) it left"),
        (n, false) => format!(
            "ended {} of the {n} process(es) it left; still there: {left:?}",
            n - left.len()
        ),
    }
}

/// Run `scr postrun` for the prefix after the last launch on `last`: on those nodes'
/// caches (simulated nodes: all here; real nodes: through the remote runner, or this
/// host alone without one); whether it succeeded (said why not).
fn postrun(opts: &RunOptions, plan: &Plan, last: &[String]) -> bool {
    opts.say("running scr postrun");
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("scr"));
    let mut cmd = Command::new(exe);
    cmd.arg("postrun").arg("--prefix").arg(&opts.prefix);
    for n in last {
        cmd.arg("--node").arg(n);
    }
    if plan.layout.is_some() && !last.is_empty() {
        cmd.env("SCR_NODE_NAMES", plan.node_names(last));
    }
    match cmd.status() {
        Ok(s) if s.success() => true,
        Ok(s) => {
            opts.say(format!("scr postrun failed ({s})"));
            false
        }
        Err(e) => {
            opts.say(format!("cannot run scr postrun: {e}"));
            false
        }
    }
}

/// Where progress shows: the prefix's `.scr` and the job's directory under the control
/// base and every node-local store, on each node of the launch (on this host for real
/// nodes: the others cannot be seen from here).
fn watched_dirs(
    config: &Config,
    prefix: &Path,
    check: &NodeCheck,
    nodes: &[String],
) -> Vec<PathBuf> {
    let mut dirs = vec![crate::layout::scr_dir(prefix)];
    let simulated = !config.get(settings::NODE_NAMES).is_empty();
    for (base, _) in &check.bases {
        if simulated {
            dirs.extend(nodes.iter().map(|n| base.join(n).join(&check.job_dir)));
        } else {
            dirs.push(base.join(&check.job_dir));
        }
    }
    dirs
}

/// The newest modification time of anything below `dirs` (at most `limit` entries
/// looked at, so a huge cache cannot stall the watchdog).
fn newest_change(dirs: &[PathBuf], limit: usize) -> Option<SystemTime> {
    let mut newest = None;
    let mut seen = 0usize;
    let mut todo: Vec<PathBuf> = dirs.to_vec();
    while let Some(d) = todo.pop() {
        let Ok(m) = std::fs::symlink_metadata(&d) else {
            continue;
        };
        if let Ok(t) = m.modified() {
            newest = newest.max(Some(t));
        }
        if m.is_dir() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                seen += 1;
                if seen > limit {
                    return newest;
                }
                todo.push(e.path());
            }
        }
    }
    newest
}

/// The watchdog's timeouts: `secs` without progress ends the step (0: no watchdog), or
/// `pfs_secs` while a flush to the prefix is open in its index (SCR's
/// `SCR_WATCHDOG_TIMEOUT_PFS`: a write to the parallel file system takes longer than one
/// to cache, and may show no progress the watchdog sees for a while).
struct Watchdog {
    secs: u64,
    pfs_secs: u64,
    prefix: PathBuf,
}

impl Watchdog {
    /// The timeout in force now: `pfs_secs` (when longer) while the prefix's index holds a
    /// flush that is neither complete nor failed.
    fn timeout(&self) -> Duration {
        if self.pfs_secs > self.secs && flush_open(&self.prefix) {
            Duration::from_secs(self.pfs_secs)
        } else {
            Duration::from_secs(self.secs)
        }
    }
}

/// Whether the index of `prefix` holds an open flush (an entry neither complete nor
/// failed); an unreadable index holds none.
fn flush_open(prefix: &Path) -> bool {
    crate::state::prefix::Index::load(prefix).is_ok_and(|ix| {
        ix.datasets
            .values()
            .any(|e| !e.complete && e.failed.is_none())
    })
}

/// Start the step and wait for it. With a watchdog (`watchdog` > 0 seconds) the step
/// runs in a process group of its own, so that everything it started can be ended
/// together when it shows no progress; without one it stays in `scr run`'s group, where
/// a Ctrl-C at the terminal reaches it directly. A termination signal sent to `scr run`
/// is passed on to the step (its group with a watchdog), which then has
/// [`SIGNAL_GRACE`] to end before it is killed.
fn launch(
    mut cmd: Command,
    dog: &Watchdog,
    watched: &[PathBuf],
    opts: &RunOptions,
) -> std::io::Result<Ended> {
    use std::os::unix::process::CommandExt;
    let watchdog = dog.secs;
    let own_group = watchdog > 0;
    if own_group {
        cmd.process_group(0);
        // (a background process group reading the terminal would be stopped: SIGTTIN)
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
    }
    let start = Instant::now();
    let mut child = cmd.spawn()?;
    // the step's output is passed through line by line; each line is progress
    let last_output = Arc::new(AtomicU64::new(0));
    let mut pumps = Vec::new();
    if let Some(out) = child.stdout.take() {
        pumps.push(pump(
            out,
            false,
            opts.relay.clone(),
            last_output.clone(),
            start,
        ));
    }
    if let Some(err) = child.stderr.take() {
        pumps.push(pump(
            err,
            true,
            opts.relay.clone(),
            last_output.clone(),
            start,
        ));
    }
    let mut progress = Progress::new(watched, start, last_output);
    let ended = loop {
        if let Some(s) = child.try_wait()? {
            break Ended::Status(s);
        }
        if let Some(sig) = signals::take() {
            opts.say(format!(
                "received {}: passing it on to the job step ({}), which has {} s to end",
                signals::name(sig),
                if own_group {
                    "its process group"
                } else {
                    "the launcher"
                },
                SIGNAL_GRACE.as_secs()
            ));
            end_step(&mut child, own_group, sig, SIGNAL_GRACE);
            break Ended::Signalled(sig);
        }
        std::thread::sleep(Duration::from_millis(100));
        if watchdog == 0 {
            continue;
        }
        // (the index is read only once the shorter timeout has passed)
        let idle = progress.idle();
        let limit = if idle >= Duration::from_secs(watchdog) {
            dog.timeout()
        } else {
            Duration::MAX
        };
        if idle >= limit {
            let watchdog = limit.as_secs();
            opts.say(format!(
                "watchdog: no output and no file changed under {} for {watchdog} s; killing the job step (process group {})",
                watched
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                child.id()
            ));
            // a signal to `scr run` during the grace is not lost: it ends the retries
            match end_step(&mut child, own_group, libc::SIGTERM, Duration::from_secs(5)) {
                Some(sig) => break Ended::Signalled(sig),
                None => break Ended::Watchdog(watchdog),
            }
        }
    };
    reap(&child, own_group, pumps);
    Ok(ended)
}

/// What the watchdog watches: the step's output (the time of its last line, kept by
/// the pumps) and the newest change under the watched directories (scanned at most
/// every half second).
struct Progress<'a> {
    watched: &'a [PathBuf],
    start: Instant,
    last_output: Arc<AtomicU64>,
    /// The newest change seen under `watched`.
    newest: Option<SystemTime>,
    /// When (since `start`) a change was last seen.
    last_progress: Duration,
    last_scan: Instant,
}

impl<'a> Progress<'a> {
    /// Start watching: the changes already there are not progress.
    fn new(watched: &'a [PathBuf], start: Instant, last_output: Arc<AtomicU64>) -> Self {
        Progress {
            watched,
            start,
            last_output,
            newest: newest_change(watched, 100_000),
            last_progress: Duration::ZERO,
            last_scan: Instant::now(),
        }
    }

    /// How long the step has shown no progress (no output line, no file changed).
    fn idle(&mut self) -> Duration {
        if self.last_scan.elapsed() >= Duration::from_millis(500) {
            self.last_scan = Instant::now();
            let now = newest_change(self.watched, 100_000);
            if now > self.newest {
                self.newest = now;
                self.last_progress = self.start.elapsed();
            }
        }
        let out = Duration::from_millis(self.last_output.load(Ordering::Relaxed));
        self.start
            .elapsed()
            .saturating_sub(self.last_progress.max(out))
    }
}

/// After the step ended: kill whatever it left running in its own process group (it
/// would hold the output pipes open and `scr run` would wait for it), and pass its
/// output on until the pipes close, waiting at most a few seconds for a process that
/// left the group and keeps them open.
fn reap(child: &Child, own_group: bool, pumps: Vec<std::thread::JoinHandle<()>>) {
    if own_group {
        signals::send(child.id(), true, libc::SIGKILL);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while pumps.iter().any(|p| !p.is_finished()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    for p in pumps.into_iter().filter(|p| p.is_finished()) {
        let _ = p.join();
    }
}

/// How long a step has to end after a signal passed on from `scr run` (SLURM's
/// `--signal=B:TERM@120` leaves two minutes before the time limit; postrun needs some).
pub const SIGNAL_GRACE: Duration = Duration::from_secs(30);

/// Send `signal` to the step (its process group when `group`), and SIGKILL after
/// `grace` if it has not ended; a second signal to `scr run` cuts the grace short and
/// is returned.
fn end_step(child: &mut Child, group: bool, signal: i32, grace: Duration) -> Option<i32> {
    signals::send(child.id(), group, signal);
    let deadline = Instant::now() + grace;
    let mut exited = false;
    let mut taken = None;
    while Instant::now() < deadline {
        if let Some(sig) = signals::take() {
            taken = Some(sig);
            break;
        }
        if matches!(child.try_wait(), Ok(Some(_))) {
            exited = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // a group's leader may be gone while others of the group live on; a lone launcher
    // that has exited is not signalled again (its pid may be another process's by now)
    if group || !exited {
        signals::send(child.id(), group, libc::SIGKILL);
    }
    let _ = child.wait();
    taken
}

/// Hand `from` to `relay` line by line, noting when each line came.
fn pump(
    from: impl std::io::Read + Send + 'static,
    stderr: bool,
    relay: Relay,
    last: Arc<AtomicU64>,
    start: Instant,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut r = std::io::BufReader::new(from);
        let mut line = Vec::new();
        while r.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
            last.store(start.elapsed().as_millis() as u64, Ordering::Relaxed);
            relay(stderr, &line);
            line.clear();
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watchdog_waits_the_pfs_timeout_while_a_flush_is_open() {
        use crate::state::prefix::{Index, IndexEntry};
        let dir = tempfile::tempdir().unwrap();
        let dog = Watchdog {
            secs: 3,
            pfs_secs: 30,
            prefix: dir.path().to_path_buf(),
        };
        // no index: the plain timeout
        assert_eq!(dog.timeout(), Duration::from_secs(3));
        let entry = IndexEntry {
            id: 4,
            name: "ckpt.4".into(),
            ..IndexEntry::default()
        };
        Index::update(dir.path(), |ix| ix.begin_flush(&entry)).unwrap();
        assert_eq!(dog.timeout(), Duration::from_secs(30), "a flush is open");
        Index::update(dir.path(), |ix| ix.flush_failed(4, "rank 1: disk full")).unwrap();
        assert_eq!(dog.timeout(), Duration::from_secs(3), "it failed: not open");
        // a shorter pfs timeout never shortens the watchdog
        let dog = Watchdog {
            secs: 3,
            pfs_secs: 1,
            prefix: dir.path().to_path_buf(),
        };
        assert_eq!(dog.timeout(), Duration::from_secs(3));
    }

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn layout_of_simulated_nodes() {
        assert_eq!(
            simulated_layout("n0,n0,n1,n1").unwrap(),
            Some((s(&["n0", "n1"]), 2))
        );
        assert_eq!(simulated_layout("").unwrap(), None);
        assert_eq!(
            simulated_layout("n0,n0,n1").unwrap_err(),
            "node_names gives n0 2 rank(s) but n1 1: scr run relaunches with the same number of ranks on every node"
        );
    }

    #[test]
    fn survivors_first_then_spares() {
        let prev = s(&["n0", "n1", "n2"]);
        assert_eq!(
            choose_nodes(&prev, &s(&["n0", "n2", "n3", "n4"]), 3),
            s(&["n0", "n2", "n3"])
        );
        assert_eq!(choose_nodes(&prev, &s(&["n3", "n2"]), 3), s(&["n2", "n3"]));
        assert_eq!(choose_nodes(&[], &s(&["a", "b"]), 5), s(&["a", "b"]));
    }

    #[test]
    fn placeholders_and_srun_exclude() {
        let l = s(&[
            "mpiexec",
            "-n",
            "{ranks}",
            "--host",
            "{hosts}",
            "app",
            "{hostlist}/{nodes}",
        ]);
        assert_eq!(
            launch_command(&l, &s(&["n0", "n2", "n3"]), 2, &s(&["n1"])),
            s(&[
                "mpiexec",
                "-n",
                "6",
                "--host",
                "n0,n2,n3",
                "app",
                "n[0,2-3]/3"
            ])
        );
        let srun = s(&["/usr/bin/srun", "-N", "{nodes}", "app"]);
        assert_eq!(
            launch_command(&srun, &s(&["n0", "n3"]), 1, &s(&["n1", "n2"])),
            s(&["/usr/bin/srun", "--exclude=n[1-2]", "-N", "2", "app"])
        );
        assert_eq!(
            launch_command(&srun, &s(&["n0"]), 1, &[]),
            s(&["/usr/bin/srun", "-N", "1", "app"])
        );
        let own = s(&["srun", "-x", "{exclude}", "app"]);
        assert_eq!(
            launch_command(&own, &s(&["n0"]), 1, &s(&["n1"])),
            s(&["srun", "-x", "n1", "app"])
        );
    }
}
