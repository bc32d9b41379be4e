//! Kernel throughput as ratios to memcpy measured in the same run (the figures
//! docs/benchmarks.md quotes): the CRC32 the host computes, every kernel on every
//! implementation this CPU runs, and ISA-L's equivalents when `libisal.so.2` is installed
//! (Debian `libisal2`).
//!
//! `cargo run --release -p scr-kernels --example kernel-ratios [-- --reps N --sizes 64K,1M,64M
//! --cpu-time]`
//!
//! `--cpu-time` divides by the thread's CPU time instead of the elapsed time: on a machine
//! shared with other work it leaves out the time the thread waited for a core (not the
//! memory bandwidth the others take), which makes variants comparable there.
//!
//! Throughput is bytes of source data per second (for memcpy, bytes copied). Each rep
//! measures every kernel once, in turn, so load from other processes spreads over all of
//! them; the best and the median of the reps are printed, each with its ratio to memcpy's
//! best and median.

use std::hint::black_box;
use std::time::{Duration, Instant};

use scr_kernels::Kernels;

/// Coefficients that are neither 0 nor 1 (those take shortcuts).
const COEFS: [u8; 4] = [0x8e, 0x1d, 0xa7, 0x35];
/// Data members of the whole-encode row (a set of 8 with k = 2).
const DATA: usize = 6;

struct Options {
    reps: usize,
    cpu_time: bool,
    /// Buffer sizes in bytes.
    sizes: Vec<usize>,
}

/// `64K`, `1M`, `64M` or a plain number of bytes.
fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let (num, shift) = match s.char_indices().last()? {
        (i, 'K' | 'k') => (&s[..i], 10),
        (i, 'M' | 'm') => (&s[..i], 20),
        _ => (s, 0),
    };
    num.parse::<usize>().ok().map(|n| n << shift)
}

fn size_name(len: usize) -> String {
    if len >= 1 << 20 && len.is_multiple_of(1 << 20) {
        format!("{} MiB", len >> 20)
    } else if len >= 1 << 10 && len.is_multiple_of(1 << 10) {
        format!("{} KiB", len >> 10)
    } else {
        format!("{len} B")
    }
}

fn options() -> Options {
    let mut o = Options {
        reps: 7,
        cpu_time: false,
        sizes: vec![1 << 20, 64 << 20],
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--cpu-time" {
            o.cpu_time = true;
            continue;
        }
        let v = args.next();
        match (a.as_str(), v) {
            ("--reps", Some(v)) => o.reps = v.parse().expect("--reps takes a number"),
            ("--sizes", Some(v)) => {
                o.sizes = v
                    .split(',')
                    .map(|s| parse_size(s).expect("--sizes takes sizes like 64K,1M,64M"))
                    .collect()
            }
            _ => {
                eprintln!("usage: kernel-ratios [--reps N] [--sizes 64K,1M,64M] [--cpu-time]");
                std::process::exit(2);
            }
        }
    }
    o
}

/// One measured kernel: a closure over its own buffers, and how many source bytes one call
/// processes.
struct Case<'a> {
    name: String,
    bytes: usize,
    run: Box<dyn FnMut() + 'a>,
    samples: Vec<f64>,
}

/// This thread's CPU time.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through the valid pointer it is given;
    // CLOCK_THREAD_CPUTIME_ID is supported by every Linux this runs on.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// GB/s of one sample: as many calls as fit in ~60 ms (at least 2), after one warm-up call,
/// over elapsed or (with `cpu_time`) this thread's CPU time.
fn sample(case: &mut Case, cpu_time: bool) -> f64 {
    (case.run)();
    let start = Instant::now();
    let cpu_start = thread_cpu_time();
    let mut calls = 0u64;
    while calls < 2 || start.elapsed() < Duration::from_millis(60) {
        (case.run)();
        calls += 1;
    }
    let secs = if cpu_time {
        (thread_cpu_time() - cpu_start).as_secs_f64()
    } else {
        start.elapsed().as_secs_f64()
    };
    (case.bytes as f64 * calls as f64) / secs / 1e9
}

fn best_median(v: &[f64]) -> (f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    (s[s.len() - 1], s[s.len() / 2])
}

fn buffer(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 9) as u8)
        .collect()
}

