//! Ending the process from inside the library, as `halt_exit` asks: the one place the
//! runtime finalizes MPI itself (the application owns MPI otherwise), hence the
//! `unsafe` below.
#![allow(unsafe_code)]

use std::io::Write as _;

/// Finalize MPI and exit the process with `code`. Called on every rank alike, after the
/// runtime's own collective `finalize`, so that the job ends cleanly (mpiexec reports a
/// process that exits without MPI_Finalize as failed).
pub(super) fn finalize_mpi_and_exit(code: i32) -> ! {
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // MPI is initialised (a runtime exists only on an initialised world) and not yet
    // finalized (the application is still inside a library call); every rank gets here
    // after the same collective finalize, which waited for every background flush.
    // SAFETY: no MPI operation of this library is pending, and the process exits right
    // after, so no MPI handle (the application's or ours) is used once MPI is finalized.
    unsafe {
        mpi::ffi::MPI_Finalize();
    }
    std::process::exit(code)
}
