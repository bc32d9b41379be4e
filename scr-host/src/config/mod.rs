//! Configuration: TOML files, environment variables and values set through the API,
//! merged by precedence, validated, and kept with the origin of every value.
//!
//! Sources, first match wins:
//!
//! 1. the environment, `SCR_<KEY>` (e.g. `SCR_CACHE_SIZE=4`);
//! 2. the user file: `SCR_CONF_FILE`, else `<prefix>/.scrconf.toml` if it exists;
//! 3. values the application set through the API before init (`key=value` strings);
//! 4. the system file: [`DEFAULT_SYSTEM_CONFIG`] if the site installed it, else
//!    `SCR_SYSTEM_CONFIG` (an installed site file cannot be replaced from the
//!    environment, or any user could lift the locks); [`Loader::system_file`] overrides
//!    both for `scr config check --system`;
//! 5. built-in defaults (see [`keys::KEYS`]).
//!
//! Keys listed in the system file's `locked` array cannot be set by sources 1–3; trying
//! is an error that names both places. A locked key also locks the descriptor fields that
//! stand for it (see `LOCKED_ALIASES`), and a locked `store` list cannot grow through a
//! user's `cache_base`. The descriptor sections merge like this:
//! `[[group]]` host tables and `[[store]]` tables by identity (host name, store path) — a
//! higher source replaces an entry with the same identity and adds new ones;
//! `[[checkpoint]]` tables as a whole — the highest source that has any replaces the whole
//! list, because descriptors chosen by interval only make sense as one policy. With no
//! checkpoint table anywhere, one descriptor is implied from `copy_type`, `set_size`,
//! `group` and `cache_base` (SCR's behaviour); with no store table for `cache_base`, one
//! is implied too, so a setup with no file at all works.

pub mod api;
mod check;
mod descriptor;
pub mod keys;

mod file;
pub mod import;
mod render;
pub mod settings;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

pub use check::{check_plugins, PluginFindings};
pub use descriptor::Descriptor;
use keys::{Key, Value};
pub use render::render;

/// The system configuration read when `SCR_SYSTEM_CONFIG` is not set (if it exists).
/// Overridable at build time with the `SCR_SYSTEM_CONFIG_DEFAULT` environment variable.
pub const DEFAULT_SYSTEM_CONFIG: &str = match option_env!("SCR_SYSTEM_CONFIG_DEFAULT") {
    Some(p) => p,
    None => "/etc/scr/scr.toml",
};

/// `s` as a TOML basic string, escaped by the toml crate itself.
pub fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// `k` as a TOML key: bare when it may be, quoted otherwise.
pub fn toml_key(k: &str) -> String {
    if !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        k.to_string()
    } else {
        toml_string(k)
    }
}

/// Names of the descriptor sections (lockable as a whole).
pub const SECTIONS: &[&str] = &["group", "store", "checkpoint", "plugins"];

/// Where a value came from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Origin {
    /// A built-in default.
    #[default]
    Default,
    /// A line of a configuration file.
    File {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
    },
    /// An environment variable.
    Env(String),
    /// The n-th (1-based) value set through the API, with its text.
    Api(usize, String),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Default => f.write_str("default"),
            // line 0: the file as a whole (e.g. it could not be read)
            Origin::File { path, line: 0 } => write!(f, "{}", path.display()),
            Origin::File { path, line } => write!(f, "{}:{line}", path.display()),
            Origin::Env(var) => write!(f, "environment {var}"),
            Origin::Api(n, text) => write!(f, "API config call {n} (\"{text}\")"),
        }
    }
}

/// One configuration problem, located.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// Where the bad value is.
    pub origin: Origin,
    /// What is wrong and, where possible, what to write instead.
    pub message: String,
}

impl ConfigError {
    pub(crate) fn new(origin: Origin, message: impl Into<String>) -> Self {
        ConfigError {
            origin,
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.origin, self.message)
    }
}

