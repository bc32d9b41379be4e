//! Checking files against the metadata recorded for them.
//!
//! A scheme must never trust a file because it exists: before it feeds a survivor's data
//! into a rebuild, and after it rebuilt a lost member's files, it checks them against the
//! size and CRC32 it was given ([`verify_file`], [`verify_files`]). A file that fails is
//! reported with code [`CORRUPT`](ErrorCode::CORRUPT) and a message naming the file and
//! what was recorded against what was found, so the operator can tell a truncated file
//! from a flipped bit.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use crate::abi::FileMeta;
use crate::error::{ErrorCode, PluginError, PluginResult};

/// Read buffer for [`verify_file`]: large enough that a read costs far more than the
/// call overhead, small enough to be harmless on a node running an application.
const BUF: usize = 1 << 20;

/// Largest read buffer [`file_crc32`] uses, whatever the caller asks for.
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
pub const CRC_BUF_MAX: usize = 1 << 20;

/// CRC32 of a file's contents and the number of bytes read, read once in pieces of `buf`
/// bytes (clamped to 4 KiB..=[`CRC_BUF_MAX`]); a read interrupted by a signal is retried.
///
/// The one reader behind every size and CRC32 check of scr-rs (the runtime's, the
/// schemes', the copy engine's), so that all of them read the same way and none forgets
/// `EINTR`.
pub fn file_crc32_len(path: &Path, buf: usize) -> std::io::Result<(u32, u64)> {
    crc32_of(&mut File::open(path)?, buf)
}

/// CRC32 and length of what is left to read of `f`.
fn crc32_of(f: &mut File, buf: usize) -> std::io::Result<(u32, u64)> {
    let mut h = crc32fast::Hasher::new();
    let mut b = vec![0u8; buf.clamp(4096, CRC_BUF_MAX)];
    let mut total = 0u64;
    loop {
        let n = match f.read(&mut b) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        h.update(&b[..n]);
        total += n as u64;
    }
    Ok((h.finalize(), total))
}

/// CRC32 of a file's contents ([`file_crc32_len`] without the length).
pub fn file_crc32(path: &Path, buf: usize) -> std::io::Result<u32> {
    file_crc32_len(path, buf).map(|(crc, _)| crc)
}

/// How a file differs from what was recorded of it ([`check_file`]).
#[derive(Debug)]
pub enum Mismatch {
    /// The file could not be opened, stat'ed or read.
    Io(std::io::Error),
    /// Not a regular file.
    NotAFile,
    /// Its size on disk differs from the recorded one.
    Size {
        /// Bytes on disk.
        found: u64,
        /// Bytes recorded.
        recorded: u64,
    },
    /// Reading it gave another number of bytes than its size said (it changed while read).
    ShortRead {
        /// Bytes read.
        read: u64,
        /// Bytes recorded.
        recorded: u64,
    },
    /// Its contents' CRC32 differs from the recorded one.
    Crc {
        /// CRC32 computed.
        found: u32,
        /// CRC32 recorded.
        recorded: u32,
    },
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mismatch::Io(e) => write!(f, "{e}"),
            Mismatch::NotAFile => f.write_str("not a regular file"),
            Mismatch::Size { found, recorded } => write!(f, "{found} bytes, {recorded} recorded"),
            Mismatch::ShortRead { read, recorded } => {
                write!(f, "{read} bytes read, {recorded} recorded")
            }
            Mismatch::Crc { found, recorded } => {
                write!(f, "CRC32 {found:08x}, {recorded:08x} recorded")
            }
        }
    }
}

/// The size and CRC32 check of scr-rs, in one place: `path` must be a regular file of
/// `size` bytes and, when `crc32` is given, have that CRC32 (read once, in pieces of
/// `buf` bytes; the size alone is checked from the file's metadata when no CRC32 is
/// given; the file is opened all the same, so an unreadable one is refused). Returns the
/// CRC32 computed, if one was checked.
pub fn check_file(
    path: &Path,
    size: u64,
    crc32: Option<u32>,
    buf: usize,
) -> Result<Option<u32>, Mismatch> {
    // a special file is refused before it is opened (opening a FIFO would block); the
    // size is then taken from the file opened, which is the one read
    if !std::fs::metadata(path).map_err(Mismatch::Io)?.is_file() {
        return Err(Mismatch::NotAFile);
    }
    let mut f = File::open(path).map_err(Mismatch::Io)?;
    let md = f.metadata().map_err(Mismatch::Io)?;
    if !md.is_file() {
        return Err(Mismatch::NotAFile);
    }
    if md.len() != size {
        return Err(Mismatch::Size {
            found: md.len(),
            recorded: size,
        });
    }
    let Some(want) = crc32 else {
        return Ok(None);
    };
    let (got, read) = crc32_of(&mut f, buf).map_err(Mismatch::Io)?;
    if read != size {
        return Err(Mismatch::ShortRead {
            read,
            recorded: size,
        });
    }
    if got != want {
        return Err(Mismatch::Crc {
            found: got,
            recorded: want,
        });
    }
    Ok(Some(got))
}

