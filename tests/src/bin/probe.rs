//! `scr-probe`: small MPI programs exercising single API behaviours for the end-to-end
//! tests. `scr-probe route-escape` tries to route files outside the prefix. Each rank
//! writes its report to `probe_<rank>.txt` in the working directory (output of several
//! ranks through mpiexec may interleave).

use scr_api::mpi::traits::Communicator;
use scr_api::{mpi, Flags, Scr};

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    let universe = mpi::initialize().expect("MPI initialises");
    let world = universe.world();
    let mut scr = match Scr::init(&world) {
        Ok(scr) => scr,
        Err(e) => {
            // every rank must get here with an error (none may wait in init)
            std::fs::write(
                format!("probe_{}.txt", world.rank()),
                format!("init error: {e}\n"),
            )
            .expect("report");
            return;
        }
    };
    let mut report = String::new();
    let mut say = |line: String| {
        report.push_str(&line);
        report.push('\n');
    };
    match mode.as_str() {
        "route-escape" => {
            scr.start_output("escape", Flags::CHECKPOINT)
                .expect("start");
            for name in ["../outside.dat", "/etc/passwd", "a/../../b"] {
                match scr.route_file(name) {
                    Ok(p) => say(format!("{name} routed to {}", p.display())),
                    Err(e) => say(format!("{name}: {e}")),
                }
            }
            let inside = scr
                .route_file(format!("sub/dir/ok_{}.dat", world.rank()))
                .expect("inside the prefix");
            std::fs::write(&inside, b"ok").expect("write");
            let kept = scr.complete_output(true).expect("complete");
            say(format!("kept {kept}"));
        }
        "misuse" => {
            let r = world.rank();
            let show = |what: &str, e: Result<String, scr_api::ScrError>| match e {
                Ok(v) => format!("{what}: ok {v}"),
                Err(e) => format!("{what}: {e}"),
            };
            say(show(
                "route before start",
                scr.route_file("x").map(|p| p.display().to_string()),
            ));
            say(show(
                "complete before start",
                scr.complete_output(true).map(|k| k.to_string()),
            ));
            say(show("restart without candidate", scr.start_restart()));
            say(show("legacy start", scr.start_checkpoint()));
            say(show(
                "start twice",
                scr.start_output("again", Flags::CHECKPOINT)
                    .map(|_| String::new()),
            ));
            let p = scr.route_file(format!("legacy_{r}.dat")).expect("route");
            std::fs::write(&p, b"legacy").expect("write");
            say(show(
                "legacy complete",
                scr.complete_checkpoint(true).map(|k| k.to_string()),
            ));
            say(show("candidate", Ok(format!("{:?}", scr.have_restart()))));
            say(show("delete", scr.delete("ckpt.1").map(|_| String::new())));
            say(show(
                "candidate after delete",
                Ok(format!("{:?}", scr.have_restart())),
            ));
            say(show(
                "delete unknown",
                scr.delete("nope").map(|_| String::new()),
            ));
        }
        "output-kept" => {
            // an output dataset must survive eviction until it is flushed
            scr.start_output("ckpt", Flags::CHECKPOINT).expect("start");
            let p = scr
                .route_file(format!("c_{}.dat", world.rank()))
                .expect("route");
            std::fs::write(&p, b"checkpoint").expect("write");
            scr.complete_output(true).expect("complete");
            scr.start_output("out", Flags::OUTPUT).expect("start");
            let p = scr
                .route_file(format!("o_{}.dat", world.rank()))
                .expect("route");
            std::fs::write(&p, b"output").expect("write");
            let kept = scr.complete_output(true).expect("complete");
            say(format!("output kept {kept}, file exists {}", p.exists()));
        }
        "planted-nested" => {
            // each rank plants a link `sub_<rank>` in its dataset directory pointing at
            // $PROBE_THEIRS, then routes a file below it: refused, nothing written there
            let r = world.rank();
            let theirs = std::env::var("PROBE_THEIRS").expect("PROBE_THEIRS");
            scr.start_output("ckpt.1", Flags::CHECKPOINT)
                .expect("start");
            let flat = scr.route_file(format!("flat_{r}.dat")).expect("route");
            std::fs::write(&flat, b"flat").expect("write");
            let dataset = flat.parent().expect("dataset dir");
            std::os::unix::fs::symlink(&theirs, dataset.join(format!("sub_{r}"))).expect("plant");
            match scr.route_file(format!("sub_{r}/deeper/x.dat")) {
                Ok(p) => {
                    let _ = std::fs::write(&p, b"through the link");
                    say(format!("nested routed to {}", p.display()));
                }
                Err(e) => say(format!("nested: {e}")),
            }
            // the file itself planted as a link
            let name = format!("file_{r}.dat");
            std::os::unix::fs::symlink(format!("{theirs}/{name}"), dataset.join(&name))
                .expect("plant");
            match scr.route_file(&name) {
                Ok(p) => say(format!("file routed to {}", p.display())),
                Err(e) => say(format!("file: {e}")),
            }
            say(format!("dataset {}", dataset.display()));
            let kept = scr.complete_output(true);
            say(format!("kept {kept:?}"));
        }
        "route-rules" => {
            // run with XOR in one set of 4, member = rank: rank r's redundancy file is
            // scr.<r>.xor.mem_<r>_of_4.redset
            let r = world.rank();
            scr.start_output("ckpt.1", Flags::CHECKPOINT)
                .expect("start");
            let own = format!("scr.{r}.xor.mem_{r}_of_4.redset");
            for name in ["", "a\0b", ".scr/index.scr", "./.scr/x", own.as_str()] {
                match scr.route_file(name) {
                    Ok(p) => say(format!("{name:?} routed to {}", p.display())),
                    Err(e) => say(format!("{name:?}: {e}")),
                }
            }
            let p = scr.route_file(format!("ok_{r}.dat")).expect("route");
            std::fs::write(&p, b"ok").expect("write");
            say(format!(
                "kept {}",
                scr.complete_output(true).expect("complete")
            ));
            // rank 0 routes the name of rank 1's redundancy file: found at complete
            scr.start_output("ckpt.2", Flags::CHECKPOINT)
                .expect("start");
            let name = if r == 0 {
                "scr.1.xor.mem_1_of_4.redset".to_string()
            } else {
                format!("two_{r}.dat")
            };
            let p = scr.route_file(&name).expect("route");
            std::fs::write(&p, b"two").expect("write");
            say(format!(
                "second kept {:?}",
                scr.complete_output(true).map_err(|e| e.to_string())
            ));
        }
        "apply-one" => {
            // the scheme (FAIL_ONE or PANIC_ONE) fails in apply on one member only
            scr.start_output("ckpt.1", Flags::CHECKPOINT)
                .expect("start");
            let p = scr
                .route_file(format!("c_{}.dat", world.rank()))
                .expect("route");
            std::fs::write(&p, b"checkpoint").expect("write");
            match scr.complete_output(true) {
                Ok(kept) => say(format!("kept {kept}")),
                Err(e) => say(format!("error: {e}")),
            }
            say(format!("restart candidate {:?}", scr.have_restart()));
            say(format!("world {}", world.size()));
            // written before finalize: after a failed call the API does not finalize
            std::fs::write(format!("probe_{}.txt", world.rank()), &report).expect("report");
            return;
        }
        "candidate" => say(format!("candidate {:?}", scr.have_restart())),
        "lost" => {
            // what init dropped (one line per dataset) and the restart candidate left
            say(format!("world {}", world.size()));
            for lost in scr.lost_datasets() {
                say(format!("lost: {lost}"));
            }
            say(format!("candidate {:?}", scr.have_restart()));
        }
        "maps" => {
            // whether a library whose path contains $PROBE_MAPS was ever mapped into this
            // process (dlopen'd) by init
            let want = std::env::var("PROBE_MAPS").expect("PROBE_MAPS names a path fragment");
            let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
            say(format!(
                "mapped {}",
                maps.lines().any(|l| l.contains(&want))
            ));
            say(format!("candidate {:?}", scr.have_restart()));
        }
        "many-files" => {
            // `many-files N`: one checkpoint of N routed files per rank; reports what
            // saving the filemap cost this process (scr-host's counters) from start_output
            // to complete_output
            let n: usize = std::env::args()
                .nth(2)
                .and_then(|a| a.parse().ok())
                .expect("many-files N");
            let r = world.rank();
            say(format!("world {}", world.size()));
            let before = scr_host::runtime::filemap_io();
            scr.start_output("ckpt.1", Flags::CHECKPOINT)
                .expect("start");
            for i in 0..n {
                let p = scr
                    .route_file(format!("d{}/f_{r}_{i}.dat", i % 10))
                    .expect("route");
                std::fs::write(&p, format!("file {i} of rank {r}")).expect("write");
            }
            let kept = scr.complete_output(true).expect("complete");
            let after = scr_host::runtime::filemap_io();
            say(format!("kept {kept}"));
            say(format!("filemap bytes {}", after.bytes - before.bytes));
            say(format!("filemap syncs {}", after.syncs - before.syncs));
        }
        "restart-files" => {
            // `restart-files N`: restart from the checkpoint `many-files N` wrote and check
            // every file's contents
            let n: usize = std::env::args()
                .nth(2)
                .and_then(|a| a.parse().ok())
                .expect("restart-files N");
            let r = world.rank();
            say(format!("world {}", world.size()));
            match scr.start_restart() {
                Ok(name) => {
                    let mut good = 0;
                    for i in 0..n {
                        let p = scr
                            .route_file(format!("d{}/f_{r}_{i}.dat", i % 10))
                            .expect("route");
                        if std::fs::read(&p).ok()
                            == Some(format!("file {i} of rank {r}").into_bytes())
                        {
                            good += 1;
                        }
                    }
                    say(format!("restarted {name}: {good} of {n} files intact"));
                    say(format!(
                        "complete {}",
                        scr.complete_restart(true).expect("complete restart")
                    ));
                }
                Err(e) => say(format!("no restart: {e}")),
            }
        }
        "checkpoints" => {
            // `checkpoints N`: checkpoints ckpt.1..=N, one file `ckpt.<n>/rank_<r>.dat`
            // per rank of `contents(n, r)`; what each call returned on this rank
            let n: u32 = std::env::args()
                .nth(2)
                .and_then(|a| a.parse().ok())
                .expect("checkpoints N");
            let r = world.rank();
            say(format!("world {}", world.size()));
            for c in 1..=n {
                let name = format!("ckpt.{c}");
                scr.start_output(&name, Flags::CHECKPOINT).expect("start");
                let p = scr
                    .route_file(format!("{name}/rank_{r}.dat"))
                    .expect("route");
                std::fs::write(&p, contents(c, r)).expect("write");
                match scr.complete_output(true) {
                    Ok(kept) => say(format!("{name} kept {kept}")),
                    Err(e) => say(format!("{name}: {e}")),
                }
            }
            say(format!("candidate {:?}", scr.have_restart()));
        }
        "restart-check" => {
            // restart from what `checkpoints` wrote and compare this rank's file
            let r = world.rank();
            say(format!("world {}", world.size()));
            match scr.start_restart() {
                Ok(name) => {
                    let c: u32 = name.trim_start_matches("ckpt.").parse().expect("ckpt.N");
                    let p = scr
                        .route_file(format!("{name}/rank_{r}.dat"))
                        .expect("route");
                    let exact = std::fs::read(&p).ok() == Some(contents(c, r));
                    say(format!("restarted {name} byte-exact {exact}"));
                    say(format!(
                        "complete {}",
                        scr.complete_restart(exact).expect("complete restart")
                    ));
                }
                Err(e) => say(format!("no restart: {e}")),
            }
        }
        "route-and-die" => {
            // every rank routes three files, writes the first whole and the second in
            // part, and is killed (SIGKILL) before complete_output: what a crash in the
            // middle of a checkpoint leaves
            use scr_api::mpi::traits::CommunicatorCollectives;
            let r = world.rank();
            scr.start_output("ckpt.1", Flags::CHECKPOINT)
                .expect("start");
            let paths: Vec<_> = (0..3)
                .map(|i| scr.route_file(format!("c{i}_{r}.dat")).expect("route"))
                .collect();
            std::fs::write(&paths[0], b"whole").expect("write");
            std::fs::write(&paths[1], b"par").expect("write");
            std::fs::write(
                format!("probe_{r}.txt"),
                format!("world {}\nrouted 3\n", world.size()),
            )
            .expect("report");
            // every rank's records are on disk before any rank dies
            world.barrier();
            let _ = std::process::Command::new("kill")
                .args(["-9", &std::process::id().to_string()])
                .status();
            std::process::abort();
        }
        other => panic!("unknown probe mode `{other}`"),
    }
    scr.finalize().expect("finalize");
    std::fs::write(format!("probe_{}.txt", world.rank()), report).expect("report");
}

/// What rank `r` writes in checkpoint `c` (`checkpoints`): 64 KiB no other rank or
/// checkpoint writes.
fn contents(c: u32, r: i32) -> Vec<u8> {
    (0..65536u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8 ^ (c * 31 + r as u32 * 7) as u8)
        .collect()
}
