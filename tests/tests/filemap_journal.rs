//! The filemap's journal: routing a file appends one record to the
//! rank's filemap journal instead of rewriting the whole filemap, so recording F files
//! costs O(F) bytes and F + constant syncs, and the records survive a crash between
//! route_file and complete_output.

use std::path::PathBuf;

use scr_e2e::{files_below, Cluster};
use scr_host::runtime::Filemap;

/// Two ranks, one per simulated node.
const NODES: &[&str] = &["n0", "n1"];

/// Rank `rank`'s control directory (rank r runs on node `NODES[r]`).
fn cntl(c: &Cluster, rank: usize) -> PathBuf {
    c.path("cntl").join(NODES[rank]).join("e2e").join("scr.e2e")
}

/// The value on the line of `report` that starts with `key `.
fn value(report: &str, key: &str) -> u64 {
    report
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no `{key}` line in\n{report}"))
        .parse()
        .unwrap_or_else(|e| panic!("`{key}` in {report}: {e}"))
}

/// One checkpoint of `files` files per rank: (filemap bytes, filemap syncs) of the
/// costlier rank, and the cluster (for a restart).
fn checkpoint(files: usize) -> ((u64, u64), Cluster) {
    let c = Cluster::new();
    let out = c.run(NODES, "scr-probe", &["many-files", &files.to_string()]);
    assert_eq!(out.code, 0, "{out}");
    let mut cost = (0, 0);
    for report in c.probe_reports(NODES.len()) {
        assert_eq!(value(&report, "world"), 2, "{report}");
        assert!(report.contains("kept true\n"), "{report}");
        cost.0 = cost.0.max(value(&report, "filemap bytes"));
        cost.1 = cost.1.max(value(&report, "filemap syncs"));
    }
    (cost, c)
}

/// 1,000 routed files in one dataset: the filemap's bytes and syncs grow linearly in F,
/// and the dataset restarts with all 1,000 files.
#[test]
fn filemap_writes_grow_linearly_in_the_routed_files() {
    let ((bytes_100, syncs_100), _) = checkpoint(100);
    let ((bytes_1000, syncs_1000), c) = checkpoint(1000);
    // Each routed file appends one journal record (its length, CRC32 and a JSON name of
    // ~60 bytes) and syncs it once. Besides, a checkpoint saves the whole filemap a fixed
    // number of times (start_output, complete_output's redundancy names, the commit),
    // each 2 syncs (the snapshot and its directory) and about one snapshot's worth of
    // bytes (O(F)); the journal's header costs 2 syncs (itself and its directory). So
    // bytes = a + b·F and syncs = F + constant. Rewriting the filemap per file, as before
    // the journal, costs O(F²) bytes (a ratio near 100 here) and 2F syncs. Measured:
    // 54 kB / 108 syncs for 100 files, 524 kB / 1008 syncs for 1000 (8 fixed syncs).
    assert!(
        bytes_1000 < 12 * bytes_100,
        "filemap bytes: {bytes_100} for 100 files, {bytes_1000} for 1000: not linear"
    );
    const FIXED_SYNCS: u64 = 16;
    assert!(
        (100..=100 + FIXED_SYNCS).contains(&syncs_100),
        "{syncs_100} syncs for 100 files"
    );
    assert!(
        (1000..=1000 + FIXED_SYNCS).contains(&syncs_1000),
        "{syncs_1000} syncs for 1000 files"
    );
    // compacted by complete_output: no journal is left
    for r in 0..NODES.len() {
        let journal = cntl(&c, r).join(Filemap::journal_name(r as u32));
        assert!(!journal.exists(), "{}", journal.display());
    }
    let out = c.run(NODES, "scr-probe", &["restart-files", "1000"]);
    assert_eq!(out.code, 0, "{out}");
    for report in c.probe_reports(NODES.len()) {
        assert_eq!(value(&report, "world"), 2, "{report}");
        assert!(
            report.contains("restarted ckpt.1: 1000 of 1000 files intact\ncomplete true\n"),
            "{report}"
        );
    }
}

/// A rank killed (SIGKILL) after route_file and before complete_output: the names are
/// in the journal only (the snapshot was last saved by start_output), loading replays
/// them, and the next run's init removes the partial files and compacts the journal.
#[test]
fn a_crash_between_route_file_and_complete_output_leaves_the_names_known() {
    let c = Cluster::new();
    let out = c.run(NODES, "scr-probe", &["route-and-die"]);
    assert_ne!(out.code, 0, "the ranks were to be killed\n{out}");
    for (r, report) in c.probe_reports(NODES.len()).iter().enumerate() {
        assert_eq!(report, "world 2\nrouted 3\n", "rank {r}");
        let dir = cntl(&c, r);
        let journal = dir.join(Filemap::journal_name(r as u32));
        assert!(journal.is_file(), "{}", journal.display());
        let snapshot: Filemap =
            scr_host::state::read_state(&dir.join(Filemap::file_name(r as u32)), "filemap")
                .unwrap();
        let ds = &snapshot.datasets[&1];
        assert!(ds.files.is_empty(), "rank {r}: {ds:?}");
        let map = Filemap::load(&dir, r as u32).unwrap();
        let ds = &map.datasets[&1];
        assert!(!ds.complete);
        let names: Vec<&str> = ds.files.iter().map(|f| f.name.as_str()).collect();
        let want: Vec<String> = (0..3).map(|i| format!("c{i}_{r}.dat")).collect();
        assert_eq!(names, want, "rank {r}");
    }
    let written = |node: &str| -> Vec<String> {
        files_below(&c.cache_dir(node))
            .iter()
            .filter_map(|p| p.file_name()?.to_str().map(str::to_string))
            .filter(|n| n.ends_with(".dat"))
            .collect()
    };
    assert_eq!(written("n0"), ["c0_0.dat", "c1_0.dat"]);
    assert_eq!(written("n1"), ["c0_1.dat", "c1_1.dat"]);

    let out = c.run(NODES, "scr-probe", &["candidate"]);
    assert_eq!(out.code, 0, "{out}");
    for (r, report) in c.probe_reports(NODES.len()).iter().enumerate() {
        assert_eq!(report, "candidate None\n", "rank {r}");
        let dir = cntl(&c, r);
        assert!(!dir.join(Filemap::journal_name(r as u32)).exists());
        assert!(Filemap::load(&dir, r as u32).unwrap().datasets.is_empty());
    }
    assert_eq!(written("n0"), Vec::<String>::new());
    assert_eq!(written("n1"), Vec::<String>::new());
}
