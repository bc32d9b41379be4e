//! CRC32s off the critical path (`crc_on_copy_defer`): the cache's background hash.
//!
//! A scheme that reads the data anyway hashes it in its apply (`crc32_in_apply`); one
//! that keeps no redundancy data reads nothing, so the CRC32 that `crc_on_copy` asks for
//! was one more read of every byte inside `complete_output` — a third of SINGLE's loop.
//! Here that read happens in one background thread of the process while the application
//! computes, and the CRC32s are recorded at a later API call.
//!
//! **When it defers.** Only for a dataset whose scheme keeps no redundancy that could
//! carry the CRC32s: the scheme tolerates no loss (`describe`, agreed by every rank at
//! init), does not hash in its apply, and names no redundancy file for this rank's files
//! (checked per dataset: a scheme that writes one gets the CRC32s in its `apply` as
//! before). A dataset flushed by this very `complete_output` is hashed there too: the
//! flush compares against the CRC32s, so there would be nothing to hide it behind.
//!
//! **When it must be done.** One job at a time (a new `complete_output` joins the
//! previous one first): with one worker the hash of a checkpoint ends long before the
//! next is written (CRC32 runs at ~15 GB/s, several times a write), and when the
//! application checkpoints faster than that, waiting at the next `complete_output`
//! costs no more than the synchronous read did, while a queue would only grow. The job
//! is joined, and its CRC32s recorded in the filemap (a snapshot, written atomically),
//! before a flush of its dataset starts (`crc_on_flush` compares against them), before a
//! restart from it in this run (`have_restart_fetching`, `start_restart`), and in
//! `finalize` and when `should_exit` says yes; `start_output`, `need_checkpoint` and
//! `should_exit` record it when it has finished, without waiting. The thread also
//! writes what it found, atomically, as a note beside the filemap the moment it is done
//! (`filemap::CrcNote`): a process killed while the application computes, before any
//! of those calls, leaves the CRC32s recorded all the same (`Filemap::load` applies the
//! note); only one that ends within the hash itself leaves them pending. Deleting the
//! dataset (eviction, `delete`, a discarded commit) cancels its hash: a CRC32 taken
//! just before the files go would vouch for nothing (`crc_on_delete` would compare the
//! bytes with themselves), so those files are checked by size only.
//!
//! **What the CRC32 vouches for.** The bytes as the thread read them, as the
//! synchronous read's CRC32 is of the bytes when `complete_output` read them: damage
//! after the read is caught by `crc_on_flush`, `crc_on_restart` and `crc_on_delete`;
//! damage before it is indistinguishable from what the application wrote. Deferring
//! widens that window from "write .. complete_output" to "write .. the thread's read"
//! (the thread starts as `complete_output` returns: milliseconds).
//!
//! **A job that never finished.** The dataset is committed with `crc32_pending` set and
//! the flag cleared when the CRC32s are recorded (or noted). A process that dies in
//! between leaves it set: the next run cannot verify that rank's files, so with
//! `crc_on_restart` they count as lost (for SINGLE the dataset is dropped everywhere and
//! the restart falls back to an older checkpoint or the prefix, with one warning naming
//! it and why).
//!
//! The hash is per-rank local state: no collective decision reads whether a rank's job
//! has finished (polls only record what is done; the joins that wait are at points every
//! rank reaches alike, and they wait on this rank's thread alone).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::Cache;
use crate::state::filemap::{CrcNote, DatasetRecord, Filemap};

/// What hashing one file came to: its CRC32, or why there is none (naming the error).
pub(in crate::runtime) type FileHash = std::result::Result<u32, HashError>;

/// Why a file of a background hash has no CRC32: the warning that records it without
/// one names this.
#[derive(Debug, thiserror::Error)]
pub(in crate::runtime) enum HashError {
    /// The hash was cancelled before this file.
    #[error("cancelled")]
    Cancelled,
    /// The thread returned no outcome for this file.
    #[error("the hash did not run")]
    NotRun,
    /// The hashing thread itself panicked (its message).
    #[error("the hashing thread panicked: {0}")]
    ThreadPanicked(String),
    /// Hashing this file panicked (its message).
    #[error("hashing panicked: {0}")]
    Panicked(String),
    /// The file could not be read.
    #[error(transparent)]
    Io(std::io::Error),
}

