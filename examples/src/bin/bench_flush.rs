//! `scr-bench-flush`: flush bandwidth through the library and of the transfer plugins
//! alone, against `cp -r` of the same data in the same run.
//!
//! Each rank flushes its own dataset from `--cache` (default /dev/shm) to `--prefix`
//! (default /tmp, the stand-in for a parallel file system): once one file of `--mib` MiB,
//! once `--files` files of `--kib` KiB. Five ways, in an order that rotates with each
//! repetition; times are the slowest rank's, medians of `--reps` with [min-max]:
//! - `cp -r` of the rank's directory (no fsync);
//! - `plugin sync` / `plugin pthread`: the transfer plugin alone, loaded through the
//!   registry, copying the files (fsync and rename of each file, CRC32 on copy);
//! - `flush sync` / `flush pthread`: the real flush through the library, i.e. the
//!   `complete_output` of an OUTPUT dataset holding those files with `flush_type` set to
//!   that type: the index entry, the transfer, the host's re-read and CRC32 check of
//!   every flushed file, the gather of every rank's outcome, the summary and rank2file
//!   records. `crc_on_copy` is off in these runs so that `complete_output` does nothing
//!   else; the fixed cost of a `complete_output` that does not flush (a CHECKPOINT of the
//!   same files) is printed beside it.
//!
//! Rates are MB/s per rank; ratios are each way's rate / the `cp -r` rate of the same
//! repetition (1.00 = as fast as `cp -r`; the transfer types fsync every file before
//! renaming it into place, which `cp` does not). The library's pthread flush uses the
//! configured thread count (`[plugins.pthread] threads`, default 4), `--threads` only the
//! plugin-alone row.
//!
//! `--widths 1,2` adds a `flush pthread w=N` row per width: the same flush with
//! `flush_width = N`, so that at most N ranks copy at once (a sliding window by rank);
//! the plain `flush pthread` row is the unbounded flush (the default width, 256, is
//! above any rank count run here) and `cp -r` the baseline, all in the same run.
//!
//! `--async-bw 25,100` adds, per cap (MiB/s for the whole job), a background flush
//! (`flush_async`) of the single-file dataset held to `flush_async_bw` = that cap, timed
//! from its `complete_output` to the end of `finalize` (which waits for it), with the
//! same background flush uncapped beside it: the row prints the rate the job reached
//! and its ratio to the cap (1.00: exactly the cap; the cap holds when it is at most
//! 1.00 and near it, as long as the uncapped flush is faster than the cap).
//!
//! Run: `mpiexec -n 4 target/release/scr-bench-flush`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Parser;
use scr_api::mpi;
use scr_api::mpi::topology::SimpleCommunicator;
use scr_api::mpi::traits::{Communicator, CommunicatorCollectives, Root};
use scr_api::{Flags, Scr, Settings};
use scr_examples::{slowest, Spread};
use scr_host::config::{settings, Config};
use scr_host::registry::Registry;
use scr_plugin::{inproc, TransferConfig, TransferStatus};

#[derive(Parser)]
#[command(
    name = "scr-bench-flush",
    version,
    about = "Flush bandwidth, through the library and of the transfer plugins alone, against cp -r"
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
    /// Repetitions (median reported, with min and max).
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Threads of the plugin-alone pthread row.
    #[arg(long, default_value_t = 4)]
    threads: usize,
    /// `flush_width` values of extra `flush pthread w=N` rows (comma-separated).
    #[arg(long, value_delimiter = ',')]
    widths: Vec<u64>,
    /// `flush_async_bw` caps, MiB/s for the whole job, of extra background-flush rows
    /// (comma-separated; see the description).
    #[arg(long, value_delimiter = ',')]
    async_bw: Vec<u64>,
}

fn contents(bytes: usize, i: usize, rank: i32) -> Vec<u8> {
    (0..bytes)
        .map(|x| (x as u32 ^ (i as u32) ^ rank as u32) as u8)
        .collect()
}

