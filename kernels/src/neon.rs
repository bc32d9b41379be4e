//! NEON kernels (aarch64): 16 bytes per step. A product `c·s` is two TBL lookups (low and
//! high nibble of every source byte) in the 16-byte split tables of `c`.
//!
//! NEON is part of the aarch64 baseline, but Rust still requires the intrinsics to be
//! called from `#[target_feature(enable = "neon")]` functions: the kernels are safe
//! functions with that attribute working on `[u8; 16]` arrays cast to vectors (no pointer
//! loads or stores), and the only `unsafe` is the call into them from the plain `fn`s the
//! dispatch table holds. Checked with `cargo check -p scr-kernels --target
//! aarch64-unknown-linux-gnu` (compiled, not run: this project's machines are x86).

use std::arch::aarch64::*;

use crate::{scalar, Isa, Kernels};

/// Bytes per vector.
const W: usize = 16;
/// Destinations updated per pass of the fused kernel (32 vector registers hold the tables of
/// 4 with room to spare; larger `k` runs in groups).
const GROUP: usize = 4;

static KERNELS: Kernels = Kernels {
    isa: Isa::Neon,
    mul_add,
    mul_add_multi,
    // The striped form over mul_add_multi: a register-accumulating kernel here could not be
    // run on this project's x86 machines.
    mul_add_matrix: None,
    xor_into,
};

/// The NEON kernels (always present on aarch64).
pub(crate) fn kernels() -> Option<&'static Kernels> {
    Some(&KERNELS)
}

#[target_feature(enable = "neon")]
fn nibbles(s: uint8x16_t) -> (uint8x16_t, uint8x16_t) {
    (vandq_u8(s, vdupq_n_u8(0x0f)), vshrq_n_u8::<4>(s))
}

#[target_feature(enable = "neon")]
fn product(t: (uint8x16_t, uint8x16_t), n: (uint8x16_t, uint8x16_t)) -> uint8x16_t {
    veorq_u8(vqtbl1q_u8(t.0, n.0), vqtbl1q_u8(t.1, n.1))
}

fn mul_add(dst: &mut [u8], src: &[u8], c: u8) {
    // SAFETY: NEON is part of the aarch64 baseline (this module is compiled only there),
    // so the CPU running this has the feature the callee is compiled for.
    unsafe { mul_add_neon(dst, src, c) }
}

#[target_feature(enable = "neon")]
fn mul_add_neon(dst: &mut [u8], src: &[u8], c: u8) {
    let (lo, hi) = scalar::nibble_tables(c);
    let t: (uint8x16_t, uint8x16_t) = (bytemuck::cast(lo), bytemuck::cast(hi));
    let (dv, dt) = dst.as_chunks_mut::<W>();
    let (sv, st) = src.as_chunks::<W>();
    for (d, s) in dv.iter_mut().zip(sv) {
        let p = product(t, nibbles(bytemuck::cast(*s)));
        *d = bytemuck::cast(veorq_u8(bytemuck::cast(*d), p));
    }
    scalar::mul_add_nibbles(dt, st, &lo, &hi);
}

fn mul_add_multi(dsts: &mut [&mut [u8]], src: &[u8], coefs: &[u8]) {
    for (group, coefs) in dsts.chunks_mut(GROUP).zip(coefs.chunks(GROUP)) {
        match group.len() {
            // SAFETY: NEON is part of the aarch64 baseline (this module is compiled only
            // there), so the CPU running this has the feature the callee is compiled for.
            1 => unsafe { mul_add_group::<1>(group, src, coefs) },
            // SAFETY: as above.
            2 => unsafe { mul_add_group::<2>(group, src, coefs) },
            // SAFETY: as above.
            3 => unsafe { mul_add_group::<3>(group, src, coefs) },
            // SAFETY: as above.
            _ => unsafe { mul_add_group::<4>(group, src, coefs) },
        }
    }
}

/// `dsts[j] ^= coefs[j]·src` for the `N` destinations of one group, each source block read
/// once and split into nibbles once for all of them.
#[target_feature(enable = "neon")]
fn mul_add_group<const N: usize>(dsts: &mut [&mut [u8]], src: &[u8], coefs: &[u8]) {
    let nib: [([u8; 16], [u8; 16]); N] = std::array::from_fn(|j| scalar::nibble_tables(coefs[j]));
    let t: [(uint8x16_t, uint8x16_t); N] =
        std::array::from_fn(|j| (bytemuck::cast(nib[j].0), bytemuck::cast(nib[j].1)));
    let (sv, st) = src.as_chunks::<W>();
    let blocks = sv.len();
    let parts = crate::split_dests::<N, W>(dsts, blocks);
    for (i, s) in sv.iter().enumerate() {
        let n = nibbles(bytemuck::cast(*s));
        for j in 0..N {
            let d = &mut parts[j].0[i];
            *d = bytemuck::cast(veorq_u8(bytemuck::cast(*d), product(t[j], n)));
        }
    }
    for j in 0..N {
        scalar::mul_add_nibbles(parts[j].1, st, &nib[j].0, &nib[j].1);
    }
}

fn xor_into(dst: &mut [u8], src: &[u8]) {
    // SAFETY: NEON is part of the aarch64 baseline (this module is compiled only there),
    // so the CPU running this has the feature the callee is compiled for.
    unsafe { xor_into_neon(dst, src) }
}

#[target_feature(enable = "neon")]
fn xor_into_neon(dst: &mut [u8], src: &[u8]) {
    let (dv, dt) = dst.as_chunks_mut::<W>();
    let (sv, st) = src.as_chunks::<W>();
    for (d, s) in dv.iter_mut().zip(sv) {
        *d = bytemuck::cast(veorq_u8(bytemuck::cast(*d), bytemuck::cast(*s)));
    }
    scalar::xor_into(dt, st);
}
