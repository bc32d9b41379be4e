//! Cache bypass (SCR's `SCR_CACHE_BYPASS`, a descriptor's `bypass`): a dataset whose files
//! the application writes straight into the prefix.
//!
//! `route_file` returns the file's own path in the prefix (its directories made), and the
//! file is recorded in the filemap as any other before it exists, so that a run killed
//! mid-output leaves nothing the next init would take for a checkpoint. No redundancy
//! is applied and nothing is cached: the parallel file system holds the only copy.
//! `complete_output` records the dataset in the prefix exactly as a flush does — every
//! rank's files with their size and CRC32 (read back after every rank has finished
//! writing) in the rank2file map, the summary and a complete index entry — so that the
//! restart, `scr index`, drop, delete and every integrity check treat it as a flushed
//! dataset. Since nothing is copied, several ranks may write one file (a shared file):
//! each rank that routed it lists it, and every such rank finds it at restart; the
//! lowest of them alone reads it back for its CRC32 (and checks that at restart), so a
//! shared file is read once, not once per writer.

use crate::runtime::flush::flusher;
use crate::runtime::output::Writer;
use std::path::{Path, PathBuf};

use super::Output;
use crate::config::settings;
use crate::runtime::world::Op;
use crate::runtime::{first_failure, io_err, Result, ScrError};
use crate::state::prefix::FlushedFile;
use crate::transfer::RankOutcome;

