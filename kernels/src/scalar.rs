//! Portable kernels: the fallback on CPUs without a vector implementation, the tail of every
//! vector kernel, and the reference the vector kernels are tested against.

use crate::gf;

/// `dst ^= c·src` through a 256-entry product row: one lookup per byte, the fastest portable
/// form for long slices (building the row costs 256 multiplications, nothing beside a
/// checkpoint piece).
pub(crate) fn mul_add(dst: &mut [u8], src: &[u8], c: u8) {
    let row: [u8; 256] = std::array::from_fn(|x| gf::mul(c, x as u8));
    for (d, s) in dst.iter_mut().zip(src) {
        *d ^= row[*s as usize];
    }
}

/// One source into every destination, a pass per destination (the portable form has no
/// registers to keep several products in, so fusing would gain nothing).
pub(crate) fn mul_add_multi(dsts: &mut [&mut [u8]], src: &[u8], coefs: &[u8]) {
    for (d, &c) in dsts.iter_mut().zip(coefs) {
        match c {
            0 => {}
            1 => xor_into(d, src),
            _ => mul_add(d, src, c),
        }
    }
}

/// `dst ^= src`; the compiler vectorises this loop with the baseline instruction set.
pub(crate) fn xor_into(dst: &mut [u8], src: &[u8]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d ^= s;
    }
}

/// The split product tables of `c`: `lo[x] = c·x` and `hi[x] = c·(x << 4)` for x < 16, so
/// `c·s = lo[s & 15] ^ hi[s >> 4]` (multiplication distributes over XOR). These are the
/// 16-byte tables a byte shuffle (PSHUFB, TBL) looks up sixteen or thirty-two bytes at a time.
pub(crate) fn nibble_tables(c: u8) -> ([u8; 16], [u8; 16]) {
    let lo = std::array::from_fn(|x| gf::mul(c, x as u8));
    let hi = std::array::from_fn(|x| gf::mul(c, (x as u8) << 4));
    (lo, hi)
}

/// `dst ^= c·src` with the split tables: the tail (fewer bytes than one vector) of the
/// vector kernels, which have the tables at hand and would waste 256 multiplications
/// building a full row for a few bytes.
pub(crate) fn mul_add_nibbles(dst: &mut [u8], src: &[u8], lo: &[u8; 16], hi: &[u8; 16]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d ^= lo[(s & 15) as usize] ^ hi[(s >> 4) as usize];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nibble_tables_multiply_every_byte() {
        for c in 0..=255u8 {
            let (lo, hi) = nibble_tables(c);
            let src: Vec<u8> = (0..=255u8).collect();
            let mut dst = vec![0u8; 256];
            mul_add_nibbles(&mut dst, &src, &lo, &hi);
            for (s, d) in src.iter().zip(&dst) {
                assert_eq!(*d, gf::mul(c, *s), "c={c} s={s}");
            }
        }
    }
}
