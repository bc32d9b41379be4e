//! `scr-heat`: a 1-D heat-diffusion stencil that checkpoints through scr-rs.
//!
//! Each rank owns `--cells` cells and exchanges one halo cell with each neighbour per
//! step. Every `--every` steps (or when `need_checkpoint` says so, with `--need`) it writes
//! its cells to a checkpoint; on start it restarts from the newest checkpoint it can
//! read. The arithmetic is deterministic, so a run that is killed and restarted ends with
//! exactly the state of an uninterrupted run; rank 0 prints that state's CRC32 (of the
//! whole domain, so the same whatever the number of ranks).
//!
//! It restarts on any number of ranks: the domain is the old ranks' slices end to end,
//! split evenly over the new ranks, and each rank reads the old slices that overlap its
//! own (`restart_writers`, `restart_files`).
//!
//! Fault injection for the tests: `--kill-at STEP --kill-rank R` kills rank R with
//! SIGKILL right after step STEP (the job dies); `--kill-before-complete STEP` kills it
//! after writing that step's checkpoint file but before `complete_output`;
//! `--invalid-at STEP` makes rank R call `complete_output(false)` at that step.
//!
//! Online recovery: with `--spares N` the last N processes wait as spares and the
//! application runs on the others through `scr_api::run_resilient`; a killed rank
//! (`--kill-at`, only in the first attempt; `--wipe-before-kill` also removes the given
//! directories first, as when its node's storage is lost) is replaced by a spare inside
//! the same `mpiexec` (under MPI with ULFM), and the steps go on from the newest
//! checkpoint, rebuilt from cache.

use std::path::PathBuf;

use clap::Parser;
use scr_api::mpi::collective::SystemOperation;
use scr_api::mpi::datatype::PartitionMut;
use scr_api::mpi::traits::{Communicator, CommunicatorCollectives, Root};
use scr_api::{mpi, Flags, Scr, ScrError};

#[derive(Parser, Debug)]
#[command(
    name = "scr-heat",
    version,
    about = "1-D heat stencil checkpointing with scr-rs"
)]
struct Args {
    /// Steps to run in total.
    #[arg(long, default_value_t = 40)]
    steps: u64,
    /// Cells per rank of a fresh start (a restart keeps the domain of the checkpoint,
    /// split evenly over this job's ranks).
    #[arg(long, default_value_t = 4096)]
    cells: usize,
    /// Checkpoint every N steps (0: never, unless --need).
    #[arg(long, default_value_t = 5)]
    every: u64,
    /// Ask need_checkpoint each step instead of --every.
    #[arg(long)]
    need: bool,
    /// Sleep this many milliseconds per step (for time-based policies).
    #[arg(long, default_value_t = 0)]
    sleep_ms: u64,
    /// Kill rank --kill-rank with SIGKILL after this step.
    #[arg(long)]
    kill_at: Option<u64>,
    /// Kill rank --kill-rank after writing this step's checkpoint, before completing it.
    #[arg(long)]
    kill_before_complete: Option<u64>,
    /// Rank --kill-rank declares this step's checkpoint invalid.
    #[arg(long)]
    invalid_at: Option<u64>,
    /// The rank that misbehaves (several, comma-separated, are killed at once).
    #[arg(long, value_delimiter = ',', default_value = "0")]
    kill_rank: Vec<i32>,
    /// Keep this many processes as spares and recover from a lost process inside this
    /// mpiexec (needs MPI with ULFM: `mpiexec --with-ft ulfm`).
    #[arg(long)]
    spares: Option<u32>,
    /// Initialise MPI with MPI_THREAD_MULTIPLE (what `protect_in_background` needs to
    /// apply redundancy while the steps go on).
    #[arg(long)]
    thread_multiple: bool,
    /// With --spares: go on with fewer ranks when no spare is left.
    #[arg(long)]
    shrink: bool,
    /// Before --kill-at kills its rank, remove these directories (comma-separated), as
    /// when the rank's node loses its storage.
    #[arg(long, value_delimiter = ',')]
    wipe_before_kill: Vec<PathBuf>,
    /// Print `t_kill MS` (the killed rank, just before --kill-at kills it) and `t_resumed
    /// MS` (rank 0, once the first step after a restart is done), in milliseconds since
    /// the epoch: the recovery benchmark's clock.
    #[arg(long)]
    timestamps: bool,
}

/// Milliseconds since the epoch.
fn now_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

fn kill_self() -> ! {
    let pid = std::process::id().to_string();
    let _ = std::process::Command::new("kill")
        .args(["-9", &pid])
        .status();
    std::process::abort()
}

