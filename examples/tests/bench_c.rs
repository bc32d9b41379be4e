//! `scr-bench-c` end to end: it compiles examples/c/test_api.c with mpicc against this
//! build's libscr, runs it under `mpiexec -n 4` for every scheme and reports one row per
//! scheme with the plain loop of the same job; a job whose newest checkpoint does not
//! read back, or that does not run as one world of the expected size, fails the run.
//! Needs the workspace built (`cargo build --workspace`): libscr and the plugins are found
//! beside the binary.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{tempdir, text};

/// scr-bench-c with `args`, its jobs under `dir`, none of the caller's SCR_* variables.
fn run(dir: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_scr-bench-c"));
    cmd.arg("--dir").arg(dir).args(args);
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("SCR_")) {
        cmd.env_remove(k);
    }
    // its own OpenMPI session directory: parallel tests' jobs race for the shared one
    cmd.env("OMPI_MCA_orte_tmpdir_base", dir)
        .env("SCR_SYSTEM_CONFIG", "/dev/null");
    cmd.output().expect("scr-bench-c runs")
}

/// Nothing but OpenMPI's session directory (named `ompi.*` or similar) is left behind.
fn assert_clean(dir: &Path, out: &Output) {
    let left: Vec<_> = std::fs::read_dir(dir)
        .expect("the directory")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("scr-bench-c-"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}\n{}", text(out));
}

