//! Typed names of the scalar settings: one constant per key of the catalog, so that a
//! misspelt key name is a compile error instead of a panic at run time, and the Rust type
//! of a value is fixed by its key; and the typed accessors of settings whose value is
//! bounded where it is used (one rule per setting, here, instead of one per call site).
//!
//! ```
//! use scr_host::config::{settings, Config};
//! # fn f(config: &Config) {
//! let keep: u64 = config.get(settings::CACHE_SIZE);
//! let base: String = config.get(settings::CNTL_BASE);
//! let origin = &config.setting_of(settings::CACHE_SIZE).origin;
//! let buffer: usize = config.file_buf_size();
//! # }
//! ```
//!
//! The constants are generated from the catalog (`catalog.rs`), where each key is
//! declared once. Names that are only known at run time (`SCR_Config("KEY")` queries,
//! `SCR_<KEY>` environment variables, `scr config show`) go through [`super::keys`].

pub use super::catalog::typed::*;
pub use super::types::{Param, ParamValue};

use super::Config;

/// The smallest buffer files are copied and read with, whatever `file_buf_size` says: a
/// smaller one (0 included) would make no progress or one system call per few bytes.
pub const FILE_BUF_MIN: u64 = 4096;

/// The largest buffer files are copied and read with, whatever `file_buf_size` says: each
/// copy, CRC32 pass and background hash allocates one, so a mistyped size (`1T`) must not
/// make every process of the job allocate that much.
pub const FILE_BUF_MAX: u64 = 64 << 20;

/// The buffer size for a configured `file_buf_size` of `configured` bytes:
/// `configured` bounded to [`FILE_BUF_MIN`]`..=`[`FILE_BUF_MAX`].
pub fn file_buf_bytes(configured: u64) -> usize {
    // within 64 MiB, so it fits a usize everywhere
    configured.clamp(FILE_BUF_MIN, FILE_BUF_MAX) as usize
}

impl Config {
    /// The buffer size for copying and reading files (SCR's `SCR_FILE_BUF_SIZE`, in
    /// bytes): [`FILE_BUF_SIZE`] bounded by [`file_buf_bytes`]. Every file buffer the
    /// library and its tools allocate is sized by this, not by the raw setting.
    pub fn file_buf_size(&self) -> usize {
        file_buf_bytes(self.get(FILE_BUF_SIZE))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_constant_names_its_key() {
        assert_eq!(CACHE_SIZE.name(), "cache_size");
        assert_eq!(CACHE_SIZE.key().env_var(), "SCR_CACHE_SIZE");
    }

    #[test]
    fn the_file_buffer_is_bounded_at_both_ends() {
        assert_eq!(file_buf_bytes(0), 4096, "0 would make no progress");
        assert_eq!(file_buf_bytes(1), 4096);
        assert_eq!(file_buf_bytes(4095), 4096);
        assert_eq!(file_buf_bytes(4096), 4096);
        assert_eq!(
            file_buf_bytes(1 << 20),
            1 << 20,
            "the default is used as is"
        );
        assert_eq!(
            file_buf_bytes(64 << 20),
            64 << 20,
            "the largest is used as is"
        );
        assert_eq!(file_buf_bytes((64 << 20) + 1), 64 << 20);
        assert_eq!(file_buf_bytes(1 << 40), 64 << 20);
        assert_eq!(file_buf_bytes(u64::MAX), 64 << 20);
    }

    /// A configuration loaded with `SCR_FILE_BUF_SIZE` set to `text` (no system file).
    fn with_file_buf_size(text: &str) -> Config {
        let mut loader = super::super::Loader::from_process();
        loader.env = [("SCR_FILE_BUF_SIZE".to_string(), text.to_string())].into();
        loader.system_file = Some(std::path::PathBuf::from("/dev/null"));
        loader.cwd = std::env::temp_dir();
        loader.load().unwrap()
    }

    #[test]
    fn the_accessor_applies_the_bounds_to_the_setting() {
        for (text, raw, used) in [
            ("0", 0, 4096),
            ("1", 1, 4096),
            ("1MiB", 1 << 20, 1 << 20),
            ("8MiB", 8 << 20, 8 << 20),
            ("64MiB", 64 << 20, 64 << 20),
            ("67108865", (64 << 20) + 1, 64 << 20),
            ("1TiB", 1 << 40, 64 << 20),
        ] {
            let c = with_file_buf_size(text);
            assert_eq!(
                c.get(FILE_BUF_SIZE),
                raw,
                "{text}: the setting is kept as given"
            );
            assert_eq!(c.file_buf_size(), used, "{text}");
        }
    }
}
