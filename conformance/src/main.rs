//! `scr-conformance`: tells a plugin author whether a plugin library is right.
//!
//! `mpiexec -n N scr-conformance --plugin PATH [--scheme NAME] [--set-size S]
//! [--param key=value]...` loads the library on its own (exactly as the runtime does) and
//! checks loading, the ABI, the declared names and scheme instantiation; then, with at
//! least two ranks, it splits the ranks into sets of S and runs the collective scheme
//! cases of [`scr_plugin::conformance`] on every set: varied file shapes, every loss
//! pattern the scheme claims to tolerate, one pattern beyond, repeated apply, a corrupted
//! redundancy header. Rank 0 prints one line per case and a closing `N passed, N failed`
//! line; the exit status is 1 when any case failed. A run that exceeds `--timeout` is
//! stopped with an error instead of hanging.
#![forbid(unsafe_code)]

mod transfer;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use mpi::topology::SimpleCommunicator;
use mpi::traits::{Communicator, CommunicatorCollectives, Destination, Root, Source};
use scr_host::registry::{Kind, Origin, Registry};
use scr_host::runtime::{MpiHost, Settled};
use scr_plugin::conformance::{run_scheme_cases_traced, CaseResult, Loaded, SchemeUnderTest};
use scr_plugin::{
    DatasetFiles, FileMeta, Host, Param, PluginError, PluginResult, RecoverRequest, SchemeConfig,
    SchemeDescription,
};

/// Check a plugin library against the scr-rs plugin contract.
#[derive(Parser)]
#[command(name = "scr-conformance", version)]
struct Args {
    /// The plugin library (.so) to check.
    #[arg(long, value_name = "PATH")]
    plugin: PathBuf,
    /// Check only this scheme (repeatable; default: every scheme the library declares).
    #[arg(long, value_name = "NAME")]
    scheme: Vec<String>,
    /// Members per redundancy set to run the scheme cases on (repeatable; default: sets
    /// of 2, of 3 and of every rank, those that fit in the launch).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    set_size: Vec<u32>,
    /// A scheme parameter `key=value` passed to every instance (repeatable). Unless
    /// given, `buffer_size=4096` is passed so that files exceed one pipeline piece.
    #[arg(long = "param", value_name = "KEY=VALUE")]
    params: Vec<String>,
    /// Check only this transfer type (repeatable; default: every type declared).
    #[arg(long, value_name = "NAME")]
    transfer: Vec<String>,
    /// A transfer setting `key=value` (as in `[plugins.<type>]`, e.g.
    /// `library=/opt/ibm/bb/lib/libbbAPI.so`), passed to every transfer (repeatable).
    #[arg(long = "setting", value_name = "KEY=VALUE")]
    settings: Vec<String>,
    /// Ranks per simulated node (failure group): with more than 1, consecutive ranks
    /// share a node and sets are formed as the runtime forms them — no two members of a
    /// set on one node, so members' world ranks are not consecutive and sets may be larger
    /// than `--set-size` (it is the minimum, as in SCR).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    ranks_per_node: u32,
    /// Directory for the members' files (default: the system temporary directory).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Stop the run with an error after this many seconds (a hung plugin fails). A member
    /// whose scheme call failed waits half of it for the other members to return.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// Internal: resume the transfer persisted in this state file in this new process
    /// (the transfer cases re-execute the harness with it), print its results, exit.
    #[arg(long, hide = true, value_name = "STATE")]
    resume_child: Option<PathBuf>,
}

/// What the watchdog reports when the run hangs: the plugin, the case in progress and
/// the scratch directories to remove.
#[derive(Default)]
struct Progress {
    case: String,
    dirs: Vec<PathBuf>,
}

static PROGRESS: std::sync::Mutex<Progress> = std::sync::Mutex::new(Progress {
    case: String::new(),
    dirs: Vec::new(),
});

fn progress() -> std::sync::MutexGuard<'static, Progress> {
    scr_plugin::sync::lock(&PROGRESS)
}

/// Note the case about to run, so a hang can be reported naming it.
fn starting(case: &str) {
    progress().case = case.to_string();
}

/// Note a scratch directory the watchdog must remove if the run hangs.
fn scratch(dir: &std::path::Path) {
    progress().dirs.push(dir.to_path_buf());
}

