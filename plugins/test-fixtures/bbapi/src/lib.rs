//! Test fixture: a stand-in for IBM's libbbAPI with the calls AXL (and scr-rs) make. A
//! transfer copies its files in a background thread. `FAKE_BBAPI_FAIL=init|start|transfer`
//! makes that step fail; `FAKE_BBAPI_DELAY_MS` slows each file down.
#![allow(unsafe_code)]
#![allow(clippy::missing_safety_doc)]

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

const NOTSTARTED: u64 = 0x0001;
const INPROGRESS: u64 = 0x0002;
const FULLSUCCESS: u64 = 0x0008;
const CANCELED: u64 = 0x0010;
const FAILED: u64 = 0x0020;

/// The leading fields of BBTransferInfo_t, as the host reads them.
#[repr(C)]
pub struct BbTransferInfo {
    handle: u64,
    contribid: u32,
    jobid: u64,
    jobstepid: u64,
    tag: u64,
    numcontrib: u64,
    status: u64,
    numreportingcontribs: u64,
    total_transfer_keys: usize,
    total_transfer_size: usize,
    localstatus: u64,
    local_transfer_size: usize,
}

struct Def {
    files: Vec<(String, String)>,
}

fn transfers() -> &'static Mutex<HashMap<u64, Arc<AtomicU64>>> {
    static T: OnceLock<Mutex<HashMap<u64, Arc<AtomicU64>>>> = OnceLock::new();
    T.get_or_init(Default::default)
}

fn last_error() -> &'static Mutex<String> {
    static E: OnceLock<Mutex<String>> = OnceLock::new();
    E.get_or_init(Default::default)
}

fn fail(step: &str) -> bool {
    std::env::var("FAKE_BBAPI_FAIL").is_ok_and(|v| v == step)
}

fn set_error(msg: &str) -> c_int {
    *last_error().lock().unwrap() = msg.to_string();
    -1
}

/// SAFETY (all functions): the caller passes valid NUL-terminated strings and pointers
/// as bbapi.h documents.
unsafe fn text(p: *const c_char) -> String {
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

static INITIALISED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Like the real library: calls before BB_InitLibrary fail (ENODEV), a second init
/// fails (EALREADY).
fn initialised() -> bool {
    INITIALISED.load(Ordering::SeqCst)
}

#[no_mangle]
pub unsafe extern "C" fn BB_InitLibrary(_contrib: u32, _version: *const c_char) -> c_int {
    if fail("init") {
        return set_error("stand-in: init failure on demand");
    }
    if INITIALISED.swap(true, Ordering::SeqCst) {
        return set_error("stand-in: already initialised (EALREADY)");
    }
    0
}

#[no_mangle]
pub unsafe extern "C" fn BB_TerminateLibrary() -> c_int {
    INITIALISED.store(false, Ordering::SeqCst);
    0
}

#[no_mangle]
pub unsafe extern "C" fn BB_CreateTransferDef(def: *mut *mut c_void) -> c_int {
    if !initialised() {
        return set_error("stand-in: library not initialised (ENODEV)");
    }
    let d = Box::into_raw(Box::new(Def { files: Vec::new() }));
    unsafe { *def = d.cast() };
    0
}

#[no_mangle]
pub unsafe extern "C" fn BB_AddFiles(
    def: *mut c_void,
    src: *const c_char,
    dst: *const c_char,
    _flags: u64,
) -> c_int {
    let d = unsafe { &mut *def.cast::<Def>() };
    d.files.push(unsafe { (text(src), text(dst)) });
    0
}

#[no_mangle]
pub unsafe extern "C" fn BB_GetTransferHandle(
    tag: u64,
    _n: u64,
    _contrib: *const u32,
    handle: *mut u64,
) -> c_int {
    if !initialised() {
        return set_error("stand-in: library not initialised (ENODEV)");
    }
    unsafe { *handle = tag.wrapping_mul(31).wrapping_add(7) };
    0
}

#[no_mangle]
pub unsafe extern "C" fn BB_StartTransfer(def: *mut c_void, handle: u64) -> c_int {
    if !initialised() {
        return set_error("stand-in: library not initialised (ENODEV)");
    }
    if fail("start") {
        return set_error("stand-in: start failure on demand");
    }
    let files = unsafe { &*def.cast::<Def>() }.files.clone();
    let status = Arc::new(AtomicU64::new(NOTSTARTED));
    transfers()
        .lock()
        .unwrap()
        .insert(handle, Arc::clone(&status));
    let delay = std::env::var("FAKE_BBAPI_DELAY_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    std::thread::spawn(move || {
        status.store(INPROGRESS, Ordering::SeqCst);
        for (src, dst) in files {
            std::thread::sleep(std::time::Duration::from_millis(delay));
            if status.load(Ordering::SeqCst) == CANCELED {
                return;
            }
            if fail("transfer") || std::fs::copy(&src, &dst).is_err() {
                status.store(FAILED, Ordering::SeqCst);
                return;
            }
        }
        let _ =
            status.compare_exchange(INPROGRESS, FULLSUCCESS, Ordering::SeqCst, Ordering::SeqCst);
    });
    0
}

#[no_mangle]
pub unsafe extern "C" fn BB_GetTransferInfo(handle: u64, info: *mut BbTransferInfo) -> c_int {
    if !initialised() {
        return set_error("stand-in: library not initialised (ENODEV)");
    }
    let Some(s) = transfers().lock().unwrap().get(&handle).cloned() else {
        return set_error("stand-in: unknown handle");
    };
    unsafe {
        (*info).handle = handle;
        (*info).status = s.load(Ordering::SeqCst);
    }
    0
}

#[no_mangle]
pub unsafe extern "C" fn BB_CancelTransfer(handle: u64, scope: c_int) -> c_int {
    if scope != 1 {
        return set_error("stand-in: invalid cancel scope (BBSCOPETRANSFER is 1)");
    }
    if let Some(s) = transfers().lock().unwrap().get(&handle) {
        s.store(CANCELED, Ordering::SeqCst);
    }
    0
}

#[no_mangle]
pub unsafe extern "C" fn BB_GetLastErrorDetails(
    _format: c_int,
    avail: *mut usize,
    size: usize,
    buf: *mut c_char,
) -> c_int {
    let msg = last_error().lock().unwrap().clone();
    let bytes = msg.as_bytes();
    let n = bytes.len().min(size.saturating_sub(1));
    unsafe {
        *avail = bytes.len() + 1;
        std::ptr::copy_nonoverlapping(bytes.as_ptr().cast(), buf, n);
        *buf.add(n) = 0;
    }
    0
}

#[no_mangle]
pub unsafe extern "C" fn BB_FreeTransferDef(def: *mut c_void) -> c_int {
    drop(unsafe { Box::from_raw(def.cast::<Def>()) });
    0
}
