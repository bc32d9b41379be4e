//! Jobs on real hosts (`scripts/hosts.sh`, [`TestBed`]): each host has its own host name
//! and its own node-local storage, the runtime finds its nodes by `gethostname` (no
//! `SCR_NODE_NAMES`), and losing a host kills its processes and discards its storage.
//!
//! The tests skip, saying why, only where the kernel refuses the namespaces; anything else
//! that keeps the bed from working fails them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use scr_e2e::{files_below, reference_state, Cluster, JobOutput, TestBed};

/// The first job: 4 hosts × 2 ranks.
const FIRST: &[&str] = &[
    "host0", "host0", "host1", "host1", "host2", "host2", "host3", "host3",
];
/// The restart after host1 is lost: host4, the spare, takes its place (ranks 2 and 3).
const AFTER: &[&str] = &[
    "host0", "host0", "host4", "host4", "host2", "host2", "host3", "host3",
];
const CELLS: &str = "5000";

/// `agent HOST CMD` with its exit code and output.
fn on(bed: &TestBed, host: &str, cmd: &str) -> JobOutput {
    bed.on(host, cmd)
}

/// The UTS namespace of every process of the machine (pid, `uts:[inode]`).
fn uts_namespaces() -> Vec<(u32, String)> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
            let ns = std::fs::read_link(e.path().join("ns/uts")).ok()?;
            Some((pid, ns.display().to_string()))
        })
        .collect()
}

#[test]
fn the_bed_gives_each_host_its_name_and_storage_and_loses_hosts_whole() {
    let Some(mut bed) = TestBed::up_or_skip(3) else {
        return;
    };
    let local = bed.local_dir();
    for (k, host) in bed.hosts().iter().enumerate() {
        assert_eq!(host, &format!("host{k}"));
        // its own host name, and its own storage at the same path as every other host
        let out = on(
            &bed,
            host,
            &format!("hostname; echo {host} > {}/who", local.display()),
        );
        assert_eq!(
            (out.code, out.stdout.as_str()),
            (0, &*format!("{host}\n")),
            "{out}"
        );
    }
    for host in bed.hosts() {
        let out = on(&bed, host, &format!("cat {}/who", local.display()));
        assert_eq!(out.stdout, format!("{host}\n"), "{out}");
        let who = std::fs::read_to_string(bed.store_dir(host).join("who")).unwrap();
        assert_eq!(who, format!("{host}\n"));
    }
    assert!(
        files_below(&local).is_empty(),
        "outside the hosts, local is empty"
    );

    // the agent passes stdin, stdout, stderr and the status through, and starts the
    // command with a fresh environment, as ssh does (the job forwards what it needs)
    let mut agent = bed.agent_command(
        "host2",
        "cat; echo to-stderr >&2; echo ${BED_LEAK:-unset}; exit 7",
    );
    let mut child = agent
        .env("BED_LEAK", "leaked")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"from stdin\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(7), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "from stdin\nunset\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "to-stderr\n");
    let out = on(&bed, "host9", "true");
    assert_eq!(out.code, 255, "{out}");
    assert!(out.stderr.contains("no such host: host9"), "{out}");

    // an MPI job across the hosts: every rank on its host, the job's variables forwarded
    // to the remote ranks, the world as large as asked for
    let mut c = bed.cluster();
    c.set("SCR_BED_PROBE", "forwarded");
    let out = c.run_path(
        &["host0", "host0", "host1", "host2"],
        Path::new("/bin/sh"),
        &[
            "-c",
            "echo rank $OMPI_COMM_WORLD_RANK of $OMPI_COMM_WORLD_SIZE on $(hostname) $SCR_BED_PROBE $SCR_CACHE_BASE",
        ],
    );
    assert_eq!(out.code, 0, "{out}");
    let mut lines: Vec<&str> = out.stdout.lines().collect();
    lines.sort();
    let base = local.display();
    assert_eq!(
        lines,
        [
            format!("rank 0 of 4 on host0 forwarded {base}"),
            format!("rank 1 of 4 on host0 forwarded {base}"),
            format!("rank 2 of 4 on host1 forwarded {base}"),
            format!("rank 3 of 4 on host2 forwarded {base}"),
        ],
        "{out}"
    );

    // losing a host kills every process in it (here one the agent started) and discards
    // its storage; the agent refuses it from then on, and the other hosts go on
    let mut sleeper = bed
        .agent_command("host1", "sleep 1000")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while on(&bed, "host1", "pgrep -x sleep -a")
        .stdout
        .lines()
        .count()
        < 2
    {
        // the host's init sleeps too: wait until the agent's sleep runs beside it
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the sleeper never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    bed.kill("host1");
    let status = sleeper.wait().unwrap();
    assert!(
        !status.success(),
        "the process in the lost host was killed: {status:?}"
    );
    assert!(
        !bed.store_dir("host1").exists(),
        "host1's storage is discarded"
    );
    let out = on(&bed, "host1", "true");
    assert_eq!(out.code, 255, "{out}");
    assert_eq!(out.stderr.trim(), "agent: host1 is down", "{out}");
    let out = on(&bed, "host0", "hostname");
    assert_eq!((out.code, out.stdout.as_str()), (0, "host0\n"), "{out}");

    // down leaves nothing: no process in any of the hosts' namespaces, no directory
    let namespaces: Vec<String> = ["host0", "host2"]
        .iter()
        .map(|h| std::fs::read_to_string(bed.dir().join(format!("run/{h}.ns"))).unwrap())
        .map(|s| s.trim().to_string())
        .collect();
    let members = |ns: &[String]| -> Vec<(u32, String)> {
        uts_namespaces()
            .into_iter()
            .filter(|(_, n)| ns.contains(n))
            .collect()
    };
    assert!(
        !members(&namespaces).is_empty(),
        "the live hosts' processes are found"
    );
    let dir = bed.dir().to_path_buf();
    bed.down();
    assert_eq!(members(&namespaces), [], "processes left in the hosts");
    assert!(!dir.exists(), "{} is left", dir.display());
    // down again (and on a bed that never was) is nothing to do
    let again = Command::new("bash")
        .arg(scr_e2e::hosts::hosts_script())
        .args(["down", "--dir"])
        .arg(&dir)
        .status()
        .unwrap();
    assert!(again.success());
}

