//! Restoring the cache at init: every cached dataset any rank holds is verified, or rebuilt
//! through its scheme, on every rank alike; what cannot be restored is dropped everywhere
//! and reported.

use super::cache::Cache;
use super::collective::Collective;
use super::descriptors::Descriptors;
use super::evict::evictor;
use super::flush::Flushing;
use super::job::Job;
use super::report::RunReport;
use super::restart::state::RestartState;
use super::tags::TEMPLATE_TAG;
use super::topology::Topology;
use super::world::{Exchange, SetHost};
use super::TestHooks;
use super::{DatasetRecord, Result, Set};
use crate::config::settings;
use crate::config::Config;
use crate::integrity::{
    dataset_files, declare_redundancy, is_inside, verify_dataset, verify_rebuilt, VerifyError,
};
use crate::layout::relative_to;
use crate::registry::Registry;
use crate::registry::{LoadedScheme, RegistryError};
use abi_stable::std_types::{RNone, ROption, RSome};
use scr_plugin::{FileMeta, RecoverRequest};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Init's restore of the cache over the parts it uses, borrowed from a runtime or a
/// phase that holds them ([`restorer!`]); `distribute` is written on it too.
pub(in crate::runtime) struct Restorer<'a> {
    pub(in crate::runtime) world: &'a mut Collective,
    pub(in crate::runtime) cache: &'a mut Cache,
    pub(in crate::runtime) restart: &'a mut RestartState,
    pub(in crate::runtime) report: &'a mut RunReport,
    pub(in crate::runtime) flushing: &'a Flushing,
    pub(in crate::runtime) config: &'a Config,
    pub(in crate::runtime) registry: &'a Registry,
    pub(in crate::runtime) job: &'a Job,
    pub(in crate::runtime) topo: &'a Topology,
    pub(in crate::runtime) hooks: &'a TestHooks,
    pub(in crate::runtime) descs: &'a Descriptors,
}

/// A [`Restorer`] over the parts of `$s` (the runtime, or a phase holding them).
macro_rules! restorer {
    ($s:expr) => {
        $crate::runtime::restore::Restorer {
            world: &mut $s.world,
            cache: &mut $s.cache,
            restart: &mut $s.restart,
            report: &mut $s.report,
            flushing: &$s.flushing,
            config: &$s.config,
            registry: &$s.registry,
            job: &$s.job,
            topo: &$s.topo,
            hooks: &$s.hooks,
            descs: &$s.descs,
        }
    };
}
pub(in crate::runtime) use restorer;

