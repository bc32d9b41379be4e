//! The scheme conformance cases, runnable on any host: every member of a set runs
//! [`run_scheme_cases`] at once (threads via [`inproc`](crate::inproc) in a plugin's unit
//! tests, MPI ranks in `scr-conformance`), and every member reports the same results.
//!
//! For logical files of varied shapes (no files, empty files, one byte, sizes that are
//! multiples of nothing, several files, very uneven sizes, a file larger than the
//! pipeline buffer) the cases apply the scheme, then for every loss pattern the scheme
//! claims to tolerate — every combination of up to `k` members, losing data and
//! redundancy files together, data alone, or redundancy alone — delete, recover, and check
//! every member's files byte for byte with their size, mode and mtime. One pattern beyond
//! the claim must fail the same way on every member with nothing left looking recovered,
//! apply must be repeatable, and a corrupted redundancy header must not be trusted.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use abi_stable::std_types::{RNone, RSome, RVec};

use crate::abi::{DatasetFiles, FileMeta, RecoverRequest, SchemeBox, SchemeDescription};
use crate::error::{ErrorCode, PluginError, PluginResult};
use crate::host::Host;
use crate::plugin::Scheme;

/// The calls the cases make; implemented for plugin-side schemes and for the FFI objects
/// the host loads, so the same cases run on both.
pub trait SchemeUnderTest {
    /// See [`Scheme::describe`].
    fn describe(&self) -> PluginResult<SchemeDescription>;
    /// See [`Scheme::apply`].
    fn apply(&self, host: &Host<'_>, dataset: &DatasetFiles) -> PluginResult<Vec<String>>;
    /// See [`Scheme::recover`].
    fn recover(&self, host: &Host<'_>, request: &RecoverRequest) -> PluginResult<Vec<FileMeta>>;
    /// See [`Scheme::redundancy_files`].
    fn redundancy_files(&self, dataset: &DatasetFiles) -> PluginResult<Vec<String>>;
}

impl<S: Scheme + ?Sized> SchemeUnderTest for S {
    fn describe(&self) -> PluginResult<SchemeDescription> {
        Scheme::describe(self)
    }
    fn apply(&self, host: &Host<'_>, dataset: &DatasetFiles) -> PluginResult<Vec<String>> {
        Scheme::apply(self, host, dataset)
    }
    fn recover(&self, host: &Host<'_>, request: &RecoverRequest) -> PluginResult<Vec<FileMeta>> {
        Scheme::recover(self, host, request)
    }
    fn redundancy_files(&self, dataset: &DatasetFiles) -> PluginResult<Vec<String>> {
        Scheme::redundancy_files(self, dataset)
    }
}

/// The FFI object as loaded from a library.
pub struct Loaded<'a>(pub &'a SchemeBox);

impl SchemeUnderTest for Loaded<'_> {
    fn describe(&self) -> PluginResult<SchemeDescription> {
        self.0.describe().into_result()
    }
    fn apply(&self, host: &Host<'_>, dataset: &DatasetFiles) -> PluginResult<Vec<String>> {
        Ok(self
            .0
            .apply(host.raw(), dataset)
            .into_result()?
            .into_iter()
            .map(|s| s.into_string())
            .collect())
    }
    fn recover(&self, host: &Host<'_>, request: &RecoverRequest) -> PluginResult<Vec<FileMeta>> {
        Ok(self
            .0
            .recover(host.raw(), request)
            .into_result()?
            .into_vec())
    }
    fn redundancy_files(&self, dataset: &DatasetFiles) -> PluginResult<Vec<String>> {
        Ok(self
            .0
            .redundancy_files(dataset)
            .into_result()?
            .into_iter()
            .map(|s| s.into_string())
            .collect())
    }
}

/// One case's outcome (the same on every member).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaseResult {
    /// What was tried.
    pub name: String,
    /// `None` when it passed, else why it failed (this member's view).
    pub failure: Option<String>,
}

/// The shapes of the members' logical files, by name.
pub const SHAPES: &[&str] = &["varied", "uniform", "one-member-has-data"];

/// Content of byte `i` of file `f` of member `m` (deterministic, never all zero).
fn byte(m: u32, f: usize, i: u64) -> u8 {
    ((i.wrapping_mul(2_654_435_761) >> 7) as u8) ^ (m as u8).wrapping_mul(31) ^ (f as u8 * 7) ^ 0x5a
}

