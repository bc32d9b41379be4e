//! Configuration: TOML files, environment variables and values set through the API,
//! merged by precedence, validated, and kept with the origin of every value.
//!
//! Sources, first match wins:
//!
//! 1. the environment, `SCR_<KEY>` (e.g. `SCR_CACHE_SIZE=4`);
//! 2. the user file: `conf_file` set through the API (`SCR_Config("SCR_CONF_FILE=...")`,
//!    which alone among the keys wins over the environment, as SCR's API values do), else
//!    `SCR_CONF_FILE`, else `<prefix>/.scrconf.toml` if it exists (no file may set
//!    `conf_file`);
//! 3. values the application set through the API before init (`key=value` strings);
//! 4. the system file: [`DEFAULT_SYSTEM_CONFIG`] if the site installed it, else
//!    `SCR_SYSTEM_CONFIG` (an installed site file cannot be replaced from the
//!    environment, or any user could lift the locks); [`Loader::system_file`] overrides
//!    both for `scr config check --system`;
//! 5. built-in defaults (see [`keys::KEYS`]).
//!
//! Keys listed in the system file's `locked` array cannot be set by sources 1–3; trying
//! is an error that names both places. A locked key also locks the descriptor fields that
//! stand for it (see `merge::LOCKED_ALIASES`), and a locked `store` list cannot grow through a
//! user's `cache_base`. The descriptor sections merge like this:
//! `[[group]]` host tables and `[[store]]` tables by identity (host name, store path) — a
//! higher source replaces an entry with the same identity and adds new ones;
//! `[[checkpoint]]` tables as a whole — the highest source that has any replaces the whole
//! list, because descriptors chosen by interval only make sense as one policy. With no
//! checkpoint table anywhere, one descriptor is implied from `copy_type`, `set_size`,
//! `group` and `cache_base` (SCR's behaviour); with no store table for `cache_base`, one
//! is implied too, so a setup with no file at all works.

pub mod api;
mod catalog;
mod check;
mod descriptor;
pub mod keys;

mod file;
pub mod import;
mod load;
mod merge;
mod render;
pub mod settings;
pub mod shipped;
mod types;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

pub use check::{check_plugins, PluginFindings};
pub use descriptor::{protects_nothing, Descriptor, NoGroupValue};
/// Store paths are names: compared without trailing slashes.
pub(crate) use file::normalize_dir as normalize_store;
use keys::{Key, Value};
pub use load::{Loader, Snapshot, FAULT_VAR, GAUGE_VAR};
pub use render::render;

/// The system configuration read when `SCR_SYSTEM_CONFIG` is not set (if it exists).
/// Overridable at build time with the `SCR_SYSTEM_CONFIG_DEFAULT` environment variable.
pub const DEFAULT_SYSTEM_CONFIG: &str = match option_env!("SCR_SYSTEM_CONFIG_DEFAULT") {
    Some(p) => p,
    None => "/etc/scr/scr.toml",
};