impl Restorer<'_> {
    /// Move, verify and rebuild everything the cache holds; drop what cannot be saved.
    pub(in crate::runtime) fn restore_cache(&mut self) -> Result<()> {
        if self.config.get(settings::CACHE_PURGE) {
            self.purge_at_init("cache_purge")?;
        } else if self.config.get(settings::DISTRIBUTE) {
            self.distribute()?;
        } else {
            self.purge_at_init("distribute = false")?;
        }
        self.cache.open(self.job.cntl_dir());
        // what a run that ended without finalize left to delete
        for store in &self.config.stores {
            super::cache::reaper::clear_trash(&self.job.store_dir(&store.path), self.topo.rank());
        }
        // what a restart of another size left (a run that ended inside it)
        super::restart::staging::remove_stale_staging(self.job, self.config, self.topo);
        // datasets that never completed (a crash inside an output) are garbage
        let incomplete: Vec<DatasetRecord> = self
            .cache
            .datasets()
            .filter(|d| !d.complete)
            .cloned()
            .collect();
        let mut local = Ok(());
        for d in &incomplete {
            if let Err(e) = evictor!(self).remove_local(d) {
                local = Err(e);
            }
        }
        self.world.agree_on(local)?;
        self.continue_ids();

        // Which datasets the cache holds, agreed without gathering records: the ids are
        // walked from the largest down by max-reductions, and for each id the lowest
        // holder's identity is broadcast and compared by every other holder (see
        // [`Restorer::holders_of`]). Per rank and dataset: a few reductions and one
        // broadcast of about 100 bytes (was: every rank's records, ~470 bytes each, on
        // every rank — O(P)).
        // (id + 1 encoded, 0: none; restoring id only changes this rank's record of id,
        // never of a smaller one, so the walk sees every id held at the start)
        let mut below = u64::MAX;
        let mut round = 0i32;
        // the datasets restored (agreed: the same on every rank)
        let mut restored = BTreeSet::new();
        loop {
            let mine = self
                .cache
                .ids()
                .into_iter()
                .map(|id| id.saturating_add(1))
                .filter(|&e| e < below)
                .max()
                .unwrap_or(0);
            let next = self.world.max_u64(mine);
            if next == 0 {
                break;
            }
            below = next;
            let id = next - 1;
            let holders = self.holders_of(id);
            if let Some(why) = self.unrestorable(&holders) {
                // not this job's to rebuild: leave it alone (eviction removes it in time);
                // one of another number of ranks may be read at the restart
                self.restart.skip(id);
                if holders.first.world_size != self.topo.size() {
                    self.restart.note_other_size_cached();
                }
                self.topo.warn(&format!(
                    "dataset {id} ({}) is not restored: {why}",
                    holders.first.name
                ));
                continue;
            }
            if self.restore_dataset(id, &holders, TEMPLATE_TAG + round % 2)? {
                restored.insert(id);
            }
            round += 1;
        }
        self.rebuild_flush_file(&restored);
        Ok(())
    }

    /// SCR's `scr_flush_file_rebuild`: once the cache is restored, rank 0 makes the
    /// prefix's flush file list as in cache exactly the datasets `restored` (agreed by
    /// every rank), so that CACHE entries of caches that are gone (a new allocation,
    /// lost nodes, a dataset dropped, skipped or purged here) do not make `scr
    /// flush-file` report data to flush that no longer exists. A dataset skipped (kept
    /// in cache but not offered) is not listed: this run cannot flush it; a later run
    /// that restores it lists it again. A failure to write is warned about only (the
    /// file informs the tools; the run does not depend on it).
    fn rebuild_flush_file(&self, restored: &BTreeSet<u64>) {
        if self.topo.rank() != 0 {
            return;
        }
        if let Err(e) = crate::state::prefix::FlushFile::rebuild(self.job.prefix(), restored) {
            self.topo.warn(&format!(
                "the flush file could not be brought up to date with the cache ({e}); `scr flush-file` may list datasets that are no longer cached"
            ));
        }
    }

    /// SCR's SCR_DISTRIBUTE=0 and SCR_CACHE_PURGE=1 (`why`): no restart from cache; the
    /// cache is purged on every node (agreed) and the run restarts from the prefix
    /// (fetch). The flush file loses its CACHE entries with the rebuild that follows
    /// (nothing is left to restore: [`Restorer::rebuild_flush_file`]).
    fn purge_at_init(&mut self, why: &str) -> Result<()> {
        let purged = evictor!(self).purge_cache(why);
        self.world.agree_on(purged)
    }

    /// The next dataset and checkpoint ids (collective): they continue after the largest
    /// used anywhere, in the cache or, recorded by rank 0, in the prefix (so a lost cache
    /// never brings an old id back).
    fn continue_ids(&mut self) {
        let ids = if self.topo.rank() == 0 {
            super::Ids::load(self.job.prefix())
        } else {
            super::Ids::default()
        };
        let (cache_dataset, cache_ckpt) = self.cache.largest_ids();
        let dataset = self.world.max_u64(cache_dataset.max(ids.dataset));
        let checkpoint = self.world.max_u64(cache_ckpt.max(ids.checkpoint));
        self.cache.continue_after(dataset, checkpoint);
    }

    /// What the holders of dataset `id` agree on (collective): the identity of the
    /// lowest holder's record, the lowest holder whose record differs from it, whether
    /// any holder recorded a CRC32. Per rank: 3–4 reductions and a broadcast of one
    /// identity (or two, when records differ) — independent of P.
    fn holders_of(&self, id: u64) -> Holders {
        let own = self.cache.get(id);
        let first_rank =
            self.world
                .min_u64(own.map_or(u64::MAX, |_| self.topo.rank().into())) as u32;
        let first: Identity = self
            .world
            .broadcast_value(first_rank, own.map(Identity::of).as_ref(), "identity")
            // (the same bytes on every rank, so the same outcome: an identity no record
            // has, which makes every holder's record differ and the dataset be refused)
            .unwrap_or_else(|e| Identity {
                name: format!(
                    "(rank {first_rank}'s record could not be read: {})",
                    e.source
                ),
                checkpoint_id: None,
                world_size: 0,
                scheme: String::new(),
                store: String::new(),
            });
        let differs = own.is_some_and(|r| Identity::of(r) != first);
        let other_rank = self.world.min_u64(if differs {
            self.topo.rank().into()
        } else {
            u64::MAX
        });
        let other = (other_rank != u64::MAX).then(|| {
            let name = self.world.broadcast_from(
                other_rank as u32,
                own.map(|r| r.name.as_bytes()).unwrap_or_default(),
            );
            (
                other_rank as u32,
                String::from_utf8_lossy(&name).into_owned(),
            )
        });
        let crc = own.is_some_and(|r| r.files.iter().any(|f| f.crc32.is_some()));
        let crc_expected = !self.world.all(!crc);
        Holders {
            first_rank,
            first,
            other,
            crc_expected,
        }
    }

    /// Why a dataset cannot belong to this job, judged from what its holders agree on
    /// (the same on every rank).
    fn unrestorable(&self, holders: &Holders) -> Option<String> {
        let first = &holders.first;
        if first.world_size != 0 && first.world_size != self.topo.size() {
            return Some(format!(
                "it was written by {} ranks and this job has {} (a restart by another number of ranks reads the checkpoint's copy in the prefix; the cached one stays until evicted)",
                first.world_size,
                self.topo.size()
            ));
        }
        if let Some((rank, name)) = &holders.other {
            return Some(format!(
                "ranks {} and {rank} hold different datasets under this id ({} and {name})",
                holders.first_rank, first.name
            ));
        }
        None
    }

    /// The record of dataset `id` for a rank that holds none (its cache was lost),
    /// from a member of its redundancy set that holds one (collective). The holders of
    /// each set find each other (a split by set id) and the lowest sends its record to
    /// every member that is not among them, through a sparse exchange. Per rank: one
    /// reduction when no rank lacks the record; otherwise a split, an exchange of
    /// O(set size) ranks within the set and one record per missing member — independent
    /// of P (was: every rank's records on every rank).
    fn template_from_set(&self, id: u64, tag: i32) -> Option<DatasetRecord> {
        let own = self.cache.get(id);
        if self.world.sum_u64(u64::from(own.is_none())) == 0 {
            return own.cloned();
        }
        let color = own.map(|r| (r.descriptor.set_id & 0x7fff_ffff) as u32);
        let mut sends = Vec::new();
        if let (Some(holders), Some(rec)) = (self.world.split(color, self.topo.rank()), own) {
            let here = holders.all_gather_u32(self.topo.rank());
            if holders.rank() == 0 {
                for &m in &rec.descriptor.members {
                    if m < self.topo.size() && !here.contains(&m) {
                        sends.push((m, rec));
                    }
                }
            }
        }
        let got = self
            .world
            .sparse_exchange_values(&sends, tag, "dataset record");
        if own.is_some() {
            return own.cloned();
        }
        // the lowest holder whose record lists this rank (records from several sets
        // mean damaged filemaps; the choice is the one every earlier run made)
        got.into_iter()
            .filter_map(|(_, r)| r.ok())
            .find(|r: &DatasetRecord| r.descriptor.members.contains(&self.topo.rank()))
    }

    /// Verify (and, through the scheme, rebuild) dataset `id` on every rank, or drop it
    /// everywhere; whether it was restored (the same on every rank). Collective: every
    /// step below that can go differently on some ranks ends in an agreement before the
    /// next collective one.
    fn restore_dataset(&mut self, id: u64, holders: &Holders, tag: i32) -> Result<bool> {
        let _dataset = crate::log::dataset_span(id).entered();
        let restore_started = std::time::Instant::now();
        let own = self.cache.get(id).cloned();
        let Some(r) = self.prepare_restore(id, holders, tag) else {
            return Ok(false);
        };
        let buf = self.config.file_buf_size();
        let check = self.check_cached(&r, own.as_ref(), buf);
        let intact = check.is_ok();
        let Some(mut rebuilding) = self.declare_rebuild(id, &r, own.as_ref()) else {
            return Ok(false);
        };
        let outcome = self.recover_verified(
            &r,
            own.as_ref(),
            intact,
            &mut rebuilding,
            holders.crc_expected,
            buf,
        );
        let kept = self.world.all(outcome.is_ok());
        let lacking = match (&own, intact) {
            (None, _) => Some(2u8),
            (Some(_), false) => Some(1),
            (Some(_), true) => None,
        };
        self.note_lacking_ranks(&r, lacking, kept, restore_started);
        let local = match outcome {
            Ok(None) if kept => Ok(()),
            Ok(Some(files)) if kept => self.record_rebuilt(&r, files),
            _ => {
                let report = self.dropped_report(&r, &check, outcome.as_ref().err());
                self.topo.warn(&report);
                self.job.log_event(crate::events::Event::Failure {
                    what: report.clone(),
                    rank: None,
                });
                self.report.add_lost(report);
                // this rank's record, or the one made for the rebuild when its cache was
                // lost (holding the redundancy files declared before recover and the
                // names recover returned): what the scheme wrote here goes with it,
                // inside the dataset directory only
                evictor!(self).remove_local(&rebuilding)
            }
        };
        self.world.agree_on(local).map(|()| kept)
    }

    /// Set up what restoring dataset `id` needs on this rank (the recorded set, its
    /// communicator, the scheme, the private dataset directory), agreed: `None` on every
    /// rank when any rank could not (plugin missing, parameters refused, no set), after
    /// keeping the data and saying why it is not offered now.
    fn prepare_restore(&mut self, id: u64, holders: &Holders, tag: i32) -> Option<Restore> {
        // the record that says which set this rank belonged to
        let template = self.template_from_set(id, tag);
        let host = self.restore_host(template.as_ref());
        let scheme = template.as_ref().map(|t| self.scheme_of(t));
        let dir = template
            .as_ref()
            .map(|t| self.job.dataset_dir(&t.descriptor.store, id));
        // every level from the store down 0700 and checked, none followed through a link
        // (a rebuild writes here)
        let dir_ok = match (&template, &dir) {
            (Some(t), Some(d)) => {
                crate::private_dir::create_private_dir(Path::new(&t.descriptor.store), d)
                    .map_err(|e| tracing::warn!("{e}"))
                    .is_ok()
            }
            _ => false,
        };
        let ready = matches!((&host, &scheme), (Some(_), Some(Ok(_)))) && dir_ok;
        let name = template
            .as_ref()
            .map_or_else(|| holders.first.name.clone(), |r| r.name.clone());
        if !self.world.all(ready) {
            // keep the data, do not offer it
            let why = match &scheme {
                Some(Err(e)) => e.to_string(),
                _ => "a rank is in no redundancy set for it".to_string(),
            };
            self.restart.skip(id);
            self.topo
                .warn(&format!("dataset {id} ({name}) is not restored now: {why}"));
            return None;
        }
        match (host, scheme, template, dir) {
            (Some(host), Some(Ok(scheme)), Some(record), Some(dir)) => Some(Restore {
                id,
                name,
                record,
                host,
                scheme,
                dir,
            }),
            _ => unreachable!("ready on every rank"),
        }
    }

    /// The host of the set `template` records for this rank (collective). When every
    /// rank's set is one this run formed for a redundancy descriptor (a restart of the
    /// same layout: the common case), a set-local duplicate of it; else a split of the
    /// world. Agreed, and only when every rank has its set: a member without one would
    /// never join its set's duplicate. `None` when the communicator does not have the
    /// recorded number of members.
    fn restore_host(&mut self, template: Option<&DatasetRecord>) -> Option<Box<dyn SetHost>> {
        let set = template.map(|t| Set {
            id: t.descriptor.set_id,
            members: t.descriptor.members.clone(),
        });
        // this rank's failure-group value in the recorded group; the node names for
        // every rank when any rank cannot give one (as when one table was missing)
        let value = template.map(|t| {
            super::descriptors::group_value(self.config, self.topo, &t.descriptor.group).ok()
        });
        let value = match value {
            _ if !self.world.all(!matches!(value, Some(None))) => self.topo.node().to_string(),
            Some(Some(v)) => v,
            _ => self.topo.node().to_string(),
        };
        let formed = template.and_then(|t| {
            self.descs.iter().position(|rd| {
                rd.record().set_id == t.descriptor.set_id
                    && rd.record().members == t.descriptor.members
                    && rd.record().group == t.descriptor.group
            })
        });
        let host = if self.world.all(formed.is_some()) {
            formed.map(|i| self.descs[i].host().duplicate())
        } else {
            super::descriptors::Descriptors::set_host(
                self.world.as_dyn(),
                self.topo,
                set.as_ref(),
                &value,
            )
        };
        host.filter(|h| {
            set.as_ref()
                .is_some_and(|s| h.size_matches(s.members.len()))
        })
    }

    /// A new instance of the scheme `rec` was protected with, as this rank's member of
    /// its recorded set.
    fn scheme_of(&self, rec: &DatasetRecord) -> std::result::Result<LoadedScheme, RegistryError> {
        let d = &rec.descriptor;
        let member = d
            .members
            .iter()
            .position(|&m| m == self.topo.rank())
            .unwrap_or(0);
        self.registry
            .new_scheme(
                &self
                    .config
                    .recorded_scheme_config(d, member as u32, self.topo.rank()),
            )
    }

    /// Verify this rank's cached files before use: a file that is missing, of another
    /// size or (with crc_on_restart) of another CRC32 than recorded makes this rank's
    /// data lost, so the scheme rebuilds it or the dataset is dropped everywhere.
    fn check_cached(
        &mut self,
        r: &Restore,
        own: Option<&DatasetRecord>,
        buf: usize,
    ) -> std::result::Result<(), CheckError> {
        let use_crc = self.config.get(settings::CRC_ON_RESTART);
        let check = match own {
            // the job ended before this rank's background hash was recorded
            // (`crc_on_copy_defer`): nothing vouches for the bytes, so they are not used
            // (the dropped-dataset report names the dataset and this reason, once)
            Some(rec) if use_crc && rec.crc32_pending => {
                return Err(CheckError::CrcPending {
                    rank: self.topo.rank(),
                });
            }
            Some(rec) => verify_dataset(self.topo.rank(), rec, &r.dir, use_crc, buf)
                .map_err(CheckError::Verify),
            None => Err(CheckError::NoRecord {
                rank: self.topo.rank(),
            }),
        };
        if let (Some(_), Err(why)) = (own, &check) {
            tracing::warn!("dataset {} ({}): {why}; counted as lost", r.id, r.name);
        }
        let unchecked = own.is_some_and(|r| r.files.iter().any(|f| f.crc32.is_none()));
        if use_crc && self.topo.rank() == 0 && unchecked && self.report.crc_note_due() {
            self.topo.info("cached files without a recorded CRC32 (crc_on_copy = false): only their sizes are checked at restart");
        }
        check
    }

    /// Record the files a rebuild will write before they exist (agreed): this rank's
    /// record — or, when its cache was lost, an incomplete one made from its set's record
    /// — names the redundancy files the scheme declares, saved before recover runs, so a
    /// crash inside the rebuild leaves nothing the next init cannot find and delete (an
    /// incomplete record is deleted at init). A lost rank's own file names are only in
    /// the redundancy data: they are recorded the moment recover returns them. `None` on
    /// every rank when any rank could not record them (the dataset is skipped).
    fn declare_rebuild(
        &mut self,
        id: u64,
        r: &Restore,
        own: Option<&DatasetRecord>,
    ) -> Option<DatasetRecord> {
        let mut rebuilding = own.cloned().unwrap_or_else(|| DatasetRecord {
            files: Vec::new(),
            redundancy: Vec::new(),
            complete: false,
            // (a rebuilt rank's files come with the CRC32s the rebuild verified, not
            // with another member's pending hash)
            crc32_pending: false,
            ..r.record.clone()
        });
        let declared = declare_redundancy(&r.scheme, &mut rebuilding, &r.dir).and_then(|()| {
            if own == Some(&rebuilding) {
                Ok(())
            } else {
                self.cache.put(rebuilding.clone());
                self.cache.save()
            }
        });
        if let Err(e) = &declared {
            tracing::warn!("dataset {id} ({}): {e}", r.name);
        }
        if self.world.all(declared.is_ok()) {
            return Some(rebuilding);
        }
        // nothing was written for the rebuild: forget a record made for it
        if own.is_none() && self.cache.forget(id).is_some() {
            let _ = self.cache.save();
        }
        self.restart.skip(id);
        self.topo.warn(&format!(
            "dataset {id} ({}) is not restored now: its redundancy files could not be recorded before the rebuild",
            r.name
        ));
        None
    }

    /// Run the scheme's recover and verify what it says (not agreed: the caller agrees).
    /// When this rank's files passed the check (`intact`), they must still be there,
    /// whole, after the scheme ran (`Ok(None)`); otherwise what the scheme says it rebuilt
    /// is verified before it is recorded (`Ok(Some(files))`). On a rank whose cache was
    /// lost (`own` is `None`) the returned names go into `rebuilding` at once, so a crash
    /// before the end leaves them findable.
    fn recover_verified(
        &mut self,
        r: &Restore,
        own: Option<&DatasetRecord>,
        intact: bool,
        rebuilding: &mut DatasetRecord,
        crc_expected: bool,
        buf: usize,
    ) -> std::result::Result<Option<Vec<super::FileRecord>>, RecoverError> {
        let intact = own.filter(|_| intact);
        let files: ROption<abi_stable::std_types::RVec<FileMeta>> = match intact {
            Some(rec) => RSome(dataset_files(rec, &r.dir).files),
            None => RNone,
        };
        let request = RecoverRequest {
            dataset_id: r.id,
            dir: r.dir.display().to_string().into(),
            files,
        };
        // the host's check above is made whatever the scheme declares; say which
        // contract is in force for this rebuild
        let verified = self.config.get(settings::CRC_ON_RESTART);
        tracing::debug!(
            "dataset {} ({}): {}",
            r.id,
            r.name,
            super::descriptors::survivor_contract(
                &r.record.descriptor.scheme,
                r.scheme.raw().survivor_check(),
                verified
            )
        );
        // With crc_on_restart the check above read every member's files against their
        // recorded size and CRC32 and passed a failing member as lost: the scheme is
        // told so, and a scheme that verifies survivors itself does not read them again
        // (the fault suite: a process lost while a set rebuilds)
        self.hooks.crash_at("rebuild", self.world.rank());
        let services = r.host.services();
        let result = if verified {
            let told = scr_plugin::SurvivorsVerified::new(services);
            r.scheme
                .raw()
                .recover(scr_plugin::host_ref(&told), &request)
        } else {
            r.scheme.raw().recover(services, &request)
        }
        .into_result();
        let label = format!("{} ({})", r.id, r.name);
        let outcome = self
            .world
            .settle_call(&*r.host, &r.scheme, "recover", &label, result)
            .map(|v| v.into_vec())
            .map_err(RecoverError::Scheme);
        if own.is_none() {
            // rebuilt on this rank whose cache was lost: record the names at once (what
            // the scheme returned, to clean up if the dataset is dropped)
            let returned = outcome.as_deref().unwrap_or_default();
            if !returned.is_empty() {
                rebuilding.files = returned
                    .iter()
                    .map(|m| super::FileRecord {
                        name: relative_to(&r.dir, m.path.as_str()),
                        size: m.size,
                        mode: m.mode,
                        mtime: (m.mtime_sec, m.mtime_nsec),
                        crc32: m.crc32.into_option(),
                    })
                    .filter(|f| is_inside(&f.name))
                    .collect();
                self.cache.put(rebuilding.clone());
                if let Err(e) = self.cache.save() {
                    tracing::warn!("dataset {label}: {e}");
                }
            }
        }
        let scheme = &r.record.descriptor.scheme;
        // the dataset was written with CRC32s when any holder recorded one: then a
        // rebuilt file must come with one too (a rank whose cache is lost has only the
        // scheme's word for its files)
        let outcome = outcome.and_then(|metas| match intact {
            Some(rec) => verify_dataset(self.topo.rank(), rec, &r.dir, false, buf)
                .map(|()| None)
                .map_err(|why| RecoverError::ChangedIntact {
                    scheme: scheme.clone(),
                    why,
                }),
            None => verify_rebuilt(self.topo.rank(), &metas, own, &r.dir, crc_expected, buf)
                .map(Some)
                .map_err(|why| RecoverError::WrongData {
                    scheme: scheme.clone(),
                    why,
                }),
        });
        if let Err(why) = &outcome {
            tracing::warn!("dataset {label}: {why}");
        }
        outcome
    }

    /// Learn on rank 0 which ranks lacked files (`lacking` on this rank: 1 damaged or
    /// missing, 2 the whole cache lost) and which nodes lost their cache, for the log and
    /// the event log's lost nodes (collective). Rank 0 alone logs them: bounded gathers of
    /// the ranks that lacked files and of the nodes lost — see `World::gather_some`.
    fn note_lacking_ranks(
        &mut self,
        r: &Restore,
        lacking: Option<u8>,
        kept: bool,
        started: std::time::Instant,
    ) {
        let (ranks, lacking_total) = self
            .world
            .gather_some(lacking.as_ref().map(std::slice::from_ref));
        // the lost nodes: one report per node, by its first rank when it lost its cache
        // (a node's ranks lose it together), so the bound counts nodes, not ranks
        let node_lost = lacking == Some(2) && self.topo.first_on_node();
        let (lost, lost_total) = self
            .world
            .gather_some(node_lost.then_some(self.topo.node().as_bytes()));
        self.report.add_lost_nodes(
            lost.iter()
                .map(|(_, b)| String::from_utf8_lossy(b).into_owned()),
            lost_total,
        );
        let rebuilt: Vec<u32> = ranks.iter().map(|(r, _)| *r).collect();
        let more = match lacking_total - rebuilt.len() as u64 {
            0 => String::new(),
            n => format!(" and {n} more"),
        };
        if kept && lacking_total > 0 {
            self.topo.info(&format!(
                "dataset {} ({}): rebuilt the files of ranks {rebuilt:?}{more} through {}",
                r.id, r.name, r.record.descriptor.scheme
            ));
            self.job.log_event(crate::events::Event::Rebuild {
                name: r.name.clone(),
                id: r.id,
                ranks: rebuilt,
                seconds: started.elapsed().as_secs_f64(),
            });
        }
    }

    /// Record the files rebuilt on this rank (verified) and the scheme's own redundancy
    /// files: the dataset is complete here again.
    fn record_rebuilt(&mut self, r: &Restore, files: Vec<super::FileRecord>) -> Result<()> {
        let mut rec = r.record.clone();
        rec.files = files;
        rec.complete = true;
        // (verified as rebuilt: no background hash of another run is pending on them)
        rec.crc32_pending = false;
        let ds = dataset_files(&rec, &r.dir);
        rec.redundancy = r
            .scheme
            .raw()
            .redundancy_files(&ds)
            .into_result()
            .map(|red| {
                red.iter()
                    .map(|p| relative_to(&r.dir, p.as_str()))
                    .collect()
            })
            .unwrap_or_default();
        self.cache.put(rec);
        self.cache.save()
    }

    /// Why a dataset is dropped everywhere, the same text on every rank (collective):
    /// which ranks lacked files and which sets' rebuild failed. Two bounded gathers to
    /// rank 0 — the ranks whose files were lost or damaged, the ranks whose rebuild failed
    /// with their set — and the report broadcast from rank 0: per rank O(log P) steps.
    fn dropped_report(
        &self,
        r: &Restore,
        check: &std::result::Result<(), CheckError>,
        failed: Option<&RecoverError>,
    ) -> String {
        // the reasons cross the wire as their text
        let check = check.as_ref().err().map(|e| e.to_string());
        let (checks, checks_total) = self.world.gather_some(check.as_deref().map(str::as_bytes));
        let failed = failed.map(|e| e.to_string());
        let failure = failed.map(|why| (r.record.descriptor.set_id, why));
        let (fails, fails_total) = self
            .world
            .gather_some_values::<_, (u64, String)>(failure.as_ref(), "rebuild failure");
        let mut report = String::new();
        if self.topo.rank() == 0 {
            let mut ranks: Vec<String> = checks
                .iter()
                .map(|(_, b)| String::from_utf8_lossy(b).into_owned())
                .collect();
            if checks_total > ranks.len() as u64 {
                ranks.push(format!("and {} more", checks_total - ranks.len() as u64));
            }
            let mut failed: BTreeMap<u64, String> = BTreeMap::new();
            for (set, why) in fails.iter().filter_map(|(_, f)| f.as_ref().ok()) {
                failed.entry(*set).or_insert_with(|| why.clone());
            }
            let mut sets: Vec<String> = failed
                .iter()
                .map(|(set, why)| format!("set {set}: {why}"))
                .collect();
            if fails_total > fails.len() as u64 {
                sets.push(format!(
                    "and {} more failed rank(s)",
                    fails_total - fails.len() as u64
                ));
            }
            report = format!(
                "dataset {} ({}) cannot be restored and was dropped: lost, damaged or unverifiable files: [{}]; {}",
                r.id,
                r.name,
                ranks.join("; "),
                sets.join("; ")
            );
        }
        String::from_utf8_lossy(&self.world.broadcast_from(0, report.as_bytes())).into_owned()
    }
}