/// Four hosts × two ranks checkpoint with `scheme` across them (sets of 4, one member per
/// host), nothing flushed; host1 is lost; the restart, with the spare host4 in its place,
/// rebuilds ranks 2 and 3's files on host4 from the other hosts and resumes byte-exact.
fn a_lost_host_is_rebuilt_through(scheme: &str) {
    a_lost_host_is_rebuilt(scheme, false);
}

/// [`a_lost_host_is_rebuilt_through`], the scheme applied in the `background` or not.
/// In the background, scr-heat's plain `MPI_Init` leaves MPI below
/// MPI_THREAD_MULTIPLE, so the sets' members exchange over connections of the library's
/// own, between hosts whose names do not resolve (the bed adds none): by the addresses
/// of the interfaces they advertise.
fn a_lost_host_is_rebuilt(scheme: &str, background: bool) {
    let Some(bed) = TestBed::up_or_skip(5) else {
        return;
    };
    let mut c: Cluster = bed.cluster();
    // the cache alone must bring the files back: nothing is flushed (finalize included);
    // three cached checkpoints, so the rebuilt one is still there after the restart's
    c.set("SCR_COPY_TYPE", scheme)
        .set("SCR_SET_SIZE", "4")
        .set("SCR_FLUSH", "0")
        .set("SCR_CACHE_SIZE", "3")
        .set("SCR_DEBUG", "1");
    if background {
        c.set("SCR_PROTECT_IN_BACKGROUND", "1");
    }
    let out = c.run(FIRST, "scr-heat", &["--steps", "12", "--cells", CELLS]);
    assert_eq!(out.code, 0, "{out}");
    four_hosts_of_eight_ranks(&out);
    assert!(out.stdout.contains("checkpoint ckpt.10: kept"), "{out}");
    if background {
        assert!(
            out.stderr.contains(
                "the members of each redundancy set are connected for the background protection"
            ) && out
                .stderr
                .contains("ckpt.10: its background protection took"),
            "{out}"
        );
    }
    assert!(
        out.logged(Some(0), "info", "rebuilt the files").is_empty(),
        "{out}"
    );

    // ranks 2 and 3 cached ckpt.10 on host1 alone, and nothing reached the prefix
    let lost: BTreeMap<u32, Vec<u8>> = [2, 3]
        .into_iter()
        .map(|r| (r, std::fs::read(ckpt10(&c, "host1", r)).unwrap()))
        .collect();
    for host in ["host0", "host2", "host3"] {
        assert!(!ckpt10(&c, host, 2).exists(), "rank 2's file on {host}");
    }
    let in_prefix = |c: &Cluster| -> Vec<PathBuf> {
        files_below(&c.prefix())
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "ckpt"))
            .collect()
    };
    assert_eq!(in_prefix(&c), Vec::<PathBuf>::new());

    bed.kill("host1");
    assert!(!c.cache_dir("host1").exists());
    let out = c.run(AFTER, "scr-heat", &["--steps", "20", "--cells", CELLS]);
    assert_eq!(out.code, 0, "{out}");
    four_hosts_of_eight_ranks(&out);
    assert_eq!(
        out.line_after("restarted from "),
        Some("ckpt.10 at step 10"),
        "{out}"
    );
    assert!(!out.stdout.contains("lost:"), "{out}");
    let rebuilt =
        format!("dataset 2 (ckpt.10): rebuilt the files of ranks [2, 3] through {scheme}");
    assert_eq!(out.logged(Some(0), "info", &rebuilt).len(), 1, "{out}");
    // on host4, from the other hosts' redundancy data: the very bytes host1 held
    for (rank, bytes) in &lost {
        let file = ckpt10(&c, "host4", *rank);
        let again = std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        assert!(again == *bytes, "rank {rank}'s rebuilt file differs");
    }
    assert_eq!(
        in_prefix(&c),
        Vec::<PathBuf>::new(),
        "nothing was fetched or flushed"
    );
    assert_eq!(
        out.final_state(),
        reference_state(8, 20, Some(CELLS.parse().unwrap()))
    );
}

