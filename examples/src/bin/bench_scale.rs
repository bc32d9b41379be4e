//! `scr-bench-scale`: how the library's per-rank MPI traffic grows with the job.
//! A driver runs, for each rank count N of `--ranks`, one `mpiexec -n N` job of this same
//! binary (`--worker`) on simulated nodes (`--ranks-per-node` ranks each, node
//! caches and control directories under a temporary directory in `--dir`), which walks
//! the whole lifecycle and measures each step with `Scr::comm_stats`:
//!
//! 1. `init`: the first init (empty cache, nothing to fetch);
//! 2. `tiny_ckpt`: start_output, route_file, a 64-byte file, complete_output: the
//!    metadata cost of a checkpoint with (almost) no data;
//! 3. `xor_ckpt`: the same with a `--bytes` file (1 MiB) protected by XOR;
//! 4. `rebuild`: after finalize, one simulated node is lost (its cache and control
//!    directories deleted); the next init rebuilds its ranks' files, and the restart
//!    reads every rank's file back byte for byte (init + start_restart + complete_restart);
//! 5. `flush`: the finalize of that run, which flushes the restored checkpoint to the
//!    prefix with the sync transfer (`flush_on_finalize`);
//! 6. `fetch`: every node's cache and control directory is deleted; the next init fetches
//!    the checkpoint from the prefix and the restart reads it back byte for byte;
//! 7. `resize`: half the ranks (the even ones, a job of N/2 on a split communicator,
//!    spanning every node) restart from that N-rank checkpoint, which the nodes' caches
//!    hold: init + restart, each rank listing and reading, byte for byte, the old ranks'
//!    files its half of the work overlaps (`restart_files`); the odd ranks idle,
//!    measured as zero. (With one rank per node the half leaves every other node, and
//!    reads the prefix's copy.)
//!
//! Every rank writes its counts to a report file; the driver checks that every rank of
//! every job reported, saw the world size it was launched with and read its files back
//! byte for byte, then prints one row per (step, N) and, per step, how the per-rank cost
//! grows from the smallest to the largest N, with a fit extrapolated to 10^5 ranks.
//!
//! Only counts and their growth matter: the data is tiny and the ranks oversubscribe the
//! machine, so times are not per-rank costs of a real job.
//!
//! Run: `target/release/scr-bench-scale --ranks 4,16,64,128` (no mpiexec: the driver
//! launches the jobs; see `--help` for the columns).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use clap::Parser;
use scr_api::mpi::topology::SimpleCommunicator;
use scr_api::mpi::traits::{Communicator, CommunicatorCollectives};
use scr_api::{mpi, CommStats, Flags, Scr, Settings};
use scr_examples::scale::{content, resize_check, restart_check};
use scr_host::runtime::comm;
use serde_json::{json, Value};

