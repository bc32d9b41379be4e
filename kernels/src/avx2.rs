//! AVX2 kernels: 32 bytes per step. A product `c·s` is two PSHUFB lookups (low and high
//! nibble of every source byte) in the 16-byte split tables of `c`, broadcast to both
//! 128-bit lanes because VPSHUFB shuffles within each lane.
//!
//! The kernels are safe `#[target_feature]` functions working on `[u8; 32]` blocks cast to
//! vectors (no pointer loads or stores); the only `unsafe` is the call into them, made
//! through [`KERNELS`], which [`kernels`] hands out only on a CPU that has AVX2.

#[cfg(target_arch = "x86")]
use std::arch::x86::*;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use crate::{scalar, Isa, Kernels};

/// Bytes per vector.
const W: usize = 32;
/// Destinations updated per pass of the fused kernel: 4 keep the source nibbles, the mask
/// and 8 table vectors in the 16 YMM registers; larger `k` runs in groups of 4 (one more
/// read of the source per group, small beside the k reads and writes of destinations).
const GROUP: usize = 4;

static KERNELS: Kernels = Kernels {
    isa: Isa::Avx2,
    mul_add,
    mul_add_multi,
    mul_add_matrix: Some(mul_add_matrix),
    xor_into,
};

/// The AVX2 kernels, or None when this CPU lacks AVX2.
pub(crate) fn kernels() -> Option<&'static Kernels> {
    is_x86_feature_detected!("avx2").then_some(&KERNELS)
}

fn mul_add(dst: &mut [u8], src: &[u8], c: u8) {
    // SAFETY: this function is reachable only through KERNELS, which `kernels()` returns
    // only after `is_x86_feature_detected!("avx2")` confirmed the CPU runs AVX2.
    unsafe { mul_add_avx2(dst, src, c) }
}

fn mul_add_multi(dsts: &mut [&mut [u8]], src: &[u8], coefs: &[u8]) {
    for (group, coefs) in dsts.chunks_mut(GROUP).zip(coefs.chunks(GROUP)) {
        // SAFETY: reachable only through KERNELS, handed out only on a CPU with AVX2 (see
        // `mul_add`).
        unsafe {
            match group.len() {
                1 => mul_add_group_avx2::<1>(group, src, coefs),
                2 => mul_add_group_avx2::<2>(group, src, coefs),
                3 => mul_add_group_avx2::<3>(group, src, coefs),
                _ => mul_add_group_avx2::<4>(group, src, coefs),
            }
        }
    }
}

fn mul_add_matrix(dsts: &mut [&mut [u8]], srcs: &[&[u8]], coefs: &[u8]) {
    let p = srcs.len();
    for (group, rows) in dsts.chunks_mut(GROUP).zip(coefs.chunks(GROUP * p)) {
        // SAFETY: reachable only through KERNELS, handed out only on a CPU with AVX2 (see
        // `mul_add`).
        unsafe {
            match group.len() {
                1 => mul_add_matrix_group_avx2::<1>(group, srcs, rows),
                2 => mul_add_matrix_group_avx2::<2>(group, srcs, rows),
                3 => mul_add_matrix_group_avx2::<3>(group, srcs, rows),
                _ => mul_add_matrix_group_avx2::<4>(group, srcs, rows),
            }
        }
    }
}

fn xor_into(dst: &mut [u8], src: &[u8]) {
    // SAFETY: reachable only through KERNELS, handed out only on a CPU with AVX2 (see
    // `mul_add`).
    unsafe { xor_into_avx2(dst, src) }
}

/// The split tables of `c` as lane-broadcast vectors.
#[target_feature(enable = "avx2")]
fn tables(lo: &[u8; 16], hi: &[u8; 16]) -> (__m256i, __m256i) {
    (
        _mm256_broadcastsi128_si256(bytemuck::cast(*lo)),
        _mm256_broadcastsi128_si256(bytemuck::cast(*hi)),
    )
}

/// The low and high nibbles of every byte of `s`, each in the low half of its byte (the
/// indices PSHUFB takes).
#[target_feature(enable = "avx2")]
fn nibbles(s: __m256i) -> (__m256i, __m256i) {
    let mask = _mm256_set1_epi8(0x0f);
    (
        _mm256_and_si256(s, mask),
        _mm256_and_si256(_mm256_srli_epi64::<4>(s), mask),
    )
}

#[target_feature(enable = "avx2")]
fn product(t: (__m256i, __m256i), n: (__m256i, __m256i)) -> __m256i {
    _mm256_xor_si256(_mm256_shuffle_epi8(t.0, n.0), _mm256_shuffle_epi8(t.1, n.1))
}

