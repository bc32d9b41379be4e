//! Which thread level libscr's `MPI_Init` and `MPI_Init_thread` ask MPI for (the
//! functions themselves are C, `src/mpi_init.c`: weak definitions that pass each call on
//! to the next definition of its name, a profiling tool's or MPI's own), so that an
//! application written for plain `MPI_Init` (SCR's own test_api among them) can have its
//! checkpoints protected by a thread beside it (`protect_in_background`), which needs
//! `MPI_THREAD_MULTIPLE`.
//!
//! - **Unchanged unless asked.** When the job's environment does not turn
//!   `protect_in_background` on (`SCR_PROTECT_IN_BACKGROUND`), the application's own
//!   call goes on as it was made: the program behaves as if libscr did not define it.
//! - **When asked, MPI_THREAD_MULTIPLE.** Otherwise the level asked of MPI is raised to
//!   `MPI_THREAD_MULTIPLE`, and `provided` says what MPI gave, as the standard lets it
//!   (a level above the one required is allowed, and a program correct at a lower level
//!   is correct at this one). Only the environment is read: MPI_Init runs before the
//!   library's configuration can be (its files are read by rank 0 and broadcast).
//! - **Said at init.** What was asked is noted ([`scr_host::runtime::mpi_init`]), so
//!   init's word on where protection runs names the cause: MPI gave less, or MPI_Init did
//!   not run through libscr (a library defining MPI_Init came first).
//!
//! Fortran is covered under gfortran's and Intel's names, `-fsecond-underscore`'s, upper
//! case, and Open MPI's `use mpi_f08` procedures (`mpi_init_f08_`).

use std::ffi::c_int;

use scr_host::runtime::mpi_init;

/// `MPI_THREAD_MULTIPLE` of the MPI libscr was built against.
fn multiple() -> c_int {
    // SAFETY: RSMPI_THREAD_MULTIPLE is an initialised constant of rsmpi's C shim (a
    // `const int` copied from mpi.h), never written.
    unsafe { mpi::ffi::RSMPI_THREAD_MULTIPLE }
}

/// The level `mpi_init.c` asks MPI for when the application requires `required`
/// (`plain`: it called MPI_Init, which has none): at least MPI_THREAD_MULTIPLE when the
/// environment asks for background protection; for `plain`, -1 when the call is to go
/// on as MPI_Init. Notes what was done. Panics cannot happen here (no indexing, no
/// unwrap), and none may cross into C.
#[no_mangle]
pub extern "C" fn scr_rs_mpi_init_level(required: c_int, plain: c_int) -> c_int {
    let raise = mpi_init::wants_multiple();
    mpi_init::note(raise);
    match (raise, plain != 0) {
        (false, true) => -1,
        (false, false) => required,
        (true, _) => required.max(multiple()),
    }
}
