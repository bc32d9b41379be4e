//! The command-line side of the launch part: `scr run`, `scr nodes down`,
//! `scr hostlist`, `scr env`, `scr halt --check`: their clap arguments, and how each
//! prints what `scr_host::launch` returns and exits (see [`scr_cli::exit`]).

use scr_host::config::settings;
use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

use scr_cli::exit;
use scr_host::config::Config;
use scr_host::hostlist;
use scr_host::launch::{self, RunOptions, RunOutcome};

/// `scr run [OPTIONS] -- LAUNCHER ARGS...`
#[derive(Args, Debug)]
#[command(after_help = "\
Placeholders in the launcher's arguments, replaced at each launch:
  {hosts}     the nodes of this launch, comma-separated
  {hostlist}  the same, compressed (n[0,2-3])
  {nodes}     their count
  {ranks}     nodes x ranks per node (--ranks-per-node, else from SCR_NODE_NAMES, else 1)
  {exclude}   the down nodes, compressed (empty when none)
`srun` with down nodes and no {exclude} gets --exclude=<down nodes>.
With simulated nodes (SCR_NODE_NAMES set), SCR_NODE_NAMES describes the first launch;
each relaunch gets SCR_NODE_NAMES for its nodes (survivors first, then spares).

Examples: scr run --runs 3 -- mpiexec -n {ranks} ./app
          scr run --runs 3 --nodes 4 --ranks-per-node 8 -- srun -N {nodes} -n {ranks} ./app
Node list: nodelist (SCR_NODELIST), SLURM_JOB_NODELIST, SLURM_NODELIST, `flux getattr
hostlist` (FLUX_URI set), LSB_MCPU_HOSTS, LSB_HOSTS, PBS_NODEFILE, SCR_NODE_NAMES.

Exit status: 0 the step completed; 1 it did not (the reason is printed); 2 usage.")]
pub struct RunArgs {
    /// Launches in all, the first included (default: the `runs` key, SCR_RUNS).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub runs: Option<u64>,
    /// Stop relaunching when fewer nodes are left (default: the `min_nodes` key; 0 or
    /// unset: as many as the previous run used, from the nodes file its rank 0 wrote in
    /// the prefix, else as many as the first launch used).
    #[arg(long, value_name = "M")]
    pub min_nodes: Option<u64>,
    /// Nodes per launch; the allocation's other nodes are spares for relaunches
    /// (default: as many as SCR_NODE_NAMES names, else every usable node).
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u64).range(1..))]
    pub nodes: Option<u64>,
    /// Ranks per node, for {ranks} and the SCR_NODE_NAMES of simulated nodes (default:
    /// from SCR_NODE_NAMES, else 1).
    #[arg(long, value_name = "R", value_parser = clap::value_parser!(u64).range(1..))]
    pub ranks_per_node: Option<u64>,
    /// Run `scr postrun` after the last launch (scavenge the newest checkpoint).
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub postrun: bool,
    /// The prefix directory (default: the configuration's `prefix`).
    #[arg(long, value_name = "DIR")]
    pub prefix: Option<PathBuf>,
    /// The launcher and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "LAUNCHER")]
    pub launcher: Vec<String>,
}

