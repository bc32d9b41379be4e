//! The `extern "C"` functions of `scr.h`. Each converts its C arguments, calls
//! [`crate::calls`] under [`guarded`] (no panic reaches C; every failure is printed with
//! the rank and the call) and converts the result. Every `unsafe` block of the crate is
//! in this module, for the C pointers an application passes.
#![allow(non_snake_case, non_camel_case_types)] // the names are SCR's (and scr.h's types)

use std::ffi::{c_char, c_int, CStr};

use crate::calls::{self, guarded, MAX_FILENAME};

/// `SCR_SUCCESS`.
pub const SCR_SUCCESS: c_int = 0;
/// `SCR_FAILURE`.
pub const SCR_FAILURE: c_int = 1;

fn code(ok: Option<()>) -> c_int {
    if ok.is_some() {
        SCR_SUCCESS
    } else {
        SCR_FAILURE
    }
}

/// A kept/valid answer as a return code: `false` is a failure the call already explained
/// (or, for the complete calls, a process's own `valid = 0`).
fn code_of(answer: Option<bool>) -> c_int {
    if answer == Some(true) {
        SCR_SUCCESS
    } else {
        SCR_FAILURE
    }
}

/// The bytes of a C string argument, or why it cannot be read.
fn c_bytes<'a>(what: &str, p: *const c_char) -> Result<&'a [u8], String> {
    if p.is_null() {
        return Err(format!("the {what} is NULL"));
    }
    // SAFETY: the pointer is not NULL, and the API's contract (scr.h) is that a name
    // argument is a NUL-terminated string that stays valid during the call; it is read
    // only up to its NUL and not kept past the call ('a ends with the caller's use).
    Ok(unsafe { CStr::from_ptr(p) }.to_bytes())
}

/// Copy `bytes` and a NUL into a caller's buffer of `MAX_FILENAME` bytes (the caller
/// checked the length fits).
fn fill(buf: *mut c_char, bytes: &[u8]) {
    debug_assert!(bytes.len() < MAX_FILENAME);
    if buf.is_null() {
        return;
    }
    // SAFETY: scr.h requires `buf` to point to at least SCR_MAX_FILENAME writable bytes;
    // the callers checked `bytes.len() < MAX_FILENAME`, so the bytes and the NUL fit; the
    // source is our own slice, which cannot overlap the caller's buffer.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), bytes.len());
        *buf.add(bytes.len()) = 0;
    }
}

/// Store an `int` answer through a caller's `int*` (refused when NULL).
fn set_int(what: &str, p: *mut c_int, value: c_int) -> Result<(), String> {
    if p.is_null() {
        return Err(format!(
            "the {what} pointer is NULL; pass the address of an int"
        ));
    }
    // SAFETY: not NULL, and scr.h's contract is a pointer to one writable int.
    unsafe { *p = value };
    Ok(())
}

/// Store an answer through a caller's `int*` (refused when NULL).
fn set_flag(flag: *mut c_int, value: bool) -> Result<(), String> {
    set_int("flag", flag, c_int::from(value))
}

/// Initialise the library (collective, after `MPI_Init`).
#[no_mangle]
pub extern "C" fn SCR_Init() -> c_int {
    code(guarded("SCR_Init", calls::init))
}

/// Shut the library down (collective, before `MPI_Finalize`).
#[no_mangle]
pub extern "C" fn SCR_Finalize() -> c_int {
    code(guarded("SCR_Finalize", calls::finalize))
}

/// Set (`KEY=VALUE`), unset (`KEY=`) or query (`KEY`) a configuration value. A query
/// returns a `malloc`ed copy of the value for the caller to `free`, or NULL.
#[no_mangle]
pub extern "C" fn SCR_Config(config: *const c_char) -> *const c_char {
    let value = guarded("SCR_Config", || {
        let text = calls::text(
            "configuration string",
            c_bytes("configuration string", config)?,
        )?;
        calls::config(text)
    });
    match value.flatten() {
        None => std::ptr::null(),
        Some(v) => {
            let Ok(c) = std::ffi::CString::new(v) else {
                return std::ptr::null();
            };
            // SAFETY: strdup copies our NUL-terminated string into memory from malloc,
            // which SCR's contract says the caller releases with free().
            unsafe { libc::strdup(c.as_ptr()) }
        }
    }
}

extern "C" {
    /// The printf form of `SCR_Config`, in C (src/configf.c): stable Rust cannot define a
    /// function taking C varargs.
    fn SCR_Configf(format: *const c_char, ...) -> *const c_char;
}

/// Makes the linker keep `SCR_Configf` in libscr (nothing in Rust calls it); the
/// version script src/exports.map exports it.
#[used]
static KEEP_CONFIGF: unsafe extern "C" fn(*const c_char, ...) -> *const c_char = SCR_Configf;