/// Why this rank's cached files of a dataset cannot be used as they are (`check_cached`):
/// the rank's data counts as lost. Typed so the check and its report stay apart; the
/// text is what the dropped-dataset report gathers from the ranks.
#[derive(Debug, thiserror::Error)]
pub(in crate::runtime) enum CheckError {
    /// crc_on_restart asks for CRC32s that were never recorded (a background hash that
    /// did not finish).
    #[error("rank {rank}: its CRC32s were never recorded (the job ended within the background hash, or a file could not be read for it), so its files cannot be verified (crc_on_restart)")]
    CrcPending {
        /// The rank.
        rank: u32,
    },
    /// The rank's cache has no record of the dataset.
    #[error("rank {rank}: no record of the dataset (cache lost)")]
    NoRecord {
        /// The rank.
        rank: u32,
    },
    /// A file is missing or differs from its record.
    #[error(transparent)]
    Verify(VerifyError),
}

/// Why a scheme's recover on this rank did not leave data to keep (`recover_verified`).
/// Typed so the rank logs and agrees on it; its text goes to rank 0 for the
/// dropped-dataset report.
#[derive(Debug, thiserror::Error)]
pub(in crate::runtime) enum RecoverError {
    /// The scheme's recover failed.
    #[error(transparent)]
    Scheme(RegistryError),
    /// The scheme changed files that had passed their check.
    #[error("{scheme} changed intact files: {why}")]
    ChangedIntact {
        /// The scheme.
        scheme: String,
        /// What differs.
        why: VerifyError,
    },
    /// What the scheme says it rebuilt does not check out.
    #[error("{scheme} rebuilt wrong data: {why}")]
    WrongData {
        /// The scheme.
        scheme: String,
        /// What is wrong.
        why: VerifyError,
    },
}

