//! The FFI-safe types and trait objects that cross the plugin boundary.
//!
//! Plugin authors rarely touch this module directly: they implement the plain Rust
//! traits [`Scheme`](crate::Scheme) and [`Transfer`](crate::Transfer) and export them
//! with [`export_plugin!`](crate::export_plugin), which wraps every call in a panic
//! guard. The host calls the `*_TO` trait objects defined here directly (scr-host wraps
//! them so every error names the library file).
//!
//! Every trait here ends its mandatory methods with `#[sabi(last_prefix_field)]` so that a
//! later version of this contract can append defaulted methods (as
//! [`FfiScheme::crc32_in_apply`], [`FfiScheme::apply_with_crc`],
//! [`FfiScheme::survivor_check`], [`FfiScheme::rebuild_sources`] and
//! [`FfiScheme::recover_files`] were).
//!
//! What that buys, as abi_stable checks layouts at load: a plugin built against this
//! contract loads in a host built against the same or an *older* one (the host never
//! calls the methods it does not know). A plugin *binary* built against an older
//! contract, with fewer methods, is refused by a newer host ("the scheme object lacks
//! method `…`: the library was built against an older scr-plugin"): rebuild it. Its source compiles unchanged, because every appended
//! method has a default on [`Scheme`](crate::Scheme).
#![allow(missing_docs)] // the sabi_trait macro generates undocumented helper items

use abi_stable::{
    declare_root_module_statics,
    library::RootModule,
    package_version_strings, sabi_trait,
    sabi_types::{RRef, VersionStrings},
    std_types::{RBox, ROption, RResult, RSlice, RSliceMut, RStr, RString, RVec},
    StableAbi,
};

use crate::error::PluginError;

/// The version of the plugin contract's *semantics*, checked by the host on load in
/// addition to abi_stable's layout check. Raise it when a call's meaning changes while its
/// layout stays the same.
pub const ABI_VERSION: u32 = 1;

/// One `key = value` pair of descriptor parameters or plugin settings.
///
/// Values travel as strings (TOML scalars rendered without quotes) so that any plugin can
/// take any parameter without the host knowing its type; see [`Params`](crate::Params) for
/// typed lookups with good error messages.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq)]
pub struct Param {
    /// Parameter name, lower case as in the configuration.
    pub key: RString,
    /// Parameter value rendered as a string.
    pub value: RString,
}

/// Everything a scheme needs to create an instance for one redundancy set.
#[repr(C)]
#[derive(StableAbi, Clone, Debug)]
pub struct SchemeConfig {
    /// The scheme name as the checkpoint descriptor spelled it (lookup is case-insensitive).
    pub scheme: RString,
    /// The checkpoint descriptor's scheme parameters (`set_size`, `set_failures`,
    /// `replicas`, `buffer_size` and anything under the descriptor's `params` table).
    pub params: RVec<Param>,
    /// The `[plugins.<name>]` settings table of the configuration, passed through.
    pub settings: RVec<Param>,
    /// The number of members of this redundancy set. At `scr config check` time, when no
    /// job exists, this is the configured `set_size`.
    pub members: u32,
    /// This process's member index in the set (0 at check time).
    pub member: u32,
    /// This process's `MPI_COMM_WORLD` rank (0 at check time); with `member`, what makes
    /// a redundancy file name unique on a node shared by several ranks.
    pub world_rank: u32,
}

/// What the host needs to know about a scheme instance.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq)]
pub struct SchemeDescription {
    /// Canonical upper-case scheme name (`XOR`, `RS`, ...).
    pub name: RString,
    /// How many members of one set may lose their files at once and still be rebuilt,
    /// for the parameters this instance was created with.
    pub tolerated_losses: u32,
    /// One line describing the instance, e.g. `XOR over 8 members, 1 MiB pieces`.
    pub summary: RString,
}

/// Metadata of one application file, as recorded in the filemap.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq)]
pub struct FileMeta {
    /// Absolute path of the file in cache.
    pub path: RString,
    /// Size in bytes.
    pub size: u64,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// Owner user id.
    pub uid: u32,
    /// Owner group id.
    pub gid: u32,
    /// Modification time, seconds since the epoch.
    pub mtime_sec: i64,
    /// Modification time, nanosecond part.
    pub mtime_nsec: u32,
    /// Access time, seconds since the epoch.
    pub atime_sec: i64,
    /// Access time, nanosecond part.
    pub atime_nsec: u32,
    /// CRC32 of the contents, when it was computed.
    pub crc32: ROption<u32>,
}