/// The background hash of one dataset's files on this rank.
pub(in crate::runtime) struct CrcJob {
    /// The dataset id.
    pub(in crate::runtime) id: u64,
    /// The dataset name (for messages).
    name: String,
    /// The files' names in the dataset (relative), in the order hashed.
    files: Vec<String>,
    /// Set to stop the thread before its next file (deletion, a dropped runtime).
    cancel: Arc<AtomicBool>,
    /// `None` once joined.
    handle: Option<JoinHandle<Vec<FileHash>>>,
}

impl CrcJob {
    /// Start hashing `files` (name in the dataset, path in cache) of dataset `id` in a
    /// new thread, reading `buf` bytes at a time; with `note` (a control directory and
    /// rank), the thread writes what it found there as that rank's [`CrcNote`] the moment
    /// it is done, so a process that ends before the join leaves them recorded. An error
    /// when no thread can be made (the caller then hashes in its own thread).
    pub(in crate::runtime) fn spawn(
        id: u64,
        name: &str,
        files: Vec<(String, PathBuf)>,
        buf: usize,
        note: Option<(PathBuf, u32)>,
    ) -> std::io::Result<CrcJob> {
        let cancel = Arc::new(AtomicBool::new(false));
        let (names, paths): (Vec<String>, Vec<PathBuf>) = files.into_iter().unzip();
        let stop = cancel.clone();
        let (noted, label) = (names.clone(), format!("{id} ({name})"));
        let handle = std::thread::Builder::new()
            .name(format!("scr-crc-{id}"))
            .spawn(move || {
                let hashes = hash_files(&paths, &stop, |p| crate::integrity::file_crc32(p, buf));
                match note {
                    // (a cancelled hash is of a dataset being deleted: nothing to note)
                    Some((dir, rank)) if !stop.load(Ordering::SeqCst) => {
                        let crcs = hashes.iter().map(|h| h.as_ref().ok().copied());
                        let note = CrcNote {
                            dataset: id,
                            files: noted.into_iter().zip(crcs).collect(),
                        };
                        if let Err(e) = note.write(&dir, rank) {
                            tracing::warn!(
                                "rank {rank}: dataset {label}: its CRC32s could not be noted in {} ({e}); they are recorded at the next call, but a job that ends first leaves them unrecorded",
                                dir.join(Filemap::crc_note_name(rank)).display()
                            );
                        }
                    }
                    _ => {}
                }
                hashes
            })?;
        Ok(CrcJob {
            id,
            name: name.to_string(),
            files: names,
            cancel,
            handle: Some(handle),
        })
    }

    /// Whether the thread is done (joining will not wait).
    pub(in crate::runtime) fn is_finished(&self) -> bool {
        self.handle.as_ref().is_none_or(|h| h.is_finished())
    }

    /// Wait for the thread: each file's name and outcome. Never panics: a panic that
    /// escaped the thread (none should: every file is hashed under `catch_unwind`) is
    /// every file's error.
    pub(in crate::runtime) fn join(mut self) -> Vec<(String, FileHash)> {
        let n = self.files.len();
        let outcome = match self.handle.take().map(JoinHandle::join) {
            Some(Ok(hashes)) if hashes.len() == n => hashes,
            Some(Ok(_)) | None => (0..n).map(|_| Err(HashError::NotRun)).collect(),
            Some(Err(panic)) => {
                let text = panic_text(&*panic);
                (0..n)
                    .map(|_| Err(HashError::ThreadPanicked(text.clone())))
                    .collect()
            }
        };
        std::mem::take(&mut self.files)
            .into_iter()
            .zip(outcome)
            .collect()
    }

    /// Stop the thread before its next file and wait for it, discarding what it found.
    pub(in crate::runtime) fn cancel(self) {
        self.cancel.store(true, Ordering::SeqCst);
        drop(self.join());
    }
}

impl Drop for CrcJob {
    /// A runtime dropped without `finalize` leaves no thread reading its cache for long:
    /// it stops before its next file (and is not waited for).
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::SeqCst);
    }
}

