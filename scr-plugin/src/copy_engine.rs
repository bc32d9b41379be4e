//! A reusable copy engine for transfer types: everything a transfer must get right that
//! is not specific to how the bytes move, so a vendor writes only that part.
//!
//! What the engine does (and the shipped `sync` and `pthread` types rely on):
//!
//! - a copy thread (or a pool of `threads`) started by `dispatch`, splitting each file
//!   into chunks of `chunk_size` bytes, large files over several threads and small files
//!   spread over the pool;
//! - every destination written under a temporary name (`<destination>.scr-part`, created
//!   0600 and never through a link), fsynced, given the source's mode, owner (where
//!   permitted) and times, renamed into place, and its directory fsynced;
//! - the CRC32 of the copied bytes, computed per chunk and combined in order;
//! - the state persisted atomically ([`persist_atomic`]) at every change of status and at
//!   most every quarter second as chunks complete, so a new process can
//!   [resume](CopyEngine::resume) after verifying the chunks already copied (a state file
//!   it cannot trust is refused: [`check_resumed`]);
//! - cancel: the threads stop at the next chunk, temporary files are removed;
//! - the transfer contract: one result per added file in the order added, a missing
//!   source refused at `add` naming it, no temporary file left (also after a cancel);
//! - logging from the copy thread: [`Host`] is not `Send`, so the thread cannot hold one;
//!   its messages go to a [`LogQueue`] and are emitted through [`Host::log`] by the next
//!   `dispatch`, `test`, `wait` or `cancel` call (`wait` emits them as they arrive).
//!
//! What a vendor writes: a [`FileCopier`] — how to copy one chunk (a byte range) of a
//! source file into the temporary destination, returning the CRC32 of the bytes copied.
//! [`PreadCopier`] is the plain POSIX one. Then `new_transfer` returns
//! `CopyEngine::new(config, settings, copier)` and `resume_transfer` returns
//! `CopyEngine::resume(config, copier)`:
//!
//! ```
//! use scr_plugin::copy_engine::{Chunk, CopyEngine, EngineSettings, FileCopier};
//! use scr_plugin::{PluginResult, Transfer, TransferConfig};
//!
//! /// Copies through the vendor's API (here: plain positional reads and writes).
//! struct VendorCopy;
//! impl FileCopier for VendorCopy {
//!     fn copy_chunk(&self, chunk: &Chunk<'_>) -> PluginResult<u32> {
//!         use std::os::unix::fs::FileExt;
//!         let mut buf = vec![0u8; chunk.len as usize];
//!         let src = std::fs::File::open(chunk.source)
//!             .map_err(|e| scr_plugin::PluginError::io(chunk.source.display(), e))?;
//!         src.read_exact_at(&mut buf, chunk.offset)
//!             .map_err(|e| scr_plugin::PluginError::io(chunk.source.display(), e))?;
//!         chunk.temp.write_all_at(&buf, chunk.offset)
//!             .map_err(|e| scr_plugin::PluginError::io(chunk.temp_path.display(), e))?;
//!         Ok(scr_plugin::copy_engine::crc32(&buf))
//!     }
//! }
//!
//! fn new_transfer(config: &TransferConfig) -> PluginResult<Box<dyn Transfer>> {
//!     let settings = EngineSettings::from_config(config, 1, &[])?;
//!     Ok(Box::new(CopyEngine::new(config, settings, VendorCopy)?))
//! }
//! fn resume_transfer(config: &TransferConfig) -> PluginResult<Box<dyn Transfer>> {
//!     Ok(Box::new(CopyEngine::resume(config, VendorCopy)?))
//! }
//! ```
//!
//! A transfer whose vendor moves whole files on its own (start, then poll; e.g. `bbapi`
//! and `dw` of scr-axl-transfer) does not fit chunks; it still uses the pieces here:
//! [`persist_atomic`], [`check_resumed`], [`copy_metadata`], [`file_crc32`],
//! [`remove_regular`] and [`LogQueue`].

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use serde::{Deserialize, Serialize};

use crate::{
    ErrorCode, FileResult, Host, LogLevel, Params, PluginError, PluginResult, Transfer,
    TransferConfig, TransferStatus,
};

/// What the engine appends to a destination's name while writing it: the host's
/// cleanup (flush, scavenge) removes leftovers by this suffix.
pub const TEMP_SUFFIX: &str = ".scr-part";

