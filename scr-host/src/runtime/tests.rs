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
use crate::config::Loader;
use crate::state::halt::Halt;

/// The job id and user of the in-process jobs (fixed: the paths the tests look at are
/// the ones the runtime made, whatever the environment says).
const JOB: &str = "inproc";
const USER: &str = "tester";

/// A loader for a job on simulated nodes `nodes` (one entry per rank) in `dir`, with
/// `extra` variables.
fn loader(dir: &Path, nodes: &[&str], extra: &[(&str, &str)]) -> Loader {
    let mut l = Loader::from_process();
    let mut env: BTreeMap<String, String> = [
        ("SCR_PREFIX", dir.join("prefix").display().to_string()),
        ("SCR_CACHE_BASE", dir.join("cache").display().to_string()),
        ("SCR_CNTL_BASE", dir.join("cntl").display().to_string()),
        ("SCR_JOB_ID", JOB.to_string()),
        ("SCR_USER", USER.to_string()),
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
    run_with(
        dir,
        nodes,
        &[("SCR_COPY_TYPE", "XOR"), ("SCR_FLUSH", "0")],
        write,
    )
}

/// [`run`] with the settings `env`.
fn run_with(
    dir: &Path,
    nodes: &[&str],
    env: &[(&str, &str)],
    write: Option<u32>,
) -> Vec<std::result::Result<String, String>> {
    run_ranks(nodes.len() as u32, |w: Box<dyn World>| {
        let me = w.rank();
        let l = loader(dir, nodes, env);
        let mut rt = init_hooked(w, l, InitOptions::default()).map_err(|e| e.to_string())?;
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

/// Run `f` on every rank's runtime (a job on `nodes`, with `extra` variables), then
/// finalize: each rank's report and whether its finalize succeeded.
fn job<T: Send>(
    dir: &Path,
    nodes: &[&str],
    extra: &[(&str, &str)],
    f: impl Fn(&mut Runtime, u32) -> T + Sync,
) -> Vec<(T, std::result::Result<(), String>)> {
    std::fs::create_dir_all(dir.join("prefix")).unwrap();
    run_ranks(nodes.len() as u32, |w: Box<dyn World>| {
        let me = w.rank();
        let mut rt = init_hooked(w, loader(dir, nodes, extra), InitOptions::default())
            .unwrap_or_else(|e| panic!("rank {me}: init: {e}"));
        let report = f(&mut rt, me);
        (report, rt.finalize().map_err(|e| e.to_string()))
    })
}

/// [`job`] with each rank's log lines (as the runtime prints them) beside its report.
fn job_logged<T: Send>(
    dir: &Path,
    nodes: &[&str],
    extra: &[(&str, &str)],
    f: impl Fn(&mut Runtime, u32) -> T + Sync,
) -> Vec<(T, std::result::Result<(), String>, Vec<String>)> {
    use tracing_subscriber::layer::SubscriberExt as _;
    std::fs::create_dir_all(dir.join("prefix")).unwrap();
    run_ranks(nodes.len() as u32, |w: Box<dyn World>| {
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = lines.clone();
        let layer =
            crate::log::ScrLayer::new(move |l: &str| sink.lock().unwrap().push(l.to_string()));
        let subscriber = tracing_subscriber::registry().with(layer);
        let (report, end) = tracing::subscriber::with_default(subscriber, || {
            let me = w.rank();
            let mut rt = init_hooked(w, loader(dir, nodes, extra), InitOptions::default())
                .unwrap_or_else(|e| panic!("rank {me}: init: {e}"));
            let report = f(&mut rt, me);
            (report, rt.finalize().map_err(|e| e.to_string()))
        });
        let lines = lines.lock().unwrap().clone();
        (report, end, lines)
    })
}

/// `what: ok VALUE` or `what: ERROR`, as the end-to-end probe reports a call.
fn show<T: std::fmt::Display>(what: &str, r: Result<T>) -> String {
    match r {
        Ok(v) => format!("{what}: ok {v}"),
        Err(e) => format!("{what}: {e}"),
    }
}

const CHECKPOINT: OutputFlags = OutputFlags {
    checkpoint: true,
    output: false,
};

/// Write checkpoint `name` (one file `file` per rank in the prefix directory).
fn write_checkpoint(rt: &mut Runtime, dir: &Path, name: &str, file: &str) -> Result<bool> {
    write_dataset(rt, dir, name, file, CHECKPOINT)
}

/// Dataset `name` with `flags`, one file `file` holding "`name` `file`".
fn write_dataset(
    rt: &mut Runtime,
    dir: &Path,
    name: &str,
    file: &str,
    flags: OutputFlags,
) -> Result<bool> {
    rt.start_output(name, flags)?;
    let p = rt.route_file(&dir.join("prefix").join(file))?;
    std::fs::write(&p, format!("{name} {file}")).map_err(io_err(&p))?;
    rt.complete_output(true)
}

/// An output dataset that is not a checkpoint.
const OUTPUT: OutputFlags = OutputFlags {
    checkpoint: false,
    output: true,
};

/// A rank that cannot record a dataset as complete after every rank decided to keep it
/// (an injected control-directory failure on rank 2) makes every rank discard it, keeps
/// the previous checkpoint as the restart candidate, and the next checkpoint works.
/// (Moved here from the end-to-end suite: it checks the runtime's agreement only.)
#[test]
fn a_commit_failing_on_one_rank_discards_the_dataset_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["n0", "n1", "n2", "n3"];
    let faulty = [
        ("SCR_FAULT", "commit:2:2"),
        ("SCR_COPY_TYPE", "XOR"),
        ("SCR_SET_SIZE", "4"),
    ];
    let out = job(dir.path(), &nodes, &faulty, |rt, r| {
        let mut lines = Vec::new();
        for n in 1..=3 {
            let name = format!("ckpt.{n}");
            lines.push(
                match write_checkpoint(rt, dir.path(), &name, &format!("c{n}_{r}.dat")) {
                    Ok(kept) => format!("{name} kept {kept}"),
                    Err(e) => format!("{name} error: {e}"),
                },
            );
            lines.push(format!("candidate {:?}", rt.have_restart()));
        }
        lines
    });
    for (r, (lines, end)) in out.iter().enumerate() {
        assert_eq!(lines, &out[0].0, "rank {r} returned something else");
        assert_eq!(end, &Ok(()), "rank {r}: finalize");
    }
    let lines = &out[0].0;
    assert_eq!(lines[0], "ckpt.1 kept true");
    assert_eq!(lines[1], "candidate Some(\"ckpt.1\")");
    assert!(
        lines[2].starts_with(
            "ckpt.2 error: complete_output ckpt.2: the dataset could not be recorded as complete on rank 2: "
        ) && lines[2].contains("injected failure (commit:2:2)")
            && lines[2].contains("discarded on every rank"),
        "{}",
        lines[2]
    );
    assert_eq!(lines[3], "candidate Some(\"ckpt.1\")");
    assert_eq!(lines[4], "ckpt.3 kept true");
    assert_eq!(lines[5], "candidate Some(\"ckpt.3\")");
    for node in nodes {
        // the job directory is there (with ckpt.1 and ckpt.3); nothing of ckpt.2 is
        let job = cache_job_dir(dir.path(), node);
        let held = listing(&job);
        assert!(
            held.contains(&"scr.dataset.3".to_string()),
            "{node}: {held:?}"
        );
        let ds2 = crate::layout::cache_dataset_dir(&job, 2);
        let left = if ds2.exists() {
            listing(&ds2)
        } else {
            Vec::new()
        };
        assert!(left.is_empty(), "{}: {left:?}", ds2.display());
    }
    // a restart finds ckpt.3 on every rank
    let again = job(dir.path(), &nodes, &faulty[1..], |rt, _| {
        format!("candidate {:?}", rt.have_restart())
    });
    for (report, _) in &again {
        assert_eq!(report, "candidate Some(\"ckpt.3\")");
    }
}

/// Node `node`'s job directory in the cache (see [`loader`]).
fn cache_job_dir(dir: &Path, node: &str) -> PathBuf {
    crate::layout::job_dir(&dir.join("cache"), true, node, USER, JOB)
}

/// The names of what `dir` holds, sorted; the directory must exist (a wrong path must
/// not pass for an empty directory).
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// A delete that fails on one rank after the others deleted their files leaves the
/// ranks' caches diverged: that call fails everywhere, every later call is refused on
/// every rank saying to finalize, and finalize still works with a dataset open.
/// (Moved here from the end-to-end suite.)
#[test]
fn after_a_call_leaves_state_uncertain_every_rank_refuses_further_calls() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["n0", "n1", "n2", "n3"];
    let out = job_logged(
        dir.path(),
        &nodes,
        &[("SCR_FAULT", "delete:1:1")],
        |rt, r| {
            let mut lines = vec![show(
                "kept",
                write_checkpoint(rt, dir.path(), "ckpt.1", &format!("c_{r}.dat")),
            )];
            rt.start_output("ckpt.2", CHECKPOINT).expect("start");
            let p = rt
                .route_file(&dir.path().join("prefix").join(format!("d_{r}.dat")))
                .unwrap();
            std::fs::write(&p, b"two").unwrap();
            lines.push(show("delete", rt.delete("ckpt.1").map(|_| "")));
            lines.push(show(
                "start",
                rt.start_output("ckpt.2", CHECKPOINT).map(|_| ""),
            ));
            lines.push(show("need", rt.need_checkpoint()));
            lines.push(show(
                "route",
                rt.route_file(Path::new("x.dat"))
                    .map(|p| p.display().to_string()),
            ));
            lines.push(show("exit", rt.should_exit()));
            lines
        },
    );
    // rank 0 says it (the runtime's warnings are rank 0's)
    assert!(
        out[0]
            .2
            .iter()
            .any(|l| l.contains("finalize: a dataset was still being written; it is discarded")),
        "{:?}",
        out[0].2
    );
    for (r, (lines, end, _)) in out.iter().enumerate() {
        assert_eq!(end, &Ok(()), "rank {r}: finalize worked");
        assert_eq!(lines[0], "kept: ok true", "rank {r}: {lines:?}");
        assert!(
            lines[1].starts_with("delete: ") && lines[1].contains("injected failure (delete:1:1)"),
            "rank {r}: {lines:?}"
        );
        for (line, (call, api)) in lines[2..].iter().zip([
            ("start", "start_output"),
            ("need", "need_checkpoint"),
            ("route", "route_file"),
            ("exit", "should_exit"),
        ]) {
            assert!(
                line.starts_with(&format!(
                    "{call}: {api}: refused, because an earlier call left the ranks' cached state uncertain (delete: "
                )) && line.contains("call finalize (or MPI_Abort)"),
                "rank {r}: {line}"
            );
        }
        assert_eq!(lines.len(), 6, "rank {r}: {lines:?}");
    }
    for node in nodes {
        // the job directory is there (listing panics otherwise); the open ckpt.2 is gone
        let job = cache_job_dir(dir.path(), node);
        listing(&job);
        let open = crate::layout::cache_dataset_dir(&job, 2);
        let left = if open.exists() {
            listing(&open)
        } else {
            Vec::new()
        };
        assert!(
            left.is_empty(),
            "{}: the open dataset was not dropped: {left:?}",
            open.display()
        );
    }
}

/// Collective calls misused on some ranks only — a bad dataset name on rank 3, a name
/// rank 1 does not know given to current/drop/delete, complete_restart without
/// start_restart on rank 2 — fail on every rank instead of leaving the others waiting,
/// and the ranks stay in step. (Moved here from the end-to-end suite.)
#[test]
fn a_call_misused_on_some_ranks_fails_on_every_rank_and_leaves_them_in_step() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["n0", "n1", "n2", "n3"];
    let out = job(dir.path(), &nodes, &[], |rt, r| {
        let name = if r == 3 { "bad/name" } else { "ckpt.1" };
        let mut lines = vec![show("start", rt.start_output(name, CHECKPOINT).map(|_| ""))];
        lines.push(show(
            "complete",
            write_checkpoint(rt, dir.path(), "ckpt.1", &format!("c_{r}.dat")),
        ));
        let name = if r == 1 { "nope" } else { "ckpt.1" };
        lines.push(show("current", rt.current(name).map(|_| "")));
        lines.push(show("drop", rt.drop_dataset(name).map(|_| "")));
        lines.push(show("delete", rt.delete(name).map(|_| "")));
        let restart = if r == 2 {
            rt.complete_restart(true)
        } else {
            rt.start_restart().and_then(|_| rt.complete_restart(true))
        };
        lines.push(show("restart", restart));
        lines.push(format!("candidate {:?}", rt.have_restart()));
        lines
    });
    for (r, (lines, _)) in out.iter().enumerate() {
        let cause = "dataset name `bad/name` must be non-empty and contain no `/`";
        assert!(
            lines[0].starts_with("start: ") && lines[0].contains(cause),
            "rank {r}: {lines:?}"
        );
        assert_eq!(lines[1], "complete: ok true", "rank {r}: {lines:?}");
        assert!(
            lines[2].starts_with("current: ")
                && lines[2].contains("no dataset named `nope` in cache"),
            "rank {r}: {}",
            lines[2]
        );
        // drop and delete accept a name nothing holds (as SCR does), but not names that
        // differ between ranks
        for (line, call) in lines[3..5].iter().zip(["drop", "delete"]) {
            assert!(
                line.starts_with(&format!("{call}: "))
                    && line.contains(&format!(
                        "{call}: this rank names dataset `nope`, rank 0 `ckpt.1`; every rank must name the same dataset"
                    )),
                "rank {r}: {line}"
            );
        }
        assert!(
            lines[5].starts_with("restart: ")
                && lines[5].contains("complete_restart: no restart in progress"),
            "rank {r}: {lines:?}"
        );
        assert_eq!(
            lines[6], "candidate Some(\"ckpt.1\")",
            "rank {r}: {lines:?}"
        );
    }
    // the rank that misused the call names the cause itself; the others name its rank
    assert!(
        out[1].0[2].starts_with("current: no dataset named"),
        "{:?}",
        out[1].0
    );
    assert!(
        out[0].0[2].contains("rank 1: no dataset named"),
        "{:?}",
        out[0].0
    );
}

/// Two ranks routing one file name into one dataset is a usage error on every rank, naming
/// both ranks; the dataset is not kept and the previous checkpoint stays the candidate.
/// (Moved here from the end-to-end suite, with the same message.)
#[test]
fn a_name_routed_by_two_ranks_is_refused_on_every_rank() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["n0", "n0", "n1", "n1"];
    let out = job(dir.path(), &nodes, &[], |rt, r| {
        let first = show(
            "ckpt.1",
            write_checkpoint(rt, dir.path(), "ckpt.1", &format!("a_{r}.dat")),
        );
        // ranks 1 and 2 both write shared.dat
        let file = if r == 1 || r == 2 {
            "shared.dat".to_string()
        } else {
            format!("b_{r}.dat")
        };
        let second = show("ckpt.2", write_checkpoint(rt, dir.path(), "ckpt.2", &file));
        (first, second, rt.have_restart())
    });
    for (r, ((first, second, candidate), end)) in out.iter().enumerate() {
        assert_eq!(first, "ckpt.1: ok true", "rank {r}");
        assert_eq!(
            second,
            "ckpt.2: complete_output ckpt.2: ranks 1 and 2 both routed `shared.dat`; each rank must write files of its own; dataset discarded",
            "rank {r}"
        );
        assert_eq!(candidate.as_deref(), Some("ckpt.1"), "rank {r}");
        assert_eq!(end, &Ok(()), "rank {r}");
    }
}

