//! Reading one TOML configuration file into a [`Layer`], keeping the line of every value
//! so that errors and `scr config show` can name it.

use std::collections::BTreeMap;
use std::path::Path;

use toml::de::{DeTable, DeValue};
use toml::Spanned;

use super::keys::{
    self, check_percent, check_uint, parse_bytes, parse_text, Type, Value, ValueError,
};
use super::{Checkpoint, ConfigError, GroupEntry, Layer, Origin, Store, Tier, View, SECTIONS};

/// Keys of a `[[store]]` table.
const STORE_KEYS: &[&str] = &["path", "group", "count", "mkdir", "enabled", "view", "type"];
/// Keys of a `[[checkpoint]]` table.
const CHECKPOINT_KEYS: &[&str] = &[
    "interval",
    "store",
    "group",
    "type",
    "set_size",
    "set_failures",
    "replicas",
    "hop_distance",
    "output",
    "bypass",
    "protect_in_background",
    "enabled",
    "params",
];
/// Parameters the host derives from typed keys; a `params` table may not shadow them.
const RESERVED_PARAMS: &[&str] = &[
    "set_size",
    "set_failures",
    "replicas",
    "hop_distance",
    "buffer_size",
];
/// Scalar keys of the `[plugins]` table (any table-valued key is a plugin's settings).
const PLUGIN_KEYS: &[&str] = &["directories", "files", "allow_user_plugins", "builtin"];

struct Ctx<'a> {
    path: &'a Path,
    text: &'a str,
    errors: &'a mut Vec<ConfigError>,
}

impl Ctx<'_> {
    fn origin(&self, span: std::ops::Range<usize>) -> Origin {
        Origin::File {
            path: self.path.to_path_buf(),
            line: line_of(self.text, span.start),
        }
    }

    fn error(&mut self, span: std::ops::Range<usize>, message: impl Into<String>) {
        let origin = self.origin(span);
        self.errors.push(ConfigError::new(origin, message));
    }

    fn unknown(&mut self, span: std::ops::Range<usize>, what: &str, key: &str, known: &[&str]) {
        let hint = keys::suggest(key, known.iter().copied())
            .map(|s| format!(" (did you mean `{s}`?)"))
            .unwrap_or_default();
        self.error(
            span,
            format!(
                "unknown key `{key}` in {what}{hint}; known keys: {}",
                known.join(", ")
            ),
        );
    }
}

/// 1-based line of a byte offset.
pub(crate) fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// Parse `text` (the contents of `path`) as a configuration file of `tier`. Every problem
/// is appended to `errors`; what could be read is returned.
pub(crate) fn parse(path: &Path, text: &str, tier: Tier, errors: &mut Vec<ConfigError>) -> Layer {
    let mut layer = Layer::new(tier);
    let table = match DeTable::parse(text) {
        Ok(t) => t,
        Err(e) => {
            let line = e.span().map(|s| line_of(text, s.start)).unwrap_or(1);
            errors.push(ConfigError::new(
                Origin::File {
                    path: path.to_path_buf(),
                    line,
                },
                format!("TOML syntax error: {}", e.message().trim()),
            ));
            return layer;
        }
    };
    let mut cx = Ctx { path, text, errors };
    for (key, value) in table.get_ref() {
        let name = key.get_ref().as_ref();
        let kspan = key.span();
        match name {
            "locked" => parse_locked(&mut cx, &mut layer, kspan, value),
            // `group` is both SCR's scalar (SCR_GROUP, a string) and the host tables
            // (`[[group]]`); TOML allows one of them per file, told apart by type.
            "group" | "store" | "checkpoint" if !(name == "group" && value.get_ref().is_str()) => {
                let Some(items) = array_of_tables(&mut cx, name, value) else {
                    continue;
                };
                let section = SECTIONS.iter().find(|s| **s == name).expect("a section");
                layer.sections.insert(section, cx.origin(kspan));
                for item in items {
                    match name {
                        "group" => parse_group(&mut cx, &mut layer, item),
                        "store" => parse_store(&mut cx, &mut layer, item),
                        _ => parse_checkpoint(&mut cx, &mut layer, item),
                    }
                }
            }
            "plugins" => {
                layer.sections.insert("plugins", cx.origin(kspan.clone()));
                match value.get_ref() {
                    DeValue::Table(t) => parse_plugins(&mut cx, &mut layer, t),
                    other => cx.error(
                        kspan,
                        format!("`plugins` must be a table, found {}", other.type_str()),
                    ),
                }
            }
            _ => parse_scalar(&mut cx, &mut layer, name, kspan, value),
        }
    }
    layer
}

