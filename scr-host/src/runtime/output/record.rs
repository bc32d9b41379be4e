//! Recording a dataset as it is written and when it is done: each routed name in the
//! filemap's journal, the ids a finished dataset uses up (recorded in the prefix so no
//! later run takes them again), and a finished checkpoint counted against the halt
//! file's `checkpoints_left`. Shared by outputs in cache and bypass outputs.

use crate::runtime::output::Writer;
use std::time::Instant;

use crate::runtime::{FileRecord, Ids, Result};
use crate::state::halt::Halt;

impl Writer<'_> {
    /// Record routed file `key` of the dataset being written, once: in the filemap's
    /// journal (one appended record, not a rewrite of the whole filemap, which grows with
    /// every file). A name that could not be recorded is refused and may be routed again.
    pub(super) fn record_routed(&mut self, key: &str) -> Result<()> {
        let out = self.output.as_mut().expect("during output");
        if !out.routed.insert(key.to_string()) {
            return Ok(());
        }
        let file = FileRecord {
            name: key.to_string(),
            ..FileRecord::default()
        };
        out.record.files.push(file.clone());
        let id = out.record.id;
        let appended = if self.cache.get(id).is_some() {
            self.cache.append_file(id, &file)
        } else {
            // (start_output records the dataset first: not reached) a full snapshot,
            // never a journal record whose dataset the snapshot lacks
            self.cache.put(out.record.clone());
            self.cache.save()
        };
        if appended.is_err() {
            let out = self.output.as_mut().expect("during output");
            out.routed.remove(key);
            out.record.files.retain(|f| f.name != key);
        }
        appended
    }

    /// Dataset `id` is finished (kept or not): the next one gets a new id, and rank 0
    /// records the ids in the prefix so that later runs never reuse them, even when every
    /// cache is lost.
    pub(super) fn dataset_done(&mut self, id: u64) {
        self.cache.used(Some(id), None);
        if self.topo.rank() == 0 {
            let ids = Ids {
                dataset: id,
                checkpoint: self.cache.next_checkpoint().saturating_sub(1),
            };
            let path = Ids::path(self.job.prefix());
            if let Err(e) = crate::state::write_state(&path, Ids::KIND, &ids) {
                tracing::warn!("{}: {e}", path.display());
            }
        }
    }

    pub(super) fn checkpoint_done(&mut self, started: Instant) {
        self.policy.checkpoint_done(started);
        if self.topo.rank() == 0 {
            // a read-modify-write under the prefix lock: a concurrent `scr halt` must
            // neither lose this decrement nor have its own change lost
            let decremented = Halt::update(self.job.prefix(), |halt| {
                match halt.checkpoints_left.as_mut() {
                    Some(n) => {
                        *n -= 1;
                        (true, ())
                    }
                    None => (false, ()),
                }
            });
            if let Err(e) = decremented {
                tracing::warn!("{e}; CheckpointsLeft not decremented");
            }
        }
    }
}
