//! Deleting evicted files off the application's path: an evicted dataset's files are
//! renamed into this rank's trash directory of their store (`scr.trash.<rank>`, a
//! metadata operation) and a thread of this rank at the lowest CPU priority unlinks them
//! there. Unlinking a file on tmpfs frees its pages, some 15 ms per 64 MiB of CPU, which
//! `SCR_Start_output` would otherwise spend while the application waits, and which the
//! thread spends when a core is free (while the application computes or waits).
//!
//! The dataset's directory and record go at once, as before; only the freeing of the
//! space is deferred. Finalize waits for the thread, so a run leaves no trash; a trash
//! directory left by a crash is removed by the next init of that rank ([`clear_trash`]).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;

/// The name of `rank`'s trash directory in a store's job directory.
pub(in crate::runtime) fn trash_dir(store_dir: &Path, rank: u32) -> PathBuf {
    store_dir.join(format!("scr.trash.{rank}"))
}

/// Remove what a run that ended without finalize left in `rank`'s trash directory of
/// `store_dir` (nothing there belongs to a dataset any more; `remove_dir_all` never
/// follows a link).
pub(in crate::runtime) fn clear_trash(store_dir: &Path, rank: u32) {
    let dir = trash_dir(store_dir, rank);
    if std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            tracing::warn!("{}: {e}; remove it by hand", dir.display());
        }
    }
}

/// This rank's deleting thread (started at the first file it is given), the names it
/// gives files in the trash and the trash directories it used.
#[derive(Default)]
pub(in crate::runtime) struct Reaper {
    tx: Option<mpsc::Sender<PathBuf>>,
    thread: Option<JoinHandle<()>>,
    /// The next name in the trash (unique in this run: init empties the trash).
    next: u64,
    /// Removed once empty by [`Reaper::drain`].
    dirs: BTreeSet<PathBuf>,
}

impl Reaper {
    /// Move `path` into `trash` (made when missing, 0700) and have the thread unlink it;
    /// `Err` when it cannot be moved (the caller deletes it itself).
    pub(in crate::runtime) fn retire(&mut self, path: &Path, trash: &Path) -> std::io::Result<()> {
        if !self.dirs.contains(trash) {
            use std::os::unix::fs::DirBuilderExt as _;
            match std::fs::DirBuilder::new().mode(0o700).create(trash) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    // (never through a link in place of the directory)
                    if !std::fs::symlink_metadata(trash)?.is_dir() {
                        return Err(std::io::Error::other("not a directory"));
                    }
                }
                Err(e) => return Err(e),
            }
            self.dirs.insert(trash.to_path_buf());
        }
        let to = trash.join(self.next.to_string());
        self.next += 1;
        std::fs::rename(path, &to)?;
        if let Err(mpsc::SendError(to)) = self.sender().send(to) {
            // (no thread: unlink here)
            let _ = std::fs::remove_file(to);
        }
        Ok(())
    }

    /// The thread's channel, the thread started at the first call.
    fn sender(&mut self) -> &mpsc::Sender<PathBuf> {
        self.tx.get_or_insert_with(|| {
            let (tx, rx) = mpsc::channel::<PathBuf>();
            let spawned = std::thread::Builder::new()
                .name("scr-reaper".into())
                .spawn(move || {
                    crate::os::lowest_priority();
                    for path in rx {
                        let _ = std::fs::remove_file(&path);
                    }
                });
            match spawned {
                Ok(h) => self.thread = Some(h),
                // (the receiver is gone with the closure: `retire` unlinks in place)
                Err(e) => tracing::debug!("no thread to delete evicted files ({e})"),
            }
            tx
        })
    }

    /// Wait until every file given so far is unlinked, and remove the emptied trash
    /// directories (the thread ends; the next file starts another).
    pub(in crate::runtime) fn drain(&mut self) {
        self.tx = None;
        if let Some(h) = self.thread.take() {
            let _ = h.join();
        }
        for dir in std::mem::take(&mut self.dirs) {
            // (only when empty)
            let _ = std::fs::remove_dir(dir);
        }
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        self.drain();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A retired file leaves its place at once (renamed, not copied: the same inode
    /// lands in the trash unless the thread already unlinked it); drain unlinks every
    /// one and removes the emptied trash directory; the thread starts again after.
    #[test]
    fn a_retired_file_leaves_at_once_and_drain_deletes_it_and_the_trash() {
        use std::os::unix::fs::MetadataExt as _;
        let dir = tempfile::tempdir().unwrap();
        let trash = trash_dir(dir.path(), 3);
        let mut reaper = Reaper::default();
        for round in 0..2 {
            let file = dir.path().join(format!("data{round}"));
            std::fs::write(&file, vec![7u8; 1 << 20]).unwrap();
            let inode = std::fs::metadata(&file).unwrap().ino();
            reaper.retire(&file, &trash).unwrap();
            assert!(!file.exists(), "round {round}: still in place");
            if let Ok(m) = std::fs::metadata(trash.join(round.to_string())) {
                assert_eq!(m.ino(), inode, "round {round}: not the same file");
            }
            reaper.drain();
            assert!(!trash.exists(), "round {round}: trash left after drain");
        }
        // a file that is not there is the caller's to handle
        let gone = reaper
            .retire(&dir.path().join("missing"), &trash)
            .unwrap_err();
        assert_eq!(gone.kind(), std::io::ErrorKind::NotFound);
        reaper.drain();
        // a trash directory a crash left is cleared, a link in its place refused
        std::fs::create_dir(&trash).unwrap();
        std::fs::write(trash.join("9"), b"left").unwrap();
        clear_trash(dir.path(), 3);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let elsewhere = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), &trash).unwrap();
        let file = dir.path().join("data");
        std::fs::write(&file, b"x").unwrap();
        assert!(reaper.retire(&file, &trash).is_err());
        assert!(file.exists());
    }
}
