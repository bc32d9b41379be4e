//! The SINGLE redundancy scheme: files stay in cache with their metadata, no redundancy data.
//!
//! The library registers its names so that configurations can select them and
//! `scr plugins list` shows them; creating an instance answers "not implemented" until
//! the implementation lands, so nothing ever pretends to protect data.
#![forbid(unsafe_code)]

use scr_plugin::PluginLibrary;

/// The library's identity and the names it provides.
pub struct Single;

impl PluginLibrary for Single {
    const NAME: &'static str = "scr-single";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const SCHEMES: &'static [&'static str] = &["SINGLE"];
}

scr_plugin::export_plugin!(Single);
