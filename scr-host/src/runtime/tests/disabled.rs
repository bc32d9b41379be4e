//! A disabled library (`enable = false`): init returns a [`Disabled`], whose calls pass
//! through — nothing is made in cache, control directory or prefix, route_file hands back
//! the application's own path — while the call order is kept, agreed across ranks and
//! refused in the running runtime's words.

use super::*;
use crate::state::halt::Halt;

const DISABLED: (&str, &str) = ("SCR_ENABLE", "0");

/// Run `f` on every rank's disabled library (a job on `nodes`, `enable = false` and
/// `extra`); each rank gets a duplicate of the world for the test's own barriers. Every
/// rank's report.
fn disabled_job<T: Send>(
    dir: &Path,
    nodes: &[&str],
    extra: &[(&str, &str)],
    f: impl Fn(&mut Disabled, &dyn World, u32) -> T + Sync,
) -> Vec<T> {
    std::fs::create_dir_all(dir.join("prefix")).unwrap();
    let mut env = vec![DISABLED];
    env.extend_from_slice(extra);
    run_ranks(nodes.len() as u32, |w: Box<dyn World>| {
        let me = w.rank();
        let side = w.duplicate();
        let started = init_started(w, loader(dir, nodes, &env), InitOptions::default())
            .unwrap_or_else(|e| panic!("rank {me}: init: {e}"));
        let Started::Disabled(mut d) = started else {
            panic!("rank {me}: enable = false, yet init returned a running runtime");
        };
        assert_eq!(d.rank(), me);
        f(&mut d, &*side, me)
    })
}