/// Hash each of `paths` with `hash`, in order, until `cancel` is set: one outcome per
/// path. A failing or panicking `hash` is that file's error, never the caller's panic;
/// the files left when cancelled are errors saying so.
pub(in crate::runtime) fn hash_files(
    paths: &[PathBuf],
    cancel: &AtomicBool,
    hash: impl Fn(&Path) -> std::io::Result<u32>,
) -> Vec<FileHash> {
    paths
        .iter()
        .map(|p| {
            if cancel.load(Ordering::SeqCst) {
                return Err(HashError::Cancelled);
            }
            match catch_unwind(AssertUnwindSafe(|| hash(p))) {
                Ok(Ok(crc)) => Ok(crc),
                Ok(Err(e)) => Err(HashError::Io(e)),
                Err(panic) => Err(HashError::Panicked(panic_text(&*panic))),
            }
        })
        .collect()
}

/// The message of a panic payload.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

impl Cache {
    /// Hand the CRC32s of the dataset just kept (`rec`, committed with `crc32_pending`,
    /// its files in `dir`) to a background thread reading through `buf` bytes. When no
    /// thread can be made they are computed here.
    pub(in crate::runtime) fn hash_in_background(
        &mut self,
        rec: &DatasetRecord,
        dir: &Path,
        buf: usize,
    ) {
        debug_assert!(self.crc.is_none(), "one job at a time");
        let files: Vec<(String, PathBuf)> = rec
            .files
            .iter()
            .map(|f| (f.name.clone(), dir.join(&f.name)))
            .collect();
        let note = Some((self.cntl_dir.clone(), self.filemap.rank));
        match CrcJob::spawn(rec.id, &rec.name, files.clone(), buf, note) {
            Ok(job) => self.crc = Some(job),
            Err(e) => {
                tracing::warn!(
                    "rank {}: no thread for the CRC32s of dataset {} ({}): {e}; hashing them now",
                    self.filemap.rank,
                    rec.id,
                    rec.name
                );
                let (names, paths): (Vec<String>, Vec<PathBuf>) = files.into_iter().unzip();
                let hashes = hash_files(&paths, &AtomicBool::new(false), |p| {
                    crate::integrity::file_crc32(p, buf)
                });
                self.record_crcs_of(rec.id, &rec.name, names.into_iter().zip(hashes).collect());
            }
        }
    }

    /// Record the background hash's CRC32s if it has finished, without waiting (the
    /// polling calls: start_output, need_checkpoint).
    pub(in crate::runtime) fn poll_crc(&mut self) {
        if self.crc.as_ref().is_some_and(CrcJob::is_finished) {
            self.settle_crc();
        }
    }

    /// Wait for the background hash, if any, and record its CRC32s.
    pub(in crate::runtime) fn settle_crc(&mut self) {
        if let Some(job) = self.crc.take() {
            let (id, name) = (job.id, job.name.clone());
            let hashes = job.join();
            self.record_crcs_of(id, &name, hashes);
        }
    }

    /// [`Cache::settle_crc`] when the job is dataset `id`'s; whether it was.
    pub(in crate::runtime) fn settle_crc_of(&mut self, id: u64) -> bool {
        let mine = self.crc.as_ref().is_some_and(|j| j.id == id);
        if mine {
            self.settle_crc();
        }
        mine
    }

    /// Dataset `id` is being deleted: stop its hash, if it has one, recording nothing.
    pub(in crate::runtime) fn cancel_crc_of(&mut self, id: u64) {
        if self.crc.as_ref().is_some_and(|j| j.id == id) {
            if let Some(job) = self.crc.take() {
                job.cancel();
            }
            // (noted before the cancel, if it finished first: no use once it is gone)
            let _ = CrcNote::remove(&self.cntl_dir, self.filemap.rank);
        }
    }

    /// Record the CRC32s `hashes` (by file name) of dataset `id` in the filemap and
    /// clear its pending flag, saving the snapshot (atomically). A file that could not
    /// be hashed is recorded without a CRC32 and named in a warning, and the dataset
    /// stays pending: nothing vouches for that file's bytes, so a later run does not
    /// restore this rank's files of it (`crc_on_restart`), as after a job that ended
    /// within the hash. A dataset no longer in the filemap is left alone.
    fn record_crcs_of(&mut self, id: u64, name: &str, hashes: Vec<(String, FileHash)>) {
        let rank = self.filemap.rank;
        let held = self.update(id, |rec| {
            let mut unhashed = false;
            for (file, hash) in hashes {
                let Some(f) = rec.files.iter_mut().find(|f| f.name == file) else {
                    continue;
                };
                match hash {
                    Ok(crc) => f.crc32 = Some(crc),
                    Err(e) => {
                        f.crc32 = None;
                        unhashed = true;
                        tracing::warn!(
                            "rank {rank}: dataset {id} ({name}): {file}: its CRC32 could not be computed ({e}); none is recorded, so a later run does not restore this rank's files of it"
                        );
                    }
                }
            }
            // every file hashed, or the dataset stays unverifiable on this rank
            rec.crc32_pending = unhashed || rec.files.iter().any(|f| f.crc32.is_none());
        });
        if !held {
            return;
        }
        match self.save() {
            // the filemap holds them now: the thread's note has served
            Ok(()) => {
                let _ = CrcNote::remove(&self.cntl_dir, rank);
            }
            Err(e) => tracing::warn!(
                "rank {rank}: dataset {id} ({name}): its CRC32s could not be recorded in the filemap ({e}); a later run restores this rank's files of it only from the background hash's note, if that was written: free space in the control directory"
            ),
        }
    }
}