/// A restart the application reports invalid is not offered again: the next older
/// checkpoint in cache is, on every rank alike, and the invalid one is deleted.
#[test]
fn an_invalid_restart_falls_back_to_the_next_older_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["n0", "n1"];
    let wrote = job(dir.path(), &nodes, &[("SCR_CACHE_SIZE", "3")], |rt, r| {
        (1..=2)
            .map(|n| {
                write_checkpoint(rt, dir.path(), &format!("ckpt.{n}"), &format!("f{n}_{r}")).is_ok()
            })
            .collect::<Vec<_>>()
    });
    assert!(wrote.iter().all(|(w, _)| w == &[true, true]), "{wrote:?}");
    let out = job(dir.path(), &nodes, &[("SCR_CACHE_SIZE", "3")], |rt, _| {
        let mut seen = Vec::new();
        while let Some(name) = rt.have_restart() {
            seen.push(name.clone());
            rt.start_restart().expect("start_restart");
            // the application finds ckpt.2 unusable, ckpt.1 good
            let valid = name == "ckpt.1";
            let all_valid = rt.complete_restart(valid).expect("complete_restart");
            if all_valid {
                break;
            }
        }
        seen
    });
    for (r, (seen, end)) in out.iter().enumerate() {
        assert_eq!(seen, &["ckpt.2", "ckpt.1"], "rank {r}");
        assert_eq!(end, &Ok(()), "rank {r}");
    }
    // the invalid checkpoint left the cache (as SCR deletes it): a later run offers the
    // older one first
    for node in nodes {
        assert_eq!(
            listing(&cache_job_dir(dir.path(), node)),
            ["scr.dataset.1"],
            "{node}"
        );
    }
    let next = job(dir.path(), &nodes, &[("SCR_CACHE_SIZE", "3")], |rt, _| {
        rt.have_restart()
    });
    for (r, (offered, _)) in next.iter().enumerate() {
        assert_eq!(offered.as_deref(), Some("ckpt.1"), "rank {r}");
    }
}

/// A store of `cache_size` 2: the oldest checkpoint is evicted from every rank's cache
/// when a third is written, and the newest two stay.
#[test]
fn the_oldest_checkpoint_is_evicted_from_every_rank_alike() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["n0", "n1", "n2"];
    let out = job(dir.path(), &nodes, &[("SCR_CACHE_SIZE", "2")], |rt, r| {
        for n in 1..=3 {
            write_checkpoint(rt, dir.path(), &format!("ckpt.{n}"), &format!("f{n}_{r}"))
                .expect("checkpoint");
        }
        let mut held: Vec<u64> = rt.cache.ids();
        held.sort_unstable();
        held
    });
    for (r, (held, end)) in out.iter().enumerate() {
        assert_eq!(held, &[2, 3], "rank {r}: the filemap keeps the newest two");
        assert_eq!(end, &Ok(()), "rank {r}");
    }
    for node in nodes {
        // on disk too: exactly the newest two, each with this node's file
        let job = cache_job_dir(dir.path(), node);
        assert_eq!(listing(&job), ["scr.dataset.2", "scr.dataset.3"], "{node}");
        for id in [2, 3] {
            let files = listing(&crate::layout::cache_dataset_dir(&job, id));
            assert!(
                files.iter().any(|f| f.starts_with(&format!("f{id}_"))),
                "{node}: dataset {id} holds {files:?}"
            );
        }
    }
}

/// A halt condition set in the prefix's halt file (as `scr halt` does) is seen by
/// should_exit on every rank, and need_checkpoint follows checkpoint_interval.
#[test]
fn a_halt_condition_is_seen_on_every_rank_and_the_interval_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["n0", "n1", "n2", "n3"];
    let out = job(
        dir.path(),
        &nodes,
        &[("SCR_CHECKPOINT_INTERVAL", "2"), ("SCR_HALT_EXIT", "0")],
        |rt, r| {
            let asked: Vec<bool> = (0..4).map(|_| rt.need_checkpoint().unwrap()).collect();
            let before = rt.should_exit().unwrap();
            rt.world.barrier();
            if r == 0 {
                Halt::update(&dir.path().join("prefix"), |h| {
                    h.exit_reason = Some("maintenance at noon".into());
                    (true, ())
                })
                .unwrap();
            }
            rt.world.barrier();
            (asked, before, rt.should_exit().unwrap())
        },
    );
    for (r, ((asked, before, after), end)) in out.iter().enumerate() {
        assert_eq!(
            asked,
            &[false, true, false, true],
            "rank {r}: every 2nd call"
        );
        assert!(!before, "rank {r}: no halt condition yet");
        assert!(after, "rank {r}: the halt file's condition");
        assert_eq!(end, &Ok(()), "rank {r}");
    }
    let halt = Halt::load(&dir.path().join("prefix")).unwrap();
    assert_eq!(halt.exit_reason.as_deref(), Some("maintenance at noon"));
}

/// During a restart a file may be named by its base name alone (SCR 3.x): `f_1` finds
/// `sub/f_1` of the checkpoint; a base name two files share is refused naming both, and
/// a name the checkpoint does not hold at all is refused as before.
#[test]
fn a_restart_finds_a_file_by_its_base_name_unless_two_share_it() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["n0", "n1"];
    let prefix = dir.path().join("prefix");
    let wrote = job(dir.path(), &nodes, &[], |rt, r| {
        rt.start_output("ckpt.1", CHECKPOINT)?;
        for sub in ["sub", "a", "b"] {
            let name = if sub == "sub" {
                format!("sub/f_{r}")
            } else {
                format!("{sub}/same_{r}")
            };
            let p = rt.route_file(&prefix.join(name))?;
            std::fs::write(&p, format!("{sub} of rank {r}")).map_err(io_err(&p))?;
        }
        rt.complete_output(true)
    });
    for (r, (kept, _)) in wrote.iter().enumerate() {
        assert!(matches!(kept, Ok(true)), "rank {r}: {kept:?}");
    }
    let out = job(dir.path(), &nodes, &[], |rt, r| {
        rt.start_restart().expect("a restart");
        let bare = rt
            .route_file(&prefix.join(format!("f_{r}")))
            .map(|p| std::fs::read_to_string(p).unwrap_or_default());
        let shared = rt
            .route_file(&prefix.join(format!("same_{r}")))
            .map(|p| p.display().to_string());
        let absent = rt
            .route_file(&prefix.join("never"))
            .map(|p| p.display().to_string());
        rt.complete_restart(true).expect("complete_restart");
        (
            show("bare", bare),
            show("shared", shared),
            show("absent", absent),
        )
    });
    for (r, ((bare, shared, absent), _)) in out.iter().enumerate() {
        assert_eq!(bare, &format!("bare: ok sub of rank {r}"), "rank {r}");
        assert_eq!(
            shared,
            &format!(
                "shared: route_file: `{}` names no file of the checkpoint, and its base name matches both `a/same_{r}` and `b/same_{r}`; give the file's path",
                prefix.join(format!("same_{r}")).display()
            ),
            "rank {r}"
        );
        assert!(
            absent.starts_with("absent: route_file: ")
                && absent.contains("is not a file of checkpoint ckpt.1"),
            "rank {r}: {absent}"
        );
    }
}

/// A checkpoint from the prefix that the application reports invalid is marked failed in
/// the index and the next older one is offered — fetched, or read in place with
/// `fetch = false` — never a newer one, also when `current` (here `scr index current`)
/// pinned the one that failed. Every cache is lost first, so every restart comes from
/// the prefix.
#[test]
fn an_invalid_restart_from_the_prefix_falls_back_to_the_next_older_one_there() {
    for fetch in ["1", "0"] {
        for pinned in [None, Some("ckpt.2")] {
            let dir = tempfile::tempdir().unwrap();
            let nodes = ["n0", "n1"];
            let prefix = dir.path().join("prefix");
            let env = [("SCR_FLUSH", "1"), ("SCR_FETCH", fetch)];
            let wrote = job(dir.path(), &nodes, &env, |rt, r| {
                (1..=3)
                    .map(|n| {
                        write_checkpoint(rt, dir.path(), &format!("ckpt.{n}"), &format!("f{n}_{r}"))
                            .is_ok()
                    })
                    .collect::<Vec<_>>()
            });
            assert!(
                wrote.iter().all(|(w, end)| w == &[true; 3] && end.is_ok()),
                "{wrote:?}"
            );
            if let Some(name) = pinned {
                crate::state::prefix::Index::set_current_in(&prefix, name).unwrap();
            }
            for base in ["cache", "cntl"] {
                std::fs::remove_dir_all(dir.path().join(base)).unwrap();
            }
            // the first checkpoint offered is reported invalid; the next must be older
            let first = pinned.unwrap_or("ckpt.3");
            let out = job(dir.path(), &nodes, &env, |rt, r| {
                let mut seen = Vec::new();
                while let Some(name) = rt.have_restart() {
                    rt.start_restart().expect("start_restart");
                    let n: u32 = name.trim_start_matches("ckpt.").parse().unwrap();
                    let file = format!("f{n}_{r}");
                    let path = rt.route_file(&prefix.join(&file)).expect("route_file");
                    let read = std::fs::read_to_string(&path).unwrap_or_default();
                    let exact = read == format!("{name} {file}");
                    seen.push(format!("{name} {exact}"));
                    if rt
                        .complete_restart(exact && name != first)
                        .expect("complete")
                    {
                        break;
                    }
                }
                seen
            });
            let next = if first == "ckpt.3" {
                "ckpt.2"
            } else {
                "ckpt.1"
            };
            for (r, (seen, end)) in out.iter().enumerate() {
                assert_eq!(
                    seen,
                    &[format!("{first} true"), format!("{next} true")],
                    "fetch {fetch}, pinned {pinned:?}, rank {r}"
                );
                assert_eq!(end, &Ok(()), "rank {r}");
            }
            let index = crate::state::prefix::Index::load(&prefix).unwrap();
            let failed: Vec<&str> = index
                .datasets
                .values()
                .filter(|e| e.failed.is_some())
                .map(|e| e.name.as_str())
                .collect();
            assert_eq!(failed, [first], "fetch {fetch}, pinned {pinned:?}");
        }
    }
}

