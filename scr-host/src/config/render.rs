//! The effective configuration as TOML, each value with a comment naming where it came
//! from: what `scr config show` prints, and what the runtime compares between ranks (see
//! `config_fingerprint`). It lives with the configuration, not with the command-line
//! display, because the runtime depends on it.

use std::fmt::Write as _;

use super::keys::{self, Value};
use super::{settings, toml_key, toml_string as quote, Config, Origin};

/// The comment after a setting: its origin (for a computed default, how it is computed)
/// and, when locked, where.
fn origin_note(config: &Config, key: &str, origin: &Origin) -> String {
    let what = match (origin, keys::find(key).map(|k| k.default)) {
        (Origin::Default, Some(keys::Default::Computed(how))) => format!("default: {how}"),
        _ => origin.to_string(),
    };
    match config.locked.get(key) {
        Some(at) => format!("# {what} (locked at {at})"),
        None => format!("# {what}"),
    }
}

/// The effective configuration as TOML, each value followed by a comment saying where it
/// came from. The output is itself a valid *system* configuration file (it includes the
/// system-only `[plugins]` keys and `locked`) that loads to the same values.
pub fn render(config: &Config) -> String {
    let mut out = String::new();
    let sources = config.files_read().unwrap_or_else(|| "none".into());
    let _ = writeln!(
        out,
        "# effective scr-rs configuration; files read: {sources}"
    );
    render_settings(&mut out, config);
    render_groups(&mut out, config);
    render_stores(&mut out, config);
    render_checkpoints(&mut out, config);
    render_plugins(&mut out, config);
    out
}

/// Every setting of [`render`], one line each with its origin (unset ones commented
/// out), then `locked` with the origin of each lock.
fn render_settings(out: &mut String, config: &Config) {
    for (key, setting) in config.settings() {
        let note = origin_note(config, key.name, &setting.origin);
        // TOML allows either the scalar `group` or `[[group]]` tables in one file. Every
        // store and descriptor below names its group explicitly, so commenting the scalar
        // out keeps the meaning.
        // `conf_file` names the user file, which no file may set: shown as a comment
        let comment = if (key.name == "group" && !config.groups.is_empty())
            || key.name == settings::CONF_FILE.name()
        {
            "# "
        } else {
            ""
        };
        match &setting.value {
            // a password is not printed (nor compared between ranks by its text)
            Some(_) if key.name == settings::LOG_DB_PASS.name() => {
                let _ = writeln!(
                    out,
                    "{:<40} {note}",
                    format!("# {} = (set, not shown)", key.name)
                );
            }
            Some(v) => {
                let text = match v {
                    Value::Str(s) => quote(s),
                    other => other.to_string(),
                };
                let _ = writeln!(
                    out,
                    "{:<40} {note}",
                    format!("{comment}{} = {text}", key.name)
                );
            }
            None => {
                let _ = writeln!(out, "{:<40} {note}, unset", format!("# {}", key.name));
            }
        }
    }
    let locked: Vec<String> = config
        .locked
        .iter()
        .map(|(k, o)| format!("\n  {},  # {o}", quote(k)))
        .collect();
    let _ = writeln!(out, "locked = [{}\n]", locked.concat());
}

/// The `[[group]]` tables of [`render`], each with its origin.
fn render_groups(out: &mut String, config: &Config) {
    for g in &config.groups {
        let _ = writeln!(out, "\n[[group]]  # {}", g.origin);
        let _ = writeln!(out, "host = {}", quote(&g.host));
        for (k, v) in &g.values {
            let _ = writeln!(out, "{} = {}", toml_key(k), quote(v));
        }
    }
}

/// The `[[store]]` tables of [`render`], every field spelled out (group, count, view
/// and type as they resolve), each table with its origin.
fn render_stores(out: &mut String, config: &Config) {
    for s in &config.stores {
        let _ = writeln!(out, "\n[[store]]  # {}", s.origin);
        let _ = writeln!(out, "path = {}", quote(&s.path));
        let _ = writeln!(out, "group = {}", quote(&config.store_group(s)));
        let _ = writeln!(out, "count = {}", config.store_count(s));
        let _ = writeln!(out, "mkdir = {}", s.mkdir);
        let _ = writeln!(out, "enabled = {}", s.enabled);
        let _ = writeln!(out, "view = {}", quote(&config.store_view(s).to_string()));
        let _ = writeln!(out, "type = {}", quote(&config.store_transfer(s).0));
    }
}

