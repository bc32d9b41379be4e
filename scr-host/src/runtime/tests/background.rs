//! `protect_in_background`: the scheme's apply runs in a thread after complete_output;
//! the dataset becomes a checkpoint only once every rank's thread returned (settled at a
//! later call), the previous checkpoint stays the restart point and in cache meanwhile,
//! and a failure on one rank discards the dataset on every rank.

use super::*;

const FOUR: [&str; 4] = ["n0", "n1", "n2", "n3"];

/// XOR over four nodes in sets of four, protected in the background, no flush, the
/// background threads held at their start until `gate` exists.
fn held_env(gate: &Path) -> Vec<(&'static str, String)> {
    vec![
        ("SCR_COPY_TYPE", "XOR".into()),
        ("SCR_SET_SIZE", "4".into()),
        ("SCR_FLUSH", "0".into()),
        ("SCR_PROTECT_IN_BACKGROUND", "1".into()),
        ("SCR_FAULT", format!("hold-protect:{}", gate.display())),
    ]
}

fn borrowed<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    env.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

/// This rank's record of dataset `name` on disk, if it has one.
fn on_disk(rt: &Runtime, name: &str) -> Option<DatasetRecord> {
    Filemap::load(rt.control_dir(), rt.rank())
        .unwrap()
        .datasets
        .into_values()
        .find(|d| d.name == name)
}

/// Open the gate on rank 0 once every rank is past its checks (collective).
fn open_gate(rt: &Runtime, gate: &Path) {
    rt.world.as_dyn().barrier();
    if rt.rank() == 0 {
        std::fs::write(gate, b"").unwrap();
    }
    rt.world.as_dyn().barrier();
}

