//! Test fixture: an ordinary shared library with no scr-rs root module.

/// An exported C function, so the library is a real, loadable shared object.
#[no_mangle]
pub extern "C" fn scr_fixture_answer() -> i32 {
    42
}
