//! scr-bench-crc: the cheapest correct way to compute a cached file's CRC32.
//!
//! SINGLE reads none of its files, so with `crc_on_copy` the host reads each file once
//! more only to hash it (the same read restart verification makes). This measures, in one
//! run and on each directory given, the ways to do that read against the cost of
//! writing the same bytes (one `write` and an `fsync`, what a checkpoint costs the
//! application): `read` into buffers of 256 KiB, 1, 8 and 32 MiB, the 1 MiB one after
//! `posix_fadvise(SEQUENTIAL)`, and a memory map (`memmap2`) hashed in place, with and
//! without populating it up front. Every way must give the same CRC32 (checked).
//!
//! Each figure is the median of `--reps` runs after one untimed run, printed as a ratio
//! to the write + fsync of the same file measured in the same run (lower is better:
//! 0.05 means hashing costs 5% of writing). Timings on a shared machine vary; compare
//! the rows of one run, not runs.
//!
//! ```text
//! scr-bench-crc --dir /dev/shm --dir /tmp --mib 16 --mib 64 --mib 256 --reps 5
//! ```

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Parser;

#[derive(Parser)]
#[command(about = "Compare ways to compute a file's CRC32 against writing it")]
struct Args {
    /// Directory to measure in (repeatable; default: /dev/shm and /tmp).
    #[arg(long)]
    dir: Vec<PathBuf>,
    /// File size in MiB (repeatable; default: 16, 64 and 256).
    #[arg(long)]
    mib: Vec<u64>,
    /// Timed repetitions of each measurement (the median is printed).
    #[arg(long, default_value_t = 5)]
    reps: usize,
}

/// The memory-mapped read, fenced in its own module (the only `unsafe` here).
mod mapped {
    use std::fs::File;

    /// CRC32 of `file` through a read-only memory map; `populate` asks the kernel to map
    /// every page up front instead of faulting them in one at a time.
    pub fn crc32(file: &File, populate: bool) -> std::io::Result<u32> {
        if file.metadata()?.len() == 0 {
            return Ok(crc32fast::hash(&[]));
        }
        let mut options = memmap2::MmapOptions::new();
        if populate {
            options.populate();
        }
        // Another process writing the file meanwhile changes the bytes hashed (a wrong
        // CRC32, as a read racing a write gives); one truncating it makes the access past
        // the new end raise SIGBUS — acceptable in a benchmark of files it made itself,
        // and the reason the runtime would need more care to adopt this.
        // SAFETY: the map is read-only, private to this function and dropped before it returns.
        let map = unsafe { options.map(file)? };
        let _ = map.advise(memmap2::Advice::Sequential);
        Ok(crc32fast::hash(&map))
    }
}

/// CRC32 of `path` read with `read` into a buffer of `buf` bytes, optionally after
/// telling the kernel the access is sequential.
fn read_crc(path: &Path, buf: usize, fadvise: bool) -> std::io::Result<u32> {
    let mut f = File::open(path)?;
    if fadvise {
        use std::os::fd::AsRawFd;
        // advice only: an error changes nothing about the result
        let _ = fadvise_sequential(f.as_raw_fd());
    }
    let mut h = crc32fast::Hasher::new();
    let mut b = vec![0u8; buf];
    loop {
        let n = match f.read(&mut b) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        h.update(&b[..n]);
    }
    Ok(h.finalize())
}

fn fadvise_sequential(fd: i32) -> i32 {
    // SAFETY: `fd` is an open descriptor owned by the caller for the whole call;
    // posix_fadvise reads no memory of this process.
    unsafe { libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_SEQUENTIAL) }
}

fn write_fsync(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let mut f = File::create(path)?;
    f.write_all(data)?;
    f.sync_all()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median seconds of `reps` timed runs of `f`, after one untimed run.
fn time(reps: usize, mut f: impl FnMut() -> std::io::Result<u32>, want: Option<u32>) -> f64 {
    let check = |got: u32| {
        if let Some(w) = want {
            assert_eq!(got, w, "a CRC32 differs from crc32fast::hash of the bytes");
        }
    };
    check(f().expect("measured call"));
    median(
        (0..reps)
            .map(|_| {
                let t = Instant::now();
                let got = f().expect("measured call");
                let s = t.elapsed().as_secs_f64();
                check(got);
                s
            })
            .collect(),
    )
}

fn main() {
    let args = Args::parse();
    let dirs = if args.dir.is_empty() {
        vec![PathBuf::from("/dev/shm"), PathBuf::from("/tmp")]
    } else {
        args.dir
    };
    let sizes = if args.mib.is_empty() {
        vec![16, 64, 256]
    } else {
        args.mib
    };
    let reps = args.reps.max(1);
    println!("scr-bench-crc: median of {reps} runs, each as a ratio to write+fsync of the same file (lower is better)");
    println!(
        "{:<10} {:>5} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "dir",
        "MiB",
        "write ms",
        "read 256K",
        "read 1M",
        "read 8M",
        "read 32M",
        "fadv 1M",
        "mmap",
        "mmap+pop"
    );
    for dir in &dirs {
        for &mib in &sizes {
            let len = (mib << 20) as usize;
            let data: Vec<u8> = (0..len)
                .map(|i| {
                    (i as u64)
                        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                        .rotate_left(17) as u8
                })
                .collect();
            let want = crc32fast::hash(&data);
            let path = dir.join(format!("scr-bench-crc.{}.{mib}", std::process::id()));
            let write = time(reps, || write_fsync(&path, &data).map(|()| want), None);
            let ratio = |s: f64| s / write;
            let r256k = ratio(time(reps, || read_crc(&path, 256 << 10, false), Some(want)));
            let r1 = ratio(time(reps, || read_crc(&path, 1 << 20, false), Some(want)));
            let r8 = ratio(time(reps, || read_crc(&path, 8 << 20, false), Some(want)));
            let r32 = ratio(time(reps, || read_crc(&path, 32 << 20, false), Some(want)));
            let f1 = ratio(time(reps, || read_crc(&path, 1 << 20, true), Some(want)));
            let mm = ratio(time(
                reps,
                || mapped::crc32(&File::open(&path)?, false),
                Some(want),
            ));
            let mp = ratio(time(
                reps,
                || mapped::crc32(&File::open(&path)?, true),
                Some(want),
            ));
            let _ = std::fs::remove_file(&path);
            println!(
                "{:<10} {:>5} {:>10.1} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
                dir.display(),
                mib,
                write * 1e3,
                r256k,
                r1,
                r8,
                r32,
                f1,
                mm,
                mp
            );
        }
    }
}