/// SCR's Drop and Delete: drop removes the dataset's index entry (its files stay), delete
/// removes its files from cache and prefix and its entry; a name nothing holds is no
/// error.
#[test]
fn drop_and_delete_reach_the_prefix_and_a_name_nothing_holds_is_no_error() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["n0", "n1"];
    let prefix = dir.path().join("prefix");
    let out = job(dir.path(), &nodes, &[("SCR_FLUSH", "1")], |rt, r| {
        for n in 1..=3 {
            write_checkpoint(rt, dir.path(), &format!("ckpt.{n}"), &format!("f{n}_{r}"))
                .expect("checkpoint");
        }
        vec![
            show("drop", rt.drop_dataset("ckpt.1").map(|_| "")),
            show("delete", rt.delete("ckpt.2").map(|_| "")),
            show("drop unknown", rt.drop_dataset("nope").map(|_| "")),
            show("delete unknown", rt.delete("nope").map(|_| "")),
            format!("candidate {:?}", rt.have_restart()),
        ]
    });
    for (r, (lines, end)) in out.iter().enumerate() {
        assert_eq!(
            lines,
            &[
                "drop: ok ",
                "delete: ok ",
                "drop unknown: ok ",
                "delete unknown: ok ",
                "candidate Some(\"ckpt.3\")"
            ],
            "rank {r}"
        );
        assert_eq!(end, &Ok(()), "rank {r}");
    }
    let index = crate::state::prefix::Index::load(&prefix).unwrap();
    let names: Vec<&str> = index.datasets.values().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["ckpt.3"], "the index keeps only ckpt.3");
    for r in 0..2 {
        // dropped: its files stay in the prefix; deleted: gone
        assert!(
            prefix.join(format!("f1_{r}")).is_file(),
            "ckpt.1 of rank {r} stays"
        );
        assert!(
            !prefix.join(format!("f2_{r}")).exists(),
            "ckpt.2 of rank {r} deleted"
        );
        assert!(
            prefix.join(format!("f3_{r}")).is_file(),
            "ckpt.3 of rank {r} stays"
        );
    }
    assert!(!crate::layout::prefix_dataset_dir(&prefix, 2).exists());
    for node in nodes {
        let held = listing(&cache_job_dir(dir.path(), node));
        assert!(
            !held.contains(&"scr.dataset.2".to_string()),
            "{node}: {held:?}"
        );
        assert!(
            held.contains(&"scr.dataset.3".to_string()),
            "{node}: {held:?}"
        );
    }
}

/// A delete (or an invalid restart) of a dataset whose background flush has not been
/// recorded yet waits for it: recording it afterwards would otherwise bring the dataset
/// back into the index as complete and current.
#[test]
fn a_delete_during_a_background_flush_is_not_undone_by_its_recording() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["n0", "n1"];
    let prefix = dir.path().join("prefix");
    let env = [("SCR_FLUSH", "1"), ("SCR_FLUSH_ASYNC", "1")];
    let out = job(dir.path(), &nodes, &env, |rt, r| {
        write_checkpoint(rt, dir.path(), "ckpt.1", &format!("f1_{r}")).expect("ckpt.1");
        write_checkpoint(rt, dir.path(), "ckpt.2", &format!("f2_{r}")).expect("ckpt.2");
        show("delete", rt.delete("ckpt.2").map(|_| ""))
    });
    for (r, (line, end)) in out.iter().enumerate() {
        assert_eq!(line, "delete: ok ", "rank {r}");
        assert_eq!(end, &Ok(()), "rank {r}");
    }
    // finalize completed every flush: ckpt.1 recorded, ckpt.2 gone for good
    let index = crate::state::prefix::Index::load(&prefix).unwrap();
    let names: Vec<&str> = index.datasets.values().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["ckpt.1"]);
    assert_eq!(index.restart_point().as_deref(), Some("ckpt.1"));
    for r in 0..2 {
        assert!(prefix.join(format!("f1_{r}")).is_file(), "rank {r}");
        assert!(!prefix.join(format!("f2_{r}")).exists(), "rank {r}");
    }
}

/// Every regular file under `dir` (recursively), relative to it.
fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(relative_to_dir(dir, &p));
            }
        }
    }
    out.sort();
    out
}

fn relative_to_dir(dir: &Path, p: &Path) -> String {
    p.strip_prefix(dir).unwrap_or(p).display().to_string()
}

/// One run of 4 ranks on 2 nodes with `SCR_CACHE_BYPASS=1` (and `extra` settings, SCR_Config
/// calls in `api`): write checkpoint `ckpt.1` — one file written by every rank at its own
/// offset (`shared.dat`) and one file per rank — or read it back. Each rank returns what
/// happened, in words.
fn bypass_run(
    dir: &Path,
    write: bool,
    extra: &[(&str, &str)],
    api: &[&str],
) -> Vec<std::result::Result<String, String>> {
    use std::os::unix::fs::FileExt;
    let nodes = ["n0", "n0", "n1", "n1"];
    run_ranks(4, |w: Box<dyn World>| {
        let me = w.rank();
        let mut env = vec![("SCR_CACHE_BYPASS", "1"), ("SCR_COPY_TYPE", "XOR")];
        env.extend_from_slice(extra);
        let mut l = loader(dir, &nodes, &env);
        l.api = api
            .iter()
            .enumerate()
            .map(|(i, s)| (i + 1, s.to_string()))
            .collect();
        let mut rt = init_hooked(w, l, InitOptions::default()).map_err(|e| e.to_string())?;
        let prefix = dir.join("prefix");
        let outcome = (|| {
            if write {
                // outside a dataset the name comes back as it was given
                let outside = rt.route_file(Path::new("shared.dat"))?;
                assert_eq!(outside, Path::new("shared.dat"));
                rt.start_output(
                    "ckpt.1",
                    OutputFlags {
                        checkpoint: true,
                        output: false,
                    },
                )?;
                let shared = rt.route_file(&prefix.join("shared.dat"))?;
                let own = rt.route_file(&prefix.join(format!("sub/rank_{me}.dat")))?;
                let f = std::fs::OpenOptions::new()
                    .create(true)
                    .write(true)
                    .truncate(false)
                    .open(&shared)
                    .map_err(io_err(&shared))?;
                f.write_all_at(&content(me, 1), u64::from(me) * 3000)
                    .map_err(io_err(&shared))?;
                std::fs::write(&own, content(me, 2)).map_err(io_err(&own))?;
                let kept = rt.complete_output(true)?;
                Ok(format!(
                    "kept {kept}, shared at {}, own at {}",
                    relative_to_dir(&prefix, &shared),
                    relative_to_dir(&prefix, &own)
                ))
            } else {
                let Some(name) = rt.have_restart() else {
                    return Ok("no restart".to_string());
                };
                rt.start_restart()?;
                let shared = rt.route_file(&prefix.join("shared.dat"))?;
                // a base name alone finds the rank's own file in its directory
                let own = rt.route_file(&prefix.join(format!("rank_{me}.dat")))?;
                let mut mine = vec![0u8; 3000];
                std::fs::File::open(&shared)
                    .and_then(|f| f.read_exact_at(&mut mine, u64::from(me) * 3000))
                    .map_err(io_err(&shared))?;
                let own_bytes = std::fs::read(&own).map_err(io_err(&own))?;
                let exact = mine == content(me, 1) && own_bytes == content(me, 2);
                rt.complete_restart(exact)?;
                Ok(format!(
                    "restarted from {name} at {} and {}, byte-exact {exact}",
                    relative_to_dir(&prefix, &shared),
                    relative_to_dir(&prefix, &own)
                ))
            }
        })();
        rt.finalize().map_err(|e| e.to_string())?;
        outcome.map_err(|e: ScrError| e.to_string())
    })
}

#[test]
fn a_bypass_checkpoint_is_written_in_the_prefix_shared_file_and_all_and_restarts_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let wrote = bypass_run(dir.path(), true, &[], &[]);
    for (r, o) in wrote.iter().enumerate() {
        assert_eq!(
            o.as_deref(),
            Ok(format!("kept true, shared at shared.dat, own at sub/rank_{r}.dat").as_str()),
            "rank {r}"
        );
    }
    let prefix = dir.path().join("prefix");
    let shared = std::fs::read(prefix.join("shared.dat")).unwrap();
    let expected: Vec<u8> = (0..4).flat_map(|r| content(r, 1)).collect();
    assert_eq!(shared, expected, "every rank's part of the shared file");
    for r in 0..4 {
        assert_eq!(
            std::fs::read(prefix.join(format!("sub/rank_{r}.dat"))).unwrap(),
            content(r, 2)
        );
    }
    // nothing in cache: no file of the dataset, and no redundancy data
    assert_eq!(
        files_under(&dir.path().join("cache")),
        Vec::<String>::new(),
        "the cache holds nothing"
    );
    // recorded as a flushed dataset: complete in the index, with summary and rank2file
    let ix = prefix::Index::load(&prefix).unwrap();
    let entry = ix.datasets.values().find(|e| e.name == "ckpt.1").unwrap();
    assert!(entry.complete && entry.failed.is_none(), "{entry:?}");
    assert_eq!(entry.checkpoint_id, Some(1));
    let summary: prefix::Summary =
        crate::state::read_state(&prefix::Summary::path(&prefix, entry.id), "summary").unwrap();
    // the shared file once per rank that wrote it, and each rank's own
    assert_eq!((summary.files, summary.bytes), (8, 4 * 12000 + 4 * 3000));

    let read = bypass_run(dir.path(), false, &[], &[]);
    for (r, o) in read.iter().enumerate() {
        assert_eq!(
            o.as_deref(),
            Ok(format!(
                "restarted from ckpt.1 at shared.dat and sub/rank_{r}.dat, byte-exact true"
            )
            .as_str()),
            "rank {r}"
        );
    }
    assert_eq!(files_under(&dir.path().join("cache")), Vec::<String>::new());

    // a byte changed in the shared file: the restart check (CRC32 recorded when the
    // dataset completed) refuses it on every rank, and there is no older one
    let mut damaged = shared.clone();
    damaged[7000] ^= 1;
    std::fs::write(prefix.join("shared.dat"), &damaged).unwrap();
    let read = bypass_run(dir.path(), false, &[], &[]);
    for (r, o) in read.iter().enumerate() {
        assert_eq!(o.as_deref(), Ok("no restart"), "rank {r}");
    }
    let ix = prefix::Index::load(&prefix).unwrap();
    let failed = ix.datasets.values().find(|e| e.name == "ckpt.1").unwrap();
    assert!(
        failed
            .failed
            .as_deref()
            .is_some_and(|f| f.contains("CRC32")),
        "{failed:?}"
    );
}

