//! The policy calls: should_exit sees a halt condition on every rank, and
//! need_checkpoint keeps `checkpoint_interval`, and says no with no rule.

use super::*;
use crate::state::halt::Halt;

/// A halt condition set in the prefix's halt file (as `scr halt` does) is seen by
/// should_exit on every rank, and need_checkpoint follows checkpoint_interval.
#[test]
fn a_halt_condition_is_seen_on_every_rank_and_the_interval_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["n0", "n1", "n2", "n3"];
    let out = job(
        dir.path(),
        &nodes,
        &[("SCR_CHECKPOINT_INTERVAL", "2"), ("SCR_HALT_EXIT", "0")],
        |rt, r| {
            let asked: Vec<bool> = (0..4).map(|_| rt.need_checkpoint().unwrap()).collect();
            let before = rt.should_exit().unwrap();
            rt.world.barrier();
            if r == 0 {
                Halt::update(&dir.path().join("prefix"), |h| {
                    h.exit_reason = Some("maintenance at noon".into());
                    (true, ())
                })
                .unwrap();
            }
            rt.world.barrier();
            (asked, before, rt.should_exit().unwrap())
        },
    );
    for (r, ((asked, before, after), end)) in out.iter().enumerate() {
        assert_eq!(
            asked,
            &[false, true, false, true],
            "rank {r}: every 2nd call"
        );
        assert!(!before, "rank {r}: no halt condition yet");
        assert!(after, "rank {r}: the halt file's condition");
        assert_eq!(end, &Ok(()), "rank {r}");
    }
    let halt = Halt::load(&dir.path().join("prefix")).unwrap();
    assert_eq!(halt.exit_reason.as_deref(), Some("maintenance at noon"));
}

/// With no checkpoint rule set, need_checkpoint answers no on every rank (SCR 3's
/// answer), however often it is asked, until a halt condition holds: then yes on every
/// rank (the application should write its last checkpoint before it stops).
#[test]
fn with_no_rule_only_a_halt_condition_asks_for_a_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["n0", "n1", "n2"];
    let out = job(dir.path(), &nodes, &[("SCR_HALT_EXIT", "0")], |rt, r| {
        let asked: Vec<bool> = (0..5).map(|_| rt.need_checkpoint().unwrap()).collect();
        rt.world.barrier();
        if r == 0 {
            Halt::update(&dir.path().join("prefix"), |h| {
                h.exit_reason = Some("drain".into());
                (true, ())
            })
            .unwrap();
        }
        rt.world.barrier();
        (asked, rt.need_checkpoint().unwrap())
    });
    for (r, ((asked, halted), end)) in out.iter().enumerate() {
        assert_eq!(asked, &[false; 5], "rank {r}: no rule, no checkpoint");
        assert!(halted, "rank {r}: the halt condition asks for one");
        assert_eq!(end, &Ok(()), "rank {r}");
    }
}
