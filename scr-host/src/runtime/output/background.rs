//! Protection in the background (`protect_in_background`): complete_output checks and
//! records the dataset's files as always, then hands the scheme's apply to a thread of
//! this rank and returns; the application computes while the redundancy data is read,
//! exchanged and written.
//!
//! - **Until every rank finished, the dataset is not a checkpoint.** Its filemap record
//!   stays incomplete (a crash leaves it to the next init's cleanup, as a crash inside
//!   complete_output would), nothing counts, flushes or evicts for it, and the previous
//!   checkpoint stays the restart point: no eviction runs while a protection is pending
//!   (eviction runs only at start_output, which finishes the protection first, and when a
//!   dataset is kept).
//! - **Finished by agreement.** Once rank 0's own thread has returned, the calls that
//!   poll (need_checkpoint, should_exit) carry its request to poll in the broadcast they
//!   make anyway; every rank then asks whether every thread has returned (one
//!   reduction), and once all have, the outcome is agreed and the dataset kept or
//!   discarded on every rank alike, by the same code as a foreground complete_output. So
//!   a protection costs an application that asks every timestep no collective of its own
//!   until then. Calls that need the dataset's fate (start_output, a restart, drop,
//!   delete, should_exit when it says yes, finalize) wait for it.
//! - **Three ways to exchange, agreed at init** (`descriptors::Progress`). At
//!   MPI_THREAD_MULTIPLE the thread's plugin calls run on a host of their own (a duplicate
//!   of the set's communicator, taking no lock: see `MpiHost::background`) beside the
//!   application's MPI calls. Below it, only the application's thread may call MPI: the
//!   thread's host hands each MPI step to it through the [`Funnel`] (`MpiHost::funneled`),
//!   which each polling call serves for up to [`SERVE_BUDGET`] while the thread is inside
//!   an exchange, and every waiting call serves until the thread is done
//!   (`protect_below_multiple = calls`; by default the scheme runs inside complete_output
//!   there instead). The exchange then advances as often as the application calls the
//!   library (SCR_Need_checkpoint each step); reading, encoding and writing go on
//!   meanwhile. With `protect_below_multiple = sockets` the thread's host is the set's
//!   own TCP connections (`socket_host`) and it calls no MPI: the exchange advances
//!   whatever the application does.
//! - A failure on one member (a plugin error, a full disk) is settled with the set in the
//!   thread itself, so members waiting for it hear at once; the dataset is then discarded
//!   on every rank and rank 0 says why.

use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use scr_plugin::{Applied, PluginError};

use super::{Output, Writer};
use crate::registry::LoadedScheme;
use crate::runtime::world::SetHost;
use crate::runtime::Funnel;
use crate::runtime::{NameCheck, Result, Settled, TestHooks};

/// The longest a polling call (need_checkpoint) makes the background thread's MPI steps
/// for it, while that thread is inside an exchange: what such a call may cost the
/// application beyond its own work, for the exchange to advance between checkpoints.
const SERVE_BUDGET: Duration = Duration::from_millis(2);

/// What the thread returns: the apply's outcome on this member and the set's settlement
/// of it.
struct Returned {
    result: std::result::Result<Applied, PluginError>,
    settled: Settled,
    call: &'static str,
    /// How long the thread's work took.
    took: Duration,
}

/// The thread of a protection, or its outcome when no thread could be started (the
/// apply then ran on the calling thread).
enum Work {
    Running(JoinHandle<Returned>),
    Done(Returned),
}

impl Work {
    /// The outcome, once the thread returned: until then this thread makes the MPI steps
    /// the thread hands over through `funnel` (below MPI_THREAD_MULTIPLE), which it may
    /// need to return at all. `Err`: the thread ended in a panic.
    fn finish(self, funnel: &Funnel) -> std::thread::Result<Returned> {
        match self {
            Work::Done(r) => Ok(r),
            Work::Running(h) => {
                funnel.serve(None, &|| h.is_finished());
                h.join()
            }
        }
    }
}

