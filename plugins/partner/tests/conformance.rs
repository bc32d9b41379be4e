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
    assert_eq!(
        first.len() as u32,
        expected_cases(set_size, replicas),
        "{first:#?}"
    );
    if replicas > 1 {
        assert!(
            first.iter().any(|c| c.name.contains("DataOnly, ")),
            "mixed loss kinds ran"
        );
    }
}

/// Per shape: 2 applies, the redundancy-file list, every pattern of up to k losses ×
/// (3 kinds, or every mix of kinds in the first shape) × (recover, one more loss), every
/// pattern of k + 1 losses, a corrupted header on each member, the offline rebuild of
/// every pattern of up to k + 1 losses and remove; plus the corrupted-survivor pairs in
/// the uniform shape, and there the damaged redundancy payload on each member with the
/// members after it, then before it, lost.
fn expected_cases(n: u32, replicas: u32) -> u32 {
    let k = replicas.min(n - 1);
    let tolerated = |mixed: bool| -> u32 {
        (1..=k)
            .map(|j| binomial(n, j) * if mixed && j > 1 { 3u32.pow(j) } else { 3 } * 2)
            .sum()
    };
    let beyond = if k < n { binomial(n, k + 1) } else { 0 };
    // the offline rebuild of every pattern of up to k losses and of every k + 1
    let offline = (1..=k).map(|j| binomial(n, j)).sum::<u32>() + beyond;
    let per_shape = |mixed| 3 + tolerated(mixed) + beyond + n + offline + 1;
    let pairs = if n * (n - 1) <= 30 {
        n * (n - 1)
    } else {
        n * 4
    };
    // the damaged redundancy payload on each member, members after it and before it
    // lost, in the uniform shape
    let payload = 2 * n;
    per_shape(true) + 2 * per_shape(false) + pairs + payload
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
