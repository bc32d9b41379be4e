//! `scr-bench` end to end under `mpiexec -n 4` (OpenMPI, as root on this machine: the
//! environment below): it must measure every scheme it can instantiate, rebuild a lost
//! node byte for byte, report a scheme it cannot instantiate instead of failing, refuse a
//! job too small for its set, and fail when a scheme's rebuild does not give the files
//! back. Needs the workspace built (`cargo build --workspace --all-targets`): the plugins
//! are found beside the binary.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{tempdir, text};

fn bench() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_scr-bench"))
}

/// Run scr-bench on `ranks` ranks with `args`, its directories under `dir`, the system
/// configuration `system` (or none), and no SCR_* variables of the caller's.
fn run(ranks: usize, dir: &Path, system: Option<&Path>, args: &[&str]) -> Output {
    let mut cmd = Command::new("timeout");
    cmd.args(["--kill-after=5", "300", "mpiexec", "-n", &ranks.to_string()])
        .arg(bench())
        .arg("--dir")
        .arg(dir)
        .args(args);
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("SCR_")) {
        cmd.env_remove(k);
    }
    // its own OpenMPI session directory: parallel tests' jobs race for the shared one
    cmd.env("OMPI_MCA_orte_tmpdir_base", dir);
    cmd.envs(scr_e2e::local_mpi::openmpi_local_env()).env(
        "SCR_SYSTEM_CONFIG",
        system.unwrap_or(Path::new("/dev/null")),
    );
    cmd.output().expect("mpiexec runs (is OpenMPI installed?)")
}

#[test]
fn every_scheme_is_measured_and_rebuilt_byte_for_byte() {
    let dir = tempdir();
    let out = run(
        4,
        dir.path(),
        None,
        &[
            "--mib",
            "1",
            "2",
            "--reps",
            "2",
            "--checkpoints",
            "2",
            "--json",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("JSON on stdout ({e}): {}", text(&out)));
    assert_eq!(json["ranks"], 4, "the job ran on 4 ranks: {}", text(&out));
    let rows = json["rows"].as_array().expect("rows");
    let row = |scheme: &str, mib: u64, op: &str| {
        rows.iter()
            .find(|r| r["scheme"] == scheme && r["mib_per_rank"] == mib && r["op"] == op)
            .unwrap_or_else(|| panic!("no {scheme} {mib} MiB {op} row: {}", text(&out)))
    };
    let positive = |v: &serde_json::Value| v.as_f64().is_some_and(|x| x.is_finite() && x > 0.0);
    for mib in [1, 2] {
        let plain = row("plain", mib, "ckpt");
        assert!(positive(&plain["mib_per_s"]["median"]), "{plain}");
        for scheme in ["SINGLE", "PARTNER", "XOR"] {
            let r = row(scheme, mib, "ckpt");
            assert_eq!(r["mib_per_s"]["n"], 2, "two repetitions: {r}");
            for key in ["mib_per_s", "vs_plain", "vs_limit"] {
                assert!(positive(&r[key]["median"]), "{key} of {r}");
                assert!(r[key]["min"].as_f64() <= r[key]["max"].as_f64(), "{r}");
            }
        }
        for scheme in ["PARTNER", "XOR"] {
            let r = row(scheme, mib, "rebuild");
            assert!(positive(&r["vs_limit"]["median"]), "{r}");
        }
        // SINGLE cannot rebuild, and says so
        assert!(rows
            .iter()
            .all(|r| !(r["scheme"] == "SINGLE" && r["op"] == "rebuild")));
        assert!(
            json["notes"].as_array().expect("notes").iter().any(|n| n
                .as_str()
                .is_some_and(|n| n.starts_with(&format!("SINGLE at {mib} MiB: no rebuild")))),
            "{}",
            text(&out)
        );
        // RS is measured when its plugin works, else reported unavailable with the reason
        let rs = row("RS", mib, "ckpt");
        assert!(
            positive(&rs["mib_per_s"]["median"])
                || (rs["limited_by"] == "unavailable"
                    && rs["detail"]
                        .as_str()
                        .is_some_and(|d| d.starts_with("unavailable: ") && d.contains("RS"))),
            "{rs}"
        );
    }
    // nothing is left behind
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .expect("the directory")
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn a_job_too_small_for_the_set_is_refused() {
    let dir = tempdir();
    let out = run(2, dir.path(), None, &["--mib", "1", "--reps", "1"]);
    assert!(!out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(": 2 rank(s) cannot fill a set of 4: run under mpiexec -n 4"),
        "{}",
        text(&out)
    );
}

#[test]
fn a_rebuild_that_loses_files_fails_the_run() {
    // LIAR claims one loss per set but keeps nothing: the restart after the loss must not
    // pass for a rebuild
    let lib = bench()
        .parent()
        .expect("target dir")
        .join("libscr_fixture_liar.so");
    assert!(
        lib.is_file(),
        "{} (build the workspace first)",
        lib.display()
    );
    let dir = tempdir();
    let system = dir.path().join("system.toml");
    std::fs::write(
        &system,
        format!("[plugins]\nfiles = [\"{}\"]\n", lib.display()),
    )
    .expect("system configuration");
    let bench_dir = dir.path().join("bench");
    std::fs::create_dir(&bench_dir).expect("bench dir");
    let out = run(
        4,
        &bench_dir,
        Some(&system),
        &[
            "--schemes",
            "LIAR",
            "--mib",
            "1",
            "--reps",
            "1",
            "--checkpoints",
            "1",
        ],
    );
    assert!(!out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(": LIAR: after losing node1 the restart offers")
            || err.contains(": LIAR: the restart after losing node1 did not give back every file"),
        "{}",
        text(&out)
    );
}