fn main() {
    let o = options();
    let isal = isal::Isal::load();
    println!(
        "scr-kernels: dispatched implementation {}; available: {}",
        scr_kernels::implementation(),
        Kernels::available()
            .iter()
            .map(|k| k.isa().name())
            .collect::<Vec<_>>()
            .join(", ")
    );
    match &isal {
        Ok(_) => println!("ISA-L: libisal.so.2 loaded (its own run-time dispatch)"),
        Err(e) => println!("ISA-L not installed ({e})"),
    }
    println!(
        "reps per figure: {}; GB/s of source bytes per {} second",
        o.reps,
        if o.cpu_time { "CPU" } else { "elapsed" }
    );
    println!();

    for &len in &o.sizes {
        let src_buf = buffer(len, 7);
        let src: &[u8] = &src_buf;
        let srcs_buf: Vec<Vec<u8>> = (0..DATA).map(|i| buffer(len, i as u8 * 13)).collect();
        let srcs: &[Vec<u8>] = &srcs_buf;
        let mut cases: Vec<Case> = Vec::new();

        let mut copy_dst = vec![0u8; len];
        cases.push(Case {
            name: "memcpy".into(),
            bytes: len,
            run: Box::new(move || {
                copy_dst.copy_from_slice(black_box(src));
                black_box(&mut copy_dst);
            }),
            samples: vec![],
        });
        // the CRC32 every cached file gets (crc32fast, as the host computes it): the
        // bound the checksum puts on a scheme beside its kernels
        cases.push(Case {
            name: "crc32 (crc32fast)".into(),
            bytes: len,
            run: Box::new(move || {
                black_box(crc32fast::hash(black_box(src)));
            }),
            samples: vec![],
        });
        for k in Kernels::available() {
            let isa = k.isa();
            let mut d = vec![0u8; len];
            cases.push(Case {
                name: format!("xor_into {isa}"),
                bytes: len,
                run: Box::new(move || k.xor_into(black_box(&mut d), black_box(src))),
                samples: vec![],
            });
            let mut d = vec![0u8; len];
            cases.push(Case {
                name: format!("mul_add {isa}"),
                bytes: len,
                run: Box::new(move || k.mul_add(black_box(&mut d), black_box(src), COEFS[0])),
                samples: vec![],
            });
            let mut d2 = [vec![0u8; len], vec![0u8; len]];
            cases.push(Case {
                name: format!("mul_add x2 unfused {isa}"),
                bytes: len,
                run: Box::new(move || {
                    let [a, b] = &mut d2;
                    k.mul_add(black_box(a), black_box(src), COEFS[0]);
                    k.mul_add(black_box(b), black_box(src), COEFS[1]);
                }),
                samples: vec![],
            });
            for n in [2usize, 4] {
                let mut ds: Vec<Vec<u8>> = (0..n).map(|_| vec![0u8; len]).collect();
                cases.push(Case {
                    name: format!("mul_add_multi k={n} {isa}"),
                    bytes: len,
                    run: Box::new(move || {
                        let mut refs: Vec<&mut [u8]> =
                            ds.iter_mut().map(|d| d.as_mut_slice()).collect();
                        k.mul_add_multi(black_box(&mut refs), black_box(src), &COEFS[..n]);
                    }),
                    samples: vec![],
                });
            }
            let mut ds: Vec<Vec<u8>> = (0..2).map(|_| vec![0u8; len]).collect();
            cases.push(Case {
                name: format!("encode {DATA}->2 by multi {isa}"),
                bytes: len * DATA,
                run: Box::new(move || {
                    let mut refs: Vec<&mut [u8]> =
                        ds.iter_mut().map(|d| d.as_mut_slice()).collect();
                    for (i, s) in srcs.iter().enumerate() {
                        let coefs = [COEFS[i % 4], COEFS[(i + 1) % 4]];
                        k.mul_add_multi(black_box(&mut refs), black_box(s), &coefs);
                    }
                }),
                samples: vec![],
            });
            let mut ds: Vec<Vec<u8>> = (0..2).map(|_| vec![0u8; len]).collect();
            let coefs: Vec<u8> = (0..2)
                .flat_map(|r| (0..DATA).map(move |i| COEFS[(i + r) % 4]))
                .collect();
            cases.push(Case {
                name: format!("mul_add_matrix {DATA}->2 {isa}"),
                bytes: len * DATA,
                run: Box::new(move || {
                    let mut refs: Vec<&mut [u8]> =
                        ds.iter_mut().map(|d| d.as_mut_slice()).collect();
                    let srcs: Vec<&[u8]> = srcs.iter().map(|s| s.as_slice()).collect();
                    k.mul_add_matrix(black_box(&mut refs), black_box(&srcs), &coefs);
                }),
                samples: vec![],
            });
        }
        if let Ok(isal) = &isal {
            isal::cases(isal, src, srcs, &mut cases);
        }

        for _ in 0..o.reps {
            for c in cases.iter_mut() {
                let s = sample(c, o.cpu_time);
                c.samples.push(s);
            }
        }
        let (mb, mm) = best_median(&cases[0].samples);
        println!("{} buffers", size_name(len));
        println!(
            "{:<32} {:>9} {:>9} {:>8} {:>8}",
            "kernel", "best", "median", "best/", "median/"
        );
        println!(
            "{:<32} {:>9} {:>9} {:>8} {:>8}",
            "", "GB/s", "GB/s", "memcpy", "memcpy"
        );
        for c in &cases {
            let (b, m) = best_median(&c.samples);
            println!(
                "{:<32} {:>9.2} {:>9.2} {:>8.2} {:>8.2}",
                c.name,
                b,
                m,
                b / mb,
                m / mm
            );
        }
        println!();
    }
}

