//! Arithmetic kernels for redundancy schemes: GF(2^8) multiply-accumulate for
//! Reed-Solomon, XOR for parity, and the small matrix algebra (encoding matrix, inversion)
//! the RS scheme needs.
//!
//! The field is GF(2^8) with the polynomial x^8 + x^4 + x^3 + x^2 + 1 (0x11D), the one
//! redset and most Reed-Solomon storage codes use, so encoding coefficients match the
//! seed's worked examples.
//!
//! The slice kernels ([`mul_add`], [`mul_add_multi`], [`mul_add_matrix`], [`xor_into`]) pick
//! the fastest implementation this CPU supports once, at the first call (GFNI with 256- then
//! 512-bit vectors, AVX2, then SSSE3 on x86; NEON on aarch64), and fall back to portable
//! scalar code everywhere else. Every implementation computes exactly the same bytes. The
//! environment variable `SCR_KERNELS` (`scalar`, `ssse3`, `avx2`, `gfni-avx2`,
//! `gfni-avx512`, `neon`) forces one, so tests and benchmarks can run each
//! path; it is read once per process (once per plugin library, each of which links its own
//! copy of this crate). [`Kernels::get`] reaches every implementation this CPU has directly.
//!
//! The SSSE3, AVX2 and NEON kernels multiply with split product tables: `c·s = lo[s & 15] ^
//! hi[s >> 4]`, two 16-byte tables per coefficient that a byte shuffle looks up a whole
//! vector at a time; the GFNI kernels with one affine instruction per vector (`gfni.rs`).

pub mod gf;
pub mod matrix;
mod scalar;

#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
mod pshufb;
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
use pshufb::{avx2, ssse3};
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
mod gfni;
#[cfg(target_arch = "aarch64")]
mod neon;

use std::fmt;

/// The first `N` of `dsts`, each cut into exactly `blocks` vectors of `W` bytes and the
/// bytes after them: the vector kernels' loops then index every destination's blocks
/// with no bounds checks, and the tails go to the scalar code.
#[cfg_attr(
    not(any(target_arch = "x86", target_arch = "x86_64", target_arch = "aarch64")),
    allow(dead_code)
)]
fn split_dests<'a, const N: usize, const W: usize>(
    dsts: &'a mut [&mut [u8]],
    blocks: usize,
) -> [(&'a mut [[u8; W]], &'a mut [u8]); N] {
    let mut dests = dsts.iter_mut();
    std::array::from_fn(|_| {
        let (v, tail) = dests
            .next()
            .expect("one group of N destinations")
            .as_chunks_mut::<W>();
        (&mut v[..blocks], tail)
    })
}
use std::sync::OnceLock;

/// The environment variable that forces one implementation (its [`Isa::name`]); unset or
/// empty means the fastest this CPU has.
pub const ENV_VAR: &str = "SCR_KERNELS";

/// Bytes per stripe of [`mul_add_matrix`]: with up to 4 destinations and a source that is
/// 320 KiB, inside a 512 KiB L2, and long enough that the per-call setup (split tables) is
/// noise. 32, 64 and 128 KiB measured within noise of each other here (64 MiB slices, 6 -> 2).
const STRIPE: usize = 64 << 10;

/// An instruction set the slice kernels are implemented for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Isa {
    /// Portable Rust (a 256-byte product row per call; XOR vectorised by the compiler for
    /// the baseline instruction set).
    Scalar,
    /// x86 SSSE3: PSHUFB on 16-byte vectors.
    Ssse3,
    /// x86 AVX2: VPSHUFB on 32-byte vectors.
    Avx2,
    /// aarch64 NEON: TBL on 16-byte vectors.
    Neon,
    /// x86 GFNI with AVX2: one GF2P8AFFINEQB per product of 32 bytes.
    Gfni256,
    /// x86 GFNI with AVX-512BW: one GF2P8AFFINEQB per product of 64 bytes.
    Gfni512,
}