#[derive(Default)]
struct Report {
    passed: usize,
    failed: usize,
    /// Only rank 0 prints.
    quiet: bool,
}

impl Report {
    fn case(&mut self, name: &str, result: Result<String, String>) -> bool {
        let ok = result.is_ok();
        if !self.quiet {
            match result {
                Ok(detail) if detail.is_empty() => println!("PASS {name}"),
                Ok(detail) => println!("PASS {name}: {detail}"),
                Err(why) => println!("FAIL {name}: {why}"),
            }
        }
        if ok {
            self.passed += 1;
        } else {
            self.failed += 1;
        }
        ok
    }
}

fn main() -> ExitCode {
    if let Some(dir) = scr_cli::man::requested() {
        return scr_cli::man::write_pages(<Args as clap::CommandFactory>::command(), &dir);
    }
    let args = Args::parse();
    if let Some(state) = &args.resume_child {
        // a plain process, not an MPI one: the transfer cases need no communicator
        return transfer::resume_child(&args.plugin, &args.transfer, &args.settings, state);
    }
    let Some(universe) = mpi::initialize() else {
        eprintln!("error: MPI could not be initialised");
        return ExitCode::from(2);
    };
    let world = universe.world();
    start_hang_watchdog(
        args.timeout,
        args.plugin.display().to_string(),
        world.rank(),
    );
    let mut params = match key_values(&args.params, "--param") {
        Ok(p) => p,
        Err(code) => return code,
    };
    if !params.iter().any(|p| p.key.as_str() == "buffer_size") {
        params.push(Param {
            key: "buffer_size".into(),
            value: "4096".into(),
        });
    }
    let settings = match key_values(&args.settings, "--setting") {
        Ok(s) => s,
        Err(code) => return code,
    };
    let mut report = Report {
        quiet: world.rank() != 0,
        ..Report::default()
    };
    if world.rank() == 0 {
        // tests assert it: the wrong implementation's mpiexec runs N singletons
        println!("NOTE launched on {} rank(s)", world.size());
    }
    run(&args, &params, &mut report, &world);
    // transfers are not collective, but every rank checks them (on its own files):
    // rank 0 reports each case once, failed if it failed on any rank
    let mine = transfer_cases(&args, &settings);
    for (case, outcome) in merge_at_root(&world, &mine) {
        report.case(&case, outcome);
    }
    if world.rank() == 0 {
        println!("{} passed, {} failed", report.passed, report.failed);
    }
    if report.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// End the whole run (exit 3) when a plugin call has not returned after `timeout`
/// seconds: the case it hangs in is reported (a FAIL line from rank 0, an error line
/// from every rank) and the case directories removed.
fn start_hang_watchdog(timeout: u64, plugin: String, rank: i32) {
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(timeout));
        let p = progress();
        let line = format!(
            "plugin {plugin} did not return within {timeout} s (it hangs) in case `{}`",
            p.case
        );
        if rank == 0 {
            println!("FAIL {}: {line}", p.case);
        }
        // one write, so that ranks' lines merged by mpiexec do not interleave mid-line
        let whole = format!("error: rank {rank}: {line}\n");
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), whole.as_bytes());
        for d in &p.dirs {
            let _ = std::fs::remove_dir_all(d);
        }
        std::process::exit(3);
    });
}

/// The `KEY=VALUE` arguments given with `flag`, trimmed; a usage error (exit 2) names
/// the first one that is not.
fn key_values(given: &[String], flag: &str) -> Result<Vec<Param>, ExitCode> {
    let mut out = Vec::new();
    for p in given {
        let Some((k, v)) = p.split_once('=') else {
            eprintln!("error: {flag} {p}: expected KEY=VALUE");
            return Err(ExitCode::from(2));
        };
        out.push(Param {
            key: k.trim().into(),
            value: v.trim().into(),
        });
    }
    Ok(out)
}

