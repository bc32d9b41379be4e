//! The plugin registry: finds plugin libraries, loads each one independently, checks its
//! ABI, and resolves scheme and transfer names (case-insensitively) to the library that
//! provides them.
//!
//! Every problem is reported in one line naming the file: a file that is not a plugin, a
//! layout mismatch (in words: which method, parameter, return value, field or type
//! changed and how, see `abi_words`) or an ABI-version mismatch, a root module
//! that failed, and two libraries providing one name. Loading never stops at the first
//! bad file: the registry keeps what loaded and lists what was refused.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use abi_stable::library::{lib_header_from_path, LibraryError};
use abi_stable::StableAbi;

mod abi_words;
pub use abi_words::explain_layouts;
use scr_plugin::{
    HostRef, PluginError, PluginModRef, SchemeBox, SchemeConfig, SchemeDescription, TransferBox,
    TransferConfig, ABI_VERSION,
};

/// The plugin libraries this project ships: file name and the library name it must
/// report. Only these are loaded from the built-in directory, so other shared objects that
/// sit beside them (test fixtures, an application's own libraries) are never mistaken for
/// plugins, and a file that is not what its name says is refused.
pub(crate) const SHIPPED_PLUGINS: &[(&str, &str)] = &[
    ("libscr_single.so", "scr-single"),
    ("libscr_partner.so", "scr-partner"),
    ("libscr_xor.so", "scr-xor"),
    ("libscr_reed_solomon.so", "scr-reed-solomon"),
    ("libscr_axl_transfer.so", "scr-axl-transfer"),
];

/// Where a library was found; decides trust and appears in `scr plugins list`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Shipped with scr-rs, next to the installed binaries.
    Builtin,
    /// A plugin directory named in the system configuration.
    SiteDirectory(PathBuf),
    /// A file named explicitly in `[plugins] files`.
    Explicit,
    /// A user plugin directory (only when the system config allows user plugins).
    UserDirectory(PathBuf),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Builtin => f.write_str("built-in"),
            Origin::SiteDirectory(d) => write!(f, "site dir {}", d.display()),
            Origin::Explicit => f.write_str("named file"),
            Origin::UserDirectory(d) => write!(f, "user dir {}", d.display()),
        }
    }
}

/// Where to look for plugins, in order.
#[derive(Clone, Debug, Default)]
pub struct SearchPath {
    /// The built-in directory, if shipped plugins are enabled and one was found.
    pub builtin: Option<PathBuf>,
    /// Every place the built-in directory was looked for ([`builtin_plugin_candidates`];
    /// empty when shipped plugins are switched off), named in the error when no plugin
    /// provides a name.
    pub builtin_candidates: Vec<PathBuf>,
    /// Site plugin directories from the system configuration.
    pub site_directories: Vec<PathBuf>,
    /// Individual library files.
    pub files: Vec<PathBuf>,
    /// User plugin directories (already checked against `allow_user_plugins`).
    pub user_directories: Vec<PathBuf>,
}

/// Setting this environment variable (to anything) drops the build directory a
/// development build records (`SCR_BUILD_PLUGIN_DIR`) from [`builtin_plugin_candidates`],
/// so that an install tree made from a development build can be tested as a user would
/// see it: found through its own `lib/scr/plugins`, or not at all.
pub const SKIP_BUILD_DIR_VAR: &str = "SCR_PLUGIN_SKIP_BUILD_DIR";

