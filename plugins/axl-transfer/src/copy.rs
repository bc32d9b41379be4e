//! The `sync` and `pthread` transfer types: file copies by chunks, on one thread (sync) or
//! a pool (pthread) that splits large files into chunks and spreads small files over the
//! threads. Every destination is written under a temporary name and renamed when
//! complete; CRC32 is computed while copying (per chunk, combined in order); the state is
//! persisted atomically as chunks complete (at most every quarter second, and at every
//! change of the transfer's status), so another process can resume after verifying
//! the chunks already copied, wait, or cancel.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use scr_plugin::{
    ErrorCode, FileResult, Host, Params, PluginError, PluginResult, Transfer, TransferConfig,
    TransferStatus,
};
use serde::{Deserialize, Serialize};

/// State-file format version.
const STATE_VERSION: u32 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum Status {
    Idle,
    InProgress,
    Complete,
    Failed,
    Cancelled,
}

impl From<Status> for TransferStatus {
    fn from(s: Status) -> Self {
        match s {
            Status::Idle => TransferStatus::Idle,
            Status::InProgress => TransferStatus::InProgress,
            Status::Complete => TransferStatus::Complete,
            Status::Failed => TransferStatus::Failed,
            Status::Cancelled => TransferStatus::Cancelled,
        }
    }
}

/// One (source, destination) pair and what is done of it.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct FileState {
    source: PathBuf,
    destination: PathBuf,
    size: u64,
    /// CRC32 of each chunk copied so far, by chunk index.
    chunks: BTreeMap<u64, u32>,
    crc32: Option<u32>,
    status: Status,
    error: Option<String>,
}

impl FileState {
    fn temp(&self) -> PathBuf {
        let mut name = self.destination.as_os_str().to_owned();
        name.push(".scr-part");
        PathBuf::from(name)
    }

    fn chunk_count(&self, chunk: u64) -> u64 {
        self.size.div_ceil(chunk).max(1)
    }
}

/// Everything a transfer persists.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct State {
    version: u32,
    kind: String,
    crc: bool,
    preserve: bool,
    chunk: u64,
    threads: usize,
    files: Vec<FileState>,
    status: Status,
}

struct Shared {
    state: Mutex<State>,
    cancel: AtomicBool,
    state_file: PathBuf,
    /// When progress was last persisted (progress is persisted at most every
    /// [`PROGRESS_EVERY`]; status changes always).
    last_saved: Mutex<std::time::Instant>,
}

/// How often chunk progress is persisted: chunks done since are copied again after a
/// crash, which is cheaper than an fsync per chunk.
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Persist progress unless it was persisted less than [`PROGRESS_EVERY`] ago.
    fn persist_progress(&self, state: &State) {
        let mut last = self.last_saved.lock().unwrap_or_else(|e| e.into_inner());
        if last.elapsed() >= PROGRESS_EVERY {
            *last = std::time::Instant::now();
            let _ = self.persist(state);
        }
    }

    /// Write the state atomically (temporary file, fsync, rename).
    fn persist(&self, state: &State) -> PluginResult<()> {
        let bytes = serde_json::to_vec(state)
            .map_err(|e| PluginError::new(ErrorCode::OTHER, format!("state: {e}")))?;
        persist_atomic(&self.state_file, &bytes)
    }
}

/// Write a transfer's state file atomically (temporary file, fsync, rename), mode 0600
/// and never through a symbolic link: it names files to write and delete, so nobody else
/// may read or change it.
pub(crate) fn persist_atomic(state_file: &Path, bytes: &[u8]) -> PluginResult<()> {
    use std::io::Write as _;
    let tmp = state_file.with_extension("tmp");
    let io = |e| PluginError::io(state_file.display(), e);
    let mut f = scr_plugin::cachefs::create_file(&tmp)?;
    f.write_all(bytes).and_then(|()| f.sync_all()).map_err(io)?;
    std::fs::rename(&tmp, state_file).map_err(io)
}