/// A dataset whose protection runs in the background.
struct Pending {
    out: Output,
    /// The scheme hashes the files in its apply (`apply_with_crc`).
    fused: bool,
    work: Work,
}

/// The owner of background protections: at most one at a time (start_output finishes
/// the previous one before the next dataset starts).
#[derive(Default)]
pub(in crate::runtime) struct Protection {
    pending: Option<Pending>,
    /// The thread's MPI steps below MPI_THREAD_MULTIPLE, served by this rank's calls
    /// into the library.
    funnel: Arc<Funnel>,
}

impl Protection {
    /// Whether this rank asks (as rank 0 does for every rank) that the pending protection
    /// be polled: its own thread has returned. The calls that poll (need_checkpoint,
    /// should_exit) carry rank 0's answer in the broadcast they make anyway, so a
    /// protection costs them no collective of its own until rank 0's part is done.
    pub(in crate::runtime) fn wants_poll(&self) -> bool {
        self.pending.as_ref().is_some_and(|p| match &p.work {
            Work::Running(h) => h.is_finished(),
            Work::Done(_) => true,
        })
    }

    /// Whether a protection is pending and this rank's thread has not returned.
    pub(in crate::runtime) fn running_here(&self) -> bool {
        self.pending.is_some() && !self.wants_poll()
    }

    /// Whether a protection is pending (the same on every rank).
    #[cfg(test)]
    pub(in crate::runtime) fn pending(&self) -> bool {
        self.pending.is_some()
    }
}

impl Drop for Protection {
    /// The thread uses the scheme's library: it must have returned before the registry
    /// that holds the library goes (a runtime dropped without finalize, after an error).
    fn drop(&mut self) {
        if let Some(p) = self.pending.take() {
            let _ = p.work.finish(&self.funnel);
        }
    }
}

/// The thread's work: the scheme's apply of one rank's files on the set's background
/// host, settled with the set; cloned for this thread when no other can be started.
#[derive(Clone)]
struct Task {
    scheme: Arc<LoadedScheme>,
    host: Arc<dyn SetHost>,
    ds: scr_plugin::DatasetFiles,
    /// `apply_with_crc` (the scheme hashes the files in its pass) rather than `apply`.
    fused: bool,
    /// How long a failed member waits for the others to return (`abort_timeout`).
    grace: Duration,
    hooks: TestHooks,
    rank: u32,
    /// The control directory, for an injected failure's message.
    cntl: PathBuf,
}

impl Task {
    /// Run it: the hooks' hold and faults, the apply and its settlement.
    fn run(&self) -> Returned {
        let call = if self.fused {
            "apply_with_crc"
        } else {
            "apply"
        };
        let started = std::time::Instant::now();
        let (id, rank, hooks) = (self.ds.dataset_id, self.rank, &self.hooks);
        hooks.hold("protect");
        // (the crash tests' points: before the apply, at its first exchange, and after
        // it, before it is settled)
        hooks.crash_at(&format!("protect-{id}"), rank);
        let hooked = hooks.fault.is_some().then(|| Hooked {
            host: &*self.host,
            hooks,
            point: format!("protecting-{id}"),
            rank,
        });
        let services = self.host.services();
        let services = match &hooked {
            Some(hooked) => scr_plugin::host_ref(hooked),
            None => services,
        };
        let raw = self.scheme.raw();
        let result = match hooks.injected("protect", rank, id, &self.cntl) {
            Err(e) => Err(PluginError::new(scr_plugin::ErrorCode::IO, e.to_string())),
            Ok(()) if self.fused => raw.apply_with_crc(services, &self.ds).into_result(),
            Ok(()) => raw
                .apply(services, &self.ds)
                .into_result()
                .map(|redundancy| Applied {
                    redundancy,
                    crc32: Default::default(),
                }),
        };
        hooks.crash_at(&format!("protected-{id}"), rank);
        let settled = self.host.settle(call, result.as_ref().err(), self.grace);
        Returned {
            result,
            settled,
            call,
            took: started.elapsed(),
        }
    }
}