impl Writer<'_> {
    /// [`Runtime::route_file`](crate::runtime::Runtime::route_file) during a bypass output: `rel`'s path in the prefix,
    /// recorded, with its directories made. A symbolic link there is refused, as in cache:
    /// the host reads back what it records, and would read through the link.
    pub(in crate::runtime) fn route_bypass(&mut self, rel: &Path) -> Result<PathBuf> {
        let key = rel.to_string_lossy().into_owned();
        let path = self.job.prefix().join(rel);
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(ScrError::Usage(format!(
                    "route_file: {} is a symbolic link; it is not written through: remove it",
                    path.display()
                )));
            }
            // a file of an earlier dataset, perhaps of a checkpoint still recorded: said
            // once the dataset completes (see `complete_bypass`)
            Ok(_) => {
                if let Some(out) = self.output.as_mut() {
                    out.overwrites = true;
                }
            }
            Err(_) => {}
        }
        self.record_routed(&key)?;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io_err(parent))?;
        }
        Ok(path)
    }

    /// [`Runtime::complete_output`](crate::runtime::Runtime::complete_output) of a bypass dataset (collective): once every rank is
    /// here (so every rank has finished writing, a shared file too), each rank reads its
    /// files back for their size and CRC32 (`crc_on_flush`), and the dataset is recorded
    /// in the prefix as a flushed one. Kept only when every rank said valid and every
    /// file is there; either way the cache forgets it (the prefix holds the data). Files
    /// of a dataset that is not kept stay where the application wrote them: they are
    /// its files, and no index entry points at them.
    pub(in crate::runtime) fn complete_bypass(
        &mut self,
        mut out: Output,
        valid: bool,
    ) -> Result<bool> {
        // Names reused from an earlier dataset are written over in place (the parallel
        // file system holds the only copy): an older checkpoint that owns them no longer
        // matches its record, and its check refuses it at restart. Said, so that the
        // application can name each checkpoint's files apart. (One reduction agrees on
        // both: whether any rank said invalid, whether any rank wrote over a file.)
        let overwrites = out.overwrites;
        let any = self
            .world
            .all_reduce_u64s(&[u64::from(!valid), u64::from(overwrites)], Op::Max);
        let (all_valid, overwrote) = (any[0] == 0, any[1] == 1);
        if overwrote {
            self.topo.warn(&format!(
                "{} (bypass) wrote over files that already existed in the prefix {}: an older checkpoint that owns them no longer matches its record and is refused at restart; give each checkpoint its own file names (a directory per checkpoint, say) to keep older ones usable",
                out.record.name,
                self.job.prefix().display()
            ));
        }
        let crc = self.config.get(settings::CRC_ON_FLUSH);
        let buf = self.config.file_buf_size();
        let mine: RankOutcome = if all_valid {
            self.stat_bypass_files(&mut out, crc, buf)
        } else {
            Err(String::new())
        };
        let missing = if all_valid {
            first_failure(self.world.as_dyn(), mine.as_ref().err().map(String::as_str))
        } else {
            None
        };
        if !all_valid || missing.is_some() {
            self.forget_bypass(&out)?;
            return match missing {
                Some((rank, why)) => Err(ScrError::Collective(format!(
                    "complete_output {}: on rank {rank}: {why}; the dataset is not recorded",
                    out.record.name
                ))),
                None => {
                    self.topo.info(&format!(
                        "complete_output {}: a rank said invalid, dataset not recorded",
                        out.record.name
                    ));
                    Ok(false)
                }
            };
        }
        let id = out.record.id;
        flusher!(self).begin_flush(id);
        let Some(entry) = flusher!(self).open_index_entry(&out.record) else {
            self.forget_bypass(&out)?;
            return Err(ScrError::Collective(format!(
                "complete_output {}: the prefix's index cannot be written; the dataset is not recorded",
                out.record.name
            )));
        };
        let why = flusher!(self).finish_agreed(&entry, &mine);
        if why.is_empty() {
            if let Some(c) = out.record.checkpoint_id {
                // before the ids are recorded with the dataset's (forget_bypass)
                self.cache.used(None, Some(c));
            }
        }
        self.forget_bypass(&out)?;
        if !why.is_empty() {
            return Err(ScrError::Collective(format!(
                "complete_output {}: written to the prefix but not recorded: {}",
                out.record.name,
                String::from_utf8_lossy(&why)
            )));
        }
        if out.record.checkpoint_id.is_some() {
            self.checkpoint_done(out.started);
            let bytes: u64 = out.record.files.iter().map(|f| f.size).sum();
            let total = self.world.sum_u64(bytes);
            self.job.log_event(crate::events::Event::Checkpoint {
                name: out.record.name.clone(),
                id,
                bytes: total,
                seconds: out.started.elapsed().as_secs_f64(),
            });
        }
        self.topo.info(&format!(
            "complete_output {}: recorded in the prefix {} (bypass), {:.3} s",
            out.record.name,
            self.job.prefix().display(),
            out.started.elapsed().as_secs_f64()
        ));
        Ok(true)
    }

    /// This rank's files of a bypass dataset as the flush records them (size and, with
    /// `crc`, CRC32 of what is in the prefix), or why one cannot be read.
    fn stat_bypass_files(&self, out: &mut Output, crc: bool, buf: usize) -> RankOutcome {
        // a file several ranks wrote is hashed by the lowest of them only (its CRC32 is
        // then checked by that rank alone at restart, the others check its size): one
        // read of a shared file, not one per writer
        let names: Vec<String> = out.record.files.iter().map(|f| f.name.clone()).collect();
        let lowest = super::names::lowest_writers(self.world.as_dyn(), &names);
        let mut files = Vec::with_capacity(out.record.files.len());
        for (f, hash) in out.record.files.iter_mut().zip(lowest) {
            let path = self.job.prefix().join(&f.name);
            let meta = crate::integrity::stat_file(&path, crc && hash, buf)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            f.size = meta.size;
            f.crc32 = meta.crc32;
            files.push(FlushedFile {
                name: f.name.clone(),
                size: meta.size,
                crc32: meta.crc32,
                stored: None,
            });
        }
        Ok(files)
    }

    /// The cache's record of a bypass dataset goes (collective): its empty directory and
    /// its filemap entry; the next dataset takes a new id.
    fn forget_bypass(&mut self, out: &Output) -> Result<()> {
        let dir = self
            .job
            .dataset_dir(&out.record.descriptor.store, out.record.id);
        let _ = std::fs::remove_dir(&dir);
        self.cache.forget(out.record.id);
        let saved = self.cache.save();
        self.dataset_done(out.record.id);
        self.world.changed("complete_output", saved)
    }
}
