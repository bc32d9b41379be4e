//! Flush and fetch trust nothing a transfer says (issue "Integrity", part 2), end to end
//! under `mpiexec -n 4` on two simulated nodes.
//!
//! The transfer type `LYING` (plugins/test-fixtures/lying-transfer, loaded through a
//! system configuration naming its library) reports every file Complete while copying
//! nothing, a short or a flipped copy, or no results at all, as `SCR_FIXTURE_LIE` says.
//! Each test ends by comparing the application's final state with an uninterrupted run's,
//! so a restart from wrong bytes cannot pass, and checks that the job was one world of 4
//! ranks (not 4 singletons started by a foreign mpiexec): scr-heat prints its final state
//! line once, on rank 0 of its world, and the index records the world size of each flush.

use std::path::PathBuf;

use scr_e2e::{target_dir, Cluster, JobOutput};
use scr_host::state::prefix::{Index, IndexEntry, Rank2File};

const TWO_NODES: &[&str] = &["n0", "n0", "n1", "n1"];
const LYING_LIB: &str = "libscr_fixture_lying_transfer.so";

fn heat(c: &Cluster, args: &[&str]) -> JobOutput {
    c.run(TWO_NODES, "scr-heat", args)
}

/// The final state of an uninterrupted run of `steps` steps.
fn reference(steps: u64) -> String {
    scr_e2e::reference_state(4, steps, None)
}

/// The job succeeded as one world: exit 0, and the lines rank 0 prints once per job
/// appear once (4 singletons would print them 4 times).
fn assert_ok(out: &JobOutput) {
    assert_eq!(out.code, 0, "{out}");
    let once = |p: &str| out.stdout.lines().filter(|l| l.starts_with(p)).count();
    assert_eq!(once("final step "), 1, "not one world: {out}");
    assert_eq!(
        once("restarted from ") + once("starting fresh"),
        1,
        "not one world: {out}"
    );
}

/// A cluster whose system configuration adds the LYING fixture to the shipped plugins,
/// flushing every second checkpoint.
fn cluster() -> Cluster {
    let lib = target_dir().join(LYING_LIB);
    assert!(
        lib.is_file(),
        "{} missing: cargo build --workspace",
        lib.display()
    );
    let mut c = Cluster::new();
    let system = c.path("system.toml");
    std::fs::write(
        &system,
        format!(
            "[plugins]\nfiles = [\"{}\"]\n\n[plugins.bbapi]\nfallback = \"pthread\"\n",
            lib.display()
        ),
    )
    .unwrap();
    c.set("SCR_SYSTEM_CONFIG", &system.display().to_string())
        .set("SCR_FLUSH", "2");
    c
}

fn lie(c: &mut Cluster, how: &str) {
    c.set("SCR_FLUSH_TYPE", "LYING").set("SCR_FIXTURE_LIE", how);
}

fn tell_the_truth(c: &mut Cluster) {
    c.env.remove("SCR_FLUSH_TYPE");
    c.env.remove("SCR_FIXTURE_LIE");
}

fn wipe_caches(c: &Cluster) {
    for node in ["n0", "n1"] {
        c.lose_node(node);
    }
}

fn entries(c: &Cluster, name: &str) -> Vec<IndexEntry> {
    Index::load(&c.prefix())
        .unwrap()
        .datasets
        .values()
        .filter(|e| e.name == name)
        .cloned()
        .collect()
}

/// The one index entry named `name`, written by a world of 4.
fn entry(c: &Cluster, name: &str) -> IndexEntry {
    let mut v = entries(c, name);
    assert_eq!(v.len(), 1, "{v:?}");
    let e = v.remove(0);
    assert_eq!(e.world_size, 4, "{e:?}");
    e
}

/// Every rank's file of checkpoint `name` at its usual place in the prefix.
fn files(c: &Cluster, name: &str) -> Vec<PathBuf> {
    (0..4)
        .map(|r| c.prefix().join(format!("{name}/rank_{r}.ckpt")))
        .collect()
}

