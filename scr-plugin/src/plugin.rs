//! The plugin author's side: plain Rust traits, the panic guard and the root-module
//! shims that [`export_plugin!`](crate::export_plugin) wires together.

use std::any::Any;
use std::io::Write as _;
use std::panic::{catch_unwind, AssertUnwindSafe};

use abi_stable::{
    prefix_type::PrefixTypeTrait,
    sabi_trait::TD_Opaque,
    std_types::{ROption, RResult, RSlice, RStr, RString, RVec},
};

use crate::abi::{
    Applied, DatasetFiles, FfiScheme, FfiScheme_TO, FfiTransfer, FfiTransfer_TO, FileMeta,
    FileResult, HostRef, LibraryInfo, PluginMod, PluginModRef, RecoverRequest, SchemeBox,
    SchemeConfig, SchemeDescription, SurvivorCheck, TransferBox, TransferConfig, TransferStatus,
    ABI_VERSION,
};
use crate::error::{ErrorCode, PluginError, PluginResult};
use crate::host::Host;

/// Run `f`, turning a panic into a [`PluginError`] with code
/// [`PANIC`](ErrorCode::PANIC) that names the plugin and the call. Every entry point that
/// [`export_plugin!`](crate::export_plugin) generates goes through here, because a panic
/// unwinding across the boundary would abort the whole MPI job.
pub fn guard<T>(
    plugin: &str,
    call: &str,
    f: impl FnOnce() -> PluginResult<T>,
) -> RResult<T, PluginError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result.into(),
        Err(payload) => RResult::RErr(PluginError::new(
            ErrorCode::PANIC,
            format!(
                "plugin {plugin} panicked in {call}: {}",
                panic_message(&*payload)
            ),
        )),
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "(non-string panic payload)"
    }
}

