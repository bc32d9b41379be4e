//! `scr postrun` (scavenge) end to end: an MPI job of the heat example on simulated nodes
//! is killed after its newest checkpoint, which is only in node-local cache (`flush = 0`
//! or a flush interval it never reached); postrun copies it into the prefix — rebuilding
//! lost or damaged ranks through XOR — and a job in a fresh cache restarts from it and
//! ends in an uninterrupted run's state. What cannot be rebuilt is refused, leaving the
//! prefix exactly as it was.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use scr_e2e::{binary, files_below, mpi_env, reference_state, Cluster, JobOutput};
use scr_host::state::prefix::{Index, Rank2File};

const TWO_NODES: &[&str] = &["n0", "n0", "n1", "n1"];
const THREE_NODES: &[&str] = &["n0", "n0", "n1", "n1", "n2", "n2"];

/// A cluster whose jobs protect checkpoints with XOR and flush every `flush`-th one.
fn cluster(flush: u64) -> Cluster {
    let mut c = Cluster::new();
    c.set("SCR_COPY_TYPE", "XOR")
        .set("SCR_FLUSH", &flush.to_string());
    c
}

/// `scr ARGS` run serially in the prefix with the jobs' environment (the job id, bases
/// and simulated node names the killed job had), as a batch script would after the step.
fn scr(c: &Cluster, nodes: &[&str], args: &[&str]) -> JobOutput {
    let mut cmd = Command::new("timeout");
    cmd.args(["60", binary("scr").to_str().unwrap()]).args(args);
    cmd.current_dir(c.prefix());
    for (k, v) in mpi_env() {
        cmd.env(k, v);
    }
    cmd.env("SCR_CACHE_BASE", c.path("cache"))
        .env("SCR_CNTL_BASE", c.path("cntl"))
        .env("SCR_JOB_ID", "e2e")
        .env("SCR_NODE_NAMES", nodes.join(","))
        .env("SCR_SYSTEM_CONFIG", "/dev/null")
        .env_remove("SCR_CONF_FILE");
    for (k, v) in &c.env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("scr runs");
    JobOutput {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Run 20 steps, checkpointing every 5, and kill rank 1 with SIGKILL after step 17: the
/// newest checkpoint, ckpt.15 (dataset 3), is only in cache.
fn killed_job(c: &Cluster, nodes: &[&str]) {
    let out = c.run(
        nodes,
        "scr-heat",
        &["--steps", "20", "--kill-at", "17", "--kill-rank", "1"],
    );
    assert_ne!(out.code, 0, "the job was killed\n{out}");
    assert!(out.stdout.contains("checkpoint ckpt.15: kept"), "{out}");
}

/// The cached file of rank `rank` of ckpt.15 on `node`.
fn cached(c: &Cluster, node: &str, rank: usize) -> PathBuf {
    c.cache_dir(node)
        .join(format!("scr.dataset.3/ckpt.15/rank_{rank}.ckpt"))
}

/// Start again in a fresh cache (every node's cache and control directories gone): the
/// job must fetch ckpt.15 from the prefix and end in the uninterrupted run's state.
fn restart_fresh(c: &Cluster, nodes: &[&str]) {
    for base in ["cache", "cntl"] {
        let _ = std::fs::remove_dir_all(c.path(base));
        std::fs::create_dir(c.path(base)).unwrap();
    }
    let out = c.run(nodes, "scr-heat", &["--steps", "20"]);
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        out.line_after("restarted from "),
        Some("ckpt.15 at step 15"),
        "{out}"
    );
    assert_eq!(out.final_state(), reference_state(nodes.len(), 20, None));
}

/// Every file below the prefix with its contents (the lock file, whose text names the
/// last holder, aside).
fn snapshot(prefix: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    files_below(prefix)
        .into_iter()
        .filter(|p| !p.ends_with(".scr/lock"))
        .map(|p| {
            let b = std::fs::read(&p).unwrap();
            (p, b)
        })
        .collect()
}

#[test]
fn postrun_after_a_kill_saves_the_newest_checkpoint_and_a_fresh_cache_restarts_from_it() {
    let mut c = cluster(0);
    killed_job(&c, TWO_NODES);
    assert!(
        Index::load(&c.prefix()).unwrap().datasets.is_empty(),
        "flush = 0: nothing in the prefix yet"
    );
    // SCR_ENABLE=0 (as SCR's scr_postrun): nothing is done, and that is no failure
    c.set("SCR_ENABLE", "0");
    let disabled = scr(&c, TWO_NODES, &["postrun"]);
    assert_eq!(disabled.code, 0, "{disabled}");
    assert_eq!(
        disabled.stdout,
        "SCR is disabled (enable = false, SCR_ENABLE=0): postrun has nothing to do\n",
        "{disabled}"
    );
    assert!(Index::load(&c.prefix()).unwrap().datasets.is_empty());
    assert!(!c.prefix().join("ckpt.15").exists());
    c.env.remove("SCR_ENABLE");
    let out = scr(&c, TWO_NODES, &["postrun"]);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stdout.contains(&format!(
            "added ckpt.15 (dataset 3) to the index of {}, restart point",
            c.prefix().display()
        )),
        "{out}"
    );
    // nothing lost: only the application files are read, no redundancy file
    assert!(!out.stdout.contains("redundancy"), "{out}");
    for (rank, node) in TWO_NODES.iter().enumerate() {
        assert!(
            out.stdout
                .contains(&format!("{node}: rank {rank}: 1 file(s) of ckpt.15")),
            "{out}"
        );
        let flushed = c.prefix().join(format!("ckpt.15/rank_{rank}.ckpt"));
        assert_eq!(
            std::fs::read(&flushed).unwrap(),
            std::fs::read(cached(&c, node, rank)).unwrap(),
            "{}",
            flushed.display()
        );
    }
    let ix = Index::load(&c.prefix()).unwrap();
    assert_eq!(ix.current.as_deref(), Some("ckpt.15"));
    let e = &ix.datasets[&3];
    assert!(
        e.complete && e.failed.is_none() && e.world_size == 4,
        "{e:?}"
    );
    let map = Rank2File::load(&c.prefix(), 3).unwrap();
    assert_eq!(map.ranks.len(), 4);
    assert!(map.ranks.values().flatten().all(|f| f.crc32.is_some()));
    // nothing of the staging copies (redundancy files included) is left
    assert!(!c.prefix().join(".scr/scr.dataset.3/scavenge").exists());
    assert!(
        files_below(&c.prefix())
            .iter()
            .all(|p| !p.to_string_lossy().ends_with(".redset")),
        "{:?}",
        files_below(&c.prefix())
    );
    // run again: nothing left to do
    let again = scr(&c, TWO_NODES, &["postrun"]);
    assert_eq!(again.code, 0, "{again}");
    assert!(
        again
            .stdout
            .contains("ckpt.15 (dataset 3), the newest in cache, is in the prefix already"),
        "{again}"
    );
    restart_fresh(&c, TWO_NODES);
}

