//! Removing datasets: the application's drop and delete, and eviction from a full store (agreed: a dataset leaves every rank's cache or none).

use super::*;

impl Runtime {
    /// Forget the named dataset as a restart candidate (its files stay until evicted;
    /// collective, like `current`).
    pub fn drop_dataset(&mut self, name: &str) -> Result<()> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("drop");
        if self.passthrough.is_some() {
            return Ok(());
        }
        let id = self.begin("drop", self.id_of(name))?;
        self.restart.skipped.push(id);
        Ok(())
    }

    /// Delete the named dataset from cache (collective).
    pub fn delete(&mut self, name: &str) -> Result<()> {
        let _log = self.span.clone().entered();
        let _counted = comm::scope("delete");
        if self.passthrough.is_some() {
            return Ok(());
        }
        // a name some ranks do not know (or a dataset busy on some) is an error on every
        // rank, agreed before anything is deleted
        let id = self.id_of(name).and_then(|id| {
            if self.restart.candidate == Some(id) || self.output.as_ref().is_some_and(|o| o.record.id == id) {
                Err(ScrError::Usage(format!(
                    "delete: dataset `{name}` is being read or written; complete it first"
                )))
            } else if self.flushing_ids().contains(&id) {
                // the background transfer still reads it (on this rank, maybe not on
                // others: agreed below); deleting now would fail the flush
                Err(ScrError::Usage(format!(
                    "delete: dataset `{name}` is being flushed in the background on rank {}; delete it once the flush is done (or at the next run)",
                    self.topo.rank
                )))
            } else {
                Ok(id)
            }
        });
        let id = self.begin("delete", id)?;
        let rec = self.cache.filemap.datasets[&id].clone();
        let local = self.delete_dataset(&rec);
        self.agree_changed("delete", local)
    }

    pub(in crate::runtime) fn id_of(&self, name: &str) -> Result<u64> {
        self.cache
            .filemap
            .datasets
            .values()
            .find(|d| d.name == name)
            .map(|d| d.id)
            .ok_or_else(|| ScrError::Usage(format!("no dataset named `{name}` in cache")))
    }
}