/// A redundancy scheme instance for one redundancy set.
///
/// Collective calls (`apply`, `recover`, `remove`) are made by every member of the set at
/// once; they must return the same success or failure on every member (use
/// [`Host::all_agree`]). A panic is caught and becomes an error on the member that
/// panicked only: the other members cannot learn of it and may wait for messages that never
/// come, so collective code must return errors rather than panic.
///
/// What the scr-rs host does when a member fails alone: after every collective call each
/// member enters a non-blocking barrier of the set. When all members returned (an error
/// everywhere, or an error on some and success on others), the host agrees on the outcome
/// and every rank of the job gets the same error. When the member that failed (error or
/// caught panic) sees that the others have not returned within `abort_timeout` seconds
/// (default 60) — they are waiting inside the plugin for it — it ends the job with
/// `MPI_Abort`, after printing the plugin file, the call, the dataset and the error: an
/// abort with a reason is better than a hang that burns the allocation.
pub trait Scheme: Send + Sync + 'static {
    /// Name, tolerated losses and a one-line summary.
    fn describe(&self) -> PluginResult<SchemeDescription>;
    /// Encode this member's logical file into redundancy files; return their paths.
    fn apply(&self, host: &Host<'_>, dataset: &DatasetFiles) -> PluginResult<Vec<String>>;
    /// Rebuild lost members' files, or fail the same way everywhere.
    ///
    /// Integrity contract (never hand back wrong bytes as a good checkpoint):
    ///
    /// - `request.files` is `RNone` for a member that lost its files. The host verifies
    ///   every member's files before the call (size, and CRC32 when recorded) and passes a
    ///   member whose files fail that check as lost. Whether a scheme relies on that or
    ///   checks survivors again itself is what it declares in
    ///   [`survivor_check`](Self::survivor_check): with [`SurvivorCheck::Scheme`], when
    ///   any member of the set lost data or redundancy, every survivor whose data will
    ///   feed the rebuild checks it first ([`verify_files`](crate::verify::verify_files))
    ///   and a survivor that fails counts as lost (to keep the common no-loss path cheap,
    ///   gather the loss flags from presence first and verify only when something is
    ///   lost, then gather again), unless the host says it has just verified them
    ///   ([`Host::survivors_verified`](crate::Host::survivors_verified)).
    /// - What was rebuilt is checked against the sizes and CRC32s carried in the
    ///   redundancy data (a redundancy-file header, a partner's metadata) before success
    ///   is returned (files written through [`LogicalFile`](crate::lofi::LogicalFile) and
    ///   closed with [`finish_rebuild`](crate::ring::finish_rebuild) are checked from the
    ///   bytes as they were written, without a read-back); on a mismatch the rebuilt files are removed and every member fails
    ///   alike ([`Failures::agree`](crate::collect::Failures::agree)).
    /// - The returned [`FileMeta`] of a rebuilt file carries the CRC32 from the
    ///   redundancy data, so the host can record and check it again.
    /// - On success the set is protected again: every redundancy file a member lost is
    ///   written again, so a further tolerated loss can be rebuilt.
    /// - More losses than [`describe`](Self::describe) claims fail with
    ///   [`UNRECOVERABLE`](ErrorCode::UNRECOVERABLE) on every member, leaving no lost
    ///   file looking recovered.
    fn recover(&self, host: &Host<'_>, request: &RecoverRequest) -> PluginResult<Vec<FileMeta>>;
    /// The redundancy files this member holds for `dataset`: exactly the paths `apply`
    /// returned and wrote (the host moves, flushes and deletes by this list, so a file
    /// missing from it is lost on flush and one too many is a dangling name).
    fn redundancy_files(&self, dataset: &DatasetFiles) -> PluginResult<Vec<String>>;
    /// Remove this member's redundancy files for `dataset`, leaving nothing of the
    /// scheme's behind in the dataset directory (temporary files included).
    fn remove(&self, host: &Host<'_>, dataset: &DatasetFiles) -> PluginResult<()>;

    /// Whether [`apply_with_crc`](Self::apply_with_crc) computes the CRC32 of the
    /// dataset's files. Return `true` only together with an `apply_with_crc` that does;
    /// the default is `false`.
    fn crc32_in_apply(&self) -> bool {
        false
    }

    /// [`apply`](Self::apply), also computing the CRC32 of each of the dataset's files from
    /// the bytes this call reads anyway.
    ///
    /// Why: the host records a CRC32 of every file (with `crc_on_copy`, the default) so
    /// that a flipped bit is caught at restart, flush and rebuild. A scheme that reads
    /// every byte of its member's data to encode it (XOR, PARTNER, RS) can hash those
    /// bytes as they pass, which costs almost nothing next to a second full read of the
    /// data by the host.
    ///
    /// The contract:
    ///
    /// - The host calls this instead of `apply` only when it wants CRC32s and
    ///   [`crc32_in_apply`](Self::crc32_in_apply) is `true`. The dataset's files then come
    ///   with `crc32: RNone`, and the CRC32s computed here are the ones to record in the
    ///   redundancy data (a rebuild checks the rebuilt files against them). Otherwise the
    ///   host reads the files first and calls `apply` with their CRC32s filled in.
    /// - Each CRC32 must be the CRC32 of the bytes actually read from that file during
    ///   this call, fed before the scheme changes them: [`FileCrcs`](crate::lofi::FileCrcs)
    ///   does the bookkeeping for pieces read in any order. A file the scheme cannot vouch
    ///   for (not read completely, a read error) gets `None`; the host then reads it
    ///   itself and records that CRC32 in its filemap, but the redundancy data this call
    ///   wrote does not carry it, so a rebuild of that file can be checked against its
    ///   size only. Hash every byte you read to keep rebuilds fully checked. Return one entry per file, or none at all.
    /// - It is collective and must agree on success or failure exactly as `apply` does.
    ///
    /// The default calls `apply` and reports no CRC32, so a scheme written before this
    /// method existed compiles and works unchanged (and since its `crc32_in_apply` is
    /// `false`, the host never relies on it).
    fn apply_with_crc(&self, host: &Host<'_>, dataset: &DatasetFiles) -> PluginResult<Applied> {
        Ok(Applied::without_crc(self.apply(host, dataset)?))
    }

    /// Who verifies a surviving member's files before they feed a rebuild: the host
    /// ([`SurvivorCheck::Host`], the default) or this scheme as well
    /// ([`SurvivorCheck::Scheme`]).
    ///
    /// The host checks every member's files against their recorded size and CRC32
    /// before it calls [`recover`](Self::recover) and passes a member whose files fail
    /// as one that lost them, so a scheme relying on it reads every survivor once. A
    /// scheme that verifies survivors itself (PARTNER, XOR and RS do, before they feed
    /// them into a rebuild) says so with `SurvivorCheck::Scheme`. Declare what `recover`
    /// really does: `scr-conformance` hands a scheme declaring `Host` survivors the host
    /// has checked, and a scheme declaring `Scheme` a damaged survivor it must detect.
    ///
    /// The runtime logs which contract is in force and checks survivors in both cases;
    /// when its check covered the recorded CRC32s (`crc_on_restart`, the default) it
    /// says so through [`Host::survivors_verified`](crate::Host::survivors_verified), and
    /// a scheme declaring `Scheme` then skips its own second read of the survivors (the
    /// shipped schemes do). The answer is fixed for an instance; a panic here counts as
    /// `Host`.
    fn survivor_check(&self) -> SurvivorCheck {
        SurvivorCheck::Host
    }

    /// Given the members `lost` (member indices within the set, ascending, each once),
    /// the surviving members whose redundancy files a rebuild of exactly those members'
    /// application files reads; `None`, the default, for every survivor's.
    ///
    /// Why: `scr postrun` rebuilds a killed job's lost ranks away from the nodes, from
    /// what it scavenged out of their node-local caches, and every redundancy file it
    /// copies costs a read over the network. Only the scheme knows where its redundancy
    /// lives: a PARTNER set that lost one member needs the one copy on that member's
    /// right-hand neighbour, not every survivor's. The host copies only the redundancy
    /// files of the members named here (every survivor's application files are copied in
    /// any case) and then calls [`recover_files`](Self::recover_files), which must work
    /// with exactly that.
    ///
    /// The contract: name surviving members only (in `0..members`, none of `lost`), in
    /// any order; the answer depends on `lost` and the instance's parameters only, so it
    /// is the same on every member (it is local, no communication). Return `None` when
    /// the rebuild reads every survivor's redundancy (XOR and RS do: each lost byte is
    /// computed from every survivor's parity). When no choice of survivors can rebuild
    /// `lost`, return the survivors that help (or none) and let `recover_files` fail
    /// with [`UNRECOVERABLE`](ErrorCode::UNRECOVERABLE); `None` would make the host copy
    /// everything for a rebuild that fails anyway. A panic here counts as `None`.
    fn rebuild_sources(&self, lost: &[u32]) -> Option<Vec<u32>> {
        let _ = lost;
        None
    }

    /// Rebuild the lost members' application files, and nothing else: what the host
    /// calls after an offline rebuild copied only the redundancy files that
    /// [`rebuild_sources`](Self::rebuild_sources) names.
    ///
    /// The contract is [`recover`](Self::recover)'s (collective; the same request; each
    /// member's file metadata returned; what is read checked and what is rebuilt checked
    /// against the redundancy data's sizes and CRC32s; more losses than can be rebuilt
    /// fail alike on every member with `UNRECOVERABLE`), except for redundancy:
    ///
    /// - the redundancy files of survivors that `rebuild_sources` does not name are
    ///   absent, and must be neither required (their absence is no loss to report) nor
    ///   written again;
    /// - nothing needs to be protected again afterwards: the host discards the set's
    ///   redundancy after an offline rebuild (a redundancy file this call happens to
    ///   write on a lost member is discarded with it).
    ///
    /// The default calls `recover`, which is right for a scheme whose `rebuild_sources`
    /// is `None`: every survivor's redundancy files are then present. A scheme that names
    /// sources implements this too (`scr-conformance` presents each survivor's
    /// redundancy only when it is named, and checks the lost members come back exactly).
    fn recover_files(
        &self,
        host: &Host<'_>,
        request: &RecoverRequest,
    ) -> PluginResult<Vec<FileMeta>> {
        self.recover(host, request)
    }
}

/// A transfer of files from cache to a prefix or back (see [`FfiTransfer`] for the
/// contract of each call).
pub trait Transfer: Send + 'static {
    /// Add one (source, destination) pair.
    fn add(&mut self, source: &str, destination: &str) -> PluginResult<()>;
    /// Start the copy.
    fn dispatch(&mut self, host: &Host<'_>) -> PluginResult<()>;
    /// Poll.
    fn test(&mut self, host: &Host<'_>) -> PluginResult<TransferStatus>;
    /// Block until done.
    fn wait(&mut self, host: &Host<'_>) -> PluginResult<TransferStatus>;
    /// Stop and clean up partial destinations.
    fn cancel(&mut self, host: &Host<'_>) -> PluginResult<()>;
    /// Per-file outcomes.
    fn results(&self) -> PluginResult<Vec<FileResult>>;
}

/// What a plugin library provides. Implement it on a unit struct and export it with
/// [`export_plugin!`](crate::export_plugin).
pub trait PluginLibrary: 'static {
    /// The library's name, e.g. `scr-xor`.
    const NAME: &'static str;
    /// The library's own version (usually `env!("CARGO_PKG_VERSION")`).
    const VERSION: &'static str;
    /// Scheme names provided.
    const SCHEMES: &'static [&'static str] = &[];
    /// Transfer type names provided.
    const TRANSFERS: &'static [&'static str] = &[];

    /// Create a scheme instance. Only called for a name in [`SCHEMES`](Self::SCHEMES).
    fn new_scheme(config: &SchemeConfig) -> PluginResult<Box<dyn Scheme>> {
        Err(PluginError::not_implemented(format!(
            "scheme {}",
            config.scheme
        )))
    }

    /// Create a transfer. Only called for a name in [`TRANSFERS`](Self::TRANSFERS).
    fn new_transfer(config: &TransferConfig, host: &Host<'_>) -> PluginResult<Box<dyn Transfer>> {
        let _ = host;
        Err(PluginError::not_implemented(format!(
            "transfer type {}",
            config.transfer_type
        )))
    }

    /// Re-open a transfer from its persisted state file.
    fn resume_transfer(
        config: &TransferConfig,
        host: &Host<'_>,
    ) -> PluginResult<Box<dyn Transfer>> {
        let _ = host;
        Err(PluginError::not_implemented(format!(
            "resuming transfer type {}",
            config.transfer_type
        )))
    }
}

/// Drop `value` without letting a panic in its destructor escape: destructors of plugin
/// objects run inside abi_stable's `extern "C"` drop functions, where unwinding aborts
/// the process.
fn drop_guarded<T>(plugin: &str, what: &str, value: T) {
    if catch_unwind(AssertUnwindSafe(move || drop(value))).is_err() {
        // not `eprintln!`, which panics when stderr is closed (this runs where a panic
        // aborts the process)
        let _ = writeln!(
            std::io::stderr().lock(),
            "scr-rs: plugin {plugin} panicked while dropping {what}; continuing"
        );
    }
}

struct GuardedScheme {
    plugin: &'static str,
    /// Always `Some` until dropped (taken in `Drop` to drop it under a guard).
    inner: Option<Box<dyn Scheme>>,
}

impl GuardedScheme {
    fn inner(&self) -> PluginResult<&dyn Scheme> {
        self.inner
            .as_deref()
            .ok_or_else(|| PluginError::new(ErrorCode::OTHER, "scheme instance already dropped"))
    }
}

impl Drop for GuardedScheme {
    fn drop(&mut self) {
        drop_guarded(self.plugin, "a scheme instance", self.inner.take());
    }
}

impl FfiScheme for GuardedScheme {
    fn describe(&self) -> RResult<SchemeDescription, PluginError> {
        guard(self.plugin, "describe", || self.inner()?.describe())
    }

    fn apply(
        &self,
        host: HostRef<'_>,
        dataset: &DatasetFiles,
    ) -> RResult<RVec<RString>, PluginError> {
        guard(self.plugin, "apply", || {
            Ok(strings(self.inner()?.apply(&Host::new(host), dataset)?))
        })
    }

    fn recover(
        &self,
        host: HostRef<'_>,
        request: &RecoverRequest,
    ) -> RResult<RVec<FileMeta>, PluginError> {
        guard(self.plugin, "recover", || {
            Ok(self.inner()?.recover(&Host::new(host), request)?.into())
        })
    }

    fn redundancy_files(&self, dataset: &DatasetFiles) -> RResult<RVec<RString>, PluginError> {
        guard(self.plugin, "redundancy_files", || {
            Ok(strings(self.inner()?.redundancy_files(dataset)?))
        })
    }

    fn remove(&self, host: HostRef<'_>, dataset: &DatasetFiles) -> RResult<(), PluginError> {
        guard(self.plugin, "remove", || {
            self.inner()?.remove(&Host::new(host), dataset)
        })
    }

    fn crc32_in_apply(&self) -> bool {
        // a panic or a dropped instance answers "no": the host then reads the files itself
        guard(self.plugin, "crc32_in_apply", || {
            Ok(self.inner()?.crc32_in_apply())
        })
        .unwrap_or(false)
    }

    fn apply_with_crc(
        &self,
        host: HostRef<'_>,
        dataset: &DatasetFiles,
    ) -> RResult<Applied, PluginError> {
        guard(self.plugin, "apply_with_crc", || {
            self.inner()?.apply_with_crc(&Host::new(host), dataset)
        })
    }

    fn survivor_check(&self) -> SurvivorCheck {
        // a panic or a dropped instance answers "the host's": it checks survivors anyway
        guard(self.plugin, "survivor_check", || {
            Ok(self.inner()?.survivor_check())
        })
        .unwrap_or(SurvivorCheck::Host)
    }

    fn rebuild_sources(&self, lost: RSlice<'_, u32>) -> ROption<RVec<u32>> {
        // a panic or a dropped instance answers "every survivor's": the host then copies
        // all the redundancy, which costs time but never a rebuild
        guard(self.plugin, "rebuild_sources", || {
            Ok(self.inner()?.rebuild_sources(lost.as_slice()))
        })
        .unwrap_or(None)
        .map_or(ROption::RNone, |v| ROption::RSome(v.into()))
    }

    fn recover_files(
        &self,
        host: HostRef<'_>,
        request: &RecoverRequest,
    ) -> RResult<RVec<FileMeta>, PluginError> {
        guard(self.plugin, "recover_files", || {
            Ok(self
                .inner()?
                .recover_files(&Host::new(host), request)?
                .into())
        })
    }
}

struct GuardedTransfer {
    plugin: &'static str,
    /// Always `Some` until dropped (taken in `Drop` to drop it under a guard).
    inner: Option<Box<dyn Transfer>>,
}

impl GuardedTransfer {
    fn inner(&mut self) -> PluginResult<&mut (dyn Transfer + 'static)> {
        self.inner
            .as_deref_mut()
            .ok_or_else(|| PluginError::new(ErrorCode::OTHER, "transfer already dropped"))
    }
}

impl Drop for GuardedTransfer {
    fn drop(&mut self) {
        drop_guarded(self.plugin, "a transfer", self.inner.take());
    }
}

impl FfiTransfer for GuardedTransfer {
    fn add(&mut self, source: RStr<'_>, destination: RStr<'_>) -> RResult<(), PluginError> {
        guard(self.plugin, "add", || {
            self.inner()?.add(source.as_str(), destination.as_str())
        })
    }

    fn dispatch(&mut self, host: HostRef<'_>) -> RResult<(), PluginError> {
        guard(self.plugin, "dispatch", || {
            self.inner()?.dispatch(&Host::new(host))
        })
    }

    fn test(&mut self, host: HostRef<'_>) -> RResult<TransferStatus, PluginError> {
        guard(self.plugin, "test", || self.inner()?.test(&Host::new(host)))
    }

    fn wait(&mut self, host: HostRef<'_>) -> RResult<TransferStatus, PluginError> {
        guard(self.plugin, "wait", || self.inner()?.wait(&Host::new(host)))
    }

    fn cancel(&mut self, host: HostRef<'_>) -> RResult<(), PluginError> {
        guard(self.plugin, "cancel", || {
            self.inner()?.cancel(&Host::new(host))
        })
    }

    fn results(&self) -> RResult<RVec<FileResult>, PluginError> {
        guard(self.plugin, "results", || {
            Ok(self
                .inner
                .as_deref()
                .ok_or_else(|| PluginError::new(ErrorCode::OTHER, "transfer already dropped"))?
                .results()?
                .into())
        })
    }
}

fn strings(v: Vec<String>) -> RVec<RString> {
    v.into_iter().map(RString::from).collect()
}

fn provides(names: &[&str], wanted: &str) -> bool {
    names.iter().any(|n| n.eq_ignore_ascii_case(wanted))
}

fn unsupported<P: PluginLibrary>(kind: &str, name: &str, names: &[&str]) -> PluginError {
    PluginError::new(
        ErrorCode::UNSUPPORTED,
        format!(
            "library {} provides no {kind} named {name} (it provides: {})",
            P::NAME,
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        ),
    )
}

/// Wrap a plugin's scheme in the panic guard, as the root module does. Exposed so plugin
/// unit tests can exercise the exact FFI object the host will see.
pub fn scheme_box<P: PluginLibrary>(scheme: Box<dyn Scheme>) -> SchemeBox {
    FfiScheme_TO::from_value(
        GuardedScheme {
            plugin: P::NAME,
            inner: Some(scheme),
        },
        TD_Opaque,
    )
}

/// Wrap a plugin's transfer in the panic guard, as the root module does.
pub fn transfer_box<P: PluginLibrary>(transfer: Box<dyn Transfer>) -> TransferBox {
    FfiTransfer_TO::from_value(
        GuardedTransfer {
            plugin: P::NAME,
            inner: Some(transfer),
        },
        TD_Opaque,
    )
}

extern "C" fn library_shim<P: PluginLibrary>() -> RResult<LibraryInfo, PluginError> {
    guard(P::NAME, "library", || {
        Ok(LibraryInfo {
            name: P::NAME.into(),
            version: P::VERSION.into(),
            schemes: P::SCHEMES.iter().map(|s| RString::from(*s)).collect(),
            transfers: P::TRANSFERS.iter().map(|s| RString::from(*s)).collect(),
        })
    })
}

extern "C" fn new_scheme_shim<P: PluginLibrary>(
    config: &SchemeConfig,
) -> RResult<SchemeBox, PluginError> {
    guard(P::NAME, "new_scheme", || {
        if !provides(P::SCHEMES, &config.scheme) {
            return Err(unsupported::<P>("scheme", &config.scheme, P::SCHEMES));
        }
        Ok(scheme_box::<P>(P::new_scheme(config)?))
    })
}

/// Create or resume a transfer through `P`, refusing names `P` does not declare.
fn transfer_shim<P: PluginLibrary>(
    call: &str,
    config: &TransferConfig,
    host: HostRef<'_>,
    create: fn(&TransferConfig, &Host<'_>) -> PluginResult<Box<dyn Transfer>>,
) -> RResult<TransferBox, PluginError> {
    guard(P::NAME, call, || {
        if !provides(P::TRANSFERS, &config.transfer_type) {
            return Err(unsupported::<P>(
                "transfer type",
                &config.transfer_type,
                P::TRANSFERS,
            ));
        }
        Ok(transfer_box::<P>(create(config, &Host::new(host))?))
    })
}

extern "C" fn new_transfer_shim<P: PluginLibrary>(
    config: &TransferConfig,
    host: HostRef<'_>,
) -> RResult<TransferBox, PluginError> {
    transfer_shim::<P>("new_transfer", config, host, P::new_transfer)
}

extern "C" fn resume_transfer_shim<P: PluginLibrary>(
    config: &TransferConfig,
    host: HostRef<'_>,
) -> RResult<TransferBox, PluginError> {
    transfer_shim::<P>("resume_transfer", config, host, P::resume_transfer)
}

/// Build the root module of library `P`. Called by the function that
/// [`export_plugin!`](crate::export_plugin) exports; plugin tests may call it directly to
/// go through the same shims the host uses.
pub fn root_module<P: PluginLibrary>() -> PluginModRef {
    PluginMod {
        abi_version: ABI_VERSION,
        library: library_shim::<P>,
        new_scheme: new_scheme_shim::<P>,
        new_transfer: new_transfer_shim::<P>,
        resume_transfer: resume_transfer_shim::<P>,
    }
    .leak_into_prefix()
}

/// Export a [`PluginLibrary`] as this cdylib's root module.
///
/// ```no_run
/// struct MyLib;
/// impl scr_plugin::PluginLibrary for MyLib {
///     const NAME: &'static str = "my-lib";
///     const VERSION: &'static str = env!("CARGO_PKG_VERSION");
///     const SCHEMES: &'static [&'static str] = &["MIRROR"];
///     fn new_scheme(c: &scr_plugin::SchemeConfig)
///         -> scr_plugin::PluginResult<Box<dyn scr_plugin::Scheme>> { todo!() }
/// }
/// scr_plugin::export_plugin!(MyLib);
/// ```
///
/// The crate must also depend on `abi_stable` (its export attribute refers to it) and be
/// built with `panic = "unwind"` (the default): with `panic = "abort"` the guard cannot
/// catch anything and a panic ends the whole job.
#[macro_export]
macro_rules! export_plugin {
    ($library:ty) => {
        /// The root module the scr-rs host loads.
        #[::abi_stable::export_root_module]
        pub fn scr_plugin_root_module() -> $crate::PluginModRef {
            $crate::root_module::<$library>()
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use abi_stable::std_types::RNone;

    struct Lib;
    impl PluginLibrary for Lib {
        const NAME: &'static str = "test-lib";
        const VERSION: &'static str = "0";
    }

    /// Answers `rebuild_sources` with the member after each lost one (or panics, for
    /// `panics`), and counts on the default `recover_files` or panics in its own.
    struct Sources {
        panics: bool,
        own_recover_files: bool,
    }

    impl Scheme for Sources {
        fn describe(&self) -> PluginResult<SchemeDescription> {
            Err(PluginError::not_implemented("describe"))
        }
        fn apply(&self, _: &Host<'_>, _: &DatasetFiles) -> PluginResult<Vec<String>> {
            Ok(vec![])
        }
        fn recover(&self, _: &Host<'_>, _: &RecoverRequest) -> PluginResult<Vec<FileMeta>> {
            Ok(vec![FileMeta::new("/from/recover", 1)])
        }
        fn redundancy_files(&self, _: &DatasetFiles) -> PluginResult<Vec<String>> {
            Ok(vec![])
        }
        fn remove(&self, _: &Host<'_>, _: &DatasetFiles) -> PluginResult<()> {
            Ok(())
        }
        fn rebuild_sources(&self, lost: &[u32]) -> Option<Vec<u32>> {
            assert!(!self.panics, "deliberate panic in rebuild_sources");
            Some(lost.iter().map(|m| m + 1).collect())
        }
        fn recover_files(
            &self,
            host: &Host<'_>,
            request: &RecoverRequest,
        ) -> PluginResult<Vec<FileMeta>> {
            assert!(!self.own_recover_files, "deliberate panic in recover_files");
            self.recover(host, request)
        }
    }

    fn request() -> RecoverRequest {
        RecoverRequest {
            dataset_id: 1,
            dir: "/nonexistent".into(),
            files: RNone,
        }
    }

    /// What crosses the boundary: the answer as given, a panic as "every survivor's"
    /// (the host then copies everything, which is slow but never wrong), and a panic in
    /// `recover_files` as an error naming the call.
    #[test]
    fn the_offline_rebuild_calls_cross_the_boundary_under_the_guard() {
        let good = scheme_box::<Lib>(Box::new(Sources {
            panics: false,
            own_recover_files: false,
        }));
        assert_eq!(
            good.rebuild_sources(RSlice::from_slice(&[0, 2])),
            ROption::RSome(RVec::from(vec![1, 3]))
        );
        let got = crate::inproc::run(&["a"], |host| {
            good.recover_files(host.raw(), &request()).into_result()
        });
        assert_eq!(got[0].as_ref().unwrap()[0].path.as_str(), "/from/recover");

        let bad = scheme_box::<Lib>(Box::new(Sources {
            panics: true,
            own_recover_files: true,
        }));
        assert_eq!(bad.rebuild_sources(RSlice::from_slice(&[0])), RNone);
        let got = crate::inproc::run(&["a"], |host| {
            bad.recover_files(host.raw(), &request()).into_result()
        });
        let e = got[0].as_ref().unwrap_err();
        assert_eq!(e.code, ErrorCode::PANIC);
        assert_eq!(
            e.message(),
            "plugin test-lib panicked in recover_files: deliberate panic in recover_files"
        );
    }

    /// A scheme that implements neither: every survivor's redundancy, and `recover`.
    #[test]
    fn the_defaults_are_every_survivor_and_recover() {
        struct Plain;
        impl Scheme for Plain {
            fn describe(&self) -> PluginResult<SchemeDescription> {
                Err(PluginError::not_implemented("describe"))
            }
            fn apply(&self, _: &Host<'_>, _: &DatasetFiles) -> PluginResult<Vec<String>> {
                Ok(vec![])
            }
            fn recover(&self, _: &Host<'_>, _: &RecoverRequest) -> PluginResult<Vec<FileMeta>> {
                Ok(vec![FileMeta::new("/from/recover", 1)])
            }
            fn redundancy_files(&self, _: &DatasetFiles) -> PluginResult<Vec<String>> {
                Ok(vec![])
            }
            fn remove(&self, _: &Host<'_>, _: &DatasetFiles) -> PluginResult<()> {
                Ok(())
            }
        }
        let plain = scheme_box::<Lib>(Box::new(Plain));
        assert_eq!(plain.rebuild_sources(RSlice::from_slice(&[1])), RNone);
        let got = crate::inproc::run(&["a"], |host| {
            plain.recover_files(host.raw(), &request()).into_result()
        });
        assert_eq!(got[0].as_ref().unwrap()[0].path.as_str(), "/from/recover");
    }
}
