//! Logical files: a member's files of one dataset treated as one file (their
//! concatenation, padded with zeros past its end), the way XOR and RS see them; and
//! [`FileCrcs`], which computes each of those files' CRC32 from the pieces a scheme reads
//! anyway, so that recording a CRC32 costs no second read of the data.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use abi_stable::std_types::ROption;

use crate::abi::FileMeta;
use crate::error::{ErrorCode, PluginError, PluginResult};

/// The deepest directory every file of `metas` lies below (`None` for no files).
fn common_parent(metas: &[FileMeta]) -> Option<PathBuf> {
    let mut parents = metas
        .iter()
        .map(|m| Path::new(m.path.as_str()).parent().unwrap_or(Path::new("")));
    let mut common = parents.next()?.to_path_buf();
    for p in parents {
        while !p.starts_with(&common) {
            if !common.pop() {
                break;
            }
        }
    }
    Some(common)
}

/// An ordered list of files read and written as one zero-padded stream.
///
/// Files opened for writing ([`create_in`](Self::create_in)) hash the bytes written to
/// them as they pass ([`written_crc32`](Self::written_crc32)), so a rebuild checks what
/// it wrote against the CRC32 its redundancy data records without reading it back
/// ([`crate::ring::finish_rebuild`]).
pub struct LogicalFile {
    parts: Vec<(PathBuf, u64)>,
    handles: Vec<File>,
    /// The CRC32s of the bytes written, when writable.
    written: Option<FileCrcs>,
}

impl LogicalFile {
    /// Open the files of `metas` for reading.
    pub fn open(metas: &[FileMeta]) -> PluginResult<Self> {
        Self::with(None, metas)
    }

    /// Create (truncate) the files of `metas` in the dataset directory `dir` for writing:
    /// new files with mode 0600, parent directories below `dir` with mode 0700, and never
    /// through a symbolic link in place of a directory level or a file (see
    /// [`crate::cachefs`]). Every file must lie below `dir`, which must exist (a scheme
    /// passes the dataset directory it was given).
    pub fn create_in(dir: &Path, metas: &[FileMeta]) -> PluginResult<Self> {
        Self::with(Some(dir), metas)
    }