/// Before a persisted state is trusted on resume (which writes its destinations, and a
/// cancel after it deletes what it wrote): the state file must be a regular file (not a
/// link) owned by the owner of its directory and writable by nobody else, in a directory
/// nobody else can write (so no other user forged it); and every source and destination
/// it names must be an absolute path without `..` components, each destination
/// named once and never a source. A path that fails is refused, naming the file.
///
/// What the plugin cannot tell is whether a well-formed absolute destination is one the
/// host asked for: that rests on the state file being private (the control directory is
/// 0700, the file 0600).
pub(crate) fn check_resumed<'a>(
    state_file: &Path,
    pairs: impl Iterator<Item = (&'a Path, &'a Path)>,
) -> PluginResult<()> {
    let corrupt = |why: String| {
        PluginError::new(
            ErrorCode::CORRUPT,
            format!(
                "{}: {why}; the transfer state is not trusted and not resumed",
                state_file.display()
            ),
        )
    };
    let dir = state_file.parent().unwrap_or(Path::new("."));
    let owner = scr_plugin::cachefs::owner_of(dir)?;
    scr_plugin::cachefs::check_dir(dir, Some(owner)).map_err(|e| corrupt(e.to_string()))?;
    let md = std::fs::symlink_metadata(state_file)
        .map_err(|e| PluginError::io(state_file.display(), e))?;
    if !md.file_type().is_file() || md.uid() != owner || md.mode() & 0o022 != 0 {
        return Err(corrupt(format!(
            "not a regular file of its directory's owner writable by nobody else (owner uid {}, mode {:04o})",
            md.uid(),
            md.mode() & 0o7777
        )));
    }
    let mut destinations = BTreeSet::new();
    let mut sources = BTreeSet::new();
    let mut all = Vec::new();
    for (src, dst) in pairs {
        for p in [src, dst] {
            let rootless = p.strip_prefix("/").ok().and_then(|r| r.to_str());
            if !rootless.is_some_and(scr_plugin::redfile::stays_inside) {
                return Err(corrupt(format!(
                    "`{}` is not an absolute path without `..` components",
                    p.display()
                )));
            }
        }
        if !destinations.insert(dst) {
            return Err(corrupt(format!("{} is named twice", dst.display())));
        }
        sources.insert(src);
        all.push(dst);
    }
    if let Some(d) = all.iter().find(|d| sources.contains(*d)) {
        return Err(corrupt(format!(
            "{} is both a source and a destination",
            d.display()
        )));
    }
    Ok(())
}

/// Remove `path` if it is a regular file (a link there is left alone, never followed).
pub(crate) fn remove_regular(path: &Path) {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_file()) {
        let _ = std::fs::remove_file(path);
    }
}

/// A `sync` or `pthread` transfer.
pub struct CopyTransfer {
    shared: Arc<Shared>,
    worker: Option<JoinHandle<()>>,
}

/// Settings of the copy types (`[plugins.sync]` / `[plugins.pthread]`).
fn engine(config: &TransferConfig) -> PluginResult<(usize, u64)> {
    let kind = config.transfer_type.to_ascii_lowercase();
    let what = format!("transfer type {kind}");
    let settings = Params::new(&what, &config.settings);
    settings.only(&["threads", "chunk_size", "fallback", "library"])?;
    let chunk = settings.u64_in("chunk_size", 16 << 20, 4096..=(1 << 34))?;
    let threads = if kind == "sync" {
        1
    } else {
        settings.u64_in("threads", 4, 1..=256)? as usize
    };
    Ok((threads, chunk))
}

