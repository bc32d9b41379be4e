//! The [`Loader`]: reads the sources (system file, API values, environment, user files)
//! into layers, merges and validates them. Kept apart from the [`Config`] types so each
//! file stays readable; the precedence rules are described in the module above.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::keys;
use super::merge::merge;
use super::DEFAULT_SYSTEM_CONFIG;
use super::{api, file, validate, Config, ConfigError, ConfigErrors, Layer, Origin, Tier};

/// Gathers the sources and produces a [`Config`].
#[derive(Clone, Debug, Default)]
pub struct Loader {
    /// Environment variables considered (normally the process environment).
    pub env: BTreeMap<String, String>,
    /// `key=value` (or `key=` to unset) strings set through the API, with the number of
    /// the call that set each, in call order.
    pub api: Vec<(usize, String)>,
    /// The system file to read instead of the usual one (`scr config check --system`).
    pub system_file: Option<PathBuf>,
    /// Directory for a relative or default `prefix` (normally the current directory).
    pub cwd: PathBuf,
    /// Extra files to read as user files, after the normal user file (used by
    /// `scr config check FILE...`).
    pub extra_user_files: Vec<PathBuf>,
    /// When set, configuration files are served from here instead of the file system:
    /// rank 0 reads the files and broadcasts this snapshot to the other ranks.
    pub snapshot: Option<Snapshot>,
    /// What was read (or found absent) during `load`, for broadcasting.
    seen: std::cell::RefCell<Snapshot>,
}

/// Configuration files by path: `None` when absent, else their text or the read error.
pub type Snapshot = BTreeMap<PathBuf, Option<Result<String, String>>>;

/// The test hook naming an injected failure (see `crate::hooks`): read from the
/// environment with the configuration, so it is not reported as an unknown setting.
pub const FAULT_VAR: &str = "SCR_FAULT";

/// The test hook of the flush/fetch window gauge (see `crate::hooks`).
pub const GAUGE_VAR: &str = "SCR_TEST_WINDOW";

impl Loader {
    /// `SCR_*` environment variables that name no configuration key (a typo such as
    /// `SCR_CACHSIZE=3` would otherwise be ignored in silence, while the same typo in a
    /// file is an error), each as a warning with a "did you mean" when one is close.
    /// Variables that are not keys but are read elsewhere are not reported.
    pub fn unknown_env(&self) -> Vec<String> {
        const NOT_KEYS: &[&str] = &[
            "SCR_SYSTEM_CONFIG",
            "SCR_SYSTEM_CONFIG_DEFAULT",
            FAULT_VAR,
            GAUGE_VAR,
            "SCR_FIXTURE_LIE",
            crate::registry::SKIP_BUILD_DIR_VAR,
            // where Python's `scr` module finds libscr (python/scr/__init__.py)
            "SCR_LIBRARY",
            // the GF(2^8)/XOR kernels a scheme plugin runs (scr-kernels' ENV_VAR, read
            // by each plugin's own copy of that crate, which the host does not link)
            "SCR_KERNELS",
        ];
        let known: Vec<String> = keys::KEYS.iter().flat_map(keys::env_vars).collect();
        self.env
            .keys()
            .filter(|v| v.starts_with("SCR_") && !NOT_KEYS.contains(&v.as_str()))
            .filter(|v| !known.contains(v))
            .map(|v| {
                let hint = keys::suggest(v, known.iter().map(String::as_str))
                    .map(|k| format!("; did you mean {k}?"))
                    .unwrap_or_default();
                format!("environment variable {v} names no scr-rs setting and is ignored{hint}")
            })
            .collect()
    }

    /// A loader over this process's environment and working directory.
    pub fn from_process() -> Self {
        // Variables that are not UTF-8 are skipped, except ours, which are passed on
        // (lossily) so that parsing reports them instead of ignoring them.
        let env = std::env::vars_os()
            .filter_map(|(k, v)| {
                let k = k.into_string().ok()?;
                match v.into_string() {
                    Ok(v) => Some((k, v)),
                    Err(v) if k.starts_with("SCR_") => {
                        let lossy = v.to_string_lossy().into_owned();
                        Some((k, lossy))
                    }
                    Err(_) => None,
                }
            })
            .collect();
        Loader {
            env,
            api: Vec::new(),
            system_file: None,
            cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
            extra_user_files: Vec::new(),
            snapshot: None,
            seen: Default::default(),
        }
    }