    /// scr-plugin 0.1.0's form, kept so that plugins written against 0.1.0 build
    /// unchanged: [`LogicalFile::create_in`] with the directory the files have in common
    /// (made first when missing, as 0.1.0 made every file's parent directories). The
    /// levels from that directory down are checked as `create_in` checks them; the levels
    /// above it are not, since 0.1.0 was not told which directory is the dataset's. As
    /// with `create_in`, files are created with mode 0600 and directories 0700 (0.1.0
    /// left both to the umask).
    #[deprecated(
        since = "0.1.1",
        note = "pass the dataset directory: `LogicalFile::create_in(dir, metas)`, which refuses symbolic links below it (see scr_plugin::manual::versions)"
    )]
    pub fn create(metas: &[FileMeta]) -> PluginResult<Self> {
        let top = match common_parent(metas) {
            // relative names without a directory: the working directory, as in 0.1.0
            Some(top) if !top.as_os_str().is_empty() => top,
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&top).map_err(|e| PluginError::io(top.display(), e))?;
        Self::with(Some(&top), metas)
    }

    fn with(top: Option<&Path>, metas: &[FileMeta]) -> PluginResult<Self> {
        let writable = top.is_some();
        let parts: Vec<(PathBuf, u64)> = metas
            .iter()
            .map(|m| (PathBuf::from(m.path.as_str()), m.size))
            .collect();
        let mut handles = Vec::with_capacity(parts.len());
        for (p, _) in &parts {
            let f = if let Some(top) = top {
                let owner = crate::cachefs::owner_of(top)?;
                if let Some(dir) = p.parent() {
                    crate::cachefs::create_dirs(top, dir, Some(owner))?;
                }
                // created empty and written in place (no truncate, then extend): the
                // length comes from the writes, and `sync` extends a file whose tail
                // was never written
                crate::cachefs::create_file(p)?
            } else {
                File::open(p).map_err(|e| PluginError::io(p.display(), e))?
            };
            handles.push(f);
        }
        Ok(LogicalFile {
            parts,
            handles,
            written: writable.then(|| FileCrcs::new(metas)),
        })
    }

    /// Total bytes of the real files.
    pub fn len(&self) -> u64 {
        self.parts.iter().map(|(_, s)| s).sum()
    }

    /// Whether there are no bytes at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Fill `buf` from logical offset `offset`; bytes past the end read as zero.
    pub fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> PluginResult<()> {
        buf.fill(0);
        self.each_span(offset, buf.len(), |f, at, range| {
            f.read_exact_at(&mut buf[range], at)
        })
    }

    /// Write `buf` at logical offset `offset`; bytes past the end are dropped (they are
    /// padding).
    pub fn write_at(&mut self, offset: u64, buf: &[u8]) -> PluginResult<()> {
        debug_assert!(self.written.is_some());
        self.each_span(offset, buf.len(), |f, at, range| {
            f.write_all_at(&buf[range], at)
        })?;
        if let Some(w) = self.written.as_mut() {
            w.update(offset, buf);
        }
        Ok(())
    }

    /// The CRC32 of each file from the bytes written to it through
    /// [`write_at`](Self::write_at), in the order the files were given: `None` for a file
    /// whose bytes were not each written exactly once (see [`FileCrcs`]), and for every
    /// file opened for reading. Bytes written past a file's end (padding) are not part
    /// of it.
    pub fn written_crc32(&self) -> Vec<Option<u32>> {
        match &self.written {
            Some(w) => w.clone().finish(),
            None => vec![None; self.parts.len()],
        }
    }

    /// Check the written files of `metas` (given by path; each must be one of this
    /// logical file's) against their recorded size and CRC32, and restore their mode and
    /// times. A file whose bytes were each written once through
    /// [`write_at`](Self::write_at) is checked from the CRC32 of those bytes and its
    /// length on disk, without reading it back; any other is read
    /// ([`crate::verify::verify_file`]). The first mismatch is returned
    /// ([`CORRUPT`](ErrorCode::CORRUPT), naming the file and both values).
    pub fn check_written(&self, metas: &[FileMeta]) -> PluginResult<()> {
        let crcs = self.written_crc32();
        for m in metas {
            let path = Path::new(m.path.as_str());
            let part = self.parts.iter().position(|(p, _)| p == path);
            let written = part.and_then(|i| crcs[i].map(|c| (i, c)));
            match written {
                Some((i, crc)) => {
                    let f = &self.handles[i];
                    let corrupt = |why: String| {
                        PluginError::new(
                            ErrorCode::CORRUPT,
                            format!("{}: {why}; not trusted", path.display()),
                        )
                    };
                    let len = f
                        .metadata()
                        .map_err(|e| PluginError::io(path.display(), e))?
                        .len();
                    if len != m.size {
                        return Err(corrupt(format!(
                            "size recorded {} B, actual {len} B",
                            m.size
                        )));
                    }
                    if let Some(want) = m.crc32.into_option().filter(|&w| w != crc) {
                        return Err(corrupt(format!(
                            "CRC32 recorded {want:08x}, written {crc:08x}"
                        )));
                    }
                }
                None => {
                    crate::verify::verify_file(m)?;
                }
            }
        }
        Ok(())
    }

    /// Restore the mode and times `metas` record on those of them that are this logical
    /// file's, through the open handles; others through their path
    /// ([`restore_metadata`]).
    pub fn restore_metadata(&self, metas: &[FileMeta]) -> PluginResult<()> {
        for m in metas {
            let path = Path::new(m.path.as_str());
            match self.parts.iter().position(|(p, _)| p == path) {
                Some(i) => restore_metadata_of(&self.handles[i], m)?,
                None => restore_metadata(m)?,
            }
        }
        Ok(())
    }

    /// Walk the parts that logical bytes `offset..offset + len` fall in: for each, call
    /// `io` with its handle, the offset within that file and the matching range of the
    /// caller's buffer (positioned I/O: one system call per span, no seek). Bytes past
    /// the last part are not visited.
    fn each_span(
        &mut self,
        mut offset: u64,
        len: usize,
        mut io: impl FnMut(&File, u64, std::ops::Range<usize>) -> std::io::Result<()>,
    ) -> PluginResult<()> {
        let mut done = 0usize;
        let mut start = 0u64;
        for ((path, size), f) in self.parts.iter().zip(self.handles.iter_mut()) {
            let end = start + size;
            if done < len && offset < end && offset >= start {
                let n = ((end - offset) as usize).min(len - done);
                io(f, offset - start, done..done + n)
                    .map_err(|e| PluginError::io(path.display(), e))?;
                done += n;
                offset += n as u64;
            }
            start = end;
        }
        Ok(())
    }

    /// Flush written files to storage. A written file shorter than its size (its tail
    /// was never written) is first extended with zeros to that size, as a file created at
    /// its full length would read.
    pub fn sync(&mut self) -> PluginResult<()> {
        let writable = self.written.is_some();
        for ((path, size), f) in self.parts.iter().zip(&self.handles) {
            let io = |e| PluginError::io(path.display(), e);
            if writable && f.metadata().map_err(io)?.len() < *size {
                f.set_len(*size).map_err(io)?;
            }
            f.sync_all().map_err(io)?;
        }
        Ok(())
    }
}

