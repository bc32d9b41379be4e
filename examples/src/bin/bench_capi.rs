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
use scr_examples::{slowest, Spread};

#[derive(Parser)]
#[command(
    name = "scr-bench-capi",
    version,
    about = "Empty checkpoint cycles: the C API against the Rust API"
)]
struct Args {
    /// Timed cycles per API and repetition (after 10 untimed ones).
    #[arg(long, default_value_t = 200)]
    cycles: usize,
    /// Repetitions (blocks of `--cycles` cycles; medians reported, with min and max).
    #[arg(long, default_value_t = 5)]
    reps: usize,
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
    let total = warm + args.cycles * args.reps;
    let (mut rust, mut block) = (Vec::new(), 0.0);
    for i in 0..total {
        if i >= warm && (i - warm) % args.cycles == 0 {
            world.barrier();
        }
        let t = Instant::now();
        scr.start_output(&format!("rust.{i}"), Flags::CHECKPOINT)?;
        scr.complete_output(true)?;
        if i >= warm {
            block += t.elapsed().as_secs_f64();
            if (i - warm + 1) % args.cycles == 0 {
                rust.push(slowest(&world, block));
                block = 0.0;
            }
        }
    }
    scr.finalize()?;

    // the C API, configured the same way
    for c in ["SCR_COPY_TYPE=SINGLE", "SCR_CACHE_SIZE=1", "SCR_FLUSH=0"] {
        let text = CString::new(c)?;
        let _ = scr::SCR_Config(text.as_ptr());
    }
    if scr::SCR_Init() != scr::SCR_SUCCESS {
        return Err("SCR_Init failed".into());
    }
    let names: Vec<CString> = (0..total)
        .map(|i| CString::new(format!("c.{i}")))
        .collect::<Result<_, _>>()?;
    let mut c_api = Vec::new();
    for (i, name) in names.iter().enumerate() {
        if i >= warm && (i - warm) % args.cycles == 0 {
            world.barrier();
        }
        let t = Instant::now();
        let started = scr::SCR_Start_output(name.as_ptr(), 1);
        let completed = scr::SCR_Complete_output(1);
        if started != scr::SCR_SUCCESS || completed != scr::SCR_SUCCESS {
            return Err(format!("cycle {i} failed through the C API").into());
        }
        if i >= warm {
            block += t.elapsed().as_secs_f64();
            if (i - warm + 1) % args.cycles == 0 {
                c_api.push(slowest(&world, block));
                block = 0.0;
            }
        }
    }
    if scr::SCR_Finalize() != scr::SCR_SUCCESS {
        return Err("SCR_Finalize failed".into());
    }

    if rank == 0 {
        let per = |v: &[f64]| Spread::of(v.iter().map(|t| t / args.cycles as f64 * 1e6));
        println!(
            "ranks {}, {} x {} empty start/complete cycles per API (SINGLE, no files); \
             medians of the {} blocks [min-max]",
            world.size(),
            args.reps,
            args.cycles,
            args.reps
        );
        println!("rust API: {} us per cycle", per(&rust).show(1));
        println!("C API:    {} us per cycle", per(&c_api).show(1));
        // blocks are not paired in time (the Rust API runs first): ratio of the medians
        println!(
            "time ratio C / Rust (of the medians): {:.3}",
            Spread::of(c_api.iter().copied()).median / Spread::of(rust.iter().copied()).median
        );
    }
    Ok(())
}
