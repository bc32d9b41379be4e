//! Finalize and the end of a run: the newest checkpoint flushed, the halt file and event
//! log written, and what a dropped or abandoned runtime leaves.

use super::{comm, Result, Runtime, FINALIZE_REASON};
use crate::config::settings;
use crate::runtime::evict::evictor;
use crate::runtime::flush::flusher;
use crate::state::halt::Halt;

impl Runtime {
    /// Whether the end of the run (finalize, a halt) flushes the newest checkpoint:
    /// `flush_on_finalize`, unless `flush = 0` turns flushing off.
    pub(in crate::runtime) fn flush_at_end(&self) -> bool {
        self.config.get(settings::FLUSH) > 0 && self.config.get(settings::FLUSH_ON_FINALIZE)
    }

    /// End the run (collective): records the exit reason in the halt file.
    pub fn finalize(&mut self) -> Result<()> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("finalize");
        if self.world.health().is_finalized() {
            return Ok(());
        }
        self.world.health_mut().set_finalized(true);
        if let Some(out) = self.output.take() {
            self.topo
                .warn("finalize: a dataset was still being written; it is discarded");
            if self.world.health().is_uncertain() {
                // complete_output is refused now; each rank drops its part (no collective
                // step: the ranks' state is uncertain already)
                if let Err(e) = evictor!(self).delete_dataset(out.record()) {
                    tracing::warn!("{e}");
                }
            } else {
                self.output = Some(out);
                // agreed on every rank; the flushes are waited for and the exit reason
                // recorded all the same
                if let Err(e) = self.complete_output(false) {
                    self.topo
                        .warn(&format!("finalize: discarding the open dataset: {e}"));
                }
            }
        }
        // every dataset kept leaves its CRC32s recorded, before the flush at the end
        // compares against them
        self.cache.settle_crc();
        flusher!(self).wait_flushes(true);
        // a clean finish (or a halt) leaves the newest checkpoint in the prefix, not in
        // node-local cache only; a flush that fails is reported and leaves it cached
        // (scavenge can still save it), never failing finalize
        if !self.world.health().is_uncertain() && self.flush_at_end() {
            if let Err(e) = flusher!(self).flush_newest("finalize") {
                self.topo
                    .warn(&format!("finalize: flushing the newest checkpoint: {e}"));
            }
            flusher!(self).wait_flushes(true);
        }
        self.job.log_event(crate::events::Event::Finalize {
            seconds_total: self.report.init_started().elapsed().as_secs_f64(),
        });
        if self.topo.rank() == 0 {
            // record why the run ended, unless someone set a reason of their own (read
            // and written under the prefix lock, like every halt file update)
            let reason = match self.world.health().halt_reason() {
                Some(why) => format!("{FINALIZE_REASON} ({why})"),
                None => FINALIZE_REASON.into(),
            };
            let recorded = Halt::update(self.job.prefix(), |halt| {
                let unset = halt.exit_reason.is_none();
                if unset {
                    halt.exit_reason = Some(reason);
                }
                (unset, ())
            });
            // the job's work is done: a full or failing prefix here is reported, never
            // turned into a failed finalize (which applications abort on)
            if let Err(e) = recorded {
                tracing::warn!("{e}; the exit reason is not recorded");
            }
        }
        Ok(())
    }

    /// Whether `finalize` ran (or the runtime was abandoned).
    pub fn is_finalized(&self) -> bool {
        self.world.health().is_finalized()
    }

    /// Give up without finalizing (after an error on this rank): no collective call is
    /// made, and dropping says nothing more.
    pub fn abandon(&mut self) {
        let _log = self.span.clone().entered();
        self.world.health_mut().set_finalized(true);
    }
}
