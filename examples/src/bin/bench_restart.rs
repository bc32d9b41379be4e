//! `scr-bench-restart`: what verifying a cached checkpoint at restart costs
//! (`crc_on_restart`), as a ratio to reading the same bytes without the library in the
//! same run.
//!
//! Each rank writes one checkpoint of `--mib` MiB with SINGLE into the cache (CRC32
//! recorded at complete_output) and finalizes. Then, alternating so that neither side
//! warms the other's cache, and with the slowest rank's time of each (median of `--reps`,
//! with [min-max]; ratios are taken per repetition):
//! - plain read: read the cached file into memory in `file_buf_size` pieces;
//! - init with `crc_on_restart = true`: every cached file checked (size and CRC32);
//! - init with `crc_on_restart = false`: sizes only.
//!
//! Reported: both inits as ratios to the plain read, and the verification's own cost
//! (difference of the two inits) as a ratio to the plain read.
//!
//! Run: `mpiexec -n 4 target/release/scr-bench-restart --mib 256`.

use std::io::Read;
use std::time::Instant;

use clap::Parser;
use scr_api::mpi::traits::{Communicator, CommunicatorCollectives};
use scr_api::{mpi, Flags, Scr, Settings};
use scr_examples::{slowest, write_synced, Spread};
use scr_host::config::settings;

#[derive(Parser)]
#[command(
    name = "scr-bench-restart",
    version,
    about = "Cost of verifying cached checkpoints at restart against plain reads"
)]
struct Args {
    /// MiB per rank.
    #[arg(long, default_value_t = 256)]
    mib: usize,
    /// Repetitions (the median is reported).
    #[arg(long, default_value_t = 5)]
    reps: usize,
}

fn settings(job: &str, crc_on_restart: bool) -> Result<Settings, Box<dyn std::error::Error>> {
    let mut s = Settings::new();
    s.set("copy_type=SINGLE")?;
    s.set("cache_size=1")?;
    s.set("flush=0")?;
    s.set("fetch=0")?;
    s.set(&format!("job_id={job}"))?;
    s.set(&format!("crc_on_restart={crc_on_restart}"))?;
    Ok(s)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let universe = mpi::initialize().ok_or("MPI initialises")?;
    let world = universe.world();
    let rank = world.rank();
    let job = format!("bench-restart-{}", std::process::id());
    let data: Vec<u8> = (0..args.mib << 20)
        .map(|i| (i * 31 + rank as usize) as u8)
        .collect();

    // one checkpoint in cache
    let mut scr = Scr::init_with(&world, &settings(&job, true)?)?;
    scr.start_output("ckpt.1", Flags::CHECKPOINT)?;
    let path = scr.route_file(format!("bench/rank_{rank}.dat"))?;
    write_synced(&path, &data)?;
    assert!(scr.complete_output(true)?, "checkpoint kept");
    let buf_size = scr.runtime().config().file_buf_size();
    let cache_base = scr.runtime().config().get(settings::CACHE_BASE);
    scr.finalize()?;
    drop(data);

    let (mut plain, mut with_crc, mut sizes_only) = (Vec::new(), Vec::new(), Vec::new());
    let mut buf = vec![0u8; buf_size];
    for rep in 0..args.reps {
        let order = if rep % 2 == 0 { [0, 1, 2] } else { [2, 1, 0] };
        for what in order {
            world.barrier();
            let t = Instant::now();
            match what {
                0 => {
                    let mut f = std::fs::File::open(&path)?;
                    let mut total = 0usize;
                    loop {
                        let n = f.read(&mut buf)?;
                        if n == 0 {
                            break;
                        }
                        total += std::hint::black_box(&buf[..n]).len();
                    }
                    assert_eq!(total, args.mib << 20);
                    plain.push(slowest(&world, t.elapsed().as_secs_f64()));
                }
                crc => {
                    let scr = Scr::init_with(&world, &settings(&job, crc == 1)?)?;
                    let secs = slowest(&world, t.elapsed().as_secs_f64());
                    assert_eq!(scr.have_restart().as_deref(), Some("ckpt.1"));
                    scr.finalize()?;
                    if crc == 1 {
                        with_crc.push(secs);
                    } else {
                        sizes_only.push(secs);
                    }
                }
            }
        }
    }
    let per_rep = |v: &[f64]| Spread::of(v.iter().zip(&plain).map(|(t, p)| t / p));
    let verify: Vec<f64> = with_crc
        .iter()
        .zip(&sizes_only)
        .map(|(c, s)| c - s)
        .collect();
    if rank == 0 {
        println!(
            "ranks: {}, {} MiB per rank, medians of {} reps [min-max], cache {cache_base}",
            world.size(),
            args.mib,
            args.reps
        );
        println!(
            "plain read of the cached file:   {} s",
            Spread::of(plain.iter().copied()).show(3)
        );
        println!(
            "init, crc_on_restart = true:     {} s, time / plain read {}",
            Spread::of(with_crc.iter().copied()).show(3),
            per_rep(&with_crc).show(2)
        );
        println!(
            "init, crc_on_restart = false:    {} s, time / plain read {}",
            Spread::of(sizes_only.iter().copied()).show(3),
            per_rep(&sizes_only).show(2)
        );
        println!(
            "verification alone:              {} s, time / plain read {}",
            Spread::of(verify.iter().copied()).show(3),
            per_rep(&verify).show(2)
        );
    }
    // leave nothing behind in the cache
    let mut scr = Scr::init_with(&world, &settings(&job, false)?)?;
    scr.delete("ckpt.1")?;
    scr.finalize()?;
    Ok(())
}