/// The job ran 8 ranks (the world size scr-heat prints; [`Cluster::run`] checks it too)
/// on 4 nodes told apart by host name.
fn four_hosts_of_eight_ranks(out: &JobOutput) {
    assert_eq!(out.line_after("ranks "), Some("8"), "{out}");
    assert_eq!(
        out.logged(Some(0), "info", "init: 8 ranks on 4 node(s)")
            .len(),
        1,
        "{out}"
    );
}

/// Where `host` caches rank `rank`'s file of ckpt.10 (dataset 2), seen from outside.
fn ckpt10(c: &Cluster, host: &str, rank: u32) -> PathBuf {
    c.cache_dir(host)
        .join("scr.dataset.2/ckpt.10")
        .join(format!("rank_{rank}.ckpt"))
}

#[test]
fn a_lost_host_is_rebuilt_through_xor() {
    a_lost_host_is_rebuilt_through("XOR");
}

/// XOR applied in the background over the sets' own connections, across hosts.
#[test]
fn a_lost_host_is_rebuilt_from_xor_applied_over_the_sets_connections() {
    a_lost_host_is_rebuilt("XOR", true);
}

#[test]
fn a_lost_host_is_rebuilt_through_partner() {
    a_lost_host_is_rebuilt_through("PARTNER");
}

/// `cmd` run to its end (at most `secs` seconds: a hung command fails its test).
fn run_for(cmd: Command, secs: u64) -> JobOutput {
    let started = Instant::now();
    let (_, job) = spawn_for(cmd, secs);
    let out = job.join().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(secs),
        "did not end within {secs} s\n{out}"
    );
    out
}

