//! Ending what a failed job step left running on a node before `scr run` relaunches
//! (`scr nodes clean --step TAG`, run on each node of the step through the remote
//! runner).
//!
//! A step that failed on one node often leaves ranks on the others: blocked in MPI
//! after their peer died, or hung in a file system. `scr run` kills the launcher's
//! process group on the launch host, but the ranks on other nodes are children of the
//! launcher's remote daemons, which a lost connection does not always end. They would
//! hold the node's cache and control directory (and its cores) while the relaunch
//! starts there.
//!
//! Which processes: `scr run` gives every launch its own tag in the step's environment
//! (`SCR_RUN_STEP`), which launchers pass on to the ranks (srun, flux and OpenMPI's
//! daemons started through an rsh agent do; a launcher started through plain ssh may
//! not). On the node, every process of this user whose environment holds that tag, in
//! this host's UTS namespace (a host of the test bed is one), is sent SIGTERM, then
//! SIGKILL after a grace period.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// What `scr nodes clean` reports to `scr run` (its last line, through the remote
/// runner): the launch's processes found, and those still alive at the end.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct CleanReport {
    /// Processes of the launch found on the node.
    pub found: usize,
    /// Those that survived SIGKILL for a while.
    pub left: Vec<u32>,
}

/// The environment variable holding a launch's tag.
pub(crate) const STEP_VAR: &str = "SCR_RUN_STEP";

/// The processes of launch `tag` on this host: this user's (root sees everyone's),
/// in this UTS namespace, with `SCR_RUN_STEP=tag` in their environment; never this
/// process.
pub(crate) fn step_processes(tag: &str) -> Vec<u32> {
    let me = std::process::id();
    let uid = crate::registry::effective_uid();
    let uts = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/uts")).ok();
    let here = uts("self");
    let wanted = format!("{STEP_VAR}={tag}");
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| {
            let p = Path::new("/proc").join(pid.to_string());
            let mine =
                std::fs::metadata(&p).is_ok_and(|m| uid.is_none_or(|u| u == 0 || m.uid() == u));
            mine && uts(&pid.to_string()) == here
                && std::fs::read(p.join("environ"))
                    .is_ok_and(|env| env.split(|&b| b == 0).any(|v| v == wanted.as_bytes()))
        })
        .collect()
}

/// End launch `tag`'s processes on this host: SIGTERM, then SIGKILL to those still
/// there after `grace`. How many there were, and the ones still alive at the end (a
/// process in uninterruptible sleep survives even SIGKILL for a while).
pub fn end_step(tag: &str, grace: Duration) -> (usize, Vec<u32>) {
    let found = step_processes(tag);
    for &pid in &found {
        super::signals::send(pid, false, libc::SIGTERM);
    }
    let deadline = Instant::now() + grace;
    let mut left = step_processes(tag);
    while !left.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        left = step_processes(tag);
    }
    for &pid in &left {
        super::signals::send(pid, false, libc::SIGKILL);
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    while !left.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        left = step_processes(tag);
    }
    (found.len(), left)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn a_tagged_step_is_ended_and_nothing_else() {
        let tag = format!("test.{}", std::process::id());
        let mut step = Command::new("sh")
            .args(["-c", "trap '' TERM; sleep 30"])
            .env(STEP_VAR, &tag)
            .spawn()
            .unwrap();
        let mut other = Command::new("sleep")
            .arg("30")
            .env(STEP_VAR, format!("{tag}.other"))
            .spawn()
            .unwrap();
        // (the shell's environment is visible once it has started, and its child's once
        // it has become the sleep: while it execs, its environment cannot be read)
        let asleep = |found: &[u32]| {
            found.iter().any(|p| {
                std::fs::read_to_string(format!("/proc/{p}/comm"))
                    .is_ok_and(|c| c.trim() == "sleep")
            })
        };
        let started = Instant::now();
        let mut found = step_processes(&tag);
        while !(found.len() == 2 && asleep(&found)) && started.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
            found = step_processes(&tag);
        }
        assert!(found.contains(&step.id()), "{found:?}");
        assert_eq!(found.len(), 2, "the shell and its sleep: {found:?}");
        let (n, left) = end_step(&tag, Duration::from_millis(300));
        assert_eq!((n, left), (2, vec![]));
        // the shell ignored SIGTERM: SIGKILL ended it
        assert!(step.wait().unwrap().code().is_none());
        assert!(
            other.try_wait().unwrap().is_none(),
            "another launch's process was hit"
        );
        let _ = other.kill();
        let _ = other.wait();
    }
}
