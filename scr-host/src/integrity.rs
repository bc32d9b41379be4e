//! Checking cached files against their records: the size, mode, mtime and CRC32 of a
//! file (the bytes read once, through [`scr_plugin::verify`], the one size and CRC32
//! check of scr-rs), a rank's files of a dataset, and what a scheme says it rebuilt.
//! Shared by the runtime (restart, rebuild, fetch, flush) and `scr scavenge`/`postrun`.

use crate::layout::relative_to;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use abi_stable::std_types::{RNone, RSome};
use scr_plugin::{DatasetFiles, FileMeta};

use crate::error::{Result, ScrError};
use crate::state::filemap::DatasetRecord;

/// What `stat_file` measured.
pub(crate) struct Meta {
    pub size: u64,
    pub mode: u32,
    pub mtime: (i64, u32),
    pub crc32: Option<u32>,
}

/// Size, mode, mtime and (when asked) CRC32 of a file.
pub(crate) fn stat_file(path: &Path, crc: bool, buf: usize) -> std::io::Result<Meta> {
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

/// CRC32 of a file's contents ([`scr_plugin::verify::file_crc32`]: the one reader of
/// every size and CRC32 check).
pub(crate) fn file_crc32(path: &Path, buf: usize) -> std::io::Result<u32> {
    scr_plugin::verify::file_crc32(path, buf)
}

/// Whether `name` is a plain relative path that stays inside the directory it is joined
/// to (no root, no `..`): names come from state files and plugins, which are not trusted.
pub(crate) fn is_inside(name: &str) -> bool {
    scr_plugin::redfile::stays_inside(name)
}

/// How a file compares with what was recorded of it.
pub(crate) fn check_file(
    path: &Path,
    size: u64,
    crc32: Option<u32>,
    use_crc: bool,
    buf: usize,
) -> std::result::Result<(), scr_plugin::verify::Mismatch> {
    scr_plugin::verify::check_file(path, size, crc32.filter(|_| use_crc), buf).map(|_| ())
}

/// Why this rank's files of a dataset, or what a scheme rebuilt, do not check out. A
/// type rather than text so callers can add their context; its text (the rank, the file
/// and what differs) is what the dropped-dataset report gathers from the ranks.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// A recorded file name leaves the dataset directory.
    #[error("rank {rank}: file name `{name}` in the filemap leaves the dataset directory")]
    NameOutside {
        /// The rank.
        rank: u32,
        /// The recorded name.
        name: String,
    },
    /// A file is missing or differs from its record.
    #[error("rank {rank}: {}: {why}", path.display())]
    Mismatch {
        /// The rank.
        rank: u32,
        /// The file.
        path: std::path::PathBuf,
        /// What differs.
        why: scr_plugin::verify::Mismatch,
    },
    /// The scheme says it rebuilt a file outside the dataset directory.
    #[error("rank {rank}: the scheme rebuilt `{path}`, outside the dataset directory {}", dir.display())]
    RebuiltOutside {
        /// The rank.
        rank: u32,
        /// The path the scheme gave.
        path: String,
        /// The dataset directory.
        dir: std::path::PathBuf,
    },
    /// The scheme says it rebuilt a file this rank's record does not list.
    #[error("rank {rank}: the scheme rebuilt `{name}`, which this rank never wrote")]
    NeverWritten {
        /// The rank.
        rank: u32,
        /// The file name.
        name: String,
    },
    /// The redundancy data and the filemap disagree on a file's size or CRC32.
    #[error("rank {rank}: {name}: the redundancy data describes {size} bytes, CRC32 {crc32:08x}; the filemap recorded {recorded_size} bytes, CRC32 {recorded_crc32:08x}")]
    Disagree {
        /// The rank.
        rank: u32,
        /// The file name.
        name: String,
        /// The size in the redundancy data.
        size: u64,
        /// The CRC32 in the redundancy data (0 when none).
        crc32: u32,
        /// The size recorded.
        recorded_size: u64,
        /// The CRC32 recorded (0 when none).
        recorded_crc32: u32,
    },
    /// A rebuilt file came without a CRC32 when the dataset was written with them.
    #[error("rank {rank}: the scheme gave no CRC32 for rebuilt {name}, so it cannot be checked")]
    NoCrc {
        /// The rank.
        rank: u32,
        /// The file name.
        name: String,
    },
    /// A rebuilt file is missing or differs from what the scheme described.
    #[error("rank {rank}: rebuilt {}: {why}", path.display())]
    RebuiltMismatch {
        /// The rank.
        rank: u32,
        /// The file.
        path: std::path::PathBuf,
        /// What differs.
        why: scr_plugin::verify::Mismatch,
    },
    /// A file this rank's record lists was not rebuilt.
    #[error("rank {rank}: the scheme did not rebuild {name}")]
    NotRebuilt {
        /// The rank.
        rank: u32,
        /// The file name.
        name: String,
    },
}