const COLUMNS: &str = "\
Steps (one job per rank count N; every rank measures each step on its own):
  init        the first init: empty cache, nothing to fetch
  tiny_ckpt   start_output + route_file + one 64-byte file + complete_output (XOR)
  xor_ckpt    the same with one --bytes file per rank (XOR, set size --set-size)
  rebuild     after one simulated node is lost: init (rebuilds its ranks' files) +
              start_restart + route_file + byte-exact read + complete_restart
  flush       finalize of that run: flushes the restored checkpoint (sync transfer)
  fetch       after every cache is lost: init (fetches from the prefix) + restart
              read byte for byte, as in rebuild
  resize      N/2 ranks on every node restart from the N-rank checkpoint in the
              caches: init + restart, each reading the old files its share
              overlaps (the other N/2 idle at zero, which the means include)

Columns of the table (one row per step and N; per rank = what one rank sent plus
received in the step, over every API call and nested step such as flush or fetch):
  step        the step above
  ranks       N, the world size (asserted by every rank)
  nodes       simulated nodes (ranks per node = min(--ranks-per-node, N / set size),
              so that every XOR set spans set-size nodes)
  msgs max    point-to-point messages sent + received, the busiest rank
  msgs mean   the same, mean over ranks
  coll max    MPI collective calls (all-reduce, all-gather, broadcast, barrier, split,
              each round of a split exchange), the busiest rank
  coll mean   the same, mean over ranks
  bytes max   payload bytes sent + received (collectives and messages), busiest rank
  bytes mean  the same, mean over ranks
  time max s  the step's wall time on the slowest rank (oversubscribed: not a cost)

Growth (one pair of rows per step, from the smallest to the largest N):
  metric      bytes: `bytes max` above; msgs+coll: the busiest rank's messages plus
              collective calls
  at N        the value at the smallest and at the largest N
  ratio       largest-N value / smallest-N value
  verdict     flat: within 5% over the range and a linear fit adds < 50% by 10^5 ranks;
              grows with P: a linear fit a + c*P fits clearly better (half the squared
              error or less) than a + b*log2(P); ~log P: otherwise
  fit         the verdict's least-squares model: a + b*log2(P) for ~log P, a + c*P
              for grows with P; for flat the largest value measured
  at 10^5     the value extrapolated to 10^5 ranks from that model
  growing     for a step that grows with P: the calls whose bytes grow with P";

#[derive(Parser)]
#[command(
    name = "scr-bench-scale",
    version,
    about = "Per-rank messages, collectives and bytes of each lifecycle step at growing rank counts, with growth fits to 10^5 ranks",
    after_help = COLUMNS
)]
struct Args {
    /// Rank counts, one job each (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = [4usize, 16, 64, 128])]
    ranks: Vec<usize>,
    /// Ranks per simulated node (fewer when N / set size is smaller).
    #[arg(long, default_value_t = 4)]
    ranks_per_node: usize,
    /// Members per XOR set (set_size).
    #[arg(long, default_value_t = 4)]
    set_size: usize,
    /// Bytes per rank of the XOR checkpoint.
    #[arg(long, default_value_t = 1 << 20)]
    bytes: usize,
    /// Where the jobs' temporary directories (caches, control directories, prefix) go.
    #[arg(long, default_value = "/dev/shm")]
    dir: PathBuf,
    /// Seconds one job may take before it is killed.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// The MPI launcher (run as `<mpiexec> -n N <this binary> --worker ...`).
    #[arg(long, default_value = "mpiexec")]
    mpiexec: String,
    /// More configuration for the library (KEY=VALUE, as SCR_Config takes it). The
    /// caller's SCR_* environment is not passed to the jobs.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Keep each job's directory (its path is printed) instead of deleting it.
    #[arg(long)]
    keep: bool,
    /// Print the results as JSON instead of the tables.
    #[arg(long)]
    json: bool,
    /// Internal: run as one rank of a job.
    #[arg(long, hide = true)]
    worker: bool,
    /// Internal (worker): the world size the job was launched with.
    #[arg(long, hide = true, default_value_t = 0)]
    expect: usize,
}

type Error = Box<dyn std::error::Error>;

/// The steps, in the order the worker runs them.
const STEPS: [&str; 7] = [
    "init",
    "tiny_ckpt",
    "xor_ckpt",
    "rebuild",
    "flush",
    "fetch",
    "resize",
];

/// The byte-exact checks each rank reports.
const CHECKS: [&str; 3] = ["rebuild", "fetch", "resize"];

/// Size of the file of `tiny_ckpt`.
const TINY: usize = 64;

fn main() {
    let args = Args::parse();
    let r = if args.worker {
        worker(&args)
    } else {
        driver(&args)
    };
    if let Err(e) = r {
        eprintln!("scr-bench-scale: {e}");
        std::process::exit(1);
    }
}

// ---------------------------------------------------------------------------------------
// worker: one rank of a job

/// Simulated node of `rank` with `rpn` ranks per node.
fn node_of(rank: usize, rpn: usize) -> String {
    format!("n{}", rank / rpn)
}

/// Ranks per node for a job of `n` ranks: at most `rpn`, and few enough that the ranks
/// span at least `set_size` nodes (XOR sets take each member from another node).
fn ranks_per_node(n: usize, rpn: usize, set_size: usize) -> usize {
    rpn.min(n / set_size.max(1)).max(1)
}

/// What one rank measured in one step.
struct Measured {
    step: &'static str,
    secs: f64,
    stats: CommStats,
}

/// Measure `f` as `step`: the ranks start together, the counters start at zero.
fn measure<T>(
    world: &SimpleCommunicator,
    out: &mut Vec<Measured>,
    step: &'static str,
    f: impl FnOnce() -> Result<T, Error>,
) -> Result<T, Error> {
    world.barrier();
    comm::reset();
    let t0 = Instant::now();
    let r = f()?;
    out.push(Measured {
        step,
        secs: t0.elapsed().as_secs_f64(),
        stats: comm::snapshot(),
    });
    Ok(r)
}