fn run(args: &Args, params: &[Param], report: &mut Report, world: &SimpleCommunicator) {
    let mut registry = Registry::default();
    registry.add_file(&args.plugin, Origin::Explicit);
    let loaded = match (registry.libraries().first(), registry.refused().first()) {
        (Some(lib), _) => Ok(format!(
            "{} {} (ABI {})",
            lib.name, lib.version, lib.abi_version
        )),
        (None, Some(refusal)) => Err(refusal.reason.clone()),
        (None, None) => Err("nothing was loaded".into()),
    };
    if !report.case("loads as an scr-rs plugin", loaded) {
        return;
    }
    let lib = registry.libraries()[0].clone();
    report.case(
        "declares at least one scheme or transfer type",
        if lib.schemes.is_empty() && lib.transfers.is_empty() {
            Err("it declares no names".into())
        } else {
            Ok(format!(
                "schemes [{}], transfer types [{}]",
                lib.schemes.join(", "),
                lib.transfers.join(", ")
            ))
        },
    );
    let dups = registry.duplicates();
    report.case(
        "declares each name once (case-insensitive)",
        if dups.is_empty() {
            Ok(String::new())
        } else {
            Err(dups
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join("; "))
        },
    );
    for wanted in &args.scheme {
        report.case(
            &format!("declares scheme {wanted}"),
            registry
                .provider(Kind::Scheme, wanted)
                .map(|_| String::new())
                .map_err(|e| e.to_string()),
        );
    }
    let schemes: Vec<String> = if args.scheme.is_empty() {
        lib.schemes.clone()
    } else {
        args.scheme.clone()
    };
    let ranks = world.size() as u32;
    let sizes: Vec<u32> = if args.set_size.is_empty() {
        let mut v: Vec<u32> = [2, 3, ranks]
            .into_iter()
            .filter(|&s| (2..=ranks).contains(&s))
            .collect();
        v.dedup();
        if v.is_empty() {
            v.push(2);
        }
        v
    } else {
        args.set_size.clone()
    };
    for name in schemes {
        for &size in &sizes {
            scheme_cases(args, params, &registry, &name, size, report, world);
        }
    }
}

/// Instantiate scheme `name` for a set of `size`, check its description, then run the
/// collective cases on sets of `size` ranks.
fn scheme_cases(
    args: &Args,
    params: &[Param],
    registry: &Registry,
    name: &str,
    size: u32,
    report: &mut Report,
    world: &SimpleCommunicator,
) {
    let config = SchemeConfig {
        scheme: name.into(),
        params: params.to_vec().into(),
        settings: Default::default(),
        members: size,
        member: 0,
        world_rank: 0,
    };
    let case = format!("scheme {name}: instance for a set of {size}");
    starting(&case);
    let scheme = match registry.new_scheme(&config) {
        Ok(s) => s,
        Err(e) => {
            report.case(&case, Err(e.to_string()));
            return;
        }
    };
    report.case(&case, Ok(String::new()));
    let case = format!("scheme {name}: set of {size}: describes itself");
    starting(&case);
    let described = scheme.describe().map_err(|e| e.to_string()).and_then(|d| {
        if !d.name.as_str().eq_ignore_ascii_case(name) {
            Err(format!("describes itself as {}", d.name))
        } else if d.tolerated_losses >= size {
            Err(format!(
                "claims to tolerate {} lost members of {size}",
                d.tolerated_losses
            ))
        } else {
            Ok(format!(
                "tolerates {} lost member(s); {}",
                d.tolerated_losses, d.summary
            ))
        }
    });
    if report.case(&case, described) {
        collective_cases(args, params, registry, name, size, report, world);
    }
}

/// The transfer cases for every transfer type the library declares (or `--transfer`),
/// on this rank's own files.
fn transfer_cases(args: &Args, settings: &[Param]) -> Vec<(String, Result<String, String>)> {
    let mut out = Vec::new();
    let mut registry = Registry::default();
    registry.add_file(&args.plugin, Origin::Explicit);
    let Some(lib) = registry.libraries().first().cloned() else {
        return out; // the load case already failed
    };
    let names: Vec<String> = if args.transfer.is_empty() {
        if !args.scheme.is_empty() {
            return out; // only schemes were asked for
        }
        lib.transfers.clone()
    } else {
        args.transfer.clone()
    };
    let base = args
        .dir
        .clone()
        .unwrap_or_else(std::env::temp_dir)
        .join(format!("scr-conformance.{}", std::process::id()));
    scratch(&base);
    for name in names {
        transfer::run(
            &registry,
            &args.plugin,
            &name,
            settings,
            &base,
            &mut |case, outcome| out.push((case, outcome)),
            &mut starting,
        );
    }
    let _ = std::fs::remove_dir_all(&base);
    out
}

