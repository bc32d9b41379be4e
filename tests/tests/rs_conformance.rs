//! `scr-conformance` on the RS plugin under `mpiexec -n 8`, for (set size, k) = (4, 2),
//! (6, 3), (8, 2) and (8, 7): every loss pattern of up to k members rebuilt and protected
//! again, every pattern of k + 1 refused alike on every rank, corrupted survivors and
//! headers never trusted — the real MPI host, real processes, the loaded library.

use std::process::Command;

use scr_e2e::{binary, mpi_env, target_dir};

/// Run the harness on 8 ranks for sets of `size` with `set_failures = k`; return its
/// standard output after checking the world size, the exit status and that nothing
/// failed.
fn conformance(size: u32, k: u32) -> String {
    let lib = target_dir().join("libscr_reed_solomon.so");
    assert!(lib.is_file(), "{} (build the workspace)", lib.display());
    // tmpfs when there is one: the cases fsync thousands of small files
    let base = ["/dev/shm", "/tmp"]
        .into_iter()
        .find(|d| std::path::Path::new(d).is_dir())
        .unwrap();
    let dir = tempfile::tempdir_in(base).unwrap();
    let out = Command::new("timeout")
        .args(["--kill-after=5", "1500", "mpiexec", "-n", "8"])
        .arg(binary("scr-conformance"))
        .arg("--plugin")
        .arg(&lib)
        .args(["--scheme", "RS", "--set-size", &size.to_string()])
        .args(["--param", &format!("set_failures={k}")])
        .arg("--dir")
        .arg(dir.path())
        .args(["--timeout", "1400"])
        .envs(mpi_env())
        // its own OpenMPI session directory (see scr_e2e's Cluster)
        .env("OMPI_MCA_orte_tmpdir_base", dir.path())
        // 8 busy-polling ranks on 2 cores: let idle ranks yield the core
        .env("OMPI_MCA_mpi_yield_when_idle", "1")
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .expect("mpiexec runs (is OpenMPI installed?)");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let all = format!(
        "{stdout}--- stderr ---\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.starts_with("NOTE launched on 8 rank(s)\n"),
        "not one job of 8 ranks\n{all}"
    );
    assert_eq!(out.status.code(), Some(0), "{all}");
    assert!(!stdout.contains("FAIL"), "{all}");
    assert!(
        stdout.contains(&format!(
            "PASS scheme RS: set of {size}: describes itself: tolerates {k} lost member(s); "
        )),
        "{all}"
    );
    stdout
}

/// The harness's closing line: `N passed, 0 failed`, with N the cases it ran.
fn passed(out: &str) -> usize {
    out.lines()
        .last()
        .and_then(|l| l.strip_suffix(" passed, 0 failed"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no closing line\n{out}"))
}

/// The largest tolerated pattern and the first one beyond ran and passed.
fn extremes_passed(out: &str, size: u32, k: u32) {
    let all_k: Vec<u32> = (0..k).collect();
    let beyond: Vec<u32> = (0..=k).collect();
    for line in [
        format!("PASS scheme RS: set of {size}: varied: lose members {all_k:?} (Both), recover\n"),
        format!("PASS scheme RS: set of {size}: uniform: lose members {all_k:?} (DataOnly), recover\n"),
        format!("PASS scheme RS: set of {size}: varied: lose members {beyond:?} (beyond the claim of {k}), recover is right or fails everywhere\n"),
    ] {
        assert!(out.contains(&line), "missing: {line}");
    }
}

// Totals: four load and declaration cases, the instance, its description, then the
// collective cases (counted in plugins/rs/tests/conformance.rs's expected_cases).

#[test]
fn rs_4_members_2_checksums_passes_under_mpiexec() {
    let out = conformance(4, 2);
    extremes_passed(&out, 4, 2);
    assert_eq!(passed(&out), 356, "{out}");
}

#[test]
fn rs_6_members_3_checksums_passes_under_mpiexec() {
    let out = conformance(6, 3);
    extremes_passed(&out, 6, 3);
    assert!(
        out.contains("NOTE scheme RS: ranks 6..7 are not in a set of 6 and stay idle"),
        "{out}"
    );
    assert_eq!(passed(&out), 1329, "{out}");
}

#[test]
fn rs_8_members_2_checksums_passes_under_mpiexec() {
    let out = conformance(8, 2);
    extremes_passed(&out, 8, 2);
    assert_eq!(passed(&out), 1518, "{out}");
}

#[test]
fn rs_8_members_7_checksums_passes_under_mpiexec() {
    let out = conformance(8, 7);
    extremes_passed(&out, 8, 7);
    assert_eq!(passed(&out), 7074, "{out}");
}
