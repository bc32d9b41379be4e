//! Typed names of the scalar settings: one constant per key of [`keys::KEYS`], so that a
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
//! Names that are only known at run time (`SCR_Config("KEY")` queries, `SCR_<KEY>`
//! environment variables, `scr config show`) still go through the catalog by name.

use std::fmt;
use std::marker::PhantomData;

use super::keys::{self, Type, Value};
use super::Setting;

/// A scalar setting (an SCR parameter such as `SCR_CACHE_SIZE`), named in code by one of
/// the constants of this module; `T` is the Rust type [`super::Config::get`] returns.
pub struct Param<T> {
    name: &'static str,
    ty: PhantomData<fn() -> T>,
}

// Derives would require `T: Copy`; a key is only a name whatever its value type.
impl<T> Clone for Param<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Param<T> {}

impl<T> fmt::Debug for Param<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Param({})", self.name)
    }
}

impl<T> Param<T> {
    /// The setting called `name` in [`keys::KEYS`] (only this module makes them, and a
    /// unit test checks each against the catalog).
    const fn new(name: &'static str) -> Self {
        Param {
            name,
            ty: PhantomData,
        }
    }

    /// The key's name, lower case (`cache_size`).
    pub fn name(self) -> &'static str {
        self.name
    }

    /// The key's catalog entry: type, default and meaning.
    pub fn key(self) -> &'static keys::Key {
        keys::find(self.name).expect("every typed setting is in the key catalog")
    }
}

/// The Rust types a setting's value is read as, each with its value when the key is
/// unset (no default and no source set it): `false`, `0`, `0.0` or an empty string —
/// what the by-name accessors returned before the keys were typed.
pub trait ParamValue: Sized {
    /// The value of `setting` as this type.
    fn from_setting(setting: &Setting) -> Self;

    /// Whether a key of type `ty` is read as this type.
    fn accepts(ty: Type) -> bool;
}

impl ParamValue for bool {
    /// `true` only when set to true.
    fn from_setting(setting: &Setting) -> Self {
        matches!(setting.value, Some(Value::Bool(true)))
    }

    fn accepts(ty: Type) -> bool {
        ty == Type::Bool
    }
}

impl ParamValue for u64 {
    /// The number, 0 when unset.
    fn from_setting(setting: &Setting) -> Self {
        match setting.value {
            Some(Value::UInt(n)) => n,
            _ => 0,
        }
    }

    fn accepts(ty: Type) -> bool {
        matches!(ty, Type::UInt { .. } | Type::Bytes)
    }
}

impl ParamValue for f64 {
    /// The percentage, 0 when unset.
    fn from_setting(setting: &Setting) -> Self {
        match setting.value {
            Some(Value::Float(x)) => x,
            _ => 0.0,
        }
    }

    fn accepts(ty: Type) -> bool {
        ty == Type::Percent
    }
}

impl ParamValue for String {
    /// The text, empty when unset.
    fn from_setting(setting: &Setting) -> Self {
        setting
            .value
            .as_ref()
            .map(Value::to_param)
            .unwrap_or_default()
    }

    fn accepts(ty: Type) -> bool {
        matches!(ty, Type::Str | Type::Path | Type::Choice(_))
    }
}

/// One constant per key, and `ALL` listing them for the catalog test.
macro_rules! settings {
    ($($name:ident: $ty:ty = $key:literal;)*) => {
        $(
            #[doc = concat!("`", $key, "`: see [`keys::KEYS`] for its meaning and default.")]
            pub const $name: Param<$ty> = Param::new($key);
        )*

        /// Every typed setting: its key name and whether a catalog type fits its Rust type.
        #[cfg(test)]
        const ALL: &[(&str, fn(Type) -> bool)] = &[$(($key, <$ty as ParamValue>::accepts)),*];
    };
}

