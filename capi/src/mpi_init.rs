//! `MPI_Init` and `MPI_Init_thread` (C, and the Fortran `MPI_INIT`, `MPI_INIT_THREAD` of
//! `mpif.h` and `use mpi`) through MPI's profiling interface, so that an application
//! written for plain `MPI_Init` (SCR's own test_api among them) can have its checkpoints
//! protected by a thread beside it (`protect_in_background`), which needs
//! `MPI_THREAD_MULTIPLE`.
//!
//! - **Unchanged unless asked.** When the job's environment does not turn
//!   `protect_in_background` on (`SCR_PROTECT_IN_BACKGROUND`), each function calls its
//!   `PMPI_` twin with the application's own arguments: the program behaves as if libscr
//!   did not define it.
//! - **When asked, MPI_THREAD_MULTIPLE.** Otherwise the level asked of MPI is raised to
//!   `MPI_THREAD_MULTIPLE`, and `provided` says what MPI gave, as the standard lets it
//!   (a level above the one required is allowed, and a program correct at a lower level
//!   is correct at this one). Only the environment is read: MPI_Init runs before the
//!   library's configuration can be (its files are read by rank 0 and broadcast).
//! - **Said at init.** What was asked is noted ([`scr_host::runtime::mpi_init`]), so
//!   init's word on where protection runs names the cause: MPI gave less, or MPI_Init did
//!   not run through libscr (a profiling library linked before it takes the name).
//!
//! The Fortran names call MPI's own Fortran profiling twins (`pmpi_init_`,
//! `pmpi_init_thread_`, found after libscr with `dlsym(RTLD_NEXT)`), which do what
//! that MPI's Fortran init does beyond the C one; `use mpi_f08` is not covered (its
//! MPI_Init reaches MPI by a name of the MPI's own).
//!
//! Every `unsafe` here passes the application's pointers on to MPI unread, or calls a
//! function found by name with the signature the MPI standard gives it.
#![allow(non_snake_case)] // the names are MPI's

use std::ffi::{c_char, c_int, c_void, CStr};

use mpi::ffi;
use scr_host::runtime::mpi_init;

/// `MPI_THREAD_MULTIPLE` of the MPI libscr was built against.
fn multiple() -> c_int {
    // SAFETY: RSMPI_THREAD_MULTIPLE is an initialised constant of rsmpi's C shim (a
    // `const int` copied from mpi.h), never written.
    unsafe { ffi::RSMPI_THREAD_MULTIPLE }
}

/// The level to ask MPI for when the application requires `required`: at least
/// MPI_THREAD_MULTIPLE when the environment asks for background protection. Notes what
/// was done either way.
fn level_for(required: c_int) -> c_int {
    let raise = mpi_init::wants_multiple() && required < multiple();
    mpi_init::note(mpi_init::wants_multiple());
    if raise {
        multiple()
    } else {
        required
    }
}

/// `MPI_Init`: `PMPI_Init`, or `PMPI_Init_thread` with MPI_THREAD_MULTIPLE when the
/// environment asks for background protection.
///
/// # Safety
/// As `MPI_Init`: `argc` and `argv` are NULL or the program's `&argc` and `&argv`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Init(argc: *mut c_int, argv: *mut *mut *mut c_char) -> c_int {
    if mpi_init::wants_multiple() {
        mpi_init::note(true);
        let mut provided: c_int = 0;
        // SAFETY: the caller's argc/argv go to MPI as the caller gave them (MPI_Init's
        // contract is PMPI_Init_thread's); `provided` is a local MPI writes once.
        return unsafe { ffi::PMPI_Init_thread(argc, argv, multiple(), &mut provided) };
    }
    mpi_init::note(false);
    // SAFETY: the caller's arguments, passed on unread, under the same contract.
    unsafe { ffi::PMPI_Init(argc, argv) }
}

/// `MPI_Init_thread`: `PMPI_Init_thread` with `required` raised to MPI_THREAD_MULTIPLE
/// when the environment asks for background protection.
///
/// # Safety
/// As `MPI_Init_thread`: `argc`/`argv` as for `MPI_Init`, `provided` writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Init_thread(
    argc: *mut c_int,
    argv: *mut *mut *mut c_char,
    required: c_int,
    provided: *mut c_int,
) -> c_int {
    let level = level_for(required);
    // SAFETY: the caller's pointers, passed on unread under MPI_Init_thread's contract.
    unsafe { ffi::PMPI_Init_thread(argc, argv, level, provided) }
}

