//! Portable kernels: the reference every vectorised kernel is tested against.

use crate::gf;

pub(crate) fn mul_add(dst: &mut [u8], src: &[u8], c: u8) {
    let row: [u8; 256] = std::array::from_fn(|x| gf::mul(c, x as u8));
    for (d, s) in dst.iter_mut().zip(src) {
        *d ^= row[*s as usize];
    }
}

pub(crate) fn xor_into(dst: &mut [u8], src: &[u8]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d ^= s;
    }
}
