//! Removing datasets from cache: what a delete, a failed apply or an invalid restart
//! removes, and eviction from a full store (agreed: a dataset leaves every rank's cache
//! or none). The application's drop and delete are calls of the runtime (`api`).

use super::cache::{file_names, remove_files, Cache};
use super::collective::Collective;
use super::descriptors::Descriptors;
use super::flush::Flushing;
use super::job::Job;
use super::restart::state::RestartState;
use super::topology::Topology;
use super::{DatasetRecord, Filemap, Result, ScrError, TestHooks};
use crate::config::{settings, Config};
use crate::integrity::{dataset_files, verify_dataset};
use std::collections::{BTreeMap, BTreeSet};

/// Removal from cache over the parts it uses, borrowed from a runtime or a phase that
/// holds them ([`evictor!`]).
pub(in crate::runtime) struct Evictor<'a> {
    pub(in crate::runtime) world: &'a mut Collective,
    pub(in crate::runtime) cache: &'a mut Cache,
    pub(in crate::runtime) config: &'a Config,
    pub(in crate::runtime) job: &'a Job,
    pub(in crate::runtime) topo: &'a Topology,
    pub(in crate::runtime) descs: &'a Descriptors,
    pub(in crate::runtime) hooks: &'a TestHooks,
    pub(in crate::runtime) flushing: &'a Flushing,
    pub(in crate::runtime) restart: &'a RestartState,
}

/// An [`Evictor`] over the parts of `$s` (the runtime, or a phase holding them).
macro_rules! evictor {
    ($s:expr) => {
        $crate::runtime::evict::Evictor {
            world: &mut $s.world,
            cache: &mut $s.cache,
            config: &$s.config,
            job: &$s.job,
            topo: &$s.topo,
            descs: &$s.descs,
            hooks: &$s.hooks,
            flushing: &$s.flushing,
            restart: &$s.restart,
        }
    };
}
pub(in crate::runtime) use evictor;

