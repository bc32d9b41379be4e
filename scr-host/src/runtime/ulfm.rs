//! ULFM (MPI's User-Level Failure Mitigation): whether this job can survive a lost process,
//! and what the library does when one is lost.
//!
//! # Where ULFM comes from
//!
//! scr-rs is built against an ordinary `mpi.h` (Debian's Open MPI 4.1 has no ULFM). The
//! `MPIX_Comm_*` calls are looked up at run time in the process (`dlsym`), so one build
//! runs under both: under Open MPI 5 started with `mpiexec --with-ft ulfm` they are found
//! and in force; elsewhere [`status`] says why online recovery is off, and the library
//! behaves as before (a lost process ends the job, as `MPI_ERRORS_ARE_FATAL` does).
//!
//! # What a lost process becomes
//!
//! Every communicator the library owns is *watched* ([`watch`]): it gets an error handler
//! in place of `MPI_ERRORS_ARE_FATAL`. MPI calls the handler for every call on that
//! communicator that does not succeed, with the code: this is where every return code is
//! checked. A process failure (`MPI_ERR_PROC_FAILED`, `_PENDING`, `MPI_ERR_REVOKED`) is
//! recorded once for the process ([`lost`]) and every watched communicator is revoked,
//! so no rank of the job waits for a message that will never come: each rank's next (or
//! pending) call on any of them fails at once, and each rank records the loss in turn.
//! Any other error ends the job as the default handler would (it is a bug, not a
//! failure). A communicator the library stopped using (freed, or abandoned with a
//! runtime that a loss ended) is no longer watched: what its leftover operations report
//! belongs to a loss already recovered from and is ignored, so a repaired job is not
//! marked lost again.
//!
//! The runtime checks the record after every MPI call of its own (`check`, from
//! `comm.rs` and `world/mpi_world.rs`, before a result is used) and unwinds to the API
//! call that made it with a [`ProcessLost`] payload; the API boundary turns that into
//! [`ScrError::ProcessFailed`](crate::error::ScrError::ProcessFailed) and the runtime refuses
//! every call after it. Plugin host services never unwind: they return an error to the
//! plugin (`mpi_host`), and the runtime's own next call unwinds.
//!
//! `unsafe` here: symbols looked up with `dlsym` and called through their C signatures,
//! the error handler MPI calls, and the raw communicator handles (see each `SAFETY`).
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, CStr};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use mpi::ffi::MPI_Comm;
use mpi::raw::{AsRaw as _, FromRaw as _};
use mpi::topology::SimpleCommunicator;
use scr_plugin::sync::lock;

/// Open MPI's error classes of a process failure (its `mpi.h`, 5.0: `MPI_ERR_PROC_FAILED`
/// 75, `MPI_ERR_PROC_FAILED_PENDING` 76, `MPI_ERR_REVOKED` 77); the header scr-rs builds
/// against predates them.
const PROC_FAILED: c_int = 75;
const PROC_FAILED_PENDING: c_int = 76;
const REVOKED: c_int = 77;

/// Whether `class` is a process failure (or its consequence, a revoked communicator).
pub(crate) fn is_failure_class(class: c_int) -> bool {
    matches!(class, PROC_FAILED | PROC_FAILED_PENDING | REVOKED)
}

type RevokeFn = unsafe extern "C" fn(MPI_Comm) -> c_int;
type ShrinkFn = unsafe extern "C" fn(MPI_Comm, *mut MPI_Comm) -> c_int;
type AgreeFn = unsafe extern "C" fn(MPI_Comm, *mut c_int) -> c_int;
type AckFn = unsafe extern "C" fn(MPI_Comm) -> c_int;

/// The ULFM calls of the MPI library this process runs on.
pub struct Ulfm {
    revoke: RevokeFn,
    shrink: ShrinkFn,
    agree: AgreeFn,
    failure_ack: AckFn,
}

/// The panic payload that carries a lost process from the MPI call that saw it to the API
/// call that made it (see the module doc). Never crosses a plugin or C boundary.
#[derive(Debug, Clone, Copy)]
pub struct ProcessLost {
    /// The MPI error code of the first failed call in this process.
    pub code: i32,
}

static STATUS: OnceLock<Result<Ulfm, String>> = OnceLock::new();
static LOST: AtomicBool = AtomicBool::new(false);
static LOST_CODE: AtomicI32 = AtomicI32::new(0);
/// How many failed calls this process saw (each failure class error counts one): a
/// repair compares it before and after each of its own calls.
static FAILURES: AtomicU64 = AtomicU64::new(0);
/// When this process first saw the loss (milliseconds since the epoch).
static LOST_AT_MS: AtomicU64 = AtomicU64::new(0);
/// Every watched communicator (revoked together when a process is lost).
static WATCHED: Mutex<Vec<Raw>> = Mutex::new(Vec::new());
/// The error handler, made once.
static HANDLER: OnceLock<Raw> = OnceLock::new();