/// The files of member `m` for `shape`: (relative name, size, mode).
fn shape_files(shape: &str, m: u32, piece: u64) -> Vec<(String, u64, u32)> {
    let f = |name: &str, size: u64, mode: u32| (format!("m{m}/{name}"), size, mode);
    match shape {
        "uniform" => vec![f("a.dat", 4096, 0o600)],
        "one-member-has-data" if m == 1 => vec![f("only.dat", 3 * piece + 1, 0o644)],
        "one-member-has-data" => vec![],
        _ => match m % 6 {
            0 => vec![],
            1 => vec![f("empty.dat", 0, 0o600)],
            2 => vec![f("one.dat", 1, 0o640)],
            3 => vec![
                f("x.dat", 7, 0o600),
                f("sub/y.dat", 1000, 0o644),
                f("z.dat", 4099, 0o600),
            ],
            4 => vec![f("big.dat", 5 * piece + 13, 0o600)],
            _ => vec![f("e.dat", 0, 0o600), f("s.dat", 333, 0o600)],
        },
    }
}

/// Write member `m`'s files for `shape` into `dir` and return their metadata.
fn make_files(dir: &Path, shape: &str, m: u32, piece: u64) -> PluginResult<Vec<FileMeta>> {
    let mut metas = Vec::new();
    for (fi, (name, size, mode)) in shape_files(shape, m, piece).into_iter().enumerate() {
        let path = dir.join(&name);
        if let Some(p) = path.parent() {
            std::fs::create_dir_all(p).map_err(|e| PluginError::io(p.display(), e))?;
        }
        let data: Vec<u8> = (0..size).map(|i| byte(m, fi, i)).collect();
        std::fs::write(&path, &data).map_err(|e| PluginError::io(path.display(), e))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
            .map_err(|e| PluginError::io(path.display(), e))?;
        let mtime = std::time::UNIX_EPOCH
            + std::time::Duration::new(
                1_500_000_000 + m as u64 * 60 + fi as u64,
                123_000 * (fi as u32 + 1),
            );
        std::fs::File::options()
            .write(true)
            .open(&path)
            .and_then(|fh| {
                fh.set_times(
                    std::fs::FileTimes::new()
                        .set_modified(mtime)
                        .set_accessed(mtime),
                )
            })
            .map_err(|e| PluginError::io(path.display(), e))?;
        let md = std::fs::metadata(&path).map_err(|e| PluginError::io(path.display(), e))?;
        metas.push(FileMeta {
            path: path.display().to_string().into(),
            size,
            mode: md.mode() & 0o7777,
            uid: md.uid(),
            gid: md.gid(),
            mtime_sec: md.mtime(),
            mtime_nsec: md.mtime_nsec() as u32,
            atime_sec: md.atime(),
            atime_nsec: md.atime_nsec() as u32,
            crc32: RSome(crc32fast::hash(&data)),
        });
    }
    Ok(metas)
}

/// Check that member `m`'s files are back exactly (content, size, mode, mtime).
fn check_files(
    shape: &str,
    m: u32,
    piece: u64,
    metas: &[FileMeta],
    got: &[FileMeta],
) -> Result<(), String> {
    if got.len() != metas.len() {
        return Err(format!(
            "member {m}: {} files returned, {} expected",
            got.len(),
            metas.len()
        ));
    }
    for (fi, (want, g)) in metas.iter().zip(got).enumerate() {
        if want.path != g.path || want.size != g.size {
            return Err(format!(
                "member {m}: returned {} ({} B) for {} ({} B)",
                g.path, g.size, want.path, want.size
            ));
        }
        let path = Path::new(want.path.as_str());
        let data =
            std::fs::read(path).map_err(|e| format!("member {m}: {}: {e}", path.display()))?;
        let size = shape_files(shape, m, piece)[fi].1;
        if data.len() as u64 != size {
            return Err(format!(
                "member {m}: {} has {} bytes, expected {size}",
                path.display(),
                data.len()
            ));
        }
        if let Some(i) = data
            .iter()
            .enumerate()
            .position(|(i, b)| *b != byte(m, fi, i as u64))
        {
            return Err(format!(
                "member {m}: {} differs at byte {i}",
                path.display()
            ));
        }
        let md = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
        if md.mode() & 0o7777 != want.mode {
            return Err(format!(
                "member {m}: {} mode {:o}, expected {:o}",
                path.display(),
                md.mode() & 0o7777,
                want.mode
            ));
        }
        if (md.mtime(), md.mtime_nsec() as u32) != (want.mtime_sec, want.mtime_nsec) {
            return Err(format!(
                "member {m}: {} mtime {}.{}, expected {}.{}",
                path.display(),
                md.mtime(),
                md.mtime_nsec(),
                want.mtime_sec,
                want.mtime_nsec
            ));
        }
    }
    Ok(())
}

