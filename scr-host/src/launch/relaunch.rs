//! The relaunch loop (`enable = true`): before every launch the nodes not yet found down
//! are checked, the next launch's nodes chosen, the step started and its end judged;
//! between launches what the previous one left on its nodes is ended; the loop stops on
//! completion, with no runs or too few nodes left, on a halt condition or a signal. What
//! it decided goes to `run.scr` and the event log.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::step::{launch, Ended};
use super::watchdog::{watched_dirs, Watchdog};
use super::{
    choose_nodes, clean, halt_reason, hostfile_for, launch_command, nodes, signals, NodeCheck,
    Plan, RunOptions, RunOutcome, RunState,
};
use crate::config::{settings, Config};
use crate::hostlist;

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
pub(super) struct Relaunch<'a> {
    config: &'a Config,
    opts: &'a RunOptions,
    plan: &'a Plan,
    check: NodeCheck,
    /// Launches in all.
    runs: u64,
    /// `watchdog_timeout` and `watchdog_timeout_pfs` in seconds (0: none).
    watchdog: Watchdog,
    /// What is kept in `run.scr` for `scr env`.
    pub(super) state: RunState,
    /// The nodes of the previous launch (before the first: the simulated layout's).
    pub(super) previous: Vec<String>,
    /// Nodes per launch, once known.
    want: Option<usize>,
    /// Fewest nodes to launch on (`min_nodes`; 0: unset, see [`Relaunch::needed`]).
    min_nodes: u64,
    /// The launcher is Open MPI's on real nodes: it gets `-x SCR_RUN_STEP`, since its
    /// daemons on other nodes do not pass their environment to the ranks.
    forward_tag: bool,
    /// The launcher is Open MPI's (its hostfile's format).
    open_mpi: bool,
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
    pub(super) fn new(
        config: &'a Config,
        opts: &'a RunOptions,
        plan: &'a Plan,
    ) -> Result<Self, RunOutcome> {
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
        let open_mpi = opts.launcher.first().is_some_and(|l| is_open_mpi(l));
        let forward_tag = check.runner.is_some() && open_mpi;
        Ok(Relaunch {
            forward_tag,
            open_mpi,
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
    pub(super) fn launches(&mut self) -> bool {
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
        // mpirun/mpiexec on real nodes: the nodes left, in a hostfile (SCR's
        // `<prefix>/.scr/hostfile`), as they take no list of hosts to avoid
        let real = self.plan.layout.is_none();
        let open_mpi = self.open_mpi;
        if let Some((option, text)) = real
            .then(|| {
                hostfile_for(
                    &self.opts.launcher,
                    nodes,
                    self.plan.ranks_per_node,
                    &down_names,
                    open_mpi,
                )
            })
            .flatten()
        {
            let path = crate::layout::scr_dir(&self.opts.prefix).join("hostfile");
            if let Err(e) = crate::state::write_atomic(&path, text.as_bytes()) {
                self.opts.say(format!(
                    "stopping: cannot write the hostfile {} that leaves the down nodes out: {e}",
                    path.display()
                ));
                self.state.save(&self.opts.prefix);
                return None;
            }
            argv.splice(1..1, [option.to_string(), path.display().to_string()]);
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
