//! RS against the conformance cases on in-process members: every loss pattern of up to
//! `k` members (data, redundancy or both) is rebuilt byte-exact and protected again,
//! every pattern of `k + 1` fails alike everywhere, a corrupted survivor is never trusted.

use scr_plugin::conformance::{run_scheme_cases, CaseResult};
use scr_plugin::inproc;
use scr_reed_solomon::RsScheme;

/// Every conformance case of a set of `p` members with `k` checksums, none failed.
fn cases(p: u32, k: u32) -> Vec<CaseResult> {
    let dir = tempfile::tempdir().unwrap();
    let groups: Vec<String> = (0..p).map(|i| format!("node{i}")).collect();
    let refs: Vec<&str> = groups.iter().map(String::as_str).collect();
    let piece = 256u64;
    let results = inproc::run(&refs, |host| {
        let scheme =
            RsScheme::new(host.size(), host.rank(), host.rank(), k, piece as usize).unwrap();
        let mut cases: Vec<CaseResult> = Vec::new();
        let mine = dir.path().join(format!("member{}", host.rank()));
        run_scheme_cases(host, &scheme, &mine, piece, &mut |c| cases.push(c)).unwrap();
        cases
    });
    let first = results[0].clone();
    assert!(
        results.iter().all(|r| r.len() == first.len()),
        "members disagree on the cases"
    );
    let failed: Vec<&CaseResult> = first.iter().filter(|c| c.failure.is_some()).collect();
    assert!(failed.is_empty(), "p={p} k={k}: {failed:#?}");
    first
}

/// [`cases`], checking that the cases of a set that tolerates losses all ran.
fn run(p: u32, k: u32) -> Vec<CaseResult> {
    let first = cases(p, k);
    for needle in [
        "corrupted by one byte",
        "protected again",
        &format!("(beyond the claim of {k})"),
        "corrupted redundancy header on member ",
        "redundancy_files lists exactly what apply wrote",
        "remove leaves nothing behind",
        "offline rebuild of members ",
    ] {
        assert!(first.iter().any(|c| c.name.contains(needle)), "{needle}");
    }
    first
}

fn binomial(n: u32, r: u32) -> u32 {
    (0..r).fold(1u64, |acc, i| acc * u64::from(n - i) / u64::from(i + 1)) as u32
}

/// Per shape: 2 applies, the redundancy-file list, every pattern of 1..=k members × its
/// loss kinds × (recover, one more loss), every pattern of k + 1 (a sample of 50 beyond
/// 300), a corrupted header on each member, the offline rebuild of each of those
/// patterns of up to k + 1 and remove; in the first shape a pattern of
/// 2 gets all 9 kinds and a larger one 6; plus the corrupted-survivor pairs in the
/// uniform shape, and there the damaged payloads.
fn expected_cases(n: u32, k: u32) -> u32 {
    let kinds_mixed = |s: u32| match s {
        1 => 3,
        2 => 9,
        _ => 6,
    };
    let patterns = |mixed: bool| -> u32 {
        (1..=k)
            .map(|s| binomial(n, s) * if mixed { kinds_mixed(s) } else { 3 })
            .sum()
    };
    let beyond = match binomial(n, k + 1) {
        b if b <= 300 => b,
        _ => 50,
    };
    // the offline rebuild of every pattern of up to k losses and of the k + 1 above
    let offline = (1..=k).map(|s| binomial(n, s)).sum::<u32>() + beyond;
    let per_shape = |mixed: bool| 3 + patterns(mixed) * 2 + beyond + n + offline + 1;
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

fn check(p: u32, k: u32) {
    let cases = run(p, k);
    assert_eq!(cases.len() as u32, expected_cases(p, k), "p={p} k={k}");
    // the largest patterns really ran: all of k members, and k + 1 beyond
    let all_k: Vec<u32> = (0..k).collect();
    assert!(cases.iter().any(|c| c
        .name
        .contains(&format!("lose members {all_k:?} (Both), recover"))));
    let beyond: Vec<u32> = (0..=k).collect();
    assert!(cases.iter().any(|c| c.name.contains(&format!(
        "lose members {beyond:?} (beyond the claim of {k})"
    ))));
}

#[test]
fn set_of_4_with_2_checksums() {
    check(4, 2);
}

#[test]
fn set_of_6_with_3_checksums() {
    check(6, 3);
}

#[test]
fn set_of_8_with_2_checksums() {
    check(8, 2);
}

#[test]
fn set_of_8_with_7_checksums() {
    check(8, 7);
}

#[test]
fn set_of_3_with_1_checksum() {
    check(3, 1);
}

#[test]
fn set_of_2_with_1_checksum() {
    check(2, 1);
}

/// A set of one member (a job spanning too few failure groups: `checksums_for` keeps no
/// checksum for it): nothing tolerated, the loss of its member refused alike.
#[test]
fn set_of_1_with_no_checksum() {
    let cases = cases(1, 0);
    for needle in [
        "lose members [0] (beyond the claim of 0)",
        "redundancy_files lists exactly what apply wrote",
        "remove leaves nothing behind",
    ] {
        assert!(
            cases.iter().any(|c| c.name.contains(needle)),
            "{needle}: {cases:#?}"
        );
    }
}
