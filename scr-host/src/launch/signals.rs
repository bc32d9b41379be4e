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
/// process.
pub fn catch_termination() {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: `note` is an `extern "C"` function that only stores to an atomic
        // (async-signal-safe); `signal` is a valid signal number; the previous handler
        // returned is the default one, which nothing else relies on.
        unsafe {
            libc::signal(signal, note as *const () as libc::sighandler_t);
        }
    }
}

/// The signal received since the last call, if any.
pub fn take() -> Option<i32> {
    match PENDING.swap(0, Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// A signal's name, for messages.
pub fn name(signal: i32) -> &'static str {
    match signal {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        _ => "signal",
    }
}
