//! The vendor transfer types: IBM burst buffer (`bbapi`, libbbAPI) and Cray DataWarp
//! (`dw`, libdatawarp). The vendor library is opened at run time (by soname, or the path
//! in the type's `library` setting) and driven with the calls AXL uses. When it cannot be
//! opened the type is "unavailable"; with a `fallback` setting (e.g. `fallback =
//! "pthread"`) the transfer is done by that type instead, and the substitution is logged.
//!
//! This is the only module of the plugin that calls foreign code.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, CStr, CString};
use std::path::{Path, PathBuf};
use std::time::Duration;

use libloading::Library;
use scr_plugin::copy_engine;
use scr_plugin::{
    ErrorCode, FileResult, Host, LogLevel, Params, PluginError, PluginResult, Transfer,
    TransferConfig, TransferStatus,
};
use serde::{Deserialize, Serialize};

/// The default sonames.
pub const BBAPI_LIBRARY: &str = "libbbAPI.so";
/// The default DataWarp soname.
pub const DW_LIBRARY: &str = "libdatawarp.so";

/// `BBSTATUS` values the transfer info reports (bbapiTypes.h).
mod bbstatus {
    pub const NOTSTARTED: u64 = 0x0001;
    pub const INPROGRESS: u64 = 0x0002;
    pub const FULLSUCCESS: u64 = 0x0008;
    pub const CANCELED: u64 = 0x0010;
}

/// `BBSCOPETRANSFER` of bbapi_types.h: cancel this transfer only.
const BBSCOPETRANSFER: c_int = 1;

/// How often `dispatch` asks for the status of a transfer dispatched before, and the
/// pause between asks, before reporting that it cannot tell.
const QUERY_TRIES: u32 = 3;
const QUERY_PAUSE: Duration = Duration::from_millis(100);

/// libbbAPI is initialised once per process (a second `BB_InitLibrary` fails) and shut
/// down when the last transfer using it is gone: how many live transfers use it.
static BB_USERS: std::sync::Mutex<usize> = std::sync::Mutex::new(0);

/// The leading fields of `BBTransferInfo_t`; the library may write more, so the struct
/// carries room for them.
#[repr(C)]
struct BbTransferInfo {
    handle: u64,
    contribid: u32,
    jobid: u64,
    jobstepid: u64,
    tag: u64,
    numcontrib: u64,
    status: u64,
    numreportingcontribs: u64,
    total_transfer_keys: usize,
    total_transfer_size: usize,
    localstatus: u64,
    local_transfer_size: usize,
    reserved: [u8; 1024],
}

/// The library file of a vendor type: the `library` setting, else the soname.
fn library_name(config: &TransferConfig, default: &str) -> String {
    let what = format!("transfer type {}", config.transfer_type);
    Params::new(&what, &config.settings)
        .get("library")
        .unwrap_or(default)
        .to_string()
}

/// Open the vendor library, or say it is unavailable.
fn open(name: &str) -> PluginResult<Library> {
    // Loading a library runs its initialisers; nothing else is assumed of it until its
    // symbols are looked up with their documented signatures.
    // SAFETY: the library is the vendor's (or a test stand-in) named by the site's
    // configuration, loaded exactly as AXL loads it.
    unsafe { Library::new(name) }.map_err(|e| {
        PluginError::new(
            ErrorCode::UNAVAILABLE,
            format!("unavailable: {name} not found ({e})"),
        )
    })
}

