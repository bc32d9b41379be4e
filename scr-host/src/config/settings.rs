//! Typed names of the scalar settings: one constant per key of the catalog, so that a
//! misspelt key name is a compile error instead of a panic at run time, and the Rust type
//! of a value is fixed by its key.
//!
//! ```
//! use scr_host::config::{settings, Config};
//! # fn f(config: &Config) {
//! let keep: u64 = config.get(settings::CACHE_SIZE);
//! let base: String = config.get(settings::CNTL_BASE);
//! let origin = &config.setting_of(settings::CACHE_SIZE).origin;
//! # }
//! ```
//!
//! The constants are generated from the catalog (`catalog.rs`), where each key is
//! declared once. Names that are only known at run time (`SCR_Config("KEY")` queries,
//! `SCR_<KEY>` environment variables, `scr config show`) go through [`super::keys`].

pub use super::catalog::typed::*;
pub use super::types::{Param, ParamValue};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_constant_names_its_key() {
        assert_eq!(CACHE_SIZE.name(), "cache_size");
        assert_eq!(CACHE_SIZE.key().env_var(), "SCR_CACHE_SIZE");
    }
}
