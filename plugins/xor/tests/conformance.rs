//! XOR against the conformance cases on in-process members: every single loss (data,
//! redundancy or both) is rebuilt byte-exact and protected again, every two losses fail
//! alike everywhere, a corrupted survivor is never trusted.

use scr_plugin::conformance::{run_scheme_cases, CaseResult};
use scr_plugin::inproc;
use scr_xor::XorScheme;

fn run(set_size: u32) {
    let dir = tempfile::tempdir().unwrap();
    let groups: Vec<String> = (0..set_size).map(|i| format!("node{i}")).collect();
    let refs: Vec<&str> = groups.iter().map(String::as_str).collect();
    let piece = 256u64;
    let results = inproc::run(&refs, |host| {
        let scheme = XorScheme::new(host.size(), host.rank(), host.rank(), piece as usize);
        let mut cases: Vec<CaseResult> = Vec::new();
        let mine = dir.path().join(format!("member{}", host.rank()));
        run_scheme_cases(host, &scheme, &mine, piece, &mut |c| cases.push(c)).unwrap();
        cases
    });
    let first = &results[0];
    assert!(
        results.iter().all(|r| r.len() == first.len()),
        "members disagree on the cases"
    );
    let failed: Vec<&CaseResult> = first.iter().filter(|c| c.failure.is_some()).collect();
    assert!(failed.is_empty(), "set of {set_size}: {failed:#?}");
    assert_eq!(first.len() as u32, expected_cases(set_size), "{first:#?}");
    // the integrity cases really ran
    for needle in [
        "corrupted by one byte",
        "protected again",
        "(beyond the claim of 1)",
        "corrupted redundancy header on member ",
        "redundancy_files lists exactly what apply wrote",
        "remove leaves nothing behind",
    ] {
        assert!(first.iter().any(|c| c.name.contains(needle)), "{needle}");
    }
}

/// Per shape: 2 applies, the redundancy-file list, n single losses × 3 kinds × (recover,
/// one more loss), every pair beyond the claim, a corrupted header on each member, the
/// offline rebuild of every single loss and every pair, and remove; plus the
/// corrupted-survivor pairs and the damaged payloads in the uniform shape.
fn expected_cases(n: u32) -> u32 {
    let pairs = if n * (n - 1) <= 30 {
        n * (n - 1)
    } else {
        n * 4
    };
    let offline = n + n * (n - 1) / 2;
    // the damaged redundancy payload on each member, members after it and before it
    // lost, in the uniform shape
    let payload = 2 * n;
    3 * (3 + n * 3 * 2 + n * (n - 1) / 2 + n + offline + 1) + pairs + payload
}

#[test]
fn set_of_2() {
    run(2);
}

#[test]
fn set_of_3() {
    run(3);
}

#[test]
fn set_of_4() {
    run(4);
}

#[test]
fn set_of_8() {
    run(8);
}
