//! The harness against real libraries: it must fail clearly on broken plugins and report
//! unimplemented schemes as failures, never as passes.

use std::path::PathBuf;
use std::process::Command;

fn lib(name: &str) -> PathBuf {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_scr-conformance"));
    exe.parent().unwrap().join(format!("lib{name}.so"))
}

fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_scr-conformance"))
        .args(args)
        .env_clear()
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
        "FAIL loads as an scr-rs plugin: not an scr-rs plugin: it exports no abi_stable root module (build it with scr_plugin::export_plugin!)\n0 passed, 1 failed\n"
    );
}

#[test]
fn an_unimplemented_scheme_is_a_failure() {
    let p = lib("scr_rs");
    let (code, out) = run(&["--plugin", p.to_str().unwrap(), "--set-size", "8"]);
    assert_eq!(code, 1, "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "PASS loads as an scr-rs plugin: scr-rs 0.1.0 (ABI 1)"
    );
    assert_eq!(
        lines[1],
        "PASS declares at least one scheme or transfer type: schemes [RS], transfer types []"
    );
    assert!(lines[3].starts_with("FAIL scheme RS: instance for a set of 8: plugin "));
    assert!(lines[3].ends_with("new_scheme: not implemented: scheme RS is not implemented yet"));
    assert_eq!(*lines.last().unwrap(), "3 passed, 1 failed");
}

#[test]
fn panics_are_reported_per_case_and_the_run_goes_on() {
    let p = lib("scr_fixture_panic");
    let (code, out) = run(&["--plugin", p.to_str().unwrap(), "--param", "k=v"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("FAIL scheme PANIC_NEW: instance for a set of 4: plugin "));
    assert!(out.contains("panicked in new_scheme: deliberate panic in new_scheme"));
    assert!(out.contains(
        "PASS scheme PANIC_APPLY: describes itself: tolerates 0 lost member(s); panics in apply"
    ));
    assert!(
        out.contains("PASS scheme PANIC_DROP: describes itself"),
        "{out}"
    );
    assert!(out.ends_with("7 passed, 1 failed\n"), "{out}");
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
