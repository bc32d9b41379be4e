//! `scr`: the administration command of scr-rs.
//!
//! Exit status ([`scr_cli::exit`]): 0 success or "yes", 1 invalid input or a failed
//! check (configuration errors, refused plugin, corrupt file), 2 usage error, 3 "no" to a
//! yes/no query (`flush-file need-flush`, `halt --check`).
//!
//! This binary parses, calls the scr-host library, prints and exits; what each command
//! does is the library's (the index edits are `scr_host::state::prefix::Index`'s
//! methods, scavenge and postrun `scr_host::scavenge`'s, `scr run` `scr_host::launch`'s).

mod launch;
mod scavenge;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use scr_host::config::check_plugins;
use scr_host::config::{settings, Config, ConfigErrors, Loader};
use scr_host::explain::{explain_checkpoint, JobLayout};
use scr_host::registry::{Origin as LibOrigin, Registry};
use scr_host::show;

/// Scalable Checkpoint/Restart for MPI applications: configuration and plugin tools.
#[derive(Parser)]
#[command(name = "scr", version)]
struct Cli {
    /// Read FILE as an additional user configuration file (after SCR_CONF_FILE or
    /// PREFIX/.scrconf.toml). May be repeated.
    #[arg(short = 'c', long = "config", value_name = "FILE", global = true)]
    config: Vec<PathBuf>,