/// A small successful run (1 MiB per rank, one repetition of 2 checkpoints with 10 ms
/// pauses, JSON) with `extra` arguments, and its JSON.
fn small_run(dir: &Path, extra: &[&str]) -> (Output, serde_json::Value) {
    let mut args = vec![
        "--mib",
        "1",
        "--reps",
        "1",
        "--checkpoints",
        "2",
        "--sleep",
        "0.01",
        "--json",
    ];
    args.extend_from_slice(extra);
    let out = run(dir, &args);
    assert!(out.status.success(), "{}", text(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("JSON on stdout ({e}): {}", text(&out)));
    (out, json)
}

#[test]
fn every_scheme_is_measured_from_c_against_the_plain_loop() {
    let dir = tempdir();
    let (out, json) = small_run(dir.path(), &[]);
    assert_eq!(json["ranks"], 4, "{}", text(&out));
    let positive = |v: &serde_json::Value| v.as_f64().is_some_and(|x| x.is_finite() && x > 0.0);
    let schemes = ["SINGLE", "PARTNER", "XOR", "RS"];
    // every job's own line, as the C client printed it
    let jobs = json["jobs"].as_array().expect("jobs");
    assert_eq!(jobs.len(), schemes.len(), "{}", text(&out));
    for (job, scheme) in jobs.iter().zip(schemes) {
        assert_eq!(job["scheme"], scheme, "{job}");
        assert_eq!(job["ranks"], 4, "one world of 4 ranks: {job}");
        assert_eq!(job["bytes_per_rank"], 1 << 20, "{job}");
        assert_eq!(job["checkpoints"], 2, "{job}");
        assert_eq!(job["sleep_s"], 0.01, "{job}");
        assert_eq!(job["verified"], true, "{job}");
        for key in [
            "seconds",
            "mib_per_s",
            "plain_seconds",
            "plain_mib_per_s",
            "vs_plain",
        ] {
            assert!(positive(&job[key]), "{key} of {job}");
        }
        // the sleeps are in the loop time: 2 timed checkpoints x 10 ms at least
        assert!(job["seconds"].as_f64().unwrap() >= 0.02, "{job}");
        assert!(job["plain_seconds"].as_f64().unwrap() >= 0.02, "{job}");
    }
    let rows = json["rows"].as_array().expect("rows");
    for scheme in ["plain"].into_iter().chain(schemes) {
        let r = rows
            .iter()
            .find(|r| r["scheme"] == scheme && r["mib_per_rank"] == 1)
            .unwrap_or_else(|| panic!("no {scheme} row: {}", text(&out)));
        assert!(positive(&r["mib_per_s"]["median"]), "{r}");
        if scheme != "plain" {
            assert!(positive(&r["vs_plain"]["median"]), "{r}");
            // the stall per checkpoint is the loop less its sleeps (2 x 10 ms) over the
            // 2 timed checkpoints, against the plain loop's in the same job
            let job = jobs
                .iter()
                .find(|j| j["scheme"] == scheme)
                .expect("its job");
            let stall_of = |key: &str| (job[key].as_f64().unwrap() - 0.02) / 2.0 * 1e3;
            let (stall, plain) = (stall_of("seconds"), stall_of("plain_seconds"));
            let got = r["stall_ms"]["median"].as_f64().unwrap_or(f64::NAN);
            assert!(
                (got - stall).abs() < 1e-6,
                "stall {got} ms, expected {stall}: {r}"
            );
            let ratio = r["stall_vs_plain"]["median"].as_f64().unwrap_or(f64::NAN);
            assert!((ratio - stall / plain).abs() < 1e-9, "{r}");
        } else {
            assert!(positive(&r["stall_ms"]["median"]), "{r}");
            assert!(r["stall_vs_plain"].is_null(), "{r}");
        }
    }
    assert_clean(dir.path(), &out);
}

/// `NAME+bg` runs NAME with SCR_PROTECT_IN_BACKGROUND=1, which makes test_api's plain
/// MPI_Init run at MPI_THREAD_MULTIPLE (libscr's MPI_Init asks for it), and `NAME+calls`
/// and `NAME+sockets` below it with protect_below_multiple = calls or sockets: rows of
/// their own, their checkpoints
/// read back byte for byte like every other; `--steps` cuts each sleep into timesteps
/// that call SCR_Need_checkpoint.
#[test]
fn a_scheme_protected_in_the_background_is_measured_as_a_row_of_its_own() {
    let dir = tempdir();
    let (out, json) = small_run(
        dir.path(),
        &[
            "--schemes",
            "XOR",
            "XOR+bg",
            "XOR+calls",
            "XOR+sockets",
            "--steps",
            "2",
        ],
    );
    let jobs = json["jobs"].as_array().expect("jobs");
    assert_eq!(jobs.len(), 4, "{}", text(&out));
    let expected = [
        ("XOR", false),
        ("XOR+bg", true),
        ("XOR+calls", false),
        ("XOR+sockets", false),
    ];
    for (job, (scheme, multiple)) in jobs.iter().zip(expected) {
        assert_eq!(job["scheme"], scheme, "{job}");
        assert_eq!(job["verified"], true, "{job}");
        assert_eq!(job["thread_multiple"], multiple, "{job}");
        assert_eq!(job["steps"], 2, "{job}");
    }
    let rows = json["rows"].as_array().expect("rows");
    for scheme in ["XOR+bg", "XOR+calls", "XOR+sockets"] {
        assert!(
            rows.iter().any(|r| r["scheme"] == scheme),
            "{scheme}: {}",
            text(&out)
        );
    }
    assert_clean(dir.path(), &out);
}

#[test]
fn a_checkpoint_that_does_not_read_back_fails_the_run() {
    let dir = tempdir();
    let out = run(
        dir.path(),
        &[
            "--mib",
            "1",
            "--reps",
            "1",
            "--checkpoints",
            "1",
            "--schemes",
            "XOR",
            "--corrupt",
        ],
    );
    assert!(!out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("XOR at 1 MiB per rank (repetition 1): the job failed")
            && err.contains("does not hold the 1048584 bytes written to it"),
        "{}",
        text(&out)
    );
    assert_clean(dir.path(), &out);
}

#[test]
fn singletons_instead_of_one_world_fail_the_run() {
    // a launcher of another MPI starts every rank as a singleton: here, one singleton
    let dir = tempdir();
    let fake = dir.path().join("fake-mpiexec");
    std::fs::write(
        &fake,
        "#!/bin/sh\n# drop -n N, start the program alone\nshift 2\nexec \"$@\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = run(
        dir.path(),
        &[
            "--mib",
            "1",
            "--reps",
            "1",
            "--checkpoints",
            "1",
            "--schemes",
            "SINGLE",
            "--mpiexec",
            fake.to_str().unwrap(),
        ],
    );
    assert!(!out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("the world has 1 rank(s), not the 4 of --expect-ranks"),
        "{}",
        text(&out)
    );
}

#[test]
fn under_mpiexec_it_refuses_to_launch_jobs() {
    let dir = tempdir();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_scr-bench-c"));
    let out = cmd
        .arg("--dir")
        .arg(dir.path())
        .env("OMPI_COMM_WORLD_SIZE", "4")
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("run scr-bench-c without mpiexec"),
        "{}",
        text(&out)
    );
}

