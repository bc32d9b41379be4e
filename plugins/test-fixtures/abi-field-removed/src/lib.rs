//! Test fixture: a library built against a copy of the plugin contract in which
//! `SchemeDescription` has no `summary` field. Its `build.rs` names the package `scr-plugin`, as a plugin built against a
//! changed scr-plugin would be, so abi_stable compares the layouts themselves; the host
//! must refuse it at load, saying in words what changed (`scr-host/tests/registry.rs`).
//!
//! Everything but `FfiScheme`, `SchemeDescription` and the root module comes from the real
//! scr-plugin; those are copies of `scr-plugin/src/abi.rs` (`FfiScheme` in `../abi-scheme.rs`)
//! with the one change marked `CHANGED`.
#![allow(non_local_definitions, missing_docs)]

// `FfiScheme` (ffi_scheme!) and the imports every abi-* fixture uses
include!("../../abi-scheme.rs");

/// What the host needs to know about a scheme instance, as in `scr-plugin/src/abi.rs`
/// but for the change.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq)]
pub struct SchemeDescription {
    pub name: RString,
    pub tolerated_losses: u32,
    // CHANGED: `pub summary: RString` removed
}

ffi_scheme! {
    fn redundancy_files(&self, dataset: &DatasetFiles) -> RResult<RVec<RString>, PluginError>;
}

const NAME: &str = "scr-fixture-abi-field-removed";

// the root module and its entry points, shared by the abi-* fixtures
include!("../../abi-root.rs");