/// Each checkpoint in a directory of its own, so that flushed checkpoints never
/// overwrite each other in the prefix.
fn file_name(dataset: &str, rank: i32) -> PathBuf {
    PathBuf::from(format!("{dataset}/rank_{rank}.ckpt"))
}

fn encode(step: u64, cells: &[f64]) -> Vec<u8> {
    let mut b = Vec::with_capacity(8 + cells.len() * 8);
    b.extend_from_slice(&step.to_le_bytes());
    for c in cells {
        b.extend_from_slice(&c.to_le_bytes());
    }
    b
}

fn decode(bytes: &[u8], cells: usize) -> Option<(u64, Vec<f64>)> {
    if bytes.len() != 8 + cells * 8 {
        return None;
    }
    let step = u64::from_le_bytes(bytes[..8].try_into().ok()?);
    let data = bytes[8..]
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    Some((step, data))
}

fn main() {
    let args = Args::parse();
    let universe = if args.thread_multiple {
        let (universe, level) =
            mpi::initialize_with_threading(mpi::Threading::Multiple).expect("MPI initialises");
        if level != mpi::Threading::Multiple {
            eprintln!("scr-heat: MPI provides thread level {level:?}, not Multiple");
        }
        universe
    } else {
        mpi::initialize().expect("MPI initialises")
    };
    let world = universe.world();
    let rank = world.rank();
    let size = world.size();
    if rank == 0 {
        // tests check this: a wrong mpiexec silently runs N singletons of 1 rank each
        println!("ranks {size}");
    }
    let result = match args.spares {
        Some(spares) => run_resilient(&args, &world, spares),
        None => run(&args, &world, rank, size),
    };
    match result {
        Ok(()) if scr_api::recovered() => {
            // the library is finalized; MPI_Finalize is not called after a recovery:
            // Open MPI 5.0's can wait for ever for the lost process (its fence counts it,
            // open-mpi/ompi#11404), and the job's work is done
            use std::io::Write as _;
            let _ = std::io::stdout().flush();
            std::process::exit(0);
        }
        Ok(()) => {}
        Err(e) if args.spares.is_some() => {
            // a resilient run returns alike on every process (an error of the
            // application's, or a loss it could not recover from): each says it and
            // ends with status 1; after a loss without MPI_Finalize, as above
            scr_examples::say!("scr-heat[{rank}]: error: {e}");
            if !scr_api::process_lost() && !scr_api::recovered() {
                drop(universe);
            }
            std::process::exit(1);
        }
        Err(e) => {
            // every rank returned an error from the same collective call and finalized
            // the library (see `run`): the job ends on every rank alike, with MPI
            // finalized, and status 1. (It used to end with MPI_Abort when this rank's
            // error was its own rather than another rank's; Debian's mpiexec can then
            // hang in its own teardown after every rank has exited.)
            scr_examples::say!("scr-heat[{rank}]: error: {e}");
            drop(universe);
            std::process::exit(1);
        }
    }
}

/// Init, [`compute`], finalize. [`compute`] returns only errors of the library's
/// collective calls, which the library returns on every rank alike (the failing rank
/// its own, the others `ScrError::Collective` naming it): the ranks are in step, so the
/// run still finalizes on every rank and ends cleanly.
fn run(
    args: &Args,
    world: &mpi::topology::SimpleCommunicator,
    rank: i32,
    size: i32,
) -> Result<(), ScrError> {
    let mut scr = Scr::init(world)?;
    match compute(args, world, rank, size, &mut scr, 0) {
        Ok(()) => scr.finalize(),
        Err(e) => {
            scr.finalize()?;
            Err(e)
        }
    }
}

/// [`compute`] on the application's ranks, the last `spares` processes kept aside to
/// replace a lost one (see `scr_api::run_resilient`).
fn run_resilient(
    args: &Args,
    world: &mpi::topology::SimpleCommunicator,
    spares: u32,
) -> Result<(), ScrError> {
    let options = scr_api::ResilientOptions {
        spares,
        shrink: args.shrink,
    };
    let finished = scr_api::run_resilient(
        world,
        &options,
        &scr_api::Settings::new(),
        |scr, comm, attempt| {
            let (rank, size) = (comm.rank(), comm.size());
            if rank == 0 && attempt.number > 0 {
                println!(
                    "recovered (attempt {}): lost rank(s) {:?}, spares took {:?}, {} rank(s) now, {:.3} s",
                    attempt.number,
                    attempt.lost,
                    attempt.replaced,
                    size,
                    attempt.recovery_seconds
                );
            }
            compute(args, comm, rank, size, scr, attempt.number)?;
            if rank == 0 {
                println!("recoveries {}", attempt.number);
            }
            Ok(())
        },
    )?;
    if let scr_api::Finished::Spare { recoveries } = finished {
        scr_examples::say!(
            "scr-heat: process {} stayed a spare through {recoveries} recoveries",
            world.rank()
        );
    }
    Ok(())
}