fn worker(args: &Args) -> Result<(), Error> {
    let universe = mpi::initialize().ok_or("MPI is initialised already")?;
    let world = universe.world();
    let rank = world.rank() as usize;
    let size = world.size() as usize;
    if size != args.expect {
        // a launcher of another MPI runs N singletons: that must not pass for N ranks
        return Err(format!(
            "rank {rank}: world size {size}, but the job was launched with {} ranks \
             (is `{}` the launcher of the MPI this binary links?)",
            args.expect, args.mpiexec
        )
        .into());
    }
    let rpn = ranks_per_node(size, args.ranks_per_node, args.set_size);
    let nodes: Vec<String> = (0..size).map(|r| node_of(r, rpn)).collect();
    let me = &nodes[rank];
    let dir = &args.dir;
    let prefix = dir.join("prefix");
    let settings_on =
        |nodes: &[String], flush: u64, on_finalize: bool| -> Result<Settings, Error> {
            let mut s = Settings::new();
            for kv in [
                "copy_type=XOR".to_string(),
                format!("set_size={}", args.set_size),
                format!("node_names={}", nodes.join(",")),
                format!("cache_base={}", dir.join("cache").display()),
                format!("cntl_base={}", dir.join("cntl").display()),
                format!("prefix={}", prefix.display()),
                "job_id=scale".to_string(),
                "user=scale".to_string(),
                format!("flush={flush}"),
                format!("flush_on_finalize={on_finalize}"),
                "flush_type=sync".to_string(),
                "flush_async=false".to_string(),
            ] {
                s.set(&kv)?;
            }
            for kv in &args.set {
                s.set(kv)?;
            }
            Ok(s)
        };
    let settings = |flush: u64, on_finalize: bool| settings_on(&nodes, flush, on_finalize);
    let tiny_file = prefix.join(format!("ckpt.1/rank_{rank}.dat"));
    let tiny = content(rank, TINY, 1);
    let file = prefix.join(format!("ckpt.2/rank_{rank}.dat"));
    let data = content(rank, args.bytes, 2);
    let mut steps = Vec::new();
    let mut checks = BTreeMap::new();

    // run 1: init and two checkpoints, no flush
    let s1 = settings(0, false)?;
    let mut scr = measure(&world, &mut steps, "init", || {
        Ok(Scr::init_with(&world, &s1)?)
    })?;
    for (step, name, path, bytes) in [
        ("tiny_ckpt", "ckpt.1", &tiny_file, &tiny),
        ("xor_ckpt", "ckpt.2", &file, &data),
    ] {
        let kept = measure(&world, &mut steps, step, || {
            scr.start_output(name, Flags::CHECKPOINT)?;
            let written = match scr.route_file(path) {
                Ok(p) => std::fs::write(&p, bytes).map_err(|e| format!("{}: {e}", p.display())),
                Err(e) => Err(e.to_string()),
            };
            if let Err(e) = &written {
                scr_examples::say!("scr-bench-scale: rank {rank}: {e}");
            }
            Ok(scr.complete_output(written.is_ok())?)
        })?;
        if !kept {
            return Err(format!("{step}: checkpoint {name} was not kept").into());
        }
    }
    scr.finalize()?;

    // lose node n1: the first rank on it deletes its cache and control directories
    let lose = |node: &str| -> Result<(), Error> {
        for base in ["cache", "cntl"] {
            let d = dir.join(base).join(node);
            std::fs::remove_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
        }
        Ok(())
    };
    world.barrier();
    if rank == rpn {
        lose(me)?;
    }
    world.barrier();

    // run 2: rebuild, then the finalize that flushes (flush never due on its own)
    let s2 = settings(u64::from(u32::MAX), true)?;
    let (scr, bad) = measure(&world, &mut steps, "rebuild", || {
        let mut scr = Scr::init_with(&world, &s2)?;
        let bad = restart_check(&mut scr, "ckpt.2", &file, &data)?;
        Ok((scr, bad))
    })?;
    checks.insert("rebuild", bad);
    measure(&world, &mut steps, "flush", || Ok(scr.finalize()?))?;

    // lose every node's cache: the first rank of each node deletes it
    world.barrier();
    if rank.is_multiple_of(rpn) {
        lose(me)?;
    }
    world.barrier();

    // run 3: fetch from the prefix
    let s3 = settings(0, false)?;
    let (scr, bad) = measure(&world, &mut steps, "fetch", || {
        let mut scr = Scr::init_with(&world, &s3)?;
        let bad = restart_check(&mut scr, "ckpt.2", &file, &data)?;
        Ok((scr, bad))
    })?;
    checks.insert("fetch", bad);
    scr.finalize()?;

    // run 4: the even ranks, a job of their own, restart from the N-rank checkpoint: rank
    // r of the half on the node of old rank 2r, so the half spans every node and reads
    // its share (old ranks 2r and 2r + 1) from the caches the fetch left
    let half = size / 2;
    let sub = world.split_by_color(if rank.is_multiple_of(2) && rank / 2 < half {
        mpi::topology::Color::with_value(0)
    } else {
        mpi::topology::Color::undefined()
    });
    let half_nodes: Vec<String> = (0..half.max(1)).map(|r| nodes[2 * r].clone()).collect();
    let mut s4 = settings_on(&half_nodes, 0, false)?;
    s4.set("copy_type=SINGLE")?;
    let bad = measure(&world, &mut steps, "resize", || {
        let Some(sub) = &sub else {
            return Ok(None);
        };
        let mut scr = Scr::init_with(sub, &s4)?;
        // (one rank per node: the half leaves every other node, whose old ranks XOR
        // cannot rebuild two at a time, so the prefix's copy is read)
        let cached = rpn.is_multiple_of(2).then_some(prefix.as_path());
        let bad = resize_check(&mut scr, cached, rank / 2, half, size, args.bytes)?;
        scr.finalize()?;
        Ok(bad)
    })?;
    checks.insert("resize", bad);

    let report = json!({
        "rank": rank,
        "world_size": size,
        "node": me,
        "steps": steps.iter().map(|m| json!({
            "step": m.step,
            "secs": m.secs,
            "calls": m.stats.per_call.iter().map(|(name, s)| (name.clone(), json!({
                "calls": s.calls,
                "collectives": s.collectives,
                "msgs_sent": s.msgs_sent,
                "msgs_recv": s.msgs_recv,
                "bytes_sent": s.bytes_sent,
                "bytes_recv": s.bytes_recv,
                "seconds": s.seconds,
            }))).collect::<serde_json::Map<_, _>>(),
        })).collect::<Vec<_>>(),
        "checks": checks.iter().map(|(k, v)| (k.to_string(), match v {
            None => json!("ok"),
            Some(e) => json!(e),
        })).collect::<serde_json::Map<_, _>>(),
    });
    let out = dir.join("reports").join(format!("rank_{rank}.json"));
    std::fs::write(&out, serde_json::to_vec(&report)?)
        .map_err(|e| format!("{}: {e}", out.display()))?;
    let failed: Vec<String> = checks
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|e| format!("{k}: {e}")))
        .collect();
    if !failed.is_empty() {
        return Err(format!("rank {rank}: {}", failed.join("; ")).into());
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// driver: one job per rank count, then the tables

/// One rank's numbers in one step.
#[derive(Clone, Copy, Default)]
struct PerRank {
    msgs: f64,
    coll: f64,
    bytes: f64,
}

impl PerRank {
    fn of(calls: &Value) -> PerRank {
        let n = |v: &Value, k: &str| v[k].as_u64().unwrap_or(0) as f64;
        let mut p = PerRank::default();
        for c in calls.as_object().into_iter().flat_map(|m| m.values()) {
            p.msgs += n(c, "msgs_sent") + n(c, "msgs_recv");
            p.coll += n(c, "collectives");
            p.bytes += n(c, "bytes_sent") + n(c, "bytes_recv");
        }
        p
    }
}

/// One step at one rank count, over all ranks.
struct Row {
    step: String,
    ranks: usize,
    nodes: usize,
    msgs_max: f64,
    msgs_mean: f64,
    coll_max: f64,
    coll_mean: f64,
    bytes_max: f64,
    bytes_mean: f64,
    /// The busiest rank's messages + collectives.
    ops_max: f64,
    secs_max: f64,
    /// Per call name: (bytes max, messages + collectives max) over ranks.
    calls: BTreeMap<String, (f64, f64)>,
}

/// What one job gave: a row per step, the byte-exact checks, the job's wall time.
struct Job {
    ranks: usize,
    nodes: usize,
    rows: Vec<Row>,
    /// Per check: ranks that passed it.
    checks: BTreeMap<String, usize>,
    secs: f64,
    dir: Option<PathBuf>,
}

fn driver(args: &Args) -> Result<(), Error> {
    scr_examples::refuse_mpi_launcher("scr-bench-scale")?;
    if args.ranks.is_empty() {
        return Err("--ranks names no rank count".into());
    }
    let mut ranks = args.ranks.clone();
    ranks.sort_unstable();
    ranks.dedup();
    if let Some(&n) = ranks.iter().find(|&&n| n < args.set_size) {
        return Err(format!(
            "{n} ranks cannot form an XOR set of {} members on different nodes: use --ranks \
             of at least --set-size",
            args.set_size
        )
        .into());
    }
    let mut jobs = Vec::new();
    for &n in &ranks {
        if !args.json {
            eprintln!("scr-bench-scale: {n} ranks ...");
        }
        jobs.push(run_job(args, n)?);
    }
    let growth = growth(&jobs);
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&as_json(args, &jobs, &growth))?
        );
    } else {
        print_tables(args, &jobs, &growth);
    }
    Ok(())
}

