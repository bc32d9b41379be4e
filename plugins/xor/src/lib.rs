//! The XOR redundancy scheme: a pipelined ring reduce-scatter of XOR parity over each set.
//!
//! The library registers its names so that configurations can select them and
//! `scr plugins list` shows them; creating an instance answers "not implemented" until
//! the implementation lands, so nothing ever pretends to protect data.
#![forbid(unsafe_code)]

use scr_plugin::PluginLibrary;

/// The library's identity and the names it provides.
pub struct Xor;

impl PluginLibrary for Xor {
    const NAME: &'static str = "scr-xor";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const SCHEMES: &'static [&'static str] = &["XOR"];
}

scr_plugin::export_plugin!(Xor);