fn make(dir: &Path, files: usize, bytes: usize, rank: i32) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    (0..files)
        .map(|i| {
            let p = dir.join(format!("f{i}.dat"));
            std::fs::write(&p, contents(bytes, i, rank)).map(|()| p)
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

/// Where the library runs of this benchmark keep their cache, control directory and
/// prefix.
struct Places {
    cache: PathBuf,
    prefix: PathBuf,
}

/// How a library run of the benchmark flushes.
#[derive(Clone, Copy)]
enum Flush {
    /// In the foreground, `flush_width` = the width when given.
    Now(Option<u64>),
    /// In the background, held to `flush_async_bw` = this many bytes per second (0: no
    /// cap); the time runs to the end of `finalize`, which waits for the flush.
    Background(u64),
}

/// Time (slowest rank) of the `complete_output` of a dataset of `files` files of `bytes`
/// bytes per rank, written untimed first: an OUTPUT dataset flushes with `kind` as
/// `flush` says, a CHECKPOINT one (flush = 0) does not. The flushed files are removed
/// afterwards.
#[allow(clippy::too_many_arguments)]
fn library(
    world: &SimpleCommunicator,
    places: &Places,
    kind: &str,
    flush: Flush,
    output: bool,
    tag: &str,
    files: usize,
    bytes: usize,
) -> Result<f64, Box<dyn std::error::Error>> {
    let rank = world.rank();
    let (width, background) = match flush {
        Flush::Now(w) => (w, None),
        Flush::Background(bw) => (None, Some(bw)),
    };
    let w = match (width, background) {
        (Some(w), _) => format!("-w{w}"),
        (_, Some(bw)) => format!("-bg{bw}"),
        _ => String::new(),
    };
    let job = format!("{tag}-{kind}{w}-{}", if output { "out" } else { "ckpt" });
    let prefix = places.prefix.join(&job);
    let mut s = Settings::new();
    for kv in [
        "copy_type=SINGLE".to_string(),
        "cache_size=1".into(),
        "flush=0".into(),
        "crc_on_copy=false".into(),
        format!("flush_type={kind}"),
        format!("flush_width={}", width.unwrap_or(256)),
        format!("cache_base={}", places.cache.join("cache").display()),
        format!("cntl_base={}", places.cache.join("cntl").display()),
        format!("prefix={}", prefix.display()),
        format!("job_id={job}"),
    ] {
        s.set(&kv)?;
    }
    if let Some(bw) = background {
        s.set("flush_async=true")?;
        s.set(&format!("flush_async_bw={bw}"))?;
    }
    let mut scr = Scr::init_with(world, &s)?;
    let flags = if output {
        Flags::OUTPUT
    } else {
        Flags::CHECKPOINT
    };
    scr.start_output("bench", flags)?;
    let mut ok = true;
    for i in 0..files {
        let path = scr.route_file(prefix.join(format!("out/r{rank}/f{i}.dat")))?;
        ok &= std::fs::File::create(&path)
            .and_then(|mut f| f.write_all(&contents(bytes, i, rank)))
            .is_ok();
    }
    world.barrier();
    let t = Instant::now();
    let kept = scr.complete_output(ok)?;
    let user = scr.runtime().config().get(settings::USER);
    // the background flush runs until finalize has waited for it
    let mut scr = Some(scr);
    if background.is_some() {
        scr.take().expect("not finalized yet").finalize()?;
    }
    let secs = slowest(world, t.elapsed().as_secs_f64());
    if !kept {
        return Err(format!("the {job} dataset was not kept").into());
    }
    if output {
        // the flush must have put every file in the prefix, byte for byte
        let all = (0..files).all(|i| {
            std::fs::read(prefix.join(format!("out/r{rank}/f{i}.dat")))
                .is_ok_and(|b| b == contents(bytes, i, rank))
        });
        let mut everywhere = 0u8;
        world.all_reduce_into(
            &u8::from(all),
            &mut everywhere,
            mpi::collective::SystemOperation::min(),
        );
        if everywhere == 0 {
            return Err(format!("the {kind} flush did not leave every file in the prefix").into());
        }
    }
    if let Some(scr) = scr {
        scr.finalize()?;
    }
    // what the run left in cache and in the prefix goes (ranks sharing a node race on
    // the cache: rank 0 sweeps again after them)
    let leftovers = [
        places
            .cache
            .join("cache")
            .join(&user)
            .join(format!("scr.{job}")),
        places
            .cache
            .join("cntl")
            .join(&user)
            .join(format!("scr.{job}")),
        prefix.join(format!("out/r{rank}")),
    ];
    world.barrier();
    for d in &leftovers {
        let _ = std::fs::remove_dir_all(d);
    }
    world.barrier();
    if rank == 0 {
        for d in &leftovers[..2] {
            let _ = std::fs::remove_dir_all(d);
        }
    }
    Ok(secs)
}

/// The `--async-bw` rows: per cap, the single-file dataset flushed in the background
/// with `flush_async_bw` at the cap and uncapped, alternating, `--reps` times each.
fn background_rows(
    world: &SimpleCommunicator,
    places: &Places,
    args: &Args,
) -> Result<(), Box<dyn std::error::Error>> {
    let bytes = args.mib << 20;
    let total = bytes as f64 * f64::from(world.size());
    for &cap in &args.async_bw {
        let cap_bytes = cap << 20;
        let (mut capped, mut free) = (Vec::new(), Vec::new());
        for rep in 0..args.reps {
            for k in [rep % 2, 1 - rep % 2] {
                let bw = if k == 0 { cap_bytes } else { 0 };
                let tag = format!("bg{cap}-{rep}");
                let secs = library(
                    world,
                    places,
                    "pthread",
                    Flush::Background(bw),
                    true,
                    &tag,
                    1,
                    bytes,
                )?;
                if k == 0 { &mut capped } else { &mut free }.push(secs);
            }
        }
        if world.rank() == 0 {
            let mib = |s: &f64| total / s / f64::from(1u32 << 20);
            let reached = Spread::of(capped.iter().map(mib));
            let uncapped = Spread::of(free.iter().map(mib));
            let ratio = Spread::of(capped.iter().map(|s| mib(s) / cap as f64));
            println!(
                "background flush, 1 x {} MiB per rank, flush_async_bw {cap} MiB/s for the job: {} MiB/s, reached / cap {} (uncapped {} MiB/s)",
                args.mib,
                reached.show(1),
                ratio.show(2),
                uncapped.show(0)
            );
        }
    }
    Ok(())
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
    let places = Places {
        cache: args.cache.join(format!("scr-bench-flush.{job}/lib")),
        prefix: args.prefix.join(format!("scr-bench-flush.{job}/lib")),
    };
    let ways: Vec<String> = [
        "cp -r",
        "plugin sync",
        "plugin pthread",
        "flush sync",
        "flush pthread",
    ]
    .iter()
    .map(|w| w.to_string())
    .chain(args.widths.iter().map(|w| format!("flush pthread w={w}")))
    .collect();
    if rank == 0 {
        println!(
            "ranks {}, cache {}, prefix {}; MB/s per rank, medians of {} reps [min-max]",
            world.size(),
            args.cache.display(),
            args.prefix.display(),
            args.reps
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
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); ways.len()];
        let mut fixed = Vec::new();
        for rep in 0..args.reps {
            for j in 0..ways.len() {
                let k = (j + rep) % ways.len();
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
                    2 => transfer(
                        &registry,
                        "pthread",
                        args.threads,
                        &list,
                        &dst,
                        &cache.join("state2"),
                    )?,
                    _ => {}
                }
                let secs = match k {
                    3.. => {
                        let kind = if k == 3 { "sync" } else { "pthread" };
                        let width = k.checked_sub(5).map(|i| args.widths[i]);
                        library(
                            &world,
                            &places,
                            kind,
                            Flush::Now(width),
                            true,
                            &format!("{files}-{rep}"),
                            files,
                            bytes,
                        )?
                    }
                    _ => slowest(&world, t.elapsed().as_secs_f64()),
                };
                times[k].push(secs);
                let _ = std::fs::remove_dir_all(&dst);
            }
            fixed.push(library(
                &world,
                &places,
                "sync",
                Flush::Now(None),
                false,
                &format!("{files}-{rep}"),
                files,
                bytes,
            )?);
        }
        let rate = |s: f64| (files * bytes) as f64 / s / 1e6;
        if rank == 0 {
            println!("{label}:");
            for (k, way) in ways.iter().enumerate() {
                let r = Spread::of(times[k].iter().map(|&t| rate(t)));
                let vs = Spread::of(times[k].iter().zip(&times[0]).map(|(t, cp)| cp / t));
                println!(
                    "  {way:<15} {:>22} MB/s   rate / cp -r rate {}",
                    r.show(0),
                    vs.show(2)
                );
            }
            let f = Spread::of(fixed);
            println!(
                "  (a complete_output of the same files that does not flush: {:.1} [{:.1}-{:.1}] ms)",
                f.median * 1e3,
                f.min * 1e3,
                f.max * 1e3
            );
        }
        let _ = std::fs::remove_dir_all(&src);
    }
    background_rows(&world, &places, &args)?;
    world.barrier();
    let _ = std::fs::remove_dir_all(&cache);
    let _ = std::fs::remove_dir_all(&prefix);
    if rank == 0 {
        let _ = std::fs::remove_dir_all(args.cache.join(format!("scr-bench-flush.{job}")));
        let _ = std::fs::remove_dir_all(args.prefix.join(format!("scr-bench-flush.{job}")));
    }
    Ok(())
}