/// The names below `dir`, relative and sorted (files and directories); empty when
/// `dir` does not exist.
fn tree(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let path = e.path();
            out.push(path.strip_prefix(root).unwrap().display().to_string());
            if path.is_dir() {
                walk(root, &path, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

#[test]
fn init_returns_a_disabled_library_and_a_running_one_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["n0", "n1"];
    for (extra, disabled) in [(vec![DISABLED], true), (vec![], false)] {
        let out = run_ranks(2, |w: Box<dyn World>| {
            let mut started =
                init_started(w, loader(dir.path(), &nodes, &extra), Default::default())
                    .expect("init");
            let seen = (started.is_disabled(), started.running().is_some());
            assert!(!started.is_finalized());
            started.finalize().expect("finalize");
            assert!(started.is_finalized());
            seen
        });
        assert_eq!(out, [(disabled, !disabled); 2], "enable = {}", !disabled);
    }
}

/// The whole API on a disabled library: the calls succeed in their order, misuse is
/// refused, the application's files land at their own paths and nothing else is made.
#[test]
fn every_call_passes_through_in_its_order_and_nothing_is_made() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("prefix");
    let nodes = ["n0", "n1"];
    let out = disabled_job(dir.path(), &nodes, &[], |d, _, r| {
        let file = prefix.join(format!("ckpt.1/sub/rank_{r}.dat"));
        let mut lines = vec![
            format!("have_restart {:?}", d.have_restart_fetching().unwrap()),
            format!("in dataset {}", d.in_dataset()),
            show("complete_output", d.complete_output(true)),
            show(
                "start_output",
                d.start_output("ckpt.1", CHECKPOINT).map(|()| ""),
            ),
            format!("in dataset {}", d.in_dataset()),
            show(
                "start_output again",
                d.start_output("ckpt.2", CHECKPOINT).map(|()| ""),
            ),
            show(
                "route_file empty",
                d.route_file(Path::new("")).map(|p| p.display().to_string()),
            ),
            show(
                "route_file NUL",
                d.route_file(Path::new("a\0b"))
                    .map(|p| p.display().to_string()),
            ),
        ];
        let routed = d.route_file(&file).expect("route_file");
        lines.push(format!(
            "routed to its own path {}, directory made {}",
            routed == file,
            file.parent().unwrap().is_dir()
        ));
        std::fs::write(&routed, "data").unwrap();
        lines.extend([
            show("complete_output", d.complete_output(true)),
            format!("in dataset {}", d.in_dataset()),
            show("complete_output again", d.complete_output(true)),
            show(
                "route_file outside",
                d.route_file(Path::new("x/y"))
                    .map(|p| p.display().to_string()),
            ),
            show("start_restart", d.start_restart()),
            show("complete_restart", d.complete_restart(true)),
            show("current", d.current("ckpt.1").map(|()| "")),
            show("drop", d.drop_dataset("ckpt.1").map(|()| "")),
            show("delete", d.delete("ckpt.1").map(|()| "")),
            show("need_checkpoint", d.need_checkpoint()),
            show("should_exit", d.should_exit()),
            show("start_checkpoint", d.start_checkpoint()),
            show("complete_checkpoint", d.complete_output(false)),
            format!("have_restart {:?}", d.have_restart()),
            format!("lost {:?}", d.lost_datasets()),
        ]);
        lines.push(show("finalize", d.finalize().map(|()| "")));
        lines.push(show("finalize again", d.finalize().map(|()| "")));
        lines.push(format!("finalized {}", d.is_finalized()));
        lines
    });
    for (r, lines) in out.iter().enumerate() {
        assert_eq!(
            lines,
            &[
                "have_restart None",
                "in dataset false",
                "complete_output: complete_output: no dataset is being written; call start_output first",
                "start_output: ok ",
                "in dataset true",
                "start_output again: start_output: a dataset is already being written; call complete_output first",
                "route_file empty: route_file: the file name is empty; name a file inside the prefix",
                "route_file NUL: route_file: `a\0b` contains a NUL byte, which no file name may hold",
                "routed to its own path true, directory made true",
                "complete_output: ok true",
                "in dataset false",
                "complete_output again: complete_output: no dataset is being written; call start_output first",
                "route_file outside: ok x/y",
                "start_restart: start_restart: no checkpoint to restart from (have_restart said none)",
                "complete_restart: complete_restart: no restart in progress; call start_restart first",
                "current: ok ",
                "drop: ok ",
                "delete: ok ",
                "need_checkpoint: ok false",
                "should_exit: ok false",
                "start_checkpoint: ok ckpt.1",
                "complete_checkpoint: ok false",
                "have_restart None",
                "lost []",
                "finalize: ok ",
                "finalize again: ok ",
                "finalized true",
            ],
            "rank {r}"
        );
    }
    // only the application's files, at their own paths: no .scr, no cache, no control
    assert_eq!(
        tree(&prefix),
        [
            "ckpt.1",
            "ckpt.1/sub",
            "ckpt.1/sub/rank_0.dat",
            "ckpt.1/sub/rank_1.dat"
        ]
    );
    for base in ["cache", "cntl"] {
        assert!(!dir.path().join(base).exists(), "{base}: nothing made");
    }
}

/// A dataset is kept only when every rank says valid; a refusal on one rank only, or
/// names that differ between ranks, fail the call on every rank, which stay in step.
#[test]
fn outcomes_and_refusals_are_agreed_across_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["n0", "n1", "n2"];
    let out = disabled_job(dir.path(), &nodes, &[], |d, _, r| {
        let mut lines = Vec::new();
        d.start_output("out.1", OUTPUT).unwrap();
        lines.push(show("complete_output", d.complete_output(r != 1)));
        lines.push(show(
            "start_output",
            d.start_output(if r == 1 { "out.x" } else { "out.3" }, OUTPUT)
                .map(|()| ""),
        ));
        let refused = (r == 2).then(|| "refused here".to_string());
        lines.push(show(
            "start_output",
            d.start_output_or_refuse("out.4", OUTPUT, refused)
                .map(|()| ""),
        ));
        lines.push(format!("in dataset {}", d.in_dataset()));
        lines.push(show(
            "start_output",
            d.start_output("out.5", CHECKPOINT).map(|()| ""),
        ));
        lines.push(show("complete_output", d.complete_output(true)));
        d.finalize().unwrap();
        lines
    });
    let named = "start_output: rank 1 passed dataset `out.x` with flags (checkpoint, output) 01, rank 0 passed `out.3` with 01; every process must pass the same name and flags";
    let others = |rank: u32, why: &str| {
        format!("start_output: another rank failed, this rank stops with it: rank {rank}: {why}")
    };
    for (r, lines) in out.iter().enumerate() {
        assert_eq!(
            lines[0], "complete_output: ok false",
            "rank {r}: rank 1 said invalid"
        );
        if r == 1 {
            assert_eq!(lines[1], format!("start_output: {named}"));
        } else {
            assert_eq!(lines[1], others(1, named), "rank {r}");
        }
        if r == 2 {
            assert_eq!(lines[2], "start_output: start_output: refused here");
        } else {
            assert_eq!(
                lines[2],
                others(2, "start_output: refused here"),
                "rank {r}"
            );
        }
        assert_eq!(
            lines[3..],
            [
                "in dataset false",
                "start_output: ok ",
                "complete_output: ok true"
            ],
            "rank {r}: in step again"
        );
    }
}

