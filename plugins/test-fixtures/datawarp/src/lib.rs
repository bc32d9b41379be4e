//! Test fixture: a stand-in for Cray's libdatawarp with the staging calls AXL (and
//! scr-rs) make. Each stage-out copies in a background thread.
//! `FAKE_DW_FAIL=stage|transfer|query` makes that step fail; with
//! `FAKE_DW_TERMINATE_LOG=FILE`, each terminated path is appended to FILE.
#![allow(unsafe_code)]
#![allow(clippy::missing_safety_doc)]

use std::collections::HashMap;
use std::ffi::{c_char, c_int, CStr};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;

#[derive(Clone, Copy, PartialEq)]
enum State {
    Pending,
    Complete,
    Failed,
    Terminated,
}

type Stage = (Arc<Mutex<State>>, Option<JoinHandle<()>>);

fn stages() -> &'static Mutex<HashMap<String, Stage>> {
    static S: OnceLock<Mutex<HashMap<String, Stage>>> = OnceLock::new();
    S.get_or_init(Default::default)
}

fn fail(step: &str) -> bool {
    std::env::var("FAKE_DW_FAIL").is_ok_and(|v| v == step)
}

unsafe fn text(p: *const c_char) -> String {
    // SAFETY: callers pass a NUL-terminated path that outlives the call (the DataWarp API contract).
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

#[no_mangle]
pub unsafe extern "C" fn dw_stage_file_out(
    dw: *const c_char,
    pfs: *const c_char,
    _kind: c_int,
) -> c_int {
    if fail("stage") {
        return -5; // -EIO
    }
    // SAFETY: both are NUL-terminated paths from the caller, valid for this call.
    let (src, dst) = unsafe { (text(dw), text(pfs)) };
    let state = Arc::new(Mutex::new(State::Pending));
    let s = Arc::clone(&state);
    let handle = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(5));
        if *s.lock().unwrap() == State::Terminated {
            return;
        }
        let ok = !fail("transfer") && std::fs::copy(&src, &dst).is_ok();
        let mut st = s.lock().unwrap();
        if *st == State::Pending {
            *st = if ok { State::Complete } else { State::Failed };
        }
    });
    stages()
        .lock()
        .unwrap()
        // SAFETY: `dw` is the caller's NUL-terminated path, valid for this call.
        .insert(unsafe { text(dw) }, (state, Some(handle)));
    0
}

#[no_mangle]
pub unsafe extern "C" fn dw_query_file_stage(
    dw: *const c_char,
    complete: *mut c_int,
    pending: *mut c_int,
    deferred: *mut c_int,
    failed: *mut c_int,
) -> c_int {
    if fail("query") {
        return -5; // -EIO
    }
    // SAFETY: `dw` is the caller's NUL-terminated path, valid for this call.
    let key = unsafe { text(dw) };
    let Some(state) = stages()
        .lock()
        .unwrap()
        .get(&key)
        .map(|s| *s.0.lock().unwrap())
    else {
        return -2; // -ENOENT
    };
    // SAFETY: the four out-pointers are valid `int`s the caller passed for us to fill.
    unsafe {
        *complete = c_int::from(state == State::Complete);
        *pending = c_int::from(state == State::Pending);
        *deferred = 0;
        *failed = c_int::from(matches!(state, State::Failed | State::Terminated));
    }
    0
}

#[no_mangle]
pub unsafe extern "C" fn dw_wait_file_stage(dw: *const c_char) -> c_int {
    // SAFETY: `dw` is the caller's NUL-terminated path, valid for this call.
    let key = unsafe { text(dw) };
    let handle = stages()
        .lock()
        .unwrap()
        .get_mut(&key)
        .and_then(|s| s.1.take());
    if let Some(h) = handle {
        let _ = h.join();
    }
    0
}

#[no_mangle]
pub unsafe extern "C" fn dw_terminate_file_stage(dw: *const c_char) -> c_int {
    // SAFETY: `dw` is the caller's NUL-terminated path, valid for this call.
    let key = unsafe { text(dw) };
    if let Ok(log) = std::env::var("FAKE_DW_TERMINATE_LOG") {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
        {
            let _ = writeln!(f, "{key}");
        }
    }
    // like DataWarp, no byte is written after the terminate returns: the copy thread
    // is told to stop and waited for
    let handle = stages().lock().unwrap().get_mut(&key).and_then(|s| {
        *s.0.lock().unwrap() = State::Terminated;
        s.1.take()
    });
    if let Some(h) = handle {
        let _ = h.join();
    }
    0
}
