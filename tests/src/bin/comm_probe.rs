//! `scr-comm-probe`: the per-call MPI counters of `Scr::comm_stats`. Each rank writes
//! `comm_<rank>.txt` in the working directory: the world size, then lines of
//! `<what> <name> calls collectives msgs_sent msgs_recv bytes_sent bytes_recv` for the
//! steps it measured, and the outcome of the split byte exchanges (`ok` or what differed).

use scr_api::mpi::traits::Communicator;
use scr_api::{mpi, Flags, Scr};
use scr_e2e::comm_report::lines;
use scr_host::runtime::comm;

/// Rank r's bytes for the exchanges: `len` bytes, each `r * 16 + i`.
fn bytes_of(r: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (r * 16 + i) as u8).collect()
}

fn main() {
    let universe = mpi::initialize().expect("MPI initialises");
    let world = universe.world();
    let rank = world.rank() as usize;
    let size = world.size() as usize;
    let mut report = format!("world size {size}\n");

    let mut scr = Scr::init(&world).expect("init");
    report += &lines("init", &scr.comm_stats());

    // one checkpoint of one file per rank, each step measured on its own
    scr.reset_comm_stats();
    scr.start_output("ckpt.1", Flags::CHECKPOINT)
        .expect("start_output");
    report += &lines("start", &scr.comm_stats());
    scr.reset_comm_stats();
    let p = scr
        .route_file(format!("state_{rank}.dat"))
        .expect("route_file");
    report += &lines("route", &scr.comm_stats());
    std::fs::write(&p, bytes_of(rank, 100)).expect("write");
    scr.reset_comm_stats();
    let kept = scr.complete_output(true).expect("complete_output");
    report += &format!("kept {kept}\n");
    report += &lines("complete", &scr.comm_stats());
    scr.reset_comm_stats();
    let need = scr.need_checkpoint().expect("need_checkpoint");
    report += &format!("need {need}\n");
    report += &lines("need", &scr.comm_stats());

    // the byte exchanges themselves, outside every API call: 10 bytes per rank
    scr.reset_comm_stats();
    let all = comm::all_gather_bytes(&world, &bytes_of(rank, 10));
    let want: Vec<Vec<u8>> = (0..size).map(|r| bytes_of(r, 10)).collect();
    report += &format!("gather {}\n", if all == want { "ok" } else { "differs" });
    report += &lines("gather", &scr.comm_stats());

    // split path: rank r holds 5r + 1 bytes (1 + 6 + 11 + 16 = 34 at 4 ranks), rounds
    // of at most 7 bytes
    scr.reset_comm_stats();
    let all = comm::all_gather_bytes_limited(&world, &bytes_of(rank, 5 * rank + 1), 7);
    let want: Vec<Vec<u8>> = (0..size).map(|r| bytes_of(r, 5 * r + 1)).collect();
    report += &format!(
        "split-gather {}\n",
        if all == want { "ok" } else { "differs" }
    );
    report += &lines("split-gather", &scr.comm_stats());

    // split broadcast: rank 0's 20 bytes in pieces of at most 7
    scr.reset_comm_stats();
    let mine = if rank == 0 {
        bytes_of(0, 20)
    } else {
        Vec::new()
    };
    let got = comm::broadcast_bytes_limited(&world, &mine, 7);
    report += &format!(
        "split-broadcast {}\n",
        if got == bytes_of(0, 20) {
            "ok"
        } else {
            "differs"
        }
    );
    report += &lines("split-broadcast", &scr.comm_stats());

    // nothing to carry: lengths only
    scr.reset_comm_stats();
    let all = comm::all_gather_bytes_limited(&world, &[], 7);
    report += &format!(
        "empty-gather {}\n",
        if all == vec![Vec::<u8>::new(); size] {
            "ok"
        } else {
            "differs"
        }
    );
    report += &lines("empty-gather", &scr.comm_stats());

    scr.finalize().expect("finalize");
    std::fs::write(format!("comm_{rank}.txt"), report).expect("report");
}