#[test]
fn without_bypass_a_file_written_by_two_ranks_is_refused_and_an_output_descriptor_is_chosen_for_output(
) {
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["n0", "n0", "n1", "n1"];
    let out = run_ranks(4, |w: Box<dyn World>| {
        let me = w.rank();
        let mut l = loader(dir.path(), &nodes, &[("SCR_COPY_TYPE", "SINGLE")]);
        // checkpoints in cache; outputs in the prefix through the descriptor marked output
        l.api = vec![
            (1, "CKPT=0 TYPE=SINGLE".to_string()),
            (2, "CKPT=1 TYPE=SINGLE OUTPUT=1 BYPASS=1".to_string()),
        ];
        let mut rt = init_hooked(w, l, InitOptions::default()).map_err(|e| e.to_string())?;
        let prefix = dir.path().join("prefix");
        let ck = OutputFlags {
            checkpoint: true,
            output: false,
        };
        rt.start_output("ckpt.1", ck).map_err(|e| e.to_string())?;
        let shared = rt
            .route_file(&prefix.join("shared.dat"))
            .map_err(|e| e.to_string())?;
        let in_cache = shared.starts_with(dir.path().join("cache"));
        std::fs::write(&shared, content(me, 1)).unwrap();
        let refused = error_text(&rt.complete_output(true));
        rt.start_output(
            "out.1",
            OutputFlags {
                checkpoint: false,
                output: true,
            },
        )
        .map_err(|e| e.to_string())?;
        let o = rt
            .route_file(&prefix.join(format!("out_{me}.txt")))
            .map_err(|e| e.to_string())?;
        std::fs::write(&o, content(me, 3)).unwrap();
        let kept = rt.complete_output(true).map_err(|e| e.to_string())?;
        rt.finalize().map_err(|e| e.to_string())?;
        Ok::<_, String>((in_cache, refused, relative_to_dir(&prefix, &o), kept))
    });
    for (r, o) in out.into_iter().enumerate() {
        let (in_cache, refused, out_path, kept) = o.expect("every rank runs");
        assert!(in_cache, "rank {r}: a checkpoint's file is routed to cache");
        assert!(
            refused.contains("both routed") && refused.contains("shared.dat"),
            "rank {r}: {refused}"
        );
        assert_eq!(
            out_path,
            format!("out_{r}.txt"),
            "rank {r}: output goes to the prefix"
        );
        assert!(kept, "rank {r}");
        assert_eq!(
            std::fs::read(dir.path().join("prefix").join(&out_path)).unwrap(),
            content(r as u32, 3)
        );
    }
    let ix = prefix::Index::load(&dir.path().join("prefix")).unwrap();
    assert!(ix
        .datasets
        .values()
        .any(|e| e.name == "out.1" && e.complete && e.output));
    assert!(!ix.datasets.values().any(|e| e.name == "ckpt.1"));
}

#[test]
fn cache_purge_empties_the_cache_at_init_and_fetch_bypass_reads_the_prefix_in_place() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("prefix")).unwrap();
    let nodes = ["n0", "n0", "n1", "n1"];
    let flushed = [("SCR_COPY_TYPE", "SINGLE"), ("SCR_FLUSH", "1")];
    let cached_only = [
        ("SCR_COPY_TYPE", "SINGLE"),
        ("SCR_FLUSH", "0"),
        ("SCR_FLUSH_ON_FINALIZE", "0"),
    ];
    // ckpt.1 reaches the prefix; ckpt.2 stays in cache only
    assert!(run_with(dir.path(), &nodes, &flushed, Some(1))
        .iter()
        .all(|o| o.is_ok()));
    assert!(run_with(dir.path(), &nodes, &cached_only, Some(2))
        .iter()
        .all(|o| o.is_ok()));
    // cache_purge: the cached ckpt.2 is gone, the restart comes from the prefix,
    // read in place there with fetch_bypass (nothing copied into cache)
    let purge = [
        ("SCR_COPY_TYPE", "SINGLE"),
        ("SCR_FLUSH", "0"),
        ("SCR_CACHE_PURGE", "1"),
        ("SCR_FETCH_BYPASS", "1"),
    ];
    let restarted = run_with(dir.path(), &nodes, &purge, None);
    assert_eq!(
        restarted,
        vec![Ok("restarted from ckpt.1, byte-exact".to_string()); 4],
        "{restarted:?}"
    );
    let cached: Vec<String> = files_under(&dir.path().join("cache"))
        .into_iter()
        .filter(|f| f.contains("rank_"))
        .collect();
    assert!(cached.is_empty(), "{cached:?}");
}

/// What the window gauge (`SCR_TEST_WINDOW`) of `dir` counted in `what` (`flush`,
/// `fetch`): (inside now, most inside at once, entries).
fn gauge(dir: &Path, what: &str) -> (i64, i64, i64) {
    let path = dir.join(what);
    window::read_counts(&path).unwrap_or_else(|| panic!("{} holds no counts", path.display()))
}

/// A window gauge in `dir/gauge` whose ranks stay `hold_ms` inside the window: the
/// directory, and the `SCR_TEST_WINDOW` value that turns it on.
fn window_gauge(dir: &Path, hold_ms: u32) -> (PathBuf, String) {
    let counts = dir.join("gauge");
    std::fs::create_dir_all(&counts).unwrap();
    let spec = format!("{}:{hold_ms}", counts.display());
    (counts, spec)
}

/// Write checkpoint `name` with this rank's `content(rank, step)` in `rank_<r>.dat`.
fn write_content(rt: &mut Runtime, dir: &Path, name: &str, step: u32, r: u32) -> Result<bool> {
    rt.start_output(name, CHECKPOINT)?;
    let p = rt.route_file(&dir.join("prefix").join(format!("rank_{r}.dat")))?;
    std::fs::write(&p, content(r, step)).map_err(io_err(&p))?;
    rt.complete_output(true)
}

/// Read back the restart this runtime offers: its name and whether this rank's file is
/// byte-exact.
fn read_restart(rt: &mut Runtime, dir: &Path, r: u32) -> String {
    let Some(name) = rt.have_restart() else {
        return "no restart".into();
    };
    rt.start_restart().expect("start_restart");
    let path = rt
        .route_file(&dir.join("prefix").join(format!("rank_{r}.dat")))
        .expect("route_file");
    let step: u32 = name.trim_start_matches("ckpt.").parse().unwrap();
    let exact = std::fs::read(&path).is_ok_and(|b| b == content(r, step));
    rt.complete_restart(exact).expect("complete_restart");
    format!("{name} byte-exact {exact}")
}

/// `flush_width` and `fetch_width` bound the ranks copying to and reading from the
/// prefix at once, counted by the window gauge (each rank stays 100 ms inside, so ranks
/// let in together are seen together): never more than the width, and more than one when
/// the width allows it (the window is what limits). The flushed files are byte-exact in
/// the prefix, and a restart with every cache lost fetches them (or, with `fetch =
/// false`, reads them in place) byte-exact, under the same bound.
#[test]
fn no_more_ranks_than_the_width_copy_to_or_read_from_the_prefix_at_once() {
    let nodes = ["n0", "n1", "n2", "n3"];
    for width in [1u32, 2, 4, 256] {
        for fetch in ["1", "0"] {
            let dir = tempfile::tempdir().unwrap();
            let prefix = dir.path().join("prefix");
            let (counts, spec) = window_gauge(dir.path(), 100);
            let w = width.to_string();
            let env = [
                ("SCR_COPY_TYPE", "SINGLE"),
                ("SCR_FLUSH", "1"),
                ("SCR_FLUSH_WIDTH", w.as_str()),
                ("SCR_FETCH_WIDTH", w.as_str()),
                ("SCR_FETCH", fetch),
                ("SCR_TEST_WINDOW", spec.as_str()),
            ];
            let wrote = job(dir.path(), &nodes, &env, |rt, r| {
                show("ckpt.1", write_content(rt, dir.path(), "ckpt.1", 1, r))
            });
            for (r, (line, end)) in wrote.iter().enumerate() {
                assert_eq!(line, "ckpt.1: ok true", "width {width}, rank {r}");
                assert_eq!(end, &Ok(()), "width {width}, rank {r}");
            }
            let (now, most, entries) = gauge(&counts, "flush");
            assert_eq!(
                (now, entries),
                (0, 4),
                "width {width}: one flush of 4 ranks"
            );
            assert!(
                most >= 1 && most <= i64::from(width),
                "width {width}: {most} at once"
            );
            if width >= 4 {
                assert!(most > 1, "width {width} >= 4 ranks: only {most} at once");
            }
            let index = crate::state::prefix::Index::load(&prefix).unwrap();
            assert_eq!(index.restart_point().as_deref(), Some("ckpt.1"));
            for r in 0..4u32 {
                let flushed = std::fs::read(prefix.join(format!("rank_{r}.dat"))).unwrap();
                assert!(
                    flushed == content(r, 1),
                    "width {width}: rank {r}'s flushed file"
                );
            }

            // every cache lost: the restart comes from the prefix
            for base in ["cache", "cntl"] {
                std::fs::remove_dir_all(dir.path().join(base)).unwrap();
            }
            let read = job(dir.path(), &nodes, &env, |rt, r| {
                read_restart(rt, dir.path(), r)
            });
            for (r, (line, end)) in read.iter().enumerate() {
                assert_eq!(
                    line, "ckpt.1 byte-exact true",
                    "width {width}, fetch {fetch}, rank {r}"
                );
                assert_eq!(end, &Ok(()), "width {width}, fetch {fetch}, rank {r}");
            }
            let (now, most, entries) = gauge(&counts, "fetch");
            assert_eq!((now, entries), (0, 4), "width {width}, fetch {fetch}");
            assert!(
                most >= 1 && most <= i64::from(width),
                "width {width}, fetch {fetch}: {most} at once"
            );
            if width >= 4 {
                assert!(
                    most > 1,
                    "width {width}, fetch {fetch}: only {most} at once"
                );
            }
            // the restart wrote nothing to the prefix: no second flush was counted
            assert_eq!(gauge(&counts, "flush").2, 4, "width {width}, fetch {fetch}");
        }
    }
}

/// One rank's transfer fails (injected on rank 1, width 1, so ranks 2 and 3 wait for
/// its turn): no rank hangs, every rank completes the checkpoint and returns the same
/// outcome of its flush (not flushed: the dataset stays in cache on every rank, none may
/// evict it as flushed), rank 0 logs the failure naming rank 1, and the index marks it
/// failed; the next flush goes through the window again and is recorded on every rank.
#[test]
fn a_failed_transfer_under_a_narrow_window_passes_the_turn_on_and_fails_alike_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["n0", "n1", "n2", "n3"];
    let prefix = dir.path().join("prefix");
    let (counts, spec) = window_gauge(dir.path(), 20);
    let env = [
        ("SCR_COPY_TYPE", "SINGLE"),
        ("SCR_FLUSH", "1"),
        ("SCR_FLUSH_WIDTH", "1"),
        ("SCR_FAULT", "flush-transfer:1:1"),
        ("SCR_TEST_WINDOW", spec.as_str()),
    ];
    let flushed =
        |rt: &Runtime, id: u64| scr_plugin::sync::lock(&rt.flushing.flushed).contains(&id);
    let out = job_logged(dir.path(), &nodes, &env, |rt, r| {
        vec![
            show("ckpt.1", write_content(rt, dir.path(), "ckpt.1", 1, r)),
            format!("ckpt.1 flushed {}", flushed(rt, 1)),
            format!("candidate {:?}", rt.have_restart()),
            show("ckpt.2", write_content(rt, dir.path(), "ckpt.2", 2, r)),
            format!("ckpt.2 flushed {}", flushed(rt, 2)),
        ]
    });
    for (r, (lines, end, _)) in out.iter().enumerate() {
        assert_eq!(
            lines,
            &[
                "ckpt.1: ok true",
                "ckpt.1 flushed false",
                "candidate Some(\"ckpt.1\")",
                "ckpt.2: ok true",
                "ckpt.2 flushed true"
            ],
            "rank {r}"
        );
        assert_eq!(end, &Ok(()), "rank {r}");
    }
    let log = &out[0].2;
    let failed: Vec<&String> = log
        .iter()
        .filter(|l| l.contains("ckpt.1 stays in cache only"))
        .collect();
    assert_eq!(failed.len(), 1, "{log:?}");
    assert!(
        failed[0].contains("flush failed on rank 1")
            && failed[0].contains("injected failure (flush-transfer:1:1)"),
        "{}",
        failed[0]
    );
    let index = crate::state::prefix::Index::load(&prefix).unwrap();
    let why = index.datasets[&1].failed.clone().unwrap_or_default();
    assert!(why.contains("flush failed on rank 1"), "{why}");
    assert_eq!(index.restart_point().as_deref(), Some("ckpt.2"));
    for r in 0..4u32 {
        let flushed = std::fs::read(prefix.join(format!("rank_{r}.dat"))).unwrap();
        assert!(flushed == content(r, 2), "rank {r}'s ckpt.2 in the prefix");
    }
    // both flushes went through the window on every rank, one rank at a time
    assert_eq!(gauge(&counts, "flush"), (0, 1, 8));
}

