//! The allocation's end time read through the real command runner, with fake `squeue`,
//! `scontrol`, `flux`, `bjobs` and `qstat` scripts first in `PATH`: each records its
//! arguments, so the test also proves which command was asked and with what.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use scr_host::walltime::allocation_end;

const NOW: i64 = 1_800_000_000;

/// A script `name` in `dir` that appends its arguments to `dir/calls` and prints `out`
/// (exit status `status`).
fn fake(dir: &Path, name: &str, out: &str, status: i32) {
    let p = dir.join(name);
    std::fs::write(
        &p,
        format!(
            "#!/bin/sh\necho \"{name} $*\" >> '{}/calls'\nprintf '%s\\n' '{out}'\nexit {status}\n",
            dir.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn end_with(dir: &Path, vars: &[(&str, &str)]) -> (Option<(i64, String)>, String) {
    let _ = std::fs::remove_file(dir.join("calls"));
    let mut env: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    // the fakes first; /bin and /usr/bin for the shell the scripts run under
    env.insert("PATH".into(), format!("{}:/usr/bin:/bin", dir.display()));
    let got = allocation_end(&|k| env.get(k).cloned(), NOW);
    let calls = std::fs::read_to_string(dir.join("calls")).unwrap_or_default();
    (got, calls)
}

#[test]
fn each_resource_manager_through_fake_commands_in_path() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();

    fake(d, "squeue", "1-00:00:10", 0);
    let (got, calls) = end_with(d, &[("SLURM_JOB_ID", "1234")]);
    assert_eq!(got, Some((NOW + 86410, "squeue -h -j 1234 -o %L".into())));
    assert_eq!(calls, "squeue -h -j 1234 -o %L\n");

    // squeue fails: scontrol answers
    fake(
        d,
        "squeue",
        "slurm_load_jobs error: Invalid job id specified",
        1,
    );
    fake(
        d,
        "scontrol",
        "JobId=1234 JobName=x RunTime=00:00:30 TimeLimit=00:05:00 EndTime=2027-01-01T00:00:00",
        0,
    );
    let (got, calls) = end_with(d, &[("SLURM_JOB_ID", "1234")]);
    assert_eq!(got, Some((NOW + 270, "scontrol show job -o 1234".into())));
    assert_eq!(
        calls,
        "squeue -h -j 1234 -o %L\nscontrol show job -o 1234\n"
    );

    // the variable: no command at all
    let (got, calls) = end_with(
        d,
        &[
            ("SLURM_JOB_ID", "1234"),
            ("SLURM_JOB_END_TIME", "1800000777"),
        ],
    );
    assert_eq!(got, Some((1_800_000_777, "SLURM_JOB_END_TIME".into())));
    assert_eq!(calls, "");

    fake(d, "flux", "600", 0);
    let (got, calls) = end_with(d, &[("FLUX_JOB_ID", "f2CZbmq")]);
    assert_eq!(got, Some((NOW + 600, "flux job timeleft".into())));
    assert_eq!(calls, "flux job timeleft\n");

    fake(d, "bjobs", "0:12 L", 0);
    let (got, calls) = end_with(d, &[("LSB_JOBID", "77")]);
    assert_eq!(
        got,
        Some((NOW + 720, "bjobs -noheader -o time_left 77".into()))
    );
    assert_eq!(calls, "bjobs -noheader -o time_left 77\n");

    fake(
        d,
        "qstat",
        "Job Id: 5.pbs\n    Resource_List.walltime = 00:30:00\n    resources_used.walltime = 00:10:00",
        0,
    );
    let (got, calls) = end_with(d, &[("PBS_JOBID", "5.pbs")]);
    assert_eq!(got, Some((NOW + 1200, "qstat -f 5.pbs".into())));
    assert_eq!(calls, "qstat -f 5.pbs\n");
}

#[test]
fn missing_commands_give_no_end_without_error() {
    let dir = tempfile::tempdir().unwrap();
    for var in ["SLURM_JOB_ID", "FLUX_JOB_ID", "LSB_JOBID", "PBS_JOBID"] {
        let (got, calls) = end_with(dir.path(), &[(var, "1")]);
        assert_eq!(got, None, "{var}");
        assert_eq!(calls, "");
    }
}
