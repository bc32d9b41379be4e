//! The README's Rust example (built verbatim as `scr-readme-example`) run as an
//! application would: two ranks on two simulated nodes checkpoint 20 steps; a second run
//! restarts from the newest checkpoint after one node is lost, rebuilding its file. Each
//! rank must have its own file — an example that routes one name on every rank fails here.

use scr_e2e::{files_below, Cluster};

/// The files `state_<rank>.bin` below the node's cache, with their contents.
fn states(c: &Cluster, node: &str) -> Vec<(String, Vec<u8>)> {
    let mut found: Vec<(String, Vec<u8>)> = files_below(&c.cache_dir(node))
        .into_iter()
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("state_") && n.ends_with(".bin"))
        })
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect();
    found.sort();
    found
}

#[test]
fn the_readme_example_checkpoints_restarts_and_survives_a_lost_node() {
    let c = Cluster::new();
    let nodes = ["n0", "n1"];
    let out = c.run(&nodes, "scr-readme-example", &[]);
    assert_eq!(out.code, 0, "{out}");
    let twenty = 20u64.to_le_bytes().to_vec();
    // the newest checkpoint holds each rank's own file with step 20 (older ones may be
    // kept too; every kept one is per rank)
    for (node, rank) in [("n0", 0), ("n1", 1)] {
        let files = states(&c, node);
        assert!(
            files.contains(&(format!("state_{rank}.bin"), twenty.clone())),
            "{node}: {files:?}\n{out}"
        );
        assert!(
            files.iter().all(|(n, _)| n == &format!("state_{rank}.bin")),
            "{node} holds another rank's file: {files:?}"
        );
    }
    // lose node n1; the second run rebuilds its file and restarts from step 20, so it
    // writes no checkpoint beyond it
    c.lose_node("n1");
    assert!(states(&c, "n1").is_empty());
    let out = c.run(&nodes, "scr-readme-example", &[]);
    assert_eq!(out.code, 0, "{out}");
    let rebuilt = states(&c, "n1");
    assert!(
        rebuilt.contains(&("state_1.bin".to_string(), twenty.clone())),
        "{rebuilt:?}\n{out}"
    );
    assert!(
        !files_below(&c.cache_dir("n0"))
            .iter()
            .any(|p| p.to_string_lossy().contains("ckpt.21")),
        "the second run did not restart from step 20\n{out}"
    );
}
