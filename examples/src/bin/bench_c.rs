//! `scr-bench-c`: scr-bench's checkpoint loop from a C application through libscr and
//! scr.h, against the plain loop measured in the same job.
//!
//! libscr initialises once per process and scr-bench is itself an MPI job, so the C client
//! runs as jobs of its own: this driver (started without mpiexec) compiles
//! `examples/c/test_api.c` with `mpicc` against `capi/include/scr.h` and this build's
//! libscr, then for each size per rank, repetition and scheme launches one
//! `mpiexec -n 4` job of it on simulated nodes, configured through `SCR_*` environment
//! variables exactly as scr-bench configures its runs (the shared
//! [`scr_examples::BenchConfig`]; other settings at their defaults, `--set` changes one).
//! Each job measures the loop through the library and, before or after it (alternating
//! by repetition), the plain loop: the same files written and fsynced without the library
//! into the same node-local directory, keeping as many checkpoints as `cache_size`. It
//! reads its newest checkpoint back byte for byte and fails otherwise.
//!
//! Run: `target/release/scr-bench-c` (no mpiexec; see `--help` for the columns).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Parser;
use scr_api::Settings;
use scr_examples::{BenchConfig, Spread};
use scr_host::config::settings;
use serde_json::{json, Value};

const COLUMNS: &str = "\
Each job runs examples/c/test_api.c (SCR's test_api loop: per rank one write of SIZE
bytes + fsync into the routed file ckpt.<t>/rank_<r>.ckpt, SCR_Complete_output; one
untimed checkpoint, then --checkpoints timed ones, each followed by --sleep seconds) and,
in the same job, the plain loop (the same files and sleeps without the library, in the
same node-local directory, keeping cache_size checkpoints).

Columns of the table (one row per scheme and size per rank):
  scheme      the redundancy scheme (SCR_COPY_TYPE); `plain` is the plain loop, over
              every job of that size
  MiB/rank    SIZE, the bytes each rank writes per checkpoint
  MiB/s       aggregate rate of the loop: the sum over ranks of MiB / that rank's loop
              seconds (sleeps included, as test_api counts them); median of --reps jobs
  x plain     MiB/s / the plain loop's MiB/s in the same job (median of the per-job
              ratios; 1.00 = as fast as writing without the library)
  loop s      the slowest rank's loop seconds (median)
The detail lines give [min-max] over the repetitions.";

#[derive(Parser)]
#[command(
    name = "scr-bench-c",
    version,
    about = "scr-bench's checkpoint loop from C (examples/c/test_api.c through libscr), against the plain loop in the same job; run without mpiexec",
    after_help = COLUMNS
)]
struct Args {
    /// MiB written per rank per checkpoint (one row each).
    #[arg(long, num_args = 1.., default_values_t = [16usize, 64, 256])]
    mib: Vec<usize>,
    /// Schemes measured (SCR_COPY_TYPE values).
    #[arg(long, num_args = 1.., default_values = ["SINGLE", "PARTNER", "XOR", "RS"])]
    schemes: Vec<String>,
    /// Repetitions (jobs) of every measurement; medians reported, with min and max.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Timed checkpoints per loop (after one untimed).
    #[arg(long, default_value_t = 5)]
    checkpoints: usize,
    /// Seconds the application computes (sleeps) after each checkpoint, as test_api's
    /// --seconds; counted in both loops' time.
    #[arg(long, default_value_t = 0.0)]
    sleep: f64,
    /// Ranks per job, one simulated node each.
    #[arg(long, default_value_t = 4)]
    ranks: usize,
    /// Members per redundancy set (set_size).
    #[arg(long, default_value_t = 4)]
    set_size: u32,
    /// Losses per set RS tolerates (set_failures).
    #[arg(long, default_value_t = 2)]
    set_failures: u32,
    /// CRC32 of every file at SCR_Complete_output (crc_on_copy).
    #[arg(long, value_enum, default_value_t = Crc::On)]
    crc: Crc,
    /// Where the jobs' caches, control directories, prefixes and plain files go (in a
    /// temporary directory, removed at the end).
    #[arg(long, default_value = "/dev/shm")]
    dir: PathBuf,
    /// More configuration (KEY=VALUE, passed as SCR_KEY=VALUE), e.g. --set cache_size=1.
    /// The caller's own SCR_* variables are not passed to the jobs (SCR_SYSTEM_CONFIG is).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// The MPI compiler wrapper.
    #[arg(long, default_value = "mpicc")]
    mpicc: String,
    /// The MPI launcher (run as `<mpiexec> -n <ranks> test_api ...`).
    #[arg(long, default_value = "mpiexec")]
    mpiexec: String,
    /// Seconds one job may take before it is killed.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// Print the results as JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// Internal (tests): the C client flips a byte of rank 0's newest checkpoint before
    /// reading it back, so every job must fail.
    #[arg(long, hide = true)]
    corrupt: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Crc {
    On,
    Off,
}

type Error = Box<dyn std::error::Error>;

fn main() {
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("scr-bench-c: {e}");
        std::process::exit(1);
    }
}