/// What makes two records of one dataset id the same dataset.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(in crate::runtime) struct Identity {
    name: String,
    checkpoint_id: Option<u64>,
    world_size: u32,
    scheme: String,
    store: String,
}

/// What every rank knows about the holders of one cached dataset.
pub(in crate::runtime) struct Holders {
    /// The lowest rank holding a record of it.
    first_rank: u32,
    /// That record's identity.
    first: Identity,
    /// The lowest holder whose record differs from `first`, and its dataset name.
    other: Option<(u32, String)>,
    /// Whether any holder recorded a CRC32 (a rebuilt file must then come with one).
    crc_expected: bool,
}

/// What restoring one dataset works with once every rank agreed it can start.
pub(in crate::runtime) struct Restore {
    id: u64,
    /// The dataset's name (for messages).
    name: String,
    /// The record of this rank's set: descriptor, members, scheme, store.
    record: DatasetRecord,
    /// The set's communicator.
    host: Box<dyn SetHost>,
    /// The scheme the dataset was protected with, as this rank's member.
    scheme: LoadedScheme,
    /// The dataset's directory in cache (created private and checked).
    dir: PathBuf,
}

impl Identity {
    fn of(r: &DatasetRecord) -> Identity {
        Identity {
            name: r.name.clone(),
            checkpoint_id: r.checkpoint_id,
            world_size: r.world_size,
            scheme: r.descriptor.scheme.clone(),
            store: r.descriptor.store.clone(),
        }
    }
}
