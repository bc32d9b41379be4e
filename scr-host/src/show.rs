//! Text renderings for the `scr` command: the plugin table. (The effective configuration
//! is rendered by [`crate::config::render()`].)

use std::fmt::Write as _;

use scr_plugin::{ErrorCode, Param, SchemeConfig};

use crate::config::{settings, Config};
use crate::registry::{Kind, Registry, RegistryError};

/// Scheme parameters used to probe a scheme in listings: the configuration's scalars
/// when there is one.
fn probe_config(config: Option<&Config>, name: &str) -> SchemeConfig {
    let mut params = Vec::new();
    let mut members = 8;
    if let Some(c) = config {
        for k in [
            settings::SET_SIZE,
            settings::SET_FAILURES,
            settings::REPLICAS,
        ] {
            params.push(Param {
                key: k.name().into(),
                value: c.get(k).to_string().into(),
            });
        }
        members = c.get(settings::SET_SIZE) as u32;
    }
    SchemeConfig {
        scheme: name.into(),
        params: params.into(),
        settings: config
            .map(|c| c.plugin_settings(name))
            .unwrap_or_default()
            .into(),
        members,
        member: 0,
        world_rank: 0,
    }
}

/// The `scr plugins list` table for the configured search path.
pub fn plugin_table(config: &Config, registry: &Registry) -> String {
    plugin_table_with(Some(config), registry)
}

/// The plugin table; schemes are probed with the configuration's parameters when given.
pub fn plugin_table_with(config: Option<&Config>, registry: &Registry) -> String {
    let mut out = String::new();
    let duplicates = registry.duplicates();
    for lib in registry.libraries() {
        let mut provides = Vec::new();
        for s in &lib.schemes {
            let status = match registry.new_scheme(&probe_config(config, s)) {
                Ok(scheme) => match scheme.describe() {
                    Ok(d) => format!("tolerates {}", d.tolerated_losses),
                    Err(e) => e.to_string(),
                },
                Err(RegistryError::Plugin { error, .. })
                    if error.code == ErrorCode::NOT_IMPLEMENTED =>
                {
                    "not implemented".to_string()
                }
                Err(RegistryError::Ambiguous { .. }) => "duplicate".to_string(),
                Err(RegistryError::Plugin { error, .. }) => error.to_string(),
                Err(e) => e.to_string(),
            };
            provides.push(format!("scheme {s} ({status})"));
        }
        for t in &lib.transfers {
            let dup = matches!(
                registry.provider(Kind::Transfer, t),
                Err(RegistryError::Ambiguous { .. })
            );
            provides.push(format!(
                "transfer {t}{}",
                if dup { " (duplicate)" } else { "" }
            ));
        }
        let _ = writeln!(out, "{}", lib.path.display());
        let _ = writeln!(
            out,
            "    library {} {}, ABI {}, {}",
            lib.name, lib.version, lib.abi_version, lib.origin
        );
        let _ = writeln!(out, "    provides: {}", provides.join(", "));
        let _ = writeln!(out, "    status: loaded");
    }
    for r in registry.refused() {
        let _ = writeln!(out, "{}", r.path.display());
        let _ = writeln!(out, "    status: refused: {} ({})", r.reason, r.origin);
    }
    for d in duplicates {
        let _ = writeln!(out, "duplicate: {d}");
    }
    out
}
