// The root module and entry points shared by the `abi-*` fixtures, included by each one's
// lib.rs after its own copy of `FfiScheme` (the one change it tests) and its `NAME`: as
// in `scr-plugin/src/abi.rs`, but returning that copy's scheme object. Every entry point
// refuses (a layout fixture provides nothing) and runs under `scr_plugin::guard`.

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
