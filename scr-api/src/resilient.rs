//! Online recovery for Rust applications: [`run_resilient`] over
//! [`scr_host::resilient::run`], with the library initialised and finalized around the
//! application's step.

use crate::{Attempt, Finished, ResilientOptions, Result, Scr, Settings};
use scr_host::runtime::{InitOptions, Recovered};

/// Online recovery (see [`scr_host::resilient`]): run `step` on the application's ranks of
/// `world`, keeping `options.spares` processes aside; when a process is lost (MPI with
/// ULFM, `mpiexec --with-ft ulfm`) the survivors and a spare form the application's
/// communicator again inside the same `mpiexec`, the library is initialised on it (which
/// rebuilds the lost rank's files from redundancy onto the spare's node) and `step` runs
/// again, to restart through [`Scr::have_restart`] as after a relaunch.
///
/// `step` gets the library (initialised with `settings`), the application communicator
/// (use it, not `world`, for the application's own messages) and the [`Attempt`]; it
/// returns `Ok` when the application finished, else the error a library call returned
/// (return it, with `?`: after a loss every call fails alike with
/// [`ScrError::ProcessFailed`](crate::ScrError::ProcessFailed)). The library is finalized after an `Ok`. Collective over
/// `world`; returns alike on every process, the spares included. Without ULFM at run
/// time it says once why recovery is off and runs `step` once.
///
/// After a loss the application's own MPI calls on the communicator return without
/// data (it is revoked); a loop that waits on their results should also test
/// [`process_lost`].
pub fn run_resilient<F>(
    world: &mpi::topology::SimpleCommunicator,
    options: &ResilientOptions,
    settings: &Settings,
    mut step: F,
) -> Result<Finished>
where
    F: FnMut(&mut Scr, &mpi::topology::SimpleCommunicator, &Attempt) -> Result<()>,
{
    scr_host::resilient::run(world, options, |comm, attempt| {
        // (after a recovery, the event log records it at init)
        let recovered = (attempt.number > 0).then(|| Recovered {
            lost: attempt.lost.clone(),
            replaced: attempt.replaced.clone(),
            seconds: attempt.recovery_seconds,
        });
        let options = InitOptions {
            recovered,
            ..InitOptions::default()
        };
        let mut scr = Scr::init_options(comm, settings, options)?;
        match step(&mut scr, comm, attempt) {
            Ok(()) => scr.finalize(),
            Err(e) => {
                // (dropped without a collective finalize: see `Scr`'s drop)
                scr.failed = true;
                Err(e)
            }
        }
    })
}

/// Whether this process saw a process of the job fail since the last recovery (MPI with
/// ULFM): the application's own calls on the revoked communicator then return without
/// data.
pub fn process_lost() -> bool {
    scr_host::runtime::ulfm::lost()
}

/// Whether this process went through a recovery (a resilient run replaced or lost a
/// process).
pub fn recovered() -> bool {
    scr_host::resilient::recoveries() > 0
}