/// `scr nodes ...`
#[derive(Subcommand, Debug)]
pub enum NodesCommand {
    /// List the nodes that are down, with the reason for each: listed in
    /// exclude_nodes, reported by down_nodes_script, a host name that does not resolve,
    /// an unusable control or cache directory, too little free space. Exit 0 when none
    /// is down, 1 when some are, 2 when the host list or the configuration is invalid.
    Down {
        /// The nodes to check, a host list such as node[1-4] (default: the allocation's).
        #[arg(value_name = "HOSTLIST")]
        nodes: Option<String>,
        /// The prefix directory whose index sizes the free-space check (default: the
        /// configuration's `prefix`).
        #[arg(long, value_name = "DIR")]
        prefix: Option<PathBuf>,
        /// Check only this host's own directories and their free space (what `scr run`
        /// asks each node through the remote runner); prints `HOST: REASON` when down.
        #[arg(long, conflicts_with = "nodes")]
        here: bool,
        /// Ranks per node, for the free-space estimate.
        #[arg(long, value_name = "N", default_value_t = 1)]
        ranks_per_node: u64,
    },
    /// End what a failed launch of `scr run` left running on this host: every process
    /// of this user whose environment holds SCR_RUN_STEP=TAG (SIGTERM, then SIGKILL after
    /// a few seconds). `scr run` runs this on each node of the launch, through the remote
    /// runner, before it relaunches. Prints what it ended; exit 0, or 1 when a process
    /// survived.
    Clean {
        /// The launch's tag (SCR_RUN_STEP).
        #[arg(long, value_name = "TAG")]
        step: String,
    },
}

/// `scr hostlist ...`
#[derive(Subcommand, Debug)]
pub enum HostlistCommand {
    /// Print every host the lists name, comma-separated (node[1-3] -> node1,node2,node3).
    Expand {
        /// Host lists (node[1-4,7], rack[1-2]n[01-03], a,b,c).
        #[arg(required = true, value_name = "HOSTLIST")]
        lists: Vec<String>,
        /// One host per line instead.
        #[arg(long)]
        lines: bool,
    },
    /// Print the hosts the lists name as one compressed list (node1,node2 -> node[1-2]).
    Compress {
        /// Host lists or host names.
        #[arg(required = true, value_name = "HOSTLIST")]
        lists: Vec<String>,
    },
    /// Print the hosts of A that are not in B, compressed.
    Diff {
        /// The hosts to keep from.
        a: String,
        /// The hosts to remove.
        b: String,
    },
    /// Print the hosts of A that are also in B, compressed.
    Intersect {
        /// The first list.
        a: String,
        /// The second list.
        b: String,
    },
}

/// One field of `scr env`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum EnvField {
    /// The user the job runs as.
    User,
    /// The job id.
    Jobid,
    /// The allocation's nodes, compressed.
    Nodes,
    /// The down nodes, compressed.
    Down,
    /// The prefix directory.
    Prefix,
    /// Launches `scr run` may still make.
    Runs,
    /// How many nodes the last run used (0 when none ran in this allocation).
    Runnodes,
    /// The job's control directory on a node.
    Control,
    /// The job's directory in each store, one per line.
    Cache,
}

/// `scr env [FIELD]`, or SCR's `scr_env` flags (`--user`, `--jobid`, `--nodes`,
/// `--down`, `--runnodes`) for the same fields.
#[derive(Args, Debug)]
#[command(group = clap::ArgGroup::new("one").multiple(false))]
pub struct EnvArgs {
    /// Print only this field's value (for scripts).
    #[arg(value_enum, group = "one")]
    pub field: Option<EnvField>,
    /// The prefix directory (default: the configuration's `prefix`).
    #[arg(long, value_name = "DIR")]
    pub prefix: Option<PathBuf>,
    /// Print the user name only (SCR's `scr_env --user`).
    #[arg(short = 'u', long, group = "one")]
    pub user: bool,
    /// Print the job id only (SCR's `scr_env --jobid`).
    #[arg(short = 'j', long, group = "one")]
    pub jobid: bool,
    /// Print the allocation's nodes only (SCR's `scr_env --nodes`).
    #[arg(short = 'n', long, group = "one")]
    pub nodes: bool,
    /// Print the down nodes only (SCR's `scr_env --down`).
    #[arg(short = 'd', long, group = "one")]
    pub down: bool,
    /// Print how many nodes the last run used only (SCR's `scr_env --runnodes`).
    #[arg(short = 'r', long, group = "one")]
    pub runnodes: bool,
}