/// `s` as a TOML basic string, escaped by the toml crate itself.
pub(crate) fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// `k` as a TOML key: bare when it may be, quoted otherwise.
pub(crate) fn toml_key(k: &str) -> String {
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
pub(crate) const SECTIONS: &[&str] = &["group", "store", "checkpoint", "plugins"];

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
    /// `set_size`, `set_failures`, `replicas`, `hop_distance` when set in the table.
    pub numbers: BTreeMap<&'static str, u64>,
    /// Also an output dataset destined for the prefix.
    pub output: bool,
    /// Write directly to the prefix, bypassing cache (`None`: as `cache_bypass` says).
    pub bypass: Option<bool>,
    /// Apply the scheme in the background after complete_output (`None`: as
    /// `protect_in_background` says).
    pub protect_in_background: Option<bool>,
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
            bypass: None,
            protect_in_background: None,
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

/// Check what the configuration's parts say about each other (groups, stores,
/// descriptors, paths); every problem goes to `errors` with its origin.
fn validate(c: &Config, errors: &mut Vec<ConfigError>) {
    let groups = GroupNames::check(c, errors);
    validate_stores(c, &groups, errors);
    validate_checkpoints(c, &groups, errors);
    validate_scalars(c, &groups, errors);
    validate_unavailable(c, errors);
}

/// SCR keys for what scr-rs does not have (the MySQL event database, the IBM burst
/// buffer's post-stage script) load only with the value that asks for nothing, so that
/// every accepted key works: anything else is refused, saying what happens instead.
fn validate_unavailable(c: &Config, errors: &mut Vec<ConfigError>) {
    let events = "events go to the event log in the prefix (log_enable, read with `scr log`) and to syslog with log_syslog_enable";
    if c.get(settings::LOG_DB_ENABLE) {
        errors.push(ConfigError::new(
            c.setting_of(settings::LOG_DB_ENABLE).origin.clone(),
            format!("`log_db_enable` = true (SCR_LOG_DB_ENABLE): scr-rs keeps no MySQL event database; {events}; remove the key or set it to false"),
        ));
    }
    let db_keys = [
        settings::LOG_DB_HOST,
        settings::LOG_DB_USER,
        settings::LOG_DB_PASS,
        settings::LOG_DB_NAME,
    ];
    for key in db_keys {
        let s = c.setting_of(key);
        if s.value.is_some() {
            errors.push(ConfigError::new(
                s.origin.clone(),
                format!("`{}` configures SCR's MySQL event database, which scr-rs does not keep ({events}); remove the key", key.name()),
            ));
        }
    }
    if c.get(settings::LOG_DB_DEBUG) > 0 {
        errors.push(ConfigError::new(
            c.setting_of(settings::LOG_DB_DEBUG).origin.clone(),
            format!("`log_db_debug` echoes the SQL of SCR's MySQL event database, which scr-rs does not keep ({events}); remove the key or set it to 0"),
        ));
    }
    if c.get(settings::FLUSH_POSTSTAGE) {
        errors.push(ConfigError::new(
            c.setting_of(settings::FLUSH_POSTSTAGE).origin.clone(),
            "`flush_poststage` = true (SCR_FLUSH_POSTSTAGE): scr-rs has no post-stage script to finish background flushes after the job; finalize completes them (and `scr postrun` scavenges what a failed job left in cache); remove the key or set it to false".to_string(),
        ));
    }
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
    let mut output_intervals: std::collections::BTreeSet<u64> = std::collections::BTreeSet::new();
    for ck in &c.checkpoints {
        let at = |k: &str| ck.origins.get(k).unwrap_or(&ck.origin).clone();
        // SCR's `SCR_COPY_TYPE=FILE` means "the CKPT descriptors name their schemes": a
        // descriptor that names none (the implied one included) has no scheme then
        let scheme = c.checkpoint_scheme(ck);
        if scheme.eq_ignore_ascii_case("FILE") {
            errors.push(ConfigError::new(
                at("type"),
                "copy_type = FILE (SCR: take the CKPT descriptors) leaves this checkpoint descriptor without a scheme: name one (TYPE=XOR in an SCR_Config(\"CKPT=0 ...\") call, type = \"XOR\" in a [[checkpoint]] table), or set copy_type to a scheme".to_string(),
            ));
        }
        let store = c.checkpoint_store(ck);
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
        let group = c.checkpoint_group(ck);
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
        // a descriptor marked for output may share its interval with another (SCR's
        // configurations commonly add `OUTPUT=1` beside an interval-1 descriptor):
        // checkpoints take the other one (see the runtime's choice)
        if ck.output {
            output_intervals.insert(ck.interval);
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
    if !intervals.contains_key(&1) && !output_intervals.contains(&1) {
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
    /// The configuration of environment `vars` alone (no system file, no user file):
    /// what the unit tests of other modules configure with.
    #[cfg(test)]
    pub(crate) fn from_vars(vars: &[(&str, &str)]) -> Config {
        let mut l = Loader::default();
        l.env = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        l.system_file = Some(PathBuf::from("/dev/null"));
        l.load().expect("configuration")
    }

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
