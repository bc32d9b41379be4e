//! Flow control of the prefix: at most `flush_width` ranks copy into it at once during a
//! flush, and at most `fetch_width` ranks read from it at once during a restart (SCR's
//! `SCR_FLUSH_WIDTH` and `SCR_FETCH_WIDTH`).
//!
//! Why: a parallel file system serves a job of thousands of ranks better when they do not
//! all open, write and close files at the same instant (metadata servers, and the other
//! jobs sharing it, are what suffer); SCR bounds it the same way.
//!
//! How: a sliding window by rank, with no coordinator. With width W < P, rank r (r >= W)
//! waits for one empty message from rank r - W before it starts, and every rank sends one
//! to rank r + W (if it exists) once its own part ended. The ranks fall into W chains
//! (r mod W), each of which copies one rank at a time, so at most W ranks are inside the
//! window at once; each rank exchanges at most 2 messages of 0 bytes, whatever P (SCR
//! 3.1's rank 0 posts a send and a receive per rank, O(P) on one rank). With W >= P there
//! is no message at all: the default (256) costs nothing below 257 ranks.
//!
//! Never a deadlock: a rank passes the window on whatever happened to its own part (a
//! failed or skipped transfer, a fault injected for a test), because the work runs
//! between [`Window::enter`] and [`Window::leave`] with no early return, and the work
//! itself is local (no collective call inside the window; every rank's outcome is agreed
//! afterwards, as without the window). Every rank enters every window of a flush or fetch
//! the others enter: whether there is one is decided by values the same on every rank
//! (agreed or broadcast before).
//!
//! A background flush (`flush_async`) is windowed too, but not by these messages: its
//! transfers are waited for by threads that make no MPI call, so no thread can pass a
//! turn on. Its window moves by agreement at the API calls that poll background flushes
//! (one minimum-reduction of the lowest rank whose part has not ended, folded into the
//! poll's own): the ranks below that rank plus W may copy, so at most W parts run at
//! once and the flush takes at least P / W polls (`flush/background.rs`). SCR's
//! asynchronous flush starts every rank's transfer at once; here the width is the bound
//! an admin set for the file system, whichever way the flush runs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::tags::{FETCH_WINDOW_TAG, FLUSH_WINDOW_TAG};
use super::world::World;
use crate::config::settings;

/// Which width bounds a window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::runtime) enum Direction {
    /// Into the prefix (`flush_width`).
    Flush,
    /// Out of the prefix (`fetch_width`).
    Fetch,
}

impl Direction {
    fn name(self) -> &'static str {
        match self {
            Direction::Flush => "flush",
            Direction::Fetch => "fetch",
        }
    }
}

/// One sliding window over the ranks of a world (see the module doc).
#[derive(Clone, Debug)]
pub(in crate::runtime) struct Window {
    /// Ranks inside at once (at least 1).
    width: u32,
    tag: i32,
    direction: Direction,
    /// The test hook counting the ranks inside ([`Gauge`]).
    gauge: Option<Gauge>,
}

impl Window {
    /// A window of `width` ranks (0 counts as 1) whose messages travel on `tag`.
    pub(in crate::runtime) fn new(width: u64, tag: i32, direction: Direction) -> Window {
        Window {
            width: u32::try_from(width.max(1)).unwrap_or(u32::MAX),
            tag,
            direction,
            gauge: None,
        }
    }

    /// Wait for this rank's turn: the message of rank r - W when the window is narrower
    /// than the world.
    pub(in crate::runtime) fn enter(&self, world: &dyn World) {
        let r = world.rank();
        if self.width < world.size() && r >= self.width {
            world.recv(r - self.width, self.tag);
        }
        if let Some(g) = &self.gauge {
            g.enter(self.direction.name());
        }
    }

