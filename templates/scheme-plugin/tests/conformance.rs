//! MIRROR against the scr-plugin conformance cases on in-process members (threads, no
//! MPI): every single loss is rebuilt byte-exact and protected again, every two losses
//! fail alike on every member, a corrupted survivor is never trusted.

use mirror_scheme::MirrorScheme;
use scr_plugin::conformance::{run_scheme_cases, CaseResult};
use scr_plugin::inproc;

fn run(set_size: u32) {
    let dir = tempfile::tempdir().unwrap();
    let groups: Vec<String> = (0..set_size).map(|i| format!("node{i}")).collect();
    let refs: Vec<&str> = groups.iter().map(String::as_str).collect();
    let piece = 256u64;
    let results = inproc::run(&refs, |host| {
        assert_eq!(host.size(), set_size);
        let scheme = MirrorScheme::new(host.size(), host.rank(), host.rank(), piece as usize);
        let mut cases: Vec<CaseResult> = Vec::new();
        let mine = dir.path().join(format!("member{}", host.rank()));
        run_scheme_cases(host, &scheme, &mine, piece, &mut |c| cases.push(c)).unwrap();
        cases
    });
    let first = &results[0];
    let names = |r: &[CaseResult]| r.iter().map(|c| c.name.clone()).collect::<Vec<_>>();
    assert!(
        results.iter().all(|r| names(r) == names(first)),
        "members disagree on the cases"
    );
    let failed: Vec<&CaseResult> = first.iter().filter(|c| c.failure.is_some()).collect();
    assert!(failed.is_empty(), "set of {set_size}: {failed:#?}");
    // the loss cases really ran: one per member and kind at least
    let recovered = first
        .iter()
        .filter(|c| c.name.contains("protected again"))
        .count();
    assert!(
        recovered >= 3 * set_size as usize,
        "{recovered} cases: {first:#?}"
    );
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
fn set_of_5() {
    run(5);
}