/// The CRC32 of each physical file of a [`LogicalFile`], computed from the pieces a scheme
/// reads, in whatever order it reads them.
///
/// A scheme that reads every byte of its member's data (XOR, PARTNER, RS) implements
/// [`Scheme::apply_with_crc`](crate::Scheme::apply_with_crc) by handing each piece it
/// read to [`update`](Self::update), with the logical offset it read it at, *before* it
/// changes the buffer (XOR folds a neighbour's parity into it): the CRC32 recorded for a
/// file must be the CRC32 of the bytes actually read from it, never of bytes the scheme
/// computed. [`finish`](Self::finish) then gives one CRC32 per file.
///
/// Pieces may come in any order (XOR reads its logical file slot by slot, a pipelined
/// encode may read several regions in turn): each file keeps one running hasher per
/// contiguous run of bytes seen so far, extends a run when a piece continues it, and
/// joins two runs with [`crc32fast::Hasher::combine`] when a piece closes the gap
/// between them. A piece may span several files (it is split at file boundaries) and
/// reach past the logical end (the zero padding is not part of any file and is ignored).
///
/// A file is reported only when its bytes were seen exactly once each: a file with a
/// gap, or with a byte fed twice (a scheme that reads some region twice must feed it
/// once), gets `None`, and the host then reads the file itself. Empty files are always
/// complete (their CRC32 is 0).
///
/// ```
/// use scr_plugin::{lofi::FileCrcs, FileMeta};
/// let data = b"hello, world";
/// let metas = [FileMeta::new("/a", 5), FileMeta::new("/b", 0), FileMeta::new("/c", 7)];
/// let mut crcs = FileCrcs::new(&metas);
/// crcs.update(8, &data[8..]);            // "orld", then padding
/// crcs.update(0, &data[..8]);            // "hello, w": spans /a and /c
/// assert_eq!(crcs.finish(), [Some(crc32fast::hash(b"hello")), Some(0),
///                             Some(crc32fast::hash(b", world"))]);
/// ```
#[derive(Clone, Debug)]
pub struct FileCrcs {
    /// Logical offset where each file starts.
    starts: Vec<u64>,
    /// Each file's size.
    sizes: Vec<u64>,
    /// Each file's runs seen so far, by start offset within the file; `None` once the
    /// file was fed a byte twice.
    runs: Vec<Option<BTreeMap<u64, Run>>>,
}

/// Bytes `start..end` of one file (the key is `start`), hashed.
#[derive(Clone, Debug)]
struct Run {
    end: u64,
    hasher: crc32fast::Hasher,
}

impl FileCrcs {
    /// Track the files of `metas`, in the order they form the logical file (the order
    /// [`LogicalFile::open`] was given).
    pub fn new(metas: &[FileMeta]) -> Self {
        let mut starts = Vec::with_capacity(metas.len());
        let mut at = 0u64;
        for m in metas {
            starts.push(at);
            at += m.size;
        }
        FileCrcs {
            starts,
            sizes: metas.iter().map(|m| m.size).collect(),
            runs: vec![Some(BTreeMap::new()); metas.len()],
        }
    }