/// Every problem found while loading, in source order.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// `[[checkpoint]]` fields that stand for a scalar key: locking the key locks them.
const LOCKED_ALIASES: &[(&str, &str)] = &[
    ("type", "copy_type"),
    ("store", "cache_base"),
    ("group", "group"),
    ("set_size", "set_size"),
    ("set_failures", "set_failures"),
    ("replicas", "replicas"),
];

/// Precedence tiers, lowest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Tier {
    System,
    Api,
    User,
    Env,
}

/// One `[[group]]` host table: the host's value for each custom group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupEntry {
    /// Host (node) name.
    pub host: String,
    /// Group name → this host's value.
    pub values: BTreeMap<String, String>,
    /// Where the table is.
    pub origin: Origin,
}

/// Whether a store is private to a node or shared by all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    /// Each node sees its own device.
    Node,
    /// Every process sees the same files.
    Global,
}

impl fmt::Display for View {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            View::Node => "node",
            View::Global => "global",
        })
    }
}

/// A store descriptor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Store {
    /// Directory prefix; also the store's name.
    pub path: String,
    /// Group of processes sharing a device (default: `group`).
    pub group: Option<String>,
    /// Datasets kept (default: `cache_size`).
    pub count: Option<u64>,
    /// Whether scr-rs creates the job's directory `<path>/<user>/scr.<jobid>` (SCR's
    /// MKDIR). When false, something else (a job prolog, the burst buffer) must have made
    /// it before the job starts; init refuses the store otherwise.
    pub mkdir: bool,
    /// Whether the store may be used.
    pub enabled: bool,
    /// Node-local or global (default: global for group WORLD, else node).
    pub view: Option<View>,
    /// Transfer type for flushes from this store (default: `flush_type`).
    pub transfer: Option<String>,
    /// Where it was defined.
    pub origin: Origin,
}

impl Store {
    /// A store at `path` with every optional field at its default.
    pub(crate) fn new(path: String, origin: Origin) -> Self {
        Store {
            path,
            group: None,
            count: None,
            mkdir: true,
            enabled: true,
            view: None,
            transfer: None,
            origin,
        }
    }
}

/// A checkpoint (redundancy) descriptor as configured; unset fields fall back to the
/// scalar keys of the same meaning.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    /// Used for checkpoint ids divisible by this.
    pub interval: u64,
    /// Store path (default: `cache_base`).
    pub store: Option<String>,
    /// Failure group (default: `group`).
    pub group: Option<String>,
    /// Scheme name (default: `copy_type`).
    pub scheme: Option<String>,
    /// `set_size`, `set_failures`, `replicas` when set in the table.
    pub numbers: BTreeMap<&'static str, u64>,
    /// Also an output dataset destined for the prefix.
    pub output: bool,
    /// Write directly to the prefix, bypassing cache.
    pub bypass: bool,
    /// Whether this descriptor may be chosen.
    pub enabled: bool,
    /// Scheme-specific parameters from the `params` table, each with its line.
    pub params: Vec<(String, String, Origin)>,
    /// Where the table is.
    pub origin: Origin,
    /// Where each key of the table is.
    pub origins: BTreeMap<&'static str, Origin>,
    /// The index an application gave it with `SCR_Config("CKPT=<index> ...")` (SCR names
    /// descriptors by index; queries such as `CKPT=3 TYPE` look it up by that).
    pub index: Option<u64>,
}

impl Checkpoint {
    pub(crate) fn new(origin: Origin) -> Self {
        Checkpoint {
            interval: 1,
            store: None,
            group: None,
            scheme: None,
            numbers: BTreeMap::new(),
            output: false,
            bypass: false,
            enabled: true,
            params: Vec::new(),
            origin,
            origins: BTreeMap::new(),
            index: None,
        }
    }
}

