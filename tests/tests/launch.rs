//! `scr run` (relaunch after a node failure, min_nodes, watchdog), `scr env` and
//! `scr halt --check`, driven as a batch script would, with mpiexec on simulated nodes
//! (`scr nodes down` and `scr hostlist`: nodes.rs).

use std::path::Path;
use std::process::Command;

use scr_e2e::{binary, reference_state, Cluster, JobOutput};

mod launch_common;
use launch_common::{scr, scr_command};

/// A launcher script: on its first call it runs `first` (a shell command), on every
/// later call `later`; `$1` is the rank count `scr run` passes as `{ranks}`.
fn launcher(c: &Cluster, first: &str, later: &str) -> String {
    let marker = c.path("launched-once");
    let script = c.path("launch.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nif [ ! -e '{m}' ]; then\n  touch '{m}'\n  {first}\nfi\n{later}\n",
            m = marker.display()
        ),
    )
    .unwrap();
    let mut perm = std::fs::metadata(&script).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(&script, perm).unwrap();
    script.display().to_string()
}

const STEPS: u64 = 30;
const CELLS: usize = 64;

/// `mpiexec -n $1 scr-heat` with the test's sizes and `extra` arguments.
fn heat_cmd(extra: &str) -> String {
    format!(
        "mpiexec -n \"$1\" '{}' --steps {STEPS} --every 5 --cells {CELLS} {extra}",
        binary("scr-heat").display()
    )
}

/// The first launch: rank 2 (on n1) is killed after step 12, then n1's cache base is
/// given to another user (the node's cache is unusable from now on).
fn failing_first_launch(c: &Cluster) -> String {
    format!(
        "{}\n  rc=$?\n  chown 12345 '{}'\n  exit $rc",
        heat_cmd("--kill-at 12 --kill-rank 2"),
        c.path("cache").join("n1").display()
    )
}

fn world_sizes(out: &JobOutput) -> Vec<&str> {
    out.stdout
        .lines()
        .filter_map(|l| l.strip_prefix("ranks "))
        .collect()
}