    /// Account for `bytes`, read at logical offset `offset`.
    pub fn update(&mut self, offset: u64, bytes: &[u8]) {
        let end = offset.saturating_add(bytes.len() as u64);
        // the first file that ends after `offset` (empty files end where they start);
        // file ends never decrease, so a binary search finds it in O(log files) per piece
        let (mut first, mut hi) = (0, self.starts.len());
        while first < hi {
            let mid = first + (hi - first) / 2;
            if self.starts[mid] + self.sizes[mid] <= offset {
                first = mid + 1;
            } else {
                hi = mid;
            }
        }
        for fi in first..self.starts.len() {
            let (fstart, fsize) = (self.starts[fi], self.sizes[fi]);
            if fstart >= end {
                break;
            }
            if fsize == 0 {
                continue;
            }
            let s = offset.max(fstart);
            let e = end.min(fstart + fsize);
            let piece = &bytes[(s - offset) as usize..(e - offset) as usize];
            self.add(fi, s - fstart, e - fstart, piece);
        }
    }

    /// Add bytes `s..e` of file `fi`.
    fn add(&mut self, fi: usize, s: u64, e: u64, data: &[u8]) {
        let Some(runs) = self.runs[fi].as_mut() else {
            return;
        };
        let before = runs.range(..=s).next_back().map(|(&k, r)| (k, r.end));
        let after = runs.range(s + 1..).next().map(|(&k, _)| k);
        let overlaps =
            before.is_some_and(|(k, end)| k == s || end > s) || after.is_some_and(|k| k < e);
        if overlaps {
            self.runs[fi] = None;
            return;
        }
        let (start, mut hasher) = match before {
            Some((k, end)) if end == s => (k, runs.remove(&k).expect("present").hasher),
            _ => (s, crc32fast::Hasher::new()),
        };
        hasher.update(data);
        let mut end = e;
        if let Some(next) = runs.remove(&e) {
            hasher.combine(&next.hasher);
            end = next.end;
        }
        runs.insert(start, Run { end, hasher });
    }

    /// The byte ranges of file `fi` not seen yet, in order, or `None` once a byte of it
    /// was fed twice (then only a fresh tracker can vouch for it): what a reader must
    /// still feed for the file to be complete.
    pub(crate) fn gaps(&self, fi: usize) -> Option<Vec<(u64, u64)>> {
        let runs = self.runs[fi].as_ref()?;
        let mut gaps = Vec::new();
        let mut at = 0;
        for (&start, r) in runs {
            if start > at {
                gaps.push((at, start));
            }
            at = r.end;
        }
        if at < self.sizes[fi] {
            gaps.push((at, self.sizes[fi]));
        }
        Some(gaps)
    }

    /// Whether every byte of every file was seen exactly once.
    pub fn is_complete(&self) -> bool {
        (0..self.sizes.len()).all(|fi| self.crc(fi).is_some())
    }

    fn crc(&self, fi: usize) -> Option<u32> {
        let runs = self.runs[fi].as_ref()?;
        if self.sizes[fi] == 0 {
            return Some(crc32fast::hash(&[]));
        }
        match runs.first_key_value() {
            Some((0, r)) if runs.len() == 1 && r.end == self.sizes[fi] => {
                Some(r.hasher.clone().finalize())
            }
            _ => None,
        }
    }

    /// The CRC32 of each file, in order: `None` for a file not covered exactly once.
    pub fn finish(self) -> Vec<Option<u32>> {
        (0..self.sizes.len()).map(|fi| self.crc(fi)).collect()
    }
}

/// `files` with the CRC32s a pass computed (`crcs`, one per file as
/// [`FileCrcs::finish`] gives them, or empty) filled in where none was given: the
/// metadata a scheme records in its redundancy data after
/// [`apply_with_crc`](crate::Scheme::apply_with_crc).
///
/// A file whose given CRC32 differs from the one computed from the bytes just read
/// changed after the host recorded it: that is an error ([`CORRUPT`](ErrorCode::CORRUPT)),
/// so a scheme never protects bytes other than those the host recorded.
pub fn with_crcs(files: &[FileMeta], crcs: &[Option<u32>]) -> PluginResult<Vec<FileMeta>> {
    files
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let mut m = m.clone();
            match (m.crc32.into_option(), crcs.get(i).copied().flatten()) {
                (Some(given), Some(read)) if given != read => {
                    return Err(PluginError::new(
                        ErrorCode::CORRUPT,
                        format!(
                            "{}: CRC32 recorded {given:08x}, the bytes read have {read:08x}; the file changed after it was recorded",
                            m.path
                        ),
                    ))
                }
                (None, Some(read)) => m.crc32 = ROption::RSome(read),
                _ => {}
            }
            Ok(m)
        })
        .collect()
}

