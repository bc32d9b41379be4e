//! The cache at init and between checkpoints: moving files to the ranks that own them,
//! verifying and rebuilding datasets through their schemes, deleting and evicting.

use super::relative_to;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use abi_stable::std_types::{RNone, RSome};
use scr_plugin::{DatasetFiles, FileMeta};

use super::{DatasetRecord, Result, Runtime, ScrError};

/// What `stat_file` measured.
pub(super) struct Meta {
    pub size: u64,
    pub mode: u32,
    pub mtime: (i64, u32),
    pub crc32: Option<u32>,
}

/// Size, mode, mtime and (when asked) CRC32 of a file.
pub(super) fn stat_file(path: &Path, crc: bool, buf: usize) -> std::io::Result<Meta> {
    let md = std::fs::metadata(path)?;
    if !md.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let crc32 = if crc {
        Some(file_crc32(path, buf)?)
    } else {
        None
    };
    Ok(Meta {
        size: md.len(),
        mode: md.mode() & 0o7777,
        mtime: (md.mtime(), md.mtime_nsec() as u32),
        crc32,
    })
}

/// Largest read buffer [`file_crc32`] uses, whatever `file_buf_size` says.
///
/// Measured with `scr-bench-crc` (two runs on a loaded 2-core machine; /dev/shm and ext4
/// /tmp; files of 16 to 256 MiB in the page cache; cost as a ratio to writing the same
/// file with an fsync): `read` into 256 KiB or 1 MiB costs 0.33–0.42 of the write on
/// tmpfs and 0.04–0.14 on ext4; 8 MiB 0.36–0.61 and 0.08–0.17; 32 MiB 1.0–1.8 and
/// 0.30–0.66. With a small buffer the bytes are still in the CPU cache when the CRC reads
/// them; a large one is evicted between the copy and the hash. A memory map hashed in
/// place was no better on tmpfs (0.31–0.50: page-table work replaces the copy) and
/// `posix_fadvise(SEQUENTIAL)` changed nothing, so plain `read` with a small buffer is the
/// cheapest correct way (and cannot raise the SIGBUS a map raises when the file shrinks
/// under it).
const CRC_BUF_MAX: usize = 1 << 20;

/// CRC32 of a file's contents, read once in pieces of `buf` bytes (at most
/// [`CRC_BUF_MAX`], at least 4 KiB).
pub(super) fn file_crc32(path: &Path, buf: usize) -> std::io::Result<u32> {
    let mut h = crc32fast::Hasher::new();
    let mut f = std::fs::File::open(path)?;
    let mut b = vec![0u8; buf.clamp(4096, CRC_BUF_MAX)];
    loop {
        let n = match f.read(&mut b) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        h.update(&b[..n]);
    }
    Ok(h.finalize())
}

/// Whether `name` is a plain relative path that stays inside the directory it is joined
/// to (no root, no `..`): names come from state files and plugins, which are not trusted.
pub(super) fn is_inside(name: &str) -> bool {
    scr_plugin::redfile::stays_inside(name)
}

/// How a file compares with what was recorded of it.
pub(crate) fn check_file(
    path: &Path,
    size: u64,
    crc32: Option<u32>,
    use_crc: bool,
    buf: usize,
) -> std::result::Result<(), String> {
    let meta = stat_file(path, false, buf).map_err(|e| e.to_string())?;
    if meta.size != size {
        return Err(format!("{} bytes, {size} recorded", meta.size));
    }
    if let Some(want) = crc32.filter(|_| use_crc) {
        let got = file_crc32(path, buf).map_err(|e| e.to_string())?;
        if got != want {
            return Err(format!("CRC32 {got:08x}, {want:08x} recorded"));
        }
    }
    Ok(())
}

/// Verify this rank's files of `rec` in `dir`: each exists, is a regular file of the
/// recorded size and (with `use_crc`, when one was recorded) has the recorded CRC32. The
/// error names the rank, the file and what differs.
pub(super) fn verify_dataset(
    rank: u32,
    rec: &DatasetRecord,
    dir: &Path,
    use_crc: bool,
    buf: usize,
) -> std::result::Result<(), String> {
    for f in &rec.files {
        if !is_inside(&f.name) {
            return Err(format!(
                "rank {rank}: file name `{}` in the filemap leaves the dataset directory",
                f.name
            ));
        }
        check_file(&dir.join(&f.name), f.size, f.crc32, use_crc, buf)
            .map_err(|why| format!("rank {rank}: {}: {why}", dir.join(&f.name).display()))?;
    }
    Ok(())
}

