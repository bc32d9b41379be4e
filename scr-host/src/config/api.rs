//! The strings applications pass to `SCR_Config` (SCR 3.x): `KEY=VALUE` sets a scalar,
//! `KEY=` unsets what an earlier call set, `KEY` queries the value in force, and the
//! multi-item forms `CKPT=0 TYPE=XOR SET_SIZE=16`, `STORE=/dev/shm COUNT=2` and
//! `GROUPS=host1 POWER=p1` define descriptors (queried as `CKPT=0 TYPE`). Each call is
//! checked when it is made, so a mistake is reported at the call that made it; the calls
//! are then applied, in order, as the configuration's API source.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::keys::{self, Key, Value};
use super::{file, import, settings, Config, ConfigError, Layer, Origin, Tier};

/// The descriptor kinds `SCR_Config` can define.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum DescriptorKind {
    /// `CKPT=<index>`: a checkpoint (redundancy) descriptor.
    Checkpoint,
    /// `STORE=<path>`: a store descriptor.
    Store,
    /// `GROUPS=<host>`: a host's custom group values.
    Groups,
}

impl DescriptorKind {
    fn from_head(head: &str) -> Option<Self> {
        match head.to_ascii_uppercase().as_str() {
            "CKPT" | "CHECKPOINT" => Some(Self::Checkpoint),
            "STORE" => Some(Self::Store),
            "GROUPS" => Some(Self::Groups),
            _ => None,
        }
    }

    fn head(self) -> &'static str {
        match self {
            Self::Checkpoint => "CKPT",
            Self::Store => "STORE",
            Self::Groups => "GROUPS",
        }
    }
}