/// A raw MPI handle kept in a static.
#[derive(Clone, Copy, PartialEq)]
struct Raw(usize);

/// Look up `name` in the process (the MPI library is already loaded).
fn symbol(name: &CStr) -> Option<usize> {
    // SAFETY: dlsym with RTLD_DEFAULT searches the loaded objects for a NUL-terminated
    // name; it returns null or the symbol's address and reads nothing else.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!p.is_null()).then_some(p as usize)
}

/// The MPI library's own version string (`MPI_Get_library_version`).
pub fn library_version() -> String {
    let mut buf = vec![0 as c_char; 8192];
    let mut len: c_int = 0;
    // SAFETY: MPI writes at most MPI_MAX_LIBRARY_VERSION_STRING (< 8192) bytes and its
    // length; callable before and after MPI_Init.
    unsafe { mpi::ffi::MPI_Get_library_version(buf.as_mut_ptr(), &mut len) };
    let len = usize::try_from(len).unwrap_or(0).min(buf.len());
    let bytes: Vec<u8> = buf[..len].iter().map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).trim().to_string()
}

fn probe() -> Result<Ulfm, String> {
    let version = library_version();
    let first = version.lines().next().unwrap_or("").to_string();
    let find = |name: &CStr| {
        symbol(name).ok_or_else(|| {
            format!(
                "the MPI library ({first}) has no {} (online recovery needs MPI with ULFM, such as Open MPI 5)",
                name.to_string_lossy()
            )
        })
    };
    let revoke = find(c"MPIX_Comm_revoke")?;
    let shrink = find(c"MPIX_Comm_shrink")?;
    let agree = find(c"MPIX_Comm_agree")?;
    let failure_ack = find(c"MPIX_Comm_failure_ack")?;
    if version.contains("Open MPI") {
        // Open MPI turns fault tolerance on per job: without it a failure aborts the job
        // whatever the error handler says
        let on = std::env::var("OMPI_MCA_mpi_ft_enable").unwrap_or_default();
        if !matches!(on.as_str(), "1" | "true" | "yes" | "enabled") {
            return Err(format!(
                "the job was not started with `mpiexec --with-ft ulfm` ({first}: OMPI_MCA_mpi_ft_enable is not set), so a lost process ends the job"
            ));
        }
    }
    // SAFETY: each address is the named MPIX_ function of the loaded MPI library, whose
    // C signature (mpi-ext.h of Open MPI 5) is the type it is cast to.
    unsafe {
        Ok(Ulfm {
            revoke: std::mem::transmute::<usize, RevokeFn>(revoke),
            shrink: std::mem::transmute::<usize, ShrinkFn>(shrink),
            agree: std::mem::transmute::<usize, AgreeFn>(agree),
            failure_ack: std::mem::transmute::<usize, AckFn>(failure_ack),
        })
    }
}

/// ULFM's calls when online recovery can work in this job, else why not (looked up once;
/// MPI must be initialised).
pub fn status() -> Result<&'static Ulfm, &'static str> {
    STATUS
        .get_or_init(probe)
        .as_ref()
        .map_err(|why| why.as_str())
}

/// This process's rank in the job of a resilient run (`resilient::run` sets it): it names
/// the simulated node (`node_names`) whatever application rank the process holds, so a
/// spare that took a lost rank's number stays on its own node. Unset (`u32::MAX`) outside
/// a resilient run, where a runtime's own rank names it, on any communicator.
static PROCESS_INDEX: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(u32::MAX);

/// Set this process's index in a resilient run's job (see `PROCESS_INDEX`).
pub fn set_process_index(index: u32) {
    PROCESS_INDEX.store(index, Ordering::SeqCst);
}

/// This process's index in a resilient run's job, if it runs one.
pub fn process_index() -> Option<u32> {
    match PROCESS_INDEX.load(Ordering::SeqCst) {
        u32::MAX => None,
        i => Some(i),
    }
}

/// Whether this process saw a process of the job fail (on any watched communicator).
pub fn lost() -> bool {
    LOST.load(Ordering::SeqCst)
}

/// The error code of the first failure this process saw.
pub fn lost_code() -> i32 {
    LOST_CODE.load(Ordering::SeqCst)
}

/// Forget a failure once the job recovered from it (on repaired communicators).
pub fn clear_lost() {
    LOST.store(false, Ordering::SeqCst);
    LOST_CODE.store(0, Ordering::SeqCst);
    LOST_AT_MS.store(0, Ordering::SeqCst);
}

