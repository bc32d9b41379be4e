//! The runtime's communicator and what every rank agrees on through it: [`Collective`]
//! owns the world (its exchanges are the `World` it derefs to), the runtime's
//! [`Health`] and the credit of the last settled scheme call.
//!
//! Agreement: every collective call ends with the same outcome on every rank. A failure on
//! some ranks becomes the first failing rank's error everywhere; a failure after ranks
//! began to change their state marks the runtime uncertain, on every rank alike, and
//! refuses later collective calls.

use std::cell::Cell;
use std::ops::Deref;
use std::time::Duration;

use super::world::{SetHost, World};
use super::{Result, ScrError, Settled, ABORT_CODE};
use crate::registry::{LoadedScheme, RegistryError};

/// The runtime's own communicator, with the agreement built on it and the state that
/// agreement keeps (health, credit). Its exchanges are the [`World`]'s it derefs to.
pub(in crate::runtime) struct Collective {
    world: Box<dyn World>,
    /// Whether calls may still run: uncertain state, a halt, finalize.
    health: Health,
    /// The world rank credited with the last settled scheme call's failure when this rank
    /// returned its set's agreed error (see [`Collective::first_failure_credited`]).
    credit: Cell<Option<u32>>,
    /// How long a failed member waits for the others of its set (`abort_timeout`).
    abort_timeout: Duration,
}

impl Deref for Collective {
    type Target = dyn World;

    fn deref(&self) -> &(dyn World + 'static) {
        &*self.world
    }
}

impl Collective {
    /// The communicator, for the helpers that take a `&dyn World` (the same whether the
    /// caller holds the runtime or a phase that borrowed the collective).
    pub(in crate::runtime) fn as_dyn(&self) -> &dyn World {
        &*self.world
    }

    /// The runtime's communicator `world`, not started yet (dropping it owes no
    /// finalize); a failed member of a set waits `abort_timeout` for the others.
    pub(in crate::runtime) fn new(world: Box<dyn World>, abort_timeout: Duration) -> Collective {
        Collective {
            world,
            health: Health::finalized(),
            credit: Cell::new(None),
            abort_timeout,
        }
    }

    /// The runtime's health (read).
    pub(in crate::runtime) fn health(&self) -> &Health {
        &self.health
    }

    /// The runtime's health (changed only through its own verbs).
    pub(in crate::runtime) fn health_mut(&mut self) -> &mut Health {
        &mut self.health
    }

    /// The rank credited with the last settled scheme call's failure (`None`: this one).
    pub(in crate::runtime) fn credit(&self) -> Option<u32> {
        self.credit.get()
    }

    /// Set that credit (a failure before a scheme call is this rank's own: `None`).
    pub(in crate::runtime) fn set_credit(&self, credit: Option<u32>) {
        self.credit.set(credit);
    }

    /// Make a local outcome collective: every rank gets `Ok` only when every rank did,
    /// so no rank leaves a sequence of collectives that the others continue.
    pub(in crate::runtime) fn agree_on<T>(&self, local: Result<T>) -> Result<T> {
        agree_on(&*self.world, local)
    }

    /// All ranks true?
    pub(in crate::runtime) fn all(&self, ok: bool) -> bool {
        self.world.agree(ok)
    }

    /// The first step of every collective call: refuse it when an earlier call left the
    /// ranks' state uncertain (the same on every rank), and agree on this rank's checks
    /// of the call's preconditions, so that a call misused on some ranks only fails on
    /// every rank instead of leaving the others waiting in its first collective step.
    pub(in crate::runtime) fn begin<T>(&self, call: &str, local: Result<T>) -> Result<T> {
        self.usable(call)?;
        self.agree_on(local)
    }

    /// Refuse `call` when an earlier call left the ranks' state uncertain (local: that
    /// state is the same on every rank).
    pub(in crate::runtime) fn usable(&self, call: &str) -> Result<()> {
        self.health.usable(call)
    }

    /// Agree on a local step taken after the ranks began to change their state: when it
    /// failed on any rank, the state is uncertain from then on, on every rank (see
    /// [`Collective::begin`]).
    pub(in crate::runtime) fn changed(&mut self, what: &str, local: Result<()>) -> Result<()> {
        let agreed = self.agree_on(local);
        if let Err(e) = &agreed {
            self.health.mark_uncertain(what, e);
        }
        agreed
    }

    /// [`first_failure`] of a failure that may be the last settled scheme call's: when
    /// [`Collective::settle_call`] gave this rank its set's agreed error, the rank credited
    /// with it is the member that failed first-hand (which holds the same text), not this
    /// one — so "on rank R" names the rank whose plugin call failed.
    pub(in crate::runtime) fn first_failure_credited(
        &self,
        mine: Option<&str>,
    ) -> Option<(usize, String)> {
        let credit = self.credit.take();
        first_failure_as(&*self.world, mine.map(|m| (credit, m)))
    }

