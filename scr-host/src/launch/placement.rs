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
    let own_exclude = launcher.iter().any(|a| a.contains("{exclude}"));
    match launcher_name(launcher).as_str() {
        "srun" if !down.is_empty() && !own_exclude => {
            out.insert(1, format!("--exclude={exclude}"));
        }
        // (as SCR's scr_run does for jsrun: its host names, comma-separated)
        "jsrun" if !down.is_empty() && !own_exclude => {
            out.insert(1, format!("--exclude_hosts={}", down.join(",")));
        }
        _ => {}
    }
    out
}

/// The launcher's program name (`srun`, `mpirun`, ...), without its directory.
fn launcher_name(launcher: &[String]) -> String {
    launcher
        .first()
        .and_then(|l| Path::new(l).file_name())
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Options of `mpirun`/`mpiexec` that name the hosts: a launcher given one places the
/// ranks itself, and no hostfile is added.
const HOST_OPTIONS: &[&str] = &[
    "-H",
    "--host",
    "-host",
    "--hostfile",
    "-hostfile",
    "--machinefile",
    "-machinefile",
    "-f",
    "--default-hostfile",
];

/// For a relaunch that leaves `down` nodes out with `mpirun` or `mpiexec` (which, unlike
/// srun and jsrun, take no list of hosts to avoid): the option naming a hostfile and the
/// hostfile's text, the launch's `nodes` with `ranks_per_node` slots each (Open MPI's
/// `node slots=N`, else MPICH hydra's `node:N`). `None` when nothing is down, for other
/// launchers, and when the launcher already names its hosts (a placeholder, or an option
/// such as `--host`, `-H`, `--hostfile` or `-f`).
pub fn hostfile_for(
    launcher: &[String],
    nodes: &[String],
    ranks_per_node: u64,
    down: &[String],
    open_mpi: bool,
) -> Option<(&'static str, String)> {
    let mpi = matches!(
        launcher_name(launcher).as_str(),
        "mpirun" | "mpiexec" | "orterun"
    );
    let named = launcher.iter().any(|a| {
        a.contains("{hosts}")
            || a.contains("{hostlist}")
            || a.contains("{exclude}")
            || HOST_OPTIONS
                .iter()
                .any(|o| a == o || a.starts_with(&format!("{o}=")))
    });
    if !mpi || down.is_empty() || named {
        return None;
    }
    let text: String = nodes
        .iter()
        .map(|n| {
            if open_mpi {
                format!("{n} slots={ranks_per_node}\n")
            } else {
                format!("{n}:{ranks_per_node}\n")
            }
        })
        .collect();
    Some((if open_mpi { "--hostfile" } else { "-hostfile" }, text))
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
        // jsrun takes the down nodes' names, as SCR's scr_run gives them
        let jsrun = s(&["jsrun", "-r", "1", "app"]);
        assert_eq!(
            launch_command(&jsrun, &s(&["h0"]), 1, &s(&["h1", "h2"])),
            s(&["jsrun", "--exclude_hosts=h1,h2", "-r", "1", "app"])
        );
        assert_eq!(launch_command(&jsrun, &s(&["h0"]), 1, &[]), jsrun);
    }

    /// mpirun and mpiexec take no list of hosts to avoid: a relaunch without the down
    /// nodes gets a hostfile of the launch's nodes, in the launcher's own format, unless
    /// the launcher names its hosts already.
    #[test]
    fn a_relaunch_with_mpirun_gets_a_hostfile_of_the_nodes_left() {
        let mpirun = s(&["/usr/bin/mpirun", "-n", "{ranks}", "app"]);
        let nodes = s(&["n0", "n2"]);
        assert_eq!(
            hostfile_for(&mpirun, &nodes, 2, &s(&["n1"]), true),
            Some(("--hostfile", "n0 slots=2\nn2 slots=2\n".to_string()))
        );
        let hydra = s(&["mpiexec", "-n", "4", "app"]);
        assert_eq!(
            hostfile_for(&hydra, &nodes, 2, &s(&["n1"]), false),
            Some(("-hostfile", "n0:2\nn2:2\n".to_string()))
        );
        assert_eq!(
            hostfile_for(&mpirun, &nodes, 2, &[], true),
            None,
            "none down"
        );
        for named in [
            s(&["mpirun", "--host", "{hosts}", "app"]),
            s(&["mpirun", "-H", "a,b", "app"]),
            s(&["mpirun", "--hostfile=/my/hosts", "app"]),
            s(&["mpiexec", "-f", "/my/hosts", "app"]),
        ] {
            assert_eq!(
                hostfile_for(&named, &nodes, 2, &s(&["n1"]), true),
                None,
                "{named:?}"
            );
        }
        let srun = s(&["srun", "app"]);
        assert_eq!(hostfile_for(&srun, &nodes, 2, &s(&["n1"]), true), None);
    }
}