/// MPI's own Fortran function `name` (NUL-terminated), found after libscr.
fn next_fortran(name: &CStr) -> *mut c_void {
    // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name only looks the name up.
    unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) }
}

/// Fortran `MPI_INIT(IERROR)`, whose MPI twin (MPI's own Fortran PMPI_INIT under the same
/// compiler's name) is `twin`.
fn fortran_init(ierror: *mut c_int, twin: &CStr, thread_twin: &CStr) {
    if mpi_init::wants_multiple() {
        let mut provided: c_int = 0;
        fortran_init_thread(&multiple(), &mut provided, ierror, thread_twin);
        return;
    }
    mpi_init::note(false);
    let f = next_fortran(twin);
    if f.is_null() {
        // SAFETY: MPI allows NULL argc/argv (what MPI's Fortran MPI_INIT passes).
        let rc = unsafe { ffi::PMPI_Init(std::ptr::null_mut(), std::ptr::null_mut()) };
        set(ierror, rc);
        return;
    }
    // SAFETY: the twin is MPI's Fortran PMPI_INIT(IERROR): one INTEGER by reference.
    let pmpi_init: unsafe extern "C" fn(*mut c_int) = unsafe { std::mem::transmute(f) };
    // SAFETY: the caller's INTEGER, passed on.
    unsafe { pmpi_init(ierror) };
}

/// Fortran `MPI_INIT_THREAD(REQUIRED, PROVIDED, IERROR)` with MPI's twin `twin`.
fn fortran_init_thread(
    required: *const c_int,
    provided: *mut c_int,
    ierror: *mut c_int,
    twin: &CStr,
) {
    let asked = if required.is_null() {
        0
    } else {
        // SAFETY: a non-NULL REQUIRED is the caller's INTEGER, read once.
        unsafe { *required }
    };
    let level = level_for(asked);
    let f = next_fortran(twin);
    if f.is_null() {
        // SAFETY: NULL argc/argv are allowed; `provided` is the caller's INTEGER.
        let rc = unsafe {
            ffi::PMPI_Init_thread(std::ptr::null_mut(), std::ptr::null_mut(), level, provided)
        };
        set(ierror, rc);
        return;
    }
    // SAFETY: the twin is MPI's Fortran PMPI_INIT_THREAD(REQUIRED, PROVIDED, IERROR):
    // three INTEGERs by reference.
    let pmpi_init_thread: unsafe extern "C" fn(*const c_int, *mut c_int, *mut c_int) =
        unsafe { std::mem::transmute(f) };
    // SAFETY: `level` is a local; the others are the caller's.
    unsafe { pmpi_init_thread(&level, provided, ierror) };
}

/// The Fortran names of MPI_INIT and MPI_INIT_THREAD under each compiler's mangling
/// (gfortran's and Intel's `mpi_init_`, `-fsecond-underscore`'s `mpi_init__`, upper
/// case, none), each passing on to MPI's twin of the same mangling.
macro_rules! fortran_names {
    ($($init:ident, $init_thread:ident, $twin:literal, $thread_twin:literal;)*) => {$(
        /// Fortran `MPI_INIT(IERROR)` (see the module doc).
        ///
        /// # Safety
        /// As MPI_INIT: `ierror` is the caller's INTEGER.
        #[no_mangle]
        pub unsafe extern "C" fn $init(ierror: *mut c_int) {
            fortran_init(ierror, $twin, $thread_twin);
        }

        /// Fortran `MPI_INIT_THREAD(REQUIRED, PROVIDED, IERROR)` (see the module doc).
        ///
        /// # Safety
        /// As MPI_INIT_THREAD: the three are the caller's INTEGERs.
        #[no_mangle]
        pub unsafe extern "C" fn $init_thread(
            required: *const c_int,
            provided: *mut c_int,
            ierror: *mut c_int,
        ) {
            fortran_init_thread(required, provided, ierror, $thread_twin);
        }
    )*};
}

fortran_names! {
    mpi_init_, mpi_init_thread_, c"pmpi_init_", c"pmpi_init_thread_";
    mpi_init__, mpi_init_thread__, c"pmpi_init__", c"pmpi_init_thread__";
    MPI_INIT, MPI_INIT_THREAD, c"PMPI_INIT", c"PMPI_INIT_THREAD";
    mpi_init, mpi_init_thread, c"pmpi_init", c"pmpi_init_thread";
}

/// Store a C return code in a Fortran IERROR (absent: NULL).
fn set(ierror: *mut c_int, rc: c_int) {
    if !ierror.is_null() {
        // SAFETY: a non-NULL IERROR is the caller's writable INTEGER.
        unsafe { *ierror = rc };
    }
}
