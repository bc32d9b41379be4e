//! `scr-conformance`: tells a plugin author whether a plugin library is right.
//!
//! It loads the library on its own (exactly as the runtime does), then runs one case per
//! property and prints one line per case and a closing `N passed, N failed` line; the
//! exit status is 1 when any case failed. The cases so far cover loading, the ABI, the
//! declared names and scheme instantiation; the collective apply/recover cases under
//! `mpiexec` build on these.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use scr_host::registry::{Kind, Origin, Registry};
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
    /// A scheme parameter `key=value` passed to every instance (repeatable).
    #[arg(long = "param", value_name = "KEY=VALUE")]
    params: Vec<String>,
}

#[derive(Default)]
struct Report {
    passed: usize,
    failed: usize,
}

impl Report {
    fn case(&mut self, name: &str, result: Result<String, String>) -> bool {
        let ok = result.is_ok();
        match result {
            Ok(detail) if detail.is_empty() => println!("PASS {name}"),
            Ok(detail) => println!("PASS {name}: {detail}"),
            Err(why) => println!("FAIL {name}: {why}"),
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
    let mut report = Report::default();
    run(&args, &params, &mut report);
    println!("{} passed, {} failed", report.passed, report.failed);
    if report.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn run(args: &Args, params: &[Param], report: &mut Report) {
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
        report.case(&format!("scheme {name}: describes itself"), described);
    }
}