/// Plugin search settings.
#[derive(Clone, Debug, Default)]
pub struct Plugins {
    /// Site plugin directories (system file only).
    pub site_directories: Vec<(PathBuf, Origin)>,
    /// Library files named explicitly (system file; user files too when allowed).
    pub files: Vec<(PathBuf, Origin)>,
    /// User plugin directories (only when allowed).
    pub user_directories: Vec<(PathBuf, Origin)>,
    /// Whether users may add plugins.
    pub allow_user_plugins: (bool, Origin),
    /// Whether the shipped plugins are loaded.
    pub builtin: (bool, Origin),
    /// `[plugins.<name>]` settings: lower-case name → key → (value, origin).
    pub settings: BTreeMap<String, BTreeMap<String, (String, Origin)>>,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct PluginLayer {
    pub directories: Vec<(PathBuf, Origin)>,
    pub files: Vec<(PathBuf, Origin)>,
    pub allow_user_plugins: Option<(bool, Origin)>,
    pub builtin: Option<(bool, Origin)>,
    pub settings: BTreeMap<String, BTreeMap<String, (String, Origin)>>,
}

/// What one source contributes.
#[derive(Clone, Debug)]
pub(crate) struct Layer {
    pub tier: Tier,
    pub scalars: BTreeMap<&'static str, (Value, Origin)>,
    pub groups: Vec<GroupEntry>,
    pub stores: Vec<Store>,
    pub checkpoints: Vec<Checkpoint>,
    pub plugins: PluginLayer,
    pub locked: Vec<(String, Origin)>,
    /// Sections present in this source, with where they start (for lock checks).
    pub sections: BTreeMap<&'static str, Origin>,
}

impl Layer {
    pub(crate) fn new(tier: Tier) -> Self {
        Layer {
            tier,
            scalars: BTreeMap::new(),
            groups: Vec::new(),
            stores: Vec::new(),
            checkpoints: Vec::new(),
            plugins: PluginLayer::default(),
            locked: Vec::new(),
            sections: BTreeMap::new(),
        }
    }
}

/// An effective scalar value with its origin (`None` value: unset, no default).
#[derive(Clone, Debug, PartialEq)]
pub struct Setting {
    /// The value in force.
    pub value: Option<Value>,
    /// Where it came from.
    pub origin: Origin,
}

/// The effective configuration.
#[derive(Clone, Debug)]
pub struct Config {
    scalars: BTreeMap<&'static str, Setting>,
    /// Host tables of custom groups.
    pub groups: Vec<GroupEntry>,
    /// Store descriptors (including the implied one for `cache_base`).
    pub stores: Vec<Store>,
    /// Checkpoint descriptors (or the implied one).
    pub checkpoints: Vec<Checkpoint>,
    /// Plugin search settings.
    pub plugins: Plugins,
    /// Locked keys and where they were locked.
    pub locked: BTreeMap<String, Origin>,
    /// Files that were read, in precedence order (lowest first).
    pub files: Vec<PathBuf>,
}

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

impl Loader {
    /// `SCR_*` environment variables that name no configuration key (a typo such as
    /// `SCR_CACHSIZE=3` would otherwise be ignored in silence, while the same typo in a
    /// file is an error), each as a warning with a "did you mean" when one is close.
    /// Variables that are not keys but are read elsewhere are not reported.
    pub fn unknown_env(&self) -> Vec<String> {
        const NOT_KEYS: &[&str] = &[
            "SCR_CONF_FILE",
            "SCR_SYSTEM_CONFIG",
            "SCR_SYSTEM_CONFIG_DEFAULT",
            "SCR_FAULT",
            "SCR_FIXTURE_LIE",
            crate::registry::SKIP_BUILD_DIR_VAR,
            // where Python's `scr` module finds libscr (python/scr/__init__.py)
            "SCR_LIBRARY",
        ];
        let known: Vec<String> = keys::KEYS.iter().map(|k| k.env_var()).collect();
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
                Ok(bytes) => Some(utf8_text(bytes)),
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
            layers.extend(self.read(&p, Tier::System, &mut errors, &mut files));
        }

        // API values (SCR_Config calls: scalars and descriptors)
        layers.push(api::layer(&self.api, &mut errors));

