//! State files: versioned, checksummed, replaced atomically.
//!
//! Every state file (filemap, halt, nodes, ...) is one header line
//! `scr-rs <kind> <version> crc32=<hex>` followed by a JSON body. Writers put the bytes in
//! a temporary file in the same directory, fsync it, rename it over the old file and fsync
//! the directory, so a crash leaves either the old or the new file, never a torn one;
//! readers check kind, version and checksum, so a corrupt file is refused, not trusted.

//!
//! The state files themselves, by what they hold: [`filemap`] (a rank's cached datasets,
//! in the control directory), [`prefix`] (the index, summaries, rank2file maps, flush file
//! and prefix lock), [`halt`] (the halt file), [`nodes`] (the nodes file) and `writes`
//! (what a flush may write). The
//! runtime and the `scr` tools (scavenge, postrun, index) read and write them through
//! these types alone.

pub mod filemap;
pub mod halt;
pub mod nodes;
pub mod prefix;
pub(crate) mod writes;

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{de::DeserializeOwned, Serialize};

/// The format version of every state file written by this release.
pub(crate) const STATE_VERSION: u32 = 1;

/// Why a state file could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// Reading failed (including "not found").
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// Header, version or checksum wrong, or the body does not parse.
    #[error("{path}: {why}; the file is not trusted")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
}

impl StateError {
    /// True when the file simply does not exist.
    pub(crate) fn is_not_found(&self) -> bool {
        matches!(self, StateError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }

    /// True when the file is intact but written by a release with another format
    /// version: not damage, so it must never be replaced by a rebuilt copy.
    pub(crate) fn is_other_version(&self) -> bool {
        matches!(self, StateError::Corrupt { why, .. } if why.starts_with("format version "))
    }
}

/// Write `bytes` to `path` atomically (temporary file, fsync, rename, fsync directory).
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomic_as(path, bytes, false)
}

/// [`write_atomic`], the file created with mode 0600 and never through a symbolic link
/// when `private` (state kept in cache: filemaps, the nodes file), else with the umask's
/// mode (state in the prefix, which other tools and users may read).
pub(crate) fn write_atomic_as(path: &Path, bytes: &[u8], private: bool) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("state");
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let result = (|| {
        let mut f = if private {
            scr_plugin::cachefs::create_file(&tmp).map_err(io::Error::other)?
        } else {
            File::create(&tmp)?
        };
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Serialize `value` as a state file of `kind`.
pub fn write_state<T: Serialize>(path: &Path, kind: &str, value: &T) -> io::Result<()> {
    write_atomic(path, &state_bytes(kind, value)?)
}

/// [`write_state`] for state kept in cache: mode 0600, never through a symbolic link.
pub(crate) fn write_private_state<T: Serialize>(
    path: &Path,
    kind: &str,
    value: &T,
) -> io::Result<()> {
    write_atomic_as(path, &state_bytes(kind, value)?, true)
}

/// The header line and JSON body of a state file.
fn state_bytes<T: Serialize>(kind: &str, value: &T) -> io::Result<Vec<u8>> {
    state_bytes_crc(kind, value).map(|(bytes, _)| bytes)
}

/// [`state_bytes`] and the body's CRC32 (the one its header carries): it identifies the
/// contents, so a filemap journal can name the snapshot it extends.
pub(crate) fn state_bytes_crc<T: Serialize>(kind: &str, value: &T) -> io::Result<(Vec<u8>, u32)> {
    let body = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    let crc = crc32fast::hash(&body);
    let mut bytes = format!("scr-rs {kind} {STATE_VERSION} crc32={crc:08x}\n").into_bytes();
    bytes.extend_from_slice(&body);
    Ok((bytes, crc))
}

/// The kind a state file's header names (only the header line is read), for files
/// whose kind tells their format (a rank2file root or an older single-file map).
pub(crate) fn state_kind(path: &Path) -> Result<String, StateError> {
    use std::io::{BufRead, Read};
    let f = File::open(path).map_err(|source| StateError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut line = String::new();
    io::BufReader::new(f)
        .take(4096)
        .read_line(&mut line)
        .map_err(|source| StateError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    match line.split(' ').collect::<Vec<_>>().as_slice() {
        ["scr-rs", kind, ..] => Ok(kind.to_string()),
        _ => Err(StateError::Corrupt {
            path: path.to_path_buf(),
            why: "not an scr-rs state file".into(),
        }),
    }
}

/// Read and verify a state file of `kind`.
pub fn read_state<T: DeserializeOwned>(path: &Path, kind: &str) -> Result<T, StateError> {
    read_state_crc(path, kind).map(|(value, _)| value)
}

/// [`read_state`] and the body's CRC32 (see [`state_bytes_crc`]).
pub(crate) fn read_state_crc<T: DeserializeOwned>(
    path: &Path,
    kind: &str,
) -> Result<(T, u32), StateError> {
    let bytes = fs::read(path).map_err(|source| StateError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let corrupt = |why: String| StateError::Corrupt {
        path: path.to_path_buf(),
        why,
    };
    let nl = bytes
        .iter()
        .position(|&b| b == b'\n')
        .ok_or_else(|| corrupt("no header line".into()))?;
    let header =
        std::str::from_utf8(&bytes[..nl]).map_err(|_| corrupt("header is not text".into()))?;
    let body = &bytes[nl + 1..];
    let fields: Vec<&str> = header.split(' ').collect();
    match fields.as_slice() {
        ["scr-rs", k, v, crc] if *k == kind => {
            let version: u32 = v
                .parse()
                .map_err(|_| corrupt(format!("bad version `{v}`")))?;
            if version != STATE_VERSION {
                return Err(corrupt(format!(
                    "format version {version}, this release reads {STATE_VERSION}"
                )));
            }
            let want = crc
                .strip_prefix("crc32=")
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .ok_or_else(|| corrupt(format!("bad checksum field `{crc}`")))?;
            let got = crc32fast::hash(body);
            if got != want {
                return Err(corrupt(format!(
                    "checksum mismatch (header {want:08x}, contents {got:08x})"
                )));
            }
            serde_json::from_slice(body)
                .map(|value| (value, got))
                .map_err(|e| corrupt(format!("unreadable contents: {e}")))
        }
        ["scr-rs", k, ..] => Err(corrupt(format!("is a `{k}` file, expected `{kind}`"))),
        _ => Err(corrupt("not an scr-rs state file".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn round_trip_and_every_corruption_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("halt.scr");
        let value: BTreeMap<String, u64> = [("CheckpointsLeft".into(), 3)].into();
        write_state(&p, "halt", &value).unwrap();
        let back: BTreeMap<String, u64> = read_state(&p, "halt").unwrap();
        assert_eq!(back, value);
        // no temporary file is left behind
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);

        let good = fs::read(&p).unwrap();
        let mut flipped = good.clone();
        *flipped.last_mut().unwrap() ^= 1;
        fs::write(&p, &flipped).unwrap();
        let e = read_state::<BTreeMap<String, u64>>(&p, "halt").unwrap_err();
        assert!(e.to_string().contains("checksum mismatch"), "{e}");

        fs::write(&p, &good[..good.len() / 2]).unwrap();
        assert!(read_state::<BTreeMap<String, u64>>(&p, "halt").is_err());

        fs::write(&p, &good).unwrap();
        let e = read_state::<BTreeMap<String, u64>>(&p, "filemap").unwrap_err();
        assert!(e
            .to_string()
            .contains("is a `halt` file, expected `filemap`"));

        let e = read_state::<BTreeMap<String, u64>>(&dir.path().join("none"), "halt").unwrap_err();
        assert!(e.is_not_found());
    }
}