/// Run the job of `n` ranks and read every rank's report.
fn run_job(args: &Args, n: usize) -> Result<Job, Error> {
    let tmp = tempfile::Builder::new()
        .prefix("scr-bench-scale-")
        .tempdir_in(&args.dir)
        .map_err(|e| format!("a temporary directory in {}: {e}", args.dir.display()))?;
    let dir = tmp.path();
    for d in ["cache", "cntl", "prefix", "reports"] {
        std::fs::create_dir(dir.join(d)).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let rpn = ranks_per_node(n, args.ranks_per_node, args.set_size);
    let me = std::env::current_exe()?;
    let mut cmd = Command::new("timeout");
    cmd.args(["--kill-after=5", &args.timeout.to_string()])
        .arg(&args.mpiexec)
        .args(["-n", &n.to_string()])
        .arg(&me)
        .args(["--worker", "--expect", &n.to_string()])
        .args(["--ranks-per-node", &args.ranks_per_node.to_string()])
        .args(["--set-size", &args.set_size.to_string()])
        .args(["--bytes", &args.bytes.to_string()])
        .args(["--mpiexec", &args.mpiexec])
        .arg("--dir")
        .arg(dir)
        .current_dir(dir.join("prefix"));
    for kv in &args.set {
        cmd.args(["--set", kv]);
    }
    // the job's configuration is what the worker sets, not what the caller's shell holds
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("SCR_")) {
        cmd.env_remove(k);
    }
    cmd.env("SCR_SYSTEM_CONFIG", "/dev/null");
    // what OpenMPI needs to run many ranks (as root) on a few cores, unless the caller
    // chose otherwise (e.g. OMPI_MCA_btl with tcp on a real cluster)
    for (k, v) in scr_e2e::local_mpi::openmpi_local_env() {
        if std::env::var_os(k).is_none() {
            cmd.env(k, v);
        }
    }
    let t0 = Instant::now();
    let out = cmd
        .output()
        .map_err(|e| format!("{} cannot run: {e}", args.mpiexec))?;
    let secs = t0.elapsed().as_secs_f64();
    let tail = |b: &[u8]| {
        let s = String::from_utf8_lossy(b);
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    };
    if !out.status.success() {
        return Err(format!(
            "the job of {n} ranks failed ({}) after {secs:.1} s{}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            out.status,
            if out.status.code() == Some(124) {
                format!(" (killed by --timeout {})", args.timeout)
            } else {
                String::new()
            },
            tail(&out.stdout),
            tail(&out.stderr)
        )
        .into());
    }
    let mut reports = Vec::with_capacity(n);
    for r in 0..n {
        let p = dir.join("reports").join(format!("rank_{r}.json"));
        let text = std::fs::read(&p).map_err(|e| {
            format!(
                "rank {r} of the {n}-rank job wrote no report ({}: {e})\n{}",
                p.display(),
                tail(&out.stderr)
            )
        })?;
        let v: Value =
            serde_json::from_slice(&text).map_err(|e| format!("{}: {e}", p.display()))?;
        if v["world_size"].as_u64() != Some(n as u64) {
            return Err(format!(
                "rank {r} of the {n}-rank job saw world size {} ({})",
                v["world_size"],
                p.display()
            )
            .into());
        }
        reports.push(v);
    }
    let mut checks = BTreeMap::new();
    for c in CHECKS {
        let ok = reports
            .iter()
            .filter(|v| v["checks"][c].as_str() == Some("ok"))
            .count();
        if ok != n {
            let bad: Vec<String> = reports
                .iter()
                .enumerate()
                .filter(|(_, v)| v["checks"][c].as_str() != Some("ok"))
                .map(|(r, v)| format!("rank {r}: {}", v["checks"][c]))
                .collect();
            return Err(format!(
                "{c} at {n} ranks: {} of {n} ranks did not read their file back byte for byte: {}",
                n - ok,
                bad.join("; ")
            )
            .into());
        }
        checks.insert(c.to_string(), ok);
    }
    let nodes = n.div_ceil(rpn);
    let mut rows = Vec::new();
    for step in STEPS {
        let mut per = Vec::with_capacity(n);
        let mut secs_max = 0.0f64;
        let mut calls: BTreeMap<String, (f64, f64)> = BTreeMap::new();
        for (r, v) in reports.iter().enumerate() {
            let m = v["steps"]
                .as_array()
                .and_then(|a| a.iter().find(|s| s["step"] == step))
                .ok_or_else(|| format!("rank {r} of the {n}-rank job did not report {step}"))?;
            per.push(PerRank::of(&m["calls"]));
            secs_max = secs_max.max(m["secs"].as_f64().unwrap_or(0.0));
            for (name, c) in m["calls"].as_object().into_iter().flatten() {
                let one = PerRank::of(&json!({ name.clone(): c }));
                let e = calls.entry(name.clone()).or_default();
                e.0 = e.0.max(one.bytes);
                e.1 = e.1.max(one.msgs + one.coll);
            }
        }
        let max = |f: fn(&PerRank) -> f64| per.iter().map(f).fold(0.0, f64::max);
        let mean = |f: fn(&PerRank) -> f64| per.iter().map(f).sum::<f64>() / n as f64;
        rows.push(Row {
            step: step.to_string(),
            ranks: n,
            nodes,
            msgs_max: max(|p| p.msgs),
            msgs_mean: mean(|p| p.msgs),
            coll_max: max(|p| p.coll),
            coll_mean: mean(|p| p.coll),
            bytes_max: max(|p| p.bytes),
            bytes_mean: mean(|p| p.bytes),
            ops_max: max(|p| p.msgs + p.coll),
            secs_max,
            calls,
        });
    }
    let dir = if args.keep { Some(tmp.keep()) } else { None };
    Ok(Job {
        ranks: n,
        nodes,
        rows,
        checks,
        secs,
        dir,
    })
}