#[test]
fn a_failed_node_is_excluded_and_the_job_relaunches_on_the_survivors_and_a_spare() {
    let reference = reference_state(6, STEPS, Some(CELLS));
    let mut c = Cluster::new();
    c.set("SCR_COPY_TYPE", "XOR").set("SCR_SET_SIZE", "3");
    // no run has recorded its nodes yet: SCR's scr_env --runnodes says 0
    let none = scr(&c, &["env", "--runnodes"], &[]);
    assert_eq!((none.code, none.stdout.as_str()), (0, "0\n"), "{none}");
    let script = launcher(
        &c,
        &failing_first_launch(&c),
        &format!("exec {}", heat_cmd("")),
    );
    let out = scr(
        &c,
        &[
            "run",
            "--runs",
            "3",
            "--postrun",
            "false",
            "--",
            &script,
            "{ranks}",
        ],
        &[
            ("SCR_NODELIST", "n[0-3]"),
            ("SCR_NODE_NAMES", "n0,n0,n1,n1,n2,n2"),
        ],
    );
    assert_eq!(out.code, 0, "{out}");
    let cache_n1 = c.path("cache").join("n1");
    let launches: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.starts_with("scr run: "))
        .collect();
    assert_eq!(
        launches,
        [
            "scr run: allocation n[0-3] (nodelist (environment SCR_NODELIST)), 3 run(s)".to_string(),
            format!("scr run: launch 1 of 3 on 3 node(s) n[0-2]: {script} 6"),
            "scr run: launch 1 failed (exit status: 137)".into(),
            format!(
                "scr run: node n1 is down: {} is owned by uid 12345, not by this user (uid 0) or root",
                cache_n1.display()
            ),
            format!("scr run: launch 2 of 3 on 3 node(s) n[0,2-3]: {script} 6"),
            "scr run: launch 2 completed".into(),
        ],
        "{out}"
    );
    // both launches ran 6 ranks; the second restarted from the newest checkpoint (n1's
    // files rebuilt through XOR on the spare n3) and ended where an uninterrupted run does
    assert_eq!(world_sizes(&out), ["6", "6"], "{out}");
    assert!(
        out.stdout.contains("restarted from ckpt.10 at step 10"),
        "{out}"
    );
    assert_eq!(out.final_state(), reference, "{out}");
    // the relaunch put ranks 2 and 3 on the spare, not on n1
    let n3 = c.cache_dir("n3");
    assert!(n3.is_dir(), "the spare n3 was not used\n{out}");

    // the failure and the lost node are in the event log, for `scr log`
    let events = std::fs::read_to_string(c.prefix().join(".scr/events.jsonl")).unwrap();
    let ours: Vec<&str> = events.lines().filter(|l| l.contains("scr run: ")).collect();
    assert_eq!(ours.len(), 1, "{events}");
    assert!(
        ours[0].contains("\"what\":\"scr run: launch 1 failed (exit status: 137)\""),
        "{events}"
    );
    assert!(
        events
            .lines()
            .any(|l| l.contains("\"event\":\"lost_nodes\"") && l.contains("\"nodes\":[\"n1\"]")),
        "{events}"
    );
    // what scr env reports about the allocation now; the last run used 3 nodes (n0, n2,
    // n3), as its init recorded
    let run_nodes = 3;
    let env = scr(&c, &["env"], &[("SCR_NODELIST", "n[0-3]")]);
    assert_eq!(env.code, 0, "{env}");
    assert_eq!(
        env.stdout,
        format!(
            "user        {}\njob id      e2e\nnodes       n[0-3] (nodelist (environment SCR_NODELIST))\n\
             down        n1: {} is owned by uid 12345, not by this user (uid 0) or root\n\
             prefix      {}\ncontrol     {}\ncache       {} (node-local)\n\
             runs left   1\nrun nodes   {}\n",
            scr_e2e::USER,
            cache_n1.display(),
            c.prefix().display(),
            c.path("cntl").join(scr_e2e::USER).join("scr.e2e").display(),
            c.path("cache").join(scr_e2e::USER).join("scr.e2e").display(),
            run_nodes
        )
    );
    // the job's directories, one field each (a script cleaning the caches asks these)
    let control = scr(&c, &["env", "control"], &[]);
    assert_eq!(
        control.stdout,
        format!(
            "{}\n",
            c.path("cntl").join(scr_e2e::USER).join("scr.e2e").display()
        ),
        "{control}"
    );
    let cache = scr(&c, &["env", "cache"], &[("SCR_NODE_NAMES", "n0,n1")]);
    assert_eq!(
        cache.stdout,
        format!(
            "{}\n",
            c.path("cache")
                .join("<node>")
                .join(scr_e2e::USER)
                .join("scr.e2e")
                .display()
        ),
        "{cache}"
    );
    let down = scr(&c, &["env", "down"], &[]);
    assert_eq!((down.code, down.stdout.as_str()), (0, "n1\n"), "{down}");
    let runs = scr(&c, &["env", "runs"], &[]);
    assert_eq!(runs.stdout, "1\n", "{runs}");
    // SCR's scr_env flags: the same fields, one per call
    for (flag, want) in [
        ("--down", "n1\n".to_string()),
        ("-d", "n1\n".to_string()),
        ("--jobid", "e2e\n".to_string()),
        ("--user", format!("{}\n", scr_e2e::USER)),
        ("--runnodes", format!("{run_nodes}\n")),
    ] {
        let got = scr(&c, &["env", flag], &[]);
        assert_eq!(
            (got.code, got.stdout.as_str()),
            (0, want.as_str()),
            "{flag}: {got}"
        );
    }
    let both = scr(&c, &["env", "--user", "--jobid"], &[]);
    assert_eq!(both.code, 2, "one field at a time: {both}");
    assert!(both.stderr.contains("cannot be used with"), "{both}");
}

#[test]
fn with_too_few_nodes_left_scr_run_stops_and_says_why() {
    let c = Cluster::new();
    let script = launcher(
        &c,
        &failing_first_launch(&c),
        &format!("exec {}", heat_cmd("")),
    );
    let out = scr(
        &c,
        &[
            "run",
            "--runs",
            "3",
            "--postrun",
            "false",
            "--",
            &script,
            "{ranks}",
        ],
        &[
            ("SCR_NODELIST", "n[0-2]"),
            ("SCR_NODE_NAMES", "n0,n0,n1,n1,n2,n2"),
        ],
    );
    assert_eq!(out.code, 1, "{out}");
    assert_eq!(world_sizes(&out), ["6"], "one launch only\n{out}");
    let last = out
        .stdout
        .lines()
        .rev()
        .find(|l| l.starts_with("scr run: "));
    assert_eq!(
        last,
        Some(
            format!(
                "scr run: stopping: 2 node(s) left (n[0,2]), fewer than the 3 needed (the previous run's node count, from its nodes file); \
                 down: n1 ({} is owned by uid 12345, not by this user (uid 0) or root)",
                c.path("cache").join("n1").display()
            )
            .as_str()
        ),
        "{out}"
    );
    assert!(!out.stdout.contains("final step"), "{out}");
}