/// What `new_transfer` does for `bbapi` and `dw`: the vendor transfer, or the fallback
/// type when the library is unavailable and a fallback is configured.
pub fn create(
    config: &TransferConfig,
    host: &Host<'_>,
    resume: bool,
) -> PluginResult<Box<dyn Transfer>> {
    let kind = config.transfer_type.to_ascii_lowercase();
    let default = if kind == "bbapi" {
        BBAPI_LIBRARY
    } else {
        DW_LIBRARY
    };
    let name = library_name(config, default);
    match open(&name) {
        Ok(lib) => {
            let paced = config
                .settings
                .iter()
                .any(|p| matches!(p.key.as_str(), "bandwidth" | "percent"));
            if paced {
                host.log(
                    LogLevel::Warn,
                    &format!("{kind}: the vendor library copies at its own pace: bandwidth and percent (flush_async_bw, flush_async_percent) are not applied to it"),
                );
            }
            Ok(Box::new(VendorTransfer::new(config, lib, &kind, resume)?))
        }
        Err(e) => {
            let what = format!("transfer type {kind}");
            let fallback = Params::new(&what, &config.settings)
                .get("fallback")
                .map(str::to_string);
            let Some(fallback) = fallback else {
                return Err(PluginError::new(
                    e.code,
                    format!(
                        "{}; set [plugins.{kind}] library = \"/path/to/{default}\" or fallback = \"pthread\"",
                        e.message()
                    ),
                ));
            };
            if !matches!(fallback.as_str(), "sync" | "pthread") {
                return Err(PluginError::invalid_parameter(format!(
                    "[plugins.{kind}] fallback = \"{fallback}\": the fallback must be sync or pthread"
                )));
            }
            host.log(
                LogLevel::Warn,
                &format!(
                    "{kind}: {}; this transfer uses the fallback type {fallback}",
                    e.message()
                ),
            );
            let mut cfg = config.clone();
            cfg.transfer_type = fallback.as_str().into();
            cfg.settings = cfg
                .settings
                .into_iter()
                .filter(|p| !matches!(p.key.as_str(), "library" | "fallback"))
                .collect();
            if resume {
                Ok(Box::new(crate::copy::resume(&cfg)?))
            } else {
                Ok(Box::new(crate::copy::new(&cfg)?))
            }
        }
    }
}

/// What a vendor transfer persists.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct VendorState {
    kind: String,
    files: Vec<(String, String)>,
    handle: Option<u64>,
    dispatched: bool,
    cancelled: bool,
    crc: bool,
    #[serde(default)]
    preserve: bool,
    /// How many times the transfer was started over after a cancel: part of the
    /// vendor tag, so a restarted transfer never reuses a cancelled one's handle.
    #[serde(default)]
    restarts: u32,
}

/// A `bbapi` or `dw` transfer.
pub struct VendorTransfer {
    lib: Library,
    state: VendorState,
    state_file: PathBuf,
    /// bbapi: the transfer definition, freed on drop.
    def: Option<*mut std::ffi::c_void>,
    status: TransferStatus,
    error: Option<String>,
    crcs: Vec<Option<u32>>,
    /// Per file, why it failed after the vendor reported the copy done (CRC or
    /// metadata); empty until then.
    file_errors: Vec<Option<String>>,
    /// Whether this transfer counts among libbbAPI's users (see [`BB_USERS`]).
    bb_user: bool,
}

// SAFETY: the transfer definition pointer is only used by the thread that owns the
// transfer (the trait's `&mut self` calls); libbbAPI's handles are process-wide values,
// not bound to a thread.
unsafe impl Send for VendorTransfer {}

impl VendorTransfer {
    fn new(config: &TransferConfig, lib: Library, kind: &str, resume: bool) -> PluginResult<Self> {
        let state_file = PathBuf::from(config.state_file.as_str());
        let state = if resume {
            let bytes =
                std::fs::read(&state_file).map_err(|e| PluginError::io(state_file.display(), e))?;
            let state: VendorState = serde_json::from_slice(&bytes).map_err(|e| {
                PluginError::new(ErrorCode::CORRUPT, format!("{}: {e}", state_file.display()))
            })?;
            // a cancel after resume deletes the destinations: only a private, well-formed
            // state is trusted
            copy_engine::check_resumed(
                &state_file,
                state
                    .files
                    .iter()
                    .map(|(s, d)| (Path::new(s), Path::new(d))),
            )?;
            state
        } else {
            VendorState {
                kind: kind.into(),
                crc: config.crc32,
                preserve: config.preserve_metadata,
                ..VendorState::default()
            }
        };
        let status = if state.dispatched {
            TransferStatus::InProgress
        } else {
            TransferStatus::Idle
        };
        let t = VendorTransfer {
            lib,
            state,
            state_file,
            def: None,
            status,
            error: None,
            crcs: Vec::new(),
            file_errors: Vec::new(),
            bb_user: false,
        };
        t.persist()?;
        Ok(t)
    }

