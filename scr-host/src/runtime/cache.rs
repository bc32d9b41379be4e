//! The cache at init and between checkpoints: moving files to the ranks that own them,
//! verifying and rebuilding datasets through their schemes, deleting and evicting.

use super::mpi_host::MpiHost;
use super::relative_to;
use crate::config::settings;
use crate::registry::{LoadedScheme, RegistryError};
use scr_plugin::sync::lock;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use abi_stable::std_types::{RNone, ROption, RSome};
use mpi::traits::Communicator as _;
use scr_plugin::{DatasetFiles, FileMeta, RecoverRequest};
use serde::{Deserialize, Serialize};

use super::{comm, DatasetRecord, Filemap, Result, Runtime, ScrError, Set};

/// Tag of the messages that move files between ranks at init.
const MOVE_TAG: i32 = 7001;
/// Piece size when moving file contents.
const MOVE_PIECE: usize = 64 << 20;

/// What `stat_file` measured.
pub(super) struct Meta {
    pub size: u64,
    pub mode: u32,
    pub mtime: (i64, u32),
    pub crc32: Option<u32>,
}

/// Size, mode, mtime and (when asked) CRC32 of a file.
pub(super) fn stat_file(path: &Path, crc: bool, buf: usize) -> std::io::Result<Meta> {
    let md = std::fs::metadata(path)?;
    if !md.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let crc32 = if crc {
        Some(file_crc32(path, buf)?)
    } else {
        None
    };
    Ok(Meta {
        size: md.len(),
        mode: md.mode() & 0o7777,
        mtime: (md.mtime(), md.mtime_nsec() as u32),
        crc32,
    })
}

/// Largest read buffer [`file_crc32`] uses, whatever `file_buf_size` says.
///
/// Measured with `scr-bench-crc` (two runs on a loaded 2-core machine; /dev/shm and ext4
/// /tmp; files of 16 to 256 MiB in the page cache; cost as a ratio to writing the same
/// file with an fsync): `read` into 256 KiB or 1 MiB costs 0.33–0.42 of the write on
/// tmpfs and 0.04–0.14 on ext4; 8 MiB 0.36–0.61 and 0.08–0.17; 32 MiB 1.0–1.8 and
/// 0.30–0.66. With a small buffer the bytes are still in the CPU cache when the CRC reads
/// them; a large one is evicted between the copy and the hash. A memory map hashed in
/// place was no better on tmpfs (0.31–0.50: page-table work replaces the copy) and
/// `posix_fadvise(SEQUENTIAL)` changed nothing, so plain `read` with a small buffer is the
/// cheapest correct way (and cannot raise the SIGBUS a map raises when the file shrinks
/// under it).
const CRC_BUF_MAX: usize = 1 << 20;

/// CRC32 of a file's contents, read once in pieces of `buf` bytes (at most
/// [`CRC_BUF_MAX`], at least 4 KiB).
pub(super) fn file_crc32(path: &Path, buf: usize) -> std::io::Result<u32> {
    let mut h = crc32fast::Hasher::new();
    let mut f = std::fs::File::open(path)?;
    let mut b = vec![0u8; buf.clamp(4096, CRC_BUF_MAX)];
    loop {
        let n = match f.read(&mut b) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        h.update(&b[..n]);
    }
    Ok(h.finalize())
}

/// Whether `name` is a plain relative path that stays inside the directory it is joined
/// to (no root, no `..`): names come from state files and plugins, which are not trusted.
pub(super) fn is_inside(name: &str) -> bool {
    scr_plugin::redfile::stays_inside(name)
}

/// How a file compares with what was recorded of it.
pub(crate) fn check_file(
    path: &Path,
    size: u64,
    crc32: Option<u32>,
    use_crc: bool,
    buf: usize,
) -> std::result::Result<(), String> {
    let meta = stat_file(path, false, buf).map_err(|e| e.to_string())?;
    if meta.size != size {
        return Err(format!("{} bytes, {size} recorded", meta.size));
    }
    if let Some(want) = crc32.filter(|_| use_crc) {
        let got = file_crc32(path, buf).map_err(|e| e.to_string())?;
        if got != want {
            return Err(format!("CRC32 {got:08x}, {want:08x} recorded"));
        }
    }
    Ok(())
}

/// Verify this rank's files of `rec` in `dir`: each exists, is a regular file of the
/// recorded size and (with `use_crc`, when one was recorded) has the recorded CRC32. The
/// error names the rank, the file and what differs.
pub(super) fn verify_dataset(
    rank: u32,
    rec: &DatasetRecord,
    dir: &Path,
    use_crc: bool,
    buf: usize,
) -> std::result::Result<(), String> {
    for f in &rec.files {
        if !is_inside(&f.name) {
            return Err(format!(
                "rank {rank}: file name `{}` in the filemap leaves the dataset directory",
                f.name
            ));
        }
        check_file(&dir.join(&f.name), f.size, f.crc32, use_crc, buf)
            .map_err(|why| format!("rank {rank}: {}: {why}", dir.join(&f.name).display()))?;
    }
    Ok(())
}

