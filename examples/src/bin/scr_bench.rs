//! `scr-bench`: the checkpoint loop and the rebuild of a lost node, for each redundancy
//! scheme, as ratios to the physical limits measured in the same run between the same
//! ranks.
//!
//! Every rank is a simulated node of its own (`node_names`), the cache and the control
//! directory are node-local directories under `--dir` (default /dev/shm), and for each
//! scheme and size per rank the benchmark runs, `--reps` times:
//!
//! 1. the loop: per rank write SIZE bytes into the routed file `ckpt.<t>/rank_<r>.ckpt`
//!    (one write, fsync, close), `complete_output`; one untimed checkpoint, then
//!    `--checkpoints` timed ones; aggregate MiB/s = the sum over ranks of each rank's
//!    MiB written / its loop seconds;
//! 2. the rebuild: finalize, delete one node's cache and control directories, and time the
//!    next init (which rebuilds the lost member's files) on the slowest rank; then every
//!    rank reads its newest checkpoint back and compares it byte for byte.
//!
//! In the same repetition, between the same ranks, it measures the physical limits: the
//! same loop with plain files and no library (write + fsync into the same node-local
//! cache, keeping as many checkpoints as the library's `cache_size`), and the MPI
//! sendrecv bandwidth of a ring where every rank sends SIZE bytes to its right
//! neighbour while receiving as much from its left one (pieces of `mpi_buf_size`; the
//! fastest of three rings, since a limit is what the ranks can reach).
//!
//! Run: `mpiexec -n 4 target/release/scr-bench` (see `--help` for the columns).

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Parser;
use scr_api::mpi::collective::SystemOperation;
use scr_api::mpi::topology::SimpleCommunicator;
use scr_api::mpi::traits::{Communicator, CommunicatorCollectives, Root};
use scr_api::{mpi, Flags, Scr, Settings};
use scr_examples::{slowest, BenchConfig, Spread};
use scr_host::config::settings;

