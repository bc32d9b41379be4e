//! The watchdog's view of a running step: the directories where its progress shows,
//! the newest change below them, its output lines, and the timeout in force (longer
//! while a flush to the prefix is open, `watchdog_timeout_pfs`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::NodeCheck;
use crate::config::{settings, Config};

/// Where progress shows: the prefix's `.scr` and the job's directory under the control
/// base and every node-local store, on each node of the launch (on this host for real
/// nodes: the others cannot be seen from here).
pub(super) fn watched_dirs(
    config: &Config,
    prefix: &Path,
    check: &NodeCheck,
    nodes: &[String],
) -> Vec<PathBuf> {
    let mut dirs = vec![crate::layout::scr_dir(prefix)];
    let simulated = !config.get(settings::NODE_NAMES).is_empty();
    for (base, _) in &check.bases {
        if simulated {
            dirs.extend(nodes.iter().map(|n| base.join(n).join(&check.job_dir)));
        } else {
            dirs.push(base.join(&check.job_dir));
        }
    }
    dirs
}

/// The newest modification time of anything below `dirs` (at most `limit` entries
/// looked at, so a huge cache cannot stall the watchdog).
fn newest_change(dirs: &[PathBuf], limit: usize) -> Option<SystemTime> {
    let mut newest = None;
    let mut seen = 0usize;
    let mut todo: Vec<PathBuf> = dirs.to_vec();
    while let Some(d) = todo.pop() {
        let Ok(m) = std::fs::symlink_metadata(&d) else {
            continue;
        };
        if let Ok(t) = m.modified() {
            newest = newest.max(Some(t));
        }
        if m.is_dir() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                seen += 1;
                if seen > limit {
                    return newest;
                }
                todo.push(e.path());
            }
        }
    }
    newest
}

/// The watchdog's timeouts: `secs` without progress ends the step (0: no watchdog), or
/// `pfs_secs` while a flush to the prefix is open in its index (SCR's
/// `SCR_WATCHDOG_TIMEOUT_PFS`: a write to the parallel file system takes longer than one
/// to cache, and may show no progress the watchdog sees for a while).
pub(super) struct Watchdog {
    pub(super) secs: u64,
    pub(super) pfs_secs: u64,
    pub(super) prefix: PathBuf,
}

impl Watchdog {
    /// The timeout in force now: `pfs_secs` (when longer) while the prefix's index holds a
    /// flush that is neither complete nor failed.
    pub(super) fn timeout(&self) -> Duration {
        if self.pfs_secs > self.secs && flush_open(&self.prefix) {
            Duration::from_secs(self.pfs_secs)
        } else {
            Duration::from_secs(self.secs)
        }
    }
}

/// Whether the index of `prefix` holds an open flush (an entry neither complete nor
/// failed); an unreadable index holds none.
fn flush_open(prefix: &Path) -> bool {
    crate::state::prefix::Index::load(prefix).is_ok_and(|ix| {
        ix.datasets
            .values()
            .any(|e| !e.complete && e.failed.is_none())
    })
}

/// What the watchdog watches: the step's output (the time of its last line, kept by
/// the pumps) and the newest change under the watched directories (scanned at most
/// every half second).
pub(super) struct Progress<'a> {
    watched: &'a [PathBuf],
    start: Instant,
    last_output: Arc<AtomicU64>,
    /// The newest change seen under `watched`.
    newest: Option<SystemTime>,
    /// When (since `start`) a change was last seen.
    last_progress: Duration,
    last_scan: Instant,
}

impl<'a> Progress<'a> {
    /// Start watching: the changes already there are not progress.
    pub(super) fn new(watched: &'a [PathBuf], start: Instant, last_output: Arc<AtomicU64>) -> Self {
        Progress {
            watched,
            start,
            last_output,
            newest: newest_change(watched, 100_000),
            last_progress: Duration::ZERO,
            last_scan: Instant::now(),
        }
    }

    /// How long the step has shown no progress (no output line, no file changed).
    pub(super) fn idle(&mut self) -> Duration {
        if self.last_scan.elapsed() >= Duration::from_millis(500) {
            self.last_scan = Instant::now();
            let now = newest_change(self.watched, 100_000);
            if now > self.newest {
                self.newest = now;
                self.last_progress = self.start.elapsed();
            }
        }
        let out = Duration::from_millis(self.last_output.load(Ordering::Relaxed));
        self.start
            .elapsed()
            .saturating_sub(self.last_progress.max(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watchdog_waits_the_pfs_timeout_while_a_flush_is_open() {
        use crate::state::prefix::{Index, IndexEntry};
        let dir = tempfile::tempdir().unwrap();
        let dog = Watchdog {
            secs: 3,
            pfs_secs: 30,
            prefix: dir.path().to_path_buf(),
        };
        // no index: the plain timeout
        assert_eq!(dog.timeout(), Duration::from_secs(3));
        let entry = IndexEntry {
            id: 4,
            name: "ckpt.4".into(),
            ..IndexEntry::default()
        };
        Index::update(dir.path(), |ix| ix.begin_flush(&entry)).unwrap();
        assert_eq!(dog.timeout(), Duration::from_secs(30), "a flush is open");
        Index::update(dir.path(), |ix| ix.flush_failed(4, "rank 1: disk full")).unwrap();
        assert_eq!(dog.timeout(), Duration::from_secs(3), "it failed: not open");
        // a shorter pfs timeout never shortens the watchdog
        let dog = Watchdog {
            secs: 3,
            pfs_secs: 1,
            prefix: dir.path().to_path_buf(),
        };
        assert_eq!(dog.timeout(), Duration::from_secs(3));
    }
}
