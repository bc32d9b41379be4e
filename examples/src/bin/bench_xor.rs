//! `scr-bench-xor`: XOR apply and rebuild throughput per rank, each as a ratio to writing
//! the same bytes with plain writes + fsync in the same run.
//!
//! Run: `mpiexec -n 4 target/release/scr-bench-xor --mib 64 256` (and `-n 8`). Files live
//! under `--dir` (default /dev/shm). The set is the whole job, the scheme is the shipped
//! XOR plugin loaded through the registry, exactly as the runtime uses it.

use std::path::{Path, PathBuf};
use std::time::Instant;

use abi_stable::std_types::{RNone, RSome};
use clap::Parser;
use scr_api::mpi;
use scr_api::mpi::traits::{Communicator, CommunicatorCollectives, Root};
use scr_examples::{median, slowest, write_synced};
use scr_host::config::Config;
use scr_host::registry::Registry;
use scr_host::runtime::MpiHost;
use scr_plugin::{DatasetFiles, FileMeta, Param, RecoverRequest, SchemeConfig};

#[derive(Parser)]
#[command(
    name = "scr-bench-xor",
    version,
    about = "XOR apply and rebuild throughput"
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
    /// Repetitions (median reported).
    #[arg(long, default_value_t = 3)]
    reps: usize,
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
    let scheme = registry.new_scheme(&SchemeConfig {
        scheme: "XOR".into(),
        params: vec![Param {
            key: "buffer_size".into(),
            value: (args.piece_kib << 10).to_string().into(),
        }]
        .into(),
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
        0,
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
            "ranks {ranks}, XOR set of {ranks}, {} KiB pieces, {}",
            args.piece_kib,
            args.dir.display()
        );
        println!(
            "{:>8} {:>12} {:>12} {:>12} {:>10} {:>10}",
            "MiB/rank", "plain MB/s", "apply MB/s", "rebuild MB/s", "apply/plain", "rebuild/plain"
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
            let t = Instant::now();
            scheme
                .raw()
                .apply(scr_plugin::host_ref(&services), &ds)
                .into_result()?;
            apply.push(slowest(&world, t.elapsed().as_secs_f64()));

            // rank 0 loses everything; the set rebuilds it
            let lost = rank == 0;
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
            let t = Instant::now();
            scheme
                .raw()
                .recover(scr_plugin::host_ref(&services), &request)
                .into_result()?;
            rebuild.push(slowest(&world, t.elapsed().as_secs_f64()));
            if lost && std::fs::read(&file)? != data {
                return Err("the rebuilt file differs from the original".into());
            }
        }
        let (plain, apply, rebuild) = (median(plain), median(apply), median(rebuild));
        let rate = |s: f64| bytes as f64 / s / 1e6;
        if rank == 0 {
            println!(
                "{mib:>8} {:>12.0} {:>12.0} {:>12.0} {:>10.2} {:>10.2}",
                rate(plain),
                rate(apply),
                rate(rebuild),
                apply / plain,
                rebuild / plain
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
