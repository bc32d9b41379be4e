//! The cross-checks of a configuration against the loaded plugins (every scheme and
//! transfer type it names exists, each scheme accepts its descriptor's parameters, each
//! transfer type can be created here), made by `scr config check` and at init.

use scr_plugin::ErrorCode;

use super::{settings, Config, ConfigError, Origin};
use crate::registry::{Kind, Registry, RegistryError};

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
        config.get(settings::FLUSH_TYPE),
        config.setting_of(settings::FLUSH_TYPE).origin.clone(),
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
    // a private directory of its own (tempfile: unpredictable name, 0700), removed when
    // dropped: a fixed name per process was shared by every runtime of the process (the
    // in-process tests run several) and could be pre-made by another user in /tmp
    // in /tmp; with none to be had the type is not probed (a probe only warns early:
    // the transfer still has to work when it runs)
    let probe = match tempfile::Builder::new().prefix("scr-probe.").tempdir() {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!(
                "transfer type {name} not checked at init: no private temporary directory for its probe ({e})"
            );
            return Ok(());
        }
    };
    let dir = probe.path().to_path_buf();
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
    // the production host of transfers: what the plugin logs while being created (e.g.
    // "the vendor library is missing") reaches this process's log, not a test recorder
    let services = crate::local_host::LocalHost::new(
        0,
        "localhost",
        &format!("transfer {name}"),
        Default::default(),
    );
    let result = registry
        .new_transfer(&transfer_config, scr_plugin::host_ref(&services))
        .map(drop);
    drop(probe);
    result
}
