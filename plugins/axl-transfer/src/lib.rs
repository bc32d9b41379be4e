//! Transfer types: sync, pthread, IBM burst buffer (bbapi) and Cray DataWarp (dw).
//!
//! The library registers its names so that configurations can select them and
//! `scr plugins list` shows them; creating an instance answers "not implemented" until
//! the implementation lands, so nothing ever pretends to protect data.
#![forbid(unsafe_code)]

use scr_plugin::PluginLibrary;

/// The library's identity and the names it provides.
pub struct AxlTransfer;

impl PluginLibrary for AxlTransfer {
    const NAME: &'static str = "scr-axl-transfer";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const TRANSFERS: &'static [&'static str] = &["sync", "pthread", "bbapi", "dw"];
}

scr_plugin::export_plugin!(AxlTransfer);