/// ISA-L, loaded at run time so the example builds and runs without it.
mod isal {
    use std::ffi::c_int;
    use std::hint::black_box;

    use super::{Case, COEFS, DATA};

    type GfVectMulInit = unsafe extern "C" fn(u8, *mut u8);
    type GfVectMad = unsafe extern "C" fn(c_int, c_int, c_int, *mut u8, *mut u8, *mut u8);
    type EcInitTables = unsafe extern "C" fn(c_int, c_int, *mut u8, *mut u8);
    type EcEncodeDataUpdate =
        unsafe extern "C" fn(c_int, c_int, c_int, c_int, *mut u8, *mut u8, *mut *mut u8);
    type EcEncodeData =
        unsafe extern "C" fn(c_int, c_int, c_int, *mut u8, *mut *mut u8, *mut *mut u8);

    pub struct Isal {
        _lib: libloading::Library,
        gf_vect_mul_init: GfVectMulInit,
        gf_vect_mad: GfVectMad,
        ec_init_tables: EcInitTables,
        ec_encode_data_update: EcEncodeDataUpdate,
        ec_encode_data: EcEncodeData,
    }

    impl Isal {
        pub fn load() -> Result<Isal, libloading::Error> {
            // SAFETY: libisal's initialisers only set up its CPU dispatch; the symbols are
            // read with the prototypes of isa-l/erasure_code.h and gf_vect_mul.h (2.30), and
            // the Library is kept alive in the struct as long as the function pointers.
            unsafe {
                let lib = libloading::Library::new("libisal.so.2")?;
                Ok(Isal {
                    gf_vect_mul_init: *lib.get(b"gf_vect_mul_init\0")?,
                    gf_vect_mad: *lib.get(b"gf_vect_mad\0")?,
                    ec_init_tables: *lib.get(b"ec_init_tables\0")?,
                    ec_encode_data_update: *lib.get(b"ec_encode_data_update\0")?,
                    ec_encode_data: *lib.get(b"ec_encode_data\0")?,
                    _lib: lib,
                })
            }
        }

        /// `ec_init_tables` for a `rows × k` coefficient matrix (row-major): 32 bytes per
        /// coefficient.
        fn tables(&self, k: usize, rows: usize, coefs: &[u8]) -> Vec<u8> {
            assert_eq!(coefs.len(), k * rows);
            let mut a = coefs.to_vec();
            let mut t = vec![0u8; 32 * k * rows];
            // SAFETY: `a` holds k·rows coefficients and `t` the 32·k·rows bytes the header
            // requires; ISA-L only reads `a` and writes `t`.
            unsafe {
                (self.ec_init_tables)(k as c_int, rows as c_int, a.as_mut_ptr(), t.as_mut_ptr())
            };
            t
        }
    }