/// Check what a scheme says it rebuilt on this rank before the host records it: every
/// file inside `dir`, the names and sizes this rank's own record lists (when it still
/// has one), and each file's size and CRC32 on disk against the CRC carried in the
/// redundancy data and the one recorded. Returns the records to keep.
///
/// A rebuilt file's CRC32 is always checked when one is known (whatever
/// `crc_on_restart` says: the rebuild just wrote it, the read is cheap next to that);
/// with `crc_expected` (the dataset was written with CRC32s), a rebuilt file that comes
/// without one is refused.
pub(crate) fn verify_rebuilt(
    rank: u32,
    metas: &[FileMeta],
    own: Option<&DatasetRecord>,
    dir: &Path,
    crc_expected: bool,
    buf: usize,
) -> std::result::Result<Vec<super::FileRecord>, String> {
    let mut out = Vec::with_capacity(metas.len());
    for m in metas {
        let name = relative_to(dir, m.path.as_str());
        if !is_inside(&name) {
            return Err(format!(
                "rank {rank}: the scheme rebuilt `{}`, outside the dataset directory {}",
                m.path,
                dir.display()
            ));
        }
        let recorded = own.and_then(|r| r.files.iter().find(|f| f.name == name));
        if own.is_some() && recorded.is_none() {
            return Err(format!(
                "rank {rank}: the scheme rebuilt `{name}`, which this rank never wrote"
            ));
        }
        let crc = m.crc32.into_option();
        if let Some(r) = recorded {
            if r.size != m.size || (r.crc32.is_some() && crc.is_some() && r.crc32 != crc) {
                return Err(format!(
                    "rank {rank}: {name}: the redundancy data describes {} bytes, CRC32 {:08x}; the filemap recorded {} bytes, CRC32 {:08x}",
                    m.size,
                    crc.unwrap_or_default(),
                    r.size,
                    r.crc32.unwrap_or_default()
                ));
            }
        }
        let want = crc.or(recorded.and_then(|r| r.crc32));
        if want.is_none() && crc_expected {
            return Err(format!(
                "rank {rank}: the scheme gave no CRC32 for rebuilt {name}, so it cannot be checked"
            ));
        }
        check_file(&dir.join(&name), m.size, want, true, buf)
            .map_err(|why| format!("rank {rank}: rebuilt {}: {why}", dir.join(&name).display()))?;
        out.push(super::FileRecord {
            name,
            size: m.size,
            mode: m.mode,
            mtime: (m.mtime_sec, m.mtime_nsec),
            crc32: want,
        });
    }
    if let Some(r) = own {
        if let Some(missing) = r
            .files
            .iter()
            .find(|f| !out.iter().any(|o| o.name == f.name))
        {
            return Err(format!(
                "rank {rank}: the scheme did not rebuild {}",
                missing.name
            ));
        }
    }
    Ok(out)
}

/// Add to `rec` the redundancy files `scheme` declares for it in `dir` (keeping those
/// already recorded). The caller saves `rec` in the filemap before the scheme writes
/// them: a crash or a failed apply or rebuild then leaves no file the next init cannot
/// find and delete. Not collective.
pub(super) fn declare_redundancy(
    scheme: &crate::registry::LoadedScheme,
    rec: &mut DatasetRecord,
    dir: &Path,
) -> Result<()> {
    let names = scheme
        .raw()
        .redundancy_files(&dataset_files(rec, dir))
        .into_result()
        .map_err(|e| ScrError::from(scheme.error("redundancy_files", e)))?;
    for name in names.iter().map(|p| relative_to(dir, p.as_str())) {
        if !rec.redundancy.contains(&name) {
            rec.redundancy.push(name);
        }
    }
    Ok(())
}

/// The plugin's view of a dataset held in `dir`.
pub(crate) fn dataset_files(rec: &DatasetRecord, dir: &Path) -> DatasetFiles {
    DatasetFiles {
        dataset_id: rec.id,
        dir: dir.display().to_string().into(),
        files: rec.files.iter().map(|f| file_meta(f, dir)).collect(),
    }
}

fn file_meta(f: &super::FileRecord, dir: &Path) -> FileMeta {
    FileMeta {
        path: dir.join(&f.name).display().to_string().into(),
        size: f.size,
        mode: f.mode,
        uid: 0,
        gid: 0,
        mtime_sec: f.mtime.0,
        mtime_nsec: f.mtime.1,
        atime_sec: f.mtime.0,
        atime_nsec: f.mtime.1,
        crc32: f.crc32.map_or(RNone, RSome),
    }
}

/// Tag of the sparse exchange that hands a lost rank its dataset record (two tags,
/// alternating between consecutive datasets: see [`comm::sparse_exchange`]).
const TEMPLATE_TAG: i32 = 7010;

/// Tag of the sparse exchange of distribute offers.
const OFFER_TAG: i32 = 7030;

/// What makes two records of one dataset id the same dataset.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Identity {
    name: String,
    checkpoint_id: Option<u64>,
    world_size: u32,
    scheme: String,
    store: String,
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

/// What every rank knows about the holders of one cached dataset.
struct Holders {
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
struct Restore {
    id: u64,
    /// The dataset's name (for messages).
    name: String,
    /// The record of this rank's set: descriptor, members, scheme, store.
    record: DatasetRecord,
    /// The set's communicator.
    host: MpiHost,
    /// The scheme the dataset was protected with, as this rank's member.
    scheme: LoadedScheme,
    /// The dataset's directory in cache (created private and checked).
    dir: PathBuf,
}

impl Runtime {
    /// Move, verify and rebuild everything the cache holds; drop what cannot be saved.
    pub(super) fn restore_cache(&mut self) -> Result<()> {
        if self.config.get(settings::DISTRIBUTE) {
            self.distribute()?;
        } else {
            self.purge_at_init()?;
        }
        self.filemap = match Filemap::load(&self.cntl_dir, self.rank) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!("{e}; treating this rank's cache as lost");
                Filemap {
                    rank: self.rank,
                    datasets: BTreeMap::new(),
                }
            }
        };
        // datasets that never completed (a crash inside an output) are garbage
        let incomplete: Vec<DatasetRecord> = self
            .filemap
            .datasets
            .values()
            .filter(|d| !d.complete)
            .cloned()
            .collect();
        let mut local = Ok(());
        for d in &incomplete {
            if let Err(e) = self.remove_local(d) {
                local = Err(e);
            }
        }
        self.agree(local)?;
        self.continue_ids();

