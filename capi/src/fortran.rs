//! SCR's Fortran interface (`include/scrf.h`): `CALL SCR_INIT(IERROR)`,
//! `CALL SCR_ROUTE_FILE(NAME, FILE, IERROR)`, ... each with a trailing `INTEGER IERROR`
//! that receives `SCR_SUCCESS` (0) or `SCR_FAILURE` (1).
//!
//! The calling convention is gfortran's (and that of most Unix Fortran compilers):
//! - the link name is the lower-case name with one trailing underscore (`scr_init_`);
//!   the same functions are also exported with two (`scr_init__`, for `-ff2c` /
//!   `-fsecond-underscore` builds and g77-era code) and in upper case without
//!   underscore (`SCR_INIT`), which costs one forwarding function each;
//! - every argument is passed by reference (`INTEGER` is a C `int`);
//! - a `CHARACTER` argument is a pointer to its bytes plus a hidden length appended after
//!   all the other arguments, in the order of the `CHARACTER` arguments. The length is a
//!   `size_t` since gfortran 8 (also Intel's and flang's on 64-bit Linux); gfortran 7 and
//!   older passed an `int`, which is not supported (a length beyond `i32::MAX` is refused
//!   with that hint rather than read).
//!
//! Fortran strings are blank-padded, not NUL-terminated: an input has its trailing
//! blanks removed; an output is copied and blank-padded to the variable's declared
//! length, and a value longer than the variable is a failure that says the length
//! needed. Output arguments are blanked before each call, so after a failure they hold
//! blanks, never a stale or truncated name.
//!
//! Each call converts its arguments and runs [`crate::calls`] under [`guarded`], like
//! the C functions of `ffi`: no panic reaches Fortran, every failure is printed with
//! the rank and the call's Fortran name. All `unsafe` of the Fortran bindings is in the
//! small helpers at the top of this module.
#![allow(non_snake_case)] // the upper-case link names are the Fortran compilers'

use std::ffi::{c_char, c_int};

use crate::calls::{self, guarded, MAX_FILENAME};
use crate::ffi::{SCR_FAILURE, SCR_SUCCESS};

/// The hidden length of a `CHARACTER` argument (gfortran >= 8: `size_t`).
type CharLen = usize;

/// Longest `CHARACTER` length believed: a larger one is a caller built with the old
/// `int` length convention (or a corrupt call), and reading it would run off the buffer.
const MAX_CHAR_LEN: CharLen = i32::MAX as CharLen;

/// A Fortran `CHARACTER` input argument without its trailing blanks, copied (so that
/// an output argument aliasing it can be written afterwards).
fn text_in(what: &str, p: *const c_char, len: CharLen) -> Result<Vec<u8>, String> {
    if len > MAX_CHAR_LEN {
        return Err(format!(
            "the {what}'s hidden length is {len}: the program was built with a Fortran compiler passing CHARACTER lengths as int (gfortran 7 or older); rebuild it with gfortran 8 or newer"
        ));
    }
    if len == 0 {
        return Ok(Vec::new());
    }
    if p.is_null() {
        return Err(format!("the {what} has no address (NULL)"));
    }
    // SAFETY: a Fortran caller passes the address of a CHARACTER variable or constant
    // and its declared length `len` (checked plausible above), all readable for the
    // call; the slice lives only until it is copied below.
    let all = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) };
    let end = all.iter().rposition(|&b| b != b' ').map_or(0, |i| i + 1);
    let text = &all[..end];
    if text.contains(&0) {
        return Err(format!(
            "the {what} contains a NUL character (CHAR(0)); pass the text alone, blank-padded"
        ));
    }
    Ok(text.to_vec())
}

/// A Fortran input as text (names and configuration strings are text).
fn str_in(what: &str, p: *const c_char, len: CharLen) -> Result<String, String> {
    String::from_utf8(text_in(what, p, len)?)
        .map_err(|e| format!("the {what} is not UTF-8 text ({})", e.utf8_error()))
}