settings! {
    ENABLE: bool = "enable";
    DEBUG: u64 = "debug";
    PREFIX: String = "prefix";
    CNTL_BASE: String = "cntl_base";
    CACHE_BASE: String = "cache_base";
    CACHE_SIZE: u64 = "cache_size";
    CACHE_BYPASS: bool = "cache_bypass";
    COPY_TYPE: String = "copy_type";
    SET_SIZE: u64 = "set_size";
    SET_FAILURES: u64 = "set_failures";
    REPLICAS: u64 = "replicas";
    GROUP: String = "group";
    FLUSH: u64 = "flush";
    FLUSH_ASYNC: bool = "flush_async";
    FLUSH_WIDTH: u64 = "flush_width";
    FETCH_WIDTH: u64 = "fetch_width";
    FLUSH_TYPE: String = "flush_type";
    FLUSH_POSTSTAGE: bool = "flush_poststage";
    FLUSH_ON_RESTART: bool = "flush_on_restart";
    FLUSH_ON_FINALIZE: bool = "flush_on_finalize";
    FETCH: bool = "fetch";
    CURRENT: String = "current";
    DROP_AFTER_CURRENT: bool = "drop_after_current";
    GLOBAL_RESTART: bool = "global_restart";
    PREFIX_SIZE: u64 = "prefix_size";
    PREFIX_PURGE: bool = "prefix_purge";
    DISTRIBUTE: bool = "distribute";
    FETCH_BYPASS: bool = "fetch_bypass";
    CACHE_PURGE: bool = "cache_purge";
    CRC_ON_COPY: bool = "crc_on_copy";
    CRC_ON_COPY_DEFER: bool = "crc_on_copy_defer";
    CRC_ON_RESTART: bool = "crc_on_restart";
    CRC_ON_FLUSH: bool = "crc_on_flush";
    CRC_ON_DELETE: bool = "crc_on_delete";
    CHECKPOINT_INTERVAL: u64 = "checkpoint_interval";
    CHECKPOINT_SECONDS: u64 = "checkpoint_seconds";
    CHECKPOINT_OVERHEAD: f64 = "checkpoint_overhead";
    HALT_SECONDS: u64 = "halt_seconds";
    HALT_EXIT: bool = "halt_exit";
    ABORT_TIMEOUT: u64 = "abort_timeout";
    MPI_BUF_SIZE: u64 = "mpi_buf_size";
    FILE_BUF_SIZE: u64 = "file_buf_size";
    RANK2FILE_BLOCK: u64 = "rank2file_block";
    JOB_ID: String = "job_id";
    JOB_NAME: String = "job_name";
    NODE_NAMES: String = "node_names";
    USER: String = "user";
    END_TIME: u64 = "end_time";
    LOG_ENABLE: bool = "log_enable";
    LOG_TXT_ENABLE: bool = "log_txt_enable";
    LOG_SYSLOG_ENABLE: bool = "log_syslog_enable";
    LOG_SYSLOG_PREFIX: String = "log_syslog_prefix";
    LOG_SYSLOG_FACILITY: String = "log_syslog_facility";
    LOG_SYSLOG_LEVEL: String = "log_syslog_level";
    LOG_DB_ENABLE: bool = "log_db_enable";
    LOG_DB_DEBUG: u64 = "log_db_debug";
    LOG_DB_HOST: String = "log_db_host";
    LOG_DB_USER: String = "log_db_user";
    LOG_DB_PASS: String = "log_db_pass";
    LOG_DB_NAME: String = "log_db_name";
    CONF_FILE: String = "conf_file";
    NODELIST: String = "nodelist";
    EXCLUDE_NODES: String = "exclude_nodes";
    MIN_NODES: u64 = "min_nodes";
    RUNS: u64 = "runs";
    WATCHDOG_TIMEOUT: u64 = "watchdog_timeout";
    WATCHDOG_TIMEOUT_PFS: u64 = "watchdog_timeout_pfs";
    DOWN_NODES_SCRIPT: String = "down_nodes_script";
    CACHE_FREE: u64 = "cache_free";
    REMOTE_RUNNER: String = "remote_runner";
    REMOTE_TIMEOUT: u64 = "remote_timeout";
    REMOTE_FANOUT: u64 = "remote_fanout";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_typed_setting_is_a_catalog_key_of_a_fitting_type() {
        for (name, accepts) in ALL {
            let key = keys::KEYS
                .iter()
                .find(|k| k.name == *name)
                .unwrap_or_else(|| panic!("typed setting `{name}` is not in keys::KEYS"));
            assert!(accepts(key.ty), "`{name}` is {} in keys::KEYS", key.ty);
        }
    }

    #[test]
    fn every_catalog_key_has_one_typed_setting() {
        for key in keys::KEYS {
            let n = ALL.iter().filter(|(name, _)| *name == key.name).count();
            assert_eq!(
                n, 1,
                "keys::KEYS has `{}`: add one constant for it",
                key.name
            );
        }
        assert_eq!(ALL.len(), keys::KEYS.len());
    }

    #[test]
    fn a_constant_names_its_key() {
        assert_eq!(CACHE_SIZE.name(), "cache_size");
        assert_eq!(CACHE_SIZE.key().env_var(), "SCR_CACHE_SIZE");
    }
}
