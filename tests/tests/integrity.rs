//! Verify before use, end to end: a cached checkpoint that was damaged (a flipped byte, a
//! truncated or deleted file, a damaged redundancy file or filemap, a damaged survivor
//! together with a lost node) is never handed to the application. Each scenario runs the
//! heat stencil (checkpoints ckpt.5 and ckpt.10 in cache), damages the cache, runs again
//! and checks that the restart came from an intact checkpoint — rebuilt, older, or a
//! fresh start — and that the final state equals an uninterrupted run's.
//!
//! Every scenario runs on 2 simulated nodes (ranks 0,1 on n0 and 2,3 on n1; XOR and
//! PARTNER sets of 2 across the nodes) and on 4 (one rank per node, one set of 4).

use std::path::{Path, PathBuf};

use scr_e2e::{Cluster, JobOutput};

const TWO_NODES: &[&str] = &["n0", "n0", "n1", "n1"];
const FOUR_NODES: &[&str] = &["n0", "n1", "n2", "n3"];
const CELLS: &str = "3000";

fn heat(c: &Cluster, nodes: &[&str], steps: u64) -> JobOutput {
    c.run(
        nodes,
        "scr-heat",
        &["--steps", &steps.to_string(), "--cells", CELLS],
    )
}

/// The final state of an uninterrupted 20-step run on 4 ranks.
fn reference() -> String {
    scr_e2e::reference_state(4, 20, Some(CELLS.parse().unwrap()))
}

/// A cluster with `scheme` whose cache holds ckpt.5 and ckpt.10 of a 12-step run.
fn first_run(scheme: &str, nodes: &[&str]) -> Cluster {
    let mut c = Cluster::new();
    c.set("SCR_COPY_TYPE", scheme)
        .set("SCR_CACHE_SIZE", "2")
        .set("SCR_FLUSH", "0");
    let out = heat(&c, nodes, 12);
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.contains("checkpoint ckpt.10: kept"), "{out}");
    c
}

/// Rank `rank`'s cached file of checkpoint `ckpt` (searched under its node's cache).
fn cached_file(c: &Cluster, nodes: &[&str], rank: usize, ckpt: &str) -> PathBuf {
    let want = Path::new(ckpt).join(format!("rank_{rank}.ckpt"));
    find(&c.cache_dir(nodes[rank]), &|p| p.ends_with(&want))
        .unwrap_or_else(|| panic!("no cached {} for rank {rank}", want.display()))
}

/// Rank `rank`'s redundancy file of the dataset holding `ckpt`.
fn redundancy_file(c: &Cluster, nodes: &[&str], rank: usize, ckpt: &str) -> PathBuf {
    let data = cached_file(c, nodes, rank, ckpt);
    let dataset = data.parent().and_then(Path::parent).expect("dataset dir");
    let prefix = format!("scr.{rank}.");
    std::fs::read_dir(dataset)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            n.starts_with(&prefix) && n.ends_with(".redset")
        })
        .unwrap_or_else(|| panic!("no redundancy file of rank {rank} in {}", dataset.display()))
}

fn find(dir: &Path, want: &dyn Fn(&Path) -> bool) -> Option<PathBuf> {
    for e in std::fs::read_dir(dir).ok()? {
        let p = e.ok()?.path();
        if p.is_dir() {
            if let Some(f) = find(&p, want) {
                return Some(f);
            }
        } else if want(&p) {
            return Some(p);
        }
    }
    None
}

/// Flip one bit in the middle of `path` (inside the heat state, past its step header).
fn flip_byte(path: &Path) {
    let mut b = std::fs::read(path).unwrap();
    let at = b.len() / 2;
    b[at] ^= 0x10;
    std::fs::write(path, b).unwrap();
}

fn truncate(path: &Path) {
    let len = std::fs::metadata(path).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.set_len(len - 8).unwrap();
}

/// Where the second run must restart from.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Expect {
    /// ckpt.10, after the scheme rebuilt what was damaged.
    Rebuilt,
    /// ckpt.5, the newer one being beyond repair.
    Older,
    /// nothing intact: a fresh start.
    Fresh,
}