    /// Every file `load` looked at, with its contents: hand it to other processes as
    /// their [`Loader::snapshot`] so they see exactly what this one saw.
    pub fn seen(&self) -> Snapshot {
        self.seen.borrow().clone()
    }

    fn fetch(&self, path: &Path) -> Option<Result<String, String>> {
        let got = match &self.snapshot {
            Some(snap) => snap.get(path).cloned().flatten(),
            None => match std::fs::read(path) {
                // (the snapshot other ranks are sent holds the error as text)
                Ok(bytes) => Some(utf8_text(bytes).map_err(|e| e.to_string())),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => Some(Err(e.to_string())),
            },
        };
        self.seen
            .borrow_mut()
            .insert(path.to_path_buf(), got.clone());
        got
    }

    fn exists(&self, path: &Path) -> bool {
        self.fetch(path).is_some()
    }

    fn read(
        &self,
        path: &Path,
        tier: Tier,
        errors: &mut Vec<ConfigError>,
        files: &mut Vec<PathBuf>,
    ) -> Option<Layer> {
        match self
            .fetch(path)
            .unwrap_or_else(|| Err("No such file or directory".into()))
        {
            Ok(text) => {
                files.push(path.to_path_buf());
                Some(file::parse(path, &text, tier, errors))
            }
            Err(e) => {
                // a text error (see `utf8_text`) starts with the line it names
                let line = e
                    .strip_prefix("line ")
                    .and_then(|rest| rest.split(',').next())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                errors.push(ConfigError::new(
                    Origin::File {
                        path: path.to_path_buf(),
                        line,
                    },
                    format!("cannot read configuration file: {e}"),
                ));
                None
            }
        }
    }

    /// Read, merge and validate every source. Plugin names are not checked here (see
    /// [`crate::config::check_plugins`]).
    pub fn load(&self) -> Result<Config, ConfigErrors> {
        let mut errors = Vec::new();
        let mut files = Vec::new();
        let mut layers = Vec::new();

        // system file: named explicitly, else SCR_SYSTEM_CONFIG, else the compiled-in path.
        // Where the site installed the compiled-in file, the environment cannot replace it:
        // otherwise any user could lift the administrator's locks.
        let default_system = Path::new(DEFAULT_SYSTEM_CONFIG);
        let system = match (&self.system_file, self.env.get("SCR_SYSTEM_CONFIG")) {
            (Some(p), _) => Some(p.clone()),
            (None, Some(p)) if self.exists(default_system) && Path::new(p) != default_system => {
                errors.push(ConfigError::new(
                    Origin::Env("SCR_SYSTEM_CONFIG".into()),
                    format!("the site's system configuration {DEFAULT_SYSTEM_CONFIG} exists, so SCR_SYSTEM_CONFIG={p} is not honoured; unset it (administrators: check a new file with `scr config check --system FILE`)"),
                ));
                Some(default_system.to_path_buf())
            }
            (None, Some(p)) => Some(PathBuf::from(p)),
            (None, None) => Some(default_system.to_path_buf()).filter(|p| self.exists(p)),
        };
        if let Some(p) = system {
            layers.extend(
                self.read(&p, Tier::System, &mut errors, &mut files)
                    .map(|l| without_conf_file(l, &mut errors)),
            );
        }

        // API values (SCR_Config calls: scalars and descriptors)
        let api = api::layer(&self.api, &mut errors);
        let api_conf_file = api.scalars.get("conf_file").map(|(v, _)| v.to_param());
        layers.push(api);

        // environment
        let mut env = Layer::new(Tier::Env);
        for key in keys::KEYS {
            let set = keys::env_vars(key)
                .into_iter()
                .find_map(|var| self.env.get(&var).map(|text| (var, text)));
            if let Some((var, text)) = set {
                match keys::parse_text(key.ty, text) {
                    Ok(value) => {
                        env.scalars.insert(key.name, (value, Origin::Env(var)));
                    }
                    Err(why) => errors.push(ConfigError::new(Origin::Env(var), why.to_string())),
                }
            }
        }

        // user file: conf_file set through the API (which wins over the environment here,
        // as SCR's API values do: the environment's value is dropped so the one in force
        // is the file read), else SCR_CONF_FILE, else <prefix>/.scrconf.toml
        if api_conf_file.is_some() {
            env.scalars.remove("conf_file");
        }
        let named =
            api_conf_file.or_else(|| env.scalars.get("conf_file").map(|(v, _)| v.to_param()));
        let user = match named {
            Some(p) => Some(self.cwd.join(p)),
            None => {
                let prefix = env
                    .scalars
                    .get("prefix")
                    .or_else(|| layers.iter().rev().find_map(|l| l.scalars.get("prefix")))
                    .map(|(v, _)| self.cwd.join(v.to_param()))
                    .unwrap_or_else(|| self.cwd.clone());
                Some(prefix.join(".scrconf.toml")).filter(|p| self.exists(p))
            }
        };
        for p in user.iter().chain(&self.extra_user_files) {
            layers.extend(
                self.read(p, Tier::User, &mut errors, &mut files)
                    .map(|l| without_conf_file(l, &mut errors)),
            );
        }
        layers.push(env);

        let config = merge(layers, &self.cwd, &self.env, files, &mut errors);
        validate(&config, &mut errors);
        if errors.is_empty() {
            Ok(config)
        } else {
            Err(ConfigErrors(errors))
        }
    }
}