/// The `[[checkpoint]]` tables of [`render`] as they resolve (store, group, scheme and
/// set parameters, each with its origin), with their own `[checkpoint.params]`.
fn render_checkpoints(out: &mut String, config: &Config) {
    for i in 0..config.checkpoints.len() {
        let d = config.descriptor(i);
        let c = d.checkpoint;
        let _ = writeln!(out, "\n[[checkpoint]]  # {}", c.origin);
        let _ = writeln!(out, "interval = {}", c.interval);
        let _ = writeln!(
            out,
            "{:<40} # {}",
            format!("store = {}", quote(&d.store_path)),
            c.origins
                .get("store")
                .cloned()
                .unwrap_or_else(|| config.setting_of(settings::CACHE_BASE).origin.clone())
        );
        let _ = writeln!(
            out,
            "{:<40} # {}",
            format!("group = {}", quote(&d.group.0)),
            d.group.1
        );
        let _ = writeln!(
            out,
            "{:<40} # {}",
            format!("type = {}", quote(&d.scheme.0)),
            d.scheme.1
        );
        for (k, v, o) in d
            .params
            .iter()
            .filter(|(k, _, _)| matches!(k.as_str(), "set_size" | "set_failures" | "replicas"))
        {
            let _ = writeln!(out, "{:<40} # {o}", format!("{k} = {v}"));
        }
        let (hop, o) = &d.hop_distance;
        let _ = writeln!(out, "{:<40} # {o}", format!("hop_distance = {hop}"));
        let _ = writeln!(out, "output = {}", c.output);
        let _ = writeln!(
            out,
            "{:<40} # {}",
            format!("bypass = {}", d.bypass.0),
            d.bypass.1
        );
        let _ = writeln!(
            out,
            "{:<40} # {}",
            format!("protect_in_background = {}", d.background.0),
            d.background.1
        );
        let _ = writeln!(out, "enabled = {}", c.enabled);
        if !c.params.is_empty() {
            let _ = writeln!(out, "[checkpoint.params]");
            for (k, v, _) in &c.params {
                let _ = writeln!(out, "{} = {}", toml_key(k), quote(v));
            }
        }
    }
}

/// The system-only `[plugins]` table of [`render`] (user directories as a comment: a
/// system file cannot set them) and each `[plugins.NAME]` settings table.
fn render_plugins(out: &mut String, config: &Config) {
    let p = &config.plugins;
    let _ = writeln!(out, "\n[plugins]");
    let _ = writeln!(
        out,
        "{:<40} # {}",
        format!("builtin = {}", p.builtin.0),
        p.builtin.1
    );
    let _ = writeln!(
        out,
        "{:<40} # {}",
        format!("allow_user_plugins = {}", p.allow_user_plugins.0),
        p.allow_user_plugins.1
    );
    let list = |v: &[(std::path::PathBuf, Origin)]| {
        v.iter()
            .map(|(p, o)| format!("\n  {},  # {o}", quote(&p.display().to_string())))
            .collect::<String>()
    };
    let _ = writeln!(out, "directories = [{}\n]", list(&p.site_directories));
    if !p.user_directories.is_empty() {
        let _ = writeln!(
            out,
            "# user directories: [{}\n# ]",
            list(&p.user_directories)
        );
    }
    let _ = writeln!(out, "files = [{}\n]", list(&p.files));
    for (name, table) in &p.settings {
        let _ = writeln!(out, "\n[plugins.{}]", toml_key(name));
        for (k, (v, o)) in table {
            let _ = writeln!(
                out,
                "{:<40} # {o}",
                format!("{} = {}", toml_key(k), quote(v))
            );
        }
    }
}

impl Config {
    /// This configuration as TOML with origins; see [`render`].
    pub fn to_toml(&self) -> String {
        render(self)
    }
}
