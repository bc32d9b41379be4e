//! Test fixture: a library built against a copy of the plugin contract in which
//! the parameter of `FfiScheme::redundancy_files` is a `u64` (a dataset id) instead of `&DatasetFiles`. Its `build.rs` names the package `scr-plugin`, as a plugin built against a
//! changed scr-plugin would be, so abi_stable compares the layouts themselves; the host
//! must refuse it at load, saying in words what changed (`scr-host/tests/registry.rs`).
//!
//! Everything but `FfiScheme` and the root module comes from the real
//! scr-plugin; those are copied from `scr-plugin/src/abi.rs` with the one change marked
//! `CHANGED`.
#![allow(non_local_definitions, missing_docs)]

use abi_stable::{
    declare_root_module_statics,
    library::RootModule,
    package_version_strings,
    prefix_type::PrefixTypeTrait,
    sabi_trait,
    sabi_types::VersionStrings,
    std_types::{RBox, RResult, RString, RVec},
    StableAbi,
};
use scr_plugin::SchemeDescription;
use scr_plugin::{
    Applied, DatasetFiles, ErrorCode, FileMeta, HostRef, LibraryInfo, PluginError, RecoverRequest,
    SchemeConfig, SurvivorCheck, TransferBox, TransferConfig,
};

/// The scheme object, as in `scr-plugin/src/abi.rs` but for the change.
#[sabi_trait]
pub trait FfiScheme: Send + Sync {
    fn describe(&self) -> RResult<SchemeDescription, PluginError>;
    fn apply(
        &self,
        host: HostRef<'_>,
        dataset: &DatasetFiles,
    ) -> RResult<RVec<RString>, PluginError>;
    fn recover(
        &self,
        host: HostRef<'_>,
        request: &RecoverRequest,
    ) -> RResult<RVec<FileMeta>, PluginError>;
    // CHANGED: the parameter's type (was `&DatasetFiles`)
    fn redundancy_files(&self, dataset_id: u64) -> RResult<RVec<RString>, PluginError>;
    #[sabi(last_prefix_field)]
    fn remove(&self, host: HostRef<'_>, dataset: &DatasetFiles) -> RResult<(), PluginError>;
    fn crc32_in_apply(&self) -> bool {
        false
    }
    fn apply_with_crc(
        &self,
        host: HostRef<'_>,
        dataset: &DatasetFiles,
    ) -> RResult<Applied, PluginError> {
        let _ = (host, dataset);
        RResult::RErr(refused())
    }
    fn survivor_check(&self) -> SurvivorCheck {
        SurvivorCheck::Host
    }
}

/// An owned scheme object of this copy of the contract.
pub type SchemeBox = FfiScheme_TO<'static, RBox<()>>;

/// The root module, as in `scr-plugin/src/abi.rs` (its `new_scheme` returns this copy's
/// scheme object).
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = PluginModRef)))]
#[sabi(missing_field(panic))]
pub struct PluginMod {
    pub abi_version: u32,
    pub library: extern "C" fn() -> RResult<LibraryInfo, PluginError>,
    pub new_scheme: extern "C" fn(&SchemeConfig) -> RResult<SchemeBox, PluginError>,
    pub new_transfer:
        extern "C" fn(&TransferConfig, HostRef<'_>) -> RResult<TransferBox, PluginError>,
    #[sabi(last_prefix_field)]
    pub resume_transfer:
        extern "C" fn(&TransferConfig, HostRef<'_>) -> RResult<TransferBox, PluginError>,
}

impl RootModule for PluginModRef {
    declare_root_module_statics! {PluginModRef}
    const BASE_NAME: &'static str = "scr_plugin";
    const NAME: &'static str = "scr_plugin";
    const VERSION_STRINGS: VersionStrings = package_version_strings!();
}

const NAME: &str = "scr-fixture-abi-param-type";

fn refused() -> PluginError {
    PluginError::new(
        ErrorCode::UNSUPPORTED,
        "a layout-mismatch fixture provides nothing",
    )
}

extern "C" fn library() -> RResult<LibraryInfo, PluginError> {
    scr_plugin::guard(NAME, "library", || Err(refused()))
}

extern "C" fn new_scheme(_: &SchemeConfig) -> RResult<SchemeBox, PluginError> {
    scr_plugin::guard(NAME, "new_scheme", || Err(refused()))
}

extern "C" fn new_transfer(
    _: &TransferConfig,
    _: HostRef<'_>,
) -> RResult<TransferBox, PluginError> {
    scr_plugin::guard(NAME, "new_transfer", || Err(refused()))
}

/// The exported root module.
#[abi_stable::export_root_module]
pub fn root() -> PluginModRef {
    PluginMod {
        abi_version: scr_plugin::ABI_VERSION,
        library,
        new_scheme,
        new_transfer,
        resume_transfer: new_transfer,
    }
    .leak_into_prefix()
}