/// The temporary name of `destination` while it is written (`<destination>.scr-part`).
pub fn temp_path(destination: &Path) -> PathBuf {
    let mut name = destination.as_os_str().to_owned();
    name.push(TEMP_SUFFIX);
    PathBuf::from(name)
}

/// CRC32 (IEEE, as zlib) of `bytes`: what a [`FileCopier`] returns for its chunk.
pub fn crc32(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

/// State-file format version.
const STATE_VERSION: u32 = 1;

// Poison-tolerant: a panic on a copy thread must not wedge `cancel` or `results`.
use crate::sync::lock;

// ---------------------------------------------------------------------------------------
// Logging from threads that hold no Host

/// Messages logged where no [`Host`] is at hand (a copy thread: `Host` is not `Send`),
/// emitted through [`Host::log`] by the next call that has one.
///
/// Why a queue and not a global logger: a plugin is a cdylib with its own copy of every
/// global (a `tracing` dispatcher, a `log` logger), which the host never sees; only
/// [`Host::log`] crosses the boundary. Cloning gives another handle to the same queue.
#[derive(Clone, Default)]
pub struct LogQueue {
    inner: Arc<(Mutex<Inbox>, Condvar)>,
}

#[derive(Default)]
struct Inbox {
    messages: Vec<(LogLevel, String)>,
    /// Set by the copy thread when it ends; [`LogQueue::forward_until_finished`] waits
    /// for it.
    finished: bool,
}

impl LogQueue {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Queue a message (from any thread).
    pub fn log(&self, level: LogLevel, message: impl Into<String>) {
        let (inbox, arrived) = &*self.inner;
        lock(inbox).messages.push((level, message.into()));
        arrived.notify_all();
    }

    /// Emit every queued message through `host`, in the order queued.
    pub fn emit(&self, host: &Host<'_>) {
        let messages = std::mem::take(&mut lock(&self.inner.0).messages);
        for (level, message) in messages {
            host.log(level, &message);
        }
    }

    /// Mark the thread that feeds this queue running (`false`) or ended (`true`).
    fn set_finished(&self, finished: bool) {
        let (inbox, arrived) = &*self.inner;
        lock(inbox).finished = finished;
        arrived.notify_all();
    }

    /// Emit messages as they arrive until the feeding thread has ended, then the rest.
    /// The host lock is never held while emitting.
    fn forward_until_finished(&self, host: &Host<'_>) {
        let (inbox, arrived) = &*self.inner;
        loop {
            let (messages, finished) = {
                let mut g = lock(inbox);
                while g.messages.is_empty() && !g.finished {
                    g = arrived.wait(g).unwrap_or_else(|e| e.into_inner());
                }
                (std::mem::take(&mut g.messages), g.finished)
            };
            for (level, message) in messages {
                host.log(level, &message);
            }
            if finished {
                return;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// What a vendor implements

/// One chunk to copy: bytes `offset..offset + len` of `source` into the same range of the
/// temporary destination.
pub struct Chunk<'a> {
    /// The file to read.
    pub source: &'a Path,
    /// Where the file ends up (for messages; never write it: the engine renames the
    /// temporary file there when every chunk is in).
    pub destination: &'a Path,
    /// The temporary destination, opened for writing by the engine (0600, never
    /// through a link) and already as long as the source.
    pub temp: &'a File,
    /// The temporary destination's path, for messages.
    pub temp_path: &'a Path,
    /// Where the chunk starts in both files.
    pub offset: u64,
    /// How many bytes to copy (0 for an empty file, which has one empty chunk).
    pub len: u64,
    /// The source's size when it was added.
    pub file_size: u64,
    /// Where a message from the copy thread goes (see [`LogQueue`]).
    pub log: &'a LogQueue,
}

/// How to copy one chunk of a file: the only part of a chunked transfer type that is
/// specific to a vendor. Called on the engine's copy threads, possibly on several chunks
/// of the same file at once (so it takes `&self`).
pub trait FileCopier: Send + Sync + 'static {
    /// Copy the chunk; return the CRC32 of exactly the bytes copied ([`crc32`]). An
    /// error fails that file (named in its result), not the other files.
    fn copy_chunk(&self, chunk: &Chunk<'_>) -> PluginResult<u32>;
}

/// The plain POSIX copier: positional reads of the source, positional writes of the
/// temporary file. The `sync` and `pthread` types use it.
#[derive(Clone, Copy, Debug, Default)]
pub struct PreadCopier;

impl FileCopier for PreadCopier {
    fn copy_chunk(&self, chunk: &Chunk<'_>) -> PluginResult<u32> {
        let mut buf = vec![0u8; chunk.len as usize];
        let src = File::open(chunk.source).map_err(io(chunk.source))?;
        src.read_exact_at(&mut buf, chunk.offset)
            .map_err(io(chunk.source))?;
        chunk
            .temp
            .write_all_at(&buf, chunk.offset)
            .map_err(io(chunk.temp_path))?;
        Ok(crc32fast::hash(&buf))
    }
}

/// How many copy threads and how large the chunks of a new transfer are. A resumed
/// transfer keeps the values it was persisted with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineSettings {
    /// Copy threads (at least 1).
    pub threads: usize,
    /// Bytes per chunk: the unit of parallelism, of resume, and of a [`FileCopier`] call.
    pub chunk_size: u64,
}

impl Default for EngineSettings {
    /// One thread, 16 MiB chunks.
    fn default() -> Self {
        EngineSettings {
            threads: 1,
            chunk_size: 16 << 20,
        }
    }
}

impl EngineSettings {
    /// `threads` (1..=256, default `default_threads`) and `chunk_size` (4 KiB..=16 GiB,
    /// default 16 MiB) from the type's settings (`[plugins.<type>]`), refusing any
    /// other key except those in `also` (the type's own settings), naming it.
    pub fn from_config(
        config: &TransferConfig,
        default_threads: usize,
        also: &[&str],
    ) -> PluginResult<Self> {
        let what = format!("transfer type {}", config.transfer_type);
        let settings = Params::new(&what, &config.settings);
        let mut known = vec!["threads", "chunk_size"];
        known.extend_from_slice(also);
        settings.only(&known)?;
        Ok(EngineSettings {
            chunk_size: settings.u64_in("chunk_size", 16 << 20, 4096..=(1 << 34))?,
            threads: settings.u64_in("threads", default_threads as u64, 1..=256)? as usize,
        })
    }
}

// ---------------------------------------------------------------------------------------
// Persisted state

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
        temp_path(&self.destination)
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

struct Shared<C> {
    state: Mutex<State>,
    cancel: AtomicBool,
    state_file: PathBuf,
    /// When progress was last persisted (progress is persisted at most every
    /// [`PROGRESS_EVERY`]; status changes always).
    last_saved: Mutex<std::time::Instant>,
    copier: C,
    log: LogQueue,
}

/// How often chunk progress is persisted: chunks done since are copied again after a
/// crash, which is cheaper than an fsync per chunk.
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

impl<C> Shared<C> {
    fn new(state: State, state_file: PathBuf, copier: C) -> Self {
        Shared {
            state: Mutex::new(state),
            cancel: AtomicBool::new(false),
            state_file,
            last_saved: Mutex::new(std::time::Instant::now()),
            copier,
            log: LogQueue::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Persist progress unless it was persisted less than [`PROGRESS_EVERY`] ago.
    fn persist_progress(&self, state: &State) {
        let mut last = lock(&self.last_saved);
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
pub fn persist_atomic(state_file: &Path, bytes: &[u8]) -> PluginResult<()> {
    use std::io::Write as _;
    let tmp = state_file.with_extension("tmp");
    let io = |e| PluginError::io(state_file.display(), e);
    let mut f = crate::cachefs::create_file(&tmp)?;
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
/// What a plugin cannot tell is whether a well-formed absolute destination is one the
/// host asked for: that rests on the state file being private (the control directory is
/// 0700, the file 0600).
pub fn check_resumed<'a>(
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
    let owner = crate::cachefs::owner_of(dir)?;
    crate::cachefs::check_dir(dir, Some(owner)).map_err(|e| corrupt(e.to_string()))?;
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
            if !rootless.is_some_and(crate::redfile::stays_inside) {
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
pub fn remove_regular(path: &Path) {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_file()) {
        let _ = std::fs::remove_file(path);
    }
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

/// CRC32 of a whole file, read in pieces (for a transfer whose vendor copied the bytes);
/// [`crate::verify::file_crc32`] under this module's error type.
pub fn file_crc32(path: &Path) -> PluginResult<u32> {
    crate::verify::file_crc32(path, crate::verify::CRC_BUF_MAX).map_err(io(path))
}

fn io(p: &Path) -> impl Fn(std::io::Error) -> PluginError + '_ {
    move |e| PluginError::io(p.display(), e)
}

// ---------------------------------------------------------------------------------------
// The engine

/// A chunked, resumable transfer that copies with `C` (see the [module docs](self)).
pub struct CopyEngine<C: FileCopier> {
    shared: Arc<Shared<C>>,
    worker: Option<JoinHandle<()>>,
}

impl<C: FileCopier> CopyEngine<C> {
    /// A new, empty transfer of `config.transfer_type`, persisting its state in
    /// `config.state_file` (written at once, so a bad path fails here).
    pub fn new(config: &TransferConfig, settings: EngineSettings, copier: C) -> PluginResult<Self> {
        if settings.chunk_size == 0 {
            return Err(PluginError::invalid_parameter(format!(
                "transfer type {}: chunk_size must be at least 1 byte",
                config.transfer_type
            )));
        }
        let state = State {
            version: STATE_VERSION,
            kind: config.transfer_type.to_ascii_lowercase(),
            crc: config.crc32,
            preserve: config.preserve_metadata,
            chunk: settings.chunk_size,
            threads: settings.threads.max(1),
            files: Vec::new(),
            status: Status::Idle,
        };
        let shared = Arc::new(Shared::new(
            state,
            PathBuf::from(config.state_file.as_str()),
            copier,
        ));
        shared.persist(&shared.lock())?;
        Ok(CopyEngine {
            shared,
            worker: None,
        })
    }

    /// Re-open the transfer persisted in `config.state_file` (refused, naming the file,
    /// unless [`check_resumed`] trusts it), verifying what was already copied: completed
    /// files by size, partial files chunk by chunk against their recorded CRC32s.
    /// `test` then reports `Idle` and `dispatch` copies only what is missing; `results`
    /// before that report the files found complete as `Complete` and the others `Idle`.
    pub fn resume(config: &TransferConfig, copier: C) -> PluginResult<Self> {
        let path = PathBuf::from(config.state_file.as_str());
        let bytes = std::fs::read(&path).map_err(|e| PluginError::io(path.display(), e))?;
        let mut state: State = serde_json::from_slice(&bytes).map_err(|e| {
            PluginError::new(
                ErrorCode::CORRUPT,
                format!("{}: unreadable transfer state: {e}", path.display()),
            )
        })?;
        if state.version != STATE_VERSION || state.chunk == 0 {
            return Err(PluginError::new(
                ErrorCode::CORRUPT,
                format!(
                    "{}: state version {} (chunk size {})",
                    path.display(),
                    state.version,
                    state.chunk
                ),
            ));
        }
        check_resumed(
            &path,
            state
                .files
                .iter()
                .map(|f| (f.source.as_path(), f.destination.as_path())),
        )?;
        let (kept, dropped) = verify_copied(&mut state);
        state.status = Status::Idle;
        let complete = state
            .files
            .iter()
            .filter(|f| f.status == Status::Complete)
            .count();
        let summary = format!(
            "transfer {}: resumed from {}: {complete} of {} files complete, {kept} chunks verified, {dropped} to copy again",
            state.kind,
            path.display(),
            state.files.len()
        );
        let shared = Arc::new(Shared::new(state, path, copier));
        shared.persist(&shared.lock())?;
        shared.log.log(LogLevel::Debug, summary);
        Ok(CopyEngine {
            shared,
            worker: None,
        })
    }

    /// The queue whose messages this transfer emits at its next call with a host: for a
    /// plugin's own threads, or code that has no [`Host`].
    pub fn log_queue(&self) -> &LogQueue {
        &self.shared.log
    }

    /// The copier this transfer copies with.
    pub fn copier(&self) -> &C {
        &self.shared.copier
    }

    fn join(&mut self) {
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

/// Check what a resumed state says was copied: a complete file by its destination's
/// size (else it is copied again), each chunk of an incomplete file by its CRC32 in the
/// temporary file (a chunk that differs is dropped and copied again). Returns how many
/// chunks were kept and dropped.
fn verify_copied(state: &mut State) -> (usize, usize) {
    let chunk = state.chunk;
    let (mut kept, mut dropped) = (0usize, 0usize);
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
        let before = f.chunks.len();
        f.chunks.retain(|&i, crc| {
            let Some(file) = &file else { return false };
            let off = i * chunk;
            let len = chunk.min(f.size.saturating_sub(off)) as usize;
            let mut buf = vec![0u8; len];
            file.read_exact_at(&mut buf, off).is_ok() && crc32fast::hash(&buf) == *crc
        });
        kept += f.chunks.len();
        dropped += before - f.chunks.len();
        f.status = Status::Idle;
        f.error = None;
    }
    (kept, dropped)
}

/// Copy every missing chunk with the state's threads, then finish each file.
fn run<C: FileCopier>(shared: &Shared<C>) {
    copy_chunks(shared);
    if !shared.cancel.load(Ordering::SeqCst) {
        finish_files(shared);
    }
    let st = shared.lock();
    let how = if shared.cancel.load(Ordering::SeqCst) {
        "stopped by cancel".to_string()
    } else {
        format!("{:?}", st.status)
    };
    let copied: u64 = st
        .files
        .iter()
        .filter(|f| f.status == Status::Complete)
        .map(|f| f.size)
        .sum();
    shared.log.log(
        LogLevel::Debug,
        format!(
            "transfer {}: {how}, {copied} bytes in {} files",
            st.kind,
            st.files.len()
        ),
    );
}

fn copy_chunks<C: FileCopier>(shared: &Shared<C>) {
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
                match copy_one(shared, &f, ci, chunk) {
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
}

/// Finish files whose chunks are all there, make the renames durable (each destination
/// directory once) and set the transfer's status.
fn finish_files<C>(shared: &Shared<C>) {
    let (count, chunk, preserve) = {
        let st = shared.lock();
        (st.files.len(), st.chunk, st.preserve)
    };
    for fi in 0..count {
        let f = shared.lock().files[fi].clone();
        if f.status == Status::Complete || f.status == Status::Failed {
            continue;
        }
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

fn mark_failed<C>(shared: &Shared<C>, f: &FileState, e: PluginError) {
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
    let file = crate::cachefs::open_for_writing(&temp, true)
        .map_err(|e| PluginError::new(ErrorCode::IO, e.to_string()))?;
    file.set_len(f.size)
        .map_err(|e| PluginError::io(temp.display(), e))
}

/// Open the temporary file (never through a link) and let the copier fill chunk `ci`.
fn copy_one<C: FileCopier>(
    shared: &Shared<C>,
    f: &FileState,
    ci: u64,
    chunk: u64,
) -> PluginResult<u32> {
    let offset = ci * chunk;
    let temp_path = f.temp();
    let temp = crate::cachefs::open_for_writing(&temp_path, false)
        .map_err(|e| PluginError::new(ErrorCode::IO, e.to_string()))?;
    let job = Chunk {
        source: &f.source,
        destination: &f.destination,
        temp: &temp,
        temp_path: &temp_path,
        offset,
        len: chunk.min(f.size.saturating_sub(offset)),
        file_size: f.size,
        log: &shared.log,
    };
    // a panicking copier fails its file, not the thread pool (which would leave the
    // transfer InProgress for ever)
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        shared.copier.copy_chunk(&job)
    }))
    .unwrap_or_else(|payload| {
        let why = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(non-string panic payload)".into());
        Err(PluginError::new(
            ErrorCode::PANIC,
            format!(
                "{}: the copier panicked at byte {offset}: {why}",
                f.source.display()
            ),
        ))
    })
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

impl<C: FileCopier> Transfer for CopyEngine<C> {
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

    fn dispatch(&mut self, host: &Host<'_>) -> PluginResult<()> {
        self.shared.log.emit(host);
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
        self.shared.log.set_finished(false);
        let shared = Arc::clone(&self.shared);
        self.worker = Some(std::thread::spawn(move || {
            // however the thread ends (a panic in the engine included), the transfer
            // leaves InProgress and `wait` returns
            struct Finished<'a, C>(&'a Shared<C>);
            impl<C> Drop for Finished<'_, C> {
                fn drop(&mut self) {
                    if std::thread::panicking() {
                        let mut st = self.0.lock();
                        if st.status == Status::InProgress {
                            st.status = Status::Failed;
                            let _ = self.0.persist(&st);
                        }
                    }
                    self.0.log.set_finished(true);
                }
            }
            let _finished = Finished(&*shared);
            run(&shared)
        }));
        Ok(())
    }

    fn test(&mut self, host: &Host<'_>) -> PluginResult<TransferStatus> {
        self.shared.log.emit(host);
        Ok(self.shared.lock().status.into())
    }

    fn wait(&mut self, host: &Host<'_>) -> PluginResult<TransferStatus> {
        if self.worker.is_some() {
            self.shared.log.forward_until_finished(host);
        }
        self.join();
        self.shared.log.emit(host);
        Ok(self.shared.lock().status.into())
    }

    fn cancel(&mut self, host: &Host<'_>) -> PluginResult<()> {
        self.shared.cancel.store(true, Ordering::SeqCst);
        self.join();
        self.shared.log.emit(host);
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

impl<C: FileCopier> Drop for CopyEngine<C> {
    fn drop(&mut self) {
        // a transfer dropped while running finishes in its thread; joining here keeps
        // the files consistent with the state file. Messages still queued have no host
        // to go to and are dropped with it.
        self.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{host_ref, inproc};

    /// Run `f` with the host services of a one-member in-process world; also return
    /// what was logged through them.
    fn with_host_logged<T>(f: impl FnOnce(&Host<'_>) -> T) -> (T, Vec<(LogLevel, String)>) {
        let world = inproc::World::new(&["n"], std::time::Duration::from_secs(30));
        let services = world.member(0);
        let host = Host::new(host_ref(&services));
        let out = f(&host);
        drop(host);
        let logs = world
            .log_records()
            .into_iter()
            .map(|(_, level, message)| (level, message))
            .collect();
        (out, logs)
    }

    fn with_host<T>(f: impl FnOnce(&Host<'_>) -> T) -> T {
        with_host_logged(f).0
    }

    fn config(kind: &str, state: &Path) -> TransferConfig {
        TransferConfig {
            transfer_type: kind.into(),
            state_file: state.display().to_string().into(),
            crc32: true,
            preserve_metadata: true,
            settings: Default::default(),
        }
    }

    fn settings(threads: usize) -> EngineSettings {
        EngineSettings {
            threads,
            chunk_size: 4096,
        }
    }

    fn data(n: usize, seed: u8) -> Vec<u8> {
        (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
    }

    #[test]
    fn copies_many_files_with_crc_and_metadata_on_one_thread_and_a_pool() {
        for threads in [1, 3] {
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
                CopyEngine::new(&config("x", &state), settings(threads), PreadCopier).unwrap();
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
            assert_eq!(status, TransferStatus::Complete, "{threads} threads");
            let results = t.results().unwrap();
            assert_eq!(results.len(), sizes.len());
            for (i, n) in sizes.iter().enumerate() {
                let out = dir.path().join(format!("out/d{i}"));
                let got = std::fs::read(&out).unwrap();
                assert_eq!(got, data(*n, i as u8), "{threads} threads, file {i}");
                assert_eq!(results[i].crc32.into_option(), Some(crc32fast::hash(&got)));
                assert_eq!(results[i].bytes, *n as u64);
                assert_eq!(results[i].destination.as_str(), out.to_str().unwrap());
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
        let cfg = config("pthread", &state);
        let mut t = CopyEngine::new(&cfg, settings(3), PreadCopier).unwrap();
        t.add(src.to_str().unwrap(), dst.to_str().unwrap()).unwrap();
        with_host(|host| {
            t.dispatch(host).unwrap();
            t.wait(host).unwrap();
        });
        // pretend the copy died before the rename: put the data back in the temporary
        // file, damage one chunk, and mark the file incomplete in the state
        let temp = temp_path(&dst);
        std::fs::rename(&dst, &temp).unwrap();
        let mut st: State = serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
        st.files[0].status = Status::InProgress;
        st.status = Status::InProgress;
        std::fs::write(&state, serde_json::to_vec(&st).unwrap()).unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&temp).unwrap();
        f.write_all_at(b"XXXX", 2 * 4096 + 10).unwrap();
        drop(t);

        let mut r = CopyEngine::resume(&cfg, PreadCopier).unwrap();
        assert_eq!(
            r.shared.lock().files[0].chunks.len(),
            5,
            "6 chunks, the damaged one dropped"
        );
        // what a resumed transfer reports before its dispatch
        let before = r.results().unwrap();
        assert_eq!(before.len(), 1);
        assert_eq!(before[0].status, TransferStatus::Idle);
        assert_eq!(before[0].bytes, 5 * 4096);
        let (status, logs) = with_host_logged(|host| {
            assert_eq!(r.test(host).unwrap(), TransferStatus::Idle);
            r.dispatch(host).unwrap();
            r.wait(host).unwrap()
        });
        assert_eq!(status, TransferStatus::Complete);
        assert_eq!(std::fs::read(&dst).unwrap(), content);
        assert_eq!(
            logs[0],
            (
                LogLevel::Debug,
                format!(
                    "transfer pthread: resumed from {}: 0 of 1 files complete, 5 chunks verified, 1 to copy again",
                    state.display()
                )
            )
        );
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
        let cfg = config("sync", &state);
        let mut t = CopyEngine::new(&cfg, settings(1), PreadCopier).unwrap();
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
            match CopyEngine::resume(&cfg, PreadCopier) {
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
        for threads in [1, 3] {
            let state = dir.path().join(format!("{threads}.json"));
            let cfg = config("x", &state);
            let mut t = CopyEngine::new(&cfg, settings(threads), PreadCopier).unwrap();
            t.add(src.to_str().unwrap(), dst.to_str().unwrap()).unwrap();
            with_host(|host| {
                t.dispatch(host).unwrap();
                assert_eq!(t.wait(host).unwrap(), TransferStatus::Failed, "{threads}");
            });
            let why = t.results().unwrap()[0]
                .error
                .clone()
                .into_option()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                why.contains("dst.scr-part is a symbolic link"),
                "{threads}: {why}"
            );
            assert_eq!(std::fs::read(&victim).unwrap(), b"keep", "{threads}");
            assert!(!dst.exists(), "{threads}");
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
        let mut t = CopyEngine::new(&config("sync", &state), settings(1), PreadCopier).unwrap();
        let dst = dir.path().join("dst");
        t.add(src.to_str().unwrap(), dst.to_str().unwrap()).unwrap();
        with_host(|host| {
            t.shared.cancel.store(true, Ordering::SeqCst); // cancel before any chunk
            t.dispatch(host).unwrap();
            t.cancel(host).unwrap();
            assert_eq!(t.test(host).unwrap(), TransferStatus::Cancelled);
        });
        assert!(!dst.exists());
        assert!(!temp_path(&dst).exists());
        let results = t.results().unwrap();
        assert_eq!(results[0].status, TransferStatus::Cancelled);
        assert_eq!(results[0].bytes, 0);
    }

    #[test]
    fn a_missing_source_is_refused_at_add() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = CopyEngine::new(
            &config("sync", &dir.path().join("s")),
            settings(1),
            PreadCopier,
        )
        .unwrap();
        let e = t.add("/nonexistent/file", "/tmp/x").unwrap_err();
        assert!(e.message().starts_with("/nonexistent/file: "), "{e}");
        assert!(t.results().unwrap().is_empty());
    }

    /// Logs from the copier, on the engine's thread, with a blocking point the test
    /// controls: the thread holds no `Host`.
    struct Chatty {
        /// The copier blocks on its first chunk until this is released.
        gate: Arc<(Mutex<bool>, Condvar)>,
        /// The thread that calls the transfer (the copier must never run there).
        caller: std::thread::ThreadId,
    }

    impl FileCopier for Chatty {
        fn copy_chunk(&self, chunk: &Chunk<'_>) -> PluginResult<u32> {
            let (open, cv) = &*self.gate;
            let mut g = lock(open);
            while !*g {
                g = cv.wait(g).unwrap();
            }
            drop(g);
            if std::thread::current().id() == self.caller {
                return Err(PluginError::new(
                    ErrorCode::OTHER,
                    "copied on the caller's thread",
                ));
            }
            chunk.log.log(
                LogLevel::Warn,
                format!(
                    "chatty: {} bytes at {} of {}",
                    chunk.len,
                    chunk.offset,
                    chunk.source.display()
                ),
            );
            PreadCopier.copy_chunk(chunk)
        }
    }

    /// A message logged on the copy thread reaches the host: not at once (the thread has
    /// no host), but through the next `test` or `wait`, in the order logged, once.
    #[test]
    fn a_message_logged_on_the_copy_thread_reaches_the_host() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::write(&src, data(2 * 4096 + 1, 3)).unwrap();
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        let mut t = CopyEngine::new(
            &config("chatty", &dir.path().join("state.json")),
            settings(1),
            Chatty {
                gate: Arc::clone(&gate),
                caller: std::thread::current().id(),
            },
        )
        .unwrap();
        t.add(
            src.to_str().unwrap(),
            dir.path().join("dst").to_str().unwrap(),
        )
        .unwrap();
        let ((), logs) = with_host_logged(|host| {
            t.dispatch(host).unwrap();
            // the copier is blocked: nothing logged yet, nothing to emit
            assert_eq!(t.test(host).unwrap(), TransferStatus::InProgress);
            *lock(&gate.0) = true;
            gate.1.notify_all();
            assert_eq!(t.wait(host).unwrap(), TransferStatus::Complete);
            // a later call has nothing left to emit again
            assert_eq!(t.test(host).unwrap(), TransferStatus::Complete);
        });
        let src = src.display();
        assert_eq!(
            logs,
            vec![
                (LogLevel::Warn, format!("chatty: 4096 bytes at 0 of {src}")),
                (
                    LogLevel::Warn,
                    format!("chatty: 4096 bytes at 4096 of {src}")
                ),
                (LogLevel::Warn, format!("chatty: 1 bytes at 8192 of {src}")),
                (
                    LogLevel::Debug,
                    "transfer chatty: Complete, 8193 bytes in 1 files".to_string()
                ),
            ]
        );
        assert_eq!(
            std::fs::read(dir.path().join("dst")).unwrap(),
            data(2 * 4096 + 1, 3)
        );
    }

    struct Panicky;
    impl FileCopier for Panicky {
        fn copy_chunk(&self, chunk: &Chunk<'_>) -> PluginResult<u32> {
            if chunk.offset == 4096 {
                panic!("vendor bug");
            }
            PreadCopier.copy_chunk(chunk)
        }
    }

    /// A copier that panics fails its file (named, with the panic's message) and the
    /// transfer; the other file completes; no temporary file is left after a cancel.
    #[test]
    fn a_panicking_copier_fails_its_file_not_the_transfer_thread() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, data(3 * 4096, 5)).unwrap();
        std::fs::write(&b, data(100, 6)).unwrap();
        let mut t = CopyEngine::new(
            &config("panicky", &dir.path().join("state.json")),
            settings(2),
            Panicky,
        )
        .unwrap();
        let (da, db) = (dir.path().join("out/a"), dir.path().join("out/b"));
        t.add(a.to_str().unwrap(), da.to_str().unwrap()).unwrap();
        t.add(b.to_str().unwrap(), db.to_str().unwrap()).unwrap();
        with_host(|host| {
            t.dispatch(host).unwrap();
            assert_eq!(t.wait(host).unwrap(), TransferStatus::Failed);
        });
        let r = t.results().unwrap();
        assert_eq!(r[0].status, TransferStatus::Failed);
        assert_eq!(
            r[0].error.clone().into_option().unwrap().as_str(),
            format!(
                "{}: the copier panicked at byte 4096: vendor bug",
                a.display()
            )
        );
        assert_eq!(r[1].status, TransferStatus::Complete);
        assert_eq!(std::fs::read(&db).unwrap(), data(100, 6));
        with_host(|host| t.cancel(host).unwrap());
        assert!(!da.exists() && !temp_path(&da).exists());
    }

    #[test]
    fn settings_come_from_the_type_section_and_unknown_keys_are_refused() {
        let mut cfg = config("example", Path::new("/nonexistent/state"));
        cfg.settings = vec![
            crate::Param {
                key: "threads".into(),
                value: "3".into(),
            },
            crate::Param {
                key: "chunk_size".into(),
                value: "8192".into(),
            },
        ]
        .into();
        assert_eq!(
            EngineSettings::from_config(&cfg, 1, &[]).unwrap(),
            EngineSettings {
                threads: 3,
                chunk_size: 8192
            }
        );
        cfg.settings.push(crate::Param {
            key: "thread".into(),
            value: "2".into(),
        });
        let e = EngineSettings::from_config(&cfg, 1, &[]).unwrap_err();
        assert_eq!(
            e.message(),
            "transfer type example: unknown parameter `thread` (known: threads, chunk_size)"
        );
        assert!(EngineSettings::from_config(&cfg, 1, &["thread"]).is_ok());
    }
}