/// The time steps, restarting from the newest usable checkpoint and checkpointing as
/// the library asks; rank 0 prints the final state's CRC32. `attempt` counts the
/// recoveries before this run of it (the fault injections act in the first only). Its
/// errors are those of the library's collective calls only (see [`run`]).
fn compute(
    args: &Args,
    world: &mpi::topology::SimpleCommunicator,
    rank: i32,
    size: i32,
    scr: &mut Scr,
    attempt: u32,
) -> Result<(), ScrError> {
    for lost in scr.lost_datasets() {
        if rank == 0 {
            println!("lost: {lost}");
        }
    }

    // initial state: a hot spot in the middle of the global domain
    let n = args.cells;
    let mut u: Vec<f64> = (0..n)
        .map(|i| {
            let g = rank as usize * n + i;
            if g.is_multiple_of(97) {
                100.0
            } else {
                0.0
            }
        })
        .collect();
    let mut step = 0u64;

    let mut restarted = false;
    while let Some(name) = scr.have_restart() {
        scr.start_restart()?;
        // a file this rank cannot find or read makes the checkpoint invalid, not the run
        let loaded = load_slice(scr, world, &name, rank, size);
        if loaded.is_none() {
            scr_examples::say!(
                "scr-heat[{rank}]: {name} is unreadable here; asking for an older one"
            );
        }
        if scr.complete_restart(loaded.is_some())? {
            let (s, data) = loaded.expect("valid on this rank");
            step = s;
            u = data;
            if rank == 0 {
                println!("restarted from {name} at step {step}");
            }
            restarted = true;
            break;
        }
    }
    if step == 0 && rank == 0 {
        println!("starting fresh");
    }

    // (a restart on another number of ranks may give this rank another count of cells)
    let n = u.len();
    let left = (rank + size - 1) % size;
    let right = (rank + 1) % size;
    while step < args.steps {
        // halo exchange (periodic), then one explicit diffusion step
        let (mut from_left, mut from_right) = (0.0f64, 0.0f64);
        mpi::point_to_point::send_receive_into(
            &u[n - 1],
            &world.process_at_rank(right),
            &mut from_left,
            &world.process_at_rank(left),
        );
        mpi::point_to_point::send_receive_into(
            &u[0],
            &world.process_at_rank(left),
            &mut from_right,
            &world.process_at_rank(right),
        );
        let prev = u.clone();
        for i in 0..n {
            let l = if i == 0 { from_left } else { prev[i - 1] };
            let r = if i == n - 1 { from_right } else { prev[i + 1] };
            u[i] = prev[i] + 0.25 * (l - 2.0 * prev[i] + r);
        }
        step += 1;
        if args.sleep_ms > 0 {
            std::thread::sleep(std::time::Duration::from_millis(args.sleep_ms));
        }
        if restarted && rank == 0 && args.timestamps {
            println!("t_resumed {}", now_ms());
        }
        restarted = false;
        if args.kill_at == Some(step) && args.kill_rank.contains(&rank) && attempt == 0 {
            for dir in &args.wipe_before_kill {
                let _ = std::fs::remove_dir_all(dir);
            }
            if args.timestamps {
                use std::io::Write as _;
                println!("t_kill {}", now_ms());
                let _ = std::io::stdout().flush();
            }
            kill_self();
        }

        let want = if args.need {
            scr.need_checkpoint()?
        } else {
            args.every > 0 && step.is_multiple_of(args.every)
        };
        if want {
            let name = format!("ckpt.{step}");
            scr.start_output(&name, Flags::CHECKPOINT)?;
            // route_file is local: a name it refuses makes this rank's part invalid, and
            // complete_output discards the checkpoint on every rank alike
            let mut ok = match scr.route_file(file_name(&name, rank)) {
                Ok(path) => std::fs::write(&path, encode(step, &u)).is_ok(),
                Err(e) => {
                    scr_examples::say!("scr-heat[{rank}]: {name}: {e}");
                    false
                }
            };
            if args.kill_before_complete == Some(step) && args.kill_rank.contains(&rank) {
                kill_self();
            }
            if args.invalid_at == Some(step) && args.kill_rank.contains(&rank) {
                ok = false;
            }
            let kept = scr.complete_output(ok)?;
            if rank == 0 {
                println!(
                    "checkpoint ckpt.{step}: {}",
                    if kept { "kept" } else { "discarded" }
                );
            }
        }
        if scr.should_exit()? {
            if rank == 0 {
                println!("halted at step {step}");
            }
            break;
        }
    }

    // the final state's CRC32: the whole domain, gathered on rank 0 in rank order (the
    // same bytes whatever the number of ranks)
    let root = world.process_at_rank(0);
    let count = u.len() as i32;
    if rank == 0 {
        let mut counts = vec![0i32; size as usize];
        root.gather_into_root(&count, &mut counts[..]);
        let displs: Vec<i32> = counts
            .iter()
            .scan(0, |at, &c| {
                let here = *at;
                *at += c;
                Some(here)
            })
            .collect();
        let total: i32 = counts.iter().sum();
        let mut all = vec![0f64; total as usize];
        let mut partition = PartitionMut::new(&mut all[..], &counts[..], &displs[..]);
        root.gather_varcount_into_root(&u[..], &mut partition);
        let crc = crc32fast::hash(&encode(step, &all));
        println!("final step {step} state crc32 {crc:08x}");
    } else {
        root.gather_into(&count);
        root.gather_varcount_into(&u[..]);
    }
    world.barrier();
    Ok(())
}