impl Isa {
    /// Every instruction set, slowest first.
    ///
    /// The 256-bit GFNI kernels rank above the 512-bit ones: on the AMD EPYC (Zen 4) of our
    /// machines the wide vectors gain only in the matrix form (1.1×), and lose 0.8-0.95× in
    /// the fused forms the schemes call (`kernel-ratios`, 64 KiB to 1 MiB);
    /// `SCR_KERNELS=gfni-avx512` forces them.
    pub const ALL: [Isa; 6] = [
        Isa::Scalar,
        Isa::Neon,
        Isa::Ssse3,
        Isa::Avx2,
        Isa::Gfni512,
        Isa::Gfni256,
    ];

    /// The lower-case name used by [`ENV_VAR`] and [`implementation`].
    pub const fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Ssse3 => "ssse3",
            Isa::Avx2 => "avx2",
            Isa::Neon => "neon",
            Isa::Gfni256 => "gfni-avx2",
            Isa::Gfni512 => "gfni-avx512",
        }
    }

    /// The instruction set called `name` (case-insensitive), None when there is none.
    pub fn from_name(name: &str) -> Option<Isa> {
        Isa::ALL
            .into_iter()
            .find(|isa| isa.name().eq_ignore_ascii_case(name.trim()))
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `dsts[j] ^= Σ_i coefs[j·p + i] · srcs[i]`, lengths already checked.
type MatrixKernel = fn(&mut [&mut [u8]], &[&[u8]], &[u8]);

/// One implementation of the slice kernels. Obtained only through [`Kernels::get`],
/// [`Kernels::available`] or [`selected`], which hand out an implementation only when this
/// CPU runs its instructions, so every method is safe to call.
pub struct Kernels {
    isa: Isa,
    mul_add: fn(&mut [u8], &[u8], u8),
    mul_add_multi: fn(&mut [&mut [u8]], &[u8], &[u8]),
    /// A kernel that keeps destination blocks in registers over every source; None uses
    /// [`Kernels::mul_add_multi`] over cache-sized stripes.
    mul_add_matrix: Option<MatrixKernel>,
    xor_into: fn(&mut [u8], &[u8]),
}

static SCALAR: Kernels = Kernels {
    isa: Isa::Scalar,
    mul_add: scalar::mul_add,
    mul_add_multi: scalar::mul_add_multi,
    mul_add_matrix: None,
    xor_into: scalar::xor_into,
};

impl Kernels {
    /// The implementation for `isa`, None when this CPU (or this build's target) lacks it.
    pub fn get(isa: Isa) -> Option<&'static Kernels> {
        match isa {
            Isa::Scalar => Some(&SCALAR),
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            Isa::Ssse3 => ssse3::kernels(),
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            Isa::Avx2 => avx2::kernels(),
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            Isa::Gfni256 => gfni::gfni256::kernels(),
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            Isa::Gfni512 => gfni::gfni512::kernels(),
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => neon::kernels(),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }

    /// Every implementation this CPU runs, slowest first (so the last is the fastest).
    pub fn available() -> Vec<&'static Kernels> {
        Isa::ALL.into_iter().filter_map(Kernels::get).collect()
    }

    /// The fastest implementation this CPU runs.
    pub fn best() -> &'static Kernels {
        Isa::ALL
            .into_iter()
            .rev()
            .find_map(Kernels::get)
            .unwrap_or(&SCALAR)
    }

    /// The instruction set of this implementation.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// `dst[i] ^= c · src[i]`; see [`mul_add`].
    ///
    /// # Panics
    /// When `dst` and `src` differ in length.
    pub fn mul_add(&self, dst: &mut [u8], src: &[u8], c: u8) {
        assert_eq!(dst.len(), src.len(), "mul_add: slices differ in length");
        match c {
            0 => {}
            1 => (self.xor_into)(dst, src),
            _ => (self.mul_add)(dst, src, c),
        }
    }

    /// `dsts[j][i] ^= coefs[j] · src[i]`; see [`mul_add_multi`].
    ///
    /// # Panics
    /// When `dsts` and `coefs` differ in length or a destination differs in length from
    /// `src`.
    pub fn mul_add_multi(&self, dsts: &mut [&mut [u8]], src: &[u8], coefs: &[u8]) {
        assert_eq!(
            dsts.len(),
            coefs.len(),
            "mul_add_multi: one coefficient per destination"
        );
        for d in dsts.iter() {
            assert_eq!(
                d.len(),
                src.len(),
                "mul_add_multi: a destination differs in length from the source"
            );
        }
        match (dsts, coefs) {
            ([], []) => {}
            ([d], [c]) => self.mul_add(d, src, *c),
            (dsts, coefs) => (self.mul_add_multi)(dsts, src, coefs),
        }
    }

    /// `dsts[j] ^= Σ_i coefs[j·p + i] · srcs[i]` for `p = srcs.len()`; see
    /// [`mul_add_matrix`].
    ///
    /// # Panics
    /// When `coefs` does not hold `dsts.len() · srcs.len()` coefficients or a slice differs
    /// in length from the others.
    pub fn mul_add_matrix(&self, dsts: &mut [&mut [u8]], srcs: &[&[u8]], coefs: &[u8]) {
        let p = srcs.len();
        assert_eq!(
            coefs.len(),
            dsts.len() * p,
            "mul_add_matrix: one coefficient per destination and source"
        );
        let Some(len) = srcs.first().map(|s| s.len()) else {
            return;
        };
        assert!(
            srcs.iter().all(|s| s.len() == len) && dsts.iter().all(|d| d.len() == len),
            "mul_add_matrix: slices differ in length"
        );
        if let Some(kernel) = self.mul_add_matrix {
            return kernel(dsts, srcs, coefs);
        }
        // The coefficients of source i for every destination (column i of the matrix).
        let columns: Vec<Vec<u8>> = (0..p)
            .map(|i| (0..dsts.len()).map(|j| coefs[j * p + i]).collect())
            .collect();
        let mut start = 0;
        while start < len {
            let end = len.min(start + STRIPE);
            let mut stripe: Vec<&mut [u8]> = dsts.iter_mut().map(|d| &mut d[start..end]).collect();
            for (src, column) in srcs.iter().zip(&columns) {
                self.mul_add_multi(&mut stripe, &src[start..end], column);
            }
            start = end;
        }
    }

    /// `dst[i] ^= src[i]`; see [`xor_into`].
    ///
    /// # Panics
    /// When `dst` and `src` differ in length.
    pub fn xor_into(&self, dst: &mut [u8], src: &[u8]) {
        assert_eq!(dst.len(), src.len(), "xor_into: slices differ in length");
        (self.xor_into)(dst, src);
    }
}

