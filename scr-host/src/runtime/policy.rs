//! Policy and halt: when to checkpoint (need_checkpoint: interval, seconds, overhead) and
//! when to stop (halt conditions from the halt file, the allocation's end, should_exit),
//! decided by rank 0 and agreed. The rules and the agreement are here; the calls
//! (`need_checkpoint`, `should_exit`, the halt exit) are the runtime's (`api`).

use super::world::World;
use super::{Instant, Path};
use crate::config::settings;
use crate::config::Config;
use crate::state::halt::Halt;

/// Bit of need_checkpoint's decision byte that asks every rank to poll the pending
/// background protection (see [`agree_need`]).
const POLL: u8 = 4;

/// need_checkpoint's answer, the same on every rank (collective over `world`): one
/// broadcast decides (applications may ask every iteration): 0 no, 1 yes, 2 a halt
/// condition holds (SCR checks them here too), with [`POLL`] added when rank 0 asks for
/// the pending background protection to be polled. `decide` runs on rank 0 only and
/// gives its halt reason, whether the checkpoint rules say yes and whether to poll. With
/// `halt_exit`, a halt's reason follows and comes back to every rank: the caller ends the
/// run with it. Returns the answer, that reason and whether to poll.
pub(in crate::runtime) fn agree_need(
    world: &dyn World,
    decide: impl FnOnce() -> (Option<String>, bool, bool),
    halt_exit: bool,
) -> (bool, Option<String>, bool) {
    let mut decision = [0u8];
    let mut halt = None;
    if world.rank() == 0 {
        let (reason, need, poll) = decide();
        decision[0] = if reason.is_some() { 2 } else { u8::from(need) };
        if poll {
            decision[0] |= POLL;
        }
        halt = reason;
    }
    world.broadcast_into(0, &mut decision[..]);
    let (answer, poll) = (decision[0] & !POLL, decision[0] & POLL != 0);
    let exit = (answer == 2 && halt_exit).then(|| {
        let text = world.broadcast_bytes(halt.unwrap_or_default().as_bytes());
        String::from_utf8_lossy(&text).into_owned()
    });
    (answer != 0, exit, poll)
}

/// The halt file, or no conditions (with a warning) when it cannot be read: a damaged
/// halt file must not stop some ranks and not others.
pub(in crate::runtime) fn load_halt(prefix: &Path) -> Halt {
    Halt::load(prefix).unwrap_or_else(|e| {
        tracing::warn!("{e}; ignoring the halt file");
        Halt::default()
    })
}

/// Rank 0's halt decision: a condition of the halt file (`halt`), else the allocation's
/// end (`allocation_end`, with where it was read) within `margin` seconds of `now`
/// (SCR_HALT_SECONDS: stop while there is time left to flush).
pub(in crate::runtime) fn halt_reason(
    halt: &Halt,
    now: i64,
    margin: i64,
    allocation_end: Option<&(i64, String)>,
) -> Option<String> {
    halt.reason(now, margin).or_else(|| {
        let (end, source) = allocation_end?;
        (margin > 0 && now >= end - margin).then(|| {
            format!(
                "{} s left before the allocation ends at {end} (from {source}), within halt_seconds = {margin}",
                (end - now).max(0)
            )
        })
    })
}

/// The checkpoint rules of the configuration (`checkpoint_interval`,
/// `checkpoint_seconds`, `checkpoint_overhead`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(in crate::runtime) struct Rule {
    /// Every this many `need_checkpoint` calls (0: no such rule).
    pub interval: u64,
    /// After this many seconds since the last checkpoint ended (0: no such rule).
    pub seconds: u64,
    /// While checkpoint time stays under this percentage of the run (0: no such rule).
    pub overhead: f64,
}

impl Rule {
    /// The rules `config` sets.
    pub(in crate::runtime) fn of(config: &Config) -> Rule {
        Rule {
            interval: config.get(settings::CHECKPOINT_INTERVAL),
            seconds: config.get(settings::CHECKPOINT_SECONDS),
            overhead: config.get(settings::CHECKPOINT_OVERHEAD),
        }
    }
}

/// Timing state of `need_checkpoint` (rank 0 decides with it; every rank keeps it alike).
#[derive(Debug)]
pub(in crate::runtime) struct Policy {
    /// `need_checkpoint` calls so far.
    calls: u64,
    /// When the last checkpoint ended (or the run began).
    last_end: Instant,
    /// Seconds the last checkpoint took.
    last_cost: f64,
}