/// Check what a scheme says it rebuilt on this rank before the host records it: every
/// file inside `dir`, the names and sizes this rank's own record lists (when it still
/// has one), and each file's size and CRC32 on disk against the CRC carried in the
/// redundancy data and the one recorded. Returns the records to keep.
///
/// A rebuilt file's CRC32 is always checked when one is known (whatever
/// `crc_on_restart` says: the rebuild just wrote it, the read is cheap next to that);
/// with `crc_expected` (the dataset was written with CRC32s), a rebuilt file that comes
/// without one is refused.
pub(crate) fn verify_rebuilt(
    rank: u32,
    metas: &[FileMeta],
    own: Option<&DatasetRecord>,
    dir: &Path,
    crc_expected: bool,
    buf: usize,
) -> std::result::Result<Vec<super::FileRecord>, String> {
    let mut out = Vec::with_capacity(metas.len());
    for m in metas {
        let name = relative_to(dir, m.path.as_str());
        if !is_inside(&name) {
            return Err(format!(
                "rank {rank}: the scheme rebuilt `{}`, outside the dataset directory {}",
                m.path,
                dir.display()
            ));
        }
        let recorded = own.and_then(|r| r.files.iter().find(|f| f.name == name));
        if own.is_some() && recorded.is_none() {
            return Err(format!(
                "rank {rank}: the scheme rebuilt `{name}`, which this rank never wrote"
            ));
        }
        let crc = m.crc32.into_option();
        if let Some(r) = recorded {
            if r.size != m.size || (r.crc32.is_some() && crc.is_some() && r.crc32 != crc) {
                return Err(format!(
                    "rank {rank}: {name}: the redundancy data describes {} bytes, CRC32 {:08x}; the filemap recorded {} bytes, CRC32 {:08x}",
                    m.size,
                    crc.unwrap_or_default(),
                    r.size,
                    r.crc32.unwrap_or_default()
                ));
            }
        }
        let want = crc.or(recorded.and_then(|r| r.crc32));
        if want.is_none() && crc_expected {
            return Err(format!(
                "rank {rank}: the scheme gave no CRC32 for rebuilt {name}, so it cannot be checked"
            ));
        }
        check_file(&dir.join(&name), m.size, want, true, buf)
            .map_err(|why| format!("rank {rank}: rebuilt {}: {why}", dir.join(&name).display()))?;
        out.push(super::FileRecord {
            name,
            size: m.size,
            mode: m.mode,
            mtime: (m.mtime_sec, m.mtime_nsec),
            crc32: want,
        });
    }
    if let Some(r) = own {
        if let Some(missing) = r
            .files
            .iter()
            .find(|f| !out.iter().any(|o| o.name == f.name))
        {
            return Err(format!(
                "rank {rank}: the scheme did not rebuild {}",
                missing.name
            ));
        }
    }
    Ok(out)
}

/// Add to `rec` the redundancy files `scheme` declares for it in `dir` (keeping those
/// already recorded). The caller saves `rec` in the filemap before the scheme writes
/// them: a crash or a failed apply or rebuild then leaves no file the next init cannot
/// find and delete. Not collective.
pub(super) fn declare_redundancy(
    scheme: &crate::registry::LoadedScheme,
    rec: &mut DatasetRecord,
    dir: &Path,
) -> Result<()> {
    let names = scheme
        .raw()
        .redundancy_files(&dataset_files(rec, dir))
        .into_result()
        .map_err(|e| ScrError::from(scheme.error("redundancy_files", e)))?;
    for name in names.iter().map(|p| relative_to(dir, p.as_str())) {
        if !rec.redundancy.contains(&name) {
            rec.redundancy.push(name);
        }
    }
    Ok(())
}

/// The plugin's view of a dataset held in `dir`.
pub(crate) fn dataset_files(rec: &DatasetRecord, dir: &Path) -> DatasetFiles {
    DatasetFiles {
        dataset_id: rec.id,
        dir: dir.display().to_string().into(),
        files: rec.files.iter().map(|f| file_meta(f, dir)).collect(),
    }
}

fn file_meta(f: &super::FileRecord, dir: &Path) -> FileMeta {
    FileMeta {
        path: dir.join(&f.name).display().to_string().into(),
        size: f.size,
        mode: f.mode,
        uid: 0,
        gid: 0,
        mtime_sec: f.mtime.0,
        mtime_nsec: f.mtime.1,
        atime_sec: f.mtime.0,
        atime_nsec: f.mtime.1,
        crc32: f.crc32.map_or(RNone, RSome),
    }
}

impl Runtime {}
