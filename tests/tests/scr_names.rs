//! SCR's command names in the install tree (`bin/scr_halt`, `bin/scr_index`, ...: links
//! to `scr`), run with the command lines of SCR 3.1's user guide and job scripts, as a
//! job script written for SCR runs them: their effect on the prefix, what they print and
//! their exit status.

use std::path::{Path, PathBuf};
use std::process::Command;

use scr_e2e::JobOutput;

/// `bin/NAME ARGS` of the install tree, in `prefix` (also SCR_PREFIX), with `env`.
fn scr_name(prefix: &Path, name: &str, args: &[&str], env: &[(&str, &str)]) -> JobOutput {
    let bin: PathBuf = scr_e2e::install::install_tree().join("bin").join(name);
    assert!(
        bin.symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink()),
        "{} is not installed as a link to scr",
        bin.display()
    );
    let mut cmd = Command::new(&bin);
    cmd.args(args)
        .current_dir(prefix)
        .env("SCR_PREFIX", prefix)
        .env("SCR_SYSTEM_CONFIG", "/dev/null")
        .env_remove("SCR_CONF_FILE")
        .env_remove("SCR_NODELIST")
        .envs(env.iter().copied());
    let out = cmd.output().expect("the installed command runs");
    JobOutput {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[test]
fn scr_halt_and_scr_should_exit_as_a_job_script_uses_them() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    let alloc = [("SCR_NODELIST", "n[0-3]")];
    // no condition yet: go on (1), as SCR's answers
    let go_on = scr_name(
        p,
        "scr_should_exit",
        &["-p", &p.display().to_string()],
        &alloc,
    );
    assert_eq!((go_on.code, go_on.stdout.as_str()), (1, ""), "{go_on}");
    let set = scr_name(
        p,
        "scr_halt",
        &["--checkpoints", "10", "--before", "2030-01-01T00:00:00"],
        &[],
    );
    assert_eq!(set.code, 0, "{set}");
    let epoch = Command::new("date")
        .args(["-d", "2030-01-01T00:00:00", "+%s"])
        .output()
        .unwrap();
    let epoch = String::from_utf8_lossy(&epoch.stdout).trim().to_string();
    let list = scr_name(p, "scr_halt", &["--list"], &[]);
    assert_eq!(list.code, 0, "{list}");
    assert!(list.stdout.contains("CheckpointsLeft  10\n"), "{list}");
    assert!(
        list.stdout.contains(&format!("ExitBefore       {epoch}\n")),
        "{list}"
    );
    let unset = scr_name(p, "scr_halt", &["--unset-before"], &[]);
    assert!(unset.stdout.contains("ExitBefore       -\n"), "{unset}");
    // scr_halt with no option halts the job now: scr_should_exit says stop (0), and why
    let halt = scr_name(p, "scr_halt", &[], &[]);
    assert!(
        halt.stdout.contains("ExitReason       JOB_HALTED\n"),
        "{halt}"
    );
    let stop = scr_name(p, "scr_should_exit", &["-v"], &alloc);
    assert_eq!(stop.code, 0, "{stop}");
    assert!(
        stop.stdout.starts_with("Halt condition detected: "),
        "{stop}"
    );
    assert!(stop.stdout.contains("JOB_HALTED"), "{stop}");
    let removed = scr_name(p, "scr_halt", &["--remove"], &[]);
    assert_eq!(removed.code, 0, "{removed}");
    // too few nodes left, or no run left
    let few = scr_name(
        p,
        "scr_should_exit",
        &["--down", "n[1-3]", "--min-nodes", "2", "-v"],
        &alloc,
    );
    assert_eq!(
        (few.code, few.stdout.as_str()),
        (0, "nodes_remaining=1 < nodes_needed=2\n"),
        "{few}"
    );
    let enough = scr_name(
        p,
        "scr_should_exit",
        &["--down", "n3", "--min-nodes", "2"],
        &alloc,
    );
    assert_eq!(enough.code, 1, "{enough}");
    let no_run = scr_name(p, "scr_should_exit", &["--runs", "0", "-v"], &alloc);
    assert_eq!(
        (no_run.code, no_run.stdout.as_str()),
        (0, "runs_remaining=0\n"),
        "{no_run}"
    );
    // a wrong option: SCR's usage error, exit 1
    let bad = scr_name(p, "scr_halt", &["--everything"], &[]);
    assert_eq!(bad.code, 1, "{bad}");
    assert!(
        bad.stderr
            .starts_with("scr_halt: unknown option --everything\nUsage: scr_halt"),
        "{bad}"
    );
}

#[test]
fn scr_index_scr_prerun_scr_list_down_nodes_and_scr_run_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    let prerun = scr_name(
        p,
        "scr_prerun",
        &["-p", &p.display().to_string(), "-v"],
        &[],
    );
    assert_eq!(prerun.code, 0, "{prerun}");
    assert!(p.join(".scr").is_dir(), "{prerun}");
    let list = scr_name(p, "scr_index", &[], &[]);
    assert_eq!(list.code, 0, "{list}");
    assert!(list.stdout.contains("name"), "{list}");
    // a dataset the prefix does not hold cannot be added; the reason names it
    let add = scr_name(p, "scr_index", &["--add", "ckpt.50"], &[]);
    assert_eq!(add.code, 1, "{add}");
    assert!(add.stderr.contains("ckpt.50"), "{add}");
    let two = scr_name(p, "scr_index", &["--add", "a", "--drop", "b"], &[]);
    assert_eq!(two.code, 1, "{two}");
    assert!(
        two.stderr.starts_with("scr_index: one action at a time"),
        "{two}"
    );
    // this host is up; a node given as down is listed, with its reason under -r
    let down = scr_name(
        p,
        "scr_list_down_nodes",
        &["-j", "srun", "--down", "n9", "localhost"],
        &[],
    );
    assert_eq!((down.code, down.stdout.as_str()), (0, "n9\n"), "{down}");
    let why = scr_name(
        p,
        "scr_list_down_nodes",
        &["-r", "-d", "n9", "localhost"],
        &[],
    );
    assert_eq!(
        (why.code, why.stdout.as_str()),
        (0, "n9: given as down (--down)\n"),
        "{why}"
    );
    let none = scr_name(p, "scr_list_down_nodes", &["-j", "srun", "localhost"], &[]);
    assert_eq!((none.code, none.stdout.as_str()), (0, "\n"), "{none}");
    // scr_run: SCR's launchers only; its run/restart commands are not ours
    let ssh = scr_name(p, "scr_run", &["ssh", "./a"], &[]);
    assert_eq!(ssh.code, 1, "{ssh}");
    assert!(
        ssh.stderr.starts_with("scr_run: invalid launcher ssh"),
        "{ssh}"
    );
    let rc = scr_name(p, "scr_srun", &["--run-cmd=./a", "./a"], &[]);
    assert_eq!(rc.code, 1, "{rc}");
    assert!(
        rc.stderr
            .starts_with("scr_srun: --run-cmd is not supported"),
        "{rc}"
    );
}
