// The scheme object shared by the `abi-*` fixtures, included by each one's lib.rs: a copy
// of `FfiScheme` from `scr-plugin/src/abi.rs` in which the fixture gives its own
// `redundancy_files` declaration (`ffi_scheme!` takes it) — the one place a layout
// fixture may change the trait. `SchemeDescription` is whatever the fixture has in scope
// (the real one, or its changed copy). One copy here, so that a method added to the
// contract is added to every fixture at once.

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
use scr_plugin::{
    Applied, DatasetFiles, ErrorCode, FileMeta, HostRef, LibraryInfo, PluginError, RecoverRequest,
    SchemeConfig, SurvivorCheck, TransferBox, TransferConfig,
};

/// `FfiScheme` as in `scr-plugin/src/abi.rs`, with `$redundancy_files` as the
/// declaration of `redundancy_files`.
macro_rules! ffi_scheme {
    ($($redundancy_files:tt)*) => {
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
            $($redundancy_files)*
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
    };
}