/// The places the shipped plugins are looked for, in order:
///
/// 1. the install directory fixed at build time (`SCR_PLUGIN_INSTALL_DIR`; an application
///    statically linked with `libscr.a` has nothing else to go by);
/// 2. beside the loaded object holding this code: `<dir>/scr/plugins` when that is a
///    shared library (`<prefix>/lib/libscr.so` → `<prefix>/lib/scr/plugins`), so a program
///    built anywhere against an install tree finds them;
/// 3. `../lib/scr/plugins` beside the running executable (`<prefix>/bin/scr`);
/// 4. the build's own target directory (development), unless [`SKIP_BUILD_DIR_VAR`] is set.
pub fn builtin_plugin_candidates() -> Vec<PathBuf> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(d) = option_env!("SCR_PLUGIN_INSTALL_DIR") {
        candidates.push(PathBuf::from(d));
    }
    let exe = std::env::current_exe().ok();
    if let Some(object) = loaded_object::path_of_this_code() {
        let object = object.canonicalize().unwrap_or(object);
        // the executable itself is covered by the next candidate
        if exe.as_deref() != Some(object.as_path()) {
            if let Some(dir) = object.parent() {
                candidates.push(dir.join("scr/plugins"));
            }
        }
    }
    if let Some(prefix) = exe.as_deref().and_then(Path::parent).and_then(Path::parent) {
        candidates.push(prefix.join("lib/scr/plugins"));
    }
    if std::env::var_os(SKIP_BUILD_DIR_VAR).is_none() {
        if let Some(d) = option_env!("SCR_BUILD_PLUGIN_DIR") {
            candidates.push(PathBuf::from(d));
        }
    }
    let mut unique: Vec<PathBuf> = Vec::new();
    for c in candidates {
        if !unique.contains(&c) {
            unique.push(c);
        }
    }
    unique
}

/// The directory holding the shipped plugins: the first of
/// [`builtin_plugin_candidates`] holding one of them. `None` when none does.
pub fn builtin_plugin_dir() -> Option<PathBuf> {
    builtin_plugin_candidates()
        .into_iter()
        .find(|d| SHIPPED_PLUGINS.iter().any(|(f, _)| d.join(f).is_file()))
        .map(|d| d.canonicalize().unwrap_or(d))
}

/// Which file the code of this crate was loaded from: `libscr.so` when it is linked into
/// the C library, else the executable.
mod loaded_object {
    #![allow(unsafe_code)]

    use std::ffi::{CStr, OsStr};
    use std::os::unix::ffi::OsStrExt as _;
    use std::path::PathBuf;

    /// The path of the loaded object (shared library or executable) containing this
    /// function, as the dynamic loader recorded it. `None` when the loader does not know
    /// or recorded a relative name (glibc gives `argv[0]` for the executable, which may be
    /// relative to a directory we are no longer in).
    pub(super) fn path_of_this_code() -> Option<PathBuf> {
        let address = path_of_this_code as fn() -> Option<PathBuf> as *const libc::c_void;
        // SAFETY: Dl_info is plain pointers and integers, for which all-zero is valid.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: dladdr only reads the loader's tables for `address` (a function of this
        // object, so mapped) and writes into `info`, which lives for the whole call.
        let found = unsafe { libc::dladdr(address, &mut info) };
        if found == 0 || info.dli_fname.is_null() {
            return None;
        }
        // SAFETY: dladdr succeeded, so dli_fname points to the loader's NUL-terminated
        // name of the object, which stays valid while the object is loaded; it holds this
        // code, so it is loaded now. The bytes are copied before returning.
        let name = unsafe { CStr::from_ptr(info.dli_fname) };
        let path = PathBuf::from(OsStr::from_bytes(name.to_bytes()));
        path.is_absolute().then_some(path)
    }
}

/// A library that loaded and passed every check.
#[derive(Clone)]
pub struct Library {
    /// The file it was loaded from.
    pub path: PathBuf,
    /// How it was found.
    pub origin: Origin,
    /// Its own name.
    pub name: String,
    /// Its own version.
    pub version: String,
    /// The semantic ABI version it was built against.
    pub abi_version: u32,
    /// Scheme names it provides.
    pub schemes: Vec<String>,
    /// Transfer types it provides.
    pub transfers: Vec<String>,
    module: PluginModRef,
}

impl fmt::Debug for Library {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Library")
            .field("path", &self.path)
            .field("name", &self.name)
            .field("version", &self.version)
            .field("schemes", &self.schemes)
            .field("transfers", &self.transfers)
            .finish()
    }
}

/// A file that was not loaded, with the one-line reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The file.
    pub path: PathBuf,
    /// How it was found.
    pub origin: Origin,
    /// Why it was refused (one line).
    pub reason: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: refused: {}", self.path.display(), self.reason)
    }
}

/// Which of the two name spaces a name lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// Redundancy schemes.
    Scheme,
    /// Transfer types.
    Transfer,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Scheme => "scheme",
            Kind::Transfer => "transfer type",
        })
    }
}

