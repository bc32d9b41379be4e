//! Real host names instead of `SCR_NODE_NAMES`: each rank runs in its own UTS and mount
//! namespace (`unshare --uts --mount`) with the host name `node0` or `node1` and that
//! node's own directories bind-mounted over the shared cache and control bases, so the
//! runtime finds its node through the host name (not the testing override) and keeps its
//! cache where a real node would: at the base itself, with no node name in the path.
//!
//! The heat stencil checkpoints with XOR across the two nodes (ranks 0,1 on node0, 2,3 on
//! node1), node1's cache and control directories are emptied, and the restart rebuilds
//! them through XOR and ends in the state of an uninterrupted run. Had the ranks not told
//! their nodes apart, all four would share one XOR set on one "node" and losing two of
//! them would be beyond repair.
//!
//! The node directories live on disk and are bind-mounted afresh in every rank's
//! namespace (a tmpfs mounted inside a namespace would vanish with it, taking the
//! surviving node's cache along). Needs root and unshare; skipped with a message where
//! they are not permitted.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use scr_e2e::{Cluster, JobOutput};

const NODES: &[&str] = &["node0", "node0", "node1", "node1"];
const CELLS: &str = "3000";

/// The wrapper every rank starts through: picks its node from its rank, hides
/// `SCR_NODE_NAMES`, and enters a namespace with that host name and that node's
/// directories over the bases.
const WRAPPER: &str = r#"#!/bin/sh
# usage: node.sh CLUSTER_DIR PROGRAM ARGS... (ranks 0,1 on node0, 2,3 on node1)
dir=$1; shift
n=$(( ${OMPI_COMM_WORLD_RANK:?not started by OpenMPI} / 2 ))
unset SCR_NODE_NAMES
exec unshare --uts --mount sh -c '
  n=$1 dir=$2; shift 2
  hostname "node$n" &&
  mount --bind "$dir/node$n/cache" "$dir/cache" &&
  mount --bind "$dir/node$n/cntl" "$dir/cntl" || { echo "node$n: namespace setup failed" >&2; exit 97; }
  exec "$@"' sh "$n" "$dir" "$@"
"#;

/// Why this machine cannot run the test, if it cannot: not root, or unshare / a bind
/// mount inside it refused.
fn unsupported(scratch: &Path) -> Option<String> {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if !root {
        return Some("needs root (unshare --uts --mount and bind mounts)".into());
    }
    let (a, b) = (scratch.join("probe-a"), scratch.join("probe-b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    let probe = Command::new("unshare")
        .args(["--uts", "--mount", "sh", "-c"])
        .arg(r#"hostname probe && mount --bind "$0" "$1" && test "$(cat /proc/sys/kernel/hostname)" = probe"#)
        .arg(&a)
        .arg(&b)
        .output();
    match probe {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!(
            "unshare --uts --mount with hostname and a bind mount is not permitted here: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Some(format!("unshare cannot be run: {e}")),
    }
}

fn heat(c: &Cluster, wrapper: &str, steps: u64) -> JobOutput {
    let dir = c.path("");
    let dir = dir.to_str().unwrap().trim_end_matches('/');
    let out = c.run_wrapped(
        NODES,
        &[wrapper, dir],
        "scr-heat",
        &["--steps", &steps.to_string(), "--cells", CELLS],
    );
    // the world size: one `ranks 4` line (a wrong mpiexec runs singletons)
    let sizes: Vec<&str> = out
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("ranks "))
        .collect();
    assert_eq!(sizes, ["4"], "{out}");
    out
}

/// The relative paths of the files below `dir`.
fn files(dir: &Path) -> Vec<String> {
    scr_e2e::relative_files_below(dir)
}

/// Empty `dir`, keeping it (it is a mount source).
fn empty(dir: &Path) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            std::fs::remove_dir_all(&p).unwrap();
        } else {
            std::fs::remove_file(&p).unwrap();
        }
    }
}

#[test]
fn real_host_names_checkpoint_lose_a_node_and_rebuild_through_xor() {
    let mut c = Cluster::new();
    if let Some(why) = unsupported(&c.path("probe")) {
        eprintln!("SKIPPED real_host_names_checkpoint_lose_a_node_and_rebuild_through_xor: {why}");
        return;
    }
    for node in ["node0", "node1"] {
        for base in ["cache", "cntl"] {
            std::fs::create_dir_all(c.path(&format!("{node}/{base}"))).unwrap();
        }
    }
    let wrapper = c.path("node.sh");
    std::fs::write(&wrapper, WRAPPER).unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let wrapper = wrapper.to_str().unwrap().to_string();
    c.set("SCR_COPY_TYPE", "XOR")
        .set("SCR_CACHE_SIZE", "2")
        .set("SCR_FLUSH", "0");

    let out = heat(&c, &wrapper, 12);
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.contains("checkpoint ckpt.10: kept"), "{out}");

    // every node kept its own ranks' files at the base itself (no node name in the
    // path: the runtime did not simulate nodes), and nothing reached the shared bases
    for (node, ranks) in [("node0", [0, 1]), ("node1", [2, 3])] {
        let cached = files(&c.path(&format!("{node}/cache")));
        for rank in ranks {
            let want = format!("/ckpt.10/rank_{rank}.ckpt");
            let found: Vec<&String> = cached.iter().filter(|f| f.ends_with(&want)).collect();
            assert_eq!(found.len(), 1, "{node}: {cached:?}");
            assert!(
                found[0].starts_with("e2e/scr.e2e/"),
                "{node}'s cache must hold its files under USER/scr.JOB (no node directory): {}",
                found[0]
            );
        }
        let other = if node == "node0" { 2 } else { 0 };
        assert!(
            !cached.iter().any(|f| f.contains(&format!("rank_{other}."))),
            "{node} holds another node's rank: {cached:?}"
        );
        assert!(
            cached.iter().any(|f| f.contains(".xor.")),
            "{node} holds XOR parity: {cached:?}"
        );
        assert!(
            !files(&c.path(&format!("{node}/cntl"))).is_empty(),
            "{node}'s control directory"
        );
    }
    assert_eq!(files(&c.path("cache")), Vec::<String>::new());
    assert_eq!(files(&c.path("cntl")), Vec::<String>::new());

    // node1 loses everything it held
    empty(&c.path("node1/cache"));
    empty(&c.path("node1/cntl"));

    let out = heat(&c, &wrapper, 20);
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        out.line_after("restarted from "),
        Some("ckpt.10 at step 10"),
        "node1's files must be rebuilt through XOR\n{out}"
    );
    assert!(!out.stdout.contains("lost:"), "{out}");
    assert_eq!(
        out.final_state(),
        scr_e2e::reference_state(4, 20, Some(CELLS.parse().unwrap()))
    );
    // node1 holds its ranks' files again
    let cached = files(&c.path("node1/cache"));
    for rank in [2, 3] {
        assert!(
            cached
                .iter()
                .any(|f| f.ends_with(&format!("/ckpt.20/rank_{rank}.ckpt"))),
            "{cached:?}"
        );
    }
}
