//! Policy and halt: when to checkpoint (need_checkpoint: interval, seconds, overhead) and
//! when to stop (halt conditions from the halt file, the allocation's end, should_exit),
//! decided by rank 0 and agreed.

use super::*;
use crate::config::settings;

impl Runtime {
    /// Whether the application should checkpoint now (collective; decided on rank 0):
    /// every `checkpoint_interval` calls, after `checkpoint_seconds`, while checkpoint
    /// time stays under `checkpoint_overhead` percent, or when a halt condition holds.
    /// With none of these set, always.
    pub fn need_checkpoint(&mut self) -> Result<bool> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("need_checkpoint");
        self.usable("need_checkpoint")?;
        self.poll_flushes();
        self.policy.calls += 1;
        // one broadcast decides (applications may ask every iteration): 0 no, 1 yes, 2 a
        // halt condition holds (SCR checks them here too) — then, with halt_exit, the
        // reason follows and the run ends now
        let mut decision = [0u8];
        let mut halt = None;
        if self.topo.rank == 0 {
            halt = self.halt_check();
            let interval = self.config.get(settings::CHECKPOINT_INTERVAL);
            let seconds = self.config.get(settings::CHECKPOINT_SECONDS);
            let overhead = self.config.get(settings::CHECKPOINT_OVERHEAD);
            let since = self.policy.last_end.elapsed().as_secs_f64();
            let need = if interval == 0 && seconds == 0 && overhead == 0.0 {
                true
            } else {
                (interval > 0 && self.policy.calls.is_multiple_of(interval))
                    || (seconds > 0 && since >= seconds as f64)
                    || (overhead > 0.0 && self.policy.last_cost <= since * overhead / 100.0)
            };
            decision[0] = if halt.is_some() { 2 } else { u8::from(need) };
        }
        self.world.broadcast_into(0, &mut decision[..]);
        if decision[0] == 2 && self.config.get(settings::HALT_EXIT) {
            let text = self
                .world
                .broadcast_bytes(halt.unwrap_or_default().as_bytes());
            self.halt_and_exit(String::from_utf8_lossy(&text).into_owned());
        }
        Ok(decision[0] != 0)
    }

    /// Rank 0's view of the halt conditions.
    pub(in crate::runtime) fn halt_check(&self) -> Option<String> {
        let now = now_secs();
        let margin = self.config.get(settings::HALT_SECONDS) as i64;
        load_halt(&self.job.prefix).reason(now, margin).or_else(|| {
            // SCR_HALT_SECONDS: stop while there is time left to flush
            let (end, source) = self.report.allocation_end.as_ref()?;
            (margin > 0 && now >= end - margin).then(|| {
                format!(
                    "{} s left before the allocation ends at {end} (from {source}), within halt_seconds = {margin}",
                    (end - now).max(0)
                )
            })
        })
    }

    /// Whether the run should stop now (collective; a halt condition holds). The reason
    /// is recorded for `finalize`.
    pub fn should_exit(&mut self) -> Result<bool> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("should_exit");
        self.usable("should_exit")?;
        self.poll_flushes();
        match self.agreed_halt_reason() {
            None => Ok(false),
            Some(reason) => {
                if self.topo.rank == 0 {
                    tracing::warn!("should_exit: yes, {reason}");
                }
                if self.health.halt_reason.is_none() {
                    self.log_event(crate::events::Event::Halt {
                        reason: reason.clone(),
                    });
                }
                self.health.halt_reason = Some(reason);
                // the run is about to end: its newest checkpoint goes to the prefix now
                // (finalize would otherwise; an application that exits without it
                // still leaves it saved)
                if self.flush_at_end() {
                    self.flush_newest("should_exit")?;
                    // (a background flush dies with a process that exits now: wait)
                    self.wait_flushes(false);
                }
                Ok(true)
            }
        }
    }

    /// Rank 0's view of the halt conditions, on every rank (collective).
    pub(in crate::runtime) fn agreed_halt_reason(&self) -> Option<String> {
        let reason = if self.topo.rank == 0 {
            self.halt_check()
        } else {
            None
        };
        let text = self
            .world
            .broadcast_bytes(reason.unwrap_or_default().as_bytes());
        let reason = String::from_utf8_lossy(&text).into_owned();
        (!reason.is_empty()).then_some(reason)
    }

    /// With `halt_exit`, a halt condition ends the run inside the library, as SCR's
    /// SCR_HALT_EXIT does: checked at the end of init and after every checkpoint kept
    /// (collective). Every rank finalizes (recording the reason in the halt file),
    /// finalizes MPI and exits with status 0; the application does not return from the
    /// call. Without `halt_exit` the application asks `should_exit`.
    pub(in crate::runtime) fn exit_if_halted(&mut self) {
        if !self.config.get(settings::HALT_EXIT) {
            return;
        }
        let Some(reason) = self.agreed_halt_reason() else {
            return;
        };
        self.halt_and_exit(reason)
    }

    /// End the run for `reason` (collective; halt_exit): finalize (which flushes the
    /// newest checkpoint), finalize MPI and exit with status 0.
    pub(in crate::runtime) fn halt_and_exit(&mut self, reason: String) -> ! {
        self.log_event(crate::events::Event::Halt {
            reason: reason.clone(),
        });
        if self.topo.rank == 0 {
            tracing::warn!(
                "halting the run: {reason} (halt_exit = true: flushing the newest checkpoint, finalizing and exiting)"
            );
        }
        self.health.halt_reason = Some(reason);
        if let Err(e) = self.finalize() {
            tracing::error!("finalize before the halt exit: {e}");
        }
        mpi_exit::finalize_mpi_and_exit(0)
    }
}

/// The halt file, or no conditions (with a warning) when it cannot be read: a damaged
/// halt file must not stop some ranks and not others.
pub(in crate::runtime) fn load_halt(prefix: &Path) -> Halt {
    Halt::load(prefix).unwrap_or_else(|e| {
        tracing::warn!("{e}; ignoring the halt file");
        Halt::default()
    })
}
