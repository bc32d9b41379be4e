//! Helpers shared by the benchmark binaries: timings are the slowest rank's, reported as
//! medians, and "plain" writes are the same bytes written and fsynced without scr-rs.
#![forbid(unsafe_code)]

use std::io::Write;
use std::path::Path;

use scr_api::mpi::collective::SystemOperation;
use scr_api::mpi::topology::SimpleCommunicator;
use scr_api::mpi::traits::CommunicatorCollectives;

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
