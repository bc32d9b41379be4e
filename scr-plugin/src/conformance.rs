//! The scheme conformance cases, runnable on any host: every member of a set runs
//! [`run_scheme_cases`] at once (threads via [`inproc`](crate::inproc) in a plugin's unit
//! tests, MPI ranks in `scr-conformance`), and every member reports the same results.
//!
//! They prove integrity, not only recovery: a scheme must never hand back wrong bytes as
//! a good checkpoint. For logical files of varied shapes (no files, empty files, one
//! byte, sizes that are multiples of nothing, several files, very uneven sizes, a file
//! larger than the pipeline buffer) the cases apply the scheme and check that
//! `redundancy_files` names exactly what apply wrote; then for every loss pattern the
//! scheme claims to tolerate — every combination of up to `k` members, losing data and
//! redundancy files together, data alone, redundancy alone, or a mix of those — they
//! delete, recover, check every member's files byte for byte with their size, mode, mtime
//! and returned CRC32, and lose one more member to prove the set is protected again.
//! Every pattern of `k + 1` losses must fail the same way on every member with nothing
//! left looking recovered; a survivor corrupted by one byte must be rebuilt or refused,
//! never passed on; a corrupted redundancy header on any member must not be trusted;
//! apply must be repeatable and `remove` must leave nothing behind.
//!
//! The corrupted survivor is tested against what the scheme declares
//! ([`Scheme::survivor_check`]): a scheme relying on the host ([`SurvivorCheck::Host`])
//! gets what the runtime gives it, the survivors the host checked (the damaged member is
//! passed as one that lost its files), and must still never hand back a wrong byte; a
//! scheme that says it verifies survivors itself ([`SurvivorCheck::Scheme`]) gets the
//! damaged survivor unverified and must detect it.
//!
//! The offline rebuild is tested against what the scheme declares too
//! ([`Scheme::rebuild_sources`]): for every pattern of up to `k` lost members, and the
//! patterns of `k + 1`, each survivor keeps its redundancy files only if the scheme named
//! it, and [`Scheme::recover_files`] must rebuild the lost members byte-exact from that
//! (or, beyond the claim, fail alike everywhere) without writing redundancy where none
//! was presented.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use abi_stable::std_types::{RNone, RSlice, RSome, RVec};

use crate::abi::{
    DatasetFiles, FileMeta, RecoverRequest, ReduceOp, SchemeBox, SchemeDescription, SurvivorCheck,
};
use crate::error::{ErrorCode, PluginError, PluginResult};
use crate::host::Host;
use crate::plugin::Scheme;

/// `target/<profile>`, where cargo put the libraries of the package under test: a test
/// executable runs from `target/<profile>/deps`, and cdylibs sit one level up. For tests
/// that load their plugin as the runtime does (or hand it to `scr-conformance`).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    exe.parent()
        .and_then(Path::parent)
        .expect("a test executable runs from target/<profile>/deps")
        .to_path_buf()
}