/// A background flush (`flush_async`) is not windowed, as SCR's asynchronous flush is
/// not (see `window`): with `flush_width = 1` no rank waits for a turn (the gauge counts
/// nothing), and the flush is still recorded, byte-exact, by finalize at the latest.
#[test]
fn a_background_flush_is_not_held_back_by_the_width() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["n0", "n1", "n2", "n3"];
    let prefix = dir.path().join("prefix");
    let (counts, spec) = window_gauge(dir.path(), 20);
    let env = [
        ("SCR_COPY_TYPE", "SINGLE"),
        ("SCR_FLUSH", "1"),
        ("SCR_FLUSH_ASYNC", "1"),
        ("SCR_FLUSH_WIDTH", "1"),
        ("SCR_TEST_WINDOW", spec.as_str()),
    ];
    let out = job(dir.path(), &nodes, &env, |rt, r| {
        show("ckpt.1", write_content(rt, dir.path(), "ckpt.1", 1, r))
    });
    for (r, (line, end)) in out.iter().enumerate() {
        assert_eq!(line, "ckpt.1: ok true", "rank {r}");
        assert_eq!(end, &Ok(()), "rank {r}");
    }
    assert!(
        !counts.join("flush").exists(),
        "a background flush went through the window"
    );
    let index = crate::state::prefix::Index::load(&prefix).unwrap();
    assert_eq!(index.restart_point().as_deref(), Some("ckpt.1"));
    for r in 0..4u32 {
        let flushed = std::fs::read(prefix.join(format!("rank_{r}.dat"))).unwrap();
        assert!(flushed == content(r, 1), "rank {r}'s flushed file");
    }
}

// ----- SCR 3.1's restart and prefix keys: current, drop_after_current, prefix_size,
// prefix_purge, global_restart -----

/// [`job_logged`] with init options: `fetch_at_have_restart` runs as the C API does (the
/// fetch waits for the first `have_restart_fetching`, which `f` calls through
/// [`restart_name`]).
fn job_with<T: Send>(
    dir: &Path,
    nodes: &[&str],
    extra: &[(&str, &str)],
    options: InitOptions,
    f: impl Fn(&mut Runtime, u32) -> T + Sync,
) -> Vec<(T, std::result::Result<(), String>, Vec<String>)> {
    use tracing_subscriber::layer::SubscriberExt as _;
    std::fs::create_dir_all(dir.join("prefix")).unwrap();
    run_ranks(nodes.len() as u32, |w: Box<dyn World>| {
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = lines.clone();
        let layer =
            crate::log::ScrLayer::new(move |l: &str| sink.lock().unwrap().push(l.to_string()));
        let subscriber = tracing_subscriber::registry().with(layer);
        let (report, end) = tracing::subscriber::with_default(subscriber, || {
            let me = w.rank();
            let mut rt = init_hooked(w, loader(dir, nodes, extra), options)
                .unwrap_or_else(|e| panic!("rank {me}: init: {e}"));
            let report = f(&mut rt, me);
            (report, rt.finalize().map_err(|e| e.to_string()))
        });
        let lines = lines.lock().unwrap().clone();
        (report, end, lines)
    })
}

/// The restart offered, asked the way the init mode expects.
fn restart_name(rt: &mut Runtime) -> Option<String> {
    rt.have_restart_fetching().expect("have_restart")
}

/// Read back the offered checkpoint (files `f<n>_<rank>` in the prefix, as
/// [`write_checkpoint`] wrote them): `"<name> exact"` when every byte is right, with
/// whether the file was read in place in the prefix or from cache.
fn read_back(rt: &mut Runtime, prefix: &Path, r: u32) -> String {
    let Some(name) = restart_name(rt) else {
        return "no restart".into();
    };
    rt.start_restart().expect("start_restart");
    let n: u32 = name.trim_start_matches("ckpt.").parse().unwrap();
    let file = format!("f{n}_{r}");
    let path = rt.route_file(&prefix.join(&file)).expect("route_file");
    let exact = std::fs::read_to_string(&path).unwrap_or_default() == format!("{name} {file}");
    let place = if path.starts_with(prefix) {
        "prefix"
    } else {
        "cache"
    };
    assert!(rt.complete_restart(exact).expect("complete_restart"));
    format!("{name} exact={exact} from {place}")
}

/// Write checkpoints `ckpt.<first>..=ckpt.<last>` (each rank one file `f<n>_<rank>`).
fn write_range(rt: &mut Runtime, dir: &Path, r: u32, range: std::ops::RangeInclusive<u32>) {
    for n in range {
        write_checkpoint(rt, dir, &format!("ckpt.{n}"), &format!("f{n}_{r}"))
            .unwrap_or_else(|e| panic!("rank {r}: ckpt.{n}: {e}"));
    }
}

/// The names the prefix's index lists, in id order.
fn indexed(prefix: &Path) -> Vec<String> {
    crate::state::prefix::Index::load(prefix)
        .unwrap()
        .datasets
        .values()
        .map(|e| e.name.clone())
        .collect()
}

/// Lines of rank 0's log containing `what`.
fn said<'a>(lines: &'a [String], what: &str) -> Vec<&'a String> {
    lines.iter().filter(|l| l.contains(what)).collect()
}

const C_ORDER: InitOptions = InitOptions {
    fetch_at_have_restart: true,
};

/// `current` (SCR_CURRENT) picks the restart as an early `current` call would: from the
/// prefix when the cache is gone, from the cache when it holds it, in both init orders;
/// a name nothing holds is one warning from rank 0 and the newest is taken. It is
/// applied once per job: a relaunch with the control directories kept restarts from its
/// own newest checkpoint.
#[test]
fn the_current_setting_chooses_the_restart_in_both_init_orders() {
    for options in [InitOptions::default(), C_ORDER] {
        for cache_kept in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let nodes = ["n0", "n1"];
            let prefix = dir.path().join("prefix");
            let env = [("SCR_FLUSH", "1")];
            job(dir.path(), &nodes, &env, |rt, r| {
                write_range(rt, dir.path(), r, 1..=3)
            });
            if !cache_kept {
                for base in ["cache", "cntl"] {
                    std::fs::remove_dir_all(dir.path().join(base)).unwrap();
                }
            }
            let case = format!("{options:?}, cache kept {cache_kept}");
            // marks of an earlier run of the job gone, as in a new allocation
            let forget_marks = || {
                let mut found = 0;
                let mut dirs = vec![dir.path().join("cntl")];
                while let Some(d) = dirs.pop() {
                    for e in std::fs::read_dir(&d).unwrap().flatten() {
                        let p = e.path();
                        if p.is_dir() {
                            dirs.push(p);
                        } else if p.file_name().is_some_and(|n| n == "current.applied") {
                            std::fs::remove_file(&p).unwrap();
                            found += 1;
                        }
                    }
                }
                assert_eq!(found, nodes.len(), "one mark per node's control directory");
            };

            // a name nothing holds: init goes on with the newest, rank 0 says it once
            let env = [("SCR_FLUSH", "1"), ("SCR_CURRENT", "ckpt.9")];
            let out = job_with(dir.path(), &nodes, &env, options, |rt, r| {
                read_back(rt, &prefix, r)
            });
            let warned: usize = out.iter().map(|o| said(&o.2, "ckpt.9").len()).sum();
            assert_eq!(warned, 1, "{case}: {:?}", out[0].2);
            assert!(
                out[0]
                    .2
                    .iter()
                    .any(|l| l.contains("no checkpoint named `ckpt.9`")),
                "{case}: {:?}",
                out[0].2
            );
            for (r, (line, end, _)) in out.iter().enumerate() {
                assert_eq!(line, "ckpt.3 exact=true from cache", "{case} rank {r}");
                assert_eq!(end, &Ok(()), "{case} rank {r}");
            }

            forget_marks();
            let env = [("SCR_FLUSH", "1"), ("SCR_CURRENT", "ckpt.2")];
            let out = job_with(dir.path(), &nodes, &env, options, |rt, r| {
                let read = read_back(rt, &prefix, r);
                write_range(rt, dir.path(), r, 4..=4);
                read
            });
            // held in cache, or fetched into it from the prefix, then read there
            for (r, (line, end, _)) in out.iter().enumerate() {
                assert_eq!(line, "ckpt.2 exact=true from cache", "{case} rank {r}");
                assert_eq!(end, &Ok(()), "{case} rank {r}");
            }
            assert_eq!(said(&out[0].2, "current = ckpt.2").len(), 1, "{case}");

            // the relaunch of the same job: not back to ckpt.2, but its own newest
            let out = job_with(dir.path(), &nodes, &env, options, |rt, r| {
                read_back(rt, &prefix, r)
            });
            for (r, (line, end, _)) in out.iter().enumerate() {
                assert_eq!(line, "ckpt.4 exact=true from cache", "{case} rank {r}");
                assert_eq!(end, &Ok(()), "{case} rank {r}");
            }
            let told = said(&out[0].2, "applied by an earlier run of job");
            assert_eq!(told.len(), 1, "{case}: {:?}", out[0].2);
        }
    }
}

/// `drop_after_current`: once `current` (the setting, or the call before the first
/// have_restart) chose a checkpoint, every newer dataset leaves the prefix's index — an
/// output among them — while their files stay; without it the index keeps them.
#[test]
fn drop_after_current_drops_the_newer_datasets_from_the_index_only() {
    for (how, drop) in [("setting", "1"), ("call", "1"), ("call", "0")] {
        let dir = tempfile::tempdir().unwrap();
        let nodes = ["n0", "n1"];
        let prefix = dir.path().join("prefix");
        job(dir.path(), &nodes, &[("SCR_FLUSH", "1")], |rt, r| {
            write_range(rt, dir.path(), r, 1..=3);
            assert!(write_dataset(rt, dir.path(), "out.4", &format!("o4_{r}"), OUTPUT).unwrap());
        });
        assert_eq!(indexed(&prefix), ["ckpt.1", "ckpt.2", "ckpt.3", "out.4"]);
        for base in ["cache", "cntl"] {
            std::fs::remove_dir_all(dir.path().join(base)).unwrap();
        }
        let mut env = vec![("SCR_FLUSH", "1"), ("SCR_DROP_AFTER_CURRENT", drop)];
        if how == "setting" {
            env.push(("SCR_CURRENT", "ckpt.2"));
        }
        let out = job_with(dir.path(), &nodes, &env, C_ORDER, |rt, r| {
            if how == "call" {
                rt.current("ckpt.2").expect("current");
            }
            read_back(rt, &prefix, r)
        });
        for (r, (line, end, _)) in out.iter().enumerate() {
            assert_eq!(
                line, "ckpt.2 exact=true from cache",
                "{how} {drop} rank {r}"
            );
            assert_eq!(end, &Ok(()), "{how} {drop} rank {r}");
        }
        let expect: &[&str] = if drop == "1" {
            &["ckpt.1", "ckpt.2"]
        } else {
            &["ckpt.1", "ckpt.2", "ckpt.3", "out.4"]
        };
        assert_eq!(indexed(&prefix), expect, "{how} {drop}");
        for r in 0..2 {
            assert!(prefix.join(format!("f3_{r}")).is_file(), "files stay");
            assert!(prefix.join(format!("o4_{r}")).is_file(), "files stay");
        }
    }
}

/// `prefix_size = 2`: after each checkpoint's flush is recorded, checkpoints outside the
/// window of two go from the prefix (files, index entry, .scr directory); one also
/// flagged output stays; the same when the flushes run in the background.
#[test]
fn prefix_size_keeps_a_window_of_checkpoints_in_the_prefix() {
    for asynchronous in ["0", "1"] {
        let dir = tempfile::tempdir().unwrap();
        let nodes = ["n0", "n1"];
        let prefix = dir.path().join("prefix");
        let env = [
            ("SCR_FLUSH", "1"),
            ("SCR_PREFIX_SIZE", "2"),
            ("SCR_FLUSH_ASYNC", asynchronous),
        ];
        let out = job(dir.path(), &nodes, &env, |rt, r| {
            write_range(rt, dir.path(), r, 1..=1);
            // ckpt.2 is a checkpoint and an output: never deleted by the window
            let both = OutputFlags {
                checkpoint: true,
                output: true,
            };
            assert!(write_dataset(rt, dir.path(), "ckpt.2", &format!("f2_{r}"), both).unwrap());
            write_range(rt, dir.path(), r, 3..=5);
        });
        assert!(out.iter().all(|(_, end)| end.is_ok()), "{out:?}");
        assert_eq!(
            indexed(&prefix),
            ["ckpt.2", "ckpt.4", "ckpt.5"],
            "async {asynchronous}"
        );
        for r in 0..2 {
            for (n, kept) in [(1, false), (2, true), (3, false), (4, true), (5, true)] {
                assert_eq!(
                    prefix.join(format!("f{n}_{r}")).is_file(),
                    kept,
                    "async {asynchronous}: f{n}_{r}"
                );
            }
        }
        for (id, kept) in [(1, false), (3, false), (5, true)] {
            assert_eq!(
                crate::layout::prefix_dataset_dir(&prefix, id).exists(),
                kept,
                "async {asynchronous}: .scr/scr.dataset.{id}"
            );
        }
    }
}

