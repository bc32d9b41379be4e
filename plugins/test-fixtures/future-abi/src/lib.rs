//! Test fixture: a layout-compatible plugin that reports a newer semantic ABI version,
//! which the host must refuse with "expected N, found N+1".

use abi_stable::prefix_type::PrefixTypeTrait;
use scr_plugin::{PluginLibrary, PluginMod, PluginModRef, ABI_VERSION};

/// Would provide FUTURE if the host accepted it.
pub struct Future;

impl PluginLibrary for Future {
    const NAME: &'static str = "scr-fixture-future-abi";
    const VERSION: &'static str = "9.0.0";
    const SCHEMES: &'static [&'static str] = &["FUTURE"];
}

/// The root module, as `export_plugin!` would build it but with the next ABI version.
#[abi_stable::export_root_module]
pub fn root() -> PluginModRef {
    let base = scr_plugin::root_module::<Future>();
    PluginMod {
        abi_version: ABI_VERSION + 1,
        library: base.library(),
        new_scheme: base.new_scheme(),
        new_transfer: base.new_transfer(),
        resume_transfer: base.resume_transfer(),
    }
    .leak_into_prefix()
}
