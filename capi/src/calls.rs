//! The API calls on Rust types, and the library's state between them. The C functions
//! (`ffi`) and the Fortran bindings convert their arguments and call these through
//! [`guarded`], which reports failures and keeps panics from crossing into C.

use std::cell::RefCell;
use std::ffi::{c_int, CStr};
use std::path::Path;
use std::sync::Mutex;
use std::thread::ThreadId;

use mpi::topology::SimpleCommunicator;
use mpi::traits::Communicator as _;
use scr_host::config::api;
use scr_host::config::Loader;
use scr_host::runtime::{InitOptions, OutputFlags, Recovered, Runtime, Started};

/// `SCR_FLAG_CHECKPOINT`.
pub const FLAG_CHECKPOINT: i32 = 1;
/// `SCR_FLAG_OUTPUT`.
pub const FLAG_OUTPUT: i32 = 2;
/// `SCR_MAX_FILENAME`: buffers for names hold this many bytes with the NUL.
pub const MAX_FILENAME: usize = 1024;

/// What `SCR_Get_version` returns.
pub const VERSION: &CStr = c"scr-rs 0.1.0 (SCR API v3.1.0)";

/// The library's state on the thread that called `SCR_Init` (SCR's API is not
/// thread-safe; a call from another thread is refused with the reason, see [`guarded`]).
#[derive(Default)]
struct State {
    /// Accepted `SCR_Config` settings before init: (call number, text).
    calls: Vec<(usize, String)>,
    /// Every `SCR_Config` call so far, accepted or not (errors name the call's number).
    attempts: usize,
    /// From `SCR_Init` to `SCR_Finalize`: the running runtime, or the disabled library.
    runtime: Option<Started>,
    finalized: bool,
}

impl Drop for State {
    /// At thread (or process) exit without `SCR_Finalize`: the runtime holds an MPI
    /// communicator, which must not be freed after `MPI_Finalize`; it is then leaked, and
    /// the application told what it missed.
    fn drop(&mut self) {
        if let Some(started) = self.runtime.take() {
            // (tracing's thread-local state may be gone at thread exit: then the event
            // goes to the global subscriber, which is ours or the application's);
            // disabled, there was nothing to finalize (SCR_Finalize fails then anyway)
            if let Started::Running(rt) = &started {
                tracing::warn!(
                    rank = rt.rank(),
                    "the application exited without calling SCR_Finalize; the cache keeps what the last completed dataset left"
                );
            }
            if mpi::environment::is_finalized() {
                std::mem::forget(started);
            }
        }
    }
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State::default());
}

/// The thread that called `SCR_Init`, once one has.
static INIT_THREAD: Mutex<Option<ThreadId>> = Mutex::new(None);

/// This process's rank in `MPI_COMM_WORLD`, for messages; `None` before `MPI_Init`.
fn world_rank() -> Option<i32> {
    (mpi::environment::is_initialized() && !mpi::environment::is_finalized())
        .then(|| SimpleCommunicator::world().rank())
}

/// Log a failed call's reason (through tracing, as every message): which rank, which call,
/// why. A call may fail before `SCR_Init` installed the runtime's subscriber: installed here
/// then, so the message is not lost.
pub fn report(call: &str, message: &str) {
    if let Some(problem) = scr_host::log::init(scr_host::log::env_debug()) {
        tracing::warn!("{problem}");
    }
    let rank = STATE
        .try_with(|s| {
            s.try_borrow()
                .ok()
                .and_then(|s| s.runtime.as_ref().map(|r| r.rank() as i32))
        })
        .ok()
        .flatten()
        .or_else(world_rank);
    match rank {
        Some(r) => tracing::error!(rank = r, "{call}: {message}"),
        None => tracing::error!("{call}: {message}"),
    }
}

thread_local! {
    /// Why the last call on this thread failed, for [`last_error`].
    static LAST_ERROR: RefCell<Option<std::ffi::CString>> = const { RefCell::new(None) };
}

/// Why the last call made on this thread failed (`None` when it succeeded): what
/// `scr_rs_last_error` gives language bindings, since SCR_Config's NULL means both "set"
/// and "failed". The pointer stays valid until the next call on this thread.
pub fn last_error() -> *const std::ffi::c_char {
    LAST_ERROR.with(|e| e.borrow().as_ref().map_or(std::ptr::null(), |c| c.as_ptr()))
}

fn set_last_error(message: Option<String>) {
    let c = message.map(|m| std::ffi::CString::new(m.replace('\0', " ")).unwrap_or_default());
    let _ = LAST_ERROR.try_with(|e| {
        if let Ok(mut e) = e.try_borrow_mut() {
            *e = c;
        }
    });
}

