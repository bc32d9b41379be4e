//! The filemap: per rank, every dataset it holds in cache and every file of each, recorded
//! *before* the file exists (so nothing ever sits in cache unrecorded), with the metadata
//! and redundancy descriptor needed to verify, rebuild, move or delete it.
//!
//! # Snapshot and journal
//!
//! A rank's filemap lives in two files of its control directory:
//! - the **snapshot** `filemap_<rank>.scr`, a state file (see [`crate::state`]) rewritten
//!   atomically whenever the whole filemap is saved anyway (start_output, complete_output,
//!   commit, eviction, deletion, init's clean-up, rebuild, fetch);
//! - the **journal** `filemap_<rank>.scr.journal`, append only: `route_file` records each
//!   new file name there (one record and one `fdatasync`), so routing F files costs O(F)
//!   bytes and F syncs instead of F rewrites of a snapshot that grows with F (O(F²)
//!   bytes, 2F syncs). The name is durable before the application writes the file, so a
//!   crash still leaves it known and its partial file is cleaned up at the next init.
//!
//! The journal's header names the snapshot it extends by the snapshot body's CRC32. Saving
//! the snapshot *compacts*: the new snapshot holds every record, then the journal is
//! removed. A crash between the two leaves a journal whose base no longer matches: it is
//! stale and ignored (its records are in the snapshot). Each journal record carries its
//! length and CRC32: a torn last record (a crash inside an append) is ignored — its
//! `route_file` never returned — while damage anywhere else is an error naming the file.
//!
//! Journal format (version [`JOURNAL_VERSION`]): the header line
//! `scr-rs filemap-journal <version> base=<snapshot body crc32, 8 hex digits>`, then records
//! of `u32` length (little endian), `u32` CRC32 of the payload, payload (JSON of one
//! [`JournalEntry`]).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use crate::state::{read_state, read_state_crc, state_bytes_crc, write_atomic_as, StateError};

/// State-file kind of filemaps.
pub const KIND: &str = "filemap";

/// State-file kind of [`CrcNote`]s.
pub(crate) const CRC_NOTE_KIND: &str = "filemap-crc32";

/// Kind of filemap journals (the first word after `scr-rs` in their header).
pub const JOURNAL_KIND: &str = "filemap-journal";

/// The format version of filemap journals written (and the only one read) by this release.
pub const JOURNAL_VERSION: u32 = 1;

/// The largest journal record accepted: a record holds one file name (at most PATH_MAX,
/// 4096 bytes, up to six times longer once escaped in JSON) and a few numbers; a larger
/// length field is damage, not a record.
const MAX_RECORD: u32 = 64 << 10;

/// Bytes written to filemap snapshots and journals by this process (all ranks' maps).
static WRITTEN: AtomicU64 = AtomicU64::new(0);
/// `fsync`/`fdatasync` calls made for filemap snapshots and journals by this process
/// (files and their directories).
static SYNCS: AtomicU64 = AtomicU64::new(0);

/// What saving filemaps has cost this process so far (for tests and benchmarks that
/// check that routing a file costs O(1)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FilemapIo {
    /// Bytes written to snapshots and journals.
    pub bytes: u64,
    /// Syncs of those files and of the control directory holding them.
    pub syncs: u64,
}

/// The process's [`FilemapIo`] counters.
pub fn filemap_io() -> FilemapIo {
    FilemapIo {
        bytes: WRITTEN.load(Ordering::Relaxed),
        syncs: SYNCS.load(Ordering::Relaxed),
    }
}

fn count_io(bytes: usize, syncs: u64) {
    WRITTEN.fetch_add(bytes as u64, Ordering::Relaxed);
    SYNCS.fetch_add(syncs, Ordering::Relaxed);
}

/// The redundancy descriptor a dataset was protected with, as recorded (so a later run
/// with another configuration can still rebuild it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DescriptorRecord {
    /// Index of the descriptor in the configuration of the run that wrote it.
    pub index: usize,
    /// Scheme name.
    pub scheme: String,
    /// Parameters passed to the scheme.
    pub params: Vec<(String, String)>,
    /// Failure group name.
    pub group: String,
    /// Store path.
    pub store: String,
    /// Redundancy set id.
    pub set_id: u64,
    /// World ranks of the set's members, in member order.
    pub members: Vec<u32>,
    /// The dataset bypasses the cache: its files are written in place in the prefix and
    /// no redundancy is applied (filemaps of earlier releases lack it: cached).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub bypass: bool,
}

