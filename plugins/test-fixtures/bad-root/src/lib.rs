//! Test fixture: a plugin whose exported root-module function panics while loading.

use scr_plugin::PluginModRef;

/// Panics instead of returning the root module.
#[abi_stable::export_root_module]
pub fn root() -> PluginModRef {
    panic!("deliberate panic while building the root module")
}