/// Apply the recorded mode and times to a rebuilt file.
pub fn restore_metadata(meta: &FileMeta) -> PluginResult<()> {
    let path = Path::new(meta.path.as_str());
    let f = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| PluginError::io(path.display(), e))?;
    restore_metadata_of(&f, meta)
}

/// [`restore_metadata`] through a handle already open on the file (no second open).
fn restore_metadata_of(f: &File, meta: &FileMeta) -> PluginResult<()> {
    use std::os::unix::fs::PermissionsExt;
    use std::time::{Duration, UNIX_EPOCH};
    let path = Path::new(meta.path.as_str());
    let t = |s: i64, ns: u32| {
        if s >= 0 {
            UNIX_EPOCH + Duration::new(s as u64, ns)
        } else {
            UNIX_EPOCH
        }
    };
    f.set_times(
        std::fs::FileTimes::new()
            .set_modified(t(meta.mtime_sec, meta.mtime_nsec))
            .set_accessed(t(meta.atime_sec, meta.atime_nsec)),
    )
    .map_err(|e| PluginError::io(path.display(), e))?;
    if meta.mode != 0 {
        // permission bits only: never setuid/setgid/sticky bits named by redundancy data
        f.set_permissions(std::fs::Permissions::from_mode(meta.mode & 0o777))
            .map_err(|e| PluginError::io(path.display(), e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(path: &Path, size: u64) -> FileMeta {
        FileMeta {
            mode: 0o640,
            mtime_sec: 1_600_000_000,
            mtime_nsec: 5,
            atime_sec: 1_600_000_000,
            atime_nsec: 5,
            ..FileMeta::new(path.display().to_string(), size)
        }
    }

    /// A small deterministic generator (xorshift64*), so failures reproduce.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n.max(1)
        }
    }

    /// Random file shapes (empty files included) and their bytes.
    fn random_files(rng: &mut Rng) -> (Vec<FileMeta>, Vec<Vec<u8>>) {
        let count = rng.below(6) as usize;
        let mut metas = Vec::new();
        let mut datas = Vec::new();
        for i in 0..count {
            let size = match rng.below(4) {
                0 => 0,
                1 => 1 + rng.below(3),
                _ => rng.below(5000),
            };
            let data: Vec<u8> = (0..size).map(|_| rng.next() as u8).collect();
            metas.push(FileMeta::new(format!("/f{i}"), size));
            datas.push(data);
        }
        (metas, datas)
    }

    /// Cut `0..len` into pieces of random lengths (at least one byte each).
    fn random_pieces(rng: &mut Rng, len: u64) -> Vec<(u64, u64)> {
        let mut pieces = Vec::new();
        let mut at = 0;
        while at < len {
            let n = (1 + rng.below(700)).min(len - at);
            pieces.push((at, at + n));
            at += n;
        }
        pieces
    }

    fn logical(datas: &[Vec<u8>], padding: usize) -> Vec<u8> {
        let mut all: Vec<u8> = datas.concat();
        all.resize(all.len() + padding, 0);
        all
    }

    #[test]
    fn file_crcs_match_crc32fast_in_any_read_order() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for round in 0..400 {
            let (metas, datas) = random_files(&mut rng);
            let all = logical(&datas, rng.below(300) as usize);
            let mut pieces = random_pieces(&mut rng, all.len() as u64);
            // shuffle (Fisher-Yates)
            for i in (1..pieces.len()).rev() {
                pieces.swap(i, rng.below(i as u64 + 1) as usize);
            }
            let mut crcs = FileCrcs::new(&metas);
            for &(s, e) in &pieces {
                crcs.update(s, &all[s as usize..e as usize]);
            }
            assert!(crcs.is_complete(), "round {round}");
            let want: Vec<Option<u32>> = datas.iter().map(|d| Some(crc32fast::hash(d))).collect();
            assert_eq!(crcs.finish(), want, "round {round}: {metas:?} {pieces:?}");
        }
    }

    #[test]
    fn file_crcs_follow_the_xor_slot_order() {
        // XOR's order: for each offset within a chunk, one piece of every chunk in turn
        let mut rng = Rng(7);
        for _ in 0..100 {
            let (metas, datas) = random_files(&mut rng);
            let total: u64 = metas.iter().map(|m| m.size).sum();
            let chunks = 1 + rng.below(7);
            let chunk = total.div_ceil(chunks).max(1);
            let piece = 1 + rng.below(chunk);
            let all = logical(&datas, (chunk * chunks - total) as usize);
            let mut crcs = FileCrcs::new(&metas);
            let mut offset = 0;
            while offset < chunk {
                let p = piece.min(chunk - offset);
                for c in 0..chunks {
                    let s = (c * chunk + offset) as usize;
                    crcs.update(s as u64, &all[s..s + p as usize]);
                }
                offset += p;
            }
            let want: Vec<Option<u32>> = datas.iter().map(|d| Some(crc32fast::hash(d))).collect();
            assert_eq!(crcs.finish(), want);
        }
    }

    #[test]
    fn file_crcs_refuse_files_with_a_gap_or_a_byte_fed_twice() {
        let mut rng = Rng(42);
        let mut checked = (0, 0);
        for _ in 0..300 {
            let (metas, datas) = random_files(&mut rng);
            let all = logical(&datas, 0);
            let pieces = random_pieces(&mut rng, all.len() as u64);
            if pieces.is_empty() {
                continue;
            }
            let odd = rng.below(pieces.len() as u64) as usize;
            let twice = rng.below(2) == 0;
            let mut crcs = FileCrcs::new(&metas);
            for (i, &(s, e)) in pieces.iter().enumerate() {
                if i != odd || twice {
                    crcs.update(s, &all[s as usize..e as usize]);
                }
            }
            if twice {
                // the same bytes again, or a piece straddling the odd one's start
                let (s, e) = pieces[odd];
                let s = s.saturating_sub(rng.below(3));
                crcs.update(s, &all[s as usize..e as usize]);
            }
            let (s, e) = pieces[odd];
            let got = crcs.finish();
            let mut start = 0;
            for (fi, d) in datas.iter().enumerate() {
                let (fs, fe) = (start, start + d.len() as u64);
                start = fe;
                let touched = !d.is_empty() && fs < e && s < fe;
                if touched {
                    assert_eq!(got[fi], None, "file {fi} {fs}..{fe}, piece {s}..{e}");
                    if twice {
                        checked.1 += 1
                    } else {
                        checked.0 += 1
                    }
                } else {
                    assert_eq!(got[fi], Some(crc32fast::hash(d)), "file {fi}");
                }
            }
        }
        assert!(checked.0 > 20 && checked.1 > 20, "{checked:?}");
    }

    /// A plugin written against scr-plugin 0.1.0 calls `create(metas)`: it still builds
    /// and writes, its files' common directory made as 0.1.0 made it, and a symbolic
    /// link below that directory is still refused.
    #[test]
    #[allow(deprecated)]
    fn the_0_1_0_create_still_writes_below_the_files_common_directory() {
        let dir = tempfile::tempdir().unwrap();
        let top = dir.path().join("made/by/create");
        let metas = [meta(&top.join("a"), 3), meta(&top.join("sub/b"), 2)];
        let mut w = LogicalFile::create(&metas).unwrap();
        w.write_at(0, b"abcde").unwrap();
        w.sync().unwrap();
        assert_eq!(std::fs::read(top.join("a")).unwrap(), b"abc");
        assert_eq!(std::fs::read(top.join("sub/b")).unwrap(), b"de");
        assert_eq!(common_parent(&metas).as_deref(), Some(top.as_path()));
        assert_eq!(common_parent(&[]), None);
        // a link where a level below the common directory should be is not followed
        let elsewhere = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), top.join("link")).unwrap();
        let linked = [meta(&top.join("c"), 1), meta(&top.join("link/d"), 1)];
        assert!(LogicalFile::create(&linked).is_err());
        assert!(!elsewhere.path().join("d").exists());
    }

    #[test]
    fn reads_concatenate_and_pad_and_writes_split_back() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        let b = dir.path().join("sub/b");
        std::fs::write(&a, b"hello").unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(&b, b"world!").unwrap();
        let empty = dir.path().join("empty");
        std::fs::write(&empty, b"").unwrap();
        let metas = [meta(&a, 5), meta(&empty, 0), meta(&b, 6)];
        let mut lf = LogicalFile::open(&metas).unwrap();
        assert_eq!(lf.len(), 11);
        let mut buf = [0xffu8; 16];
        lf.read_at(3, &mut buf).unwrap();
        assert_eq!(&buf, b"loworld!\0\0\0\0\0\0\0\0");

        let out = tempfile::tempdir().unwrap();
        let metas2: Vec<FileMeta> = metas
            .iter()
            .map(|m| {
                let rel = Path::new(m.path.as_str()).strip_prefix(dir.path()).unwrap();
                meta(&out.path().join(rel), m.size)
            })
            .collect();
        let mut w = LogicalFile::create_in(out.path(), &metas2).unwrap();
        w.write_at(0, b"hel").unwrap();
        w.write_at(3, b"loworld!\0\0\0").unwrap();
        w.sync().unwrap();
        for m in &metas2 {
            restore_metadata(m).unwrap();
        }
        assert_eq!(std::fs::read(out.path().join("a")).unwrap(), b"hello");
        assert_eq!(std::fs::read(out.path().join("sub/b")).unwrap(), b"world!");
        assert_eq!(std::fs::read(out.path().join("empty")).unwrap(), b"");
        let md = std::fs::metadata(out.path().join("a")).unwrap();
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        assert_eq!(md.permissions().mode() & 0o7777, 0o640);
        assert_eq!((md.mtime(), md.mtime_nsec()), (1_600_000_000, 5));
    }

    #[test]
    fn written_files_are_checked_from_the_bytes_written_or_else_read() {
        use abi_stable::std_types::RSome;
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 13) as u8).collect();
        let metas = |crc_a: u32| {
            let a = FileMeta {
                crc32: RSome(crc_a),
                ..FileMeta::new(dir.path().join("a").display().to_string(), 600)
            };
            let b = FileMeta {
                crc32: RSome(crc32fast::hash(&data[600..])),
                ..FileMeta::new(dir.path().join("b").display().to_string(), 400)
            };
            vec![a, b]
        };
        let good = metas(crc32fast::hash(&data[..600]));
        // written once each, in pieces out of order and past the end (padding): the
        // CRC32s come from the writes
        let mut l = LogicalFile::create_in(dir.path(), &good).unwrap();
        l.write_at(500, &[&data[500..], &[0u8; 24][..]].concat())
            .unwrap();
        l.write_at(0, &data[..500]).unwrap();
        assert_eq!(
            l.written_crc32(),
            [good[0].crc32.into_option(), good[1].crc32.into_option()]
        );
        l.sync().unwrap();
        l.check_written(&good).unwrap();
        assert_eq!(std::fs::read(dir.path().join("a")).unwrap(), &data[..600]);

        // a recorded CRC32 the written bytes do not have: refused, naming both
        let e = l.check_written(&metas(0x1234_5678)).unwrap_err();
        assert_eq!(e.code, ErrorCode::CORRUPT);
        assert!(
            e.message().contains("a: CRC32 recorded 12345678, written ")
                && e.message().ends_with("; not trusted"),
            "{e}"
        );

        // a tail never written: no CRC32 from the writes, the file is extended with
        // zeros by sync and read, and the read finds the difference
        let mut l = LogicalFile::create_in(dir.path(), &good).unwrap();
        l.write_at(0, &data[..900]).unwrap();
        assert_eq!(l.written_crc32()[1], None);
        l.sync().unwrap();
        assert_eq!(std::fs::metadata(dir.path().join("b")).unwrap().len(), 400);
        let e = l.check_written(&good).unwrap_err();
        assert!(e.message().contains("b: CRC32 recorded"), "{e}");

        // a region written twice: read back, and right when the bytes are right
        let mut l = LogicalFile::create_in(dir.path(), &good).unwrap();
        l.write_at(0, &data).unwrap();
        l.write_at(100, &data[100..200]).unwrap();
        assert_eq!(l.written_crc32()[0], None);
        l.sync().unwrap();
        l.check_written(&good).unwrap();
    }
}