/// Errors of name resolution and of plugin calls made through the registry.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegistryError {
    /// No loaded library provides the name.
    #[error(
        "unknown {kind} \"{name}\": no loaded plugin provides it (known: {known}{looked}){refused}"
    )]
    Unknown {
        /// Scheme or transfer.
        kind: Kind,
        /// The name asked for.
        name: String,
        /// Comma-separated names that do exist.
        known: String,
        /// When nothing is known: where plugins were looked for (`; looked in: ...`),
        /// so that a program that found no plugin says where to put them. Else empty.
        looked: String,
        /// The plugin files and directories that were refused (`; PATH: refused: why`
        /// each): a refused library's names are unknown, so any of them may be the one
        /// that would have provided the name. Empty when nothing was refused.
        refused: String,
    },
    /// Two or more libraries provide the name.
    #[error("{kind} \"{name}\" is provided by more than one library: {}; remove all but one (or set `builtin = false` under [plugins] to drop the shipped ones)", .files.join(" and "))]
    Ambiguous {
        /// Scheme or transfer.
        kind: Kind,
        /// The name.
        name: String,
        /// The files providing it.
        files: Vec<String>,
    },
    /// The plugin returned an error (or panicked; the guard turned it into an error).
    #[error("plugin {file}: {call}: {error}")]
    Plugin {
        /// The library file.
        file: String,
        /// The call that failed.
        call: &'static str,
        /// What the plugin said.
        error: PluginError,
    },
}

/// Why a plugin file or directory is not trusted: another user than root and this one
/// could have written it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Untrusted {
    /// Its owner and mode cannot be read.
    #[error("cannot check {what} {}: {source}", path.display())]
    CannotCheck {
        /// What it is (`plugin file`, `its directory`, `plugin directory`).
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// It is owned by another user.
    #[error("{what} {} is owned by uid {uid}, neither root nor this user{}; plugins are loaded only from files and directories root or you own", path.display(), me.map(|u| format!(" (uid {u})")).unwrap_or_default())]
    Owner {
        /// What it is.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// Its owner.
        uid: u32,
        /// This user, when known.
        me: Option<u32>,
    },
    /// Group or others may write it.
    #[error("{what} {} has mode {mode:04o}: writable by group or others, so another user could have put code there; chmod go-w it", path.display())]
    Mode {
        /// What it is.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
}

/// Why a plugin library was not loaded (the reason of its [`Refusal`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// It, or its directory, is not trusted: never opened.
    #[error("not opened: {0}")]
    NotOpened(Untrusted),
    /// abi_stable refused it (said in words, one line).
    #[error("{0}")]
    Refused(String),
    /// Its root module's layout differs from the host's.
    #[error("incompatible plugin ABI: {0}; {advice}", advice = rebuild_advice())]
    IncompatibleAbi(String),
    /// It speaks another version of the plugin ABI.
    #[error("plugin ABI version mismatch: this host speaks version {ABI_VERSION}, the library was built for version {0}; {advice}", advice = rebuild_advice())]
    AbiVersion(u32),
    /// Its `library` call failed.
    #[error("the library failed to describe itself: {0}")]
    Describe(PluginError),
    /// A built-in plugin file holds another library than the one shipped under its name.
    #[error("a built-in plugin file must be library {want}, but this one is {name} {version}; reinstall scr-rs")]
    NotTheBuiltin {
        /// The library expected.
        want: String,
        /// The library found.
        name: String,
        /// Its version.
        version: String,
    },
}

/// The loaded libraries, the refused files, and the name tables.
#[derive(Debug, Default)]
pub struct Registry {
    libraries: Vec<Library>,
    refused: Vec<Refusal>,
    /// lower-case name -> (display name, indexes of providing libraries)
    names: BTreeMap<(Kind, String), (String, Vec<usize>)>,
    /// Every place `load` looked for plugins, in order.
    looked: Vec<PathBuf>,
}

