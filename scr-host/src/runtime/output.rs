//! Output: a dataset from start_output to complete_output — its files routed into the cache
//! and recorded before they exist, checked across ranks (names, sizes, CRC32s), protected
//! by the descriptor's scheme and committed, then flushed when due.

use super::cache::Cache;
use super::collective::Collective;
use super::descriptors::Descriptors;
use super::evict::evictor;
use super::flush::flusher;
use super::flush::Flushing;
use super::job::Job;
use super::policy::Policy;
use super::restart::restarter;
use super::restart::state::RestartState;
use super::topology::Topology;
use super::TestHooks;
use crate::config::Config;
use crate::registry::Registry;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

mod background;
mod bypass;
mod record;

pub(in crate::runtime) use background::Protection;

use super::world::World;
use super::{first_failure, io_err, names, NameCheck, OutputFlags, Result, ScrError};
use crate::config::settings;
use crate::layout::relative_to;
use crate::private_dir::{cachefs_err, create_private_dir, lexical_normalize};
use crate::state::filemap::DatasetRecord;
use crate::state::prefix;

/// The dataset being written.
pub(in crate::runtime) struct Output {
    record: DatasetRecord,
    desc: usize,
    started: Instant,
    /// This rank's redundancy file names (relative), asked of the scheme once at
    /// start_output so route_file can refuse them without asking per file.
    redundancy_names: Vec<String>,
    /// The names routed so far (`record.files`' names), so that a name routed again is
    /// found without a scan of every file.
    routed: HashSet<String>,
    /// A bypass dataset routed a name that already existed in the prefix (see
    /// `bypass`).
    overwrites: bool,
}

impl Output {
    /// The dataset's name.
    pub(in crate::runtime) fn name(&self) -> &str {
        &self.record.name
    }

    /// The dataset's record as routed so far.
    pub(in crate::runtime) fn record(&self) -> &DatasetRecord {
        &self.record
    }
}

/// Why `start_output(name, flags)` is refused on this rank, if it is (collective: rank
/// 0's arguments are broadcast over `world`). This rank's own arguments and state come
/// first (the more precise reason: `restarting`, a restart is being read; `writing`, a
/// dataset is being written), then whether they are rank 0's; `refused` is a reason the
/// caller found already (an API-level check). Shared by the running runtime and a
/// disabled one ([`super::Disabled`]), which refuse in the same words.
pub(in crate::runtime) fn output_refused(
    world: &dyn World,
    name: &str,
    flags: OutputFlags,
    refused: Option<String>,
    restarting: bool,
    writing: bool,
) -> Result<()> {
    let mine = format!(
        "{name}\0{}{}",
        u8::from(flags.checkpoint),
        u8::from(flags.output)
    );
    let root = String::from_utf8_lossy(&world.broadcast_bytes(mine.as_bytes())).into_owned();
    if let Some(why) = refused {
        Err(ScrError::Usage(format!("start_output: {why}")))
    } else if name.len() >= 1024 {
        Err(ScrError::Usage(format!(
            "start_output: the dataset name is {} bytes; names must be shorter than SCR_MAX_FILENAME (1024)",
            name.len()
        )))
    } else if restarting {
        Err(ScrError::Usage(
            "start_output: a restart is in progress; call complete_restart first".into(),
        ))
    } else if writing {
        Err(ScrError::Usage(
            "start_output: a dataset is already being written; call complete_output first".into(),
        ))
    } else if name.is_empty() || name.contains('/') {
        Err(ScrError::Usage(format!(
            "start_output: dataset name `{name}` must be non-empty and contain no `/`"
        )))
    } else if root != mine {
        let (root_name, root_flags) = root.split_once('\0').unwrap_or((&root, ""));
        Err(ScrError::Usage(format!(
            "start_output: rank {} passed dataset `{name}` with flags (checkpoint, output) {}{}, rank 0 passed `{root_name}` with {root_flags}; every process must pass the same name and flags",
            world.rank(),
            u8::from(flags.checkpoint),
            u8::from(flags.output)
        )))
    } else {
        Ok(())
    }
}