/// Check that the file `meta` describes has exactly `meta.size` bytes and, when
/// `meta.crc32` is known, that CRC32. The file is read once, only when a CRC is recorded
/// (the size alone is checked from the file's metadata). Returns the CRC32 computed, if
/// one was recorded.
///
/// ```
/// # use scr_plugin::{verify::verify_file, FileMeta, ErrorCode};
/// # use abi_stable::std_types::RSome;
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("a.dat");
/// std::fs::write(&path, b"hello").unwrap();
/// let meta = FileMeta { crc32: RSome(crc32fast::hash(b"hello")),
///                       ..FileMeta::new(path.display().to_string(), 5) };
/// assert!(verify_file(&meta).is_ok());
/// std::fs::write(&path, b"hellO").unwrap();
/// let e = verify_file(&meta).unwrap_err();
/// assert_eq!(e.code, ErrorCode::CORRUPT);
/// assert!(e.message().contains("CRC32 recorded"));
/// ```
pub fn verify_file(meta: &FileMeta) -> PluginResult<Option<u32>> {
    let path = Path::new(meta.path.as_str());
    let corrupt = |why: String| {
        PluginError::new(
            ErrorCode::CORRUPT,
            format!("{}: {why}; not trusted", path.display()),
        )
    };
    match check_file(path, meta.size, meta.crc32.into_option(), BUF) {
        Ok(crc) => Ok(crc),
        Err(Mismatch::Io(e)) => Err(PluginError::io(path.display(), e)),
        Err(Mismatch::NotAFile) => Err(corrupt("not a regular file".into())),
        Err(Mismatch::Size { found, recorded }) => Err(corrupt(format!(
            "size recorded {recorded} B, actual {found} B"
        ))),
        Err(Mismatch::ShortRead { read, recorded }) => Err(corrupt(format!(
            "size recorded {recorded} B, {read} B read"
        ))),
        Err(Mismatch::Crc { found, recorded }) => Err(corrupt(format!(
            "CRC32 recorded {recorded:08x}, actual {found:08x}"
        ))),
    }
}

/// [`verify_file`] for each file in order; the first failure is returned.
pub fn verify_files(metas: &[FileMeta]) -> PluginResult<()> {
    metas.iter().try_for_each(|m| verify_file(m).map(|_| ()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use abi_stable::std_types::RSome;

    #[test]
    fn size_and_crc_mismatches_name_the_file_and_both_values() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7) as u8).collect();
        std::fs::write(&a, &data).unwrap();
        let crc = crc32fast::hash(&data);
        let good = FileMeta {
            crc32: RSome(crc),
            ..FileMeta::new(a.display().to_string(), data.len() as u64)
        };
        assert_eq!(verify_file(&good).unwrap(), Some(crc));

        // no CRC recorded: the size alone is checked
        let no_crc = FileMeta::new(a.display().to_string(), data.len() as u64);
        assert_eq!(verify_file(&no_crc).unwrap(), None);

        let mut flipped = data.clone();
        flipped[2_500_000] ^= 1;
        std::fs::write(&a, &flipped).unwrap();
        let e = verify_file(&good).unwrap_err();
        assert_eq!(e.code, ErrorCode::CORRUPT);
        assert_eq!(
            e.message(),
            format!(
                "{}: CRC32 recorded {crc:08x}, actual {:08x}; not trusted",
                a.display(),
                crc32fast::hash(&flipped)
            )
        );

        std::fs::write(&a, &data[..10]).unwrap();
        let e = verify_files(&[no_crc]).unwrap_err();
        assert_eq!(
            e.message(),
            format!(
                "{}: size recorded 3000000 B, actual 10 B; not trusted",
                a.display()
            )
        );
        std::fs::remove_file(&a).unwrap();
        assert_eq!(verify_file(&good).unwrap_err().code, ErrorCode::IO);
    }

    #[test]
    fn check_file_says_how_a_file_differs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.dat");
        std::fs::write(&path, b"hello").unwrap();
        let crc = crc32fast::hash(b"hello");
        assert_eq!(check_file(&path, 5, Some(crc), 4096).unwrap(), Some(crc));
        assert_eq!(check_file(&path, 5, None, 4096).unwrap(), None);
        let m = check_file(&path, 6, None, 4096).unwrap_err();
        assert!(
            matches!(
                m,
                Mismatch::Size {
                    found: 5,
                    recorded: 6
                }
            ),
            "{m:?}"
        );
        assert_eq!(m.to_string(), "5 bytes, 6 recorded");
        let m = check_file(&path, 5, Some(crc ^ 1), 4096).unwrap_err();
        assert_eq!(
            m.to_string(),
            format!("CRC32 {crc:08x}, {:08x} recorded", crc ^ 1)
        );
        // a directory is not a file, whatever its size says
        let size = std::fs::metadata(dir.path()).unwrap().len();
        let m = check_file(dir.path(), size, None, 4096).unwrap_err();
        assert!(matches!(m, Mismatch::NotAFile), "{m:?}");
        let m = check_file(&dir.path().join("gone"), 5, None, 4096).unwrap_err();
        assert!(matches!(m, Mismatch::Io(_)), "{m:?}");
        assert_eq!(
            file_crc32(&path, 1).unwrap(),
            crc,
            "any buffer size reads it all"
        );
    }
}
