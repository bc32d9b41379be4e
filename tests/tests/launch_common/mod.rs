//! What the tests of the launch-side commands share: `scr ARGS` run as a batch script
//! would, in a cluster's prefix with the environment its jobs get.
#![allow(dead_code)]

use std::process::Command;

use scr_e2e::{binary, mpi_env, Cluster, JobOutput};

/// `scr ARGS` in the cluster's prefix, with the environment its jobs get (cache and
/// control bases, job id, MPI settings) plus `env`.
pub fn scr(c: &Cluster, args: &[&str], env: &[(&str, &str)]) -> JobOutput {
    let scr = binary("scr");
    let mut timed = vec!["--kill-after=5", "150", scr.to_str().unwrap()];
    timed.extend(args);
    let out = scr_command(c, "timeout", &timed, env)
        .output()
        .expect("scr runs");
    JobOutput {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `program args` with the environment [`scr`] gives.
pub fn scr_command(c: &Cluster, program: &str, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(args);
    cmd.current_dir(c.prefix());
    for (k, v) in mpi_env() {
        cmd.env(k, v);
    }
    cmd.env("SCR_CACHE_BASE", c.path("cache"))
        .env("SCR_CNTL_BASE", c.path("cntl"))
        .env("SCR_JOB_ID", "e2e")
        .env("SCR_SYSTEM_CONFIG", "/dev/null")
        .env_remove("SCR_CONF_FILE")
        .env_remove("SCR_NODE_NAMES")
        .env_remove("SCR_NODELIST");
    for v in [
        "SLURM_JOB_NODELIST",
        "SLURM_NODELIST",
        "SLURM_JOB_ID",
        "FLUX_URI",
        "LSB_MCPU_HOSTS",
        "LSB_HOSTS",
        "PBS_NODEFILE",
    ] {
        cmd.env_remove(v);
    }
    for (k, v) in &c.env {
        cmd.env(k, v);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}