/// A top-level key that is no section: a setting, typed and range-checked; a key in the
/// wrong case, with the `SCR_` prefix, or unknown is refused naming what to write instead.
fn parse_scalar(
    cx: &mut Ctx<'_>,
    layer: &mut Layer,
    name: &str,
    kspan: std::ops::Range<usize>,
    value: &Spanned<DeValue<'_>>,
) {
    match keys::find(name) {
        Some(k) if k.name == name => match typed(k.ty, value) {
            Ok(v) => {
                layer.scalars.insert(k.name, (v, cx.origin(kspan)));
            }
            Err(msg) => cx.error(value.span(), format!("`{name}`: {msg}")),
        },
        Some(k) => cx.error(
            kspan,
            format!("key `{name}` must be written in lower case: `{}`", k.name),
        ),
        None => {
            let stripped = name
                .strip_prefix("SCR_")
                .or_else(|| name.strip_prefix("scr_"))
                .and_then(keys::find);
            if let Some(k) = stripped {
                cx.error(
                    kspan,
                    format!("unknown key `{name}`: in TOML files write `{}` (the SCR_ prefix is for environment variables)", k.name),
                );
            } else {
                let known: Vec<&str> = keys::KEYS
                    .iter()
                    .map(|k| k.name)
                    .chain(SECTIONS.iter().copied())
                    .chain(["locked"])
                    .collect();
                let hint = keys::suggest(name, known.iter().copied())
                    .map(|s| format!(" (did you mean `{s}`?)"))
                    .unwrap_or_default();
                cx.error(
                    kspan,
                    format!(
                        "unknown key `{name}`{hint}; run `scr config show` for the list of keys"
                    ),
                );
            }
        }
    }
}

/// Convert a TOML value to a typed [`Value`], range-checked.
fn typed(ty: Type, value: &Spanned<DeValue<'_>>) -> Result<Value, ValueError> {
    let v = value.get_ref();
    let wrong = || ValueError::Expected {
        ty,
        found: describe(v),
    };
    match (ty, v) {
        (Type::Bool, DeValue::Boolean(b)) => Ok(Value::Bool(*b)),
        (Type::UInt { .. } | Type::Bytes, DeValue::Integer(i)) => {
            let n = i64::from_str_radix(&i.as_str().replace('_', ""), i.radix())
                .map_err(|_| wrong())?;
            let n = u64::try_from(n).map_err(|_| ValueError::Negative { n, ty })?;
            check_uint(ty, n)
        }
        (Type::Bytes, DeValue::String(s)) => parse_bytes(s).map(Value::UInt).ok_or_else(wrong),
        (Type::Percent, DeValue::Float(f)) => {
            check_percent(f.as_str().replace('_', "").parse().map_err(|_| wrong())?)
        }
        (Type::Percent, DeValue::Integer(i)) => {
            check_percent(i.as_str().replace('_', "").parse().map_err(|_| wrong())?)
        }
        (Type::Str | Type::Path | Type::Choice(_), DeValue::String(s)) => parse_text(ty, s),
        _ => Err(wrong()),
    }
}

fn describe(v: &DeValue<'_>) -> String {
    match v {
        DeValue::String(s) => format!("string \"{s}\""),
        DeValue::Integer(i) => format!("integer {}", i.as_str()),
        DeValue::Float(f) => format!("float {}", f.as_str()),
        DeValue::Boolean(b) => format!("boolean {b}"),
        other => other.type_str().to_string(),
    }
}