impl CopyTransfer {
    /// A new, empty transfer of `config.transfer_type` (`sync` or `pthread`).
    pub fn new(config: &TransferConfig) -> PluginResult<Self> {
        let (threads, chunk) = engine(config)?;
        let state = State {
            version: STATE_VERSION,
            kind: config.transfer_type.to_ascii_lowercase(),
            crc: config.crc32,
            preserve: config.preserve_metadata,
            chunk,
            threads,
            files: Vec::new(),
            status: Status::Idle,
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            cancel: AtomicBool::new(false),
            state_file: PathBuf::from(config.state_file.as_str()),
            last_saved: Mutex::new(std::time::Instant::now()),
        });
        shared.persist(&shared.lock())?;
        Ok(CopyTransfer {
            shared,
            worker: None,
        })
    }

    /// Re-open the transfer persisted in `config.state_file`, verifying what was already
    /// copied (completed files by size, partial files chunk by chunk against their
    /// recorded CRC32s). `dispatch` then copies only what is missing.
    pub fn resume(config: &TransferConfig) -> PluginResult<Self> {
        let path = PathBuf::from(config.state_file.as_str());
        let bytes = std::fs::read(&path).map_err(|e| PluginError::io(path.display(), e))?;
        let mut state: State = serde_json::from_slice(&bytes).map_err(|e| {
            PluginError::new(
                ErrorCode::CORRUPT,
                format!("{}: unreadable transfer state: {e}", path.display()),
            )
        })?;
        if state.version != STATE_VERSION {
            return Err(PluginError::new(
                ErrorCode::CORRUPT,
                format!("{}: state version {}", path.display(), state.version),
            ));
        }
        check_resumed(
            &path,
            state
                .files
                .iter()
                .map(|f| (f.source.as_path(), f.destination.as_path())),
        )?;
        let chunk = state.chunk;
        for f in &mut state.files {
            if f.status == Status::Complete {
                let ok = std::fs::metadata(&f.destination).is_ok_and(|m| m.len() == f.size);
                if ok {
                    continue;
                }
                f.chunks.clear();
                f.crc32 = None;
            }
            // keep only the chunks whose bytes in the temporary file still match
            let temp = f.temp();
            let file = File::open(&temp).ok();
            f.chunks.retain(|&i, crc| {
                let Some(file) = &file else { return false };
                let off = i * chunk;
                let len = chunk.min(f.size.saturating_sub(off)) as usize;
                let mut buf = vec![0u8; len];
                file.read_exact_at(&mut buf, off).is_ok() && crc32fast::hash(&buf) == *crc
            });
            f.status = Status::Idle;
            f.error = None;
        }
        state.status = Status::Idle;
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            cancel: AtomicBool::new(false),
            state_file: path,
            last_saved: Mutex::new(std::time::Instant::now()),
        });
        shared.persist(&shared.lock())?;
        Ok(CopyTransfer {
            shared,
            worker: None,
        })
    }

    fn join(&mut self) {
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

/// Copy every missing chunk with `threads` workers, then finish each file.
fn run(shared: &Shared) {
    let (items, threads, chunk) = {
        let st = shared.lock();
        let mut items = Vec::new();
        for (fi, f) in st.files.iter().enumerate() {
            if f.status == Status::Complete {
                continue;
            }
            for ci in 0..f.chunk_count(st.chunk) {
                if !f.chunks.contains_key(&ci) {
                    items.push((fi, ci));
                }
            }
        }
        (items, st.threads, st.chunk)
    };
    // temporary destinations exist at full size before any chunk lands
    let files: Vec<FileState> = shared.lock().files.clone();
    let prepared: Vec<bool> = files
        .iter()
        .map(|f| {
            // (the state lock is not held here: marking a failure takes it)
            f.status == Status::Complete
                || prepare_temp(f)
                    .map_err(|e| mark_failed(shared, f, e))
                    .is_ok()
        })
        .collect();
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..threads.max(1) {
            scope.spawn(|| loop {
                if shared.cancel.load(Ordering::SeqCst) {
                    return;
                }
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(&(fi, ci)) = items.get(i) else {
                    return;
                };
                if !prepared[fi] {
                    continue;
                }
                let f = shared.lock().files[fi].clone();
                if f.status == Status::Failed {
                    continue;
                }
                match copy_chunk(&f, ci, chunk) {
                    Ok(crc) => {
                        let mut st = shared.lock();
                        st.files[fi].chunks.insert(ci, crc);
                        shared.persist_progress(&st);
                    }
                    Err(e) => mark_failed(shared, &f, e),
                }
            });
        }
    });
    if shared.cancel.load(Ordering::SeqCst) {
        return;
    }
    // finish files whose chunks are all there
    let count = shared.lock().files.len();
    for fi in 0..count {
        let f = shared.lock().files[fi].clone();
        if f.status == Status::Complete || f.status == Status::Failed {
            continue;
        }
        let preserve = shared.lock().preserve;
        match finish_file(&f, chunk, preserve) {
            Ok(crc) => {
                let mut st = shared.lock();
                let want_crc = st.crc;
                let file = &mut st.files[fi];
                file.crc32 = want_crc.then_some(crc);
                file.status = Status::Complete;
                shared.persist_progress(&st);
            }
            Err(e) => mark_failed(shared, &f, e),
        }
    }
    // make the renames durable: each destination directory once
    let dirs: BTreeSet<PathBuf> = shared
        .lock()
        .files
        .iter()
        .filter_map(|f| f.destination.parent().map(Path::to_path_buf))
        .collect();
    for dir in dirs {
        if let Err(e) = File::open(&dir).and_then(|d| d.sync_all()) {
            let err = PluginError::io(dir.display(), e);
            let mut st = shared.lock();
            for f in st
                .files
                .iter_mut()
                .filter(|f| f.destination.parent() == Some(&dir))
            {
                f.status = Status::Failed;
                f.error.get_or_insert(err.message().to_string());
            }
        }
    }
    let mut st = shared.lock();
    st.status = if st.files.iter().all(|f| f.status == Status::Complete) {
        Status::Complete
    } else {
        Status::Failed
    };
    let _ = shared.persist(&st);
}

