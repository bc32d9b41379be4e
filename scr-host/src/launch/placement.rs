//! Where a launch runs: the first launch's simulated nodes from `node_names`, the
//! nodes of a relaunch (survivors first, then spares), and the launcher command with its
//! placeholders filled in (see the `launch` module documentation). Pure functions, so
//! their unit tests sit here.

use std::path::Path;

use crate::hostlist;

/// Why `node_names` does not describe a launch ([`simulated_layout`]): a type so the
/// caller can tell it from its own failures; the text names the setting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LayoutError {
    /// A name in the list is empty.
    #[error("node_names `{0}` has an empty name")]
    EmptyName(String),
    /// The nodes are given different numbers of ranks.
    #[error("node_names gives {first} {per} rank(s) but {node} {count}: scr run relaunches with the same number of ranks on every node")]
    Uneven {
        /// The first node.
        first: String,
        /// Its ranks.
        per: u64,
        /// A node with another number.
        node: String,
        /// Its ranks.
        count: u64,
    },
}

/// The first launch's nodes and ranks per node from `node_names`, when it is set.
pub fn simulated_layout(node_names: &str) -> Result<Option<(Vec<String>, u64)>, LayoutError> {
    if node_names.trim().is_empty() {
        return Ok(None);
    }
    let mut nodes: Vec<(String, u64)> = Vec::new();
    for n in node_names.split(',').map(str::trim) {
        if n.is_empty() {
            return Err(LayoutError::EmptyName(node_names.to_string()));
        }
        match nodes.iter_mut().find(|(m, _)| m == n) {
            Some((_, c)) => *c += 1,
            None => nodes.push((n.to_string(), 1)),
        }
    }
    let per = nodes[0].1;
    if let Some((n, c)) = nodes.iter().find(|(_, c)| *c != per) {
        return Err(LayoutError::Uneven {
            first: nodes[0].0.clone(),
            per,
            node: n.clone(),
            count: *c,
        });
    }
    Ok(Some((nodes.into_iter().map(|(n, _)| n).collect(), per)))
}

/// The nodes of the next launch: the previous launch's nodes that are still up, in
/// their order, then the other nodes left, in the allocation's order; at most `want`.
pub fn choose_nodes(previous: &[String], left: &[String], want: usize) -> Vec<String> {
    let mut out: Vec<String> = previous
        .iter()
        .filter(|n| left.contains(n))
        .cloned()
        .collect();
    out.extend(left.iter().filter(|n| !previous.contains(n)).cloned());
    out.truncate(want);
    out
}

/// The launcher command with its placeholders replaced (see the module documentation).
pub fn launch_command(
    launcher: &[String],
    nodes: &[String],
    ranks_per_node: u64,
    down: &[String],
) -> Vec<String> {
    let exclude = hostlist::compress(down);
    let fill = |a: &String| {
        a.replace("{hosts}", &nodes.join(","))
            .replace("{hostlist}", &hostlist::compress(nodes))
            .replace("{nodes}", &nodes.len().to_string())
            .replace(
                "{ranks}",
                &(nodes.len() as u64 * ranks_per_node).to_string(),
            )
            .replace("{exclude}", &exclude)
    };
    let mut out: Vec<String> = launcher.iter().map(fill).collect();
    let is_srun = launcher
        .first()
        .is_some_and(|l| Path::new(l).file_name().is_some_and(|f| f == "srun"));
    if is_srun && !down.is_empty() && !launcher.iter().any(|a| a.contains("{exclude}")) {
        out.insert(1, format!("--exclude={exclude}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn layout_of_simulated_nodes() {
        assert_eq!(
            simulated_layout("n0,n0,n1,n1").unwrap(),
            Some((s(&["n0", "n1"]), 2))
        );
        assert_eq!(simulated_layout("").unwrap(), None);
        assert_eq!(
            simulated_layout("n0,n0,n1").unwrap_err().to_string(),
            "node_names gives n0 2 rank(s) but n1 1: scr run relaunches with the same number of ranks on every node"
        );
    }

    #[test]
    fn survivors_first_then_spares() {
        let prev = s(&["n0", "n1", "n2"]);
        assert_eq!(
            choose_nodes(&prev, &s(&["n0", "n2", "n3", "n4"]), 3),
            s(&["n0", "n2", "n3"])
        );
        assert_eq!(choose_nodes(&prev, &s(&["n3", "n2"]), 3), s(&["n2", "n3"]));
        assert_eq!(choose_nodes(&[], &s(&["a", "b"]), 5), s(&["a", "b"]));
    }

    #[test]
    fn placeholders_and_srun_exclude() {
        let l = s(&[
            "mpiexec",
            "-n",
            "{ranks}",
            "--host",
            "{hosts}",
            "app",
            "{hostlist}/{nodes}",
        ]);
        assert_eq!(
            launch_command(&l, &s(&["n0", "n2", "n3"]), 2, &s(&["n1"])),
            s(&[
                "mpiexec",
                "-n",
                "6",
                "--host",
                "n0,n2,n3",
                "app",
                "n[0,2-3]/3"
            ])
        );
        let srun = s(&["/usr/bin/srun", "-N", "{nodes}", "app"]);
        assert_eq!(
            launch_command(&srun, &s(&["n0", "n3"]), 1, &s(&["n1", "n2"])),
            s(&["/usr/bin/srun", "--exclude=n[1-2]", "-N", "2", "app"])
        );
        assert_eq!(
            launch_command(&srun, &s(&["n0"]), 1, &[]),
            s(&["/usr/bin/srun", "-N", "1", "app"])
        );
        let own = s(&["srun", "-x", "{exclude}", "app"]);
        assert_eq!(
            launch_command(&own, &s(&["n0"]), 1, &s(&["n1"])),
            s(&["srun", "-x", "n1", "app"])
        );
    }
}