        // environment
        let mut env = Layer::new(Tier::Env);
        for key in keys::KEYS {
            let var = key.env_var();
            if let Some(text) = self.env.get(&var) {
                match keys::parse_text(key.ty, text) {
                    Ok(value) => {
                        env.scalars.insert(key.name, (value, Origin::Env(var)));
                    }
                    Err(msg) => errors.push(ConfigError::new(Origin::Env(var), msg)),
                }
            }
        }

        // user file: SCR_CONF_FILE, else <prefix>/.scrconf.toml
        let user = match self.env.get("SCR_CONF_FILE") {
            Some(p) => Some(PathBuf::from(p)),
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
            layers.extend(self.read(p, Tier::User, &mut errors, &mut files));
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

fn computed_default(key: &Key, cwd: &Path, env: &BTreeMap<String, String>) -> Option<Value> {
    match key.default {
        keys::Default::None => None,
        keys::Default::Fixed(text) => keys::parse_text(key.ty, text).ok(),
        keys::Default::Computed(_) => Some(Value::Str(match key.name {
            "prefix" => cwd.display().to_string(),
            "job_id" => [
                "SCR_JOB_ID",
                "SLURM_JOBID",
                "LSB_JOBID",
                "FLUX_JOB_ID",
                "PBS_JOBID",
            ]
            .iter()
            .find_map(|v| env.get(*v).filter(|s| !s.is_empty()).cloned())
            .unwrap_or_else(|| "0".into()),
            "user" => ["USER", "LOGNAME"]
                .iter()
                .find_map(|v| env.get(*v).filter(|s| !s.is_empty()).cloned())
                .unwrap_or_else(user_from_uid),
            other => unreachable!("no computed default for {other}"),
        })),
    }
}

/// The name of this process's user from /etc/passwd, else `uid<N>`.
fn user_from_uid() -> String {
    use std::os::unix::fs::MetadataExt;
    let Ok(uid) = std::fs::metadata("/proc/self").map(|m| m.uid()) else {
        return "unknown".into();
    };
    std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|text| {
            text.lines().find_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                (f.len() > 2 && f[2] == uid.to_string()).then(|| f[0].to_string())
            })
        })
        .unwrap_or_else(|| format!("uid{uid}"))
}

/// A configuration file's bytes as text, or an error naming the first line that is not
/// UTF-8 (TOML files are UTF-8; a file saved as Latin-1 would otherwise be reported
/// without saying where).
fn utf8_text(bytes: Vec<u8>) -> Result<String, String> {
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let bytes = e.as_bytes();
        let line = 1 + bytes[..at].iter().filter(|&&b| b == b'\n').count();
        let column = 1 + at - bytes[..at].iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
        format!(
            "line {line}, column {column}: byte 0x{:02x} is not UTF-8; configuration files must be UTF-8 text (re-save the file as UTF-8, e.g. `iconv -f latin1 -t utf-8`)",
            bytes[at]
        )
    })
}

/// The keys and sections the system configuration locks, with where it locks them.
struct Locks(BTreeMap<String, Origin>);

impl Locks {
    /// Whether `what`, set at `at` above the system file, is locked; if so the error is
    /// recorded (naming both places) and the setting must be ignored.
    fn refuse(&self, what: &str, at: &Origin, errors: &mut Vec<ConfigError>) -> bool {
        let Some(lock) = self.0.get(what) else {
            return false;
        };
        errors.push(ConfigError::new(
            at.clone(),
            format!("`{what}` is locked by the system configuration ({lock}) and cannot be overridden; remove this setting or ask your administrator"),
        ));
        true
    }
}