fn mark_failed(shared: &Shared, f: &FileState, e: PluginError) {
    let mut st = shared.lock();
    if let Some(file) = st.files.iter_mut().find(|x| x.destination == f.destination) {
        file.status = Status::Failed;
        file.error.get_or_insert(e.message().to_string());
    }
    let _ = shared.persist(&st);
}

fn prepare_temp(f: &FileState) -> PluginResult<()> {
    if let Some(dir) = f.destination.parent() {
        std::fs::create_dir_all(dir).map_err(|e| PluginError::io(dir.display(), e))?;
    }
    let temp = f.temp();
    // 0600 and never through a link planted at the temporary name (the final mode
    // comes from the source when the file is finished)
    let file = scr_plugin::cachefs::open_for_writing(&temp, true)
        .map_err(|e| PluginError::new(ErrorCode::IO, e.to_string()))?;
    file.set_len(f.size)
        .map_err(|e| PluginError::io(temp.display(), e))
}

fn copy_chunk(f: &FileState, ci: u64, chunk: u64) -> PluginResult<u32> {
    let off = ci * chunk;
    let len = chunk.min(f.size.saturating_sub(off)) as usize;
    let mut buf = vec![0u8; len];
    let src = File::open(&f.source).map_err(|e| PluginError::io(f.source.display(), e))?;
    src.read_exact_at(&mut buf, off)
        .map_err(|e| PluginError::io(f.source.display(), e))?;
    let temp = f.temp();
    let dst = scr_plugin::cachefs::open_for_writing(&temp, false)
        .map_err(|e| PluginError::new(ErrorCode::IO, e.to_string()))?;
    dst.write_all_at(&buf, off)
        .map_err(|e| PluginError::io(temp.display(), e))?;
    Ok(crc32fast::hash(&buf))
}

/// Give `dst` the mode, owner (where permitted) and times of `src`.
pub fn copy_metadata(src: &Path, dst: &Path) -> PluginResult<()> {
    let md = std::fs::metadata(src).map_err(io(src))?;
    // times first, while the file is still writable (a read-only source mode applied
    // first would keep a non-root user from opening it to set them)
    let times = std::fs::FileTimes::new()
        .set_modified(md.modified().map_err(io(src))?)
        .set_accessed(md.accessed().map_err(io(src))?);
    File::options()
        .write(true)
        .open(dst)
        .and_then(|x| x.set_times(times))
        .map_err(io(dst))?;
    // owner only where permitted (root); anyone else keeps their own
    let _ = std::os::unix::fs::chown(dst, Some(md.uid()), Some(md.gid()));
    std::fs::set_permissions(dst, std::fs::Permissions::from_mode(md.mode() & 0o7777))
        .map_err(io(dst))
}

fn io(p: &Path) -> impl Fn(std::io::Error) -> PluginError + '_ {
    move |e| PluginError::io(p.display(), e)
}

/// fsync the temporary file, apply metadata, rename it into place;
/// returns the file's CRC32 combined from its chunks.
fn finish_file(f: &FileState, chunk: u64, preserve: bool) -> PluginResult<u32> {
    let temp = f.temp();
    File::open(&temp)
        .and_then(|x| x.sync_all())
        .map_err(io(&temp))?;
    let mut crc = crc32fast::Hasher::new();
    for ci in 0..f.chunk_count(chunk) {
        let off = ci * chunk;
        let len = chunk.min(f.size.saturating_sub(off));
        let c = *f.chunks.get(&ci).ok_or_else(|| {
            PluginError::new(
                ErrorCode::IO,
                format!("{}: chunk {ci} missing", temp.display()),
            )
        })?;
        let part = crc32fast::Hasher::new_with_initial_len(c, len);
        crc.combine(&part);
    }
    if preserve {
        copy_metadata(&f.source, &temp)?;
    }
    std::fs::rename(&temp, &f.destination).map_err(io(&f.destination))?;
    // (the destination directories are fsynced once each when every file is renamed)
    Ok(crc.finalize())
}