/// Refuse a name no file can have (empty, or holding a NUL byte) before it is routed:
/// the running runtime and a disabled one ([`super::Disabled`]) in the same words.
pub(in crate::runtime) fn routable(name: &Path) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    if name.as_os_str().is_empty() {
        return Err(ScrError::Usage(
            "route_file: the file name is empty; name a file inside the prefix".into(),
        ));
    }
    if name.as_os_str().as_bytes().contains(&0) {
        return Err(ScrError::Usage(format!(
            "route_file: `{}` contains a NUL byte, which no file name may hold",
            name.display()
        )));
    }
    Ok(())
}

/// Why this rank's part of a `complete_output` failed (agreed as text: the first failing
/// rank's message goes to every rank).
#[derive(Debug, thiserror::Error)]
enum ApplyError {
    /// A routed file could not be read for its CRC32.
    #[error("rank {rank}: {name}: {error}")]
    Unreadable {
        rank: u32,
        name: String,
        error: std::io::Error,
    },
    /// The scheme returned another number of CRC32s than the dataset has files.
    #[error(
        "rank {rank}: plugin {plugin} returned {got} CRC32s from apply_with_crc for {files} files"
    )]
    CrcCount {
        rank: u32,
        plugin: String,
        got: usize,
        files: usize,
    },
    /// The scheme's apply failed.
    #[error(transparent)]
    Apply(#[from] crate::registry::RegistryError),
}

/// Output (start, route, complete) over the parts it uses, borrowed from a runtime or a
/// phase that holds them ([`writer!`]); `bypass` and `record` are written on it too.
pub(in crate::runtime) struct Writer<'a> {
    pub(in crate::runtime) world: &'a mut Collective,
    pub(in crate::runtime) cache: &'a mut Cache,
    pub(in crate::runtime) output: &'a mut Option<Output>,
    pub(in crate::runtime) protection: &'a mut Protection,
    pub(in crate::runtime) restart: &'a mut RestartState,
    pub(in crate::runtime) flushing: &'a mut Flushing,
    pub(in crate::runtime) policy: &'a mut Policy,
    pub(in crate::runtime) config: &'a Config,
    pub(in crate::runtime) registry: &'a Registry,
    pub(in crate::runtime) job: &'a Job,
    pub(in crate::runtime) topo: &'a Topology,
    pub(in crate::runtime) hooks: &'a TestHooks,
    pub(in crate::runtime) descs: &'a mut Descriptors,
}

/// A [`Writer`] over the parts of `$s` (the runtime, or a phase holding them).
macro_rules! writer {
    ($s:expr) => {
        $crate::runtime::output::Writer {
            world: &mut $s.world,
            cache: &mut $s.cache,
            output: &mut $s.output,
            protection: &mut $s.protection,
            restart: &mut $s.restart,
            flushing: &mut $s.flushing,
            policy: &mut $s.policy,
            config: &$s.config,
            registry: &$s.registry,
            job: &$s.job,
            topo: &$s.topo,
            hooks: &$s.hooks,
            descs: &mut $s.descs,
        }
    };
}
pub(in crate::runtime) use writer;