/// Every rank's (case, outcome) list merged at rank 0, in rank 0's order: a case fails
/// when it failed on any rank (the first failing rank's reason is kept). Other ranks get
/// an empty list.
fn merge_at_root(
    world: &SimpleCommunicator,
    mine: &[(String, Result<String, String>)],
) -> Vec<(String, Result<String, String>)> {
    let encode = |v: &[(String, Result<String, String>)]| -> Vec<u8> {
        v.iter()
            .map(|(c, o)| match o {
                Ok(d) => format!("{c}\tP\t{d}"),
                Err(e) => format!("{c}\tF\t{e}"),
            })
            .collect::<Vec<_>>()
            .join("\n")
            .into_bytes()
    };
    if world.rank() != 0 {
        let bytes = encode(mine);
        let root = world.process_at_rank(0);
        root.send(&(bytes.len() as u64));
        if !bytes.is_empty() {
            root.send(&bytes[..]);
        }
        return Vec::new();
    }
    let mut merged = mine.to_vec();
    for r in 1..world.size() {
        let p = world.process_at_rank(r);
        let mut len = 0u64;
        p.receive_into(&mut len);
        let mut buf = vec![0u8; len as usize];
        if len > 0 {
            p.receive_into(&mut buf[..]);
        }
        for line in String::from_utf8_lossy(&buf).lines() {
            let mut parts = line.splitn(3, '\t');
            let (c, k, d) = (
                parts.next().unwrap_or_default(),
                parts.next().unwrap_or_default(),
                parts.next().unwrap_or_default(),
            );
            let theirs = if k == "F" {
                Err(format!("rank {r}: {d}"))
            } else {
                Ok(d.to_string())
            };
            match merged.iter_mut().find(|(m, _)| m == c) {
                Some((_, slot)) => {
                    if slot.is_ok() && theirs.is_err() {
                        *slot = theirs;
                    }
                }
                None => merged.push((c.to_string(), theirs)),
            }
        }
    }
    merged
}

/// Run the scheme cases on sets of `--set-size` consecutive ranks and report every case
/// once (a case passes when it passed in every set).
fn collective_cases(
    args: &Args,
    params: &[Param],
    registry: &Registry,
    name: &str,
    size: u32,
    report: &mut Report,
    world: &SimpleCommunicator,
) {
    let ranks = world.size() as u32;
    // never a SKIP: a run that could not check the collective cases did not pass them
    if ranks < 2 || size < 2 || size > ranks {
        let need = size.max(2);
        report.case(
            &format!("scheme {name}: set of {size}: collective cases"),
            Err(format!(
                "launched with {ranks} rank(s), but a set of {size} needs at least {need} (and every set at least 2): run `mpiexec -n {need} scr-conformance --plugin {} ...`",
                args.plugin.display()
            )),
        );
        return;
    }
    // a directory unique to this run: rank 0's process id
    let mut job = std::process::id();
    world.process_at_rank(0).broadcast_into(&mut job);
    let rank = world.rank() as u32;
    let per_node = args.ranks_per_node;
    let nodes: Vec<String> = (0..ranks)
        .map(|r| format!("node{}", r / per_node))
        .collect();
    let sets = SetLayout::new(name, rank, &nodes, size, per_node);
    let position = sets.members.iter().position(|&m| m == rank).unwrap_or(0) as u32;
    let color = match sets.set {
        Some(s) => mpi::topology::Color::with_value(s as i32),
        None => mpi::topology::Color::undefined(),
    };
    let Some(comm) = world.split_by_color_with_key(color, position as i32) else {
        world.barrier();
        world.barrier();
        return;
    };
    let prefix = if per_node > 1 {
        format!("scheme {name}: set of {size}, {per_node} ranks per node")
    } else {
        format!("scheme {name}: set of {size}")
    };
    let base = args
        .dir
        .clone()
        .unwrap_or_else(std::env::temp_dir)
        .join(format!("scr-conformance.{job}"));
    let dir = base.join(format!("rank{rank}"));
    scratch(&base);
    let groups = sets
        .members
        .iter()
        .map(|&m| nodes[m as usize].clone())
        .collect();
    let config = SchemeConfig {
        scheme: name.into(),
        params: params.to_vec().into(),
        settings: Default::default(),
        members: sets.members.len() as u32,
        member: position,
        world_rank: rank,
    };
    let host_services = MpiHost::new(comm, sets.members.clone(), groups, rank);
    // a member that failed waits this long for the others to return from the call
    // before the watchdog's report (see `SettledScheme`)
    let grace = std::time::Duration::from_secs(args.timeout.max(2) / 2);
    let cases = run_in_set(registry, &config, &host_services, grace, &dir, &prefix);
    let _ = std::fs::remove_dir_all(&dir);
    world.barrier();
    if rank == 0 {
        let _ = std::fs::remove_dir_all(&base);
    }
    gather_set_cases(world, &sets.leaders, &cases, &prefix, report);
    world.barrier();
}

