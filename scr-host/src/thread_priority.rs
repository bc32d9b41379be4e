//! A thread's CPU priority: the one `unsafe` call the library's helper threads need to
//! yield to the application.
#![allow(unsafe_code)]

/// Put the calling thread at nice 19, the lowest priority: on a busy node it yields to
/// the application's threads and runs when a core is free. Best effort: a failure
/// leaves the priority as it was.
pub(crate) fn lowest() {
    // SAFETY: gettid and setpriority take and return plain integers; PRIO_PROCESS with a
    // thread id changes only that thread's nice value (Linux).
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        let _ = libc::setpriority(libc::PRIO_PROCESS, tid, 19);
    }
}