/// Copy `value` into a Fortran `CHARACTER` output argument of declared length `len`,
/// blank-padded; a value that does not fit blanks the variable and fails with the
/// length needed.
fn text_out(what: &str, p: *mut c_char, len: CharLen, value: &[u8]) -> Result<(), String> {
    if len > MAX_CHAR_LEN {
        return Err(format!(
            "the {what}'s hidden length is {len}: the program was built with a Fortran compiler passing CHARACTER lengths as int (gfortran 7 or older); rebuild it with gfortran 8 or newer"
        ));
    }
    if len > 0 && p.is_null() {
        return Err(format!("the {what} has no address (NULL)"));
    }
    let n = if value.len() <= len { value.len() } else { 0 };
    if len > 0 {
        let buf = p.cast::<u8>();
        // SAFETY: Fortran passes a CHARACTER variable's address and its writable length
        // `len` (checked plausible above); n <= len keeps both writes inside it, and
        // `value` is our own copy (see `text_in`), so the copy cannot overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(value.as_ptr(), buf, n);
            std::ptr::write_bytes(buf.add(n), b' ', len - n);
        }
    }
    if value.len() > len {
        return Err(format!(
            "the {what} `{}` is {} characters, but the CHARACTER variable passed holds {len}; declare it CHARACTER(LEN={}) or longer (CHARACTER(LEN=SCR_MAX_FILENAME) holds any name)",
            String::from_utf8_lossy(value),
            value.len(),
            value.len().max(1)
        ));
    }
    Ok(())
}

/// Blank a `CHARACTER` output argument before the call, so that it holds no stale
/// value when the call fails.
fn clear(what: &str, p: *mut c_char, len: CharLen) -> Result<(), String> {
    text_out(what, p, len, b"")
}

/// Read an `INTEGER` input argument.
fn int_in(what: &str, p: *const c_int) -> Result<c_int, String> {
    if p.is_null() {
        return Err(format!("the {what} has no address (NULL)"));
    }
    // SAFETY: not NULL, and a Fortran caller passes INTEGER arguments by reference: the
    // address of one readable default INTEGER (a C int).
    Ok(unsafe { *p })
}

/// Store into an `INTEGER` output argument.
fn int_out(what: &str, p: *mut c_int, value: c_int) -> Result<(), String> {
    if p.is_null() {
        return Err(format!("the {what} has no address (NULL)"));
    }
    // SAFETY: not NULL, and a Fortran caller passes INTEGER arguments by reference: the
    // address of one writable default INTEGER (a C int).
    unsafe { *p = value };
    Ok(())
}

/// Store the call's outcome in `IERROR`.
fn set_ierror(call: &str, ierror: *mut c_int, ok: bool) {
    let code = if ok { SCR_SUCCESS } else { SCR_FAILURE };
    if int_out("IERROR argument", ierror, code).is_err() {
        calls::report(
            call,
            "the IERROR argument has no address; pass an INTEGER variable as the last argument",
        );
    }
}

/// A Fortran application's body for `SCR_RUN_RESILIENT`: `SUBROUTINE BODY(COMM,
/// ATTEMPT, IERROR)`, every argument an `INTEGER` by reference (a dummy procedure is
/// passed as the address of its code).
type FortranBody =
    Option<unsafe extern "C" fn(comm: *const c_int, attempt: *const c_int, ierror: *mut c_int)>;

/// The entries of the body's `ATTEMPT` array (scrf.h's `SCR_ATTEMPT_LEN`).
const ATTEMPT_LEN: usize = 5;

/// The C handle of a Fortran communicator handle (`MPI_Comm_f2c`).
fn comm_f2c(handle: c_int) -> mpi::ffi::MPI_Comm {
    // SAFETY: MPI_Comm_f2c takes any integer: one that names no communicator gives
    // MPI_COMM_NULL (or an invalid handle MPI itself reports on use), never undefined
    // behaviour here.
    unsafe { mpi::ffi::RSMPI_Comm_f2c(handle) }
}

