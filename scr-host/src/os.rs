//! The operating-system calls the library's helpers need and the standard library does
//! not give: a thread's CPU priority and a file system's free space.
#![allow(unsafe_code)]

use std::path::Path;

/// Put the calling thread at nice 19, the lowest priority: on a busy node it yields to
/// the application's threads and runs when a core is free. Best effort: a failure
/// leaves the priority as it was.
pub(crate) fn lowest_priority() {
    // SAFETY: gettid and setpriority take and return plain integers; PRIO_PROCESS with a
    // thread id changes only that thread's nice value (Linux).
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        let _ = libc::setpriority(libc::PRIO_PROCESS, tid, 19);
    }
}

/// Bytes an unprivileged writer may still use on the file system holding `path`
/// (`statvfs`: available blocks × fragment size); `None` when it cannot be asked.
pub(crate) fn free_bytes(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt as _;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a NUL-terminated path that outlives the call, and `st` is a buffer
    // of the struct statvfs fills; it is read only when the call succeeded.
    let st = unsafe {
        if libc::statvfs(c.as_ptr(), st.as_mut_ptr()) != 0 {
            return None;
        }
        st.assume_init()
    };
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}

#[cfg(test)]
mod tests {
    /// The free space of a temporary directory is positive and no more than its size.
    #[test]
    fn free_bytes_of_a_directory_and_none_for_a_missing_path() {
        let dir = tempfile::tempdir().unwrap();
        let free = super::free_bytes(dir.path()).expect("statvfs of a directory");
        assert!(free > 0);
        assert_eq!(super::free_bytes(&dir.path().join("missing")), None);
    }
}
