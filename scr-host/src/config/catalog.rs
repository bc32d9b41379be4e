//! The catalog of scalar settings: every key declared once — name, SCR alias, type with
//! its bounds, default and meaning — in the one [`catalog!`] table below. Everything
//! else about a key is derived from that entry, so the tables cannot drift apart:
//!
//! - [`KEYS`] and [`ALIASES`] (re-exported by [`super::keys`]), which the files, the
//!   `SCR_<KEY>` environment variables, the API, validation and `scr config show` go
//!   through by name;
//! - one typed constant per key (re-exported by [`super::settings`]) whose Rust type
//!   follows from the catalog type (`Bool` → `bool`, `UInt`/`Bytes` → `u64`, `Percent` →
//!   `f64`, text → `String`);
//! - the built-in value of every key ([`computed_default`]), and the shipped system file
//!   `config/scr.toml` (rendered by `shipped.rs` from these defaults).
//!
//! A key is added by one entry here; the compiler then offers its constant and the tests
//! check that its default is of its type and within its bounds.

use std::collections::BTreeMap;
use std::path::Path;

use super::types::{self, Key, Param, Type, Value};

/// The syslog facilities `log_syslog_facility` may name (openlog(3)).
pub const SYSLOG_FACILITIES: &[&str] = &[
    "LOG_USER",
    "LOG_DAEMON",
    "LOG_LOCAL0",
    "LOG_LOCAL1",
    "LOG_LOCAL2",
    "LOG_LOCAL3",
    "LOG_LOCAL4",
    "LOG_LOCAL5",
    "LOG_LOCAL6",
    "LOG_LOCAL7",
];

/// The values of `protect_below_multiple`.
pub(super) const PROTECT_BELOW_MULTIPLE_MODES: &[&str] = &["foreground", "calls", "sockets"];

/// The syslog levels `log_syslog_level` may name (syslog(3)), most severe first.
pub const SYSLOG_LEVELS: &[&str] = &[
    "LOG_EMERG",
    "LOG_ALERT",
    "LOG_CRIT",
    "LOG_ERR",
    "LOG_WARNING",
    "LOG_NOTICE",
    "LOG_INFO",
    "LOG_DEBUG",
];

/// Whether the shipped plugins are loaded when the system file's `[plugins]` table does
/// not say (`builtin`).
pub(super) const BUILTIN_PLUGINS: bool = true;

/// Whether users may name plugin directories and files when the system file's
/// `[plugins]` table does not say (`allow_user_plugins`).
pub(super) const ALLOW_USER_PLUGINS: bool = false;

/// No upper bound, for `UInt { min, max: MAX }`.
const MAX: u64 = u64::MAX;

/// The Rust type a catalog type is read as (see [`types::ParamValue`]).
macro_rules! rust_type {
    (Bool) => {
        bool
    };
    (UInt) => {
        u64
    };
    (Bytes) => {
        u64
    };
    (Percent) => {
        f64
    };
    (Str) => {
        String
    };
    (Path) => {
        String
    };
    (Choice) => {
        String
    };
}

