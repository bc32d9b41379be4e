//! Matrices over GF(2^8): the systematic Reed-Solomon encoding matrix and Gaussian
//! elimination for decoding.

use crate::gf;

/// A dense row-major matrix over GF(2^8).
pub type Matrix = Vec<Vec<u8>>;

/// The `(p + k) × p` encoding matrix for `p` data members and `k` checksums: the
/// Vandermonde matrix `V[r][c] = r^c` (rows 0..p+k are distinct field elements, so any
/// `p` rows are linearly independent) turned by column operations into one whose top
/// `p × p` block is the identity. Column operations keep every `p`-row subset
/// independent, so the bottom `k` rows are checksum coefficients from which any `k`
/// losses can be solved. Returns None unless `1 <= k < p` and `p + k <= 256`.
pub fn encoding(p: usize, k: usize) -> Option<Matrix> {
    if k < 1 || k >= p || p + k > 256 {
        return None;
    }
    let rows = p + k;
    let mut m: Matrix = (0..rows)
        .map(|r| (0..p).map(|c| gf::pow(r as u8, c as u32)).collect())
        .collect();
    for c in 0..p {
        let pivot = (c..p).find(|&j| m[c][j] != 0)?;
        if pivot != c {
            for row in m.iter_mut() {
                row.swap(c, pivot);
            }
        }
        let scale = gf::inv(m[c][c])?;
        for row in m.iter_mut() {
            row[c] = gf::mul(row[c], scale);
        }
        for j in 0..p {
            let f = m[c][j];
            if j != c && f != 0 {
                for row in m.iter_mut() {
                    row[j] ^= gf::mul(f, row[c]);
                }
            }
        }
    }
    Some(m)
}

/// The inverse of the square matrix `a` by Gauss-Jordan elimination, None when singular.
pub fn invert(a: &Matrix) -> Option<Matrix> {
    let n = a.len();
    let mut m: Matrix = a.clone();
    let mut inv: Matrix = (0..n)
        .map(|r| (0..n).map(|c| u8::from(r == c)).collect())
        .collect();
    for c in 0..n {
        if m[c].len() != n {
            return None;
        }
        let pivot = (c..n).find(|&r| m[r][c] != 0)?;
        m.swap(c, pivot);
        inv.swap(c, pivot);
        let scale = gf::inv(m[c][c])?;
        for j in 0..n {
            m[c][j] = gf::mul(m[c][j], scale);
            inv[c][j] = gf::mul(inv[c][j], scale);
        }
        for r in 0..n {
            let f = m[r][c];
            if r != c && f != 0 {
                for j in 0..n {
                    m[r][j] ^= gf::mul(f, m[c][j]);
                    inv[r][j] ^= gf::mul(f, inv[c][j]);
                }
            }
        }
    }
    Some(inv)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reproduces_the_seed_example_for_four_members_and_two_checksums() {
        let m = encoding(4, 2).unwrap();
        for (r, row) in m.iter().take(4).enumerate() {
            let unit: Vec<u8> = (0..4).map(|c| u8::from(r == c)).collect();
            assert_eq!(row, &unit);
        }
        assert_eq!(m[4], vec![27, 28, 18, 20]);
        assert_eq!(m[5], vec![28, 27, 20, 18]);
    }

    #[test]
    fn refuses_what_gf256_cannot_encode() {
        assert!(encoding(4, 0).is_none());
        assert!(encoding(4, 4).is_none());
        assert!(encoding(250, 7).is_none());
        assert!(encoding(249, 7).is_some());
    }

    #[test]
    fn every_square_submatrix_of_the_checksum_rows_is_invertible() {
        // what decoding relies on: any choice of lost data columns and checksum rows solves
        for (p, k) in [(4, 2), (6, 3), (8, 2), (8, 7), (5, 4)] {
            let m = encoding(p, k).unwrap();
            for cols in 1u32..(1 << p) {
                let cols: Vec<usize> = (0..p).filter(|c| cols & (1 << c) != 0).collect();
                if cols.len() > k {
                    continue;
                }
                for rows in 1u32..(1 << k) {
                    let rows: Vec<usize> = (0..k).filter(|r| rows & (1 << r) != 0).collect();
                    if rows.len() != cols.len() {
                        continue;
                    }
                    let sub: Matrix = rows
                        .iter()
                        .map(|&r| cols.iter().map(|&c| m[p + r][c]).collect())
                        .collect();
                    let inv = invert(&sub)
                        .unwrap_or_else(|| panic!("p={p} k={k} rows={rows:?} cols={cols:?}"));
                    for (i, row) in sub.iter().enumerate() {
                        for j in 0..cols.len() {
                            let v = row
                                .iter()
                                .zip(&inv)
                                .fold(0u8, |acc, (&a, b)| acc ^ gf::mul(a, b[j]));
                            assert_eq!(v, u8::from(i == j), "A·A⁻¹ is not the identity");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_singular_matrix_has_no_inverse() {
        assert!(invert(&vec![vec![1, 2], vec![1, 2]]).is_none());
    }
}
