//! Cases for [`Scheme::apply_with_crc`]: run by every member of a set at once (like
//! [`conformance`](crate::conformance)), they prove that a scheme claiming
//! [`crc32_in_apply`](Scheme::crc32_in_apply) reports the CRC32 of each file's bytes, that
//! what it records in its redundancy data is byte for byte what the host's other path
//! (CRC32s computed first, then [`apply`](Scheme::apply)) records, and that it refuses a
//! file whose bytes no longer match the CRC32 it was given.
//!
//! ```
//! use scr_plugin::{crc_cases::check_crc_in_apply, inproc};
//! # use scr_plugin::*;
//! # struct Nothing;
//! # impl Scheme for Nothing {
//! #     fn describe(&self) -> PluginResult<SchemeDescription> { unimplemented!() }
//! #     fn apply(&self, h: &Host<'_>, _: &DatasetFiles) -> PluginResult<Vec<String>> {
//! #         h.barrier()?; Ok(vec![]) }
//! #     fn recover(&self, _: &Host<'_>, _: &RecoverRequest) -> PluginResult<Vec<FileMeta>> {
//! #         unimplemented!() }
//! #     fn redundancy_files(&self, _: &DatasetFiles) -> PluginResult<Vec<String>> { Ok(vec![]) }
//! #     fn remove(&self, _: &Host<'_>, _: &DatasetFiles) -> PluginResult<()> { Ok(()) }
//! # }
//! let dir = tempfile::tempdir().unwrap();
//! // a scheme that computes no CRC32 (the default) passes trivially
//! let out = inproc::run(&["n0", "n1", "n2"], |host| {
//!     check_crc_in_apply(host, &Nothing, &dir.path().join(format!("m{}", host.rank())), 100)
//! });
//! assert!(out.iter().all(|r| r.is_ok()), "{out:?}");
//! ```

use std::path::{Path, PathBuf};

use abi_stable::std_types::{ROption, RSome};

use crate::abi::{Applied, DatasetFiles, FileMeta, SchemeBox};
use crate::host::Host;
use crate::plugin::Scheme;
use crate::PluginResult;