impl Cache {
    /// Whether a background hash is running or unrecorded (tests).
    #[cfg(test)]
    pub(in crate::runtime) fn hashing(&self) -> bool {
        self.crc.is_some()
    }

    /// Take the background hash (tests).
    #[cfg(test)]
    pub(in crate::runtime) fn take_crc_job(&mut self) -> Option<CrcJob> {
        self.crc.take()
    }

    /// Put a background hash in place (tests).
    #[cfg(test)]
    pub(in crate::runtime) fn set_crc_job(&mut self, job: CrcJob) {
        self.crc = Some(job);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(dir: &Path, contents: &[&[u8]]) -> Vec<PathBuf> {
        contents
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let p = dir.join(format!("f{i}"));
                std::fs::write(&p, c).unwrap();
                p
            })
            .collect()
    }

    #[test]
    fn the_thread_gives_each_files_real_crc32_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let contents: [&[u8]; 3] = [b"first file", b"", &[7u8; 100_000]];
        let paths = files(dir.path(), &contents);
        let named = paths
            .iter()
            .enumerate()
            .map(|(i, p)| (format!("f{i}"), p.clone()))
            .collect();
        // a buffer smaller than the third file: it is read in pieces
        let job = CrcJob::spawn(5, "ckpt.5", named, 4096, None).unwrap();
        let got: Vec<(String, Result<u32, String>)> = job
            .join()
            .into_iter()
            .map(|(f, h)| (f, h.map_err(|e| e.to_string())))
            .collect();
        let want: Vec<(String, Result<u32, String>)> = contents
            .iter()
            .enumerate()
            .map(|(i, c)| (format!("f{i}"), Ok(crc32fast::hash(c))))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_vanished_file_and_a_panicking_hash_are_errors_of_their_file_only() {
        let dir = tempfile::tempdir().unwrap();
        let mut paths = files(dir.path(), &[b"kept", b"gone", b"panics"]);
        std::fs::remove_file(&paths[1]).unwrap();
        paths.push(dir.path().join("never-written"));
        let out = hash_files(&paths, &AtomicBool::new(false), |p| {
            if p.ends_with("f2") {
                panic!("injected panic in the hash");
            }
            crate::integrity::file_crc32(p, 4096)
        });
        let out: Vec<Result<u32, String>> = out
            .into_iter()
            .map(|h| h.map_err(|e| e.to_string()))
            .collect();
        assert_eq!(out[0], Ok(crc32fast::hash(b"kept")));
        assert!(
            out[1].as_ref().is_err_and(|e| e.contains("No such file")),
            "{:?}",
            out[1]
        );
        assert_eq!(
            out[2],
            Err("hashing panicked: injected panic in the hash".into())
        );
        assert!(out[3].is_err(), "{:?}", out[3]);
    }

    #[test]
    fn a_cancelled_hash_stops_before_its_next_file() {
        let dir = tempfile::tempdir().unwrap();
        let paths = files(dir.path(), &[b"a", b"b", b"c"]);
        let cancel = AtomicBool::new(false);
        let out = hash_files(&paths, &cancel, |p| {
            cancel.store(true, Ordering::SeqCst);
            crate::integrity::file_crc32(p, 4096)
        });
        let out: Vec<Result<u32, String>> = out
            .into_iter()
            .map(|h| h.map_err(|e| e.to_string()))
            .collect();
        assert_eq!(
            out,
            vec![
                Ok(crc32fast::hash(b"a")),
                Err("cancelled".into()),
                Err("cancelled".into())
            ]
        );
    }
}