/// `scr run` on n[0-3] with one rank per node, for `first` and `later` (see [`launcher`]),
/// at most two launches.
fn run_on_four(c: &Cluster, first: &str, later: &str) -> JobOutput {
    let script = launcher(c, first, later);
    scr(
        c,
        &[
            "run",
            "--runs",
            "2",
            "--postrun",
            "false",
            "--",
            &script,
            "{ranks}",
        ],
        &[
            ("SCR_NODELIST", "n[0-3]"),
            ("SCR_NODE_NAMES", "n0,n1,n2,n3"),
        ],
    )
}

/// Shell commands that make the cache bases of n1 and n2 unusable (owned by another user).
fn n1_and_n2_down(c: &Cluster) -> String {
    let (n1, n2) = (c.path("cache").join("n1"), c.path("cache").join("n2"));
    format!(
        "mkdir -p '{}' '{}'\n  chown 12345 '{}' '{}'",
        n1.display(),
        n2.display(),
        n1.display(),
        n2.display()
    )
}

/// With `min_nodes` unset, a relaunch needs as many nodes as the previous run used (the
/// nodes file its rank 0 wrote in the prefix at init, SCR's rule), not as many as `scr run`
/// gave it: the step was given 4 nodes but ran on 2 (n0, n1); with n1 and n2 down after
/// it, the relaunch goes ahead on the 2 left. A count left in the prefix before `scr run`
/// started (an earlier allocation's) is not used: when the first launch fails before
/// init, the relaunch needs as many nodes as the first launch was given.
#[test]
fn a_relaunch_needs_as_many_nodes_as_the_previous_run_used() {
    let c = Cluster::new();
    let heat_on_two = format!(
        "SCR_NODE_NAMES=n0,n1 mpiexec -n 2 '{}' --steps {STEPS} --every 5 --cells {CELLS} \
         --kill-at 12 --kill-rank 1",
        binary("scr-heat").display()
    );
    let out = run_on_four(
        &c,
        &format!(
            "{heat_on_two}\n  rc=$?\n  {}\n  exit $rc",
            n1_and_n2_down(&c)
        ),
        "echo \"relaunched: $1 rank(s) on $SCR_NODE_NAMES\"",
    );
    assert_eq!(out.code, 0, "{out}");
    let nodes_file = scr_host::state::nodes::Nodes::read(&c.prefix().join(".scr/nodes.scr"));
    assert_eq!(nodes_file.unwrap().nodes, 2, "{out}");
    let said: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.starts_with("scr run: launch") || l.starts_with("relaunched"))
        .collect();
    assert_eq!(said.len(), 5, "{out}");
    assert!(said[0].starts_with("scr run: launch 1 of 2 on 4 node(s) n[0-3]: "));
    assert!(said[2].starts_with("scr run: launch 2 of 2 on 2 node(s) n[0,3]: "));
    assert_eq!(
        said[3..],
        [
            "relaunched: 2 rank(s) on n0,n3",
            "scr run: launch 2 completed"
        ]
    );

    let c = Cluster::new();
    let stale = c.prefix().join(".scr/nodes.scr");
    std::fs::create_dir_all(stale.parent().unwrap()).unwrap();
    scr_host::state::nodes::Nodes { nodes: 2 }
        .write(&stale, false)
        .unwrap();
    let out = run_on_four(
        &c,
        &format!("{}\n  exit 1", n1_and_n2_down(&c)),
        "echo relaunched",
    );
    assert_eq!(out.code, 1, "{out}");
    assert!(!out.stdout.contains("relaunched"), "{out}");
    assert!(
        out.stdout.contains(
            "scr run: stopping: 2 node(s) left (n[0,3]), fewer than the 4 needed (the first launch's node count); down: n1 ("
        ),
        "{out}"
    );
    assert!(!stale.exists(), "removed before the first launch");
}