/// Start `cmd` (killed after `secs` seconds); its pid, and its output once it ended.
fn spawn_for(mut cmd: Command, secs: u64) -> (u32, std::thread::JoinHandle<JobOutput>) {
    let started = Instant::now();
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the command starts");
    let pid = child.id();
    let job = std::thread::spawn(move || {
        let watchdog = std::thread::spawn(move || {
            while started.elapsed() < Duration::from_secs(secs) {
                std::thread::sleep(Duration::from_millis(100));
                if !Path::new(&format!("/proc/{pid}")).exists() {
                    return;
                }
            }
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        });
        let out = scr_e2e::output_of_child(child);
        let _ = watchdog.join();
        out
    });
    (pid, job)
}

/// Empty every host's node-local storage, as a new allocation finds it.
fn wipe_stores(bed: &TestBed, hosts: &[&str]) {
    for h in hosts {
        for e in std::fs::read_dir(bed.store_dir(h)).unwrap().flatten() {
            std::fs::remove_dir_all(e.path()).unwrap();
        }
    }
}

/// ckpt.10's cached file of rank `rank` on `host` (dataset 2), seen from outside.
fn cached10(c: &Cluster, host: &str, rank: u32) -> Vec<u8> {
    let p = ckpt10(c, host, rank);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A job of 4 hosts × 2 ranks is killed with its newest checkpoint (ckpt.10) only in the
/// hosts' caches, and host2 is lost. `scr postrun`, run where a batch script runs (outside
/// every host), reaches the others through the remote runner (the bed's agent): the
/// application files from every host, redundancy only from the sets that lost a member
/// (both here) and only the survivors the scheme reads, ranks 4 and 5 rebuilt, ckpt.10
/// added to the index. A new job with every cache empty restarts from the prefix
/// byte-exact.
#[test]
fn postrun_from_the_launch_host_saves_a_killed_jobs_checkpoint_through_xor() {
    // XOR reads every survivor's parity of a set that lost a member
    postrun_saves_through(
        "XOR",
        &[
            ("host0", "copied ranks [0, 1]; redundancy of ranks [0, 1]"),
            ("host1", "copied ranks [2, 3]; redundancy of ranks [2, 3]"),
            ("host3", "copied ranks [6, 7]; redundancy of ranks [6, 7]"),
        ],
    );
}

/// The same through PARTNER: only the copies of the lost ranks are read, from their
/// right-hand partners (ranks 6 and 7 on host3 hold the copies of ranks 4 and 5); no
/// other survivor's PARTNER file is copied.
#[test]
fn postrun_from_the_launch_host_reads_partner_copies_only_where_the_first_is_missing() {
    postrun_saves_through(
        "PARTNER",
        &[
            ("host0", "copied ranks [0, 1]"),
            ("host1", "copied ranks [2, 3]"),
            ("host3", "copied ranks [6, 7]; redundancy of ranks [6, 7]"),
        ],
    );
}

fn postrun_saves_through(scheme: &str, per_node: &[(&str, &str)]) {
    let Some(bed) = TestBed::up_or_skip(5) else {
        return;
    };
    let mut c = bed.cluster();
    c.set("SCR_COPY_TYPE", scheme)
        .set("SCR_SET_SIZE", "4")
        .set("SCR_FLUSH", "0")
        .set("SCR_DEBUG", "1");
    let out = c.run(
        FIRST,
        "scr-heat",
        &[
            "--steps",
            "20",
            "--cells",
            CELLS,
            "--kill-at",
            "12",
            "--kill-rank",
            "1",
        ],
    );
    assert_ne!(out.code, 0, "the job was killed\n{out}");
    assert_eq!(out.line_after("ranks "), Some("8"), "{out}");
    assert!(out.stdout.contains("checkpoint ckpt.10: kept"), "{out}");
    let originals: Vec<Vec<u8>> = (0..8u32)
        .map(|r| cached10(&c, FIRST[r as usize], r))
        .collect();
    assert_eq!(scr_e2e::index_entries(&c.prefix()), []);

    bed.kill("host2");
    let out = run_for(c.scr(&["postrun"]), 120);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stdout.contains(
            "node host2: not reached: host2 not reached through remote_runner (environment SCR_REMOTE_RUNNER) (status 255): agent: host2 is down"
        ),
        "{out}"
    );
    for (host, what) in per_node {
        let line = format!("node {host}: {what}\n");
        assert!(out.stdout.contains(&line), "{line}{out}");
    }
    assert!(
        out.stdout.contains("node host4: no files of this dataset"),
        "{out}"
    );
    assert!(
        out.stdout.contains("rebuilt the files of ranks [4, 5]"),
        "{out}"
    );
    assert!(
        out.stdout.contains(&format!(
            "added ckpt.10 (dataset 2) to the index of {}, restart point",
            c.prefix().display()
        )),
        "{out}"
    );
    for (r, bytes) in originals.iter().enumerate() {
        let p = c.prefix().join(format!("ckpt.10/rank_{r}.ckpt"));
        let got = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert!(got == *bytes, "rank {r}'s file in the prefix differs");
    }
    assert!(!c.prefix().join(".scr/scr.dataset.2/scavenge").exists());

    wipe_stores(&bed, &["host0", "host1", "host3", "host4"]);
    let out = c.run(
        AFTER_HOST2,
        "scr-heat",
        &["--steps", "20", "--cells", CELLS],
    );
    assert_eq!(out.code, 0, "{out}");
    four_hosts_of_eight_ranks(&out);
    assert_eq!(
        out.line_after("restarted from "),
        Some("ckpt.10 at step 10"),
        "{out}"
    );
    assert_eq!(
        out.final_state(),
        reference_state(8, 20, Some(CELLS.parse().unwrap()))
    );
}