/// The misuse a disabled library refuses is refused in the words a running runtime uses
/// for it.
#[test]
fn misuse_is_refused_in_the_running_runtimes_words() {
    fn misuse<L: Lib>(lib: &mut L, file: &Path) -> Vec<String> {
        vec![
            show("complete_output", lib.complete_output(true)),
            show("start_restart", lib.start_restart()),
            show("complete_restart", lib.complete_restart(true)),
            show(
                "start_output bad",
                lib.start_output("a/b", CHECKPOINT).map(|()| ""),
            ),
            show(
                "start_output",
                lib.start_output("ckpt.1", CHECKPOINT).map(|()| ""),
            ),
            show(
                "start_output again",
                lib.start_output("ckpt.2", CHECKPOINT).map(|()| ""),
            ),
            show(
                "route_file empty",
                lib.route_file(Path::new("")).map(|_| ""),
            ),
            show(
                "route_file NUL",
                lib.route_file(Path::new("a\0b")).map(|_| ""),
            ),
            show(
                "route_file",
                lib.route_file(file).map(|p| {
                    std::fs::write(&p, "x").unwrap();
                    ""
                }),
            ),
            show("complete_output", lib.complete_output(true)),
            show("complete_output again", lib.complete_output(true)),
        ]
    }
    let nodes = ["n0", "n1"];
    let disabled_dir = tempfile::tempdir().unwrap();
    let disabled = disabled_job(disabled_dir.path(), &nodes, &[], |d, _, r| {
        let said = misuse(d, &disabled_dir.path().join(format!("prefix/f{r}")));
        d.finalize().unwrap();
        said
    });
    let running_dir = tempfile::tempdir().unwrap();
    let running = job(running_dir.path(), &nodes, &[], |rt, r| {
        misuse(rt, &running_dir.path().join(format!("prefix/f{r}")))
    });
    for (r, (d, (rt, end))) in disabled.iter().zip(&running).enumerate() {
        assert_eq!(end, &Ok(()), "rank {r}");
        assert_eq!(d, rt, "rank {r}");
    }
}

/// The halt file and the checkpoint rules still decide need_checkpoint and should_exit,
/// as in a running runtime (`policy`'s test of it).
#[test]
fn the_checkpoint_rules_and_the_halt_file_still_decide() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["n0", "n1", "n2", "n3"];
    let out = disabled_job(
        dir.path(),
        &nodes,
        &[("SCR_CHECKPOINT_INTERVAL", "2"), ("SCR_HALT_EXIT", "0")],
        |d, side, r| {
            let asked: Vec<bool> = (0..4).map(|_| d.need_checkpoint().unwrap()).collect();
            let before = d.should_exit().unwrap();
            side.barrier();
            if r == 0 {
                Halt::update(&dir.path().join("prefix"), |h| {
                    h.exit_reason = Some("maintenance at noon".into());
                    (true, ())
                })
                .unwrap();
            }
            side.barrier();
            let after = (d.should_exit().unwrap(), d.need_checkpoint().unwrap());
            d.finalize().unwrap();
            (asked, before, after)
        },
    );
    for (r, (asked, before, after)) in out.iter().enumerate() {
        assert_eq!(
            asked,
            &[false, true, false, true],
            "rank {r}: every 2nd call"
        );
        assert!(!before, "rank {r}: no halt condition yet");
        assert_eq!(after, &(true, true), "rank {r}: the halt file's condition");
    }
}

/// The calls a running runtime and a disabled library share, for comparing them.
trait Lib {
    fn start_output(&mut self, name: &str, flags: OutputFlags) -> Result<()>;
    fn route_file(&mut self, name: &Path) -> Result<PathBuf>;
    fn complete_output(&mut self, valid: bool) -> Result<bool>;
    fn start_restart(&mut self) -> Result<String>;
    fn complete_restart(&mut self, valid: bool) -> Result<bool>;
}

macro_rules! lib {
    ($t:ty) => {
        impl Lib for $t {
            fn start_output(&mut self, name: &str, flags: OutputFlags) -> Result<()> {
                <$t>::start_output(self, name, flags)
            }
            fn route_file(&mut self, name: &Path) -> Result<PathBuf> {
                <$t>::route_file(self, name)
            }
            fn complete_output(&mut self, valid: bool) -> Result<bool> {
                <$t>::complete_output(self, valid)
            }
            fn start_restart(&mut self) -> Result<String> {
                <$t>::start_restart(self)
            }
            fn complete_restart(&mut self, valid: bool) -> Result<bool> {
                <$t>::complete_restart(self, valid)
            }
        }
    };
}
lib!(Runtime);
lib!(Disabled);
