//! The whole lifecycle at 64 ranks: an XOR checkpoint, the loss
//! of a simulated node, the rebuild, a flush, a fetch and a restart by half the ranks
//! (another number than wrote the checkpoint), every rank's file byte for byte,
//! through `scr-bench-scale` (its driver launches `mpiexec -n 8` and `-n 64` of its worker,
//! 4 ranks per simulated node, and fails unless every rank reported, saw the world size
//! it was launched with and read its file back byte for byte after the rebuild and after
//! the fetch). From its counts: complete_output's per-rank bytes and every step's
//! messages + collectives at 64 ranks stay within 2x of those at 8 ranks, i.e. they do not
//! grow with the job.
//!
//! The same bound on every step's bytes with a 4 KiB checkpoint (where the metadata, not
//! the data, is what is exchanged) does not hold on the code this test was written against
//! and is `#[ignore]`d until it does: see [`metadata_bytes_per_rank_do_not_grow_from_8_to_64_ranks`].
//!
//! Needs the workspace built (`cargo build --workspace --all-targets`).

use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// Rank `rank`'s content of a file (`scr-bench-scale`'s `content`, repeated here so that
/// the test checks the flushed files independently of the binary).
fn content(rank: usize, len: usize, salt: u64) -> Vec<u8> {
    let mut x = (rank as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ salt;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Bytes per rank of the XOR checkpoint (the benchmark's default, 1 MiB).
const BYTES: usize = 1 << 20;

/// The steps `scr-bench-scale` measures (`resize`: half the ranks restart from the
/// checkpoint of all).
const STEPS: [&str; 7] = [
    "init",
    "tiny_ckpt",
    "xor_ckpt",
    "rebuild",
    "flush",
    "fetch",
    "resize",
];

/// Run `scr-bench-scale --ranks 8,64 --json --keep` with `args` under `dir`; its JSON
/// report, after checking that both jobs ran with their world size and that every rank
/// read its file back byte for byte after the rebuild and after the fetch.
fn scale_run(dir: &Path, args: &[&str]) -> Value {
    let started = std::time::Instant::now();
    let mut cmd = Command::new(scr_e2e::binary("scr-bench-scale"));
    // rank2file blocks of 8 ranks: a block leader's fan-in is bounded by the block size
    // (default 256, more than either job), so with blocks of 8 both jobs show it at its
    // bound, and one block at 8 ranks against 8 at 64 shows that rank 0 handles no
    // message per block (its root holds only the layout and reduced totals)
    cmd.args(["--ranks", "8,64", "--json", "--keep", "--timeout", "300"])
        .args(["--set", "rank2file_block=8"])
        .args(args)
        .arg("--dir")
        .arg(dir)
        // cargo's test runner points LD_LIBRARY_PATH at the build; the jobs need nothing
        // from it
        .env_remove("LD_LIBRARY_PATH");
    for (k, v) in scr_e2e::mpi_env() {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("scr-bench-scale runs");
    let secs = started.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "scr-bench-scale {args:?} failed after {secs:.1} s: {:?}\n{stderr}",
        out.status
    );
    eprintln!("scr-bench-scale --ranks 8,64 {args:?}: {secs:.1} s");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}):\n{}\n{stderr}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    let jobs = report["jobs"].as_array().expect("jobs");
    let sizes: Vec<u64> = jobs.iter().map(|j| j["ranks"].as_u64().unwrap()).collect();
    assert_eq!(sizes, [8, 64]);
    for j in jobs {
        let n = j["ranks"].as_u64().unwrap();
        // 8 ranks: 2 per node, so that each XOR set of 4 spans 4 nodes; 64: 4 per node
        let nodes = if n == 8 { 4 } else { 16 };
        assert_eq!(j["nodes"].as_u64(), Some(nodes), "{n} ranks");
        for check in ["rebuild", "fetch", "resize"] {
            assert_eq!(j["checks"][check].as_u64(), Some(n), "{check} at {n} ranks");
        }
    }
    for step in STEPS {
        // every step counted something on every job (none was skipped)
        for n in [8, 64] {
            assert!(
                row(&report, step, n)["coll_max"].as_f64().unwrap() > 0.0,
                "{step}: no collective counted at {n} ranks"
            );
        }
    }
    report
}

/// `what` of `step` at 64 ranks over the same at 8 ranks.
fn growth(report: &Value, step: &str, what: impl Fn(&Value) -> Option<f64>) -> (f64, f64) {
    let get = |n| {
        what(row(report, step, n)).unwrap_or_else(|| panic!("{step} at {n} ranks: not counted"))
    };
    (get(8), get(64))
}

/// The row of `step` at `ranks` ranks.
fn row<'a>(report: &'a Value, step: &str, ranks: u64) -> &'a Value {
    report["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| r["step"] == step && r["ranks"] == ranks)
        .unwrap_or_else(|| panic!("no row for {step} at {ranks} ranks"))
}

