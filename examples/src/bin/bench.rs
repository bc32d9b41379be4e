//! `scr-bench-single`: what checkpointing through scr-rs costs, as ratios to the same work
//! done without the library in the same run.
//!
//! Reports (rank 0, times are the slowest rank's, median of `--reps`):
//! - an empty `start_output` + `complete_output` cycle, in milliseconds;
//! - a checkpoint of `--mib` MiB per rank with SINGLE (write the file through
//!   `route_file`, then `complete_output`, which records size and CRC32), against writing
//!   the same bytes into the same cache directory with plain `std::fs::write` + fsync.
//!
//! Run: `mpiexec -n 4 target/release/scr-bench-single --mib 256`.

use std::time::Instant;

use clap::Parser;
use scr_api::mpi::traits::{Communicator, CommunicatorCollectives};
use scr_api::{mpi, Flags, Scr, Settings};
use scr_examples::{median, slowest, write_synced};

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
    /// Repetitions (the median is reported).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Empty cycles timed.
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
    if args.no_crc {
        settings.set("crc_on_copy=false")?;
    }
    let mut scr = Scr::init_with(&world, &settings)?;
    let cache = scr.runtime().config().str("cache_base");
    let data: Vec<u8> = (0..args.mib << 20)
        .map(|i| (i * 31 + rank as usize) as u8)
        .collect();

    // empty cycles
    let mut n = 0u64;
    world.barrier();
    let t = Instant::now();
    for _ in 0..args.cycles {
        n += 1;
        scr.start_output(&format!("empty.{n}"), Flags::OUTPUT)?;
        scr.complete_output(true)?;
    }
    let empty = slowest(&world, t.elapsed().as_secs_f64()) / args.cycles as f64;

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
    let (plain, ckpt) = (median(plain), median(ckpt));
    if rank == 0 {
        let ranks = world.size();
        println!(
            "ranks: {ranks}, {} MiB per rank, median of {} reps, crc_on_copy {}",
            args.mib, args.reps, !args.no_crc
        );
        println!("empty start/complete cycle: {:.3} ms", empty * 1e3);
        println!(
            "plain write + fsync:        {:.3} s ({:.2} GB/s aggregate)",
            plain,
            (ranks as usize * (args.mib << 20)) as f64 / plain / 1e9
        );
        println!("SINGLE checkpoint:          {ckpt:.3} s");
        println!("ratio checkpoint / plain:   {:.2}", ckpt / plain);
    }
    scr.finalize()?;
    Ok(())
}
