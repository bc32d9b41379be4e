//! Termination signals sent to `scr run` (Ctrl-C, `kill`, SLURM's `--signal=B:TERM@120`
//! before the time limit): noted by a handler and handled by the launch loop, which
//! passes the signal on to the job step, stops relaunching and still runs postrun.
//! The one place `scr run` needs `unsafe` (installing the handler).
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicI32, Ordering};

/// The newest termination signal received and not yet taken (0: none).
static PENDING: AtomicI32 = AtomicI32::new(0);

/// The handler: one atomic store, which is async-signal-safe.
extern "C" fn note(signal: libc::c_int) {
    PENDING.store(signal, Ordering::SeqCst);
}

/// From now on SIGINT, SIGTERM and SIGHUP are noted for [`take`] instead of ending the
/// process — except a signal `scr run` was started with ignored (`nohup` ignores SIGHUP,
/// a shell ignores SIGINT for a job in the background), which stays ignored, as shells
/// leave it, so that a logout does not end the retries.
pub(super) fn catch_termination() {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: `sigaction` with a null new action only writes the current action into
        // `old`, a plain C struct for which all-zero bytes are a valid value; `signal`
        // is a valid signal number.
        let ignored = unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            libc::sigaction(signal, std::ptr::null(), &mut old) == 0
                && old.sa_sigaction == libc::SIG_IGN
        };
        if ignored {
            continue;
        }
        // SAFETY: `note` is an `extern "C"` function that only stores to an atomic
        // (async-signal-safe); `signal` is a valid signal number; the previous action,
        // checked above, is not "ignore", and nothing else in `scr run` installs one.
        unsafe {
            libc::signal(signal, note as *const () as libc::sighandler_t);
        }
    }
}

/// Send `signal` to process `pid`, or to its process group when `group` (no external
/// `kill` program: a minimal image may lack one, and then nothing would stop the step).
/// A process or group that is gone already is not an error.
pub(super) fn send(pid: u32, group: bool, signal: i32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    let target = if group { -pid } else { pid };
    // SAFETY: kill(2) takes plain integers and touches no memory of ours; a target that
    // has exited answers ESRCH, which is ignored.
    unsafe {
        libc::kill(target, signal);
    }
}

/// The signal received since the last call, if any.
pub(super) fn take() -> Option<i32> {
    match PENDING.swap(0, Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// A signal's name, for messages.
pub(super) fn name(signal: i32) -> &'static str {
    match signal {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        _ => "signal",
    }
}
