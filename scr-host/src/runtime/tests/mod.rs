//! The runtime's logic in-process: threads act as ranks over the in-process
//! [`World`](super::world::World) (`world::inproc`), so agreement, the configuration
//! check, output, restart and the rebuild of a lost node run without `mpiexec`.
//!
//! The full-lifecycle test loads the shipped scheme plugins from the build's target
//! directory (as the runtime does in development); the workspace build that precedes the
//! test suite makes them.
//!
//! This module holds the scaffolding every topic shares (the simulated job's loader, a
//! job of runtimes with or without their log lines, writing and reading checkpoints); the
//! tests are split by topic:
//!
//! | topic | module |
//! |---|---|
//! | the same outcome on every rank: failures, the configuration check, misuse | `agreement` |
//! | init restoring the cache: a lost node rebuilt, the flush file, the node count | `restore` |
//! | the restart offered, its fallback, files named by base name | `restart` |
//! | a restart by another number of ranks than wrote the checkpoint | `resize` |
//! | eviction, drop and delete | `evict` |
//! | need_checkpoint's interval and the halt condition | `policy` |
//! | cache bypass: files written and read in the prefix itself | `bypass` |
//! | `flush_width`/`fetch_width`: the window to the prefix | `width` |
//! | SCR 3.1's restart and prefix keys (`current`, `drop_after_current`, `prefix_size`, `prefix_purge`, `global_restart`) | `restart_keys` |
//! | the SCR_LOG_* keys | `event_log` |
//! | a scheme plugin panicking on one member | `plugin_panic` |
//! | `crc_on_copy_defer`: CRC32s hashed in the background | `crc_defer` |
//! | a disabled library (`enable = false`): calls passed through, in order | `disabled` |

mod agreement;
mod background;
mod bypass;
mod crc_defer;
mod disabled;
mod event_log;
mod evict;
mod plugin_panic;
mod policy;
mod resize;
mod restart;
mod restart_keys;
mod restore;
mod width;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::world::inproc::run_ranks;
use super::world::World;
use super::*;
use crate::config::Loader;

/// The job id and user of the in-process jobs (fixed: the paths the tests look at are
/// the ones the runtime made, whatever the environment says).
const JOB: &str = "inproc";

const USER: &str = "tester";