/// Call the application's Fortran `body` with the application communicator and the
/// attempt; its `IERROR` (`SCR_FAILURE` unless it set one).
fn call_body(
    body: unsafe extern "C" fn(*const c_int, *const c_int, *mut c_int),
    comm: mpi::ffi::MPI_Comm,
    attempt: &[c_int; ATTEMPT_LEN],
) -> c_int {
    // SAFETY: `comm` is the live communicator the resilient run made; MPI_Comm_c2f
    // gives its Fortran handle.
    let handle = unsafe { mpi::ffi::RSMPI_Comm_c2f(comm) };
    let mut ierror = SCR_FAILURE;
    // SAFETY: the application's subroutine of scrf.h's form, its three INTEGER
    // arguments passed by reference: the handle and the attempt live through the call,
    // and IERROR is a writable int.
    unsafe { body(&handle, attempt.as_ptr(), &mut ierror) };
    ierror
}

/// Run one call under [`guarded`] and store its outcome (`Ok(true)`: success) in `IERROR`.
fn run(call: &str, ierror: *mut c_int, f: impl FnOnce() -> Result<bool, String>) {
    let ok = guarded(call, f) == Some(true);
    set_ierror(call, ierror, ok);
}

/// Export `imp` under each Fortran link name given (same arguments, forwarded): one
/// trailing underscore (gfortran), two (g77, `-fsecond-underscore`) and upper case. Not
/// the plain lower-case names (IBM XL's `-qnoextname`): libncurses exports `scr_init`,
/// `scr_dump`, ..., and a program linking both would bind one library's function to the
/// other's.
macro_rules! export {
    ($imp:ident $args:tt as $($name:ident),+) => {
        $( export_one!($imp $name $args); )+
    };
}

/// One exported link name of [`export`].
macro_rules! export_one {
    ($imp:ident $name:ident ($($arg:ident : $ty:ty),*)) => {
        #[doc = concat!("Fortran link name of `", stringify!($imp), "`.")]
        #[no_mangle]
        pub extern "C" fn $name($($arg: $ty),*) {
            $imp($($arg),*)
        }
    };
}

// ---- Init, finalize, exit ----

/// `SCR_INIT(IERROR)`: collective, after `MPI_INIT`.
fn init(ierror: *mut c_int) {
    run("SCR_INIT", ierror, || calls::init().map(|()| true));
}
export!(init(ierror: *mut c_int) as scr_init_, scr_init__, SCR_INIT);

/// `SCR_FINALIZE(IERROR)`: collective, before `MPI_FINALIZE`.
fn finalize(ierror: *mut c_int) {
    run("SCR_FINALIZE", ierror, || calls::finalize().map(|()| true));
}
export!(finalize(ierror: *mut c_int) as scr_finalize_, scr_finalize__, SCR_FINALIZE);

/// `SCR_SHOULD_EXIT(FLAG, IERROR)`: `FLAG` 1 when the run should stop now.
fn should_exit(flag: *mut c_int, ierror: *mut c_int) {
    run("SCR_SHOULD_EXIT", ierror, || {
        int_out("FLAG argument", flag, 0)?;
        let exit = calls::should_exit()?;
        int_out("FLAG argument", flag, c_int::from(exit))?;
        Ok(true)
    });
}
export!(should_exit(flag: *mut c_int, ierror: *mut c_int)
    as scr_should_exit_, scr_should_exit__, SCR_SHOULD_EXIT);

// ---- Configuration ----