/// Call need_checkpoint (collective) until no rank has a protection pending: the loop
/// ends on every rank in the same round.
fn poll_until_settled(rt: &mut Runtime) -> u32 {
    let started = std::time::Instant::now();
    let mut polls = 0;
    loop {
        rt.need_checkpoint().unwrap();
        polls += 1;
        if rt.world.sum_u64(u64::from(rt.protection.pending())) == 0 {
            return polls;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "rank {}: the background protection never settled",
            rt.rank()
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// complete_output returns while XOR's apply is held: the dataset is recorded but not
/// complete, has no redundancy file yet, and is not offered for a restart; once the
/// threads run, a need_checkpoint poll settles it and it is a checkpoint. A new run that
/// lost node n1's cache rebuilds it through XOR, byte-exact on every rank.
#[test]
fn a_dataset_protected_in_the_background_becomes_a_checkpoint_at_a_later_call() {
    let dir = tempfile::tempdir().unwrap();
    let gate = dir.path().join("gate");
    let env = held_env(&gate);
    let out = job(dir.path(), &FOUR, &borrowed(&env), |rt, me| {
        let file = format!("f1_{me}");
        let kept = write_checkpoint(rt, dir.path(), "ckpt.1", &file).unwrap();
        let rec = on_disk(rt, "ckpt.1").expect("recorded at complete_output");
        let dataset_dir = rt
            .job
            .dataset_dir(&rec.descriptor.store, rec.id)
            .to_path_buf();
        let redundancy_before: Vec<bool> = rec
            .redundancy
            .iter()
            .map(|r| dataset_dir.join(r).exists())
            .collect();
        let offered_before = rt.have_restart();
        // polls while held change nothing
        rt.need_checkpoint().unwrap();
        let still_pending = rt.protection.pending() && !on_disk(rt, "ckpt.1").unwrap().complete;
        open_gate(rt, &gate);
        poll_until_settled(rt);
        let after = on_disk(rt, "ckpt.1").unwrap();
        let redundancy_after = after
            .redundancy
            .iter()
            .all(|r| dataset_dir.join(r).is_file());
        (
            kept,
            rec.complete,
            redundancy_before,
            offered_before,
            still_pending,
            after.complete,
            !after.redundancy.is_empty() && redundancy_after,
            rt.have_restart(),
        )
    });
    for (rank, (r, end)) in out.iter().enumerate() {
        let (kept, complete_at_return, red_before, offered_before, pending, complete, red, offered) =
            r;
        assert!(kept, "rank {rank}: complete_output said not kept");
        assert!(
            !complete_at_return,
            "rank {rank}: complete before its protection"
        );
        assert!(
            red_before.iter().all(|e| !e),
            "rank {rank}: redundancy written while held: {red_before:?}"
        );
        assert_eq!(offered_before, &None, "rank {rank}");
        assert!(pending, "rank {rank}: settled while every thread was held");
        assert!(complete, "rank {rank}: not complete after the poll");
        assert!(red, "rank {rank}: no redundancy file after the protection");
        assert_eq!(offered.as_deref(), Some("ckpt.1"), "rank {rank}");
        assert_eq!(end, &Ok(()), "rank {rank}");
    }
    // a lost node: its cache is gone, XOR rebuilds its rank's files
    std::fs::remove_dir_all(cache_job_dir(dir.path(), "n1")).unwrap();
    let prefix = dir.path().join("prefix");
    let out = job(dir.path(), &FOUR, &borrowed(&env), |rt, me| {
        read_back(rt, &prefix, me)
    });
    for (rank, (r, end)) in out.iter().enumerate() {
        assert_eq!(r, "ckpt.1 exact=true from cache", "rank {rank}");
        assert_eq!(end, &Ok(()), "rank {rank}");
    }
}

/// While ckpt.2 is protected in the background, ckpt.1 stays the restart point and in
/// cache (the store's count is 2). The next start_output waits for ckpt.2's protection
/// (the gate opens meanwhile), and only then evicts ckpt.1 for ckpt.3.
#[test]
fn the_previous_checkpoint_stays_while_a_newer_one_is_protected() {
    let dir = tempfile::tempdir().unwrap();
    let gate = dir.path().join("gate");
    std::fs::write(&gate, b"").unwrap();
    let env = held_env(&gate);
    let out = job(dir.path(), &FOUR, &borrowed(&env), |rt, me| {
        write_checkpoint(rt, dir.path(), "ckpt.1", &format!("f1_{me}")).unwrap();
        poll_until_settled(rt);
        // hold the next one
        rt.world.as_dyn().barrier();
        if me == 0 {
            std::fs::remove_file(&gate).unwrap();
        }
        rt.world.as_dyn().barrier();
        write_checkpoint(rt, dir.path(), "ckpt.2", &format!("f2_{me}")).unwrap();
        rt.need_checkpoint().unwrap();
        let offered = rt.have_restart();
        let first = on_disk(rt, "ckpt.1").unwrap();
        let first_dir = rt.job.dataset_dir(&first.descriptor.store, first.id);
        let first_there = first.complete && first_dir.join(&first.files[0].name).is_file();
        let second_complete = on_disk(rt, "ckpt.2").unwrap().complete;
        // the gate opens while start_output waits for ckpt.2
        let opener = (me == 0).then(|| {
            let gate = gate.clone();
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(200));
                std::fs::write(&gate, b"").unwrap();
            })
        });
        write_checkpoint(rt, dir.path(), "ckpt.3", &format!("f3_{me}")).unwrap();
        if let Some(o) = opener {
            o.join().unwrap();
        }
        let second = on_disk(rt, "ckpt.2").map(|r| r.complete);
        (
            offered,
            first_there,
            second_complete,
            on_disk(rt, "ckpt.1").is_none() && !first_dir.exists(),
            second,
        )
    });
    for (rank, ((offered, first_there, second_complete, first_gone, second), end)) in
        out.iter().enumerate()
    {
        assert_eq!(offered.as_deref(), Some("ckpt.1"), "rank {rank}");
        assert!(
            first_there,
            "rank {rank}: ckpt.1 left the cache while ckpt.2 was protected"
        );
        assert!(!second_complete, "rank {rank}: ckpt.2 complete while held");
        assert!(first_gone, "rank {rank}: ckpt.1 not evicted for ckpt.3");
        assert_eq!(second, &Some(true), "rank {rank}: ckpt.2 not a checkpoint");
        assert_eq!(end, &Ok(()), "rank {rank}");
    }
    let prefix = dir.path().join("prefix");
    let out = job(dir.path(), &FOUR, &borrowed(&env), |rt, me| {
        read_back(rt, &prefix, me)
    });
    for (rank, (r, _)) in out.iter().enumerate() {
        assert_eq!(r, "ckpt.3 exact=true from cache", "rank {rank}");
    }
}

