//! Files a rebuild writes are recorded before they exist: a node dying in the middle of
//! a rebuild (the fixture scheme CRASHREBUILD exits on the member that lost its files,
//! after writing part of its redundancy file) leaves no file in cache that no filemap
//! names, and the next run cleans it up and rebuilds.

use std::collections::BTreeSet;
use std::path::PathBuf;

use scr_e2e::{files_below, Cluster, JobOutput};
use scr_host::runtime::Filemap;

const FOUR_NODES: &[&str] = &["n0", "n1", "n2", "n3"];
const CELLS: &str = "3000";

fn heat(c: &Cluster, steps: u64) -> JobOutput {
    c.run(
        FOUR_NODES,
        "scr-heat",
        &["--steps", &steps.to_string(), "--cells", CELLS],
    )
}

/// Files in node `node`'s cache that no filemap of the node names (as (dataset id,
/// name inside the dataset directory)).
fn unrecorded(c: &Cluster, node: &str) -> Vec<PathBuf> {
    let mut recorded = BTreeSet::new();
    for path in files_below(&c.path("cntl").join(node)) {
        let Some(rank) = path
            .file_name()
            .and_then(|n| Filemap::owner_of(&n.to_string_lossy()))
        else {
            continue;
        };
        let map = Filemap::load(path.parent().unwrap(), rank).unwrap();
        for d in map.datasets.values() {
            for name in d
                .files
                .iter()
                .map(|f| f.name.clone())
                .chain(d.redundancy.iter().cloned())
            {
                recorded.insert((d.id, PathBuf::from(name)));
            }
        }
    }
    files_below(&c.path("cache").join(node))
        .into_iter()
        .filter(|p| {
            // <store>/<user>/scr.<job>/scr.dataset.<id>/<name>
            let known = p.ancestors().find_map(|a| {
                let id = a.file_name()?.to_str()?.strip_prefix("scr.dataset.")?;
                Some((id.parse().ok()?, p.strip_prefix(a).ok()?.to_path_buf()))
            });
            !known.is_some_and(|k| recorded.contains(&k))
        })
        .collect()
}

#[test]
fn a_crash_in_the_middle_of_a_rebuild_leaves_no_unrecorded_file_and_the_next_run_rebuilds() {
    let mut c = Cluster::new();
    c.load_plugins(&["libscr_fixture_untrustworthy.so"])
        .set("SCR_COPY_TYPE", "CRASHREBUILD")
        .set("SCR_CACHE_SIZE", "2")
        .set("SCR_FLUSH", "0");
    let first = heat(&c, 12);
    assert_eq!(first.code, 0, "{first}");
    assert!(first.stdout.contains("checkpoint ckpt.10: kept"), "{first}");

    // node n1 (rank 1) is lost; rank 1 dies while its files are being rebuilt
    c.lose_node("n1");
    c.set("SCR_FIXTURE_CRASH_REBUILD", "1");
    let crashed = heat(&c, 20);
    assert_ne!(crashed.code, 0, "{crashed}");
    let left = files_below(&c.path("cache").join("n1"));
    assert!(
        left.iter().any(|p| p
            .to_string_lossy()
            .ends_with(".crashrebuild.mem_1_of_4.redset")),
        "the fixture wrote part of its redundancy file: {left:?}\n{crashed}"
    );
    for node in FOUR_NODES {
        assert_eq!(
            unrecorded(&c, node),
            Vec::<PathBuf>::new(),
            "node {node}\n{crashed}"
        );
    }

    // the next run deletes what the crashed rebuild left and rebuilds
    c.env.remove("SCR_FIXTURE_CRASH_REBUILD");
    let second = heat(&c, 20);
    assert_eq!(second.code, 0, "{second}");
    assert_eq!(
        second.line_after("restarted from "),
        Some("ckpt.10 at step 10"),
        "{second}"
    );
    assert_eq!(
        second.final_state(),
        scr_e2e::reference_state(4, 20, Some(CELLS.parse().unwrap()))
    );
    for node in FOUR_NODES {
        assert_eq!(unrecorded(&c, node), Vec::<PathBuf>::new(), "node {node}");
    }
}
