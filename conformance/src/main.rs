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
use scr_host::runtime::MpiHost;
use scr_plugin::conformance::{run_scheme_cases, CaseResult, Loaded};
use scr_plugin::{Param, SchemeConfig};

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
    /// Members per redundancy set to create scheme instances for.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    set_size: u32,
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
    /// Directory for the members' files (default: the system temporary directory).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Stop the run with an error after this many seconds (a hung plugin fails).
    #[arg(long, default_value_t = 600)]
    timeout: u64,
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
    let args = Args::parse();
    let Some(universe) = mpi::initialize() else {
        eprintln!("error: MPI could not be initialised");
        return ExitCode::from(2);
    };
    let world = universe.world();
    let timeout = args.timeout;
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(timeout));
        eprintln!("error: scr-conformance did not finish within {timeout} s: a plugin call hangs");
        std::process::exit(3);
    });
    let mut params = Vec::new();
    for p in &args.params {
        let Some((k, v)) = p.split_once('=') else {
            eprintln!("error: --param {p}: expected KEY=VALUE");
            return ExitCode::from(2);
        };
        params.push(Param {
            key: k.trim().into(),
            value: v.trim().into(),
        });
    }
    if !params.iter().any(|p| p.key.as_str() == "buffer_size") {
        params.push(Param {
            key: "buffer_size".into(),
            value: "4096".into(),
        });
    }
    let mut settings = Vec::new();
    for p in &args.settings {
        let Some((k, v)) = p.split_once('=') else {
            eprintln!("error: --setting {p}: expected KEY=VALUE");
            return ExitCode::from(2);
        };
        settings.push(Param {
            key: k.trim().into(),
            value: v.trim().into(),
        });
    }
    let mut report = Report {
        quiet: world.rank() != 0,
        ..Report::default()
    };
    run(&args, &params, &mut report, &world);
    // transfers are not collective: rank 0 checks them
    if world.rank() == 0 {
        transfer_cases(&args, &settings, &mut report);
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
    for name in schemes {
        let config = SchemeConfig {
            scheme: name.as_str().into(),
            params: params.to_vec().into(),
            settings: Default::default(),
            members: args.set_size,
            member: 0,
            world_rank: 0,
        };
        let created = registry.new_scheme(&config);
        let case = format!("scheme {name}: instance for a set of {}", args.set_size);
        let Ok(scheme) = created.map_err(|e| report.case(&case, Err(e.to_string()))) else {
            continue;
        };
        report.case(&case, Ok(String::new()));
        let described = scheme.describe().map_err(|e| e.to_string()).and_then(|d| {
            if !d.name.as_str().eq_ignore_ascii_case(&name) {
                Err(format!("describes itself as {}", d.name))
            } else if d.tolerated_losses >= args.set_size {
                Err(format!(
                    "claims to tolerate {} lost members of {}",
                    d.tolerated_losses, args.set_size
                ))
            } else {
                Ok(format!(
                    "tolerates {} lost member(s); {}",
                    d.tolerated_losses, d.summary
                ))
            }
        });
        let ok = report.case(&format!("scheme {name}: describes itself"), described);
        if ok {
            collective_cases(args, params, &registry, &name, report, world);
        }
    }
}

