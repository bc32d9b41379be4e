//! `scr-bench-capi`: what the C interface adds to a call, as the ratio of an empty
//! checkpoint cycle (`SCR_Start_output` + `SCR_Complete_output`, no files) through
//! libscr's C functions to the same cycle through the Rust API, measured in the same run.
//!
//! Both APIs run the same runtime, so the ratio shows the C layer's own cost (argument
//! conversion, state lookup, the panic guard). The Rust API runs first (init, cycles,
//! finalize), then the C API in the same process and MPI job: libscr's state allows one
//! SCR_Init per process, so they cannot be interleaved.
//!
//! Run: `mpiexec -n 4 target/release/scr-bench-capi --cycles 200`.

use std::ffi::CString;
use std::time::Instant;

use clap::Parser;
use scr_api::mpi::traits::{Communicator, CommunicatorCollectives};
use scr_api::{mpi, Flags, Scr, Settings};
use scr_examples::slowest;

#[derive(Parser)]
#[command(
    name = "scr-bench-capi",
    version,
    about = "Empty checkpoint cycles: the C API against the Rust API"
)]
struct Args {
    /// Timed cycles per API (after 10 untimed ones).
    #[arg(long, default_value_t = 200)]
    cycles: usize,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let universe = mpi::initialize().ok_or("MPI initialises")?;
    let world = universe.world();
    let rank = world.rank();
    let warm = 10;

    let mut settings = Settings::new();
    settings.set("copy_type=SINGLE")?;
    settings.set("cache_size=1")?;
    settings.set("flush=0")?;
    let mut scr = Scr::init_with(&world, &settings)?;
    let mut rust = 0.0;
    for i in 0..warm + args.cycles {
        if i == warm {
            world.barrier();
        }
        let t = Instant::now();
        scr.start_output(&format!("rust.{i}"), Flags::CHECKPOINT)?;
        scr.complete_output(true)?;
        if i >= warm {
            rust += t.elapsed().as_secs_f64();
        }
    }
    rust = slowest(&world, rust);
    scr.finalize()?;

    // the C API, configured the same way
    for c in ["SCR_COPY_TYPE=SINGLE", "SCR_CACHE_SIZE=1", "SCR_FLUSH=0"] {
        let text = CString::new(c)?;
        let _ = scr::SCR_Config(text.as_ptr());
    }
    if scr::SCR_Init() != scr::SCR_SUCCESS {
        return Err("SCR_Init failed".into());
    }
    let names: Vec<CString> = (0..warm + args.cycles)
        .map(|i| CString::new(format!("c.{i}")))
        .collect::<Result<_, _>>()?;
    let mut c_api = 0.0;
    for (i, name) in names.iter().enumerate() {
        if i == warm {
            world.barrier();
        }
        let t = Instant::now();
        let started = scr::SCR_Start_output(name.as_ptr(), 1);
        let completed = scr::SCR_Complete_output(1);
        if started != scr::SCR_SUCCESS || completed != scr::SCR_SUCCESS {
            return Err(format!("cycle {i} failed through the C API").into());
        }
        if i >= warm {
            c_api += t.elapsed().as_secs_f64();
        }
    }
    c_api = slowest(&world, c_api);
    if scr::SCR_Finalize() != scr::SCR_SUCCESS {
        return Err("SCR_Finalize failed".into());
    }

    if rank == 0 {
        let per = |t: f64| t / args.cycles as f64 * 1e6;
        println!(
            "ranks {}, {} empty start/complete cycles per API (SINGLE, no files)",
            world.size(),
            args.cycles
        );
        println!("rust API: {:9.1} us per cycle", per(rust));
        println!("C API:    {:9.1} us per cycle", per(c_api));
        println!("ratio C / Rust: {:.3}", c_api / rust);
    }
    Ok(())
}
