//! The catalog of scalar configuration keys: name, type, default and meaning.
//!
//! Names are SCR's parameter names in lower case (`SCR_CACHE_SIZE` → `cache_size`), so an
//! SCR user finds their way; the same catalog drives the TOML files, the `SCR_<KEY>`
//! environment variables, values set through the API, validation and `scr config show`.

use std::fmt;

/// The type (and range) of a key's value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Type {
    /// `true`/`false` (also `1`/`0`, `yes`/`no` from the environment).
    Bool,
    /// A whole number in `min..=max`.
    UInt {
        /// Smallest allowed value.
        min: u64,
        /// Largest allowed value.
        max: u64,
    },
    /// A byte count: a whole number or a string with a unit (`64KB`, `1MiB`, `2GB`;
    /// K/M/G/T are powers of 1024 as in SCR).
    Bytes,
    /// A percentage, `0.0..=100.0`.
    Percent,
    /// Free text.
    Str,
    /// A file-system path.
    Path,
    /// One of a fixed set of words (case-insensitive).
    Choice(&'static [&'static str]),
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Type::Bool => f.write_str("a boolean (true or false)"),
            Type::UInt { min, max } if *max == u64::MAX => {
                write!(f, "a whole number >= {min}")
            }
            Type::UInt { min, max } => write!(f, "a whole number in {min}..={max}"),
            Type::Bytes => f.write_str("a byte count (e.g. 1048576 or \"1MiB\")"),
            Type::Percent => f.write_str("a percentage between 0 and 100"),
            Type::Str => f.write_str("a string"),
            Type::Path => f.write_str("a path (string)"),
            Type::Choice(words) => write!(f, "one of {}", words.join(", ")),
        }
    }
}

/// A typed configuration value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// A boolean.
    Bool(bool),
    /// A whole number or byte count.
    UInt(u64),
    /// A percentage.
    Float(f64),
    /// A string, path or choice.
    Str(String),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Bool(b) => write!(f, "{b}"),
            Value::UInt(n) => write!(f, "{n}"),
            Value::Float(x) => write!(f, "{x}"),
            Value::Str(s) => write!(f, "{s:?}"),
        }
    }
}

impl Value {
    /// The value as a plugin parameter string (no quotes).
    pub fn to_param(&self) -> String {
        match self {
            Value::Str(s) => s.clone(),
            other => other.to_string(),
        }
    }
}