impl fmt::Debug for Kernels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kernels").field("isa", &self.isa).finish()
    }
}

/// The implementation a request for `name` (the value of [`ENV_VAR`]) gets: the fastest
/// this CPU runs for None or an empty name, else the named one. The error says why a named
/// one cannot be used and what to set instead.
pub fn choose(name: Option<&str>) -> Result<&'static Kernels, String> {
    let name = name.map(str::trim).unwrap_or("");
    if name.is_empty() {
        return Ok(Kernels::best());
    }
    let here: Vec<&str> = Kernels::available()
        .iter()
        .map(|k| k.isa().name())
        .collect();
    match Isa::from_name(name) {
        None => Err(format!(
            "{ENV_VAR}={name}: no such kernel implementation (choose one of {}, or unset \
             {ENV_VAR} for the fastest)",
            Isa::ALL.map(Isa::name).join(", ")
        )),
        Some(isa) => Kernels::get(isa).ok_or_else(|| {
            format!(
                "{ENV_VAR}={name}: this CPU or build cannot run {isa} (available here: {}; \
                 unset {ENV_VAR} for the fastest)",
                here.join(", ")
            )
        }),
    }
}

/// The implementation the free functions use: chosen once, at the first call, from
/// [`ENV_VAR`] or else the fastest this CPU runs. A request that cannot be honoured falls
/// back to the fastest (a kernel call has no error path, and the bytes computed are the
/// same whichever implementation runs); [`take_selection_note`] says why, for the caller
/// to log.
pub fn selected() -> &'static Kernels {
    selection().0
}