fn second_run(c: &Cluster, nodes: &[&str], expect: Expect) -> JobOutput {
    let out = heat(c, nodes, 20);
    assert_eq!(out.code, 0, "{out}");
    match expect {
        Expect::Rebuilt => assert_eq!(
            out.line_after("restarted from "),
            Some("ckpt.10 at step 10"),
            "{out}"
        ),
        Expect::Older => assert_eq!(
            out.line_after("restarted from "),
            Some("ckpt.5 at step 5"),
            "{out}"
        ),
        Expect::Fresh => assert!(out.stdout.contains("starting fresh"), "{out}"),
    }
    assert_eq!(out.final_state(), reference(), "{out}");
    out
}

/// Restart without computing (`--steps 10`): the cache is left as init restored it, for
/// byte-exact checks of what was rebuilt.
fn restart_only(c: &Cluster, nodes: &[&str]) -> JobOutput {
    let out = heat(c, nodes, 10);
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        out.line_after("restarted from "),
        Some("ckpt.10 at step 10"),
        "{out}"
    );
    out
}

/// Rank 1's ckpt.10 file gets a flipped byte: SINGLE falls back to ckpt.5, the others
/// rebuild it byte-exact. The warning names the rank, the file and both CRCs.
fn flipped_cached_file(scheme: &str, nodes: &[&str], expect: Expect) {
    let c = first_run(scheme, nodes);
    let f = cached_file(&c, nodes, 1, "ckpt.10");
    let original = std::fs::read(&f).unwrap();
    flip_byte(&f);
    let out = if expect == Expect::Rebuilt {
        let out = restart_only(&c, nodes);
        assert_eq!(std::fs::read(&f).unwrap(), original, "rebuilt byte-exact");
        second_run(&c, nodes, expect);
        out
    } else {
        second_run(&c, nodes, expect)
    };
    let warning = out
        .stderr
        .lines()
        .find(|l| l.contains("counted as lost"))
        .unwrap_or_else(|| panic!("no warning about the damaged file\n{out}"));
    assert!(
        warning.contains("rank 1: ")
            && warning.contains(&f.display().to_string())
            && warning.contains("CRC32 ")
            && warning.contains(" recorded"),
        "{warning}"
    );
}

#[test]
fn single_flipped_byte_falls_back_to_the_older_checkpoint_on_two_nodes() {
    flipped_cached_file("SINGLE", TWO_NODES, Expect::Older);
}

#[test]
fn single_flipped_byte_falls_back_to_the_older_checkpoint_on_four_nodes() {
    flipped_cached_file("SINGLE", FOUR_NODES, Expect::Older);
}

#[test]
fn partner_rebuilds_a_flipped_byte_on_two_nodes() {
    flipped_cached_file("PARTNER", TWO_NODES, Expect::Rebuilt);
}

#[test]
fn partner_rebuilds_a_flipped_byte_on_four_nodes() {
    flipped_cached_file("PARTNER", FOUR_NODES, Expect::Rebuilt);
}

#[test]
fn xor_rebuilds_a_flipped_byte_on_two_nodes() {
    flipped_cached_file("XOR", TWO_NODES, Expect::Rebuilt);
}

#[test]
fn xor_rebuilds_a_flipped_byte_on_four_nodes() {
    flipped_cached_file("XOR", FOUR_NODES, Expect::Rebuilt);
}

/// A damaged survivor and a lost node in the same set: the rebuild must not read the
/// damaged bytes. Where both count against one scheme's tolerance (XOR; PARTNER in a set
/// of 2) ckpt.10 is beyond repair and ckpt.5, damaged only by the node loss, is rebuilt
/// and restarted from; PARTNER in a ring of 4 rebuilds both from their partners' copies.
fn damaged_survivor_and_lost_node(scheme: &str, nodes: &[&str], expect: Expect) {
    let c = first_run(scheme, nodes);
    // rank 0 (node n0) survives with a flipped byte; rank 2's node is lost (on both
    // layouts rank 2 shares a set with rank 0 and sits on another node)
    flip_byte(&cached_file(&c, nodes, 0, "ckpt.10"));
    c.lose_node(nodes[2]);
    let out = second_run(&c, nodes, expect);
    if expect == Expect::Rebuilt {
        return;
    }
    let lost = out
        .stdout
        .lines()
        .find(|l| l.starts_with("lost: ") && l.contains("ckpt.10"))
        .unwrap_or_else(|| panic!("ckpt.10 must be reported lost\n{out}"));
    assert!(
        lost.contains("rank 0: ") && lost.contains("CRC32"),
        "{lost}"
    );
}

