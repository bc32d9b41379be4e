//! The prefix's state files under concurrency and repair, end to end
//! under `mpiexec -n 4` on two simulated nodes: halt file updates from `scr halt` and a
//! job at the same time lose nothing, and a failed mark survives rebuilding the index.

use scr_e2e::{binary, Cluster, JobOutput};
use scr_host::state::halt::Halt;
use scr_host::state::prefix::Index;

const TWO_NODES: &[&str] = &["n0", "n0", "n1", "n1"];

fn heat(c: &Cluster, args: &[&str]) -> JobOutput {
    c.run(TWO_NODES, "scr-heat", args)
}

fn scr(c: &Cluster, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(binary("scr"))
        .args(args)
        .arg("--prefix")
        .arg(c.prefix())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Far in the future: a condition that never stops the job.
const FAR: i64 = 1_000_000_000_000;

/// Three admins run `scr halt` in loops, each setting a field of its own, while a job
/// decrements CheckpointsLeft at each of its 120 checkpoints and records its exit reason
/// at finalize. Every halt file update is a read-modify-write under the prefix lock, so
/// the end state holds every change: each admin's last value, exactly 120 decrements, and
/// the exit reason. (Without the lock, updates overwrote each other: the count or an
/// admin's last value came out wrong.)
#[test]
fn concurrent_scr_halt_and_a_job_lose_no_halt_file_update() {
    let c = Cluster::new();
    let prefix = c.prefix().display().to_string();
    let (code, _, err) = scr(&c, &["halt", "--checkpoints", "1000"]);
    assert_eq!(code, 0, "{err}");
    let job = c.spawn(
        TWO_NODES,
        "scr-heat",
        &["--steps", "120", "--every", "1", "--cells", "64"],
    );
    let rounds = 40;
    let admins: Vec<std::process::Child> = [
        ("--seconds", 0),
        ("--after", FAR),
        ("--before", FAR),
    ]
    .iter()
    .map(|(flag, base)| {
        std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "for i in $(seq {rounds}); do {} halt --prefix {prefix} {flag} $(({base} + i)) >/dev/null || exit 1; done",
                binary("scr").display()
            ))
            .spawn()
            .unwrap()
    })
    .collect();
    for mut a in admins {
        assert!(a.wait().unwrap().success(), "an scr halt failed");
    }
    let out = job.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.starts_with("ranks "))
            .collect::<Vec<_>>(),
        ["ranks 4"],
        "one world of 4 ranks\n{stdout}"
    );
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.starts_with("checkpoint "))
            .count(),
        120,
        "{stdout}"
    );
    let h = Halt::load(&c.prefix()).unwrap();
    assert_eq!(
        h,
        Halt {
            checkpoints_left: Some(1000 - 120),
            exit_after: Some(FAR + rounds),
            exit_before: Some(FAR + rounds),
            halt_seconds: Some(rounds),
            exit_reason: Some(scr_host::runtime::FINALIZE_REASON.into()),
        }
    );
}

/// A fetch that finds a flushed checkpoint damaged marks it failed; the mark is kept
/// beside the dataset's summary, so neither `scr index rebuild` nor the automatic
/// rebuild of a damaged index offers that checkpoint as the restart point again.
#[test]
fn a_failed_mark_survives_rebuilding_the_index_from_the_summaries() {
    let mut c = Cluster::new();
    c.set("SCR_FLUSH", "2");
    let first = heat(&c, &["--steps", "22"]);
    assert_eq!(first.code, 0, "{first}");
    for node in ["n0", "n1"] {
        c.lose_node(node);
    }
    let victim = c.prefix().join("ckpt.20/rank_1.ckpt");
    let mut bytes = std::fs::read(&victim).unwrap();
    bytes[100] ^= 0x01;
    std::fs::write(&victim, &bytes).unwrap();
    // (to step 12: no new checkpoint, so ckpt.20 stays the newest flushed one)
    let second = heat(&c, &["--steps", "12"]);
    assert_eq!(second.code, 0, "{second}");
    assert_eq!(
        second.line_after("restarted from "),
        Some("ckpt.10 at step 10"),
        "{second}"
    );
    let failed_of = |ix: &Index| -> Option<String> {
        ix.datasets
            .values()
            .find(|e| e.name == "ckpt.20")
            .and_then(|e| e.failed.clone())
    };
    let why = failed_of(&Index::load(&c.prefix()).unwrap()).expect("marked failed by fetch");
    assert!(why.contains("fetch failed on rank 1"), "{why}");

    // an admin rebuilds the index
    let (code, out, err) = scr(&c, &["index", "rebuild"]);
    assert_eq!(code, 0, "{out}{err}");
    let rebuilt = Index::load(&c.prefix()).unwrap();
    assert_eq!(failed_of(&rebuilt).as_deref(), Some(why.as_str()));
    assert_eq!(
        scr(&c, &["index", "current"]).1,
        "ckpt.10\n",
        "a rebuilt index must not offer the damaged checkpoint again"
    );

    // a damaged index is rebuilt by the next reader
    let path = Index::path(&c.prefix());
    let mut damaged = std::fs::read(&path).unwrap();
    damaged.extend_from_slice(b"garbage");
    std::fs::write(&path, damaged).unwrap();
    let auto = Index::load_or_rebuild(&c.prefix()).unwrap();
    assert_eq!(failed_of(&auto).as_deref(), Some(why.as_str()));
}
