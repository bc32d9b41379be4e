//! The prefix lock ([`PrefixLock`]): every read-modify-write of the prefix's state files
//! (index, flush file) holds it, across threads (a mutex) and processes (an advisory
//! `flock` on `.scr/lock`), so that two updates never lose one's change.

use scr_plugin::sync::lock;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::scr_dir;
use crate::layout;
use crate::state::StateError;

/// Serializes index updates within one process (the flush thread and the main thread).
static INDEX_LOCK: Mutex<()> = Mutex::new(());

/// How long an update waits for another process's lock on the prefix state.
const LOCK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// An exclusive hold on the prefix's state files (index, flush file), across processes:
/// a job's flushes, `scr index` run by an admin, another job sharing the prefix. Each
/// update is a read-modify-write; without the lock two of them lose one's change.
pub struct PrefixLock {
    _file: std::fs::File,
    _in_process: std::sync::MutexGuard<'static, ()>,
}

impl PrefixLock {
    /// The lock file, `<prefix>/.scr/lock`; it holds the holder's pid and host.
    pub fn path(prefix: &Path) -> PathBuf {
        layout::lock_file(prefix)
    }

    /// Take the lock (an advisory `flock`), waiting up to a minute; the error names the
    /// holder.
    pub fn take(prefix: &Path) -> Result<PrefixLock, StateError> {
        use std::io::{Read, Seek, Write};
        let in_process = lock(&INDEX_LOCK);
        let path = Self::path(prefix);
        let io = |source| StateError::Io {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(scr_dir(prefix)).map_err(io)?;
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        let started = std::time::Instant::now();
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) => {
                    if started.elapsed() >= LOCK_TIMEOUT {
                        let mut holder = String::new();
                        let _ = file.read_to_string(&mut holder);
                        return Err(io(std::io::Error::other(format!(
                            "still locked after {} s by {}; if that process is gone, the lock is released with it",
                            LOCK_TIMEOUT.as_secs(),
                            if holder.trim().is_empty() { "another process" } else { holder.trim() }
                        ))));
                    }
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                Err(std::fs::TryLockError::Error(e))
                    if matches!(e.raw_os_error(), Some(38 | 95 | 37 | 22)) =>
                {
                    // ENOSYS, EOPNOTSUPP, ENOLCK, EINVAL: this file system has no flock
                    // (Lustre without -o flock, NFS with nolock). Updates from this process
                    // stay serialized; across processes they are not: say so once.
                    static SAID: std::sync::Once = std::sync::Once::new();
                    SAID.call_once(|| {
                        tracing::warn!(
                            "{}: no file locking on this file system ({e}); updates of the prefix's index from other processes (scr index, another job) are not serialized with this job's",
                            path.display()
                        )
                    });
                    break;
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
            }
        }
        // say who holds it, for the message of whoever waits
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let _ = file
            .set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| write!(file, "pid {} on {}", std::process::id(), host.trim()));
        Ok(PrefixLock {
            _file: file,
            _in_process: in_process,
        })
    }
}