impl Transfer for CopyTransfer {
    fn add(&mut self, source: &str, destination: &str) -> PluginResult<()> {
        let mut st = self.shared.lock();
        if st.status != Status::Idle {
            return Err(PluginError::invalid_parameter(
                "add: files can only be added before dispatch",
            ));
        }
        let size = std::fs::metadata(source)
            .map_err(|e| PluginError::io(source, e))?
            .len();
        st.files.push(FileState {
            source: source.into(),
            destination: destination.into(),
            size,
            chunks: BTreeMap::new(),
            crc32: None,
            status: Status::Idle,
            error: None,
        });
        // persisted at dispatch: before it there is nothing to resume
        Ok(())
    }

    fn dispatch(&mut self, _host: &Host<'_>) -> PluginResult<()> {
        {
            let mut st = self.shared.lock();
            if st.status == Status::InProgress {
                return Err(PluginError::invalid_parameter("dispatch: already running"));
            }
            st.status = Status::InProgress;
            for f in &mut st.files {
                if f.status != Status::Complete {
                    f.status = Status::InProgress;
                }
            }
            self.shared.persist(&st)?;
        }
        let shared = Arc::clone(&self.shared);
        self.worker = Some(std::thread::spawn(move || run(&shared)));
        Ok(())
    }

    fn test(&mut self, _host: &Host<'_>) -> PluginResult<TransferStatus> {
        Ok(self.shared.lock().status.into())
    }

    fn wait(&mut self, _host: &Host<'_>) -> PluginResult<TransferStatus> {
        self.join();
        Ok(self.shared.lock().status.into())
    }

    fn cancel(&mut self, _host: &Host<'_>) -> PluginResult<()> {
        self.shared.cancel.store(true, Ordering::SeqCst);
        self.join();
        let mut st = self.shared.lock();
        for f in &mut st.files {
            if f.status != Status::Complete {
                remove_regular(&f.temp());
                f.status = Status::Cancelled;
                f.chunks.clear();
            }
        }
        st.status = Status::Cancelled;
        self.shared.persist(&st)
    }

    fn results(&self) -> PluginResult<Vec<FileResult>> {
        let st = self.shared.lock();
        Ok(st
            .files
            .iter()
            .map(|f| FileResult {
                source: f.source.display().to_string().into(),
                destination: f.destination.display().to_string().into(),
                bytes: (f.chunks.len() as u64 * st.chunk).min(f.size),
                crc32: f.crc32.into(),
                status: f.status.into(),
                error: f.error.clone().map(Into::into).into(),
            })
            .collect())
    }
}

