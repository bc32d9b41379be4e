//! The prefix as a run changes it: the application's drop and delete of an index entry,
//! `prefix_purge` at init and `prefix_size`'s window after a flush. Rank 0 edits the
//! index under the prefix lock; the outcome is agreed where the callers need it.

use super::collective::Collective;
use super::job::Job;
use super::topology::Topology;
use super::{Result, ScrError};
use crate::config::{settings, Config};

/// The prefix's index as the runtime edits it, over the parts that takes, borrowed from
/// a runtime or a phase that holds them ([`prefix!`]).
pub(in crate::runtime) struct Prefix<'a> {
    pub(in crate::runtime) world: &'a Collective,
    pub(in crate::runtime) config: &'a Config,
    pub(in crate::runtime) job: &'a Job,
    pub(in crate::runtime) topo: &'a Topology,
}

/// A [`Prefix`] over the parts of `$s` (the runtime, or a phase holding them).
macro_rules! prefix {
    ($s:expr) => {
        $crate::runtime::prefix::Prefix {
            world: &$s.world,
            config: &$s.config,
            job: &$s.job,
            topo: &$s.topo,
        }
    };
}
pub(in crate::runtime) use prefix;

impl Prefix<'_> {
    /// Rank 0: the index entry `name` means removed (with `delete`, its files in the
    /// prefix too, and its directory under `.scr`), chosen and dropped under the prefix
    /// lock ([`Index::drop_for_app_in`](crate::state::prefix::Index::drop_for_app_in)); a
    /// name the index does not hold is nothing to do. The outcome is agreed (collective).
    pub(in crate::runtime) fn remove(
        &self,
        call: &str,
        name: &str,
        cached: Option<u64>,
        delete: bool,
    ) -> Result<()> {
        let outcome = if self.topo.rank() == 0 {
            let prefix = self.job.prefix();
            crate::state::prefix::Index::drop_for_app_in(prefix, name, cached, delete)
                .map(|dropped| {
                    if let Some(d) = dropped.filter(|_| delete) {
                        d.delete_files(prefix, &mut || {});
                    }
                })
                .map_err(|e| ScrError::Usage(format!("{call}: {e}")))
        } else {
            Ok(())
        };
        self.world.agree_on(outcome)
    }

    /// `prefix_purge` at init (SCR's `scr_prefix_delete_all`), before a restart is
    /// chosen: rank 0 drops every dataset the prefix's index lists under the prefix
    /// lock, then deletes their files, and says what went at info level. The outcome is
    /// agreed (collective): a purge that fails fails init on every rank, since running on
    /// would restart from what the user asked to delete.
    pub(in crate::runtime) fn purge(&self) -> Result<()> {
        if !self.config.get(settings::PREFIX_PURGE) {
            return Ok(());
        }
        let outcome = if self.topo.rank() == 0 {
            let prefix = self.job.prefix();
            crate::state::prefix::Index::purge_in(prefix)
                .map(|dropped| {
                    dropped.delete_files(prefix, &mut || {});
                    self.topo.info(&if dropped.names.is_empty() {
                        format!(
                            "prefix_purge: the index of {} lists no dataset; nothing deleted",
                            prefix.display()
                        )
                    } else {
                        format!(
                            "prefix_purge: deleted {} dataset(s) from {}: {}",
                            dropped.names.len(),
                            prefix.display(),
                            dropped.names.join(", ")
                        )
                    });
                })
                .map_err(|e| {
                    ScrError::Usage(format!(
                        "prefix_purge: the datasets of {} could not be deleted: {e}; fix the prefix's .scr directory or set prefix_purge = false",
                        prefix.display()
                    ))
                })
        } else {
            Ok(())
        };
        self.world.agree_on(outcome)
    }

    /// Rank 0, after checkpoint `entry`'s flush was recorded: with `prefix_size = N`,
    /// the checkpoints outside the window of N ending at it are deleted from the prefix,
    /// files and index entries ([`Index::outside_window`](crate::state::prefix::Index::outside_window)).
    /// A failure is a warning: the flush itself stands.
    pub(in crate::runtime) fn trim(&self, entry: &crate::state::prefix::IndexEntry) {
        let window = self.config.get(settings::PREFIX_SIZE);
        if window == 0 || entry.checkpoint_id.is_none() || self.topo.rank() != 0 {
            return;
        }
        let prefix = self.job.prefix();
        match crate::state::prefix::Index::delete_outside_window_in(prefix, entry.id, window) {
            Ok(dropped) if !dropped.names.is_empty() => {
                dropped.delete_files(prefix, &mut || {});
                self.topo.info(&format!(
                    "prefix_size = {window}: deleted {} from {} after {} was flushed",
                    dropped.names.join(", "),
                    prefix.display(),
                    entry.name
                ));
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(
                "prefix_size = {window}: older checkpoints could not be deleted from {} after {} was flushed: {e}",
                prefix.display(),
                entry.name
            ),
        }
    }
}