fn merge(
    mut layers: Vec<Layer>,
    cwd: &Path,
    env: &BTreeMap<String, String>,
    files: Vec<PathBuf>,
    errors: &mut Vec<ConfigError>,
) -> Config {
    layers.sort_by_key(|l| l.tier); // stable: user files keep their order
    let locks = Locks(
        layers
            .iter()
            .filter(|l| l.tier == Tier::System)
            .flat_map(|l| l.locked.iter().cloned())
            .collect(),
    );
    let (scalars, user_set) = merge_scalars(&layers, cwd, env, &locks, errors);
    let mut groups: Vec<GroupEntry> = Vec::new();
    let mut stores: Vec<Store> = Vec::new();
    let mut checkpoints: Vec<Checkpoint> = Vec::new();
    let mut plugins = Plugins {
        allow_user_plugins: (false, Origin::Default),
        builtin: (true, Origin::Default),
        ..Plugins::default()
    };
    for layer in layers {
        let system = layer.tier == Tier::System;
        if !system {
            refuse_locked_table_fields(&layer, &locks, errors);
        }
        let allowed = |section: &str, errors: &mut Vec<ConfigError>| {
            system
                || !layer
                    .sections
                    .get(section)
                    .is_some_and(|at| locks.refuse(section, at, errors))
        };
        if allowed("group", errors) {
            for g in layer.groups {
                groups.retain(|x| x.host != g.host);
                groups.push(g);
            }
        }
        if allowed("store", errors) {
            for s in layer.stores {
                stores.retain(|x| x.path != s.path);
                stores.push(s);
            }
        }
        if allowed("checkpoint", errors) && !layer.checkpoints.is_empty() {
            checkpoints = layer.checkpoints;
        }
        if allowed("plugins", errors) {
            merge_plugins(&mut plugins, layer.plugins, system, errors);
        }
    }
    imply_store_and_checkpoint(
        &scalars,
        &user_set,
        &mut stores,
        &mut checkpoints,
        &locks,
        errors,
    );
    Config {
        scalars,
        groups,
        stores,
        checkpoints,
        plugins,
        locked: locks.0,
        files,
    }
}

/// The scalar settings in force: every key's default, replaced by each layer in tier
/// order (a locked key set above the system file is refused), with store paths
/// normalised and a relative prefix made absolute. Also returns the keys whose value came
/// from above the system file.
fn merge_scalars(
    layers: &[Layer],
    cwd: &Path,
    env: &BTreeMap<String, String>,
    locks: &Locks,
    errors: &mut Vec<ConfigError>,
) -> (
    BTreeMap<&'static str, Setting>,
    std::collections::BTreeSet<&'static str>,
) {
    let mut scalars: BTreeMap<&'static str, Setting> = keys::KEYS
        .iter()
        .map(|k| {
            (
                k.name,
                Setting {
                    value: computed_default(k, cwd, env),
                    origin: Origin::Default,
                },
            )
        })
        .collect();
    let mut user_set = std::collections::BTreeSet::new();
    for layer in layers {
        for (name, (value, origin)) in &layer.scalars {
            if layer.tier != Tier::System {
                if locks.refuse(name, origin, errors) {
                    continue;
                }
                user_set.insert(*name);
            }
            scalars.insert(
                name,
                Setting {
                    value: Some(value.clone()),
                    origin: origin.clone(),
                },
            );
        }
    }
    // store paths are names: compare them without trailing slashes
    for key in ["cache_base", "cntl_base"] {
        if let Some(Value::Str(p)) = scalars.get_mut(key).and_then(|s| s.value.as_mut()) {
            *p = file::normalize_dir(p);
        }
    }
    // a relative prefix is relative to the working directory
    if let Some(Setting {
        value: Some(Value::Str(p)),
        ..
    }) = scalars.get_mut("prefix")
    {
        *p = cwd.join(&*p).display().to_string();
    }
    (scalars, user_set)
}