/// Why the last SCR call on this thread failed, or NULL when it succeeded; valid until
/// the next call. An scr-rs extension (not in scr.h) for language bindings: `SCR_Config`
/// returns NULL both after a set and after a failure.
#[no_mangle]
pub extern "C" fn scr_rs_last_error() -> *const c_char {
    calls::last_error()
}

/// Called by `SCR_Configf` (src/configf.c) when its format could not be expanded.
#[no_mangle]
pub extern "C" fn scr_rs_configf_failed(format: *const c_char) {
    let shown = c_bytes("format", format)
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_default();
    calls::report(
        "SCR_Configf",
        &format!(
            "the format \"{shown}\" could not be expanded (vsnprintf failed or out of memory)"
        ),
    );
}

/// Where to write or read `name` (or `name` itself outside a dataset), into `file`.
#[no_mangle]
pub extern "C" fn SCR_Route_file(name: *const c_char, file: *mut c_char) -> c_int {
    code(guarded("SCR_Route_file", || {
        let name = c_bytes("file name", name)?;
        if file.is_null() {
            return Err(
                "the output buffer is NULL; pass a buffer of SCR_MAX_FILENAME bytes".into(),
            );
        }
        if name.len() >= MAX_FILENAME {
            return Err(format!(
                "the file name is {} bytes, more than SCR_MAX_FILENAME ({MAX_FILENAME}) holds with its NUL",
                name.len()
            ));
        }
        let routed = calls::route_file(name)?;
        fill(file, &routed);
        Ok(())
    }))
}

/// Whether a checkpoint is available (`*flag`), and its name (`name` may be NULL).
#[no_mangle]
pub extern "C" fn SCR_Have_restart(flag: *mut c_int, name: *mut c_char) -> c_int {
    // a failed call leaves "no restart" behind, not what the caller's variables held
    fill(name, b"");
    let _ = set_flag(flag, false);
    code(guarded("SCR_Have_restart", || {
        // collective first: a NULL pointer on one rank must not leave the others waiting
        let found = calls::have_restart()?;
        if flag.is_null() {
            return Err("the flag pointer is NULL; pass the address of an int".into());
        }
        if let Some(n) = &found {
            calls::fits("checkpoint name", n)?;
            fill(name, n.as_bytes());
        } else {
            fill(name, b"");
        }
        set_flag(flag, found.is_some())
    }))
}

/// Begin reading the checkpoint; its name into `name` (may be NULL).
#[no_mangle]
pub extern "C" fn SCR_Start_restart(name: *mut c_char) -> c_int {
    fill(name, b"");
    code(guarded("SCR_Start_restart", || {
        let n = calls::start_restart()?;
        calls::fits("checkpoint name", &n)?;
        fill(name, n.as_bytes());
        Ok(())
    }))
}

/// How many ranks wrote the checkpoint being read, into `*writers` (an scr-rs extension).
#[no_mangle]
pub extern "C" fn SCR_Restart_writers(writers: *mut c_int) -> c_int {
    code(guarded("SCR_Restart_writers", || {
        let n = calls::restart_writers()?;
        set_int("writers", writers, n)
    }))
}

/// How many files old rank `rank` wrote of the checkpoint being read, into `*count` (an
/// scr-rs extension).
#[no_mangle]
pub extern "C" fn SCR_Restart_num_files(rank: c_int, count: *mut c_int) -> c_int {
    code(guarded("SCR_Restart_num_files", || {
        let n = calls::restart_files(rank)?.len();
        let n = c_int::try_from(n).map_err(|_| format!("{n} files, more than an int holds"))?;
        set_int("count", count, n)
    }))
}

/// The path of the `index`th file (from 0) old rank `rank` wrote of the checkpoint being
/// read, into `name` (SCR_MAX_FILENAME bytes), for `SCR_Route_file` (an scr-rs extension).
#[no_mangle]
pub extern "C" fn SCR_Restart_file(rank: c_int, index: c_int, name: *mut c_char) -> c_int {
    fill(name, b"");
    code(guarded("SCR_Restart_file", || {
        if name.is_null() {
            return Err(
                "the output buffer is NULL; pass a buffer of SCR_MAX_FILENAME bytes".into(),
            );
        }
        let files = calls::restart_files(rank)?;
        let file = usize::try_from(index)
            .ok()
            .and_then(|i| files.get(i))
            .ok_or_else(|| {
                format!(
                    "rank {rank} wrote {} file(s) of the checkpoint: index {index} is not among 0..{}",
                    files.len(),
                    files.len()
                )
            })?;
        calls::fits("file name", &String::from_utf8_lossy(file))?;
        fill(name, file);
        Ok(())
    }))
}