/// One application file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRecord {
    /// Path relative to the dataset directory (and to the prefix).
    pub name: String,
    /// Size in bytes once complete.
    pub size: u64,
    /// Permission bits.
    pub mode: u32,
    /// Modification time (seconds, nanoseconds).
    pub mtime: (i64, u32),
    /// CRC32 when `crc_on_copy` was set.
    pub crc32: Option<u32>,
}

/// One dataset held by this rank.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatasetRecord {
    /// Dataset id (every output).
    pub id: u64,
    /// Name given by the application.
    pub name: String,
    /// Checkpoint id, for checkpoints.
    pub checkpoint_id: Option<u64>,
    /// Also an output dataset.
    pub output: bool,
    /// Every rank completed it and redundancy was applied.
    pub complete: bool,
    /// How it is protected.
    pub descriptor: DescriptorRecord,
    /// Application files.
    pub files: Vec<FileRecord>,
    /// Redundancy files, relative to the dataset directory.
    pub redundancy: Vec<String>,
    /// Ranks in the job that wrote it (a restart needs as many).
    #[serde(default)]
    pub world_size: u32,
    /// The files' CRC32s are still being computed by this rank's background hash
    /// (`crc_on_copy_defer`): set when the dataset is committed, cleared once they are
    /// recorded. A record still pending at init is of a job that ended before its hash
    /// was recorded: nothing vouches for the files' bytes, so with `crc_on_restart` this
    /// rank's files are not used. (Filemaps of earlier releases lack it: not pending.)
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub crc32_pending: bool,
    /// When `start_output` began it (seconds since the epoch), for the index's and the
    /// summary's creation time (filemaps of earlier releases lack it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<i64>,
}

/// All datasets one rank holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Filemap {
    /// The world rank whose files these are.
    pub rank: u32,
    /// By dataset id.
    pub datasets: BTreeMap<u64, DatasetRecord>,
}

impl Filemap {
    /// The newest complete checkpoint held, leaving out the ids in `skipped` (those the
    /// application reported invalid): the restart candidate, by checkpoint id.
    pub(crate) fn newest_checkpoint(&self, skipped: &[u64]) -> Option<u64> {
        self.datasets
            .values()
            .filter(|d| d.complete && d.checkpoint_id.is_some() && !skipped.contains(&d.id))
            .max_by_key(|d| d.checkpoint_id)
            .map(|d| d.id)
    }

    /// The file name of rank `rank`'s filemap in a control directory.
    pub fn file_name(rank: u32) -> String {
        format!("filemap_{rank}.scr")
    }

    /// The owner rank of a filemap file name, if it is one.
    pub fn owner_of(file_name: &str) -> Option<u32> {
        file_name
            .strip_prefix("filemap_")?
            .strip_suffix(".scr")?
            .parse()
            .ok()
    }

    /// The file name of rank `rank`'s filemap journal (beside its snapshot).
    pub fn journal_name(rank: u32) -> String {
        format!("filemap_{rank}.scr.journal")
    }

    /// The file name of rank `rank`'s [`CrcNote`] (beside its snapshot).
    pub(crate) fn crc_note_name(rank: u32) -> String {
        format!("filemap_{rank}.scr.crc32")
    }

    /// Read `dir`'s filemap of `rank`: the snapshot with its journal replayed over it; no
    /// files at all is an empty filemap. A journal without its snapshot, or damaged other
    /// than in its last record, is an error naming the journal.
    pub fn load(dir: &Path, rank: u32) -> Result<Filemap, StateError> {
        let snapshot_path = dir.join(Self::file_name(rank));
        let journal_path = dir.join(Self::journal_name(rank));
        let snapshot = match read_state_crc::<Filemap>(&snapshot_path, KIND) {
            Ok(s) => Some(s),
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(e),
        };
        let journal = match std::fs::read(&journal_path) {
            Ok(bytes) => Some(Journal::parse(&journal_path, &bytes)?),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(source) => {
                return Err(StateError::Io {
                    path: journal_path,
                    source,
                })
            }
        };
        let mut map = match (snapshot, journal) {
            (None, None) => Filemap {
                rank,
                datasets: BTreeMap::new(),
            },
            (Some((map, _)), None) => map,
            (None, Some(_)) => {
                return Err(StateError::Corrupt {
                    path: journal_path,
                    why: format!(
                        "a filemap journal without its snapshot {} (the datasets its records extend are unknown); remove the journal: this rank's cache counts as lost",
                        snapshot_path.display()
                    ),
                })
            }
            (Some((mut map, crc)), Some(journal)) => {
                // a journal of an older snapshot: its records were compacted into this one
                // and a crash came before the journal was removed
                if journal.base == Some(crc) {
                    journal.replay(&journal_path, &mut map)?;
                }
                map
            }
        };
        // CRC32s the background hash finished before the process ended without recording
        // them (a damaged or missing note leaves the dataset pending: never verified)
        if let Ok(note) = read_state::<CrcNote>(&dir.join(Self::crc_note_name(rank)), CRC_NOTE_KIND)
        {
            note.apply(&mut map);
        }
        Ok(map)
    }