/// `--vs` with `--rebuild`: every measurement runs once per build in each repetition, the
/// builds taking turns going first; the rebuild jobs (all but SINGLE) report SCR_Init's
/// time after a node was lost and offered the newest checkpoint; the report pairs them.
/// The other build here is this one (its own directory), which is all the test can build.
#[test]
fn against_another_build_every_measurement_runs_in_pairs_with_its_rebuild() {
    let dir = tempdir();
    let this = Path::new(env!("CARGO_BIN_EXE_scr-bench-c"))
        .parent()
        .expect("the binary's directory")
        .to_str()
        .unwrap()
        .to_string();
    let out = run(
        dir.path(),
        &[
            "--mib",
            "1",
            "--reps",
            "2",
            "--checkpoints",
            "2",
            "--schemes",
            "SINGLE",
            "XOR",
            "--rebuild",
            "--vs",
            &this,
            "--json",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("JSON on stdout ({e}): {}", text(&out)));
    let jobs = json["jobs"].as_array().expect("jobs");
    let seen: Vec<String> = jobs
        .iter()
        .map(|j| {
            format!(
                "{} {} {} {}",
                j["rep"],
                j["scheme"].as_str().unwrap(),
                j["build"].as_str().unwrap(),
                j["op"].as_str().unwrap()
            )
        })
        .collect();
    // repetition 0: SINGLE then XOR, this build first; repetition 1: the reverse orders
    let want = [
        "0 SINGLE this loop",
        "0 SINGLE vs loop",
        "0 XOR this loop",
        "0 XOR this rebuild",
        "0 XOR vs loop",
        "0 XOR vs rebuild",
        "1 XOR vs loop",
        "1 XOR vs rebuild",
        "1 XOR this loop",
        "1 XOR this rebuild",
        "1 SINGLE vs loop",
        "1 SINGLE this loop",
    ];
    assert_eq!(seen, want, "{}", text(&out));
    for j in jobs {
        assert_eq!(j["ranks"], 4, "{j}");
        assert_eq!(j["verified"], true, "{j}");
        assert!(j["init_s"].as_f64().is_some_and(|s| s > 0.0), "{j}");
    }
    let rows = json["rows"].as_array().expect("rows");
    let measures: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "{} {}",
                r["scheme"].as_str().unwrap(),
                r["measure"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        measures,
        ["SINGLE loop MiB/s", "XOR loop MiB/s", "XOR rebuild s"],
        "{}",
        text(&out)
    );
    for r in rows {
        assert_eq!(r["this_over_vs"]["n"], 2, "two pairs: {r}");
        let ratio = r["this_over_vs"]["median"].as_f64().unwrap();
        let (a, b) = (
            r["this"]["median"].as_f64().unwrap(),
            r["vs"]["median"].as_f64().unwrap(),
        );
        assert!(ratio > 0.0 && a > 0.0 && b > 0.0, "{r}");
    }
    assert_clean(dir.path(), &out);
}

#[test]
fn a_vs_directory_without_libscr_is_refused_by_name() {
    let dir = tempdir();
    let out = run(
        dir.path(),
        &["--mib", "1", "--vs", dir.path().to_str().unwrap()],
    );
    assert!(!out.status.success(), "{}", text(&out));
    let want = format!("--vs {}: no libscr.so there", dir.path().display());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&want),
        "{want}\n{}",
        text(&out)
    );
    let out = run(dir.path(), &["--rebuild", "--lose", "4"]);
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("--lose 4 is not a rank of a job of 4 (--ranks)"),
        "{}",
        text(&out)
    );
}