    fn persist(&self) -> PluginResult<()> {
        let bytes = serde_json::to_vec(&self.state)
            .map_err(|e| PluginError::new(ErrorCode::OTHER, e.to_string()))?;
        copy_engine::persist_atomic(&self.state_file, &bytes)
    }

    fn sym<T>(&self, name: &[u8]) -> PluginResult<libloading::Symbol<'_, T>> {
        // SAFETY: `T` is the documented C signature of `name` in the vendor's header
        // (bbapi.h, datawarp.h), declared at each call site below.
        unsafe { self.lib.get::<T>(name) }.map_err(|e| {
            PluginError::new(
                ErrorCode::UNAVAILABLE,
                format!(
                    "{}: the library lacks {}: {e}",
                    self.state.kind,
                    String::from_utf8_lossy(&name[..name.len().saturating_sub(1)])
                ),
            )
        })
    }

    /// bbapi: the library's own description of its last error.
    fn bb_error(&self, call: &str, rc: c_int) -> PluginError {
        let mut detail = String::new();
        if let Ok(f) = self
            .sym::<unsafe extern "C" fn(c_int, *mut usize, usize, *mut c_char) -> c_int>(
                b"BB_GetLastErrorDetails\0",
            )
        {
            let mut buf = vec![0 as c_char; 1024];
            let mut avail = 0usize;
            // SAFETY: BB_GetLastErrorDetails(format, &numBytesAvail, bufsize, buf) writes
            // at most `bufsize` bytes into `buf`, which has that many.
            let r = unsafe { f(0, &mut avail, buf.len(), buf.as_mut_ptr()) };
            if r == 0 {
                buf[1023] = 0;
                // SAFETY: the buffer is NUL-terminated (last byte forced to 0 above).
                detail = unsafe { CStr::from_ptr(buf.as_ptr()) }
                    .to_string_lossy()
                    .into_owned();
            }
        }
        PluginError::new(
            ErrorCode::IO,
            format!(
                "bbapi: {call} returned {rc}{}",
                if detail.is_empty() {
                    String::new()
                } else {
                    format!(": {detail}")
                }
            ),
        )
    }

    fn cstr(s: &str) -> PluginResult<CString> {
        CString::new(s)
            .map_err(|_| PluginError::invalid_parameter(format!("path with a NUL byte: {s:?}")))
    }

    /// Make sure libbbAPI is initialised while this transfer lives (once per process).
    fn bb_enter(&mut self) -> PluginResult<()> {
        type Init = unsafe extern "C" fn(u32, *const c_char) -> c_int;
        if self.bb_user {
            return Ok(());
        }
        let mut users = scr_plugin::sync::lock(&BB_USERS);
        if *users == 0 {
            let version = Self::cstr("scr-rs")?;
            // SAFETY: BB_InitLibrary(contribId, clientVersion) takes a NUL-terminated
            // string that outlives the call.
            let rc = unsafe { self.sym::<Init>(b"BB_InitLibrary\0")?(0, version.as_ptr()) };
            if rc != 0 {
                return Err(self.bb_error("BB_InitLibrary", rc));
            }
        }
        *users += 1;
        self.bb_user = true;
        Ok(())
    }

    fn bb_dispatch(&mut self) -> PluginResult<()> {
        type Create = unsafe extern "C" fn(*mut *mut std::ffi::c_void) -> c_int;
        type Add =
            unsafe extern "C" fn(*mut std::ffi::c_void, *const c_char, *const c_char, u64) -> c_int;
        type Handle = unsafe extern "C" fn(u64, u64, *const u32, *mut u64) -> c_int;
        type Start = unsafe extern "C" fn(*mut std::ffi::c_void, u64) -> c_int;
        self.bb_enter()?;
        let mut def: *mut std::ffi::c_void = std::ptr::null_mut();
        // SAFETY: BB_CreateTransferDef(&def) stores a new definition pointer in `def`.
        let rc = unsafe { self.sym::<Create>(b"BB_CreateTransferDef\0")?(&mut def) };
        if rc != 0 || def.is_null() {
            return Err(self.bb_error("BB_CreateTransferDef", rc));
        }
        self.def = Some(def);
        for (src, dst) in self.state.files.clone() {
            let (s, d) = (Self::cstr(&src)?, Self::cstr(&dst)?);
            // SAFETY: `def` came from BB_CreateTransferDef; both paths are NUL-terminated
            // and outlive the call; flags 0 is a plain file copy.
            let rc = unsafe { self.sym::<Add>(b"BB_AddFiles\0")?(def, s.as_ptr(), d.as_ptr(), 0) };
            if rc != 0 {
                return Err(self.bb_error("BB_AddFiles", rc));
            }
        }
        // a tag unique to this transfer: a hash of its state file's path and how often
        // it was started over
        let tag = crc32fast::hash(self.state_file.to_string_lossy().as_bytes()) as u64
            | (u64::from(self.state.restarts) << 32);
        let contrib = [0u32];
        let mut handle = 0u64;
        // SAFETY: BB_GetTransferHandle(tag, numcontrib, contrib[], &handle) reads
        // `numcontrib` entries of `contrib` (one) and writes `handle`.
        let rc = unsafe {
            self.sym::<Handle>(b"BB_GetTransferHandle\0")?(tag, 1, contrib.as_ptr(), &mut handle)
        };
        if rc != 0 {
            return Err(self.bb_error("BB_GetTransferHandle", rc));
        }
        // SAFETY: `def` and `handle` came from the calls above.
        let rc = unsafe { self.sym::<Start>(b"BB_StartTransfer\0")?(def, handle) };
        if rc != 0 {
            return Err(self.bb_error("BB_StartTransfer", rc));
        }
        self.state.handle = Some(handle);
        Ok(())
    }

    fn bb_status(&mut self) -> PluginResult<TransferStatus> {
        type Info = unsafe extern "C" fn(u64, *mut BbTransferInfo) -> c_int;
        let Some(handle) = self.state.handle else {
            return Ok(TransferStatus::Idle);
        };
        self.bb_enter()?; // a resumed transfer in a new process
                          // SAFETY: BbTransferInfo is plain data; all-zero is a valid value.
        let mut info: BbTransferInfo = unsafe { std::mem::zeroed() };
        // SAFETY: BB_GetTransferInfo(handle, &info) fills the struct, which has room for
        // more fields than the ones read here.
        let rc = unsafe { self.sym::<Info>(b"BB_GetTransferInfo\0")?(handle, &mut info) };
        if rc != 0 {
            return Err(self.bb_error("BB_GetTransferInfo", rc));
        }
        // anything but "not finished yet" or success ends the wait: failed, partial,
        // stopped, or a status this release does not know
        Ok(match info.status {
            bbstatus::FULLSUCCESS => TransferStatus::Complete,
            bbstatus::CANCELED => TransferStatus::Cancelled,
            bbstatus::NOTSTARTED | bbstatus::INPROGRESS => TransferStatus::InProgress,
            _ => TransferStatus::Failed,
        })
    }

    fn dw_each(&self, name: &[u8], what: &str) -> PluginResult<()> {
        type One = unsafe extern "C" fn(*const c_char) -> c_int;
        for (src, _) in &self.state.files {
            let s = Self::cstr(src)?;
            // SAFETY: dw_wait_file_stage / dw_terminate_file_stage take one
            // NUL-terminated path that outlives the call.
            let rc = unsafe { self.sym::<One>(name)?(s.as_ptr()) };
            if rc != 0 {
                return Err(PluginError::new(
                    ErrorCode::IO,
                    format!("dw: {what}({src}) returned {rc}"),
                ));
            }
        }
        Ok(())
    }

    fn dw_status(&self) -> PluginResult<TransferStatus> {
        type Query = unsafe extern "C" fn(
            *const c_char,
            *mut c_int,
            *mut c_int,
            *mut c_int,
            *mut c_int,
        ) -> c_int;
        let (mut all_done, mut any_failed) = (true, false);
        for (src, _) in &self.state.files {
            let s = Self::cstr(src)?;
            let (mut complete, mut pending, mut deferred, mut failed) = (0, 0, 0, 0);
            // SAFETY: dw_query_file_stage(path, &complete, &pending, &deferred, &failed)
            // writes the four ints.
            let rc = unsafe {
                self.sym::<Query>(b"dw_query_file_stage\0")?(
                    s.as_ptr(),
                    &mut complete,
                    &mut pending,
                    &mut deferred,
                    &mut failed,
                )
            };
            if rc != 0 {
                return Err(PluginError::new(
                    ErrorCode::IO,
                    format!("dw: dw_query_file_stage({src}) returned {rc}"),
                ));
            }
            any_failed |= failed != 0;
            all_done &= complete != 0;
        }
        Ok(if any_failed {
            TransferStatus::Failed
        } else if all_done {
            TransferStatus::Complete
        } else {
            TransferStatus::InProgress
        })
    }

    fn status(&mut self) -> PluginResult<TransferStatus> {
        if self.state.cancelled {
            return Ok(TransferStatus::Cancelled);
        }
        if !self.state.dispatched {
            return Ok(TransferStatus::Idle);
        }
        let s = if self.state.kind == "bbapi" {
            self.bb_status()?
        } else {
            self.dw_status()?
        };
        let mut s = s;
        if s == TransferStatus::Complete && self.crcs.is_empty() {
            // the vendor copies bytes; the CRC32 is taken from the destination afterwards
            // and the source's mode and times are applied here. A file where either
            // fails (e.g. its source vanished, so its metadata is unknown) is Failed on
            // its own, and so is the transfer: never an error for the whole call.
            let mut crcs = Vec::with_capacity(self.state.files.len());
            let mut errors = Vec::with_capacity(self.state.files.len());
            for (src, dst) in &self.state.files {
                let crc = if self.state.crc {
                    copy_engine::file_crc32(Path::new(dst)).map(Some)
                } else {
                    Ok(None)
                };
                let meta = if self.state.preserve {
                    copy_engine::copy_metadata(Path::new(src), Path::new(dst))
                } else {
                    Ok(())
                };
                let err = crc
                    .as_ref()
                    .err()
                    .or(meta.as_ref().err())
                    .map(|e| e.message().to_string());
                crcs.push(crc.ok().flatten());
                errors.push(err);
            }
            self.crcs = crcs;
            if errors.iter().any(Option::is_some) {
                s = TransferStatus::Failed;
            }
            self.file_errors = errors;
        }
        self.status = s;
        Ok(s)
    }
}