/// `SCR_CONFIG(CONFIG, VAL, IERROR)`: `KEY=VALUE` sets and `KEY=` unsets (before
/// `SCR_INIT`; `VAL` is blanked), `KEY` queries: `VAL` receives the value in force, or
/// blanks when the key has none.
fn config(
    config: *const c_char,
    val: *mut c_char,
    ierror: *mut c_int,
    config_len: CharLen,
    val_len: CharLen,
) {
    run("SCR_CONFIG", ierror, || {
        // CONFIG is read before VAL is blanked: a caller may pass one variable for both
        let text = str_in("CONFIG argument", config, config_len);
        clear("VAL argument", val, val_len)?;
        let text = text?;
        let value = calls::config(&text)?;
        text_out(
            "value",
            val,
            val_len,
            value.as_deref().unwrap_or("").as_bytes(),
        )?;
        Ok(true)
    });
}
export!(config(
    cfg: *const c_char,
    val: *mut c_char,
    ierror: *mut c_int,
    config_len: CharLen,
    val_len: CharLen
) as scr_config_, scr_config__, SCR_CONFIG);

// ---- File routing ----

/// `SCR_ROUTE_FILE(NAME, FILE, IERROR)`: where to write or read `NAME`; outside a
/// dataset, `NAME` itself.
fn route_file(
    name: *const c_char,
    file: *mut c_char,
    ierror: *mut c_int,
    name_len: CharLen,
    file_len: CharLen,
) {
    run("SCR_ROUTE_FILE", ierror, || {
        let name = text_in("NAME argument", name, name_len)?;
        clear("FILE argument", file, file_len)?;
        if name.is_empty() {
            return Err("the NAME argument is blank; pass the file's name".into());
        }
        if name.len() >= MAX_FILENAME {
            return Err(format!(
                "the file name is {} characters, more than SCR_MAX_FILENAME ({MAX_FILENAME}) allows (with C's terminating NUL)",
                name.len()
            ));
        }
        let routed = calls::route_file(&name)?;
        text_out("routed path", file, file_len, &routed)?;
        Ok(true)
    });
}
export!(route_file(
    name: *const c_char,
    file: *mut c_char,
    ierror: *mut c_int,
    name_len: CharLen,
    file_len: CharLen
) as scr_route_file_, scr_route_file__, SCR_ROUTE_FILE);

// ---- Restart ----

/// `SCR_HAVE_RESTART(FLAG, NAME, IERROR)`: `FLAG` 1 and the checkpoint's name in
/// `NAME` when one is available, else 0 and blanks. Collective; the first call fetches.
fn have_restart(flag: *mut c_int, name: *mut c_char, ierror: *mut c_int, name_len: CharLen) {
    run("SCR_HAVE_RESTART", ierror, || {
        int_out("FLAG argument", flag, 0)?;
        clear("NAME argument", name, name_len)?;
        let found = calls::have_restart()?;
        int_out("FLAG argument", flag, c_int::from(found.is_some()))?;
        text_out(
            "checkpoint name",
            name,
            name_len,
            found.as_deref().unwrap_or("").as_bytes(),
        )?;
        Ok(true)
    });
}
export!(have_restart(
    flag: *mut c_int,
    name: *mut c_char,
    ierror: *mut c_int,
    name_len: CharLen
) as scr_have_restart_, scr_have_restart__, SCR_HAVE_RESTART);

/// `SCR_START_RESTART(NAME, IERROR)`: begin reading; the checkpoint's name into `NAME`.
fn start_restart(name: *mut c_char, ierror: *mut c_int, name_len: CharLen) {
    run("SCR_START_RESTART", ierror, || {
        clear("NAME argument", name, name_len)?;
        let n = calls::start_restart()?;
        text_out("checkpoint name", name, name_len, n.as_bytes()).map_err(|m| {
            format!("{m} (the restart has started: call SCR_COMPLETE_RESTART as usual)")
        })?;
        Ok(true)
    });
}
export!(start_restart(name: *mut c_char, ierror: *mut c_int, name_len: CharLen)
    as scr_start_restart_, scr_start_restart__, SCR_START_RESTART);