/// A failure on one rank inside the background apply (an injected I/O error on rank 2)
/// discards the dataset on every rank alike, and rank 0 says why; the previous checkpoint
/// stays the restart point, in this run and the next.
#[test]
fn a_failure_in_the_background_discards_the_dataset_on_every_rank() {
    let dir = tempfile::tempdir().unwrap();
    // ckpt.2 is dataset 2: the fault names it
    let env = [
        ("SCR_COPY_TYPE", "XOR"),
        ("SCR_SET_SIZE", "4"),
        ("SCR_FLUSH", "0"),
        ("SCR_PROTECT_IN_BACKGROUND", "1"),
        ("SCR_FAULT", "protect:2:2"),
    ];
    let out = job_logged(dir.path(), &FOUR, &env, |rt, me| {
        write_checkpoint(rt, dir.path(), "ckpt.1", &format!("f1_{me}")).unwrap();
        let kept = write_checkpoint(rt, dir.path(), "ckpt.2", &format!("f2_{me}")).unwrap();
        poll_until_settled(rt);
        (kept, rt.have_restart(), on_disk(rt, "ckpt.2").is_none())
    });
    for (rank, ((kept, offered, gone), end, lines)) in out.iter().enumerate() {
        assert!(
            kept,
            "rank {rank}: complete_output returns before the failure"
        );
        assert_eq!(offered.as_deref(), Some("ckpt.1"), "rank {rank}");
        assert!(gone, "rank {rank}: ckpt.2 still recorded");
        assert_eq!(end, &Ok(()), "rank {rank}");
        if rank == 0 {
            assert!(
                !said(lines, "complete_output ckpt.2: redundancy could not be applied, dataset discarded: on rank 2").is_empty()
                    && !said(lines, "injected failure (protect:2:2)").is_empty()
                    && !said(lines, "the previous checkpoint stays the restart point").is_empty(),
                "{lines:#?}"
            );
        }
    }
    let prefix = dir.path().join("prefix");
    let out = job(dir.path(), &FOUR, &env, |rt, me| read_back(rt, &prefix, me));
    for (rank, (r, _)) in out.iter().enumerate() {
        assert_eq!(r, "ckpt.1 exact=true from cache", "rank {rank}");
    }
}

/// should_exit with a protection held (the gate opens a second later): while no halt
/// condition holds it answers no at once and leaves the protection running (an
/// application asking every timestep keeps computing); once one holds it answers yes
/// only after the protection ended, the dataset then a checkpoint (the application may
/// exit next).
#[test]
fn should_exit_waits_for_the_protection_only_when_it_says_yes() {
    use crate::state::halt::Halt;
    let dir = tempfile::tempdir().unwrap();
    let gate = dir.path().join("gate");
    let mut env = held_env(&gate);
    env.push(("SCR_HALT_EXIT", "0".into()));
    let out = job(dir.path(), &FOUR, &borrowed(&env), |rt, me| {
        write_checkpoint(rt, dir.path(), "ckpt.1", &format!("f1_{me}")).unwrap();
        rt.world.as_dyn().barrier();
        let opener = (me == 0).then(|| {
            let gate = gate.clone();
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_secs(1));
                std::fs::write(&gate, b"").unwrap();
            })
        });
        let went_on = rt.should_exit().unwrap();
        let still_pending = rt.protection.pending() && !on_disk(rt, "ckpt.1").unwrap().complete;
        rt.world.as_dyn().barrier();
        if me == 0 {
            Halt::update(&dir.path().join("prefix"), |h| {
                h.exit_reason = Some("drain".into());
                (true, ())
            })
            .unwrap();
        }
        rt.world.as_dyn().barrier();
        let stop = rt.should_exit().unwrap();
        let complete = on_disk(rt, "ckpt.1").map(|r| r.complete);
        let pending = rt.protection.pending();
        if let Some(o) = opener {
            o.join().unwrap();
        }
        (went_on, still_pending, stop, pending, complete)
    });
    for (rank, ((went_on, still_pending, stop, pending, complete), end)) in out.iter().enumerate() {
        assert!(
            !went_on,
            "rank {rank}: should_exit said yes with no halt condition"
        );
        assert!(
            still_pending,
            "rank {rank}: should_exit waited for the protection"
        );
        assert!(stop, "rank {rank}: the halt condition");
        assert!(
            !pending,
            "rank {rank}: said yes with the protection pending"
        );
        assert_eq!(
            complete,
            &Some(true),
            "rank {rank}: ckpt.1 not a checkpoint"
        );
        assert_eq!(end, &Ok(()), "rank {rank}");
    }
}