/// `prefix_purge`: init deletes every dataset the index lists (files and entries,
/// outputs too) before the restart is chosen; a restart then comes only from cache.
#[test]
fn prefix_purge_deletes_every_indexed_dataset_before_the_restart_is_chosen() {
    for cache_kept in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let nodes = ["n0", "n1"];
        let prefix = dir.path().join("prefix");
        job(dir.path(), &nodes, &[("SCR_FLUSH", "1")], |rt, r| {
            write_range(rt, dir.path(), r, 1..=2);
            assert!(write_dataset(rt, dir.path(), "out.3", &format!("o3_{r}"), OUTPUT).unwrap());
        });
        assert_eq!(indexed(&prefix), ["ckpt.1", "ckpt.2", "out.3"]);
        if !cache_kept {
            for base in ["cache", "cntl"] {
                std::fs::remove_dir_all(dir.path().join(base)).unwrap();
            }
        }
        let env = [("SCR_FLUSH", "0"), ("SCR_PREFIX_PURGE", "1")];
        let out = job_with(dir.path(), &nodes, &env, InitOptions::default(), |rt, r| {
            read_back(rt, &prefix, r)
        });
        let expect = if cache_kept {
            "ckpt.2 exact=true from cache"
        } else {
            "no restart"
        };
        for (r, (line, end, _)) in out.iter().enumerate() {
            assert_eq!(line, expect, "cache kept {cache_kept}, rank {r}");
            assert_eq!(end, &Ok(()), "rank {r}");
        }
        let told = said(&out[0].2, "prefix_purge: deleted 3 dataset(s)");
        assert_eq!(told.len(), 1, "{:?}", out[0].2);
        assert!(told[0].contains("ckpt.1, ckpt.2, out.3"), "{}", told[0]);
        assert!(indexed(&prefix).is_empty());
        for r in 0..2 {
            for f in ["f1", "f2", "o3"] {
                assert!(!prefix.join(format!("{f}_{r}")).exists(), "{f}_{r}");
            }
        }
        for id in 1..=3 {
            assert!(!crate::layout::prefix_dataset_dir(&prefix, id).exists());
        }
    }
}

/// `global_restart`: the newest cached checkpoint (never flushed, flush = 0) is flushed
/// at init, the cache is cleared, and the restart reads it in place in the prefix — in
/// both init orders, and the fallback after an invalid restart reads in place too.
#[test]
fn global_restart_flushes_clears_the_cache_and_reads_in_place() {
    for options in [InitOptions::default(), C_ORDER] {
        let dir = tempfile::tempdir().unwrap();
        let nodes = ["n0", "n1"];
        let prefix = dir.path().join("prefix");
        job(dir.path(), &nodes, &[("SCR_FLUSH", "0")], |rt, r| {
            write_range(rt, dir.path(), r, 1..=2)
        });
        assert!(
            !crate::state::prefix::Index::path(&prefix).exists(),
            "nothing flushed"
        );
        let env = [("SCR_FLUSH", "0"), ("SCR_GLOBAL_RESTART", "1")];
        let out = job_with(dir.path(), &nodes, &env, options, |rt, r| {
            let cached: Vec<String> = nodes
                .iter()
                .flat_map(|n| listing(&cache_job_dir(dir.path(), n)))
                .filter(|n| n.starts_with("scr.dataset."))
                .collect();
            (read_back(rt, &prefix, r), cached)
        });
        for (r, ((line, cached), end, _)) in out.iter().enumerate() {
            assert_eq!(
                line, "ckpt.2 exact=true from prefix",
                "{options:?} rank {r}"
            );
            assert!(
                cached.is_empty(),
                "{options:?} rank {r}: cache holds {cached:?}"
            );
            assert_eq!(end, &Ok(()), "rank {r}");
        }
        assert_eq!(indexed(&prefix), ["ckpt.2"], "{options:?}");
        let entry = crate::state::prefix::Index::load(&prefix).unwrap();
        assert!(entry.datasets.values().all(|e| e.complete));
    }
}

/// The decision is one method: `fetch = false` or `global_restart` read in place.
#[test]
fn restart_in_place_follows_fetch_and_global_restart() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["n0"];
    for (fetch, global, in_place) in [
        ("1", "0", false),
        ("0", "0", true),
        ("1", "1", true),
        ("0", "1", true),
    ] {
        let env = [("SCR_FETCH", fetch), ("SCR_GLOBAL_RESTART", global)];
        let out = job(dir.path(), &nodes, &env, |rt, _| rt.restart_in_place());
        assert_eq!(out[0].0, in_place, "fetch {fetch}, global_restart {global}");
    }
}

/// The SCR_LOG_* keys: by default rank 0 writes the event log in the prefix; with
/// `log_enable` or `log_txt_enable` off there is none; syslog may be on beside it, and
/// `log_db_enable` is one warning from rank 0 naming where the events go, the run
/// going on.
#[test]
fn the_log_keys_choose_where_events_go() {
    for (env, text_log, db_warned) in [
        (vec![], true, false),
        (vec![("SCR_LOG_ENABLE", "0")], false, false),
        (vec![("SCR_LOG_TXT_ENABLE", "0")], false, false),
        (
            vec![
                ("SCR_LOG_SYSLOG_ENABLE", "1"),
                ("SCR_LOG_SYSLOG_PREFIX", "scr-rs-test"),
            ],
            true,
            false,
        ),
        (
            vec![
                ("SCR_LOG_DB_ENABLE", "1"),
                ("SCR_LOG_DB_HOST", "db.invalid"),
            ],
            true,
            true,
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let nodes = ["n0", "n1"];
        let prefix = dir.path().join("prefix");
        let mut env = env.clone();
        env.push(("SCR_FLUSH", "1"));
        let out = job_with(dir.path(), &nodes, &env, InitOptions::default(), |rt, r| {
            write_range(rt, dir.path(), r, 1..=1)
        });
        let case = format!("{env:?}");
        assert!(out.iter().all(|(_, end, _)| end.is_ok()), "{case}");
        let log = crate::events::path(&prefix);
        assert_eq!(log.exists(), text_log, "{case}");
        if text_log {
            let (records, _) = crate::events::read(&prefix).unwrap();
            let kinds: Vec<String> = records
                .iter()
                .map(|r| serde_json::to_value(&r.event).unwrap()["event"].to_string())
                .collect();
            assert_eq!(
                kinds,
                ["\"init\"", "\"checkpoint\"", "\"flush\"", "\"finalize\""],
                "{case}"
            );
        }
        let warned: Vec<&String> = out
            .iter()
            .flat_map(|o| said(&o.2, "log_db_enable"))
            .collect();
        assert_eq!(warned.len(), usize::from(db_warned), "{case}: {warned:?}");
        if db_warned {
            assert!(
                warned[0].contains("not available") && warned[0].contains("events.jsonl"),
                "{}",
                warned[0]
            );
        }
    }
}

/// The test fixture's library (which fails on one member) and a system configuration in
/// `dir` that loads it; `dir/prefix` created.
fn fixture_system(dir: &Path) -> (PathBuf, PathBuf) {
    let lib = crate::registry::builtin_plugin_dir()
        .expect("the workspace's plugins are built")
        .join("libscr_fixture_panic.so");
    assert!(lib.is_file(), "{} (build the workspace)", lib.display());
    let system = dir.join("system.toml");
    std::fs::write(
        &system,
        format!("[plugins]\nfiles = [\"{}\"]\n", lib.display()),
    )
    .unwrap();
    std::fs::create_dir_all(dir.join("prefix")).unwrap();
    (lib, system)
}

/// A scheme whose `apply` panics on member 1 while the other members wait in a receive
/// for a message from it (the test fixture's PANIC_ONE), in process: the failing member's
/// host records the failure on the set's in-process communicator, which ends the others'
/// waits with its error; every rank's complete_output returns the same error, credited to
/// rank 1, no rank hangs or aborts, and the job goes on (the set's communicator is clean
/// for the next call: a second checkpoint fails alike, not with a stale message).
#[test]
fn a_panic_in_apply_on_one_member_gives_every_rank_its_error_in_process() {
    let dir = tempfile::tempdir().unwrap();
    let (lib, system) = fixture_system(dir.path());
    let nodes = ["n0", "n1", "n2", "n3"];
    let env = [
        ("SCR_COPY_TYPE", "PANIC_ONE"),
        ("SCR_SET_SIZE", "4"),
        ("SCR_FLUSH", "0"),
        ("SCR_ABORT_TIMEOUT", "60"),
    ];
    let started = std::time::Instant::now();
    let out = run_ranks(4, |w: Box<dyn World>| {
        let me = w.rank();
        let mut l = loader(dir.path(), &nodes, &env);
        l.system_file = Some(system.clone());
        let mut rt = init_hooked(w, l, InitOptions::default())
            .unwrap_or_else(|e| panic!("rank {me}: init: {e}"));
        let first = write_checkpoint(&mut rt, dir.path(), "ckpt.1", &format!("rank_{me}.dat"));
        let second = write_checkpoint(&mut rt, dir.path(), "ckpt.2", &format!("rank_{me}.dat"));
        let candidate = rt.have_restart();
        let end = rt.finalize().map_err(|e| e.to_string());
        (error_text(&first), error_text(&second), candidate, end)
    });
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    let why = |name: &str| {
        format!(
            "complete_output {name}: redundancy could not be applied, dataset discarded: on rank 1: plugin {}: apply: panic: member 1 (world rank 1) failed in apply: plugin scr-fixture-panic panicked in apply: deliberate panic in apply on member 1",
            lib.display()
        )
    };
    for (rank, (first, second, candidate, end)) in out.into_iter().enumerate() {
        assert_eq!(first, why("ckpt.1"), "rank {rank}");
        assert_eq!(second, why("ckpt.2"), "rank {rank}");
        assert_eq!(candidate, None, "rank {rank}");
        assert_eq!(end, Ok(()), "rank {rank}");
    }
}

/// The same in `recover` at init (the fixture's PANIC_ONE_RECOVER: member 1 panics, member
/// 0 waits in a reduction, member 3 in a local loop asking `is_cancelled`, member 2 in a
/// receive), in process: every rank drops the cached checkpoint with the same report
/// naming member 1's error, and init goes on with no restart.
#[test]
fn a_panic_in_recover_on_one_member_gives_every_rank_its_error_in_process() {
    let dir = tempfile::tempdir().unwrap();
    let (lib, system) = fixture_system(dir.path());
    let nodes = ["n0", "n1", "n2", "n3"];
    let env = [
        ("SCR_COPY_TYPE", "PANIC_ONE_RECOVER"),
        ("SCR_SET_SIZE", "4"),
        ("SCR_FLUSH", "0"),
        ("SCR_ABORT_TIMEOUT", "60"),
    ];
    type Report = (String, Vec<String>);
    let run = |f: &(dyn Fn(&mut Runtime, u32) -> Report + Sync)| {
        run_ranks(4, |w: Box<dyn World>| {
            let me = w.rank();
            let mut l = loader(dir.path(), &nodes, &env);
            l.system_file = Some(system.clone());
            let mut rt = init_hooked(w, l, InitOptions::default())
                .unwrap_or_else(|e| panic!("rank {me}: init: {e}"));
            let out = f(&mut rt, me);
            rt.finalize()
                .unwrap_or_else(|e| panic!("rank {me}: finalize: {e}"));
            out
        })
    };
    let wrote = run(&|rt, me| {
        let kept = write_checkpoint(rt, dir.path(), "ckpt.1", &format!("rank_{me}.dat"));
        (show("kept", kept), Vec::new())
    });
    assert_eq!(wrote, vec![("kept: ok true".to_string(), Vec::new()); 4]);
    let started = std::time::Instant::now();
    let restarted = run(&|rt, _| {
        (
            format!("{:?}", rt.have_restart()),
            rt.lost_datasets().to_vec(),
        )
    });
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    for (rank, (candidate, lost)) in restarted.iter().enumerate() {
        assert_eq!(candidate, "None", "rank {rank}");
        assert_eq!(lost, &restarted[0].1, "rank {rank}");
        assert_eq!(lost.len(), 1, "rank {rank}: {lost:?}");
        assert!(
            lost[0].starts_with("dataset 1 (ckpt.1) cannot be restored and was dropped")
                && lost[0].contains(&format!(
                    "plugin {}: recover: panic: member 1 (world rank 1) failed in recover: plugin scr-fixture-panic panicked in recover: deliberate panic in recover on member 1",
                    lib.display()
                )),
            "rank {rank}: {}",
            lost[0]
        );
    }
}

/// `drop_after_current` with the newer checkpoints still in cache: they leave the cache as
/// well as the index, so a relaunch of the job (which does not choose again) restarts
/// from the chosen checkpoint, not from a newer cached one; without it, the relaunch
/// takes the newest cached one.
#[test]
fn drop_after_current_drops_the_newer_cached_datasets_so_a_relaunch_keeps_the_choice() {
    for (drop, relaunch) in [("1", "ckpt.2"), ("0", "ckpt.3")] {
        let dir = tempfile::tempdir().unwrap();
        let nodes = ["n0", "n1"];
        let prefix = dir.path().join("prefix");
        let env = [
            ("SCR_FLUSH", "0"),
            ("SCR_CACHE_SIZE", "3"),
            ("SCR_DROP_AFTER_CURRENT", drop),
        ];
        job(dir.path(), &nodes, &env, |rt, r| {
            write_range(rt, dir.path(), r, 1..=3)
        });
        let out = job_with(dir.path(), &nodes, &env, C_ORDER, |rt, r| {
            rt.current("ckpt.2").expect("current");
            read_back(rt, &prefix, r)
        });
        for (r, (line, end, _)) in out.iter().enumerate() {
            assert_eq!(line, "ckpt.2 exact=true from cache", "drop {drop} rank {r}");
            assert_eq!(end, &Ok(()), "drop {drop} rank {r}");
        }
        let out = job_with(dir.path(), &nodes, &env, C_ORDER, |rt, r| {
            read_back(rt, &prefix, r)
        });
        for (r, (line, end, _)) in out.iter().enumerate() {
            assert_eq!(
                line,
                &format!("{relaunch} exact=true from cache"),
                "drop {drop} rank {r}"
            );
            assert_eq!(end, &Ok(()), "drop {drop} rank {r}");
        }
    }
}

/// The prefix's flush file as `id: LOCATIONS` lines.
fn flush_file(prefix: &Path) -> Vec<String> {
    crate::state::prefix::FlushFile::load(prefix)
        .unwrap()
        .datasets
        .iter()
        .map(|(id, (at, _))| format!("{id}: {}", at.join(" ")))
        .collect()
}

/// Init makes the flush file list exactly what the cache holds once restored (SCR's
/// `scr_flush_file_rebuild`): CACHE entries of datasets no cache holds any more go (the
/// entry with them when nothing else is left, PFS stays), a cached dataset the file
/// missed gets one; and a new allocation (every cache gone) leaves only PFS entries.
#[test]
fn init_makes_the_flush_file_list_exactly_the_datasets_in_cache() {
    use crate::state::prefix::{FlushFile, CACHE, PFS};
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("prefix");
    let nodes = ["n0", "n0", "n1", "n1"];
    let env = [
        ("SCR_COPY_TYPE", "SINGLE"),
        ("SCR_FLUSH", "0"),
        ("SCR_FLUSH_ON_FINALIZE", "0"),
        ("SCR_CACHE_SIZE", "2"),
    ];
    job(dir.path(), &nodes, &env, |rt, r| {
        write_range(rt, dir.path(), r, 1..=2)
    });
    assert_eq!(flush_file(&prefix), ["1: CACHE", "2: CACHE"]);
    // entries of caches that are gone (7 in cache only; 8 also flushed), and a cached
    // dataset (2) the file lost
    FlushFile::add_location(&prefix, 7, CACHE).unwrap();
    FlushFile::add_location(&prefix, 8, CACHE).unwrap();
    FlushFile::add_location(&prefix, 8, PFS).unwrap();
    FlushFile::remove_location(&prefix, 2, CACHE).unwrap();
    assert_eq!(
        flush_file(&prefix),
        ["1: CACHE", "7: CACHE", "8: CACHE PFS"]
    );

    let seen = job(dir.path(), &nodes, &env, |_, r| {
        (r == 0).then(|| flush_file(&prefix))
    });
    let seen = seen[0].0.clone().unwrap();
    assert_eq!(seen, ["1: CACHE", "2: CACHE", "8: PFS"], "after init");

    // a new allocation: no cache and no control directory survive
    for base in ["cache", "cntl"] {
        std::fs::remove_dir_all(dir.path().join(base)).unwrap();
    }
    job(dir.path(), &nodes, &env, |_, _| ());
    assert_eq!(flush_file(&prefix), ["8: PFS"]);
}

/// Init records how many nodes the run uses in each node's control directory and, for
/// `scr run`'s relaunch count, in the prefix.
#[test]
fn init_records_the_runs_node_count_in_the_prefix_and_each_control_directory() {
    use crate::state::nodes::Nodes;
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["n0", "n1", "n1", "n2"];
    job(dir.path(), &nodes, &[], |_, _| ());
    let prefix = dir.path().join("prefix");
    let read = |p: &Path| Nodes::read(p).map(|n| n.nodes).map_err(|e| e.to_string());
    assert_eq!(read(&crate::layout::prefix_nodes_file(&prefix)), Ok(3));
    for node in ["n0", "n1", "n2"] {
        let cntl = crate::layout::job_dir(&dir.path().join("cntl"), true, node, USER, JOB);
        assert_eq!(read(&crate::layout::nodes_file(&cntl)), Ok(3), "{node}");
    }
}

// crc_on_copy_defer: SINGLE's CRC32s hashed in the background -----

/// SINGLE on four simulated nodes, no flush, with `extra` settings.
fn single_env<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut env = vec![("SCR_COPY_TYPE", "SINGLE"), ("SCR_FLUSH", "0")];
    env.extend_from_slice(extra);
    env
}

