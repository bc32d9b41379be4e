//! Redundancy files: the scheme's data followed by a versioned, checksummed header, so a
//! rebuild can trust what it reads or refuse it.
//!
//! Layout: `payload | header (JSON) | header length (u32 LE) | header CRC32 (u32 LE) |
//! magic "SCRRED01"`. The header records the payload's length and CRC32, the set, and the
//! metadata of the files this member's redundancy data describes (its own and its
//! neighbours'). Files are written under a temporary name and renamed when complete.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use abi_stable::std_types::{RNone, RSome};
use serde::{Deserialize, Serialize};

use crate::abi::FileMeta;
use crate::error::{ErrorCode, PluginError, PluginResult};

/// Format version written by this release.
pub const REDFILE_VERSION: u32 = 1;
const MAGIC: &[u8; 8] = b"SCRRED01";
const TRAILER: u64 = 16;

/// File metadata as stored in a header: the name is relative to the dataset directory,
/// so a file can be rebuilt on another node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredMeta {
    /// Path relative to the dataset directory.
    pub name: String,
    /// Size in bytes.
    pub size: u64,
    /// Permission bits.
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Modification time.
    pub mtime: (i64, u32),
    /// Access time.
    pub atime: (i64, u32),
    /// CRC32 when known.
    pub crc32: Option<u32>,
}

impl StoredMeta {
    /// From a host-provided [`FileMeta`] of a file in `dir`.
    pub fn from_meta(m: &FileMeta, dir: &Path) -> Self {
        let p = Path::new(m.path.as_str());
        StoredMeta {
            name: p
                .strip_prefix(dir)
                .unwrap_or(p)
                .to_string_lossy()
                .into_owned(),
            size: m.size,
            mode: m.mode,
            uid: m.uid,
            gid: m.gid,
            mtime: (m.mtime_sec, m.mtime_nsec),
            atime: (m.atime_sec, m.atime_nsec),
            crc32: m.crc32.into_option(),
        }
    }

    /// As a [`FileMeta`] for a file in `dir`.
    pub fn to_meta(&self, dir: &Path) -> FileMeta {
        FileMeta {
            path: dir.join(&self.name).display().to_string().into(),
            size: self.size,
            mode: self.mode,
            uid: self.uid,
            gid: self.gid,
            mtime_sec: self.mtime.0,
            mtime_nsec: self.mtime.1,
            atime_sec: self.atime.0,
            atime_nsec: self.atime.1,
            crc32: self.crc32.map_or(RNone, RSome),
        }
    }
}

/// The header of a redundancy file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedHeader {
    /// Format version.
    pub version: u32,
    /// Scheme name.
    pub scheme: String,
    /// Dataset id.
    pub dataset_id: u64,
    /// Members in the set.
    pub set_size: u32,
    /// This member's index.
    pub member: u32,
    /// World rank of each member.
    pub world_ranks: Vec<u32>,
    /// Scheme-specific size (XOR: the chunk size; PARTNER: unused).
    pub chunk: u64,
    /// File metadata by member index (this member and the neighbours it protects).
    pub files: BTreeMap<u32, Vec<StoredMeta>>,
    /// Scheme-specific payload sections by member index: (offset, length).
    pub sections: BTreeMap<u32, (u64, u64)>,
    /// Payload length.
    pub payload_len: u64,
    /// Payload CRC32.
    pub payload_crc32: u32,
}

impl RedHeader {
    /// A header for this member of the set `host` describes, for dataset `dataset_id`.
    pub fn for_member(scheme: &str, dataset_id: u64, host: &crate::Host<'_>) -> PluginResult<Self> {
        Ok(RedHeader {
            scheme: scheme.into(),
            dataset_id,
            set_size: host.size(),
            member: host.rank(),
            world_ranks: (0..host.size())
                .map(|m| host.world_rank(m))
                .collect::<PluginResult<_>>()?,
            ..RedHeader::default()
        })
    }

    /// Whether this header belongs to that member of that set and dataset (a file left
    /// by another run or another set must not be trusted).
    pub fn matches(&self, scheme: &str, dataset_id: u64, set_size: u32, member: u32) -> bool {
        self.scheme == scheme
            && self.dataset_id == dataset_id
            && self.set_size == set_size
            && self.member == member
    }
}

/// The redundancy file of one member in a dataset directory:
/// `scr.<world rank>.<scheme>.mem_<member>_of_<members>.redset` (unique on a node that
/// several ranks share).
pub fn member_file(
    dir: &Path,
    scheme: &str,
    world_rank: u32,
    member: u32,
    members: u32,
) -> PathBuf {
    dir.join(format!(
        "scr.{world_rank}.{}.mem_{member}_of_{members}.redset",
        scheme.to_ascii_lowercase()
    ))
}