/// Every subset of `0..n` with `1..=k` members, in a fixed order.
fn combinations(n: u32, k: u32) -> Vec<Vec<u32>> {
    let mut out = Vec::new();
    fn rec(start: u32, n: u32, left: u32, cur: &mut Vec<u32>, out: &mut Vec<Vec<u32>>) {
        if !cur.is_empty() {
            out.push(cur.clone());
        }
        if left == 0 {
            return;
        }
        for m in start..n {
            cur.push(m);
            rec(m + 1, n, left - 1, cur, out);
            cur.pop();
        }
    }
    rec(0, n, k, &mut Vec::new(), &mut out);
    out
}

/// How a member loses its files in a pattern.
#[derive(Clone, Copy, Debug)]
enum Loss {
    Both,
    DataOnly,
    RedundancyOnly,
}

fn remove_all(paths: impl IntoIterator<Item = PathBuf>) {
    for p in paths {
        let _ = std::fs::remove_file(p);
    }
}

/// Run every case as member `host.rank()` with its files in `dir` (private to this
/// member, like a node-local dataset directory). `piece` must be the buffer size the
/// scheme was configured with, so that one file is larger than a pipeline piece.
/// `report` is called once per case, in the same order on every member.
pub fn run_scheme_cases(
    host: &Host<'_>,
    scheme: &dyn SchemeUnderTest,
    dir: &Path,
    piece: u64,
    report: &mut dyn FnMut(CaseResult),
) -> PluginResult<()> {
    let n = host.size();
    let me = host.rank();
    let k = scheme.describe()?.tolerated_losses;
    let mut case = |name: String, mine: Result<(), String>| -> PluginResult<bool> {
        let ok = host.all_agree(mine.is_ok())?;
        let failure = match (ok, mine) {
            (true, _) => None,
            (false, Err(e)) => Some(e),
            (false, Ok(())) => Some("failed on another member".to_string()),
        };
        report(CaseResult { name, failure });
        Ok(ok)
    };
    for (index, shape) in SHAPES.iter().enumerate() {
        let dataset_id = index as u64 + 1;
        let sdir = dir.join(shape);
        let _ = std::fs::remove_dir_all(&sdir);
        std::fs::create_dir_all(&sdir).map_err(|e| PluginError::io(sdir.display(), e))?;
        let metas = make_files(&sdir, shape, me, piece)?;
        let ds = DatasetFiles {
            dataset_id,
            dir: sdir.display().to_string().into(),
            files: metas.clone().into(),
        };
        // apply twice: it must be repeatable
        let first = scheme.apply(host, &ds).map_err(|e| e.to_string());
        if !case(
            format!("{shape}: apply"),
            first.as_ref().map(|_| ()).map_err(Clone::clone),
        )? {
            continue;
        }
        let second = scheme.apply(host, &ds).map_err(|e| e.to_string());
        let same = match (&first, &second) {
            (Ok(a), Ok(b)) if a == b => Ok(()),
            (Ok(a), Ok(b)) => Err(format!("redundancy files changed from {a:?} to {b:?}")),
            (_, Err(e)) => Err(e.clone()),
            (Err(e), _) => Err(e.clone()),
        };
        if !case(format!("{shape}: apply again"), same)? {
            continue;
        }
        let red: Vec<PathBuf> = scheme
            .redundancy_files(&ds)?
            .into_iter()
            .map(PathBuf::from)
            .collect();
        let data: Vec<PathBuf> = metas
            .iter()
            .map(|m| PathBuf::from(m.path.as_str()))
            .collect();
        let request = |lost_data: bool| RecoverRequest {
            dataset_id,
            dir: sdir.display().to_string().into(),
            files: if lost_data {
                RNone
            } else {
                RSome(RVec::from(metas.clone()))
            },
        };

        // every tolerated loss pattern, three ways
        for pattern in combinations(n, k) {
            for loss in [Loss::Both, Loss::DataOnly, Loss::RedundancyOnly] {
                let lost = pattern.contains(&me);
                let (lose_data, lose_red) = match loss {
                    Loss::Both => (lost, lost),
                    Loss::DataOnly => (lost, false),
                    Loss::RedundancyOnly => (false, lost),
                };
                if lose_data {
                    remove_all(data.clone());
                }
                if lose_red {
                    remove_all(red.clone());
                }
                let got = scheme.recover(host, &request(lose_data));
                let mine = got
                    .map_err(|e| e.to_string())
                    .and_then(|g| check_files(shape, me, piece, &metas, &g));
                let name = format!("{shape}: lose members {pattern:?} ({loss:?}), recover");
                if !case(name, mine)? {
                    // put this member back in a known state for the next pattern
                    make_files(&sdir, shape, me, piece)?;
                    scheme.apply(host, &ds)?;
                    continue;
                }
                // recovered members must be protected again: a clean recover finds
                // nothing missing and changes nothing
                let again = scheme
                    .recover(host, &request(false))
                    .map_err(|e| e.to_string())
                    .and_then(|g| check_files(shape, me, piece, &metas, &g));
                case(
                    format!("{shape}: after losing {pattern:?} ({loss:?}), protected again"),
                    again,
                )?;
            }
        }

        // one beyond the claim: must fail alike everywhere, nothing looking recovered
        if k < n {
            let pattern: Vec<u32> = (0..=k).collect();
            let lost = pattern.contains(&me);
            if lost {
                remove_all(data.clone());
                remove_all(red.clone());
            }
            let got = scheme.recover(host, &request(lost));
            let mine = match &got {
                Ok(_) => Err(
                    "recovered although more members were lost than the scheme tolerates"
                        .to_string(),
                ),
                Err(e) if e.code != ErrorCode::UNRECOVERABLE => {
                    Err(format!("failed with {e}, expected `unrecoverable`"))
                }
                Err(_) if lost && data.iter().any(|p| p.exists()) => {
                    Err("a lost member's file exists again after a failed recovery".to_string())
                }
                Err(_) => Ok(()),
            };
            case(format!("{shape}: lose members {pattern:?} (beyond the claim of {k}), recover fails everywhere"), mine)?;
            // restore for the next case
            make_files(&sdir, shape, me, piece)?;
            scheme.apply(host, &ds)?;
        }

        // a corrupted redundancy header must not be trusted
        if !red.is_empty() && n > 1 {
            if me == 0 {
                for p in &red {
                    if let Ok(mut b) = std::fs::read(p) {
                        let i = b.len().saturating_sub(20);
                        if let Some(x) = b.get_mut(i) {
                            *x ^= 0x55;
                        }
                        let _ = std::fs::write(p, b);
                    }
                }
            }
            // member 0's redundancy is now suspect; lose k more members' data
            let pattern: Vec<u32> = (1..=k.min(n - 1)).collect();
            let lost = pattern.contains(&me);
            if lost {
                remove_all(data.clone());
            }
            let got = scheme.recover(host, &request(lost));
            let mine = match got {
                Err(e) if e.code == ErrorCode::UNRECOVERABLE => Ok(()),
                Err(e) => Err(format!("failed with {e}, expected `unrecoverable`")),
                Ok(g) => {
                    // tolerated (k losses + one untrusted file counted as lost must exceed k,
                    // unless the scheme could rebuild around it): then it must be right
                    check_files(shape, me, piece, &metas, &g)
                        .map_err(|e| format!("trusted a corrupted header: {e}"))
                }
            };
            case(format!("{shape}: corrupted redundancy header on member 0 with members {pattern:?} lost"), mine)?;
            make_files(&sdir, shape, me, piece)?;
            scheme.apply(host, &ds)?;
        }
        let _ = std::fs::remove_dir_all(&sdir);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combinations_cover_every_subset_up_to_k() {
        assert_eq!(combinations(3, 1), vec![vec![0], vec![1], vec![2]]);
        assert_eq!(combinations(4, 2).len(), 4 + 6);
        assert!(combinations(5, 0).is_empty());
    }
}
