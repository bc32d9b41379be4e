//! Test fixture: a library built against a copy of the plugin contract in which
//! `FfiScheme::redundancy_files` takes a parameter more (`member: u32`). Its `build.rs` names the package `scr-plugin`, as a plugin built against a
//! changed scr-plugin would be, so abi_stable compares the layouts themselves; the host
//! must refuse it at load, saying in words what changed (`scr-host/tests/registry.rs`).
//!
//! Everything but `FfiScheme` and the root module comes from the real scr-plugin;
//! those are copies of `scr-plugin/src/abi.rs` (`FfiScheme` in `../abi-scheme.rs`, the
//! root module in `../abi-root.rs`) with the one change marked `CHANGED`.
#![allow(non_local_definitions, missing_docs)]

use scr_plugin::SchemeDescription;

// `FfiScheme` (ffi_scheme!) and the imports every abi-* fixture uses
include!("../../abi-scheme.rs");

// CHANGED: a parameter added
ffi_scheme! {
    fn redundancy_files(
        &self,
        dataset: &DatasetFiles,
        member: u32,
    ) -> RResult<RVec<RString>, PluginError>;
}

const NAME: &str = "scr-fixture-abi-param-added";

// the root module and its entry points, shared by the abi-* fixtures
include!("../../abi-root.rs");