    /// Read FILE as the system configuration instead of SCR_SYSTEM_CONFIG or the
    /// site's default (to check a new system file before installing it).
    #[arg(long = "system", value_name = "FILE", global = true)]
    system: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Inspect the configuration in force.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Inspect plugin libraries.
    #[command(subcommand)]
    Plugins(PluginsCommand),
    /// Set, unset and list the halt conditions of the runs in a prefix directory
    /// (the halt file PREFIX/.scr/halt.scr). With no option, lists them.
    Halt(HaltArgs),
    /// List and edit the index of datasets in a prefix directory
    /// (PREFIX/.scr/index.scr).
    Index {
        /// The prefix directory (default: the configuration's `prefix`).
        #[arg(long, value_name = "DIR", global = true)]
        prefix: Option<PathBuf>,
        #[command(subcommand)]
        command: IndexCommand,
    },
    /// Launch a job step and relaunch it after failures inside the same allocation,
    /// excluding down nodes (SCR's scr_srun): `scr run -- mpiexec -n {ranks} ./app`.
    Run(launch::RunArgs),
    /// Check the allocation's nodes.
    #[command(subcommand)]
    Nodes(launch::NodesCommand),
    /// Expand, compress and combine SLURM-style host lists (node[1-4,7]).
    #[command(subcommand)]
    Hostlist(launch::HostlistCommand),
    /// Print the user, the job id, the allocation's nodes, the down nodes, the prefix, the
    /// runs left and the nodes the last run used (SCR's scr_env).
    Env(launch::EnvArgs),
    /// Query the flush file (PREFIX/.scr/flush.scr): where datasets are.
    FlushFile {
        /// The prefix directory (default: the configuration's `prefix`).
        #[arg(long, value_name = "DIR", global = true)]
        prefix: Option<PathBuf>,
        #[command(subcommand)]
        command: FlushFileCommand,
    },
    /// Per-node step of postrun: copy this node's cached files of the newest checkpoint not
    /// yet in the prefix (application and redundancy files, each verified by size and
    /// CRC32) into a staging directory of the prefix, `PREFIX/.scr/scr.dataset.<id>/scavenge/`.
    Scavenge(scavenge::ScavengeArgs),
    /// After the job step ended (also when it was killed): copy the newest checkpoint
    /// that is only in node-local cache into the prefix, rebuild the files of lost nodes
    /// through its redundancy scheme, verify every file's CRC32, and add it to the index
    /// (the restart point when it is the newest). Runs the per-node step itself for every
    /// node it can reach. With enable = false (SCR_ENABLE=0) it does nothing and exits 0,
    /// as SCR's scr_postrun.
    Postrun(scavenge::PostrunArgs),
    /// Summarise the event log (PREFIX/.scr/events.jsonl): jobs, checkpoint cost, flush
    /// bandwidth, failures and the checkpoint interval they advise.
    #[command(
        long_about = "Summarise the event log PREFIX/.scr/events.jsonl that every job \
appends to: the jobs and their runs, checkpoints (count, mean cost C in seconds, bytes), \
flushes and their bandwidth, fetches, rebuilds, scavenges, halts, and failures with the \
mean time between them M (run time / failures; reports of one crash within 60 s count once; \
at least 2 failures needed). From C and M it advises a checkpoint interval by Young's \
formula sqrt(2CM) and Daly's sqrt(2CM)(1 + sqrt(C/2M)/3 + C/18M) - C (M when C >= 2M), \
or says why it cannot. Damaged lines are skipped with a warning."
    )]
    Log {
        /// The prefix directory (default: the configuration's `prefix`).
        #[arg(long, value_name = "DIR")]
        prefix: Option<PathBuf>,
        /// Print the summary as one JSON object (all figures in bytes and seconds).
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum IndexCommand {
    /// List every dataset: id, name, checkpoint id, state, and the restart point.
    List,
    /// Add a dataset whose files, summary and rank2file are in the prefix (after checking
    /// every file's size and CRC32 against rank2file), complete; it becomes the restart
    /// point when it is the newest checkpoint. Exit status 1 when a check fails (nothing
    /// is added).
    Add {
        /// The dataset's name or id (as in `PREFIX/.scr/scr.dataset.<id>/summary.scr`).
        name: String,
    },
    /// Make files that were not written through the library a checkpoint of the prefix:
    /// every file below DIR (inside the prefix) is one rank's, in the natural order of
    /// their paths (rank_2 before rank_10), or as --list assigns them. Each file's size
    /// and CRC32 is read and recorded (rank2file, summary, index), so a job of any number
    /// of ranks restarts from it and every byte is checked then. It becomes the restart
    /// point when it is the newest checkpoint. Exit status 1 when a file is missing or
    /// unreadable (nothing is recorded).
    Import {
        /// The directory holding the files, inside the prefix.
        dir: PathBuf,
        /// The checkpoint's name (default: the directory's name).
        #[arg(long)]
        name: Option<String>,
        /// A file of `RANK PATH` lines assigning the files to ranks 0..N (PATH relative
        /// to DIR, or absolute; `#` starts a comment); a rank may have several files.
        #[arg(long, value_name = "FILE")]
        list: Option<PathBuf>,
        /// Its checkpoint id (default: after every checkpoint id the prefix used).
        #[arg(long, value_name = "ID")]
        checkpoint_id: Option<u64>,
    },
    /// Print the checkpoint a restart would fetch; with NAME, make it that one.
    Current {
        /// The checkpoint to restart from.
        name: Option<String>,
    },
    /// Remove a dataset from the index (with --delete, also its files in the prefix).
    Drop {
        /// The dataset name.
        name: String,
        /// Also delete its files and its directory under .scr.
        #[arg(long)]
        delete: bool,
    },
    /// Remove every dataset newer than NAME (with --delete, also their files).
    DropAfter {
        /// The newest dataset to keep.
        name: String,
        /// Also delete their files and directories under .scr.
        #[arg(long)]
        delete: bool,
    },
    /// Write the index again from the per-dataset summaries under .scr (after damage;
    /// the restart point set with `current` is not kept, datasets marked failed stay
    /// failed).
    Rebuild,
    /// Clear a dataset's failed mark once its cause is fixed (a fetch marks a dataset
    /// failed also for trouble on the cache side, e.g. a full node): it is offered for
    /// fetch again, and its files are verified again when fetched.
    ClearFailed {
        /// The dataset name.
        name: String,
    },
}

#[derive(Subcommand)]
enum FlushFileCommand {
    /// Print the id of the newest dataset the flush file knows.
    Latest,
    /// A yes/no query: exit 0 and print `yes` when dataset ID is in cache and not yet in
    /// the prefix, else exit 3 and print `no` (1 when the flush file cannot be read).
    NeedFlush {
        /// The dataset id.
        id: u64,
    },
    /// Print where dataset ID is (CACHE, PFS).
    Location {
        /// The dataset id.
        id: u64,
    },
    /// Print dataset ID's directory under PREFIX/.scr.
    Subdir {
        /// The dataset id.
        id: u64,
    },
}

fn prefix_of(cli: &Cli, given: &Option<PathBuf>) -> Result<PathBuf, ExitCode> {
    match given {
        Some(p) => Ok(p.clone()),
        None => load(cli, &[])
            .map(|c| PathBuf::from(c.get(settings::PREFIX)))
            .map_err(|e| report_errors(&e)),
    }
}

/// `p` made absolute against the working directory (the tools compare paths with the
/// prefix's, which a relative path on the command line is not).
fn absolute(p: &std::path::Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

fn fail(msg: impl std::fmt::Display) -> ExitCode {
    tracing::error!("{msg}");
    ExitCode::from(1)
}

fn index_command(cli: &Cli, prefix: &Option<PathBuf>, command: &IndexCommand) -> ExitCode {
    let prefix = match prefix_of(cli, prefix) {
        Ok(p) => p,
        Err(code) => return code,
    };
    // Every command that changes the index decides inside `Index::try_update`, on the
    // index as it is under the prefix lock: a copy read before the lock may be stale by
    // the time it is acted on (a job's flush recorded in between).
    match command {
        IndexCommand::Add { name } => {
            scavenge::index_add_command(load(cli, &[]).ok().as_ref(), &prefix, name)
        }
        IndexCommand::Import {
            dir,
            name,
            list,
            checkpoint_id,
        } => {
            let import = scr_host::scavenge::Import {
                dir: absolute(dir),
                name: name.clone(),
                list: list.as_deref().map(absolute),
                checkpoint_id: *checkpoint_id,
            };
            scavenge::index_import_command(
                load(cli, &[]).ok().as_ref(),
                &absolute(&prefix),
                &import,
            )
        }
        IndexCommand::Rebuild => index_rebuild(&prefix),
        IndexCommand::List => index_list(&prefix),
        IndexCommand::Current { name: None } => index_current(&prefix),
        IndexCommand::Current { name: Some(n) } => index_set_current(&prefix, n),
        IndexCommand::ClearFailed { name } => index_clear_failed(&prefix, name),
        IndexCommand::Drop { name, delete } | IndexCommand::DropAfter { name, delete } => {
            let after = matches!(command, IndexCommand::DropAfter { .. });
            index_drop(&prefix, name, after, *delete)
        }
    }
}

/// `scr index rebuild`: write the index again from the per-dataset summaries.
fn index_rebuild(prefix: &std::path::Path) -> ExitCode {
    match scr_host::state::prefix::Index::rebuild_in(prefix) {
        Ok(n) => {
            println!("index rebuilt: {n} dataset(s)");
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}

/// `scr index list`: one line per dataset (id, checkpoint id, name, when it was created
/// (UTC), the user, job id and cluster that made it, state), the restart point marked.
fn index_list(prefix: &std::path::Path) -> ExitCode {
    use scr_host::state::prefix::Index;
    let index = match Index::load_or_rebuild(prefix) {
        Ok(i) => i,
        Err(e) => return fail(e),
    };
    let restart = index.restart_point();
    println!(
        "{:>6} {:>8} {:<24} {:<20} {:<10} {:<10} {:<10} state",
        "id", "ckpt", "name", "created (UTC)", "user", "job", "cluster"
    );
    for e in index.datasets.values() {
        let is_restart = restart.as_deref() == Some(e.name.as_str());
        println!("{}", index_line(e, is_restart));
    }
    ExitCode::SUCCESS
}

/// One line of `scr index list` for dataset `e`: its state words (complete or
/// incomplete, output, fetched, job=), the restart mark and why it failed.
fn index_line(e: &scr_host::state::prefix::IndexEntry, is_restart: bool) -> String {
    let mut state = Vec::new();
    state.push(if e.complete { "complete" } else { "incomplete" });
    if e.output {
        state.push("output");
    }
    if e.fetched.is_some() {
        state.push("fetched");
    }
    let job = e.job_name.as_deref().map(|j| format!("job={j}"));
    if let Some(j) = &job {
        state.push(j);
    }
    let failed = e
        .failed
        .as_deref()
        .map(|f| format!("FAILED: {f}"))
        .unwrap_or_default();
    let mark = if is_restart { "<- restart" } else { "" };
    // (unknown for datasets recorded by earlier releases)
    let known = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    let created = e
        .made
        .created
        .and_then(|s| u64::try_from(s).ok())
        .map(|s| {
            let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(s);
            // RFC 3339 without the zone letter: the header says UTC
            humantime::format_rfc3339_seconds(t)
                .to_string()
                .trim_end_matches('Z')
                .to_string()
        })
        .unwrap_or_else(|| "-".into());
    format!(
        "{:>6} {:>8} {:<24} {:<20} {:<10} {:<10} {:<10} {:<28} {mark}{failed}",
        e.id,
        e.checkpoint_id
            .map(|c| c.to_string())
            .unwrap_or_else(|| "-".into()),
        e.name,
        created,
        known(&e.made.user),
        known(&e.made.job_id),
        known(&e.made.cluster),
        state.join(",")
    )
}

/// `scr index current`: print the checkpoint a restart would fetch.
fn index_current(prefix: &std::path::Path) -> ExitCode {
    use scr_host::state::prefix::Index;
    match Index::load_or_rebuild(prefix).map(|i| i.restart_point()) {
        Ok(Some(n)) => {
            println!("{n}");
            ExitCode::SUCCESS
        }
        Ok(None) => fail(format!(
            "no complete checkpoint in {}",
            Index::path(prefix).display()
        )),
        Err(e) => fail(e),
    }
}

/// `scr index current NAME`: make complete checkpoint `n` the restart point.
fn index_set_current(prefix: &std::path::Path, n: &str) -> ExitCode {
    match scr_host::state::prefix::Index::set_current_in(prefix, n) {
        Ok(()) => {
            println!("restart point set to {n}");
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}

/// `scr index clear-failed NAME`: clear the failed mark in the index and the note beside
/// the dataset's summary (or a rebuilt index would mark it again).
fn index_clear_failed(prefix: &std::path::Path, name: &str) -> ExitCode {
    match scr_host::state::prefix::Index::clear_failed_in(prefix, name) {
        Ok(Some(why)) => {
            println!("{name}: failed mark cleared (it said: {why})");
            ExitCode::SUCCESS
        }
        Ok(None) => {
            println!("{name} was not marked failed");
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}

/// `scr index drop[-after] NAME [--delete]`: remove the datasets from the index (and
/// their summaries), then (with `delete`) their files, with a progress bar: there may be
/// many.
fn index_drop(prefix: &std::path::Path, name: &str, after: bool, delete: bool) -> ExitCode {
    let dropped = match scr_host::state::prefix::Index::drop_in(prefix, name, after, delete) {
        Ok(d) => d,
        Err(e) => return fail(e),
    };
    if delete {
        let bar = indicatif::ProgressBar::new(dropped.files.len() as u64).with_style(
            indicatif::ProgressStyle::with_template("deleting {pos}/{len} files {wide_bar}")
                .expect("template"),
        );
        dropped.delete_files(prefix, &mut || bar.inc(1));
        bar.finish_and_clear();
    }
    println!(
        "dropped {}",
        if dropped.names.is_empty() {
            "nothing".to_string()
        } else {
            dropped.names.join(", ")
        }
    );
    ExitCode::SUCCESS
}

fn flush_file_command(cli: &Cli, prefix: &Option<PathBuf>, command: &FlushFileCommand) -> ExitCode {
    use scr_host::state::prefix::FlushFile;
    let prefix = match prefix_of(cli, prefix) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let file = match FlushFile::load(&prefix) {
        Ok(f) => f,
        Err(e) => return fail(e),
    };
    let get = |id: &u64| file.datasets.get(id);
    match command {
        FlushFileCommand::Latest => match file.datasets.keys().next_back() {
            Some(id) => {
                println!("{id}");
                ExitCode::SUCCESS
            }
            None => fail("the flush file lists no dataset"),
        },
        FlushFileCommand::NeedFlush { id } => match get(id) {
            Some((loc, _))
                if loc.iter().any(|l| l == "CACHE") && !loc.iter().any(|l| l == "PFS") =>
            {
                println!("yes");
                ExitCode::from(scr_cli::exit::OK)
            }
            _ => {
                println!("no");
                ExitCode::from(scr_cli::exit::NO)
            }
        },
        FlushFileCommand::Location { id } => match get(id) {
            Some((loc, _)) => {
                println!("{}", loc.join(" "));
                ExitCode::SUCCESS
            }
            None => fail(format!("dataset {id} is not in the flush file")),
        },
        FlushFileCommand::Subdir { id } => match get(id) {
            Some((_, dir)) => {
                println!("{dir}");
                ExitCode::SUCCESS
            }
            None => fail(format!("dataset {id} is not in the flush file")),
        },
    }
}

#[derive(clap::Args)]
struct HaltArgs {
    /// The prefix directory (default: the configuration's `prefix`).
    #[arg(long, value_name = "DIR")]
    prefix: Option<PathBuf>,
    /// Stop after N more checkpoints.
    #[arg(long, value_name = "N")]
    checkpoints: Option<i64>,
    /// Stop once this time has passed: seconds since the epoch, or +SECONDS from now.
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    after: Option<i64>,
    /// Stop --seconds before this time: seconds since the epoch, or +SECONDS from now.
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    before: Option<i64>,
    /// The margin before --before (HaltSeconds).
    #[arg(long, value_name = "N")]
    seconds: Option<i64>,
    /// Stop now, for this reason.
    #[arg(long, value_name = "TEXT")]
    reason: Option<String>,
    /// Remove a condition: checkpoints, after, before, seconds or reason (repeatable).
    #[arg(long, value_name = "NAME", value_parser = ["checkpoints", "after", "before", "seconds", "reason"])]
    unset: Vec<String>,
    /// Remove every condition.
    #[arg(long)]
    clear: bool,
    /// A yes/no query telling a script whether to stop retrying (SCR's
    /// scr_retries_halt): exit 0 and print why when a halt condition holds (a finished
    /// job's finalize leaves one; fewer than halt_seconds left before the allocation's
    /// end counts too), else exit 3; exit 1 when the halt file cannot be read. Changes
    /// nothing.
    #[arg(long, conflicts_with_all = ["checkpoints", "after", "before", "seconds", "reason", "unset", "clear"])]
    check: bool,
}

fn parse_time(s: &str) -> Result<i64, String> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    match s.strip_prefix('+') {
        Some(rel) => rel
            .parse::<i64>()
            .map(|r| now + r)
            .map_err(|_| format!("`{s}`: expected +SECONDS")),
        None => s
            .parse::<i64>()
            .map_err(|_| format!("`{s}`: expected seconds since the epoch or +SECONDS")),
    }
}

fn halt(cli: &Cli, args: &HaltArgs) -> ExitCode {
    use scr_host::state::halt::Halt;
    let prefix = match &args.prefix {
        Some(p) => p.clone(),
        None => match load(cli, &[]) {
            Ok(c) => PathBuf::from(c.get(settings::PREFIX)),
            Err(e) => return report_errors(&e),
        },
    };
    if args.check {
        return with_config(cli, |c| launch::halt_check(c, &prefix));
    }
    let changing = args.clear
        || !args.unset.is_empty()
        || args.checkpoints.is_some()
        || args.after.is_some()
        || args.before.is_some()
        || args.seconds.is_some()
        || args.reason.is_some();
    // read, changed and written under the prefix lock: a job decrementing
    // CheckpointsLeft or recording its exit reason at the same time loses nothing
    // (a listing only reads: it needs no lock, nor a writable prefix)
    let updated = if !changing {
        Halt::load(&prefix)
    } else {
        Halt::update(&prefix, |h| {
            if args.clear {
                *h = Halt::default();
            }
            for u in &args.unset {
                match u.as_str() {
                    "checkpoints" => h.checkpoints_left = None,
                    "after" => h.exit_after = None,
                    "before" => h.exit_before = None,
                    "seconds" => h.halt_seconds = None,
                    _ => h.exit_reason = None,
                }
            }
            h.checkpoints_left = args.checkpoints.or(h.checkpoints_left);
            h.exit_after = args.after.or(h.exit_after);
            h.exit_before = args.before.or(h.exit_before);
            h.halt_seconds = args.seconds.or(h.halt_seconds);
            h.exit_reason = args.reason.clone().or(h.exit_reason.take());
            (true, ())
        })
        .map(|(h, ())| h)
    };
    let h = match updated {
        Ok(h) => h,
        Err(e) => return fail(e),
    };
    let show = |name: &str, v: Option<String>| {
        println!("{name:<16} {}", v.unwrap_or_else(|| "-".into()));
    };
    println!("halt file {}", Halt::path(&prefix).display());
    show("CheckpointsLeft", h.checkpoints_left.map(|v| v.to_string()));
    show("ExitAfter", h.exit_after.map(|v| v.to_string()));
    show("ExitBefore", h.exit_before.map(|v| v.to_string()));
    show("HaltSeconds", h.halt_seconds.map(|v| v.to_string()));
    show("ExitReason", h.exit_reason.clone());
    ExitCode::SUCCESS
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Validate the configuration (and FILES, read as user files) against the loaded
    /// plugins; print every problem with its file and line.
    Check {
        /// Configuration files to check in addition to the normal sources.
        files: Vec<PathBuf>,
    },
    /// Print every effective value and where it came from (environment variable,
    /// file:line, API, default).
    Show,
    /// Translate an SCR configuration file (KEY=VALUE, STORE=, CKPT=, GROUPS= lines) into
    /// scr-rs TOML on standard output.
    Import {
        /// The SCR configuration file.
        file: PathBuf,
    },
    /// Explain which descriptor, store, group, scheme, parameters and plugin file a
    /// checkpoint id would use, and why.
    Explain {
        /// The checkpoint id (1, 2, 3, ...).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
        checkpoint: u64,
        /// Show the redundancy sets a job of this many ranks forms (default: the
        /// `node_names` setting when set, else only the rule sets follow).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        ranks: Option<u32>,
        /// With --ranks: consecutive ranks per node.
        #[arg(long, value_name = "M", default_value_t = 1, requires = "ranks",
              value_parser = clap::value_parser!(u32).range(1..))]
        ranks_per_node: u32,
    },
}

#[derive(Subcommand)]
enum PluginsCommand {
    /// List every plugin library found: file, library version, ABI version, names
    /// provided, and status.
    List,
    /// Load one library file and report whether it is a usable plugin.
    Check {
        /// The shared library to check.
        file: PathBuf,
    },
}

/// The configuration in force, including what the last run in the prefix set through
/// the API (SCR_Config, recorded by its init in `<prefix>/.scr/app.conf`).
fn load(cli: &Cli, extra: &[PathBuf]) -> Result<Config, ConfigErrors> {
    let files: Vec<PathBuf> = cli.config.iter().chain(extra).cloned().collect();
    load_from(files, cli.system.clone())
}

/// The configuration in force with these additional user files and this system file.
fn load_from(files: Vec<PathBuf>, system: Option<PathBuf>) -> Result<Config, ConfigErrors> {
    let mut loader = Loader::from_process();
    loader.extra_user_files = files;
    loader.system_file = system;
    let config = loader.load()?;
    let prefix = PathBuf::from(config.get(settings::PREFIX));
    match scr_host::config::api::recorded(&prefix) {
        Ok(calls) if calls.is_empty() => Ok(config),
        Ok(calls) => {
            loader.api = calls;
            loader.load()
        }
        Err(e) => {
            tracing::warn!("the run's recorded configuration calls are not shown: {e}");
            Ok(config)
        }
    }
}

/// Run `f` with the configuration in force, or report why it cannot be loaded.
fn with_config(cli: &Cli, f: impl FnOnce(&Config) -> u8) -> ExitCode {
    match load(cli, &[]) {
        Ok(c) => ExitCode::from(f(&c)),
        Err(e) => report_errors(&e),
    }
}

/// Print every configuration error (one `scr: error:` line each, file:line first), then
/// their count as a plain closing line (a tally, not one more error).
fn report_errors(errors: &ConfigErrors) -> ExitCode {
    for e in &errors.0 {
        tracing::error!("{e}");
    }
    eprintln!(
        "{} configuration error{}",
        errors.0.len(),
        if errors.0.len() == 1 { "" } else { "s" }
    );
    ExitCode::from(1)
}

fn main() -> ExitCode {
    scr_host::log::init_cli();
    if let Some(dir) = scr_cli::man::requested() {
        return scr_cli::man::write_pages(<Cli as clap::CommandFactory>::command(), &dir);
    }
    let mut argv = std::env::args_os();
    let argv0 = argv
        .next()
        .map(|a| a.to_string_lossy().into_owned())
        .unwrap_or_default();
    if let Some(name) = scr_cli::scr_names::scr_name(&argv0) {
        let args: Vec<String> = argv.map(|a| a.to_string_lossy().into_owned()).collect();
        return scr_name_main(name, &args);
    }
    dispatch(&Cli::parse())
}

/// `scr` called by one of SCR's command names ([`scr_cli::scr_names`]): SCR's options
/// done through `scr`'s subcommands; a usage error exits 1, as SCR's tools do.
fn scr_name_main(name: &str, args: &[String]) -> ExitCode {
    use scr_cli::scr_names::{translate, Plan};
    let plan = match translate(name, args, &local_time_to_epoch) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(1);
        }
    };
    let with = |f: &dyn Fn(&Config) -> u8| match load_from(Vec::new(), None) {
        Ok(c) => ExitCode::from(f(&c)),
        Err(e) => report_errors(&e),
    };
    match plan {
        Plan::Help(usage) => {
            println!("{usage}");
            ExitCode::SUCCESS
        }
        Plan::Scr(lines) => {
            for line in lines {
                let cli = match Cli::try_parse_from(std::iter::once("scr".to_string()).chain(line))
                {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = e.print();
                        return ExitCode::from(1);
                    }
                };
                let code = dispatch(&cli);
                if code != ExitCode::SUCCESS {
                    return code;
                }
            }
            ExitCode::SUCCESS
        }
        Plan::Prerun { prefix, verbose } => {
            with(&|c| launch::prerun(c, prefix.as_deref(), verbose))
        }
        Plan::ListDownNodes {
            nodes,
            down,
            reasons,
        } => with(&|c| launch::list_down_nodes(c, nodes.as_deref(), &down, reasons)),
        Plan::ShouldExit {
            prefix,
            down,
            min_nodes,
            runs,
            verbose,
        } => with(&|c| {
            launch::should_exit(
                c,
                &launch::ShouldExit {
                    prefix: prefix.as_deref(),
                    down: down.as_deref(),
                    min_nodes,
                    runs,
                    verbose,
                },
            )
        }),
    }
}

/// SCR's `scr_halt` time (`YYYY-MM-DDTHH:MM:SS`, local time) in seconds since the epoch,
/// as `date` reads it (the machine's time zone, its rules included).
fn local_time_to_epoch(t: &str) -> Result<i64, String> {
    let out = std::process::Command::new("date")
        .args(["-d", t, "+%s"])
        .output()
        .map_err(|e| format!("date could not be run to read the time: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    match (out.status.success(), text.trim().parse()) {
        (true, Ok(secs)) => Ok(secs),
        _ => Err(format!(
            "not a time ({})",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
    }
}

/// Run one parsed `scr` command line.
fn dispatch(cli: &Cli) -> ExitCode {
    match &cli.command {
        Command::Config(ConfigCommand::Check { files }) => config_check(cli, files),
        Command::Config(ConfigCommand::Show) => match load(cli, &[]) {
            Ok(config) => {
                print!("{}", config.to_toml());
                ExitCode::SUCCESS
            }
            Err(e) => report_errors(&e),
        },
        Command::Config(ConfigCommand::Import { file }) => config_import(file),
        Command::Config(ConfigCommand::Explain {
            checkpoint,
            ranks,
            ranks_per_node,
        }) => config_explain(cli, *checkpoint, *ranks, *ranks_per_node),
        Command::Halt(args) => halt(cli, args),
        Command::Run(args) => with_config(cli, |c| launch::run(c, args)),
        Command::Nodes(cmd) => with_config(cli, |c| launch::nodes(c, cmd)),
        Command::Hostlist(cmd) => ExitCode::from(launch::hostlist(cmd)),
        Command::Env(args) => with_config(cli, |c| launch::env(c, args)),
        Command::Index { prefix, command } => index_command(cli, prefix, command),
        Command::FlushFile { prefix, command } => flush_file_command(cli, prefix, command),
        Command::Scavenge(args) => match load(cli, &[]) {
            Ok(c) => scavenge::scavenge_command(c, args),
            Err(e) => report_errors(&e),
        },
        Command::Postrun(args) => match load(cli, &[]) {
            Ok(c) => scavenge::postrun_command(c, args),
            Err(e) => report_errors(&e),
        },
        Command::Log { prefix, json } => match prefix_of(cli, prefix)
            .and_then(|p| scr_host::events::log_report(&p, *json).map_err(fail))
        {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(code) => code,
        },
        Command::Plugins(PluginsCommand::List) => plugins_list(cli),
        Command::Plugins(PluginsCommand::Check { file }) => plugins_check(cli, file),
    }
}

/// `scr config check [FILES]`: load the configuration (FILES as user files), check it
/// against the plugins found, print warnings and errors, and a one-line summary when it
/// is sound.
fn config_check(cli: &Cli, files: &[PathBuf]) -> ExitCode {
    let config = match load(cli, files) {
        Ok(c) => c,
        Err(e) => return report_errors(&e),
    };
    let registry = Registry::load(&config.search_path());
    let findings = check_plugins(&config, &registry);
    for w in findings
        .warnings
        .iter()
        .map(ToString::to_string)
        .chain(scr_host::config::Loader::from_process().unknown_env())
    {
        tracing::warn!("{w}");
    }
    if !findings.errors.is_empty() {
        return report_errors(&ConfigErrors(findings.errors));
    }
    let sources = config
        .files_read()
        .unwrap_or_else(|| "built-in defaults only".into());
    println!(
        "ok: {} checkpoint descriptor(s), {} store(s), {} host group table(s) ({sources})",
        config.checkpoints.len(),
        config.stores.len(),
        config.groups.len()
    );
    ExitCode::SUCCESS
}

/// `scr config import FILE`: print SCR configuration file FILE as scr-rs TOML, or every
/// line it cannot translate.
fn config_import(file: &std::path::Path) -> ExitCode {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) => return fail(format!("{}: cannot read: {e}", file.display())),
    };
    match scr_host::config::import::import_scr(&text) {
        Ok(toml) => {
            print!("{toml}");
            ExitCode::SUCCESS
        }
        Err(errors) => {
            for e in &errors {
                tracing::error!("{}:{}: {}", file.display(), e.line, e.message);
            }
            ExitCode::from(1)
        }
    }
}

/// `scr config explain --checkpoint N [--ranks N [--ranks-per-node M]]`: what checkpoint
/// N would use and why, with the redundancy sets of the job's layout when one is known.
fn config_explain(cli: &Cli, checkpoint: u64, ranks: Option<u32>, ranks_per_node: u32) -> ExitCode {
    match load(cli, &[]) {
        Ok(config) => {
            let registry = Registry::load(&config.search_path());
            let layout = match ranks {
                Some(n) => Some(JobLayout::uniform(n, ranks_per_node)),
                None => JobLayout::from_node_names(&config),
            };
            print!(
                "{}",
                explain_checkpoint(&config, &registry, checkpoint, layout.as_ref())
            );
            ExitCode::SUCCESS
        }
        Err(e) => report_errors(&e),
    }
}

/// `scr plugins list`: the table of plugin libraries found, and where it looked when it
/// found none.
fn plugins_list(cli: &Cli) -> ExitCode {
    let config = match load(cli, &[]) {
        Ok(c) => c,
        Err(e) => return report_errors(&e),
    };
    let registry = Registry::load(&config.search_path());
    print!("{}", show::plugin_table(&config, &registry));
    if registry.libraries().is_empty() && registry.refused().is_empty() {
        let looked: Vec<String> = registry
            .looked()
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        tracing::warn!(
            "no plugin libraries found; looked in: {}",
            if looked.is_empty() {
                "nothing (shipped plugins are switched off and no plugin directory is configured)"
                    .to_string()
            } else {
                looked.join(", ")
            }
        );
    }
    ExitCode::SUCCESS
}

/// `scr plugins check FILE`: load one library; its refusal, or its row of the plugin
/// table.
fn plugins_check(cli: &Cli, file: &std::path::Path) -> ExitCode {
    let mut registry = Registry::default();
    registry.add_file(file, LibOrigin::Explicit);
    if let Some(r) = registry.refused().first() {
        println!("{r}");
        return ExitCode::from(1);
    }
    let config = load(cli, &[]).ok();
    print!("{}", show::plugin_table_with(config.as_ref(), &registry));
    ExitCode::SUCCESS
}