/// `SCR_COMPLETE_RESTART(VALID, IERROR)`: success only when every process read it.
fn complete_restart(valid: *const c_int, ierror: *mut c_int) {
    run("SCR_COMPLETE_RESTART", ierror, || {
        calls::complete_restart(int_in("VALID argument", valid)? != 0)
    });
}
export!(complete_restart(valid: *const c_int, ierror: *mut c_int)
    as scr_complete_restart_, scr_complete_restart__, SCR_COMPLETE_RESTART);

/// `SCR_RESTART_WRITERS(WRITERS, IERROR)`: how many ranks wrote the checkpoint being
/// read (an scr-rs extension).
fn restart_writers(writers: *mut c_int, ierror: *mut c_int) {
    run("SCR_RESTART_WRITERS", ierror, || {
        int_out("WRITERS argument", writers, 0)?;
        int_out("WRITERS argument", writers, calls::restart_writers()?)?;
        Ok(true)
    });
}
export!(restart_writers(writers: *mut c_int, ierror: *mut c_int)
    as scr_restart_writers_, scr_restart_writers__, SCR_RESTART_WRITERS);

/// `SCR_RESTART_NUM_FILES(RANK, COUNT, IERROR)`: how many files old rank `RANK` wrote of
/// the checkpoint being read (an scr-rs extension).
fn restart_num_files(rank: *const c_int, count: *mut c_int, ierror: *mut c_int) {
    run("SCR_RESTART_NUM_FILES", ierror, || {
        int_out("COUNT argument", count, 0)?;
        let n = calls::restart_files(int_in("RANK argument", rank)?)?.len();
        let n = c_int::try_from(n).map_err(|_| format!("{n} files, more than an INTEGER holds"))?;
        int_out("COUNT argument", count, n)?;
        Ok(true)
    });
}
export!(restart_num_files(rank: *const c_int, count: *mut c_int, ierror: *mut c_int)
    as scr_restart_num_files_, scr_restart_num_files__, SCR_RESTART_NUM_FILES);

/// `SCR_RESTART_FILE(RANK, INDEX, NAME, IERROR)`: the path of the `INDEX`th file (from
/// 1, as Fortran counts) old rank `RANK` wrote, for `SCR_ROUTE_FILE` (an scr-rs
/// extension).
fn restart_file(
    rank: *const c_int,
    index: *const c_int,
    name: *mut c_char,
    ierror: *mut c_int,
    name_len: CharLen,
) {
    run("SCR_RESTART_FILE", ierror, || {
        clear("NAME argument", name, name_len)?;
        let rank = int_in("RANK argument", rank)?;
        let index = int_in("INDEX argument", index)?;
        let files = calls::restart_files(rank)?;
        let file = usize::try_from(index)
            .ok()
            .and_then(|i| i.checked_sub(1))
            .and_then(|i| files.get(i))
            .ok_or_else(|| {
                format!(
                    "rank {rank} wrote {} file(s) of the checkpoint: INDEX {index} is not among 1..{}",
                    files.len(),
                    files.len()
                )
            })?;
        text_out("file name", name, name_len, file)?;
        Ok(true)
    });
}
export!(restart_file(
    rank: *const c_int,
    index: *const c_int,
    name: *mut c_char,
    ierror: *mut c_int,
    name_len: CharLen
) as scr_restart_file_, scr_restart_file__, SCR_RESTART_FILE);

// ---- Checkpoint and output ----

/// `SCR_NEED_CHECKPOINT(FLAG, IERROR)`: `FLAG` 1 when a checkpoint should be taken now.
fn need_checkpoint(flag: *mut c_int, ierror: *mut c_int) {
    run("SCR_NEED_CHECKPOINT", ierror, || {
        int_out("FLAG argument", flag, 0)?;
        let need = calls::need_checkpoint()?;
        int_out("FLAG argument", flag, c_int::from(need))?;
        Ok(true)
    });
}
export!(need_checkpoint(flag: *mut c_int, ierror: *mut c_int)
    as scr_need_checkpoint_, scr_need_checkpoint__, SCR_NEED_CHECKPOINT);