impl EnvArgs {
    /// The one field asked for, by name or by flag.
    fn asked(&self) -> Option<EnvField> {
        [
            (self.user, EnvField::User),
            (self.jobid, EnvField::Jobid),
            (self.nodes, EnvField::Nodes),
            (self.down, EnvField::Down),
            (self.runnodes, EnvField::Runnodes),
        ]
        .into_iter()
        .find_map(|(set, f)| set.then_some(f))
        .or(self.field)
    }
}

fn prefix_or(config: &Config, given: &Option<PathBuf>) -> PathBuf {
    given
        .clone()
        .unwrap_or_else(|| PathBuf::from(config.get(settings::PREFIX)))
}

/// The launched step's output, passed through to the stream it came on, a whole line at
/// a time (flushed: the step's lines and `scr run`'s own must not interleave mid-line).
fn relay(stderr: bool, line: &[u8]) {
    use std::io::Write as _;
    let _ = if stderr {
        let mut e = std::io::stderr().lock();
        e.write_all(line).and_then(|()| e.flush())
    } else {
        let mut o = std::io::stdout().lock();
        o.write_all(line).and_then(|()| o.flush())
    };
}

/// Print a line of `scr run`'s own to stdout, flushed at once: the step's output is
/// passed through to the same stream meanwhile, line by line.
fn say(msg: &str) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "scr run: {msg}");
    let _ = out.flush();
}

/// `scr run`.
pub fn run(config: &Config, args: &RunArgs) -> u8 {
    let outcome = launch::run(
        config,
        &RunOptions {
            runs: args.runs,
            min_nodes: args.min_nodes,
            nodes: args.nodes,
            ranks_per_node: args.ranks_per_node,
            postrun: args.postrun,
            launcher: args.launcher.clone(),
            prefix: prefix_or(config, &args.prefix),
            report: std::sync::Arc::new(say),
            relay: std::sync::Arc::new(relay),
        },
    );
    match outcome {
        RunOutcome::Completed => exit::OK,
        RunOutcome::Failed => exit::INVALID,
        RunOutcome::NoLauncher => exit::USAGE,
    }
}

/// `scr nodes ...`.
pub fn nodes(config: &Config, cmd: &NodesCommand) -> u8 {
    let (nodes, prefix, here, ranks_per_node) = match cmd {
        NodesCommand::Clean { step } => {
            let (found, left) = launch::clean::end_step(step, std::time::Duration::from_secs(5));
            let survived = !left.is_empty();
            println!("{}", launch::describe_ended((found, left.clone())));
            // (run by `scr run` through the remote runner: the outcome, as the last line)
            if let Some(line) =
                scr_host::remote::report_line(&launch::clean::CleanReport { found, left })
            {
                println!("{line}");
            }
            return u8::from(survived);
        }
        NodesCommand::Down {
            nodes,
            prefix,
            here,
            ranks_per_node,
        } => (nodes, prefix, *here, *ranks_per_node),
    };
    if here {
        let check = match launch::NodeCheck::new(config, &prefix_or(config, prefix), ranks_per_node)
        {
            Ok(c) => c,
            Err(e) => {
                tracing::error!("{e}");
                return exit::INVALID;
            }
        };
        let down = check.down_here();
        if let Some(why) = &down {
            println!("{}: {why}", check.this_host);
        }
        // (run by `scr run` through the remote runner: the verdict, as the last line)
        if let Some(line) =
            scr_host::remote::report_line(&launch::nodes::HereReport { down: down.clone() })
        {
            println!("{line}");
        }
        return u8::from(down.is_some());
    }
    let down = match launch::down_nodes(config, nodes.as_deref(), &prefix_or(config, prefix)) {
        Ok(d) => d,
        Err(e) => {
            tracing::error!("{e}");
            return exit::INVALID;
        }
    };
    for (n, why) in &down {
        println!("{n}: {why}");
    }
    u8::from(!down.is_empty())
}

