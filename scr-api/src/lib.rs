//! The scr-rs application API.
//!
//! This first piece is what an application can do before init: set configuration
//! values, as SCR's `SCR_Config("KEY=VALUE")` does. They rank between the user's file and
//! the system file (see [`scr_host::config`]); a key the administrator locked is refused
//! when the configuration is loaded, naming the call. The checkpoint/restart lifecycle
//! (init, output, restart, finalize) joins this crate with the MPI runtime.
//!
//! ```
//! let mut settings = scr_api::Settings::new();
//! settings.set("SCR_CACHE_SIZE=3")?;            // SCR's spelling works too
//! settings.set("copy_type = PARTNER")?;
//! assert_eq!(settings.get("cache_size").as_deref(), Some("3"));
//! assert!(settings.set("cache_sise=3").unwrap_err().to_string().contains("did you mean `cache_size`?"));
//! # Ok::<(), scr_api::SettingsError>(())
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use scr_host::config::{keys, Loader};

/// A value the application tried to set was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("configuration call {call} (\"{text}\"): {message}")]
pub struct SettingsError {
    /// 1-based number of the call.
    pub call: usize,
    /// The text passed.
    pub text: String,
    /// What is wrong.
    pub message: String,
}

/// Configuration values set by the application before init, in call order.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// Accepted calls: (call number, text as given, key, value or `None` for unset).
    calls: Vec<(usize, String, &'static str, Option<String>)>,
    attempts: usize,
}

impl Settings {
    /// No values set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Set (`key=value`) or unset (`key=`) one scalar key. The key may be written as in
    /// the TOML files (`cache_size`) or as SCR's parameter (`SCR_CACHE_SIZE`); the value
    /// is checked against the key's type at once, so a mistake is reported at the call.
    pub fn set(&mut self, text: &str) -> Result<(), SettingsError> {
        self.attempts += 1;
        let err = |message: String| SettingsError {
            call: self.attempts,
            text: text.to_string(),
            message,
        };
        let (k, v) = text
            .split_once('=')
            .ok_or_else(|| err("expected `key=value` (or `key=` to unset)".into()))?;
        let key = keys::find_api(k).ok_or_else(|| err(keys::unknown_key(k.trim())))?;
        let value = if v.trim().is_empty() {
            None
        } else {
            let parsed = keys::parse_text(key.ty, v).map_err(err)?;
            Some(parsed.to_param())
        };
        self.calls
            .push((self.attempts, text.to_string(), key.name, value));
        Ok(())
    }

    /// The value last set for `key` (any spelling), unless it was unset since.
    pub fn get(&self, key: &str) -> Option<String> {
        let name = keys::find_api(key)?.name;
        self.calls
            .iter()
            .rev()
            .find(|(_, _, k, _)| *k == name)
            .and_then(|(_, _, _, v)| v.clone())
    }

    /// A loader over this process's environment with these calls as the API source; its
    /// errors (a locked key, say) name the call by its number and text.
    pub fn loader(&self) -> Loader {
        let mut loader = Loader::from_process();
        loader.api = self
            .calls
            .iter()
            .map(|(n, text, _, _)| (*n, text.clone()))
            .collect();
        loader
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use scr_host::config::{keys::Value, Config, ConfigErrors, Origin};

    /// Load `settings` over a system file with `system_text` and no other source.
    fn load_with_system(settings: &Settings, system_text: &str) -> Result<Config, ConfigErrors> {
        let dir = tempfile::tempdir().unwrap();
        let system = dir.path().join("system.toml");
        std::fs::write(&system, system_text).unwrap();
        let mut loader = settings.loader();
        loader.env = [(
            "SCR_SYSTEM_CONFIG".to_string(),
            system.display().to_string(),
        )]
        .into();
        loader.cwd = dir.path().to_path_buf();
        loader.load()
    }

    #[test]
    fn bad_calls_name_the_call_and_the_problem() {
        let mut s = Settings::new();
        s.set("set_size=4").unwrap();
        let e = s.set("set_size=1").unwrap_err();
        assert_eq!(
            e.to_string(),
            "configuration call 2 (\"set_size=1\"): 1 is out of range: expected a whole number in 2..=4096"
        );
        let e = s.set("flush").unwrap_err();
        assert_eq!(e.call, 3);
        assert!(e.message.contains("expected `key=value`"));
        assert_eq!(s.get("SCR_SET_SIZE").as_deref(), Some("4"));
    }

    #[test]
    fn unset_removes_a_value_and_errors_name_the_original_call() {
        let mut s = Settings::new();
        s.set("debug=1").unwrap();
        assert!(s.set("debug=x").is_err());
        s.set("debug=").unwrap();
        s.set("SCR_MPI_BUF_SIZE=1MiB").unwrap();
        assert_eq!(s.get("debug"), None);
        let errors = load_with_system(&s, "locked = [\"mpi_buf_size\"]\n")
            .unwrap_err()
            .0;
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(
            errors[0].origin,
            Origin::Api(4, "SCR_MPI_BUF_SIZE=1MiB".into())
        );
        assert!(errors[0].message.contains("`mpi_buf_size` is locked"));
    }

    #[test]
    fn values_rank_between_user_and_system_files() {
        let mut s = Settings::new();
        s.set("cache_size=3").unwrap();
        let c = load_with_system(&s, "cache_size = 7\nset_size = 16\n").unwrap();
        assert_eq!(c.setting("cache_size").value, Some(Value::UInt(3)));
        assert_eq!(
            c.setting("cache_size").origin,
            Origin::Api(1, "cache_size=3".into())
        );
        assert_eq!(c.u64("set_size"), 16);
    }
}
