//! Logical files: a member's files of one dataset treated as one file (their
//! concatenation, padded with zeros past its end), the way XOR and RS see them.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::abi::FileMeta;
use crate::error::{PluginError, PluginResult};

/// An ordered list of files read and written as one zero-padded stream.
pub struct LogicalFile {
    parts: Vec<(PathBuf, u64)>,
    handles: Vec<File>,
    writable: bool,
}

impl LogicalFile {
    /// Open the files of `metas` for reading.
    pub fn open(metas: &[FileMeta]) -> PluginResult<Self> {
        Self::with(None, metas)
    }

    /// Create (truncate) the files of `metas` in the dataset directory `dir` for writing:
    /// new files with mode 0600, parent directories below `dir` with mode 0700, and never
    /// through a symbolic link in place of a directory level or a file (see
    /// [`crate::cachefs`]). Every file must lie below `dir`.
    pub fn create(dir: &Path, metas: &[FileMeta]) -> PluginResult<Self> {
        Self::with(Some(dir), metas)
    }

    fn with(top: Option<&Path>, metas: &[FileMeta]) -> PluginResult<Self> {
        let writable = top.is_some();
        let parts: Vec<(PathBuf, u64)> = metas
            .iter()
            .map(|m| (PathBuf::from(m.path.as_str()), m.size))
            .collect();
        let mut handles = Vec::with_capacity(parts.len());
        for (p, size) in &parts {
            let f = if let Some(top) = top {
                let owner = crate::cachefs::owner_of(top)?;
                if let Some(dir) = p.parent() {
                    crate::cachefs::create_dirs(top, dir, Some(owner))?;
                }
                let f = crate::cachefs::create_file(p)?;
                f.set_len(*size)
                    .map_err(|e| PluginError::io(p.display(), e))?;
                f
            } else {
                File::open(p).map_err(|e| PluginError::io(p.display(), e))?
            };
            handles.push(f);
        }
        Ok(LogicalFile {
            parts,
            handles,
            writable,
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
        self.each_span(offset, buf.len(), |f, range| f.read_exact(&mut buf[range]))
    }

    /// Write `buf` at logical offset `offset`; bytes past the end are dropped (they are
    /// padding).
    pub fn write_at(&mut self, offset: u64, buf: &[u8]) -> PluginResult<()> {
        debug_assert!(self.writable);
        self.each_span(offset, buf.len(), |f, range| f.write_all(&buf[range]))
    }

    /// Walk the parts that logical bytes `offset..offset + len` fall in: for each,
    /// position its handle and call `io` with the matching range of the caller's buffer.
    /// Bytes past the last part are not visited.
    fn each_span(
        &mut self,
        mut offset: u64,
        len: usize,
        mut io: impl FnMut(&mut File, std::ops::Range<usize>) -> std::io::Result<()>,
    ) -> PluginResult<()> {
        let mut done = 0usize;
        let mut start = 0u64;
        for ((path, size), f) in self.parts.iter().zip(self.handles.iter_mut()) {
            let end = start + size;
            if done < len && offset < end && offset >= start {
                let n = ((end - offset) as usize).min(len - done);
                f.seek(SeekFrom::Start(offset - start))
                    .and_then(|_| io(f, done..done + n))
                    .map_err(|e| PluginError::io(path.display(), e))?;
                done += n;
                offset += n as u64;
            }
            start = end;
        }
        Ok(())
    }

    /// Flush written files to storage.
    pub fn sync(&mut self) -> PluginResult<()> {
        for ((path, _), f) in self.parts.iter().zip(&self.handles) {
            f.sync_all()
                .map_err(|e| PluginError::io(path.display(), e))?;
        }
        Ok(())
    }
}

/// Apply the recorded mode and times to a rebuilt file.
pub fn restore_metadata(meta: &FileMeta) -> PluginResult<()> {
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
    let f = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| PluginError::io(path.display(), e))?;
    f.set_times(
        std::fs::FileTimes::new()
            .set_modified(t(meta.mtime_sec, meta.mtime_nsec))
            .set_accessed(t(meta.atime_sec, meta.atime_nsec)),
    )
    .map_err(|e| PluginError::io(path.display(), e))?;
    if meta.mode != 0 {
        // permission bits only: never setuid/setgid/sticky bits named by redundancy data
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(meta.mode & 0o777))
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
        let mut w = LogicalFile::create(out.path(), &metas2).unwrap();
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
}