/// Run one call: `None` when it failed (the reason is printed) or panicked (the panic is
/// stopped here and reported as an internal error).
pub fn guarded<T>(call: &str, f: impl FnOnce() -> Result<T, String>) -> Option<T> {
    set_last_error(None);
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Some(v),
        Ok(Err(message)) if message == DISABLED => {
            set_last_error(Some(message));
            None
        }
        Ok(Err(message)) => {
            report(call, &message);
            set_last_error(Some(message));
            None
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown".into());
            let message =
                format!("internal error (panic: {what}); please report it with this message");
            report(call, &message);
            set_last_error(Some(message));
            None
        }
    }
}

/// Run `f` on the state, refusing a call from a thread other than the one that called
/// `SCR_Init`.
fn with_state<T>(f: impl FnOnce(&mut State) -> Result<T, String>) -> Result<T, String> {
    let owner = *scr_plugin::sync::lock(&INIT_THREAD);
    if let Some(t) = owner {
        if t != std::thread::current().id() {
            return Err(format!(
                "called on thread {:?}, but SCR_Init was called on thread {t:?}; call SCR's functions from the thread that called SCR_Init",
                std::thread::current().id()
            ));
        }
    }
    STATE.with(|s| {
        let mut s = s
            .try_borrow_mut()
            .map_err(|_| "called again from inside an SCR call (a signal handler?)".to_string())?;
        f(&mut s)
    })
}

/// Why every call fails when SCR is disabled (`SCR_ENABLE=0`), as SCR's do: returned
/// quietly (not logged at each call: the application chose it; `SCR_Init` says it once).
pub const DISABLED: &str =
    "SCR is disabled (SCR_ENABLE=0): the call returns SCR_FAILURE, as in SCR";

/// The runtime, or why there is none (or why it takes no calls: [`DISABLED`]).
fn runtime(s: &mut State) -> Result<&mut Runtime, String> {
    match &mut s.runtime {
        Some(Started::Disabled(_)) => Err(DISABLED.into()),
        Some(Started::Running(rt)) => Ok(rt),
        None if s.finalized => {
            Err("SCR_Finalize was already called; no SCR call may follow it".into())
        }
        None => Err("SCR_Init has not been called (call MPI_Init, then SCR_Init)".into()),
    }
}

/// `SCR_Init`: collective over `MPI_COMM_WORLD`, after `MPI_Init`.
pub fn init() -> Result<(), String> {
    init_on(&SimpleCommunicator::world(), None)
}

/// `SCR_Init` on `comm` (collective over it): `MPI_COMM_WORLD`, or a resilient run's
/// application communicator, with the recovery before this init when there was one.
fn init_on(comm: &SimpleCommunicator, recovered: Option<Recovered>) -> Result<(), String> {
    with_state(|s| {
        if s.runtime.is_some() {
            return Err("SCR_Init was already called; call it once per run".into());
        }
        if s.finalized {
            return Err(
                "SCR_Finalize was already called; SCR cannot be initialised again in this process"
                    .into(),
            );
        }
        if !mpi::environment::is_initialized() {
            return Err(
                "MPI is not initialised: call MPI_Init (or MPI_Init_thread) before SCR_Init".into(),
            );
        }
        if mpi::environment::is_finalized() {
            return Err(
                "MPI is already finalized: call SCR_Init between MPI_Init and MPI_Finalize".into(),
            );
        }
        let started = Runtime::init_with(
            comm,
            s.calls.clone(),
            InitOptions {
                fetch_at_have_restart: true,
                recovered,
            },
        )
        .map_err(|e| e.to_string())?;
        let disabled = started.is_disabled();
        s.runtime = Some(started);
        *scr_plugin::sync::lock(&INIT_THREAD) = Some(std::thread::current().id());
        if disabled {
            // SCR's SCR_Init fails when SCR is disabled; so do the calls after it
            // (SCR_Route_file passes names through, SCR_Config queries return NULL);
            // rank 0 says why, once for the job
            if world_rank().unwrap_or(0) != 0 {
                return Err(DISABLED.into());
            }
            return Err("SCR is disabled (SCR_ENABLE=0 or enable = false): SCR_Init returns SCR_FAILURE, as in SCR, and so do the calls after it; SCR_Route_file passes names through".into());
        }
        Ok(())
    })
}

/// `SCR_Finalize`: collective.
pub fn finalize() -> Result<(), String> {
    with_state(|s| {
        if s.runtime.as_ref().is_some_and(Started::is_disabled) {
            // it ends all the same (nothing to write), and fails as SCR's does
            if let Some(mut disabled) = s.runtime.take() {
                let _ = disabled.finalize();
            }
            s.finalized = true;
            return Err(DISABLED.into());
        }
        let rt = runtime(s)?;
        let r = rt.finalize().map_err(|e| e.to_string());
        s.runtime = None;
        s.finalized = true;
        r
    })
}