    /// This rank's part ended (whatever its outcome): let rank r + W start.
    pub(in crate::runtime) fn leave(&self, world: &dyn World) {
        if let Some(g) = &self.gauge {
            g.leave(self.direction.name());
        }
        let r = world.rank();
        let next = u64::from(r) + u64::from(self.width);
        if self.width < world.size() && next < u64::from(world.size()) {
            world.send(next as u32, self.tag, &[]);
        }
    }

    /// Ranks inside at once.
    pub(in crate::runtime) fn width(&self) -> u32 {
        self.width
    }

    /// Whether the window holds ranks back in a world of `size` ranks (the same answer
    /// on every rank).
    pub(in crate::runtime) fn narrower_than(&self, size: u32) -> bool {
        self.width < size
    }

    /// The test gauge counting the ranks inside, for a window that moves by agreement
    /// instead of by messages (a background flush).
    pub(in crate::runtime) fn gauge(&self) -> Option<&Gauge> {
        self.gauge.as_ref()
    }

    /// `work` inside the window: entered, run, left (the window passed on whatever
    /// `work` returned). `work` must make no collective call.
    pub(in crate::runtime) fn run<T>(&self, world: &dyn World, work: impl FnOnce() -> T) -> T {
        /// Leaves the window when dropped: also when `work` panics, so that a caller
        /// that catches the panic (the C API does) leaves no rank r + W waiting for this
        /// turn forever.
        struct Leave<'a>(&'a Window, &'a dyn World);
        impl Drop for Leave<'_> {
            fn drop(&mut self) {
                self.0.leave(self.1);
            }
        }
        self.enter(world);
        let _leave = Leave(self, world);
        work()
    }
}

impl Window {
    /// The window bounding this job's ranks copying in `direction` (its width from
    /// `config`, the same on every rank), counted by the gauge `hooks` may name.
    pub(in crate::runtime) fn of(
        config: &crate::config::Config,
        hooks: &crate::hooks::TestHooks,
        direction: Direction,
    ) -> Window {
        let (width, tag) = match direction {
            Direction::Flush => (config.get(settings::FLUSH_WIDTH), FLUSH_WINDOW_TAG),
            Direction::Fetch => (config.get(settings::FETCH_WIDTH), FETCH_WINDOW_TAG),
        };
        let mut w = Window::new(width, tag, direction);
        w.gauge = hooks.window_gauge.as_deref().map(Gauge::parse);
        w
    }
}

/// Testing hook, never set in production: `SCR_TEST_WINDOW=<dir>[:<hold ms>]` counts the
/// ranks inside each window across processes, in `<dir>/flush` and `<dir>/fetch` (three
/// numbers: inside now, most inside at once, entries in all), updated under an exclusive
/// lock of the file; each rank stays `hold` milliseconds inside before its work, so that
/// ranks allowed in together are seen together. Counted, not timed: the tests assert the
/// most ever inside at once.
#[derive(Clone, Debug)]
pub(in crate::runtime) struct Gauge {
    dir: PathBuf,
    hold: Duration,
}

impl Gauge {
    /// The hook's value: a directory, optionally `:` and milliseconds.
    pub(in crate::runtime) fn parse(spec: &str) -> Gauge {
        let (dir, hold) = match spec.rsplit_once(':') {
            Some((d, ms)) if ms.parse::<u64>().is_ok() => (d, ms.parse().unwrap_or(0)),
            _ => (spec, 0),
        };
        Gauge {
            dir: PathBuf::from(dir),
            hold: Duration::from_millis(hold),
        }
    }

    pub(in crate::runtime) fn enter(&self, what: &str) {
        self.update(what, 1);
        std::thread::sleep(self.hold);
    }

    pub(in crate::runtime) fn leave(&self, what: &str) {
        self.update(what, -1);
    }

    /// Add `delta` to the ranks inside, keeping the most seen and the entries.
    fn update(&self, what: &str, delta: i64) {
        if let Err(e) = update_counts(&self.dir.join(what), delta) {
            tracing::warn!("window gauge {}: {e}", self.dir.display());
        }
    }
}