impl Evictor<'_> {
    /// Discard a dataset whose apply failed on some rank (every rank calls this; `desc`
    /// is the redundancy descriptor whose scheme ran apply, `None` when apply never ran):
    /// the scheme's `remove` takes what it wrote on this member, its temporary files
    /// included (names only it knows), then the dataset goes by its recorded names —
    /// the redundancy files declared before apply among them.
    pub(in crate::runtime) fn discard_failed_apply(
        &mut self,
        desc: Option<usize>,
        rec: &DatasetRecord,
    ) -> Result<()> {
        if let Some(desc) = desc {
            let rd = &self.descs[desc];
            let dir = self.job.dataset_dir(&rec.descriptor.store, rec.id);
            let result = rd
                .scheme()
                .raw()
                .remove(rd.host().services(), &dataset_files(rec, &dir))
                .into_result();
            let label = format!("{} ({})", rec.id, rec.name);
            if let Err(e) = self
                .world
                .settle_call(rd.host(), rd.scheme(), "remove", &label, result)
            {
                // the recorded names still go below; say what may be left
                tracing::warn!(
                    "{e}; files the scheme wrote for dataset {label} in {} and did not declare may be left", dir.display()
                );
            }
        }
        self.delete_dataset(rec)
    }

    /// Delete this rank's files of a dataset (other ranks on the node share the dataset
    /// directory) and forget it.
    pub(in crate::runtime) fn remove_local(&mut self, rec: &DatasetRecord) -> Result<()> {
        // a background hash of these files stops first: its CRC32, taken as they go,
        // would vouch for nothing (`crc_on_delete` then checks their sizes only)
        self.cache.cancel_crc_of(rec.id);
        let dir = self.job.dataset_dir(&rec.descriptor.store, rec.id);
        if rec.complete && self.config.get(settings::CRC_ON_DELETE) {
            // SCR's SCR_CRC_ON_DELETE: a last check that tells the user the cache
            // damaged data while holding it (the files go either way)
            let buf = self.config.file_buf_size();
            if let Err(why) = verify_dataset(self.topo.rank(), rec, &dir, true, buf) {
                tracing::warn!(
                    "crc_on_delete: dataset {} ({}) was damaged in cache before it was deleted: {why}", rec.id, rec.name
                );
            }
        }
        remove_files(&dir, &file_names(rec))?;
        self.cache.forget(rec.id);
        if self.topo.rank() == 0 && rec.complete {
            if let Err(e) =
                crate::state::prefix::FlushFile::remove_location(self.job.prefix(), rec.id, "CACHE")
            {
                tracing::warn!("{e}");
            }
        }
        self.cache.save()
    }

    /// Delete every dataset the cache of this node holds, for any rank, with the
    /// filemaps that list them (`why`: `distribute = false` or `cache_purge`). The first
    /// rank on each node does it; only names inside their dataset directories are
    /// removed.
    pub(in crate::runtime) fn purge_cache(&mut self, why: &str) -> Result<()> {
        if !self.topo.first_on_node() {
            return Ok(());
        }
        let mut purged = BTreeSet::new();
        for (owner, path) in Filemap::owners_in(self.job.cntl_dir()) {
            if let Ok(map) = Filemap::load(self.job.cntl_dir(), owner) {
                for rec in map.datasets.values() {
                    let dir = self.job.dataset_dir(&rec.descriptor.store, rec.id);
                    remove_files(&dir, &file_names(rec))?;
                    // outputs never flushed are named too: they are gone for good
                    purged.insert(format!(
                        "{}{}",
                        rec.name,
                        if rec.output { " (output)" } else { "" }
                    ));
                }
            }
            Filemap::remove(self.job.cntl_dir(), owner).map_err(|e| ScrError::Io {
                path: path.clone(),
                source: e,
            })?;
        }
        if !purged.is_empty() {
            tracing::warn!(
                "{why}: purged the cache of node {}: {}; restarting from the prefix",
                self.topo.node(),
                purged.into_iter().collect::<Vec<_>>().join(", ")
            );
        }
        Ok(())
    }

    /// Delete a dataset on this rank (every rank calls it for a collective delete).
    pub(in crate::runtime) fn delete_dataset(&mut self, rec: &DatasetRecord) -> Result<()> {
        self.hooks
            .injected("delete", self.topo.rank(), rec.id, self.job.cntl_dir())?;
        self.remove_local(rec)
    }

    /// Evict the oldest datasets of `store` until `room` more fit under its count
    /// (collective). Never evicted: the newest complete checkpoint, the current restart
    /// candidate, `keep` (the dataset just completed), datasets being flushed, and output
    /// datasets whose flush is not recorded for every rank.
    ///
    /// The victims are chosen together: each rank says which datasets of the store it
    /// holds and which of them it could give up, and a dataset goes only when every rank
    /// that holds it can give it up. Ranks whose caches differ (a lost node, a flush
    /// running on some ranks only) would otherwise evict different datasets and leave a
    /// checkpoint complete on some ranks and gone on others.
    pub(in crate::runtime) fn evict(
        &mut self,
        store: &str,
        room: u64,
        keep: Option<u64>,
    ) -> Result<()> {
        let limit = self.config.store_count_at(store).max(1);
        let held: Vec<u64> = self
            .cache
            .datasets()
            .filter(|d| d.descriptor.store == store)
            .map(|d| d.id)
            .collect();
        let may_go = self.may_evict(store, keep);
        let holders = self.agree_on_evictable(&held, &may_go);
        let victims = victims(&holders, limit, room);
        let mut local = Ok(());
        for id in victims {
            let Some(victim) = self.cache.get(id).cloned() else {
                continue;
            };
            self.topo.info(&format!(
                "evicting dataset {} ({}) from {store}",
                victim.id, victim.name
            ));
            if let Err(e) = self.remove_local(&victim) {
                local = Err(e);
            }
        }
        self.world.changed("evicting from cache", local)
    }

    /// The datasets of `store` this rank could give up: not a restart candidate, not
    /// `keep`, not being flushed, and, for an output, its flush recorded for every rank —
    /// by this run's synchronous flush, or in the index (a background flush; the index is
    /// read at most once, and only when an output is a candidate).
    fn may_evict(&self, store: &str, keep: Option<u64>) -> Vec<u64> {
        let protected = [
            self.restart_candidate_any(),
            self.restart.candidate_in(self.cache),
            keep,
        ];
        let flushing = self.flushing.in_flight();
        let flushed = self.flushing.flushed();
        let index = std::cell::OnceCell::new();
        let in_prefix = |id: u64| {
            flushed.contains(&id)
                || index
                    .get_or_init(|| crate::state::prefix::Index::load(self.job.prefix()).ok())
                    .as_ref()
                    .and_then(|ix| ix.datasets.get(&id))
                    .is_some_and(|e| e.complete && e.failed.is_none())
        };
        self.cache
            .datasets()
            .filter(|d| {
                d.descriptor.store == store
                    && !protected.contains(&Some(d.id))
                    && !flushing.contains(&d.id)
                    && (!d.output || in_prefix(d.id))
            })
            .map(|d| d.id)
            .collect()
    }

    /// Which ids of a store any rank holds (`held` here), each with whether every holder
    /// may give it up (`may_go` here), agreed by walking the ids upwards with
    /// min-reductions: per rank two reductions per dataset in the store (bounded by its
    /// count), independent of P (was: every rank's id lists on every rank — O(P)).
    fn agree_on_evictable(&self, held: &[u64], may_go: &[u64]) -> BTreeMap<u64, bool> {
        let mut holders = BTreeMap::new();
        let mut above = 0u64; // (id + 1 encoded: 0 is below every id)
        loop {
            let mine = held
                .iter()
                .map(|&id| id.saturating_add(1))
                .filter(|&e| e > above)
                .min()
                .unwrap_or(u64::MAX);
            let next = self.world.min_u64(mine);
            if next == u64::MAX {
                break;
            }
            above = next;
            let id = next - 1;
            let ok = !held.contains(&id) || may_go.contains(&id);
            holders.insert(id, self.world.all(ok));
        }
        holders
    }

    /// The newest complete checkpoint, skipped or not.
    fn restart_candidate_any(&self) -> Option<u64> {
        self.cache.newest_checkpoint(&[])
    }
}