/// complete_output's largest per-rank bytes in a row.
fn complete_output_bytes(row: &Value) -> Option<f64> {
    row["calls"]["complete_output"]["bytes_max"].as_f64()
}

#[test]
fn lifecycle_at_64_ranks_is_byte_exact_and_complete_output_does_not_grow() {
    let dir = tempfile::tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .expect("a temporary directory");
    let report = scale_run(dir.path(), &[]);

    // the flush put every rank's file into the prefix byte for byte
    let job64 = report["jobs"][1]["dir"]
        .as_str()
        .expect("--keep names the directory");
    for r in 0..64 {
        let p = Path::new(job64).join(format!("prefix/ckpt.2/rank_{r}.dat"));
        let got = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert!(
            got == content(r, BYTES, 2),
            "{}: not what rank {r} wrote",
            p.display()
        );
    }

    // complete_output's per-rank bytes do not grow with the job: at 64 ranks within 2x
    // of those at 8 ranks, for the 1 MiB XOR checkpoint (whose reduce-scatter moves
    // about 2 MiB per rank)
    let (small, large) = growth(&report, "xor_ckpt", complete_output_bytes);
    assert!(small > BYTES as f64, "xor_ckpt: {small} bytes at 8 ranks");
    assert!(
        large <= 2.0 * small,
        "xor_ckpt: complete_output moves {large} bytes per rank at 64 ranks, {small} at 8"
    );
    // nor do any step's messages + collectives, nor init's and the rebuild's bytes
    for step in STEPS {
        let (small, large) = growth(&report, step, |r| r["ops_max"].as_f64());
        assert!(
            large <= 2.0 * small,
            "{step}: {large} messages + collectives per rank at 64 ranks, {small} at 8"
        );
    }
    for step in ["init", "rebuild"] {
        let (small, large) = growth(&report, step, |r| r["bytes_max"].as_f64());
        assert!(
            large <= 2.0 * small,
            "{step}: {large} bytes per rank at 64 ranks, {small} at 8"
        );
    }
}

/// With 4 KiB per rank the metadata dominates every step's bytes: none may grow more than
/// 2x from 8 to 64 ranks; flush's and fetch's messages on the busiest rank do not grow
/// at all. (Before the name-clash check by a distributed hash and the
/// rank2file tree, tiny_ckpt went from 811 to 2,491 bytes and flush from 866 to 6,844:
/// this test failed.)
#[test]
fn metadata_bytes_per_rank_do_not_grow_from_8_to_64_ranks() {
    let dir = tempfile::tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .expect("a temporary directory");
    let report = scale_run(dir.path(), &["--bytes", "4096"]);
    let mut grown = Vec::new();
    for step in STEPS {
        let (small, large) = growth(&report, step, |r| r["bytes_max"].as_f64());
        if large > 2.0 * small {
            grown.push(format!("{step}: {small} -> {large}"));
        }
    }
    for step in ["tiny_ckpt", "xor_ckpt"] {
        let (small, large) = growth(&report, step, complete_output_bytes);
        if large > 2.0 * small {
            grown.push(format!("{step} complete_output: {small} -> {large}"));
        }
    }
    assert!(
        grown.is_empty(),
        "per-rank bytes (busiest rank) more than doubled from 8 to 64 ranks: {}",
        grown.join("; ")
    );
    // flush and fetch point-to-point: with rank2file blocks of 8, the busiest rank (a
    // leader: rank 0 is one like the others) handles the same messages at 8 ranks (one
    // block) as at 64 (eight blocks). Before the root held only the layout and totals,
    // rank 0 also received a part reference from every other leader at flush and sent
    // each its part's at fetch: 7 more messages each at 64 ranks.
    for step in ["flush", "fetch"] {
        let (small, large) = growth(&report, step, |r| r["msgs_max"].as_f64());
        assert!(small > 0.0, "{step}: no message counted at 8 ranks");
        assert_eq!(
            large, small,
            "{step}: the busiest rank's messages at 64 ranks, at 8"
        );
    }
}