/// Which redundancy set this rank is in for the collective cases, and the first member
/// of every set that runs (each sends its set's cases to rank 0).
struct SetLayout {
    /// This rank's set, `None` when it takes no part.
    set: Option<u32>,
    /// The world ranks of this rank's set, in member order (empty when none).
    members: Vec<u32>,
    /// The first member of every set of at least 2 members.
    leaders: Vec<u32>,
}

impl SetLayout {
    /// With several ranks per node, the sets the runtime forms (members on distinct
    /// nodes; a set of one member, for lack of nodes, takes no part); else full sets of
    /// `size` consecutive ranks, leftover ranks idle. Rank 0 prints a NOTE on the sets.
    fn new(name: &str, rank: u32, nodes: &[String], size: u32, per_node: u32) -> SetLayout {
        let ranks = nodes.len() as u32;
        if per_node > 1 {
            let sets = scr_host::runtime::form_sets(nodes, size as usize, 1);
            if rank == 0 {
                let shapes: Vec<String> = sets.iter().map(|s| format!("{:?}", s.members)).collect();
                println!(
                    "NOTE scheme {name}: {per_node} ranks per node, sets {}",
                    shapes.join(" ")
                );
            }
            let leaders = sets
                .iter()
                .filter(|s| s.members.len() >= 2)
                .map(|s| s.members[0])
                .collect();
            let (set, members) = sets
                .into_iter()
                .find(|s| s.members.contains(&rank) && s.members.len() >= 2)
                .map_or((None, Vec::new()), |s| (Some(s.id as u32), s.members));
            return SetLayout {
                set,
                members,
                leaders,
            };
        }
        let sets = ranks / size;
        if rank == 0 && sets * size < ranks {
            println!(
                "NOTE scheme {name}: ranks {}..{} are not in a set of {size} and stay idle",
                sets * size,
                ranks - 1
            );
        }
        let leaders = (0..sets).map(|s| s * size).collect();
        let set = rank / size;
        let (set, members) = if set < sets {
            (Some(set), (set * size..(set + 1) * size).collect())
        } else {
            (None, Vec::new())
        };
        SetLayout {
            set,
            members,
            leaders,
        }
    }
}

/// Create the scheme for this rank's set and run the scheme cases in `dir` over
/// `host_services`; every case's result (a failure to create the scheme or to run the
/// cases becomes a failed "collective cases" case).
fn run_in_set(
    registry: &Registry,
    config: &SchemeConfig,
    host_services: &MpiHost,
    grace: std::time::Duration,
    dir: &std::path::Path,
    prefix: &str,
) -> Vec<CaseResult> {
    let raw = scr_plugin::host_ref(host_services);
    let host = scr_plugin::Host::new(raw);
    let piece: u64 = config
        .params
        .iter()
        .find(|p| p.key.as_str() == "buffer_size")
        .and_then(|p| p.value.parse().ok())
        .unwrap_or(4096);
    let mut cases: Vec<CaseResult> = Vec::new();
    let outcome = registry
        .new_scheme(config)
        .map_err(|e| e.to_string())
        .and_then(|scheme| {
            run_scheme_cases_traced(
                &host,
                &SettledScheme {
                    loaded: Loaded(scheme.raw()),
                    host: host_services,
                    grace,
                },
                dir,
                piece,
                &mut |case| starting(&format!("{prefix}: {case}")),
                &mut |c| cases.push(c),
            )
            .map_err(|e| e.to_string())
        });
    if let Err(e) = outcome {
        cases.push(CaseResult {
            name: "collective cases".into(),
            failure: Some(e),
        });
    }
    cases
}

/// The loaded scheme with every collective call settled as the runtime settles it
/// ([`MpiHost::settle`]): when the call fails on one member, the others' host services
/// return its error instead of waiting for it, and every member returns the same error,
/// so a case ends alike everywhere instead of hanging.
struct SettledScheme<'a> {
    loaded: Loaded<'a>,
    host: &'a MpiHost,
    grace: std::time::Duration,
}