impl Drop for CopyTransfer {
    fn drop(&mut self) {
        // a transfer dropped while running finishes in its thread; joining here keeps
        // the files consistent with the state file
        self.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use scr_plugin::{host_ref, inproc};

    /// Run `f` with the host services of a one-member in-process world.
    fn with_host<T>(f: impl FnOnce(&Host<'_>) -> T) -> T {
        let world = inproc::World::new(&["n"], std::time::Duration::from_secs(30));
        let services = world.member(0);
        let host = Host::new(host_ref(&services));
        let out = f(&host);
        drop(host);
        out
    }

    fn config(kind: &str, state: &Path, settings: &[(&str, &str)]) -> TransferConfig {
        TransferConfig {
            transfer_type: kind.into(),
            state_file: state.display().to_string().into(),
            crc32: true,
            preserve_metadata: true,
            settings: settings
                .iter()
                .map(|(k, v)| scr_plugin::Param {
                    key: (*k).into(),
                    value: (*v).into(),
                })
                .collect(),
        }
    }

    fn data(n: usize, seed: u8) -> Vec<u8> {
        (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
    }

    #[test]
    fn copies_many_files_with_crc_and_metadata_on_both_types() {
        for kind in ["sync", "pthread"] {
            let dir = tempfile::tempdir().unwrap();
            let src = dir.path().join("src");
            std::fs::create_dir(&src).unwrap();
            let sizes = [0usize, 1, 4095, 4096, 4097, 3 * 4096 + 5, 100_000];
            for (i, n) in sizes.iter().enumerate() {
                let p = src.join(format!("f{i}"));
                std::fs::write(&p, data(*n, i as u8)).unwrap();
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
            }
            let state = dir.path().join("state.json");
            let mut t =
                CopyTransfer::new(&config(kind, &state, &[("chunk_size", "4096")])).unwrap();
            for i in 0..sizes.len() {
                t.add(
                    src.join(format!("f{i}")).to_str().unwrap(),
                    dir.path().join(format!("out/d{i}")).to_str().unwrap(),
                )
                .unwrap();
            }
            let status = with_host(|host| {
                t.dispatch(host).unwrap();
                t.wait(host).unwrap()
            });
            assert_eq!(status, TransferStatus::Complete, "{kind}");
            let results = t.results().unwrap();
            for (i, n) in sizes.iter().enumerate() {
                let out = dir.path().join(format!("out/d{i}"));
                let got = std::fs::read(&out).unwrap();
                assert_eq!(got, data(*n, i as u8), "{kind} file {i}");
                assert_eq!(results[i].crc32.into_option(), Some(crc32fast::hash(&got)));
                let md = std::fs::metadata(&out).unwrap();
                assert_eq!(md.mode() & 0o777, 0o640);
                let smd = std::fs::metadata(src.join(format!("f{i}"))).unwrap();
                assert_eq!(md.mtime(), smd.mtime());
                assert!(!dir.path().join(format!("out/d{i}.scr-part")).exists());
            }
        }
    }

    #[test]
    fn resume_keeps_verified_chunks_and_recopies_damaged_ones() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("big");
        let content = data(5 * 4096 + 7, 9);
        std::fs::write(&src, &content).unwrap();
        let state = dir.path().join("state.json");
        let dst = dir.path().join("out/big");
        let cfg = config(
            "pthread",
            &state,
            &[("chunk_size", "4096"), ("threads", "3")],
        );
        let mut t = CopyTransfer::new(&cfg).unwrap();
        t.add(src.to_str().unwrap(), dst.to_str().unwrap()).unwrap();
        with_host(|host| {
            t.dispatch(host).unwrap();
            t.wait(host).unwrap();
        });
        // pretend the copy died before the rename: put the data back in the temporary
        // file, damage one chunk, and mark the file incomplete in the state
        let temp = PathBuf::from(format!("{}.scr-part", dst.display()));
        std::fs::rename(&dst, &temp).unwrap();
        let mut st: State = serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
        st.files[0].status = Status::InProgress;
        st.status = Status::InProgress;
        std::fs::write(&state, serde_json::to_vec(&st).unwrap()).unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&temp).unwrap();
        f.write_all_at(b"XXXX", 2 * 4096 + 10).unwrap();
        drop(t);

        let mut r = CopyTransfer::resume(&cfg).unwrap();
        assert_eq!(
            r.shared.lock().files[0].chunks.len(),
            5,
            "6 chunks, the damaged one dropped"
        );
        with_host(|host| {
            r.dispatch(host).unwrap();
            assert_eq!(r.wait(host).unwrap(), TransferStatus::Complete);
        });
        assert_eq!(std::fs::read(&dst).unwrap(), content);
    }

    /// A state file names files to write (resume) and delete (cancel): a forged one
    /// naming a path with `..` or no root, or one that others could have written,
    /// is refused on resume, and nothing it names is touched.
    #[test]
    fn a_forged_or_loose_state_is_not_resumed_and_nothing_is_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::write(&src, data(3 * 4096, 2)).unwrap();
        let state = dir.path().join("state.json");
        let cfg = config("sync", &state, &[("chunk_size", "4096")]);
        let mut t = CopyTransfer::new(&cfg).unwrap();
        let dst = dir.path().join("out/dst");
        t.add(src.to_str().unwrap(), dst.to_str().unwrap()).unwrap();
        with_host(|host| {
            t.dispatch(host).unwrap();
            assert_eq!(t.wait(host).unwrap(), TransferStatus::Complete);
        });
        drop(t);
        // the state is private
        assert_eq!(std::fs::metadata(&state).unwrap().mode() & 0o7777, 0o600);
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        let victim_part = dir.path().join("victim.scr-part");
        std::fs::write(&victim_part, b"keep part").unwrap();
        let good: State = serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
        let base = dir.path().display().to_string();
        let forge = |destination: &str, mode: u32| {
            let mut st = good.clone();
            st.files[0].destination = destination.into();
            st.files[0].status = Status::InProgress;
            st.status = Status::InProgress;
            std::fs::write(&state, serde_json::to_vec(&st).unwrap()).unwrap();
            std::fs::set_permissions(&state, std::fs::Permissions::from_mode(mode)).unwrap();
            match CopyTransfer::resume(&cfg) {
                Ok(mut r) => {
                    with_host(|host| r.cancel(host).unwrap());
                    panic!("{destination} (mode {mode:o}) was resumed")
                }
                Err(e) => e.message().to_string(),
            }
        };
        for forged in [
            format!("{base}/out/../victim"),
            "victim".to_string(),
            "out/../../victim".to_string(),
        ] {
            let e = forge(&forged, 0o600);
            assert!(
                e.contains(&format!(
                    "`{forged}` is not an absolute path without `..` components; the transfer state is not trusted"
                )),
                "{e}"
            );
        }
        // well formed, but others could have written it
        let e = forge(&victim.display().to_string(), 0o666);
        assert!(
            e.contains("writable by nobody else (owner uid") && e.contains("mode 0666)"),
            "{e}"
        );
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert_eq!(std::fs::read(&victim_part).unwrap(), b"keep part");
    }

