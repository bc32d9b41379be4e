//! `scr`: the administration command of scr-rs.
//!
//! Exit status: 0 success, 1 invalid input (configuration errors, refused plugin),
//! 2 usage error.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use scr_host::config::{Config, ConfigErrors, Loader};
use scr_host::explain::{check_plugins, explain_checkpoint};
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
    use scr_host::runtime::Halt;
    let prefix = match &args.prefix {
        Some(p) => p.clone(),
        None => match load(cli, &[]) {
            Ok(c) => PathBuf::from(c.str("prefix")),
            Err(e) => return report_errors(&e),
        },
    };
    let mut h = match Halt::load(&prefix) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let changing = args.clear
        || !args.unset.is_empty()
        || args.checkpoints.is_some()
        || args.after.is_some()
        || args.before.is_some()
        || args.seconds.is_some()
        || args.reason.is_some();
    if args.clear {
        h = Halt::default();
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
    h.exit_reason = args.reason.clone().or(h.exit_reason);
    if changing {
        if let Err(e) = h.save(&prefix) {
            eprintln!("error: {}: {e}", Halt::path(&prefix).display());
            return ExitCode::from(1);
        }
    }
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

fn load(cli: &Cli, extra: &[PathBuf]) -> Result<Config, ConfigErrors> {
    let mut loader = Loader::from_process();
    loader.extra_user_files = cli.config.iter().chain(extra).cloned().collect();
    loader.system_file = cli.system.clone();
    loader.load()
}

fn report_errors(errors: &ConfigErrors) -> ExitCode {
    for e in &errors.0 {
        eprintln!("error: {e}");
    }
    eprintln!(
        "{} configuration error{}",
        errors.0.len(),
        if errors.0.len() == 1 { "" } else { "s" }
    );
    ExitCode::from(1)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match &cli.command {
        Command::Config(ConfigCommand::Check { files }) => {
            let config = match load(&cli, files) {
                Ok(c) => c,
                Err(e) => return report_errors(&e),
            };
            let registry = Registry::load(&config.search_path());
            let findings = check_plugins(&config, &registry);
            for w in &findings.warnings {
                eprintln!("warning: {w}");
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
        Command::Config(ConfigCommand::Show) => match load(&cli, &[]) {
            Ok(config) => {
                print!("{}", show::render(&config));
                ExitCode::SUCCESS
            }
            Err(e) => report_errors(&e),
        },
        Command::Config(ConfigCommand::Import { file }) => {
            let text = match std::fs::read_to_string(file) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("error: {}: cannot read: {e}", file.display());
                    return ExitCode::from(1);
                }
            };
            match scr_host::config::import::import_scr(&text) {
                Ok(toml) => {
                    print!("{toml}");
                    ExitCode::SUCCESS
                }
                Err(errors) => {
                    for e in &errors {
                        eprintln!("error: {}:{}: {}", file.display(), e.line, e.message);
                    }
                    ExitCode::from(1)
                }
            }
        }
        Command::Config(ConfigCommand::Explain { checkpoint }) => match load(&cli, &[]) {
            Ok(config) => {
                let registry = Registry::load(&config.search_path());
                print!("{}", explain_checkpoint(&config, &registry, *checkpoint));
                ExitCode::SUCCESS
            }
            Err(e) => report_errors(&e),
        },
        Command::Halt(args) => halt(&cli, args),
        Command::Plugins(PluginsCommand::List) => {
            let config = match load(&cli, &[]) {
                Ok(c) => c,
                Err(e) => return report_errors(&e),
            };
            let registry = Registry::load(&config.search_path());
            print!("{}", show::plugin_table(&config, &registry));
            if registry.libraries().is_empty() && registry.refused().is_empty() {
                eprintln!(
                    "no plugin libraries found (built-in directory: {})",
                    scr_host::registry::builtin_plugin_dir()
                        .map(|p| p.display().to_string())
                        .unwrap_or_else(|| "none found".into())
                );
            }
            ExitCode::SUCCESS
        }
        Command::Plugins(PluginsCommand::Check { file }) => {
            let mut registry = Registry::default();
            registry.add_file(file, LibOrigin::Explicit);
            if let Some(r) = registry.refused().first() {
                println!("{r}");
                return ExitCode::from(1);
            }
            let config = load(&cli, &[]).ok();
            print!("{}", show::plugin_table_with(config.as_ref(), &registry));
            ExitCode::SUCCESS
        }
    }
}