impl SettledScheme<'_> {
    fn settled<T>(&self, call: &str, out: PluginResult<T>) -> PluginResult<T> {
        match self.host.settle(call, out.as_ref().err(), self.grace) {
            Settled::Returned => out,
            Settled::Failed { error, .. } => Err(error),
            // the watchdog reports the hang; until then this member goes on failing
            Settled::Stuck => Err(PluginError::communication(format!(
                "{call} failed on this member and other members did not return within {} s",
                self.grace.as_secs()
            ))),
        }
    }
}

impl SchemeUnderTest for SettledScheme<'_> {
    fn describe(&self) -> PluginResult<SchemeDescription> {
        self.loaded.describe()
    }
    fn apply(&self, host: &Host<'_>, dataset: &DatasetFiles) -> PluginResult<Vec<String>> {
        self.host.begin_call();
        self.settled("apply", self.loaded.apply(host, dataset))
    }
    fn recover(&self, host: &Host<'_>, request: &RecoverRequest) -> PluginResult<Vec<FileMeta>> {
        self.host.begin_call();
        self.settled("recover", self.loaded.recover(host, request))
    }
    fn redundancy_files(&self, dataset: &DatasetFiles) -> PluginResult<Vec<String>> {
        self.loaded.redundancy_files(dataset)
    }
    fn remove(&self, host: &Host<'_>, dataset: &DatasetFiles) -> PluginResult<()> {
        self.host.begin_call();
        self.settled("remove", self.loaded.remove(host, dataset))
    }
    // (forwarded: the default would test every scheme as relying on the host's check)
    fn survivor_check(&self) -> scr_plugin::SurvivorCheck {
        self.loaded.survivor_check()
    }
    // (forwarded too: the defaults would test every scheme as needing every survivor's
    // redundancy, and call its recover instead of its recover_files)
    fn rebuild_sources(&self, lost: &[u32]) -> Option<Vec<u32>> {
        self.loaded.rebuild_sources(lost)
    }
    fn recover_files(
        &self,
        host: &Host<'_>,
        request: &RecoverRequest,
    ) -> PluginResult<Vec<FileMeta>> {
        self.host.begin_call();
        self.settled("recover_files", self.loaded.recover_files(host, request))
    }
}

/// Rank 0 merges every set's cases (each set's leader sends its list) and reports each
/// case once, failed when it failed in any set, naming the set; other leaders send.
fn gather_set_cases(
    world: &SimpleCommunicator,
    leaders: &[u32],
    cases: &[CaseResult],
    prefix: &str,
    report: &mut Report,
) {
    let rank = world.rank() as u32;
    if rank == 0 {
        let mut merged: Vec<(String, Option<String>)> = cases
            .iter()
            .map(|c| (c.name.clone(), c.failure.clone()))
            .collect();
        for &leader in leaders.iter().filter(|&&l| l != 0) {
            let p = world.process_at_rank(leader as i32);
            let mut len = 0u64;
            p.receive_into(&mut len);
            let mut buf = vec![0u8; len as usize];
            if len > 0 {
                p.receive_into(&mut buf[..]);
            }
            for line in String::from_utf8_lossy(&buf).lines() {
                let (n, f) = line.split_once('\t').unwrap_or((line, ""));
                let failure = (!f.is_empty()).then(|| format!("set of ranks {leader}..: {f}"));
                match merged.iter_mut().find(|(m, _)| m == n) {
                    Some((_, slot)) => {
                        if slot.is_none() {
                            *slot = failure;
                        }
                    }
                    None => merged.push((n.to_string(), failure)),
                }
            }
        }
        for (n, f) in merged {
            report.case(&format!("{prefix}: {n}"), f.map_or(Ok(String::new()), Err));
        }
    } else if leaders.contains(&rank) {
        let lines: Vec<String> = cases
            .iter()
            .map(|c| format!("{}\t{}", c.name, c.failure.clone().unwrap_or_default()))
            .collect();
        let bytes = lines.join("\n").into_bytes();
        let root = world.process_at_rank(0);
        root.send(&(bytes.len() as u64));
        if !bytes.is_empty() {
            root.send(&bytes[..]);
        }
    }
}