impl Writer<'_> {
    /// Whether `complete_output` leaves the CRC32s of dataset `rec` (descriptor `desc`)
    /// to the background hash: see the module docs. The same on every rank (settings,
    /// the agreed scheme property, the record), before the per-rank check of the
    /// redundancy files the scheme names.
    fn defers_crc(&self, desc: usize, rec: &DatasetRecord) -> bool {
        let rd = &self.descs[desc];
        self.config.get(settings::CRC_ON_COPY)
            && self.config.get(settings::CRC_ON_COPY_DEFER)
            && rd.keeps_no_redundancy()
            && !rd.hashes_in_apply()
            && !super::flush::flush_due(self.config, rec)
    }

    /// Room for one more dataset in `store` (collective): the oldest datasets leave it
    /// until it holds fewer than its count, as in SCR. When the one that must go is being
    /// flushed in the background, its flush is waited for first (said on rank 0: the
    /// application stalls for it), then it goes.
    fn make_room(&mut self, store: &str, for_checkpoint: bool) -> Result<()> {
        let wait_for = evictor!(self).evict(store, 1, None, for_checkpoint)?;
        if wait_for.is_empty() {
            return Ok(());
        }
        let names: Vec<String> = wait_for
            .iter()
            .map(|&id| {
                self.cache
                    .get(id)
                    .map_or_else(|| format!("dataset {id}"), |r| r.name.clone())
            })
            .collect();
        self.topo.warn(&format!(
            "store {store} holds its count ({}) and the dataset that must leave it, {}, is being flushed: waiting for that flush before the next dataset starts (a larger count, or fewer flushes, avoids the wait)",
            self.config.store_count_at(store),
            names.join(", ")
        ));
        flusher!(self).wait_flushes(false);
        evictor!(self).evict(store, 1, None, for_checkpoint)?;
        Ok(())
    }

    /// [`Runtime::start_output_or_refuse`](crate::runtime::Runtime::start_output_or_refuse), over the view.
    pub(in crate::runtime) fn start_output_or_refuse(
        &mut self,
        name: &str,
        flags: OutputFlags,
        refused: Option<String>,
    ) -> Result<()> {
        let pre = self.output_refused(name, flags, refused);
        self.world.begin("start_output", pre)?;
        // the previous dataset's protection ends first: it is a checkpoint (or discarded)
        // before eviction counts the store's datasets
        self.settle_protection(true);
        // background flushes finished everywhere are recorded before eviction looks
        // at what the prefix holds
        flusher!(self).poll_flushes();
        self.cache.poll_crc();
        let checkpoint_id = flags.checkpoint.then_some(self.cache.next_checkpoint());
        let desc = self.descs.for_dataset(flags, self.cache.next_checkpoint());
        let store = self.descs[desc].record().store.clone();
        let bypass = self.descs[desc].record().bypass;
        let id = self.cache.next_dataset();
        let record = DatasetRecord {
            id,
            name: name.to_string(),
            checkpoint_id,
            output: flags.output,
            complete: false,
            descriptor: self.descs[desc].record().clone(),
            files: Vec::new(),
            redundancy: Vec::new(),
            world_size: self.topo.size(),
            crc32_pending: false,
            created: Some(super::now_secs()),
        };
        // a dataset that bypasses the cache takes no room in it
        if !bypass {
            self.make_room(&store, checkpoint_id.is_some())?;
        }
        let local = self.open_dataset(&store, &record);
        if let Err(e) = self.world.agree_on(local) {
            // nothing was written into the dataset yet: forget it on every rank, so the
            // ranks stay in step and the next start_output may try again
            self.cache.forget(id);
            let _ = std::fs::remove_dir(self.job.dataset_dir(&store, id));
            let undone = self.cache.save();
            self.world.changed("start_output", undone)?;
            return Err(e);
        }
        let dir = self.job.dataset_dir(&store, id);
        // (no scheme runs on a dataset that bypasses the cache: no names are its)
        let redundancy_names = if bypass {
            Vec::new()
        } else {
            self.descs[desc]
                .scheme()
                .raw()
                .redundancy_files(&crate::integrity::dataset_files(&record, &dir))
                .into_result()
                .map(|v| v.iter().map(|p| relative_to(&dir, p)).collect())
                .unwrap_or_default()
        };
        *self.output = Some(Output {
            record,
            desc,
            started: Instant::now(),
            redundancy_names,
            routed: HashSet::new(),
            overwrites: false,
        });
        self.topo.info(&format!(
            "start_output {name}: dataset {id}, checkpoint {checkpoint_id:?}, descriptor {}{}",
            self.descs[desc].index(),
            if bypass {
                " (bypass: files are written in the prefix)"
            } else {
                ""
            }
        ));
        Ok(())
    }

    /// Why `start_output(name, flags)` is refused on this rank, if it is (collective; see
    /// [`output_refused`]).
    fn output_refused(
        &self,
        name: &str,
        flags: OutputFlags,
        refused: Option<String>,
    ) -> Result<()> {
        output_refused(
            self.world.as_dyn(),
            name,
            flags,
            refused,
            self.restart.in_progress(),
            self.writing(),
        )
    }

    /// Whether a dataset is being written (between start_output and complete_output).
    fn writing(&self) -> bool {
        self.output.is_some()
    }

    /// This rank's part of `start_output`: create the directory, record the dataset in
    /// the filemap.
    fn open_dataset(&mut self, store: &str, record: &DatasetRecord) -> Result<()> {
        self.job.create_store_dir(store)?;
        let dir = self.job.dataset_dir(store, record.id);
        // every level from the store to the dataset directory 0700, none a link
        create_private_dir(Path::new(store), &dir)?;
        self.cache.put(record.clone());
        self.cache.save()
    }

    /// The prefix-relative form of an application file name, refusing names that leave
    /// the prefix (and so the dataset directory).
    fn relative_name(&self, name: &Path) -> Result<PathBuf> {
        let cwd = std::env::current_dir().map_err(io_err(Path::new(".")))?;
        let full = lexical_normalize(&cwd.join(name));
        let prefix = lexical_normalize(self.job.prefix());
        match full.strip_prefix(&prefix) {
            Ok(rel) if !rel.as_os_str().is_empty() => Ok(rel.to_path_buf()),
            _ => Err(ScrError::Usage(format!(
                "route_file: `{}` resolves to {}, outside the prefix directory {}; name files inside the prefix",
                name.display(),
                full.display(),
                prefix.display()
            ))),
        }
    }

    /// [`Runtime::route_file`](crate::runtime::Runtime::route_file), over the view.
    pub(in crate::runtime) fn route_file(&mut self, name: &Path) -> Result<PathBuf> {
        self.world.usable("route_file")?;
        routable(name)?;
        if !(self.output.is_some() || self.restart.in_progress()) {
            // SCR 3.x: outside a dataset the name comes back unchanged (an application
            // may route every file through SCR, in a phase or not)
            return Ok(name.to_path_buf());
        }
        let rel = self.relative_name(name)?;
        if rel
            .components()
            .next()
            .is_some_and(|c| c.as_os_str() == ".scr")
        {
            return Err(ScrError::Usage(format!(
                "route_file: `{}` is inside the prefix's .scr directory, which holds scr-rs's own state (index, flush file, summaries); name files elsewhere in the prefix",
                name.display()
            )));
        }
        if self
            .output
            .as_ref()
            .is_some_and(|o| o.record.descriptor.bypass)
        {
            self.route_bypass(&rel)
        } else if self.output.is_some() {
            self.route_output(&rel)
        } else {
            restarter!(self).route_restart(name, &rel)
        }
    }

    /// [`Runtime::route_file`](crate::runtime::Runtime::route_file) during output: the path of `rel` in this dataset's cache
    /// directory, recorded and with its directories made (private, never through a link).
    fn route_output(&mut self, rel: &Path) -> Result<PathBuf> {
        let key = rel.to_string_lossy().into_owned();
        let out = self.output.as_ref().expect("during output");
        let dir = self
            .job
            .dataset_dir(&out.record.descriptor.store, out.record.id);
        let path = dir.join(rel);
        // a name the scheme uses for this rank's redundancy data would be overwritten by
        // it (other ranks' names, and names that depend on the files, are checked at
        // complete_output)
        if out.redundancy_names.contains(&key) {
            return Err(ScrError::Usage(format!(
                "route_file: `{key}` is the name of this rank's redundancy file under scheme {}; choose another name",
                self.descs[out.desc].record().scheme
            )));
        }
        // nested names: no directory level that exists is a link (or anyone else's), nor
        // is the file itself a link (the application would write through it); judged
        // before the name is recorded, so a refused name leaves no record
        if let Some(parent) = path.parent() {
            scr_plugin::cachefs::check_dirs(&dir, parent, crate::registry::effective_uid())
                .map_err(cachefs_err)?;
        }
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(ScrError::Usage(format!(
                "route_file: {} is a symbolic link; it is not written through: remove it",
                path.display()
            )));
        }
        self.record_routed(&key)?;
        // each directory of a nested name 0700, never through a link in place of one
        // (from the dataset directory down: start_output made and judged the levels above
        // it, and this runs per file)
        if let Some(parent) = path.parent() {
            scr_plugin::cachefs::create_dirs(&dir, parent, crate::registry::effective_uid())
                .map_err(cachefs_err)?;
        }
        Ok(path)
    }

    /// [`Runtime::complete_output`](crate::runtime::Runtime::complete_output), over the view.
    pub(in crate::runtime) fn complete_output(&mut self, valid: bool) -> Result<bool> {
        let pre = if self.writing() {
            Ok(())
        } else {
            Err(ScrError::Usage(
                "complete_output: no dataset is being written; call start_output first".into(),
            ))
        };
        self.world.begin("complete_output", pre)?;
        flusher!(self).poll_flushes();
        // one background hash at a time: the previous dataset's is recorded first
        self.cache.settle_crc();
        let mut out = self.output.take().expect("checked by every rank");
        let _dataset = crate::log::dataset_span(out.record.id).entered();
        if out.record.descriptor.bypass {
            return self.complete_bypass(out, valid);
        }
        let dir = self
            .job
            .dataset_dir(&out.record.descriptor.store, out.record.id);
        let crc = self.config.get(settings::CRC_ON_COPY);
        let buf = self.config.file_buf_size();
        // With a scheme that hashes the files in the pass it makes over them anyway
        // (`crc32_in_apply`), the CRC32s come back from its apply and the files are not
        // read here: one read of the data instead of two (the configuration is the same
        // on every rank, the scheme's answer agreed at init).
        let fused = crc && self.descs[out.desc].hashes_in_apply();
        // With a scheme that keeps no redundancy data (SINGLE), nothing reads the files
        // here: a background thread hashes them once the dataset is kept (see
        // `deferred_crc`); sizes, modes and mtimes are recorded as always.
        let mut deferred = self.defers_crc(out.desc, &out.record);
        let local_ok =
            valid && self.stat_output_files(&mut out, &dir, crc && !fused && !deferred, buf);
        let named = self.check_output_names(&mut out, &dir, local_ok);
        // a scheme that names redundancy files for this rank's files may carry the
        // CRC32s in them: its apply gets them, read now (this rank's own decision: the
        // apply's outcome is agreed below as always)
        let mut hashed = Ok(());
        if deferred && named.all_valid && !out.record.redundancy.is_empty() {
            deferred = false;
            hashed = self.hash_output_files(&mut out, &dir, buf);
        }
        if let Some(c) = named.clash {
            self.drop_output(&out.record)?;
            // (the clash is agreed: every rank switches alike)
            let later = if out.record.descriptor.bypass {
                String::new()
            } else {
                self.descs.bypass_from_now(out.desc);
                format!(
                    "; the later datasets of checkpoint descriptor {} bypass the cache for the rest of this run (their files go straight to the prefix, where ranks may share a file): set bypass = true on it to keep that from the first",
                    self.descs[out.desc].index()
                )
            };
            return Err(ScrError::Usage(format!(
                "complete_output {}: {c}; dataset discarded{later}",
                out.record.name
            )));
        }
        // (both agreed: every rank starts the background protection, or none)
        if named.all_valid && self.descs[out.desc].background() {
            return self.protect_in_background(out, dir, fused);
        }
        let applied = if named.all_valid {
            hashed
                .and_then(|()| self.apply_output(&mut out, &dir, fused, buf))
                .map_err(|e| e.to_string())
        } else {
            Err(String::new())
        };
        self.finish_output(out, named, applied, deferred)
    }

    /// complete_output's end once this rank's part was applied (`applied`; collective):
    /// agree on it, then keep the dataset (committed, counted, flushed when due) or
    /// discard it on every rank, saying why. `deferred`: its CRC32s are left to the
    /// background hash.
    fn finish_output(
        &mut self,
        mut out: Output,
        named: NameCheck,
        applied: std::result::Result<(), String>,
        deferred: bool,
    ) -> Result<bool> {
        let kept = self.world.all(applied.is_ok());
        // every rank returns the same error: the first failing rank's, by rank
        let apply_error = if named.all_valid && !kept {
            self.world
                .first_failure_credited(applied.err().as_deref())
                .map(|(r, e)| format!("on rank {r}: {e}"))
        } else {
            None
        };
        if !kept {
            return self.discard_output(&out, named, apply_error);
        }
        out.record.crc32_pending = deferred;
        self.keep_output(&mut out)?;
        if deferred {
            let dir = self
                .job
                .dataset_dir(&out.record.descriptor.store, out.record.id);
            let buf = self.config.file_buf_size();
            self.cache.hash_in_background(&out.record, &dir, buf);
        }
        if self.topo.rank() == 0 {
            if let Err(e) =
                prefix::FlushFile::add_location(self.job.prefix(), out.record.id, "CACHE")
            {
                tracing::warn!("{e}");
            }
        }
        flusher!(self).maybe_flush(&out.record)?;
        self.topo.info(&format!(
            "complete_output {}: kept, {:.3} s",
            out.record.name,
            out.started.elapsed().as_secs_f64()
        ));
        Ok(true)
    }

    /// Delete a refused output's files and record on every rank (collective): what a
    /// clash or a failed commit leaves of complete_output.
    fn drop_output(&mut self, rec: &DatasetRecord) -> Result<()> {
        let local = evictor!(self).delete_dataset(rec);
        self.dataset_done(rec.id);
        self.world.changed("complete_output", local)
    }

    /// Discard a dataset that is not kept (collective: every rank is here alike) and say
    /// why: a naming error, the first failing rank's apply error, or a rank said invalid.
    fn discard_output(
        &mut self,
        out: &Output,
        named: NameCheck,
        apply_error: Option<String>,
    ) -> Result<bool> {
        // what the scheme wrote before a failed apply goes too, not only the names
        // it declared (collective: every rank is in this branch alike)
        let local =
            evictor!(self).discard_failed_apply(named.all_valid.then_some(out.desc), &out.record);
        self.dataset_done(out.record.id);
        self.world.changed("complete_output", local)?;
        match (named.naming_error, apply_error) {
            (Some(e), _) => Err(ScrError::Usage(format!(
                "complete_output {}: dataset discarded: {e}",
                out.record.name
            ))),
            (None, Some(e)) => Err(ScrError::Collective(format!(
                "complete_output {}: redundancy could not be applied, dataset discarded: {e}",
                out.record.name
            ))),
            (None, None) => {
                self.topo.info(&format!(
                    "complete_output {}: a rank said invalid, dataset discarded",
                    out.record.name
                ));
                Ok(false)
            }
        }
    }

    /// Record the size, mode, mtime and (with `crc`) CRC32 of each routed file of `out`
    /// as it is in `dir`; false, with a warning naming the file, when one is missing or
    /// unreadable (this rank's part is then invalid).
    fn stat_output_files(&self, out: &mut Output, dir: &Path, crc: bool, buf: usize) -> bool {
        for f in &mut out.record.files {
            match crate::integrity::stat_file(&dir.join(&f.name), crc, buf) {
                Ok(meta) => {
                    f.size = meta.size;
                    f.mode = meta.mode;
                    f.mtime = meta.mtime;
                    f.crc32 = meta.crc32;
                }
                Err(e) => {
                    tracing::warn!("rank {}: {}: {e}", self.topo.rank(), f.name);
                    return false;
                }
            }
        }
        true
    }

    /// Read each routed file of `out` in `dir` for its CRC32: the error names the rank and
    /// the file that could not be read.
    fn hash_output_files(
        &self,
        out: &mut Output,
        dir: &Path,
        buf: usize,
    ) -> std::result::Result<(), ApplyError> {
        for f in &mut out.record.files {
            f.crc32 = Some(
                crate::integrity::file_crc32(&dir.join(&f.name), buf).map_err(|error| {
                    ApplyError::Unreadable {
                        rank: self.topo.rank(),
                        name: f.name.clone(),
                        error,
                    }
                })?,
            );
        }
        Ok(())
    }

    /// Check the names every rank declares and record the redundancy files before they
    /// exist (collective). The names a rank declares are what it routed and, when its
    /// files are there (`local_ok`), the redundancy files the scheme will write (naming is
    /// local to each rank). Two ranks writing one name would overwrite each other (in
    /// cache on a shared node, and in the prefix), as would a routed file named like
    /// another rank's redundancy file: refuse the dataset rather than lose one of them.
    /// Checked by a distributed hash (see names.rs: O(own names) bytes per rank, not
    /// O(P)). Why the dataset is refused is the same on every rank: the first owner's
    /// clash (reductions on the failure path only).
    fn check_output_names(&mut self, out: &mut Output, dir: &Path, local_ok: bool) -> NameCheck {
        let routed: Vec<String> = out.record.files.iter().map(|f| f.name.clone()).collect();
        let scheme_name = self.descs[out.desc].record().scheme.clone();
        let redundancy: Option<Result<Vec<String>>> = local_ok.then(|| {
            let rd = &self.descs[out.desc];
            let ds = crate::integrity::dataset_files(&out.record, dir);
            rd.scheme()
                .raw()
                .redundancy_files(&ds)
                .into_result()
                .map_err(|e| ScrError::from(rd.scheme().error("redundancy_files", e)))
                .map(|red| red.iter().map(|s| relative_to(dir, s)).collect())
        });
        let declared = match &redundancy {
            Some(Ok(red)) => red.as_slice(),
            _ => &[],
        };
        let clashes = names::check_in(self.world.as_dyn(), &routed, declared, &scheme_name);
        let all_valid = self
            .world
            .all(local_ok && clashes.routed.is_none() && clashes.redundancy.is_none());
        if !all_valid {
            let clash =
                first_failure(self.world.as_dyn(), clashes.routed.as_deref()).map(|(_, c)| c);
            let naming_error = match clash {
                None => first_failure(self.world.as_dyn(), clashes.redundancy.as_deref())
                    .map(|(_, e)| e),
                Some(_) => None,
            };
            return NameCheck {
                all_valid,
                clash,
                naming_error,
            };
        }
        // the redundancy files are recorded before they exist, like every file
        let named = redundancy
            .expect("every rank's files are there")
            .and_then(|red| {
                out.record.redundancy = red;
                self.cache.put(out.record.clone());
                self.cache.save()
            });
        let all_valid = self.world.all(named.is_ok());
        // why the redundancy files could not be named and recorded
        let naming_error = (!all_valid)
            .then(|| {
                let mine = named.err().map(|e| e.to_string());
                first_failure(self.world.as_dyn(), mine.as_deref())
                    .map(|(r, e)| format!("on rank {r}: {e}"))
            })
            .flatten();
        NameCheck {
            all_valid,
            clash: None,
            naming_error,
        }
    }

    /// Run the scheme's apply on this rank's files (its part of a collective call; not
    /// agreed: the caller agrees) and record the redundancy files it wrote and, from a
    /// scheme that hashes in apply (`fused`), the files' CRC32s. The error says why.
    fn apply_output(
        &self,
        out: &mut Output,
        dir: &Path,
        fused: bool,
        buf: usize,
    ) -> std::result::Result<(), ApplyError> {
        let rd = &self.descs[out.desc];
        let ds = crate::integrity::dataset_files(&out.record, dir);
        let host = rd.host().services();
        let result = if fused {
            rd.scheme().raw().apply_with_crc(host, &ds).into_result()
        } else {
            rd.scheme()
                .raw()
                .apply(host, &ds)
                .into_result()
                .map(|redundancy| scr_plugin::Applied {
                    redundancy,
                    crc32: Default::default(),
                })
        };
        let label = format!("{} ({})", out.record.id, out.record.name);
        let call = if fused { "apply_with_crc" } else { "apply" };
        let done = self
            .world
            .settle_call(rd.host(), rd.scheme(), call, &label, result)?;
        self.record_applied(out, dir, fused, done, buf)
    }

    /// Record in `out` what the scheme's apply returned (`done`): the redundancy files it
    /// wrote and, from a scheme that hashes in apply (`fused`), the files' CRC32s.
    fn record_applied(
        &self,
        out: &mut Output,
        dir: &Path,
        fused: bool,
        done: scr_plugin::Applied,
        buf: usize,
    ) -> std::result::Result<(), ApplyError> {
        out.record.redundancy = done
            .redundancy
            .iter()
            .map(|s| relative_to(dir, s))
            .collect();
        if fused {
            self.record_crcs(out.desc, &mut out.record, dir, &done.crc32, buf)?;
        }
        Ok(())
    }

    /// Keep the applied dataset (collective): the keep decision is only final once every
    /// rank recorded the dataset as complete; a rank that could not (a full control
    /// directory, say) makes every rank discard it, while the previous checkpoint is still
    /// in cache. Then the checkpoint is counted and logged, and older datasets evicted.
    fn keep_output(&mut self, out: &mut Output) -> Result<()> {
        let committed = self.commit_dataset(out);
        if !self.world.all(committed.is_ok()) {
            // every rank returns the same error: the first failing rank's
            let why = committed.err().map(|e| e.to_string());
            let why = first_failure(self.world.as_dyn(), why.as_deref())
                .map(|(r, e)| format!("on rank {r}: {e}"))
                .unwrap_or_default();
            out.record.complete = false;
            self.drop_output(&out.record)?;
            return Err(ScrError::Collective(format!(
                "complete_output {}: the dataset could not be recorded as complete {why}; it is discarded on every rank, and the previous checkpoint stays the restart candidate",
                out.record.name
            )));
        }
        if let Some(c) = out.record.checkpoint_id {
            self.cache.used(None, Some(c));
            let bytes: u64 = out.record.files.iter().map(|f| f.size).sum();
            self.checkpoint_done(out.started);
            let total = self.world.sum_u64(bytes);
            self.job.log_event(crate::events::Event::Checkpoint {
                name: out.record.name.clone(),
                id: out.record.id,
                bytes: total,
                seconds: out.started.elapsed().as_secs_f64(),
            });
        }
        self.dataset_done(out.record.id);
        let store = out.record.descriptor.store.clone();
        // the dataset is kept whatever eviction does: a failure there marks the state
        // uncertain (every later call says so) but does not unsay the keep
        if let Err(e) = evictor!(self).evict(&store, 0, Some(out.record.id), false) {
            self.topo.warn(&format!(
                "complete_output {}: kept, but evicting older datasets failed: {e}",
                out.record.name
            ));
        }
        Ok(())
    }

    /// Record in `rec` the CRC32s a scheme computed during its apply (`crcs`, one per
    /// file of `rec`, in order), reading each file it gave none for. A list of another
    /// length breaks the contract of `apply_with_crc`: refused, naming the plugin.
    fn record_crcs(
        &self,
        desc: usize,
        rec: &mut DatasetRecord,
        dir: &Path,
        crcs: &[abi_stable::std_types::ROption<u32>],
        buf: usize,
    ) -> std::result::Result<(), ApplyError> {
        if !crcs.is_empty() && crcs.len() != rec.files.len() {
            return Err(ApplyError::CrcCount {
                rank: self.topo.rank(),
                plugin: self.descs[desc].scheme().file().to_string(),
                got: crcs.len(),
                files: rec.files.len(),
            });
        }
        for (i, f) in rec.files.iter_mut().enumerate() {
            f.crc32 = match crcs.get(i).and_then(|c| c.into_option()) {
                Some(c) => Some(c),
                None => Some(
                    crate::integrity::file_crc32(&dir.join(&f.name), buf).map_err(|error| {
                        ApplyError::Unreadable {
                            rank: self.topo.rank(),
                            name: f.name.clone(),
                            error,
                        }
                    })?,
                ),
            };
        }
        Ok(())
    }

    /// This rank's part of keeping a dataset: mark it complete in the filemap.
    fn commit_dataset(&mut self, out: &mut Output) -> Result<()> {
        self.hooks.injected(
            "commit",
            self.topo.rank(),
            out.record.id,
            self.job.cntl_dir(),
        )?;
        out.record.complete = true;
        self.cache.put(out.record.clone());
        self.cache.save()
    }
}