/// Where a key's default comes from.
#[derive(Clone, Copy, Debug)]
pub enum Default {
    /// No default: the key is unset unless a source sets it.
    None,
    /// A fixed value, written as it would be in the environment.
    Fixed(&'static str),
    /// Computed when loading (current directory, user name).
    Computed(&'static str),
}

/// One scalar key.
#[derive(Clone, Copy, Debug)]
pub struct Key {
    /// The key, lower case.
    pub name: &'static str,
    /// Its type.
    pub ty: Type,
    /// Its default.
    pub default: Default,
    /// One line on what it means (and why the default, where we differ from SCR).
    pub doc: &'static str,
}

impl Key {
    /// The environment variable that sets this key.
    pub fn env_var(&self) -> String {
        format!("SCR_{}", self.name.to_ascii_uppercase())
    }
}

const U: Type = Type::UInt {
    min: 0,
    max: u64::MAX,
};

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

/// Every scalar key, in the order `scr config show` prints them.
pub const KEYS: &[Key] = &[
    Key { name: "enable", ty: Type::Bool, default: Default::Fixed("true"),
          doc: "Turn the library on; when false nothing is cached, protected, flushed or fetched and route_file returns the application's own path; the C API's other calls (SCR_Init included) return SCR_FAILURE, as SCR's do, while the Rust API passes them through" },
    Key { name: "debug", ty: Type::UInt { min: 0, max: 5 }, default: Default::Fixed("0"),
          doc: "Log verbosity: 0 silent, 1 summary and timings on rank 0, 2+ detail" },
    Key { name: "prefix", ty: Type::Path, default: Default::Computed("the current working directory"),
          doc: "Parallel file system directory holding flushed datasets and .scr/" },
    Key { name: "cntl_base", ty: Type::Path, default: Default::Fixed("/dev/shm"),
          doc: "Node-local base of the control directory <cntl_base>/<user>/scr.<jobid>" },
    Key { name: "cache_base", ty: Type::Path, default: Default::Fixed("/dev/shm"),
          doc: "Default node-local store for checkpoints (SCR used /tmp; tmpfs is node-local and fast everywhere, /tmp is often disk or shared in containers)" },
    Key { name: "cache_size", ty: Type::UInt { min: 1, max: u64::MAX }, default: Default::Fixed("2"),
          doc: "Datasets kept per store when the store sets no count (SCR used 1; 2 keeps the previous checkpoint while the next one is written)" },
    Key { name: "cache_bypass", ty: Type::Bool, default: Default::Fixed("false"),
          doc: "Checkpoint descriptors that set no `bypass` write their files straight to the prefix: no cache, no redundancy, recorded in the index as flushed (SCR 3.1 defaults to 1; here the cache is the default, since it is what protects and speeds up checkpoints)" },
    Key { name: "copy_type", ty: Type::Str, default: Default::Fixed("XOR"),
          doc: "Redundancy scheme of the implied checkpoint descriptor (SINGLE, PARTNER, XOR, RS or a plugin's)" },
    Key { name: "set_size", ty: Type::UInt { min: 2, max: 4096 }, default: Default::Fixed("8"),
          doc: "Members per redundancy set for XOR and RS" },
    Key { name: "set_failures", ty: Type::UInt { min: 1, max: 255 }, default: Default::Fixed("2"),
          doc: "Losses per set the RS scheme tolerates" },
    Key { name: "replicas", ty: Type::UInt { min: 1, max: 4095 }, default: Default::Fixed("1"),
          doc: "Copies PARTNER keeps of each member's files on other failure groups" },
    Key { name: "group", ty: Type::Str, default: Default::Fixed("NODE"),
          doc: "Failure group of the implied checkpoint descriptor and of stores that name none" },
    Key { name: "flush", ty: U, default: Default::Fixed("10"),
          doc: "Flush every N-th checkpoint to the prefix; 0 never" },
    Key { name: "flush_async", ty: Type::Bool, default: Default::Fixed("false"),
          doc: "Flush in the background while the application computes" },
    Key { name: "flush_width", ty: Type::UInt { min: 1, max: u64::MAX }, default: Default::Fixed("256"),
          doc: "At most this many ranks copy to the prefix at once in a flush (SCR_FLUSH_WIDTH), so a large job does not swamp the parallel file system: a sliding window by rank, rank r starts when rank r-N finished. Bounds the foreground flushes and a resumed one at init; a background flush (flush_async) starts every rank's transfer at once, as SCR's does, and is paced by its transfer type" },
    Key { name: "fetch_width", ty: Type::UInt { min: 1, max: u64::MAX }, default: Default::Fixed("256"),
          doc: "At most this many ranks read from the prefix at once when a restart fetches a checkpoint, or checks its files in place with fetch = false (SCR_FETCH_WIDTH); a sliding window by rank as flush_width" },
    Key { name: "flush_type", ty: Type::Str, default: Default::Fixed("pthread"),
          doc: "Transfer type for flushes from stores that name none" },
    Key { name: "flush_poststage", ty: Type::Bool, default: Default::Fixed("false"),
          doc: "SCR's hand-over of background flushes to a post-stage script after the job (IBM burst buffer only); not available here: setting it makes init say so, and finalize completes every background flush as usual" },
    Key { name: "flush_on_restart", ty: Type::Bool, default: Default::Fixed("false"),
          doc: "At init, flush the checkpoint restored from cache unless the prefix holds it already" },
    Key { name: "flush_on_finalize", ty: Type::Bool, default: Default::Fixed("true"),
          doc: "At finalize (and when a halt condition ends the run), flush the newest checkpoint unless the prefix holds it already (with flush = 0 nothing is flushed)" },
    Key { name: "fetch", ty: Type::Bool, default: Default::Fixed("true"),
          doc: "Fetch the newest checkpoint from the prefix at init when cache holds none" },
    Key { name: "fetch_bypass", ty: Type::Bool, default: Default::Fixed("false"),
          doc: "A checkpoint only the prefix holds is read in place there at restart (its files checked first) instead of fetched into cache, as with fetch = false" },
    Key { name: "cache_purge", ty: Type::Bool, default: Default::Fixed("false"),
          doc: "Delete every dataset from cache at init (on every node) and restart from the prefix: for testing and while integrating the library" },
    Key { name: "current", ty: Type::Str, default: Default::None,
          doc: "The checkpoint to restart from, by name, as if the application called SCR_Current(name) before its first have_restart (SCR's SCR_CURRENT); a name neither the cache nor the prefix holds is a warning from rank 0 and the usual newest checkpoint is taken; applied once per job, as SCR does, so a relaunch in the same allocation restarts from its own newest checkpoint" },
    Key { name: "drop_after_current", ty: Type::Bool, default: Default::Fixed("false"),
          doc: "When a checkpoint is chosen by `current` or SCR_Current, drop every dataset newer than it (checkpoints and outputs) from the prefix's index, their files left in place, so the run continues from the older point and no later restart takes a newer one (SCR's rule)" },
    Key { name: "global_restart", ty: Type::Bool, default: Default::Fixed("false"),
          doc: "The application must restart from the prefix (SCR's SCR_GLOBAL_RESTART): the cached restart checkpoint is flushed first (flush_on_restart forced on), the cache is then cleared, and the restart reads the checkpoint in place in the prefix instead of fetching it into cache" },
    Key { name: "prefix_size", ty: U, default: Default::Fixed("0"),
          doc: "Keep a window of N checkpoints in the prefix (SCR's sliding window): after a checkpoint's flush is recorded, it and the N-1 next older complete checkpoints stay, and every older one is deleted (files and index entries, as SCR_Delete does) unless it is also flagged output or is the index's current one; failed or incomplete entries and outputs that are not checkpoints are left alone; 0 keeps all" },
    Key { name: "prefix_purge", ty: Type::Bool, default: Default::Fixed("false"),
          doc: "At init, before a restart is chosen, delete every dataset the prefix's index lists, checkpoints and outputs (files and entries): a fresh start that keeps no earlier result (SCR's SCR_PREFIX_PURGE)" },
    Key { name: "distribute", ty: Type::Bool, default: Default::Fixed("true"),
          doc: "Move cached files to their owner ranks at init when ranks changed nodes; false: purge the cache at init and restart from the prefix (fetch)" },
    Key { name: "crc_on_copy", ty: Type::Bool, default: Default::Fixed("true"),
          doc: "Record CRC32 of files at complete_output (SCR: false). It costs one read of the data: a 256 MiB-per-rank SINGLE checkpoint on tmpfs took 1.0x a plain write without it and 1.7-1.9x with it (scr-bench-single); we default to detecting silent corruption" },
    Key { name: "crc_on_copy_defer", ty: Type::Bool, default: Default::Fixed("true"),
          doc: "With crc_on_copy, hash the files of a dataset whose scheme keeps no redundancy data (tolerates no loss and names no redundancy file, as SINGLE) in a background thread of each process while the application computes, instead of reading them back inside complete_output; the CRC32s are recorded at a later API call, always before the dataset is flushed or restarted from and before finalize returns (deleting the dataset first cancels its hash), and a later run does not restore a dataset whose CRC32s were never recorded (with crc_on_restart). The CRC32 is of the bytes as the thread read them. false: read them in complete_output, as before" },
    Key { name: "crc_on_restart", ty: Type::Bool, default: Default::Fixed("true"),
          doc: "Check every cached file against its recorded size and CRC32 at init, before it is offered for restart, read by a rebuild, or recorded as rebuilt; a file that fails counts as lost. It costs one read of the cached data at init" },
    Key { name: "crc_on_flush", ty: Type::Bool, default: Default::Fixed("true"),
          doc: "Also ask the transfer type for the CRC32 of what it copied, checked against the host's; the host re-reads every flushed or fetched file and checks its size and CRC32 in any case. For a dataset that bypasses the cache (nothing is copied), whether complete_output reads its files back for a CRC32 (read once per file, by the lowest rank writing it); without one, a restart checks their sizes only" },
    Key { name: "crc_on_delete", ty: Type::Bool, default: Default::Fixed("false"),
          doc: "Check each file's CRC32 before a dataset is deleted from cache and warn, naming rank and file, when the cache damaged it (the files are deleted either way)" },
    Key { name: "checkpoint_interval", ty: U, default: Default::Fixed("0"),
          doc: "need_checkpoint says yes every N calls; 0 disables this rule" },
    Key { name: "checkpoint_seconds", ty: U, default: Default::Fixed("0"),
          doc: "need_checkpoint says yes after N seconds since the last checkpoint; 0 disables" },
    Key { name: "checkpoint_overhead", ty: Type::Percent, default: Default::Fixed("0"),
          doc: "need_checkpoint keeps checkpoint time under this percent of run time; 0 disables" },
    Key { name: "halt_seconds", ty: U, default: Default::Fixed("0"),
          doc: "Halt when fewer than N seconds remain in the allocation; 0 disables" },
    Key { name: "halt_exit", ty: Type::Bool, default: Default::Fixed("false"),
          doc: "When a halt condition holds at init or after a checkpoint, finalize, finalize MPI and exit with status 0 inside the library (else the application asks should_exit)" },
    Key { name: "abort_timeout", ty: Type::UInt { min: 1, max: 86400 }, default: Default::Fixed("60"),
          doc: "Seconds a member whose collective scheme call failed alone (an error or a caught panic in the plugin) waits for the other members of its set to return before it ends the job with MPI_Abort, so that none waits forever" },
    Key { name: "mpi_buf_size", ty: Type::Bytes, default: Default::Fixed("1MiB"),
          doc: "Piece size of redundancy exchanges (SCR: 128KB; 1 MiB stays cache-resident and halves message overhead)" },
    Key { name: "file_buf_size", ty: Type::Bytes, default: Default::Fixed("1MiB"),
          doc: "Buffer size of file copies (measured fastest on local disks)" },
    Key { name: "rank2file_block", ty: Type::UInt { min: 1, max: 1048576 }, default: Default::Fixed("256"),
          doc: "Ranks per part of a flushed dataset's rank2file map: each block's first rank gathers and writes its block's file lists and hands them out again at fetch, so no rank handles more than this many ranks' lists (small values are for tests)" },
    Key { name: "job_id", ty: Type::Str, default: Default::Computed("SCR_JOB_ID, else SLURM_JOBID, LSB_JOBID, FLUX_JOB_ID or PBS_JOBID, else \"0\""),
          doc: "Job id used in cache and control directory names" },
    Key { name: "job_name", ty: Type::Str, default: Default::None,
          doc: "Job name recorded with each flushed dataset in the index (shown by `scr index list`)" },
    Key { name: "node_names", ty: Type::Str, default: Default::None,
          doc: "Testing only: comma-separated node name of each rank (by world rank), so one machine acts as several nodes; node-local stores and the control directory then include the node name" },
    Key { name: "user", ty: Type::Str, default: Default::Computed("$USER, else the uid"),
          doc: "User name used in cache and control directory names" },
    // walltime and event log (issue 10, "events")
    Key { name: "end_time", ty: U, default: Default::Fixed("0"),
          doc: "When the allocation ends, in seconds since the epoch (e.g. SCR_END_TIME=$(( $(date +%s) + 3600 ))); wins over the resource manager's end time, which halt_seconds otherwise counts from; 0 asks the resource manager (SLURM, Flux, LSF, PBS)" },
    // logging (SCR's SCR_LOG_*): the event log in the prefix is what `scr log` reads
    Key { name: "log_enable", ty: Type::Bool, default: Default::Fixed("true"),
          doc: "Record the job's events (init, checkpoints, flushes, fetches, failures, finalize); SCR defaults to off, we to on because `scr log` computes checkpoint cost and time between failures from them; false records nothing anywhere" },
    Key { name: "log_txt_enable", ty: Type::Bool, default: Default::Fixed("true"),
          doc: "With log_enable, rank 0 appends each event as one JSON line to <prefix>/.scr/events.jsonl (SCR's text log); false writes no such file, and `scr log` then has nothing to read" },
    Key { name: "log_syslog_enable", ty: Type::Bool, default: Default::Fixed("false"),
          doc: "With log_enable, rank 0 also sends each event as one line to syslog (ident log_syslog_prefix, facility log_syslog_facility, level log_syslog_level); SCR defaults to on, we to off so that test and laptop runs do not fill the system log" },
    Key { name: "log_syslog_prefix", ty: Type::Str, default: Default::Fixed("SCR"),
          doc: "The ident syslog lines carry (SCR sets it when built; here at run time)" },
    Key { name: "log_syslog_facility", ty: Type::Choice(SYSLOG_FACILITIES), default: Default::Fixed("LOG_LOCAL7"),
          doc: "The syslog facility of the event lines (SCR's build-time SCR_LOG_SYSLOG_FACILITY, here at run time)" },
    Key { name: "log_syslog_level", ty: Type::Choice(SYSLOG_LEVELS), default: Default::Fixed("LOG_INFO"),
          doc: "The syslog level of the event lines (SCR's build-time SCR_LOG_SYSLOG_LEVEL, here at run time)" },
    Key { name: "log_db_enable", ty: Type::Bool, default: Default::Fixed("false"),
          doc: "SCR's MySQL event database; not available here: true makes rank 0 warn once at init and say where the events go instead (the event log, syslog), and the run continues" },
    Key { name: "log_db_debug", ty: U, default: Default::Fixed("0"),
          doc: "SCR: echo the database's SQL statements; only matters with log_db_enable, which is not available here (accepted so SCR configurations load)" },
    Key { name: "log_db_host", ty: Type::Str, default: Default::None,
          doc: "SCR: the database server; only matters with log_db_enable, which is not available here (accepted so SCR configurations load)" },
    Key { name: "log_db_user", ty: Type::Str, default: Default::None,
          doc: "SCR: the database user; only matters with log_db_enable, which is not available here (accepted so SCR configurations load)" },
    Key { name: "log_db_pass", ty: Type::Str, default: Default::None,
          doc: "SCR: the database password; only matters with log_db_enable, which is not available here (accepted so SCR configurations load; prefer not to set it at all)" },
    Key { name: "log_db_name", ty: Type::Str, default: Default::None,
          doc: "SCR: the database name; only matters with log_db_enable, which is not available here (accepted so SCR configurations load)" },
    // where the user file is
    Key { name: "conf_file", ty: Type::Path, default: Default::None,
          doc: "The user configuration file (SCR_CONF_FILE), read instead of <prefix>/.scrconf.toml; set in the environment or through SCR_Config before init, where the API's value wins over the environment's as SCR's API values do (a configuration file cannot name it)" },
    // `scr run`, `scr nodes down`, `scr env` (the launch part)
    Key { name: "nodelist", ty: Type::Str, default: Default::None,
          doc: "The allocation's nodes as a host list (node[1-4,7]); unset: SLURM_JOB_NODELIST, SLURM_NODELIST, `flux getattr hostlist`, LSB_MCPU_HOSTS, LSB_HOSTS, PBS_NODEFILE, node_names, this host (first found)" },
    Key { name: "exclude_nodes", ty: Type::Str, default: Default::None,
          doc: "Nodes `scr run` never launches on (a host list); nodes it finds down are added for the rest of the allocation" },
    Key { name: "min_nodes", ty: U, default: Default::Fixed("0"),
          doc: "`scr run` stops relaunching when fewer nodes than this are left; 0: as many as the previous run used (the nodes file its rank 0 wrote in the prefix at init), else as many as the first launch used" },
    Key { name: "runs", ty: Type::UInt { min: 1, max: u64::MAX }, default: Default::Fixed("1"),
          doc: "Launches `scr run` makes in all (the first and the relaunches after failures)" },
    Key { name: "watchdog_timeout", ty: U, default: Default::Fixed("0"),
          doc: "`scr run` kills a job step that shows no progress (no output line, no file changed in the prefix's .scr, cache or control directories) for N seconds, and relaunches; 0 disables" },
    Key { name: "watchdog_timeout_pfs", ty: U, default: Default::Fixed("0"),
          doc: "The watchdog's timeout (`watchdog_timeout`) while a flush to the prefix is open in the index, which takes longer than a write to cache; 0: `watchdog_timeout` throughout" },
    Key { name: "down_nodes_script", ty: Type::Path, default: Default::None,
          doc: "Site script run with the node names as arguments; each `NODE REASON` line it prints marks that node down for `scr run` and `scr nodes down`" },
    Key { name: "remote_runner", ty: Type::Str, default: Default::None,
          doc: "How `scr postrun` and `scr run` reach another node of the allocation: a command template with {node} and {cmd} (one shell-quoted string; appended when absent), e.g. `ssh {node} {cmd}` or `pdsh -S -N -w {node} {cmd}`; `none`: this host only; unset: srun inside SLURM, `flux exec` inside Flux, else pdsh when installed, else this host only" },
    Key { name: "remote_timeout", ty: Type::UInt { min: 1, max: 86_400 }, default: Default::Fixed("30"),
          doc: "Seconds a node may take to answer through the remote runner — `scr run`'s node check (asked twice before the node counts as down) and `scr postrun`'s question what its cache holds (a node that does not answer is not reached and left out); the copy itself has no limit" },
    Key { name: "remote_fanout", ty: Type::UInt { min: 1, max: 256 }, default: Default::Fixed("32"),
          doc: "Nodes `scr postrun` and `scr run` work on at once through the remote runner (pdsh's fan-out; each holds a runner process and its pipes)" },
    Key { name: "cache_free", ty: Type::Bytes, default: Default::None,
          doc: "Free space each node-local store must have for `scr run` to use the node; unset: the store's dataset count times the largest indexed dataset's bytes per node" },
];

/// Other names of keys, as SCR spells them (`SCR_USER_NAME` sets `user`): accepted
/// wherever the key's own name is (files, environment, the API); the key's own name wins
/// in the environment when both are set.
pub const ALIASES: &[(&str, &str)] = &[("user_name", "user"), ("halt_enabled", "halt_exit")];

/// Look a scalar key up by name or alias (case-insensitive).
pub fn find(name: &str) -> Option<&'static Key> {
    let name = ALIASES
        .iter()
        .find(|(alias, _)| alias.eq_ignore_ascii_case(name))
        .map_or(name, |(_, key)| key);
    KEYS.iter().find(|k| k.name.eq_ignore_ascii_case(name))
}

/// The environment variables that set `key`: its own first, then its aliases'.
pub fn env_vars(key: &Key) -> Vec<String> {
    std::iter::once(key.env_var())
        .chain(
            ALIASES
                .iter()
                .filter(|(_, k)| *k == key.name)
                .map(|(alias, _)| format!("SCR_{}", alias.to_ascii_uppercase())),
        )
        .collect()
}

/// Look a key up as an application may spell it through the API: `cache_size`,
/// `CACHE_SIZE` or `SCR_CACHE_SIZE` (SCR's `SCR_Config` accepts the parameter names).
pub fn find_api(name: &str) -> Option<&'static Key> {
    let n = name.trim();
    find(n).or_else(|| {
        n.get(..4)
            .filter(|p| p.eq_ignore_ascii_case("scr_"))
            .and_then(|_| find(&n[4..]))
    })
}