#[test]
fn xor_never_rebuilds_from_a_damaged_survivor_on_two_nodes() {
    damaged_survivor_and_lost_node("XOR", TWO_NODES, Expect::Older);
}

#[test]
fn xor_never_rebuilds_from_a_damaged_survivor_on_four_nodes() {
    damaged_survivor_and_lost_node("XOR", FOUR_NODES, Expect::Older);
}

#[test]
fn partner_never_restarts_from_a_damaged_survivor_on_two_nodes() {
    damaged_survivor_and_lost_node("PARTNER", TWO_NODES, Expect::Older);
}

/// A truncated file and a deleted one count as lost like a damaged one.
fn truncated_and_deleted(scheme: &str, nodes: &[&str], expect: Expect) {
    let c = first_run(scheme, nodes);
    truncate(&cached_file(&c, nodes, 3, "ckpt.10"));
    let out = second_run(&c, nodes, expect);
    assert!(out.stderr.contains("rank 3: "), "{out}");

    let c = first_run(scheme, nodes);
    std::fs::remove_file(cached_file(&c, nodes, 2, "ckpt.10")).unwrap();
    second_run(&c, nodes, expect);
}

#[test]
fn single_truncated_or_deleted_file_falls_back() {
    truncated_and_deleted("SINGLE", TWO_NODES, Expect::Older);
}

#[test]
fn xor_truncated_or_deleted_file_is_rebuilt() {
    truncated_and_deleted("XOR", FOUR_NODES, Expect::Rebuilt);
}

#[test]
fn partner_truncated_or_deleted_file_is_rebuilt() {
    truncated_and_deleted("PARTNER", TWO_NODES, Expect::Rebuilt);
}

/// A flipped byte in a redundancy file: the data are intact, the damaged parity or copy
/// is not trusted and is rebuilt; the restart uses ckpt.10.
fn flipped_redundancy_file(scheme: &str, nodes: &[&str]) {
    let c = first_run(scheme, nodes);
    let red = redundancy_file(&c, nodes, 1, "ckpt.10");
    let before = std::fs::read(&red).unwrap();
    flip_byte(&red);
    restart_only(&c, nodes);
    assert_eq!(
        std::fs::read(&red).unwrap(),
        before,
        "rebuilt redundancy file"
    );
    // protected again: losing rank 1's node now is survivable
    c.lose_node(nodes[1]);
    second_run(&c, nodes, Expect::Rebuilt);
}

#[test]
fn xor_flipped_parity_is_rebuilt_on_two_nodes() {
    flipped_redundancy_file("XOR", TWO_NODES);
}

#[test]
fn xor_flipped_parity_is_rebuilt_on_four_nodes() {
    flipped_redundancy_file("XOR", FOUR_NODES);
}

#[test]
fn partner_flipped_copy_is_rebuilt_on_four_nodes() {
    flipped_redundancy_file("PARTNER", FOUR_NODES);
}

/// A flipped byte in rank 1's filemap: the filemap is not trusted, rank 1's cache counts
/// as lost; XOR and PARTNER rebuild it, SINGLE cannot and starts fresh.
fn flipped_filemap(scheme: &str, nodes: &[&str], expect: Expect) {
    let c = first_run(scheme, nodes);
    let map = c
        .path("cntl")
        .join(nodes[1])
        .join("e2e")
        .join("scr.e2e")
        .join("filemap_1.scr");
    flip_byte(&map);
    let out = second_run(&c, nodes, expect);
    assert!(out.stderr.contains("filemap_1.scr"), "{out}");
}

#[test]
fn xor_rebuilds_a_rank_whose_filemap_is_damaged() {
    flipped_filemap("XOR", TWO_NODES, Expect::Rebuilt);
}

#[test]
fn partner_rebuilds_a_rank_whose_filemap_is_damaged() {
    flipped_filemap("PARTNER", FOUR_NODES, Expect::Rebuilt);
}

#[test]
fn single_starts_fresh_when_a_filemap_is_damaged() {
    flipped_filemap("SINGLE", FOUR_NODES, Expect::Fresh);
}