        // Which datasets the cache holds, agreed without gathering records: the ids are
        // walked from the largest down by max-reductions, and for each id the lowest
        // holder's identity is broadcast and compared by every other holder (see
        // [`Runtime::holders_of`]). Per rank and dataset: a few reductions and one
        // broadcast of about 100 bytes (was: every rank's records, ~470 bytes each, on
        // every rank — O(P)).
        // (id + 1 encoded, 0: none; restoring id only changes this rank's record of id,
        // never of a smaller one, so the walk sees every id held at the start)
        let mut below = u64::MAX;
        let mut round = 0i32;
        loop {
            let mine = self
                .filemap
                .datasets
                .keys()
                .map(|&id| id.saturating_add(1))
                .filter(|&e| e < below)
                .max()
                .unwrap_or(0);
            let next = self.max_u64(mine);
            if next == 0 {
                break;
            }
            below = next;
            let id = next - 1;
            let holders = self.holders_of(id);
            if let Some(why) = self.unrestorable(&holders) {
                // not this job's to rebuild: leave it alone (eviction removes it in time)
                self.skipped.push(id);
                self.warn(&format!(
                    "dataset {id} ({}) is not restored: {why}",
                    holders.first.name
                ));
                continue;
            }
            self.restore_dataset(id, &holders, TEMPLATE_TAG + round % 2)?;
            round += 1;
        }
        Ok(())
    }

    /// SCR's SCR_DISTRIBUTE=0: no restart from cache; the cache is purged on every node
    /// (agreed) and the run restarts from the prefix (fetch). Rank 0 takes CACHE off
    /// every dataset in the flush file.
    fn purge_at_init(&mut self) -> Result<()> {
        let purged = self.purge_cache();
        self.agree(purged)?;
        if self.rank == 0 {
            // every node's cache was purged: no dataset is in cache any more
            let cached: Vec<u64> = super::prefix::FlushFile::load(&self.prefix)
                .map(|f| {
                    f.datasets
                        .iter()
                        .filter(|(_, (at, _))| at.iter().any(|l| l == "CACHE"))
                        .map(|(&id, _)| id)
                        .collect()
                })
                .unwrap_or_default();
            for id in cached {
                if let Err(e) = super::prefix::FlushFile::remove_location(&self.prefix, id, "CACHE")
                {
                    tracing::warn!("{e}");
                }
            }
        }
        Ok(())
    }

    /// The next dataset and checkpoint ids (collective): they continue after the largest
    /// used anywhere, in the cache or, recorded by rank 0, in the prefix (so a lost cache
    /// never brings an old id back).
    fn continue_ids(&mut self) {
        let ids = if self.rank == 0 {
            super::Ids::load(&self.prefix)
        } else {
            super::Ids::default()
        };
        let cache_dataset = self.filemap.datasets.keys().max().copied().unwrap_or(0);
        let cache_ckpt = self
            .filemap
            .datasets
            .values()
            .filter_map(|d| d.checkpoint_id)
            .max()
            .unwrap_or(0);
        self.next_dataset = self.max_u64(cache_dataset.max(ids.dataset)) + 1;
        self.next_checkpoint = self.max_u64(cache_ckpt.max(ids.checkpoint)) + 1;
    }

    /// What the holders of dataset `id` agree on (collective): the identity of the
    /// lowest holder's record, the lowest holder whose record differs from it, whether
    /// any holder recorded a CRC32. Per rank: 3–4 reductions and a broadcast of one
    /// identity (or two, when records differ) — independent of P.
    fn holders_of(&self, id: u64) -> Holders {
        let own = self.filemap.datasets.get(&id);
        let first_rank =
            comm::min_u64(&self.world, own.map_or(u64::MAX, |_| self.rank.into())) as u32;
        let first: Identity = serde_json::from_slice(&comm::broadcast_from(
            &self.world,
            first_rank as i32,
            &own.map(|r| serde_json::to_vec(&Identity::of(r)).expect("identity serializes"))
                .unwrap_or_default(),
        ))
        // (the same bytes on every rank, so the same outcome: an identity no record
        // has, which makes every holder's record differ and the dataset be refused)
        .unwrap_or_else(|e| Identity {
            name: format!("(rank {first_rank}'s record could not be read: {e})"),
            checkpoint_id: None,
            world_size: 0,
            scheme: String::new(),
            store: String::new(),
        });
        let differs = own.is_some_and(|r| Identity::of(r) != first);
        let other_rank = comm::min_u64(
            &self.world,
            if differs { self.rank.into() } else { u64::MAX },
        );
        let other = (other_rank != u64::MAX).then(|| {
            let name = comm::broadcast_from(
                &self.world,
                other_rank as i32,
                own.map(|r| r.name.as_bytes()).unwrap_or_default(),
            );
            (
                other_rank as u32,
                String::from_utf8_lossy(&name).into_owned(),
            )
        });
        let crc = own.is_some_and(|r| r.files.iter().any(|f| f.crc32.is_some()));
        let crc_expected = !self.all_agree(!crc);
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
        if first.world_size != 0 && first.world_size != self.size {
            return Some(format!(
                "it was written by {} ranks and this job has {}",
                first.world_size, self.size
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
        let own = self.filemap.datasets.get(&id);
        if comm::sum_u64(&self.world, u64::from(own.is_none())) == 0 {
            return own.cloned();
        }
        let color = match own {
            Some(r) => mpi::topology::Color::with_value((r.descriptor.set_id & 0x7fff_ffff) as i32),
            None => mpi::topology::Color::undefined(),
        };
        let mut sends = Vec::new();
        if let (Some(holders), Some(rec)) = (
            comm::split_by_color_with_key(&self.world, color, self.rank as i32),
            own,
        ) {
            let mut here = vec![0u32; holders.size() as usize];
            comm::all_gather_into(&holders, &self.rank, &mut here[..]);
            if holders.rank() == 0 {
                let bytes = serde_json::to_vec(rec).expect("record serializes");
                for &m in &rec.descriptor.members {
                    if m < self.size && !here.contains(&m) {
                        sends.push((m, bytes.clone()));
                    }
                }
            }
        }
        let got = comm::sparse_exchange(&self.world, &sends, tag);
        if own.is_some() {
            return own.cloned();
        }
        // the lowest holder whose record lists this rank (records from several sets
        // mean damaged filemaps; the choice is the one every earlier run made)
        got.into_iter()
            .filter_map(|(_, b)| serde_json::from_slice::<DatasetRecord>(&b).ok())
            .find(|r| r.descriptor.members.contains(&self.rank))
    }

    /// Largest `v` over all ranks.
    fn max_u64(&self, v: u64) -> u64 {
        let mut out = 0u64;
        super::comm::all_reduce_into(
            &self.world,
            &v,
            &mut out,
            mpi::collective::SystemOperation::max(),
        );
        out
    }

    /// Verify (and, through the scheme, rebuild) dataset `id` on every rank, or drop it
    /// everywhere. Collective: every step below that can go differently on some ranks
    /// ends in an agreement before the next collective one.
    fn restore_dataset(&mut self, id: u64, holders: &Holders, tag: i32) -> Result<()> {
        let _dataset = crate::log::dataset_span(id).entered();
        let restore_started = std::time::Instant::now();
        let own = self.filemap.datasets.get(&id).cloned();
        let Some(r) = self.prepare_restore(id, holders, tag) else {
            return Ok(());
        };
        let buf = self.config.get(settings::FILE_BUF_SIZE).max(4096) as usize;
        let check = self.check_cached(&r, own.as_ref(), buf);
        let intact = check.is_ok();
        let Some(mut rebuilding) = self.declare_rebuild(id, &r, own.as_ref()) else {
            return Ok(());
        };
        let outcome = self.recover_verified(
            &r,
            own.as_ref(),
            intact,
            &mut rebuilding,
            holders.crc_expected,
            buf,
        );
        let kept = self.all_agree(outcome.is_ok());
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
                self.warn(&report);
                self.log_event(crate::events::Event::Failure {
                    what: report.clone(),
                    rank: None,
                });
                self.lost.push(report);
                // this rank's record, or the one made for the rebuild when its cache was
                // lost (holding the redundancy files declared before recover and the
                // names recover returned): what the scheme wrote here goes with it,
                // inside the dataset directory only
                self.remove_local(&rebuilding)
            }
        };
        self.agree(local)
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
            .map(|t| self.dataset_dir(&t.descriptor.store, id));
        // every level from the store down 0700 and checked, none followed through a link
        // (a rebuild writes here)
        let dir_ok = match (&template, &dir) {
            (Some(t), Some(d)) => super::create_private_dir(Path::new(&t.descriptor.store), d)
                .map_err(|e| tracing::warn!("{e}"))
                .is_ok(),
            _ => false,
        };
        let ready = matches!((&host, &scheme), (Some(_), Some(Ok(_)))) && dir_ok;
        let name = template
            .as_ref()
            .map_or_else(|| holders.first.name.clone(), |r| r.name.clone());
        if !self.all_agree(ready) {
            // keep the data, do not offer it
            let why = match &scheme {
                Some(Err(e)) => e.to_string(),
                _ => "a rank is in no redundancy set for it".to_string(),
            };
            self.skipped.push(id);
            self.warn(&format!("dataset {id} ({name}) is not restored now: {why}"));
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
    fn restore_host(&mut self, template: Option<&DatasetRecord>) -> Option<MpiHost> {
        let set = template.map(|t| Set {
            id: t.descriptor.set_id,
            members: t.descriptor.members.clone(),
        });
        // this rank's failure-group value in the recorded group; the node names for
        // every rank when any rank cannot give one (as when one table was missing)
        let value = template.map(|t| self.group_value(&t.descriptor.group).ok());
        let value = match value {
            _ if !self.all_agree(!matches!(value, Some(None))) => self.node.clone(),
            Some(Some(v)) => v,
            _ => self.node.clone(),
        };
        let formed = template.and_then(|t| {
            self.reddescs.iter().position(|rd| {
                rd.record.set_id == t.descriptor.set_id
                    && rd.record.members == t.descriptor.members
                    && rd.record.group == t.descriptor.group
            })
        });
        let host = if self.all_agree(formed.is_some()) {
            formed.map(|i| self.reddescs[i].host.duplicate())
        } else {
            self.set_host(set.as_ref(), &value)
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
        let member = d.members.iter().position(|&m| m == self.rank).unwrap_or(0);
        self.registry
            .new_scheme(&d.scheme_config(&self.config, member as u32, self.rank))
    }

    /// Verify this rank's cached files before use: a file that is missing, of another
    /// size or (with crc_on_restart) of another CRC32 than recorded makes this rank's
    /// data lost, so the scheme rebuilds it or the dataset is dropped everywhere.
    fn check_cached(
        &mut self,
        r: &Restore,
        own: Option<&DatasetRecord>,
        buf: usize,
    ) -> std::result::Result<(), String> {
        let use_crc = self.config.get(settings::CRC_ON_RESTART);
        let check = match own {
            Some(rec) => verify_dataset(self.rank, rec, &r.dir, use_crc, buf),
            None => Err(format!(
                "rank {}: no record of the dataset (cache lost)",
                self.rank
            )),
        };
        if let (Some(_), Err(why)) = (own, &check) {
            tracing::warn!("dataset {} ({}): {why}; counted as lost", r.id, r.name);
        }
        let unchecked = own.is_some_and(|r| r.files.iter().any(|f| f.crc32.is_none()));
        if use_crc && self.rank == 0 && !self.crc_note_given && unchecked {
            self.crc_note_given = true;
            self.info("cached files without a recorded CRC32 (crc_on_copy = false): only their sizes are checked at restart");
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
            ..r.record.clone()
        });
        let declared = declare_redundancy(&r.scheme, &mut rebuilding, &r.dir).and_then(|()| {
            if own == Some(&rebuilding) {
                Ok(())
            } else {
                self.filemap.datasets.insert(id, rebuilding.clone());
                self.save_filemap()
            }
        });
        if let Err(e) = &declared {
            tracing::warn!("dataset {id} ({}): {e}", r.name);
        }
        if self.all_agree(declared.is_ok()) {
            return Some(rebuilding);
        }
        // nothing was written for the rebuild: forget a record made for it
        if own.is_none() && self.filemap.datasets.remove(&id).is_some() {
            let _ = self.save_filemap();
        }
        self.skipped.push(id);
        self.warn(&format!(
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
    ) -> std::result::Result<Option<Vec<super::FileRecord>>, String> {
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
        let result = r
            .scheme
            .raw()
            .recover(scr_plugin::host_ref(&r.host), &request)
            .into_result();
        let label = format!("{} ({})", r.id, r.name);
        let outcome = self
            .settle_call(&r.host, &r.scheme, "recover", &label, result)
            .map(|v| v.into_vec())
            .map_err(|e| e.to_string());
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
                self.filemap.datasets.insert(r.id, rebuilding.clone());
                if let Err(e) = self.save_filemap() {
                    tracing::warn!("dataset {label}: {e}");
                }
            }
        }
        let scheme = &r.record.descriptor.scheme;
        // the dataset was written with CRC32s when any holder recorded one: then a
        // rebuilt file must come with one too (a rank whose cache is lost has only the
        // scheme's word for its files)
        let outcome = outcome.and_then(|metas| match intact {
            Some(rec) => verify_dataset(self.rank, rec, &r.dir, false, buf)
                .map(|()| None)
                .map_err(|why| format!("{scheme} changed intact files: {why}")),
            None => verify_rebuilt(self.rank, &metas, own, &r.dir, crc_expected, buf)
                .map(Some)
                .map_err(|why| format!("{scheme} rebuilt wrong data: {why}")),
        });
        if let Err(why) = &outcome {
            tracing::warn!("dataset {label}: {why}");
        }
        outcome
    }

    /// Learn on rank 0 which ranks lacked files (`lacking` on this rank: 1 damaged or
    /// missing, 2 the whole cache lost) and which nodes lost their cache, for the log and
    /// the event log's lost nodes (collective). Rank 0 alone logs them: bounded gathers of
    /// the ranks that lacked files and of the nodes lost — see [`comm::gather_some`].
    fn note_lacking_ranks(
        &mut self,
        r: &Restore,
        lacking: Option<u8>,
        kept: bool,
        started: std::time::Instant,
    ) {
        let (ranks, lacking_total) =
            comm::gather_some(&self.world, lacking.as_ref().map(std::slice::from_ref));
        // the lost nodes: one report per node, by its first rank when it lost its cache
        // (a node's ranks lose it together), so the bound counts nodes, not ranks
        let node_lost = lacking == Some(2) && self.first_on_node();
        let (lost, lost_total) =
            comm::gather_some(&self.world, node_lost.then_some(self.node.as_bytes()));
        for (_, b) in &lost {
            self.lost_nodes
                .insert(String::from_utf8_lossy(b).into_owned());
        }
        self.lost_nodes_unnamed = self
            .lost_nodes_unnamed
            .max(lost_total.saturating_sub(lost.len() as u64));
        let rebuilt: Vec<u32> = ranks.iter().map(|(r, _)| *r).collect();
        let more = match lacking_total - rebuilt.len() as u64 {
            0 => String::new(),
            n => format!(" and {n} more"),
        };
        if kept && lacking_total > 0 {
            self.info(&format!(
                "dataset {} ({}): rebuilt the files of ranks {rebuilt:?}{more} through {}",
                r.id, r.name, r.record.descriptor.scheme
            ));
            self.log_event(crate::events::Event::Rebuild {
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
        self.filemap.datasets.insert(r.id, rec);
        self.save_filemap()
    }

    /// Why a dataset is dropped everywhere, the same text on every rank (collective):
    /// which ranks lacked files and which sets' rebuild failed. Two bounded gathers to
    /// rank 0 — the ranks whose files were lost or damaged, the ranks whose rebuild failed
    /// with their set — and the report broadcast from rank 0: per rank O(log P) steps.
    fn dropped_report(
        &self,
        r: &Restore,
        check: &std::result::Result<(), String>,
        failed: Option<&String>,
    ) -> String {
        let (checks, checks_total) =
            comm::gather_some(&self.world, check.as_ref().err().map(|e| e.as_bytes()));
        let failure = failed
            .map(|why| serde_json::to_vec(&(r.record.descriptor.set_id, why)).expect("serializes"));
        let (fails, fails_total) = comm::gather_some(&self.world, failure.as_deref());
        let mut report = String::new();
        if self.rank == 0 {
            let mut ranks: Vec<String> = checks
                .iter()
                .map(|(_, b)| String::from_utf8_lossy(b).into_owned())
                .collect();
            if checks_total > ranks.len() as u64 {
                ranks.push(format!("and {} more", checks_total - ranks.len() as u64));
            }
            let mut failed: BTreeMap<u64, String> = BTreeMap::new();
            for (set, why) in fails
                .iter()
                .filter_map(|(_, b)| serde_json::from_slice::<(u64, String)>(b).ok())
            {
                failed.entry(set).or_insert(why);
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
                "dataset {} ({}) cannot be restored and was dropped: lost or damaged files: [{}]; {}",
                r.id,
                r.name,
                ranks.join("; "),
                sets.join("; ")
            );
        }
        String::from_utf8_lossy(&comm::broadcast_from(&self.world, 0, report.as_bytes()))
            .into_owned()
    }

    /// Discard a dataset whose apply failed on some rank (every rank calls this; `desc`
    /// is the redundancy descriptor whose scheme ran apply, `None` when apply never ran):
    /// the scheme's `remove` takes what it wrote on this member, its temporary files
    /// included (names only it knows), then the dataset goes by its recorded names —
    /// the redundancy files declared before apply among them.
    pub(super) fn discard_failed_apply(
        &mut self,
        desc: Option<usize>,
        rec: &DatasetRecord,
    ) -> Result<()> {
        if let Some(desc) = desc {
            let rd = &self.reddescs[desc];
            let dir = self.dataset_dir(&rec.descriptor.store, rec.id);
            let result = rd
                .scheme
                .raw()
                .remove(scr_plugin::host_ref(&rd.host), &dataset_files(rec, &dir))
                .into_result();
            let label = format!("{} ({})", rec.id, rec.name);
            if let Err(e) = self.settle_call(&rd.host, &rd.scheme, "remove", &label, result) {
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
    pub(super) fn remove_local(&mut self, rec: &DatasetRecord) -> Result<()> {
        let dir = self.dataset_dir(&rec.descriptor.store, rec.id);
        if rec.complete && self.config.get(settings::CRC_ON_DELETE) {
            // SCR's SCR_CRC_ON_DELETE: a last check that tells the user the cache
            // damaged data while holding it (the files go either way)
            let buf = self
                .config
                .get(settings::FILE_BUF_SIZE)
                .clamp(4096, 64 << 20) as usize;
            if let Err(why) = verify_dataset(self.rank, rec, &dir, true, buf) {
                tracing::warn!(
                    "crc_on_delete: dataset {} ({}) was damaged in cache before it was deleted: {why}", rec.id, rec.name
                );
            }
        }
        remove_files(&dir, &file_names(rec))?;
        self.filemap.datasets.remove(&rec.id);
        if self.rank == 0 && rec.complete {
            if let Err(e) = super::prefix::FlushFile::remove_location(&self.prefix, rec.id, "CACHE")
            {
                tracing::warn!("{e}");
            }
        }
        self.save_filemap()
    }

    /// Delete every dataset the cache of this node holds, for any rank, with the
    /// filemaps that list them (`distribute = false`). The first rank on each node does
    /// it; only names inside their dataset directories are removed.
    fn purge_cache(&mut self) -> Result<()> {
        if !self.first_on_node() {
            return Ok(());
        }
        let mut purged = BTreeSet::new();
        for (owner, path) in Filemap::owners_in(&self.cntl_dir) {
            if let Ok(map) = Filemap::load(&self.cntl_dir, owner) {
                for rec in map.datasets.values() {
                    let dir = self.dataset_dir(&rec.descriptor.store, rec.id);
                    remove_files(&dir, &file_names(rec))?;
                    // outputs never flushed are named too: they are gone for good
                    purged.insert(format!(
                        "{}{}",
                        rec.name,
                        if rec.output { " (output)" } else { "" }
                    ));
                }
            }
            Filemap::remove(&self.cntl_dir, owner).map_err(|e| ScrError::Io {
                path: path.clone(),
                source: e,
            })?;
        }
        if !purged.is_empty() {
            tracing::warn!(
                "distribute = false: purged the cache of node {}: {}; restarting from the prefix",
                self.node,
                purged.into_iter().collect::<Vec<_>>().join(", ")
            );
        }
        Ok(())
    }

    /// Delete a dataset on this rank (every rank calls it for a collective delete).
    pub(super) fn delete_dataset(&mut self, rec: &DatasetRecord) -> Result<()> {
        self.injected_failure("delete", rec.id)?;
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
    pub(super) fn evict(&mut self, store: &str, room: u64, keep: Option<u64>) -> Result<()> {
        let limit = self
            .config
            .store(store)
            .map(|s| self.config.store_count(s))
            .unwrap_or_else(|| self.config.get(settings::CACHE_SIZE))
            .max(1);
        let held: Vec<u64> = self
            .filemap
            .datasets
            .values()
            .filter(|d| d.descriptor.store == store)
            .map(|d| d.id)
            .collect();
        let may_go = self.may_evict(store, keep);
        let holders = self.agree_on_evictable(&held, &may_go);
        let mut count = holders.len() as u64;
        let mut victims = Vec::new();
        for (&id, &evictable) in &holders {
            if count + room <= limit {
                break;
            }
            if evictable {
                victims.push(id);
                count -= 1;
            }
        }
        let mut local = Ok(());
        for id in victims {
            let Some(victim) = self.filemap.datasets.get(&id).cloned() else {
                continue;
            };
            self.info(&format!(
                "evicting dataset {} ({}) from {store}",
                victim.id, victim.name
            ));
            if let Err(e) = self.remove_local(&victim) {
                local = Err(e);
            }
        }
        self.agree_changed("evicting from cache", local)
    }

    /// The datasets of `store` this rank could give up: not a restart candidate, not
    /// `keep`, not being flushed, and, for an output, its flush recorded for every rank —
    /// by this run's synchronous flush, or in the index (a background flush; the index is
    /// read at most once, and only when an output is a candidate).
    fn may_evict(&self, store: &str, keep: Option<u64>) -> Vec<u64> {
        let protected = [self.restart_candidate_any(), self.restart_candidate(), keep];
        let flushing = self.flushing_ids();
        let flushed = lock(&self.flushing.flushed).clone();
        let index = std::cell::OnceCell::new();
        let in_prefix = |id: u64| {
            flushed.contains(&id)
                || index
                    .get_or_init(|| super::prefix::Index::load(&self.prefix).ok())
                    .as_ref()
                    .and_then(|ix| ix.datasets.get(&id))
                    .is_some_and(|e| e.complete && e.failed.is_none())
        };
        self.filemap
            .datasets
            .values()
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
            let next = comm::min_u64(&self.world, mine);
            if next == u64::MAX {
                break;
            }
            above = next;
            let id = next - 1;
            let ok = !held.contains(&id) || may_go.contains(&id);
            holders.insert(id, self.all_agree(ok));
        }
        holders
    }

    /// The newest complete checkpoint, skipped or not.
    fn restart_candidate_any(&self) -> Option<u64> {
        self.filemap
            .datasets
            .values()
            .filter(|d| d.complete && d.checkpoint_id.is_some())
            .max_by_key(|d| d.checkpoint_id)
            .map(|d| d.id)
    }

    /// Move filemaps and files left on one node for ranks that now run on another
    /// (SCR's distribute step). Transfers run one at a time in an order every rank
    /// agrees on, so no two can deadlock.
    fn distribute(&mut self) -> Result<()> {
        let mut offers: Vec<(u32, u32)> = Vec::new(); // (owner, holder)
        if self.first_on_node() {
            for (owner, _) in Filemap::owners_in(&self.cntl_dir) {
                // an owner of this job that runs on another node now
                let moved = owner < self.size && !self.node_ranks.contains(&owner);
                if moved {
                    offers.push((owner, self.rank));
                }
            }
        }
        // Each offer goes to its owner alone (a sparse exchange: per rank its own offers
        // plus one non-blocking barrier; was an all-gather of every offer, O(P)). The
        // holder sends and the owner receives its pairs in the order of (owner, holder):
        // the pair first in that order among those left is next on both its ranks, so
        // the blocking transfers cannot deadlock.
        let sends: Vec<(u32, Vec<u8>)> = offers
            .iter()
            .map(|&(owner, _)| (owner, vec![1u8])) // (never an empty buffer to MPI)
            .collect();
        let mut all: Vec<(u32, u32)> = offers;
        all.extend(
            comm::sparse_exchange(&self.world, &sends, OFFER_TAG)
                .into_iter()
                .map(|(holder, _)| (self.rank, holder)),
        );
        all.sort();
        let mut received = BTreeSet::new();
        for (owner, holder) in all {
            if self.rank == holder {
                self.send_filemap(owner)?;
            } else if self.rank == owner {
                self.receive_filemap(holder)?;
                received.insert(holder);
            }
        }
        if !received.is_empty() {
            self.info(&format!(
                "rank {} received its cache from rank(s) {received:?}",
                self.rank
            ));
        }
        Ok(())
    }

    /// Whether a store's files are visible from every node (nothing to move).
    fn store_is_global(&self, store: &str) -> bool {
        self.config
            .store(store)
            .is_some_and(|s| self.config.store_view(s) == crate::config::View::Global)
    }

    /// Send `owner`'s filemap and node-local files to it; delete them here only once the
    /// owner confirmed it holds them.
    fn send_filemap(&mut self, owner: u32) -> Result<()> {
        let peer = self.world.process_at_rank(owner as i32);
        let map = Filemap::load(&self.cntl_dir, owner).unwrap_or(Filemap {
            rank: owner,
            datasets: BTreeMap::new(),
        });
        send_blob(
            &peer,
            &serde_json::to_vec(&map).expect("filemap serializes"),
        );
        let mut buf = vec![0u8; MOVE_PIECE];
        for rec in map.datasets.values() {
            if self.store_is_global(&rec.descriptor.store) {
                continue;
            }
            let dir = self.dataset_dir(&rec.descriptor.store, rec.id);
            for name in file_names(rec) {
                let path = dir.join(&name);
                // a name that leaves the dataset directory, or a link on the way, is
                // never read: sent as gone
                let file = inside_dir(&dir, &name)
                    .map_err(|e| {
                        tracing::warn!("{e}; not sent");
                        std::io::Error::other(e)
                    })
                    .and_then(|()| {
                        scr_plugin::cachefs::open_file(&path).map_err(std::io::Error::other)
                    });
                let len = file
                    .as_ref()
                    .ok()
                    .and_then(|f| f.metadata().ok())
                    .map_or(u64::MAX, |m| m.len());
                comm::send(&peer, &len, MOVE_TAG);
                // (len is u64::MAX exactly when the file could not be opened or stat'ed)
                let mut f = match file {
                    Ok(f) if len != u64::MAX => f,
                    _ => continue, // this file is gone; the owner's verification will notice
                };
                let mut ok = true;
                let mut left = len;
                while left > 0 {
                    let n = left.min(MOVE_PIECE as u64) as usize;
                    if ok && f.read_exact(&mut buf[..n]).is_err() {
                        ok = false;
                    }
                    if !ok {
                        buf[..n].fill(0);
                    }
                    comm::send(&peer, &buf[..n], MOVE_TAG);
                    left -= n as u64;
                }
                // whether the bytes sent are the file's: the owner drops it otherwise
                comm::send(&peer, &u8::from(ok), MOVE_TAG);
            }
        }
        let mut ack = 0u8;
        comm::receive_into(&peer, &mut ack, MOVE_TAG);
        if ack != 1 {
            tracing::warn!(
                "rank {owner} could not store its moved files; they stay on node {}",
                self.node
            );
            return Ok(());
        }
        for rec in map.datasets.values() {
            if !self.store_is_global(&rec.descriptor.store) {
                let dir = self.dataset_dir(&rec.descriptor.store, rec.id);
                if let Err(e) = remove_files(&dir, &file_names(rec)) {
                    tracing::warn!("{e}");
                }
            }
        }
        // with its journal: the records moved with the map
        if let Err(e) = Filemap::remove(&self.cntl_dir, owner) {
            tracing::warn!("{e}");
        }
        Ok(())
    }

    /// Receive this rank's filemap and files from `holder`: the records are saved first
    /// (nothing sits in cache unrecorded), then the files; every message is consumed even
    /// when writing fails, so the holder never waits forever, and the holder deletes its
    /// copies only after the acknowledgement.
    fn receive_filemap(&mut self, holder: u32) -> Result<()> {
        let peer = self.world.process_at_rank(holder as i32);
        let blob = recv_blob(&peer);
        let moved: Filemap = match serde_json::from_slice(&blob) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!("filemap moved from rank {holder} is unreadable: {e}");
                Filemap {
                    rank: self.rank,
                    datasets: BTreeMap::new(),
                }
            }
        };
        let mut mine = Filemap::load(&self.cntl_dir, self.rank).unwrap_or(Filemap {
            rank: self.rank,
            datasets: BTreeMap::new(),
        });
        for rec in moved.datasets.values() {
            mine.datasets.entry(rec.id).or_insert_with(|| rec.clone());
        }
        let mut ok = mine
            .save(&self.cntl_dir)
            .map_err(|e| tracing::warn!("{e}"))
            .is_ok();
        let mut buf = vec![0u8; MOVE_PIECE];
        for rec in moved.datasets.values() {
            if self.store_is_global(&rec.descriptor.store) {
                continue;
            }
            let dir = self.dataset_dir(&rec.descriptor.store, rec.id);
            for name in file_names(rec) {
                ok &= self.receive_moved_file(&peer, rec, &dir, &name, &mut buf);
            }
        }
        comm::send(&peer, &u8::from(ok), MOVE_TAG);
        Ok(())
    }

    /// Receive one moved file `name` of `rec` into `dir` (inside it only, every level
    /// private, never through a link), consuming every message even when writing fails.
    /// False when the holder sent it whole but it could not be stored here.
    fn receive_moved_file(
        &self,
        peer: &mpi::topology::Process<'_>,
        rec: &DatasetRecord,
        dir: &Path,
        name: &Path,
        buf: &mut [u8],
    ) -> bool {
        let mut len = 0u64;
        comm::receive_into(peer, &mut len, MOVE_TAG);
        if len == u64::MAX {
            // the holder could not read it: nothing follows, nothing to store
            return true;
        }
        let path = dir.join(name);
        // the name must stay inside the dataset directory; every directory level
        // is created 0700 and never followed through a link, the file 0600 and
        // never opened through one
        let base = Path::new(&rec.descriptor.store);
        let mut out = inside_dir(dir, name)
            .and_then(|()| {
                let parent = path.parent().unwrap_or(dir);
                super::create_private_dir(base, parent).map_err(|e| e.to_string())
            })
            .and_then(|()| scr_plugin::cachefs::create_file(&path).map_err(|e| e.to_string()))
            .map_err(|e| tracing::warn!("{e}"))
            .ok();
        let mut left = len;
        while left > 0 {
            let n = left.min(MOVE_PIECE as u64) as usize;
            comm::receive_into(peer, &mut buf[..n], MOVE_TAG);
            if let Some(f) = out.as_mut() {
                if f.write_all(&buf[..n]).is_err() {
                    out = None;
                }
            }
            left -= n as u64;
        }
        let mut sender_ok = 0u8;
        comm::receive_into(peer, &mut sender_ok, MOVE_TAG);
        // an application file gets back the mode it was recorded with (the
        // application's own, which a flush restores); redundancy files stay 0600
        let mode = rec.files.iter().find(|f| Path::new(&f.name) == name);
        let stored = sender_ok == 1
            && out.is_some_and(|f| {
                mode.filter(|m| m.mode != 0).is_none_or(|m| {
                    use std::os::unix::fs::PermissionsExt;
                    // (never setuid/setgid/sticky bits from a filemap)
                    f.set_permissions(std::fs::Permissions::from_mode(m.mode & 0o777))
                        .is_ok()
                }) && f.sync_all().is_ok()
            });
        if !stored {
            // a partial or unreadable copy must not pass for the file (only a
            // name inside the dataset directory is removed, through no link)
            if inside_dir(dir, name).is_ok() {
                let _ = remove_files(dir, &[name.to_path_buf()]);
            }
            return sender_ok != 1;
        }
        true
    }
}

/// Delete `names` (relative to `dir`), then every directory from their parents up to
/// `dir` that is left empty. Files already gone are fine.
///
/// A name that would leave `dir` (absolute, or through `..`: a damaged or forged filemap,
/// a rank2file map, a plugin's answer) is never followed: it is skipped with a warning.
///
/// Nothing is deleted through a symbolic link: the dataset directory and every level
/// below it down to the file are judged first (`lstat`), and a link in place of one is
/// refused with an error naming it ([`scr_plugin::cachefs::check_dirs`]).
fn remove_files(dir: &Path, names: &[PathBuf]) -> Result<()> {
    use scr_plugin::cachefs::check_dirs;
    let me = crate::registry::effective_uid();
    if let Some(above) = dir.parent() {
        check_dirs(above, dir, me).map_err(super::cachefs_err)?;
    }
    for name in names {
        if !is_inside(&name.to_string_lossy()) {
            tracing::warn!(
                "`{}` is recorded in {} but leaves it; not deleted",
                name.display(),
                dir.display()
            );
            continue;
        }
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            check_dirs(dir, parent, me).map_err(super::cachefs_err)?;
        }
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(ScrError::Io { path, source: e }),
        }
        let mut parent = path.parent();
        while let Some(p) = parent.filter(|p| p.starts_with(dir) && *p != dir) {
            if std::fs::remove_dir(p).is_err() {
                break; // not empty: another rank's file still lives here
            }
            parent = p.parent();
        }
    }
    let _ = std::fs::remove_dir(dir); // only when empty
    Ok(())
}

/// `Err` naming the file unless `name` (read from a filemap) stays inside `dir`.
fn inside_dir(dir: &Path, name: &Path) -> std::result::Result<(), String> {
    if is_inside(&name.to_string_lossy()) {
        Ok(())
    } else {
        Err(format!(
            "`{}` is recorded in a filemap for {} but leaves it",
            name.display(),
            dir.display()
        ))
    }
}

/// Application and redundancy files of a dataset, relative to its directory.
fn file_names(rec: &DatasetRecord) -> Vec<PathBuf> {
    rec.files
        .iter()
        .map(|f| PathBuf::from(&f.name))
        .chain(rec.redundancy.iter().map(PathBuf::from))
        .collect()
}

/// Send a (never empty: a serialized filemap) blob as one message.
fn send_blob(peer: &mpi::topology::Process<'_>, bytes: &[u8]) {
    comm::send(peer, bytes, MOVE_TAG);
}

/// Receive a blob sized by the message that actually arrived (a matched probe), never
/// by a length the peer claims: another rank's bug cannot make this one allocate more
/// than it was sent.
fn recv_blob(peer: &mpi::topology::Process<'_>) -> Vec<u8> {
    comm::receive_vec(peer, MOVE_TAG)
}