#[test]
fn postrun_rebuilds_a_lost_nodes_files_through_xor_byte_exact() {
    let c = cluster(0);
    killed_job(&c, TWO_NODES);
    let originals: Vec<Vec<u8>> = [2, 3]
        .iter()
        .map(|&r| std::fs::read(cached(&c, "n1", r)).unwrap())
        .collect();
    c.lose_node("n1");
    let out = scr(&c, TWO_NODES, &["postrun"]);
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.contains("n1: no control directory"), "{out}");
    assert!(
        out.stdout.contains("rebuilt the files of ranks [2, 3]"),
        "{out}"
    );
    // the survivors' parity is read because their sets lost a member
    assert!(
        out.stdout
            .contains("node n0: copied ranks [0, 1]; redundancy of ranks [0, 1]"),
        "{out}"
    );
    assert!(
        out.stdout.contains("node n1: no files of this dataset"),
        "{out}"
    );
    for (i, r) in [2, 3].iter().enumerate() {
        let p = c.prefix().join(format!("ckpt.15/rank_{r}.ckpt"));
        assert_eq!(std::fs::read(&p).unwrap(), originals[i], "{}", p.display());
    }
    // the event log has the lost node and the scavenge with its rebuilt ranks
    let (records, damaged) = scr_host::events::read(&c.prefix()).unwrap();
    assert_eq!(damaged, 0);
    let tail: Vec<&scr_host::events::Event> = records
        .iter()
        .rev()
        .take(2)
        .rev()
        .map(|r| &r.event)
        .collect();
    assert!(
        matches!(tail[0], scr_host::events::Event::LostNodes { nodes } if nodes == &["n1"]),
        "{tail:?}"
    );
    assert!(
        matches!(tail[1], scr_host::events::Event::Scavenge { name, id: 3, bytes, rebuilt_ranks, .. }
            if name == "ckpt.15" && *bytes == 4 * 32776 && rebuilt_ranks == &[2, 3]),
        "{tail:?}"
    );
    restart_fresh(&c, TWO_NODES);
}