/// With crc_on_restart = false only sizes are checked (the documented trade-off): the
/// flipped byte is not caught and the restart uses ckpt.10 as is.
#[test]
fn crc_on_restart_off_checks_sizes_only() {
    let mut c = first_run("SINGLE", TWO_NODES);
    flip_byte(&cached_file(&c, TWO_NODES, 1, "ckpt.10"));
    c.set("SCR_CRC_ON_RESTART", "0");
    let out = heat(&c, TWO_NODES, 20);
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        out.line_after("restarted from "),
        Some("ckpt.10 at step 10"),
        "{out}"
    );
    assert_ne!(out.final_state(), reference(), "the damage went unnoticed");
}

/// A cluster whose system configuration loads the fixture schemes that fail on one
/// member (FAIL_ONE, PANIC_ONE), in sets of 4 across 4 nodes.
fn one_member_fails(scheme: &str) -> Cluster {
    let mut c = Cluster::new();
    c.load_plugins(&["libscr_fixture_panic.so"])
        .set("SCR_COPY_TYPE", scheme)
        .set("SCR_SET_SIZE", "4")
        .set("SCR_ABORT_TIMEOUT", "2");
    c
}

/// An error on one member only, the others returning: nothing hangs, the dataset is
/// discarded everywhere and every rank returns the same error, naming the failing member
/// (its world rank), the plugin and the call.
#[test]
fn an_apply_error_on_one_member_gives_every_rank_the_same_error() {
    let c = one_member_fails("FAIL_ONE");
    let out = c.run(FOUR_NODES, "scr-probe", &["apply-one"]);
    assert_eq!(out.code, 0, "{out}");
    let reports = c.probe_reports(4);
    for (r, report) in reports.iter().enumerate() {
        assert_eq!(report, &reports[0], "rank {r} returned another error");
    }
    let first = reports[0].lines().next().unwrap();
    assert!(
        first.starts_with("error: complete_output ckpt.1: redundancy could not be applied")
            && first.contains("on rank 1: ")
            && first.contains("libscr_fixture_panic.so")
            && first.contains(
                "apply: I/O error: member 1 (world rank 1) failed in apply: deliberate failure in apply on member 1"
            ),
        "{first}"
    );
    assert!(
        reports[0].contains("restart candidate None\nworld 4\n"),
        "{}",
        reports[0]
    );
}

/// A panic in apply on one member while the others wait inside the plugin for a message
/// from it: the host of the member that panicked tells the others, their host services
/// return its error, the plugin propagates it, and every rank's complete_output returns
/// the same error — the job goes on and ends normally, long before abort_timeout, with no
/// MPI_Abort.
#[test]
fn a_panic_in_apply_on_one_member_gives_every_rank_its_error_instead_of_a_hang() {
    let mut c = one_member_fails("PANIC_ONE");
    c.set("SCR_ABORT_TIMEOUT", "60");
    let started = std::time::Instant::now();
    let out = c.run(FOUR_NODES, "scr-probe", &["apply-one"]);
    let took = started.elapsed();
    assert_ne!(
        out.code, 124,
        "the job hung until the test's timeout\n{out}"
    );
    assert_ne!(out.code, 70, "the job was aborted\n{out}");
    assert_eq!(out.code, 0, "{out}");
    assert!(!out.stderr.contains("MPI_Abort"), "{out}");
    assert!(took < std::time::Duration::from_secs(30), "{took:?}\n{out}");
    let reports = c.probe_reports(4);
    for (r, report) in reports.iter().enumerate() {
        assert_eq!(report, &reports[0], "rank {r} returned another error");
        let first = report.lines().next().unwrap();
        assert!(
            first.starts_with("error: complete_output ckpt.1: redundancy could not be applied, dataset discarded: on rank 1: plugin ")
                && first.contains("libscr_fixture_panic.so: apply: panic: member 1 (world rank 1) failed in apply: plugin scr-fixture-panic panicked in apply: deliberate panic in apply on member 1"),
            "rank {r}: {first}"
        );
        assert!(
            report.ends_with("restart candidate None\nworld 4\n"),
            "rank {r}: {report}"
        );
    }
}