/// `SCR_START_CHECKPOINT(IERROR)`: the SCR 1.x/2.x form (named `ckpt.<id>`).
fn start_checkpoint(ierror: *mut c_int) {
    run("SCR_START_CHECKPOINT", ierror, || {
        calls::start_checkpoint().map(|_| true)
    });
}
export!(start_checkpoint(ierror: *mut c_int)
    as scr_start_checkpoint_, scr_start_checkpoint__, SCR_START_CHECKPOINT);

/// `SCR_COMPLETE_CHECKPOINT(VALID, IERROR)`.
fn complete_checkpoint(valid: *const c_int, ierror: *mut c_int) {
    run("SCR_COMPLETE_CHECKPOINT", ierror, || {
        calls::complete_output(int_in("VALID argument", valid)? != 0)
    });
}
export!(complete_checkpoint(valid: *const c_int, ierror: *mut c_int)
    as scr_complete_checkpoint_, scr_complete_checkpoint__, SCR_COMPLETE_CHECKPOINT);

/// `SCR_START_OUTPUT(NAME, FLAGS, IERROR)`: `FLAGS` a sum of `SCR_FLAG_*`. A blank
/// `NAME` (Fortran has no NULL) names the dataset after its id, as C's NULL does.
fn start_output(name: *const c_char, flags: *const c_int, ierror: *mut c_int, name_len: CharLen) {
    run("SCR_START_OUTPUT", ierror, || {
        // collective: a NAME refused here is refused on every rank (agreed in the runtime)
        let (name, refused) = match str_in("NAME argument", name, name_len) {
            Ok(n) => (n, None),
            Err(e) => (String::new(), Some(e)),
        };
        let flags = int_in("FLAGS argument", flags)?;
        calls::start_output((!name.is_empty()).then_some(name.as_str()), flags, refused)?;
        Ok(true)
    });
}
export!(start_output(
    name: *const c_char,
    flags: *const c_int,
    ierror: *mut c_int,
    name_len: CharLen
) as scr_start_output_, scr_start_output__, SCR_START_OUTPUT);

/// `SCR_COMPLETE_OUTPUT(VALID, IERROR)`: success only when every process wrote its
/// files (`VALID` 1 everywhere) and the dataset was kept.
fn complete_output(valid: *const c_int, ierror: *mut c_int) {
    run("SCR_COMPLETE_OUTPUT", ierror, || {
        calls::complete_output(int_in("VALID argument", valid)? != 0)
    });
}
export!(complete_output(valid: *const c_int, ierror: *mut c_int)
    as scr_complete_output_, scr_complete_output__, SCR_COMPLETE_OUTPUT);

// ---- Dataset management ----

/// A call taking one dataset name.
fn named(
    call: &str,
    name: *const c_char,
    ierror: *mut c_int,
    name_len: CharLen,
    f: fn(&str) -> Result<(), String>,
) {
    run(call, ierror, || {
        // collective: a blank or unreadable NAME names no dataset, which the runtime
        // refuses on every rank alike (a refusal here would leave the others waiting)
        let name = str_in("NAME argument", name, name_len).unwrap_or_default();
        f(&name)?;
        Ok(true)
    });
}

/// `SCR_CURRENT(NAME, IERROR)`: restart from the named checkpoint.
fn current(name: *const c_char, ierror: *mut c_int, name_len: CharLen) {
    named("SCR_CURRENT", name, ierror, name_len, calls::current);
}
export!(current(name: *const c_char, ierror: *mut c_int, name_len: CharLen)
    as scr_current_, scr_current__, SCR_CURRENT);

/// `SCR_DROP(NAME, IERROR)`: stop offering the named dataset for restart.
fn drop_dataset(name: *const c_char, ierror: *mut c_int, name_len: CharLen) {
    named("SCR_DROP", name, ierror, name_len, calls::drop_dataset);
}
export!(drop_dataset(name: *const c_char, ierror: *mut c_int, name_len: CharLen)
    as scr_drop_, scr_drop__, SCR_DROP);