impl FileMeta {
    /// Metadata that knows only a path and a size: mode 0 (left alone on rebuild), owner
    /// 0, times at the epoch, no CRC. For benchmarks and tests that make their own files.
    pub fn new(path: impl Into<RString>, size: u64) -> Self {
        FileMeta {
            path: path.into(),
            size,
            mode: 0,
            uid: 0,
            gid: 0,
            mtime_sec: 0,
            mtime_nsec: 0,
            atime_sec: 0,
            atime_nsec: 0,
            crc32: ROption::RNone,
        }
    }
}

/// One rank's share of a dataset: the files that form its logical file, in order.
#[repr(C)]
#[derive(StableAbi, Clone, Debug)]
pub struct DatasetFiles {
    /// The dataset id.
    pub dataset_id: u64,
    /// The directory where this rank's redundancy files go (its dataset cache directory).
    pub dir: RString,
    /// This rank's files in order; the scheme treats their concatenation as one logical
    /// file.
    pub files: RVec<FileMeta>,
}

/// What [`Scheme::apply_with_crc`](crate::Scheme::apply_with_crc) returns: the
/// redundancy files written, and the CRC32 of each dataset file computed in the same pass.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq, Default)]
pub struct Applied {
    /// The redundancy files this member wrote (what [`Scheme::apply`](crate::Scheme::apply)
    /// returns).
    pub redundancy: RVec<RString>,
    /// The CRC32 of each of the dataset's files, in the order of [`DatasetFiles::files`],
    /// computed from the bytes the scheme read during the call; `RNone` for a file it
    /// could not vouch for. Empty when the scheme computed none. The host reads every file
    /// that has no CRC32 here itself.
    pub crc32: RVec<ROption<u32>>,
}

impl Applied {
    /// The redundancy files, with no CRC32 computed.
    pub fn without_crc(redundancy: Vec<String>) -> Self {
        Applied {
            redundancy: redundancy.into_iter().map(RString::from).collect(),
            crc32: RVec::new(),
        }
    }

    /// The redundancy files and the CRC32 of each dataset file (as
    /// [`FileCrcs::finish`](crate::lofi::FileCrcs::finish) gives them).
    pub fn with_crc(redundancy: Vec<String>, crc32: Vec<Option<u32>>) -> Self {
        Applied {
            redundancy: redundancy.into_iter().map(RString::from).collect(),
            crc32: crc32
                .into_iter()
                .map(|c| c.map_or(ROption::RNone, ROption::RSome))
                .collect(),
        }
    }
}

/// A request to rebuild one dataset across a redundancy set.
#[repr(C)]
#[derive(StableAbi, Clone, Debug)]
pub struct RecoverRequest {
    /// The dataset id.
    pub dataset_id: u64,
    /// This rank's dataset cache directory (created by the host).
    pub dir: RString,
    /// This rank's files as its filemap records them and the files are intact, or
    /// `RNone` when this member lost them and needs them rebuilt.
    pub files: ROption<RVec<FileMeta>>,
}

/// Who verifies a surviving member's files before they feed a rebuild: what a scheme
/// declares through [`Scheme::survivor_check`](crate::Scheme::survivor_check).
///
/// The host verifies every member's files (size, and CRC32 when recorded) before it
/// calls `recover` in any case, and passes a member whose files fail as one that lost
/// them (`files: RNone`). A scheme either relies on that check or checks survivors again
/// itself; the conformance harness tests each scheme against what it declares (see
/// `scr_plugin::manual::schemes`, "Survivors: who verifies them").
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SurvivorCheck {
    /// The scheme relies on the host's check: the files of a member passed as intact are
    /// intact. The default.
    #[default]
    Host,
    /// The scheme verifies every survivor whose data feeds a rebuild itself and counts a
    /// damaged one as lost, whatever the host checked.
    Scheme,
}

/// How an all-reduce combines values.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    /// Sum (wrapping).
    Sum,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
}

/// Log levels, from most to least severe.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    /// Something failed.
    Error,
    /// Something is suspicious or degraded.
    Warn,
    /// Progress worth showing at `debug = 1`.
    Info,
    /// Detail for `debug >= 2`.
    Debug,
}

/// State of a transfer or of one of its files.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransferStatus {
    /// Created, files may still be added.
    Idle,
    /// Dispatched and not finished.
    InProgress,
    /// Every file copied (and verified where asked).
    Complete,
    /// At least one file failed; see the per-file results.
    Failed,
    /// Cancelled before completion.
    Cancelled,
}