/// Why a value does not fit its key's type (the message after the key's name).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ValueError {
    /// Text that does not parse as the type.
    #[error("\"{text}\" is not {ty}")]
    NotA {
        /// The text, as written.
        text: String,
        /// The type it must have.
        ty: Type,
    },
    /// An empty string where text is required.
    #[error("an empty value is not {0}")]
    Empty(Type),
    /// A whole number outside the type's range.
    #[error("{n} is out of range: expected {ty}")]
    OutOfRange {
        /// The number.
        n: u64,
        /// The type, with its range.
        ty: Type,
    },
    /// A percentage outside `0..=100`.
    #[error("{0} is out of range: expected {percent}", percent = Type::Percent)]
    PercentOutOfRange(f64),
    /// A configuration file's value of another TOML type.
    #[error("expected {ty}, found {found}")]
    Expected {
        /// The type it must have.
        ty: Type,
        /// What was found (`string "x"`, `integer 3`, ...).
        found: String,
    },
    /// A negative integer in a configuration file.
    #[error("{n} is negative: expected {ty}")]
    Negative {
        /// The number.
        n: i64,
        /// The type it must have.
        ty: Type,
    },
}

/// Parse a value written as text (environment, API, defaults) for `ty`.
pub fn parse_text(ty: Type, text: &str) -> Result<Value, ValueError> {
    let t = text.trim();
    let bad = || ValueError::NotA {
        text: text.to_string(),
        ty,
    };
    match ty {
        Type::Bool => match t.to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(Value::Bool(true)),
            "0" | "false" | "no" | "off" => Ok(Value::Bool(false)),
            _ => Err(bad()),
        },
        Type::UInt { .. } => t
            .parse::<u64>()
            .map_err(|_| bad())
            .and_then(|n| check_uint(ty, n)),
        Type::Bytes => parse_bytes(t).map(Value::UInt).ok_or_else(bad),
        Type::Percent => t.parse::<f64>().map_err(|_| bad()).and_then(check_percent),
        Type::Str | Type::Path => {
            if t.is_empty() {
                Err(ValueError::Empty(ty))
            } else {
                Ok(Value::Str(t.to_string()))
            }
        }
        Type::Choice(words) => words
            .iter()
            .find(|w| w.eq_ignore_ascii_case(t))
            .map(|w| Value::Str(w.to_string()))
            .ok_or_else(bad),
    }
}

