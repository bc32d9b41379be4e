//! A test bed of real hosts on one machine (`scripts/hosts.sh`): every host has its own
//! host name and its own node-local directory, and MPI jobs span them through an rsh agent,
//! so the runtime finds its nodes by `gethostname` and losing a host loses its processes
//! and its storage, as on a cluster. Jobs run through [`Cluster::on_bed`].
//!
//! Needs root (namespaces and mounts); [`TestBed::try_up`] tells a kernel's refusal apart
//! from any other failure, so that a test skips only where the bed cannot exist.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{Cluster, JobOutput};

/// The status `hosts.sh up` exits with when the kernel refuses a namespace or a mount.
const REFUSED_STATUS: i32 = 3;

/// Hosts `host0..host{n-1}` in a temporary directory of their own (parallel tests never
/// share a bed). Dropping it takes the bed down, also when a test panics.
pub struct TestBed {
    dir: PathBuf,
    hosts: Vec<String>,
    down: bool,
}

/// Why a bed could not be made: the kernel refused a namespace or mount (the script's
/// message, naming which).
#[derive(Debug)]
pub struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// `scripts/hosts.sh` of this source tree.
pub fn hosts_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace")
        .join("scripts/hosts.sh")
}

/// `hosts.sh ARGS`, its output.
fn script(args: &[&str], dir: &Path) -> std::process::Output {
    Command::new("bash")
        .arg(hosts_script())
        .args(args)
        .arg("--dir")
        .arg(dir)
        .output()
        .expect("bash runs scripts/hosts.sh")
}

impl TestBed {
    /// Start `n` hosts. `Err` only when the kernel refuses what a host needs; any other
    /// failure panics, since it is a fault of the bed or the machine to be fixed, not a
    /// reason to skip.
    pub fn try_up(n: usize) -> Result<TestBed, Refused> {
        let dir = tempfile::Builder::new()
            .prefix("scr-bed.")
            .tempdir()
            .expect("temporary directory")
            .keep();
        // from here on, dropping the bed removes the directory (and any host started)
        let mut bed = TestBed {
            hosts: (0..n).map(|i| format!("host{i}")).collect(),
            dir,
            down: false,
        };
        let out = script(&["up", &n.to_string()], &bed.dir);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.code() == Some(REFUSED_STATUS) {
            if let Some(why) = stderr
                .lines()
                .find_map(|l| l.strip_prefix("hosts.sh: refused: "))
            {
                bed.down();
                return Err(Refused(why.to_string()));
            }
        }
        assert!(out.status.success(), "hosts.sh up {n}: {out:?}");
        let listed = std::fs::read_to_string(bed.dir.join("hosts")).expect("BED/hosts");
        assert_eq!(listed.lines().collect::<Vec<_>>(), bed.hosts, "BED/hosts");
        Ok(bed)
    }

    /// Start `n` hosts; panics when they cannot be started (a refusal included).
    pub fn up(n: usize) -> TestBed {
        TestBed::try_up(n).unwrap_or_else(|why| panic!("the kernel refused: {why}"))
    }

    /// Start `n` hosts, or print why the kernel refuses them and return `None`: the
    /// test then returns early (skips). Anything else that goes wrong fails the test.
    pub fn up_or_skip(n: usize) -> Option<TestBed> {
        match TestBed::try_up(n) {
            Ok(bed) => Some(bed),
            Err(why) => {
                eprintln!("skipped: the kernel refuses the test bed's namespaces: {why}");
                None
            }
        }
    }

    /// The bed's directory (on the shared file system).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The host names, `host0..host{n-1}`.
    pub fn hosts(&self) -> &[String] {
        &self.hosts
    }

    /// The rsh agent: `agent HOST CMD...` runs `/bin/sh -c "CMD..."` in HOST.
    pub fn agent(&self) -> PathBuf {
        self.dir.join("agent")
    }

    /// The node-local directory: the same path on every host, each seeing its own
    /// storage there (an empty directory outside the hosts).
    pub fn local_dir(&self) -> PathBuf {
        self.dir.join("local")
    }

    /// What `host` sees at [`TestBed::local_dir`], as seen from outside (for assertions).
    pub fn store_dir(&self, host: &str) -> PathBuf {
        self.dir.join("store").join(host)
    }

    /// Run the shell command `cmd` in `host` through the agent.
    pub fn on(&self, host: &str, cmd: &str) -> JobOutput {
        crate::output_of(self.agent_command(host, cmd))
    }

    /// The agent's command running `cmd` in `host` (to add input or environment).
    pub fn agent_command(&self, host: &str, cmd: &str) -> Command {
        let mut c = Command::new(self.agent());
        c.arg(host).arg(cmd);
        c
    }

    /// Lose `host`: every process in it is killed, its storage discarded, and the agent
    /// refuses it from then on.
    pub fn kill(&self, host: &str) {
        let out = script(&["kill", host], &self.dir);
        assert!(out.status.success(), "hosts.sh kill {host}: {out:?}");
    }

    /// Take the bed down (every host killed, its directory removed), asserting that it
    /// worked; [`Drop`] does it too, without asserting.
    pub fn down(&mut self) {
        if self.down {
            return;
        }
        self.down = true;
        let out = script(&["down"], &self.dir);
        assert!(out.status.success(), "hosts.sh down: {out:?}");
    }

    /// A cluster whose jobs run on this bed's hosts ([`Cluster::on_bed`]).
    pub fn cluster(&self) -> Cluster {
        Cluster::on_bed(self)
    }
}

impl Drop for TestBed {
    fn drop(&mut self) {
        if !self.down {
            self.down = true;
            let out = script(&["down"], &self.dir);
            if !out.status.success() {
                // a panic here while a test already panics would abort the test binary
                eprintln!("hosts.sh down {}: {out:?}", self.dir.display());
            }
        }
    }
}

/// `--host host0:2,host1:2,...` for ranks placed on `nodes` (one host name per rank, each
/// host's ranks consecutive, as OpenMPI maps by slot in the order the hosts are listed).
pub(crate) fn host_list(nodes: &[&str]) -> String {
    let mut runs: Vec<(&str, usize)> = Vec::new();
    for &n in nodes {
        match runs.last_mut() {
            Some((h, count)) if *h == n => *count += 1,
            _ => {
                assert!(
                    runs.iter().all(|(h, _)| *h != n),
                    "{n}'s ranks must be consecutive on a test bed: {nodes:?}"
                );
                runs.push((n, 1));
            }
        }
    }
    runs.iter()
        .map(|(h, k)| format!("{h}:{k}"))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    #[test]
    fn host_list_counts_consecutive_ranks() {
        assert_eq!(
            super::host_list(&["host0", "host0", "host2", "host1", "host1"]),
            "host0:2,host2:1,host1:2"
        );
    }

    #[test]
    #[should_panic(expected = "consecutive")]
    fn host_list_refuses_interleaved_ranks() {
        super::host_list(&["host0", "host1", "host0"]);
    }
}
