//! Every kernel implementation this CPU runs against a byte-by-byte reference built from
//! `gf::mul` alone: random lengths (including ones shorter than a vector and ones that end
//! mid-vector), sub-slices at every offset 0..63 of the source and each destination,
//! all 256 coefficients, and 1 to 8 destinations for the fused form. Each instruction set is
//! called directly through `Kernels::get`; one this CPU lacks is skipped with a message.

use proptest::prelude::*;
use scr_kernels::{gf, Isa, Kernels};

/// The implementations under test: every instruction set of this target, printing which
/// ones this CPU lacks. Scalar is always present, so the list is never empty.
fn implementations() -> Vec<&'static Kernels> {
    let mut out = Vec::new();
    for isa in Isa::ALL {
        match Kernels::get(isa) {
            Some(k) => out.push(k),
            None => eprintln!("skipping {isa}: not supported by this CPU or target"),
        }
    }
    out
}

/// A buffer of `len + 64` random bytes: the test slices are its sub-slices at offsets 0..63,
/// so they start at every alignment.
fn buffer(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len + 64)
        .map(|_| {
            // xorshift64: every byte value, deterministic per seed.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn reference_mul_add(dst: &mut [u8], src: &[u8], c: u8) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d ^= gf::mul(c, *s);
    }
}

/// `mul_add` of `k` at (len, offsets, c) equals the reference, and leaves the bytes around
/// the destination slice alone.
fn check_mul_add(k: &Kernels, len: usize, doff: usize, soff: usize, c: u8, seed: u64) {
    let src = buffer(len, seed ^ 0x5a5a);
    let mut dst = buffer(len, seed);
    let mut want = dst.clone();
    reference_mul_add(&mut want[doff..doff + len], &src[soff..soff + len], c);
    k.mul_add(&mut dst[doff..doff + len], &src[soff..soff + len], c);
    assert!(
        dst == want,
        "{}: mul_add len={len} dst offset={doff} src offset={soff} c={c} differs from the reference",
        k.isa()
    );
}

fn check_xor(k: &Kernels, len: usize, doff: usize, soff: usize, seed: u64) {
    let src = buffer(len, seed ^ 0xa5a5);
    let mut dst = buffer(len, seed);
    let mut want = dst.clone();
    for (d, s) in want[doff..doff + len]
        .iter_mut()
        .zip(&src[soff..soff + len])
    {
        *d ^= s;
    }
    k.xor_into(&mut dst[doff..doff + len], &src[soff..soff + len]);
    assert!(
        dst == want,
        "{}: xor_into len={len} dst offset={doff} src offset={soff} differs from the reference",
        k.isa()
    );
}

fn check_multi(k: &Kernels, len: usize, soff: usize, doffs: &[usize], coefs: &[u8], seed: u64) {
    let src = buffer(len, seed ^ 0x3c3c);
    let mut dsts: Vec<Vec<u8>> = (0..coefs.len())
        .map(|j| buffer(len, seed.wrapping_add(j as u64 * 7919)))
        .collect();
    let mut want = dsts.clone();
    for (j, w) in want.iter_mut().enumerate() {
        reference_mul_add(
            &mut w[doffs[j]..doffs[j] + len],
            &src[soff..soff + len],
            coefs[j],
        );
    }
    let mut slices: Vec<&mut [u8]> = dsts
        .iter_mut()
        .zip(doffs)
        .map(|(d, &o)| &mut d[o..o + len])
        .collect();
    k.mul_add_multi(&mut slices, &src[soff..soff + len], coefs);
    for j in 0..coefs.len() {
        assert!(
            dsts[j] == want[j],
            "{}: mul_add_multi len={len} k={} destination {j} (offset {}, coefficient {}) \
             src offset={soff} differs from the reference (coefficients {coefs:?})",
            k.isa(),
            coefs.len(),
            doffs[j],
            coefs[j]
        );
    }
}