/// Range-check a whole number.
pub fn check_uint(ty: Type, n: u64) -> Result<Value, ValueError> {
    match ty {
        Type::UInt { min, max } if n < min || n > max => Err(ValueError::OutOfRange { n, ty }),
        _ => Ok(Value::UInt(n)),
    }
}

/// Range-check a percentage.
pub fn check_percent(x: f64) -> Result<Value, ValueError> {
    if (0.0..=100.0).contains(&x) {
        Ok(Value::Float(x))
    } else {
        Err(ValueError::PercentOutOfRange(x))
    }
}

/// `123`, `64KB`, `64K`, `1MiB`, `2 GB`, `1.5GB`: K/M/G/T/P are powers of 1024 (SCR's
/// convention), an optional `B`/`iB` suffix is accepted.
pub fn parse_bytes(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let unit = unit.trim().to_ascii_lowercase();
    let unit = unit
        .strip_suffix("ib")
        .or_else(|| unit.strip_suffix('b'))
        .unwrap_or(&unit);
    let shift = match unit {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        "p" => 50,
        _ => return None,
    };
    if num.contains('.') {
        let x: f64 = num.parse().ok()?;
        let v = x * (1u64 << shift) as f64;
        (v.is_finite() && v >= 0.0 && v < u64::MAX as f64).then_some(v as u64)
    } else {
        num.parse::<u64>().ok()?.checked_mul(1u64 << shift)
    }
}