    /// Write it atomically into `dir`, mode 0600, and remove its journal (compaction: the
    /// snapshot now holds every record).
    pub fn save(&self, dir: &Path) -> io::Result<()> {
        self.save_snapshot(dir).map(|_| ())
    }

    /// [`Filemap::save`], returning the snapshot's identity (its body's CRC32), which a
    /// journal appended to it must name.
    fn save_snapshot(&self, dir: &Path) -> io::Result<u32> {
        let (bytes, crc) = state_bytes_crc(KIND, self)?;
        write_atomic_as(&dir.join(Self::file_name(self.rank)), &bytes, true)?;
        // the file and its directory are synced
        count_io(bytes.len(), 2);
        // removed after the snapshot is in place: a crash in between leaves a stale
        // journal, which load ignores (its base is the old snapshot's); an error here
        // leaves the same, so it is not one
        let _ = std::fs::remove_file(dir.join(Self::journal_name(self.rank)));
        Ok(crc)
    }

    /// Remove `owner`'s filemap from `dir`: the journal first, so no journal is ever left
    /// without its snapshot by a crash in between.
    pub fn remove(dir: &Path, owner: u32) -> io::Result<()> {
        for name in [
            Self::journal_name(owner),
            Self::crc_note_name(owner),
            Self::file_name(owner),
        ] {
            match std::fs::remove_file(dir.join(&name)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("{}: {e}", dir.join(name).display()),
                    ))
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Filemap owners present in a control directory, with their snapshot's path (a
    /// journal alone counts too, so that loading it reports it).
    pub(crate) fn owners_in(dir: &Path) -> Vec<(u32, PathBuf)> {
        let mut v: Vec<(u32, PathBuf)> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let owner = Self::owner_of(&name)
                    .or_else(|| Self::owner_of(name.strip_suffix(".journal")?))?;
                Some((owner, dir.join(Self::file_name(owner))))
            })
            .collect();
        v.sort();
        v.dedup();
        v
    }
}

/// The CRC32s a rank's background hash computed for one dataset (`crc_on_copy_defer`),
/// written atomically by the hashing thread beside the filemap the moment it is done:
/// the runtime records them in the filemap at its next API call and removes the note,
/// but a process that ends first (killed while the application computes) leaves them
/// here, and [`Filemap::load`] applies them to the dataset still pending. A note for a
/// dataset that is not pending (recorded already, or gone) changes nothing: ids are never
/// reused, and the next dataset's note replaces it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CrcNote {
    /// The dataset's id.
    pub dataset: u64,
    /// Each file's name and its CRC32, `None` when it could not be read.
    pub files: Vec<(String, Option<u32>)>,
}

impl CrcNote {
    /// Write it atomically as `dir`'s note of `rank`.
    pub(crate) fn write(&self, dir: &Path, rank: u32) -> io::Result<()> {
        crate::state::write_state(&dir.join(Filemap::crc_note_name(rank)), CRC_NOTE_KIND, self)
    }

    /// Remove `dir`'s note of `rank`, if any.
    pub(crate) fn remove(dir: &Path, rank: u32) -> io::Result<()> {
        match std::fs::remove_file(dir.join(Filemap::crc_note_name(rank))) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Record these CRC32s in `map`'s dataset when it is still pending; whether it was.
    /// The dataset stays pending unless the note gives a CRC32 for every one of its
    /// files: a file the hash could not read, or one the note does not name, has
    /// nothing that vouches for its bytes.
    pub(crate) fn apply(&self, map: &mut Filemap) -> bool {
        let Some(rec) = map
            .datasets
            .get_mut(&self.dataset)
            .filter(|d| d.crc32_pending)
        else {
            return false;
        };
        for f in &mut rec.files {
            f.crc32 = self
                .files
                .iter()
                .find(|(name, _)| *name == f.name)
                .and_then(|(_, crc)| *crc);
        }
        rec.crc32_pending = rec.files.iter().any(|f| f.crc32.is_none());
        true
    }
}

/// One journal record: a file routed into a dataset the snapshot holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalEntry {
    /// The dataset's id.
    pub dataset: u64,
    /// The file as recorded when routed.
    pub file: FileRecord,
}

