//! Test fixture: provides a scheme named `xor`, which the shipped XOR library also
//! provides, so the registry must report the duplicate.

use scr_plugin::PluginLibrary;

/// Claims `xor` (lower case on purpose: lookup is case-insensitive).
pub struct Duplicate;

impl PluginLibrary for Duplicate {
    const NAME: &'static str = "scr-fixture-duplicate";
    const VERSION: &'static str = "0.0.1";
    const SCHEMES: &'static [&'static str] = &["xor", "UNIQUE_FIXTURE"];
}

scr_plugin::export_plugin!(Duplicate);