/// What one job reported (its `#test_api` line).
struct Job {
    scheme: String,
    mib: usize,
    line: Value,
}

impl Job {
    fn num(&self, key: &str) -> f64 {
        self.line[key].as_f64().unwrap_or(f64::NAN)
    }
}

fn run(args: &Args) -> Result<(), Error> {
    scr_examples::refuse_mpi_launcher("scr-bench-c")?;
    if args.ranks < args.set_size as usize {
        return Err(format!(
            "--ranks {} cannot fill a set of {} (--set-size): every member needs a node of its own",
            args.ranks, args.set_size
        )
        .into());
    }
    if args.reps == 0 || args.checkpoints == 0 || args.mib.is_empty() || args.schemes.is_empty() {
        return Err("--reps and --checkpoints must be at least 1; --mib and --schemes name at least one value".into());
    }
    if !(args.sleep >= 0.0 && args.sleep.is_finite()) {
        return Err(format!("--sleep {}: expected seconds, 0 or more", args.sleep).into());
    }
    let extra = extra_env(&args.set)?;
    let tmp = tempfile::Builder::new()
        .prefix("scr-bench-c-")
        .tempdir_in(&args.dir)
        .map_err(|e| {
            format!(
                "a temporary directory in {} (--dir): {e}",
                args.dir.display()
            )
        })?;
    let (exe, built) = compile(args, tmp.path())?;
    let nodes: Vec<String> = (0..args.ranks).map(|r| format!("node{r}")).collect();
    let dropped = inherited_scr_vars();
    if !args.json {
        if !dropped.is_empty() {
            println!(
                "note: the environment sets {}, which the jobs do not get (use --set)",
                dropped.join(", ")
            );
        }
        println!("{built}");
    }

    let mut jobs: Vec<Job> = Vec::new();
    let mut keep_seen = None;
    for &mib in &args.mib {
        for rep in 0..args.reps {
            if !args.json {
                eprintln!(
                    "scr-bench-c: {mib} MiB per rank, repetition {} ...",
                    rep + 1
                );
            }
            // as scr-bench: odd repetitions run the schemes in reverse order and the plain
            // loop before the library's, so neither side always runs on a warmer machine
            let mut order: Vec<&String> = args.schemes.iter().collect();
            if rep % 2 == 1 {
                order.reverse();
            }
            for scheme in order {
                let dir = tmp
                    .path()
                    .join(format!("{}-{mib}-{rep}", scheme.to_lowercase()));
                let job = one_job(args, &exe, &dir, &nodes, &extra, scheme, mib, rep)?;
                keep_seen = job.line["keep"].as_u64();
                jobs.push(job);
                let _ = std::fs::remove_dir_all(&dir);
            }
        }
    }
    report(args, keep_seen.unwrap_or(0), &jobs);
    Ok(())
}