/// Options of one transfer.
#[repr(C)]
#[derive(StableAbi, Clone, Debug)]
pub struct TransferConfig {
    /// The transfer type as configured (`sync`, `pthread`, `bbapi`, `dw`, ...).
    pub transfer_type: RString,
    /// Where the plugin persists the transfer's state, so another process can resume,
    /// wait for or cancel it. Written atomically by the plugin.
    pub state_file: RString,
    /// Compute CRC32 of each file while copying.
    pub crc32: bool,
    /// Apply mode, owner (where permitted) and times of the source to the destination.
    pub preserve_metadata: bool,
    /// The `[plugins.<type>]` settings table of the configuration, passed through.
    pub settings: RVec<Param>,
}

/// Outcome of one (source, destination) pair of a transfer.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq)]
pub struct FileResult {
    /// Source path.
    pub source: RString,
    /// Destination path.
    pub destination: RString,
    /// Bytes copied so far.
    pub bytes: u64,
    /// CRC32 of the copied bytes, when asked for and complete.
    pub crc32: ROption<u32>,
    /// Status of this file.
    pub status: TransferStatus,
    /// Why it failed, when it did.
    pub error: ROption<RString>,
}

/// The services the host hands to every plugin call: the redundancy set's communicator,
/// logging and a cancellation check. Plugins never link MPI; they talk through this.
///
/// Members are numbered `0..size()` within the redundancy set. Tags are in `0..=32767`
/// (the smallest upper bound MPI guarantees). Messages between one pair of members with
/// one tag arrive in the order they were sent; `recv` must be given a buffer of exactly
/// the size that was sent.
///
/// # The contract (what the scr-rs hosts do)
///
/// - **Local calls**: `rank`, `size`, `world_rank`, `failure_group`, `log` and
///   `is_cancelled` never communicate, never block on another member and take no lock;
///   any thread may call them at any time.
/// - **Point-to-point calls**: `send`, `recv` and `sendrecv` involve the named members
///   only. They block until this member's side is complete.
/// - **Collective calls**: `barrier`, `all_reduce_u64` and `broadcast` must be made by
///   every member of the set, in the same order, each from one thread at a time; a member
///   that skips one leaves the others waiting. `broadcast` first agrees on the length, so
///   buffers of different lengths are an error on every member, not a truncation.
/// - **One lock**: every communicating call (point-to-point or collective) of every host
///   in the process holds one process-wide lock for its whole duration, including while
///   it blocks waiting for a peer. So calls from several plugin threads are serialized,
///   never concurrent: a thread blocked in `recv` keeps every other thread's `send` out
///   until its message arrives. A plugin must therefore not wait in a host call for
///   something another of its threads can only do through a host call (two threads
///   each in `recv` for what the other thread will `send`: deadlock), and must not hold
///   a lock of its own across a host call that another of its threads needs before it
///   can make its own host call. Use `sendrecv` for exchanges, and make the calls of one
///   operation from one thread.
/// - **Threads**: communicating calls from a thread other than the one that made the
///   host (the application's thread that initialised scr-rs, which is also the one that
///   calls into the plugin) are refused with a
///   [`COMMUNICATION`](crate::ErrorCode::COMMUNICATION) error unless MPI was initialised
///   with at least `MPI_THREAD_SERIALIZED`; local calls are allowed from any thread.
/// - **No panics**: no call panics or unwinds into the plugin. Invalid arguments (a
///   member or tag out of range, a message whose size differs from the buffer, a length
///   MPI cannot express) are errors; the host never allocates a buffer sized by a length
///   a peer or the plugin sent before checking it against the buffer it was given.
///   ([`host_ref`](crate::host_ref) also catches a panic of the host's own code and
///   returns it as an error.)
/// - **A member that failed**: when the collective call (`apply`, `recover`, `remove`)
///   fails on one member (an error returned, or a panic the guard caught), its host tells
///   the others. From then until the call ends, every communicating call on them returns
///   an error with code [`PEER_FAILED`](crate::ErrorCode::PEER_FAILED) and the message
///   `member M (world rank W) failed in CALL: ERROR` instead of waiting, and
///   `is_cancelled` is true. The plugin must propagate it (return an error); the host
///   then gives every member the same error, and a fresh communicator to the next call.
/// - Transfers get a one-member host: communicating with another member is an error,
///   `barrier` and `all_reduce_u64` return at once.
#[sabi_trait]
pub trait HostServices: Send + Sync {
    /// This process's member number in the set.
    fn rank(&self) -> u32;
    /// Number of members in the set.
    fn size(&self) -> u32;
    /// The `MPI_COMM_WORLD` rank of a member.
    fn world_rank(&self, member: u32) -> u32;
    /// The failure-group value (e.g. the node name) of a member.
    fn failure_group(&self, member: u32) -> RString;
    /// Blocking send of `data` to `dest`.
    fn send(&self, dest: u32, tag: u32, data: RSlice<'_, u8>) -> RResult<(), PluginError>;
    /// Blocking receive from `src` into `buf`, whose length must equal the message's.
    fn recv(&self, src: u32, tag: u32, buf: RSliceMut<'_, u8>) -> RResult<(), PluginError>;
    /// Send to `dest` and receive from `src` at once (deadlock-free in rings).
    fn sendrecv(
        &self,
        dest: u32,
        data: RSlice<'_, u8>,
        src: u32,
        buf: RSliceMut<'_, u8>,
        tag: u32,
    ) -> RResult<(), PluginError>;
    /// Wait until every member has called `barrier`.
    fn barrier(&self) -> RResult<(), PluginError>;
    /// Combine one `u64` from every member; every member gets the result.
    fn all_reduce_u64(&self, value: u64, op: ReduceOp) -> RResult<u64, PluginError>;
    /// Copy `buf` of member `root` into `buf` of every member (same length everywhere).
    fn broadcast(&self, root: u32, buf: RSliceMut<'_, u8>) -> RResult<(), PluginError>;
    /// Log a message through the host's logger.
    fn log(&self, level: LogLevel, message: RStr<'_>);
    /// Whether the host asked the current operation to stop.
    #[sabi(last_prefix_field)]
    fn is_cancelled(&self) -> bool;

    // ---- added in 0.1.3, after the last mandatory method: defaulted, so a host built
    // before it answers `false` through the default and a plugin built before it never
    // asks ----

    /// Whether, in the current `recover` or `recover_files` call, the host verified every
    /// member's files passed in [`RecoverRequest::files`] against their recorded size
    /// and CRC32 (when one is recorded) just before the call, passing a member whose
    /// files failed as one that lost them (see
    /// [`Host::survivors_verified`](crate::Host::survivors_verified)). `false` when it
    /// did not say so, and for a host built before this method existed.
    fn survivors_verified(&self) -> bool {
        false
    }
}

/// A borrowed host-services object as passed to plugin calls.
pub type HostRef<'a> = HostServices_TO<'a, RRef<'a, ()>>;

/// A redundancy scheme instance for one redundancy set, as seen across the boundary.
#[sabi_trait]
pub trait FfiScheme: Send + Sync {
    /// Name, tolerated losses and a one-line summary.
    fn describe(&self) -> RResult<SchemeDescription, PluginError>;
    /// Collectively encode every member's logical file into redundancy files; returns the
    /// redundancy files this member wrote.
    fn apply(
        &self,
        host: HostRef<'_>,
        dataset: &DatasetFiles,
    ) -> RResult<RVec<RString>, PluginError>;
    /// Collectively rebuild the files of members that lost them, or fail the same way on
    /// every member. Returns this member's files (verified or rebuilt).
    fn recover(
        &self,
        host: HostRef<'_>,
        request: &RecoverRequest,
    ) -> RResult<RVec<FileMeta>, PluginError>;
    /// The redundancy files this member holds for the dataset (no communication).
    fn redundancy_files(&self, dataset: &DatasetFiles) -> RResult<RVec<RString>, PluginError>;
    /// Remove this member's redundancy files for the dataset.
    #[sabi(last_prefix_field)]
    fn remove(&self, host: HostRef<'_>, dataset: &DatasetFiles) -> RResult<(), PluginError>;

    // ---- added after the first release of ABI version 1: defaulted in the Rust trait, so
    // a plugin's source compiles unchanged; a library *binary* built before them is
    // refused by this host's layout check (rebuild it), while a library built with them
    // still loads into an older host ----

    /// Whether [`apply_with_crc`](Self::apply_with_crc) computes each file's CRC32 from
    /// the bytes it reads (see [`Scheme::apply_with_crc`](crate::Scheme::apply_with_crc)).
    /// `false` for a library built before this method existed.
    fn crc32_in_apply(&self) -> bool {
        false
    }

    /// [`apply`](Self::apply), also reporting the CRC32 of each of the dataset's files as
    /// computed from the bytes the scheme read. The host calls it only when it wants
    /// CRC32s and [`crc32_in_apply`](Self::crc32_in_apply) said `true`. For a library
    /// built before this method existed, it is `apply` reporting no CRC32.
    fn apply_with_crc(
        &self,
        host: HostRef<'_>,
        dataset: &DatasetFiles,
    ) -> RResult<Applied, PluginError> {
        match self.apply(host, dataset) {
            RResult::ROk(redundancy) => RResult::ROk(Applied {
                redundancy,
                crc32: RVec::new(),
            }),
            RResult::RErr(e) => RResult::RErr(e),
        }
    }

    // ---- added after `apply_with_crc`, the same way ----

    /// Whether the scheme relies on the host's check of survivors before `recover`, or
    /// verifies them itself (see [`Scheme::survivor_check`](crate::Scheme::survivor_check)).
    /// [`SurvivorCheck::Host`] for a library built before this method existed.
    fn survivor_check(&self) -> SurvivorCheck {
        SurvivorCheck::Host
    }

    // ---- added after `survivor_check`, the same way ----

    /// The surviving members whose redundancy files a rebuild of exactly the members
    /// `lost` (member indices in the set) reads, or `RNone` for every survivor's (see
    /// [`Scheme::rebuild_sources`](crate::Scheme::rebuild_sources)). No communication.
    /// `RNone` for a library built before this method existed.
    fn rebuild_sources(&self, lost: RSlice<'_, u32>) -> ROption<RVec<u32>> {
        let _ = lost;
        ROption::RNone
    }

    /// Collectively rebuild the lost members' application files when only the
    /// redundancy files of the survivors [`rebuild_sources`](Self::rebuild_sources) names
    /// are present, without restoring redundancy (see
    /// [`Scheme::recover_files`](crate::Scheme::recover_files)). For a library built
    /// before this method existed, it is `recover`, which is right since such a library's
    /// `rebuild_sources` is `RNone`.
    fn recover_files(
        &self,
        host: HostRef<'_>,
        request: &RecoverRequest,
    ) -> RResult<RVec<FileMeta>, PluginError> {
        self.recover(host, request)
    }
}

/// An owned scheme instance.
pub type SchemeBox = FfiScheme_TO<'static, RBox<()>>;

/// A transfer of (source, destination) pairs, as seen across the boundary.
#[sabi_trait]
pub trait FfiTransfer: Send {
    /// Add one file to copy. Only before `dispatch`.
    fn add(&mut self, source: RStr<'_>, destination: RStr<'_>) -> RResult<(), PluginError>;
    /// Start copying; may return before the copy is done.
    fn dispatch(&mut self, host: HostRef<'_>) -> RResult<(), PluginError>;
    /// Poll without blocking.
    fn test(&mut self, host: HostRef<'_>) -> RResult<TransferStatus, PluginError>;
    /// Block until the transfer ends.
    fn wait(&mut self, host: HostRef<'_>) -> RResult<TransferStatus, PluginError>;
    /// Stop the transfer; partly written destinations are removed.
    fn cancel(&mut self, host: HostRef<'_>) -> RResult<(), PluginError>;
    /// Per-file outcomes so far.
    #[sabi(last_prefix_field)]
    fn results(&self) -> RResult<RVec<FileResult>, PluginError>;
}

/// An owned transfer.
pub type TransferBox = FfiTransfer_TO<'static, RBox<()>>;

/// What a library says about itself.
#[repr(C)]
#[derive(StableAbi, Clone, Debug)]
pub struct LibraryInfo {
    /// The library's name, e.g. `scr-xor`.
    pub name: RString,
    /// The library's own version.
    pub version: RString,
    /// Redundancy schemes it provides (upper case by convention).
    pub schemes: RVec<RString>,
    /// Transfer types it provides (lower case by convention).
    pub transfers: RVec<RString>,
}

/// The root module every plugin library exports (via
/// [`export_plugin!`](crate::export_plugin)).
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = PluginModRef)))]
#[sabi(missing_field(panic))]
pub struct PluginMod {
    /// The [`ABI_VERSION`] the library was built against.
    pub abi_version: u32,
    /// The library's name, version and provided names.
    pub library: extern "C" fn() -> RResult<LibraryInfo, PluginError>,
    /// Create a scheme instance.
    pub new_scheme: extern "C" fn(&SchemeConfig) -> RResult<SchemeBox, PluginError>,
    /// Create a transfer.
    pub new_transfer:
        extern "C" fn(&TransferConfig, HostRef<'_>) -> RResult<TransferBox, PluginError>,
    /// Re-open a transfer from the state file another process persisted.
    #[sabi(last_prefix_field)]
    pub resume_transfer:
        extern "C" fn(&TransferConfig, HostRef<'_>) -> RResult<TransferBox, PluginError>,
}

impl RootModule for PluginModRef {
    declare_root_module_statics! {PluginModRef}
    const BASE_NAME: &'static str = "scr_plugin";
    const NAME: &'static str = "scr_plugin";
    const VERSION_STRINGS: VersionStrings = package_version_strings!();
}
