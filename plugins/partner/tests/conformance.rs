//! PARTNER against the conformance cases on in-process members, with one and two
//! replicas: every pattern of up to `replicas` lost members is rebuilt byte-exact.

use scr_partner::PartnerScheme;
use scr_plugin::conformance::{run_scheme_cases, CaseResult};
use scr_plugin::inproc;

fn run(set_size: u32, replicas: u32) {
    let dir = tempfile::tempdir().unwrap();
    let groups: Vec<String> = (0..set_size).map(|i| format!("node{i}")).collect();
    let refs: Vec<&str> = groups.iter().map(String::as_str).collect();
    let piece = 256u64;
    let results = inproc::run(&refs, |host| {
        let scheme = PartnerScheme::new(
            host.size(),
            host.rank(),
            host.rank(),
            replicas,
            piece as usize,
        );
        let mut cases: Vec<CaseResult> = Vec::new();
        let mine = dir.path().join(format!("member{}", host.rank()));
        run_scheme_cases(host, &scheme, &mine, piece, &mut |c| cases.push(c)).unwrap();
        cases
    });
    let first = &results[0];
    assert!(
        results.iter().all(|r| r == first),
        "members disagree on the cases"
    );
    let failed: Vec<&CaseResult> = first.iter().filter(|c| c.failure.is_some()).collect();
    assert!(
        failed.is_empty(),
        "{set_size} members, {replicas} replicas: {failed:#?}"
    );
    let patterns: u32 = (1..=replicas).map(|k| binomial(set_size, k)).sum();
    assert_eq!(first.len() as u32, 3 * (2 + patterns * 6 + 2), "{first:#?}");
}

fn binomial(n: u32, k: u32) -> u32 {
    (0..k).fold(1, |acc, i| acc * (n - i) / (i + 1))
}

#[test]
fn one_replica_sets_of_2_3_4() {
    for n in [2, 3, 4] {
        run(n, 1);
    }
}

#[test]
fn two_replicas_sets_of_3_and_5() {
    run(3, 2);
    run(5, 2);
}
