//! XOR against the conformance cases on in-process members: every single loss (data,
//! redundancy or both) is rebuilt byte-exact, two losses fail alike everywhere.

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
    // 3 shapes × (2 applies + n patterns × 3 kinds × 2 + beyond + corrupt)
    assert_eq!(first.len() as u32, 3 * (2 + set_size * 6 + 2), "{first:#?}");
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
