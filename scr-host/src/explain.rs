//! What a configuration means in practice: the effective checkpoint descriptor for a
//! checkpoint id, with every value's origin, and the cross-checks against the loaded
//! plugins that `scr config check` and `scr config explain` report.

use std::fmt::Write as _;

use scr_plugin::{ErrorCode, Param, SchemeConfig};

use crate::config::{Checkpoint, Config, ConfigError, Origin, Store, View};
use crate::registry::{Kind, Registry, RegistryError};

/// A checkpoint descriptor with every default filled in.
#[derive(Clone, Debug)]
pub struct Descriptor<'c> {
    /// Position in the configuration's descriptor list.
    pub index: usize,
    /// The configured descriptor.
    pub checkpoint: &'c Checkpoint,
    /// Its store.
    pub store: Option<&'c Store>,
    /// Store path (even when the store is undefined).
    pub store_path: String,
    /// Failure group, with origin.
    pub group: (String, Origin),
    /// Scheme name, with origin.
    pub scheme: (String, Origin),
    /// Parameters passed to the scheme, with origins.
    pub params: Vec<(String, String, Origin)>,
}

impl Config {
    /// Fill in the defaults of descriptor `index`.
    pub fn descriptor(&self, index: usize) -> Descriptor<'_> {
        let ck = &self.checkpoints[index];
        let origin_of = |table_key: &str, scalar: &str| {
            ck.origins
                .get(table_key)
                .cloned()
                .unwrap_or_else(|| self.setting(scalar).origin.clone())
        };
        let store_path = ck.store.clone().unwrap_or_else(|| self.str("cache_base"));
        let mut params = Vec::new();
        for name in ["set_size", "set_failures", "replicas"] {
            let value = ck
                .numbers
                .get(name)
                .copied()
                .unwrap_or_else(|| self.u64(name));
            params.push((name.to_string(), value.to_string(), origin_of(name, name)));
        }
        params.push((
            "buffer_size".to_string(),
            self.u64("mpi_buf_size").to_string(),
            self.setting("mpi_buf_size").origin.clone(),
        ));
        params.extend(ck.params.iter().cloned());
        Descriptor {
            index,
            checkpoint: ck,
            store: self.store(&store_path),
            store_path,
            group: (
                ck.group.clone().unwrap_or_else(|| self.str("group")),
                origin_of("group", "group"),
            ),
            scheme: (
                ck.scheme.clone().unwrap_or_else(|| self.str("copy_type")),
                origin_of("type", "copy_type"),
            ),
            params,
        }
    }

    /// The `[plugins.<name>]` settings for a scheme or transfer type.
    pub fn plugin_settings(&self, name: &str) -> Vec<Param> {
        self.plugins
            .settings
            .get(&name.to_ascii_lowercase())
            .map(|t| {
                t.iter()
                    .map(|(k, (v, _))| Param {
                        key: k.as_str().into(),
                        value: v.as_str().into(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The group of processes sharing a store's device (its own, else `group`).
    pub fn store_group(&self, store: &Store) -> String {
        store.group.clone().unwrap_or_else(|| self.str("group"))
    }

    /// Datasets a store keeps (its own count, else `cache_size`).
    pub fn store_count(&self, store: &Store) -> u64 {
        store.count.unwrap_or_else(|| self.u64("cache_size"))
    }

    /// A store's view: its own, else global for group WORLD and node-local otherwise.
    pub fn store_view(&self, store: &Store) -> View {
        store.view.unwrap_or(if self.store_group(store) == "WORLD" {
            View::Global
        } else {
            View::Node
        })
    }

    /// The transfer type used to flush from a store.
    pub fn store_transfer(&self, store: &Store) -> (String, Origin) {
        match &store.transfer {
            Some(t) => (t.clone(), store.origin.clone()),
            None => (
                self.str("flush_type"),
                self.setting("flush_type").origin.clone(),
            ),
        }
    }
}

impl Descriptor<'_> {
    /// The scheme configuration handed to the plugin, for a set of `members`.
    /// `member` and `world_rank` place this process in its set (0 when checking a
    /// configuration outside a job).
    pub fn scheme_config(
        &self,
        config: &Config,
        members: u32,
        member: u32,
        world_rank: u32,
    ) -> SchemeConfig {
        SchemeConfig {
            scheme: self.scheme.0.as_str().into(),
            params: self
                .params
                .iter()
                .map(|(k, v, _)| Param {
                    key: k.as_str().into(),
                    value: v.as_str().into(),
                })
                .collect(),
            settings: config.plugin_settings(&self.scheme.0).into(),
            members,
            member,
            world_rank,
        }
    }

    /// The configured set size (members per redundancy set at most).
    pub fn set_size(&self) -> u32 {
        self.params
            .iter()
            .find(|(k, _, _)| k == "set_size")
            .and_then(|(_, v, _)| v.parse().ok())
            .unwrap_or(8)
    }
}

/// Findings of checking a configuration against the loaded plugins.
#[derive(Debug, Default)]
pub struct PluginFindings {
    /// Problems that make the configuration unusable.
    pub errors: Vec<ConfigError>,
    /// Things that work now but will fail when used (e.g. a name that is registered but
    /// not implemented yet) or plugin files that were refused.
    pub warnings: Vec<String>,
}

/// Check every name the configuration uses against the registry, and let each scheme
/// validate its descriptor's parameters by creating an instance.
pub fn check_plugins(config: &Config, registry: &Registry) -> PluginFindings {
    let mut f = PluginFindings::default();
    for r in registry.refused() {
        f.warnings.push(format!("plugin {r}"));
    }
    for i in 0..config.checkpoints.len() {
        let d = config.descriptor(i);
        if !d.checkpoint.enabled {
            continue;
        }
        match registry.new_scheme(&d.scheme_config(config, d.set_size(), 0, 0)) {
            Ok(_) => {}
            Err(RegistryError::Plugin { file, error, .. })
                if error.code == ErrorCode::NOT_IMPLEMENTED =>
            {
                f.warnings.push(format!(
                    "{}: scheme {} ({file}): {}; checkpoints using this descriptor will fail",
                    d.scheme.1, d.scheme.0, error.message
                ))
            }
            Err(RegistryError::Plugin { file, error, .. }) => f.errors.push(ConfigError::new(
                d.checkpoint.origin.clone(),
                format!(
                    "scheme {} ({file}) refused this descriptor: {}",
                    d.scheme.0, error.message
                ),
            )),
            Err(e) => f
                .errors
                .push(ConfigError::new(d.scheme.1.clone(), e.to_string())),
        }
    }
    let mut probed: Vec<String> = Vec::new();
    let mut uses: Vec<(String, Origin, String)> = config
        .stores
        .iter()
        .map(|store| {
            let (name, origin) = config.store_transfer(store);
            (name, origin, format!("store `{}`", store.path))
        })
        .collect();
    uses.push((
        config.str("flush_type"),
        config.setting("flush_type").origin.clone(),
        "`flush_type`".to_string(),
    ));
    for (name, origin, what) in uses {
        if let Err(e) = registry.provider(Kind::Transfer, &name) {
            f.errors
                .push(ConfigError::new(origin, format!("{what}: {e}")));
            continue;
        }
        if probed.contains(&name.to_ascii_lowercase()) {
            continue;
        }
        probed.push(name.to_ascii_lowercase());
        // can it be created here? (a vendor type needs its library)
        match probe_transfer(config, registry, &name) {
            Ok(()) => {}
            Err(RegistryError::Plugin { error, .. }) if error.code == ErrorCode::UNAVAILABLE => {
                let fallback = config
                    .plugin_settings(&name)
                    .into_iter()
                    .find(|p| p.key.as_str() == "fallback")
                    .map(|p| p.value.into_string());
                match fallback {
                    Some(fb) => f.warnings.push(format!(
                        "{origin}: {what}: transfer type {name}: {}; transfers fall back to {fb}",
                        error.message
                    )),
                    None => f.errors.push(ConfigError::new(
                        origin,
                        format!("{what}: transfer type {name}: {}", error.message),
                    )),
                }
            }
            Err(e) => f
                .errors
                .push(ConfigError::new(origin, format!("{what}: {e}"))),
        }
    }
    f
}

/// Create (and drop, never dispatch) a transfer of `name` with the configured settings
/// but no fallback, to learn whether it can work on this machine.
fn probe_transfer(config: &Config, registry: &Registry, name: &str) -> Result<(), RegistryError> {
    let dir = std::env::temp_dir().join(format!("scr-probe.{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let transfer_config = scr_plugin::TransferConfig {
        transfer_type: name.into(),
        state_file: dir
            .join(format!("{name}.state"))
            .display()
            .to_string()
            .into(),
        crc32: false,
        preserve_metadata: false,
        settings: config
            .plugin_settings(name)
            .into_iter()
            .filter(|p| p.key.as_str() != "fallback")
            .collect(),
    };
    let world = scr_plugin::inproc::World::new(&["check"], std::time::Duration::from_secs(5));
    let services = world.member(0);
    let result = registry
        .new_transfer(&transfer_config, scr_plugin::host_ref(&services))
        .map(drop);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// The text of `scr config explain --checkpoint N`.
pub fn explain_checkpoint(config: &Config, registry: &Registry, id: u64) -> String {
    let mut out = String::new();
    let Some(ck) = config.checkpoint_for(id) else {
        let _ = writeln!(
            out,
            "checkpoint {id}: no enabled descriptor has an interval dividing {id}"
        );
        return out;
    };
    let index = config
        .checkpoints
        .iter()
        .position(|c| std::ptr::eq(c, ck))
        .expect("descriptor from this config");
    let d = config.descriptor(index);
    let mut enabled: Vec<&Checkpoint> = config.checkpoints.iter().filter(|c| c.enabled).collect();
    enabled.sort_by_key(|c| c.interval);
    let candidates: Vec<String> = enabled
        .into_iter()
        .map(|c| {
            let mark = if id.is_multiple_of(c.interval) {
                "divides"
            } else {
                "does not divide"
            };
            format!("interval {} ({mark}; {})", c.interval, c.origin)
        })
        .collect();
    let _ = writeln!(
        out,
        "checkpoint {id} uses descriptor {index} (interval {}, {})",
        ck.interval, ck.origin
    );
    let _ = writeln!(
        out,
        "  why:     the largest interval dividing {id} is {}; candidates: {}",
        ck.interval,
        candidates.join(", ")
    );
    let _ = writeln!(out, "  scheme:  {} ({})", d.scheme.0, d.scheme.1);
    let store_line = match d.store {
        Some(s) => format!(
            "{} (group {}, count {}, view {}, flush transfer {}; {})",
            s.path,
            config.store_group(s),
            config.store_count(s),
            config.store_view(s),
            config.store_transfer(s).0,
            s.origin
        ),
        None => format!("{} (undefined store!)", d.store_path),
    };
    let _ = writeln!(out, "  store:   {store_line}");
    let _ = writeln!(out, "  group:   {} ({})", d.group.0, d.group.1);
    for (k, v, o) in &d.params {
        let _ = writeln!(out, "  param:   {k} = {v} ({o})");
    }
    match registry.provider(Kind::Scheme, &d.scheme.0) {
        Ok(lib) => {
            let _ = writeln!(
                out,
                "  plugin:  {} ({} {}, {})",
                lib.path.display(),
                lib.name,
                lib.version,
                lib.origin
            );
            match registry.new_scheme(&d.scheme_config(config, d.set_size(), 0, 0)) {
                Ok(s) => match s.describe() {
                    Ok(desc) => {
                        let _ = writeln!(
                            out,
                            "  status:  ok: {}; tolerates {} lost member(s) per set",
                            desc.summary, desc.tolerated_losses
                        );
                    }
                    Err(e) => {
                        let _ = writeln!(out, "  status:  {e}");
                    }
                },
                Err(RegistryError::Plugin { error, .. }) => {
                    let _ = writeln!(out, "  status:  {}", error.message);
                }
                Err(e) => {
                    let _ = writeln!(out, "  status:  {e}");
                }
            }
        }
        Err(e) => {
            let _ = writeln!(out, "  plugin:  {e}");
        }
    }
    out
}
