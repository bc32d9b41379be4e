//! SSSE3 kernels: 16 bytes per step. A product `c·s` is two PSHUFB lookups (low and high
//! nibble of every source byte) in the 16-byte split tables of `c`.
//!
//! The kernels are safe `#[target_feature]` functions working on `[u8; 16]` blocks cast to
//! vectors (no pointer loads or stores); the only `unsafe` is the call into them, made
//! through [`KERNELS`], which [`kernels`] hands out only on a CPU that has SSSE3.

#[cfg(target_arch = "x86")]
use std::arch::x86::*;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use crate::{scalar, Isa, Kernels};

/// Bytes per vector.
const W: usize = 16;
/// Destinations updated per pass of the fused kernel: 4 keep the source nibbles, the mask
/// and 8 table vectors in the 16 XMM registers; larger `k` runs in groups of 4 (one more
/// read of the source per group, small beside the k reads and writes of destinations).
const GROUP: usize = 4;

static KERNELS: Kernels = Kernels {
    isa: Isa::Ssse3,
    mul_add,
    mul_add_multi,
    mul_add_matrix: Some(mul_add_matrix),
    xor_into,
};

/// The SSSE3 kernels, or None when this CPU lacks SSSE3.
pub(crate) fn kernels() -> Option<&'static Kernels> {
    is_x86_feature_detected!("ssse3").then_some(&KERNELS)
}

fn mul_add(dst: &mut [u8], src: &[u8], c: u8) {
    // SAFETY: this function is reachable only through KERNELS, which `kernels()` returns
    // only after `is_x86_feature_detected!("ssse3")` confirmed the CPU runs SSSE3.
    unsafe { mul_add_ssse3(dst, src, c) }
}

fn mul_add_multi(dsts: &mut [&mut [u8]], src: &[u8], coefs: &[u8]) {
    for (group, coefs) in dsts.chunks_mut(GROUP).zip(coefs.chunks(GROUP)) {
        // SAFETY: reachable only through KERNELS, handed out only on a CPU with SSSE3 (see
        // `mul_add`).
        unsafe {
            match group.len() {
                1 => mul_add_group_ssse3::<1>(group, src, coefs),
                2 => mul_add_group_ssse3::<2>(group, src, coefs),
                3 => mul_add_group_ssse3::<3>(group, src, coefs),
                _ => mul_add_group_ssse3::<4>(group, src, coefs),
            }
        }
    }
}

fn mul_add_matrix(dsts: &mut [&mut [u8]], srcs: &[&[u8]], coefs: &[u8]) {
    let p = srcs.len();
    for (group, rows) in dsts.chunks_mut(GROUP).zip(coefs.chunks(GROUP * p)) {
        // SAFETY: reachable only through KERNELS, handed out only on a CPU with SSSE3 (see
        // `mul_add`).
        unsafe {
            match group.len() {
                1 => mul_add_matrix_group_ssse3::<1>(group, srcs, rows),
                2 => mul_add_matrix_group_ssse3::<2>(group, srcs, rows),
                3 => mul_add_matrix_group_ssse3::<3>(group, srcs, rows),
                _ => mul_add_matrix_group_ssse3::<4>(group, srcs, rows),
            }
        }
    }
}

fn xor_into(dst: &mut [u8], src: &[u8]) {
    // SAFETY: reachable only through KERNELS, handed out only on a CPU with SSSE3 (see
    // `mul_add`).
    unsafe { xor_into_ssse3(dst, src) }
}

/// The split tables of `c` as vectors.
#[target_feature(enable = "ssse3")]
fn tables(lo: &[u8; 16], hi: &[u8; 16]) -> (__m128i, __m128i) {
    (bytemuck::cast(*lo), bytemuck::cast(*hi))
}

/// The low and high nibbles of every byte of `s`, each in the low half of its byte (the
/// indices PSHUFB takes).
#[target_feature(enable = "ssse3")]
fn nibbles(s: __m128i) -> (__m128i, __m128i) {
    let mask = _mm_set1_epi8(0x0f);
    (
        _mm_and_si128(s, mask),
        _mm_and_si128(_mm_srli_epi64::<4>(s), mask),
    )
}