/// Unwind to the API call with [`ProcessLost`] when a process was lost: called after
/// every MPI call of the runtime, before its result is used.
pub(crate) fn check() {
    if lost() {
        raise();
    }
}

/// Run `f` (an application call): a lost process's unwinding (see the module doc) comes
/// back as `Err` with MPI's words for it; any other panic goes on unwinding.
pub(crate) fn catch_lost<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(v) => Ok(v),
        Err(payload) => match payload.downcast::<ProcessLost>() {
            Ok(lost) => Err(error_string(lost.code)),
            Err(other) => std::panic::resume_unwind(other),
        },
    }
}

/// Unwind to the API call with [`ProcessLost`] (a process was lost).
pub(crate) fn raise() -> ! {
    std::panic::panic_any(ProcessLost { code: lost_code() })
}

fn mark_lost(code: c_int) {
    FAILURES.fetch_add(1, Ordering::SeqCst);
    if !LOST.swap(true, Ordering::SeqCst) {
        LOST_CODE.store(code, Ordering::SeqCst);
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        LOST_AT_MS.store(ms, Ordering::SeqCst);
    }
}

/// How many failed calls this process has seen so far (see `FAILURES`).
pub fn failures() -> u64 {
    FAILURES.load(Ordering::SeqCst)
}

/// When this process first saw the loss it has not recovered from (ms since the epoch;
/// 0 when none).
pub fn lost_at_ms() -> u64 {
    LOST_AT_MS.load(Ordering::SeqCst)
}

/// The error of `call` when a process of the job was lost (`why`: MPI's words), the same
/// whether the loss unwound the call or an earlier one.
pub(crate) fn lost_error(call: &str, why: &str) -> crate::error::ScrError {
    crate::error::ScrError::ProcessFailed(format!(
        "{call}: a process of the job was lost ({why}); the library's communicators are revoked: recover (a resilient run replaces the process) or end the job"
    ))
}

/// MPI's words for `code`.
pub fn error_string(code: c_int) -> String {
    let mut buf = vec![0 as c_char; 1024];
    let mut len: c_int = 0;
    // SAFETY: MPI writes at most MPI_MAX_ERROR_STRING (256 in Open MPI) bytes.
    unsafe { mpi::ffi::MPI_Error_string(code, buf.as_mut_ptr(), &mut len) };
    let len = usize::try_from(len).unwrap_or(0).min(buf.len());
    let bytes: Vec<u8> = buf[..len].iter().map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn error_class(code: c_int) -> c_int {
    let mut class = code;
    // SAFETY: MPI_Error_class writes one int.
    unsafe { mpi::ffi::MPI_Error_class(code, &mut class) };
    class
}

/// What MPI calls for every call that failed on a watched communicator. Declared without
/// the C prototype's trailing `...`: see `handler`.
extern "C" fn on_error(comm: *mut MPI_Comm, code: *mut c_int) {
    // SAFETY: MPI passes the communicator and the error code by pointer, both valid for
    // this call.
    let (comm, code) = unsafe { (*comm, *code) };
    if !is_watched(comm) {
        // a communicator the library no longer uses (a runtime's or a set's that a loss
        // abandoned, its operations still completing): its error belongs to a failure
        // already recovered from, and must not mark the repaired job lost again
        return;
    }
    if is_failure_class(error_class(code)) {
        mark_lost(code);
        revoke_all();
        return;
    }
    // what MPI_ERRORS_ARE_FATAL would have done: an MPI error other than a lost process
    // is a bug, and no rank can go on
    eprintln!(
        "scr-rs: MPI error on a communicator of the library: {}; ending the job",
        error_string(code)
    );
    // SAFETY: MPI_Abort on the communicator MPI handed in; it does not return.
    unsafe { mpi::ffi::MPI_Abort(comm, code) };
}

/// The library's error handler (made once).
fn handler() -> mpi::ffi::MPI_Errhandler {
    let raw = HANDLER.get_or_init(|| {
        type Variadic = mpi::ffi::MPI_Comm_errhandler_function;
        let f: extern "C" fn(*mut MPI_Comm, *mut c_int) = on_error;
        // MPI's handler prototype is `void (MPI_Comm *, int *, ...)`. On the C ABIs
        // scr-rs builds for (x86-64 SysV, AArch64 Linux), a variadic function's named
        // arguments are passed exactly as a plain function's, and a callee that declares
        // no variadic part ignores any extra argument (Open MPI passes two).
        // SAFETY: a function pointer of the same named arguments and ABI (above).
        let f: Variadic = unsafe { std::mem::transmute::<_, Variadic>(Some(f)) };
        let mut eh = std::mem::MaybeUninit::uninit();
        // SAFETY: MPI writes the new handler.
        unsafe { mpi::ffi::MPI_Comm_create_errhandler(f, eh.as_mut_ptr()) };
        // SAFETY: written by the call above.
        Raw(unsafe { eh.assume_init() }.0 as usize)
    });
    mpi::ffi::MPI_Errhandler(raw.0 as *mut _)
}

/// Put `comm` under the library's failure handling when ULFM is in force (see the module
/// doc); otherwise leave MPI's default (a failure ends the job). The caller holds the MPI
/// lock and calls [`unwatch`] before freeing `comm`.
pub fn watch(comm: &SimpleCommunicator) {
    if status().is_err() {
        return;
    }
    quiet_unwinding();
    let raw = comm.as_raw();
    // SAFETY: a valid communicator and the handler made by `handler`.
    unsafe { mpi::ffi::MPI_Comm_set_errhandler(raw, handler()) };
    let mut watched = lock(&WATCHED);
    if !watched.contains(&Raw(raw.0 as usize)) {
        watched.push(Raw(raw.0 as usize));
    }
}

/// The unwinding of a lost process is not a crash: the panic hook (the application's, or
/// Rust's default message) is skipped for a [`ProcessLost`] payload, and called for any
/// other panic as before. Installed once, when the first communicator is watched.
fn quiet_unwinding() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !info.payload().is::<ProcessLost>() {
                previous(info);
            }
        }));
    });
}