/// A parsed journal.
#[derive(Debug)]
struct Journal {
    /// The CRC32 of the snapshot body it extends (`None`: its header never reached the
    /// disk, so it extends nothing and holds nothing).
    base: Option<u32>,
    /// Its intact records, in order.
    entries: Vec<JournalEntry>,
}

impl Journal {
    /// Parse a journal's bytes (`path` names it in errors). A header or last record cut
    /// short (or zeros where they should be: a crash before the data reached the disk) is
    /// what a crash inside an append leaves and is dropped; anything else that does not
    /// check is an error.
    fn parse(path: &Path, bytes: &[u8]) -> Result<Journal, StateError> {
        let corrupt = |why: String| StateError::Corrupt {
            path: path.to_path_buf(),
            why,
        };
        // the header is synced alone before the first record, so a torn header means no
        // record was ever acknowledged
        let template = format!("scr-rs {JOURNAL_KIND} ");
        let Some(nl) = bytes.iter().position(|&b| b == b'\n') else {
            let n = bytes.len().min(template.len());
            if bytes.iter().all(|&b| b == 0) || bytes[..n] == template.as_bytes()[..n] {
                return Ok(Journal {
                    base: None,
                    entries: Vec::new(),
                });
            }
            return Err(corrupt("not an scr-rs filemap journal".into()));
        };
        let header =
            std::str::from_utf8(&bytes[..nl]).map_err(|_| corrupt("header is not text".into()))?;
        let fields: Vec<&str> = header.split(' ').collect();
        let base = match fields.as_slice() {
            ["scr-rs", k, v, base] if *k == JOURNAL_KIND => {
                let version: u32 = v
                    .parse()
                    .map_err(|_| corrupt(format!("bad version `{v}`")))?;
                if version != JOURNAL_VERSION {
                    return Err(corrupt(format!(
                        "format version {version}, this release reads {JOURNAL_VERSION}"
                    )));
                }
                let crc = base
                    .strip_prefix("base=")
                    .filter(|h| h.len() == 8)
                    .and_then(|h| u32::from_str_radix(h, 16).ok())
                    .ok_or_else(|| corrupt(format!("bad base field `{base}`")))?;
                Some(crc)
            }
            ["scr-rs", k, ..] => {
                return Err(corrupt(format!(
                    "is a `{k}` file, expected `{JOURNAL_KIND}`"
                )))
            }
            _ => return Err(corrupt("not an scr-rs filemap journal".into())),
        };
        let mut entries = Vec::new();
        let mut pos = nl + 1;
        while pos < bytes.len() {
            let rest = &bytes[pos..];
            let n = entries.len() + 1;
            if rest.len() < 8 || rest.iter().all(|&b| b == 0) {
                break; // torn last record
            }
            let len = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes"));
            let crc = u32::from_le_bytes(rest[4..8].try_into().expect("4 bytes"));
            if len == 0 || len > MAX_RECORD {
                return Err(corrupt(format!(
                    "record {n} (byte {pos}) has the impossible length {len}"
                )));
            }
            let end = 8 + len as usize;
            if rest.len() < end {
                break; // torn last record: cut short
            }
            let payload = &rest[8..end];
            if crc32fast::hash(payload) != crc {
                if rest.len() == end {
                    break; // torn last record: its bytes did not all reach the disk
                }
                return Err(corrupt(format!(
                    "record {n} (byte {pos}) fails its checksum and is not the last one"
                )));
            }
            let entry: JournalEntry = serde_json::from_slice(payload)
                .map_err(|e| corrupt(format!("record {n} (byte {pos}) is unreadable: {e}")))?;
            entries.push(entry);
            pos += end;
        }
        Ok(Journal { base, entries })
    }

