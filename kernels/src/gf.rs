//! GF(2^8) element arithmetic with the polynomial 0x11D (log/exp tables built at compile
//! time).

/// The field polynomial x^8 + x^4 + x^3 + x^2 + 1.
pub const POLY: u16 = 0x11D;

const fn tables() -> ([u8; 512], [u8; 256]) {
    let mut exp = [0u8; 512];
    let mut log = [0u8; 256];
    let mut x: u16 = 1;
    let mut i = 0;
    while i < 255 {
        exp[i] = x as u8;
        log[x as usize] = i as u8;
        x <<= 1;
        if x & 0x100 != 0 {
            x ^= POLY;
        }
        i += 1;
    }
    while i < 512 {
        exp[i] = exp[i - 255];
        i += 1;
    }
    (exp, log)
}

const TABLES: ([u8; 512], [u8; 256]) = tables();
/// `EXP[i]` = 2^i (the generator 2 is primitive for 0x11D); doubled so `EXP[a + b]`
/// needs no reduction.
pub const EXP: [u8; 512] = TABLES.0;
/// `LOG[x]` for x ≠ 0 (`LOG[0]` is unused).
pub const LOG: [u8; 256] = TABLES.1;

/// a · b.
pub const fn mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        0
    } else {
        EXP[LOG[a as usize] as usize + LOG[b as usize] as usize]
    }
}

/// The multiplicative inverse of `a`, None for 0.
pub const fn inv(a: u8) -> Option<u8> {
    if a == 0 {
        None
    } else {
        Some(EXP[255 - LOG[a as usize] as usize])
    }
}

/// a^n (with 0^0 = 1, as a Vandermonde matrix needs).
pub const fn pow(a: u8, n: u32) -> u8 {
    let mut r = 1u8;
    let mut i = 0;
    while i < n {
        r = mul(r, a);
        i += 1;
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_axioms_hold_for_every_pair() {
        for a in 0..=255u8 {
            assert_eq!(mul(a, 1), a);
            assert_eq!(mul(a, 0), 0);
            if a != 0 {
                assert_eq!(mul(a, inv(a).unwrap()), 1, "inverse of {a}");
            }
            for b in 0..=255u8 {
                assert_eq!(mul(a, b), mul(b, a));
            }
        }
        assert_eq!(inv(0), None);
        // 2^8 reduces by the polynomial: x^8 = x^4 + x^3 + x^2 + 1
        assert_eq!(pow(2, 8), 0x1D);
    }
}