/// A table field above the system file that stands for a locked scalar is locked too
/// (a descriptor's `type` for `copy_type`, a store's `count` for `cache_size`, ...).
fn refuse_locked_table_fields(layer: &Layer, locks: &Locks, errors: &mut Vec<ConfigError>) {
    for ck in &layer.checkpoints {
        for (field, scalar) in LOCKED_ALIASES {
            if let Some(at) = ck.origins.get(field) {
                locks.refuse(scalar, at, errors);
            }
        }
    }
    for st in &layer.stores {
        let set = [
            ("group", st.group.is_some()),
            ("cache_size", st.count.is_some()),
            ("flush_type", st.transfer.is_some()),
        ];
        for (scalar, present) in set {
            if present {
                locks.refuse(scalar, &st.origin, errors);
            }
        }
    }
}

/// Add one layer's `[plugins]` table: the system file names site directories and files
/// and decides `allow_user_plugins` and `builtin`; a user's plugin paths are taken only
/// when the system allows user plugins, and its attempts to set the two switches are
/// errors. `[plugins.<name>]` settings merge from every layer.
fn merge_plugins(
    plugins: &mut Plugins,
    p: PluginLayer,
    system: bool,
    errors: &mut Vec<ConfigError>,
) {
    if system {
        plugins.site_directories.extend(p.directories);
        plugins.files.extend(p.files);
        if let Some(a) = p.allow_user_plugins {
            plugins.allow_user_plugins = a;
        }
        if let Some(b) = p.builtin {
            plugins.builtin = b;
        }
    } else {
        for (what, set) in [
            ("allow_user_plugins", &p.allow_user_plugins),
            ("builtin", &p.builtin),
        ] {
            if let Some((_, at)) = set {
                errors.push(ConfigError::new(
                    at.clone(),
                    format!("[plugins] `{what}` can only be set in the system configuration (to check a system file, run `scr config check --system FILE`)"),
                ));
            }
        }
        if !plugins.allow_user_plugins.0 {
            for (path, at) in p.directories.iter().chain(&p.files) {
                errors.push(ConfigError::new(
                    at.clone(),
                    format!("user plugin {} refused: the system configuration does not allow user plugins (allow_user_plugins = false)", path.display()),
                ));
            }
        } else {
            plugins.user_directories.extend(p.directories);
            plugins.files.extend(p.files);
        }
    }
    for (name, table) in p.settings {
        plugins.settings.entry(name).or_default().extend(table);
    }
}

/// SCR's implied tables: a store for `cache_base` when none is defined (refused when a
/// user's `cache_base` would add one to a locked store list), and one descriptor from
/// `copy_type`, `group` and `cache_base` when no `[[checkpoint]]` exists anywhere.
fn imply_store_and_checkpoint(
    scalars: &BTreeMap<&'static str, Setting>,
    user_set: &std::collections::BTreeSet<&'static str>,
    stores: &mut Vec<Store>,
    checkpoints: &mut Vec<Checkpoint>,
    locks: &Locks,
    errors: &mut Vec<ConfigError>,
) {
    let get = |k: &str| {
        scalars[k]
            .value
            .clone()
            .map(|v| v.to_param())
            .unwrap_or_default()
    };
    let cache_base = get("cache_base");
    if !stores.iter().any(|s| s.path == cache_base) {
        if user_set.contains("cache_base") {
            // a user's cache_base would add a store: not when the admin locked the stores
            locks.refuse("store", &scalars["cache_base"].origin, errors);
        }
        stores.push(Store::new(
            cache_base.clone(),
            scalars["cache_base"].origin.clone(),
        ));
    }
    if checkpoints.is_empty() {
        let mut c = Checkpoint::new(Origin::Default);
        for (field, key) in [
            ("type", "copy_type"),
            ("group", "group"),
            ("store", "cache_base"),
        ] {
            c.origins.insert(field, scalars[key].origin.clone());
        }
        c.scheme = Some(get("copy_type"));
        c.group = Some(get("group"));
        c.store = Some(cache_base);
        checkpoints.push(c);
    }
}

/// Check what the configuration's parts say about each other (groups, stores,
/// descriptors, paths); every problem goes to `errors` with its origin.
fn validate(c: &Config, errors: &mut Vec<ConfigError>) {
    let groups = GroupNames::check(c, errors);
    validate_stores(c, &groups, errors);
    validate_checkpoints(c, &groups, errors);
    validate_scalars(c, &groups, errors);
}