    /// Apply the records to `map` (the snapshot they extend). A record naming a dataset
    /// the snapshot does not hold means journal and snapshot do not belong together.
    fn replay(self, path: &Path, map: &mut Filemap) -> Result<(), StateError> {
        for (i, e) in self.entries.into_iter().enumerate() {
            let Some(d) = map.datasets.get_mut(&e.dataset) else {
                return Err(StateError::Corrupt {
                    path: path.to_path_buf(),
                    why: format!(
                        "record {} names dataset {}, which its filemap snapshot does not hold",
                        i + 1,
                        e.dataset
                    ),
                });
            };
            // a name is journaled once per dataset; replaying it twice changes nothing
            if !d.files.iter().any(|f| f.name == e.file.name) {
                d.files.push(e.file);
            }
        }
        Ok(())
    }
}

/// A rank's journal writer (held by the runtime). It appends only to a journal it
/// started over a snapshot it wrote itself, so it never appends after a torn record or to
/// a journal whose base it cannot vouch for: without one, the next record is saved as a
/// whole snapshot instead.
#[derive(Debug, Default)]
pub(crate) struct JournalWriter {
    /// The CRC32 of the snapshot this process last wrote for the rank, if that save
    /// succeeded and nothing was appended after it that failed.
    base: Option<u32>,
    /// The open journal, once the first record after that save was appended.
    file: Option<File>,
}

impl JournalWriter {
    /// Save `map` in full (compacting its journal); appends then start a new journal.
    pub(crate) fn save(&mut self, map: &Filemap, dir: &Path) -> io::Result<()> {
        self.file = None;
        self.base = None;
        self.base = Some(map.save_snapshot(dir)?);
        Ok(())
    }

    /// Record that `file` was added to dataset `dataset` of `map` (which already holds it
    /// in memory): one record appended to the journal and synced.
    pub(crate) fn append(
        &mut self,
        map: &Filemap,
        dir: &Path,
        dataset: u64,
        file: &FileRecord,
    ) -> io::Result<()> {
        let result = self.append_inner(map, dir, dataset, file);
        if result.is_err() {
            // the journal may end in a partial record now: never append after it
            self.file = None;
            self.base = None;
        }
        result
    }

    fn append_inner(
        &mut self,
        map: &Filemap,
        dir: &Path,
        dataset: u64,
        file: &FileRecord,
    ) -> io::Result<()> {
        if self.file.is_none() {
            let Some(base) = self.base else {
                // the snapshot on disk is not known to match: the whole map (holding the
                // new record) becomes the snapshot
                return self.save(map, dir);
            };
            let path = dir.join(Filemap::journal_name(map.rank));
            let mut f = scr_plugin::cachefs::create_file(&path).map_err(io::Error::other)?;
            let header = format!("scr-rs {JOURNAL_KIND} {JOURNAL_VERSION} base={base:08x}\n");
            f.write_all(header.as_bytes())?;
            f.sync_data()?;
            // the journal's name must survive a crash as its records do
            File::open(dir)?.sync_all()?;
            count_io(header.len(), 2);
            self.file = Some(f);
        }
        let f = self.file.as_mut().expect("opened above");
        let payload = serde_json::to_vec(&JournalEntry {
            dataset,
            file: file.clone(),
        })
        .map_err(io::Error::other)?;
        if payload.len() > MAX_RECORD as usize {
            // longer than a reader accepts (no real file name is): saved in full instead
            return self.save(map, dir);
        }
        let mut record = Vec::with_capacity(8 + payload.len());
        record.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        record.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
        record.extend_from_slice(&payload);
        f.write_all(&record)?;
        f.sync_data()?;
        count_io(record.len(), 1);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A filemap holding dataset 7 (not complete, no files yet), as start_output saves it.
    fn started(rank: u32) -> Filemap {
        let mut map = Filemap {
            rank,
            datasets: BTreeMap::new(),
        };
        map.datasets.insert(
            7,
            DatasetRecord {
                id: 7,
                name: "ckpt.1".into(),
                checkpoint_id: Some(1),
                ..DatasetRecord::default()
            },
        );
        map
    }

    fn file(name: &str) -> FileRecord {
        FileRecord {
            name: name.into(),
            ..FileRecord::default()
        }
    }

    /// What route_file does: the record added in memory, then journaled.
    fn route(w: &mut JournalWriter, map: &mut Filemap, dir: &Path, name: &str) {
        let f = file(name);
        map.datasets.get_mut(&7).unwrap().files.push(f.clone());
        w.append(map, dir, 7, &f).unwrap();
    }

    fn names(map: &Filemap) -> Vec<String> {
        map.datasets[&7]
            .files
            .iter()
            .map(|f| f.name.clone())
            .collect()
    }

    fn journal(dir: &Path) -> PathBuf {
        dir.join(Filemap::journal_name(3))
    }

    /// Routed names reach the journal only (the snapshot stays as saved), load replays
    /// them in order, and saving compacts: the snapshot holds them and the journal is gone.
    #[test]
    fn journal_replays_over_its_snapshot_and_save_compacts_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut map = started(3);
        let mut w = JournalWriter::default();
        w.save(&map, dir.path()).unwrap();
        let snapshot = std::fs::read(dir.path().join(Filemap::file_name(3))).unwrap();
        for n in ["a.dat", "sub/b.dat", "c.dat"] {
            route(&mut w, &mut map, dir.path(), n);
        }
        assert_eq!(
            std::fs::read(dir.path().join(Filemap::file_name(3))).unwrap(),
            snapshot,
            "routing must not rewrite the snapshot"
        );
        let loaded = Filemap::load(dir.path(), 3).unwrap();
        assert_eq!(names(&loaded), ["a.dat", "sub/b.dat", "c.dat"]);
        assert_eq!(loaded, map);
        assert_eq!(Filemap::owners_in(dir.path()).len(), 1);

        w.save(&map, dir.path()).unwrap();
        assert!(!journal(dir.path()).exists(), "save compacts the journal");
        assert_eq!(Filemap::load(dir.path(), 3).unwrap(), map);
        // after the compaction a new journal starts over the new snapshot
        route(&mut w, &mut map, dir.path(), "d.dat");
        assert_eq!(Filemap::load(dir.path(), 3).unwrap(), map);
        let bytes = std::fs::read(journal(dir.path())).unwrap();
        let header =
            String::from_utf8_lossy(&bytes[..bytes.iter().position(|&b| b == b'\n').unwrap()])
                .into_owned();
        assert!(
            header.starts_with("scr-rs filemap-journal 1 base="),
            "{header}"
        );
    }