/// The same under scr-heat, an application that stops at an error: every rank prints the
/// same error of its checkpoint's complete_output (the library agrees it), finalizes and
/// exits with status 1 — no rank aborts the job and none hangs.
#[test]
fn a_panic_in_apply_on_one_member_ends_scr_heat_alike_on_every_rank() {
    let mut c = one_member_fails("PANIC_ONE");
    c.set("SCR_ABORT_TIMEOUT", "60");
    let started = std::time::Instant::now();
    let out = c.run(
        FOUR_NODES,
        "scr-heat",
        &["--steps", "10", "--every", "5", "--cells", CELLS],
    );
    let took = started.elapsed();
    assert!(out.stdout.contains("ranks 4"), "world size\n{out}");
    assert_ne!(out.code, 70, "the library aborted the job\n{out}");
    assert_ne!(out.code, 2, "scr-heat aborted the job\n{out}");
    assert_eq!(out.code, 1, "{out}");
    assert!(took < std::time::Duration::from_secs(30), "{took:?}\n{out}");
    let errors: Vec<(String, String)> = out
        .stderr
        .lines()
        .filter_map(|l| l.strip_prefix("scr-heat["))
        .filter_map(|l| l.split_once("]: error: "))
        .map(|(r, e)| (r.to_string(), e.to_string()))
        .collect();
    let mut ranks: Vec<&str> = errors.iter().map(|(r, _)| r.as_str()).collect();
    ranks.sort_unstable();
    assert_eq!(ranks, ["0", "1", "2", "3"], "one error per rank\n{out}");
    for (r, e) in &errors {
        assert_eq!(e, &errors[0].1, "rank {r}");
    }
    assert!(
        errors[0].1.starts_with("complete_output ckpt.5: redundancy could not be applied, dataset discarded: on rank 1: ")
            && errors[0].1.contains("panicked in apply: deliberate panic in apply on member 1"),
        "{}",
        errors[0].1
    );
}

/// The same in recover at init: a checkpoint is kept by one job (apply succeeds), the next
/// job's init asks the scheme to verify it, member 1 panics in recover while the others
/// wait for it — in a reduction (member 0) or a receive (members 2 and 3). Every rank
/// drops the cached dataset with the same report naming member 1's error, and init goes
/// on (to the flushed copy).
#[test]
fn a_panic_in_recover_on_one_member_gives_every_rank_its_error_instead_of_a_hang() {
    let mut c = one_member_fails("PANIC_ONE_RECOVER");
    c.set("SCR_ABORT_TIMEOUT", "60");
    let out = c.run(FOUR_NODES, "scr-probe", &["apply-one"]);
    assert_eq!(out.code, 0, "{out}");
    for (r, report) in c.probe_reports(4).iter().enumerate() {
        assert_eq!(
            report, "kept true\nrestart candidate Some(\"ckpt.1\")\nworld 4\n",
            "rank {r}"
        );
    }
    let started = std::time::Instant::now();
    let out = c.run(FOUR_NODES, "scr-probe", &["lost"]);
    let took = started.elapsed();
    assert_ne!(out.code, 70, "the job was aborted\n{out}");
    assert_eq!(out.code, 0, "{out}");
    assert!(!out.stderr.contains("MPI_Abort"), "{out}");
    assert!(took < std::time::Duration::from_secs(30), "{took:?}\n{out}");
    let reports = c.probe_reports(4);
    for (r, report) in reports.iter().enumerate() {
        assert_eq!(report, &reports[0], "rank {r} reported another loss");
        let lines: Vec<&str> = report.lines().collect();
        assert_eq!(lines.len(), 3, "rank {r}: {report}");
        assert_eq!(lines[0], "world 4", "rank {r}");
        assert!(
            lines[1].starts_with("lost: dataset 1 (ckpt.1) cannot be restored and was dropped")
                && lines[1].contains("libscr_fixture_panic.so: recover: panic: member 1 (world rank 1) failed in recover: plugin scr-fixture-panic panicked in recover: deliberate panic in recover on member 1"),
            "rank {r}: {}",
            lines[1]
        );
        // the cached copy is gone; the copy the first job flushed is fetched instead
        assert_eq!(lines[2], "candidate Some(\"ckpt.1\")", "rank {r}");
    }
}

// ----- the rest of the matrix: every scheme on 2 and 4 nodes -----

#[test]
fn single_truncated_or_deleted_file_falls_back_on_four_nodes() {
    truncated_and_deleted("SINGLE", FOUR_NODES, Expect::Older);
}

#[test]
fn xor_truncated_or_deleted_file_is_rebuilt_on_two_nodes() {
    truncated_and_deleted("XOR", TWO_NODES, Expect::Rebuilt);
}