/// The restart after host2 is lost: host4 takes its place (ranks 4 and 5).
const AFTER_HOST2: &[&str] = &[
    "host0", "host0", "host1", "host1", "host4", "host4", "host3", "host3",
];

/// The processes of this machine whose environment holds `SCR_RUN_STEP=tag` (a
/// launch's tag is `<job>.<scr run's pid>.<launch>`: other tests' launches never match).
fn tagged(tag: &str) -> Vec<u32> {
    let want = format!("SCR_RUN_STEP={tag}");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|v| v == want.as_bytes()))
        })
        .collect()
}

/// `scr run` on three hosts (two launched, one spare): host1 dies during the first launch.
/// `scr run` finds it down (the remote runner cannot reach it), ends what the failed
/// launch left on host0 (a process each rank left in its own session, which neither
/// mpirun nor the host's daemon ends), relaunches on host0 and the spare host2, and the
/// job restarts from the cache — host1's ranks rebuilt through XOR on host2 — and ends in
/// the uninterrupted run's state; postrun then saves the newest checkpoint from both
/// hosts.
#[test]
fn scr_run_relaunches_after_a_host_dies_and_excludes_it() {
    let Some(bed) = TestBed::up_or_skip(3) else {
        return;
    };
    let mut c = bed.cluster();
    c.set("SCR_COPY_TYPE", "XOR").set("SCR_FLUSH", "0");
    // each rank leaves a process behind in its own session, tagged like the rank
    let heat = scr_e2e::binary("scr-heat").display().to_string();
    let mut words = c.bed_launcher(2, "scr-heat", &[]);
    words.pop();
    words.extend(
        [
            "sh",
            "-c",
            "setsid sleep 300 </dev/null >/dev/null 2>&1 & exec \"$0\" \"$@\"",
            &heat,
            "--steps",
            "40",
            "--every",
            "5",
            "--cells",
            CELLS,
            "--sleep-ms",
            "150",
        ]
        .map(String::from),
    );
    let mut args: Vec<String> = [
        "run",
        "--runs",
        "2",
        "--nodes",
        "2",
        "--ranks-per-node",
        "2",
        "--",
    ]
    .map(String::from)
    .to_vec();
    args.extend(words);
    let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut cmd = c.scr(&arg_refs);
    cmd.env("SCR_NODELIST", "host[0-2]");
    let started = Instant::now();
    let (pid, runner) = spawn_for(cmd, 240);
    let tag = |launch: u32| format!("e2e.{pid}.{launch}");
    // host1 dies once it holds ckpt.10 (dataset 2) of ranks 2 and 3
    while !ckpt10(&c, "host1", 3).exists() {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no ckpt.10 on host1"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    bed.kill("host1");
    let out = runner.join().unwrap();
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stderr
            .contains("scr run: reaching the nodes through remote_runner")
            || out
                .stdout
                .contains("scr run: reaching the nodes through remote_runner"),
        "{out}"
    );
    let text = format!("{}{}", out.stdout, out.stderr);
    assert!(
        text.contains(
            "launch 1 of 2 on 2 node(s) host[0-1]: mpirun -x SCR_RUN_STEP --host host0,host1"
        ),
        "{out}"
    );
    assert!(text.contains("scr run: launch 1 failed"), "{out}");
    assert!(
        text.contains("scr run: node host1 is down: not reached through remote_runner"),
        "{out}"
    );
    assert!(
        text.contains("scr run: node host0: launch 1: ended 2 process(es) it left"),
        "{out}"
    );
    assert!(
        text.contains(
            "launch 2 of 2 on 2 node(s) host[0,2]: mpirun -x SCR_RUN_STEP --host host0,host2"
        ),
        "{out}"
    );
    assert!(text.contains("scr run: launch 2 completed"), "{out}");
    // launch 1's leftovers are gone; launch 2's are still there (nothing relaunches)
    assert!(started.elapsed() < Duration::from_secs(240), "{out}");
    assert_eq!(
        tagged(&tag(1)),
        Vec::<u32>::new(),
        "launch 1 left processes"
    );
    assert_eq!(tagged(&tag(2)).len(), 4, "launch 2's processes");
    // the relaunch restarted from the cache, rebuilding ranks 2 and 3 on host2
    let restarted = out
        .line_after("restarted from ")
        .unwrap_or_else(|| panic!("no restart\n{out}"));
    assert!(restarted.starts_with("ckpt."), "{out}");
    assert_eq!(
        out.final_state(),
        reference_state(4, 40, Some(CELLS.parse().unwrap()))
    );
    assert!(
        text.contains("node host0: copied ranks [0, 1]")
            && text.contains("node host2: copied ranks [2, 3]"),
        "{out}"
    );
    assert!(text.contains("added ckpt.40 (dataset "), "{out}");
    let state = std::fs::read_to_string(c.prefix().join(".scr/run.scr")).unwrap();
    assert!(state.contains("host1"), "{state}");
}

