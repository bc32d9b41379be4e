//! Full disks, end to end under `mpiexec -n 4` on two simulated nodes,
//! with the prefix on a small tmpfs mounted for the test (the tests run as root; a mount
//! that fails fails the test, it is never skipped).
//!
//! scr-heat with `--cells 20000` writes 160 008 bytes per rank per checkpoint, 640 KiB a
//! checkpoint: one flushed checkpoint fits a 1 MiB prefix, a second does not.

use std::path::{Path, PathBuf};
use std::process::Command;

use scr_e2e::{relative_files_below, Cluster, JobOutput};
use scr_host::state::prefix::{Index, Rank2File};

const TWO_NODES: &[&str] = &["n0", "n0", "n1", "n1"];
const CELLS: &str = "20000";

/// A tmpfs mounted on a directory for the life of the value; unmounted on drop (also
/// when the test panics).
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    /// Mount a tmpfs of `size` (as `mount -o size=` takes it) on `dir`; panics, failing
    /// the test, when that is impossible.
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0755")])
            .arg("tmpfs")
            .arg(dir)
            .output()
            .expect("mount runs");
        assert!(
            out.status.success(),
            "these tests need a tmpfs on {} (run as root): mount failed: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs {
            dir: dir.to_path_buf(),
        }
    }

    /// Give it `size` (more space coming back).
    fn resize(&self, size: &str) {
        let out = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.dir)
            .output()
            .expect("mount runs");
        assert!(
            out.status.success(),
            "remount failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Fill it: a file `name` that takes every free byte.
    fn fill(&self, name: &str) {
        use std::io::Write;
        let mut f = std::fs::File::create(self.dir.join(name)).unwrap();
        let block = vec![0x5au8; 4096];
        loop {
            match f.write(&block) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(28) => break,
                Err(e) => panic!("filling {}: {e}", self.dir.display()),
            }
        }
        let _ = f.sync_all();
        let free = free_bytes(&self.dir);
        assert!(
            free < 4096,
            "{} still has {free} bytes free",
            self.dir.display()
        );
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.dir)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            // a process still inside it (a job killed by the timeout): detach it
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
    }
}

/// Free bytes of the file system holding `dir` (`df`).
fn free_bytes(dir: &Path) -> u64 {
    let out = Command::new("df")
        .args(["--output=avail", "-B1"])
        .arg(dir)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("df {}: {out:?}", dir.display()))
}

fn heat(c: &Cluster, steps: u64) -> JobOutput {
    heat_with(c, steps, 5, CELLS)
}

/// scr-heat for `steps` steps, a checkpoint every `every`, `cells` cells per rank.
fn heat_with(c: &Cluster, steps: u64, every: u64, cells: &str) -> JobOutput {
    let (steps, every) = (steps.to_string(), every.to_string());
    let out = c.run(
        TWO_NODES,
        "scr-heat",
        &["--steps", &steps, "--every", &every, "--cells", cells],
    );
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        out.stdout
            .lines()
            .filter(|l| l.starts_with("final step "))
            .count(),
        1,
        "not one world: {out}"
    );
    out
}

fn reference(steps: u64) -> String {
    scr_e2e::reference_state(4, steps, Some(20000))
}

/// Cells per rank of the background flush test: 64 KiB files, four checkpoints' worth
/// fit, many flushes run at once.
const SMALL: &str = "8000";

fn wipe_caches(c: &Cluster) {
    for node in ["n0", "n1"] {
        c.lose_node(node);
    }
}

/// The application's files in the prefix (everything outside `.scr`).
fn app_files(c: &Cluster) -> Vec<String> {
    relative_files_below(&c.prefix())
        .into_iter()
        .filter(|f| !f.starts_with(".scr/"))
        .collect()
}

fn ckpt_files(name: &str) -> Vec<String> {
    (0..4).map(|r| format!("{name}/rank_{r}.ckpt")).collect()
}