    /// ISA-L's counterparts of the scr-kernels rows, each first checked byte for byte
    /// against scr-kernels (both use the polynomial 0x11D), so a figure is only printed for
    /// a kernel that computes the same thing.
    pub fn cases<'a>(
        isal: &'a Isal,
        src: &'a [u8],
        srcs: &'a [Vec<u8>],
        cases: &mut Vec<Case<'a>>,
    ) {
        let len = src.len();
        let mut src_mut = src.to_vec();

        // gf_vect_mad: dst ^= c·src, with gf_vect_mul_init's 32-byte table.
        let mut tbl = vec![0u8; 32];
        // SAFETY: gf_vect_mul_init writes the 32 bytes of `tbl`.
        unsafe { (isal.gf_vect_mul_init)(COEFS[0], tbl.as_mut_ptr()) };
        let mut check = vec![0u8; len];
        let mut ours = vec![0u8; len];
        let mad = move |tbl: &mut [u8], s: &mut [u8], d: &mut [u8]| {
            // SAFETY: one table of 32 bytes (vec = 1), source and destination of `len`
            // bytes each (len >= 64 for the sizes run here).
            unsafe {
                (isal.gf_vect_mad)(
                    len as c_int,
                    1,
                    0,
                    tbl.as_mut_ptr(),
                    s.as_mut_ptr(),
                    d.as_mut_ptr(),
                )
            }
        };
        mad(&mut tbl, &mut src_mut, &mut check);
        scr_kernels::mul_add(&mut ours, src, COEFS[0]);
        report_check("gf_vect_mad", check == ours);
        let mut d = vec![0u8; len];
        let mut s1 = src_mut.clone();
        cases.push(Case {
            name: "gf_vect_mad ISA-L".into(),
            bytes: len,
            run: Box::new(move || mad(&mut tbl, black_box(&mut s1), black_box(&mut d))),
            samples: vec![],
        });

        // ec_encode_data_update: one source into k destinations (the fused form).
        for n in [2usize, 4] {
            let mut t = isal.tables(1, n, &COEFS[..n]);
            let mut ds: Vec<Vec<u8>> = (0..n).map(|_| vec![0u8; len]).collect();
            let mut s = src_mut.clone();
            let mut update = move |ds: &mut [Vec<u8>], s: &mut [u8]| {
                let mut ptrs: Vec<*mut u8> = ds.iter_mut().map(|d| d.as_mut_ptr()).collect();
                // SAFETY: k = 1 source of `len` bytes, `n` destination pointers to `len`
                // bytes each, tables of 32·1·n bytes from ec_init_tables.
                unsafe {
                    (isal.ec_encode_data_update)(
                        len as c_int,
                        1,
                        n as c_int,
                        0,
                        t.as_mut_ptr(),
                        s.as_mut_ptr(),
                        ptrs.as_mut_ptr(),
                    )
                }
            };
            update(&mut ds, &mut s);
            let mut ours: Vec<Vec<u8>> = (0..n).map(|_| vec![0u8; len]).collect();
            let mut refs: Vec<&mut [u8]> = ours.iter_mut().map(|d| d.as_mut_slice()).collect();
            scr_kernels::mul_add_multi(&mut refs, src, &COEFS[..n]);
            report_check("ec_encode_data_update", ds == ours);
            cases.push(Case {
                name: format!("ec_encode_data_update k={n} ISA-L"),
                bytes: len,
                run: Box::new(move || update(black_box(&mut ds), black_box(&mut s))),
                samples: vec![],
            });
        }

        // ec_encode_data: DATA sources into 2 checksums in one call (it overwrites).
        let coefs: Vec<u8> = (0..2)
            .flat_map(|r| (0..DATA).map(move |i| COEFS[(i + r) % 4]))
            .collect();
        let mut t = isal.tables(DATA, 2, &coefs);
        let mut ss: Vec<Vec<u8>> = srcs.to_vec();
        let mut ds: Vec<Vec<u8>> = (0..2).map(|_| vec![0u8; len]).collect();
        let mut encode = move |ss: &mut [Vec<u8>], ds: &mut [Vec<u8>]| {
            let mut sp: Vec<*mut u8> = ss.iter_mut().map(|d| d.as_mut_ptr()).collect();
            let mut dp: Vec<*mut u8> = ds.iter_mut().map(|d| d.as_mut_ptr()).collect();
            // SAFETY: DATA source and 2 destination pointers to `len` bytes each, tables of
            // 32·DATA·2 bytes from ec_init_tables.
            unsafe {
                (isal.ec_encode_data)(
                    len as c_int,
                    DATA as c_int,
                    2,
                    t.as_mut_ptr(),
                    sp.as_mut_ptr(),
                    dp.as_mut_ptr(),
                )
            }
        };
        encode(&mut ss, &mut ds);
        let mut ours: Vec<Vec<u8>> = (0..2).map(|_| vec![0u8; len]).collect();
        for (i, s) in srcs.iter().enumerate() {
            let mut refs: Vec<&mut [u8]> = ours.iter_mut().map(|d| d.as_mut_slice()).collect();
            scr_kernels::mul_add_multi(&mut refs, s, &[COEFS[i % 4], COEFS[(i + 1) % 4]]);
        }
        report_check("ec_encode_data", ds == ours);
        cases.push(Case {
            name: format!("ec_encode_data {DATA}->2 ISA-L"),
            bytes: len * DATA,
            run: Box::new(move || encode(black_box(&mut ss), black_box(&mut ds))),
            samples: vec![],
        });
    }

    fn report_check(what: &str, same: bool) {
        if !same {
            println!("WARNING: ISA-L {what} computed different bytes from scr-kernels");
        }
    }
}