/// This rank's slice of checkpoint `name` (its step and cells), read inside the restart;
/// `None` when it cannot be read here or does not hold the step its name says.
///
/// Written by as many ranks as this job has: this rank's own file (its cells, as many as
/// it holds: a job that restarted on another number of ranks has uneven slices). Written
/// by another number: the domain is split evenly over the old ranks and over this job's
/// ranks alike (rank r of P holds cells [r·D/P, (r+1)·D/P)), so this rank's slice
/// overlaps only the old ranks whose share of the ranks overlaps its own — the ones
/// `restart_files` lists for it even when only the old job's caches hold the checkpoint.
/// The domain's size D is the old slices' lengths added up, each counted by the first
/// rank that reads it, in one all-reduce that every rank reaches (collective).
fn load_slice(
    scr: &mut Scr,
    world: &mpi::topology::SimpleCommunicator,
    name: &str,
    rank: i32,
    size: i32,
) -> Option<(u64, Vec<f64>)> {
    // a checkpoint is valid only if it holds the step its name says
    let named_step: Option<u64> = name.strip_prefix("ckpt.").and_then(|s| s.parse().ok());
    // (the file is the step and the cells, 8 bytes each)
    let read = |path: &std::path::Path| {
        std::fs::read(path)
            .ok()
            .filter(|b| b.len() > 8)
            .and_then(|b| decode(&b, (b.len() - 8) / 8))
            .filter(|(s, _)| Some(*s) == named_step)
    };
    let writers = scr.restart_writers().ok()?;
    if writers == size as u32 {
        let path = scr.route_file(file_name(name, rank)).ok()?;
        return read(&path);
    }
    let (n, m, r) = (u64::from(writers), size as u64, rank as u64);
    // the old ranks w whose share [w/n, (w+1)/n) overlaps [r/m, (r+1)/m)
    let share = (r * n / m)..((r + 1) * n).div_ceil(m).min(n);
    let mut slices = Vec::new();
    let mut missing = 0u64;
    for w in share {
        let mut slice = || {
            let own = file_name(name, w as i32);
            let listed = scr.restart_files(w as u32).ok()?;
            let file = listed.iter().find(|p| p.ends_with(&own))?;
            let path = scr.route_file(file).ok()?;
            let len = std::fs::metadata(&path).ok()?.len();
            Some((w, path, (len.checked_sub(8)? / 8) as usize))
        };
        match slice() {
            Some(s) => slices.push(s),
            None => missing += 1,
        }
    }
    // the domain: old rank w's cells counted by its first reader, rank w·m/n
    let first: u64 = slices
        .iter()
        .filter(|(w, _, _)| w * m / n == r)
        .map(|(_, _, c)| *c as u64)
        .sum();
    let mut sums = [0u64; 2];
    world.all_reduce_into(&[first, missing][..], &mut sums[..], SystemOperation::sum());
    let [domain, missing] = sums;
    if missing > 0 {
        return None;
    }
    let domain = domain as usize;
    let (n, m, r) = (n as usize, m as usize, r as usize);
    let (lo, hi) = (r * domain / m, (r + 1) * domain / m);
    let mut u = Vec::with_capacity(hi - lo);
    let mut step = named_step?;
    for (w, path, c) in slices {
        let (a, b) = (w as usize * domain / n, (w as usize + 1) * domain / n);
        if b - a != c {
            return None;
        }
        if b <= lo || a >= hi {
            continue;
        }
        let (s, data) = read(&path).filter(|(_, d)| d.len() == c)?;
        step = s;
        u.extend_from_slice(&data[lo.max(a) - a..hi.min(b) - a]);
    }
    (u.len() == hi - lo && !u.is_empty()).then_some((step, u))
}