// ---------------------------------------------------------------------------------------
// growth: fits and verdicts

/// The rank count extrapolated to.
const TARGET: f64 = 1e5;

#[derive(Clone, Copy, PartialEq, Debug)]
enum Verdict {
    Flat,
    Log,
    Linear,
    /// Fewer than two rank counts.
    Unknown,
}

impl Fit {
    /// The model the verdict extrapolates with, as a formula of P.
    fn formula(&self) -> String {
        match self.verdict {
            Verdict::Flat => format!("{:.0}", self.at_target),
            Verdict::Log => format!("{:.1} + {:.2}*log2(P)", self.log.0, self.log.1),
            Verdict::Linear => format!("{:.1} + {:.3}*P", self.linear.0, self.linear.1),
            Verdict::Unknown => "-".into(),
        }
    }
}

impl Verdict {
    fn text(self) -> &'static str {
        match self {
            Verdict::Flat => "flat",
            Verdict::Log => "~log P",
            Verdict::Linear => "grows with P",
            Verdict::Unknown => "-",
        }
    }
}

/// How one metric grows over the rank counts.
#[derive(Clone, Debug)]
struct Fit {
    first: f64,
    last: f64,
    verdict: Verdict,
    /// y = a + b log2 P.
    log: (f64, f64),
    /// y = a + c P.
    linear: (f64, f64),
    /// Extrapolated to [`TARGET`] ranks by the verdict's model.
    at_target: f64,
}