/// `flush_width = 2` on 4 hosts × 2 ranks: at most two ranks copy to the prefix at once
/// (counted by the runtime's window gauge in the shared directory, across hosts), every
/// rank's copy is counted, and the flushed checkpoints are complete.
#[test]
fn the_flush_width_bounds_the_ranks_at_the_prefix_across_hosts() {
    let Some(bed) = TestBed::up_or_skip(4) else {
        return;
    };
    let mut c = bed.cluster();
    let gauge = c.path("gauge");
    std::fs::create_dir(&gauge).unwrap();
    c.set("SCR_FLUSH", "2")
        .set("SCR_DEBUG", "1")
        .set("SCR_FLUSH_WIDTH", "2")
        .set("SCR_TEST_WINDOW", &format!("{}:40", gauge.display()));
    let out = c.run(FIRST, "scr-heat", &["--steps", "12", "--cells", CELLS]);
    assert_eq!(out.code, 0, "{out}");
    four_hosts_of_eight_ranks(&out);
    let text = std::fs::read_to_string(gauge.join("flush")).unwrap();
    let n: Vec<i64> = text
        .split_whitespace()
        .map(|w| w.parse().unwrap())
        .collect();
    // (inside now, most inside at once, entries): ckpt.10 flushed by its 8 ranks
    assert_eq!((n[0], n[2]), (0, 8), "{text}");
    assert!(n[1] >= 1 && n[1] <= 2, "{text}");
    assert_eq!(
        scr_e2e::index_entries(&c.prefix()),
        [("ckpt.10".to_string(), true, None)]
    );
}

