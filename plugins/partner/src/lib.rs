//! The PARTNER redundancy scheme: full copies of each member's files on members of other failure groups.
//!
//! The library registers its names so that configurations can select them and
//! `scr plugins list` shows them; creating an instance answers "not implemented" until
//! the implementation lands, so nothing ever pretends to protect data.
#![forbid(unsafe_code)]

use scr_plugin::PluginLibrary;

/// The library's identity and the names it provides.
pub struct Partner;

impl PluginLibrary for Partner {
    const NAME: &'static str = "scr-partner";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const SCHEMES: &'static [&'static str] = &["PARTNER"];
}

scr_plugin::export_plugin!(Partner);