/// The datasets to evict from a store holding `holders` (every id any rank holds, oldest
/// first, each with whether every holder may give it up) so that `room` more fit under
/// `limit`: the oldest evictable ones first, as few as needed. The same on every rank
/// (its input is agreed). What may not go still counts against the limit, so a store
/// whose every dataset is protected evicts nothing and the new one goes over the count.
pub(in crate::runtime) fn victims(
    holders: &BTreeMap<u64, bool>,
    limit: u64,
    room: u64,
) -> Vec<u64> {
    let mut count = holders.len() as u64;
    let mut out = Vec::new();
    for (&id, &evictable) in holders {
        if count + room <= limit {
            break;
        }
        if evictable {
            out.push(id);
            count -= 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn held(list: &[(u64, bool)]) -> BTreeMap<u64, bool> {
        list.iter().copied().collect()
    }

    #[test]
    fn the_oldest_evictable_datasets_go_first_and_no_more_than_needed() {
        let h = held(&[(1, true), (2, true), (3, true)]);
        assert_eq!(victims(&h, 3, 1), vec![1], "one slot for the new one");
        assert_eq!(victims(&h, 2, 1), vec![1, 2]);
        assert_eq!(victims(&h, 4, 1), Vec::<u64>::new(), "room already");
    }

    #[test]
    fn protected_datasets_stay_and_still_count() {
        // 1 is the restart candidate (or still flushing) on some rank: 2 goes instead
        let h = held(&[(1, false), (2, true), (3, true)]);
        assert_eq!(victims(&h, 3, 1), vec![2]);
        // nothing may go: nothing is evicted, the store goes over its count
        let h = held(&[(1, false), (2, false)]);
        assert_eq!(victims(&h, 2, 1), Vec::<u64>::new());
    }
}
