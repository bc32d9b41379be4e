//! The Reed-Solomon (RS) redundancy scheme over GF(2^8): tolerates set_failures losses per set.
//!
//! The library registers its names so that configurations can select them and
//! `scr plugins list` shows them; creating an instance answers "not implemented" until
//! the implementation lands, so nothing ever pretends to protect data.
#![forbid(unsafe_code)]

use scr_plugin::PluginLibrary;

/// The library's identity and the names it provides.
pub struct Rs;

impl PluginLibrary for Rs {
    const NAME: &'static str = "scr-rs";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const SCHEMES: &'static [&'static str] = &["RS"];
}

scr_plugin::export_plugin!(Rs);