#[test]
fn two_lost_members_of_one_xor_set_are_refused_and_the_prefix_is_left_as_it_was() {
    // ckpt.10 (checkpoint 2) is flushed by the job, ckpt.15 is not
    let c = cluster(2);
    killed_job(&c, THREE_NODES);
    let ix = Index::load(&c.prefix()).unwrap();
    assert_eq!(ix.current.as_deref(), Some("ckpt.10"), "{ix:?}");
    // XOR sets {0, 2, 4} and {1, 3, 5}: losing n1 and n2 loses two members of each
    c.lose_node("n1");
    c.lose_node("n2");
    let before = snapshot(&c.prefix());
    let out = scr(&c, THREE_NODES, &["postrun"]);
    assert_eq!(out.code, 1, "{out}");
    for (set, lost) in [
        ("set 0 (ranks [0, 2, 4])", "[2, 4]"),
        ("set 1 (ranks [1, 3, 5])", "[3, 5]"),
    ] {
        assert!(
            out.stderr.contains(&format!(
                "{set}: ranks {lost} cannot be rebuilt through XOR"
            )),
            "{out}"
        );
    }
    assert!(
        out.stderr
            .contains("rank 2: no copy: its node's cache or control directory is gone or was not reachable (node n1)"),
        "{out}"
    );
    assert!(
        out.stderr
            .contains("nothing was added to the index. The restart point stays ckpt.10."),
        "{out}"
    );
    assert_eq!(
        snapshot(&c.prefix()),
        before,
        "the prefix is byte for byte as it was"
    );
    let ix = Index::load(&c.prefix()).unwrap();
    assert!(!ix.datasets.contains_key(&3), "{ix:?}");
    assert_eq!(ix.current.as_deref(), Some("ckpt.10"));
}

#[test]
fn a_flipped_byte_in_cache_is_detected_and_rebuilt_never_copied_as_good() {
    let c = cluster(0);
    killed_job(&c, TWO_NODES);
    let victim = cached(&c, "n1", 2);
    let good = std::fs::read(&victim).unwrap();
    let mut bad = good.clone();
    bad[100] ^= 0x40;
    std::fs::write(&victim, &bad).unwrap();
    let out = scr(&c, TWO_NODES, &["postrun"]);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stdout.contains(&format!(
            "n1: rank 2: NOT copied: ckpt.15/rank_2.ckpt: expected {} bytes CRC32 {:08x} (recorded in the filemap)",
            good.len(),
            crc32fast::hash(&good)
        )) && out
            .stdout
            .contains(&format!("CRC32 {:08x}", crc32fast::hash(&bad))),
        "{out}"
    );
    assert!(
        out.stdout.contains("rebuilt the files of ranks [2]"),
        "{out}"
    );
    assert_eq!(
        std::fs::read(c.prefix().join("ckpt.15/rank_2.ckpt")).unwrap(),
        good,
        "rebuilt byte-exact from XOR, not copied from the damaged cache"
    );
    restart_fresh(&c, TWO_NODES);
}

#[test]
fn a_flipped_byte_whose_set_partner_is_lost_is_refused() {
    let c = cluster(0);
    killed_job(&c, TWO_NODES);
    // XOR sets {0, 2} and {1, 3}: n0 (ranks 0, 1) lost and rank 2's file damaged
    let victim = cached(&c, "n1", 2);
    let mut bytes = std::fs::read(&victim).unwrap();
    bytes[7] ^= 1;
    std::fs::write(&victim, &bytes).unwrap();
    c.lose_node("n0");
    let out = scr(&c, TWO_NODES, &["postrun"]);
    assert_eq!(out.code, 1, "{out}");
    assert!(
        out.stderr
            .contains("set 0 (ranks [0, 2]): no member survived, ranks [0, 2] cannot be rebuilt")
            && out
                .stderr
                .contains("rank 2: ckpt.15/rank_2.ckpt: expected 32776 bytes CRC32"),
        "{out}"
    );
    assert!(
        !c.prefix().join("ckpt.15").exists(),
        "{:?}",
        files_below(&c.prefix())
    );
    assert!(out
        .stderr
        .contains("The prefix holds no checkpoint to restart from."));
    assert!(Index::load(&c.prefix()).unwrap().datasets.is_empty());
}