/// The caller's `SCR_*` variables the jobs do not get (all but `SCR_SYSTEM_CONFIG`): a
/// job is configured by scr-bench's settings and `--set` alone.
fn inherited_scr_vars() -> Vec<String> {
    std::env::vars()
        .map(|(k, _)| k)
        .filter(|k| k.starts_with("SCR_") && k != "SCR_SYSTEM_CONFIG")
        .collect()
}

/// `--set KEY=VALUE` as environment variables (`SCR_KEY`), each checked against its
/// key's type first, so that a mistake stops the run before any job.
fn extra_env(set: &[String]) -> Result<Vec<(String, String)>, Error> {
    let mut out = Vec::new();
    for kv in set {
        Settings::new()
            .set(kv)
            .map_err(|e| format!("--set {kv}: {e}"))?;
        let (k, v) = kv
            .split_once('=')
            .filter(|(k, _)| !k.trim().contains(' '))
            .ok_or_else(|| {
                format!("--set {kv}: expected KEY=VALUE of one setting (descriptors cannot be passed as environment variables)")
            })?;
        let k = k.trim().to_uppercase();
        let k = k.strip_prefix("SCR_").unwrap_or(&k);
        out.push((format!("SCR_{k}"), v.to_string()));
    }
    Ok(out)
}

/// Where the C client's sources are: this checkout's (the driver is a development tool,
/// like the rest of target/release).
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The directory of this build's libscr.so: beside this executable when scr-capi was
/// built as a package of its own (`cargo build -p scr-capi`, `--workspace`), else in
/// `deps/` where cargo leaves it when it was built only as a dependency.
fn libscr_dir() -> Result<PathBuf, Error> {
    let exe = std::env::current_exe()?;
    let dir = exe.parent().ok_or("the executable has no directory")?;
    [dir.to_path_buf(), dir.join("deps")]
        .into_iter()
        .find(|d| d.join("libscr.so").is_file())
        .ok_or_else(|| {
            format!(
                "no libscr.so in {} or its deps/: build it with this build's profile, e.g. \
                 `cargo build --release --workspace` (the schemes' plugins are needed too)",
                dir.display()
            )
            .into()
        })
}