/// The transfer cases for every transfer type the library declares (or `--transfer`).
fn transfer_cases(args: &Args, settings: &[Param], report: &mut Report) {
    let mut registry = Registry::default();
    registry.add_file(&args.plugin, Origin::Explicit);
    let Some(lib) = registry.libraries().first().cloned() else {
        return; // the load case already failed
    };
    let names: Vec<String> = if args.transfer.is_empty() {
        if !args.scheme.is_empty() {
            return; // only schemes were asked for
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
    for name in names {
        transfer::run(&registry, &name, settings, &base, &mut |case, outcome| {
            report.case(&case, outcome);
        });
    }
    let _ = std::fs::remove_dir_all(&base);
}

/// Run the scheme cases on sets of `--set-size` consecutive ranks and report every case
/// once (a case passes when it passed in every set).
fn collective_cases(
    args: &Args,
    params: &[Param],
    registry: &Registry,
    name: &str,
    report: &mut Report,
    world: &SimpleCommunicator,
) {
    let ranks = world.size() as u32;
    let size = args.set_size;
    if ranks < 2 {
        if !report.quiet {
            println!("SKIP scheme {name}: collective cases need at least 2 ranks (run under mpiexec -n N)");
        }
        return;
    }
    if size > ranks {
        report.case(
            &format!("scheme {name}: collective cases"),
            Err(format!(
                "a set of {size} needs at least {size} ranks; run with mpiexec -n {size} or more"
            )),
        );
        return;
    }
    // a directory unique to this run: rank 0's process id
    let mut job = std::process::id();
    world.process_at_rank(0).broadcast_into(&mut job);
    // full sets of `size` consecutive ranks; leftover ranks take no part
    let sets = ranks / size;
    let rank = world.rank() as u32;
    let set = rank / size;
    let active = set < sets;
    if rank == 0 && sets * size < ranks {
        println!(
            "NOTE scheme {name}: ranks {}..{} are not in a set of {size} and stay idle",
            sets * size,
            ranks - 1
        );
    }
    let color = if active {
        mpi::topology::Color::with_value(set as i32)
    } else {
        mpi::topology::Color::undefined()
    };
    let Some(comm) = world.split_by_color_with_key(color, rank as i32) else {
        world.barrier();
        world.barrier();
        return;
    };
    let members: Vec<u32> = (set * size..(set + 1) * size).collect();
    let groups = members.iter().map(|m| format!("node{m}")).collect();
    let host_services = MpiHost::new(comm, members, groups, rank, 0);
    let raw = scr_plugin::host_ref(&host_services);
    let host = scr_plugin::Host::new(raw);
    let piece: u64 = params
        .iter()
        .find(|p| p.key.as_str() == "buffer_size")
        .and_then(|p| p.value.parse().ok())
        .unwrap_or(4096);
    let config = SchemeConfig {
        scheme: name.into(),
        params: params.to_vec().into(),
        settings: Default::default(),
        members: size,
        member: rank % size,
        world_rank: rank,
    };
    let base = args
        .dir
        .clone()
        .unwrap_or_else(std::env::temp_dir)
        .join(format!("scr-conformance.{job}"));
    let dir = base.join(format!("rank{rank}"));
    let mut cases: Vec<CaseResult> = Vec::new();
    let outcome = registry
        .new_scheme(&config)
        .map_err(|e| e.to_string())
        .and_then(|scheme| {
            run_scheme_cases(&host, &Loaded(scheme.raw()), &dir, piece, &mut |c| {
                cases.push(c)
            })
            .map_err(|e| e.to_string())
        });
    if let Err(e) = outcome {
        cases.push(CaseResult {
            name: "collective cases".into(),
            failure: Some(e),
        });
    }
    let _ = std::fs::remove_dir_all(&dir);
    world.barrier();
    if rank == 0 {
        let _ = std::fs::remove_dir_all(&base);
    }
    // rank 0 merges every set's cases (each set's leader sends its list)
    let encode = |cases: &[CaseResult]| -> Vec<u8> {
        let lines: Vec<String> = cases
            .iter()
            .map(|c| format!("{}\t{}", c.name, c.failure.clone().unwrap_or_default()))
            .collect();
        lines.join("\n").into_bytes()
    };
    if rank == 0 {
        let mut merged: Vec<(String, Option<String>)> = cases
            .iter()
            .map(|c| (c.name.clone(), c.failure.clone()))
            .collect();
        for leader in (size..sets * size).step_by(size as usize) {
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
            report.case(
                &format!("scheme {name}: {n}"),
                f.map_or(Ok(String::new()), Err),
            );
        }
    } else if rank % size == 0 {
        let bytes = encode(&cases);
        let root = world.process_at_rank(0);
        root.send(&(bytes.len() as u64));
        if !bytes.is_empty() {
            root.send(&bytes[..]);
        }
    }
    world.barrier();
}