/// `layer` (a configuration file's) without `conf_file`, which only the environment or
/// the API may set: a file cannot say where the user file is (the system file is read
/// before the user file is chosen, and a user file naming itself or another would be a
/// loop). Setting it there is an error naming the line.
fn without_conf_file(mut layer: Layer, errors: &mut Vec<ConfigError>) -> Layer {
    if let Some((_, origin)) = layer.scalars.remove("conf_file") {
        errors.push(ConfigError::new(
            origin,
            "conf_file names the user configuration file and cannot be set in a configuration file; set SCR_CONF_FILE in the environment or call SCR_Config(\"SCR_CONF_FILE=<path>\") before init",
        ));
    }
    layer
}

/// A configuration file's bytes as text, or an error naming the first line that is not
/// UTF-8 (TOML files are UTF-8; a file saved as Latin-1 would otherwise be reported
/// without saying where).
fn utf8_text(bytes: Vec<u8>) -> Result<String, NotUtf8> {
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let bytes = e.as_bytes();
        let line = 1 + bytes[..at].iter().filter(|&&b| b == b'\n').count();
        let column = 1 + at
            - bytes[..at]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |p| p + 1);
        NotUtf8 {
            line,
            column,
            byte: bytes[at],
        }
    })
}

/// Where a configuration file stops being UTF-8 ([`utf8_text`]). Its text starts with the
/// line it names (the reader reports it at that line) and goes into the snapshot other
/// ranks are sent.
#[derive(Debug, thiserror::Error)]
#[error("line {line}, column {column}: byte 0x{byte:02x} is not UTF-8; configuration files must be UTF-8 text (re-save the file as UTF-8, e.g. `iconv -f latin1 -t utf-8`)")]
struct NotUtf8 {
    /// The line (from 1).
    line: usize,
    /// The column (from 1, in bytes).
    column: usize,
    /// The first byte that is not UTF-8.
    byte: u8,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A typo is reported with the key it resembles; variables read elsewhere (the
    /// kernels' choice, the Python module's library path) are not reported at all.
    #[test]
    fn unknown_env_reports_typos_but_not_variables_read_elsewhere() {
        let loader = Loader {
            env: [
                ("SCR_CACHSIZE", "3"),
                ("SCR_KERNELS", "avx2"),
                ("SCR_LIBRARY", "/x/libscr.so"),
                ("SCR_CACHE_SIZE", "2"),
                ("HOME", "/root"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            ..Loader::default()
        };
        assert_eq!(
            loader.unknown_env(),
            ["environment variable SCR_CACHSIZE names no scr-rs setting and is ignored; did you mean SCR_CACHE_SIZE?"]
        );
    }
}