/// Stop watching a communicator the library no longer uses and free it, unless a process
/// was lost since the last recovery: then it is left to MPI, never freed. A communicator
/// abandoned by a loss may still have operations pending (a set's abandoned exchanges,
/// the abort notices); freeing it would let MPI give its context to a new communicator
/// of the repaired job, where their leftover messages could match.
pub fn free(comm: SimpleCommunicator) {
    unwatch(&comm);
    if lost() {
        std::mem::forget(comm);
    } else {
        drop(comm);
    }
}

/// Whether `comm` is watched (in use by the library).
fn is_watched(comm: MPI_Comm) -> bool {
    lock(&WATCHED).contains(&Raw(comm.0 as usize))
}

/// Stop revoking `comm` with the others (before it is freed).
pub fn unwatch(comm: &SimpleCommunicator) {
    let raw = Raw(comm.as_raw().0 as usize);
    lock(&WATCHED).retain(|&w| w != raw);
}

/// Revoke every watched communicator, so every rank's pending and next calls on them fail
/// instead of waiting for the lost process.
pub fn revoke_all() {
    let Ok(ulfm) = status() else { return };
    // (copied out: revoking may call the handler again on this thread; no MPI call is
    // made while the list is locked)
    let all: Vec<Raw> = lock(&WATCHED).clone();
    for Raw(c) in all {
        // SAFETY: a watched communicator is valid until `unwatch`ed, which happens before
        // it is freed, on a thread that holds the MPI lock as this one does.
        unsafe { (ulfm.revoke)(MPI_Comm(c as *mut _)) };
    }
}

impl Ulfm {
    /// `MPIX_Comm_revoke`.
    pub fn revoke(&self, comm: &SimpleCommunicator) -> c_int {
        // SAFETY: a valid communicator.
        unsafe { (self.revoke)(comm.as_raw()) }
    }

    /// `MPIX_Comm_failure_ack`: the failures known now no longer fail `agree`.
    pub fn failure_ack(&self, comm: &SimpleCommunicator) -> c_int {
        // SAFETY: a valid communicator.
        unsafe { (self.failure_ack)(comm.as_raw()) }
    }

    /// `MPIX_Comm_agree`: the bitwise AND of `flag` over the living processes, the same on
    /// each of them, and an error when a failure was not acknowledged.
    pub fn agree(&self, comm: &SimpleCommunicator, flag: u32) -> (c_int, u32) {
        let mut f = flag as c_int;
        // SAFETY: a valid communicator; MPI writes one int.
        let rc = unsafe { (self.agree)(comm.as_raw(), &mut f) };
        (rc, f as u32)
    }

    /// `MPIX_Comm_shrink`: the living processes of `comm`, in their order.
    pub fn shrink(&self, comm: &SimpleCommunicator) -> Result<SimpleCommunicator, c_int> {
        let mut out = std::mem::MaybeUninit::uninit();
        // SAFETY: a valid communicator; MPI writes the new one on success.
        let rc = unsafe { (self.shrink)(comm.as_raw(), out.as_mut_ptr()) };
        if rc != mpi::ffi::MPI_SUCCESS as c_int {
            return Err(rc);
        }
        // SAFETY: written by a successful MPIX_Comm_shrink: a new communicator this
        // process owns (freed when the wrapper drops).
        Ok(unsafe { SimpleCommunicator::from_raw(out.assume_init()) })
    }
}