const FOUR: [&str; 4] = ["n0", "n1", "n2", "n3"];

/// This rank's record of dataset `name` as its control directory holds it (what a new
/// process would find).
fn on_disk(rt: &Runtime, name: &str) -> DatasetRecord {
    Filemap::load(rt.control_dir(), rt.rank())
        .unwrap()
        .datasets
        .into_values()
        .find(|d| d.name == name)
        .unwrap_or_else(|| panic!("rank {}: no record of {name} on disk", rt.rank()))
}

/// Call need_checkpoint (a polling call, collective) until every rank's background hash
/// is recorded: the loop ends on every rank in the same round.
fn poll_until_recorded(rt: &mut Runtime) {
    let started = std::time::Instant::now();
    loop {
        rt.need_checkpoint().unwrap();
        if rt.world.sum_u64(u64::from(rt.crc_job.is_some())) == 0 {
            return;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "rank {}: the background hash never finished",
            rt.rank()
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// The CRC32s of a SINGLE checkpoint are not read in complete_output: the record is
/// committed pending, the hash runs in a thread, a polling call records the files' real
/// CRC32s in the filemap on disk, and the pending flag is cleared. With
/// `crc_on_copy_defer = false`, and with XOR (which hashes in its apply), complete_output
/// records them itself and leaves no job.
#[test]
fn a_single_checkpoints_crc32s_are_hashed_in_the_background_and_recorded_at_a_later_call() {
    let dir = tempfile::tempdir().unwrap();
    let out = job(dir.path(), &FOUR, &single_env(&[]), |rt, me| {
        let file = format!("f1_{me}");
        assert!(write_checkpoint(rt, dir.path(), "ckpt.1", &file).unwrap());
        let pending = rt.crc_job.is_some();
        // the snapshot as committed (`Filemap::load` would apply the thread's note, which
        // it may have written by now)
        let committed = crate::state::read_state::<Filemap>(
            &rt.control_dir().join(Filemap::file_name(me)),
            crate::state::filemap::KIND,
        )
        .unwrap()
        .datasets
        .into_values()
        .next()
        .unwrap();
        assert!(
            committed.complete && committed.crc32_pending,
            "{committed:?}"
        );
        assert_eq!(committed.files[0].crc32, None);
        poll_until_recorded(rt);
        // in the filemap itself now: the thread's note has served and is gone
        let note = rt.control_dir().join(Filemap::crc_note_name(me));
        assert!(!note.exists(), "{}", note.display());
        let recorded = on_disk(rt, "ckpt.1");
        let real = crc32fast::hash(format!("ckpt.1 {file}").as_bytes());
        (
            pending,
            recorded.crc32_pending,
            recorded.files[0].crc32 == Some(real),
        )
    });
    for (rank, ((pending, still, equal), end)) in out.iter().enumerate() {
        assert!(
            pending,
            "rank {rank}: complete_output left no background hash"
        );
        assert!(!still, "rank {rank}: still pending after the join");
        assert!(equal, "rank {rank}: the recorded CRC32 is not the file's");
        assert_eq!(end, &Ok(()), "rank {rank}");
    }

    for env in [
        single_env(&[("SCR_CRC_ON_COPY_DEFER", "0")]),
        vec![("SCR_COPY_TYPE", "XOR"), ("SCR_FLUSH", "0")],
    ] {
        let dir = tempfile::tempdir().unwrap();
        let out = job(dir.path(), &FOUR, &env, |rt, me| {
            let file = format!("f1_{me}");
            assert!(write_checkpoint(rt, dir.path(), "ckpt.1", &file).unwrap());
            let rec = on_disk(rt, "ckpt.1");
            let real = crc32fast::hash(format!("ckpt.1 {file}").as_bytes());
            (
                rt.crc_job.is_some(),
                rec.crc32_pending,
                rec.files[0].crc32 == Some(real),
            )
        });
        for (rank, (r, _)) in out.iter().enumerate() {
            assert_eq!(r, &(false, false, true), "rank {rank} with {env:?}");
        }
    }
}

/// A restart in the same run and finalize wait for the hash: start_restart finds the
/// CRC32s recorded before a file is routed for reading, and a hash still running at
/// finalize is recorded before it returns.
#[test]
fn start_restart_and_finalize_record_a_pending_hash_first() {
    let dir = tempfile::tempdir().unwrap();
    let out = job(dir.path(), &FOUR, &single_env(&[]), |rt, me| {
        let file = format!("f1_{me}");
        assert!(write_checkpoint(rt, dir.path(), "ckpt.1", &file).unwrap());
        assert_eq!(rt.have_restart().as_deref(), Some("ckpt.1"));
        rt.start_restart().unwrap();
        let joined = rt.crc_job.is_none();
        let rec = rt.cache.datasets().next().unwrap().clone();
        let path = rt
            .route_file(&dir.path().join("prefix").join(&file))
            .unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert!(rt.complete_restart(true).unwrap());
        // the next checkpoint's hash is still pending when finalize runs
        assert!(write_checkpoint(rt, dir.path(), "ckpt.2", &format!("f2_{me}")).unwrap());
        (
            joined,
            !rec.crc32_pending && rec.files[0].crc32 == Some(crc32fast::hash(&bytes)),
        )
    });
    for (rank, (r, end)) in out.iter().enumerate() {
        assert_eq!(r, &(true, true), "rank {rank}");
        assert_eq!(end, &Ok(()), "rank {rank}");
    }
    // after finalize, what a new process finds: ckpt.2's CRC32s recorded
    for (rank, node) in FOUR.iter().enumerate() {
        let cntl = dir
            .path()
            .join("cntl")
            .join(node)
            .join(USER)
            .join(format!("scr.{JOB}"));
        // recorded in the filemap by finalize, not only noted by the thread
        assert!(!cntl.join(Filemap::crc_note_name(rank as u32)).exists());
        let map = Filemap::load(&cntl, rank as u32).unwrap();
        let rec = map.datasets.values().find(|d| d.name == "ckpt.2").unwrap();
        assert!(!rec.crc32_pending, "rank {rank}: {rec:?}");
        assert_eq!(
            rec.files[0].crc32,
            Some(crc32fast::hash(format!("ckpt.2 f2_{rank}").as_bytes())),
            "rank {rank}"
        );
    }
}

/// A byte damaged in cache after the background hash read it is caught by the flush,
/// which compares what it copies against the recorded CRC32 (finalize flushes the newest
/// checkpoint, `flush = 10`, so complete_output itself flushed nothing and deferred).
#[test]
fn a_flush_after_a_deferred_hash_catches_a_byte_damaged_in_cache() {
    let dir = tempfile::tempdir().unwrap();
    let env = [("SCR_COPY_TYPE", "SINGLE"), ("SCR_FLUSH", "10")];
    let out = job_logged(dir.path(), &FOUR, &env, |rt, me| {
        let file = format!("f1_{me}");
        assert!(write_checkpoint(rt, dir.path(), "ckpt.1", &file).unwrap());
        let deferred = rt.crc_job.is_some();
        poll_until_recorded(rt);
        // every rank's hash is recorded before rank 1 damages its file
        rt.world.barrier();
        if me == 1 {
            let rec = rt.cache.datasets().next().unwrap().clone();
            let path = rt
                .dataset_dir(&rec.descriptor.store, rec.id)
                .join(&rec.files[0].name);
            let mut bytes = std::fs::read(&path).unwrap();
            bytes[0] ^= 0x01;
            std::fs::write(&path, bytes).unwrap();
        }
        rt.world.barrier();
        deferred
    });
    for (rank, (deferred, end, _)) in out.iter().enumerate() {
        assert!(deferred, "rank {rank}");
        assert_eq!(
            end,
            &Ok(()),
            "rank {rank}: finalize never fails for a flush"
        );
    }
    let all: Vec<&String> = out.iter().flat_map(|o| o.2.iter()).collect();
    let real = crc32fast::hash(b"ckpt.1 f1_1");
    let caught: Vec<&&String> = all
        .iter()
        .filter(|l| l.contains("f1_1") && l.contains(&format!("CRC32 {real:08x}")))
        .collect();
    assert!(!caught.is_empty(), "no rank reported the damage: {all:#?}");
    assert!(
        !indexed_complete(&dir.path().join("prefix"), "ckpt.1"),
        "the damaged checkpoint was recorded as flushed"
    );
}

/// Whether the prefix's index holds dataset `name` as completely flushed.
fn indexed_complete(prefix: &Path, name: &str) -> bool {
    crate::state::prefix::Index::load(prefix)
        .map(|ix| {
            ix.datasets
                .values()
                .any(|e| e.name == name && e.complete && e.failed.is_none())
        })
        .unwrap_or(false)
}

/// Write ckpt.1 and ckpt.2 (SINGLE, `cache_size = 3`), let only rank 0 record ckpt.2's
/// CRC32s, and end the job without finalize: the other ranks' records stay pending on
/// disk, as when a job dies before its hash is recorded. With `noted`, their threads
/// finished and wrote their notes first (the job died while the application computed);
/// without, they are stopped and their notes removed (it died before the hash was done).
fn die_with_a_pending_hash(dir: &Path, noted: bool) {
    std::fs::create_dir_all(dir.join("prefix")).unwrap();
    let env = single_env(&[("SCR_CACHE_SIZE", "3")]);
    let pending = run_ranks(4, |w: Box<dyn World>| {
        let me = w.rank();
        let mut rt = init_hooked(w, loader(dir, &FOUR, &env), InitOptions::default())
            .unwrap_or_else(|e| panic!("rank {me}: init: {e}"));
        write_range(&mut rt, dir, me, 1..=2);
        if me == 0 {
            rt.settle_crc();
        } else if let Some(job) = rt.crc_job.take() {
            if noted {
                // done, never recorded by the runtime
                drop(job.join());
            } else {
                job.cancel();
                crate::state::filemap::CrcNote::remove(rt.control_dir(), me).unwrap();
            }
        }
        let pending = on_disk(&rt, "ckpt.2").crc32_pending;
        let snapshot = crate::state::read_state::<Filemap>(
            &rt.control_dir().join(Filemap::file_name(me)),
            crate::state::filemap::KIND,
        )
        .unwrap();
        let in_snapshot = snapshot.datasets.values().any(|d| d.crc32_pending);
        rt.abandon();
        (pending, in_snapshot)
    });
    // what a new process loads: rank 0 recorded, the others pending unless noted
    let want: Vec<(bool, bool)> = (0..4).map(|r| (r != 0 && !noted, r != 0)).collect();
    assert_eq!(pending, want);
}

/// A new run finds ckpt.2's CRC32s never recorded on ranks 1-3: with `crc_on_restart`
/// those ranks' files are not used, SINGLE drops the dataset everywhere with one warning
/// naming it and why, and the restart falls back to ckpt.1 (read back exactly). With
/// `crc_on_restart = false` ckpt.2 is restarted from, as files without CRC32 are.
#[test]
fn a_new_run_does_not_restore_a_dataset_whose_crc32s_were_never_recorded() {
    let dir = tempfile::tempdir().unwrap();
    die_with_a_pending_hash(dir.path(), false);
    let prefix = dir.path().join("prefix");
    let env = single_env(&[("SCR_CACHE_SIZE", "3")]);
    let out = job_logged(dir.path(), &FOUR, &env, |rt, me| {
        (rt.lost_datasets().to_vec(), read_back(rt, &prefix, me))
    });
    let why = "its CRC32s were never recorded";
    for (rank, ((lost, read), end, lines)) in out.iter().enumerate() {
        assert_eq!(read, "ckpt.1 exact=true from cache", "rank {rank}");
        assert_eq!(end, &Ok(()), "rank {rank}");
        assert_eq!(lost.len(), 1, "rank {rank}: {lost:?}");
        assert!(
            lost[0].starts_with("dataset 2 (ckpt.2) cannot be restored and was dropped")
                && lost[0].contains(&format!("rank 1: {why}"))
                && lost[0].contains(&format!("rank 3: {why}"))
                && !lost[0].contains(&format!("rank 0: {why}")),
            "rank {rank}: {}",
            lost[0]
        );
        let warned = said(lines, why);
        let expected = usize::from(rank == 0);
        assert_eq!(warned.len(), expected, "rank {rank}: {lines:#?}");
    }

    let dir = tempfile::tempdir().unwrap();
    die_with_a_pending_hash(dir.path(), false);
    let prefix = dir.path().join("prefix");
    let env = single_env(&[("SCR_CACHE_SIZE", "3"), ("SCR_CRC_ON_RESTART", "0")]);
    let out = job(dir.path(), &FOUR, &env, |rt, me| {
        (rt.lost_datasets().to_vec(), read_back(rt, &prefix, me))
    });
    for (rank, ((lost, read), end)) in out.iter().enumerate() {
        assert_eq!(read, "ckpt.2 exact=true from cache", "rank {rank}");
        assert!(lost.is_empty(), "rank {rank}: {lost:?}");
        assert_eq!(end, &Ok(()), "rank {rank}");
    }
}

/// A job that dies after its background hashes finished (the application computing)
/// but before they were recorded keeps its newest checkpoint: the threads' notes give the
/// next run the CRC32s, which verify the files — a byte damaged in cache since is caught
/// (ckpt.2 dropped, restart from ckpt.1), an intact cache restarts from ckpt.2.
#[test]
fn a_new_run_restores_a_dataset_whose_crc32s_were_noted_and_checks_them() {
    for damage in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        die_with_a_pending_hash(dir.path(), true);
        if damage {
            let victim = cache_job_dir(dir.path(), "n2")
                .join("scr.dataset.2")
                .join("f2_2");
            let mut bytes = std::fs::read(&victim).unwrap();
            bytes[0] ^= 0x20;
            std::fs::write(&victim, bytes).unwrap();
        }
        let prefix = dir.path().join("prefix");
        let env = single_env(&[("SCR_CACHE_SIZE", "3")]);
        let out = job(dir.path(), &FOUR, &env, |rt, me| {
            (rt.lost_datasets().to_vec(), read_back(rt, &prefix, me))
        });
        for (rank, ((lost, read), end)) in out.iter().enumerate() {
            assert_eq!(end, &Ok(()), "rank {rank}");
            if damage {
                assert_eq!(read, "ckpt.1 exact=true from cache", "rank {rank}");
                assert!(
                    lost.len() == 1
                        && lost[0].contains("[rank 2: ")
                        && lost[0].contains("scr.dataset.2/f2_2: CRC32")
                        && lost[0].contains("recorded]"),
                    "rank {rank}: {lost:?}"
                );
            } else {
                assert_eq!(read, "ckpt.2 exact=true from cache", "rank {rank}");
                assert!(lost.is_empty(), "rank {rank}: {lost:?}");
            }
        }
    }
}

/// Deleting a dataset whose hash is still pending stops the hash first: nothing is
/// recorded for files that are gone, no warning says they vanished, and with
/// `crc_on_delete` no damage is reported.
#[test]
fn deleting_a_dataset_whose_hash_is_pending_cancels_the_hash() {
    let dir = tempfile::tempdir().unwrap();
    let env = single_env(&[("SCR_CRC_ON_DELETE", "1")]);
    let out = job_logged(dir.path(), &FOUR, &env, |rt, me| {
        assert!(write_checkpoint(rt, dir.path(), "ckpt.1", &format!("f1_{me}")).unwrap());
        let pending = rt.crc_job.is_some();
        rt.delete("ckpt.1").unwrap();
        (pending, rt.crc_job.is_none(), rt.cache.ids().is_empty())
    });
    for (rank, (r, end, lines)) in out.iter().enumerate() {
        assert_eq!(r, &(true, true, true), "rank {rank}");
        assert_eq!(end, &Ok(()), "rank {rank}");
        assert!(
            said(lines, "CRC32").is_empty() && said(lines, "crc_on_delete").is_empty(),
            "rank {rank}: {lines:#?}"
        );
    }
}

/// A file the background hash cannot read is named in a warning with its rank and
/// recorded without a CRC32, and the record stays pending: nothing vouches for the
/// file's bytes, so a later run does not restore this rank's files of the dataset.
#[test]
fn a_file_the_background_hash_cannot_read_is_named_and_leaves_the_dataset_unverifiable() {
    let dir = tempfile::tempdir().unwrap();
    let out = job_logged(dir.path(), &FOUR, &single_env(&[]), |rt, me| {
        assert!(write_checkpoint(rt, dir.path(), "ckpt.1", &format!("f1_{me}")).unwrap());
        rt.settle_crc();
        // as if the file vanished under the thread: a job over a path that is not there
        let id = rt.cache.ids()[0];
        let mut file = String::new();
        rt.cache.update(id, |rec| {
            rec.crc32_pending = true;
            file = rec.files[0].name.clone();
        });
        let gone = dir.path().join(format!("vanished_{me}"));
        rt.crc_job = Some(
            deferred_crc::CrcJob::spawn(id, "ckpt.1", vec![(file, gone)], 4096, None).unwrap(),
        );
        poll_until_recorded(rt);
        let rec = on_disk(rt, "ckpt.1");
        (rec.crc32_pending, rec.files[0].crc32)
    });
    for (rank, (r, end, lines)) in out.iter().enumerate() {
        // still pending: a later run does not restore files nothing vouches for
        assert_eq!(r, &(true, None), "rank {rank}");
        assert_eq!(end, &Ok(()), "rank {rank}");
        let warned = said(
            lines,
            &format!("rank {rank}: dataset 1 (ckpt.1): f1_{rank}: its CRC32 could not be computed"),
        );
        assert_eq!(warned.len(), 1, "rank {rank}: {lines:#?}");
        assert!(warned[0].contains("No such file"), "{}", warned[0]);
    }
}

/// [`Runtime::init_in`] with the test hooks the loader's stand-in environment names
/// (`SCR_FAULT`, `SCR_TEST_WINDOW`): the tests give them as a value, as a program's
/// environment gives them to `init_with`.
fn init_hooked(w: Box<dyn World>, l: Loader, options: InitOptions) -> Result<Runtime> {
    let hooks = crate::hooks::TestHooks::from_env(&l.env);
    Runtime::init_in(w, l, options, hooks)
}