#[test]
fn a_halt_condition_stops_the_relaunches_and_halt_check_tells_scripts() {
    let c = Cluster::new();
    let prefix = c.prefix();
    let prefix = prefix.to_str().unwrap();
    let check = scr(&c, &["halt", "--check", "--prefix", prefix], &[]);
    assert_eq!(check.code, 3, "{check}");
    assert_eq!(
        check.stdout,
        format!("no halt condition holds in {prefix}/.scr/halt.scr\n")
    );
    let set = scr(&c, &["halt", "--reason", "maintenance at noon"], &[]);
    assert_eq!(set.code, 0, "{set}");
    let check = scr(&c, &["halt", "--check"], &[]);
    assert_eq!(
        (check.code, check.stdout.as_str()),
        (0, "halt: exit reason set: maintenance at noon\n"),
        "{check}"
    );
    // fewer than halt_seconds left in the allocation counts too (here its end is given
    // with the end_time key; the resource managers' are the walltime module's)
    let end = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 50;
    let end_s = end.to_string();
    let timed = [
        ("SCR_HALT_SECONDS", "100"),
        ("SCR_END_TIME", end_s.as_str()),
    ];
    let cleared = scr(&c, &["halt", "--unset", "reason"], &[]);
    assert_eq!(cleared.code, 0, "{cleared}");
    let check = scr(&c, &["halt", "--check"], &timed);
    assert_eq!(
        (check.code, check.stdout.as_str()),
        (
            0,
            format!(
                "halt: within 100 s (halt_seconds) of the allocation's end {end} (end_time (environment SCR_END_TIME))\n"
            )
            .as_str()
        ),
        "{check}"
    );
    let check = scr(
        &c,
        &["halt", "--check"],
        &[("SCR_HALT_SECONDS", "10"), ("SCR_END_TIME", &end_s)],
    );
    assert_eq!(check.code, 3, "{check}");
    // a halt file that cannot be read is not a "no": exit 1, with the file named
    let halt_file = c.prefix().join(".scr/halt.scr");
    let kept = std::fs::read(&halt_file).expect("the halt file was written");
    std::fs::write(&halt_file, b"not a halt file\n").unwrap();
    let check = scr(&c, &["halt", "--check"], &[]);
    assert_eq!(check.code, 1, "{check}");
    assert!(
        check.stderr.contains(&halt_file.display().to_string()),
        "{check}"
    );
    std::fs::write(&halt_file, kept).unwrap();
    let set = scr(&c, &["halt", "--reason", "maintenance at noon"], &[]);
    assert_eq!(set.code, 0, "{set}");
    // a failing step is not relaunched while the condition holds
    let out = scr(
        &c,
        &[
            "run",
            "--runs",
            "5",
            "--postrun",
            "false",
            "--",
            "sh",
            "-c",
            "echo step on {hosts}; exit 3",
        ],
        &[("SCR_NODELIST", "a,b"), ("SCR_NODE_NAMES", "a,b")],
    );
    assert_eq!(out.code, 1, "{out}");
    assert_eq!(
        out.stdout,
        "scr run: allocation a,b (nodelist (environment SCR_NODELIST)), 5 run(s)\n\
         scr run: launch 1 of 5 on 2 node(s) a,b: sh -c echo step on a,b; exit 3\n\
         step on a,b\n\
         scr run: launch 1 failed (exit status: 3)\n\
         scr run: stopping: halt condition: exit reason set: maintenance at noon\n"
    );
}

#[test]
fn the_watchdog_kills_a_step_that_stops_progressing_and_the_relaunch_finishes() {
    let reference = reference_state(4, 40, Some(CELLS));
    let mut c = Cluster::new();
    c.set("SCR_WATCHDOG_TIMEOUT", "3");
    let pid_file = c.path("hung.pid");
    // the first step hangs silently (a child that sleeps, as a deadlocked rank would);
    // the second runs 40 steps of 100 ms: longer than the timeout, but progressing
    let hung = format!(
        "sleep 600 &\n  echo $! > '{}'\n  wait\n  exit 1",
        pid_file.display()
    );
    let later = format!(
        "exec mpiexec -n \"$1\" '{}' --steps 40 --every 5 --cells {CELLS} --sleep-ms 100",
        binary("scr-heat").display()
    );
    let script = launcher(&c, &hung, &later);
    let started = std::time::Instant::now();
    let out = scr(
        &c,
        &[
            "run",
            "--runs",
            "2",
            "--postrun",
            "false",
            "--",
            &script,
            "{ranks}",
        ],
        &[
            ("SCR_NODELIST", "n[0-1]"),
            ("SCR_NODE_NAMES", "n0,n0,n1,n1"),
        ],
    );
    let took = started.elapsed();
    assert_eq!(out.code, 0, "{out}");
    let watchdog: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.contains("watchdog"))
        .collect();
    assert_eq!(watchdog.len(), 3, "{out}");
    assert!(
        watchdog[1].starts_with("scr run: watchdog: no output and no file changed under ")
            && watchdog[1].contains(" for 3 s; killing the job step (process group "),
        "{out}"
    );
    assert_eq!(
        watchdog[2],
        "scr run: launch 1 killed by the watchdog: no progress for 3 s"
    );
    assert_eq!(world_sizes(&out), ["4"], "{out}");
    assert_eq!(out.final_state(), reference, "{out}");
    assert!(out.stdout.contains("scr run: launch 2 completed"), "{out}");
    // the hung step's child is gone with its process group
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    assert!(
        !Path::new("/proc").join(pid.trim()).exists(),
        "the hung step's sleep (pid {pid}) outlived the watchdog"
    );
    assert!(took.as_secs() < 60, "took {took:?}\n{out}");
}

