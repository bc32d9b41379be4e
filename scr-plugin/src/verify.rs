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
    let mut file = File::open(path).map_err(|e| PluginError::io(path.display(), e))?;
    let actual = file
        .metadata()
        .map_err(|e| PluginError::io(path.display(), e))?
        .len();
    if actual != meta.size {
        return Err(corrupt(format!(
            "size recorded {} B, actual {actual} B",
            meta.size
        )));
    }
    let Some(want) = meta.crc32.into_option() else {
        return Ok(None);
    };
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0u8; BUF.min(meta.size.max(1) as usize)];
    let mut total = 0u64;
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(PluginError::io(path.display(), e)),
        };
        hasher.update(&buf[..n]);
        total += n as u64;
    }
    let got = hasher.finalize();
    if total != meta.size {
        return Err(corrupt(format!(
            "size recorded {} B, {total} B read",
            meta.size
        )));
    }
    if got != want {
        return Err(corrupt(format!(
            "CRC32 recorded {want:08x}, actual {got:08x}"
        )));
    }
    Ok(Some(got))
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
}