    /// A link planted at a destination's temporary name (`<dst>.scr-part`) is never
    /// written through: the copy fails naming it, and the link's target keeps its bytes.
    /// Without a link, the temporary file is private (0600) while it is being written.
    #[test]
    fn a_link_at_the_temporary_name_is_never_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::write(&src, data(3 * 4096, 4)).unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        std::fs::create_dir(dir.path().join("out")).unwrap();
        let dst = dir.path().join("out/dst");
        std::os::unix::fs::symlink(&victim, dir.path().join("out/dst.scr-part")).unwrap();
        for kind in ["sync", "pthread"] {
            let state = dir.path().join(format!("{kind}.json"));
            let cfg = config(kind, &state, &[("chunk_size", "4096")]);
            let mut t = CopyTransfer::new(&cfg).unwrap();
            t.add(src.to_str().unwrap(), dst.to_str().unwrap()).unwrap();
            with_host(|host| {
                t.dispatch(host).unwrap();
                assert_eq!(t.wait(host).unwrap(), TransferStatus::Failed, "{kind}");
            });
            let why = t.results().unwrap()[0]
                .error
                .clone()
                .into_option()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                why.contains("dst.scr-part is a symbolic link"),
                "{kind}: {why}"
            );
            assert_eq!(std::fs::read(&victim).unwrap(), b"keep", "{kind}");
            assert!(!dst.exists(), "{kind}");
        }
        // no link: the temporary file is created 0600
        std::fs::remove_file(dir.path().join("out/dst.scr-part")).unwrap();
        let f = FileState {
            source: src.clone(),
            destination: dst.clone(),
            size: 3 * 4096,
            chunks: BTreeMap::new(),
            crc32: None,
            status: Status::InProgress,
            error: None,
        };
        prepare_temp(&f).unwrap();
        assert_eq!(std::fs::metadata(f.temp()).unwrap().mode() & 0o7777, 0o600);
    }

    #[test]
    fn cancel_removes_partial_destinations() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::write(&src, data(64 * 4096, 1)).unwrap();
        let state = dir.path().join("state.json");
        let mut t = CopyTransfer::new(&config("sync", &state, &[("chunk_size", "4096")])).unwrap();
        let dst = dir.path().join("dst");
        t.add(src.to_str().unwrap(), dst.to_str().unwrap()).unwrap();
        with_host(|host| {
            t.shared.cancel.store(true, Ordering::SeqCst); // cancel before any chunk
            t.dispatch(host).unwrap();
            t.cancel(host).unwrap();
            assert_eq!(t.test(host).unwrap(), TransferStatus::Cancelled);
        });
        assert!(!dst.exists());
        assert!(!PathBuf::from(format!("{}.scr-part", dst.display())).exists());
    }

    #[test]
    fn a_missing_source_is_refused_at_add() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = CopyTransfer::new(&config("sync", &dir.path().join("s"), &[])).unwrap();
        let e = t.add("/nonexistent/file", "/tmp/x").unwrap_err();
        assert!(e.message().starts_with("/nonexistent/file: "), "{e}");
    }
}