/// Compile test_api.c into `dir` as an application would build it against libscr
/// (scr.h, `-lscr`, the library found at run time through its rpath). Returns the
/// executable and a line saying what it was built from.
fn compile(args: &Args, dir: &Path) -> Result<(PathBuf, String), Error> {
    let source = repo().join("examples/c/test_api.c");
    let include = repo().join("capi/include");
    if !source.is_file() || !include.join("scr.h").is_file() {
        return Err(format!(
            "{} or {}/scr.h is missing: scr-bench-c builds the C client from the checkout it was built in",
            source.display(),
            include.display()
        )
        .into());
    }
    let lib = libscr_dir()?;
    let exe = dir.join("test_api");
    let out = Command::new(&args.mpicc)
        .args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&source)
        .arg(format!("-I{}", include.display()))
        .arg(format!("-L{}", lib.display()))
        .arg("-lscr")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .output()
        .map_err(|e| {
            format!(
                "{} cannot run ({e}): install the MPI compiler wrappers (scripts/setup.sh)",
                args.mpicc
            )
        })?;
    if !out.status.success() {
        return Err(format!(
            "{} {} failed:\n{}",
            args.mpicc,
            source.display(),
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok((
        exe,
        format!(
            "C client: {} built with {} against {}/libscr.so",
            source.canonicalize().unwrap_or(source).display(),
            args.mpicc,
            lib.canonicalize().unwrap_or(lib).display()
        ),
    ))
}

/// One job of the C client: `scheme` at `mib` MiB per rank, in `dir`.
#[allow(clippy::too_many_arguments)]
fn one_job(
    args: &Args,
    exe: &Path,
    dir: &Path,
    nodes: &[String],
    extra: &[(String, String)],
    scheme: &str,
    mib: usize,
    rep: usize,
) -> Result<Job, Error> {
    let prefix = dir.join("prefix");
    let plain = dir.join("plain");
    for d in [&prefix, &plain] {
        std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    let job_id = format!("c-{}-{mib}-{rep}", scheme.to_lowercase());
    let config = BenchConfig {
        scheme,
        set_size: args.set_size,
        set_failures: args.set_failures,
        nodes,
        root: dir,
        prefix: &prefix,
        job_id: &job_id,
        crc: args.crc == Crc::On,
    };
    // the job's environment: scr-bench's settings, then --set (later wins: one variable)
    let mut env: BTreeMap<String, String> = config
        .pairs()
        .into_iter()
        .map(|(k, v)| (format!("SCR_{}", k.to_uppercase()), v))
        .collect();
    env.extend(extra.iter().cloned());
    let keep = cache_size(&env, &prefix)?;

    let mut cmd = Command::new("timeout");
    cmd.args(["--kill-after=5", &args.timeout.to_string()])
        .arg(&args.mpiexec)
        .args(["-n", &args.ranks.to_string()])
        .arg(exe)
        .args(["--size", &format!("{mib}m")])
        .args(["--times", &args.checkpoints.to_string()])
        .args(["--seconds", &args.sleep.to_string()])
        .args(["--keep", &keep.to_string()])
        .args(["--plain", if rep % 2 == 1 { "before" } else { "after" }])
        .arg("--plain-dir")
        .arg(&plain)
        .args(["--scheme", scheme])
        .args(["--expect-ranks", &args.ranks.to_string()])
        .args(args.corrupt.then_some("--corrupt"))
        .current_dir(&prefix);
    for k in inherited_scr_vars() {
        cmd.env_remove(k);
    }
    cmd.envs(&env);
    // what OpenMPI needs to run the ranks (as root) on a few cores, unless the caller
    // chose otherwise (e.g. OMPI_MCA_btl with tcp on a real cluster)
    for (k, v) in scr_e2e::local_mpi::openmpi_local_env() {
        if std::env::var_os(k).is_none() {
            cmd.env(k, v);
        }
    }
    let out = cmd
        .output()
        .map_err(|e| format!("{} cannot run: {e}", args.mpiexec))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let tail = |s: &str| {
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    };
    let failed = |why: String| -> Error {
        format!(
            "{scheme} at {mib} MiB per rank (repetition {}): {why}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            rep + 1,
            tail(&stdout),
            tail(&String::from_utf8_lossy(&out.stderr))
        )
        .into()
    };
    if !out.status.success() {
        return Err(failed(format!(
            "the job failed ({}{})",
            out.status,
            if out.status.code() == Some(124) {
                format!(", killed by --timeout {}", args.timeout)
            } else {
                String::new()
            }
        )));
    }
    let lines: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("#test_api "))
        .collect();
    // one line, from rank 0 of one world: N singletons would print N lines of 1 rank
    let [line] = lines[..] else {
        return Err(failed(format!(
            "expected one #test_api line, got {}",
            lines.len()
        )));
    };
    let line: Value = serde_json::from_str(line)
        .map_err(|e| failed(format!("the #test_api line is not JSON ({e})")))?;
    if line["ranks"].as_u64() != Some(args.ranks as u64) || line["verified"] != json!(true) {
        return Err(failed(format!(
            "the job reports ranks {} and verified {} (expected {} and true)",
            line["ranks"], line["verified"], args.ranks
        )));
    }
    Ok(Job {
        scheme: scheme.to_string(),
        mib,
        line,
    })
}

/// The cache_size the jobs' library will use with `env` (the keep count of the plain
/// loop), resolved as the library resolves it: defaults, the system configuration,
/// these variables.
fn cache_size(env: &BTreeMap<String, String>, prefix: &Path) -> Result<u64, Error> {
    let mut loader = Settings::new().loader();
    loader
        .env
        .retain(|k, _| !k.starts_with("SCR_") || k == "SCR_SYSTEM_CONFIG");
    loader.env.extend(env.clone());
    loader.cwd = prefix.to_path_buf();
    let config = loader
        .load()
        .map_err(|e| format!("the jobs' configuration: {e}"))?;
    Ok(config.get(settings::CACHE_SIZE).max(1))
}

/// One printed (or JSON) row.
struct Line {
    scheme: String,
    mib: usize,
    rate: Spread,
    vs_plain: Option<Spread>,
    seconds: Spread,
    plain: Spread,
}

fn report(args: &Args, keep: u64, jobs: &[Job]) {
    let mut lines = Vec::new();
    for &mib in &args.mib {
        let at: Vec<&Job> = jobs.iter().filter(|j| j.mib == mib).collect();
        lines.push(Line {
            scheme: "plain".into(),
            mib,
            rate: Spread::of(at.iter().map(|j| j.num("plain_mib_per_s"))),
            vs_plain: None,
            seconds: Spread::of(at.iter().map(|j| j.num("plain_seconds"))),
            plain: Spread::of(at.iter().map(|j| j.num("plain_mib_per_s"))),
        });
        for scheme in &args.schemes {
            let of: Vec<&&Job> = at.iter().filter(|j| &j.scheme == scheme).collect();
            lines.push(Line {
                scheme: scheme.clone(),
                mib,
                rate: Spread::of(of.iter().map(|j| j.num("mib_per_s"))),
                vs_plain: Some(Spread::of(
                    of.iter()
                        .map(|j| j.num("mib_per_s") / j.num("plain_mib_per_s")),
                )),
                seconds: Spread::of(of.iter().map(|j| j.num("seconds"))),
                plain: Spread::of(of.iter().map(|j| j.num("plain_mib_per_s"))),
            });
        }
    }
    if args.json {
        let rows: Vec<Value> = lines
            .iter()
            .map(|l| {
                json!({
                    "scheme": l.scheme,
                    "mib_per_rank": l.mib,
                    "mib_per_s": l.rate.json(),
                    "vs_plain": l.vs_plain.as_ref().map(Spread::json),
                    "seconds": l.seconds.json(),
                    "plain_mib_per_s": l.plain.json(),
                })
            })
            .collect();
        let out = json!({
            "client": "examples/c/test_api.c",
            "ranks": args.ranks,
            "set_size": args.set_size,
            "set_failures": args.set_failures,
            "crc_on_copy": args.crc == Crc::On,
            "cache_size": keep,
            "checkpoints": args.checkpoints,
            "sleep_s": args.sleep,
            "reps": args.reps,
            "rows": rows,
            "jobs": jobs.iter().map(|j| j.line.clone()).collect::<Vec<_>>(),
        });
        println!("{out}");
        return;
    }
    println!(
        "{} ranks on {} simulated nodes, cache {}, set size {}, RS k = {}, crc_on_copy {}, \
         cache_size {keep}, {} timed checkpoints, sleep {} s, {} reps (one job each)",
        args.ranks,
        args.ranks,
        args.dir.display(),
        args.set_size,
        args.set_failures,
        if args.crc == Crc::On { "on" } else { "off" },
        args.checkpoints,
        args.sleep,
        args.reps
    );
    println!();
    println!(
        "{:<8} {:>8} {:>8} {:>8} {:>8}",
        "scheme", "MiB/rank", "MiB/s", "x plain", "loop s"
    );
    for l in &lines {
        println!(
            "{:<8} {:>8} {:>8.0} {:>8} {:>8.3}",
            l.scheme,
            l.mib,
            l.rate.median,
            l.vs_plain
                .as_ref()
                .map_or("-".into(), |s| format!("{:.2}", s.median)),
            l.seconds.median
        );
    }
    println!();
    println!("details (medians, [min-max] over repetitions; ratios per job):");
    for l in &lines {
        match &l.vs_plain {
            None => println!(
                "  plain {} MiB: {} MiB/s over every job of this size",
                l.mib,
                l.rate.show(0)
            ),
            Some(v) => println!(
                "  {} {} MiB: {} MiB/s, x plain {}, plain in its jobs {} MiB/s, loop {} s",
                l.scheme,
                l.mib,
                l.rate.show(0),
                v.show(2),
                l.plain.show(0),
                l.seconds.show(3)
            ),
        }
    }
}
