//! Helpers shared by the benchmark binaries: timings are the slowest rank's, reported as
//! medians, and "plain" writes are the same bytes written and fsynced without scr-rs.
#![forbid(unsafe_code)]

pub mod scale;

use std::io::Write;
use std::path::Path;

use scr_api::mpi::collective::SystemOperation;
use scr_api::mpi::topology::SimpleCommunicator;
use scr_api::mpi::traits::CommunicatorCollectives;

/// Print one line to stderr in a single write. Under mpiexec every rank's stderr is merged
/// by the launcher as it arrives, and `eprintln!` writes a formatted line piece by piece
/// (stderr is unbuffered), so two ranks' lines interleave mid-line (`scr-heat[scr-heat[2]:
/// ...`). One `write_all` of the whole line keeps it whole.
pub fn say(line: std::fmt::Arguments<'_>) {
    let mut text = line.to_string();
    text.push('\n');
    // (stderr closed or full: nothing better to do with the message)
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// `eprintln!` whose line reaches stderr in one write: see [`say()`].
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => { $crate::say(format_args!($($arg)*)) };
}

/// The largest `secs` over all ranks (a collective step takes as long as its slowest rank).
pub fn slowest(world: &SimpleCommunicator, secs: f64) -> f64 {
    let mut out = 0.0f64;
    world.all_reduce_into(&secs, &mut out, SystemOperation::max());
    out
}

/// The median of `v` (not empty).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Write `data` to `path` and fsync it: the baseline the library is compared with.
pub fn write_synced(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::File::create(path)?;
    f.write_all(data)?;
    f.sync_all()
}

/// Median, minimum and maximum of repeated measurements.
#[derive(Clone, Debug, PartialEq)]
pub struct Spread {
    /// The median (the upper one of an even count).
    pub median: f64,
    /// The smallest value.
    pub min: f64,
    /// The largest value.
    pub max: f64,
    /// How many values.
    pub n: usize,
}

impl Spread {
    /// The spread of `values`; all NaN when there are none.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Spread {
        let mut v: Vec<f64> = values.into_iter().collect();
        if v.is_empty() {
            return Spread {
                median: f64::NAN,
                min: f64::NAN,
                max: f64::NAN,
                n: 0,
            };
        }
        v.sort_by(|a, b| a.total_cmp(b));
        Spread {
            median: v[v.len() / 2],
            min: v[0],
            max: v[v.len() - 1],
            n: v.len(),
        }
    }

    /// `median [min-max]` with `decimals` decimals.
    pub fn show(&self, decimals: usize) -> String {
        format!(
            "{:.d$} [{:.d$}-{:.d$}]",
            self.median,
            self.min,
            self.max,
            d = decimals
        )
    }

    /// As a JSON object.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({"median": self.median, "min": self.min, "max": self.max, "n": self.n})
    }
}

/// The library configuration of one benchmark run, as `(key, value)` pairs in the
/// order they are set: every rank a simulated node of its own (`node_names`), the cache
/// and control directories node-local under `root`, no flush. One list, so that
/// `scr-bench` (which sets it through the API) and `scr-bench-c` (which hands it to its
/// C client as `SCR_*` environment variables) measure the same setup.
pub struct BenchConfig<'a> {
    /// `copy_type`.
    pub scheme: &'a str,
    /// `set_size`.
    pub set_size: u32,
    /// `set_failures` (RS).
    pub set_failures: u32,
    /// One node name per rank.
    pub nodes: &'a [String],
    /// Where `cache/` and `cntl/` are made.
    pub root: &'a Path,
    /// The prefix directory.
    pub prefix: &'a Path,
    /// `job_id` (names the run's cache directories).
    pub job_id: &'a str,
    /// `crc_on_copy`.
    pub crc: bool,
}

impl BenchConfig<'_> {
    /// The `(key, value)` pairs.
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        vec![
            ("copy_type", self.scheme.to_string()),
            ("set_size", self.set_size.to_string()),
            ("set_failures", self.set_failures.to_string()),
            ("node_names", self.nodes.join(",")),
            ("cache_base", self.root.join("cache").display().to_string()),
            ("cntl_base", self.root.join("cntl").display().to_string()),
            ("prefix", self.prefix.display().to_string()),
            ("job_id", self.job_id.to_string()),
            ("flush", "0".to_string()),
            ("crc_on_copy", self.crc.to_string()),
        ]
    }
}

/// An error when this process was started by an MPI launcher: a driver that launches
/// its own jobs would, under mpiexec, launch every job once per rank.
pub fn refuse_mpi_launcher(program: &str) -> Result<(), String> {
    match ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"]
        .into_iter()
        .find(|k| std::env::var_os(k).is_some())
    {
        Some(k) => Err(format!(
            "started by an MPI launcher ({k} is set): run {program} without mpiexec, \
             it launches its jobs itself"
        )),
        None => Ok(()),
    }
}
