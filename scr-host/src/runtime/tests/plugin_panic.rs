//! A scheme plugin panicking on one member (the test fixture's PANIC_ONE and
//! PANIC_ONE_RECOVER) while the others wait: every rank gets its error, in process, and
//! no rank hangs.

use super::*;

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