/// One `SCR_Config` string, understood.
#[derive(Clone, Debug)]
pub enum ApiCall {
    /// `KEY=VALUE` (`value: Some`) or `KEY=` (`None`: forget what earlier calls set).
    Set {
        /// The key.
        key: &'static Key,
        /// The checked value.
        value: Option<Value>,
    },
    /// `CKPT=0 TYPE=XOR ...`: set (or, with `KEY=`, unset) items of one descriptor.
    Descriptor {
        /// Which kind.
        kind: DescriptorKind,
        /// Its name: the checkpoint index, store path or host.
        name: String,
        /// Upper-case item names with their values (`None` to unset).
        items: Vec<(String, Option<String>)>,
    },
    /// `KEY`: the value in force.
    Query(&'static Key),
    /// `STORE`, `CKPT`, `GROUPS` alone: the name of the first descriptor of that kind
    /// that something set (SCR's query of a two-level key answers its first sub-key).
    FirstDescriptor(DescriptorKind),
    /// `STORE=`, `CKPT=`, `GROUPS=` alone: forget every descriptor of that kind that
    /// earlier calls set.
    ClearDescriptors(DescriptorKind),
    /// `CKPT=0 TYPE`: one item of a descriptor in force.
    DescriptorQuery {
        /// Which kind.
        kind: DescriptorKind,
        /// Its name.
        name: String,
        /// The item asked for, upper case.
        item: String,
    },
}

impl ApiCall {
    /// Whether this call changes the configuration (only allowed before init).
    pub fn is_set(&self) -> bool {
        matches!(
            self,
            ApiCall::Set { .. } | ApiCall::Descriptor { .. } | ApiCall::ClearDescriptors(_)
        )
    }
}

/// `"value"` or `'value'` → `value` (SCR lets a value hold `=` or spaces when quoted).
fn unquote(v: &str) -> &str {
    let v = v.trim();
    for q in ['"', '\''] {
        if v.len() >= 2 && v.starts_with(q) && v.ends_with(q) {
            return &v[1..v.len() - 1];
        }
    }
    v
}

/// `text` with the spaces around each `=` outside quotes removed: SCR reads
/// `CKPT = 0 TYPE = XOR` as `CKPT=0 TYPE=XOR`.
fn tight_equals(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut quote: Option<char> = None;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => {
                quote = None;
                out.push(c);
            }
            (None, '"' | '\'') => {
                quote = Some(c);
                out.push(c);
            }
            (None, '=') => {
                while out.ends_with(char::is_whitespace) {
                    out.pop();
                }
                out.push('=');
                // the value follows after spaces, unless what follows is the next item
                // (`TYPE= SET_SIZE=4` unsets TYPE and sets SET_SIZE)
                let rest: String = chars.clone().collect();
                let next = rest.split_whitespace().next().unwrap_or("");
                if !next.contains('=') {
                    while chars.peek().is_some_and(|c| c.is_whitespace()) {
                        chars.next();
                    }
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// Why an `SCR_Config` string is refused.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// Nothing to do.
    #[error("the configuration string is empty; pass `KEY=VALUE` to set, `KEY` to query")]
    Empty,
    /// Several words, and no `=` nor descriptor head.
    #[error("`{0}` is neither `KEY=VALUE`, `KEY` nor a descriptor (CKPT=, STORE=, GROUPS=)")]
    NotACall(String),
    /// A query of an unknown key.
    #[error("{} (a query names a key; to set one write `KEY=VALUE`)", keys::unknown_key(.0))]
    UnknownQuery(String),
    /// A setting of an unknown key.
    #[error("{}", keys::unknown_key(.0))]
    UnknownKey(String),
    /// A value that does not fit its key.
    #[error("`{key}`: {error}")]
    Value {
        /// The key.
        key: &'static str,
        /// What is wrong with the value.
        error: keys::ValueError,
    },
    /// A descriptor without its name (`STORE= COUNT=2`).
    #[error("`{first}` names no {} (write e.g. {})", kind.name_is(), kind.example())]
    NoName {
        /// The descriptor's first word.
        first: String,
        /// Its kind.
        kind: DescriptorKind,
    },
    /// A checkpoint descriptor named otherwise than by an index.
    #[error("CKPT={0}: a checkpoint descriptor is named by its index, a whole number")]
    NotAnIndex(String),
    /// A descriptor without items.
    #[error("`{call}` sets nothing: add items, e.g. `{first} TYPE=XOR`, or query one with `{first} TYPE`")]
    SetsNothing {
        /// The whole call.
        call: String,
        /// Its first word.
        first: String,
    },
    /// A descriptor item that is not `KEY=VALUE`.
    #[error("`{0}`: a descriptor item is `KEY=VALUE` (a query names one item alone)")]
    NotAnItem(String),
    /// The descriptor, translated, is refused (the first error).
    #[error("{0}")]
    Descriptor(String),
}

/// Why a query of the configuration has no answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QueryError {
    /// The call sets something.
    #[error("not a query")]
    NotAQuery,
    /// `GROUPS=host ITEM` of a host without group values.
    #[error("GROUPS={0}: no group values for this host")]
    NoGroups(String),
    /// `CKPT=name ITEM` with a name that is not an index.
    #[error("CKPT={0}: not an index")]
    NotAnIndex(String),
    /// `CKPT=index ITEM` of a descriptor not in force.
    #[error("CKPT={index}: no such checkpoint descriptor ({count} in force)")]
    NoCheckpoint {
        /// The index asked for.
        index: u64,
        /// How many descriptors are in force.
        count: usize,
    },
    /// `STORE=path ITEM` of a store not in force.
    #[error("STORE={0}: no such store in force")]
    NoStore(String),
    /// `STORE=path ITEM` of an item stores do not have.
    #[error("STORE items are GROUP, COUNT, TYPE, VIEW, ENABLED, MKDIR; not {0}")]
    NoStoreItem(String),
}

/// Why the recorded configuration calls of a run cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordedError {
    /// The record cannot be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The record.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A line is not `<call number><tab><text>`.
    #[error("{}:{line}: not `<call number><tab><text>`", path.display())]
    Malformed {
        /// The record.
        path: PathBuf,
        /// The line's number (from 1).
        line: usize,
    },
}

impl DescriptorKind {
    /// What names a descriptor of this kind (for [`CallError::NoName`]).
    fn name_is(self) -> &'static str {
        match self {
            DescriptorKind::Checkpoint => "descriptor index",
            DescriptorKind::Store => "store path",
            DescriptorKind::Groups => "host",
        }
    }