/// One run of a resilient run's body (`SCR_Run_resilient`): the library is initialised on
/// the application communicator `comm` (again after each recovery: the previous run's
/// runtime, abandoned by the loss, is dropped first), `body` runs, and the library is
/// finalized when it returned `Ok`, abandoned otherwise (after a loss no collective call
/// can complete).
pub fn resilient_attempt(
    comm: &SimpleCommunicator,
    recovered: Option<Recovered>,
    body: impl FnOnce() -> Result<(), String>,
) -> Result<(), String> {
    with_state(|s| {
        if let Some(Started::Running(mut rt)) = s.runtime.take() {
            rt.abandon();
        }
        s.finalized = false;
        Ok(())
    })?;
    init_on(comm, recovered)?;
    match body() {
        Ok(()) => finalize(),
        Err(e) => {
            with_state(|s| {
                if let Some(Started::Running(mut rt)) = s.runtime.take() {
                    rt.abandon();
                }
                s.finalized = true;
                Ok(())
            })?;
            Err(e)
        }
    }
}

/// `SCR_Config`: set or unset before init (`Ok(None)`), or query the value in force.
pub fn config(text: &str) -> Result<Option<String>, String> {
    with_state(|s| {
        s.attempts += 1;
        let n = s.attempts;
        let call = api::parse(text).map_err(|m| format!("\"{text}\": {m}"))?;
        if call.is_set() {
            if s.runtime.is_some() || s.finalized {
                return Err(format!(
                    "\"{text}\": values can only be set before SCR_Init (queries work at any time)"
                ));
            }
            s.calls.push((n, text.to_string()));
            return Ok(None);
        }
        let value = match &s.runtime {
            // SCR answers no query when disabled
            Some(Started::Disabled(_)) => Ok(None),
            Some(Started::Running(rt)) => rt.config().query(&call),
            None => {
                let mut loader = Loader::from_process();
                loader.api = s.calls.clone();
                let config = loader.load().map_err(|e| {
                    format!(
                        "\"{text}\": the configuration has errors:\n  {}",
                        e.0.iter()
                            .map(|x| x.to_string())
                            .collect::<Vec<_>>()
                            .join("\n  ")
                    )
                })?;
                config.query(&call)
            }
        };
        value.map_err(|m| format!("\"{text}\": {m}"))
    })
}

/// `SCR_Route_file`: the path to write or read, or the name itself outside a dataset —
/// also before `SCR_Init` and after `SCR_Finalize`, as SCR 3.x does (an application may
/// route its files through SCR whether or not SCR runs yet).
pub fn route_file(name: &[u8]) -> Result<Vec<u8>, String> {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    with_state(|s| {
        let outside = |name: &[u8]| {
            if name.is_empty() {
                return Err("the file name is empty".to_string());
            }
            if name.len() >= MAX_FILENAME {
                return Err(format!(
                    "the file name is {} bytes, more than SCR_MAX_FILENAME ({MAX_FILENAME}) holds with its NUL",
                    name.len()
                ));
            }
            Ok(name.to_vec())
        };
        let name_path = Path::new(std::ffi::OsStr::from_bytes(name));
        let routed = match s.runtime.as_mut() {
            Some(Started::Running(rt)) if rt.in_dataset() => rt.route_file(name_path),
            // (never in a dataset: its SCR_Start_output fails)
            Some(Started::Disabled(d)) if d.in_dataset() => d.route_file(name_path),
            _ => return outside(name),
        };
        let path = routed.map_err(|e| e.to_string())?;
        let bytes = path.into_os_string().into_vec();
        if bytes.len() >= MAX_FILENAME {
            return Err(format!(
                "the routed path {} is {} bytes, more than SCR_MAX_FILENAME ({MAX_FILENAME}) holds with its NUL; use a shorter cache_base or file name",
                String::from_utf8_lossy(&bytes),
                bytes.len()
            ));
        }
        Ok(bytes)
    })
}

/// `SCR_Have_restart`: collective; the first call fetches when needed.
pub fn have_restart() -> Result<Option<String>, String> {
    with_state(|s| {
        runtime(s)?
            .have_restart_fetching()
            .map_err(|e| e.to_string())
    })
}

/// `SCR_Start_restart`: the checkpoint's name.
pub fn start_restart() -> Result<String, String> {
    with_state(|s| runtime(s)?.start_restart().map_err(|e| e.to_string()))
}