/// Finish reading: success only when every process read the checkpoint (`valid`).
#[no_mangle]
pub extern "C" fn SCR_Complete_restart(valid: c_int) -> c_int {
    code_of(guarded("SCR_Complete_restart", || {
        calls::complete_restart(valid != 0)
    }))
}

/// Whether to checkpoint now (`*flag`, the same on every process).
#[no_mangle]
pub extern "C" fn SCR_Need_checkpoint(flag: *mut c_int) -> c_int {
    let _ = set_flag(flag, false);
    code(guarded("SCR_Need_checkpoint", || {
        // collective first: a NULL pointer on one rank must not leave the others waiting
        let need = calls::need_checkpoint()?;
        set_flag(flag, need)
    }))
}

/// Begin a checkpoint (the SCR 1.x/2.x form; named `ckpt.<id>`).
#[no_mangle]
pub extern "C" fn SCR_Start_checkpoint() -> c_int {
    code(guarded("SCR_Start_checkpoint", || {
        calls::start_checkpoint().map(|_| ())
    }))
}

/// Finish a checkpoint begun with `SCR_Start_checkpoint`.
#[no_mangle]
pub extern "C" fn SCR_Complete_checkpoint(valid: c_int) -> c_int {
    code_of(guarded("SCR_Complete_checkpoint", || {
        calls::complete_output(valid != 0)
    }))
}

/// Begin a dataset named `name` (NULL: named after its id) with `SCR_FLAG_*` flags.
#[no_mangle]
pub extern "C" fn SCR_Start_output(name: *const c_char, flags: c_int) -> c_int {
    code(guarded("SCR_Start_output", || {
        let bytes = if name.is_null() {
            None
        } else {
            Some(c_bytes("dataset name", name)?)
        };
        // a name that is not text is refused on every rank alike (agreed in the runtime)
        let refused = bytes.and_then(|b| calls::text("dataset name", b).err());
        let lossy = bytes.map(String::from_utf8_lossy);
        calls::start_output(lossy.as_deref(), flags, refused)
    }))
}

/// Finish the dataset: success only when every process wrote it (`valid`) and it was kept.
#[no_mangle]
pub extern "C" fn SCR_Complete_output(valid: c_int) -> c_int {
    code_of(guarded("SCR_Complete_output", || {
        calls::complete_output(valid != 0)
    }))
}

/// A call taking a dataset name. A name that is not UTF-8 names no dataset: it is passed
/// on (lossily) so the runtime refuses it on every rank alike, not here on one.
fn named(call: &str, name: *const c_char, f: fn(&str) -> Result<(), String>) -> c_int {
    code(guarded(call, || {
        // NULL, too, is refused by the runtime on every rank (it names no dataset)
        let bytes = if name.is_null() {
            &[][..]
        } else {
            c_bytes("dataset name", name)?
        };
        f(&String::from_utf8_lossy(bytes))
    }))
}

/// Make the named checkpoint the one to restart from.
#[no_mangle]
pub extern "C" fn SCR_Current(name: *const c_char) -> c_int {
    named("SCR_Current", name, calls::current)
}

/// Stop offering the named dataset for restart.
#[no_mangle]
pub extern "C" fn SCR_Drop(name: *const c_char) -> c_int {
    named("SCR_Drop", name, calls::drop_dataset)
}

/// Delete the named dataset from cache.
#[no_mangle]
pub extern "C" fn SCR_Delete(name: *const c_char) -> c_int {
    named("SCR_Delete", name, calls::delete)
}

/// The library's version; the caller must not free or change it.
#[no_mangle]
pub extern "C" fn SCR_Get_version() -> *mut c_char {
    // SCR's prototype returns `char*` to a static string; it is never written through
    calls::VERSION.as_ptr().cast_mut()
}

/// Whether the run should stop now (`*flag`, the same on every process).
#[no_mangle]
pub extern "C" fn SCR_Should_exit(flag: *mut c_int) -> c_int {
    let _ = set_flag(flag, false);
    code(guarded("SCR_Should_exit", || {
        // collective first: a NULL pointer on one rank must not leave the others waiting
        let exit = calls::should_exit()?;
        set_flag(flag, exit)
    }))
}

/// What `SCR_Run_resilient` tells the application's body (`SCR_Attempt` in scr.h).
#[repr(C)]
pub struct SCR_Attempt {
    /// 0 for the first run, then one more after each recovery.
    pub number: c_int,
    /// This process's rank on the application communicator.
    pub rank: c_int,
    /// The application communicator's size.
    pub size: c_int,
    /// Ranks the last recovery lost.
    pub lost: c_int,
    /// Spares left.
    pub spares_left: c_int,
    /// Seconds the last recovery took.
    pub recovery_seconds: f64,
}