impl VendorTransfer {
    /// Whether a transfer dispatched before (and not cancelled) has failed, asking the
    /// vendor a few times (a query can fail for a moment: a busy server). A query error
    /// that persists is reported as what it is, never taken for "failed": starting over
    /// while the first copy may still be running would have two vendor transfers write
    /// the same destinations. `cancel` first is how a caller starts such a transfer over.
    fn dispatched_before_failed(&mut self) -> PluginResult<bool> {
        if !self.state.dispatched || self.state.cancelled {
            return Ok(false);
        }
        let mut tries = 1;
        loop {
            match self.status() {
                Ok(s) => return Ok(s == TransferStatus::Failed),
                Err(_) if tries < QUERY_TRIES => {
                    tries += 1;
                    std::thread::sleep(QUERY_PAUSE);
                }
                Err(e) => {
                    return Err(PluginError::new(
                        e.code,
                        format!(
                            "{} ({tries} tries): the state of the transfer dispatched before is unknown, so it is not started again (it may still be running); cancel it to start over",
                            e.message()
                        ),
                    ))
                }
            }
        }
    }

    /// Reset a cancelled or failed transfer so it is dispatched from the start. A vendor
    /// copy cannot continue where it stopped (the vendor library keeps no per-chunk
    /// progress we could verify, and cancel removed the partial destinations).
    /// BB_CancelTransfer returns before the vendor stops: first wait (bounded) until the
    /// old transfer reached a final state, so it cannot write after the new one.
    fn start_over(&mut self) -> PluginResult<()> {
        if self.state.kind == "bbapi" && self.state.handle.is_some() {
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            // (a handle the vendor no longer knows has stopped)
            while matches!(self.bb_status(), Ok(TransferStatus::InProgress)) {
                if std::time::Instant::now() >= deadline {
                    return Err(PluginError::new(
                        ErrorCode::IO,
                        "bbapi: the cancelled transfer did not stop within 30 s; not started again",
                    ));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        self.state.cancelled = false;
        self.state.dispatched = false;
        self.state.handle = None;
        self.state.restarts += 1;
        self.crcs.clear();
        self.file_errors.clear();
        self.error = None;
        self.status = TransferStatus::Idle;
        if let Some(def) = self.def.take() {
            type Free = unsafe extern "C" fn(*mut std::ffi::c_void) -> c_int;
            if let Ok(f) = self.sym::<Free>(b"BB_FreeTransferDef\0") {
                // SAFETY: `def` came from BB_CreateTransferDef and is freed once
                // (taken out of `self.def`).
                unsafe { f(def) };
            }
        }
        Ok(())
    }

    /// DataWarp: stage every file out at once (DW_STAGE_IMMEDIATE).
    fn dw_stage_all(&self) -> PluginResult<()> {
        type Stage = unsafe extern "C" fn(*const c_char, *const c_char, c_int) -> c_int;
        for (src, dst) in self.state.files.clone() {
            let (s, d) = (Self::cstr(&src)?, Self::cstr(&dst)?);
            // SAFETY: dw_stage_file_out(dw_path, pfs_path, DW_STAGE_IMMEDIATE = 0) takes
            // two NUL-terminated paths that outlive the call.
            let rc =
                unsafe { self.sym::<Stage>(b"dw_stage_file_out\0")?(s.as_ptr(), d.as_ptr(), 0) };
            if rc != 0 {
                return Err(PluginError::new(
                    ErrorCode::IO,
                    format!("dw: dw_stage_file_out({src}) returned {rc}"),
                ));
            }
        }
        Ok(())
    }
}

impl Transfer for VendorTransfer {
    fn add(&mut self, source: &str, destination: &str) -> PluginResult<()> {
        if self.state.dispatched {
            return Err(PluginError::invalid_parameter(
                "add: files can only be added before dispatch",
            ));
        }
        std::fs::metadata(source).map_err(|e| PluginError::io(source, e))?;
        self.state.files.push((source.into(), destination.into()));
        self.persist()
    }

    fn dispatch(&mut self, _host: &Host<'_>) -> PluginResult<()> {
        let failed = self.dispatched_before_failed()?;
        if failed && self.state.kind != "bbapi" {
            // DataWarp keeps a failed stage until it is terminated; staging the same
            // file again before that is refused or races what is left of the old one
            self.dw_each(b"dw_terminate_file_stage\0", "dw_terminate_file_stage")?;
        }
        if self.state.dispatched && !self.state.cancelled && !failed {
            // already running or done (e.g. resumed from its state file): a second
            // vendor transfer of the same files would race the first
            return Ok(());
        }
        if self.state.cancelled || failed {
            self.start_over()?;
        }
        for (_, d) in &self.state.files {
            if let Some(dir) = std::path::Path::new(d).parent() {
                std::fs::create_dir_all(dir).map_err(|e| PluginError::io(dir.display(), e))?;
            }
        }
        if self.state.kind == "bbapi" {
            self.bb_dispatch()?;
        } else {
            self.dw_stage_all()?;
        }
        self.state.dispatched = true;
        self.persist()
    }

    fn test(&mut self, _host: &Host<'_>) -> PluginResult<TransferStatus> {
        self.status()
    }

    fn wait(&mut self, _host: &Host<'_>) -> PluginResult<TransferStatus> {
        if self.state.kind == "dw" && self.state.dispatched && !self.state.cancelled {
            if let Err(e) = self.dw_each(b"dw_wait_file_stage\0", "dw_wait_file_stage") {
                self.error = Some(e.message().to_string());
            }
        }
        loop {
            let s = self.status()?;
            if s != TransferStatus::InProgress {
                return Ok(s);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn cancel(&mut self, _host: &Host<'_>) -> PluginResult<()> {
        if self.state.dispatched {
            if self.state.kind == "bbapi" {
                type Cancel = unsafe extern "C" fn(u64, c_int) -> c_int;
                if let Some(h) = self.state.handle {
                    self.bb_enter()?;
                    // SAFETY: BB_CancelTransfer(handle, scope) with a handle from
                    // BB_GetTransferHandle.
                    let rc =
                        unsafe { self.sym::<Cancel>(b"BB_CancelTransfer\0")?(h, BBSCOPETRANSFER) };
                    if rc != 0 {
                        return Err(self.bb_error("BB_CancelTransfer", rc));
                    }
                }
            } else {
                self.dw_each(b"dw_terminate_file_stage\0", "dw_terminate_file_stage")?;
            }
        }
        for (_, d) in &self.state.files {
            if self.status != TransferStatus::Complete {
                copy_engine::remove_regular(Path::new(d));
            }
        }
        self.state.cancelled = true;
        self.persist()
    }

    fn results(&self) -> PluginResult<Vec<FileResult>> {
        Ok(self
            .state
            .files
            .iter()
            .enumerate()
            .map(|(i, (s, d))| FileResult {
                source: s.as_str().into(),
                destination: d.as_str().into(),
                bytes: if self.status == TransferStatus::Complete {
                    std::fs::metadata(d).map(|m| m.len()).unwrap_or(0)
                } else {
                    0
                },
                crc32: self.crcs.get(i).copied().flatten().into(),
                status: match self.file_errors.get(i) {
                    Some(Some(_)) => TransferStatus::Failed,
                    // the others copied whole: Complete even when a sibling failed
                    Some(None) if self.status == TransferStatus::Failed => TransferStatus::Complete,
                    _ => self.status,
                },
                error: match self.file_errors.get(i) {
                    Some(Some(e)) => Some(e.as_str().into()),
                    _ => self.error.clone().map(Into::into),
                }
                .into(),
            })
            .collect())
    }
}

impl Drop for VendorTransfer {
    fn drop(&mut self) {
        if let Some(def) = self.def.take() {
            type Free = unsafe extern "C" fn(*mut std::ffi::c_void) -> c_int;
            if let Ok(f) = self.sym::<Free>(b"BB_FreeTransferDef\0") {
                // SAFETY: `def` came from BB_CreateTransferDef and is freed once.
                unsafe { f(def) };
            }
        }
        if self.bb_user {
            let mut users = scr_plugin::sync::lock(&BB_USERS);
            *users -= 1;
            if *users == 0 {
                type Term = unsafe extern "C" fn() -> c_int;
                if let Ok(t) = self.sym::<Term>(b"BB_TerminateLibrary\0") {
                    // SAFETY: the last user of the library initialised by `bb_enter`.
                    unsafe { t() };
                }
            }
        }
    }
}
