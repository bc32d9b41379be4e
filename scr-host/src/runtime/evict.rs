//! Removing datasets from cache: what a delete, a failed apply or an invalid restart
//! removes, and eviction from a full store (agreed: a dataset leaves every rank's cache
//! or none). The application's drop and delete are calls of the runtime (`api`).

use super::cache::{file_names, reaper, remove_files, Cache};
use super::collective::Collective;
use super::descriptors::Descriptors;
use super::flush::Flushing;
use super::job::Job;
use super::restart::state::RestartState;
use super::topology::Topology;
use super::world::Op;
use super::{DatasetRecord, Filemap, Result, ScrError, TestHooks};
use crate::config::{settings, Config};
use crate::integrity::{dataset_files, verify_dataset};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

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
        if self.roomy(rec, &dir) {
            let store = self.job.store_dir(&rec.descriptor.store);
            let trash = reaper::trash_dir(&store, self.topo.rank());
            self.cache.retire_files(&dir, &file_names(rec), &trash)?;
        } else {
            remove_files(&dir, &file_names(rec))?;
        }
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

    /// Whether the device of `dir` has room enough that `rec`'s files may keep their
    /// space while this rank's deleting thread frees it (see `cache/reaper.rs`): four
    /// times their size for every rank of the node (their redundancy and the next
    /// dataset, which may be written meanwhile, included). A store sized to its count
    /// gets its space back before `start_output` returns.
    fn roomy(&self, rec: &DatasetRecord, dir: &Path) -> bool {
        let bytes: u64 = rec.files.iter().map(|f| f.size).sum();
        let ranks = self.topo.node_ranks().len() as u64;
        room_to_defer(crate::os::free_bytes(dir), bytes, ranks)
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
    /// (collective), as SCR does: the store never holds more than its count, the dataset
    /// about to be written included. Never evicted: `keep` (the dataset just completed),
    /// output datasets whose flush is not recorded for every rank (their only copy), and
    /// the newest complete checkpoint unless `for_checkpoint` (a new checkpoint is
    /// starting: with `count = 1` the previous one goes, SCR's trade-off) or this run
    /// flushed it. A dataset being flushed goes only once its flush ended: when the store
    /// needs it gone, the ids returned name those flushes; the caller waits for them
    /// (saying so) and calls again. Empty: done.
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
        for_checkpoint: bool,
    ) -> Result<Vec<u64>> {
        let limit = self.config.store_count_at(store).max(1);
        let held: Vec<u64> = self
            .cache
            .datasets()
            .filter(|d| d.descriptor.store == store)
            .map(|d| d.id)
            .collect();
        let may_go = self.may_evict(store, keep, for_checkpoint);
        let holders = self.agree_on_evictable(&held, &may_go);
        let (victims, wait_for) = victims(&holders, limit, room);
        let left = holders.len() - victims.len() - wait_for.len();
        if room > 0 && left as u64 + room > limit {
            // (agreed input: the same on every rank; said once)
            let kept: Vec<String> = holders
                .iter()
                .filter(|(_, e)| e.class == Class::No)
                .map(|(id, _)| {
                    self.cache
                        .get(*id)
                        .map_or_else(|| format!("dataset {id}"), |r| r.name.clone())
                })
                .collect();
            self.topo.warn(&format!(
                "store {store} goes over its count ({limit}): {} may not leave it before it is flushed (an output's or the newest checkpoint's only copy)",
                kept.join(", ")
            ));
        }
        if victims.is_empty() && !wait_for.is_empty() {
            return Ok(wait_for);
        }
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
        self.world.changed("evicting from cache", local)?;
        // what is left to wait for (the evictable ones are gone now)
        Ok(wait_for)
    }

    /// Whether this rank could give up each dataset of `store`: not `keep`; for an
    /// output, its flush recorded for every rank — by this run's synchronous flush, or in
    /// the index (a background flush; the index is read at most once, and only when it
    /// matters); the newest complete checkpoint only `for_checkpoint` or when this run
    /// flushed it; and a dataset being flushed only after its flush.
    fn may_evict(
        &self,
        store: &str,
        keep: Option<u64>,
        for_checkpoint: bool,
    ) -> BTreeMap<u64, Evictable> {
        let newest = [
            self.restart_candidate_any(),
            self.restart.candidate_in(self.cache),
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
            .filter(|d| d.descriptor.store == store)
            .map(|d| {
                let is_newest = newest.contains(&Some(d.id));
                let class = if keep == Some(d.id) || (d.output && !in_prefix(d.id)) {
                    Class::No
                } else if is_newest && for_checkpoint {
                    Class::Last
                } else if is_newest && !flushed.contains(&d.id) {
                    // (this run's own flushes only: every rank reading the prefix's
                    // index at each output would load the parallel file system)
                    Class::No
                } else {
                    Class::May
                };
                let flushing = flushing.contains(&d.id);
                (d.id, Evictable { class, flushing })
            })
            .collect()
    }

    /// Which ids of a store any rank holds (`held` here), each with what every holder
    /// says of giving it up (`may_go` here; the strictest answer wins), agreed by walking
    /// the ids upwards with min-reductions: per rank two reductions per dataset in the
    /// store (bounded by its count), independent of P (was: every rank's id lists on every
    /// rank — O(P)).
    fn agree_on_evictable(
        &self,
        held: &[u64],
        may_go: &BTreeMap<u64, Evictable>,
    ) -> BTreeMap<u64, Evictable> {
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
            // (a rank that does not hold it does not object)
            let mine = may_go.get(&id).copied().unwrap_or(Evictable {
                class: Class::May,
                flushing: false,
            });
            holders.insert(
                id,
                Evictable::from_bits(self.world.all_reduce_u8(mine.bits(), Op::BitOr)),
            );
        }
        holders
    }

    /// The newest complete checkpoint, skipped or not.
    fn restart_candidate_any(&self) -> Option<u64> {
        self.cache.newest_checkpoint(&[])
    }
}