/// The application's body (`SCR_Resilient_body` in scr.h).
pub type SCR_Resilient_body = Option<
    unsafe extern "C" fn(
        comm: mpi::ffi::MPI_Comm,
        attempt: *const SCR_Attempt,
        arg: *mut std::ffi::c_void,
    ) -> c_int,
>;

/// Online recovery (an scr-rs extension; see scr.h and `scr_host::resilient`): run `body`
/// on the application ranks of `world`, keeping `spares` processes aside, with the library
/// initialised on the application communicator before each run of it and finalized
/// after one that returns `SCR_SUCCESS`; a lost process is replaced by a spare (or, with
/// `shrink`, the job goes on with fewer ranks) and `body` runs again.
#[no_mangle]
// (`arg` is never read here: it is handed back to the application's own `body`)
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub extern "C" fn SCR_Run_resilient(
    world: mpi::ffi::MPI_Comm,
    spares: c_int,
    shrink: c_int,
    body: SCR_Resilient_body,
    arg: *mut std::ffi::c_void,
) -> c_int {
    code(guarded("SCR_Run_resilient", || {
        let body = body.ok_or("the body is NULL; pass the function to run")?;
        run_resilient(world, spares, shrink, |comm, told| {
            // SAFETY: the application's function with scr.h's signature; the
            // communicator and the attempt stay valid during the call, and `arg` is the
            // application's own pointer, passed through.
            unsafe { body(comm, told, arg) }
        })
    }))
}

/// The resilient run behind `SCR_Run_resilient` and Fortran's `SCR_RUN_RESILIENT`:
/// `body` gets the application communicator and the attempt, and returns `SCR_SUCCESS`
/// or another code (a failed run of the body).
pub(crate) fn run_resilient(
    world: mpi::ffi::MPI_Comm,
    spares: c_int,
    shrink: c_int,
    mut body: impl FnMut(mpi::ffi::MPI_Comm, &SCR_Attempt) -> c_int,
) -> Result<(), String> {
    use mpi::raw::{AsRaw as _, FromRaw as _};
    use scr_host::runtime::{Recovered, ScrError};
    let spares = u32::try_from(spares).map_err(|_| format!("spares = {spares}: give 0 or more"))?;
    // SAFETY: reading the handles MPI defines.
    let (null, comm_world) = unsafe { (mpi::ffi::RSMPI_COMM_NULL, mpi::ffi::RSMPI_COMM_WORLD) };
    if world == null {
        return Err("the communicator is MPI_COMM_NULL; pass MPI_COMM_WORLD".into());
    }
    let world = std::mem::ManuallyDrop::new(if world == comm_world {
        mpi::topology::SimpleCommunicator::world()
    } else {
        // SAFETY: the application's intra-communicator, valid during this call (scr.h's
        // contract); wrapped without taking it over (ManuallyDrop: never freed here).
        unsafe { mpi::topology::SimpleCommunicator::from_raw(world) }
    });
    let options = scr_host::resilient::Options {
        spares,
        shrink: shrink != 0,
    };
    let finished = scr_host::resilient::run(&world, &options, |comm, attempt| {
        let recovered = (attempt.number > 0).then(|| Recovered {
            lost: attempt.lost.clone(),
            replaced: attempt.replaced.clone(),
            seconds: attempt.recovery_seconds,
        });
        let told = SCR_Attempt {
            number: attempt.number as c_int,
            rank: attempt.rank as c_int,
            size: attempt.size as c_int,
            lost: attempt.lost.len() as c_int,
            spares_left: attempt.spares_left as c_int,
            recovery_seconds: attempt.recovery_seconds,
        };
        calls::resilient_attempt(comm, recovered, || match body(comm.as_raw(), &told) {
            SCR_SUCCESS => Ok(()),
            rc => Err(format!("the application's body returned {rc}")),
        })
        .map_err(|e| match scr_host::runtime::ulfm::lost() {
            true => ScrError::ProcessFailed(e),
            false => ScrError::Collective(e),
        })
    })
    .map_err(|e| e.to_string())?;
    if let scr_host::resilient::Finished::Spare { .. } = finished {
        tracing::debug!("this process stayed a spare");
    }
    Ok(())
}

/// Whether this process saw a process of the job lost since the last recovery (an scr-rs
/// extension): the application's own MPI calls on the revoked communicator then return
/// without data, so its loops should stop and return from the body.
#[no_mangle]
pub extern "C" fn SCR_Process_lost() -> c_int {
    c_int::from(scr_host::runtime::ulfm::lost())
}

/// Whether this process went through a recovery (an scr-rs extension): after one, end
/// the process without MPI_Finalize once SCR_Run_resilient returned (see scr.h).
#[no_mangle]
pub extern "C" fn SCR_Recovered() -> c_int {
    c_int::from(scr_host::resilient::recoveries() > 0)
}