/// The cdylib `lib<name>.so` (`name` as in `[lib] name`) cargo built in [`target_dir`];
/// panics saying what to build when it is missing, since a test without its library
/// proves nothing.
pub fn built_library(name: &str) -> PathBuf {
    let p = target_dir().join(format!("lib{name}.so"));
    assert!(
        p.is_file(),
        "{} is missing: build it first (cargo build --workspace, or cargo build in the plugin's crate)",
        p.display()
    );
    p
}

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
    /// See [`Scheme::remove`].
    fn remove(&self, host: &Host<'_>, dataset: &DatasetFiles) -> PluginResult<()>;
    /// See [`Scheme::survivor_check`]; [`SurvivorCheck::Host`] unless implemented.
    fn survivor_check(&self) -> SurvivorCheck {
        SurvivorCheck::Host
    }
    /// See [`Scheme::rebuild_sources`]; `None` (every survivor's) unless implemented.
    fn rebuild_sources(&self, lost: &[u32]) -> Option<Vec<u32>> {
        let _ = lost;
        None
    }
    /// See [`Scheme::recover_files`]; [`recover`](Self::recover) unless implemented.
    fn recover_files(
        &self,
        host: &Host<'_>,
        request: &RecoverRequest,
    ) -> PluginResult<Vec<FileMeta>> {
        self.recover(host, request)
    }
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
    fn remove(&self, host: &Host<'_>, dataset: &DatasetFiles) -> PluginResult<()> {
        Scheme::remove(self, host, dataset)
    }
    fn survivor_check(&self) -> SurvivorCheck {
        Scheme::survivor_check(self)
    }
    fn rebuild_sources(&self, lost: &[u32]) -> Option<Vec<u32>> {
        Scheme::rebuild_sources(self, lost)
    }
    fn recover_files(
        &self,
        host: &Host<'_>,
        request: &RecoverRequest,
    ) -> PluginResult<Vec<FileMeta>> {
        Scheme::recover_files(self, host, request)
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
    fn remove(&self, host: &Host<'_>, dataset: &DatasetFiles) -> PluginResult<()> {
        self.0.remove(host.raw(), dataset).into_result()
    }
    fn survivor_check(&self) -> SurvivorCheck {
        self.0.survivor_check()
    }
    fn rebuild_sources(&self, lost: &[u32]) -> Option<Vec<u32>> {
        self.0
            .rebuild_sources(RSlice::from_slice(lost))
            .into_option()
            .map(RVec::into_vec)
    }
    fn recover_files(
        &self,
        host: &Host<'_>,
        request: &RecoverRequest,
    ) -> PluginResult<Vec<FileMeta>> {
        Ok(self
            .0
            .recover_files(host.raw(), request)
            .into_result()?
            .into_vec())
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
        if want.crc32.is_some() && g.crc32 != want.crc32 {
            return Err(format!(
                "member {m}: returned CRC32 {:?} for {}, recorded {:?}",
                g.crc32.into_option(),
                want.path,
                want.crc32.into_option()
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Loss {
    Both,
    DataOnly,
    RedundancyOnly,
}

const KINDS: [Loss; 3] = [Loss::Both, Loss::DataOnly, Loss::RedundancyOnly];

/// Patterns of more members than this get the three rotations of the kinds instead of
/// every mixed assignment (3^7 - 3 of them for 7 members, each a rebuild and a second one).
const MIXED_IN_FULL: usize = 2;

/// Every way the members of `pattern` can each lose their files: the three uniform ways
/// first, then (when `mixed`) every assignment that mixes kinds — or, for patterns of
/// more than [`MIXED_IN_FULL`] members, the three rotations `Both, DataOnly,
/// RedundancyOnly, Both, ...` starting at each kind, so that every member still loses
/// each way in some assignment and members next to each other lose differently.
fn assignments(pattern: &[u32], mixed: bool) -> Vec<Vec<Loss>> {
    let mut out: Vec<Vec<Loss>> = KINDS.iter().map(|&k| vec![k; pattern.len()]).collect();
    if mixed && pattern.len() > MIXED_IN_FULL {
        for start in 0..3 {
            out.push((0..pattern.len()).map(|i| KINDS[(start + i) % 3]).collect());
        }
    } else if mixed && pattern.len() > 1 {
        let total = 3usize.pow(pattern.len() as u32);
        for code in 0..total {
            let mut c = code;
            let a: Vec<Loss> = (0..pattern.len())
                .map(|_| {
                    let k = KINDS[c % 3];
                    c /= 3;
                    k
                })
                .collect();
            if a.iter().any(|&k| k != a[0]) {
                out.push(a);
            }
        }
    }
    out
}

/// How an assignment reads in a case name: `Both` when uniform, else per member.
fn kinds_name(pattern: &[u32], kinds: &[Loss]) -> String {
    if kinds.iter().all(|&k| k == kinds[0]) {
        format!("{:?}", kinds[0])
    } else {
        let parts: Vec<String> = pattern
            .iter()
            .zip(kinds)
            .map(|(m, k)| format!("{m}: {k:?}"))
            .collect();
        parts.join(", ")
    }
}

/// Every subset of `0..n` with exactly `size` members, or a seeded sample of 50 of them
/// when there are more than 300 (each pattern costs a recover and a fresh apply).
fn exact_patterns(n: u32, size: u32) -> Vec<Vec<u32>> {
    let all_count = (0..size).fold(1u128, |acc, i| acc * u128::from(n - i) / u128::from(i + 1));
    if all_count <= 300 {
        return combinations(n, size)
            .into_iter()
            .filter(|p| p.len() == size as usize)
            .collect();
    }
    // xorshift with a fixed seed: the same sample on every member and every run
    let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ u64::from(n) << 32 ^ u64::from(size);
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut out: Vec<Vec<u32>> = Vec::new();
    while out.len() < 50 {
        let mut p: Vec<u32> = Vec::new();
        while p.len() < size as usize {
            let m = (next() % u64::from(n)) as u32;
            if !p.contains(&m) {
                p.push(m);
            }
        }
        p.sort_unstable();
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

/// The (survivor, lost) pairs of the corrupted-survivor cases: all of them in small
/// sets, else each lost member with its two neighbours on each side (the members a ring
/// scheme reads from first).
fn survivor_pairs(n: u32) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    for lost in 0..n {
        for s in 0..n {
            let d = (s + n - lost) % n;
            let near = d == 1 || d == 2 || d == n - 1 || d == n - 2;
            if s != lost && (n * (n - 1) <= 30 || near) {
                out.push((s, lost));
            }
        }
    }
    out
}

fn remove_all(paths: impl IntoIterator<Item = PathBuf>) {
    for p in paths {
        let _ = std::fs::remove_file(p);
    }
}

/// Every regular file under `dir`, sorted (what a case left behind, for checks that
/// nothing is).
pub fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Reports cases in order, tells the caller which case is about to run (so a watchdog
/// can name the case a hung plugin is stuck in), and makes results agree on every member.
struct Cases<'h, 'x, 'r> {
    host: &'h Host<'x>,
    started: &'r mut dyn FnMut(&str),
    report: &'r mut dyn FnMut(CaseResult),
}

impl Cases<'_, '_, '_> {
    fn begin(&mut self, name: &str) {
        (self.started)(name);
    }

    /// Report `name` with this member's outcome; it passes only if it passed everywhere.
    fn end(&mut self, name: String, mine: Result<(), String>) -> PluginResult<bool> {
        let ok = self.host.all_agree(mine.is_ok())?;
        let failure = if ok {
            None
        } else {
            // every member reports the first failing member's reason
            let me = self.host.rank();
            let first = self.host.all_reduce(
                if mine.is_err() {
                    u64::from(me)
                } else {
                    u64::MAX
                },
                ReduceOp::Min,
            )? as u32;
            let mut why = mine.err().unwrap_or_default().into_bytes();
            let mut len = (why.len() as u64).to_le_bytes();
            self.host.broadcast(first, &mut len)?;
            why.resize(u64::from_le_bytes(len) as usize, 0);
            self.host.broadcast(first, &mut why)?;
            Some(String::from_utf8_lossy(&why).into_owned())
        };
        (self.report)(CaseResult { name, failure });
        Ok(ok)
    }

    /// Judge a recover that must either rebuild every member's files exactly or fail on
    /// every member (with `code`, when given). Success with a wrong byte anywhere, or
    /// success here and failure there, is a failure of the case.
    fn right_or_failed_alike(
        &self,
        got: PluginResult<Vec<FileMeta>>,
        code: Option<ErrorCode>,
        check: impl FnOnce(&[FileMeta]) -> Result<(), String>,
    ) -> PluginResult<Result<(), String>> {
        let n = u64::from(self.host.size());
        let failed = self
            .host
            .all_reduce(u64::from(got.is_err()), ReduceOp::Sum)?;
        Ok(match got {
            Ok(g) => check(&g).and_then(|()| {
                if failed == 0 {
                    Ok(())
                } else {
                    Err(format!(
                        "recover succeeded here but failed on {failed} other member(s)"
                    ))
                }
            }),
            Err(e) if failed < n => Err(format!(
                "recover failed here ({e}) but succeeded on {} other member(s)",
                n - failed
            )),
            Err(e) => match code {
                Some(c) if e.code != c => Err(format!("failed with {e}, expected `{}`", c.name())),
                _ => Ok(()),
            },
        })
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
    run_scheme_cases_traced(host, scheme, dir, piece, &mut |_| {}, report)
}

/// [`run_scheme_cases`], calling `started(case name)` before each case runs, so that a
/// harness can say which case a hung plugin was in.
///
/// The cases, for each shape of files: apply (twice: it must be repeatable, with the
/// same redundancy files); `redundancy_files` must list exactly what apply returned and
/// wrote; every tolerated loss pattern of up to `k` members, each member losing data,
/// redundancy or both (mixed kinds within a pattern in the first shape: every mix for
/// pairs, three rotations of the kinds for larger patterns), recovered
/// byte-exact and then, after one more member is lost, recovered again (the set must be
/// protected again); every pattern of `k + 1` losses (a seeded sample when there are more
/// than 300) failing `unrecoverable` on every member with nothing looking recovered (or
/// rebuilt exactly everywhere, when the scheme can do better than it claims); a
/// survivor's data corrupted by one byte while another member is lost (rebuilt right or
/// failed alike, never trusted: checked by the harness as the host does when the scheme
/// relies on that, handed over unverified when it declares it verifies survivors
/// itself); a corrupted redundancy header on every member; the offline rebuild of every
/// pattern of up to `k` lost members and of the `k + 1` patterns above, each survivor
/// holding its redundancy only when `rebuild_sources` names it (the lost members rebuilt
/// exactly by `recover_files`, or beyond the claim failed alike); and `remove` leaving
/// nothing of the scheme's behind.
pub fn run_scheme_cases_traced(
    host: &Host<'_>,
    scheme: &dyn SchemeUnderTest,
    dir: &Path,
    piece: u64,
    started: &mut dyn FnMut(&str),
    report: &mut dyn FnMut(CaseResult),
) -> PluginResult<()> {
    let k = scheme.describe()?.tolerated_losses;
    let mut cases = Cases {
        host,
        started,
        report,
    };
    for (index, shape) in SHAPES.iter().enumerate() {
        let sh = ShapeRun::new(host, scheme, dir, shape, index, piece, k)?;
        let Some(applied) = apply_cases(&mut cases, &sh)? else {
            continue;
        };
        listing_case(&mut cases, &sh, applied)?;
        tolerated_loss_cases(&mut cases, &sh, index == 0)?;
        if k < sh.n {
            beyond_claim_cases(&mut cases, &sh)?;
        }
        if *shape == "uniform" && k >= 1 && sh.n >= 2 {
            corrupted_survivor_cases(&mut cases, &sh)?;
        }
        corrupted_header_cases(&mut cases, &sh)?;
        if *shape == "uniform" {
            corrupted_payload_cases(&mut cases, &sh)?;
        }
        offline_rebuild_cases(&mut cases, &sh)?;
        remove_case(&mut cases, &sh)?;
        let _ = std::fs::remove_dir_all(&sh.dir);
    }
    Ok(())
}

/// One file shape's dataset on this member, and what the cases do with it.
struct ShapeRun<'a, 'h> {
    host: &'a Host<'h>,
    scheme: &'a dyn SchemeUnderTest,
    shape: &'static str,
    piece: u64,
    /// Set size, this member, tolerated losses.
    n: u32,
    me: u32,
    k: u32,
    /// Who verifies survivors, as the scheme declares.
    survivors: SurvivorCheck,
    dir: PathBuf,
    metas: Vec<FileMeta>,
    /// The data files (everything else in `dir` is the scheme's).
    data: Vec<PathBuf>,
    ds: DatasetFiles,
}

impl<'a, 'h> ShapeRun<'a, 'h> {
    fn new(
        host: &'a Host<'h>,
        scheme: &'a dyn SchemeUnderTest,
        root: &Path,
        shape: &'static str,
        index: usize,
        piece: u64,
        k: u32,
    ) -> PluginResult<Self> {
        let me = host.rank();
        let dir = root.join(shape);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| PluginError::io(dir.display(), e))?;
        let metas = make_files(&dir, shape, me, piece)?;
        let ds = DatasetFiles {
            dataset_id: index as u64 + 1,
            dir: dir.display().to_string().into(),
            files: metas.clone().into(),
        };
        let data = metas
            .iter()
            .map(|m| PathBuf::from(m.path.as_str()))
            .collect();
        Ok(ShapeRun {
            host,
            scheme,
            shape,
            piece,
            n: host.size(),
            me,
            k,
            survivors: scheme.survivor_check(),
            dir,
            metas,
            data,
            ds,
        })
    }

    /// Whatever is in the dataset directory besides the data is the scheme's.
    fn scheme_files(&self) -> Vec<PathBuf> {
        walk(&self.dir)
            .into_iter()
            .filter(|p| !self.data.contains(p))
            .collect()
    }

    /// Back to the applied state after a case that lost or damaged files.
    fn reset(&self) -> PluginResult<()> {
        make_files(&self.dir, self.shape, self.me, self.piece)?;
        self.scheme.apply(self.host, &self.ds).map(|_| ())
    }

    /// The recover request of this member, which lost its data or did not.
    fn request(&self, lost_data: bool) -> RecoverRequest {
        RecoverRequest {
            dataset_id: self.ds.dataset_id,
            dir: self.ds.dir.clone(),
            files: if lost_data {
                RNone
            } else {
                RSome(RVec::from(self.metas.clone()))
            },
        }
    }

    /// The recover request the runtime would make: this member's files checked against
    /// their recorded size and CRC32 first (as the host does before every `recover`),
    /// and passed as lost when they fail.
    fn host_checked_request(&self, lost_data: bool) -> RecoverRequest {
        let damaged = !lost_data && crate::verify::verify_files(&self.metas).is_err();
        self.request(lost_data || damaged)
    }

    /// Whether any member holds redundancy files of the scheme (collective).
    fn any_redundancy(&self) -> PluginResult<bool> {
        let mine = u64::from(!self.scheme_files().is_empty());
        Ok(self.host.all_reduce(mine, ReduceOp::Max)? == 1)
    }

    /// This member's recovered files checked byte for byte against what was written.
    fn check(&self, got: &[FileMeta]) -> Result<(), String> {
        check_files(self.shape, self.me, self.piece, &self.metas, got)
    }

    /// Lose this member's data, its redundancy, or both.
    fn lose(&self, data: bool, redundancy: bool) {
        if redundancy {
            remove_all(self.scheme_files());
        }
        if data {
            remove_all(self.data.clone());
        }
    }

    /// Recover after this member lost (or kept) its data, and check what came back.
    fn recover_checked(&self, lost_data: bool) -> Result<(), String> {
        self.scheme
            .recover(self.host, &self.request(lost_data))
            .map_err(|e| e.to_string())
            .and_then(|g| self.check(&g))
    }
}

/// Apply twice: it must work and be repeatable. Returns the second apply's redundancy
/// files, or `None` when the shape's remaining cases cannot run.
fn apply_cases(
    cases: &mut Cases<'_, '_, '_>,
    sh: &ShapeRun<'_, '_>,
) -> PluginResult<Option<Vec<String>>> {
    let name = format!("{}: apply", sh.shape);
    cases.begin(&name);
    let first = sh.scheme.apply(sh.host, &sh.ds).map_err(|e| e.to_string());
    if !cases.end(name, first.as_ref().map(|_| ()).map_err(Clone::clone))? {
        return Ok(None);
    }
    let name = format!("{}: apply again", sh.shape);
    cases.begin(&name);
    let second = sh.scheme.apply(sh.host, &sh.ds).map_err(|e| e.to_string());
    let same = match (&first, &second) {
        (Ok(a), Ok(b)) if a == b => Ok(()),
        (Ok(a), Ok(b)) => Err(format!("redundancy files changed from {a:?} to {b:?}")),
        (_, Err(e)) => Err(e.clone()),
        (Err(e), _) => Err(e.clone()),
    };
    if !cases.end(name, same)? {
        return Ok(None);
    }
    Ok(second.ok())
}

/// The host moves, flushes and deletes redundancy files by `redundancy_files`: it must
/// list exactly what apply returned and wrote.
fn listing_case(
    cases: &mut Cases<'_, '_, '_>,
    sh: &ShapeRun<'_, '_>,
    applied: Vec<String>,
) -> PluginResult<()> {
    let (me, name) = (
        sh.me,
        format!(
            "{}: redundancy_files lists exactly what apply wrote",
            sh.shape
        ),
    );
    cases.begin(&name);
    let mut returned: Vec<PathBuf> = applied.into_iter().map(PathBuf::from).collect();
    returned.sort();
    let listed = sh.scheme.redundancy_files(&sh.ds).map(|v| {
        let mut v: Vec<PathBuf> = v.into_iter().map(PathBuf::from).collect();
        v.sort();
        v
    });
    let on_disk = sh.scheme_files();
    let mine = match listed {
        Err(e) => Err(e.to_string()),
        Ok(l) if l != returned => Err(format!(
            "member {me}: redundancy_files lists {l:?} but apply returned {returned:?}"
        )),
        Ok(_) if on_disk != returned => Err(format!(
            "member {me}: apply returned {returned:?} but wrote {on_disk:?}"
        )),
        Ok(_) => Ok(()),
    };
    cases.end(name, mine)?;
    Ok(())
}

/// Every tolerated loss pattern, every way of losing (data, redundancy, both; mixed
/// within a pattern when `mixed`), recovered; then one more loss, recovered too.
fn tolerated_loss_cases(
    cases: &mut Cases<'_, '_, '_>,
    sh: &ShapeRun<'_, '_>,
    mixed: bool,
) -> PluginResult<()> {
    let (n, me, shape) = (sh.n, sh.me, sh.shape);
    for pattern in combinations(n, sh.k) {
        for kinds in assignments(&pattern, mixed) {
            let how = kinds_name(&pattern, &kinds);
            let name = format!("{shape}: lose members {pattern:?} ({how}), recover");
            cases.begin(&name);
            let (lose_data, lose_red) = match pattern.iter().position(|&m| m == me) {
                None => (false, false),
                Some(i) => match kinds[i] {
                    Loss::Both => (true, true),
                    Loss::DataOnly => (true, false),
                    Loss::RedundancyOnly => (false, true),
                },
            };
            sh.lose(lose_data, lose_red);
            if !cases.end(name, sh.recover_checked(lose_data))? {
                sh.reset()?;
                continue;
            }
            // protected again: the rebuilt members' redundancy is back, so losing the
            // member whose rebuild needs it (the left neighbour of the first member
            // lost) is recovered too
            let next = (pattern[0] + n - 1) % n;
            let name = format!(
                "{shape}: after losing {pattern:?} ({how}), lose member {next} too: protected again"
            );
            cases.begin(&name);
            sh.lose(me == next, me == next);
            if !cases.end(name, sh.recover_checked(me == next))? {
                sh.reset()?;
            }
        }
    }
    Ok(())
}

/// Beyond the claim: every pattern of `k + 1` losses must fail alike everywhere with
/// nothing looking recovered, or (a scheme may do better than it promises, e.g. PARTNER
/// with distant losses) rebuild every member exactly.
fn beyond_claim_cases(cases: &mut Cases<'_, '_, '_>, sh: &ShapeRun<'_, '_>) -> PluginResult<()> {
    let k = sh.k;
    for pattern in exact_patterns(sh.n, k + 1) {
        let name = format!(
            "{}: lose members {pattern:?} (beyond the claim of {k}), recover is right or fails everywhere",
            sh.shape
        );
        cases.begin(&name);
        let lost = pattern.contains(&sh.me);
        sh.lose(lost, lost);
        let got = sh.scheme.recover(sh.host, &sh.request(lost));
        let left_behind = got.is_err() && lost && sh.data.iter().any(|p| p.exists());
        let mine = cases
            .right_or_failed_alike(got, Some(ErrorCode::UNRECOVERABLE), |g: &[FileMeta]| {
                sh.check(g).map_err(|e| format!(
                    "recovered although more members were lost than the scheme tolerates, and wrongly: {e}"
                ))
            })?
            .and_then(|()| if left_behind {
                Err("a lost member's file exists again after a failed recovery".to_string())
            } else {
                Ok(())
            });
        cases.end(name, mine)?;
        sh.reset()?;
    }
    Ok(())
}

/// A survivor's data corrupted by one byte while another member is lost: the scheme must
/// not feed it into the rebuild nor hand it back as good. A scheme relying on the host's
/// survivor check gets the request the runtime makes (the damaged member passed as lost)
/// from a host that says so ([`Host::survivors_verified`]); one declaring that it
/// verifies survivors itself gets the damaged files as intact from a host that does not
/// say so, and must detect them.
fn corrupted_survivor_cases(
    cases: &mut Cases<'_, '_, '_>,
    sh: &ShapeRun<'_, '_>,
) -> PluginResult<()> {
    let me = sh.me;
    for (s, l) in survivor_pairs(sh.n) {
        let how = match sh.survivors {
            SurvivorCheck::Host => {
                format!("the host's check passes member {s} as lost (the scheme relies on it)")
            }
            SurvivorCheck::Scheme => {
                "passed unverified (the scheme verifies survivors itself)".to_string()
            }
        };
        let name = format!(
            "{}: member {s}'s data corrupted by one byte and member {l} lost, {how}: recover is right or fails everywhere",
            sh.shape
        );
        cases.begin(&name);
        if me == s {
            for p in &sh.data {
                if let Ok(mut b) = std::fs::read(p) {
                    let i = 1234 % b.len().max(1);
                    if let Some(x) = b.get_mut(i) {
                        *x ^= 0x01;
                        std::fs::write(p, &b).map_err(|e| PluginError::io(p.display(), e))?;
                    }
                }
            }
        }
        sh.lose(me == l, me == l);
        let request = match sh.survivors {
            SurvivorCheck::Host => sh.host_checked_request(me == l),
            SurvivorCheck::Scheme => sh.request(me == l),
        };
        // as the runtime does after its check: the host says the survivors are verified
        let told = crate::SurvivorsVerified::new(sh.host.raw());
        let told = Host::new(crate::host_ref(&told));
        let got = match sh.survivors {
            SurvivorCheck::Host => sh.scheme.recover(&told, &request),
            SurvivorCheck::Scheme => sh.scheme.recover(sh.host, &request),
        };
        let mine = cases
            .right_or_failed_alike(got, None, |g: &[FileMeta]| sh.check(g))?
            .map_err(|e| match sh.survivors {
                SurvivorCheck::Host => format!("member {me}: {e}"),
                SurvivorCheck::Scheme => format!(
                    "member {me}: {e} (the scheme declares SurvivorCheck::Scheme, so it must detect member {s}'s damaged data itself: verify survivors in recover with scr_plugin::verify::verify_files, or declare SurvivorCheck::Host to rely on the host's check)"
                ),
            });
        cases.end(name, mine)?;
        sh.reset()?;
    }
    Ok(())
}

/// A corrupted redundancy header must not be trusted, on any member.
fn corrupted_header_cases(
    cases: &mut Cases<'_, '_, '_>,
    sh: &ShapeRun<'_, '_>,
) -> PluginResult<()> {
    let (n, me, k) = (sh.n, sh.me, sh.k);
    let any_red = sh.any_redundancy()?;
    if !any_red || n <= 1 {
        return Ok(());
    }
    for c in 0..n {
        let pattern: Vec<u32> = (1..=k.min(n - 1)).map(|d| (c + d) % n).collect();
        let name = format!(
            "{}: corrupted redundancy header on member {c} with members {pattern:?} lost",
            sh.shape
        );
        cases.begin(&name);
        if me == c {
            for p in sh.scheme_files() {
                if let Ok(mut b) = std::fs::read(&p) {
                    let i = b.len().saturating_sub(20);
                    if let Some(x) = b.get_mut(i) {
                        *x ^= 0x55;
                    }
                    let _ = std::fs::write(&p, b);
                }
            }
        }
        let lost = pattern.contains(&me);
        sh.lose(lost, false);
        let got = sh.scheme.recover(sh.host, &sh.request(lost));
        let mine = cases
            .right_or_failed_alike(got, Some(ErrorCode::UNRECOVERABLE), |g: &[FileMeta]| {
                sh.check(g)
            })?
            .map_err(|e| format!("trusted a corrupted header: {e}"));
        cases.end(name, mine)?;
        sh.reset()?;
    }
    Ok(())
}

/// A redundancy payload damaged by one byte (its header intact) on member `c`, with `k`
/// members lost after it and, in a second case, `k` members lost before it: the
/// damaged payload must not feed a rebuild unnoticed, whether the scheme checks it
/// before the rebuild or in the pass that reads it
/// ([`RedReader::verify_rest`](crate::redfile::RedReader::verify_rest)): recover is
/// right or fails on every member. (Losing the members before `c` makes `c` hold the
/// only copy PARTNER has of its left neighbour.)
fn corrupted_payload_cases(
    cases: &mut Cases<'_, '_, '_>,
    sh: &ShapeRun<'_, '_>,
) -> PluginResult<()> {
    let (n, me, k) = (sh.n, sh.me, sh.k);
    let any_red = sh.any_redundancy()?;
    if !any_red || n <= 1 || k == 0 {
        return Ok(());
    }
    let k = k.min(n - 1);
    for c in 0..n {
        for (side, pattern) in [
            ("after", (1..=k).map(|d| (c + d) % n).collect::<Vec<u32>>()),
            ("before", (1..=k).map(|d| (c + n - d) % n).collect()),
        ] {
            let name = format!(
                "{}: redundancy payload on member {c} damaged by one byte, members {pattern:?} ({side} it) lost: recover is right or fails everywhere",
                sh.shape
            );
            cases.begin(&name);
            if me == c {
                for p in sh.scheme_files() {
                    if let Ok(mut b) = std::fs::read(&p) {
                        if let Some(x) = b.first_mut() {
                            *x ^= 0x10;
                        }
                        let _ = std::fs::write(&p, b);
                    }
                }
            }
            let lost = pattern.contains(&me);
            sh.lose(lost, false);
            let got = sh.scheme.recover(sh.host, &sh.request(lost));
            let mine = cases
                .right_or_failed_alike(got, None, |g: &[FileMeta]| sh.check(g))?
                .map_err(|e| format!("trusted a damaged redundancy payload: {e}"));
            cases.end(name, mine)?;
            sh.reset()?;
        }
    }
    Ok(())
}

/// An offline rebuild as `scr postrun` makes it: for every pattern of up to `k` lost
/// members (and every pattern of `k + 1`, or the sample of them), each survivor keeps
/// its application files and its redundancy files only if
/// [`rebuild_sources`](SchemeUnderTest::rebuild_sources) names it (every survivor when it
/// says `None`); the lost members have nothing. `recover_files` must then rebuild the
/// lost members byte-exact (beyond the claim: that, or fail alike everywhere with
/// `unrecoverable` and no lost file looking recovered), and must not write a redundancy
/// file on a survivor whose redundancy was not presented.
fn offline_rebuild_cases(cases: &mut Cases<'_, '_, '_>, sh: &ShapeRun<'_, '_>) -> PluginResult<()> {
    let (n, me, k) = (sh.n, sh.me, sh.k);
    let mut patterns: Vec<(Vec<u32>, bool)> = combinations(n, k.min(n))
        .into_iter()
        .map(|p| (p, false))
        .collect();
    if k < n {
        patterns.extend(exact_patterns(n, k + 1).into_iter().map(|p| (p, true)));
    }
    for (pattern, beyond) in patterns {
        let name = if beyond {
            format!(
                "{}: offline rebuild of members {pattern:?} (beyond the claim of {k}) with the redundancy of the survivors rebuild_sources names: recover_files is right or fails everywhere",
                sh.shape
            )
        } else {
            format!(
                "{}: offline rebuild of members {pattern:?} with the redundancy of the survivors rebuild_sources names: recover_files rebuilds them exactly",
                sh.shape
            )
        };
        cases.begin(&name);
        let sources = sh.scheme.rebuild_sources(&pattern);
        let named = |m: u32| sources.as_ref().is_none_or(|s| s.contains(&m));
        let lost = pattern.contains(&me);
        // the answer is local: it must name survivors only, and be the same everywhere
        let mut mine = match sources.as_ref().and_then(|s| {
            s.iter()
                .find(|&&m| m >= n || pattern.contains(&m))
                .copied()
        }) {
            Some(m) => Err(format!(
                "member {me}: rebuild_sources({pattern:?}) = {sources:?} names member {m}, which is not a survivor"
            )),
            None => Ok(()),
        };
        let digest = sources_digest(sources.as_deref(), n);
        let low = sh.host.all_reduce(digest, ReduceOp::Min)?;
        let high = sh.host.all_reduce(digest, ReduceOp::Max)?;
        if low != high && mine.is_ok() {
            mine = Err(format!(
                "member {me}: rebuild_sources({pattern:?}) = {sources:?} here, something else on other members"
            ));
        }
        if !sh.host.all_agree(mine.is_ok())? {
            let mine = mine.and(Err(
                "rebuild_sources disagrees on another member".to_string()
            ));
            cases.end(name, mine)?;
            continue;
        }
        let presented = !lost && named(me);
        sh.lose(lost, !presented);
        let got = sh.scheme.recover_files(sh.host, &sh.request(lost));
        let failed = got.is_err();
        let mut mine = if beyond {
            cases
                .right_or_failed_alike(got, Some(ErrorCode::UNRECOVERABLE), |g: &[FileMeta]| {
                    sh.check(g).map_err(|e| format!(
                        "recovered although more members were lost than the scheme tolerates, and wrongly: {e}"
                    ))
                })?
                .and_then(|()| {
                    if failed && lost && sh.data.iter().any(|p| p.exists()) {
                        Err(format!(
                            "member {me}: a lost member's file exists again after a failed recover_files"
                        ))
                    } else {
                        Ok(())
                    }
                })
        } else {
            got.map_err(|e| {
                format!(
                    "member {me}: {e} (rebuild_sources({pattern:?}) = {sources:?}: recover_files must rebuild from the redundancy of those survivors alone)"
                )
            })
            .and_then(|g| sh.check(&g))
        };
        if mine.is_ok() && !lost && !named(me) {
            let written = sh.scheme_files();
            if !written.is_empty() {
                mine = Err(format!(
                    "member {me}: recover_files wrote {written:?}, though rebuild_sources({pattern:?}) = {sources:?} did not name this survivor (its redundancy is not there to rewrite)"
                ));
            }
        }
        cases.end(name, mine)?;
        sh.reset()?;
    }
    Ok(())
}

/// A digest of a `rebuild_sources` answer (`None`, or the set of members named), for
/// the check that every member gives the same answer.
fn sources_digest(sources: Option<&[u32]>, n: u32) -> u64 {
    let Some(s) = sources else {
        return u64::MAX;
    };
    // FNV-1a over the membership flags of 0..n, so order and repetition do not matter
    (0..n).fold(0xcbf2_9ce4_8422_2325u64, |h, m| {
        (h ^ u64::from(s.contains(&m))).wrapping_mul(0x0100_0000_01b3)
    })
}

/// `remove` leaves nothing of the scheme's behind.
fn remove_case(cases: &mut Cases<'_, '_, '_>, sh: &ShapeRun<'_, '_>) -> PluginResult<()> {
    let name = format!("{}: remove leaves nothing behind", sh.shape);
    cases.begin(&name);
    let mine = sh
        .scheme
        .remove(sh.host, &sh.ds)
        .map_err(|e| e.to_string())
        .and_then(|()| {
            let left = sh.scheme_files();
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("member {}: left {left:?}", sh.me))
            }
        });
    cases.end(name, mine)?;
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
        // every subset of up to k members, for the k of an RS scheme too
        let all = combinations(8, 7);
        assert_eq!(all.len(), 255 - 1);
        for mask in 1u32..255 {
            let want: Vec<u32> = (0..8).filter(|m| mask & (1 << m) != 0).collect();
            assert!(all.contains(&want), "{want:?}");
        }
        assert_eq!(combinations(6, 3).len(), 6 + 15 + 20);
    }

    #[test]
    fn mixed_losses_every_way_for_pairs_and_rotations_beyond() {
        assert_eq!(assignments(&[0], true).len(), 3);
        assert_eq!(assignments(&[0, 1], true).len(), 9);
        assert_eq!(assignments(&[0, 1], false).len(), 3);
        let big = assignments(&[0, 1, 2, 3], true);
        assert_eq!(big.len(), 6);
        // each member loses each way in some assignment
        for m in 0..4 {
            for k in KINDS {
                assert!(big.iter().any(|a| a[m] == k), "member {m} {k:?}");
            }
        }
        assert!(big[3..].iter().all(|a| a.iter().any(|&k| k != a[0])));
    }
}