/// The services of a background apply under the fault suite: the set's own, with the
/// crash point `protecting-<id>` at the apply's first exchange (the other members are
/// then inside theirs: a process lost in the middle of the apply).
struct Hooked<'a> {
    host: &'a dyn SetHost,
    hooks: &'a TestHooks,
    point: String,
    rank: u32,
}

impl Hooked<'_> {
    fn exchange(&self) {
        self.hooks.crash_at(&self.point, self.rank);
    }
}

impl scr_plugin::HostServices for Hooked<'_> {
    fn rank(&self) -> u32 {
        self.host.rank()
    }

    fn size(&self) -> u32 {
        self.host.size()
    }

    fn world_rank(&self, member: u32) -> u32 {
        self.host.world_rank(member)
    }

    fn failure_group(&self, member: u32) -> abi_stable::std_types::RString {
        self.host.failure_group(member)
    }

    fn send(
        &self,
        dest: u32,
        tag: u32,
        data: abi_stable::std_types::RSlice<'_, u8>,
    ) -> abi_stable::std_types::RResult<(), PluginError> {
        self.exchange();
        self.host.send(dest, tag, data)
    }

    fn recv(
        &self,
        src: u32,
        tag: u32,
        buf: abi_stable::std_types::RSliceMut<'_, u8>,
    ) -> abi_stable::std_types::RResult<(), PluginError> {
        self.exchange();
        self.host.recv(src, tag, buf)
    }

    fn sendrecv(
        &self,
        dest: u32,
        data: abi_stable::std_types::RSlice<'_, u8>,
        src: u32,
        buf: abi_stable::std_types::RSliceMut<'_, u8>,
        tag: u32,
    ) -> abi_stable::std_types::RResult<(), PluginError> {
        self.exchange();
        self.host.sendrecv(dest, data, src, buf, tag)
    }

    fn barrier(&self) -> abi_stable::std_types::RResult<(), PluginError> {
        self.host.barrier()
    }

    fn all_reduce_u64(
        &self,
        value: u64,
        op: scr_plugin::ReduceOp,
    ) -> abi_stable::std_types::RResult<u64, PluginError> {
        self.host.all_reduce_u64(value, op)
    }

    fn broadcast(
        &self,
        root: u32,
        buf: abi_stable::std_types::RSliceMut<'_, u8>,
    ) -> abi_stable::std_types::RResult<(), PluginError> {
        self.host.broadcast(root, buf)
    }

    fn log(&self, level: scr_plugin::LogLevel, message: abi_stable::std_types::RStr<'_>) {
        self.host.log(level, message)
    }

    fn is_cancelled(&self) -> bool {
        self.host.is_cancelled()
    }

    fn survivors_verified(&self) -> bool {
        self.host.survivors_verified()
    }
}