/// Least squares y = a + b x: (a, b, sum of squared residuals).
fn least_squares(x: &[f64], y: &[f64]) -> (f64, f64, f64) {
    let n = x.len() as f64;
    let (mx, my) = (x.iter().sum::<f64>() / n, y.iter().sum::<f64>() / n);
    let sxx: f64 = x.iter().map(|x| (x - mx) * (x - mx)).sum();
    let sxy: f64 = x.iter().zip(y).map(|(x, y)| (x - mx) * (y - my)).sum();
    let b = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    let a = my - b * mx;
    let ss = x.iter().zip(y).map(|(x, y)| (y - a - b * x).powi(2)).sum();
    (a, b, ss)
}

/// Fit `points` (rank count, value), sorted by rank count.
fn fit(points: &[(f64, f64)]) -> Fit {
    let p: Vec<f64> = points.iter().map(|q| q.0).collect();
    let y: Vec<f64> = points.iter().map(|q| q.1).collect();
    let (first, last) = (y[0], y[y.len() - 1]);
    let lg: Vec<f64> = p.iter().map(|p| p.log2()).collect();
    let (ga, gb, gss) = least_squares(&lg, &y);
    let (la, lc, lss) = least_squares(&p, &y);
    let mut f = Fit {
        first,
        last,
        verdict: Verdict::Unknown,
        log: (ga, gb),
        linear: (la, lc),
        at_target: last,
    };
    if points.len() < 2 {
        return f;
    }
    let (lo, hi) = y
        .iter()
        .fold((f64::INFINITY, 0.0f64), |(l, h), &v| (l.min(v), h.max(v)));
    let p_last = p[p.len() - 1];
    let scale = hi.max(1.0);
    if (gb <= 0.0 && lc <= 0.0)
        || ((hi - lo) <= 0.05 * scale && lc * (TARGET - p_last) <= 0.5 * scale)
    {
        // not growing: the largest value measured stands for every size
        f.verdict = Verdict::Flat;
        f.at_target = hi;
    } else if lss < 0.5 * gss {
        f.verdict = Verdict::Linear;
        f.at_target = la + lc * TARGET;
    } else {
        f.verdict = Verdict::Log;
        f.at_target = ga + gb * TARGET.log2();
    }
    f
}

