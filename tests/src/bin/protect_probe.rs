//! `scr-protect-probe`: what asking `need_checkpoint` costs while a background
//! protection (`protect_in_background`) runs. Run with `SCR_PROTECT_IN_BACKGROUND=1` and
//! `SCR_FAULT=hold-protect:<gate>` (the threads wait for the file `<gate>`). MPI is
//! initialised with MPI_THREAD_MULTIPLE. Each rank writes `protect_<rank>.txt` in the
//! working directory: the world size, outcome lines, and `<step> <name> calls collectives
//! msgs_sent msgs_recv bytes_sent bytes_recv` lines of `Scr::comm_stats`:
//!
//! - `idle`: a need_checkpoint with nothing pending;
//! - one checkpoint `ckpt.1` of one file per rank, its protection held at the gate;
//! - `held`: a need_checkpoint while every rank's thread waits at the gate;
//! - then rank 0 makes the gate, every rank waits (outside the library) until its own
//!   thread returned, and need_checkpoint is called until the dataset is a checkpoint
//!   (`settled after N calls`, at most 100).

use std::time::{Duration, Instant};

use scr_api::mpi::traits::{Communicator, CommunicatorCollectives};
use scr_api::{mpi, Scr};
use scr_e2e::comm_report::{idle_then_one_checkpoint, lines};

fn main() {
    let (universe, _) =
        mpi::initialize_with_threading(mpi::Threading::Multiple).expect("MPI initialises");
    let world = universe.world();
    let rank = world.rank() as usize;
    let size = world.size() as usize;
    let mut report = format!("world size {size}\n");
    let gate = std::env::var("SCR_FAULT")
        .ok()
        .and_then(|f| f.strip_prefix("hold-protect:").map(str::to_string))
        .expect("SCR_FAULT=hold-protect:<gate>");

    let mut scr = Scr::init(&world).expect("init");

    let (idle, kept) = idle_then_one_checkpoint(&mut scr, rank, &vec![rank as u8; 4096]);
    report += &idle;
    report += &format!("kept {kept}\n");
    report += &format!("protecting {}\n", scr.runtime().protecting_here());

    scr.reset_comm_stats();
    scr.need_checkpoint().expect("need_checkpoint");
    report += &lines("held", &scr.comm_stats());
    report += &format!("held have_restart {:?}\n", scr.runtime().have_restart());

    world.barrier();
    if rank == 0 {
        std::fs::write(&gate, b"").expect("gate");
    }
    // this rank's thread returns in the background; the wait is the application's (a
    // bound only so that a hang reports instead of blocking the test)
    let start = Instant::now();
    while scr.runtime().protecting_here() {
        if start.elapsed() > Duration::from_secs(120) {
            report += "protection did not end within 120 s\n";
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    world.barrier();
    let mut calls = 0;
    while scr.runtime().have_restart().is_none() && calls < 100 {
        scr.need_checkpoint().expect("need_checkpoint");
        calls += 1;
    }
    report += &format!("settled after {calls} calls\n");
    report += &format!("have_restart {:?}\n", scr.runtime().have_restart());

    scr.finalize().expect("finalize");
    std::fs::write(format!("protect_{rank}.txt"), report).expect("report");
}