/// The calls these cases make: implemented for plugin-side schemes and for the FFI objects
/// the host loads, so the cases run on both.
pub trait CrcUnderTest {
    /// See [`Scheme::crc32_in_apply`].
    fn crc32_in_apply(&self) -> bool;
    /// See [`Scheme::apply`].
    fn apply(&self, host: &Host<'_>, dataset: &DatasetFiles) -> PluginResult<Vec<String>>;
    /// See [`Scheme::apply_with_crc`].
    fn apply_with_crc(&self, host: &Host<'_>, dataset: &DatasetFiles) -> PluginResult<Applied>;
    /// See [`Scheme::remove`].
    fn remove(&self, host: &Host<'_>, dataset: &DatasetFiles) -> PluginResult<()>;
}

impl<S: Scheme + ?Sized> CrcUnderTest for S {
    fn crc32_in_apply(&self) -> bool {
        Scheme::crc32_in_apply(self)
    }
    fn apply(&self, host: &Host<'_>, dataset: &DatasetFiles) -> PluginResult<Vec<String>> {
        Scheme::apply(self, host, dataset)
    }
    fn apply_with_crc(&self, host: &Host<'_>, dataset: &DatasetFiles) -> PluginResult<Applied> {
        Scheme::apply_with_crc(self, host, dataset)
    }
    fn remove(&self, host: &Host<'_>, dataset: &DatasetFiles) -> PluginResult<()> {
        Scheme::remove(self, host, dataset)
    }
}

impl CrcUnderTest for SchemeBox {
    fn crc32_in_apply(&self) -> bool {
        crate::abi::FfiScheme::crc32_in_apply(self)
    }
    fn apply(&self, host: &Host<'_>, dataset: &DatasetFiles) -> PluginResult<Vec<String>> {
        Ok(crate::abi::FfiScheme::apply(self, host.raw(), dataset)
            .into_result()?
            .into_iter()
            .map(|s| s.into_string())
            .collect())
    }
    fn apply_with_crc(&self, host: &Host<'_>, dataset: &DatasetFiles) -> PluginResult<Applied> {
        crate::abi::FfiScheme::apply_with_crc(self, host.raw(), dataset).into_result()
    }
    fn remove(&self, host: &Host<'_>, dataset: &DatasetFiles) -> PluginResult<()> {
        crate::abi::FfiScheme::remove(self, host.raw(), dataset).into_result()
    }
}

/// Sizes of member `m`'s files: an empty file, uneven sizes across members, files larger
/// than a pipeline piece and spanning piece boundaries, and a member with none.
fn sizes(m: u32, piece: u64) -> Vec<u64> {
    match m % 4 {
        0 => vec![3 * piece + 17, 0, 5],
        1 => vec![1, piece - 1, 2 * piece + 3, 0],
        2 => vec![],
        _ => vec![7 * piece + m as u64],
    }
}

fn content(m: u32, f: usize, i: u64) -> u8 {
    ((i.wrapping_mul(0x9e37_79b1) >> 9) as u8) ^ (m as u8).wrapping_mul(13) ^ (f as u8) ^ 0xa5
}

/// Write member `m`'s files below `dir`: their metadata with the CRC32 filled in.
fn make_files(dir: &Path, m: u32, piece: u64) -> Result<Vec<FileMeta>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    sizes(m, piece)
        .into_iter()
        .enumerate()
        .map(|(f, size)| {
            let path: PathBuf = dir.join(format!("crc{f}.dat"));
            let data: Vec<u8> = (0..size).map(|i| content(m, f, i)).collect();
            std::fs::write(&path, &data).map_err(|e| format!("{}: {e}", path.display()))?;
            Ok(FileMeta {
                crc32: RSome(crc32fast::hash(&data)),
                ..FileMeta::new(path.display().to_string(), size)
            })
        })
        .collect()
}

fn dataset(dir: &Path, files: Vec<FileMeta>) -> DatasetFiles {
    DatasetFiles {
        dataset_id: 77,
        dir: dir.display().to_string().into(),
        files: files.into(),
    }
}

fn read_all(paths: &[String]) -> Result<Vec<Vec<u8>>, String> {
    paths
        .iter()
        .map(|p| std::fs::read(p).map_err(|e| format!("{p}: {e}")))
        .collect()
}

/// Run the cases on this member (collective: every member of the set calls it at once,
/// each with its own empty or not yet existing directory `dir`). `piece` is the scheme's
/// pipeline piece size, so that files span several pieces. Returns this member's first
/// failure; a scheme whose `crc32_in_apply` is `false` passes when its `apply_with_crc`
/// reports no CRC32 at all.
pub fn check_crc_in_apply<S: CrcUnderTest + ?Sized>(
    host: &Host<'_>,
    scheme: &S,
    dir: &Path,
    piece: u64,
) -> Result<(), String> {
    let m = host.rank();
    let with_crc = make_files(dir, m, piece)?;
    let without: Vec<FileMeta> = with_crc
        .iter()
        .map(|f| FileMeta {
            crc32: ROption::RNone,
            ..f.clone()
        })
        .collect();
    let claims = scheme.crc32_in_apply();

    // the host's fused path: no CRC32 given, the scheme computes them
    let fused = scheme
        .apply_with_crc(host, &dataset(dir, without.clone()))
        .map_err(|e| format!("member {m}: apply_with_crc: {e}"))?;
    let got: Vec<Option<u32>> = fused.crc32.iter().map(|c| c.into_option()).collect();
    if claims {
        let want: Vec<Option<u32>> = with_crc.iter().map(|f| f.crc32.into_option()).collect();
        if got != want {
            return Err(format!(
                "member {m}: apply_with_crc reported CRC32s {got:x?}, the files have {want:x?}"
            ));
        }
    } else if !got.is_empty() {
        return Err(format!(
            "member {m}: crc32_in_apply is false but apply_with_crc reported {got:x?}"
        ));
    }
    let paths: Vec<String> = fused.redundancy.iter().map(|s| s.to_string()).collect();
    let fused_bytes = read_all(&paths)?;

    // the host's other path: CRC32s computed first, then apply: the same redundancy data
    let plain = scheme
        .apply(host, &dataset(dir, with_crc.clone()))
        .map_err(|e| format!("member {m}: apply: {e}"))?;
    if plain != paths {
        return Err(format!(
            "member {m}: apply wrote {plain:?}, apply_with_crc wrote {paths:?}"
        ));
    }
    if claims {
        let plain_bytes = read_all(&paths)?;
        if let Some(i) = (0..paths.len()).find(|&i| plain_bytes[i] != fused_bytes[i]) {
            return Err(format!(
                "member {m}: {} differs between apply_with_crc and apply given the same CRC32s",
                paths[i]
            ));
        }

        // a file whose bytes no longer match the CRC32 the host recorded (on member 1,
        // or 0 in a set of one) must fail the apply on every member
        let victim = u32::from(host.size() > 1);
        let mut changed = with_crc.clone();
        if m == victim {
            if let Some(f) = changed.iter_mut().find(|f| f.size > 0) {
                f.crc32 = RSome(f.crc32.unwrap_or(0) ^ 1);
            }
        }
        if scheme.apply_with_crc(host, &dataset(dir, changed)).is_ok() {
            return Err(format!(
                "member {m}: apply_with_crc succeeded although a file of member {victim} no longer matches its recorded CRC32"
            ));
        }
    }
    scheme
        .remove(host, &dataset(dir, with_crc))
        .map_err(|e| format!("member {m}: remove: {e}"))
}