impl Policy {
    /// No call yet; the clock starts now.
    pub(in crate::runtime) fn new() -> Policy {
        Policy {
            calls: 0,
            last_end: Instant::now(),
            last_cost: 0.0,
        }
    }

    /// The clock restarts (init ended: time before it is not computation).
    pub(in crate::runtime) fn restart_clock(&mut self) {
        self.last_end = Instant::now();
    }

    /// One more `need_checkpoint` call.
    pub(in crate::runtime) fn count_call(&mut self) {
        self.calls += 1;
    }

    /// A checkpoint that began at `started` ended now.
    pub(in crate::runtime) fn checkpoint_done(&mut self, started: Instant) {
        self.last_cost = started.elapsed().as_secs_f64();
        self.last_end = Instant::now();
    }

    /// Whether `rule` asks for a checkpoint at `now`: every `interval` calls, after
    /// `seconds`, or while the last checkpoint's cost stays under `overhead` percent of
    /// the time since it ended. With no rule set, never: SCR 3 answers 0 then (the
    /// application decides itself; only a halt condition, decided apart, says yes).
    pub(in crate::runtime) fn need(&self, rule: &Rule, now: Instant) -> bool {
        let since = now.saturating_duration_since(self.last_end).as_secs_f64();
        (rule.interval > 0 && self.calls.is_multiple_of(rule.interval))
            || (rule.seconds > 0 && since >= rule.seconds as f64)
            || (rule.overhead > 0.0 && self.last_cost <= since * rule.overhead / 100.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn policy(calls: u64, last_cost: f64, ended_ago: Duration, now: Instant) -> Policy {
        Policy {
            calls,
            last_end: now - ended_ago,
            last_cost,
        }
    }

    #[test]
    fn every_interval_calls_and_not_between() {
        let now = Instant::now();
        let rule = Rule {
            interval: 3,
            ..Rule::default()
        };
        let asked: Vec<bool> = (1..=7)
            .map(|calls| policy(calls, 0.0, Duration::ZERO, now).need(&rule, now))
            .collect();
        assert_eq!(asked, [false, false, true, false, false, true, false]);
    }

    #[test]
    fn after_the_seconds_since_the_last_checkpoint() {
        let now = Instant::now();
        let rule = Rule {
            seconds: 60,
            ..Rule::default()
        };
        assert!(!policy(1, 0.0, Duration::from_secs(59), now).need(&rule, now));
        assert!(policy(1, 0.0, Duration::from_secs(60), now).need(&rule, now));
    }

    #[test]
    fn while_the_checkpoint_cost_stays_under_the_overhead() {
        let now = Instant::now();
        let rule = Rule {
            overhead: 10.0,
            ..Rule::default()
        };
        // a 5 s checkpoint: asked for again once 50 s passed (10 %)
        assert!(!policy(1, 5.0, Duration::from_secs(49), now).need(&rule, now));
        assert!(policy(1, 5.0, Duration::from_secs(50), now).need(&rule, now));
    }

    #[test]
    fn with_no_rule_no_call_asks() {
        let now = Instant::now();
        for calls in 1..4 {
            for ago in [0, 3_600] {
                let p = policy(calls, 9.0, Duration::from_secs(ago), now);
                assert!(!p.need(&Rule::default(), now), "call {calls}, {ago} s");
            }
        }
    }

    #[test]
    fn the_allocation_end_halts_within_halt_seconds_naming_its_source() {
        let end = (1_000, "SLURM_JOB_END_TIME".to_string());
        let none = Halt::default();
        assert_eq!(halt_reason(&none, 800, 100, Some(&end)), None);
        assert_eq!(
            halt_reason(&none, 950, 0, Some(&end)),
            None,
            "no margin, no rule"
        );
        assert_eq!(halt_reason(&none, 950, 100, None), None, "no known end");
        let why = halt_reason(&none, 950, 100, Some(&end)).unwrap();
        assert_eq!(
            why,
            "50 s left before the allocation ends at 1000 (from SLURM_JOB_END_TIME), within halt_seconds = 100"
        );
        assert!(halt_reason(&none, 1_200, 100, Some(&end))
            .unwrap()
            .starts_with("0 s left"));
    }

    #[test]
    fn a_halt_file_condition_comes_before_the_allocation_end() {
        let halt = Halt {
            exit_reason: Some("maintenance".into()),
            ..Halt::default()
        };
        let end = (1_000, "PBS".to_string());
        let why = halt_reason(&halt, 950, 100, Some(&end)).unwrap();
        assert!(why.contains("maintenance"), "{why}");
    }
}
