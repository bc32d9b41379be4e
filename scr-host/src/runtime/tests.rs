//! The runtime's logic in-process: threads act as ranks over the in-process
//! [`World`](super::world::World) (`world::inproc`), so agreement, the configuration
//! check, output, restart and the rebuild of a lost node run without `mpiexec`.
//!
//! The full-lifecycle test loads the shipped scheme plugins from the build's target
//! directory (as the runtime does in development); the workspace build that precedes the
//! test suite makes them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::world::inproc::run_ranks;
use super::world::World;
use super::*;

/// A loader for a job on simulated nodes `nodes` (one entry per rank) in `dir`, with
/// `extra` variables.
fn loader(dir: &Path, nodes: &[&str], extra: &[(&str, &str)]) -> Loader {
    let mut l = Loader::from_process();
    let mut env: BTreeMap<String, String> = [
        ("SCR_PREFIX", dir.join("prefix").display().to_string()),
        ("SCR_CACHE_BASE", dir.join("cache").display().to_string()),
        ("SCR_CNTL_BASE", dir.join("cntl").display().to_string()),
        ("SCR_JOB_ID", "inproc".to_string()),
        ("SCR_NODE_NAMES", nodes.join(",")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    for (k, v) in extra {
        env.insert(k.to_string(), v.to_string());
    }
    l.env = env;
    l.system_file = Some(PathBuf::from("/dev/null"));
    l.cwd = dir.join("prefix");
    l
}

fn error_text<T>(r: &Result<T>) -> String {
    r.as_ref().err().map(|e| e.to_string()).unwrap_or_default()
}

#[test]
fn a_failure_on_some_ranks_reaches_every_rank_as_the_first_failing_ranks_error() {
    let out = run_ranks(4, |w: Box<dyn World>| {
        let me = w.rank();
        let local: Result<u32> = if me == 1 || me == 3 {
            Err(ScrError::Usage(format!("rank {me} refused")))
        } else {
            Ok(me)
        };
        let agreed = agree::agree_on(&*w, local);
        let all_ok = agree::agree_on(&*w, Ok::<u32, ScrError>(me));
        (error_text(&agreed), all_ok.ok())
    });
    assert_eq!(out.len(), 4, "one outcome per rank");
    // failing ranks keep their own error; the others learn rank 1's, the first
    assert_eq!(out[1].0, "rank 1 refused");
    assert_eq!(out[3].0, "rank 3 refused");
    for r in [0, 2] {
        assert_eq!(
            out[r].0,
            "another rank failed, this rank stops with it: rank 1: rank 1 refused"
        );
    }
    let ok: Vec<Option<u32>> = out.iter().map(|o| o.1).collect();
    assert_eq!(ok, vec![Some(0), Some(1), Some(2), Some(3)]);
}

#[test]
fn a_rank_with_another_configuration_is_named_on_every_rank() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["n0", "n0", "n1", "n1"];
    let out = run_ranks(4, |w: Box<dyn World>| {
        let extra: &[(&str, &str)] = if w.rank() == 2 {
            &[("SCR_CACHE_SIZE", "7")]
        } else {
            &[]
        };
        let config = init::load_config(&*w, loader(dir.path(), &nodes, extra));
        let config = agree::agree_on(&*w, config).expect("every rank loads a configuration");
        error_text(&agree::agree_on(&*w, init::same_config(&*w, &config)))
    });
    for (rank, text) in out.iter().enumerate() {
        assert!(
            text.contains("rank 2") && text.contains("cache_size"),
            "rank {rank}: {text}"
        );
    }
}

/// What one rank writes for checkpoint `step`.
fn content(rank: u32, step: u32) -> Vec<u8> {
    (0..3000u32)
        .map(|i| (i.wrapping_mul(31) ^ (rank * 7) ^ step) as u8)
        .collect()
}

/// One run: init, then either write checkpoint `write` or read back the restart.
fn run(dir: &Path, nodes: &[&str], write: Option<u32>) -> Vec<std::result::Result<String, String>> {
    run_ranks(nodes.len() as u32, |w: Box<dyn World>| {
        let me = w.rank();
        let l = loader(dir, nodes, &[("SCR_COPY_TYPE", "XOR"), ("SCR_FLUSH", "0")]);
        let mut rt = Runtime::init_in(w, l, InitOptions::default()).map_err(|e| e.to_string())?;
        let outcome = match write {
            Some(step) => (|| {
                rt.start_output(
                    &format!("ckpt.{step}"),
                    OutputFlags {
                        checkpoint: true,
                        output: false,
                    },
                )?;
                let path = rt.route_file(&dir.join("prefix").join(format!("rank_{me}.dat")))?;
                std::fs::write(&path, content(me, step)).map_err(io_err(&path))?;
                rt.complete_output(true)?;
                Ok::<String, ScrError>(format!("wrote ckpt.{step}"))
            })(),
            None => (|| {
                let Some(name) = rt.have_restart() else {
                    return Ok("no restart".to_string());
                };
                rt.start_restart()?;
                let path = rt.route_file(&dir.join("prefix").join(format!("rank_{me}.dat")))?;
                let bytes = std::fs::read(&path).map_err(io_err(&path))?;
                let step: u32 = name.trim_start_matches("ckpt.").parse().unwrap_or(0);
                rt.complete_restart(bytes == content(me, step))?;
                Ok(if bytes == content(me, step) {
                    format!("restarted from {name}, byte-exact")
                } else {
                    format!("restarted from {name}, bytes differ")
                })
            })(),
        };
        let end = rt.finalize();
        let outcome = outcome.map_err(|e| e.to_string())?;
        end.map_err(|e| e.to_string())?;
        Ok(outcome)
    })
}

#[test]
fn a_node_lost_after_a_checkpoint_is_rebuilt_through_xor_in_process() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("prefix")).unwrap();
    let nodes = ["n0", "n1", "n2", "n3"];
    let wrote = run(dir.path(), &nodes, Some(5));
    assert_eq!(wrote, vec![Ok("wrote ckpt.5".to_string()); 4], "{wrote:?}");

    // node n2 loses its cache and control directories
    for base in ["cache", "cntl"] {
        let lost = dir.path().join(base).join("n2");
        assert!(lost.is_dir(), "{} was written", lost.display());
        std::fs::remove_dir_all(&lost).unwrap();
    }
    let restarted = run(dir.path(), &nodes, None);
    assert_eq!(
        restarted,
        vec![Ok("restarted from ckpt.5, byte-exact".to_string()); 4],
        "{restarted:?}"
    );

    // two nodes of the one XOR set lost (one beyond what XOR tolerates), nothing
    // flushed: the checkpoint is dropped and no restart offered, alike on every rank
    for node in ["n0", "n3"] {
        for base in ["cache", "cntl"] {
            std::fs::remove_dir_all(dir.path().join(base).join(node)).unwrap();
        }
    }
    let after = run(dir.path(), &nodes, None);
    assert_eq!(after, vec![Ok("no restart".to_string()); 4], "{after:?}");
}
