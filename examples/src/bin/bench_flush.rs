//! `scr-bench-flush`: flush bandwidth of the `sync` and `pthread` transfer types against
//! `cp -r` of the same dataset in the same run.
//!
//! Each rank copies its own dataset from `--cache` (default /dev/shm) to `--prefix`
//! (default /tmp, the stand-in for a parallel file system): once one file of `--mib` MiB,
//! once `--files` files of `--kib` KiB. Times are the slowest rank's, medians of `--reps`.
//! The transfer types fsync every file before renaming it into place; `cp` does not, so
//! the ratio includes durability `cp` does not give.
//!
//! Run: `mpiexec -n 4 target/release/scr-bench-flush`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Parser;
use scr_api::mpi;
use scr_api::mpi::traits::{Communicator, CommunicatorCollectives, Root};
use scr_examples::{median, slowest};
use scr_host::config::Config;
use scr_host::registry::Registry;
use scr_plugin::{inproc, TransferConfig, TransferStatus};

#[derive(Parser)]
#[command(
    name = "scr-bench-flush",
    version,
    about = "Flush bandwidth against cp -r"
)]
struct Args {
    /// Where the cached dataset is made.
    #[arg(long, default_value = "/dev/shm")]
    cache: PathBuf,
    /// Where it is flushed to.
    #[arg(long, default_value = "/tmp")]
    prefix: PathBuf,
    /// Size of the single-file dataset, MiB per rank.
    #[arg(long, default_value_t = 256)]
    mib: usize,
    /// Files in the many-files dataset, per rank.
    #[arg(long, default_value_t = 1000)]
    files: usize,
    /// Size of each of those files, KiB.
    #[arg(long, default_value_t = 64)]
    kib: usize,
    /// Repetitions (median reported).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Threads of the pthread type.
    #[arg(long, default_value_t = 4)]
    threads: usize,
}

fn make(dir: &Path, files: usize, bytes: usize, rank: i32) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    (0..files)
        .map(|i| {
            let p = dir.join(format!("f{i}.dat"));
            let data: Vec<u8> = (0..bytes)
                .map(|x| (x as u32 ^ (i as u32) ^ rank as u32) as u8)
                .collect();
            std::fs::write(&p, data).map(|()| p)
        })
        .collect()
}

fn transfer(
    registry: &Registry,
    kind: &str,
    threads: usize,
    files: &[PathBuf],
    dst: &Path,
    state: &Path,
) -> Result<(), String> {
    let config = TransferConfig {
        transfer_type: kind.into(),
        state_file: state.display().to_string().into(),
        crc32: true,
        preserve_metadata: true,
        settings: vec![scr_plugin::Param {
            key: "threads".into(),
            value: threads.to_string().into(),
        }]
        .into_iter()
        .filter(|_| kind == "pthread")
        .collect(),
    };
    let world = inproc::World::new(&["bench"], std::time::Duration::from_secs(3600));
    let services = world.member(0);
    let host = scr_plugin::host_ref(&services);
    let mut t = registry
        .new_transfer(&config, host.sabi_reborrow())
        .map_err(|e| e.to_string())?;
    for f in files {
        let d = dst.join(f.file_name().expect("file name"));
        t.add(
            f.display().to_string().as_str().into(),
            d.display().to_string().as_str().into(),
        )
        .into_result()
        .map_err(|e| e.to_string())?;
    }
    t.dispatch(host.sabi_reborrow())
        .into_result()
        .map_err(|e| e.to_string())?;
    match t.wait(host).into_result().map_err(|e| e.to_string())? {
        TransferStatus::Complete => Ok(()),
        s => Err(format!("{kind} ended {s:?}")),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let universe = mpi::initialize().ok_or("MPI initialises")?;
    let world = universe.world();
    let rank = world.rank();
    let config = Config::load().map_err(|e| e.to_string())?;
    let registry = Registry::load(&config.search_path());
    let mut job = std::process::id();
    world.process_at_rank(0).broadcast_into(&mut job);
    let cache = args.cache.join(format!("scr-bench-flush.{job}/rank{rank}"));
    let prefix = args
        .prefix
        .join(format!("scr-bench-flush.{job}/rank{rank}"));
    if rank == 0 {
        println!(
            "ranks {}, cache {}, prefix {}; MB/s per rank, ratio = time / cp -r time",
            world.size(),
            args.cache.display(),
            args.prefix.display()
        );
        println!(
            "{:<24} {:>10} {:>10} {:>10} {:>8} {:>8}",
            "dataset", "cp -r", "sync", "pthread", "sync/cp", "pthr/cp"
        );
    }
    for (label, files, bytes) in [
        (format!("1 x {} MiB", args.mib), 1usize, args.mib << 20),
        (
            format!("{} x {} KiB", args.files, args.kib),
            args.files,
            args.kib << 10,
        ),
    ] {
        let src = cache.join("src");
        let list = make(&src, files, bytes, rank)?;
        let mut times: [Vec<f64>; 3] = Default::default();
        for _ in 0..args.reps {
            for (k, times) in times.iter_mut().enumerate() {
                let dst = prefix.join(format!("dst{k}"));
                let _ = std::fs::remove_dir_all(&dst);
                std::fs::create_dir_all(&dst)?;
                if rank == 0 {
                    let _ = std::process::Command::new("sync").status();
                }
                world.barrier();
                let t = Instant::now();
                match k {
                    0 => {
                        let st = std::process::Command::new("cp")
                            .arg("-r")
                            .arg(&src)
                            .arg(&dst)
                            .status()?;
                        if !st.success() {
                            return Err("cp -r failed".into());
                        }
                    }
                    1 => transfer(&registry, "sync", 1, &list, &dst, &cache.join("state1"))?,
                    _ => transfer(
                        &registry,
                        "pthread",
                        args.threads,
                        &list,
                        &dst,
                        &cache.join("state2"),
                    )?,
                }
                times.push(slowest(&world, t.elapsed().as_secs_f64()));
            }
        }
        let [cp, sync, pthread] = times.map(median);
        let rate = |s: f64| (files * bytes) as f64 / s / 1e6;
        if rank == 0 {
            println!(
                "{label:<24} {:>10.0} {:>10.0} {:>10.0} {:>8.2} {:>8.2}",
                rate(cp),
                rate(sync),
                rate(pthread),
                sync / cp,
                pthread / cp
            );
        }
        let _ = std::fs::remove_dir_all(&src);
    }
    world.barrier();
    let _ = std::fs::remove_dir_all(&cache);
    let _ = std::fs::remove_dir_all(&prefix);
    if rank == 0 {
        let _ = std::fs::remove_dir_all(args.cache.join(format!("scr-bench-flush.{job}")));
        let _ = std::fs::remove_dir_all(args.prefix.join(format!("scr-bench-flush.{job}")));
    }
    Ok(())
}
