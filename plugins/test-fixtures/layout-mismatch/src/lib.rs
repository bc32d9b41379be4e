//! Test fixture: exports an abi_stable root module under the scr-rs plugin name whose
//! layout differs (`abi_version` is a `u8` and a field is missing), as a library built
//! against an incompatible copy of the plugin contract would. The host must refuse it at
//! load with a one-line reason.
#![allow(non_local_definitions)]

use abi_stable::{
    declare_root_module_statics, library::RootModule, package_version_strings,
    prefix_type::PrefixTypeTrait, sabi_types::VersionStrings, StableAbi,
};

/// The mismatched root module.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = PluginModRef)))]
pub struct PluginMod {
    /// Deliberately the wrong integer type.
    #[sabi(last_prefix_field)]
    pub abi_version: u8,
}

impl RootModule for PluginModRef {
    declare_root_module_statics! {PluginModRef}
    const BASE_NAME: &'static str = "scr_plugin";
    const NAME: &'static str = "scr_plugin";
    const VERSION_STRINGS: VersionStrings = package_version_strings!();
}

/// The exported root module.
#[abi_stable::export_root_module]
pub fn root() -> PluginModRef {
    PluginMod { abi_version: 1 }.leak_into_prefix()
}
