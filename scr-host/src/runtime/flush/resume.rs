//! Flushes a crashed run left unfinished: resumed or cleaned up at the next init.
//!
//! A flush opens its index entry (incomplete) before any file is copied and each rank's
//! transfer persists its state in the control directory until the flush is recorded. A
//! run killed in between (by the scheduler, a node failure, SIGKILL) leaves an open
//! entry, transfer state files and partly written files in the prefix. At init every
//! open entry is settled, on every rank alike:
//!
//! - **resumed** when the dataset is still complete in every rank's cache and every
//!   rank's transfer reopens from its state file (`resume_transfer`) with exactly this
//!   rank's files as sources and destinations the flush could have chosen (the file's
//!   own path in the prefix or, on every rank alike, its relocated path). The transfer
//!   copies what is missing and the host verifies every destination (size and CRC32 from
//!   the filemap) exactly as for a new flush, then records it in the index. A rank
//!   without a state file whose part never started (a background flush's window had not
//!   let it in) starts a new transfer to where the reopened ones write, when some rank
//!   reopened one (and, where a complete dataset owns one of its files' own paths now,
//!   only when those write to the dataset's own directory);
//! - **cleaned up** otherwise: each reopened transfer is cancelled (which removes its
//!   partial files), this rank's destinations that no complete dataset in the prefix
//!   owns are removed, and the entry is marked failed with the reason. A dataset still in
//!   cache is flushed again by the usual policy (at the latest by finalize).
//!
//! Why not trust the transfer's state for what to delete: the state file is in a
//! directory of ours, but a plugin's notion of "its" destinations is not evidence that
//! no older checkpoint lives there; the host removes only paths of this dataset's names
//! that no complete dataset's rank2file claims.

use crate::runtime::flush::transfers;
use crate::runtime::flush::Flusher;
use crate::runtime::tags::OWNED_TAGS;
use crate::runtime::world::Exchange;
use std::collections::BTreeSet;

use crate::state::writes::load_writes;
use std::path::{Path, PathBuf};

use scr_plugin::{host_ref, FileResult};

use super::record::remove_written;
use super::{collect, Label, Planned, RankOutcome, StartError, Started};
use crate::runtime::{DatasetRecord, Result};
use crate::state::prefix::{self, Index, IndexEntry, Rank2File};

/// Why this rank's part of an interrupted flush cannot be resumed (logged, and it makes
/// the rank answer [`Part::No`]).
#[derive(Debug, thiserror::Error)]
enum Unresumable {
    /// The dataset is not complete in this rank's cache.
    #[error("not in this rank's cache")]
    NotCached,
    /// This rank's transfer left no state file.
    #[error("no transfer state ({})", .0.display())]
    NoState(PathBuf),
    /// The transfer could not be reopened, or its results read.
    #[error(transparent)]
    Start(#[from] StartError),
    /// The state lists another number of files than the dataset has on this rank.
    #[error(
        "the transfer state lists {listed} file(s), the dataset has {has} on this rank ({label})"
    )]
    Count {
        listed: usize,
        has: usize,
        label: Box<Label>,
    },
    /// A cached file is not a source of exactly one of the state's files.
    #[error("the transfer state does not list {} exactly once ({label})", .from.display())]
    NotOnce { from: PathBuf, label: Box<Label> },
    /// A file goes neither to its own path nor to its relocated path.
    #[error("the transfer state sends {} to {}, which is not where a flush of {dataset} writes it ({label})", .from.display(), .to.display())]
    Elsewhere {
        from: PathBuf,
        to: PathBuf,
        dataset: String,
        label: Box<Label>,
    },
    /// Some files go to the dataset's own directory, some not.
    #[error(
        "the transfer state sends some files to the dataset's own directory and some not ({label})"
    )]
    Mixed { label: Box<Label> },
    /// Which paths complete datasets own is not known.
    #[error("the prefix's rank2file maps cannot all be read, so it is not known which paths complete datasets own")]
    OwnedUnknown,
    /// A destination belongs to a complete dataset.
    #[error("{} belongs to a complete dataset now", .0.display())]
    Owned(PathBuf),
    /// This rank's part never started and one of its files' own paths belongs to a
    /// complete dataset: it can only be written to the dataset's own directory.
    #[error("no transfer state, and {} belongs to a complete dataset now", .0.display())]
    FreshOwned(PathBuf),
}