/// Why [`selected`] is not the implementation [`ENV_VAR`] asked for, the first time it is
/// asked (then `None`): a plugin passes it to its host's log. Why not print it here: this
/// crate runs inside plugins, whose output must go through the host (a plugin's stderr
/// line would bypass the application's log filtering and format).
pub fn take_selection_note() -> Option<&'static str> {
    static TAKEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let note = selection().1.as_deref()?;
    (!TAKEN.swap(true, std::sync::atomic::Ordering::Relaxed)).then_some(note)
}

/// The chosen implementation and, when the request was refused, why.
fn selection() -> &'static (&'static Kernels, Option<String>) {
    static SELECTED: OnceLock<(&'static Kernels, Option<String>)> = OnceLock::new();
    SELECTED.get_or_init(|| {
        let request = std::env::var(ENV_VAR).ok();
        match choose(request.as_deref()) {
            Ok(k) => (k, None),
            Err(e) => {
                let best = Kernels::best();
                (best, Some(format!("{e}; using the {} kernels", best.isa())))
            }
        }
    })
}

/// `dst[i] ^= c · src[i]` over GF(2^8) for every `i`.
///
/// # Panics
/// When `dst` and `src` differ in length (a caller bug: the schemes size both from one
/// piece length).
pub fn mul_add(dst: &mut [u8], src: &[u8], c: u8) {
    selected().mul_add(dst, src, c);
}

/// `dsts[j][i] ^= coefs[j] · src[i]` for every `j` and `i`: one source encoded into several
/// checksums, reading the source once (the vector kernels update up to four destinations per
/// pass over the source, so the source is read once per four destinations).
///
/// # Panics
/// When `dsts` and `coefs` differ in length or a destination differs in length from `src`.
pub fn mul_add_multi(dsts: &mut [&mut [u8]], src: &[u8], coefs: &[u8]) {
    selected().mul_add_multi(dsts, src, coefs);
}

/// `dsts[j][x] ^= Σ_i coefs[j·p + i] · srcs[i][x]` with `p = srcs.len()`: a whole
/// `dsts.len() × p` coefficient matrix (row-major, one row per destination) applied at
/// once, as an encode from every data member or a decode from the survivors needs.
///
/// The SSSE3 and AVX2 kernels keep each destination block in a register while the products
/// of every source are added, so each destination is read and written once and each source
/// read once (per group of four destinations). The others process stripes of 64 KiB, every
/// source into every destination per stripe, so the destinations stay in cache. Either way
/// this beats separate [`mul_add_multi`] calls over whole slices, which stream the
/// destinations through memory once per source.
///
/// # Panics
/// When `coefs` does not hold `dsts.len() · srcs.len()` coefficients or a slice differs in
/// length from the others.
pub fn mul_add_matrix(dsts: &mut [&mut [u8]], srcs: &[&[u8]], coefs: &[u8]) {
    selected().mul_add_matrix(dsts, srcs, coefs);
}

/// `dst[i] ^= src[i]` for every `i`.
///
/// # Panics
/// When `dst` and `src` differ in length.
pub fn xor_into(dst: &mut [u8], src: &[u8]) {
    selected().xor_into(dst, src);
}

/// The name of the implementation the slice kernels use on this CPU (for benchmarks and
/// `--version` style reports).
pub fn implementation() -> &'static str {
    selected().isa().name()
}