impl Registry {
    /// Load every library on the search path. Problems are collected, never fatal.
    pub fn load(search: &SearchPath) -> Registry {
        let mut reg = Registry {
            looked: match &search.builtin {
                Some(dir) => vec![dir.clone()],
                None => search.builtin_candidates.clone(),
            },
            ..Registry::default()
        };
        reg.looked.extend(search.site_directories.iter().cloned());
        reg.looked.extend(search.files.iter().cloned());
        reg.looked.extend(search.user_directories.iter().cloned());
        if let Some(dir) = &search.builtin {
            for (file, name) in SHIPPED_PLUGINS {
                let path = dir.join(file);
                if path.is_file() {
                    reg.add_checked(&path, Origin::Builtin, Some(name));
                }
            }
        }
        for dir in &search.site_directories {
            reg.add_directory(dir, Origin::SiteDirectory(dir.clone()));
        }
        for file in &search.files {
            reg.add_file(file, Origin::Explicit);
        }
        for dir in &search.user_directories {
            reg.add_directory(dir, Origin::UserDirectory(dir.clone()));
        }
        reg
    }

    /// Load every `*.so` in `dir` (sorted, so the order is the same on every rank). A
    /// directory someone else can write to is refused whole, before any file in it is
    /// opened (see [`check_trusted`]).
    pub fn add_directory(&mut self, dir: &Path, origin: Origin) {
        if let Err(why) = check_trusted_dir(dir) {
            self.refused.push(Refusal {
                path: dir.to_path_buf(),
                origin,
                reason: why.to_string(),
            });
            return;
        }
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) => {
                self.refused.push(Refusal {
                    path: dir.to_path_buf(),
                    origin,
                    reason: format!("cannot read plugin directory: {e}"),
                });
                return;
            }
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "so") && p.is_file())
            .collect();
        files.sort();
        for f in files {
            self.add_file(&f, origin.clone());
        }
    }

    /// Load one library file; on failure it is recorded as refused.
    pub fn add_file(&mut self, path: &Path, origin: Origin) {
        self.add_checked(path, origin, None);
    }

    fn add_checked(&mut self, path: &Path, origin: Origin, expected_name: Option<&str>) {
        let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        if self.libraries.iter().any(|l| l.path == path) {
            return; // the same file reached twice (e.g. a dir and an explicit name)
        }
        // never dlopen a file another user could have written: its constructors would
        // run in every rank before any check of ours
        let loaded = check_trusted(&path)
            .and_then(|()| load_library(&path, origin.clone()))
            .and_then(|lib| match expected_name {
                Some(want) if lib.name != want => Err(LoadError::NotTheBuiltin {
                    want: want.to_string(),
                    name: lib.name.clone(),
                    version: lib.version.clone(),
                }),
                _ => Ok(lib),
            });
        match loaded {
            Ok(lib) => {
                let index = self.libraries.len();
                for (kind, list) in [
                    (Kind::Scheme, &lib.schemes),
                    (Kind::Transfer, &lib.transfers),
                ] {
                    for name in list {
                        self.names
                            .entry((kind, name.to_ascii_lowercase()))
                            .or_insert_with(|| (name.clone(), Vec::new()))
                            .1
                            .push(index);
                    }
                }
                self.libraries.push(lib);
            }
            Err(why) => self.refused.push(Refusal {
                path,
                origin,
                reason: why.to_string(),
            }),
        }
    }

    /// Libraries that loaded, in load order.
    pub fn libraries(&self) -> &[Library] {
        &self.libraries
    }

    /// Files that were refused, with reasons.
    pub fn refused(&self) -> &[Refusal] {
        &self.refused
    }

    /// Every place [`Registry::load`] looked for plugins, in order: the built-in
    /// directory (or, when none was found, every candidate for it), then the site
    /// directories, named files and user directories.
    pub fn looked(&self) -> &[PathBuf] {
        &self.looked
    }

    /// Names provided by more than one library: one line each.
    pub fn duplicates(&self) -> Vec<RegistryError> {
        self.names
            .iter()
            .filter(|(_, (_, libs))| libs.len() > 1)
            .map(|((kind, _), (name, libs))| self.ambiguous(*kind, name, libs))
            .collect()
    }

    fn ambiguous(&self, kind: Kind, name: &str, libs: &[usize]) -> RegistryError {
        RegistryError::Ambiguous {
            kind,
            name: name.to_string(),
            files: libs
                .iter()
                .map(|&i| self.libraries[i].path.display().to_string())
                .collect(),
        }
    }

    /// Every name of a kind, as the libraries spell them, sorted.
    pub fn names(&self, kind: Kind) -> Vec<String> {
        self.names
            .iter()
            .filter(|((k, _), _)| *k == kind)
            .map(|(_, (name, _))| name.clone())
            .collect()
    }

    /// The refused files as the tail of an "unknown name" error, so that whoever lacks a
    /// scheme or transfer type learns in the same message which plugin was turned away and
    /// why (the separate refusal warning is easy to miss).
    fn refused_suffix(&self) -> String {
        self.refused.iter().map(|r| format!("; {r}")).collect()
    }

    /// The library providing `name` (case-insensitive).
    pub fn provider(&self, kind: Kind, name: &str) -> Result<&Library, RegistryError> {
        match self.names.get(&(kind, name.to_ascii_lowercase())) {
            Some((_, libs)) if libs.len() == 1 => Ok(&self.libraries[libs[0]]),
            Some((display, libs)) => Err(self.ambiguous(kind, display, libs)),
            None => {
                let known = self.names(kind);
                Err(RegistryError::Unknown {
                    kind,
                    name: name.to_string(),
                    known: if known.is_empty() {
                        "none".into()
                    } else {
                        known.join(", ")
                    },
                    looked: match (known.is_empty(), self.looked.is_empty()) {
                        (false, _) => String::new(),
                        (true, true) => "; no plugin directory was searched".into(),
                        (true, false) => format!(
                            "; looked in: {}",
                            self.looked
                                .iter()
                                .map(|p| p.display().to_string())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    },
                    refused: self.refused_suffix(),
                })
            }
        }
    }

    /// Create a scheme instance through the library providing `config.scheme`.
    pub fn new_scheme(&self, config: &SchemeConfig) -> Result<LoadedScheme, RegistryError> {
        let lib = self.provider(Kind::Scheme, &config.scheme)?;
        let file = lib.path.display().to_string();
        let scheme = (lib.module.new_scheme())(config)
            .into_result()
            .map_err(|error| RegistryError::Plugin {
                file: file.clone(),
                call: "new_scheme",
                error,
            })?;
        Ok(LoadedScheme { file, scheme })
    }

    /// Create a transfer through the library providing `config.transfer_type`.
    pub fn new_transfer(
        &self,
        config: &TransferConfig,
        host: HostRef<'_>,
    ) -> Result<TransferBox, RegistryError> {
        let lib = self.provider(Kind::Transfer, &config.transfer_type)?;
        (lib.module.new_transfer())(config, host)
            .into_result()
            .map_err(|error| RegistryError::Plugin {
                file: lib.path.display().to_string(),
                call: "new_transfer",
                error,
            })
    }
}