/// Whether the holders of a dataset could give it up (agreed: the strictest class, and
/// whether it is being flushed on any rank).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::runtime) struct Evictable {
    /// How readily it may go.
    pub(in crate::runtime) class: Class,
    /// A flush of it is running: it goes only once the flush ended.
    pub(in crate::runtime) flushing: bool,
}

/// How readily a dataset may leave a full store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::runtime) enum Class {
    /// Oldest first.
    May,
    /// Only when nothing else can make the room: the newest complete checkpoint when a
    /// new checkpoint starts.
    Last,
    /// Not at all: kept, an output's only copy, the newest checkpoint otherwise.
    No,
}

impl Evictable {
    /// As one byte for the agreement, a bitwise OR over the ranks (one reduction of one
    /// byte per dataset): the class as one bit each (the strictest set bit wins), the
    /// flush as another (running on some rank).
    fn bits(self) -> u8 {
        let class = match self.class {
            Class::May => 0,
            Class::Last => 0b010,
            Class::No => 0b100,
        };
        class | u8::from(self.flushing)
    }

    /// The agreed answer from the OR of every rank's [`Evictable::bits`].
    fn from_bits(bits: u8) -> Evictable {
        let class = if bits & 0b100 != 0 {
            Class::No
        } else if bits & 0b010 != 0 {
            Class::Last
        } else {
            Class::May
        };
        Evictable {
            class,
            flushing: bits & 1 != 0,
        }
    }
}

/// The datasets to evict from a store holding `holders` (every id any rank holds, oldest
/// first, each with what its holders agreed) so that `room` more fit under `limit`, as
/// few as needed: first the oldest that may go and are not being flushed, then the
/// oldest being flushed (after their flush: returned second, evicted by a second call
/// once it ended), and last the newest checkpoint. The same on every rank (its input is
/// agreed). What may not go still counts against the limit, so a store whose every
/// dataset is protected evicts nothing and the new one goes over the count.
/// [`Evictor::roomy`]'s rule: `free` bytes on the device (unknown: no) cover four times
/// `bytes` for each of the node's `ranks`.
fn room_to_defer(free: Option<u64>, bytes: u64, ranks: u64) -> bool {
    free.is_some_and(|free| free / 4 / ranks.max(1) >= bytes)
}