    /// A writer that never saved (a new process) does not trust the snapshot on disk:
    /// its first record is a whole save, which also removes whatever journal was there.
    #[test]
    fn a_new_writer_saves_in_full_before_it_journals() {
        let dir = tempfile::tempdir().unwrap();
        let mut map = started(3);
        map.save(dir.path()).unwrap();
        std::fs::write(
            journal(dir.path()),
            b"scr-rs filemap-journal 1 base=00000000\n",
        )
        .unwrap();
        let mut w = JournalWriter::default();
        route(&mut w, &mut map, dir.path(), "a.dat");
        assert!(!journal(dir.path()).exists());
        assert_eq!(names(&Filemap::load(dir.path(), 3).unwrap()), ["a.dat"]);
        route(&mut w, &mut map, dir.path(), "b.dat");
        assert!(journal(dir.path()).exists());
        assert_eq!(
            names(&Filemap::load(dir.path(), 3).unwrap()),
            ["a.dat", "b.dat"]
        );
    }

    /// A crash inside an append leaves the last record cut short, or with bytes that
    /// never reached the disk (zeros, or other bytes): it is ignored, the others load.
    #[test]
    fn a_torn_last_record_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let mut map = started(3);
        let mut w = JournalWriter::default();
        w.save(&map, dir.path()).unwrap();
        route(&mut w, &mut map, dir.path(), "a.dat");
        route(&mut w, &mut map, dir.path(), "b.dat");
        let good = std::fs::read(journal(dir.path())).unwrap();
        let last_len = 8 + serde_json::to_vec(&JournalEntry {
            dataset: 7,
            file: file("b.dat"),
        })
        .unwrap()
        .len();
        let last = good.len() - last_len;
        let mut cases: Vec<(&str, Vec<u8>)> = vec![
            ("length cut", good[..last + 3].to_vec()),
            ("payload cut", good[..good.len() - 1].to_vec()),
        ];
        let mut flipped = good.clone();
        *flipped.last_mut().unwrap() ^= 0x20;
        cases.push(("last byte wrong", flipped));
        let mut zeroed = good.clone();
        zeroed[last..].fill(0);
        cases.push(("zeros", zeroed));
        for (what, bytes) in cases {
            std::fs::write(journal(dir.path()), &bytes).unwrap();
            let loaded = Filemap::load(dir.path(), 3).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(names(&loaded), ["a.dat"], "{what}");
        }
        // a header cut short: no record was ever acknowledged
        std::fs::write(journal(dir.path()), b"scr-rs filemap-jour").unwrap();
        assert_eq!(
            names(&Filemap::load(dir.path(), 3).unwrap()),
            Vec::<String>::new()
        );
    }

    /// Damage that is not a torn tail is refused, naming the journal and the record.
    #[test]
    fn a_corrupt_record_before_the_last_is_refused_naming_the_journal() {
        let dir = tempfile::tempdir().unwrap();
        let mut map = started(3);
        let mut w = JournalWriter::default();
        w.save(&map, dir.path()).unwrap();
        for n in ["a.dat", "b.dat", "c.dat"] {
            route(&mut w, &mut map, dir.path(), n);
        }
        let good = std::fs::read(journal(dir.path())).unwrap();
        let first = good.iter().position(|&b| b == b'\n').unwrap() + 1;
        let path = journal(dir.path()).display().to_string();

        let mut bad = good.clone();
        bad[first + 8 + 3] ^= 0x01; // a byte of the first record's payload
        std::fs::write(journal(dir.path()), &bad).unwrap();
        let e = Filemap::load(dir.path(), 3).unwrap_err().to_string();
        assert_eq!(
            e,
            format!("{path}: record 1 (byte {first}) fails its checksum and is not the last one; the file is not trusted")
        );

        let mut bad = good.clone();
        bad[first..first + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        std::fs::write(journal(dir.path()), &bad).unwrap();
        let e = Filemap::load(dir.path(), 3).unwrap_err().to_string();
        assert_eq!(
            e,
            format!("{path}: record 1 (byte {first}) has the impossible length 4294967295; the file is not trusted")
        );

        std::fs::write(journal(dir.path()), b"garbage\n").unwrap();
        let e = Filemap::load(dir.path(), 3).unwrap_err().to_string();
        assert_eq!(
            e,
            format!("{path}: not an scr-rs filemap journal; the file is not trusted")
        );
    }

    /// A journal of a format version this release does not know is refused as such (not
    /// as damage), naming the file.
    #[test]
    fn an_unknown_journal_version_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        started(3).save(dir.path()).unwrap();
        std::fs::write(
            journal(dir.path()),
            b"scr-rs filemap-journal 2 base=12345678\n",
        )
        .unwrap();
        let e = Filemap::load(dir.path(), 3).unwrap_err();
        assert!(e.is_other_version(), "{e}");
        assert_eq!(
            e.to_string(),
            format!(
                "{}: format version 2, this release reads 1; the file is not trusted",
                journal(dir.path()).display()
            )
        );
        // a snapshot where a journal should be
        std::fs::copy(dir.path().join(Filemap::file_name(3)), journal(dir.path())).unwrap();
        let e = Filemap::load(dir.path(), 3).unwrap_err().to_string();
        assert!(
            e.contains("is a `filemap` file, expected `filemap-journal`"),
            "{e}"
        );
    }

    /// A journal whose snapshot is gone cannot be replayed (the datasets it extends are
    /// unknown): refused naming it; it still counts as an owner so readers report it,
    /// and removing the owner's filemap removes it.
    #[test]
    fn a_journal_without_its_snapshot_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut map = started(3);
        let mut w = JournalWriter::default();
        w.save(&map, dir.path()).unwrap();
        route(&mut w, &mut map, dir.path(), "a.dat");
        std::fs::remove_file(dir.path().join(Filemap::file_name(3))).unwrap();
        let e = Filemap::load(dir.path(), 3).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "{}: a filemap journal without its snapshot {}",
                journal(dir.path()).display(),
                dir.path().join(Filemap::file_name(3)).display()
            )),
            "{e}"
        );
        assert_eq!(
            Filemap::owners_in(dir.path()),
            [(3, dir.path().join(Filemap::file_name(3)))]
        );
        Filemap::remove(dir.path(), 3).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    /// A crash after a save renamed the new snapshot into place but before it removed
    /// the journal: the journal's base is the old snapshot, so it is stale and ignored
    /// (replaying it would bring back a file the new snapshot dropped).
    #[test]
    fn a_stale_journal_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let mut map = started(3);
        let mut w = JournalWriter::default();
        w.save(&map, dir.path()).unwrap();
        route(&mut w, &mut map, dir.path(), "a.dat");
        let stale = std::fs::read(journal(dir.path())).unwrap();
        map.datasets.get_mut(&7).unwrap().files.clear();
        map.datasets.get_mut(&7).unwrap().complete = true;
        w.save(&map, dir.path()).unwrap();
        std::fs::write(journal(dir.path()), &stale).unwrap();
        assert_eq!(Filemap::load(dir.path(), 3).unwrap(), map);
    }

    /// The background hash's note gives its CRC32s to the dataset still pending when the
    /// filemap is loaded (a file it could not read gets none), and changes nothing once
    /// the dataset is recorded; `remove` takes the note with the filemap.
    #[test]
    fn a_crc_note_is_applied_to_its_pending_dataset_only() {
        let dir = tempfile::tempdir().unwrap();
        let mut map = started(3);
        let mut w = JournalWriter::default();
        w.save(&map, dir.path()).unwrap();
        route(&mut w, &mut map, dir.path(), "a.dat");
        route(&mut w, &mut map, dir.path(), "b.dat");
        let rec = map.datasets.get_mut(&7).unwrap();
        rec.complete = true;
        rec.crc32_pending = true;
        w.save(&map, dir.path()).unwrap();
        let note = CrcNote {
            dataset: 7,
            files: vec![("b.dat".into(), None), ("a.dat".into(), Some(0xfeed))],
        };
        note.write(dir.path(), 3).unwrap();
        let loaded = Filemap::load(dir.path(), 3).unwrap();
        let rec = &loaded.datasets[&7];
        // b.dat could not be read: the dataset stays unverifiable on this rank
        assert!(rec.crc32_pending);
        let crcs: Vec<Option<u32>> = rec.files.iter().map(|f| f.crc32).collect();
        assert_eq!(crcs, vec![Some(0xfeed), None]);
        // a note with every file's CRC32 clears it
        CrcNote {
            dataset: 7,
            files: vec![("b.dat".into(), Some(7)), ("a.dat".into(), Some(0xfeed))],
        }
        .write(dir.path(), 3)
        .unwrap();
        let loaded = Filemap::load(dir.path(), 3).unwrap();
        let rec = &loaded.datasets[&7];
        assert!(!rec.crc32_pending);
        let crcs: Vec<Option<u32>> = rec.files.iter().map(|f| f.crc32).collect();
        assert_eq!(crcs, vec![Some(0xfeed), Some(7)]);
        // recorded since (the note would be removed; a stale one changes nothing)
        let mut recorded = map.clone();
        let r = recorded.datasets.get_mut(&7).unwrap();
        r.crc32_pending = false;
        r.files[0].crc32 = Some(1);
        w.save(&recorded, dir.path()).unwrap();
        assert_eq!(Filemap::load(dir.path(), 3).unwrap(), recorded);
        Filemap::remove(dir.path(), 3).unwrap();
        assert!(!dir.path().join(Filemap::crc_note_name(3)).exists());
    }

    /// A record naming a dataset its snapshot does not hold: journal and snapshot do not
    /// belong together.
    #[test]
    fn a_record_of_an_unknown_dataset_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let map = started(3);
        let mut w = JournalWriter::default();
        w.save(&map, dir.path()).unwrap();
        w.append(&map, dir.path(), 9, &file("x.dat")).unwrap();
        let e = Filemap::load(dir.path(), 3).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "{}: record 1 names dataset 9, which its filemap snapshot does not hold; the file is not trusted",
                journal(dir.path()).display()
            )
        );
    }

    #[test]
    fn the_restart_candidate_is_the_newest_complete_checkpoint_not_skipped() {
        let rec = |id: u64, ckpt: Option<u64>, complete: bool| DatasetRecord {
            id,
            name: format!("d{id}"),
            checkpoint_id: ckpt,
            complete,
            ..DatasetRecord::default()
        };
        let map = Filemap {
            rank: 0,
            datasets: [
                rec(1, Some(1), true),
                rec(2, Some(2), true),
                rec(3, None, true),     // an output, not a checkpoint
                rec(4, Some(3), false), // being written
            ]
            .into_iter()
            .map(|r| (r.id, r))
            .collect(),
        };
        assert_eq!(map.newest_checkpoint(&[]), Some(2));
        assert_eq!(
            map.newest_checkpoint(&[2]),
            Some(1),
            "an invalid one is skipped"
        );
        assert_eq!(map.newest_checkpoint(&[1, 2]), None);
    }
}