impl Registry {
    /// Re-open a transfer from the state file in `config` through the library providing
    /// `config.transfer_type`.
    pub fn resume_transfer(
        &self,
        config: &TransferConfig,
        host: HostRef<'_>,
    ) -> Result<TransferBox, RegistryError> {
        let lib = self.provider(Kind::Transfer, &config.transfer_type)?;
        (lib.module.resume_transfer())(config, host)
            .into_result()
            .map_err(|error| RegistryError::Plugin {
                file: lib.path.display().to_string(),
                call: "resume_transfer",
                error,
            })
    }
}

/// A scheme instance together with the file it came from, so every error names it.
pub struct LoadedScheme {
    file: String,
    scheme: SchemeBox,
}

impl LoadedScheme {
    /// The library file providing the scheme.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The FFI object, for the runtime's collective calls.
    pub fn raw(&self) -> &SchemeBox {
        &self.scheme
    }

    /// Name, tolerated losses and summary.
    pub fn describe(&self) -> Result<SchemeDescription, RegistryError> {
        self.scheme
            .describe()
            .into_result()
            .map_err(|error| self.error("describe", error))
    }

    /// Attach the file and call name to a plugin's error.
    pub fn error(&self, call: &'static str, error: PluginError) -> RegistryError {
        RegistryError::Plugin {
            file: self.file.clone(),
            call,
            error,
        }
    }
}