    /// Settle a collective scheme call that returned `out` on this member (see
    /// [`super::MpiHost::settle`]): when a member failed, its host told the others (their
    /// host services returned its error to the plugin instead of waiting for it), and
    /// every member returns the same error, the lowest failing member's: "member M (world
    /// rank W) failed in CALL: ERROR" (the caller agrees on it across the world as
    /// usual). Only when this member failed and some member still did not return within
    /// `abort_timeout` seconds — a plugin that ignores the error and keeps blocking
    /// outside the host services — is the job ended with MPI_Abort, naming the plugin,
    /// the call and the dataset: a hang would lose the whole allocation.
    pub(in crate::runtime) fn settle_call<T>(
        &self,
        host: &dyn SetHost,
        scheme: &LoadedScheme,
        call: &'static str,
        dataset: &str,
        out: std::result::Result<T, scr_plugin::PluginError>,
    ) -> std::result::Result<T, RegistryError> {
        let settled = host.settle(call, out.as_ref().err(), self.abort_timeout);
        self.settled_call(scheme, call, dataset, out, settled)
    }

    /// How long a failed member of a set waits for the others (`abort_timeout`): a
    /// background protection's thread settles with it.
    pub(in crate::runtime) fn abort_timeout(&self) -> Duration {
        self.abort_timeout
    }

    /// [`Collective::settle_call`]'s outcome once the call was settled (`settled`, by the
    /// thread that made the call): the error to return, or the job ended when this member
    /// failed and the others never returned.
    pub(in crate::runtime) fn settled_call<T>(
        &self,
        scheme: &LoadedScheme,
        call: &'static str,
        dataset: &str,
        out: std::result::Result<T, scr_plugin::PluginError>,
        settled: Settled,
    ) -> std::result::Result<T, RegistryError> {
        let grace = self.abort_timeout;
        self.credit.set(match &settled {
            Settled::Failed { world_rank, .. } => Some(*world_rank),
            _ => None,
        });
        match settled {
            Settled::Returned => out.map_err(|e| scheme.error(call, e)),
            Settled::Failed { error, .. } => Err(scheme.error(call, error)),
            Settled::Stuck => {
                let why = out
                    .err()
                    .map(|e| scheme.error(call, e).to_string())
                    .unwrap_or_default();
                tracing::error!("{why}");
                tracing::error!(
                    "{call} of dataset {dataset} failed on this rank while other members of its redundancy set did not return within {} s (abort_timeout); ending the job with MPI_Abort so that none of them waits forever",
                    grace.as_secs()
                );
                self.world.abort(ABORT_CODE);
            }
        }
    }
}

/// [`Collective::agree_on`] before the runtime exists. When some rank failed, every rank
/// learns the first failing rank's error (one gather, on the failure path only), so the
/// reason reaches the application on every rank — not only on the rank that may be
/// killed first when the application aborts.
pub(in crate::runtime) fn agree_on<T>(world: &dyn World, local: Result<T>) -> Result<T> {
    if world.agree(local.is_ok()) {
        return local;
    }
    let mine = local.as_ref().err().map(|e| e.to_string());
    let first = first_failure(world, mine.as_deref());
    match local {
        Err(e) => Err(e),
        Ok(_) => Err(ScrError::Collective(match first {
            Some((rank, why)) => {
                format!("another rank failed, this rank stops with it: rank {rank}: {why}")
            }
            None => "another rank failed; this rank stops with it".into(),
        })),
    }
}

/// The first failing rank and its error, given each rank's own (`None`: it did not fail).
/// Collective: every rank calls it, on a path every rank takes (after agreeing that some
/// rank failed). A failure with an empty message still counts (a flag goes with it).
pub(in crate::runtime) fn first_failure(
    world: &dyn World,
    mine: Option<&str>,
) -> Option<(usize, String)> {
    first_failure_as(world, mine.map(|m| (None, m)))
}

/// [`first_failure`] where a failing rank may credit its failure to another rank
/// (`Some(rank)`): one that failed with the very same text (the member of its redundancy
/// set that failed first-hand, see [`Collective::settle_call`]). `None` credits this rank.
fn first_failure_as(
    world: &dyn World,
    mine: Option<(Option<u32>, &str)>,
) -> Option<(usize, String)> {
    // the lowest failing rank by a min-reduction, then its message broadcast from it:
    // per rank O(log P) steps and one message (was an all-gather of every rank's, O(P))
    let me = match mine {
        Some((credit, _)) => u64::from(credit.unwrap_or(world.rank())),
        None => u64::MAX,
    };
    let first = world.min_u64(me);
    if first == u64::MAX {
        return None;
    }
    let text = world.broadcast_from(
        first as u32,
        mine.map(|(_, m)| m).unwrap_or_default().as_bytes(),
    );
    Some((first as usize, String::from_utf8_lossy(&text).into_owned()))
}

