//! The shipped system configuration, `config/scr.toml`, rendered from the catalog: the
//! file is the prose below around `key = value` lines whose values are the catalog's
//! defaults, so what the file says a default is and what the library does without it
//! cannot differ. A test compares the rendering with the file byte for byte; after a
//! change here or to a default in the catalog, regenerate the file with
//! `UPDATE_SHIPPED_CONFIG=1 cargo test -p scr-host --lib shipped_scr_toml_is_the_catalog_rendered`.
//!
//! It lives apart from `render.rs`, which prints an effective configuration with the
//! origin of each value (`scr config show`); this is the annotated template a site
//! installs.

use std::fmt::Write as _;

use super::catalog::{computed_default, ALLOW_USER_PLUGINS, BUILTIN_PLUGINS};
use super::settings::*;
use super::toml_string;
use super::types::{Key, Value};

/// The command that rewrites `config/scr.toml` from [`system_file`].
#[cfg(test)]
const REGENERATE: &str =
    "UPDATE_SHIPPED_CONFIG=1 cargo test -p scr-host --lib shipped_scr_toml_is_the_catalog_rendered";

/// One piece of the shipped file.
enum Part {
    /// Comment lines, each written `# <line>` (an empty line as `#`).
    Note(&'static str),
    /// An empty line.
    Blank,
    /// `name = <its catalog default>`.
    Key(&'static Key),
    /// `# name = <example>`: a key with no default, shown commented out.
    Example(&'static Key, &'static str),
    /// A line as it stands (a table header, an empty list).
    Line(&'static str),
    /// `name = <value>`: a `[plugins]` switch with its built-in value.
    Flag(&'static str, bool),
}

use Part::{Blank, Example, Flag, Line, Note};

/// `Part::Key` of a typed constant.
const fn key<T>(param: Param<T>) -> Part {
    Part::Key(param.key())
}

/// The shipped file, top to bottom.
const FILE: &[Part] = &[
    Note("scr-rs system configuration (install as /etc/scr/scr.toml, or point SCR_SYSTEM_CONFIG at it).\n\
          \n\
          Every key below shows its built-in default: with no configuration file at all, scr-rs\n\
          caches checkpoints in /dev/shm and protects them with XOR over sets of 8 processes,\n\
          each set spread over 8 different nodes. `scr config show` prints what is in force and\n\
          where each value came from; `scr config explain --checkpoint N` says which descriptor\n\
          checkpoint N would use. Users override keys (unless locked below) with SCR_<KEY>\n\
          environment variables or their own file (SCR_CONF_FILE, else <prefix>/.scrconf.toml)."),
    Blank,
    Note("Node-local storage for the control directory and for checkpoints.\n\
          SCR used /tmp; /dev/shm is tmpfs on every Linux node, so it is node-local and fast."),
    key(CNTL_BASE),
    key(CACHE_BASE),
    Blank,
    Note("Datasets kept per store when the store says no `count`. SCR used 1; with 2 the previous\n\
          checkpoint survives while the next one is being written."),
    key(CACHE_SIZE),
    Blank,
    Note("The implied checkpoint descriptor, used when no [[checkpoint]] table exists anywhere.\n\
          copy_type is SINGLE, PARTNER, XOR, RS or a plugin's scheme. With RS, set_failures is\n\
          how many lost members per set it rebuilds: 1 <= set_failures < members of the set,\n\
          and members + set_failures <= 256 (other schemes ignore it)."),
    key(COPY_TYPE),
    key(SET_SIZE),
    key(SET_FAILURES),
    key(GROUP),
    Blank,
    Note("Flush every 10th checkpoint to the prefix with the pthread transfer type."),
    key(FLUSH),
    key(FLUSH_TYPE),
    Note("At most this many ranks copy to the prefix at once in a (foreground) flush, and read\n\
          from it at once at restart: a sliding window by rank (SCR_FLUSH_WIDTH, SCR_FETCH_WIDTH)."),
    key(FLUSH_WIDTH),
    key(FETCH_WIDTH),
    Blank,
    Note("CRC32 of every checkpoint file, so silent corruption is detected (SCR: off on copy).\n\
          It costs one read of the data: scr-bench-single measured a 256 MiB-per-rank SINGLE\n\
          checkpoint at 1.0x a plain write without it and 1.7-1.9x with it on tmpfs."),
    key(CRC_ON_COPY),
    key(CRC_ON_FLUSH),
    Note("Check every cached file's size and CRC32 at init, before it is offered for restart or\n\
          read by a rebuild; a file that fails counts as lost (rebuilt, or an older checkpoint)."),
    key(CRC_ON_RESTART),
    Blank,
    Note("The prefix (SCR's SCR_PREFIX_SIZE, SCR_PREFIX_PURGE): keep a window of N checkpoints\n\
          there, older ones deleted after each flush (0 keeps all); delete every indexed dataset\n\
          at init for a fresh start."),
    key(PREFIX_SIZE),
    key(PREFIX_PURGE),
    Blank,
    Note("The restart (SCR's SCR_CURRENT, SCR_DROP_AFTER_CURRENT, SCR_GLOBAL_RESTART): `current`\n\
          names the checkpoint to restart from (unset: the newest); drop_after_current drops the\n\
          datasets newer than it from the index; global_restart flushes the cached checkpoint,\n\
          clears the cache and restarts from the prefix in place."),
    Example(CURRENT.key(), "\"ckpt.10\""),
    key(DROP_AFTER_CURRENT),
    key(GLOBAL_RESTART),
    Blank,
    Note("Events (SCR's SCR_LOG_*): the text log <prefix>/.scr/events.jsonl that `scr log` reads\n\
          (SCR leaves logging off by default; we keep it on for `scr log`), and syslog from rank 0\n\
          (SCR: on; here off so test runs do not fill the system log). SCR's MySQL database\n\
          (log_db_*) is not available: log_db_enable = true and the other log_db_* keys are refused."),
    key(LOG_ENABLE),
    key(LOG_TXT_ENABLE),
    key(LOG_SYSLOG_ENABLE),
    key(LOG_SYSLOG_PREFIX),
    key(LOG_SYSLOG_FACILITY),
    key(LOG_SYSLOG_LEVEL),
    key(LOG_DB_ENABLE),
    Blank,
    Note("Keys users may not override (environment, user file or API). Sections can be locked\n\
          whole: \"group\", \"store\", \"checkpoint\", \"plugins\"."),
    Line("locked = []"),
    Blank,
    Line("[plugins]"),
    Note("Load the plugins shipped with scr-rs (found next to the installed binaries, or in\n\
          ../lib/scr/plugins). Set to false to use only the site's own builds."),
    Flag("builtin", BUILTIN_PLUGINS),
    Note("Directories whose *.so files are loaded as plugins (site or vendor plugins)."),
    Line("directories = []"),
    Note("Individual plugin libraries."),
    Line("files = []"),
    Note("Whether users may name their own plugin directories or files in their configuration."),
    Flag("allow_user_plugins", ALLOW_USER_PLUGINS),
    Blank,
    Note("Settings passed through to one scheme or transfer type, e.g.:\n\
          [plugins.bbapi]\n\
          library = \"/opt/ibm/bb/lib/libbbAPI.so\""),
];

/// `key`'s default as a TOML value.
fn default_text(key: &Key) -> String {
    // no computed default is shipped (they depend on where and by whom a job runs)
    let no_env = Default::default();
    match computed_default(key, std::path::Path::new("/"), &no_env) {
        Some(Value::Str(s)) => toml_string(&s),
        Some(other) => other.to_string(),
        None => panic!(
            "`{}` has no default to ship; show it as an example",
            key.name
        ),
    }
}

/// The shipped system configuration file, `config/scr.toml`.
pub fn system_file() -> String {
    let mut out = String::new();
    for part in FILE {
        let _ = match part {
            Note(text) => text.lines().try_for_each(|l| match l {
                "" => writeln!(out, "#"),
                l => writeln!(out, "# {l}"),
            }),
            Blank => writeln!(out),
            Part::Key(key) => writeln!(out, "{} = {}", key.name, default_text(key)),
            Example(key, value) => writeln!(out, "# {} = {value}", key.name),
            Line(line) => writeln!(out, "{line}"),
            Flag(name, value) => writeln!(out, "{name} = {value}"),
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::{file, Tier};
    use super::*;

    /// `config/scr.toml` in the source tree.
    fn shipped_path() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/scr.toml")
    }

    #[test]
    fn shipped_scr_toml_is_the_catalog_rendered() {
        let path = shipped_path();
        let rendered = system_file();
        if std::env::var_os("UPDATE_SHIPPED_CONFIG").is_some() {
            std::fs::write(&path, &rendered).unwrap();
        }
        let shipped = std::fs::read_to_string(&path).unwrap();
        if shipped != rendered {
            let line = shipped
                .lines()
                .zip(rendered.lines())
                .position(|(a, b)| a != b)
                .map_or_else(
                    || shipped.lines().count().min(rendered.lines().count()) + 1,
                    |i| i + 1,
                );
            panic!(
                "{} differs from the catalog's rendering from line {line} on \
                 (shipped: {:?}, rendered: {:?}); regenerate it with `{REGENERATE}`",
                path.display(),
                shipped.lines().nth(line - 1),
                rendered.lines().nth(line - 1),
            );
        }
    }

    #[test]
    fn the_rendered_file_loads_to_the_catalog_defaults() {
        let mut errors = Vec::new();
        let layer = file::parse(&shipped_path(), &system_file(), Tier::System, &mut errors);
        assert!(errors.is_empty(), "{errors:?}");
        let no_env = Default::default();
        assert!(layer.scalars.len() >= 20, "{:?}", layer.scalars.keys());
        for (name, (value, _)) in &layer.scalars {
            let key = super::super::keys::find(name).unwrap();
            let default = computed_default(key, std::path::Path::new("/"), &no_env);
            assert_eq!(Some(value), default.as_ref(), "`{name}`");
        }
        assert_eq!(layer.plugins.builtin.map(|b| b.0), Some(BUILTIN_PLUGINS));
        assert_eq!(
            layer.plugins.allow_user_plugins.map(|b| b.0),
            Some(ALLOW_USER_PLUGINS)
        );
    }
}