const COLUMNS: &str = "\
Columns of the table (one row per scheme, size per rank and operation):
  scheme      the redundancy scheme (copy_type); set size --set-size, RS with
              set_failures = --set-failures
  MiB/rank    bytes each rank writes per checkpoint
  op          ckpt: the checkpoint loop; rebuild: the init after one node was lost
  MiB/s       ckpt: aggregate rate of the loop (sum over ranks of MiB / loop seconds);
              rebuild: the lost member's bytes (every cached dataset) / init seconds;
              median of --reps repetitions, [min-max] below it in the detail lines
  x plain     ckpt: MiB/s / the plain loop's MiB/s in the same repetition (median of
              the per-repetition ratios; 1.00 = as fast as writing without scr-rs)
  x limit     ckpt: MiB/s / the write + exchange limit's MiB/s, where the limit's time
              per checkpoint = plain loop time x (SIZE + redundancy bytes) / SIZE
              + exchange time; rebuild: exchange time / init time.
              The exchange time = the bytes one rank must send plus receive, divided by
              the per-rank traffic of the ring sendrecv measured in the same repetition
              (2 x SIZE per ring time, the fastest of three rings); the formulas are
              printed above the table.
              1.00 = at the physical limit; higher is better for every ratio
  x work      the same against the limit that also counts the reads the data needs:
              ckpt: + one read of B (with crc_on_copy: read + CRC32, which every
              scheme needs; without: the plain read XOR, PARTNER and RS make to send
              or encode B, none for SINGLE), measured in the same repetition; for
              SINGLE with crc_on_copy: the plain loop reading each file back for its
              CRC32 right after its fsync, measured as such;
              rebuild: exchange + verify (crc_on_restart reads the survivors' files)
              + rewrite (the lost bytes at the plain loop's write rate) / init time
  limited by  where the time above the limit went, from the loop's phases per checkpoint:
              `at limit` (x limit >= 0.9), `read <ms>` (x work >= 0.9: the read of B
              is what the write + exchange limit leaves out), else the larger of
              `write` (start_output + route_file + write + fsync above the plain write)
              and `complete` (complete_output above exchange + redundancy write +
              read); rebuild: the largest of exchange, verify, rewrite and other
  notes       RS / XOR: RS's loop time over XOR's per repetition, next to the ratio of
              their work limits (what RS must do over what XOR must do)

The same loop from a C application through libscr and scr.h: scr-bench-c (run it
without mpiexec: it compiles examples/c/test_api.c and launches its own jobs).";

#[derive(Parser)]
#[command(
    name = "scr-bench",
    version,
    about = "Checkpoint loop and rebuild of every scheme against plain writes and the MPI exchange limit",
    after_help = COLUMNS
)]
struct Args {
    /// MiB written per rank per checkpoint (one row each).
    #[arg(long, num_args = 1.., default_values_t = [16usize, 64, 256])]
    mib: Vec<usize>,
    /// Schemes measured (copy_type values).
    #[arg(long, num_args = 1.., default_values = ["SINGLE", "PARTNER", "XOR", "RS"])]
    schemes: Vec<String>,
    /// Timed checkpoints per loop (after one untimed).
    #[arg(long, default_value_t = 5)]
    checkpoints: usize,
    /// Repetitions of every measurement (medians reported, with min and max).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Members per redundancy set (set_size).
    #[arg(long, default_value_t = 4)]
    set_size: u32,
    /// Losses per set RS tolerates (set_failures).
    #[arg(long, default_value_t = 2)]
    set_failures: u32,
    /// CRC32 of every file at complete_output (crc_on_copy).
    #[arg(long, value_enum, default_value_t = Crc::On)]
    crc: Crc,
    /// Where the node-local caches, control directories and prefixes are made.
    #[arg(long, default_value = "/dev/shm")]
    dir: PathBuf,
    /// The prefix directory (the parallel file system's stand-in); default: under --dir.
    #[arg(long)]
    prefix: Option<PathBuf>,
    /// The rank whose node is lost before the rebuild.
    #[arg(long, default_value_t = 1)]
    lose: i32,
    /// Skip the rebuild.
    #[arg(long)]
    no_rebuild: bool,
    /// More configuration for the library runs (KEY=VALUE, as SCR_Config takes it),
    /// e.g. --set file_buf_size=32MiB --set cache_size=1.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Print the results as JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// Seconds every rank sleeps after each checkpoint, the application computing
    /// between checkpoints (test_api's third argument; a sleep, as there, leaves the
    /// cores idle). test_api times its loop with the sleeps in it; here the same loop is
    /// timed and the seconds slept are taken out, so MiB/s are of the checkpoint time
    /// alone, plain loop included.
    #[arg(long, default_value_t = 0.0)]
    sleep: f64,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Crc {
    On,
    Off,
}

type Error = Box<dyn std::error::Error>;

/// What one scheme must move and write, per rank and per dataset, as multiples of SIZE.
struct Cost {
    /// Redundancy bytes a member writes at apply.
    redundancy: f64,
    /// Bytes of its own checkpoint a member must read back at apply to send or encode
    /// them (without a CRC32: with `crc_on_copy` every scheme reads them once anyway).
    reads: f64,
    /// Bytes one rank sends plus receives at apply, in units of 2 x SIZE (one ring step).
    apply: f64,
    /// The same for the rebuild of one lost member (the busiest rank).
    rebuild: Option<f64>,
    /// The formulas, for the output.
    text: String,
}

fn cost(scheme: &str, p: u32, k: u32, replicas: u32) -> Cost {
    let (p, k, r) = (p as f64, k as f64, replicas as f64);
    match scheme {
        "SINGLE" => Cost {
            redundancy: 0.0,
            reads: 0.0,
            apply: 0.0,
            rebuild: None,
            text: "SINGLE: nothing exchanged; no rebuild (no redundancy: a lost node's files are gone)".into(),
        },
        "PARTNER" => Cost {
            redundancy: r,
            reads: 1.0,
            apply: r,
            rebuild: Some(1.0),
            text: format!(
                "PARTNER (replicas {replicas}): apply reads B, sends and receives {replicas} x B, writes {replicas} x B; \
                 rebuild: the lost member receives its own B and the B it held = 2B"
            ),
        },
        "XOR" => Cost {
            redundancy: 1.0 / (p - 1.0),
            reads: 1.0,
            apply: 1.0,
            rebuild: Some(p / (p - 1.0)),
            text: format!(
                "XOR (p={p}): apply reads B; ring reduce-scatter, p-1 steps of B/(p-1) each way = B sent + B received, \
                 writes B/(p-1); rebuild = chain reduction of p chunks of B/(p-1) into the lost member = \
                 p/(p-1) x (B sent + B received) on the busiest rank"
            ),
        },
        "RS" => Cost {
            redundancy: k / (p - k),
            reads: 1.0,
            apply: k,
            rebuild: Some(1.5 * (p - 1.0) / (p - k)),
            text: format!(
                "RS (p={p}, k={k}): apply reads B; p-k steps x k sends (and k receives) of B/(p-k) = k x B each way, \
                 writes k x B/(p-k); rebuild (one lost) = p-1 reduction steps of B/(p-k) each way \
                 + gather of p-1 chunks of B/(p-k) into the lost member = 3(p-1)/(p-k) x B on it"
            ),
        },
        other => Cost {
            redundancy: 0.0,
            reads: 0.0,
            apply: 0.0,
            rebuild: None,
            text: format!("{other}: no formula known; limits assume nothing is exchanged"),
        },
    }
}

/// One repetition of the baselines for one size.
#[derive(Default, Clone)]
struct Baseline {
    /// Aggregate MiB/s of the plain loop.
    plain_rate: f64,
    /// Seconds for every rank to send SIZE to its right neighbour and receive SIZE from
    /// its left (slowest rank).
    ring: f64,
    /// Seconds to read a SIZE file back and compute its CRC32 (slowest rank).
    crc: f64,
    /// Seconds to read a SIZE file back without a CRC32 (slowest rank).
    read: f64,
    /// Aggregate MiB/s of the plain loop with each file's CRC32 read right after it is
    /// written, and read by a thread during the next write (zeros: not measured).
    crc_loops: [f64; 2],
    /// The plain loop's MiB read, MiB written and minor faults per checkpoint and rank.
    work: [f64; 3],
}

/// One repetition of a scheme at one size.
#[derive(Default, Clone)]
struct Run {
    rate: f64,
    /// Mean seconds per checkpoint over ranks: start_output .. fsync, and complete_output.
    write: f64,
    complete: f64,
    /// Slowest rank's init seconds after the loss, and the datasets it restored.
    rebuild: Option<(f64, usize)>,
    /// MiB read and MiB written through system calls by all ranks together during that
    /// init: load-independent counts of the rebuild's data passes.
    rebuild_io: [f64; 2],
    /// MiB read, MiB written and minor faults per checkpoint and rank.
    work: [f64; 3],
}

/// Everything measured for one size.
struct Row {
    scheme: String,
    mib: usize,
    runs: Vec<Run>,
    unavailable: Option<String>,
}

fn main() {
    let args = Args::parse();
    let universe = mpi::initialize().expect("MPI initialises");
    let world = universe.world();
    let mut job = std::process::id();
    world.process_at_rank(0).broadcast_into(&mut job);
    let root = args.dir.join(format!("scr-bench.{job}"));
    if let Err(e) = run(&args, &world, &root) {
        // every rank says why: an error may be one rank's alone (mpiexec then ends the job)
        scr_examples::say!("scr-bench: rank {}: {e}", world.rank());
        // every rank sweeps what it can reach (ranks on one node race here, harmlessly)
        let _ = std::fs::remove_dir_all(&root);
        std::process::exit(1);
    }
}

fn run(args: &Args, world: &SimpleCommunicator, root: &Path) -> Result<(), Error> {
    let (rank, ranks) = (world.rank(), world.size());
    if (ranks as u32) < args.set_size {
        return Err(format!(
            "{ranks} rank(s) cannot fill a set of {}: run under mpiexec -n {} (or more), \
             one simulated node per rank",
            args.set_size, args.set_size
        )
        .into());
    }
    if args.reps == 0 || args.checkpoints == 0 {
        return Err("--reps and --checkpoints must be at least 1".into());
    }
    if !(args.sleep.is_finite() && args.sleep >= 0.0) {
        return Err(format!("--sleep {} is not a number of seconds >= 0", args.sleep).into());
    }
    if args.lose < 0 || args.lose >= ranks {
        return Err(format!("--lose {} is not a rank of this job of {ranks}", args.lose).into());
    }
    let node = format!("node{rank}");
    let nodes: Vec<String> = (0..ranks).map(|r| format!("node{r}")).collect();

    // the configuration the library runs will have (for cache_size and buffer sizes)
    let base = settings(args, root, &nodes, "SINGLE", "probe", &root.join("prefix"))?;
    let config = base.loader().load().map_err(|e| e.to_string())?;
    let keep = config.get(settings::CACHE_SIZE).max(1) as usize;
    let piece = config.get(settings::MPI_BUF_SIZE).max(4096) as usize;
    let file_buf = config.file_buf_size();
    let replicas = config.get(settings::REPLICAS) as u32;
    if rank == 0 && !args.json {
        let overridden: Vec<String> = std::env::vars()
            .map(|(k, _)| k)
            // (the system file ranks below this benchmark's settings)
            .filter(|k| k.starts_with("SCR_") && k != "SCR_SYSTEM_CONFIG")
            .collect();
        if !overridden.is_empty() {
            println!(
                "note: the environment sets {} (environment variables win over this benchmark's settings)",
                overridden.join(", ")
            );
        }
        println!(
            "{ranks} ranks on {ranks} simulated nodes, cache {}, set size {}, RS k = {}, crc_on_copy {}, \
             cache_size {keep}, file_buf_size {} KiB, mpi_buf_size {} KiB, {} timed checkpoints, {} reps{}",
            args.dir.display(),
            args.set_size,
            args.set_failures,
            if args.crc == Crc::On { "on" } else { "off" },
            file_buf >> 10,
            piece >> 10,
            args.checkpoints,
            args.reps,
            if args.sleep > 0.0 {
                format!(
                    ", {} s asleep after each checkpoint (taken out of the loop times)",
                    args.sleep
                )
            } else {
                String::new()
            }
        );
        println!("bytes each scheme must move per rank and dataset (B = MiB/rank):");
        for s in &args.schemes {
            println!(
                "  {}",
                cost(s, args.set_size, args.set_failures, replicas).text
            );
        }
    }

    let mut baselines: Vec<Vec<Baseline>> = Vec::new();
    let mut rows: Vec<Row> = Vec::new();
    let mut unavailable: std::collections::BTreeMap<String, String> = Default::default();
    for &mib in &args.mib {
        let bytes = mib << 20;
        let data: Vec<u8> = (0..bytes)
            .map(|i| {
                (i as u32)
                    .wrapping_mul(2_654_435_761)
                    .wrapping_add(rank as u32) as u8
            })
            .collect();
        let mut recv = vec![0u8; bytes];
        let mut base_reps = Vec::new();
        let mut size_rows: Vec<Row> = args
            .schemes
            .iter()
            .map(|s| Row {
                scheme: s.clone(),
                mib,
                runs: Vec::new(),
                unavailable: unavailable.get(s).cloned(),
            })
            .collect();
        for rep in 0..args.reps {
            // alternate: even repetitions measure the baselines first, odd ones last
            let mut order: Vec<Option<usize>> = std::iter::once(None)
                .chain((0..size_rows.len()).map(Some))
                .collect();
            if rep % 2 == 1 {
                order.reverse();
            }
            for what in order {
                match what {
                    None => {
                        let plain_dir = root.join("plain").join(&node);
                        let (plain_rate, work) = plain_loop(
                            world,
                            &plain_dir,
                            &data,
                            args,
                            (keep, file_buf),
                            mib,
                            PlainCrc::None,
                        )?;
                        let last = plain_dir
                            .join(format!("ckpt.{}", args.checkpoints))
                            .join(format!("rank_{rank}.ckpt"));
                        let read = reread(world, &last, file_buf, false)?;
                        let crc = reread(world, &last, file_buf, true)?;
                        let _ = std::fs::remove_dir_all(&plain_dir);
                        // SINGLE's CRC32 read, in the application's loop and behind it
                        let mut crc_loops = [0.0; 2];
                        if args.crc == Crc::On && args.schemes.iter().any(|s| s == "SINGLE") {
                            for (i, how) in [PlainCrc::Foreground, PlainCrc::Background]
                                .into_iter()
                                .enumerate()
                            {
                                crc_loops[i] = plain_loop(
                                    world,
                                    &plain_dir,
                                    &data,
                                    args,
                                    (keep, file_buf),
                                    mib,
                                    how,
                                )?
                                .0;
                                let _ = std::fs::remove_dir_all(&plain_dir);
                            }
                        }
                        // the limit is what the ranks can do: the fastest of three rings
                        let ring = (0..3)
                            .map(|_| ring_time(world, &data, &mut recv, piece))
                            .fold(f64::INFINITY, f64::min);
                        base_reps.push(Baseline {
                            plain_rate,
                            ring,
                            crc,
                            read,
                            crc_loops,
                            work,
                        });
                    }
                    Some(i) => {
                        let row = &mut size_rows[i];
                        if row.unavailable.is_some() {
                            continue;
                        }
                        let job_id = format!("{}-{mib}-{rep}", row.scheme.to_lowercase());
                        match scheme_run(args, world, root, &nodes, &row.scheme, &job_id, &data) {
                            Ok(r) => row.runs.push(r),
                            Err(RunError::Unavailable(why)) => {
                                unavailable.insert(row.scheme.clone(), why.clone());
                                row.unavailable = Some(why);
                            }
                            Err(RunError::Failed(e)) => return Err(e),
                        }
                        cleanup(world, root, &node, &job_id);
                    }
                }
            }
        }
        baselines.push(base_reps);
        rows.extend(size_rows);
    }
    world.barrier();
    if rank == 0 {
        let _ = std::fs::remove_dir_all(root);
        report(args, ranks as usize, replicas, &args.mib, &baselines, &rows);
    }
    Ok(())
}

/// The library settings of one run.
fn settings(
    args: &Args,
    root: &Path,
    nodes: &[String],
    scheme: &str,
    job_id: &str,
    prefix: &Path,
) -> Result<Settings, Error> {
    let mut s = Settings::new();
    let config = BenchConfig {
        scheme,
        set_size: args.set_size,
        set_failures: args.set_failures,
        nodes,
        root,
        prefix,
        job_id,
        crc: args.crc == Crc::On,
    };
    for (k, v) in config.pairs() {
        s.set(&format!("{k}={v}"))?;
    }
    for kv in &args.set {
        s.set(kv)?;
    }
    Ok(s)
}

enum RunError {
    /// The scheme could not be instantiated (init failed on every rank alike).
    Unavailable(String),
    Failed(Error),
}

impl<E: Into<Error>> From<E> for RunError {
    fn from(e: E) -> Self {
        RunError::Failed(e.into())
    }
}

/// The loop and the rebuild of one scheme (collective).
fn scheme_run(
    args: &Args,
    world: &SimpleCommunicator,
    root: &Path,
    nodes: &[String],
    scheme: &str,
    job_id: &str,
    data: &[u8],
) -> Result<Run, RunError> {
    let rank = world.rank();
    let prefix = args
        .prefix
        .clone()
        .unwrap_or_else(|| root.join("prefix"))
        .join(job_id);
    let s = settings(args, root, nodes, scheme, job_id, &prefix)?;
    let mut scr = match Scr::init_with(world, &s) {
        Ok(scr) => scr,
        // init agrees its outcome: every rank is here with the same error
        Err(e) => return Err(RunError::Unavailable(e.to_string())),
    };
    // names inside the prefix, where the application's files belong
    let file = |t: usize| prefix.join(format!("ckpt.{t}/rank_{rank}.ckpt"));
    let (mut write, mut complete) = (0.0, 0.0);
    let mut started = Instant::now();
    let mut before = counters();
    let mut slept = 0.0;
    for t in 0..=args.checkpoints {
        if t == 1 {
            world.barrier();
            started = Instant::now();
            before = counters();
            (write, complete, slept) = (0.0, 0.0, 0.0);
        }
        let t0 = Instant::now();
        scr.start_output(&format!("ckpt.{t}"), Flags::CHECKPOINT)?;
        // a failure on one rank is reported through complete_output (collective), never
        // by returning early while the other ranks wait in it
        let written = match scr.route_file(file(t)) {
            Ok(path) => write_file(&path, data).map_err(|e| format!("{}: {e}", path.display())),
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = &written {
            scr_examples::say!("scr-bench: rank {rank}: {e}");
        }
        let t1 = Instant::now();
        let kept = scr.complete_output(written.is_ok())?;
        complete += t1.elapsed().as_secs_f64();
        write += (t1 - t0).as_secs_f64();
        if !kept {
            return Err(format!("{scheme}: checkpoint ckpt.{t} was not kept").into());
        }
        slept += compute(args.sleep);
    }
    let secs = started.elapsed().as_secs_f64() - slept;
    let io = work(world, before, args.checkpoints);
    let n = args.checkpoints as f64;
    let mib = (data.len() >> 20) as f64;
    let rate = sum(world, n * mib / secs);
    let per_rank = |v: f64| sum(world, v / n) / world.size() as f64;
    let (write, complete) = (per_rank(write), per_rank(complete));
    let cached = args
        .checkpoints
        .min(scr.runtime().config().get(settings::CACHE_SIZE).max(1) as usize - 1)
        + 1;
    scr.finalize()?;

    let mut rebuild = None;
    let mut rebuild_io = [0.0; 2];
    if scheme != "SINGLE" && !args.no_rebuild {
        world.barrier();
        if rank == args.lose {
            for base in ["cache", "cntl"] {
                let d = root.join(base).join(&nodes[rank as usize]);
                std::fs::remove_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
            }
        }
        world.barrier();
        let io_before = counters();
        let t0 = Instant::now();
        let mut scr = Scr::init_with(world, &s)?;
        let init = slowest(world, t0.elapsed().as_secs_f64());
        let io_after = counters();
        rebuild_io = [0, 1].map(|i| sum(world, (io_after[i] - io_before[i]) / 1048576.0));
        let newest = format!("ckpt.{}", args.checkpoints);
        let offered = scr.have_restart();
        if offered.as_deref() != Some(newest.as_str()) {
            return Err(format!(
                "{scheme}: after losing node{} the restart offers {offered:?}, not {newest} \
                 (lost datasets: {:?})",
                args.lose,
                scr.lost_datasets()
            )
            .into());
        }
        scr.start_restart()?;
        // (as above: a rank that cannot read its file says so through complete_restart)
        let same = match scr.route_file(file(args.checkpoints)) {
            Ok(path) => match std::fs::read(&path) {
                Ok(b) if b == data => Ok(()),
                Ok(_) => Err(format!("{} differs from what was written", path.display())),
                Err(e) => Err(format!("{}: {e}", path.display())),
            },
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = &same {
            scr_examples::say!("scr-bench: rank {rank}: {e}");
        }
        let same = same.is_ok();
        let all_same = scr.complete_restart(same)?;
        let lost = scr.lost_datasets().to_vec();
        scr.finalize()?;
        if !all_same || !lost.is_empty() {
            return Err(format!(
                "{scheme}: the restart after losing node{} did not give back every file byte for byte \
                 (lost datasets: {lost:?})",
                args.lose
            )
            .into());
        }
        rebuild = Some((init, cached));
    }
    Ok(Run {
        rate,
        write,
        complete,
        rebuild,
        rebuild_io,
        work: io,
    })
}

/// Remove one run's node-local directories (every rank its own node) and its prefix.
fn cleanup(world: &SimpleCommunicator, root: &Path, node: &str, job_id: &str) {
    world.barrier();
    for base in ["cache", "cntl"] {
        let _ = std::fs::remove_dir_all(root.join(base).join(node));
    }
    if world.rank() == 0 {
        let _ = std::fs::remove_dir_all(root.join("prefix").join(job_id));
    }
    world.barrier();
}

/// test_api's write: create (mode 0600) or truncate, one write, fsync, close.
fn write_file(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(data)?;
    f.sync_all()
}

/// How the plain loop treats the CRC32 of each file it wrote.
#[derive(Clone, Copy, PartialEq)]
enum PlainCrc {
    /// No CRC32: the baseline.
    None,
    /// Read back and hashed right after its fsync, before the next checkpoint.
    Foreground,
    /// Read back and hashed by a thread while the next checkpoint is written (joined
    /// before the one after): what hiding the CRC32 behind the application would gain.
    Background,
}

/// The loop without the library: the same files into the same node-local file system,
/// the directory of checkpoint t - `keep` removed after checkpoint t (the footprint of
/// the library's cache_size). Returns the aggregate MiB/s (collective).
fn plain_loop(
    world: &SimpleCommunicator,
    dir: &Path,
    data: &[u8],
    args: &Args,
    (keep, buf): (usize, usize),
    mib: usize,
    crc: PlainCrc,
) -> Result<(f64, [f64; 3]), Error> {
    let rank = world.rank();
    let file = |t: usize| {
        dir.join(format!("ckpt.{t}"))
            .join(format!("rank_{rank}.ckpt"))
    };
    let hash = move |path: PathBuf| -> std::io::Result<u32> {
        let mut b = vec![0u8; buf];
        let mut h = crc32fast::Hasher::new();
        let mut f = std::fs::File::open(path)?;
        loop {
            let n = f.read(&mut b)?;
            if n == 0 {
                return Ok(h.finalize());
            }
            h.update(&b[..n]);
        }
    };
    let mut pending: Option<std::thread::JoinHandle<std::io::Result<u32>>> = None;
    let mut one = |t: usize| -> std::io::Result<()> {
        std::fs::create_dir_all(file(t).parent().expect("a directory"))?;
        write_file(&file(t), data)?;
        // the background hash of checkpoint t-1 ran during this write; it must end before
        // its directory can be evicted
        if let Some(h) = pending.take() {
            h.join().expect("the hashing thread does not panic")?;
        }
        match crc {
            PlainCrc::None => {}
            PlainCrc::Foreground => {
                std::hint::black_box(hash(file(t))?);
            }
            PlainCrc::Background => {
                let path = file(t);
                pending = Some(std::thread::spawn(move || hash(path)));
            }
        }
        if t >= keep {
            std::fs::remove_dir_all(dir.join(format!("ckpt.{}", t - keep)))?;
        }
        Ok(())
    };
    let mut slept = 0.0;
    let mut result = one(0);
    compute(args.sleep);
    world.barrier();
    let started = Instant::now();
    let before = counters();
    for t in 1..=args.checkpoints {
        result = result.and_then(|()| one(t));
        slept += compute(args.sleep);
    }
    if let Some(h) = pending.take() {
        result = result.and(
            h.join()
                .expect("the hashing thread does not panic")
                .map(drop),
        );
    }
    let secs = started.elapsed().as_secs_f64() - slept;
    let io = work(world, before, args.checkpoints);
    let mut ok = 0u8;
    world.all_reduce_into(&u8::from(result.is_ok()), &mut ok, SystemOperation::min());
    if ok == 0 {
        return Err(format!(
            "the plain loop failed{}",
            result
                .err()
                .map(|e| format!(" on rank {rank} in {}: {e}", dir.display()))
                .unwrap_or_else(|| " on another rank".into())
        )
        .into());
    }
    Ok((sum(world, (args.checkpoints * mib) as f64 / secs), io))
}

/// The application's computation between checkpoints: sleep `seconds` (as test_api
/// does); the seconds actually slept.
fn compute(seconds: f64) -> f64 {
    if seconds <= 0.0 {
        return 0.0;
    }
    let t = Instant::now();
    std::thread::sleep(std::time::Duration::from_secs_f64(seconds));
    t.elapsed().as_secs_f64()
}

/// Slowest rank's seconds to read `path` in `buf`-sized pieces (and compute its CRC32
/// when `crc`).
fn reread(world: &SimpleCommunicator, path: &Path, buf: usize, crc32: bool) -> Result<f64, Error> {
    let mut b = vec![0u8; buf];
    world.barrier();
    let t = Instant::now();
    let mut crc = crc32fast::Hasher::new();
    let read = std::fs::File::open(path).and_then(|mut f| loop {
        let n = f.read(&mut b)?;
        if n == 0 {
            break Ok(());
        }
        if crc32 {
            crc.update(&b[..n]);
        } else {
            std::hint::black_box(&b[..n]);
        }
    });
    std::hint::black_box(crc.finalize());
    let secs = slowest(world, t.elapsed().as_secs_f64());
    let mut ok = 0u8;
    world.all_reduce_into(&u8::from(read.is_ok()), &mut ok, SystemOperation::min());
    if ok == 0 {
        return Err(format!("reading back the plain files failed ({})", path.display()).into());
    }
    Ok(secs)
}

/// Slowest rank's seconds for a ring exchange: every rank sends `data` to its right
/// neighbour and receives as much from its left one, in `piece`-byte messages.
fn ring_time(world: &SimpleCommunicator, data: &[u8], recv: &mut [u8], piece: usize) -> f64 {
    let (rank, n) = (world.rank(), world.size());
    let right = world.process_at_rank((rank + 1) % n);
    let left = world.process_at_rank((rank + n - 1) % n);
    world.barrier();
    let t = Instant::now();
    for (out, into) in data.chunks(piece).zip(recv.chunks_mut(piece)) {
        mpi::point_to_point::send_receive_into(out, &right, into, &left);
    }
    slowest(world, t.elapsed().as_secs_f64())
}

/// This process's bytes read and written through system calls and its minor page faults
/// so far (`/proc/self/io`, `/proc/self/stat`; zeros where unavailable): counts that do not
/// depend on the machine's load, to compare the work per MiB between sizes.
fn counters() -> [f64; 3] {
    let io = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    let field = |name: &str| {
        io.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // minflt is the 10th field; the command name (2nd) ends with the last ')'
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let minflt = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(7))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0);
    [field("rchar:"), field("wchar:"), minflt]
}

/// Per rank and checkpoint: MiB read, MiB written, minor faults, between two [`counters`]
/// snapshots, averaged over ranks (collective).
fn work(world: &SimpleCommunicator, before: [f64; 3], checkpoints: usize) -> [f64; 3] {
    let after = counters();
    let per = |i: usize, scale: f64| {
        sum(world, (after[i] - before[i]) / scale / checkpoints as f64) / world.size() as f64
    };
    [per(0, 1048576.0), per(1, 1048576.0), per(2, 1.0)]
}

/// Sum of `v` over ranks.
fn sum(world: &SimpleCommunicator, v: f64) -> f64 {
    let mut out = 0.0f64;
    world.all_reduce_into(&v, &mut out, SystemOperation::sum());
    out
}

/// One printed (or JSON) row.
struct Line {
    scheme: String,
    mib: usize,
    op: &'static str,
    /// `None`: the scheme was unavailable.
    rate: Option<Spread>,
    vs_plain: Option<Spread>,
    vs_limit: Option<Spread>,
    /// Against the limit that also counts the reads the scheme must make.
    vs_work: Option<Spread>,
    limited_by: String,
    detail: String,
}

/// The work counters per checkpoint and rank, per MiB of the checkpoint.
fn show_work(w: [f64; 3], mib: usize) -> String {
    let m = mib as f64;
    format!(
        "per MiB of checkpoint: {:.2} MiB read, {:.2} MiB written, {:.0} minor faults",
        w[0] / m,
        w[1] / m,
        w[2] / m
    )
}

fn report(
    args: &Args,
    ranks: usize,
    replicas: u32,
    sizes: &[usize],
    baselines: &[Vec<Baseline>],
    rows: &[Row],
) {
    let mut lines: Vec<Line> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    for (si, &mib) in sizes.iter().enumerate() {
        let base = &baselines[si];
        let b = (mib << 20) as f64;
        let plain = Spread::of(base.iter().map(|x| x.plain_rate));
        let ring = Spread::of(base.iter().map(|x| 2.0 * b / x.ring / 1e6));
        let crc = Spread::of(base.iter().map(|x| x.crc));
        let read = Spread::of(base.iter().map(|x| x.read));
        lines.push(Line {
            scheme: "plain".into(),
            mib,
            op: "ckpt",
            rate: Some(plain.clone()),
            vs_plain: None,
            vs_limit: None,
            vs_work: None,
            limited_by: "(baseline)".into(),
            detail: format!(
                "plain loop {} MiB/s; ring sendrecv {} MB/s per rank (sent + received); \
                 read of B {:.3} s, with its CRC32 {:.3} s; {}",
                plain.show(0),
                ring.show(0),
                read.median,
                crc.median,
                show_work(base[0].work, mib)
            ),
        });
        // per scheme: (loop seconds, work-limit seconds) per repetition, for the RS / XOR note
        let mut times: Vec<(&str, Vec<(f64, f64)>)> = Vec::new();
        for row in rows.iter().filter(|r| r.mib == mib) {
            if let Some(why) = &row.unavailable {
                lines.push(Line {
                    scheme: row.scheme.clone(),
                    mib,
                    op: "ckpt",
                    rate: None,
                    vs_plain: None,
                    vs_limit: None,
                    vs_work: None,
                    limited_by: "unavailable".into(),
                    detail: format!("unavailable: {why}"),
                });
                continue;
            }
            let c = cost(&row.scheme, args.set_size, args.set_failures, replicas);
            // per repetition, paired with that repetition's baselines
            let pairs: Vec<(&Run, &Baseline)> = row.runs.iter().zip(base.iter()).collect();
            let plain_t = |x: &Baseline| ranks as f64 * mib as f64 / x.plain_rate;
            let limit_t = |x: &Baseline| plain_t(x) * (1.0 + c.redundancy) + c.apply * x.ring;
            // what the scheme must read: its own data to send or encode it, once, and
            // with crc_on_copy hashed in that same read (SINGLE reads only for the CRC32)
            let read_t = |x: &Baseline| match args.crc {
                Crc::On => x.crc,
                Crc::Off => c.reads * x.read,
            };
            // SINGLE reads only for the CRC32: its limit is the plain loop with that read in
            // it, measured as such in the same repetition (when it was)
            let work_t = |x: &Baseline| match (row.scheme.as_str(), x.crc_loops[0]) {
                ("SINGLE", fg) if args.crc == Crc::On && fg > 0.0 => ranks as f64 * mib as f64 / fg,
                _ => limit_t(x) + read_t(x),
            };
            let rate = Spread::of(row.runs.iter().map(|r| r.rate));
            let vs_plain = Spread::of(pairs.iter().map(|(r, x)| r.rate / x.plain_rate));
            let vs_limit = Spread::of(
                pairs
                    .iter()
                    .map(|(r, x)| r.rate / (ranks as f64 * mib as f64 / limit_t(x))),
            );
            let vs_work = Spread::of(
                pairs
                    .iter()
                    .map(|(r, x)| r.rate / (ranks as f64 * mib as f64 / work_t(x))),
            );
            times.push((
                &row.scheme,
                pairs
                    .iter()
                    .map(|(r, x)| (ranks as f64 * mib as f64 / r.rate, work_t(x)))
                    .collect(),
            ));
            let write = Spread::of(row.runs.iter().map(|r| r.write)).median;
            let complete = Spread::of(row.runs.iter().map(|r| r.complete)).median;
            let p_t = Spread::of(base.iter().map(plain_t)).median;
            let x_t = Spread::of(base.iter().map(|x| c.apply * x.ring)).median;
            let red_t = p_t * c.redundancy;
            let r_t = Spread::of(base.iter().map(read_t)).median;
            let (w_excess, c_excess) = (write - p_t, complete - x_t - red_t - r_t);
            let limited_by = if vs_limit.median >= 0.9 {
                "at limit".to_string()
            } else if vs_work.median >= 0.9 {
                format!("read {:.0} ms", r_t * 1e3)
            } else if w_excess >= c_excess {
                format!("write +{:.0} ms", w_excess * 1e3)
            } else {
                format!("complete +{:.0} ms", c_excess * 1e3)
            };
            lines.push(Line {
                scheme: row.scheme.clone(),
                mib,
                op: "ckpt",
                rate: Some(rate.clone()),
                vs_plain: Some(vs_plain),
                vs_limit: Some(vs_limit),
                vs_work: Some(vs_work),
                limited_by,
                detail: format!(
                    "{} MiB/s; per checkpoint and rank: write phase {:.1} ms (plain {:.1}), \
                     complete_output {:.1} ms (exchange {:.1} + redundancy write {:.1} + read {:.1}); {}",
                    rate.show(0),
                    write * 1e3,
                    p_t * 1e3,
                    complete * 1e3,
                    x_t * 1e3,
                    red_t * 1e3,
                    r_t * 1e3,
                    show_work(row.runs[0].work, mib)
                ),
            });
            let Some(factor) = c.rebuild else {
                if row.scheme == "SINGLE" && !args.no_rebuild {
                    notes.push(format!(
                        "SINGLE at {mib} MiB: no rebuild: SINGLE keeps no redundancy, so a lost \
                         node's files are gone (a restart fetches from the prefix)"
                    ));
                }
                continue;
            };
            let rebuilt: Vec<(f64, usize, &Baseline)> = pairs
                .iter()
                .filter_map(|(r, x)| r.rebuild.map(|(t, d)| (t, d, *x)))
                .collect();
            if rebuilt.is_empty() {
                continue;
            }
            let datasets = rebuilt[0].1;
            let lost_bytes = (1.0 + c.redundancy) * datasets as f64 * mib as f64;
            let rate = Spread::of(rebuilt.iter().map(|(t, _, _)| lost_bytes / t));
            let limit = |x: &Baseline| factor * datasets as f64 * x.ring;
            let vs_limit = Spread::of(rebuilt.iter().map(|(t, _, x)| limit(x) / t));
            let init = Spread::of(rebuilt.iter().map(|(t, _, _)| *t)).median;
            let x_t = Spread::of(base.iter().map(limit)).median;
            let verify = if args.crc == Crc::On {
                crc.median * datasets as f64
            } else {
                0.0
            };
            let rewrite = p_t * (1.0 + c.redundancy) * datasets as f64;
            // the work a rebuild cannot avoid: the exchange, the survivors' verification
            // read (crc_on_restart) and writing the lost bytes, each from this repetition
            let work_t = |x: &Baseline| {
                let verify = if args.crc == Crc::On { x.crc } else { 0.0 };
                limit(x) + (verify + plain_t(x) * (1.0 + c.redundancy)) * datasets as f64
            };
            let vs_work = Spread::of(rebuilt.iter().map(|(t, _, x)| work_t(x) / t));
            // the rebuild's data passes, per MiB the lost member held, all ranks together
            // (the same in every repetition: counts, not times)
            let [read, written] = row.runs[0].rebuild_io.map(|v| v / lost_bytes);
            // (the parts are estimates from the baselines: what they leave is at least 0)
            let other = (init - x_t - verify - rewrite).max(0.0);
            let parts = [
                ("exchange", x_t),
                ("verify", verify),
                ("rewrite", rewrite),
                ("other", other),
            ];
            let top = parts
                .iter()
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .expect("four parts");
            lines.push(Line {
                scheme: row.scheme.clone(),
                mib,
                op: "rebuild",
                rate: Some(rate.clone()),
                vs_plain: None,
                vs_limit: Some(vs_limit),
                vs_work: Some(vs_work),
                limited_by: top.0.to_string(),
                detail: format!(
                    "{} MiB/s; init {:.3} s for {datasets} dataset(s): exchange limit {:.3} s, \
                     verify ~{:.3} s, rewrite ~{:.3} s, other {:.3} s; per MiB lost, all ranks \
                     read {read:.2} MiB and wrote {written:.2} MiB",
                    rate.show(0),
                    init,
                    x_t,
                    verify,
                    rewrite,
                    other
                ),
            });
        }
        if base.iter().all(|x| x.crc_loops[0] > 0.0) {
            let fg = Spread::of(base.iter().map(|x| x.crc_loops[0] / x.plain_rate));
            let bg = Spread::of(base.iter().map(|x| x.crc_loops[1] / x.plain_rate));
            notes.push(format!(
                "plain loop with a CRC32 read of each file at {mib} MiB, x plain: right after \
                 its fsync {}, by a thread during the next write {}",
                fg.show(2),
                bg.show(2)
            ));
        }
        // RS moves k times XOR's bytes and writes more redundancy by construction: its
        // loop time over XOR's, next to the same ratio of their work limits
        let of = |name: &str| times.iter().find(|t| t.0 == name).map(|t| &t.1);
        if let (Some(rs), Some(xor)) = (of("RS"), of("XOR")) {
            let measured = Spread::of(rs.iter().zip(xor).map(|(r, x)| r.0 / x.0));
            let limits = Spread::of(rs.iter().zip(xor).map(|(r, x)| r.1 / x.1));
            notes.push(format!(
                "RS / XOR at {mib} MiB: loop time {} (their work limits' ratio in the same \
                 repetitions: {})",
                measured.show(2),
                limits.show(2)
            ));
        }
    }
    if args.json {
        let rows: Vec<serde_json::Value> = lines
            .iter()
            .map(|l| {
                serde_json::json!({
                    "scheme": l.scheme,
                    "mib_per_rank": l.mib,
                    "op": l.op,
                    "mib_per_s": l.rate.as_ref().map(Spread::json),
                    "vs_plain": l.vs_plain.as_ref().map(Spread::json),
                    "vs_limit": l.vs_limit.as_ref().map(Spread::json),
                    "vs_work": l.vs_work.as_ref().map(Spread::json),
                    "limited_by": l.limited_by,
                    "detail": l.detail,
                })
            })
            .collect();
        let out = serde_json::json!({
            "ranks": ranks,
            "set_size": args.set_size,
            "set_failures": args.set_failures,
            "crc_on_copy": args.crc == Crc::On,
            "checkpoints": args.checkpoints,
            "sleep": args.sleep,
            "reps": args.reps,
            "rows": rows,
            "notes": notes,
        });
        println!("{out}");
        return;
    }
    println!();
    println!(
        "{:<8} {:>8} {:<7} {:>8} {:>8} {:>8} {:>8}  limited by",
        "scheme", "MiB/rank", "op", "MiB/s", "x plain", "x limit", "x work"
    );
    let ratio = |s: &Option<Spread>| {
        s.as_ref()
            .map_or("-".into(), |s| format!("{:.2}", s.median))
    };
    for l in &lines {
        println!(
            "{:<8} {:>8} {:<7} {:>8} {:>8} {:>8} {:>8}  {}",
            l.scheme,
            l.mib,
            l.op,
            l.rate
                .as_ref()
                .map_or("-".into(), |r| format!("{:.0}", r.median)),
            ratio(&l.vs_plain),
            ratio(&l.vs_limit),
            ratio(&l.vs_work),
            l.limited_by
        );
    }
    println!();
    println!("details (medians, [min-max] over repetitions; ratios per repetition):");
    for l in &lines {
        let spread = |name: &str, s: &Option<Spread>| {
            s.as_ref()
                .map(|s| format!(", {name} {}", s.show(2)))
                .unwrap_or_default()
        };
        println!(
            "  {} {} MiB {}: {}{}{}{}",
            l.scheme,
            l.mib,
            l.op,
            l.detail,
            spread("x plain", &l.vs_plain),
            spread("x limit", &l.vs_limit),
            spread("x work", &l.vs_work)
        );
    }
    for n in &notes {
        println!("  {n}");
    }
}

#[cfg(test)]
mod tests {
    use super::cost;

    #[test]
    fn bytes_per_rank_follow_the_schemes_algorithms() {
        // XOR over 4: a ring reduce-scatter moves 3 chunks of B/3 each way
        let xor = cost("XOR", 4, 2, 1);
        assert_eq!((xor.apply, xor.redundancy), (1.0, 1.0 / 3.0));
        assert_eq!(xor.rebuild, Some(4.0 / 3.0));
        // RS (4, 2): 2 steps x 2 sends of B/2 = 2B each way; 2 chunks of B/2 kept;
        // rebuild: 3 reduction steps each way + 3 gathered chunks of B/2 = 4.5 B = 2.25 x 2B
        let rs = cost("RS", 4, 2, 1);
        assert_eq!(
            (rs.apply, rs.redundancy, rs.rebuild),
            (2.0, 1.0, Some(2.25))
        );
        // RS (8, 2): chunks of B/6
        let rs = cost("RS", 8, 2, 1);
        assert_eq!((rs.apply, rs.rebuild), (2.0, Some(1.75)));
        // PARTNER: one copy each way, and the lost member gets 2B back
        let partner = cost("PARTNER", 4, 2, 1);
        assert_eq!(
            (partner.apply, partner.redundancy, partner.rebuild),
            (1.0, 1.0, Some(1.0))
        );
        assert_eq!(cost("SINGLE", 4, 2, 1).rebuild, None);
    }
}