/// (name, complete, failed) of every index entry, by dataset id.
fn index(c: &Cluster) -> Vec<(String, bool, bool)> {
    Index::load(&c.prefix())
        .unwrap()
        .datasets
        .values()
        .map(|e| (e.name.clone(), e.complete, e.failed.is_some()))
        .collect()
}

/// Every file of every complete dataset in the index is in the prefix with the size and
/// CRC32 its rank2file records.
fn assert_complete_datasets_intact(c: &Cluster) {
    let ix = Index::load(&c.prefix()).unwrap();
    for e in ix.datasets.values().filter(|e| e.complete) {
        let map = Rank2File::load(&c.prefix(), e.id).unwrap();
        for f in map.ranks.values().flatten() {
            let p = f.stored_path(&c.prefix()).unwrap();
            let bytes = std::fs::read(&p).unwrap_or_else(|x| panic!("{}: {x}", p.display()));
            assert_eq!(bytes.len() as u64, f.size, "{}", p.display());
            assert_eq!(Some(crc32fast::hash(&bytes)), f.crc32, "{}", p.display());
        }
    }
}

/// A flush that runs out of space leaves nothing of itself in the prefix (no
/// `*.scr-part`, no partial file, the space given back), the previous flushed checkpoint
/// stays recorded complete and is fetched, byte-exact, by a run whose caches are gone,
/// and once space is back the next flush succeeds.
#[test]
fn a_flush_into_a_full_prefix_leaves_nothing_and_the_previous_checkpoint_is_fetched() {
    let mut c = Cluster::new();
    c.set("SCR_FLUSH", "1");
    let fs = Tmpfs::mount(&c.prefix(), "1m");

    let first = heat(&c, 10);
    assert!(
        first
            .stderr
            .contains("ckpt.10 stays in cache only: flush failed on rank"),
        "{first}"
    );
    assert!(first.stderr.contains("No space left on device"), "{first}");
    let left = relative_files_below(&c.prefix());
    assert!(
        !left.iter().any(|f| f.ends_with(".scr-part")),
        "partial files left: {left:?}"
    );
    assert_eq!(app_files(&c), ckpt_files("ckpt.5"), "{left:?}");
    assert_eq!(
        index(&c),
        [
            ("ckpt.5".to_string(), true, false),
            ("ckpt.10".to_string(), false, true)
        ]
    );
    assert_complete_datasets_intact(&c);
    // the failed flush gave its space back: another 640 KiB checkpoint nearly fits
    assert!(free_bytes(&c.prefix()) > 300_000, "{left:?}");

    // the caches are lost: ckpt.5 comes back from the full prefix, byte-exact
    wipe_caches(&c);
    let second = heat(&c, 10);
    assert_eq!(
        second.line_after("restarted from "),
        Some("ckpt.5 at step 5"),
        "{second}"
    );
    assert_eq!(second.final_state(), reference(10));
    assert!(
        !relative_files_below(&c.prefix())
            .iter()
            .any(|f| f.ends_with(".scr-part")),
        "{second}"
    );
    assert_eq!(app_files(&c), ckpt_files("ckpt.5"));

    // space is back: the next flush succeeds, and is what a run without caches fetches
    fs.resize("4m");
    let third = heat(&c, 15);
    assert!(
        third.line_after("restarted from ").is_some(),
        "restarts from its cache\n{third}"
    );
    assert!(!third.stderr.contains("stays in cache only"), "{third}");
    let ix = index(&c);
    assert!(ix.contains(&("ckpt.15".to_string(), true, false)), "{ix:?}");
    assert_complete_datasets_intact(&c);
    wipe_caches(&c);
    let fourth = heat(&c, 15);
    assert_eq!(
        fourth.line_after("restarted from "),
        Some("ckpt.15 at step 15"),
        "{fourth}"
    );
    assert_eq!(fourth.final_state(), reference(15));
    drop(fs);
}