#[test]
fn nodes_and_ranks_per_node_shape_the_step_and_its_node_names() {
    let c = Cluster::new();
    let out = scr(
        &c,
        &[
            "run",
            "--nodes",
            "2",
            "--ranks-per-node",
            "3",
            "--postrun",
            "false",
            "--",
            "sh",
            "-c",
            "echo \"$SCR_NODE_NAMES\" {ranks} {nodes} {hostlist} {hosts} [{exclude}]",
        ],
        &[("SCR_NODELIST", "n[0-3]"), ("SCR_NODE_NAMES", "n2,n0,n1")],
    );
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        out.stdout.lines().nth(2),
        Some("n2,n2,n2,n0,n0,n0 6 2 n[0,2] n2,n0 []"),
        "{out}"
    );
    // with the library off: one launch on the given layout, no checks, no relaunch
    let out = scr(
        &c,
        &[
            "run",
            "--runs",
            "3",
            "--postrun",
            "false",
            "--",
            "sh",
            "-c",
            "echo \"$SCR_NODE_NAMES\" {ranks} {hosts}; exit 4",
        ],
        &[
            ("SCR_NODELIST", "n[0-3]"),
            ("SCR_NODE_NAMES", "n2,n0,n1"),
            ("SCR_ENABLE", "0"),
        ],
    );
    assert_eq!(out.code, 1, "{out}");
    assert_eq!(
        out.stdout,
        "scr run: enable = false: launching once, without node checks or relaunches\n\
         n2,n0,n1 3 n2,n0,n1\n\
         scr run: launch failed (exit status: 4)\n"
    );
}

#[test]
fn after_the_last_launch_postrun_saves_the_newest_checkpoint_for_a_fresh_cache() {
    let reference = reference_state(6, STEPS, Some(CELLS));
    let mut c = Cluster::new();
    c.set("SCR_COPY_TYPE", "XOR").set("SCR_SET_SIZE", "3");
    let script = launcher(
        &c,
        &failing_first_launch(&c),
        &format!("exec {}", heat_cmd("")),
    );
    let out = scr(
        &c,
        &["run", "--runs", "3", "--", &script, "{ranks}"],
        &[
            ("SCR_NODELIST", "n[0-2]"),
            ("SCR_NODE_NAMES", "n0,n0,n1,n1,n2,n2"),
        ],
    );
    // too few nodes after the failure: no relaunch, but postrun ran
    assert_eq!(out.code, 1, "{out}");
    assert_eq!(world_sizes(&out), ["6"], "{out}");
    assert!(
        out.stdout.contains("scr run: running scr postrun\n"),
        "{out}"
    );
    let current = scr(&c, &["index", "current"], &[]);
    assert_eq!(
        (current.code, current.stdout.as_str()),
        (0, "ckpt.10\n"),
        "{current}"
    );
    // a fresh cache on fresh nodes restarts from what postrun saved
    for base in ["cache", "cntl"] {
        std::fs::remove_dir_all(c.path(base)).unwrap();
        std::fs::create_dir(c.path(base)).unwrap();
    }
    let nodes = ["m0", "m0", "m1", "m1", "m2", "m2"];
    let out = c.run(
        &nodes,
        "scr-heat",
        &["--steps", "30", "--every", "5", "--cells", "64"],
    );
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stdout.contains("restarted from ckpt.10 at step 10"),
        "{out}"
    );
    assert_eq!(out.final_state(), reference, "{out}");
}