impl Writer<'_> {
    /// complete_output's end for a dataset protected in the background (collective; its
    /// files checked and recorded, every name agreed): start the scheme's apply in a
    /// thread and return; [`Writer::settle_protection`] keeps or discards it later.
    pub(super) fn protect_in_background(
        &mut self,
        out: Output,
        dir: PathBuf,
        fused: bool,
    ) -> Result<bool> {
        let rank = self.topo.rank();
        // (the fault suite's: this rank cannot connect the set for `sockets`)
        let injected = self.hooks.failure_at("sockets", rank, out.record.id);
        let (scheme, host) = self.descs.background_parts(
            out.desc,
            &self.protection.funnel,
            (rank, self.world.abort_timeout()),
            injected,
        );
        let task = Task {
            scheme,
            host,
            ds: crate::integrity::dataset_files(&out.record, &dir),
            fused,
            grace: self.world.abort_timeout(),
            hooks: self.hooks.clone(),
            rank: self.topo.rank(),
            cntl: self.job.cntl_dir().to_path_buf(),
        };
        let theirs = task.clone();
        let spawned = std::thread::Builder::new()
            .name("scr-protect".into())
            .spawn(move || {
                // (its host's MPI steps, when funneled, go to the application's thread)
                Funnel::become_client();
                theirs.run()
            });
        let work = match spawned {
            Ok(h) => Work::Running(h),
            Err(e) => {
                // (the peers' threads meet this one's calls on the same communicator)
                tracing::warn!(
                    "rank {}: no thread for the background protection of {} ({e}); protecting it now",
                    task.rank,
                    out.record.name
                );
                Work::Done(task.run())
            }
        };
        self.topo.info(&format!(
            "complete_output {}: written, {:.3} s; its redundancy is applied in the background",
            out.record.name,
            out.started.elapsed().as_secs_f64()
        ));
        self.protection.pending = Some(Pending { out, fused, work });
        Ok(true)
    }

    /// Make the pending protection's MPI steps for its thread, below MPI_THREAD_MULTIPLE
    /// (local: for up to [`SERVE_BUDGET`], see `Funnel::serve`); nothing otherwise.
    pub(in crate::runtime) fn serve_protection(&mut self) {
        if let Some(Pending {
            work: Work::Running(h),
            ..
        }) = &self.protection.pending
        {
            self.protection
                .funnel
                .serve(Some(SERVE_BUDGET), &|| h.is_finished());
        }
    }

    /// Finish the pending background protection, if any (collective): when every rank's
    /// thread has returned, or at once with `wait` (then this rank waits for its own
    /// thread), the outcome is agreed and the dataset kept or discarded on every rank.
    /// A dataset that could not be protected is discarded and rank 0 says why; the
    /// caller's call goes on (the previous checkpoint stays the restart point), so no
    /// error is returned.
    pub(in crate::runtime) fn settle_protection(&mut self, wait: bool) {
        if self.protection.pending.is_none() {
            return;
        }
        if !wait && !self.world.all(self.protection.wants_poll()) {
            return;
        }
        let Pending {
            mut out,
            fused,
            work,
        } = self.protection.pending.take().expect("checked above");
        let dir = self
            .job
            .dataset_dir(&out.record.descriptor.store, out.record.id);
        let _dataset = crate::log::dataset_span(out.record.id).entered();
        let waiting = std::time::Instant::now();
        let returned = work.finish(&self.protection.funnel);
        if let Ok(r) = &returned {
            self.topo.info(&format!(
                "{}: its background protection took {:.3} s; this call waited {:.3} s for it",
                out.record.name,
                r.took.as_secs_f64(),
                waiting.elapsed().as_secs_f64()
            ));
        }
        // the host goes where any member's call did not settle cleanly: a funneled
        // host's data communicator may hold the abandoned exchanges, a socket host's
        // connections may be broken. Agreed (each member settles from what it saw, and a
        // host kept on some members and made again on others would have them wait on
        // each other), after the outcome below (a member stuck in its plugin call ends
        // the job there, before this agreement)
        let clean = matches!(&returned, Ok(r) if matches!(r.settled, Settled::Returned));
        let applied = match returned {
            Ok(r) => {
                let label = format!("{} ({})", out.record.id, out.record.name);
                let desc = &self.descs[out.desc];
                self.world
                    .settled_call(desc.scheme(), r.call, &label, r.result, r.settled)
                    .map_err(super::ApplyError::from)
                    .and_then(|done| {
                        let buf = self.config.file_buf_size();
                        self.record_applied(&mut out, &dir, fused, done, buf)
                    })
                    .map_err(|e| e.to_string())
            }
            // (a panic in the host's own code on that thread: a process lost under ULFM
            // unwinds there; the dataset is not protected)
            Err(_) => Err(format!(
                "rank {}: the background protection's thread ended without an answer",
                self.topo.rank()
            )),
        };
        if !self.world.all(clean) {
            self.descs.forget_background_host(out.desc);
        }
        let named = NameCheck {
            all_valid: true,
            clash: None,
            naming_error: None,
        };
        let name = out.record.name.clone();
        if let Err(e) = self.finish_output(out, named, applied, false) {
            if self.topo.rank() == 0 {
                tracing::warn!(
                    "{e} (in the background); the previous checkpoint stays the restart point"
                );
            }
            self.job.log_event(crate::events::Event::Failure {
                what: format!("background protection of {name}: {e}"),
                rank: None,
            });
        }
    }
}