/// Whether the runtime may still run calls, the same on every rank: calls are refused
/// once an agreed step failed after ranks began to change their state (uncertain), a
/// halt reason is kept for finalize, and finalize runs once. Its fields change only
/// through these methods, so every path that marks the state does it the same way.
#[derive(Debug, Default)]
pub(in crate::runtime) struct Health {
    /// The agreed reason to halt, once one holds.
    halt_reason: Option<String>,
    finalized: bool,
    /// Set (on every rank alike) when a call failed after ranks had begun to change their
    /// state: what failed.
    uncertain: Option<String>,
    /// Set when a process of the job was lost (see `ulfm`): MPI's words.
    lost: Option<String>,
}

impl Health {
    /// A runtime not (yet) started: dropping it is not a missed finalize.
    pub(in crate::runtime) fn finalized() -> Health {
        Health {
            finalized: true,
            ..Health::default()
        }
    }

    /// Refuse `call` when an earlier call left the ranks' state uncertain.
    pub(in crate::runtime) fn usable(&self, call: &str) -> Result<()> {
        if let Some(e) = self.lost_error(call) {
            return Err(e);
        }
        match &self.uncertain {
            Some(why) => Err(ScrError::StateUncertain(format!(
                "{call}: refused, because an earlier call left the ranks' cached state uncertain ({why}); call finalize (or MPI_Abort) and restart the job, which restores what every rank agrees on"
            ))),
            None => Ok(()),
        }
    }

    /// `what` failed with `e` after the ranks began to change their state (agreed).
    pub(in crate::runtime) fn mark_uncertain(&mut self, what: &str, e: &ScrError) {
        self.uncertain = Some(format!("{what}: {e}"));
    }

    /// A process was lost (MPI's words in `why`): this runtime makes no MPI call again,
    /// and owes no finalize.
    pub(in crate::runtime) fn mark_lost(&mut self, why: &str) {
        if self.lost.is_none() {
            self.lost = Some(why.to_string());
        }
        self.finalized = true;
    }

    /// The error every call returns once a process was lost.
    pub(in crate::runtime) fn lost_error(&self, call: &str) -> Option<ScrError> {
        self.lost
            .as_ref()
            .map(|why| super::ulfm::lost_error(call, why))
    }

    /// Whether an earlier call left the state uncertain.
    pub(in crate::runtime) fn is_uncertain(&self) -> bool {
        self.uncertain.is_some()
    }

    /// The agreed halt reason, if one holds.
    pub(in crate::runtime) fn halt_reason(&self) -> Option<&String> {
        self.halt_reason.as_ref()
    }

    /// A halt condition holds (agreed): kept for finalize's record.
    pub(in crate::runtime) fn set_halt_reason(&mut self, reason: String) {
        self.halt_reason = Some(reason);
    }

    /// Whether finalize ran (or the runtime was abandoned or never started).
    pub(in crate::runtime) fn is_finalized(&self) -> bool {
        self.finalized
    }

    /// Finalize ran (`true`), or init succeeded and it is owed (`false`).
    pub(in crate::runtime) fn set_finalized(&mut self, finalized: bool) {
        self.finalized = finalized;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_refused_once_the_state_is_uncertain_naming_what_failed() {
        let mut h = Health::default();
        assert!(h.usable("start_output").is_ok());
        h.mark_uncertain("delete", &ScrError::Usage("disk gone".into()));
        assert!(h.is_uncertain());
        let e = h.usable("route_file").unwrap_err();
        assert!(matches!(e, ScrError::StateUncertain(_)));
        assert_eq!(
            e.to_string(),
            "route_file: refused, because an earlier call left the ranks' cached state uncertain (delete: disk gone); call finalize (or MPI_Abort) and restart the job, which restores what every rank agrees on"
        );
    }

    #[test]
    fn once_a_process_is_lost_every_call_is_refused_so_and_no_finalize_is_owed() {
        let mut h = Health::default();
        assert!(h.lost_error("need_checkpoint").is_none());
        h.mark_lost("MPI_ERR_PROC_FAILED: Process Failure");
        // (the first loss is the one reported)
        h.mark_lost("MPI_ERR_REVOKED: Communication Object Revoked");
        assert!(h.is_finalized());
        let e = h.usable("should_exit").unwrap_err();
        assert!(matches!(e, ScrError::ProcessFailed(_)));
        assert_eq!(
            e.to_string(),
            "should_exit: a process of the job was lost (MPI_ERR_PROC_FAILED: Process Failure); the library's communicators are revoked: recover (a resilient run replaces the process) or end the job"
        );
    }

    #[test]
    fn a_runtime_not_started_owes_no_finalize() {
        assert!(Health::finalized().is_finalized());
        assert!(!Health::default().is_finalized());
    }
}