fn contents(paths: &[PathBuf]) -> Vec<Vec<u8>> {
    paths
        .iter()
        .map(|p| std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .collect()
}

/// ckpt.10 flushed with the default (honest) type, then ckpt.20 flushed through LYING in
/// mode `how`: not recorded, with a reason naming the rank, the file, the transfer type and
/// the library; the older checkpoint untouched; after losing every cache the restart comes
/// from ckpt.10 and ends in the reference state.
fn a_lying_flush_is_refused(how: &str, reason: &str) {
    lying_flush(how, reason, false);
}

/// [`a_lying_flush_is_refused`], with the lying flush in the background (`flush_async`):
/// it is recorded failed, and what it wrote is removed at finalize.
fn lying_flush(how: &str, reason: &str, background: bool) {
    let mut c = cluster();
    let first = heat(&c, &["--steps", "12"]);
    assert_ok(&first);
    assert!(entry(&c, "ckpt.10").complete);
    let older = contents(&files(&c, "ckpt.10"));

    lie(&mut c, how);
    if background {
        c.set("SCR_FLUSH_ASYNC", "1");
    }
    let second = heat(&c, &["--steps", "22"]);
    assert_ok(&second);
    assert_eq!(
        second.line_after("restarted from "),
        Some("ckpt.10 at step 10"),
        "{second}"
    );
    let e = entry(&c, "ckpt.20");
    assert!(!e.complete, "a lying flush was recorded complete: {e:?}");
    let why = e
        .failed
        .clone()
        .expect("the index says why the flush failed");
    assert!(
        why.starts_with("flush failed on rank ")
            && why.contains("ckpt.20/rank_")
            && why.contains("transfer type `LYING`")
            && why.contains(LYING_LIB)
            && why.contains(reason),
        "{why}"
    );
    assert!(
        second
            .stderr
            .contains("ckpt.20 stays in cache only: flush failed on rank"),
        "{second}"
    );
    assert!(Rank2File::load(&c.prefix(), e.id).is_err(), "no rank2file");
    // what the failed flush wrote is gone, and the older checkpoint is byte-identical
    for f in files(&c, "ckpt.20") {
        assert!(!f.exists(), "{} was left behind", f.display());
    }
    assert_eq!(contents(&files(&c, "ckpt.10")), older);

    tell_the_truth(&mut c);
    c.env.remove("SCR_FLUSH_ASYNC");
    wipe_caches(&c);
    let third = heat(&c, &["--steps", "30"]);
    assert_ok(&third);
    assert_eq!(
        third.line_after("restarted from "),
        Some("ckpt.10 at step 10"),
        "{third}"
    );
    assert_eq!(third.final_state(), reference(30));
}

#[test]
fn a_short_background_flush_is_not_recorded_and_leaves_nothing() {
    lying_flush("short", "bytes CRC32", true);
}

#[test]
fn a_flush_that_copied_nothing_is_not_recorded() {
    a_lying_flush_is_refused(
        "nocopy",
        "cannot be read after the transfer reported it complete",
    );
}

#[test]
fn a_short_flush_is_not_recorded() {
    a_lying_flush_is_refused("short", "bytes CRC32");
}

#[test]
fn a_flipped_flush_is_not_recorded() {
    a_lying_flush_is_refused("flip", "(when written)");
}

#[test]
fn a_flush_without_results_is_not_recorded() {
    a_lying_flush_is_refused("noresults", "the transfer returned no result");
}

/// A transfer that tells the truth through the same plugin is recorded and fetched back
/// (also through it). `swap` returns results in reverse order: matched by source and
/// destination they are the truth too. (scr-heat writes one file per rank, where a
/// reversed list is the same list; the scr-host unit test
/// `results_in_any_order_are_matched_by_source_and_destination` covers several files.)
fn a_truthful_flush_is_recorded(how: &str) {
    let mut c = cluster();
    lie(&mut c, how);
    let first = heat(&c, &["--steps", "22"]);
    assert_ok(&first);
    for name in ["ckpt.10", "ckpt.20"] {
        let e = entry(&c, name);
        assert!(e.complete && e.failed.is_none(), "{e:?}");
        let map = Rank2File::load(&c.prefix(), e.id).unwrap();
        assert_eq!(map.ranks.len(), 4, "{map:?}");
        assert!(map.ranks.values().flatten().all(|f| f.crc32.is_some()));
    }
    wipe_caches(&c);
    let second = heat(&c, &["--steps", "30"]);
    assert_ok(&second);
    assert_eq!(
        second.line_after("restarted from "),
        Some("ckpt.20 at step 20"),
        "{second}"
    );
    assert_eq!(second.final_state(), reference(30));
}

#[test]
fn an_honest_flush_through_a_plugin_is_recorded_and_fetched() {
    a_truthful_flush_is_recorded("honest");
}

#[test]
fn results_out_of_order_are_matched_by_path() {
    a_truthful_flush_is_recorded("swap");
}

/// A rerun after a restart from ckpt.10 writes ckpt.20 again; its flush (failing here)
/// must not touch the complete ckpt.20 of the first run, which stays fetchable.
#[test]
fn a_failed_flush_of_a_reused_name_leaves_the_old_files_byte_identical() {
    let mut c = cluster();
    assert_ok(&heat(&c, &["--steps", "22"]));
    let old = contents(&files(&c, "ckpt.20"));
    let old_id = entry(&c, "ckpt.20").id;
    pin_current(&c, "ckpt.10");
    wipe_caches(&c);
    // fetch ckpt.10 into cache with the honest type
    let fetched = heat(&c, &["--steps", "12"]);
    assert_ok(&fetched);
    assert_eq!(
        fetched.line_after("restarted from "),
        Some("ckpt.10 at step 10")
    );

    lie(&mut c, "short");
    let rerun = heat(&c, &["--steps", "22"]);
    assert_ok(&rerun);
    assert!(
        rerun
            .stderr
            .contains("ckpt.20 stays in cache only: flush failed on rank"),
        "{rerun}"
    );
    assert_eq!(
        contents(&files(&c, "ckpt.20")),
        old,
        "the old ckpt.20 was damaged"
    );
    let both = entries(&c, "ckpt.20");
    assert_eq!(both.len(), 2, "{both:?}");
    assert!(both[0].id == old_id && both[0].complete && both[0].failed.is_none());
    assert!(!both[1].complete && both[1].failed.is_some(), "{both:?}");
    // the failed flush wrote into its own directory, not over the old files
    let why = both[1].failed.clone().unwrap();
    assert!(
        why.contains(&format!(
            ".scr/scr.dataset.{}/files/ckpt.20/rank_",
            both[1].id
        )),
        "{why}"
    );

    // the old ckpt.20 is still the one to restart from, byte-exact
    tell_the_truth(&mut c);
    pin_current(&c, "ckpt.20");
    wipe_caches(&c);
    let last = heat(&c, &["--steps", "30"]);
    assert_ok(&last);
    assert_eq!(
        last.line_after("restarted from "),
        Some("ckpt.20 at step 20"),
        "{last}"
    );
    assert_eq!(last.final_state(), reference(30));
}

/// `scr index current NAME`: make NAME the checkpoint the next fetch starts from.
fn pin_current(c: &Cluster, name: &str) {
    let pin = std::process::Command::new(scr_e2e::binary("scr"))
        .args(["index", "current", name, "--prefix"])
        .arg(c.prefix())
        .output()
        .unwrap();
    assert!(pin.status.success(), "{pin:?}");
}

/// A rerun's successful flush of a reused name goes beside the old files; rank2file
/// records where, and the fetch finds it there.
#[test]
fn a_reused_name_is_flushed_beside_the_old_files_and_fetched_from_there() {
    let c = cluster();
    assert_ok(&heat(&c, &["--steps", "22"]));
    let old = contents(&files(&c, "ckpt.20"));
    pin_current(&c, "ckpt.10");
    wipe_caches(&c);
    let rerun = heat(&c, &["--steps", "22"]);
    assert_ok(&rerun);
    let both = entries(&c, "ckpt.20");
    assert_eq!(both.len(), 2, "{both:?}");
    assert!(
        both.iter().all(|e| e.complete && e.failed.is_none()),
        "{both:?}"
    );
    let map = Rank2File::load(&c.prefix(), both[1].id).unwrap();
    for (rank, fs) in &map.ranks {
        let stored = format!(
            ".scr/scr.dataset.{}/files/ckpt.20/rank_{rank}.ckpt",
            both[1].id
        );
        assert_eq!(fs[0].stored.as_deref(), Some(stored.as_str()), "{map:?}");
        assert!(c.prefix().join(&stored).is_file());
    }
    assert_eq!(contents(&files(&c, "ckpt.20")), old);
    // damage the old copy: a fetch of the new ckpt.20 must not read it
    let victim = c.prefix().join("ckpt.20/rank_2.ckpt");
    let mut bytes = std::fs::read(&victim).unwrap();
    bytes[50] ^= 0x10;
    std::fs::write(&victim, bytes).unwrap();
    wipe_caches(&c);
    let last = heat(&c, &["--steps", "30"]);
    assert_ok(&last);
    assert_eq!(
        last.line_after("restarted from "),
        Some("ckpt.20 at step 20"),
        "{last}"
    );
    assert_eq!(last.final_state(), reference(30));
}

/// Fetch goes through the store's transfer type and verifies what it fetched: a flipping
/// transfer at fetch time fails every flushed checkpoint, on every rank alike, and the
/// run starts fresh instead of from wrong bytes.
#[test]
fn a_lying_fetch_is_caught_and_falls_back() {
    let mut c = cluster();
    assert_ok(&heat(&c, &["--steps", "22"]));
    wipe_caches(&c);
    lie(&mut c, "flip");
    let out = heat(&c, &["--steps", "30"]);
    assert_ok(&out);
    assert!(out.stdout.contains("starting fresh"), "{out}");
    for name in ["ckpt.20", "ckpt.10"] {
        assert!(
            out.stderr
                .contains(&format!("{name} cannot be fetched: fetch failed on rank ")),
            "{out}"
        );
    }
    let e = entries(&c, "ckpt.20").remove(0);
    let why = e.failed.expect("the index marks the failed fetch");
    assert!(
        why.starts_with("fetch failed on rank ")
            && why.contains("ckpt.20/rank_")
            && why.contains("(recorded by the flush)")
            && why.contains("CRC32")
            && why.contains("transfer type `LYING`"),
        "{why}"
    );
    assert_eq!(out.final_state(), reference(30));
}

/// One flipped byte in the index: it is not trusted, but it is no dead end either: it is
/// rebuilt from the per-dataset summaries, the newest flushed checkpoint is fetched, and
/// the next flush writes a good index again. `scr index rebuild` does the same by hand.
#[test]
fn a_flipped_byte_in_the_index_is_rebuilt_from_the_summaries() {
    let c = cluster();
    assert_ok(&heat(&c, &["--steps", "22"]));
    wipe_caches(&c);
    let ix = Index::path(&c.prefix());
    let flip = || {
        let mut bytes = std::fs::read(&ix).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x01;
        std::fs::write(&ix, bytes).unwrap();
    };
    flip();
    let out = heat(&c, &["--steps", "30"]);
    assert_ok(&out);
    assert!(
        out.stderr.contains("rebuilt from 2 dataset summaries"),
        "{out}"
    );
    assert_eq!(
        out.line_after("restarted from "),
        Some("ckpt.20 at step 20"),
        "{out}"
    );
    assert_eq!(out.final_state(), reference(30));
    // the run's own flush (ckpt.30) repaired it
    let names: Vec<String> = Index::load(&c.prefix())
        .expect("a good index again")
        .datasets
        .values()
        .map(|e| e.name.clone())
        .collect();
    assert_eq!(names, ["ckpt.10", "ckpt.20", "ckpt.30"]);

    // by hand
    flip();
    let out = std::process::Command::new(scr_e2e::binary("scr"))
        .args(["index", "rebuild", "--prefix"])
        .arg(c.prefix())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "index rebuilt: 3 dataset(s)\n"
    );
    assert_eq!(Index::load(&c.prefix()).unwrap().datasets.len(), 3);
    // a dataset the admin dropped (files kept) does not come back with a rebuild
    let scr = |args: &[&str]| {
        let out = std::process::Command::new(scr_e2e::binary("scr"))
            .args(args)
            .arg("--prefix")
            .arg(c.prefix())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(scr(&["index", "drop", "ckpt.10"]), "dropped ckpt.10\n");
    assert!(
        c.prefix().join("ckpt.10/rank_0.ckpt").is_file(),
        "files kept"
    );
    assert_eq!(scr(&["index", "rebuild"]), "index rebuilt: 2 dataset(s)\n");
}

/// One flipped byte in the newest dataset's rank2file map: that dataset is refused and
/// the older one fetched.
#[test]
fn a_flipped_byte_in_a_rank2file_map_falls_back_to_the_older_checkpoint() {
    let c = cluster();
    assert_ok(&heat(&c, &["--steps", "22"]));
    wipe_caches(&c);
    let map = Rank2File::path(&c.prefix(), entry(&c, "ckpt.20").id);
    let mut bytes = std::fs::read(&map).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    std::fs::write(&map, bytes).unwrap();
    let out = heat(&c, &["--steps", "30"]);
    assert_ok(&out);
    assert_eq!(
        out.line_after("restarted from "),
        Some("ckpt.10 at step 10"),
        "{out}"
    );
    assert!(out.stderr.contains("ckpt.20 cannot be fetched"), "{out}");
    assert_eq!(out.final_state(), reference(30));
}

/// A transfer plugin's log reaches the runtime's log: the bbapi type, whose vendor
/// library is absent here, warns that it uses its fallback.
#[test]
fn a_transfer_plugins_warning_reaches_the_log() {
    let mut c = cluster();
    c.set("SCR_FLUSH_TYPE", "bbapi");
    let out = heat(&c, &["--steps", "12"]);
    assert_ok(&out);
    assert!(
        out.stderr
            .contains("plugin=transfer bbapi]: warning: bbapi: ")
            && out
                .stderr
                .contains("this transfer uses the fallback type pthread"),
        "{out}"
    );
    assert!(entry(&c, "ckpt.10").complete);
}