#[test]
fn partner_truncated_or_deleted_file_is_rebuilt_on_four_nodes() {
    truncated_and_deleted("PARTNER", FOUR_NODES, Expect::Rebuilt);
}

#[test]
fn xor_rebuilds_a_rank_whose_filemap_is_damaged_on_four_nodes() {
    flipped_filemap("XOR", FOUR_NODES, Expect::Rebuilt);
}

#[test]
fn partner_rebuilds_a_rank_whose_filemap_is_damaged_on_two_nodes() {
    flipped_filemap("PARTNER", TWO_NODES, Expect::Rebuilt);
}

#[test]
fn single_starts_fresh_when_a_filemap_is_damaged_on_two_nodes() {
    flipped_filemap("SINGLE", TWO_NODES, Expect::Fresh);
}

#[test]
fn partner_rebuilds_a_damaged_survivor_and_a_lost_node_from_partners_on_four_nodes() {
    damaged_survivor_and_lost_node("PARTNER", FOUR_NODES, Expect::Rebuilt);
}

#[test]
fn partner_flipped_copy_is_rebuilt_on_two_nodes() {
    flipped_redundancy_file("PARTNER", TWO_NODES);
}

/// Faults in the prefix: every checkpoint is flushed (ckpt.5, ckpt.10), every cache is
/// then lost, and the prefix is damaged. A flipped byte in ckpt.10's flushed file makes
/// the fetch fall back to ckpt.5; a flipped byte in the index makes it rebuilt from the
/// per-dataset summaries (ckpt.10 is fetched); a transfer type that reports Complete without copying leaves
/// nothing recorded (a fresh start). The scheme re-protects whatever was fetched.
fn prefix_fault(scheme: &str, nodes: &[&str], fault: &str) {
    let mut c = Cluster::new();
    c.set("SCR_COPY_TYPE", scheme)
        .set("SCR_CACHE_SIZE", "2")
        .set("SCR_FLUSH", "1");
    if fault == "lying-transfer" {
        let lib = scr_e2e::target_dir().join("libscr_fixture_lying_transfer.so");
        let system = c.path("system.toml");
        std::fs::write(
            &system,
            format!("[plugins]\nfiles = [\"{}\"]\n", lib.display()),
        )
        .unwrap();
        c.set("SCR_SYSTEM_CONFIG", &system.display().to_string())
            .set("SCR_FLUSH_TYPE", "LYING")
            .set("SCR_FIXTURE_LIE", "nocopy");
    }
    let out = heat(&c, nodes, 12);
    assert_eq!(out.code, 0, "{out}");
    let expect = match fault {
        "flushed-file" => {
            flip_byte(&c.prefix().join("ckpt.10/rank_1.ckpt"));
            Expect::Older
        }
        "index" => {
            // not trusted, rebuilt from the summaries: ckpt.10 is fetched
            flip_byte(&c.prefix().join(".scr/index.scr"));
            Expect::Rebuilt
        }
        "lying-transfer" => {
            assert!(!c.prefix().join("ckpt.10/rank_1.ckpt").exists());
            Expect::Fresh
        }
        other => panic!("unknown fault {other}"),
    };
    let mut distinct: Vec<&str> = nodes.to_vec();
    distinct.dedup();
    for node in distinct {
        c.lose_node(node);
    }
    second_run(&c, nodes, expect);
}

#[test]
fn single_flipped_flushed_file_fetches_the_older_checkpoint_on_two_nodes() {
    prefix_fault("SINGLE", TWO_NODES, "flushed-file");
}

#[test]
fn partner_flipped_flushed_file_fetches_the_older_checkpoint_on_four_nodes() {
    prefix_fault("PARTNER", FOUR_NODES, "flushed-file");
}

#[test]
fn xor_flipped_flushed_file_fetches_the_older_checkpoint_on_two_nodes() {
    prefix_fault("XOR", TWO_NODES, "flushed-file");
}

#[test]
fn xor_flipped_flushed_file_fetches_the_older_checkpoint_on_four_nodes() {
    prefix_fault("XOR", FOUR_NODES, "flushed-file");
}

#[test]
fn single_flipped_index_is_rebuilt_and_fetched_on_four_nodes() {
    prefix_fault("SINGLE", FOUR_NODES, "index");
}