/// `SCR_Restart_writers`: how many ranks wrote the checkpoint being read.
pub fn restart_writers() -> Result<c_int, String> {
    with_state(|s| {
        let n = runtime(s)?.restart_writers().map_err(|e| e.to_string())?;
        c_int::try_from(n).map_err(|_| format!("{n} ranks wrote it, more than an int holds"))
    })
}

/// `SCR_Restart_num_files` / `SCR_Restart_file`: the files old rank `rank` wrote of the
/// checkpoint being read, as paths for `SCR_Route_file` (each checked to fit
/// SCR_MAX_FILENAME).
pub fn restart_files(rank: c_int) -> Result<Vec<Vec<u8>>, String> {
    use std::os::unix::ffi::OsStringExt;
    let rank = u32::try_from(rank).map_err(|_| format!("rank {rank} is negative"))?;
    with_state(|s| {
        let files = runtime(s)?.restart_files(rank).map_err(|e| e.to_string())?;
        Ok(files
            .into_iter()
            .map(|p| p.into_os_string().into_vec())
            .collect())
    })
}

/// `SCR_Complete_restart`: whether every rank read it.
pub fn complete_restart(valid: bool) -> Result<bool, String> {
    with_state(|s| {
        runtime(s)?
            .complete_restart(valid)
            .map_err(|e| e.to_string())
    })
}

/// `SCR_Need_checkpoint`.
pub fn need_checkpoint() -> Result<bool, String> {
    with_state(|s| runtime(s)?.need_checkpoint().map_err(|e| e.to_string()))
}

/// `SCR_Start_checkpoint`: a checkpoint named `ckpt.<id>`.
pub fn start_checkpoint() -> Result<String, String> {
    with_state(|s| runtime(s)?.start_checkpoint().map_err(|e| e.to_string()))
}

/// `SCR_Start_output`: `name` `None` (or empty, as SCR treats it) gives the dataset a
/// name of its id. A refusal of the arguments on this rank (`refused`, e.g. a name that
/// is not UTF-8) and flag bits SCR does not define are agreed with the other ranks, so
/// every rank fails the call and none waits.
pub fn start_output(name: Option<&str>, flags: i32, refused: Option<String>) -> Result<(), String> {
    with_state(|s| {
        let rt = runtime(s)?;
        let refused = refused.or_else(|| {
            (flags & !(FLAG_CHECKPOINT | FLAG_OUTPUT) != 0).then(|| {
                format!(
                    "flags {flags:#x} hold bits that are not SCR_FLAG_CHECKPOINT (1) or SCR_FLAG_OUTPUT (2)"
                )
            })
        });
        let name = match name {
            Some(n) if !n.is_empty() => n.to_string(),
            _ => rt.default_dataset_name(),
        };
        rt.start_output_or_refuse(
            &name,
            OutputFlags {
                checkpoint: flags & FLAG_CHECKPOINT != 0,
                output: flags & FLAG_OUTPUT != 0,
            },
            refused,
        )
        .map_err(|e| e.to_string())
    })
}

/// `SCR_Complete_output` and `SCR_Complete_checkpoint`: whether the dataset was kept.
pub fn complete_output(valid: bool) -> Result<bool, String> {
    with_state(|s| {
        runtime(s)?
            .complete_output(valid)
            .map_err(|e| e.to_string())
    })
}

/// `SCR_Current`.
pub fn current(name: &str) -> Result<(), String> {
    with_state(|s| runtime(s)?.current(name).map_err(|e| e.to_string()))
}

/// `SCR_Drop`.
pub fn drop_dataset(name: &str) -> Result<(), String> {
    with_state(|s| runtime(s)?.drop_dataset(name).map_err(|e| e.to_string()))
}

/// `SCR_Delete`.
pub fn delete(name: &str) -> Result<(), String> {
    with_state(|s| runtime(s)?.delete(name).map_err(|e| e.to_string()))
}

/// `SCR_Should_exit`.
pub fn should_exit() -> Result<bool, String> {
    with_state(|s| runtime(s)?.should_exit().map_err(|e| e.to_string()))
}

/// A name the caller passed, as text: SCR's names (datasets, keys) are text.
pub fn text<'a>(what: &str, bytes: &'a [u8]) -> Result<&'a str, String> {
    std::str::from_utf8(bytes).map_err(|e| format!("the {what} is not UTF-8 text ({e})"))
}

/// Whether a name fits a caller's buffer of `MAX_FILENAME` bytes with its NUL.
pub fn fits(what: &str, name: &str) -> Result<(), String> {
    if name.len() >= MAX_FILENAME {
        return Err(format!(
            "the {what} `{name}` is {} bytes, more than SCR_MAX_FILENAME ({MAX_FILENAME}) holds with its NUL",
            name.len()
        ));
    }
    Ok(())
}
