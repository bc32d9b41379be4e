//! The RS plugin's unit tests: the seed's layout and decode examples, the row plans,
//! the refusals of what GF(2^8) RS cannot do and the checksums a small set keeps.

use super::*;

#[test]
fn the_seed_layout_for_four_members_and_two_checksums() {
    let lay = Layout { p: 4, k: 2 };
    // member 0 holds c0 of row 0 and c1 of row 1; row 1's c0 is on member 1
    assert_eq!(lay.holder(0, 0), 0);
    assert_eq!(lay.holder(1, 1), 0);
    assert_eq!(lay.holder(1, 0), 1);
    assert_eq!(lay.checksum_of(0, 0), Some(0));
    assert_eq!(lay.checksum_of(0, 1), Some(1));
    assert_eq!(lay.checksum_of(0, 2), None);
    // in row 0, members 0 and 3 contribute zeros (they hold c0 and c1)
    let zeros: Vec<u32> = (0..4).filter(|&m| lay.data_chunk(m, 0).is_none()).collect();
    assert_eq!(zeros, [0, 3]);
    // member 0's data chunks are in rows 2 and 3; member 2's in rows 0 and 1
    assert_eq!(
        (0..4).map(|r| lay.data_chunk(0, r)).collect::<Vec<_>>(),
        [None, None, Some(0), Some(1)]
    );
    assert_eq!(
        (0..4).map(|r| lay.data_chunk(2, r)).collect::<Vec<_>>(),
        [Some(0), Some(1), None, None]
    );
    assert_eq!(
        (0..4).map(|r| lay.data_chunk(3, r)).collect::<Vec<_>>(),
        [None, Some(0), Some(1), None]
    );
    // encode step 1: member 0 sends row 3's data (to its holders 3 and 2)
    assert_eq!(lay.encode_row(0, 1), 3);
    assert_eq!((lay.holder(3, 0), lay.holder(3, 1)), (3, 2));
    assert_eq!(lay.encode_row(0, 2), 2);
}

#[test]
fn every_row_has_k_holders_and_every_member_k_checksums_and_p_minus_k_chunks() {
    for (p, k) in [(2, 1), (3, 1), (4, 2), (6, 3), (8, 2), (8, 7), (17, 5)] {
        let lay = Layout { p, k };
        for r in 0..p {
            let holders: Vec<u32> = (0..p)
                .filter(|&m| lay.checksum_of(m, r).is_some())
                .collect();
            assert_eq!(holders.len() as u32, k, "p={p} k={k} row {r}");
            for j in 0..k {
                assert_eq!(lay.checksum_of(lay.holder(r, j), r), Some(j));
            }
        }
        for m in 0..p {
            let mut chunks: Vec<u64> = (0..p).filter_map(|r| lay.data_chunk(m, r)).collect();
            let want: Vec<u64> = (0..u64::from(p - k)).collect();
            assert_eq!(chunks, want, "p={p} k={k} member {m}: chunks in row order");
            chunks.clear();
            // the encode steps visit exactly the rows with data, once each
            let mut rows: Vec<u32> = (1..=p - k).map(|s| lay.encode_row(m, s)).collect();
            rows.sort_unstable();
            let mut want: Vec<u32> = (0..p).filter(|&r| lay.data_chunk(m, r).is_some()).collect();
            want.sort_unstable();
            assert_eq!(rows, want);
        }
    }
}

