//! Merging the sources' layers by precedence into a [`Config`]: locks, scalar settings,
//! the descriptor sections and the implied store and checkpoint (see the module above for
//! the rules).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::catalog::{computed_default, ALLOW_USER_PLUGINS, BUILTIN_PLUGINS};
use super::keys::{self, Value};
use super::{
    file, Checkpoint, Config, ConfigError, GroupEntry, Layer, Origin, PluginLayer, Plugins,
    Setting, Store, Tier,
};

/// `[[checkpoint]]` fields that stand for a scalar key: locking the key locks them.
const LOCKED_ALIASES: &[(&str, &str)] = &[
    ("type", "copy_type"),
    ("store", "cache_base"),
    ("group", "group"),
    ("set_size", "set_size"),
    ("set_failures", "set_failures"),
    ("replicas", "replicas"),
    ("hop_distance", "hop_distance"),
];

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

/// Every layer merged in tier order (see the module above), with the implied tables.
pub(super) fn merge(
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
        allow_user_plugins: (ALLOW_USER_PLUGINS, Origin::Default),
        builtin: (BUILTIN_PLUGINS, Origin::Default),
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