#[test]
fn partner_flipped_index_is_rebuilt_and_fetched_on_two_nodes() {
    prefix_fault("PARTNER", TWO_NODES, "index");
}

#[test]
fn xor_flipped_index_is_rebuilt_and_fetched_on_four_nodes() {
    prefix_fault("XOR", FOUR_NODES, "index");
}

#[test]
fn single_lying_transfer_is_never_recorded_on_two_nodes() {
    prefix_fault("SINGLE", TWO_NODES, "lying-transfer");
}

#[test]
fn partner_lying_transfer_is_never_recorded_on_four_nodes() {
    prefix_fault("PARTNER", FOUR_NODES, "lying-transfer");
}

#[test]
fn xor_lying_transfer_is_never_recorded_on_two_nodes() {
    prefix_fault("XOR", TWO_NODES, "lying-transfer");
}

/// A filemap that names a file outside the cache (forged by someone who can write the
/// control directory, or damaged, with a valid checksum) makes that rank's data count as
/// lost — and when the dataset is dropped, the named file is not deleted.
#[test]
fn a_filemap_naming_a_file_outside_the_cache_never_gets_it_deleted() {
    use scr_host::runtime::{FileRecord, Filemap};
    let c = first_run("SINGLE", TWO_NODES);
    let victim = c.path("outside.dat");
    std::fs::write(&victim, b"keep me").unwrap();
    let cntl = c.path("cntl").join("n0").join("e2e").join("scr.e2e");
    let mut map = Filemap::load(&cntl, 1).unwrap();
    let newest = map
        .datasets
        .values_mut()
        .find(|d| d.name == "ckpt.10")
        .expect("ckpt.10 in rank 1's filemap");
    // from the dataset directory: <cache>/n0/e2e/scr.e2e/scr.dataset.N -> <cluster>
    let up = "../../../../../outside.dat";
    assert_eq!(
        std::fs::canonicalize(
            cached_file(&c, TWO_NODES, 1, "ckpt.10")
                .parent()
                .unwrap()
                .parent()
                .unwrap()
                .join(up)
        )
        .unwrap(),
        std::fs::canonicalize(&victim).unwrap()
    );
    newest.files.push(FileRecord {
        name: up.into(),
        size: 7,
        ..FileRecord::default()
    });
    newest.files.push(FileRecord {
        name: victim.display().to_string(),
        size: 7,
        ..FileRecord::default()
    });
    map.save(&cntl).unwrap();
    let out = second_run(&c, TWO_NODES, Expect::Older);
    assert!(out.stderr.contains("leaves the dataset directory"), "{out}");
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep me");
}

/// Another user pre-creates this user's directory in the shared cache base: as a link to
/// a directory of theirs, as a directory anyone can write, or as a directory they own.
/// Every rank refuses it (none waits), the error names the path, owner and mode, and not
/// one byte is written through it.
#[test]
fn planted_directories_in_a_shared_base_are_refused() {
    use std::os::unix::fs::PermissionsExt;
    for plant in ["symlink", "open", "foreign"] {
        let c = Cluster::new();
        // cntl and cache of node n1: <base>/n1/<user>
        let theirs = c.path("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o777)).unwrap();
        let node = c.path("cache").join("n1");
        std::fs::create_dir_all(&node).unwrap();
        let planted = node.join("e2e");
        match plant {
            "symlink" => std::os::unix::fs::symlink(&theirs, &planted).unwrap(),
            "open" => {
                std::fs::create_dir(&planted).unwrap();
                std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o777)).unwrap();
            }
            _ => {
                std::fs::create_dir(&planted).unwrap();
                std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o700)).unwrap();
                if std::os::unix::fs::chown(&planted, Some(54321), None).is_err() {
                    continue; // needs root to arrange
                }
            }
        }
        // (the probe reports each rank's init error in a file and exits 0: a rank exiting
        // non-zero would make mpiexec kill the others before they could say anything)
        let out = c.run(TWO_NODES, "scr-probe", &["candidate"]);
        assert_eq!(out.code, 0, "{plant}: every rank returned\n{out}");
        let why = match plant {
            "symlink" => "is a symbolic link",
            "open" => "has mode 0777: group or others can write to it",
            _ => "is owned by uid 54321, not by this user",
        };
        let line = format!("{} {why}", planted.display());
        // the ranks of n1 name the planted directory, those of n0 stopped with them
        for (r, report) in c.probe_reports(4).iter().enumerate() {
            assert!(
                report.starts_with("init error: "),
                "{plant}: rank {r}: {report}"
            );
            if TWO_NODES[r] == "n1" {
                assert!(
                    report.contains(&line),
                    "{plant}: rank {r}: {line}\n{report}"
                );
            } else {
                assert!(
                    report.contains("another rank failed") && report.contains(&line),
                    "{plant}: rank {r} must stop too, naming the cause\n{report}"
                );
            }
        }
        assert_eq!(
            std::fs::read_dir(&theirs).unwrap().count(),
            0,
            "{plant}: files went through the planted link"
        );
    }
}

