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
//! `--rebuild` also times the rebuild: after each loop job one node's cache and control
//! directories are deleted and a job of the same id starts; its `SCR_Init` rebuilds the
//! lost files, and it must offer the newest checkpoint. `--vs DIR` compares this build
//! with another (DIR holds its libscr.so, e.g. a worktree's target/release): the same
//! test_api.c is compiled against each, and every measurement runs once per build,
//! alternating which goes first; ratios are taken per pair (`scripts/ab-bench.sh`
//! builds a git ref and runs this).
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

/// The A/B report of `--vs`.
#[path = "bench_c/ab.rs"]
mod ab;

const COLUMNS: &str = "\
Each job runs examples/c/test_api.c (SCR's test_api loop: per rank one write of SIZE
bytes + fsync into the routed file ckpt.<t>/rank_<r>.ckpt, SCR_Complete_output; one
untimed checkpoint, then --checkpoints timed ones, each followed by --sleep seconds) and,
in the same job, the plain loop (the same files and sleeps without the library, in the
same node-local directory, keeping cache_size checkpoints, the ranks starting each
checkpoint together as the library's collective calls make them). With --steps N, each
sleep is N timesteps, each followed by SCR_Need_checkpoint in the library's loop. A
scheme named NAME+bg is NAME with SCR_PROTECT_IN_BACKGROUND=1 in the environment, so
that libscr's MPI_Init (test_api calls plain MPI_Init, as SCR's does) asks MPI for
MPI_THREAD_MULTIPLE and the library's thread calls MPI; NAME+calls is NAME with
protect_in_background in a configuration file (which MPI_Init does not read) and
protect_below_multiple = calls, so MPI stays below MPI_THREAD_MULTIPLE (the application's
calls into the library make the background's MPI calls: give it --steps); NAME+sockets
is the same with protect_below_multiple = sockets (the library's thread exchanges over
TCP connections of its own).

Columns of the table (one row per scheme and size per rank):
  scheme      the redundancy scheme (SCR_COPY_TYPE); `plain` is the plain loop, over
              every job of that size
  MiB/rank    SIZE, the bytes each rank writes per checkpoint
  MiB/s       aggregate rate of the loop: the sum over ranks of MiB / that rank's loop
              seconds (sleeps included, as test_api counts them); median of --reps jobs
  x plain     MiB/s / the plain loop's MiB/s in the same job (median of the per-job
              ratios; 1.00 = as fast as writing without the library)
  loop s      the slowest rank's loop seconds (median)
  stall ms    the application's time per checkpoint outside its --sleep: (loop s -
              checkpoints x sleep) / checkpoints, what a checkpoint costs it
  x stall     stall ms / the plain loop's stall ms in the same job (median of the
              per-job ratios; 1.00 = a checkpoint costs what writing the files costs)
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
    /// Schemes measured (SCR_COPY_TYPE values); `NAME+bg` is NAME with
    /// SCR_PROTECT_IN_BACKGROUND=1 (libscr's MPI_Init then asks for
    /// MPI_THREAD_MULTIPLE), `NAME+calls` and `NAME+sockets` the same below it with
    /// protect_below_multiple = calls or sockets.
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
    /// Timesteps per sleep, each followed by SCR_Need_checkpoint in the library's loop
    /// (test_api's --steps; 0: one sleep, no call).
    #[arg(long, default_value_t = 0)]
    steps: usize,
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
    /// Also time the rebuild (every scheme but SINGLE): after each loop job the node of
    /// rank --lose loses its cache and control directories, and the next job's SCR_Init
    /// rebuilds them; it must then offer the newest checkpoint.
    #[arg(long)]
    rebuild: bool,
    /// The rank whose node is lost before a rebuild.
    #[arg(long, default_value_t = 1)]
    lose: usize,
    /// Another build to compare with: the directory holding its libscr.so (a worktree's
    /// target/release, say). Every measurement runs on both builds, alternating which
    /// goes first, and the report gives this build's figures over the other's per pair.
    #[arg(long, value_name = "DIR")]
    vs: Option<PathBuf>,
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
    /// Which build ran it: 0 this one, 1 the one of `--vs`.
    build: usize,
    /// Its repetition.
    rep: usize,
    /// What it measured.
    op: Op,
    line: Value,
}