/// The effective user id of this process (from /proc: no `unsafe` needed), read once per
/// process: every cache directory is created and judged as the user the job runs as, and
/// reading /proc/self/status costs about a dozen system calls, which route_file and
/// start_output made up to seven times per checkpoint.
pub(crate) fn effective_uid() -> Option<u32> {
    static UID: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    *UID.get_or_init(|| proc_status_id("Uid:"))
}

/// The effective id on the `Uid:` or `Gid:` line of /proc/self/status.
fn proc_status_id(field: &str) -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// Whether `gid` is this user's private group (user private groups, the default on
/// Debian, Ubuntu and Fedora with umask 002): this process's effective group, with no
/// other members listed in /etc/group. Group write access then is the user's own.
pub(crate) fn private_group(gid: u32) -> bool {
    if proc_status_id("Gid:") != Some(gid) {
        return false;
    }
    let Ok(groups) = std::fs::read_to_string("/etc/group") else {
        return false;
    };
    groups.lines().any(|l| {
        let f: Vec<&str> = l.split(':').collect();
        f.len() >= 4 && f[2] == gid.to_string() && f[3].trim().is_empty()
    })
}

/// Why `what` (a file or directory) could be written by someone other than root and this
/// user, if it could: owned by another user, or writable by group or others (ssh's
/// StrictModes rule).
fn untrusted(path: &Path, what: &'static str) -> Option<Untrusted> {
    use std::os::unix::fs::MetadataExt;
    let md = match std::fs::metadata(path) {
        Ok(md) => md,
        Err(source) => {
            return Some(Untrusted::CannotCheck {
                what,
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let me = effective_uid();
    let (uid, mode) = (md.uid(), md.mode() & 0o7777);
    if uid != 0 && Some(uid) != me {
        return Some(Untrusted::Owner {
            what,
            path: path.to_path_buf(),
            uid,
            me,
        });
    }
    let group_write_ok = mode & 0o020 == 0 || private_group(md.gid());
    if mode & 0o002 != 0 || !group_write_ok {
        return Some(Untrusted::Mode {
            what,
            path: path.to_path_buf(),
            mode,
        });
    }
    None
}

/// A directory plugins may be loaded from: owned by root or this user and writable by
/// nobody else.
fn check_trusted_dir(dir: &Path) -> Result<(), Untrusted> {
    if !dir.exists() {
        return Ok(()); // reported as unreadable by the caller
    }
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    untrusted(&dir, "plugin directory").map_or(Ok(()), Err)
}

/// A plugin file may be opened only when it and its directory (after resolving symbolic
/// links, so a link planted in a trusted directory is judged by its target) are owned by
/// root or this user and writable by nobody else — checked *before* `dlopen`, because
/// loading runs the library's constructors.
pub fn check_trusted(path: &Path) -> Result<(), LoadError> {
    let real = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    if let Some(why) = untrusted(&real, "plugin file") {
        return Err(LoadError::NotOpened(why));
    }
    if let Some(dir) = real.parent() {
        if let Some(why) = untrusted(dir, "its directory") {
            return Err(LoadError::NotOpened(why));
        }
    }
    Ok(())
}

fn load_library(path: &Path, origin: Origin) -> Result<Library, LoadError> {
    let header = lib_header_from_path(path)
        .map_err(|e| LoadError::Refused(describe_load_error(&e, None)))?;
    // abi_stable's own refusal is text only: check the layout here first to read the
    // structure of the differences and say them in words
    if let Some(what) = header
        .layout()
        .and_then(|found| abi_words::explain_layouts(PluginModRef::LAYOUT, found))
    {
        return Err(LoadError::IncompatibleAbi(what));
    }
    let module = header
        .init_root_module::<PluginModRef>()
        .map_err(|e| LoadError::Refused(describe_load_error(&e, header.layout())))?;
    let abi_version = module.abi_version();
    if abi_version != ABI_VERSION {
        return Err(LoadError::AbiVersion(abi_version));
    }
    let info = (module.library())()
        .into_result()
        .map_err(LoadError::Describe)?;
    Ok(Library {
        path: path.to_path_buf(),
        origin,
        name: info.name.into_string(),
        version: info.version.into_string(),
        abi_version,
        schemes: info.schemes.into_iter().map(|s| s.into_string()).collect(),
        transfers: info
            .transfers
            .into_iter()
            .map(|s| s.into_string())
            .collect(),
        module,
    })
}

/// What to do about a library built against another contract: the sentence every ABI
/// refusal ends with.
fn rebuild_advice() -> String {
    format!(
        "rebuild the plugin against scr-plugin {}, this host's version (see \"Upgrading scr-plugin\" in scr_plugin::manual)",
        <PluginModRef as abi_stable::library::RootModule>::VERSION_STRINGS
    )
}

/// Say abi_stable's load errors in one line of words. `found` is the library's root
/// module layout when it is known: a layout refusal is then re-checked against the host's
/// to read the structure of the differences (abi_stable's own error is only text).
fn describe_load_error(
    err: &LibraryError,
    found: Option<&'static abi_stable::type_layout::TypeLayout>,
) -> String {
    match err {
        LibraryError::OpenError { err, .. } => {
            format!("cannot be opened as a shared library: {}", one_line(&err.to_string()))
        }
        LibraryError::GetSymbolError { .. } => {
            "not an scr-rs plugin: it exports no abi_stable root module (build it with scr_plugin::export_plugin!)".to_string()
        }
        LibraryError::InvalidAbiHeader(found) => format!(
            "built with an incompatible abi_stable release (library header {}.{}, host expects {}.{}); {}",
            found.abi_major,
            found.abi_minor,
            abi_stable::library::AbiHeader::VALUE.abi_major,
            abi_stable::library::AbiHeader::VALUE.abi_minor,
            rebuild_advice()
        ),
        LibraryError::IncompatibleVersionNumber {
            expected_version,
            actual_version,
            ..
        } => format!(
            "incompatible plugin ABI: the library was built against scr-plugin {actual_version}, incompatible with this host's scr-plugin {expected_version}; {}",
            rebuild_advice()
        ),
        LibraryError::RootModule { err, .. } => {
            format!("its root module failed to load: {}", one_line(&err.to_string()))
        }
        LibraryError::AbiInstability(_) => {
            let what = found
                .and_then(|found| abi_words::explain_layouts(PluginModRef::LAYOUT, found))
                .unwrap_or_else(|| {
                    "the layout of its root module differs from this host's".to_string()
                });
            format!("incompatible plugin ABI: {what}; {}", rebuild_advice())
        }
        other => one_line(&other.to_string()),
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::describe_load_error;

    /// The id read once is this process's effective user id, and later calls give it
    /// again (it is the owner of a file this process creates).
    #[test]
    fn effective_uid_is_the_owner_of_new_files_and_stable() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("mine");
        std::fs::write(&f, b"x").unwrap();
        let owner = std::fs::metadata(&f).unwrap().uid();
        assert_eq!(super::effective_uid(), Some(owner));
        assert_eq!(super::effective_uid(), super::proc_status_id("Uid:"));
        assert_eq!(super::effective_uid(), Some(owner));
    }
    use abi_stable::library::LibraryError;
    use abi_stable::sabi_types::VersionNumber;

    /// A library built against an scr-plugin whose version abi_stable deems incompatible
    /// (another 0.x minor) is refused before its layout is compared.
    #[test]
    fn an_incompatible_scr_plugin_version_is_refused_in_words() {
        let err = LibraryError::IncompatibleVersionNumber {
            library_name: "scr_plugin",
            expected_version: VersionNumber {
                major: 0,
                minor: 1,
                patch: 0,
            },
            actual_version: VersionNumber {
                major: 0,
                minor: 2,
                patch: 3,
            },
        };
        assert_eq!(
            describe_load_error(&err, None),
            format!(
                "incompatible plugin ABI: the library was built against scr-plugin 0.2.3, incompatible with this host's scr-plugin 0.1.0; rebuild the plugin against scr-plugin {}, this host's version (see \"Upgrading scr-plugin\" in scr_plugin::manual)",
                scr_plugin::VERSION
            )
        );
    }
}
