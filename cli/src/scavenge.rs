//! The command-line side of `scr scavenge`, `scr postrun` and `scr index add`: their
//! clap arguments, the progress display (a bar on a terminal, plain lines otherwise),
//! the lines they print and their exit statuses. What they do is
//! `scr_host::scavenge`'s.

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use scr_host::config::Config;
use scr_host::remote;
use scr_host::scavenge::{
    self as sv, Added, Listing, NodeCopy, NodeReport, Parts, Progress, Scavenger,
};
use scr_host::state::prefix::{self, Index};

/// Exit statuses of `scr scavenge`, `scr postrun` and `scr index add`.
const EXIT_HELP: &str = "Exit status: 0 done (or nothing to do: the newest cached dataset is in the prefix already), 1 failed or refused: nothing was added to the index and the prefix is as it was (the message names the node, rank and file and what to do), 2 usage error.";

/// Exit statuses of `scr scavenge`.
const SCAVENGE_EXIT_HELP: &str = "Exit status: 0 every rank's files found on these nodes were copied and verified (or nothing to do), 1 some rank's files could not be copied or verified (each named with node, rank, file and reason; `scr postrun` rebuilds such ranks through the redundancy scheme when it can), 2 usage error.";

/// `scr scavenge`: the per-node step.
#[derive(clap::Args, Debug)]
#[command(after_help = SCAVENGE_EXIT_HELP)]
pub struct ScavengeArgs {
    /// The prefix directory (default: the configuration's `prefix`).
    #[arg(long, value_name = "DIR")]
    pub prefix: Option<PathBuf>,
    /// The node whose cache to copy (repeatable). Default: this host, or every simulated
    /// node when SCR_NODE_NAMES is set. Run it on each node of the allocation (pdsh,
    /// `srun --ntasks-per-node=1`): node-local storage is readable only there.
    #[arg(long, value_name = "NODE")]
    pub node: Vec<String>,
    /// The dataset id to copy (default: the newest complete one in these nodes' cache).
    #[arg(long, value_name = "ID")]
    pub id: Option<u64>,
    /// No progress display; plain lines only.
    #[arg(long)]
    pub quiet: bool,
    /// Copy nothing: print what these nodes' cache holds (each complete dataset and the
    /// ranks holding it) as one JSON line: what `scr postrun` asks a node first.
    #[arg(long, conflicts_with_all = ["data_only", "redundancy_of"])]
    pub list: bool,
    /// Copy the application files only, not the redundancy files (`scr postrun`'s first
    /// round; it asks for redundancy files only where a rank has to be rebuilt).
    #[arg(long, requires = "id", conflicts_with = "redundancy_of")]
    pub data_only: bool,
    /// Copy only the redundancy files of these ranks (comma-separated), adding them to
    /// what the first round staged (`scr postrun`'s second round).
    #[arg(long, value_name = "RANKS", requires = "id", value_delimiter = ',')]
    pub redundancy_of: Vec<u32>,
    /// Copy only these ranks' files (comma-separated; `scr postrun` gives each rank to
    /// one node).
    #[arg(
        long,
        value_name = "RANKS",
        value_delimiter = ',',
        conflicts_with = "redundancy_of"
    )]
    pub ranks: Vec<u32>,
}

/// `scr postrun`: scavenge the newest checkpoint into the prefix after the job step.
#[derive(clap::Args, Debug)]
#[command(after_help = EXIT_HELP)]
pub struct PostrunArgs {
    /// The prefix directory (default: the configuration's `prefix`).
    #[arg(long, value_name = "DIR")]
    pub prefix: Option<PathBuf>,
    /// The dataset id to scavenge (default: the newest complete one in cache).
    #[arg(long, value_name = "ID")]
    pub id: Option<u64>,
    /// The nodes whose caches to copy from here (repeatable; default: every simulated
    /// node when SCR_NODE_NAMES is set, else this host).
    #[arg(long, value_name = "NODE")]
    pub node: Vec<String>,
    /// Copy nothing: use what `scr scavenge` already copied on each node (default id:
    /// the newest one staged in the prefix).
    #[arg(long)]
    pub no_copy: bool,
    /// No progress display; plain lines only.
    #[arg(long)]
    pub quiet: bool,
}

/// Progress and bandwidth: a bar on a terminal, a plain line per rank otherwise.
struct Shown {
    bar: Option<indicatif::ProgressBar>,
}

impl Shown {
    fn new(quiet: bool) -> Shown {
        let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
            let bar = indicatif::ProgressBar::new(0);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{msg:20} {bytes}/{total_bytes} {binary_bytes_per_sec} {wide_bar}",
                )
                .expect("template"),
            );
            bar
        });
        Shown { bar }
    }
}