/// What a job measures.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Op {
    /// The checkpoint loop (and the plain loop beside it).
    Loop,
    /// SCR_Init after a node was lost (its `init_s`).
    Rebuild,
}

/// One build's C client.
struct Client {
    exe: PathBuf,
    built: String,
}

impl Job {
    fn num(&self, key: &str) -> f64 {
        self.line[key].as_f64().unwrap_or(f64::NAN)
    }

    /// The job's `#test_api` line with what it measured and on which build.
    fn json(&self) -> Value {
        let mut line = self.line.clone();
        line["op"] = json!(format!("{:?}", self.op).to_lowercase());
        line["build"] = json!(["this", "vs"][self.build]);
        line["rep"] = json!(self.rep);
        line
    }
}

/// Per scheme and size, the rebuild jobs' SCR_Init seconds (of `build` 0).
fn rebuilds(args: &Args, jobs: &[Job]) -> Vec<(String, usize, Spread)> {
    let mut out = Vec::new();
    for &mib in &args.mib {
        for scheme in &args.schemes {
            let of: Vec<f64> = jobs
                .iter()
                .filter(|j| {
                    j.op == Op::Rebuild && j.build == 0 && j.mib == mib && &j.scheme == scheme
                })
                .map(|j| j.num("init_s"))
                .collect();
            if !of.is_empty() {
                out.push((scheme.clone(), mib, Spread::of(of)));
            }
        }
    }
    out
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
    if args.rebuild && args.lose >= args.ranks {
        return Err(format!(
            "--lose {} is not a rank of a job of {} (--ranks)",
            args.lose, args.ranks
        )
        .into());
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
    let mut clients = vec![compile(args, tmp.path(), &libscr_dir()?, "test_api")?];
    if let Some(other) = &args.vs {
        clients.push(compile(
            args,
            tmp.path(),
            &other_libscr(other)?,
            "test_api.vs",
        )?);
    }
    let nodes: Vec<String> = (0..args.ranks).map(|r| format!("node{r}")).collect();
    let dropped = inherited_scr_vars();
    if !args.json {
        if !dropped.is_empty() {
            println!(
                "note: the environment sets {}, which the jobs do not get (use --set)",
                dropped.join(", ")
            );
        }
        for (b, c) in clients.iter().enumerate() {
            println!("{}{}", ["", "--vs: "][b], c.built);
        }
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
                // with --vs, the builds take turns going first
                let mut builds: Vec<usize> = (0..clients.len()).collect();
                if rep % 2 == 1 {
                    builds.reverse();
                }
                for build in builds {
                    let dir = tmp
                        .path()
                        .join(format!("{}-{mib}-{rep}-{build}", scheme.to_lowercase()));
                    let at = Where {
                        build,
                        exe: &clients[build].exe,
                        dir: &dir,
                        nodes: &nodes,
                        extra: &extra,
                    };
                    let job = one_job(args, &at, scheme, mib, rep, Op::Loop)?;
                    keep_seen = job.line["keep"].as_u64();
                    jobs.push(job);
                    if args.rebuild && scheme != "SINGLE" {
                        jobs.push(one_job(args, &at, scheme, mib, rep, Op::Rebuild)?);
                    }
                    let _ = std::fs::remove_dir_all(&dir);
                }
            }
        }
    }
    match args.vs {
        Some(_) => ab::report(args, &jobs),
        None => report(args, keep_seen.unwrap_or(0), &jobs),
    }
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

/// The directory of `--vs`, checked to hold a libscr.so.
fn other_libscr(dir: &Path) -> Result<PathBuf, Error> {
    // absolute: the client finds the library through its rpath from the job's directory
    match dir.join("libscr.so").is_file() {
        true => Ok(dir.canonicalize()?),
        false => Err(format!(
            "--vs {}: no libscr.so there; give the other build's target/release (built \
             with `cargo build --release --workspace`, so that its plugins are there too)",
            dir.display()
        )
        .into()),
    }
}

/// Compile test_api.c into `dir` as `name`, as an application would build it against
/// the libscr in `lib` (scr.h, `-lscr`, the library found at run time through its rpath).
fn compile(args: &Args, dir: &Path, lib: &Path, name: &str) -> Result<Client, Error> {
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
    let exe = dir.join(name);
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
    Ok(Client {
        exe,
        built: format!(
            "C client: {} built with {} against {}/libscr.so",
            source.canonicalize().unwrap_or(source).display(),
            args.mpicc,
            lib.canonicalize().unwrap_or(lib.to_path_buf()).display()
        ),
    })
}

