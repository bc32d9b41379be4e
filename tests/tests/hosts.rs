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
    let out = c.run(FIRST, "scr-heat", &["--steps", "12", "--cells", CELLS]);
    assert_eq!(out.code, 0, "{out}");
    four_hosts_of_eight_ranks(&out);
    assert!(out.stdout.contains("checkpoint ckpt.10: kept"), "{out}");
    assert!(out.logged(Some(0), "info", "through").is_empty(), "{out}");

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

#[test]
fn a_lost_host_is_rebuilt_through_partner() {
    a_lost_host_is_rebuilt_through("PARTNER");
}
