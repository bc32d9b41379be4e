//! The harness against real libraries: it must fail clearly on broken plugins and report
//! unimplemented schemes as failures, never as passes.

use std::path::PathBuf;
use std::process::Command;

/// What OpenMPI needs to run many ranks as root on two cores, and a plain PATH.
fn mpi_env() -> Vec<(&'static str, &'static str)> {
    let mut env = scr_e2e::local_mpi::openmpi_local_env();
    env.push(("PATH", "/usr/bin:/bin"));
    env
}

fn lib(name: &str) -> PathBuf {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_scr-conformance"));
    exe.parent().unwrap().join(format!("lib{name}.so"))
}

fn run(args: &[&str]) -> (i32, String) {
    run_env(args, &[])
}

fn run_env(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    // a singleton MPI process (no mpiexec); OpenMPI still needs its root settings, and
    // a session directory of its own (see `mpirun`)
    let session = tempfile::tempdir().expect("a temporary directory");
    let out = Command::new(env!("CARGO_BIN_EXE_scr-conformance"))
        .args(args)
        .env_clear()
        .envs(mpi_env())
        .env("OMPI_MCA_orte_tmpdir_base", session.path())
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
    )
}

#[test]
fn a_library_that_is_not_a_plugin_fails_at_load() {
    let p = lib("scr_fixture_not_a_plugin");
    let (code, out) = run(&["--plugin", p.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(
        out,
        "NOTE launched on 1 rank(s)\nFAIL loads as an scr-rs plugin: not an scr-rs plugin: it exports no abi_stable root module (build it with scr_plugin::export_plugin!)\n0 passed, 1 failed\n"
    );
}

#[test]
fn a_scheme_instance_the_plugin_refuses_is_a_failure() {
    // RS cannot keep as many checksums as the set has members
    let p = lib("scr_reed_solomon");
    let (code, out) = run(&[
        "--plugin",
        p.to_str().unwrap(),
        "--set-size",
        "8",
        "--param",
        "set_failures=8",
    ]);
    assert_eq!(code, 1, "{out}");
    let lines: Vec<&str> = out.lines().skip(1).collect();
    assert_eq!(
        lines[0],
        "PASS loads as an scr-rs plugin: scr-reed-solomon 0.1.0 (ABI 1)"
    );
    assert_eq!(
        lines[1],
        "PASS declares at least one scheme or transfer type: schemes [RS], transfer types []"
    );
    assert!(lines[3].starts_with("FAIL scheme RS: instance for a set of 8: plugin "));
    assert!(lines[3].ends_with(
        "new_scheme: invalid parameter: scheme RS: set_failures = 8 needs sets of at least 9 members, but set_size is 8; lower set_failures below 8 or raise set_size"
    ), "{}", lines[3]);
    assert_eq!(*lines.last().unwrap(), "3 passed, 1 failed");
}

#[test]
fn panics_are_reported_per_case_and_the_run_goes_on() {
    let p = lib("scr_fixture_panic");
    let (code, out) = run(&["--plugin", p.to_str().unwrap(), "--param", "k=v"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("FAIL scheme PANIC_NEW: instance for a set of 2: plugin "));
    assert!(out.contains("panicked in new_scheme: deliberate panic in new_scheme"));
    assert!(out.contains(
        "PASS scheme PANIC_APPLY: set of 2: describes itself: tolerates 0 lost member(s); panics in apply"
    ));
    assert!(
        out.contains("PASS scheme PANIC_DROP: set of 2: describes itself"),
        "{out}"
    );
    // one rank cannot run the collective cases: that is a failure, never a skip
    assert!(!out.contains("SKIP"), "{out}");
    assert!(out.ends_with("17 passed, 8 failed\n"), "{out}");
}

#[test]
fn a_scheme_the_library_does_not_declare_fails() {
    let p = lib("scr_partner");
    let (code, out) = run(&["--plugin", p.to_str().unwrap(), "--scheme", "MIRROR"]);
    assert_eq!(code, 1);
    assert!(out.contains("FAIL declares scheme MIRROR: unknown scheme \"MIRROR\": no loaded plugin provides it (known: PARTNER)"), "{out}");
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(run(&[]).0, 2);
    assert_eq!(run(&["--plugin", "x.so", "--param", "novalue"]).0, 2);
    assert_eq!(run(&["--plugin", "x.so", "--set-size", "0"]).0, 2);
}

/// `mpiexec -n <ranks> scr-conformance args...` with the environment that lets OpenMPI
/// run many ranks as root on two cores.
fn mpirun(ranks: u32, args: &[&str]) -> (i32, String) {
    // the job's OpenMPI session directory of its own: jobs of parallel tests starting at
    // once race to create the shared /tmp/ompi.<host>.<uid> ("File exists")
    let session = tempfile::tempdir().expect("a temporary directory");
    let out = Command::new("mpiexec")
        .arg("-n")
        .arg(ranks.to_string())
        .arg(env!("CARGO_BIN_EXE_scr-conformance"))
        .args(args)
        .envs(mpi_env())
        .env("OMPI_MCA_orte_tmpdir_base", session.path())
        .output()
        .expect("mpiexec runs (is OpenMPI installed?)");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Checks a full pass and returns the number of cases.
fn passes(ranks: u32, lib_name: &str, args: &[&str]) -> usize {
    let p = lib(lib_name);
    let mut all = vec!["--plugin", p.to_str().unwrap()];
    all.extend_from_slice(args);
    let (code, out) = mpirun(ranks, &all);
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("FAIL"), "{out}");
    let last = out.lines().last().unwrap();
    let n: usize = last
        .strip_suffix(" passed, 0 failed")
        .unwrap_or_else(|| panic!("{out}"))
        .parse()
        .unwrap();
    n
}

#[test]
fn shipped_schemes_pass_under_mpiexec_with_8_ranks() {
    // totals: five load and declaration cases, then per set size the instance, its
    // description and the collective cases (the offline rebuild cases add, per shape,
    // one per pattern of up to k + 1 lost members: 8 for SINGLE's 0, 10 for PARTNER
    // over 4, 92 for PARTNER with 2 replicas over 8, 6 and 36 for XOR over 3 and 8; the
    // damaged-payload cases add 2 per member of a set with redundancy, in one shape)
    assert_eq!(passes(8, "scr_single", &["--set-size", "8"]), 65);
    assert_eq!(passes(8, "scr_partner", &["--set-size", "4"]), 169);
    assert_eq!(
        passes(
            8,
            "scr_partner",
            &["--set-size", "8", "--param", "replicas=2"]
        ),
        1517
    );
    for (size, cases) in [(3, 119), (8, 425)] {
        assert_eq!(
            passes(8, "scr_xor", &["--set-size", &size.to_string()]),
            cases,
            "XOR set of {size}"
        );
    }
    // by default: sets of 2, of 3 and of every rank in one run
    assert_eq!(passes(4, "scr_xor", &[]), 359);
}

/// Ranks sharing failure groups: 2 ranks per node, sets formed across nodes as the
/// runtime forms them (members' world ranks not consecutive, two members of other sets
/// on each node).
#[test]
fn shipped_schemes_pass_with_ranks_sharing_nodes() {
    for lib_name in ["scr_xor", "scr_partner"] {
        let p = lib(lib_name);
        let (code, out) = mpirun(
            4,
            &[
                "--plugin",
                p.to_str().unwrap(),
                "--set-size",
                "2",
                "--ranks-per-node",
                "2",
            ],
        );
        assert_eq!(code, 0, "{out}");
        assert!(out.starts_with("NOTE launched on 4 rank(s)\n"), "{out}");
        assert!(
            out.contains(": 2 ranks per node, sets [0, 2] [1, 3]\n"),
            "{out}"
        );
        assert!(out.contains("PASS scheme "), "{out}");
        assert!(out.ends_with(" passed, 0 failed\n"), "{out}");
    }
}

#[test]
fn a_scheme_that_lies_about_its_tolerance_fails_clearly() {
    let p = lib("scr_fixture_liar");
    let (code, out) = mpirun(4, &["--plugin", p.to_str().unwrap(), "--set-size", "4"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.starts_with("NOTE launched on 4 rank(s)\n"), "{out}");
    assert!(
        out.contains("FAIL scheme LIAR: set of 4: uniform: lose members [0] (Both), recover: member 0: 0 files returned, 1 expected"),
        "{out}"
    );
    assert!(
        out.contains("FAIL scheme LIAR: set of 4: varied: lose members [0, 1] (beyond the claim of 1), recover is right or fails everywhere: recovered although more members were lost than the scheme tolerates, and wrongly: member 1: 0 files returned, 1 expected"),
        "{out}"
    );
    let last = out.lines().last().unwrap();
    assert!(
        last.ends_with(" failed") && !last.ends_with(" 0 failed"),
        "{last}"
    );
}

#[test]
fn shipped_transfer_types_pass_and_an_absent_vendor_library_fails_clearly() {
    let p = lib("scr_axl_transfer");
    let plugin = p.to_str().unwrap();
    for t in ["sync", "pthread"] {
        let (code, out) = run(&["--plugin", plugin, "--transfer", t]);
        assert_eq!(code, 0, "{out}");
        assert!(
            out.contains(&format!(
                "PASS transfer {t}: cancelled mid-copy, resumed in a new process, byte-exact: "
            )),
            "{out}"
        );
        assert!(
            out.contains(&format!(
                "PASS transfer {t}: a source that vanishes mid-transfer is reported Failed"
            )),
            "{out}"
        );
        assert!(out.ends_with("9 passed, 0 failed\n"), "{out}");
    }
    for (t, stand_in) in [
        ("bbapi", "scr_fixture_bbapi"),
        ("dw", "scr_fixture_datawarp"),
    ] {
        let setting = format!("library={}", lib(stand_in).display());
        let (code, out) = run(&["--plugin", plugin, "--transfer", t, "--setting", &setting]);
        assert_eq!(code, 0, "{out}");
        assert!(
            out.contains(&format!(
                "PASS transfer {t}: copies files of every shape byte-exact"
            )),
            "{out}"
        );
        assert!(out.ends_with("9 passed, 0 failed\n"), "{out}");
    }
    let (code, out) = run(&["--plugin", plugin, "--transfer", "bbapi"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("FAIL transfer bbapi: copies files of every shape byte-exact with CRC32 and metadata: plugin ")
            && out.contains("unavailable: libbbAPI.so not found"),
        "{out}"
    );
}

/// `mpiexec -n 4` against one scheme of the untrustworthy fixture: it must fail, every
/// failed case must be one of `allowed`, and `must` must be among them.
fn untrustworthy(scheme: &str, must: &str, allowed: &[&str]) {
    let p = lib("scr_fixture_untrustworthy");
    let (code, out) = mpirun(
        4,
        &[
            "--plugin",
            p.to_str().unwrap(),
            "--scheme",
            scheme,
            "--set-size",
            "4",
        ],
    );
    assert_eq!(code, 1, "{out}");
    assert!(out.starts_with("NOTE launched on 4 rank(s)\n"), "{out}");
    assert!(out.contains(&format!("FAIL {must}")), "{out}");
    for line in out.lines().filter(|l| l.starts_with("FAIL")) {
        assert!(allowed.iter().any(|a| line.contains(a)), "{line}\n{out}");
    }
}

/// A scheme that declares it verifies survivors itself (`SurvivorCheck::Scheme`) gets a
/// damaged survivor unverified: TRUSTING does not check it, fails those cases, and the
/// failure says what the declaration demands.
#[test]
fn a_scheme_declaring_self_verification_that_trusts_a_corrupted_survivor_fails() {
    untrustworthy(
        "TRUSTING",
        "scheme TRUSTING: set of 4: uniform: member 1's data corrupted by one byte and member 0 lost, passed unverified (the scheme verifies survivors itself): recover is right or fails everywhere: member 1: member 1: ",
        &["corrupted by one byte"],
    );
    let p = lib("scr_fixture_untrustworthy");
    let (_, out) = mpirun(
        4,
        &[
            "--plugin",
            p.to_str().unwrap(),
            "--scheme",
            "TRUSTING",
            "--set-size",
            "4",
        ],
    );
    let line = out
        .lines()
        .find(|l| l.starts_with("FAIL scheme TRUSTING: set of 4: uniform: member 1's data"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        line.ends_with(" (the scheme declares SurvivorCheck::Scheme, so it must detect member 1's damaged data itself: verify survivors in recover with scr_plugin::verify::verify_files, or declare SurvivorCheck::Host to rely on the host's check)"),
        "{line}"
    );
}

/// The same scheme declaring what it does — relying on the host's survivor check
/// (`SurvivorCheck::Host`, the default) — gets survivors the harness checked as the host
/// does, the damaged one passed as lost, and passes every case: it never hands back a
/// wrong byte.
#[test]
fn a_scheme_relying_on_the_hosts_survivor_check_passes_without_verifying() {
    let p = lib("scr_fixture_untrustworthy");
    let (code, out) = mpirun(
        4,
        &[
            "--plugin",
            p.to_str().unwrap(),
            "--scheme",
            "HOSTCHECKED",
            "--set-size",
            "4",
        ],
    );
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("FAIL"), "{out}");
    assert!(
        out.contains("\nPASS scheme HOSTCHECKED: set of 4: uniform: member 1's data corrupted by one byte and member 0 lost, the host's check passes member 1 as lost (the scheme relies on it): recover is right or fails everywhere\n"),
        "{out}"
    );
}

#[test]
fn a_scheme_that_never_restores_lost_redundancy_fails_protected_again() {
    untrustworthy(
        "NOREPROTECT",
        "scheme NOREPROTECT: set of 4: varied: after losing [0] (Both), lose member 3 too: protected again: unrecoverable: member 0 (world rank 0) failed in recover: members [0, 3] lost files; a mirror rebuilds one",
        &["protected again", "), recover: unrecoverable"],
    );
}

#[test]
fn a_scheme_whose_redundancy_files_disagree_with_apply_fails() {
    untrustworthy(
        "WRONGLIST",
        "scheme WRONGLIST: set of 4: varied: redundancy_files lists exactly what apply wrote: member 0: redundancy_files lists [",
        &["redundancy_files lists exactly what apply wrote"],
    );
}

/// The offline rebuild is held to what the scheme declares, through the loaded library
/// (so scr-conformance forwards `rebuild_sources` and `recover_files`): FEWSOURCES names
/// no survivor yet needs its partner's copy, REWRITES writes redundancy on survivors it
/// was not given.
#[test]
fn a_scheme_whose_offline_rebuild_needs_or_writes_more_than_it_declares_fails() {
    untrustworthy(
        "FEWSOURCES",
        "scheme FEWSOURCES: set of 4: varied: offline rebuild of members [0] with the redundancy of the survivors rebuild_sources names: recover_files rebuilds them exactly: member 0: unrecoverable: member 0 (world rank 0) failed in recover_files: members [0, 1, 2, 3] lost files; a mirror rebuilds one (rebuild_sources([0]) = Some([]): recover_files must rebuild from the redundancy of those survivors alone)",
        &["recover_files rebuilds them exactly: "],
    );
    untrustworthy(
        "REWRITES",
        "scheme REWRITES: set of 4: varied: offline rebuild of members [1] with the redundancy of the survivors rebuild_sources names: recover_files rebuilds them exactly: member 0: recover_files wrote [",
        &["did not name this survivor (its redundancy is not there to rewrite)"],
    );
}

/// A scheme that fails on one member only (member 1 panics or returns an error in apply
/// or recover) while the other members wait inside the plugin for a message from it: the
/// case ends in bounded time with member 1's error on every member — no hang, no
/// "did not return" from the watchdog. The FAIL line shows member 0's view of the case
/// (the first failing member's), which names member 1's error only because the host
/// told member 0 about it.
#[test]
fn a_failure_on_one_member_ends_the_case_with_its_error_everywhere_not_a_hang() {
    let p = lib("scr_fixture_panic");
    for (scheme, call, why, case) in [
        ("PANIC_ONE", "apply", "plugin scr-fixture-panic panicked in apply: deliberate panic in apply on member 1", "varied: apply: panic"),
        ("FAIL_ONE", "apply", "deliberate failure in apply on member 1", "varied: apply: I/O error"),
        ("PANIC_ONE_RECOVER", "recover", "plugin scr-fixture-panic panicked in recover: deliberate panic in recover on member 1", "varied: lose members [0] (beyond the claim of 0), recover is right or fails everywhere: failed with panic"),
        ("FAIL_ONE_RECOVER", "recover", "deliberate failure in recover on member 1", "varied: lose members [0] (beyond the claim of 0), recover is right or fails everywhere: failed with I/O error"),
    ] {
        let started = std::time::Instant::now();
        let (code, out) = mpirun(
            4,
            &[
                "--plugin",
                p.to_str().unwrap(),
                "--scheme",
                scheme,
                "--set-size",
                "4",
                "--timeout",
                "30",
            ],
        );
        let took = started.elapsed();
        assert_eq!(code, 1, "{scheme}: {out}");
        assert!(out.starts_with("NOTE launched on 4 rank(s)\n"), "{scheme}: {out}");
        assert!(!out.contains("did not return"), "{scheme}: {out}");
        assert!(!out.contains("collective cases"), "{scheme}: {out}");
        assert!(
            out.contains(&format!(
                "FAIL scheme {scheme}: set of 4: {case}: member 1 (world rank 1) failed in {call}: {why}"
            )),
            "{scheme}: {out}"
        );
        // every failed case failed with member 1's error, nothing else (the offline
        // rebuild cases call recover_files, by default recover, so there the error
        // comes from recover under the name recover_files)
        let fails: Vec<&str> = out.lines().filter(|l| l.starts_with("FAIL")).collect();
        assert!(!fails.is_empty(), "{scheme}: {out}");
        for line in fails {
            let (call, why) = if line.contains(": offline rebuild of members ") {
                let offline = format!("{call}_files");
                let why = why.replace(&format!("in {call}:"), &format!("in {offline}:"));
                (offline, why)
            } else {
                (call.to_string(), why.to_string())
            };
            assert!(
                line.contains(&format!("member 1 (world rank 1) failed in {call}: {why}")),
                "{scheme}: {line}"
            );
        }
        // far below the 30 s watchdog and the member's 15 s grace
        assert!(took < std::time::Duration::from_secs(12), "{scheme}: {took:?}\n{out}");
    }
}

#[test]
fn a_hang_is_reported_naming_the_case_and_plugin_and_the_scratch_dir_is_removed() {
    let p = lib("scr_fixture_untrustworthy");
    let dir = std::env::temp_dir().join(format!("scr-conformance-hang.{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (code, out) = mpirun(
        2,
        &[
            "--plugin",
            p.to_str().unwrap(),
            "--scheme",
            "HANG",
            "--set-size",
            "2",
            "--timeout",
            "3",
            "--dir",
            dir.to_str().unwrap(),
        ],
    );
    assert_ne!(code, 0, "{out}");
    assert!(out.starts_with("NOTE launched on 2 rank(s)\n"), "{out}");
    assert!(
        out.contains(&format!(
            "FAIL scheme HANG: set of 2: varied: apply: plugin {} did not return within 3 s (it hangs) in case `scheme HANG: set of 2: varied: apply`",
            p.display()
        )),
        "{out}"
    );
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
    std::fs::remove_dir(&dir).unwrap();
}

#[test]
fn too_few_ranks_fail_the_collective_cases_saying_how_to_launch() {
    let p = lib("scr_xor");
    let (code, out) = run(&["--plugin", p.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(out.starts_with("NOTE launched on 1 rank(s)\n"), "{out}");
    assert!(!out.contains("SKIP"), "{out}");
    assert!(
        out.contains(&format!("FAIL scheme XOR: set of 2: collective cases: launched with 1 rank(s), but a set of 2 needs at least 2 (and every set at least 2): run `mpiexec -n 2 scr-conformance --plugin {} ...`", p.display())),
        "{out}"
    );
    let (code, out) = mpirun(2, &["--plugin", p.to_str().unwrap(), "--set-size", "4"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.starts_with("NOTE launched on 2 rank(s)\n"), "{out}");
    assert!(
        out.contains("FAIL scheme XOR: set of 4: collective cases: launched with 2 rank(s), but a set of 4 needs at least 4"),
        "{out}"
    );
    assert!(out.contains("run `mpiexec -n 4 scr-conformance"), "{out}");
}

#[test]
fn a_transfer_that_lies_is_caught_by_reading_the_destinations() {
    let p = lib("scr_fixture_lying_transfer");
    let plugin = p.to_str().unwrap();
    let copy =
        "FAIL transfer LYING: copies files of every shape byte-exact with CRC32 and metadata: ";
    for (lie, why) in [
        ("nocopy", "empty.dat: No such file or directory (os error 2), although the transfer reported it Complete"),
        ("flip", "one.dat differs from its source (1 bytes, expected 1, first difference at byte 0) although the transfer reported it Complete"),
        ("swap", "result 0 is for "),
    ] {
        let (code, out) = run_env(
            &["--plugin", plugin, "--transfer", "LYING"],
            &[("SCR_FIXTURE_LIE", lie)],
        );
        assert_eq!(code, 1, "{lie}: {out}");
        let line = out
            .lines()
            .find(|l| l.starts_with(copy))
            .unwrap_or_else(|| panic!("{lie}: {out}"));
        assert!(line.contains(why), "{lie}: {line}");
    }
}