/// Verify this rank's files of `rec` in `dir`: each exists, is a regular file of the
/// recorded size and (with `use_crc`, when one was recorded) has the recorded CRC32. The
/// error names the rank, the file and what differs.
pub(crate) fn verify_dataset(
    rank: u32,
    rec: &DatasetRecord,
    dir: &Path,
    use_crc: bool,
    buf: usize,
) -> std::result::Result<(), VerifyError> {
    for f in &rec.files {
        if !is_inside(&f.name) {
            return Err(VerifyError::NameOutside {
                rank,
                name: f.name.clone(),
            });
        }
        check_file(&dir.join(&f.name), f.size, f.crc32, use_crc, buf).map_err(|why| {
            VerifyError::Mismatch {
                rank,
                path: dir.join(&f.name),
                why,
            }
        })?;
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
) -> std::result::Result<Vec<crate::state::filemap::FileRecord>, VerifyError> {
    let mut out = Vec::with_capacity(metas.len());
    for m in metas {
        let name = relative_to(dir, m.path.as_str());
        if !is_inside(&name) {
            return Err(VerifyError::RebuiltOutside {
                rank,
                path: m.path.to_string(),
                dir: dir.to_path_buf(),
            });
        }
        let recorded = own.and_then(|r| r.files.iter().find(|f| f.name == name));
        if own.is_some() && recorded.is_none() {
            return Err(VerifyError::NeverWritten { rank, name });
        }
        let crc = m.crc32.into_option();
        if let Some(r) = recorded {
            if r.size != m.size || (r.crc32.is_some() && crc.is_some() && r.crc32 != crc) {
                return Err(VerifyError::Disagree {
                    rank,
                    name,
                    size: m.size,
                    crc32: crc.unwrap_or_default(),
                    recorded_size: r.size,
                    recorded_crc32: r.crc32.unwrap_or_default(),
                });
            }
        }
        let want = crc.or(recorded.and_then(|r| r.crc32));
        if want.is_none() && crc_expected {
            return Err(VerifyError::NoCrc { rank, name });
        }
        check_file(&dir.join(&name), m.size, want, true, buf).map_err(|why| {
            VerifyError::RebuiltMismatch {
                rank,
                path: dir.join(&name),
                why,
            }
        })?;
        out.push(crate::state::filemap::FileRecord {
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
            return Err(VerifyError::NotRebuilt {
                rank,
                name: missing.name.clone(),
            });
        }
    }
    Ok(out)
}

/// Add to `rec` the redundancy files `scheme` declares for it in `dir` (keeping those
/// already recorded). The caller saves `rec` in the filemap before the scheme writes
/// them: a crash or a failed apply or rebuild then leaves no file the next init cannot
/// find and delete. Not collective.
pub(crate) fn declare_redundancy(
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

fn file_meta(f: &crate::state::filemap::FileRecord, dir: &Path) -> FileMeta {
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