pub(in crate::runtime) fn victims(
    holders: &BTreeMap<u64, Evictable>,
    limit: u64,
    room: u64,
) -> (Vec<u64>, Vec<u64>) {
    let mut count = holders.len() as u64;
    let (mut now, mut after_flush) = (Vec::new(), Vec::new());
    let passes: [&dyn Fn(&Evictable) -> bool; 3] = [
        &|e| e.class == Class::May && !e.flushing,
        &|e| e.class == Class::May && e.flushing,
        &|e| e.class == Class::Last,
    ];
    for pass in passes {
        for (&id, e) in holders.iter().filter(|(_, e)| pass(e)) {
            if count + room <= limit {
                return (now, after_flush);
            }
            if e.flushing {
                after_flush.push(id);
            } else {
                now.push(id);
            }
            count -= 1;
        }
    }
    (now, after_flush)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    const MAY: Evictable = Evictable {
        class: Class::May,
        flushing: false,
    };
    const FLUSHING: Evictable = Evictable {
        class: Class::May,
        flushing: true,
    };
    const LAST: Evictable = Evictable {
        class: Class::Last,
        flushing: false,
    };
    const NO: Evictable = Evictable {
        class: Class::No,
        flushing: false,
    };

    /// The agreement's byte: any rank's flush, and the strictest class, win.
    #[test]
    fn deletion_is_deferred_only_with_room_for_four_times_the_files_of_every_rank() {
        let mib = 1 << 20;
        assert!(room_to_defer(Some(16 * mib), mib, 4));
        assert!(!room_to_defer(Some(16 * mib - 1), mib, 4));
        assert!(room_to_defer(Some(4 * mib), mib, 0));
        assert!(!room_to_defer(None, 0, 1));
    }

    #[test]
    fn the_agreed_answer_is_the_strictest_with_any_ranks_flush() {
        let or = |es: &[Evictable]| Evictable::from_bits(es.iter().fold(0, |b, e| b | e.bits()));
        assert_eq!(or(&[MAY, MAY]), MAY);
        assert_eq!(or(&[MAY, FLUSHING]), FLUSHING);
        let last_flushing = Evictable {
            flushing: true,
            ..LAST
        };
        assert_eq!(or(&[FLUSHING, LAST]), last_flushing);
        assert_eq!(or(&[LAST, NO, FLUSHING]).class, Class::No);
    }

    fn held(list: &[(u64, Evictable)]) -> BTreeMap<u64, Evictable> {
        list.iter().copied().collect()
    }

    #[test]
    fn the_oldest_evictable_datasets_go_first_and_no_more_than_needed() {
        let h = held(&[(1, MAY), (2, MAY), (3, LAST)]);
        assert_eq!(
            victims(&h, 3, 1),
            (vec![1], vec![]),
            "one slot for the new one"
        );
        assert_eq!(victims(&h, 2, 1), (vec![1, 2], vec![]));
        assert_eq!(victims(&h, 4, 1), (vec![], vec![]), "room already");
        // count 1: the newest checkpoint goes last, when the next checkpoint starts
        assert_eq!(victims(&h, 1, 1), (vec![1, 2, 3], vec![]));
        assert_eq!(victims(&held(&[(7, LAST)]), 1, 1), (vec![7], vec![]));
    }

    #[test]
    fn protected_datasets_stay_and_still_count() {
        // 1 is an output whose flush is not recorded on some rank: 2 goes instead
        let h = held(&[(1, NO), (2, MAY), (3, MAY)]);
        assert_eq!(victims(&h, 3, 1), (vec![2], vec![]));
        // nothing may go: nothing is evicted, the store goes over its count
        let h = held(&[(1, NO), (2, NO)]);
        assert_eq!(victims(&h, 2, 1), (vec![], vec![]));
    }

    /// A dataset being flushed is passed over for an older-or-newer one that may go now
    /// (SCR's rule), but never for the newest checkpoint: then its flush is waited for,
    /// and a second call, after the flush, evicts it.
    #[test]
    fn a_dataset_being_flushed_is_waited_for_before_the_newest_checkpoint_goes() {
        let h = held(&[(1, FLUSHING), (2, MAY), (3, LAST)]);
        assert_eq!(victims(&h, 3, 1), (vec![2], vec![]));
        assert_eq!(victims(&h, 2, 1), (vec![2], vec![1]));
        let h = held(&[(1, FLUSHING), (3, LAST)]);
        assert_eq!(victims(&h, 2, 1), (vec![], vec![1]));
        // after the flush ended, the second call evicts it, and the newest stays
        let h = held(&[(1, MAY), (3, LAST)]);
        assert_eq!(victims(&h, 2, 1), (vec![1], vec![]));
        // count 1 with the newest being flushed: it goes after its flush
        let newest_flushing = Evictable {
            flushing: true,
            ..LAST
        };
        assert_eq!(
            victims(&held(&[(3, newest_flushing)]), 1, 1),
            (vec![], vec![3])
        );
    }
}
