//! `scr-bench-xor`: XOR (or RS) apply and rebuild throughput per rank (MB/s of each rank's
//! data), each as a throughput ratio to writing the same bytes with plain writes + fsync
//! in the same run: `apply MB/s / plain MB/s` (1.00 = the apply takes as long as writing
//! the data once; higher is faster), and the CPU milliseconds the busiest rank's thread
//! spent in each (the kernels' share: on a loaded machine the elapsed times swing with
//! the scheduler, CPU time much less). Medians of `--reps` with [min-max]; the ratios are
//! taken per repetition, each against that repetition's plain write.
//!
//! Run: `mpiexec -n 4 target/release/scr-bench-xor --mib 64 256` (and `-n 8`);
//! `--scheme RS --set-failures 2` rebuilds the first 2 ranks. Files live under `--dir`
//! (default /dev/shm). The set is the whole job, the scheme is the shipped plugin loaded
//! through the registry, exactly as the runtime uses it. `SCR_KERNELS=avx2` (or another
//! instruction set) against the default compares the kernels.

use std::path::{Path, PathBuf};
use std::time::Instant;

use abi_stable::std_types::{RNone, RSome};
use clap::Parser;
use scr_api::mpi;
use scr_api::mpi::traits::{Communicator, CommunicatorCollectives, Root};
use scr_examples::{slowest, write_synced, Spread};
use scr_host::config::Config;
use scr_host::registry::Registry;
use scr_host::runtime::MpiHost;
use scr_plugin::{DatasetFiles, FileMeta, Param, RecoverRequest, SchemeConfig};

#[derive(Parser)]
#[command(
    name = "scr-bench-xor",
    version,
    about = "XOR or RS apply and rebuild throughput"
)]
struct Args {
    /// MiB per rank to measure (one run each).
    #[arg(long, num_args = 1.., default_values_t = [64usize, 256])]
    mib: Vec<usize>,
    /// Directory for the files.
    #[arg(long, default_value = "/dev/shm")]
    dir: PathBuf,
    /// Pipeline piece size in KiB.
    #[arg(long, default_value_t = 1024)]
    piece_kib: u64,
    /// Repetitions (median reported, with min and max).
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// The scheme: XOR, or RS (Reed-Solomon).
    #[arg(long, default_value = "XOR", value_parser = ["XOR", "RS"])]
    scheme: String,
    /// RS only: losses the set tolerates (set_failures); the rebuild loses that many ranks.
    #[arg(long, default_value_t = 2)]
    set_failures: u32,
}

/// CPU seconds this thread has run (`/proc/thread-self/schedstat`, nanoseconds), or 0
/// where that file is missing.
fn thread_cpu_seconds() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0.0, |ns| ns as f64 / 1e9)
}