/// Where a job runs: the build (0 this one, 1 `--vs`) and its client, the job's
/// directory, the simulated nodes and `--set`.
struct Where<'a> {
    build: usize,
    exe: &'a Path,
    dir: &'a Path,
    nodes: &'a [String],
    extra: &'a [(String, String)],
}

/// One job of the C client: `scheme` at `mib` MiB per rank, in `at.dir`. A rebuild job
/// first deletes the lost node's cache and control directories, then runs the client
/// with one timed checkpoint (the least test_api takes) and no plain loop, under the loop
/// job's id.
fn one_job(
    args: &Args,
    at: &Where,
    scheme: &str,
    mib: usize,
    rep: usize,
    op: Op,
) -> Result<Job, Error> {
    let Where {
        build,
        exe,
        dir,
        nodes,
        extra,
    } = *at;
    let prefix = dir.join("prefix");
    let plain = dir.join("plain");
    // `NAME+bg`, `NAME+calls`, `NAME+sockets`: the scheme applied in the background (see
    // `--schemes`)
    // (`below`: protect_below_multiple, for the rows below MPI_THREAD_MULTIPLE)
    let (base, background, multiple, below) = match (
        scheme.strip_suffix("+bg"),
        scheme.strip_suffix("+calls"),
        scheme.strip_suffix("+sockets"),
    ) {
        (Some(base), _, _) => (base, true, true, ""),
        (_, Some(base), _) => (base, true, false, "calls"),
        (_, _, Some(base)) => (base, true, false, "sockets"),
        _ => (scheme, false, false, ""),
    };
    for d in [&prefix, &plain] {
        std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    let job_id = format!("c-{}-{mib}-{rep}", scheme.to_lowercase().replace('+', "-"));
    let config = BenchConfig {
        scheme: base,
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
    if background && multiple {
        // in the environment: libscr's MPI_Init then asks for MPI_THREAD_MULTIPLE
        env.insert("SCR_PROTECT_IN_BACKGROUND".into(), "1".into());
    }
    if background && !multiple {
        // in a file, which MPI_Init does not read: MPI stays below MPI_THREAD_MULTIPLE
        let file = dir.join("background.toml");
        std::fs::write(&file, "protect_in_background = true\n")
            .map_err(|e| format!("{}: {e}", file.display()))?;
        env.insert("SCR_CONF_FILE".into(), file.display().to_string());
        env.insert("SCR_PROTECT_BELOW_MULTIPLE".into(), below.into());
    }
    env.extend(extra.iter().cloned());
    let keep = cache_size(&env, &prefix)?;
    if op == Op::Rebuild {
        let node = &nodes[args.lose];
        for base in ["cache", "cntl"] {
            let d = dir.join(base).join(node);
            std::fs::remove_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
        }
    }
    let (times, plain_at) = match op {
        Op::Loop => (
            args.checkpoints,
            if rep % 2 == 1 { "before" } else { "after" },
        ),
        Op::Rebuild => (1, "none"),
    };

    let mut cmd = Command::new("timeout");
    cmd.args(["--kill-after=5", &args.timeout.to_string()])
        .arg(&args.mpiexec)
        .args(["-n", &args.ranks.to_string()])
        .arg(exe)
        .args(["--size", &format!("{mib}m")])
        .args(["--times", &times.to_string()])
        .args(["--seconds", &args.sleep.to_string()])
        .args(["--steps", &args.steps.to_string()])
        .args(["--keep", &keep.to_string()])
        .args(["--plain", plain_at])
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
            "{scheme} at {mib} MiB per rank ({}repetition {}): {why}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            if op == Op::Rebuild { "rebuild, " } else { "" },
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
    // the rebuild must have restored the newest checkpoint, not fallen back to an older
    // one or to none
    let newest = format!(
        "note: the library offers ckpt.{} to restart from;",
        args.checkpoints
    );
    if op == Op::Rebuild && !stdout.lines().any(|l| l.starts_with(&newest)) {
        return Err(failed(format!(
            "after losing node{} the job does not say \"{newest}\"",
            args.lose
        )));
    }
    Ok(Job {
        scheme: scheme.to_string(),
        mib,
        build,
        rep,
        op,
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
    /// The application's stall per checkpoint: the loop's time less its sleeps, over
    /// the timed checkpoints (ms).
    stall: Spread,
    /// `stall` over the plain loop's in the same job (below 1: less than writing the
    /// files without the library costs).
    stall_vs_plain: Option<Spread>,
}

/// The application's stall per checkpoint of a loop that took `seconds` (ms): the time
/// it spent outside its own sleeps ("compute"), over the timed checkpoints. What a
/// library that works while the application computes must keep near the plain write's.
fn stall_ms(args: &Args, seconds: f64) -> f64 {
    let n = args.checkpoints as f64;
    ((seconds - n * args.sleep) / n * 1e3).max(0.0)
}

fn report(args: &Args, keep: u64, jobs: &[Job]) {
    let mut lines = Vec::new();
    for &mib in &args.mib {
        let at: Vec<&Job> = jobs
            .iter()
            .filter(|j| j.mib == mib && j.op == Op::Loop)
            .collect();
        lines.push(Line {
            scheme: "plain".into(),
            mib,
            rate: Spread::of(at.iter().map(|j| j.num("plain_mib_per_s"))),
            vs_plain: None,
            seconds: Spread::of(at.iter().map(|j| j.num("plain_seconds"))),
            plain: Spread::of(at.iter().map(|j| j.num("plain_mib_per_s"))),
            stall: Spread::of(at.iter().map(|j| stall_ms(args, j.num("plain_seconds")))),
            stall_vs_plain: None,
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
                stall: Spread::of(of.iter().map(|j| stall_ms(args, j.num("seconds")))),
                stall_vs_plain: Some(Spread::of(of.iter().map(|j| {
                    stall_ms(args, j.num("seconds")) / stall_ms(args, j.num("plain_seconds"))
                }))),
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
                    "stall_ms": l.stall.json(),
                    "stall_vs_plain": l.stall_vs_plain.as_ref().map(Spread::json),
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
            "rebuilds": rebuilds(args, jobs)
                .iter()
                .map(|(scheme, mib, s)| json!({"scheme": scheme, "mib_per_rank": mib, "init_s": s.json()}))
                .collect::<Vec<_>>(),
            "jobs": jobs.iter().map(Job::json).collect::<Vec<_>>(),
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
    // (the scheme column as wide as its longest name: `PARTNER+sockets`)
    let w = lines
        .iter()
        .map(|l| l.scheme.len())
        .max()
        .unwrap_or(0)
        .max(8);
    println!(
        "{:<w$} {:>8} {:>8} {:>8} {:>8} {:>9} {:>8}",
        "scheme", "MiB/rank", "MiB/s", "x plain", "loop s", "stall ms", "x stall"
    );
    for l in &lines {
        println!(
            "{:<w$} {:>8} {:>8.0} {:>8} {:>8.3} {:>9.1} {:>8}",
            l.scheme,
            l.mib,
            l.rate.median,
            l.vs_plain
                .as_ref()
                .map_or("-".into(), |s| format!("{:.2}", s.median)),
            l.seconds.median,
            l.stall.median,
            l.stall_vs_plain
                .as_ref()
                .map_or("-".into(), |s| format!("{:.2}", s.median)),
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
                "  {} {} MiB: {} MiB/s, x plain {}, plain in its jobs {} MiB/s, loop {} s, \
                 stall {} ms per checkpoint, x plain stall {}",
                l.scheme,
                l.mib,
                l.rate.show(0),
                v.show(2),
                l.plain.show(0),
                l.seconds.show(3),
                l.stall.show(1),
                l.stall_vs_plain.as_ref().map_or("-".into(), |s| s.show(2)),
            ),
        }
    }
    let rebuilt = rebuilds(args, jobs);
    if !rebuilt.is_empty() {
        println!();
        println!("rebuild: SCR_Init seconds after node{} lost its cache and control directories (the newest checkpoint offered):", args.lose);
        for (scheme, mib, s) in rebuilt {
            println!("  {scheme} {mib} MiB: {} s", s.show(3));
        }
    }
}