#[target_feature(enable = "avx2")]
fn mul_add_avx2(dst: &mut [u8], src: &[u8], c: u8) {
    let (lo, hi) = scalar::nibble_tables(c);
    let t = tables(&lo, &hi);
    let (dv, dt) = dst.as_chunks_mut::<W>();
    let (sv, st) = src.as_chunks::<W>();
    for (d, s) in dv.iter_mut().zip(sv) {
        let p = product(t, nibbles(bytemuck::cast(*s)));
        *d = bytemuck::cast(_mm256_xor_si256(bytemuck::cast(*d), p));
    }
    scalar::mul_add_nibbles(dt, st, &lo, &hi);
}

/// `dsts[j] ^= coefs[j]·src` for the `N` destinations of one group, each source block read
/// once and split into nibbles once for all of them.
#[target_feature(enable = "avx2")]
fn mul_add_group_avx2<const N: usize>(dsts: &mut [&mut [u8]], src: &[u8], coefs: &[u8]) {
    let nib: [([u8; 16], [u8; 16]); N] = std::array::from_fn(|j| scalar::nibble_tables(coefs[j]));
    let mut t = [(_mm256_setzero_si256(), _mm256_setzero_si256()); N];
    for j in 0..N {
        t[j] = tables(&nib[j].0, &nib[j].1);
    }
    let (sv, st) = src.as_chunks::<W>();
    let blocks = sv.len();
    let mut dests = dsts.iter_mut();
    // Every destination cut to exactly `blocks` vectors, so the loop's indexing needs no
    // bounds checks.
    let parts: [(&mut [[u8; W]], &mut [u8]); N] = std::array::from_fn(|_| {
        let (v, t) = dests
            .next()
            .expect("one group of N destinations")
            .as_chunks_mut::<W>();
        (&mut v[..blocks], t)
    });
    for (i, s) in sv.iter().enumerate() {
        let n = nibbles(bytemuck::cast(*s));
        for j in 0..N {
            let d = &mut parts[j].0[i];
            *d = bytemuck::cast(_mm256_xor_si256(bytemuck::cast(*d), product(t[j], n)));
        }
    }
    for j in 0..N {
        scalar::mul_add_nibbles(parts[j].1, st, &nib[j].0, &nib[j].1);
    }
}

/// `dsts[j] ^= Σ_i rows[j·p + i]·srcs[i]` for the `N` destinations of one group: each
/// destination block is loaded once, accumulates the products of every source in a
/// register and is stored once, so destinations cost one read and one write whatever `p`.
#[target_feature(enable = "avx2")]
fn mul_add_matrix_group_avx2<const N: usize>(dsts: &mut [&mut [u8]], srcs: &[&[u8]], rows: &[u8]) {
    let p = srcs.len();
    let nib: Vec<([u8; 16], [u8; 16])> = rows.iter().map(|&c| scalar::nibble_tables(c)).collect();
    let mut t = Vec::with_capacity(nib.len());
    for (lo, hi) in &nib {
        t.push(tables(lo, hi));
    }
    let len = srcs.first().map_or(0, |s| s.len());
    let blocks = len / W;
    let sv: Vec<&[[u8; W]]> = srcs
        .iter()
        .map(|s| &s.as_chunks::<W>().0[..blocks])
        .collect();
    let mut dests = dsts.iter_mut();
    let parts: [(&mut [[u8; W]], &mut [u8]); N] = std::array::from_fn(|_| {
        let (v, t) = dests
            .next()
            .expect("one group of N destinations")
            .as_chunks_mut::<W>();
        (&mut v[..blocks], t)
    });
    for b in 0..blocks {
        let mut acc = [_mm256_setzero_si256(); N];
        for (i, s) in sv.iter().enumerate() {
            let n = nibbles(bytemuck::cast(s[b]));
            for j in 0..N {
                acc[j] = _mm256_xor_si256(acc[j], product(t[j * p + i], n));
            }
        }
        for j in 0..N {
            let d = &mut parts[j].0[b];
            *d = bytemuck::cast(_mm256_xor_si256(bytemuck::cast(*d), acc[j]));
        }
    }
    for j in 0..N {
        for (i, s) in srcs.iter().enumerate() {
            let (lo, hi) = &nib[j * p + i];
            scalar::mul_add_nibbles(parts[j].1, &s[blocks * W..], lo, hi);
        }
    }
}

#[target_feature(enable = "avx2")]
fn xor_into_avx2(dst: &mut [u8], src: &[u8]) {
    // Four vectors per step: two loads and a store per vector, no dependency between them.
    let (dv, dt) = dst.as_chunks_mut::<{ 4 * W }>();
    let (sv, st) = src.as_chunks::<{ 4 * W }>();
    for (d, s) in dv.iter_mut().zip(sv) {
        let a: [__m256i; 4] = bytemuck::cast(*d);
        let b: [__m256i; 4] = bytemuck::cast(*s);
        let mut r = a;
        for v in 0..4 {
            r[v] = _mm256_xor_si256(a[v], b[v]);
        }
        *d = bytemuck::cast(r);
    }
    scalar::xor_into(dt, st);
}