#[test]
fn a_termination_signal_to_scr_run_reaches_the_step_and_ends_the_retries() {
    for watchdog in ["0", "100"] {
        let c = Cluster::new();
        let pid_file = c.path("step.pid");
        let step = format!("echo $$ > '{}'; exec sleep 600", pid_file.display());
        let scr_bin = binary("scr");
        let mut child = scr_command(
            &c,
            scr_bin.to_str().unwrap(),
            &[
                "run",
                "--runs",
                "3",
                "--postrun",
                "false",
                "--",
                "sh",
                "-c",
                &step,
            ],
            &[
                ("SCR_NODELIST", "n0"),
                ("SCR_NODE_NAMES", "n0"),
                ("SCR_WATCHDOG_TIMEOUT", watchdog),
            ],
        )
        // output to files, not pipes: a step that outlived scr run (the failure this
        // test catches) would hold a pipe open and hang the test
        .stdout(std::fs::File::create(c.path("run.out")).unwrap())
        .stderr(std::fs::File::create(c.path("run.err")).unwrap())
        .spawn()
        .unwrap();
        let started = std::time::Instant::now();
        let step_pid = loop {
            match std::fs::read_to_string(&pid_file) {
                Ok(p) if p.ends_with('\n') => break p.trim().to_string(),
                _ if started.elapsed().as_secs() > 30 => {
                    let _ = child.kill();
                    panic!("the step never started");
                }
                _ => std::thread::sleep(std::time::Duration::from_millis(50)),
            }
        };
        let killed = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if started.elapsed().as_secs() > 60 {
                let _ = child.kill();
                let _ = Command::new("kill").args(["-KILL", &step_pid]).status();
                panic!("watchdog {watchdog}: scr run did not end after SIGTERM");
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        let step_alive = Path::new("/proc").join(&step_pid).exists();
        if step_alive {
            let _ = Command::new("kill").args(["-KILL", &step_pid]).status();
        }
        let out = JobOutput {
            code: status.code().unwrap_or(-1),
            stdout: std::fs::read_to_string(c.path("run.out")).unwrap(),
            stderr: std::fs::read_to_string(c.path("run.err")).unwrap(),
        };
        assert_eq!(out.code, 1, "watchdog {watchdog}: {out}");
        let group = if watchdog == "0" {
            "the launcher"
        } else {
            "its process group"
        };
        let ours: Vec<&str> = out.stdout.lines().skip(1).collect();
        assert_eq!(
            ours,
            [
                "scr run: launch 1 of 3 on 1 node(s) n0: sh -c ".to_string() + &step,
                format!("scr run: received SIGTERM: passing it on to the job step ({group}), which has 30 s to end"),
                "scr run: stopping: scr run received SIGTERM; no relaunch".into(),
            ],
            "watchdog {watchdog}: {out}"
        );
        assert!(
            !step_alive,
            "watchdog {watchdog}: the step (pid {step_pid}) outlived scr run\n{out}"
        );
        assert!(
            started.elapsed().as_secs() < 20,
            "watchdog {watchdog}: {out}"
        );
    }
}

#[test]
fn a_step_that_exits_leaving_a_child_holding_its_output_does_not_hold_scr_run() {
    let c = Cluster::new();
    let pid_file = c.path("left.pid");
    // the step exits at once, failing, but leaves a child with its stdout and stderr
    let script = c.path("leaves-a-child.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nsleep 300 &\necho $! > '{}'\necho started\nexit 1\n",
            pid_file.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let started = std::time::Instant::now();
    let out = scr(
        &c,
        &[
            "run",
            "--runs",
            "1",
            "--postrun",
            "false",
            "--",
            script.to_str().unwrap(),
        ],
        &[
            ("SCR_NODELIST", "n[0-1]"),
            ("SCR_NODE_NAMES", "n0,n0,n1,n1"),
            ("SCR_WATCHDOG_TIMEOUT", "30"),
        ],
    );
    let took = started.elapsed();
    // (150 s and exit 124 when `scr run` waited for the child's pipes)
    assert_eq!(out.code, 1, "{out}");
    assert!(took.as_secs() < 30, "took {took:?}\n{out}");
    assert!(out.stdout.contains("started"), "{out}");
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    // gone, or a zombie waiting for whoever adopted it to reap it
    let alive = || {
        std::fs::read_to_string(Path::new("/proc").join(pid.trim()).join("stat")).is_ok_and(|st| {
            st.rsplit(')')
                .next()
                .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while alive() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        !alive(),
        "the step's child (pid {}) outlived the step",
        pid.trim()
    );
}
