//! Init restoring the cache: a node lost after a checkpoint rebuilt through XOR, the
//! prefix's flush file made to list exactly what the cache holds, and the run's node
//! count recorded.

use super::*;

#[test]
fn a_node_lost_after_a_checkpoint_is_rebuilt_through_xor_in_process() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("prefix")).unwrap();
    let nodes = ["n0", "n1", "n2", "n3"];
    let wrote = run(dir.path(), &nodes, Some(5));
    assert_eq!(wrote, vec![Ok("wrote ckpt.5".to_string()); 4], "{wrote:?}");

    // node n2 loses its cache and control directories
    for base in ["cache", "cntl"] {
        let lost = dir.path().join(base).join("n2");
        assert!(lost.is_dir(), "{} was written", lost.display());
        std::fs::remove_dir_all(&lost).unwrap();
    }
    let restarted = run(dir.path(), &nodes, None);
    assert_eq!(
        restarted,
        vec![Ok("restarted from ckpt.5, byte-exact".to_string()); 4],
        "{restarted:?}"
    );

    // two nodes of the one XOR set lost (one beyond what XOR tolerates), nothing
    // flushed: the checkpoint is dropped and no restart offered, alike on every rank
    for node in ["n0", "n3"] {
        for base in ["cache", "cntl"] {
            std::fs::remove_dir_all(dir.path().join(base).join(node)).unwrap();
        }
    }
    let after = run(dir.path(), &nodes, None);
    assert_eq!(after, vec![Ok("no restart".to_string()); 4], "{after:?}");
}

/// The prefix's flush file as `id: LOCATIONS` lines.
fn flush_file(prefix: &Path) -> Vec<String> {
    crate::state::prefix::FlushFile::load(prefix)
        .unwrap()
        .datasets
        .iter()
        .map(|(id, (at, _))| format!("{id}: {}", at.join(" ")))
        .collect()
}

/// Init makes the flush file list exactly what the cache holds once restored (SCR's
/// `scr_flush_file_rebuild`): CACHE entries of datasets no cache holds any more go (the
/// entry with them when nothing else is left, PFS stays), a cached dataset the file
/// missed gets one; and a new allocation (every cache gone) leaves only PFS entries.
#[test]
fn init_makes_the_flush_file_list_exactly_the_datasets_in_cache() {
    use crate::state::prefix::{FlushFile, CACHE, PFS};
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("prefix");
    let nodes = ["n0", "n0", "n1", "n1"];
    let env = [
        ("SCR_COPY_TYPE", "SINGLE"),
        ("SCR_FLUSH", "0"),
        ("SCR_FLUSH_ON_FINALIZE", "0"),
        ("SCR_CACHE_SIZE", "2"),
    ];
    job(dir.path(), &nodes, &env, |rt, r| {
        write_range(rt, dir.path(), r, 1..=2)
    });
    assert_eq!(flush_file(&prefix), ["1: CACHE", "2: CACHE"]);
    // entries of caches that are gone (7 in cache only; 8 also flushed), and a cached
    // dataset (2) the file lost
    FlushFile::add_location(&prefix, 7, CACHE).unwrap();
    FlushFile::add_location(&prefix, 8, CACHE).unwrap();
    FlushFile::add_location(&prefix, 8, PFS).unwrap();
    FlushFile::remove_location(&prefix, 2, CACHE).unwrap();
    assert_eq!(
        flush_file(&prefix),
        ["1: CACHE", "7: CACHE", "8: CACHE PFS"]
    );

    let seen = job(dir.path(), &nodes, &env, |_, r| {
        (r == 0).then(|| flush_file(&prefix))
    });
    let seen = seen[0].0.clone().unwrap();
    assert_eq!(seen, ["1: CACHE", "2: CACHE", "8: PFS"], "after init");

    // a new allocation: no cache and no control directory survive
    for base in ["cache", "cntl"] {
        std::fs::remove_dir_all(dir.path().join(base)).unwrap();
    }
    job(dir.path(), &nodes, &env, |_, _| ());
    assert_eq!(flush_file(&prefix), ["8: PFS"]);
}

/// Init records how many nodes the run uses in each node's control directory and, for
/// `scr run`'s relaunch count, in the prefix.
#[test]
fn init_records_the_runs_node_count_in_the_prefix_and_each_control_directory() {
    use crate::state::nodes::Nodes;
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["n0", "n1", "n1", "n2"];
    job(dir.path(), &nodes, &[], |_, _| ());
    let prefix = dir.path().join("prefix");
    let read = |p: &Path| Nodes::read(p).map(|n| n.nodes).map_err(|e| e.to_string());
    assert_eq!(read(&crate::layout::prefix_nodes_file(&prefix)), Ok(3));
    for node in ["n0", "n1", "n2"] {
        let cntl = crate::layout::job_dir(&dir.path().join("cntl"), true, node, USER, JOB);
        assert_eq!(read(&crate::layout::nodes_file(&cntl)), Ok(3), "{node}");
    }
}