    /// A call defining one (for [`CallError::NoName`]).
    fn example(self) -> &'static str {
        match self {
            DescriptorKind::Checkpoint => "`CKPT=0 TYPE=XOR SET_SIZE=16`",
            DescriptorKind::Store => "`STORE=/dev/shm COUNT=2`",
            DescriptorKind::Groups => "`GROUPS=node1 POWER=p1`",
        }
    }
}

/// Understand and check one `SCR_Config` string.
pub fn parse(text: &str) -> Result<ApiCall, CallError> {
    let tight = tight_equals(text);
    let t = tight.trim();
    if t.is_empty() {
        return Err(CallError::Empty);
    }
    let first = t.split_whitespace().next().unwrap_or("");
    let head = first.split('=').next().unwrap_or("");
    if let Some(kind) = DescriptorKind::from_head(head) {
        return parse_descriptor(kind, t);
    }
    match t.split_once('=') {
        None => {
            if t.split_whitespace().count() > 1 {
                return Err(CallError::NotACall(t.to_string()));
            }
            keys::find_api(t)
                .map(ApiCall::Query)
                .ok_or_else(|| CallError::UnknownQuery(t.to_string()))
        }
        Some((k, v)) => {
            let key =
                keys::find_api(k).ok_or_else(|| CallError::UnknownKey(k.trim().to_string()))?;
            let v = unquote(v);
            if v.is_empty() {
                return Ok(ApiCall::Set { key, value: None });
            }
            let value = keys::parse_text(key.ty, v).map_err(|error| CallError::Value {
                key: key.name,
                error,
            })?;
            Ok(ApiCall::Set {
                key,
                value: Some(value),
            })
        }
    }
}

fn parse_descriptor(kind: DescriptorKind, t: &str) -> Result<ApiCall, CallError> {
    let mut tokens = t.split_whitespace();
    let first = tokens.next().expect("not empty");
    let alone = t.split_whitespace().count() == 1;
    match first.split_once('=') {
        None if alone => return Ok(ApiCall::FirstDescriptor(kind)),
        Some((_, v)) if alone && unquote(v).is_empty() => {
            return Ok(ApiCall::ClearDescriptors(kind))
        }
        _ => {}
    }
    let name = unquote(first.split_once('=').map(|(_, v)| v).unwrap_or("")).to_string();
    if name.is_empty() {
        return Err(CallError::NoName {
            first: first.to_string(),
            kind,
        });
    }
    if kind == DescriptorKind::Checkpoint && name.parse::<u32>().is_err() {
        return Err(CallError::NotAnIndex(name));
    }
    let rest: Vec<&str> = tokens.collect();
    if rest.is_empty() {
        return Err(CallError::SetsNothing {
            call: t.to_string(),
            first: first.to_string(),
        });
    }
    if rest.len() == 1 && !rest[0].contains('=') {
        return Ok(ApiCall::DescriptorQuery {
            kind,
            name,
            item: rest[0].to_ascii_uppercase(),
        });
    }
    let mut items = Vec::new();
    for tok in rest {
        let (k, v) = tok
            .split_once('=')
            .ok_or_else(|| CallError::NotAnItem(tok.to_string()))?;
        let v = unquote(v);
        items.push((
            k.to_ascii_uppercase(),
            (!v.is_empty()).then(|| v.to_string()),
        ));
    }
    let call = ApiCall::Descriptor { kind, name, items };
    // checked now, with the translation init will use, so the call that is wrong is named
    let mut errors = Vec::new();
    descriptor_layer(&call, &Origin::Default, &mut errors);
    match errors.into_iter().next() {
        Some(e) => Err(CallError::Descriptor(e.message)),
        None => Ok(call),
    }
}