impl Progress for Shown {
    fn start(&self, what: &str, bytes: u64) {
        if let Some(b) = &self.bar {
            b.set_message(what.to_string());
            b.inc_length(bytes);
        }
    }

    fn done(&self, line: &str, bytes: u64) {
        match &self.bar {
            Some(b) => {
                b.inc(bytes);
                b.println(line);
            }
            None => println!("{line}"),
        }
    }

    fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

fn failed(msg: impl std::fmt::Display) -> ExitCode {
    tracing::error!("{msg}");
    ExitCode::from(1)
}

/// The scavenge tools for `config`, `prefix` overriding its prefix, and the nodes to
/// copy from (`given`, else every node this process can reach: with `across`, every node
/// of the allocation through the remote runner).
fn tools(
    config: Config,
    prefix: &Option<PathBuf>,
    quiet: bool,
    given: &[String],
    across: bool,
) -> (Scavenger, Vec<String>) {
    // `scr scavenge` is the per-node step: it reads this node's storage only, whatever
    // the nodes are called; `scr postrun` reaches the others
    let runner = if across { remote_runner(&config) } else { None };
    let mut sc =
        Scavenger::new(config, prefix.clone(), Box::new(Shown::new(quiet))).with_runner(runner);
    if !across {
        sc = sc.on_the_node();
    }
    let nodes = if given.is_empty() {
        sc.reachable_nodes()
    } else {
        given.to_vec()
    };
    (sc, nodes)
}

/// The remote runner for the allocation `config` describes (none with simulated nodes:
/// their directories are all here).
fn remote_runner(config: &Config) -> Option<scr_host::remote::Runner> {
    if !config
        .get(scr_host::config::settings::NODE_NAMES)
        .is_empty()
    {
        return None;
    }
    let env = |v: &str| std::env::var(v).ok();
    let nodes = scr_host::launch::allocation(config, &env)
        .map(|a| a.nodes)
        .unwrap_or_default();
    scr_host::remote::Runner::from_config(config, &nodes, &env)
}

/// Run `scr scavenge`.
pub fn scavenge_command(config: Config, args: &ScavengeArgs) -> ExitCode {
    let (sc, nodes) = tools(config, &args.prefix, args.quiet, &args.node, false);
    if args.list {
        // (one node, as postrun asks it; several: the first's, the others' merged in)
        let mut all = Listing::default();
        for node in &nodes {
            let l = sc.listed(node);
            all.records.extend(l.records);
            for (id, ranks) in l.ranks {
                all.ranks.entry(id).or_default().extend(ranks);
            }
        }
        println!("{}", remote::report_or_plain(&all));
        return ExitCode::SUCCESS;
    }
    let only: Option<std::collections::BTreeSet<u32>> =
        (!args.ranks.is_empty()).then(|| args.ranks.iter().copied().collect());
    let parts = if args.data_only {
        Parts::Data
    } else if !args.redundancy_of.is_empty() {
        Parts::RedundancyOf(args.redundancy_of.iter().copied().collect())
    } else {
        Parts::All
    };
    let id = match sv::choose(&sc, &nodes, args.id) {
        Ok(id) => id,
        Err(nothing) => {
            println!("{nothing}");
            if let Some(line) = remote::report_line(&NodeReport::default()) {
                println!("{line}");
            }
            return ExitCode::SUCCESS;
        }
    };
    let report = sv::scavenge(&sc, &nodes, id, &parts, only.as_ref());
    let bad = report.failed.clone();
    println!(
        "dataset {id}: staged in {}; run `scr postrun --no-copy --id {id}` once every node is done",
        sv::stage_dir(sc.prefix(), id).display()
    );
    // (run by postrun through the remote runner: what was done, as the last line)
    if let Some(line) = remote::report_line(&report) {
        println!("{line}");
    }
    if bad.is_empty() {
        ExitCode::SUCCESS
    } else {
        failed(format!(
            "dataset {id}: not copied: {}; `scr postrun` rebuilds such ranks through the redundancy scheme when it can",
            bad.iter()
                .map(|(r, why)| format!("rank {r}: {why}"))
                .collect::<Vec<_>>()
                .join("; ")
        ))
    }
}

/// Run `scr postrun`.
pub fn postrun_command(config: Config, args: &PostrunArgs) -> ExitCode {
    // as SCR's scr_postrun: a disabled library left nothing to save, and postrun must not
    // act on caches of a run that did not use it
    if !config.get(scr_host::config::settings::ENABLE) {
        println!("SCR is disabled (enable = false, SCR_ENABLE=0): postrun has nothing to do");
        return ExitCode::SUCCESS;
    }
    let (sc, nodes) = tools(config, &args.prefix, args.quiet, &args.node, true);
    let id = match sv::postrun_target(&sc, &nodes, args.id, args.no_copy) {
        Ok(Ok(id)) => id,
        Ok(Err(nothing)) => {
            println!("{nothing}");
            return ExitCode::SUCCESS;
        }
        Err(why) => return failed(why),
    };
    let started = Instant::now();
    if !args.no_copy {
        let copied = sc.copy_across(&nodes, id);
        report_nodes(&copied);
        println!(
            "copied {} from {} node(s)",
            sv::rate(
                copied.iter().map(|c| c.bytes).sum(),
                started.elapsed().as_secs_f64()
            ),
            nodes.len()
        );
    }
    match sc.finish(id) {
        Ok(added) => {
            sv::log_scavenge(&sc, &added, started);
            report_added(sc.prefix(), &added);
            ExitCode::SUCCESS
        }
        Err(why) => {
            // what a restart would fetch now (as `scr index current` says)
            let restart = Index::load_or_rebuild(sc.prefix())
                .ok()
                .and_then(|ix| ix.restart_point());
            failed(format!(
                "dataset {id} was not scavenged: {why}. {}. The cache still holds what it held; fix the cause and run `scr postrun` again",
                match restart {
                    Some(n) => format!("The restart point stays {n}"),
                    None => "The prefix holds no checkpoint to restart from".to_string(),
                }
            ))
        }
    }
}

/// Say per node what postrun's copy did: the ranks copied (and whose redundancy files
/// were read for a rebuild), the ranks refused with the reason, a node not reached.
fn report_nodes(copied: &[NodeCopy]) {
    for c in copied {
        let mut parts = Vec::new();
        if let Some(why) = &c.unreached {
            parts.push(format!("not reached: {why}"));
        }
        if !c.copied.is_empty() {
            parts.push(format!("copied ranks {:?}", c.copied));
        }
        if !c.redundancy_of.is_empty() {
            parts.push(format!("redundancy of ranks {:?}", c.redundancy_of));
        }
        for (r, why) in &c.refused {
            parts.push(format!("rank {r} refused: {why}"));
        }
        for (r, first) in &c.also_on {
            parts.push(format!("rank {r} also here, copied from {first}"));
        }
        if parts.is_empty() {
            parts.push("no files of this dataset".into());
        }
        println!("node {}: {}", c.node, parts.join("; "));
    }
}

/// Say what postrun added: the ranks rebuilt, the dataset, whether it is the restart
/// point and where its files went when their names were taken.
fn report_added(prefix_dir: &Path, added: &Added) {
    let e = &added.entry;
    if !added.rebuilt.is_empty() {
        println!("rebuilt the files of ranks {:?}", added.rebuilt);
    }
    println!(
        "added {} (dataset {}) to the index of {}{}{}",
        e.name,
        e.id,
        prefix_dir.display(),
        if added.current { ", restart point" } else { "" },
        if added.relocated {
            format!(
                "; its names were taken in the prefix, so its files are in {}",
                prefix::relocated(e.id, "")
            )
        } else {
            String::new()
        }
    );
}

/// Run `scr index import DIR`.
pub fn index_import_command(
    config: Option<&Config>,
    prefix: &Path,
    import: &sv::Import,
) -> ExitCode {
    let buf = config.map_or(1 << 20, Config::file_buf_size);
    let job = config
        .map(|c| c.get(scr_host::config::settings::JOB_NAME))
        .filter(|n| !n.is_empty());
    // who imports it, where and when: the dataset is made now
    let made = config.map_or_else(Default::default, |c| scr_host::runtime::provenance(c, None));
    match sv::index_import(prefix, import, (job, made), buf) {
        Ok((e, current)) => {
            println!(
                "imported {} (dataset {}, checkpoint {}, written by {} ranks){}",
                e.name,
                e.id,
                e.checkpoint_id.unwrap_or_default(),
                e.world_size,
                if current { ", restart point" } else { "" }
            );
            ExitCode::SUCCESS
        }
        Err(why) => failed(why),
    }
}

pub fn index_add_command(config: Option<&Config>, prefix: &Path, which: &str) -> ExitCode {
    match sv::index_add_with(config, prefix, which) {
        Ok((e, current)) => {
            println!(
                "added {} (dataset {}) to the index{}",
                e.name,
                e.id,
                if current { ", restart point" } else { "" }
            );
            ExitCode::SUCCESS
        }
        Err(why) => failed(why),
    }
}