#[test]
fn a_taken_name_in_the_prefix_is_never_overwritten_the_dataset_goes_to_its_own_directory() {
    let c = cluster(0);
    killed_job(&c, TWO_NODES);
    // a file of that name the prefix already holds (an older run's, the user's)
    let taken = c.prefix().join("ckpt.15/rank_0.ckpt");
    std::fs::create_dir_all(taken.parent().unwrap()).unwrap();
    std::fs::write(&taken, b"not scr's to overwrite").unwrap();
    let out = scr(&c, TWO_NODES, &["postrun"]);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stdout
            .contains("its files are in .scr/scr.dataset.3/files/"),
        "{out}"
    );
    assert_eq!(std::fs::read(&taken).unwrap(), b"not scr's to overwrite");
    for (rank, node) in TWO_NODES.iter().enumerate() {
        let p = c
            .prefix()
            .join(format!(".scr/scr.dataset.3/files/ckpt.15/rank_{rank}.ckpt"));
        assert_eq!(
            std::fs::read(&p).unwrap(),
            std::fs::read(cached(&c, node, rank)).unwrap()
        );
    }
    restart_fresh(&c, TWO_NODES);
}

#[test]
fn per_node_scavenge_then_postrun_without_copying_as_a_site_script_runs_them() {
    let c = cluster(0);
    killed_job(&c, TWO_NODES);
    // each node's step, as `pdsh` or `srun --ntasks-per-node=1` would run it there
    for node in ["n0", "n1"] {
        let out = scr(&c, TWO_NODES, &["scavenge", "--node", node]);
        assert_eq!(out.code, 0, "{out}");
        assert!(out.stdout.contains("dataset 3: staged in"), "{out}");
    }
    assert!(
        Index::load(&c.prefix()).unwrap().datasets.is_empty(),
        "staged only: nothing in the index yet"
    );
    let out = scr(&c, TWO_NODES, &["postrun", "--no-copy"]);
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.contains("added ckpt.15 (dataset 3)"), "{out}");
    assert!(!out.stdout.contains("copied"), "{out}");
    restart_fresh(&c, TWO_NODES);
}

#[test]
fn a_failure_after_the_files_were_moved_into_place_undoes_everything() {
    let c = cluster(0);
    killed_job(&c, TWO_NODES);
    // the summary cannot be written (a directory holds its name): rank2file was already
    // written and every file moved into place when that fails
    let blocker = c.prefix().join(".scr/scr.dataset.3/summary.scr");
    std::fs::create_dir_all(&blocker).unwrap();
    let before = snapshot(&c.prefix());
    let out = scr(&c, TWO_NODES, &["postrun"]);
    assert_eq!(out.code, 1, "{out}");
    assert!(
        out.stderr.contains("summary.scr") && out.stderr.contains("nothing was added to the index"),
        "{out}"
    );
    assert_eq!(snapshot(&c.prefix()), before, "nothing half-added");
    assert!(!c.prefix().join("ckpt.15").exists());
    assert!(!c.prefix().join(".scr/scr.dataset.3/rank2file.scr").exists());
    assert!(!c.prefix().join(".scr/scr.dataset.3/scavenge").exists());
    assert!(Index::load(&c.prefix()).unwrap().datasets.is_empty());
    // once the cause is gone, postrun succeeds from the cache, which still holds it all
    std::fs::remove_dir(&blocker).unwrap();
    let out = scr(&c, TWO_NODES, &["postrun"]);
    assert_eq!(out.code, 0, "{out}");
    restart_fresh(&c, TWO_NODES);
}

#[test]
fn a_control_directory_others_can_write_is_not_trusted() {
    use std::os::unix::fs::PermissionsExt;
    let c = cluster(0);
    killed_job(&c, TWO_NODES);
    // anyone could have put filemaps there naming files to copy into the prefix
    let cntl = c.path("cntl/n1/e2e/scr.e2e");
    std::fs::set_permissions(&cntl, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = scr(&c, TWO_NODES, &["postrun"]);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stderr.contains("scr[node=n1]: warning: ")
            && out
                .stderr
                .contains("its filemaps are not trusted and its ranks count as lost"),
        "{out}"
    );
    // its ranks are rebuilt from n0's redundancy data instead, byte-exact
    assert!(
        out.stdout.contains("rebuilt the files of ranks [2, 3]"),
        "{out}"
    );
    for (rank, node) in TWO_NODES.iter().enumerate() {
        assert_eq!(
            std::fs::read(c.prefix().join(format!("ckpt.15/rank_{rank}.ckpt"))).unwrap(),
            std::fs::read(cached(&c, node, rank)).unwrap()
        );
    }
}

