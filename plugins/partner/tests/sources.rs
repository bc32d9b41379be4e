//! What PARTNER tells `scr postrun` to copy for an offline rebuild: for each lost member,
//! the nearest surviving right-hand partner within `replicas` (the holder of its copy)
//! and nobody else.

use scr_partner::{Partner, PartnerScheme};
use scr_plugin::abi_stable::std_types::{RNone, ROption, RSlice, RSome, RVec};
use scr_plugin::Scheme;

fn sources(members: u32, replicas: u32, lost: &[u32]) -> Option<Vec<u32>> {
    PartnerScheme::new(members, 0, 0, replicas, 64).rebuild_sources(lost)
}

#[test]
fn one_replica_names_the_right_hand_neighbour_of_each_lost_member() {
    assert_eq!(sources(4, 1, &[]), Some(vec![]));
    assert_eq!(sources(4, 1, &[1]), Some(vec![2]));
    assert_eq!(sources(4, 1, &[3]), Some(vec![0]), "around the ring");
    assert_eq!(sources(4, 1, &[0, 2]), Some(vec![1, 3]));
    // member 0's only copy was on member 1, lost too: no source for it (recover_files
    // then fails `unrecoverable`), member 1's copy is on member 2
    assert_eq!(sources(4, 1, &[0, 1]), Some(vec![2]));
    assert_eq!(sources(2, 1, &[0]), Some(vec![1]));
}

#[test]
fn more_replicas_name_the_nearest_surviving_holder_once() {
    assert_eq!(sources(5, 2, &[0]), Some(vec![1]));
    assert_eq!(
        sources(5, 2, &[0, 1]),
        Some(vec![2]),
        "one survivor holds both"
    );
    assert_eq!(sources(5, 2, &[0, 3]), Some(vec![1, 4]));
    assert_eq!(sources(5, 2, &[4, 0]), Some(vec![1]), "any order");
    assert_eq!(sources(5, 2, &[0, 1, 2]), Some(vec![3]));
}

#[test]
fn a_member_outside_the_set_claims_nothing() {
    assert_eq!(sources(4, 1, &[4]), None);
}

/// The same answer through the FFI object the host loads.
#[test]
fn through_the_boundary() {
    let boxed = scr_plugin::scheme_box::<Partner>(Box::new(PartnerScheme::new(4, 1, 1, 1, 64)));
    let got: ROption<RVec<u32>> = boxed.rebuild_sources(RSlice::from_slice(&[3]));
    assert_eq!(got, RSome(RVec::from(vec![0])));
    assert_eq!(boxed.rebuild_sources(RSlice::from_slice(&[9])), RNone);
}