/// A scalar rendered as a plugin parameter string.
fn scalar_text(v: &DeValue<'_>) -> Option<String> {
    match v {
        DeValue::String(s) => Some(s.to_string()),
        DeValue::Integer(i) => Some(i.as_str().to_string()),
        DeValue::Float(f) => Some(f.as_str().to_string()),
        DeValue::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

fn array_of_tables<'v, 'i>(
    cx: &mut Ctx<'_>,
    name: &str,
    value: &'v Spanned<DeValue<'i>>,
) -> Option<Vec<&'v Spanned<DeValue<'i>>>> {
    match value.get_ref() {
        DeValue::Array(items) if items.iter().all(|i| i.get_ref().is_table()) => {
            Some(items.iter().collect())
        }
        other => {
            cx.error(
                value.span(),
                format!(
                    "`{name}` must be an array of tables written [[{name}]], found {}",
                    other.type_str()
                ),
            );
            None
        }
    }
}

fn table<'v, 'i>(item: &'v Spanned<DeValue<'i>>) -> &'v DeTable<'i> {
    item.get_ref()
        .as_table()
        .expect("checked by array_of_tables")
}

fn parse_locked(
    cx: &mut Ctx<'_>,
    layer: &mut Layer,
    kspan: std::ops::Range<usize>,
    value: &Spanned<DeValue<'_>>,
) {
    if layer.tier != Tier::System {
        cx.error(
            kspan,
            "only the system configuration may lock keys; remove `locked` from this file (to check a system file, run `scr config check --system FILE`)",
        );
        return;
    }
    let DeValue::Array(items) = value.get_ref() else {
        cx.error(value.span(), "`locked` must be an array of key names");
        return;
    };
    for item in items.iter() {
        match item.get_ref().as_str() {
            Some(name)
                if keys::find(name).is_some()
                    || SECTIONS.iter().any(|s| s.eq_ignore_ascii_case(name)) =>
            {
                let origin = cx.origin(item.span());
                layer.locked.push((name.to_ascii_lowercase(), origin));
            }
            Some(name) => cx.error(
                item.span(),
                format!("`locked` names unknown key `{name}` (scalar keys and the sections group, store, checkpoint, plugins can be locked)"),
            ),
            None => cx.error(item.span(), "`locked` entries must be strings"),
        }
    }
}

fn parse_group(cx: &mut Ctx<'_>, layer: &mut Layer, item: &Spanned<DeValue<'_>>) {
    let origin = cx.origin(item.span());
    let mut host = None;
    let mut values = BTreeMap::new();
    for (k, v) in table(item) {
        let key = k.get_ref().as_ref();
        if key == "host" {
            match v.get_ref().as_str() {
                Some(h) if !h.is_empty() => host = Some(h.to_string()),
                _ => cx.error(v.span(), "`host` must be a non-empty host name string"),
            }
        } else if key.eq_ignore_ascii_case("NODE") || key.eq_ignore_ascii_case("WORLD") {
            cx.error(
                k.span(),
                format!("group name `{key}` is reserved: NODE and WORLD are defined by scr-rs"),
            );
        } else {
            match scalar_text(v.get_ref()) {
                Some(text) => {
                    values.insert(key.to_string(), text);
                }
                None => cx.error(
                    v.span(),
                    format!("group `{key}`: value must be a string or number"),
                ),
            }
        }
    }
    let Some(host) = host else {
        cx.error(item.span(), "[[group]] needs `host = \"<node name>\"`");
        return;
    };
    if layer.groups.iter().any(|g| g.host == host) {
        cx.error(
            item.span(),
            format!("host `{host}` has two [[group]] tables in this file; merge them"),
        );
        return;
    }
    layer.groups.push(GroupEntry {
        host,
        values,
        origin,
    });
}

fn parse_store(cx: &mut Ctx<'_>, layer: &mut Layer, item: &Spanned<DeValue<'_>>) {
    let mut store = Store::new(String::new(), cx.origin(item.span()));
    for (k, v) in table(item) {
        let key = k.get_ref().as_ref();
        let r = match key {
            "path" => typed(Type::Path, v).map(|x| {
                if let Value::Str(s) = x {
                    store.path = normalize_dir(&s);
                }
            }),
            "group" => typed(Type::Str, v).map(|x| store.group = Some(x.to_param())),
            "count" => typed(
                Type::UInt {
                    min: 1,
                    max: u64::MAX,
                },
                v,
            )
            .map(|x| {
                if let Value::UInt(n) = x {
                    store.count = Some(n);
                }
            }),
            "mkdir" => typed(Type::Bool, v).map(|x| store.mkdir = x == Value::Bool(true)),
            "enabled" => typed(Type::Bool, v).map(|x| store.enabled = x == Value::Bool(true)),
            "view" => typed(Type::Choice(&["node", "global"]), v).map(|x| {
                store.view = Some(if x.to_param() == "node" {
                    View::Node
                } else {
                    View::Global
                })
            }),
            "type" => typed(Type::Str, v).map(|x| store.transfer = Some(x.to_param())),
            _ => {
                cx.unknown(k.span(), "[[store]]", key, STORE_KEYS);
                continue;
            }
        };
        if let Err(msg) = r {
            cx.error(v.span(), format!("[[store]] `{key}`: {msg}"));
        }
    }
    if store.path.is_empty() {
        cx.error(item.span(), "[[store]] needs `path = \"/absolute/dir\"`");
        return;
    }
    if !store.path.starts_with('/') {
        cx.error(
            item.span(),
            format!("[[store]] path `{}` must be absolute", store.path),
        );
        return;
    }
    if let Some(first) = layer.stores.iter().find(|s| s.path == store.path) {
        let msg = format!(
            "duplicate store `{}`: already defined at {}",
            store.path, first.origin
        );
        cx.error(item.span(), msg);
        return;
    }
    layer.stores.push(store);
}

fn parse_checkpoint(cx: &mut Ctx<'_>, layer: &mut Layer, item: &Spanned<DeValue<'_>>) {
    let mut c = Checkpoint::new(cx.origin(item.span()));
    for (k, v) in table(item) {
        let key = k.get_ref().as_ref();
        let origin = cx.origin(k.span());
        let uint = |ty: Type| {
            typed(ty, v).map(|x| match x {
                Value::UInt(n) => n,
                _ => unreachable!("typed returns UInt for UInt types"),
            })
        };
        let r: Result<(), ValueError> = match key {
            "interval" => uint(Type::UInt {
                min: 1,
                max: u64::MAX,
            })
            .map(|n| c.interval = n),
            "store" => typed(Type::Path, v).map(|x| c.store = Some(normalize_dir(&x.to_param()))),
            "group" => typed(Type::Str, v).map(|x| c.group = Some(x.to_param())),
            "type" => typed(Type::Str, v).map(|x| c.scheme = Some(x.to_param())),
            "set_size" | "set_failures" | "replicas" | "hop_distance" => {
                let k = keys::find(key).expect("catalog key");
                uint(k.ty).map(|n| {
                    c.numbers.insert(k.name, n);
                })
            }
            "output" => typed(Type::Bool, v).map(|x| c.output = x == Value::Bool(true)),
            "bypass" => typed(Type::Bool, v).map(|x| c.bypass = Some(x == Value::Bool(true))),
            "protect_in_background" => {
                typed(Type::Bool, v).map(|x| c.protect_in_background = Some(x == Value::Bool(true)))
            }
            "enabled" => typed(Type::Bool, v).map(|x| c.enabled = x == Value::Bool(true)),
            "params" => {
                match v.get_ref() {
                    DeValue::Table(t) => {
                        for (pk, pv) in t {
                            let pname = pk.get_ref().as_ref();
                            if RESERVED_PARAMS
                                .iter()
                                .any(|r| r.eq_ignore_ascii_case(pname))
                            {
                                cx.error(
                                    pk.span(),
                                    format!("[[checkpoint]] params `{pname}`: set it as a key of the descriptor (or `mpi_buf_size` for buffer_size), not in params"),
                                );
                                continue;
                            }
                            match scalar_text(pv.get_ref()) {
                                Some(text) => {
                                    let at = cx.origin(pk.span());
                                    c.params.push((pname.to_string(), text, at))
                                }
                                None => cx.error(
                                    pv.span(),
                                    format!("[[checkpoint]] params `{}`: value must be a string, number or boolean", pk.get_ref()),
                                ),
                            }
                        }
                    }
                    other => cx.error(
                        v.span(),
                        format!(
                            "[[checkpoint]] `params` must be a table, found {}",
                            other.type_str()
                        ),
                    ),
                }
                Ok(())
            }
            _ => {
                cx.unknown(
                    k.span(),
                    "[[checkpoint]] (scheme-specific parameters go in its `params` table)",
                    key,
                    CHECKPOINT_KEYS,
                );
                continue;
            }
        };
        match r {
            Ok(()) => {
                if let Some(name) = CHECKPOINT_KEYS.iter().find(|n| **n == key) {
                    c.origins.insert(name, origin);
                }
            }
            Err(msg) => cx.error(v.span(), format!("[[checkpoint]] `{key}`: {msg}")),
        }
    }
    layer.checkpoints.push(c);
}

fn parse_plugins(cx: &mut Ctx<'_>, layer: &mut Layer, t: &DeTable<'_>) {
    for (k, v) in t {
        let key = k.get_ref().as_ref();
        let origin = cx.origin(k.span());
        match (key, v.get_ref()) {
            ("directories" | "files", DeValue::Array(items)) => {
                for item in items.iter() {
                    match item.get_ref().as_str() {
                        Some(p) if !p.is_empty() => {
                            // relative to the file that names it, not to the job's directory
                            let base = cx.path.parent().unwrap_or(Path::new("/"));
                            let entry = (base.join(p), cx.origin(item.span()));
                            if key == "files" {
                                layer.plugins.files.push(entry);
                            } else {
                                layer.plugins.directories.push(entry);
                            }
                        }
                        _ => cx.error(
                            item.span(),
                            format!("[plugins] `{key}` entries must be non-empty path strings"),
                        ),
                    }
                }
            }
            ("allow_user_plugins" | "builtin", DeValue::Boolean(b)) => {
                let slot = if key == "builtin" {
                    &mut layer.plugins.builtin
                } else {
                    &mut layer.plugins.allow_user_plugins
                };
                *slot = Some((*b, origin));
            }
            (_, DeValue::Table(settings)) if !PLUGIN_KEYS.contains(&key) => {
                let entry = layer
                    .plugins
                    .settings
                    .entry(key.to_ascii_lowercase())
                    .or_default();
                for (sk, sv) in settings {
                    match scalar_text(sv.get_ref()) {
                        Some(text) => {
                            entry.insert(sk.get_ref().to_string(), (text, cx.origin(sk.span())));
                        }
                        None => cx.error(
                            sv.span(),
                            format!(
                                "[plugins.{key}] `{}`: value must be a string, number or boolean",
                                sk.get_ref()
                            ),
                        ),
                    }
                }
            }
            ("directories" | "files", other) => cx.error(
                v.span(),
                format!(
                    "[plugins] `{key}` must be an array of paths, found {}",
                    describe(other)
                ),
            ),
            ("allow_user_plugins" | "builtin", other) => cx.error(
                v.span(),
                format!(
                    "[plugins] `{key}`: expected a boolean (true or false), found {}",
                    describe(other)
                ),
            ),
            _ => cx.unknown(
                k.span(),
                "[plugins] (a plugin's own settings go in a [plugins.<name>] table)",
                key,
                PLUGIN_KEYS,
            ),
        }
    }
}

/// Store paths are names: compare them without trailing slashes.
pub(crate) fn normalize_dir(p: &str) -> String {
    let t = p.trim_end_matches('/');
    if t.is_empty() {
        "/".to_string()
    } else {
        t.to_string()
    }
}