/// Per step: (bytes fit, msgs+coll fit, growing calls).
type Growth = Vec<(String, Fit, Fit, Vec<String>)>;

fn growth(jobs: &[Job]) -> Growth {
    STEPS
        .iter()
        .enumerate()
        .map(|(i, step)| {
            let rows: Vec<&Row> = jobs.iter().map(|j| &j.rows[i]).collect();
            let pts = |f: &dyn Fn(&Row) -> f64| -> Vec<(f64, f64)> {
                rows.iter().map(|r| (r.ranks as f64, f(r))).collect()
            };
            let bytes = fit(&pts(&|r| r.bytes_max));
            let ops = fit(&pts(&|r| r.ops_max));
            let mut names: Vec<&String> = rows.iter().flat_map(|r| r.calls.keys()).collect();
            names.sort();
            names.dedup();
            let growing = names
                .into_iter()
                .filter(|name| {
                    let f = fit(&pts(&|r| r.calls.get(*name).map_or(0.0, |c| c.0)));
                    f.verdict == Verdict::Linear
                })
                .cloned()
                .collect();
            (step.to_string(), bytes, ops, growing)
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// output

fn print_tables(args: &Args, jobs: &[Job], growth: &Growth) {
    println!(
        "scr-bench-scale: XOR set size {}, {} bytes per rank, up to {} ranks per simulated node, under {}",
        args.set_size,
        args.bytes,
        args.ranks_per_node,
        args.dir.display()
    );
    for j in jobs {
        println!(
            "  {} ranks on {} nodes: job {:.1} s; every rank read its files back byte for byte after the rebuild and the fetch{}",
            j.ranks,
            j.nodes,
            j.secs,
            j.dir
                .as_ref()
                .map(|d| format!(" (kept: {})", d.display()))
                .unwrap_or_default()
        );
    }
    println!();
    println!(
        "{:<10} {:>5} {:>5} {:>9} {:>10} {:>8} {:>9} {:>11} {:>12} {:>10}",
        "step",
        "ranks",
        "nodes",
        "msgs max",
        "msgs mean",
        "coll max",
        "coll mean",
        "bytes max",
        "bytes mean",
        "time max s"
    );
    for (i, step) in STEPS.iter().enumerate() {
        for j in jobs {
            let r = &j.rows[i];
            println!(
                "{:<10} {:>5} {:>5} {:>9} {:>10.1} {:>8} {:>9.1} {:>11} {:>12.1} {:>10.3}",
                step,
                r.ranks,
                r.nodes,
                r.msgs_max,
                r.msgs_mean,
                r.coll_max,
                r.coll_mean,
                r.bytes_max,
                r.bytes_mean,
                r.secs_max
            );
        }
    }
    let (lo, hi) = (jobs[0].ranks, jobs[jobs.len() - 1].ranks);
    println!();
    println!("growth per rank from {lo} to {hi} ranks, extrapolated to 10^5 ranks:");
    println!(
        "{:<10} {:<9} {:>12} {:>12} {:>6}  {:<12} {:<26} {:>14}",
        "step",
        "metric",
        format!("at {lo}"),
        format!("at {hi}"),
        "ratio",
        "verdict",
        "fit (P = ranks)",
        "at 10^5"
    );
    for (step, bytes, ops, growing) in growth {
        for (metric, f) in [("bytes", bytes), ("msgs+coll", ops)] {
            println!(
                "{:<10} {:<9} {:>12} {:>12} {:>6}  {:<12} {:<26} {:>14.0}",
                step,
                metric,
                f.first,
                f.last,
                ratio(f),
                f.verdict.text(),
                f.formula(),
                f.at_target
            );
        }
        if !growing.is_empty() {
            println!("{:<10} growing: {}", "", growing.join(", "));
        }
    }
}

fn ratio(f: &Fit) -> String {
    if f.first > 0.0 {
        format!("{:.2}", f.last / f.first)
    } else if f.last == 0.0 {
        "1.00".into()
    } else {
        "inf".into()
    }
}

fn fit_json(f: &Fit) -> Value {
    json!({
        "first": f.first,
        "last": f.last,
        "ratio": if f.first > 0.0 { json!(f.last / f.first) } else { Value::Null },
        "verdict": f.verdict.text(),
        "log2_fit": {"a": f.log.0, "b": f.log.1},
        "linear_fit": {"a": f.linear.0, "c": f.linear.1},
        "at_1e5": f.at_target,
    })
}

fn as_json(args: &Args, jobs: &[Job], growth: &Growth) -> Value {
    json!({
        "set_size": args.set_size,
        "bytes": args.bytes,
        "ranks_per_node": args.ranks_per_node,
        "jobs": jobs.iter().map(|j| json!({
            "ranks": j.ranks,
            "nodes": j.nodes,
            "secs": j.secs,
            "checks": j.checks,
            "dir": j.dir,
        })).collect::<Vec<_>>(),
        "rows": jobs.iter().flat_map(|j| j.rows.iter()).map(|r| json!({
            "step": r.step,
            "ranks": r.ranks,
            "nodes": r.nodes,
            "msgs_max": r.msgs_max,
            "msgs_mean": r.msgs_mean,
            "coll_max": r.coll_max,
            "coll_mean": r.coll_mean,
            "bytes_max": r.bytes_max,
            "bytes_mean": r.bytes_mean,
            "ops_max": r.ops_max,
            "secs_max": r.secs_max,
            "calls": r.calls.iter().map(|(n, (b, o))| (n.clone(), json!({"bytes_max": b, "ops_max": o}))).collect::<serde_json::Map<_, _>>(),
        })).collect::<Vec<_>>(),
        "growth": growth.iter().map(|(step, b, o, g)| json!({
            "step": step,
            "bytes": fit_json(b),
            "msgs_coll": fit_json(o),
            "growing_calls": g,
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pts(f: impl Fn(f64) -> f64) -> Vec<(f64, f64)> {
        [4.0, 16.0, 64.0, 128.0]
            .iter()
            .map(|&p| (p, f(p)))
            .collect()
    }

    #[test]
    fn constant_counts_are_flat() {
        let f = fit(&pts(|_| 1234.0));
        assert_eq!(f.verdict, Verdict::Flat);
        assert_eq!(f.at_target, 1234.0);
        assert_eq!(fit(&pts(|_| 0.0)).verdict, Verdict::Flat);
    }

    #[test]
    fn a_linear_term_under_a_large_constant_still_grows_with_p() {
        // 1,000 + P: within 13% over 4..128, but 101,000 at 10^5
        let f = fit(&pts(|p| 1000.0 + p));
        assert_eq!(f.verdict, Verdict::Linear);
        assert!((f.at_target - 101_000.0).abs() < 1e-6, "{f:?}");
    }

    #[test]
    fn log_growth_is_told_from_linear() {
        let f = fit(&pts(|p| 100.0 + 10.0 * p.log2()));
        assert_eq!(f.verdict, Verdict::Log);
        let want = 100.0 + 10.0 * 1e5f64.log2();
        assert!((f.at_target - want).abs() < 1e-6, "{f:?}");
        assert!((f.log.1 - 10.0).abs() < 1e-9);
    }

    #[test]
    fn shrinking_counts_are_flat_at_their_largest() {
        let f = fit(&pts(|p| 1000.0 / p));
        assert_eq!(f.verdict, Verdict::Flat);
        assert_eq!(f.at_target, 250.0);
    }

    #[test]
    fn one_rank_count_has_no_verdict() {
        assert_eq!(fit(&[(4.0, 10.0)]).verdict, Verdict::Unknown);
    }

    #[test]
    fn nodes_span_a_set() {
        assert_eq!(ranks_per_node(4, 4, 4), 1);
        assert_eq!(ranks_per_node(8, 4, 4), 2);
        assert_eq!(ranks_per_node(64, 4, 4), 4);
        assert_eq!(ranks_per_node(4, 4, 8), 1);
        assert_eq!(node_of(5, 2), "n2");
    }

    #[test]
    fn every_rank_writes_different_content() {
        assert_ne!(content(0, 64, 1), content(1, 64, 1));
        assert_ne!(content(0, 64, 1), content(0, 64, 2));
        assert_eq!(content(3, 64, 1), content(3, 64, 1));
    }
}