/// `scr hostlist ...`.
pub fn hostlist(cmd: &HostlistCommand) -> u8 {
    let result = match cmd {
        HostlistCommand::Expand { lists, lines } => {
            hostlist::expand_all(lists).map(|h| h.join(if *lines { "\n" } else { "," }))
        }
        HostlistCommand::Compress { lists } => {
            hostlist::expand_all(lists).map(|h| hostlist::compress(&h))
        }
        HostlistCommand::Diff { a, b } => hostlist::expand(a)
            .and_then(|a| Ok((a, hostlist::expand(b)?)))
            .map(|(a, b)| hostlist::compress(&hostlist::diff(&a, &b))),
        HostlistCommand::Intersect { a, b } => hostlist::expand(a)
            .and_then(|a| Ok((a, hostlist::expand(b)?)))
            .map(|(a, b)| hostlist::compress(&hostlist::intersect(&a, &b))),
    };
    match result {
        Ok(text) => {
            println!("{text}");
            0
        }
        Err(e) => {
            tracing::error!("{e}");
            1
        }
    }
}

/// `scr env`.
pub fn env(config: &Config, args: &EnvArgs) -> u8 {
    let e = launch::env(config, &prefix_or(config, &args.prefix), &|v| {
        std::env::var(v).ok()
    });
    match args.asked() {
        None => print!("{e}"),
        Some(EnvField::User) => println!("{}", e.user),
        Some(EnvField::Runnodes) => println!("{}", e.run_nodes.unwrap_or(0)),
        Some(EnvField::Jobid) => println!("{}", e.job_id),
        Some(EnvField::Nodes) => match &e.nodes {
            Ok(a) => println!("{}", hostlist::compress(&a.nodes)),
            Err(err) => {
                tracing::error!("{err}");
                return 1;
            }
        },
        Some(EnvField::Down) => {
            let d: Vec<String> = e.down.iter().map(|(n, _)| n.clone()).collect();
            println!("{}", hostlist::compress(&d));
        }
        Some(EnvField::Prefix) => println!("{}", e.prefix.display()),
        Some(EnvField::Runs) => println!("{}", e.runs_left),
        Some(EnvField::Control) => println!("{}", e.control.display()),
        Some(EnvField::Cache) => {
            for (dir, _) in &e.cache {
                println!("{}", dir.display());
            }
        }
    }
    0
}

/// `scr halt --check`: 0 and the reason when a halt condition holds, 3 ("no") when none
/// does, 1 when the halt file cannot be read.
pub fn halt_check(config: &Config, prefix: &std::path::Path) -> u8 {
    match launch::halt_reason(prefix, config) {
        Ok(Some(why)) => {
            println!("halt: {why}");
            0
        }
        Ok(None) => {
            println!(
                "no halt condition holds in {}",
                scr_host::state::halt::Halt::path(prefix).display()
            );
            exit::NO
        }
        Err(e) => {
            // an unreadable halt file cannot say "stop": retrying is the safe side only
            // when a person looks, so say so and let the script decide (exit 1, not the
            // query's "no")
            tracing::error!("{e}");
            exit::INVALID
        }
    }
}

/// SCR's `scr_prerun`: before the first launch of an allocation, the prefix's `.scr`
/// directory made and the last allocation's node count forgotten (as `scr run` does
/// itself). Nothing with `enable = false`.
pub fn prerun(config: &Config, prefix: Option<&str>, verbose: bool) -> u8 {
    if !config.get(settings::ENABLE) {
        return 0;
    }
    let prefix = prefix.map_or_else(
        || PathBuf::from(config.get(settings::PREFIX)),
        PathBuf::from,
    );
    let dir = prefix.join(".scr");
    if let Err(e) = std::fs::create_dir_all(&dir) {
        tracing::error!(
            "{}: {e}; make the prefix writable, or give another with -p",
            dir.display()
        );
        return 1;
    }
    launch::nodes::forget_previous_run_nodes(&prefix);
    if verbose {
        println!("scr_prerun: {} is ready", prefix.display());
    }
    0
}

