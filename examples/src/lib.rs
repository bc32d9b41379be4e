//! Helpers shared by the benchmark binaries: timings are the slowest rank's, reported as
//! medians, and "plain" writes are the same bytes written and fsynced without scr-rs.
#![forbid(unsafe_code)]

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
