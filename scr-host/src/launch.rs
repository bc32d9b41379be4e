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
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

pub mod clean;
mod env;
pub mod nodes;
pub use env::{env, halt_reason, Env};
mod placement;
mod relaunch;
mod run_state;
mod signals;
mod step;
mod watchdog;

use crate::config::Config;
use crate::hostlist;
use crate::state::halt::Halt;
pub use nodes::{allocation, down_nodes, Allocation, NodeCheck};
pub use placement::{choose_nodes, hostfile_for, launch_command, simulated_layout, LayoutError};
pub use relaunch::describe_ended;
use relaunch::Relaunch;
pub use run_state::{RunState, KIND};
pub use step::SIGNAL_GRACE;

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