fn meta(path: &Path, size: u64) -> FileMeta {
    FileMeta::new(path.display().to_string(), size)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let universe = mpi::initialize().ok_or("MPI initialises")?;
    let world = universe.world();
    let (rank, ranks) = (world.rank() as u32, world.size() as u32);
    let config = Config::load().map_err(|e| e.to_string())?;
    let registry = Registry::load(&config.search_path());
    let mut params = vec![Param {
        key: "buffer_size".into(),
        value: (args.piece_kib << 10).to_string().into(),
    }];
    let losses = match args.scheme.as_str() {
        "RS" => {
            params.push(Param {
                key: "set_failures".into(),
                value: args.set_failures.to_string().into(),
            });
            args.set_failures
        }
        _ => 1,
    };
    let scheme = registry.new_scheme(&SchemeConfig {
        scheme: args.scheme.as_str().into(),
        params: params.into(),
        settings: Default::default(),
        members: ranks,
        member: rank,
        world_rank: rank,
    })?;
    let services = MpiHost::new(
        world.duplicate(),
        (0..ranks).collect(),
        (0..ranks).map(|r| format!("node{r}")).collect(),
        rank,
    );
    let mut job = std::process::id();
    world.process_at_rank(0).broadcast_into(&mut job);
    let dir = args
        .dir
        .join(format!("scr-bench-xor.{job}"))
        .join(format!("rank{rank}"));
    std::fs::create_dir_all(&dir)?;
    if rank == 0 {
        println!(
            "ranks {ranks}, {} set of {ranks} ({losses} lost in the rebuild), {} KiB pieces, {}, kernels {}",
            args.scheme,
            args.piece_kib,
            args.dir.display(),
            std::env::var("SCR_KERNELS").unwrap_or_else(|_| "fastest".into())
        );
        println!(
            "MB/s per rank and throughput ratios to the plain write, medians of {} reps [min-max]",
            args.reps
        );
    }
    for &mib in &args.mib {
        let bytes = mib << 20;
        let data: Vec<u8> = (0..bytes)
            .map(|i| (i as u32).wrapping_mul(2_654_435_761).wrapping_add(rank) as u8)
            .collect();
        let file = dir.join("data.bin");
        let plain_file = dir.join("plain.bin");
        let (mut plain, mut apply, mut rebuild) = (Vec::new(), Vec::new(), Vec::new());
        let (mut apply_cpu, mut rebuild_cpu) = (Vec::new(), Vec::new());
        for _ in 0..args.reps {
            world.barrier();
            let t = Instant::now();
            write_synced(&plain_file, &data)?;
            plain.push(slowest(&world, t.elapsed().as_secs_f64()));

            write_synced(&file, &data)?;
            let ds = DatasetFiles {
                dataset_id: 1,
                dir: dir.display().to_string().into(),
                files: vec![meta(&file, bytes as u64)].into(),
            };
            world.barrier();
            let (t, cpu) = (Instant::now(), thread_cpu_seconds());
            scheme
                .raw()
                .apply(scr_plugin::host_ref(&services), &ds)
                .into_result()?;
            apply.push(slowest(&world, t.elapsed().as_secs_f64()));
            apply_cpu.push(slowest(&world, thread_cpu_seconds() - cpu));

            // the first `losses` ranks lose everything; the set rebuilds them
            let lost = rank < losses;
            if lost {
                std::fs::remove_file(&file)?;
                for red in scheme.raw().redundancy_files(&ds).into_result()? {
                    std::fs::remove_file(red.as_str())?;
                }
            }
            let request = RecoverRequest {
                dataset_id: 1,
                dir: ds.dir.clone(),
                files: if lost { RNone } else { RSome(ds.files.clone()) },
            };
            world.barrier();
            let (t, cpu) = (Instant::now(), thread_cpu_seconds());
            scheme
                .raw()
                .recover(scr_plugin::host_ref(&services), &request)
                .into_result()?;
            rebuild.push(slowest(&world, t.elapsed().as_secs_f64()));
            rebuild_cpu.push(slowest(&world, thread_cpu_seconds() - cpu));
            if lost && std::fs::read(&file)? != data {
                return Err("the rebuilt file differs from the original".into());
            }
        }
        let rate = |v: &[f64]| Spread::of(v.iter().map(|s| bytes as f64 / s / 1e6));
        // throughput ratio = plain time / its time, per repetition
        let vs = |v: &[f64]| Spread::of(v.iter().zip(&plain).map(|(s, p)| p / s));
        let ms = |v: &[f64]| Spread::of(v.iter().map(|s| s * 1e3));
        if rank == 0 {
            println!("{mib} MiB/rank:");
            println!("  plain write + fsync {:>22} MB/s", rate(&plain).show(0));
            println!(
                "  {:<4}apply          {:>22} MB/s   apply MB/s / plain MB/s {}   CPU {} ms",
                args.scheme,
                rate(&apply).show(0),
                vs(&apply).show(2),
                ms(&apply_cpu).show(0)
            );
            println!(
                "  {:<4}rebuild        {:>22} MB/s   rebuild MB/s / plain MB/s {}   CPU {} ms",
                args.scheme,
                rate(&rebuild).show(0),
                vs(&rebuild).show(2),
                ms(&rebuild_cpu).show(0)
            );
        }
    }
    world.barrier();
    std::fs::remove_dir_all(&dir)?;
    if rank == 0 {
        let _ = std::fs::remove_dir_all(dir.parent().expect("job dir"));
    }
    Ok(())
}