/// The group names a configuration defines: `NODE`, `WORLD` and the custom groups of its
/// `[[group]]` tables.
struct GroupNames<'a>(std::collections::BTreeSet<&'a String>);

impl<'a> GroupNames<'a> {
    /// The custom groups, checked: every host must give every group a value.
    fn check(c: &'a Config, errors: &mut Vec<ConfigError>) -> Self {
        let names: std::collections::BTreeSet<&String> =
            c.groups.iter().flat_map(|g| g.values.keys()).collect();
        for g in &c.groups {
            for n in &names {
                if !g.values.contains_key(*n) {
                    errors.push(ConfigError::new(
                        g.origin.clone(),
                        format!("host `{}` gives no value for group `{n}`; every [[group]] host table must name the same groups", g.host),
                    ));
                }
            }
        }
        GroupNames(names)
    }

    /// Whether `name` is a defined group.
    fn ok(&self, name: &str) -> bool {
        name == "NODE" || name == "WORLD" || self.0.contains(&name.to_string())
    }

    /// Every defined group, for messages.
    fn known(&self) -> String {
        let mut all = vec!["NODE".to_string(), "WORLD".to_string()];
        all.extend(self.0.iter().map(|s| s.to_string()));
        all.join(", ")
    }
}

/// Every `[[store]]` names a defined group.
fn validate_stores(c: &Config, groups: &GroupNames, errors: &mut Vec<ConfigError>) {
    for s in &c.stores {
        if let Some(g) = &s.group {
            if !groups.ok(g) {
                errors.push(ConfigError::new(
                    s.origin.clone(),
                    format!(
                        "store `{}` names undefined group `{g}` (defined: {})",
                        s.path,
                        groups.known()
                    ),
                ));
            }
        }
    }
}

/// Every `[[checkpoint]]` names a defined, enabled store and a defined group; enabled
/// descriptors have distinct intervals and one has interval 1.
fn validate_checkpoints(c: &Config, groups: &GroupNames, errors: &mut Vec<ConfigError>) {
    let mut intervals: BTreeMap<u64, &Origin> = BTreeMap::new();
    for ck in &c.checkpoints {
        let at = |k: &str| ck.origins.get(k).unwrap_or(&ck.origin).clone();
        let store = ck
            .store
            .clone()
            .unwrap_or_else(|| c.get(settings::CACHE_BASE));
        if !c.stores.iter().any(|s| s.path == store) {
            errors.push(ConfigError::new(
                at("store"),
                format!(
                    "checkpoint names undefined store `{store}` (defined: {}); add a [[store]] with path = \"{store}\"",
                    c.stores.iter().map(|s| s.path.as_str()).collect::<Vec<_>>().join(", ")
                ),
            ));
        } else if let Some(st) = c.store(&store).filter(|s| !s.enabled && ck.enabled) {
            errors.push(ConfigError::new(
                at("store"),
                format!(
                    "checkpoint uses store `{store}`, which is disabled at {}; enable the store or point the checkpoint at another one",
                    st.origin
                ),
            ));
        }
        let group = ck.group.clone().unwrap_or_else(|| c.get(settings::GROUP));
        if !groups.ok(&group) {
            errors.push(ConfigError::new(
                at("group"),
                format!(
                    "checkpoint names undefined group `{group}` (defined: {})",
                    groups.known()
                ),
            ));
        }
        if !ck.enabled {
            continue;
        }
        if let Some(first) = intervals.insert(ck.interval, &ck.origin) {
            errors.push(ConfigError::new(
                at("interval"),
                format!(
                    "duplicate checkpoint interval {}: already used by the descriptor at {first}",
                    ck.interval
                ),
            ));
        }
    }
    if !intervals.contains_key(&1) {
        let at = c
            .checkpoints
            .first()
            .map(|ck| ck.origin.clone())
            .unwrap_or(Origin::Default);
        errors.push(ConfigError::new(
            at,
            "no enabled checkpoint descriptor has interval = 1; one must, so that every checkpoint id has a descriptor",
        ));
    }
}