/// `mul_add_matrix` of `k` with a `dsts × srcs` matrix equals the reference, every slice at
/// its own offset.
fn check_matrix(k: &Kernels, len: usize, nsrc: usize, ndst: usize, coefs: &[u8], seed: u64) {
    let srcs: Vec<Vec<u8>> = (0..nsrc)
        .map(|i| buffer(len, seed ^ ((i as u64 + 1) * 0x9e37)))
        .collect();
    let mut dsts: Vec<Vec<u8>> = (0..ndst)
        .map(|j| buffer(len, seed.wrapping_add(j as u64 * 7919)))
        .collect();
    let off = |x: usize| (x * 17 + seed as usize) % 64;
    let mut want = dsts.clone();
    for (j, w) in want.iter_mut().enumerate() {
        for (i, s) in srcs.iter().enumerate() {
            reference_mul_add(
                &mut w[off(j)..off(j) + len],
                &s[off(i + 8)..off(i + 8) + len],
                coefs[j * nsrc + i],
            );
        }
    }
    let src_slices: Vec<&[u8]> = srcs
        .iter()
        .enumerate()
        .map(|(i, s)| &s[off(i + 8)..off(i + 8) + len])
        .collect();
    let mut dst_slices: Vec<&mut [u8]> = dsts
        .iter_mut()
        .enumerate()
        .map(|(j, d)| &mut d[off(j)..off(j) + len])
        .collect();
    k.mul_add_matrix(&mut dst_slices, &src_slices, coefs);
    for j in 0..ndst {
        assert!(
            dsts[j] == want[j],
            "{}: mul_add_matrix len={len} {ndst}x{nsrc} destination {j} differs from the \
             reference (coefficients {coefs:?})",
            k.isa()
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn mul_add_matches_reference(
        len in prop_oneof![0usize..70, 0usize..5000],
        doff in 0usize..64,
        soff in 0usize..64,
        c in any::<u8>(),
        seed in any::<u64>(),
    ) {
        for k in implementations() {
            check_mul_add(k, len, doff, soff, c, seed);
        }
    }

    #[test]
    fn xor_into_matches_reference(
        len in prop_oneof![0usize..300, 0usize..5000],
        doff in 0usize..64,
        soff in 0usize..64,
        seed in any::<u64>(),
    ) {
        for k in implementations() {
            check_xor(k, len, doff, soff, seed);
        }
    }

    #[test]
    fn mul_add_multi_matches_reference(
        len in prop_oneof![0usize..70, 0usize..5000],
        soff in 0usize..64,
        dsts in prop::collection::vec((0usize..64, any::<u8>()), 1..=8),
        seed in any::<u64>(),
    ) {
        let doffs: Vec<usize> = dsts.iter().map(|d| d.0).collect();
        let coefs: Vec<u8> = dsts.iter().map(|d| d.1).collect();
        for k in implementations() {
            check_multi(k, len, soff, &doffs, &coefs, seed);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn mul_add_matrix_matches_reference(
        len in prop_oneof![4 => 0usize..70, 4 => 0usize..5000, 1 => 30_000usize..70_000],
        nsrc in 1usize..=8,
        ndst in 1usize..=6,
        coefs in prop::collection::vec(any::<u8>(), 48),
        seed in any::<u64>(),
    ) {
        for k in implementations() {
            check_matrix(k, len, nsrc, ndst, &coefs[..nsrc * ndst], seed);
        }
    }
}

/// The matrix form over several stripes with the RS encoding matrix's checksum rows gives
/// what one fused call per source gives (the way the pipelined encode computes checksums).
#[test]
fn matrix_encode_equals_one_fused_call_per_source() {
    let (p, k) = (6, 3);
    let m = scr_kernels::matrix::encoding(p, k).unwrap();
    let coefs: Vec<u8> = m[p..].iter().flatten().copied().collect();
    let len = 100_003;
    let data: Vec<Vec<u8>> = (0..p).map(|i| buffer(len, i as u64 + 11)).collect();
    for kern in implementations() {
        let mut a = vec![vec![0u8; len]; k];
        let mut b = vec![vec![0u8; len]; k];
        let srcs: Vec<&[u8]> = data.iter().map(|d| &d[..len]).collect();
        let mut da: Vec<&mut [u8]> = a.iter_mut().map(|d| d.as_mut_slice()).collect();
        kern.mul_add_matrix(&mut da, &srcs, &coefs);
        for (i, s) in srcs.iter().enumerate() {
            let column: Vec<u8> = (0..k).map(|j| m[p + j][i]).collect();
            let mut db: Vec<&mut [u8]> = b.iter_mut().map(|d| d.as_mut_slice()).collect();
            kern.mul_add_multi(&mut db, s, &column);
        }
        assert!(
            a == b,
            "{}: matrix encode differs from per-source encode",
            kern.isa()
        );
        assert!(
            a.iter().all(|c| c.iter().any(|&x| x != 0)),
            "checksums are all zero"
        );
    }
}

/// Every coefficient, on lengths around the 16- and 32-byte vector widths and the 128-byte
/// XOR step, at odd offsets: random coefficients alone would leave some untested.
#[test]
fn every_coefficient_on_every_implementation() {
    let lens = [
        0, 1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 1000,
    ];
    for k in implementations() {
        for c in 0..=255u8 {
            for (i, &len) in lens.iter().enumerate() {
                check_mul_add(k, len, i * 5 % 64, i * 11 % 64, c, c as u64 * 31 + i as u64);
            }
        }
        for (i, &len) in lens.iter().enumerate() {
            check_xor(k, len, i * 3 % 64, i * 7 % 64, i as u64);
        }
    }
}

/// The fused form with every coefficient in every position of a group of 4 and of a
/// second, partial group (k = 1..8), including 0 and 1 next to general coefficients.
#[test]
fn fused_every_coefficient_every_group_size() {
    for k in implementations() {
        for n in 1..=8usize {
            for c in 0..=255u8 {
                let coefs: Vec<u8> = (0..n)
                    .map(|j| c.wrapping_add((j as u8).wrapping_mul(67)))
                    .collect();
                let doffs: Vec<usize> = (0..n).map(|j| (j * 13 + c as usize) % 64).collect();
                check_multi(
                    k,
                    97 + n,
                    c as usize % 64,
                    &doffs,
                    &coefs,
                    c as u64 + n as u64,
                );
            }
        }
    }
}

#[test]
fn the_test_buffers_differ_from_each_other() {
    // The checks above would pass vacuously if the generator returned constant bytes.
    let a = buffer(256, 1);
    let b = buffer(256, 2);
    assert_ne!(a, b);
    let distinct: std::collections::BTreeSet<u8> = a.iter().copied().collect();
    assert!(
        distinct.len() > 100,
        "only {} distinct bytes",
        distinct.len()
    );
}

#[test]
fn every_instruction_set_of_this_target_is_named_and_x86_has_its_vectors_where_the_cpu_does() {
    let names: Vec<&str> = Kernels::available()
        .iter()
        .map(|k| k.isa().name())
        .collect();
    assert_eq!(names[0], "scalar");
    #[cfg(target_arch = "x86_64")]
    {
        assert_eq!(
            Kernels::get(Isa::Avx2).is_some(),
            std::is_x86_feature_detected!("avx2")
        );
        assert_eq!(
            Kernels::get(Isa::Ssse3).is_some(),
            std::is_x86_feature_detected!("ssse3")
        );
        let gfni = std::is_x86_feature_detected!("gfni");
        assert_eq!(
            Kernels::get(Isa::Gfni256).is_some(),
            gfni && std::is_x86_feature_detected!("avx2")
        );
        assert_eq!(
            Kernels::get(Isa::Gfni512).is_some(),
            gfni && std::is_x86_feature_detected!("avx512bw")
        );
        assert!(Kernels::get(Isa::Neon).is_none());
    }
    // NEON is in the aarch64 baseline: always there (scripts/test-neon.sh runs this in qemu)
    #[cfg(target_arch = "aarch64")]
    assert_eq!(names, ["scalar", "neon"]);
    eprintln!("implementations tested here: {names:?}");
}

#[test]
fn dispatch_honours_the_request_or_says_why_not() {
    assert_eq!(
        scr_kernels::choose(None).unwrap().isa(),
        Kernels::best().isa()
    );
    assert_eq!(
        scr_kernels::choose(Some(" ")).unwrap().isa(),
        Kernels::best().isa()
    );
    for k in Kernels::available() {
        let name = k.isa().name();
        assert_eq!(scr_kernels::choose(Some(name)).unwrap().isa(), k.isa());
        assert_eq!(
            scr_kernels::choose(Some(&name.to_uppercase()))
                .unwrap()
                .isa(),
            k.isa()
        );
    }
    let e = scr_kernels::choose(Some("avx512")).unwrap_err();
    assert!(
        e.contains("SCR_KERNELS=avx512")
            && e.contains("scalar, neon, ssse3, avx2, gfni-avx512, gfni-avx2"),
        "{e}"
    );
    for isa in Isa::ALL {
        if Kernels::get(isa).is_none() {
            let e = scr_kernels::choose(Some(isa.name())).unwrap_err();
            assert!(
                e.contains("cannot run") && e.contains("available here: scalar"),
                "{e}"
            );
        }
    }
    // The free functions use what the environment asked for (or the fastest).
    let want = scr_kernels::choose(std::env::var(scr_kernels::ENV_VAR).ok().as_deref())
        .unwrap_or_else(|_| Kernels::best());
    assert_eq!(scr_kernels::implementation(), want.isa().name());
}

#[test]
fn mismatched_lengths_are_refused() {
    for k in implementations() {
        let r = std::panic::catch_unwind(|| k.mul_add(&mut [0u8; 3], &[1u8; 4], 7));
        assert!(
            r.is_err(),
            "{}: mul_add accepted different lengths",
            k.isa()
        );
        let r = std::panic::catch_unwind(|| {
            let mut a = [0u8; 4];
            let mut b = [0u8; 5];
            k.mul_add_multi(&mut [&mut a, &mut b], &[1u8; 4], &[2, 3]);
        });
        assert!(
            r.is_err(),
            "{}: mul_add_multi accepted a longer destination",
            k.isa()
        );
        let r = std::panic::catch_unwind(|| {
            let mut a = [0u8; 4];
            k.mul_add_multi(&mut [&mut a], &[1u8; 4], &[2, 3]);
        });
        assert!(
            r.is_err(),
            "{}: mul_add_multi accepted extra coefficients",
            k.isa()
        );
        let r = std::panic::catch_unwind(|| {
            let mut a = [0u8; 4];
            k.mul_add_matrix(&mut [&mut a], &[&[1u8; 4], &[1u8; 5]], &[2, 3]);
        });
        assert!(
            r.is_err(),
            "{}: mul_add_matrix accepted a longer source",
            k.isa()
        );
        let r = std::panic::catch_unwind(|| {
            let mut a = [0u8; 4];
            k.mul_add_matrix(&mut [&mut a], &[&[1u8; 4], &[1u8; 4]], &[2]);
        });
        assert!(
            r.is_err(),
            "{}: mul_add_matrix accepted too few coefficients",
            k.isa()
        );
        let r = std::panic::catch_unwind(|| k.xor_into(&mut [0u8; 40], &[1u8; 39]));
        assert!(
            r.is_err(),
            "{}: xor_into accepted different lengths",
            k.isa()
        );
    }
}

/// Run in a child process by `the_environment_forces_each_implementation`: reports what the
/// free functions chose for the `SCR_KERNELS` it was started with, and checks their bytes.
#[test]
#[ignore = "run as a child process by the_environment_forces_each_implementation"]
fn child_reports_its_implementation() {
    let mut dst = vec![0u8; 100];
    let src: Vec<u8> = (0..100u8).collect();
    scr_kernels::mul_add(&mut dst, &src, 0x8e);
    for (d, s) in dst.iter().zip(&src) {
        assert_eq!(*d, gf::mul(0x8e, *s));
    }
    println!("IMPLEMENTATION={}", scr_kernels::implementation());
    // the reason a request was refused is handed out once, for the caller to log
    println!("NOTE={:?}", scr_kernels::take_selection_note());
    assert_eq!(scr_kernels::take_selection_note(), None);
}

/// `SCR_KERNELS` forces each implementation this CPU has in a fresh process (the choice is
/// made once per process), and a request that cannot be honoured falls back to the fastest
/// with a note (for the plugin to log) that names the variable and the choices; nothing is
/// printed by the kernels themselves.
#[test]
fn the_environment_forces_each_implementation() {
    let run = |value: &str| {
        // under emulation (scripts/test-neon.sh runs the aarch64 build in qemu-user) the
        // child must be started through the same emulator
        let exe = std::env::current_exe().unwrap();
        let runner = std::env::var("SCR_KERNELS_TEST_RUNNER").unwrap_or_default();
        let mut words = runner.split_whitespace();
        let mut cmd = match words.next() {
            Some(emulator) => {
                let mut c = std::process::Command::new(emulator);
                c.args(words).arg(&exe);
                c
            }
            None => std::process::Command::new(&exe),
        };
        let out = cmd
            .args([
                "--exact",
                "child_reports_its_implementation",
                "--include-ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(scr_kernels::ENV_VAR, value)
            .output()
            .expect("the test binary starts again as a child");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
        let chosen = stdout
            .lines()
            .find_map(|l| l.split("IMPLEMENTATION=").nth(1))
            .unwrap_or_else(|| panic!("the child ran no test:\n{stdout}\n{stderr}"))
            .to_string();
        let note = stdout
            .lines()
            .find_map(|l| l.strip_prefix("NOTE="))
            .unwrap_or_default()
            .to_string();
        (chosen, note, stderr)
    };
    for k in Kernels::available() {
        let (chosen, note, stderr) = run(k.isa().name());
        assert_eq!(chosen, k.isa().name(), "{stderr}");
        assert_eq!(note, "None", "{stderr}");
        assert!(!stderr.contains("SCR_KERNELS"), "{stderr}");
    }
    let best = Kernels::best().isa().name();
    let (chosen, note, _) = run("");
    assert_eq!((chosen.as_str(), note.as_str()), (best, "None"));
    let (chosen, note, stderr) = run("avx512");
    assert_eq!(chosen, best);
    assert!(
        note.starts_with("Some(\"SCR_KERNELS=avx512: no such kernel implementation")
            && note.contains(&format!("; using the {best} kernels")),
        "{note}"
    );
    assert!(
        !stderr.contains("SCR_KERNELS"),
        "the kernels print nothing: {stderr}"
    );
}
