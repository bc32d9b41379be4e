//! `scr-host-probe`: drives the MPI host services (what plugins receive) the way a
//! broken or hostile plugin or peer would, on two ranks, and writes what each call
//! returned to `host_probe_<rank>.txt` in the working directory. A call that aborted the
//! job leaves no report.

use scr_api::mpi;
use scr_api::mpi::traits::Communicator;
use scr_host::runtime::MpiHost;
use scr_plugin::abi_stable::std_types::{RSlice, RSliceMut};

/// Largest resident set this process has had, in KiB (`VmHWM`).
fn peak_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    let universe = mpi::initialize().expect("MPI initialises");
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let mut report = format!("world size {size}\n");
    let mut say = |line: String| {
        report.push_str(&line);
        report.push('\n');
    };
    let host = MpiHost::new(
        world.duplicate(),
        vec![0, 1],
        vec!["n0".into(), "n1".into()],
        u32::try_from(rank).unwrap_or(0),
    );
    let raw = scr_plugin::host_ref(&host);
    let peer = 1 - u32::try_from(rank).unwrap_or(0);
    let shown = |r: scr_plugin::abi_stable::std_types::RResult<(), scr_plugin::PluginError>| match r
        .into_result()
    {
        Ok(()) => "ok".to_string(),
        Err(e) => e.to_string(),
    };

    // tags a plugin may not use: above MPI's guaranteed bound, and one that `as i32`
    // would turn negative (MPI aborts the job on either)
    for tag in [32768, 0x8000_0001] {
        say(format!(
            "send tag {tag}: {}",
            shown(raw.send(peer, tag, RSlice::from_slice(b"x")))
        ));
    }
    let mut four = [0u8; 4];
    say(format!(
        "recv from member 7: {}",
        shown(raw.recv(7, 1, RSliceMut::from_mut_slice(&mut four)))
    ));

    // a peer sends 256 MiB where 4 bytes were agreed, then 2 bytes, then the 4 agreed:
    // the receiver refuses both without holding the 256 MiB, and the stream of the tag
    // stays in step
    const BIG: usize = 256 << 20;
    if rank == 0 {
        let big = vec![7u8; BIG];
        for data in [&big[..], b"ab", b"next"] {
            say(format!(
                "sent {} bytes: {}",
                data.len(),
                shown(raw.send(1, 5, RSlice::from_slice(data)))
            ));
        }
    } else {
        let before = peak_kib();
        for _ in 0..3 {
            let r = shown(raw.recv(0, 5, RSliceMut::from_mut_slice(&mut four)));
            say(format!(
                "recv 4 bytes: {r}{}",
                if r == "ok" {
                    format!(" {:?}", String::from_utf8_lossy(&four))
                } else {
                    String::new()
                }
            ));
        }
        let grown = peak_kib().saturating_sub(before) / 1024;
        say(format!(
            "peak memory grew by less than 64 MiB: {}",
            grown < 64
        ));
    }

    // from another thread: local calls answer, communicating ones are refused at
    // MPI_THREAD_SINGLE (mpi::initialize)
    let (r, n, barrier) = std::thread::scope(|s| {
        s.spawn(|| (raw.rank(), raw.size(), shown(raw.barrier())))
            .join()
            .expect("thread")
    });
    say(format!(
        "from a plugin thread: rank {r} size {n}: barrier: {barrier}"
    ));
    say(format!(
        "barrier on the owner thread: {}",
        shown(raw.barrier())
    ));
    std::fs::write(format!("host_probe_{rank}.txt"), report).expect("report");
}