/// Background flushes into a prefix that fills up: every checkpoint fully copied is
/// recorded complete (a later flush running out of space does not take it down with
/// it), no dataset is recorded that is not all there, and none leaves partial files.
#[test]
fn background_flushes_record_every_fully_copied_checkpoint_when_the_prefix_fills() {
    let mut c = Cluster::new();
    c.set("SCR_FLUSH", "1").set("SCR_FLUSH_ASYNC", "1");
    let fs = Tmpfs::mount(&c.prefix(), "1m");
    // a checkpoint (and a background flush) every step: several are running when the
    // prefix fills, and the ones fully copied must be recorded in a prefix full of the
    // others' files
    let out = heat_with(&c, 20, 1, SMALL);
    let left = relative_files_below(&c.prefix());
    assert!(
        !left.iter().any(|f| f.ends_with(".scr-part")),
        "partial files left: {left:?}\n{out}"
    );
    let ix = Index::load(&c.prefix()).unwrap();
    let complete: Vec<String> = ix
        .datasets
        .values()
        .filter(|e| e.complete)
        .map(|e| e.name.clone())
        .collect();
    assert!(!complete.is_empty(), "nothing recorded\n{out}");
    assert_complete_datasets_intact(&c);
    // the application's files in the prefix are exactly those of the complete datasets
    let expected: Vec<String> = {
        let mut v: Vec<String> = complete.iter().flat_map(|n| ckpt_files(n)).collect();
        v.sort();
        v
    };
    assert_eq!(app_files(&c), expected, "{out}");
    // a flush that is not recorded failed for lack of space in its own transfer (its
    // failed mark may not have fit in the index), never because recording a fully
    // copied one failed
    for e in ix.datasets.values().filter(|e| !e.complete) {
        let said = format!("{} stays in cache only: flush failed on rank ", e.name);
        let line = out
            .stderr
            .lines()
            .find(|l| l.contains(&said))
            .unwrap_or_else(|| {
                panic!(
                    "{} is not recorded, and not for a failed transfer\n{out}",
                    e.name
                )
            });
        assert!(line.contains("No space left on device"), "{line}");
        if let Some(why) = &e.failed {
            assert!(why.contains("No space left on device"), "{}: {why}", e.name);
        }
    }
    assert!(ix.datasets.values().any(|e| !e.complete), "{out}");
    // the newest recorded one is what a run without caches restarts from
    let newest = ix
        .datasets
        .values()
        .filter(|e| e.complete)
        .max_by_key(|e| e.checkpoint_id)
        .unwrap();
    let step: u64 = newest.name.strip_prefix("ckpt.").unwrap().parse().unwrap();
    wipe_caches(&c);
    c.set("SCR_FLUSH", "0");
    let again = heat_with(&c, step, 1, SMALL);
    assert_eq!(
        again.line_after("restarted from "),
        Some(format!("{} at step {step}", newest.name).as_str()),
        "{again}"
    );
    assert_eq!(
        again.final_state(),
        scr_e2e::reference_state(4, step, Some(8000))
    );
    drop(fs);
}

/// A job whose prefix is full when it finalizes (the halt file's exit reason cannot be
/// written) still ends with exit code 0 on every rank, and says why the reason is not
/// recorded.
#[test]
fn a_full_prefix_at_finalize_is_a_warning_and_the_job_exits_0() {
    let mut c = Cluster::new();
    c.set("SCR_FLUSH", "0");
    let fs = Tmpfs::mount(&c.prefix(), "1m");
    std::fs::create_dir(c.prefix().join(".scr")).unwrap();
    fs.fill("filler");
    let out = heat(&c, 10);
    assert!(out.stdout.contains("final step 10"), "{out}");
    assert!(
        out.stderr.contains(".scr/halt.scr")
            && out.stderr.contains("No space left on device")
            && out.stderr.contains("the exit reason is not recorded"),
        "{out}"
    );
    assert!(!c.prefix().join(".scr/halt.scr").exists(), "{out}");
    drop(fs);
}