/// The base paths are absolute and the scalar `group` is defined.
fn validate_scalars(c: &Config, groups: &GroupNames, errors: &mut Vec<ConfigError>) {
    for key in [settings::CACHE_BASE, settings::CNTL_BASE] {
        let v = c.get(key);
        if !v.starts_with('/') {
            errors.push(ConfigError::new(
                c.setting_of(key).origin.clone(),
                format!("`{}` = \"{v}\" must be an absolute path", key.name()),
            ));
        }
    }
    let g = c.get(settings::GROUP);
    // the implied descriptor already reported an undefined default group
    let implied = c.checkpoints.iter().any(|ck| ck.origin == Origin::Default);
    if !groups.ok(&g) && !implied {
        errors.push(ConfigError::new(
            c.setting_of(settings::GROUP).origin.clone(),
            format!(
                "`group` names undefined group `{g}` (defined: {})",
                groups.known()
            ),
        ));
    }
}

impl Config {
    /// Load from the process environment (the common case).
    pub fn load() -> Result<Config, ConfigErrors> {
        Loader::from_process().load()
    }

    /// The value of a scalar setting, typed by its key (see [`settings`]); an unset key
    /// reads as `false`, 0 or "".
    pub fn get<T: settings::ParamValue>(&self, key: settings::Param<T>) -> T {
        T::from_setting(self.setting(key.name()))
    }

    /// The setting of a scalar key with its origin (and `None` when it is unset).
    pub fn setting_of<T>(&self, key: settings::Param<T>) -> &Setting {
        self.setting(key.name())
    }

    /// The setting of a key named at run time (API queries, descriptor fields that stand
    /// for a key). Panics on a name not in [`keys::KEYS`]: code names keys through
    /// [`settings`], so only this module passes names.
    fn setting(&self, name: &str) -> &Setting {
        self.scalars
            .get(name)
            .unwrap_or_else(|| panic!("`{name}` is not a configuration key"))
    }

    /// Every scalar setting in catalog order.
    pub fn settings(&self) -> impl Iterator<Item = (&'static Key, &Setting)> {
        keys::KEYS.iter().map(|k| (k, &self.scalars[k.name]))
    }

    /// The store with this path.
    pub fn store(&self, path: &str) -> Option<&Store> {
        let p = file::normalize_dir(path);
        self.stores.iter().find(|s| s.path == p)
    }

    /// The descriptor for checkpoint id `id`: among enabled descriptors, the one with the
    /// largest interval that divides `id` (SCR's rule).
    pub fn checkpoint_for(&self, id: u64) -> Option<&Checkpoint> {
        self.checkpoints
            .iter()
            .filter(|c| c.enabled && c.interval > 0 && id.is_multiple_of(c.interval))
            .max_by_key(|c| c.interval)
    }

    /// The configuration files that were read, comma-separated, or `None`.
    pub fn files_read(&self) -> Option<String> {
        (!self.files.is_empty()).then(|| {
            self.files
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        })
    }

    /// Where the registry should look for plugins.
    pub fn search_path(&self) -> crate::registry::SearchPath {
        crate::registry::SearchPath {
            builtin: if self.plugins.builtin.0 {
                crate::registry::builtin_plugin_dir()
            } else {
                None
            },
            builtin_candidates: if self.plugins.builtin.0 {
                crate::registry::builtin_plugin_candidates()
            } else {
                Vec::new()
            },
            site_directories: self
                .plugins
                .site_directories
                .iter()
                .map(|(p, _)| p.clone())
                .collect(),
            files: self.plugins.files.iter().map(|(p, _)| p.clone()).collect(),
            user_directories: self
                .plugins
                .user_directories
                .iter()
                .map(|(p, _)| p.clone())
                .collect(),
        }
    }
}