/// One descriptor as a one-line SCR configuration file, translated and parsed like a
/// TOML file of the API tier; every origin in it becomes `origin`.
fn descriptor_layer(call: &ApiCall, origin: &Origin, errors: &mut Vec<ConfigError>) -> Layer {
    let ApiCall::Descriptor { kind, name, items } = call else {
        unreachable!("only descriptors are translated")
    };
    let mut line = format!("{}={name}", kind.head());
    for (k, v) in items {
        if let Some(v) = v {
            line.push_str(&format!(" {k}={v}"));
        }
    }
    let toml = match import::import_scr(&line) {
        Ok(t) => t,
        Err(es) => {
            for e in es {
                errors.push(ConfigError::new(origin.clone(), e.message.to_string()));
            }
            return Layer::new(Tier::Api);
        }
    };
    let mut mine = Vec::new();
    let mut layer = file::parse(Path::new("SCR_Config"), &toml, Tier::Api, &mut mine);
    errors.extend(mine.into_iter().map(|mut e| {
        e.origin = origin.clone();
        e
    }));
    relabel(&mut layer, origin);
    layer
}

fn relabel(layer: &mut Layer, origin: &Origin) {
    for g in &mut layer.groups {
        g.origin = origin.clone();
    }
    for s in &mut layer.stores {
        s.origin = origin.clone();
    }
    for c in &mut layer.checkpoints {
        c.origin = origin.clone();
        for o in c.origins.values_mut() {
            *o = origin.clone();
        }
        for p in &mut c.params {
            p.2 = origin.clone();
        }
    }
    for o in layer.sections.values_mut() {
        *o = origin.clone();
    }
}

/// Apply the calls, in order, as the API tier: later calls override earlier ones item by
/// item, `KEY=` forgets what earlier calls set. Queries are ignored.
pub(crate) fn layer(calls: &[(usize, String)], errors: &mut Vec<ConfigError>) -> Layer {
    let mut api = Layer::new(Tier::Api);
    // (kind, name) → merged items and the call that last touched the descriptor
    type Items = Vec<(String, Option<String>)>;
    let mut descriptors: BTreeMap<(DescriptorKind, String), (Items, Origin)> = BTreeMap::new();
    for (call, text) in calls {
        let origin = Origin::Api(*call, text.clone());
        match parse(text) {
            Err(why) => errors.push(ConfigError::new(origin, why.to_string())),
            Ok(ApiCall::Set { key, value: None }) => {
                api.scalars.remove(key.name);
            }
            Ok(ApiCall::Set {
                key,
                value: Some(v),
            }) => {
                api.scalars.insert(key.name, (v, origin));
            }
            Ok(ApiCall::Descriptor { kind, name, items }) => {
                let entry = descriptors
                    .entry((kind, name))
                    .or_insert_with(|| (Vec::new(), origin.clone()));
                for (k, v) in items {
                    entry.0.retain(|(x, _)| *x != k);
                    entry.0.push((k, v));
                }
                entry.1 = origin;
            }
            Ok(ApiCall::ClearDescriptors(kind)) => {
                descriptors.retain(|(k, _), _| *k != kind);
            }
            Ok(
                ApiCall::Query(_) | ApiCall::FirstDescriptor(_) | ApiCall::DescriptorQuery { .. },
            ) => {}
        }
    }
    // checkpoint descriptors in index order (a BTreeMap of strings would put 10 before 2)
    let mut entries: Vec<_> = descriptors.into_iter().collect();
    entries
        .sort_by_key(|((kind, name), _)| (*kind, name.parse::<u64>().unwrap_or(0), name.clone()));
    for ((kind, name), (items, origin)) in entries {
        let index = name.parse::<u64>().ok();
        let call = ApiCall::Descriptor { kind, name, items };
        let l = descriptor_layer(&call, &origin, errors);
        api.groups.extend(l.groups);
        api.stores.extend(l.stores);
        api.checkpoints
            .extend(l.checkpoints.into_iter().map(|mut c| {
                if kind == DescriptorKind::Checkpoint {
                    c.index = index;
                }
                c
            }));
        for (s, o) in l.sections {
            api.sections.entry(s).or_insert(o);
        }
    }
    api
}

/// Where init records the settings the application made through the API, so that
/// `scr config show` and `explain` (run later, in another process) report what the run
/// had in force: `<prefix>/.scr/app.conf` (SCR keeps its own in the same place).
pub(crate) fn record_path(prefix: &Path) -> std::path::PathBuf {
    crate::layout::app_conf_file(prefix)
}