/// "unknown key `k` (did you mean `x`?)" for a scalar key name.
pub fn unknown_key(k: &str) -> String {
    let bare = k
        .get(..4)
        .filter(|p| p.eq_ignore_ascii_case("scr_"))
        .map_or(k, |_| &k[4..]);
    let hint = suggest(bare, KEYS.iter().map(|k| k.name))
        .map(|s| format!(" (did you mean `{s}`?)"))
        .unwrap_or_default();
    format!("unknown key `{k}`{hint}")
}

/// The closest known word to `word`, for "did you mean" hints.
pub fn suggest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let w = word.to_ascii_lowercase();
    candidates
        .into_iter()
        .map(|c| (edit_distance(&w, &c.to_ascii_lowercase()), c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 4))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sizes_use_powers_of_1024() {
        assert_eq!(parse_bytes("131072"), Some(131072));
        assert_eq!(parse_bytes("128KB"), Some(128 << 10));
        assert_eq!(parse_bytes("1MiB"), Some(1 << 20));
        assert_eq!(parse_bytes("2 gb"), Some(2 << 30));
        assert_eq!(parse_bytes("1.5K"), Some(1536));
        assert_eq!(parse_bytes("12XB"), None);
        assert_eq!(parse_bytes("-1"), None);
        assert_eq!(parse_bytes("99999999999P"), None);
    }

    #[test]
    fn text_values_are_typed_and_range_checked() {
        let size = find("SET_SIZE").unwrap();
        assert_eq!(parse_text(size.ty, "16"), Ok(Value::UInt(16)));
        assert_eq!(
            parse_text(size.ty, "1").unwrap_err().to_string(),
            "1 is out of range: expected a whole number in 2..=4096"
        );
        assert_eq!(parse_text(Type::Bool, "yes"), Ok(Value::Bool(true)));
        assert_eq!(
            parse_text(Type::Bool, "maybe").unwrap_err().to_string(),
            "\"maybe\" is not a boolean (true or false)"
        );
        assert!(parse_text(Type::Percent, "101").is_err());
    }

    #[test]
    fn every_fixed_default_parses_as_its_type() {
        for k in KEYS {
            if let Default::Fixed(text) = k.default {
                assert!(parse_text(k.ty, text).is_ok(), "default of {}", k.name);
            }
        }
    }

    #[test]
    fn scr_names_of_keys_are_aliases() {
        assert_eq!(find("user_name").map(|k| k.name), Some("user"));
        assert_eq!(find_api("SCR_USER_NAME").map(|k| k.name), Some("user"));
        assert_eq!(
            env_vars(find("user").unwrap()),
            ["SCR_USER", "SCR_USER_NAME"]
        );
    }

    #[test]
    fn suggestions_catch_typos_only() {
        let names = KEYS.iter().map(|k| k.name);
        assert_eq!(suggest("cache_bse", names.clone()), Some("cache_base"));
        assert_eq!(suggest("zzzzzz", names), None);
    }
}