/// SCR's `scr_list_down_nodes`: the down nodes of `nodes` (default: the allocation's),
/// with those given as down, as one compressed list (empty when none) or, with
/// `reasons`, a `NODE: REASON` line each; exit 0 (1 when the nodes cannot be listed).
pub fn list_down_nodes(
    config: &Config,
    nodes: Option<&str>,
    given: &[String],
    reasons: bool,
) -> u8 {
    let prefix = PathBuf::from(config.get(settings::PREFIX));
    let mut down = match launch::down_nodes(config, nodes, &prefix) {
        Ok(d) => d,
        Err(e) => {
            tracing::error!("{e}");
            return 1;
        }
    };
    for list in given {
        match hostlist::expand(list) {
            Ok(names) => {
                for n in names {
                    if !down.iter().any(|(d, _)| *d == n) {
                        down.push((n, "given as down (--down)".into()));
                    }
                }
            }
            Err(e) => {
                tracing::error!("--down {list}: {e}");
                return 1;
            }
        }
    }
    if reasons {
        for (n, why) in &down {
            println!("{n}: {why}");
        }
    } else {
        let names: Vec<String> = down.into_iter().map(|(n, _)| n).collect();
        println!("{}", hostlist::compress(&names));
    }
    0
}

/// What SCR's `scr_should_exit` is asked.
pub struct ShouldExit<'a> {
    /// The prefix directory (default: the configuration's).
    pub prefix: Option<&'a str>,
    /// Nodes known to be down.
    pub down: Option<&'a str>,
    /// Nodes a run needs.
    pub min_nodes: Option<u64>,
    /// Runs left.
    pub runs: Option<u64>,
    /// Say why.
    pub verbose: bool,
}

/// SCR's `scr_should_exit`: 0 when the job should stop launching runs (a halt condition
/// holds, no run is left, or fewer nodes are left than a run needs: `--min-nodes`, else
/// `min_nodes`, else as many as the last run used, else the whole allocation), 1 when it
/// may go on, as SCR's (which also answers 1 when it cannot tell: the reason is printed).
pub fn should_exit(config: &Config, q: &ShouldExit<'_>) -> u8 {
    const EXIT: u8 = 0;
    const GO_ON: u8 = 1;
    let prefix = q.prefix.map_or_else(
        || PathBuf::from(config.get(settings::PREFIX)),
        PathBuf::from,
    );
    match launch::halt_reason(&prefix, config) {
        Ok(Some(why)) => {
            if q.verbose {
                println!("Halt condition detected: {why}");
            }
            return EXIT;
        }
        Ok(None) => {}
        Err(e) => {
            tracing::error!("{e}");
            return GO_ON;
        }
    }
    if q.runs == Some(0) {
        if q.verbose {
            println!("runs_remaining=0");
        }
        return EXIT;
    }
    let nodes = match launch::allocation(config, &|v| std::env::var(v).ok()) {
        Ok(a) => a.nodes,
        Err(e) => {
            tracing::error!("{e}");
            return GO_ON;
        }
    };
    let down = match q.down.map(hostlist::expand).transpose() {
        Ok(d) => d.unwrap_or_default(),
        Err(e) => {
            tracing::error!("--down: {e}");
            return GO_ON;
        }
    };
    let remaining = nodes.iter().filter(|n| !down.contains(n)).count() as u64;
    let needed = q
        .min_nodes
        .or(Some(config.get(settings::MIN_NODES)).filter(|&m| m > 0))
        .or_else(|| launch::nodes::previous_run_nodes(&prefix))
        .unwrap_or(nodes.len() as u64);
    if remaining < needed {
        if q.verbose {
            println!("nodes_remaining={remaining} < nodes_needed={needed}");
        }
        return EXIT;
    }
    GO_ON
}