/// Record the run's accepted settings (`(call number, text)`), replacing an earlier
/// run's; with none, remove the record, so a stale one does not outlive the run that
/// made it.
pub fn record(prefix: &Path, calls: &[(usize, String)]) -> std::io::Result<()> {
    let path = record_path(prefix);
    let calls: Vec<&(usize, String)> = calls
        .iter()
        .filter(|(_, t)| parse(t).is_ok_and(|c| c.is_set()))
        .collect();
    if calls.is_empty() {
        return match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
    }
    let mut text = String::from(
        "# The configuration calls (SCR_Config) of the last run started in this prefix:\n# call number, a tab, the text. Read by `scr config show` and `explain`.\n",
    );
    for (n, t) in calls {
        // a password is not left readable in the prefix: the record says it was set
        let t = match parse(t) {
            Ok(ApiCall::Set {
                key,
                value: Some(_),
            }) if key.name == settings::LOG_DB_PASS.name() => {
                format!("{}=(set, not recorded)", key.env_var())
            }
            _ => t.clone(),
        };
        // a call's text is one line: a newline in it would make the next line a call
        text.push_str(&format!("{n}\t{}\n", t.replace('\n', " ")));
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    crate::state::write_atomic(&path, text.as_bytes())
}

/// The settings [`record`] left in `prefix`; none when there is no record.
pub fn recorded(prefix: &Path) -> Result<Vec<(usize, String)>, RecordedError> {
    let path = record_path(prefix);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(RecordedError::Io { path, source }),
    };
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.starts_with('#') && !l.trim().is_empty())
        .map(|(i, l)| {
            l.split_once('\t')
                .and_then(|(n, t)| Some((n.parse().ok()?, t.to_string())))
                .ok_or_else(|| RecordedError::Malformed {
                    path: path.clone(),
                    line: i + 1,
                })
        })
        .collect()
}

impl Config {
    /// The answer to a query (`KEY`, `CKPT=0 TYPE`, `STORE=/dev/shm COUNT`): the value
    /// something set — through the API, the environment or a configuration file — as
    /// text; `None` for a key nothing set (left at its built-in default) or that has no
    /// value, as SCR's `SCR_Config` answers. Descriptor items answer what is in force.
    pub fn query(&self, call: &ApiCall) -> Result<Option<String>, QueryError> {
        match call {
            // as SCR: the value something set (the API, the environment, a file), none
            // for a key left at its built-in default (`scr config show` lists those)
            ApiCall::Query(key) => {
                let setting = self.setting(key.name);
                Ok(match setting.origin {
                    Origin::Default => None,
                    // a boolean as SCR's parameters hold one, `1` or `0`: applications
                    // read the answer with atoi
                    _ => setting.value.as_ref().map(|v| match v {
                        Value::Bool(b) => flag(*b).expect("a flag"),
                        other => other.to_param(),
                    }),
                })
            }
            ApiCall::DescriptorQuery { kind, name, item } => {
                self.descriptor_item(*kind, name, item)
            }
            ApiCall::FirstDescriptor(kind) => Ok(self.first_descriptor(*kind)),
            _ => Err(QueryError::NotAQuery),
        }
    }

    /// The name of the first descriptor of `kind` in force that a source set (the API
    /// or a configuration file; not the store and checkpoint descriptors implied from
    /// `cache_base` and `copy_type`), as `SCR_Config("STORE")` answers: the store's
    /// path, the checkpoint descriptor's index (its position when no call gave one), the
    /// host of a group table. `None` when no source set one.
    fn first_descriptor(&self, kind: DescriptorKind) -> Option<String> {
        let set = |o: &Origin| *o != Origin::Default;
        // the store implied from cache_base carries that setting's origin (for
        // `explain`); a store table of its own has its own line or call
        let base = self.setting_of(settings::CACHE_BASE);
        let implied = |s: &super::Store| {
            base.value.as_ref().is_some_and(|v| v.to_param() == s.path) && s.origin == base.origin
        };
        match kind {
            DescriptorKind::Store => self
                .stores
                .iter()
                .find(|s| set(&s.origin) && !implied(s))
                .map(|s| s.path.clone()),
            DescriptorKind::Checkpoint => self
                .checkpoints
                .iter()
                .enumerate()
                .find(|(_, c)| set(&c.origin))
                .map(|(i, c)| c.index.unwrap_or(i as u64).to_string()),
            DescriptorKind::Groups => self
                .groups
                .iter()
                .find(|g| set(&g.origin))
                .map(|g| g.host.clone()),
        }
    }