#[test]
fn the_seed_decode_example_row_one_with_members_one_and_two_lost() {
    // the seed: p=4, k=2, members 1 and 2 lost; row 1 misses c0 (held by member 1)
    // and member 2's data, both equations are used
    let lay = Layout { p: 4, k: 2 };
    let lost = [false, true, true, false];
    let plan = RowPlan::new(lay, 1, &lost, &lost);
    assert_eq!(
        plan.unknowns,
        [
            Unknown::Checksum { member: 1, j: 0 },
            Unknown::Data {
                member: 2,
                chunk: 1
            }
        ]
    );
    assert_eq!(plan.equations, [0, 1]);
    // member 3 sends its data, member 0 its c1, lost members nothing
    assert_eq!(
        plan.contribution(lay, 3, &lost, &lost),
        Some(Known::Data(0))
    );
    assert_eq!(
        plan.contribution(lay, 0, &lost, &lost),
        Some(Known::Checksum(1))
    );
    assert_eq!(plan.contribution(lay, 1, &lost, &lost), None);
    assert_eq!(plan.contribution(lay, 2, &lost, &lost), None);
}

#[test]
fn a_lost_redundancy_file_alone_makes_only_checksums_unknown() {
    let lay = Layout { p: 6, k: 3 };
    let none = [false; 6];
    let red = [false, false, true, false, false, false];
    for r in 0..6 {
        let plan = RowPlan::new(lay, r, &none, &red);
        match lay.checksum_of(2, r) {
            Some(j) => {
                assert_eq!(plan.unknowns, [Unknown::Checksum { member: 2, j }]);
                assert_eq!(plan.equations, [j]);
            }
            None => assert!(plan.unknowns.is_empty()),
        }
    }
}

#[test]
fn k_plus_one_lost_members_leave_a_row_unsolvable() {
    let lay = Layout { p: 5, k: 2 };
    let lost = [true, true, true, false, false];
    assert!((0..5).any(|r| {
        let plan = RowPlan::new(lay, r, &lost, &lost);
        plan.equations.len() < plan.unknowns.len()
    }));
    // and any k never do
    for a in 0..5 {
        for b in 0..5 {
            let mut lost = [false; 5];
            lost[a] = true;
            lost[b] = true;
            for r in 0..5 {
                let plan = RowPlan::new(lay, r, &lost, &lost);
                assert_eq!(plan.equations.len(), plan.unknowns.len());
            }
        }
    }
}

#[test]
fn a_set_smaller_than_set_failures_needs_keeps_what_it_can() {
    assert_eq!(checksums_for(8, 2, 8).unwrap(), 2);
    assert_eq!(checksums_for(3, 2, 8).unwrap(), 2);
    assert_eq!(checksums_for(2, 2, 8).unwrap(), 1);
    assert_eq!(checksums_for(1, 2, 8).unwrap(), 0);
    let e = checksums_for(4, 0, 8).unwrap_err();
    assert!(e
        .message()
        .starts_with("scheme RS: set_failures = 0 leaves nothing"));
    // not even a full set could hold it: the configuration's fault
    let e = checksums_for(2, 4, 4).unwrap_err();
    assert_eq!(
        e.message(),
        "scheme RS: set_failures = 4 needs sets of at least 5 members, but set_size is 4; lower set_failures below 4 or raise set_size"
    );
    let e = checksums_for(250, 10, 250).unwrap_err();
    assert!(
        e.message().contains("GF(2^8) has at most 256"),
        "{}",
        e.message()
    );
}

#[test]
fn set_failures_outside_what_gf256_rs_can_do_is_refused_with_the_values() {
    assert!(check_failures(4, 1).is_ok() && check_failures(4, 3).is_ok());
    let e = check_failures(4, 4).unwrap_err();
    assert_eq!(e.code, ErrorCode::INVALID_PARAMETER);
    assert!(
        e.message().starts_with("scheme RS: set_failures = 4 needs sets of at least 5 members, but this set has 4; lower set_failures below 4 or raise set_size"),
        "{e}"
    );
    let e = check_failures(4, 0).unwrap_err();
    assert!(e.message().contains("set_failures = 0"), "{e}");
    let e = check_failures(200, 100).unwrap_err();
    assert!(e.message().contains("needs 300 code rows"), "{e}");
    assert!(check_failures(250, 6).is_ok());
    assert!(check_failures(1, 1).is_err());
}