/// Delete a redundancy file and the temporary file a [`RedWriter`] of it may have left
/// (an apply that ended before [`RedWriter::finish`]); files already gone are fine.
pub fn remove(path: &Path) -> PluginResult<()> {
    for p in [path.with_extension("tmp"), path.to_path_buf()] {
        match std::fs::remove_file(&p) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(PluginError::io(p.display(), e))
            }
            _ => {}
        }
    }
    Ok(())
}

/// Writes a redundancy file: payload first (sequentially, or in sections with
/// [`write_at`](RedWriter::write_at)), header last. Dropped before
/// [`finish`](RedWriter::finish) (an error or a panic in the middle of an apply), it
/// removes its temporary file: a failed apply leaves no partial redundancy file behind.
pub struct RedWriter {
    path: PathBuf,
    tmp: PathBuf,
    file: File,
    crc: crc32fast::Hasher,
    len: u64,
    /// Runs written by `write_at`, keyed by their end offset: (start, CRC32 of the run).
    placed: BTreeMap<u64, (u64, crc32fast::Hasher)>,
    /// Set once the temporary file was renamed into place.
    finished: bool,
}

impl Drop for RedWriter {
    fn drop(&mut self) {
        if !self.finished {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

impl RedWriter {
    /// Start writing `path` (under a temporary name until [`RedWriter::finish`]).
    pub fn create(path: &Path) -> PluginResult<Self> {
        let tmp = path.with_extension("tmp");
        // mode 0600, never through a link left at the temporary name
        let file = crate::cachefs::create_file(&tmp)?;
        Ok(RedWriter {
            path: path.to_path_buf(),
            tmp,
            file,
            crc: crc32fast::Hasher::new(),
            len: 0,
            placed: BTreeMap::new(),
            finished: false,
        })
    }

    /// Write payload bytes at `offset`, for a payload made of sections that fill in
    /// parallel (RS completes a piece of each of its checksum chunks per pipeline step).
    /// Each run of consecutive writes keeps its own CRC32, and [`finish`](Self::finish)
    /// combines them, so the payload is never read back. The writes must cover the
    /// payload from offset 0 without a gap or an overlap (checked at `finish`), and a
    /// writer uses either `write_at` or [`write`](Self::write), not both.
    pub fn write_at(&mut self, offset: u64, data: &[u8]) -> PluginResult<()> {
        use std::os::unix::fs::FileExt;
        self.file
            .write_all_at(data, offset)
            .map_err(|e| PluginError::io(self.tmp.display(), e))?;
        let (start, mut crc) = self
            .placed
            .remove(&offset)
            .unwrap_or_else(|| (offset, crc32fast::Hasher::new()));
        crc.update(data);
        self.placed.insert(offset + data.len() as u64, (start, crc));
        Ok(())
    }

    /// Append payload bytes.
    pub fn write(&mut self, data: &[u8]) -> PluginResult<()> {
        self.file
            .write_all(data)
            .map_err(|e| PluginError::io(self.tmp.display(), e))?;
        self.crc.update(data);
        self.len += data.len() as u64;
        Ok(())
    }

    /// Payload bytes written so far.
    pub fn len(&self) -> u64 {
        self.len
            + self
                .placed
                .iter()
                .map(|(end, (start, _))| end - start)
                .sum::<u64>()
    }

    /// Whether no payload was written.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The payload's length and CRC32 from the runs `write_at` wrote, or why they do
    /// not form one payload.
    fn placed_payload(&self) -> PluginResult<(u64, u32)> {
        let mut runs: Vec<(u64, u64, &crc32fast::Hasher)> = self
            .placed
            .iter()
            .map(|(&end, (start, crc))| (*start, end, crc))
            .collect();
        runs.sort_by_key(|r| r.0);
        let mut crc = crc32fast::Hasher::new();
        let mut at = 0u64;
        for (start, end, run) in runs {
            if start != at || self.len != 0 {
                return Err(PluginError::new(
                    ErrorCode::OTHER,
                    format!(
                        "{}: payload written with a gap, an overlap or mixed sequential writes at offset {at} (a scheme bug)",
                        self.tmp.display()
                    ),
                ));
            }
            crc.combine(run);
            at = end;
        }
        Ok((at, crc.finalize()))
    }

    /// Append the header (with payload length and CRC filled in), fsync and rename into
    /// place.
    pub fn finish(mut self, mut header: RedHeader) -> PluginResult<PathBuf> {
        header.version = REDFILE_VERSION;
        (header.payload_len, header.payload_crc32) = if self.placed.is_empty() {
            (self.len, self.crc.clone().finalize())
        } else {
            self.placed_payload()?
        };
        let end = header.payload_len;
        let json = serde_json::to_vec(&header)
            .map_err(|e| PluginError::new(ErrorCode::OTHER, format!("header: {e}")))?;
        let mut trailer = Vec::with_capacity(json.len() + TRAILER as usize);
        trailer.extend_from_slice(&json);
        trailer.extend_from_slice(&(json.len() as u32).to_le_bytes());
        trailer.extend_from_slice(&crc32fast::hash(&json).to_le_bytes());
        trailer.extend_from_slice(MAGIC);
        let io = |e| PluginError::io(self.tmp.display(), e);
        self.file.seek(SeekFrom::Start(end)).map_err(io)?;
        self.file.write_all(&trailer).map_err(io)?;
        self.file.sync_all().map_err(io)?;
        std::fs::rename(&self.tmp, &self.path).map_err(io)?;
        self.finished = true;
        Ok(self.path.clone())
    }
}

/// Reads a redundancy file whose header checked out.
pub struct RedReader {
    path: PathBuf,
    file: File,
    /// The verified header.
    pub header: RedHeader,
    /// The CRC32 of the payload bytes read through [`RedReader::read_at`] so far, in
    /// whatever order (runs joined as they meet): what [`RedReader::verify_rest`] need
    /// not read again.
    seen: crate::lofi::FileCrcs,
}

fn corrupt(path: &Path, why: impl std::fmt::Display) -> PluginError {
    PluginError::new(
        ErrorCode::CORRUPT,
        format!("{}: {why}; not trusted", path.display()),
    )
}

impl RedReader {
    /// Open `path` and verify its trailer and header (not the payload; see
    /// [`RedReader::verify_payload`]).
    pub fn open(path: &Path) -> PluginResult<Self> {
        let mut file = File::open(path).map_err(|e| PluginError::io(path.display(), e))?;
        let size = file
            .metadata()
            .map_err(|e| PluginError::io(path.display(), e))?
            .len();
        if size < TRAILER {
            return Err(corrupt(path, "too short to be a redundancy file"));
        }
        let mut t = [0u8; TRAILER as usize];
        file.seek(SeekFrom::Start(size - TRAILER))
            .and_then(|_| file.read_exact(&mut t))
            .map_err(|e| PluginError::io(path.display(), e))?;
        if &t[8..] != MAGIC {
            return Err(corrupt(path, "no redundancy-file trailer"));
        }
        let hlen = u32::from_le_bytes(t[..4].try_into().expect("4 bytes")) as u64;
        let hcrc = u32::from_le_bytes(t[4..8].try_into().expect("4 bytes"));
        if hlen > size - TRAILER {
            return Err(corrupt(path, "header length beyond the file"));
        }
        let mut json = vec![0u8; hlen as usize];
        file.seek(SeekFrom::Start(size - TRAILER - hlen))
            .and_then(|_| file.read_exact(&mut json))
            .map_err(|e| PluginError::io(path.display(), e))?;
        if crc32fast::hash(&json) != hcrc {
            return Err(corrupt(path, "header checksum mismatch"));
        }
        let header: RedHeader =
            serde_json::from_slice(&json).map_err(|e| corrupt(path, format!("header: {e}")))?;
        if header.version != REDFILE_VERSION {
            return Err(corrupt(
                path,
                format!(
                    "format version {}, expected {REDFILE_VERSION}",
                    header.version
                ),
            ));
        }
        if header.payload_len != size - TRAILER - hlen {
            return Err(corrupt(path, "payload length does not match the header"));
        }
        // names are joined to the dataset directory to write rebuilt files: one that
        // would leave it (absolute, `..`) is a forged or broken header
        if let Some(bad) = header
            .files
            .values()
            .flatten()
            .find(|m| !stays_inside(&m.name))
        {
            return Err(corrupt(
                path,
                format!("file name `{}` leaves the dataset directory", bad.name),
            ));
        }
        Ok(RedReader {
            path: path.to_path_buf(),
            file,
            seen: payload_crcs(header.payload_len),
            header,
        })
    }

    /// Read the whole payload once and check its CRC32.
    pub fn verify_payload(&mut self) -> PluginResult<()> {
        self.seen = payload_crcs(self.header.payload_len);
        self.verify_rest()
    }

    /// Check the payload's CRC32 in the pass a rebuild makes over it anyway: the bytes
    /// read through [`read_at`](Self::read_at) were hashed as they were read, in any
    /// order, so only the parts of the payload the rebuild did not read are read here
    /// (nothing, when it read all of it; all of it again, when it read a region twice).
    ///
    /// Why: a redundancy file checked with [`open_verified`] before a rebuild is read
    /// twice, once for the check and once to rebuild. A scheme may instead open it with
    /// [`RedReader::open`] (the header is checked), use it, and call this before it
    /// lets anything built from the payload count: bytes sent or reduced from a payload
    /// that turns out damaged must then be discarded on every member, which the scheme
    /// arranges (its rebuilt files are checked against the CRC32s in the redundancy data
    /// as well).
    pub fn verify_rest(&mut self) -> PluginResult<()> {
        let gaps = match self.seen.gaps(0) {
            Some(gaps) => gaps,
            None => {
                self.seen = payload_crcs(self.header.payload_len);
                vec![(0, self.header.payload_len)]
            }
        };
        let mut buf = vec![
            0u8;
            gaps.iter()
                .map(|g| g.1 - g.0)
                .max()
                .unwrap_or(0)
                .min(1 << 20) as usize
        ];
        for (mut at, end) in gaps {
            while at < end {
                let n = (end - at).min(buf.len() as u64) as usize;
                self.read_at(at, &mut buf[..n])?;
                at += n as u64;
            }
        }
        if self.seen.clone().finish()[0] != Some(self.header.payload_crc32) {
            return Err(corrupt(&self.path, "payload checksum mismatch"));
        }
        Ok(())
    }

    /// Read payload bytes at `offset` (bytes past the payload read as zero).
    pub fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> PluginResult<()> {
        use std::os::unix::fs::FileExt;
        buf.fill(0);
        if offset >= self.header.payload_len {
            return Ok(());
        }
        let n = ((self.header.payload_len - offset) as usize).min(buf.len());
        self.file
            .read_exact_at(&mut buf[..n], offset)
            .map_err(|e| PluginError::io(self.path.display(), e))?;
        self.seen.update(offset, &buf[..n]);
        Ok(())
    }
}

/// Tracks the CRC32 of a payload of `len` bytes read in pieces.
fn payload_crcs(len: u64) -> crate::lofi::FileCrcs {
    crate::lofi::FileCrcs::new(&[FileMeta::new("payload", len)])
}

/// Whether `name` is a relative path that stays below the directory it is joined to.
pub fn stays_inside(name: &str) -> bool {
    use std::path::Component;
    !name.is_empty()
        && Path::new(name)
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

/// Open and fully verify `path`, or say why it cannot be trusted.
pub fn open_verified(path: &Path) -> PluginResult<RedReader> {
    let mut r = RedReader::open(path)?;
    r.verify_payload()?;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_corruption_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.redset");
        let mut w = RedWriter::create(&p).unwrap();
        w.write(b"parity-bytes").unwrap();
        let header = RedHeader {
            scheme: "XOR".into(),
            set_size: 3,
            chunk: 12,
            ..RedHeader::default()
        };
        w.finish(header.clone()).unwrap();
        let mut r = open_verified(&p).unwrap();
        assert_eq!(r.header.payload_len, 12);
        assert_eq!(r.header.scheme, "XOR");
        let mut b = [0u8; 16];
        r.read_at(7, &mut b).unwrap();
        assert_eq!(&b[..5], b"bytes");
        assert_eq!(&b[5..], &[0u8; 11]);

        let good = std::fs::read(&p).unwrap();
        for (i, why) in [
            (0, "payload checksum mismatch"),
            (good.len() - 30, "header"),
            (good.len() - 10, "header checksum mismatch"),
            (good.len() - 1, "no redundancy-file trailer"),
        ] {
            let mut bad = good.clone();
            bad[i] ^= 0x20;
            std::fs::write(&p, &bad).unwrap();
            let e = open_verified(&p).err().unwrap();
            assert_eq!(e.code, ErrorCode::CORRUPT, "byte {i}");
            assert!(e.message().contains(why), "byte {i}: {e}");
        }
        std::fs::write(&p, &good[..good.len() - 20]).unwrap();
        assert!(open_verified(&p).is_err());

        // a well-formed header naming a file outside the dataset directory
        for name in ["../escape", "/etc/passwd", "a/../../b"] {
            let mut w = RedWriter::create(&p).unwrap();
            w.write(b"x").unwrap();
            let mut h = header.clone();
            h.files.insert(
                0,
                vec![StoredMeta {
                    name: name.into(),
                    size: 1,
                    mode: 0,
                    uid: 0,
                    gid: 0,
                    mtime: (0, 0),
                    atime: (0, 0),
                    crc32: None,
                }],
            );
            w.finish(h).unwrap();
            let e = open_verified(&p).err().unwrap();
            assert!(e.message().contains("leaves the dataset directory"), "{e}");
        }
    }

    #[test]
    fn the_payload_is_checked_in_the_pass_that_reads_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("v.redset");
        let payload: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
        let write = |bytes: &[u8]| {
            let mut w = RedWriter::create(&p).unwrap();
            w.write(bytes).unwrap();
            w.finish(RedHeader::default()).unwrap();
        };
        write(&payload);
        // read whole, in any order: verify_rest reads nothing more (a byte changed
        // behind the reader's back afterwards is not seen: the bytes used are the ones
        // checked)
        let mut r = RedReader::open(&p).unwrap();
        let mut b = vec![0u8; 1000];
        for at in [2000u64, 0, 1000] {
            r.read_at(at, &mut b).unwrap();
        }
        let mut on_disk = std::fs::read(&p).unwrap();
        on_disk[10] ^= 1;
        std::fs::write(&p, &on_disk).unwrap();
        r.verify_rest().unwrap();
        // a damaged payload read in the pass: refused after it
        let mut r = RedReader::open(&p).unwrap();
        r.read_at(0, &mut b).unwrap();
        let e = r.verify_rest().unwrap_err();
        assert!(e.message().contains("payload checksum mismatch"), "{e}");
        // part read: only the rest is read (a change in a part already read is not
        // seen), and the result is right; a region read twice: all of it is read again
        for (flipped, right) in [(2550, true), (1500, false)] {
            write(&payload);
            let mut r = RedReader::open(&p).unwrap();
            r.read_at(0, &mut b).unwrap();
            r.read_at(2500, &mut b[..100]).unwrap();
            let mut on_disk = std::fs::read(&p).unwrap();
            on_disk[flipped] ^= 1;
            std::fs::write(&p, &on_disk).unwrap();
            assert_eq!(r.verify_rest().is_ok(), right, "byte {flipped} flipped");
        }
        write(&payload);
        let mut r = RedReader::open(&p).unwrap();
        r.read_at(0, &mut b).unwrap();
        r.read_at(500, &mut b).unwrap();
        r.verify_rest().unwrap();
        assert!(open_verified(&p).is_ok());
    }

    #[test]
    fn sections_written_in_parallel_make_one_checked_payload() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.redset");
        // two sections of 6 bytes, filled a piece of each at a time (as RS does)
        let mut w = RedWriter::create(&p).unwrap();
        for (off, a, b) in [(0u64, b"abc", b"ABC"), (3, b"def", b"DEF")] {
            w.write_at(off, a).unwrap();
            w.write_at(6 + off, b).unwrap();
        }
        assert_eq!(w.len(), 12);
        w.finish(RedHeader::default()).unwrap();
        let mut r = open_verified(&p).unwrap();
        assert_eq!(r.header.payload_len, 12);
        assert_eq!(r.header.payload_crc32, crc32fast::hash(b"abcdefABCDEF"));
        let mut b = [0u8; 12];
        r.read_at(0, &mut b).unwrap();
        assert_eq!(&b, b"abcdefABCDEF");

        // a gap or an overlap is a scheme bug, refused rather than written
        for runs in [&[(0u64, 3usize), (4, 2)][..], &[(0, 4), (3, 3)][..]] {
            let mut w = RedWriter::create(&p).unwrap();
            for &(off, len) in runs {
                w.write_at(off, &vec![1u8; len]).unwrap();
            }
            let e = w.finish(RedHeader::default()).unwrap_err();
            assert!(e.message().contains("with a gap, an overlap"), "{e}");
        }
    }

    #[test]
    fn an_unfinished_writer_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("scr.1.xor.mem_1_of_4.redset");
        let tmp = dir.path().join("scr.1.xor.mem_1_of_4.tmp");
        // an apply that fails after writing part of its redundancy file
        let mut w = RedWriter::create(&p).unwrap();
        w.write(b"half of the parity").unwrap();
        assert!(tmp.is_file());
        drop(w);
        assert!(!tmp.exists() && !p.exists());
        // one left by a process that died in the middle goes with `remove`
        std::fs::write(&tmp, b"partial").unwrap();
        remove(&p).unwrap();
        assert!(!tmp.exists());
        // a finished one stays until removed
        let mut w = RedWriter::create(&p).unwrap();
        w.write(b"parity").unwrap();
        w.finish(RedHeader::default()).unwrap();
        assert!(p.is_file() && !tmp.exists());
        remove(&p).unwrap();
        assert!(!p.exists());
    }
}
