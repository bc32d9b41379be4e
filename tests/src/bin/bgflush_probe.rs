//! `scr-bgflush-probe`: when a background flush (`flush_async`) is recorded, and what
//! polling for it costs. Run with `SCR_FLUSH=1 SCR_FLUSH_ASYNC=1`. Each rank writes
//! `bgflush_<rank>.txt` in the working directory: the world size, outcome lines, and
//! `<step> <name> calls collectives msgs_sent msgs_recv bytes_sent bytes_recv` lines of
//! `Scr::comm_stats` for the steps it measured:
//!
//! - `idle`: a need_checkpoint with no background flush pending;
//! - one checkpoint `ckpt.1` of one file `state_<rank>.dat` (100 bytes, `r * 16 + i`),
//!   whose flush runs in the background; every rank waits (outside the library) until
//!   its own transfer ended, then a barrier: every rank's transfer has ended. Rank 0
//!   reports whether the index records the flush already (`before flushed ...`) and
//!   every rank whether a `done.*.scr` file is in the prefix (`before markers ...`);
//! - `pending`: the next need_checkpoint, which must find the flush finished everywhere
//!   and record it (rank 0 reports `after flushed ...` and `after markers ...`);
//! - `again`: one more need_checkpoint, with nothing pending again.

use std::path::Path;
use std::time::{Duration, Instant};

use scr_api::mpi::traits::{Communicator, CommunicatorCollectives};
use scr_api::{mpi, Scr};
use scr_e2e::comm_report::{idle_then_one_checkpoint, lines};
use scr_host::state::prefix::Index;

/// Rank r's file: `len` bytes, each `r * 16 + i`.
fn bytes_of(r: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (r * 16 + i) as u8).collect()
}

/// Whether the index in `prefix` records `name` as flushed (complete, with a time).
fn flushed(prefix: &Path, name: &str) -> bool {
    Index::load(prefix).ok().is_some_and(|ix| {
        ix.datasets
            .values()
            .any(|e| e.name == name && e.complete && e.flushed.is_some())
    })
}

/// The `done.*.scr` files anywhere below `dir`.
fn markers(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            found.extend(markers(&path));
        } else {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("done.") && name.ends_with(".scr") {
                found.push(path.display().to_string());
            }
        }
    }
    found
}

fn main() {
    let universe = mpi::initialize().expect("MPI initialises");
    let world = universe.world();
    let rank = world.rank() as usize;
    let size = world.size() as usize;
    let prefix = std::env::current_dir().expect("working directory");
    let mut report = format!("world size {size}\n");

    let mut scr = Scr::init(&world).expect("init");

    let (idle, kept) = idle_then_one_checkpoint(&mut scr, rank, &bytes_of(rank, 100));
    report += &idle;
    report += &format!("kept {kept}\n");

    // this rank's transfer ends in the background; the wait is the application's (a
    // bound only so that a hang reports instead of blocking the test)
    let start = Instant::now();
    while scr.runtime().flushes_running_here() > 0 {
        if start.elapsed() > Duration::from_secs(120) {
            report += "transfer did not end within 120 s\n";
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    world.barrier();
    if rank == 0 {
        report += &format!("before flushed {}\n", flushed(&prefix, "ckpt.1"));
    }
    report += &format!("before markers {:?}\n", markers(&prefix));
    world.barrier();

    scr.reset_comm_stats();
    scr.need_checkpoint().expect("need_checkpoint");
    report += &lines("pending", &scr.comm_stats());
    if rank == 0 {
        report += &format!("after flushed {}\n", flushed(&prefix, "ckpt.1"));
    }
    report += &format!("after markers {:?}\n", markers(&prefix));

    scr.reset_comm_stats();
    scr.need_checkpoint().expect("need_checkpoint");
    report += &lines("again", &scr.comm_stats());

    scr.finalize().expect("finalize");
    std::fs::write(format!("bgflush_{rank}.txt"), report).expect("report");
}
