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
    std_types::{RBox, ROption, RResult, RSlice, RString, RVec},
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
    fn rebuild_sources(&self, lost: RSlice<'_, u32>) -> ROption<RVec<u32>> {
        let _ = lost;
        ROption::RNone
    }
    fn recover_files(
        &self,
        host: HostRef<'_>,
        request: &RecoverRequest,
    ) -> RResult<RVec<FileMeta>, PluginError> {
        self.recover(host, request)
    }
}

const NAME: &str = "scr-fixture-abi-param-type";

// the root module and its entry points, shared by the abi-* fixtures
include!("../../abi-root.rs");