    /// The value of `item` of the descriptor `kind`=`name` in force (`CKPT=0 TYPE`,
    /// `STORE=/dev/shm COUNT`, `GROUPS=host SWITCH`).
    fn descriptor_item(
        &self,
        kind: DescriptorKind,
        name: &str,
        item: &str,
    ) -> Result<Option<String>, QueryError> {
        match kind {
            DescriptorKind::Checkpoint => self.checkpoint_item(name, item),
            DescriptorKind::Store => self.store_item(name, item),
            DescriptorKind::Groups => {
                let g = self
                    .groups
                    .iter()
                    .find(|g| g.host == name)
                    .ok_or_else(|| QueryError::NoGroups(name.to_string()))?;
                Ok(g.values
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(item))
                    .map(|(_, v)| v.clone()))
            }
        }
    }

    /// `CKPT=name ITEM`: the descriptor the application defined with that CKPT index, or
    /// (when it defined none) the one at that position among the files' descriptors (or
    /// the implied one); a field, a set parameter (the descriptor's, else the global
    /// setting) or one of its scheme parameters.
    fn checkpoint_item(&self, name: &str, item: &str) -> Result<Option<String>, QueryError> {
        let index: u64 = name
            .parse()
            .map_err(|_| QueryError::NotAnIndex(name.to_string()))?;
        let c = if self.checkpoints.iter().any(|c| c.index.is_some()) {
            self.checkpoints.iter().find(|c| c.index == Some(index))
        } else {
            usize::try_from(index)
                .ok()
                .and_then(|i| self.checkpoints.get(i))
        };
        let c = c.ok_or(QueryError::NoCheckpoint {
            index,
            count: self.checkpoints.len(),
        })?;
        let number = |key| Some(self.checkpoint_number(c, key).to_string());
        Ok(match item {
            "TYPE" => Some(self.checkpoint_scheme(c)),
            "INTERVAL" => Some(c.interval.to_string()),
            "STORE" => Some(self.checkpoint_store(c)),
            "GROUP" => Some(self.checkpoint_group(c)),
            "SET_SIZE" => number(settings::SET_SIZE),
            "SET_FAILURES" => number(settings::SET_FAILURES),
            "REPLICAS" => number(settings::REPLICAS),
            "HOP_DISTANCE" => number(settings::HOP_DISTANCE),
            "OUTPUT" => flag(c.output),
            "BYPASS" => flag(self.checkpoint_bypass(c)),
            "PROTECT_IN_BACKGROUND" => flag(
                c.protect_in_background
                    .unwrap_or_else(|| self.get(settings::PROTECT_IN_BACKGROUND)),
            ),
            "ENABLED" => flag(c.enabled),
            other => c
                .params
                .iter()
                .find(|(k, _, _)| k.eq_ignore_ascii_case(other))
                .map(|(_, v, _)| v.clone()),
        })
    }

    /// `STORE=path ITEM`: a field of the store in force at `path` (normalised), its
    /// global default when the store does not set it.
    fn store_item(&self, name: &str, item: &str) -> Result<Option<String>, QueryError> {
        let path = file::normalize_dir(name);
        let s = self
            .stores
            .iter()
            .find(|s| s.path == path)
            .ok_or_else(|| QueryError::NoStore(name.to_string()))?;
        Ok(match item {
            "GROUP" => Some(self.store_group(s)),
            "COUNT" => Some(self.store_count(s).to_string()),
            "TYPE" => Some(self.store_transfer(s).0),
            "VIEW" => s.view.map(|v| v.to_string().to_ascii_uppercase()),
            "ENABLED" => flag(s.enabled),
            "MKDIR" => flag(s.mkdir),
            other => return Err(QueryError::NoStoreItem(other.to_string())),
        })
    }
}

/// A flag as a query answers it: `1` or `0`.
fn flag(b: bool) -> Option<String> {
    Some(if b { "1" } else { "0" }.to_string())
}

#[cfg(test)]
mod tests;
