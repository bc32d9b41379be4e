//! `scr-bench-single`: what checkpointing through scr-rs costs, as ratios to the same work
//! done without the library in the same run.
//!
//! Reports (rank 0; times are the slowest rank's; medians of `--reps` with [min-max]):
//! - an empty checkpoint cycle (`start_output` of a CHECKPOINT dataset + `complete_output`,
//!   no files), in milliseconds: the library's fixed cost per checkpoint (filemap and
//!   state files, the collective agreements). Checkpoint-only datasets with `flush = 0`,
//!   so no cycle flushes;
//! - a checkpoint of `--mib` MiB per rank with SINGLE (write the file through
//!   `route_file`, then `complete_output`, which records size and CRC32), against writing
//!   the same bytes into the same cache directory with plain writes + fsync, as the ratio
//!   of the two times per repetition (checkpoint time / plain time: 1.00 = no cost).
//!
//! Run: `mpiexec -n 4 target/release/scr-bench-single --mib 256`.

use std::time::Instant;

use clap::Parser;
use scr_api::mpi::traits::{Communicator, CommunicatorCollectives, Root};
use scr_api::{mpi, Flags, Scr, Settings};
use scr_examples::{slowest, write_synced, Spread};
use scr_host::config::settings;

#[derive(Parser)]
#[command(
    name = "scr-bench-single",
    version,
    about = "Cost of SINGLE checkpoints against plain writes"
)]
struct Args {
    /// MiB written per rank.
    #[arg(long, default_value_t = 256)]
    mib: usize,
    /// Repetitions (the median is reported, with min and max).
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Empty cycles timed per repetition.
    #[arg(long, default_value_t = 50)]
    cycles: usize,
    /// Do not compute CRC32 at complete_output (crc_on_copy = false).
    #[arg(long)]
    no_crc: bool,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let universe = mpi::initialize().ok_or("MPI initialises")?;
    let world = universe.world();
    let rank = world.rank();
    let mut settings = Settings::new();
    settings.set("copy_type=SINGLE")?;
    settings.set("cache_size=1")?;
    // checkpoints only, never flushed: the cycles measure the cache path alone
    settings.set("flush=0")?;
    // a job id of its own: another run's cache is neither restored nor disturbed
    let mut job = std::process::id();
    world.process_at_rank(0).broadcast_into(&mut job);
    settings.set(&format!("job_id=bench-single-{job}"))?;
    if args.no_crc {
        settings.set("crc_on_copy=false")?;
    }
    let mut scr = Scr::init_with(&world, &settings)?;
    let cache = scr.runtime().config().get(settings::CACHE_BASE);
    let job_dirs = [settings::CACHE_BASE, settings::CNTL_BASE].map(|k| {
        std::path::Path::new(&scr.runtime().config().get(k))
            .join(scr.runtime().config().get(settings::USER))
            .join(format!("scr.bench-single-{job}"))
    });
    let data: Vec<u8> = (0..args.mib << 20)
        .map(|i| (i * 31 + rank as usize) as u8)
        .collect();

    // empty checkpoint cycles (an OUTPUT dataset would be flushed every cycle)
    let mut n = 0u64;
    let mut empty = Vec::new();
    for _ in 0..args.reps {
        world.barrier();
        let t = Instant::now();
        for _ in 0..args.cycles {
            n += 1;
            scr.start_output(&format!("empty.{n}"), Flags::CHECKPOINT)?;
            scr.complete_output(true)?;
        }
        empty.push(slowest(&world, t.elapsed().as_secs_f64()) / args.cycles as f64);
    }
    let empty = Spread::of(empty);

    // plain writes vs checkpoints, interleaved so both see the same cache state
    let plain_dir = std::path::Path::new(&cache).join(format!("scr-bench-plain.{rank}"));
    std::fs::create_dir_all(&plain_dir)?;
    let (mut plain, mut ckpt) = (Vec::new(), Vec::new());
    // Each timed step starts from a quiet disk (`sync` first), and the order alternates
    // so neither side pays for the other's write-back.
    let quiesce = |world: &mpi::topology::SimpleCommunicator| {
        if rank == 0 {
            let _ = std::process::Command::new("sync").status();
        }
        world.barrier();
    };
    for rep in 0..args.reps {
        for plain_turn in [rep % 2 == 0, rep % 2 == 1] {
            quiesce(&world);
            if plain_turn {
                let t = Instant::now();
                // overwrite the previous plain file, as a checkpoint replaces the previous
                // one (the library evicts it inside its timed step)
                write_synced(&plain_dir.join("data"), &data)?;
                plain.push(slowest(&world, t.elapsed().as_secs_f64()));
            } else {
                n += 1;
                let t = Instant::now();
                scr.start_output(&format!("ckpt.{n}"), Flags::CHECKPOINT)?;
                let path = scr.route_file(format!("bench/rank_{rank}.dat"))?;
                write_synced(&path, &data)?;
                scr.complete_output(true)?;
                ckpt.push(slowest(&world, t.elapsed().as_secs_f64()));
            }
        }
    }
    std::fs::remove_dir_all(&plain_dir)?;
    let ratio = Spread::of(ckpt.iter().zip(&plain).map(|(c, p)| c / p));
    let (plain, ckpt) = (Spread::of(plain), Spread::of(ckpt));
    if rank == 0 {
        let ranks = world.size();
        println!(
            "ranks: {ranks}, {} MiB per rank, crc_on_copy {}; medians of {} reps [min-max]",
            args.mib, !args.no_crc, args.reps
        );
        let ms = |s: &Spread| {
            format!(
                "{:.3} [{:.3}-{:.3}]",
                s.median * 1e3,
                s.min * 1e3,
                s.max * 1e3
            )
        };
        println!(
            "empty checkpoint cycle:     {} ms ({} cycles per rep)",
            ms(&empty),
            args.cycles
        );
        println!(
            "plain write + fsync:        {} s ({:.2} GB/s aggregate)",
            plain.show(3),
            (ranks as usize * (args.mib << 20)) as f64 / plain.median / 1e9
        );
        println!("SINGLE checkpoint:          {} s", ckpt.show(3));
        println!("time checkpoint / plain:    {} (per rep)", ratio.show(2));
    }
    scr.finalize()?;
    // the checkpoint left in cache goes (ranks sharing a node race here: errors ignored)
    world.barrier();
    for d in &job_dirs {
        let _ = std::fs::remove_dir_all(d);
    }
    Ok(())
}
