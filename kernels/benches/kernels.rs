//! Criterion benchmarks of the slice kernels on every implementation this CPU runs, next to
//! a memcpy of the same size as the baseline, on 1 MiB (cache-resident on most CPUs) and
//! 64 MiB (memory-bound) buffers, and a whole 6 -> 2 encode. Throughput is bytes of source
//! data.
//!
//! `cargo bench -p scr-kernels --bench kernels [-- FILTER]`; the `kernel-ratios` example
//! prints the same kernels as ratios to memcpy measured in the same run.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use scr_kernels::Kernels;

/// Coefficients that are neither 0 nor 1 (those take shortcuts).
const COEFS: [u8; 4] = [0x8e, 0x1d, 0xa7, 0x35];

fn buffer(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 9) as u8)
        .collect()
}

fn kernels(c: &mut Criterion) {
    for mib in [1usize, 64] {
        let len = mib << 20;
        let src = buffer(len, 7);
        let mut g = c.benchmark_group(format!("{mib}MiB"));
        g.throughput(Throughput::Bytes(len as u64));
        if mib > 1 {
            g.sample_size(20)
                .warm_up_time(Duration::from_secs(1))
                .measurement_time(Duration::from_secs(3));
        }

        let mut dst = buffer(len, 1);
        g.bench_function("memcpy", |b| {
            b.iter(|| dst.copy_from_slice(black_box(&src)))
        });
        for k in Kernels::available() {
            let isa = k.isa().name();
            g.bench_function(BenchmarkId::new("xor_into", isa), |b| {
                b.iter(|| k.xor_into(black_box(&mut dst), black_box(&src)))
            });
            g.bench_function(BenchmarkId::new("mul_add", isa), |b| {
                b.iter(|| k.mul_add(black_box(&mut dst), black_box(&src), COEFS[0]))
            });
            for n in [2usize, 4] {
                let mut ds: Vec<Vec<u8>> = (0..n).map(|j| buffer(len, j as u8)).collect();
                g.bench_function(BenchmarkId::new(format!("mul_add_multi_k{n}"), isa), |b| {
                    b.iter(|| {
                        let mut refs: Vec<&mut [u8]> =
                            ds.iter_mut().map(|d| d.as_mut_slice()).collect();
                        k.mul_add_multi(black_box(&mut refs), black_box(&src), &COEFS[..n])
                    })
                });
            }
        }
        g.finish();

        // A whole 6 -> 2 encode (throughput in bytes of all six sources): the striped matrix
        // form against one fused call per source over the whole slices.
        let srcs: Vec<Vec<u8>> = (0..6).map(|i| buffer(len, 40 + i as u8)).collect();
        let coefs: Vec<u8> = (0..12).map(|x| COEFS[x % 4]).collect();
        let mut g = c.benchmark_group(format!("{mib}MiB-encode6x2"));
        g.throughput(Throughput::Bytes(6 * len as u64));
        if mib > 1 {
            g.sample_size(10)
                .warm_up_time(Duration::from_secs(1))
                .measurement_time(Duration::from_secs(3));
        }
        let mut ds: Vec<Vec<u8>> = (0..2).map(|j| buffer(len, j as u8)).collect();
        for k in Kernels::available() {
            let isa = k.isa().name();
            g.bench_function(BenchmarkId::new("mul_add_matrix", isa), |b| {
                b.iter(|| {
                    let mut refs: Vec<&mut [u8]> =
                        ds.iter_mut().map(|d| d.as_mut_slice()).collect();
                    let s: Vec<&[u8]> = srcs.iter().map(|s| s.as_slice()).collect();
                    k.mul_add_matrix(black_box(&mut refs), black_box(&s), &coefs)
                })
            });
            g.bench_function(BenchmarkId::new("mul_add_multi_per_source", isa), |b| {
                b.iter(|| {
                    let mut refs: Vec<&mut [u8]> =
                        ds.iter_mut().map(|d| d.as_mut_slice()).collect();
                    for (i, s) in srcs.iter().enumerate() {
                        let column = [coefs[i], coefs[6 + i]];
                        k.mul_add_multi(black_box(&mut refs), black_box(s), &column);
                    }
                })
            });
        }
        g.finish();
    }
}

criterion_group!(benches, kernels);
criterion_main!(benches);