/// A failure on some ranks only during init (here: fewer node names than ranks, so
/// ranks 2 and 3 have none) reaches every rank as an error naming the cause — nobody
/// waits in init, and the application does not have to abort.
#[test]
fn an_init_failure_on_some_ranks_returns_an_error_on_every_rank() {
    let mut c = Cluster::new();
    c.set("SCR_NODE_NAMES", "n0,n0");
    let out = c.run(TWO_NODES, "scr-probe", &["misuse"]);
    assert_eq!(out.code, 0, "every rank returned\n{out}");
    let reports = c.probe_reports(4);
    let cause = "node_names lists 2 node(s) but the job has 4 ranks; give one name per rank";
    for (r, report) in reports.iter().enumerate() {
        assert!(report.starts_with("init error: "), "rank {r}: {report}");
        assert!(report.contains(cause), "rank {r}: {report}");
    }
    assert!(reports[0].contains("rank 2: "), "{}", reports[0]);
}

/// Names the application may not route: empty, with a NUL byte, inside the prefix's
/// .scr, or the name of a redundancy file (this rank's: refused at route_file; another
/// rank's: the dataset is refused at complete_output). Nothing routed can break a later
/// init.
#[test]
fn route_file_refuses_names_that_would_break_the_library() {
    let mut c = Cluster::new();
    c.set("SCR_COPY_TYPE", "XOR").set("SCR_SET_SIZE", "4");
    let out = c.run(FOUR_NODES, "scr-probe", &["route-rules"]);
    assert_eq!(out.code, 0, "{out}");
    for (r, report) in c.probe_reports(4).iter().enumerate() {
        let lines: Vec<&str> = report.lines().collect();
        assert!(
            lines[0].starts_with("\"\": route_file: the file name is empty"),
            "{report}"
        );
        assert!(lines[1].contains("contains a NUL byte"), "{report}");
        assert!(
            lines[2].contains("is inside the prefix's .scr directory"),
            "{report}"
        );
        assert!(
            lines[3].contains("is inside the prefix's .scr directory"),
            "{report}"
        );
        assert!(
            lines[4].contains(&format!(
                "`scr.{r}.xor.mem_{r}_of_4.redset` is the name of this rank's redundancy file under scheme XOR"
            )),
            "{report}"
        );
        assert_eq!(lines[5], "kept true", "{report}");
        // every rank gets the same error, naming who routed what
        assert_eq!(
            lines[6],
            "second kept Err(\"complete_output ckpt.2: dataset discarded: on rank 1: rank 0 routed `scr.1.xor.mem_1_of_4.redset`, the name of rank 1's redundancy file under scheme XOR; choose another name\")",
            "rank {r}: {report}"
        );
    }
    // a later init on this cache still works and offers ckpt.1
    let again = c.run(FOUR_NODES, "scr-heat", &["--steps", "1", "--cells", CELLS]);
    assert_eq!(again.code, 0, "{again}");
}

/// Finalize cannot record the exit reason (the halt file cannot be written): the job's
/// work is done, so that is a warning, not an error the application aborts on.
#[test]
fn a_halt_file_that_cannot_be_written_at_finalize_is_not_fatal() {
    let c = Cluster::new();
    let blocker = c.prefix().join(".scr").join("halt.scr");
    std::fs::create_dir_all(blocker.join("in-the-way")).unwrap();
    let out = heat(&c, TWO_NODES, 6);
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.contains("final step 6"), "{out}");
    assert!(
        out.stderr.contains("halt.scr") && out.stderr.contains("the exit reason is not recorded"),
        "{out}"
    );
}