/// What a rank found it can do with its part of an interrupted flush (sent to every rank
/// as one byte).
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Part {
    /// It cannot be resumed here (no state, refused, a destination owned by another
    /// dataset now).
    No = 0,
    /// Resumable, writing to the files' own paths.
    InPlace = 1,
    /// Resumable, writing to the dataset's own directory.
    Relocated = 2,
    /// Resumable, and this rank has no file in the dataset.
    Empty = 3,
    /// The dataset is not complete in this rank's cache.
    NotCached = 4,
    /// This rank's part never started (no transfer state: a background flush's window
    /// had not let it in): resumable by a new transfer to where the others write.
    Fresh = 5,
    /// As `Fresh`, but a complete dataset owns one of its files' own paths: resumable
    /// only when the others write to the dataset's own directory.
    FreshRelocated = 6,
}

impl Part {
    /// This rank's answer: whether the dataset is complete in its cache (`rec`), and if
    /// so whether and where its transfer was `reopened`.
    fn of(
        rec: Option<&DatasetRecord>,
        reopened: &std::result::Result<Started, Unresumable>,
    ) -> Part {
        match (rec, reopened) {
            (None, _) => Part::NotCached,
            (Some(_), Ok(s)) => match s.files.first() {
                None => Part::Empty,
                Some(p) if p.stored.is_some() => Part::Relocated,
                Some(_) => Part::InPlace,
            },
            (Some(_), Err(Unresumable::NoState(_))) => Part::Fresh,
            (Some(_), Err(Unresumable::FreshOwned(_))) => Part::FreshRelocated,
            (Some(_), Err(_)) => Part::No,
        }
    }
}

/// What the ranks' answers ([`Part`]) say together about an interrupted flush: the same
/// on every rank ([`Flusher::agree_on_parts`]).
struct Agreed {
    /// The dataset is complete in every rank's cache.
    cached: bool,
    /// Some ranks' transfers write to the files' own paths, others' to the dataset's
    /// own directory.
    mixed: bool,
    /// Every rank reopened its transfer, all to the same kind of destination, or has
    /// none because its part never started while some rank's says where the files go.
    resumable: bool,
    /// The resumed transfers write to the dataset's own directory.
    relocated: bool,
}

/// This rank's part of a resumed flush.
enum Resume {
    /// Its transfer, reopened from its state.
    Reopened(Started),
    /// A new transfer of its files (its part never started), to the dataset's own
    /// directory or to the files' own paths, as the reopened ones write.
    Fresh { relocate: bool },
}