#[test]
fn the_files_of_a_flush_the_kill_interrupted_are_replaced_not_left_beside_it() {
    // ckpt.15 is the third checkpoint: its flush starts, rank 1 dies after copying its
    // files and before the flush is recorded (the index entry stays open)
    let mut c = cluster(3);
    c.set("SCR_FAULT", "flush-copied:1");
    let out = c.run(TWO_NODES, "scr-heat", &["--steps", "20"]);
    assert_ne!(out.code, 0, "{out}");
    c.env.remove("SCR_FAULT");
    let ix = Index::load(&c.prefix()).unwrap();
    assert!(
        ix.datasets
            .get(&3)
            .is_some_and(|e| !e.complete && e.failed.is_none()),
        "the flush of ckpt.15 was left open: {ix:?}"
    );
    assert!(
        c.prefix().join("ckpt.15/rank_1.ckpt").exists(),
        "rank 1 copied its file before it died"
    );
    let out = scr(&c, TWO_NODES, &["postrun"]);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stdout
            .contains("file(s) that an interrupted flush of ckpt.15 left in the prefix"),
        "{out}"
    );
    assert!(!out.stdout.contains("its names were taken"), "{out}");
    for (rank, node) in TWO_NODES.iter().enumerate() {
        assert_eq!(
            std::fs::read(c.prefix().join(format!("ckpt.15/rank_{rank}.ckpt"))).unwrap(),
            std::fs::read(cached(&c, node, rank)).unwrap()
        );
    }
    assert!(!c.prefix().join(".scr/scr.dataset.3/files").exists());
    assert!(
        files_below(&c.prefix())
            .iter()
            .all(|p| !p.to_string_lossy().ends_with(".scr-part")),
        "{:?}",
        files_below(&c.prefix())
    );
    let ix = Index::load(&c.prefix()).unwrap();
    assert!(ix.datasets[&3].complete && ix.current.as_deref() == Some("ckpt.15"));
    restart_fresh(&c, TWO_NODES);
}

/// A rank whose files are on two nodes (a relaunch on other nodes left the old ones) is
/// copied from one node only — the first in the allocation's order — and the other
/// node's report says so; the dataset is added byte-exact.
#[test]
fn a_rank_cached_on_two_nodes_is_copied_once() {
    let c = cluster(0);
    killed_job(&c, TWO_NODES);
    // rank 1's filemap and cached files also on n1
    let user = c.cache_dir("n0");
    let job = user.strip_prefix(c.path("cache").join("n0")).unwrap();
    for base in ["cache", "cntl"] {
        let from = c.path(base).join("n0").join(job);
        let to = c.path(base).join("n1").join(job);
        let st = Command::new("cp")
            .arg("-a")
            .arg(format!("{}/.", from.display()))
            .arg(&to)
            .status()
            .unwrap();
        assert!(st.success());
        // only rank 1's filemap is duplicated (rank 0's stays on n0 alone)
        if base == "cntl" {
            let _ = std::fs::remove_file(to.join("filemap_0.scr"));
        }
    }
    let out = scr(&c, TWO_NODES, &["postrun"]);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stdout
            .contains("node n1: copied ranks [2, 3]; rank 1 also here, copied from n0\n"),
        "{out}"
    );
    assert!(
        out.stdout.contains("node n0: copied ranks [0, 1]\n"),
        "{out}"
    );
    assert_eq!(
        out.stdout.matches(": rank 1: 1 file(s) of ckpt.15").count(),
        1,
        "{out}"
    );
    for (rank, node) in TWO_NODES.iter().enumerate() {
        let flushed = c.prefix().join(format!("ckpt.15/rank_{rank}.ckpt"));
        assert_eq!(
            std::fs::read(&flushed).unwrap(),
            std::fs::read(cached(&c, node, rank)).unwrap()
        );
    }
}