#[target_feature(enable = "ssse3")]
fn product(t: (__m128i, __m128i), n: (__m128i, __m128i)) -> __m128i {
    _mm_xor_si128(_mm_shuffle_epi8(t.0, n.0), _mm_shuffle_epi8(t.1, n.1))
}

#[target_feature(enable = "ssse3")]
fn mul_add_ssse3(dst: &mut [u8], src: &[u8], c: u8) {
    let (lo, hi) = scalar::nibble_tables(c);
    let t = tables(&lo, &hi);
    let (dv, dt) = dst.as_chunks_mut::<W>();
    let (sv, st) = src.as_chunks::<W>();
    for (d, s) in dv.iter_mut().zip(sv) {
        let p = product(t, nibbles(bytemuck::cast(*s)));
        *d = bytemuck::cast(_mm_xor_si128(bytemuck::cast(*d), p));
    }
    scalar::mul_add_nibbles(dt, st, &lo, &hi);
}

/// `dsts[j] ^= coefs[j]·src` for the `N` destinations of one group, each source block read
/// once and split into nibbles once for all of them.
#[target_feature(enable = "ssse3")]
fn mul_add_group_ssse3<const N: usize>(dsts: &mut [&mut [u8]], src: &[u8], coefs: &[u8]) {
    let nib: [([u8; 16], [u8; 16]); N] = std::array::from_fn(|j| scalar::nibble_tables(coefs[j]));
    let mut t = [(_mm_setzero_si128(), _mm_setzero_si128()); N];
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
            *d = bytemuck::cast(_mm_xor_si128(bytemuck::cast(*d), product(t[j], n)));
        }
    }
    for j in 0..N {
        scalar::mul_add_nibbles(parts[j].1, st, &nib[j].0, &nib[j].1);
    }
}

/// `dsts[j] ^= Σ_i rows[j·p + i]·srcs[i]` for the `N` destinations of one group: each
/// destination block is loaded once, accumulates the products of every source in a
/// register and is stored once, so destinations cost one read and one write whatever `p`.
#[target_feature(enable = "ssse3")]
fn mul_add_matrix_group_ssse3<const N: usize>(dsts: &mut [&mut [u8]], srcs: &[&[u8]], rows: &[u8]) {
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
        let mut acc = [_mm_setzero_si128(); N];
        for (i, s) in sv.iter().enumerate() {
            let n = nibbles(bytemuck::cast(s[b]));
            for j in 0..N {
                acc[j] = _mm_xor_si128(acc[j], product(t[j * p + i], n));
            }
        }
        for j in 0..N {
            let d = &mut parts[j].0[b];
            *d = bytemuck::cast(_mm_xor_si128(bytemuck::cast(*d), acc[j]));
        }
    }
    for j in 0..N {
        for (i, s) in srcs.iter().enumerate() {
            let (lo, hi) = &nib[j * p + i];
            scalar::mul_add_nibbles(parts[j].1, &s[blocks * W..], lo, hi);
        }
    }
}

#[target_feature(enable = "ssse3")]
fn xor_into_ssse3(dst: &mut [u8], src: &[u8]) {
    // Four vectors per step: two loads and a store per vector, no dependency between them.
    let (dv, dt) = dst.as_chunks_mut::<{ 4 * W }>();
    let (sv, st) = src.as_chunks::<{ 4 * W }>();
    for (d, s) in dv.iter_mut().zip(sv) {
        let a: [__m128i; 4] = bytemuck::cast(*d);
        let b: [__m128i; 4] = bytemuck::cast(*s);
        let mut r = a;
        for v in 0..4 {
            r[v] = _mm_xor_si128(a[v], b[v]);
        }
        *d = bytemuck::cast(r);
    }
    scalar::xor_into(dt, st);
}