/// The counts a [`Gauge`] keeps in `path`: (inside now, most inside at once, entries).
#[cfg(test)]
pub(crate) fn read_counts(path: &Path) -> Option<(i64, i64, i64)> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut n = text.split_whitespace().map(|w| w.parse::<i64>().ok());
    Some((n.next()??, n.next()??, n.next()??))
}

fn update_counts(path: &Path, delta: i64) -> std::io::Result<()> {
    use std::io::{Read as _, Seek as _, Write as _};
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    f.lock()?;
    let mut text = String::new();
    f.read_to_string(&mut text)?;
    let mut n = text
        .split_whitespace()
        .map(|w| w.parse::<i64>().unwrap_or(0));
    let (now, most, entries) = (
        n.next().unwrap_or(0),
        n.next().unwrap_or(0),
        n.next().unwrap_or(0),
    );
    let now = now + delta;
    let most = most.max(now);
    let entries = entries + i64::from(delta > 0);
    f.set_len(0)?;
    f.rewind()?;
    f.write_all(format!("{now} {most} {entries}\n").as_bytes())?;
    f.sync_data()?;
    f.unlock()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::world::inproc::run_ranks;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// The most ranks inside a window of `width` over `size` ranks at once, each staying
    /// a few milliseconds; every rank's work runs once. `fail` ranks return an error from
    /// their work and must still pass the window on.
    fn most_inside(size: u32, width: u64, fail: &[u32]) -> (usize, Vec<Result<u32, String>>) {
        let inside = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let out = run_ranks(size, |w: Box<dyn World>| {
            let win = Window::new(width, FLUSH_WINDOW_TAG, Direction::Flush);
            let me = w.rank();
            let r = win.run(&*w, || {
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(30));
                inside.fetch_sub(1, Ordering::SeqCst);
                if fail.contains(&me) {
                    Err(format!("rank {me} failed"))
                } else {
                    Ok(me)
                }
            });
            // a collective after the window: every rank got through it
            w.barrier();
            r
        });
        (most.load(Ordering::SeqCst), out)
    }

    #[test]
    fn no_more_ranks_than_the_width_are_inside_at_once() {
        for (size, width) in [(6, 1), (6, 2), (7, 3), (5, 4)] {
            let (most, out) = most_inside(size, width, &[]);
            assert!(most as u64 <= width, "{size} ranks, width {width}: {most}");
            assert_eq!(out, (0..size).map(Ok).collect::<Vec<_>>());
        }
        // the width is what limits it: wide enough, ranks overlap
        let (most, _) = most_inside(4, 4, &[]);
        assert!(most > 1, "width 4 over 4 ranks: {most} at once");
        let (most, _) = most_inside(4, 256, &[]);
        assert!(most > 1, "width 256 over 4 ranks: {most} at once");
    }

    #[test]
    fn a_rank_whose_work_failed_still_passes_the_window_on() {
        let (most, out) = most_inside(6, 1, &[0, 3]);
        assert_eq!(most, 1);
        let expected: Vec<Result<u32, String>> = (0..6)
            .map(|r| {
                if r == 0 || r == 3 {
                    Err(format!("rank {r} failed"))
                } else {
                    Ok(r)
                }
            })
            .collect();
        assert_eq!(out, expected);
    }

    #[test]
    fn the_gauge_counts_ranks_inside_across_updates() {
        let dir = tempfile::tempdir().unwrap();
        let g = Gauge::parse(&format!("{}:0", dir.path().display()));
        g.enter("flush");
        g.enter("flush");
        g.leave("flush");
        g.enter("flush");
        g.leave("flush");
        g.leave("flush");
        assert_eq!(read_counts(&dir.path().join("flush")), Some((0, 2, 3)));
        assert_eq!(
            Gauge::parse("/a:b/c").dir,
            PathBuf::from("/a:b/c"),
            "a colon in the path without milliseconds"
        );
    }
}