/// `SCR_DELETE(NAME, IERROR)`: delete the named dataset.
fn delete(name: *const c_char, ierror: *mut c_int, name_len: CharLen) {
    named("SCR_DELETE", name, ierror, name_len, calls::delete);
}
export!(delete(name: *const c_char, ierror: *mut c_int, name_len: CharLen)
    as scr_delete_, scr_delete__, SCR_DELETE);

// ---- Online recovery (scr-rs extensions) ----

/// `SCR_RUN_RESILIENT(COMM, SPARES, SHRINK, BODY, IERROR)`: `SCR_Run_resilient` for
/// Fortran. `COMM` is a Fortran communicator handle (`MPI_COMM_WORLD`, or
/// `comm%MPI_VAL` with `mpi_f08`); `BODY(COMM, ATTEMPT, IERROR)` gets the application
/// communicator's handle and `ATTEMPT(SCR_ATTEMPT_LEN)`, and sets `IERROR` to
/// `SCR_SUCCESS` when it finished.
fn run_resilient(
    comm: *const c_int,
    spares: *const c_int,
    shrink: *const c_int,
    body: FortranBody,
    ierror: *mut c_int,
) {
    run("SCR_RUN_RESILIENT", ierror, || {
        let world = comm_f2c(int_in("COMM argument", comm)?);
        let spares = int_in("SPARES argument", spares)?;
        let shrink = int_in("SHRINK argument", shrink)?;
        let body = body.ok_or("the BODY argument has no address; pass an EXTERNAL subroutine")?;
        crate::ffi::run_resilient(world, spares, shrink, |comm, told| {
            let attempt = [
                told.number,
                told.rank,
                told.size,
                told.lost,
                told.spares_left,
            ];
            call_body(body, comm, &attempt)
        })?;
        Ok(true)
    });
}
export!(run_resilient(
    comm: *const c_int,
    spares: *const c_int,
    shrink: *const c_int,
    body: FortranBody,
    ierror: *mut c_int
) as scr_run_resilient_, scr_run_resilient__, SCR_RUN_RESILIENT);

/// `SCR_PROCESS_LOST(FLAG, IERROR)`: `FLAG` 1 when this process saw a process of the job
/// lost since the last recovery (its MPI calls on the revoked communicator then fail:
/// the body should return).
fn process_lost(flag: *mut c_int, ierror: *mut c_int) {
    run("SCR_PROCESS_LOST", ierror, || {
        int_out("FLAG argument", flag, crate::ffi::SCR_Process_lost())?;
        Ok(true)
    });
}
export!(process_lost(flag: *mut c_int, ierror: *mut c_int)
    as scr_process_lost_, scr_process_lost__, SCR_PROCESS_LOST);

/// `SCR_RECOVERED(FLAG, IERROR)`: `FLAG` 1 when this process went through a recovery:
/// it then ends without `MPI_FINALIZE` after `SCR_RUN_RESILIENT` returned.
fn recovered(flag: *mut c_int, ierror: *mut c_int) {
    run("SCR_RECOVERED", ierror, || {
        int_out("FLAG argument", flag, crate::ffi::SCR_Recovered())?;
        Ok(true)
    });
}
export!(recovered(flag: *mut c_int, ierror: *mut c_int)
    as scr_recovered_, scr_recovered__, SCR_RECOVERED);

// ---- Environment ----

/// `SCR_GET_VERSION(VERSION, IERROR)`: the library's version, blank-padded.
fn get_version(version: *mut c_char, ierror: *mut c_int, version_len: CharLen) {
    run("SCR_GET_VERSION", ierror, || {
        text_out("version", version, version_len, calls::VERSION.to_bytes())?;
        Ok(true)
    });
}
export!(get_version(version: *mut c_char, ierror: *mut c_int, version_len: CharLen)
    as scr_get_version_, scr_get_version__, SCR_GET_VERSION);