impl Flusher<'_> {
    /// Settle every flush an earlier run left open (collective; at init, after the cache
    /// was restored), and remove transfer state files no open flush needs.
    pub(in crate::runtime) fn settle_interrupted_flushes(&mut self) -> Result<()> {
        let open: Vec<IndexEntry> = if self.topo.rank() == 0 {
            match Index::load_or_rebuild(self.job.prefix()) {
                Ok(ix) => ix
                    .datasets
                    .values()
                    .filter(|e| !e.complete && e.failed.is_none())
                    .cloned()
                    .collect(),
                Err(e) => {
                    tracing::warn!("{e}; interrupted flushes are not looked for");
                    Vec::new()
                }
            }
        } else {
            Vec::new()
        };
        let open: Vec<IndexEntry> = self
            .world
            .broadcast_value(0, Some(&open), "open index entries")
            .unwrap_or_default();
        for entry in &open {
            self.settle(entry);
        }
        self.remove_stale_transfer_states();
        Ok(())
    }

    /// Resume or clean up the interrupted flush of `entry` (collective). A dataset still
    /// complete in every rank's cache whose flush could not be resumed is flushed again
    /// right away (an output would otherwise never be: only the newest checkpoint is
    /// flushed at finalize). Per rank: [`Flusher::owned_among`] for its destinations,
    /// then the ranks' answers agreed by one bitwise-OR reduction (8 bytes, O(log P)
    /// steps; was an all-gather of one byte per rank, O(P)); what recording or cleaning
    /// up costs is said at [`Flusher::gather_and_finish`] and
    /// [`Flusher::remove_flush_files`].
    fn settle(&mut self, entry: &IndexEntry) {
        let _dataset = crate::log::dataset_span(entry.id).entered();
        let state = transfers!(self).state_file(entry.id);
        let rec = self
            .cache
            .get(entry.id)
            .filter(|r| r.complete && entry.world_size == self.topo.size())
            .cloned();
        let reopened = self.reopen(entry, rec.as_ref(), &state);
        let reopened = self.refuse_owned(reopened, rec.as_ref());
        match (&rec, &reopened) {
            (Some(_), Err(Unresumable::NoState(_) | Unresumable::FreshOwned(_))) => tracing::info!(
                "the interrupted flush of {}: this rank's part never started; it starts anew if the others' parts resume",
                entry.name
            ),
            (Some(_), Err(why)) => {
                tracing::warn!("the interrupted flush of {}: {why}", entry.name)
            }
            _ => {}
        }
        let agreed = self.agree_on_parts(Part::of(rec.as_ref(), &reopened));
        if agreed.resumable {
            let part = match reopened {
                Ok(started) => Resume::Reopened(started),
                Err(Unresumable::NoState(_) | Unresumable::FreshOwned(_)) => Resume::Fresh {
                    relocate: agreed.relocated,
                },
                Err(_) => unreachable!("every rank reopened its transfer or has none"),
            };
            self.resume_flush(entry, rec.as_ref(), part);
        } else {
            self.abandon_flush(entry, rec, reopened, &agreed);
        }
        let _ = std::fs::remove_file(&state);
    }

    /// `reopened`, unless a destination of it belongs to a complete dataset (collective:
    /// [`Flusher::owned_among`]). What complete datasets own a resumed transfer must not
    /// write (a dataset scavenged or flushed since may hold that path now), and the
    /// cleanup never removes it. A part that never started (no state) is checked at its
    /// files' own paths in the prefix, where a new transfer of it may write: one owned
    /// there may still go to its relocated paths (the dataset's own directory, which no
    /// other dataset owns).
    fn refuse_owned(
        &self,
        reopened: std::result::Result<Started, Unresumable>,
        rec: Option<&DatasetRecord>,
    ) -> std::result::Result<Started, Unresumable> {
        let destinations: Vec<PathBuf> = match (&reopened, rec) {
            (Ok(s), _) => s.files.iter().map(|p| p.destination.clone()).collect(),
            (Err(Unresumable::NoState(_)), Some(rec)) => rec
                .files
                .iter()
                .map(|f| self.job.prefix().join(&f.name))
                .collect(),
            _ => Vec::new(),
        };
        let owned = self.owned_among(&destinations);
        let fresh = matches!(reopened, Err(Unresumable::NoState(_)));
        match (&owned, reopened) {
            (None, Ok(_)) => Err(Unresumable::OwnedUnknown),
            (None, Err(_)) if fresh => Err(Unresumable::OwnedUnknown),
            (Some(o), Ok(s)) => match s.files.iter().find(|p| o.contains(&p.destination)) {
                Some(p) => Err(Unresumable::Owned(p.destination.clone())),
                None => Ok(s),
            },
            (Some(o), Err(e)) if fresh => match destinations.iter().find(|p| o.contains(*p)) {
                Some(p) => Err(Unresumable::FreshOwned(p.clone())),
                None => Err(e),
            },
            (_, Err(e)) => Err(e),
        }
    }

    /// Which answers some rank gave (collective), so that all take the same road (one
    /// bitwise-OR reduction: 8 bytes, O(log P) steps).
    fn agree_on_parts(&self, part: Part) -> Agreed {
        let parts = self.world.or_u64(1u64 << (part as u8));
        let some = |p: Part| parts & (1u64 << (p as u8)) != 0;
        let cached = !some(Part::NotCached);
        let mixed = some(Part::InPlace) && some(Part::Relocated);
        // a part that never started goes where the reopened ones write: some must say
        let placed = some(Part::InPlace) || some(Part::Relocated);
        Agreed {
            cached,
            mixed,
            resumable: cached
                && !some(Part::No)
                && !mixed
                && (!(some(Part::Fresh) || some(Part::FreshRelocated)) || placed)
                && (!some(Part::FreshRelocated) || some(Part::Relocated)),
            relocated: some(Part::Relocated),
        }
    }

    /// Every rank reopened its part of the interrupted flush of `entry`, or has a part
    /// that never started: dispatch this rank's transfer (`part`: reopened, or new),
    /// verify it and record the flush (collective); if it fails anywhere, what it wrote
    /// is removed (it is recorded failed, with its reason).
    fn resume_flush(&mut self, entry: &IndexEntry, rec: Option<&DatasetRecord>, part: Resume) {
        self.flushing
            .started
            .insert(entry.id, std::time::Instant::now());
        // a resumed flush writes to the prefix as any flush: at most `flush_width` ranks
        // at once, the turn passed on whatever this rank's part did
        let buf = self.config.file_buf_size();
        let window = crate::runtime::window::Window::of(
            self.config,
            self.hooks,
            crate::runtime::window::Direction::Flush,
        );
        let outcome: RankOutcome = window.run(self.world.as_dyn(), || match part {
            Resume::Reopened(mut started) => {
                let dispatched = started
                    .transfer
                    .dispatch(host_ref(&started.host))
                    .into_result()
                    .map_err(|e| format!("{e} ({})", started.label));
                dispatched.and_then(|()| collect(started, false, "when written", buf))
            }
            Resume::Fresh { relocate } => {
                let rec = rec.expect("a resumed flush's dataset is in every rank's cache");
                transfers!(self)
                    .start(rec, relocate, false)
                    .map_err(|e| e.to_string())
                    .and_then(|s| collect(s, false, "when written", buf))
            }
        });
        let text = self.finish_agreed(entry, &outcome);
        if text.is_empty() {
            super::lock(&self.flushing.flushed).insert(entry.id);
            self.topo.warn(&format!(
                "the flush of {} that an earlier run left unfinished was resumed and is recorded in {}",
                entry.name,
                self.job.prefix().display()
            ));
        } else {
            // recorded failed by `gather_and_finish`, with its reason; what it wrote goes
            let removed = self.remove_flush_files(entry, rec);
            self.topo.warn(&format!(
                "the resumed flush of {} failed; its {removed} file(s) in the prefix were removed: {}",
                entry.name,
                String::from_utf8_lossy(&text)
            ));
        }
    }

    /// The interrupted flush of `entry` cannot be resumed on every rank (`agreed` says
    /// why): cancel this rank's reopened transfer, clean up what the flush wrote and mark
    /// it failed (collective); a dataset still in every rank's cache is flushed again.
    fn abandon_flush(
        &mut self,
        entry: &IndexEntry,
        rec: Option<DatasetRecord>,
        reopened: std::result::Result<Started, Unresumable>,
        agreed: &Agreed,
    ) {
        if let Ok(mut started) = reopened {
            // its partial files go; completed destinations are removed below
            if let Err(e) = started
                .transfer
                .cancel(host_ref(&started.host))
                .into_result()
            {
                tracing::warn!(
                    "cancelling the interrupted transfer of {} ({}): {e}; its partial files are removed below", entry.name, started.label
                );
            }
        }
        let why = if !agreed.cached {
            "the dataset is no longer complete in every rank's cache"
        } else if agreed.mixed {
            "the ranks' transfer states disagree on where the files go"
        } else {
            "some rank's transfer could not be resumed from its state (see the messages above)"
        };
        self.clean_up(entry, rec.as_ref(), why);
        if let Some(rec) = rec.filter(|_| agreed.cached) {
            self.topo.warn(&format!(
                "{} is still in every rank's cache: flushing it again",
                entry.name
            ));
            if let Err(e) = self.flush_dataset(&rec) {
                self.topo
                    .warn(&format!("flushing {} again: {e}", entry.name));
            }
        }
    }

    /// Reopen this rank's transfer of `entry` from `state` and check that it is this
    /// flush's: exactly the dataset's cached files as sources, each to its own path in
    /// the prefix or (all alike) to its relocated path. Not yet dispatched.
    fn reopen(
        &self,
        entry: &IndexEntry,
        rec: Option<&DatasetRecord>,
        state: &Path,
    ) -> std::result::Result<Started, Unresumable> {
        let rec = rec.ok_or(Unresumable::NotCached)?;
        if rec.files.is_empty() {
            // nothing of this rank's to copy: its part is done whatever the state says
            return Ok(self.open_transfer(rec, state, false)?);
        }
        if state.symlink_metadata().is_err() {
            return Err(Unresumable::NoState(state.to_path_buf()));
        }
        let mut started = self.open_transfer(rec, state, true)?;
        let results =
            started
                .transfer
                .results()
                .into_result()
                .map_err(|error| StartError::Plugin {
                    error,
                    label: Box::new(started.label.clone()),
                })?;
        started.files = self.files_from_state(entry, rec, &results, &started.label)?;
        Ok(started)
    }

    /// A transfer of the type of `rec`'s store persisting its state in `state`, with no
    /// planned file yet: resumed from that state (`resume`), else a new one.
    fn open_transfer(
        &self,
        rec: &DatasetRecord,
        state: &Path,
        resume: bool,
    ) -> std::result::Result<Started, StartError> {
        let label = transfers!(self).label_of(&rec.descriptor.store);
        let host = transfers!(self).host(&label);
        // (a flush the configuration runs in the background is paced when resumed too)
        let background = self.config.get(crate::config::settings::FLUSH_ASYNC);
        let config = transfers!(self).config(&label, state, background);
        let transfer = if resume {
            self.registry.resume_transfer(&config, host_ref(&host))
        } else {
            self.registry.new_transfer(&config, host_ref(&host))
        }?;
        Ok(Started {
            transfer,
            files: Vec::new(),
            label,
            host,
        })
    }

    /// This rank's files of `rec` as the reopened transfer's `results` (from its state)
    /// list them: each cached file exactly once as a source, to its own path in the
    /// prefix or to its relocated path, all files alike; why the state is not this
    /// flush's otherwise.
    fn files_from_state(
        &self,
        entry: &IndexEntry,
        rec: &DatasetRecord,
        results: &[FileResult],
        label: &Label,
    ) -> std::result::Result<Vec<Planned>, Unresumable> {
        let label = || Box::new(label.clone());
        if results.len() != rec.files.len() {
            return Err(Unresumable::Count {
                listed: results.len(),
                has: rec.files.len(),
                label: label(),
            });
        }
        let cache_dir = self.job.dataset_dir(&rec.descriptor.store, rec.id);
        let mut files = Vec::with_capacity(rec.files.len());
        let mut relocated: Option<bool> = None;
        for f in &rec.files {
            let source = cache_dir.join(&f.name);
            let mut matching = results
                .iter()
                .filter(|r| Path::new(r.source.as_str()) == source);
            let (Some(r), None) = (matching.next(), matching.next()) else {
                return Err(Unresumable::NotOnce {
                    from: source,
                    label: label(),
                });
            };
            let destination = PathBuf::from(r.destination.as_str());
            let moved = prefix::relocated(entry.id, &f.name);
            let stored = if destination == self.job.prefix().join(&f.name) {
                None
            } else if destination == self.job.prefix().join(&moved) {
                Some(moved)
            } else {
                return Err(Unresumable::Elsewhere {
                    from: source,
                    to: destination,
                    dataset: entry.name.clone(),
                    label: label(),
                });
            };
            if relocated.is_some_and(|r| r != stored.is_some()) {
                return Err(Unresumable::Mixed { label: label() });
            }
            relocated = Some(stored.is_some());
            files.push(Planned {
                name: f.name.clone(),
                source,
                destination,
                size: f.size,
                crc32: f.crc32,
                stored,
            });
        }
        Ok(files)
    }

    /// Remove what the interrupted flush of `entry` wrote and mark the entry failed
    /// (collective).
    fn clean_up(&mut self, entry: &IndexEntry, rec: Option<&DatasetRecord>, why: &str) {
        let total = self.remove_flush_files(entry, rec);
        let reason =
            format!("flush interrupted by the crash of an earlier run; cleaned up at init: {why}");
        if self.topo.rank() == 0 {
            if let Err(e) = Index::mark_failed(self.job.prefix(), entry.id, &reason) {
                tracing::warn!("{e}; the interrupted flush of {} is not marked", entry.name);
            }
        }
        self.topo.warn(&format!(
            "the flush of {} that an earlier run left unfinished cannot be resumed ({why}); its {total} partly or fully written file(s) in the prefix were removed and the index marks it failed",
            entry.name
        ));
    }

    /// Remove what the flush of `entry` wrote (collective; returns how many files went,
    /// on every rank). What it may have written is the list the flush recorded in the
    /// prefix before it copied anything (rank 0 removes it all: the filemaps that name
    /// the files may be lost with the caches). Removed: every file in the dataset's own
    /// directory, every temporary copy (`*.scr-part`) of a listed path, and a listed
    /// path itself when no complete dataset's rank2file names it (`owned`; nothing when
    /// that is unknown) — never a pure output's own path (the flush may have written
    /// over the user's older file of that name). Without the list, each rank goes by its
    /// filemap's names, and then removes only the dataset's own directory and temporary
    /// copies: the flush went to its own directory exactly when a name was taken, so a
    /// file at a name's own path may be someone else's. Per rank: a 1-byte broadcast,
    /// [`Flusher::owned_among`] and a sum-reduction (was an all-gather of every rank's
    /// count, O(P)); rank 0 reads every block's part of the list (crash cleanup only).
    fn remove_flush_files(&self, entry: &IndexEntry, rec: Option<&DatasetRecord>) -> u64 {
        let pure_output = entry.output && entry.checkpoint_id.is_none();
        let own_dir = prefix::dataset_dir(self.job.prefix(), entry.id);
        let recorded: Option<Vec<String>> = if self.topo.rank() == 0 {
            load_writes(self.job.prefix(), entry.id).unwrap_or_else(|e| {
                tracing::warn!("{e}; cleaning up what the filemaps name");
                None
            })
        } else {
            None
        };
        let have_list = !self
            .world
            .broadcast_bytes(if recorded.is_some() { b"1" } else { b"" })
            .is_empty();
        // (path, whether the path itself may go when no complete dataset owns it)
        let candidates: Vec<(PathBuf, bool)> = match (&recorded, have_list, rec) {
            (Some(writes), _, _) => writes
                .iter()
                .filter(|w| prefix::check_relative(w).is_ok())
                .map(|w| (self.job.prefix().join(w), true))
                .collect(),
            (None, false, Some(rec)) => rec
                .files
                .iter()
                .flat_map(|f| {
                    [
                        (
                            self.job.prefix().join(prefix::relocated(entry.id, &f.name)),
                            true,
                        ),
                        (self.job.prefix().join(&f.name), false),
                    ]
                })
                .collect(),
            _ => Vec::new(),
        };
        // which of the paths that may go complete datasets own (asked collectively)
        let asked: Vec<PathBuf> = candidates
            .iter()
            .filter(|(p, listed)| *listed && !pure_output && !p.starts_with(&own_dir))
            .map(|(p, _)| p.clone())
            .collect();
        let owned = self.owned_among(&asked);
        let mut remove: Vec<PathBuf> = Vec::new();
        // (a set beside the list: a lookup per path, not a scan of every path so far)
        let mut seen: BTreeSet<PathBuf> = BTreeSet::new();
        for (p, listed) in candidates {
            let in_own_dir = p.starts_with(&own_dir);
            let free = in_own_dir
                || (listed && !pure_output && owned.as_ref().is_some_and(|o| !o.contains(&p)));
            let mut part = p.clone().into_os_string();
            part.push(".scr-part");
            let part = PathBuf::from(part);
            let doomed = if free { vec![p, part] } else { vec![part] };
            for q in doomed {
                if !seen.contains(&q) && q.symlink_metadata().is_ok_and(|m| m.is_file()) {
                    seen.insert(q.clone());
                    remove.push(q);
                }
            }
        }
        remove_written(self.job.prefix(), &remove);
        self.world.sum_u64(remove.len() as u64)
    }

    /// Which of `mine` (prefix paths this rank asks about) a complete dataset's rank2file
    /// names (collective); `None` on every rank when some map cannot be read.
    ///
    /// Rank 0 reads the maps (every complete dataset's, whole: this runs only when a
    /// crash left a flush open) and deals each named path to the rank that owns its hash
    /// (CRC32 of its components, modulo P); each rank asks the owners of its paths and
    /// they answer with the ones they hold: three sparse exchanges. Per rank: its own
    /// paths asked and answered, about P-th of the named paths held, O(log P) steps;
    /// rank 0 sends the named paths once (was: every named path broadcast to every rank).
    fn owned_among(&self, mine: &[PathBuf]) -> Option<BTreeSet<PathBuf>> {
        let named: Option<BTreeSet<PathBuf>> = if self.topo.rank() == 0 {
            (|| {
                let ix = Index::load_or_rebuild(self.job.prefix()).ok()?;
                let mut owned = BTreeSet::new();
                for e in ix.datasets.values().filter(|e| e.complete) {
                    let map = Rank2File::load(self.job.prefix(), e.id).ok()?;
                    for f in map.ranks.values().flatten() {
                        owned.insert(f.stored_path(self.job.prefix()).ok()?);
                    }
                }
                Some(owned)
            })()
        } else {
            None
        };
        let known = self.world.broadcast_from(0, &[u8::from(named.is_some())]) == [1];
        if !known {
            return None;
        }
        let size = self.topo.size().max(1);
        let owner = |p: &Path| {
            let mut h = crc32fast::Hasher::new();
            for c in p.components() {
                h.update(c.as_os_str().as_encoded_bytes());
                h.update(b"/");
            }
            h.finalize() % size
        };
        // (a function, not a closure: what it returns borrows from its argument)
        fn by_owner<'p>(
            paths: impl Iterator<Item = &'p PathBuf>,
            owner: &dyn Fn(&Path) -> u32,
        ) -> Vec<(u32, Vec<&'p PathBuf>)> {
            let mut groups: std::collections::BTreeMap<u32, Vec<&PathBuf>> = Default::default();
            for p in paths {
                groups.entry(owner(p)).or_default().push(p);
            }
            groups.into_iter().collect()
        }
        let paths_of = |sends: &[(u32, Vec<&PathBuf>)], tag: i32| -> Vec<(u32, Vec<PathBuf>)> {
            self.world
                .sparse_exchange_values(sends, tag, "paths")
                .into_iter()
                .map(|(from, ps)| (from, ps.unwrap_or_default()))
                .collect()
        };
        // rank 0 deals the named paths to their owners
        let deals = named
            .as_ref()
            .map(|n| by_owner(n.iter(), &owner))
            .unwrap_or_default();
        let held: BTreeSet<PathBuf> = paths_of(&deals, OWNED_TAGS[0])
            .into_iter()
            .flat_map(|(_, ps)| ps)
            .collect();
        // each rank asks the owners of its paths; they answer with those they hold
        let asks = by_owner(mine.iter(), &owner);
        let asked = paths_of(&asks, OWNED_TAGS[1]);
        let answers: Vec<(u32, Vec<&PathBuf>)> = asked
            .iter()
            .filter_map(|(from, ps)| {
                let hits: Vec<&PathBuf> = ps.iter().filter(|p| held.contains(*p)).collect();
                (!hits.is_empty()).then_some((*from, hits))
            })
            .collect();
        Some(
            paths_of(&answers, OWNED_TAGS[2])
                .into_iter()
                .flat_map(|(_, ps)| ps)
                .collect(),
        )
    }

    /// Transfer state files of this rank that no open flush needs (a flush recorded
    /// after the last transfer of its run ended, a crash after it was recorded).
    fn remove_stale_transfer_states(&self) {
        let suffix = format!(".{}.state", self.topo.rank());
        let Ok(dir) = std::fs::read_dir(self.job.cntl_dir()) else {
            return;
        };
        for e in dir.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name.starts_with("transfer.") && name.ends_with(&suffix) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}