/// `scr nodes down` from outside the hosts asks each host through the remote runner: a
/// lost host is not reached; a host whose node-local storage has too little room says so
/// from its own check (`scr nodes down --here` there); host names need not resolve.
#[test]
fn nodes_down_asks_each_host_through_the_runner() {
    let Some(bed) = TestBed::up_or_skip(3) else {
        return;
    };
    let c = bed.cluster();
    let out = run_for(c.scr(&["nodes", "down"]), 60);
    assert_eq!((out.code, out.stdout.as_str()), (0, ""), "{out}");
    bed.kill("host2");
    let out = run_for(c.scr(&["nodes", "down"]), 60);
    assert_eq!(out.code, 1, "{out}");
    assert_eq!(
        out.stdout,
        "host2: not reached through remote_runner (environment SCR_REMOTE_RUNNER) (status 255): agent: host2 is down\n",
        "{out}"
    );
    let mut cmd = c.scr(&["nodes", "down", "host[0-1]"]);
    cmd.env("SCR_CACHE_FREE", "1000000TB");
    let out = run_for(cmd, 60);
    assert_eq!(out.code, 1, "{out}");
    let local = bed.local_dir();
    for (i, line) in out.stdout.lines().enumerate() {
        let want = format!("host{i}: {} has ", local.display());
        assert!(line.starts_with(&want), "{line}\n{out}");
        assert!(
            line.contains("bytes free, below the 1099511627776000000 needed (cache_free)"),
            "{line}"
        );
    }
    assert_eq!(out.stdout.lines().count(), 2, "{out}");
}

/// A checkpoint of 8 ranks on 4 hosts restarts 12 ranks on the same hosts from their
/// caches alone (flush off: nothing in the prefix), each reading the old slices its share
/// overlaps, copied between hosts where it runs elsewhere; then host3 is lost and 6 ranks
/// on the three hosts left rebuild its old ranks through XOR in the old sets' geometry
/// and restart from the caches. Both end in the state of an uninterrupted 8-rank run.
#[test]
fn a_checkpoint_restarts_on_another_number_of_ranks_across_hosts_from_the_caches() {
    let Some(bed) = TestBed::up_or_skip(4) else {
        return;
    };
    let mut c: Cluster = bed.cluster();
    c.set("SCR_COPY_TYPE", "XOR")
        .set("SCR_SET_SIZE", "4")
        .set("SCR_FLUSH", "0")
        .set("SCR_DEBUG", "1");
    let out = c.run(FIRST, "scr-heat", &["--steps", "10", "--cells", CELLS]);
    assert_eq!(out.code, 0, "{out}");
    four_hosts_of_eight_ranks(&out);
    assert!(out.stdout.contains("checkpoint ckpt.10: kept"), "{out}");
    let cells = Some(CELLS.parse().unwrap());
    let twelve: Vec<&str> = FIRST
        .iter()
        .flat_map(|h| std::iter::repeat_n(*h, 3))
        .step_by(2)
        .collect();
    assert_eq!(twelve.len(), 12);
    let args = ["--steps", "14", "--every", "0", "--cells", CELLS];
    let out = c.run(&twelve, "scr-heat", &args);
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(out.line_after("ranks "), Some("12"), "{out}");
    assert_eq!(
        out.line_after("restarted from "),
        Some("ckpt.10 at step 10"),
        "{out}"
    );
    assert_eq!(
        out.logged(
            Some(0),
            "info",
            "(written by 8 ranks, read by 12) from the nodes' caches"
        )
        .len(),
        1,
        "{out}"
    );
    assert_eq!(out.final_state(), reference_state(8, 14, cells));

    bed.kill("host3");
    let six = ["host0", "host0", "host1", "host1", "host2", "host2"];
    let out = c.run(&six, "scr-heat", &args);
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(out.line_after("ranks "), Some("6"), "{out}");
    assert_eq!(
        out.line_after("restarted from "),
        Some("ckpt.10 at step 10"),
        "{out}"
    );
    assert_eq!(out.final_state(), reference_state(8, 14, cells));
    assert!(
        files_below(&c.prefix())
            .iter()
            .all(|p| p.extension().is_none_or(|e| e != "ckpt")),
        "nothing was flushed"
    );
}