/// The catalog: one entry per key, in the order `scr config show` prints them.
///
/// ```text
/// CONSTANT name (or scr_alias): Type { bounds } = Default("text"),
///     "meaning";
/// ```
///
/// `Type` is a [`Type`] variant (`UInt` with its `min`/`max`, `Choice` with its words),
/// the default a [`types::Default`] (`Fixed` text as the environment would write it,
/// `Computed` with how, or `None`); attributes before an entry (doc comments) go to the
/// typed constant.
macro_rules! catalog {
    ($(
        $(#[$attr:meta])*
        $konst:ident $name:ident $((or $($alias:ident),+))?
            : $kind:ident $({ $($bound:ident: $limit:expr),+ })? $(($words:expr))?
            = $default:ident $(($text:literal))?,
        $doc:literal;
    )*) => {
        /// One [`Key`] per entry, named as its typed constant.
        mod entry {
            use super::*;
            $(
                pub(super) const $konst: Key = Key {
                    name: stringify!($name),
                    ty: Type::$kind $({ $($bound: $limit),+ })? $(($words))?,
                    default: types::Default::$default $(($text))?,
                    doc: $doc,
                };
            )*
        }

        /// Every scalar key, in the order `scr config show` prints them.
        pub const KEYS: &[Key] = &[$(entry::$konst),*];

        /// Other names of keys, as SCR spells them (`SCR_USER_NAME` sets `user`): accepted
        /// wherever the key's own name is (files, environment, the API); the key's own
        /// name wins in the environment when both are set.
        pub const ALIASES: &[(&str, &str)] = &[$($($((stringify!($alias), stringify!($name)),)+)?)*];

        /// One typed constant per key: a misspelt key is a compile error, and the Rust
        /// type of its value is fixed by its catalog type.
        pub(crate) mod typed {
            use super::*;
            $(
                $(#[$attr])*
                #[doc = concat!("`", stringify!($name), "`: see [`KEYS`](crate::config::keys::KEYS) for its type, default and meaning.")]
                pub const $konst: Param<rust_type!($kind)> = Param::new(&entry::$konst);
            )*
        }

        /// Every typed constant's own name, its key's name and whether its Rust type reads
        /// its catalog type (for the round-trip test).
        #[cfg(test)]
        const TYPED: &[(&str, &str, fn(Type) -> bool)] = &[$(
            (
                stringify!($konst),
                typed::$konst.name(),
                <rust_type!($kind) as types::ParamValue>::accepts,
            )
        ),*];
    };
}

catalog! {
    ENABLE enable: Bool = Fixed("true"),
        "Turn the library on; when false nothing is cached, protected, flushed or fetched and route_file returns the application's own path; the C API's other calls (SCR_Init included) return SCR_FAILURE, as SCR's do, while the Rust API passes them through";
    DEBUG debug: UInt { min: 0, max: 5 } = Fixed("0"),
        "Log verbosity: 0 silent, 1 summary and timings on rank 0, 2+ detail";
    PREFIX prefix: Path = Computed("the current working directory"),
        "Parallel file system directory holding flushed datasets and .scr/";
    CNTL_BASE cntl_base: Path = Fixed("/dev/shm"),
        "Node-local base of the control directory <cntl_base>/<user>/scr.<jobid>";
    CACHE_BASE cache_base: Path = Fixed("/dev/shm"),
        "Default node-local store for checkpoints (SCR used /tmp; tmpfs is node-local and fast everywhere, /tmp is often disk or shared in containers)";
    CACHE_SIZE cache_size: UInt { min: 1, max: MAX } = Fixed("2"),
        "Datasets kept per store when the store sets no count (SCR used 1; 2 keeps the previous checkpoint while the next one is written)";
    CACHE_BYPASS cache_bypass: Bool = Fixed("false"),
        "Checkpoint descriptors that set no `bypass` write their files straight to the prefix: no cache, no redundancy, recorded in the index as flushed (SCR 3.1 defaults to 1; here the cache is the default, since it is what protects and speeds up checkpoints)";
    PROTECT_IN_BACKGROUND protect_in_background: Bool = Fixed("false"),
        "Checkpoint descriptors that set no `protect_in_background` apply their redundancy scheme in a background thread after complete_output returns, while the application computes; a dataset counts as a checkpoint only once every rank's protection finished, and the previous one stays the restart point until then. A thread of the library makes the scheme's MPI calls where MPI runs at MPI_THREAD_MULTIPLE (set in the environment, SCR_PROTECT_IN_BACKGROUND=1 also makes libscr's MPI_Init and MPI_Init_thread ask MPI for it; a file or SCR_Config comes too late for that); below that, protect_below_multiple says how (by default over TCP connections of the library's own, and the log says why)";
    PROTECT_BELOW_MULTIPLE protect_below_multiple: Choice(PROTECT_BELOW_MULTIPLE_MODES) = Fixed("sockets"),
        "What protect_in_background does where MPI was initialised below MPI_THREAD_MULTIPLE (only the application's thread may call MPI): `foreground` applies the scheme inside complete_output, as without protect_in_background; `calls` applies it in a background thread whose MPI calls the application's thread makes at its calls into the library (SCR_Need_checkpoint each timestep; what is left is finished at the next start_output, restart or finalize): reading, encoding and writing leave the application's path, the exchange does not, and a synchronous ring exchange then costs about what the foreground does (docs/benchmarks.md); `sockets` (the default) applies it in a background thread that calls no MPI at all: the members of each redundancy set exchange the scheme's data over TCP connections of the library's own, made over MPI at init (each member listens on an ephemeral port of every interface and reaches the others by their interfaces' addresses or host names, within 10 s; both ends of each connection prove a random token without sending it), so the application's thread pays for none of it; where some set cannot make them, the whole job applies the scheme inside complete_output and rank 0 says why";
    COPY_TYPE copy_type: Str = Fixed("XOR"),
        "Redundancy scheme of the implied checkpoint descriptor (SINGLE, PARTNER, XOR, RS or a plugin's)";
    SET_SIZE set_size: UInt { min: 2, max: 4096 } = Fixed("8"),
        "Members per redundancy set for XOR and RS";
    SET_FAILURES set_failures: UInt { min: 1, max: 255 } = Fixed("2"),
        "Losses per set the RS scheme tolerates";
    REPLICAS replicas: UInt { min: 1, max: 4095 } = Fixed("1"),
        "Copies PARTNER keeps of each member's files on other failure groups";
    HOP_DISTANCE hop_distance: UInt { min: 1, max: 4096 } = Fixed("1"),
        "Failure groups between neighbours of a redundancy set (SCR_HOP_DISTANCE): sets take every N-th group in group order, so with 2 on nodes n0..n7 the sets hold n0,n2,n4,n6 and n1,n3,n5,n7, and a PARTNER copy or an XOR neighbour is 2 nodes away (where adjacent nodes share a switch or a power supply)";
    GROUP group: Str = Fixed("NODE"),
        "Failure group of the implied checkpoint descriptor and of descriptors that name none (a store that names no group is node-local: NODE, as in SCR)";
    FLUSH flush: UInt { min: 0, max: MAX } = Fixed("10"),
        "Flush every N-th checkpoint to the prefix; 0 never";
    FLUSH_ASYNC flush_async: Bool = Fixed("false"),
        "Flush in the background while the application computes";
    FLUSH_ASYNC_BW flush_async_bw: Bytes = Fixed("0"),
        "Bandwidth cap of background flushes, bytes per second for the whole job (SCR_FLUSH_ASYNC_BW): each rank's transfer copies at most its share (the cap over the job's ranks, at least 16 KiB/s), resumed flushes too; 0: no cap (SCR 3.1 applies none). Applied by the built-in copy types (sync, pthread, and the fallback of bbapi and dw); another plugin's type is not paced, which init says";
    FLUSH_ASYNC_PERCENT flush_async_percent: Percent = Fixed("0"),
        "Share of its time a rank's background flush may spend copying (SCR_FLUSH_ASYNC_PERCENT): it pauses between pieces so that copying takes at most this percent; 0: no pause";
    FLUSH_WIDTH flush_width: UInt { min: 1, max: MAX } = Fixed("256"),
        "At most this many ranks copy to the prefix at once in a flush (SCR_FLUSH_WIDTH), so a large job does not swamp the parallel file system: a sliding window by rank, rank r starts when rank r-N finished. Bounds every flush, a resumed one at init included; a background flush (flush_async) moves its window at the library calls that poll it (so it takes at least ranks / N of them) and is also held to flush_async_bw and flush_async_percent";
    FETCH_WIDTH fetch_width: UInt { min: 1, max: MAX } = Fixed("256"),
        "At most this many ranks read from the prefix at once when a restart fetches a checkpoint, or checks its files in place with fetch = false (SCR_FETCH_WIDTH); a sliding window by rank as flush_width";
    FLUSH_TYPE flush_type: Str = Fixed("pthread"),
        "Transfer type for flushes from stores that name none";
    FLUSH_POSTSTAGE flush_poststage: Bool = Fixed("false"),
        "SCR's hand-over of background flushes to a post-stage script after the job (IBM burst buffer only); not available here: true is refused (finalize completes every background flush), false is accepted so SCR configurations load";
    FLUSH_ON_RESTART flush_on_restart: Bool = Fixed("false"),
        "At init, flush the checkpoint restored from cache unless the prefix holds it already";
    FLUSH_ON_FINALIZE flush_on_finalize: Bool = Fixed("true"),
        "At finalize (and when a halt condition ends the run), flush the newest checkpoint unless the prefix holds it already (with flush = 0 nothing is flushed)";
    FETCH fetch: Bool = Fixed("true"),
        "Fetch the newest checkpoint from the prefix at init when cache holds none";
    FETCH_BYPASS fetch_bypass: Bool = Fixed("false"),
        "A checkpoint only the prefix holds is read in place there at restart (its files checked first) instead of fetched into cache, as with fetch = false";
    CACHE_PURGE cache_purge: Bool = Fixed("false"),
        "Delete every dataset from cache at init (on every node) and restart from the prefix: for testing and while integrating the library";
    CURRENT current: Str = None,
        "The checkpoint to restart from, by name, as if the application called SCR_Current(name) before its first have_restart (SCR's SCR_CURRENT); a name neither the cache nor the prefix holds is a warning from rank 0 and the usual newest checkpoint is taken; applied once per job, as SCR does, so a relaunch in the same allocation restarts from its own newest checkpoint";
    DROP_AFTER_CURRENT drop_after_current: Bool = Fixed("false"),
        "When a checkpoint is chosen by `current` or SCR_Current, drop every dataset newer than it (checkpoints and outputs) from the prefix's index, their files left in place, so the run continues from the older point and no later restart takes a newer one (SCR's rule)";
    GLOBAL_RESTART global_restart: Bool = Fixed("false"),
        "The application must restart from the prefix (SCR's SCR_GLOBAL_RESTART): the cached restart checkpoint is flushed first (flush_on_restart forced on), the cache is then cleared, and the restart reads the checkpoint in place in the prefix instead of fetching it into cache";
    PREFIX_SIZE prefix_size: UInt { min: 0, max: MAX } = Fixed("0"),
        "Keep a window of N checkpoints in the prefix (SCR's sliding window): after a checkpoint's flush is recorded, it and the N-1 next older complete checkpoints stay, and every older one is deleted (files and index entries, as SCR_Delete does) unless it is also flagged output or is the index's current one; failed or incomplete entries and outputs that are not checkpoints are left alone; 0 keeps all";
    PREFIX_PURGE prefix_purge: Bool = Fixed("false"),
        "At init, before a restart is chosen, delete every dataset the prefix's index lists, checkpoints and outputs (files and entries): a fresh start that keeps no earlier result (SCR's SCR_PREFIX_PURGE)";
    DISTRIBUTE distribute: Bool = Fixed("true"),
        "Move cached files to their owner ranks at init when ranks changed nodes; false: purge the cache at init and restart from the prefix (fetch)";
    CRC_ON_COPY crc_on_copy: Bool = Fixed("true"),
        "Record CRC32 of files at complete_output (SCR: false). It costs one read of the data: a 256 MiB-per-rank SINGLE checkpoint on tmpfs took 1.0x a plain write without it and 1.7-1.9x with it (scr-bench-single); we default to detecting silent corruption";
    CRC_ON_COPY_DEFER crc_on_copy_defer: Bool = Fixed("true"),
        "With crc_on_copy, hash the files of a dataset whose scheme keeps no redundancy data (tolerates no loss and names no redundancy file, as SINGLE) in a background thread of each process while the application computes, instead of reading them back inside complete_output; the CRC32s are recorded at a later API call, always before the dataset is flushed or restarted from and before finalize returns (deleting the dataset first cancels its hash), and a later run does not restore a dataset whose CRC32s were never recorded (with crc_on_restart). The CRC32 is of the bytes as the thread read them. false: read them in complete_output, as before";
    CRC_ON_RESTART crc_on_restart: Bool = Fixed("true"),
        "Check every cached file against its recorded size and CRC32 at init, before it is offered for restart, read by a rebuild, or recorded as rebuilt; a file that fails counts as lost. It costs one read of the cached data at init";
    CRC_ON_FLUSH crc_on_flush: Bool = Fixed("true"),
        "Also ask the transfer type for the CRC32 of what it copied, checked against the host's; the host re-reads every flushed or fetched file and checks its size and CRC32 in any case. For a dataset that bypasses the cache (nothing is copied), whether complete_output reads its files back for a CRC32 (read once per file, by the lowest rank writing it); without one, a restart checks their sizes only";
    CRC_ON_DELETE crc_on_delete: Bool = Fixed("false"),
        "Check each file's CRC32 before a dataset is deleted from cache and warn, naming rank and file, when the cache damaged it (the files are deleted either way)";
    CHECKPOINT_INTERVAL checkpoint_interval: UInt { min: 0, max: MAX } = Fixed("0"),
        "need_checkpoint says yes every N calls; 0 disables this rule";
    CHECKPOINT_SECONDS checkpoint_seconds: UInt { min: 0, max: MAX } = Fixed("0"),
        "need_checkpoint says yes after N seconds since the last checkpoint; 0 disables";
    CHECKPOINT_OVERHEAD checkpoint_overhead: Percent = Fixed("0"),
        "need_checkpoint keeps checkpoint time under this percent of run time; 0 disables";
    HALT_SECONDS halt_seconds: UInt { min: 0, max: MAX } = Fixed("0"),
        "Halt when fewer than N seconds remain in the allocation; 0 disables";
    HALT_EXIT halt_exit (or halt_enabled): Bool = Fixed("false"),
        "When a halt condition holds at init or after a checkpoint, finalize, finalize MPI and exit with status 0 inside the library (else the application asks should_exit)";
    ABORT_TIMEOUT abort_timeout: UInt { min: 1, max: 86400 } = Fixed("60"),
        "Seconds a member whose collective scheme call failed alone (an error or a caught panic in the plugin) waits for the other members of its set to return before it ends the job with MPI_Abort, so that none waits forever";
    MPI_BUF_SIZE mpi_buf_size: Bytes = Fixed("1MiB"),
        "Piece size of redundancy exchanges (SCR: 128KB; 1 MiB stays cache-resident and halves message overhead)";
    /// Read it through [`Config::file_buf_size`](crate::config::Config::file_buf_size),
    /// which bounds it to the buffer sizes the library uses.
    FILE_BUF_SIZE file_buf_size: Bytes = Fixed("1MiB"),
        "Buffer size of file copies and reads (measured fastest on local disks); used within 4 KiB..=64 MiB";
    RANK2FILE_BLOCK rank2file_block: UInt { min: 1, max: 1048576 } = Fixed("256"),
        "Ranks per part of a flushed dataset's rank2file map: each block's first rank gathers and writes its block's file lists and hands them out again at fetch, so no rank handles more than this many ranks' lists (small values are for tests)";
    JOB_ID job_id: Str = Computed("SCR_JOB_ID, else SLURM_JOBID, LSB_JOBID, FLUX_JOB_ID or PBS_JOBID, else \"0\""),
        "Job id used in cache and control directory names";
    CLUSTER_NAME cluster_name: Str = Computed("SCR_CLUSTER_NAME, else SLURM_CLUSTER_NAME, else none"),
        "Cluster name recorded with each flushed dataset in the index and its summary (shown by `scr index list`)";
    JOB_NAME job_name: Str = None,
        "Job name recorded with each flushed dataset in the index (shown by `scr index list`)";
    NODE_NAMES node_names: Str = None,
        "Testing only: comma-separated node name of each rank (by rank; in a resilient run, of each process of the job, spares included), so one machine acts as several nodes; node-local stores and the control directory then include the node name";
    USER user (or user_name): Str = Computed("$USER, else the uid"),
        "User name used in cache and control directory names";
    // walltime and event log
    END_TIME end_time: UInt { min: 0, max: MAX } = Fixed("0"),
        "When the allocation ends, in seconds since the epoch (e.g. SCR_END_TIME=$(( $(date +%s) + 3600 ))); wins over the resource manager's end time, which halt_seconds otherwise counts from; 0 asks the resource manager (SLURM, Flux, LSF, PBS)";
    // logging (SCR's SCR_LOG_*): the event log in the prefix is what `scr log` reads
    LOG_ENABLE log_enable: Bool = Fixed("true"),
        "Record the job's events (init, checkpoints, flushes, fetches, failures, finalize); SCR defaults to off, we to on because `scr log` computes checkpoint cost and time between failures from them; false records nothing anywhere";
    LOG_TXT_ENABLE log_txt_enable: Bool = Fixed("true"),
        "With log_enable, rank 0 appends each event as one JSON line to <prefix>/.scr/events.jsonl (SCR's text log); false writes no such file, and `scr log` then has nothing to read";
    LOG_SYSLOG_ENABLE log_syslog_enable: Bool = Fixed("false"),
        "With log_enable, rank 0 also sends each event as one line to syslog (ident log_syslog_prefix, facility log_syslog_facility, level log_syslog_level); SCR defaults to on, we to off so that test and laptop runs do not fill the system log";
    LOG_SYSLOG_PREFIX log_syslog_prefix: Str = Fixed("SCR"),
        "The ident syslog lines carry (SCR sets it when built; here at run time)";
    LOG_SYSLOG_FACILITY log_syslog_facility: Choice(SYSLOG_FACILITIES) = Fixed("LOG_LOCAL7"),
        "The syslog facility of the event lines (SCR's build-time SCR_LOG_SYSLOG_FACILITY, here at run time)";
    LOG_SYSLOG_LEVEL log_syslog_level: Choice(SYSLOG_LEVELS) = Fixed("LOG_INFO"),
        "The syslog level of the event lines (SCR's build-time SCR_LOG_SYSLOG_LEVEL, here at run time)";
    LOG_DB_ENABLE log_db_enable: Bool = Fixed("false"),
        "SCR's MySQL event database; not available here: true is refused, naming where the events go instead (the event log, syslog); false is accepted so SCR configurations load";
    LOG_DB_DEBUG log_db_debug: UInt { min: 0, max: MAX } = Fixed("0"),
        "SCR: echo the database's SQL statements; not available here: 0 is accepted, any other value refused";
    LOG_DB_HOST log_db_host: Str = None,
        "SCR: the database server; SCR's MySQL event database is not available here, so setting it is refused";
    LOG_DB_USER log_db_user: Str = None,
        "SCR: the database user; SCR's MySQL event database is not available here, so setting it is refused";
    LOG_DB_PASS log_db_pass: Str = None,
        "SCR: the database password; SCR's MySQL event database is not available here, so setting it is refused";
    LOG_DB_NAME log_db_name: Str = None,
        "SCR: the database name; SCR's MySQL event database is not available here, so setting it is refused";
    // where the user file is
    CONF_FILE conf_file: Path = None,
        "The user configuration file (SCR_CONF_FILE), read instead of <prefix>/.scrconf.toml; set in the environment or through SCR_Config before init, where the API's value wins over the environment's as SCR's API values do (a configuration file cannot name it)";
    // `scr run`, `scr nodes down`, `scr env` (the launch part)
    NODELIST nodelist: Str = None,
        "The allocation's nodes as a host list (node[1-4,7]); unset: SLURM_JOB_NODELIST, SLURM_NODELIST, `flux getattr hostlist`, LSB_MCPU_HOSTS, LSB_HOSTS, PBS_NODEFILE, node_names, this host (first found)";
    EXCLUDE_NODES exclude_nodes: Str = None,
        "Nodes `scr run` never launches on (a host list); nodes it finds down are added for the rest of the allocation";
    MIN_NODES min_nodes: UInt { min: 0, max: MAX } = Fixed("0"),
        "`scr run` stops relaunching when fewer nodes than this are left; 0: as many as the previous run used (the nodes file its rank 0 wrote in the prefix at init), else as many as the first launch used";
    RUNS runs: UInt { min: 1, max: MAX } = Fixed("1"),
        "Launches `scr run` makes in all (the first and the relaunches after failures)";
    WATCHDOG_TIMEOUT watchdog_timeout: UInt { min: 0, max: MAX } = Fixed("0"),
        "`scr run` kills a job step that shows no progress (no output line, no file changed in the prefix's .scr, cache or control directories) for N seconds, and relaunches; 0 disables";
    WATCHDOG_TIMEOUT_PFS watchdog_timeout_pfs: UInt { min: 0, max: MAX } = Fixed("0"),
        "The watchdog's timeout (`watchdog_timeout`) while a flush to the prefix is open in the index, which takes longer than a write to cache; 0: `watchdog_timeout` throughout";
    DOWN_NODES_SCRIPT down_nodes_script: Path = None,
        "Site script run with the node names as arguments; each `NODE REASON` line it prints marks that node down for `scr run` and `scr nodes down`";
    REMOTE_RUNNER remote_runner: Str = None,
        "How `scr postrun` and `scr run` reach another node of the allocation: a command template with {node} and {cmd} (one shell-quoted string; appended when absent), e.g. `ssh {node} {cmd}` or `pdsh -S -N -w {node} {cmd}`; `none`: this host only; unset: srun inside SLURM, `flux exec` inside Flux, else pdsh when installed, else this host only";
    REMOTE_TIMEOUT remote_timeout: UInt { min: 1, max: 86_400 } = Fixed("30"),
        "Seconds a node may take to answer through the remote runner — `scr run`'s node check (asked twice before the node counts as down) and `scr postrun`'s question what its cache holds (a node that does not answer is not reached and left out); the copy itself has no limit";
    REMOTE_FANOUT remote_fanout: UInt { min: 1, max: 256 } = Fixed("32"),
        "Nodes `scr postrun` and `scr run` work on at once through the remote runner (pdsh's fan-out; each holds a runner process and its pipes)";
    CACHE_FREE cache_free: Bytes = None,
        "Free space each node-local store must have for `scr run` to use the node; unset: the store's dataset count times the largest indexed dataset's bytes per node";
}

/// A key's built-in value: its fixed default, or the computed one (prefix, job id, user,
/// cluster name).
/// `cwd` is the directory a relative or default prefix is taken from, `env` the
/// environment the job id and user name are looked up in.
pub(super) fn computed_default(
    key: &Key,
    cwd: &Path,
    env: &BTreeMap<String, String>,
) -> Option<Value> {
    match key.default {
        types::Default::None => None,
        types::Default::Fixed(text) => types::parse_text(key.ty, text).ok(),
        // (a computed value that cannot be known, as a cluster name outside a resource
        // manager that gives one, is unset)
        types::Default::Computed(_) if key.name == "cluster_name" => env
            .get("SLURM_CLUSTER_NAME")
            .filter(|s| !s.is_empty())
            .map(|s| Value::Str(s.clone())),
        types::Default::Computed(_) => Some(Value::Str(match key.name {
            "prefix" => cwd.display().to_string(),
            "job_id" => [
                "SCR_JOB_ID",
                "SLURM_JOBID",
                "LSB_JOBID",
                "FLUX_JOB_ID",
                "PBS_JOBID",
            ]
            .iter()
            .find_map(|v| env.get(*v).filter(|s| !s.is_empty()).cloned())
            .unwrap_or_else(|| "0".into()),
            "user" => ["USER", "LOGNAME"]
                .iter()
                .find_map(|v| env.get(*v).filter(|s| !s.is_empty()).cloned())
                .unwrap_or_else(user_from_uid),
            other => unreachable!("no computed default for {other}"),
        })),
    }
}

/// The name of this process's user from /etc/passwd, else `uid<N>`.
fn user_from_uid() -> String {
    use std::os::unix::fs::MetadataExt;
    let Ok(uid) = std::fs::metadata("/proc/self").map(|m| m.uid()) else {
        return "unknown".into();
    };
    std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|text| {
            text.lines().find_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                (f.len() > 2 && f[2] == uid.to_string()).then(|| f[0].to_string())
            })
        })
        .unwrap_or_else(|| format!("uid{uid}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value written as text and parsed back as `ty`: the same value only when it is
    /// of that type and within its bounds.
    fn round_trip(ty: Type, value: &Value) -> Result<Value, String> {
        types::parse_text(ty, &value.to_param()).map_err(|e| e.to_string())
    }

    #[test]
    fn every_default_is_of_its_declared_type_and_within_its_bounds() {
        let env: BTreeMap<String, String> = [
            ("USER".to_string(), "someone".to_string()),
            ("SLURM_JOBID".to_string(), "42".to_string()),
            ("SLURM_CLUSTER_NAME".to_string(), "quartz".to_string()),
        ]
        .into();
        // without a resource manager's name the cluster is unknown: unset, not ""
        let cluster = KEYS.iter().find(|k| k.name == "cluster_name").unwrap();
        assert_eq!(
            computed_default(cluster, Path::new("/"), &BTreeMap::new()),
            None
        );
        for key in KEYS {
            let value = computed_default(key, Path::new("/some/dir"), &env);
            let value = match (key.default, value) {
                (types::Default::None, None) => continue,
                (types::Default::None, Some(v)) => {
                    panic!("`{}` has no default but reads {v}", key.name)
                }
                (d, None) => panic!("`{}`: its default {d:?} is not {}", key.name, key.ty),
                (_, Some(v)) => v,
            };
            assert_eq!(
                round_trip(key.ty, &value).as_ref(),
                Ok(&value),
                "`{}`: its default is not {}",
                key.name,
                key.ty
            );
        }
    }

    #[test]
    fn the_round_trip_refuses_a_default_of_another_type_or_out_of_bounds() {
        let cache_size = Type::UInt { min: 1, max: MAX };
        assert!(round_trip(cache_size, &Value::UInt(0)).is_err());
        assert!(round_trip(cache_size, &Value::Bool(true)).is_err());
        assert!(round_trip(Type::Bool, &Value::UInt(2)).is_err());
        assert!(round_trip(Type::Choice(SYSLOG_LEVELS), &Value::Str("LOG_X".into())).is_err());
        assert!(round_trip(Type::Percent, &Value::Float(100.5)).is_err());
    }

    #[test]
    fn every_key_has_one_typed_constant_whose_rust_type_reads_its_catalog_type() {
        assert_eq!(TYPED.len(), KEYS.len());
        for ((konst, name, accepts), key) in TYPED.iter().zip(KEYS) {
            assert_eq!(*name, key.name);
            assert_eq!(
                *konst,
                name.to_ascii_uppercase(),
                "the constant of `{name}`"
            );
            assert!(accepts(key.ty), "`{name}` is {} in the catalog", key.ty);
        }
        assert_eq!(typed::CACHE_SIZE.key().name, "cache_size");
        assert_eq!(typed::CACHE_SIZE.key().env_var(), "SCR_CACHE_SIZE");
    }

    #[test]
    fn names_and_aliases_are_lower_case_and_unique() {
        let mut seen = std::collections::BTreeSet::new();
        let names = KEYS.iter().map(|k| k.name);
        for name in names.chain(ALIASES.iter().map(|(alias, _)| *alias)) {
            assert_eq!(name, name.to_ascii_lowercase());
            assert!(seen.insert(name), "`{name}` is declared twice");
        }
        for (alias, key) in ALIASES {
            assert!(KEYS.iter().any(|k| k.name == *key), "{alias} names no key");
        }
        assert_eq!(
            ALIASES,
            &[("halt_enabled", "halt_exit"), ("user_name", "user")]
        );
    }
}
