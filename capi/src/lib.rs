//! libscr: the scr-rs runtime behind SCR 3.x's C interface (`include/scr.h`), so that
//! C, C++, Fortran and Python applications written for SCR build unchanged and link with
//! `-lscr`.
//!
//! The layers:
//! - [`calls`]: each API call on Rust types (bytes in, bytes out), with the library's
//!   state (values set before init, the runtime after it). Safe code; the Fortran
//!   bindings and the C functions both call it.
//! - `ffi`: the `extern "C"` functions of `scr.h`; [`fortran`]: the Fortran bindings
//!   (`scrf.h`); `mpi_init`: the thread level libscr's `MPI_Init` and `MPI_Init_thread`
//!   (C, `src/mpi_init.c`) ask for: MPI_THREAD_MULTIPLE when the environment asks for
//!   background protection. All `unsafe` of the crate is in these three FFI modules
//!   (reading C and Fortran strings, writing caller buffers, reading an MPI constant),
//!   each block with its reason. No panic crosses into C or Fortran: each call runs
//!   under `catch_unwind`, and the level's function contains nothing that panics.
//!
//! SCR 3.x semantics kept: MPI is initialised by the application before `SCR_Init` and
//! `MPI_COMM_WORLD` is implied; the fetch from the prefix happens in the first
//! `SCR_Have_restart`, so `SCR_Current(name)` between them chooses what is loaded;
//! `SCR_Route_file` outside a dataset returns the name unchanged; `SCR_Config("KEY")`
//! returns the value in force in a string the caller frees.

pub mod calls;
mod ffi;
pub mod fortran;
mod mpi_init;

pub use ffi::*;