/// A loader for a job on simulated nodes `nodes` (one entry per rank) in `dir`, with
/// `extra` variables.
fn loader(dir: &Path, nodes: &[&str], extra: &[(&str, &str)]) -> Loader {
    let mut l = Loader::from_process();
    let mut env: BTreeMap<String, String> = [
        ("SCR_PREFIX", dir.join("prefix").display().to_string()),
        ("SCR_CACHE_BASE", dir.join("cache").display().to_string()),
        ("SCR_CNTL_BASE", dir.join("cntl").display().to_string()),
        ("SCR_JOB_ID", JOB.to_string()),
        ("SCR_USER", USER.to_string()),
        ("SCR_NODE_NAMES", nodes.join(",")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    for (k, v) in extra {
        env.insert(k.to_string(), v.to_string());
    }
    l.env = env;
    l.system_file = Some(PathBuf::from("/dev/null"));
    l.cwd = dir.join("prefix");
    l
}

fn error_text<T>(r: &Result<T>) -> String {
    r.as_ref().err().map(|e| e.to_string()).unwrap_or_default()
}

/// What one rank writes for checkpoint `step`.
fn content(rank: u32, step: u32) -> Vec<u8> {
    (0..3000u32)
        .map(|i| (i.wrapping_mul(31) ^ (rank * 7) ^ step) as u8)
        .collect()
}

/// One run: init, then either write checkpoint `write` or read back the restart.
fn run(dir: &Path, nodes: &[&str], write: Option<u32>) -> Vec<std::result::Result<String, String>> {
    run_with(
        dir,
        nodes,
        &[("SCR_COPY_TYPE", "XOR"), ("SCR_FLUSH", "0")],
        write,
    )
}

/// [`run`] with the settings `env`.
fn run_with(
    dir: &Path,
    nodes: &[&str],
    env: &[(&str, &str)],
    write: Option<u32>,
) -> Vec<std::result::Result<String, String>> {
    run_ranks(nodes.len() as u32, |w: Box<dyn World>| {
        let me = w.rank();
        let l = loader(dir, nodes, env);
        let mut rt = init_hooked(w, l, InitOptions::default()).map_err(|e| e.to_string())?;
        let outcome = match write {
            Some(step) => (|| {
                rt.start_output(
                    &format!("ckpt.{step}"),
                    OutputFlags {
                        checkpoint: true,
                        output: false,
                    },
                )?;
                let path = rt.route_file(&dir.join("prefix").join(format!("rank_{me}.dat")))?;
                std::fs::write(&path, content(me, step)).map_err(io_err(&path))?;
                rt.complete_output(true)?;
                Ok::<String, ScrError>(format!("wrote ckpt.{step}"))
            })(),
            None => (|| {
                let Some(name) = rt.have_restart() else {
                    return Ok("no restart".to_string());
                };
                rt.start_restart()?;
                let path = rt.route_file(&dir.join("prefix").join(format!("rank_{me}.dat")))?;
                let bytes = std::fs::read(&path).map_err(io_err(&path))?;
                let step: u32 = name.trim_start_matches("ckpt.").parse().unwrap_or(0);
                rt.complete_restart(bytes == content(me, step))?;
                Ok(if bytes == content(me, step) {
                    format!("restarted from {name}, byte-exact")
                } else {
                    format!("restarted from {name}, bytes differ")
                })
            })(),
        };
        let end = rt.finalize();
        let outcome = outcome.map_err(|e| e.to_string())?;
        end.map_err(|e| e.to_string())?;
        Ok(outcome)
    })
}

/// Run `f` on every rank's runtime (a job on `nodes`, with `extra` variables), then
/// finalize: each rank's report and whether its finalize succeeded.
fn job<T: Send>(
    dir: &Path,
    nodes: &[&str],
    extra: &[(&str, &str)],
    f: impl Fn(&mut Runtime, u32) -> T + Sync,
) -> Vec<(T, std::result::Result<(), String>)> {
    std::fs::create_dir_all(dir.join("prefix")).unwrap();
    run_ranks(nodes.len() as u32, |w: Box<dyn World>| {
        let me = w.rank();
        let mut rt = init_hooked(w, loader(dir, nodes, extra), InitOptions::default())
            .unwrap_or_else(|e| panic!("rank {me}: init: {e}"));
        let report = f(&mut rt, me);
        (report, rt.finalize().map_err(|e| e.to_string()))
    })
}

/// [`job`] with each rank's log lines (as the runtime prints them) beside its report.
fn job_logged<T: Send>(
    dir: &Path,
    nodes: &[&str],
    extra: &[(&str, &str)],
    f: impl Fn(&mut Runtime, u32) -> T + Sync,
) -> Vec<(T, std::result::Result<(), String>, Vec<String>)> {
    use tracing_subscriber::layer::SubscriberExt as _;
    std::fs::create_dir_all(dir.join("prefix")).unwrap();
    run_ranks(nodes.len() as u32, |w: Box<dyn World>| {
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = lines.clone();
        let layer =
            crate::log::ScrLayer::new(move |l: &str| sink.lock().unwrap().push(l.to_string()));
        let subscriber = tracing_subscriber::registry().with(layer);
        let (report, end) = tracing::subscriber::with_default(subscriber, || {
            let me = w.rank();
            let mut rt = init_hooked(w, loader(dir, nodes, extra), InitOptions::default())
                .unwrap_or_else(|e| panic!("rank {me}: init: {e}"));
            let report = f(&mut rt, me);
            (report, rt.finalize().map_err(|e| e.to_string()))
        });
        let lines = lines.lock().unwrap().clone();
        (report, end, lines)
    })
}

/// `what: ok VALUE` or `what: ERROR`, as the end-to-end probe reports a call.
fn show<T: std::fmt::Display>(what: &str, r: Result<T>) -> String {
    match r {
        Ok(v) => format!("{what}: ok {v}"),
        Err(e) => format!("{what}: {e}"),
    }
}

const CHECKPOINT: OutputFlags = OutputFlags {
    checkpoint: true,
    output: false,
};

/// Write checkpoint `name` (one file `file` per rank in the prefix directory).
fn write_checkpoint(rt: &mut Runtime, dir: &Path, name: &str, file: &str) -> Result<bool> {
    write_dataset(rt, dir, name, file, CHECKPOINT)
}

/// Dataset `name` with `flags`, one file `file` holding "`name` `file`".
fn write_dataset(
    rt: &mut Runtime,
    dir: &Path,
    name: &str,
    file: &str,
    flags: OutputFlags,
) -> Result<bool> {
    rt.start_output(name, flags)?;
    let p = rt.route_file(&dir.join("prefix").join(file))?;
    std::fs::write(&p, format!("{name} {file}")).map_err(io_err(&p))?;
    rt.complete_output(true)
}

/// An output dataset that is not a checkpoint.
const OUTPUT: OutputFlags = OutputFlags {
    checkpoint: false,
    output: true,
};

/// Node `node`'s job directory in the cache (see [`loader`]).
fn cache_job_dir(dir: &Path, node: &str) -> PathBuf {
    crate::layout::job_dir(&dir.join("cache"), true, node, USER, JOB)
}

/// The names of what `dir` holds, sorted; the directory must exist (a wrong path must
/// not pass for an empty directory).
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// [`job_logged`] with init options: `fetch_at_have_restart` runs as the C API does (the
/// fetch waits for the first `have_restart_fetching`, which `f` calls through
/// [`restart_name`]).
fn job_with<T: Send>(
    dir: &Path,
    nodes: &[&str],
    extra: &[(&str, &str)],
    options: InitOptions,
    f: impl Fn(&mut Runtime, u32) -> T + Sync,
) -> Vec<(T, std::result::Result<(), String>, Vec<String>)> {
    use tracing_subscriber::layer::SubscriberExt as _;
    std::fs::create_dir_all(dir.join("prefix")).unwrap();
    run_ranks(nodes.len() as u32, |w: Box<dyn World>| {
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = lines.clone();
        let layer =
            crate::log::ScrLayer::new(move |l: &str| sink.lock().unwrap().push(l.to_string()));
        let subscriber = tracing_subscriber::registry().with(layer);
        let (report, end) = tracing::subscriber::with_default(subscriber, || {
            let me = w.rank();
            let mut rt = init_hooked(w, loader(dir, nodes, extra), options.clone())
                .unwrap_or_else(|e| panic!("rank {me}: init: {e}"));
            let report = f(&mut rt, me);
            (report, rt.finalize().map_err(|e| e.to_string()))
        });
        let lines = lines.lock().unwrap().clone();
        (report, end, lines)
    })
}

/// The restart offered, asked the way the init mode expects.
fn restart_name(rt: &mut Runtime) -> Option<String> {
    rt.have_restart_fetching().expect("have_restart")
}

/// Read back the offered checkpoint (files `f<n>_<rank>` in the prefix, as
/// [`write_checkpoint`] wrote them): `"<name> exact"` when every byte is right, with
/// whether the file was read in place in the prefix or from cache.
fn read_back(rt: &mut Runtime, prefix: &Path, r: u32) -> String {
    let Some(name) = restart_name(rt) else {
        return "no restart".into();
    };
    rt.start_restart().expect("start_restart");
    let n: u32 = name.trim_start_matches("ckpt.").parse().unwrap();
    let file = format!("f{n}_{r}");
    let path = rt.route_file(&prefix.join(&file)).expect("route_file");
    let exact = std::fs::read_to_string(&path).unwrap_or_default() == format!("{name} {file}");
    let place = if path.starts_with(prefix) {
        "prefix"
    } else {
        "cache"
    };
    assert!(rt.complete_restart(exact).expect("complete_restart"));
    format!("{name} exact={exact} from {place}")
}

/// Write checkpoints `ckpt.<first>..=ckpt.<last>` (each rank one file `f<n>_<rank>`).
fn write_range(rt: &mut Runtime, dir: &Path, r: u32, range: std::ops::RangeInclusive<u32>) {
    for n in range {
        write_checkpoint(rt, dir, &format!("ckpt.{n}"), &format!("f{n}_{r}"))
            .unwrap_or_else(|e| panic!("rank {r}: ckpt.{n}: {e}"));
    }
}

/// Lines of rank 0's log containing `what`.
fn said<'a>(lines: &'a [String], what: &str) -> Vec<&'a String> {
    lines.iter().filter(|l| l.contains(what)).collect()
}

/// [`Runtime::init_in`] with the test hooks the loader's stand-in environment names
/// (`SCR_FAULT`, `SCR_TEST_WINDOW`): the tests give them as a value, as a program's
/// environment gives them to `init_with`. The library must be enabled: the running
/// runtime is returned ([`init_started`] for either).
pub(super) fn init_hooked(w: Box<dyn World>, l: Loader, options: InitOptions) -> Result<Runtime> {
    init_started(w, l, options).map(|started| match started {
        Started::Running(rt) => rt,
        Started::Disabled(_) => panic!("init_hooked: enable = false; use init_started"),
    })
}

/// [`init_hooked`] as init returns it: running, or disabled (`enable = false`).
pub(super) fn init_started(w: Box<dyn World>, l: Loader, options: InitOptions) -> Result<Started> {
    let hooks = crate::hooks::TestHooks::from_env(&l.env);
    Runtime::init_in(w, l, options, hooks)
}
