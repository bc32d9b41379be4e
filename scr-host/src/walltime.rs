//! When the allocation ends: the time `halt_seconds` counts back from.
//!
//! SCR stops a job `halt_seconds` before its allocation ends so that there is time left to
//! flush the newest checkpoint. The end comes from, in this order:
//!
//! 1. the `end_time` key (`SCR_END_TIME`): seconds since the epoch; 0 (the default)
//!    means "ask the resource manager". A batch script that knows its own limit can set
//!    `SCR_END_TIME=$(( $(date +%s) + 3600 ))`. An absolute time is used rather than
//!    one relative to the job's start because several runs of one allocation (`scr run`
//!    relaunching after a failure) must all count back from the same moment.
//! 2. the resource manager, the first one whose job id variable is set:
//!    - **SLURM** (`SLURM_JOB_ID` or `SLURM_JOBID`): `SLURM_JOB_END_TIME` (seconds since
//!      the epoch, exported into the job's environment by newer Slurm releases); else
//!      `squeue -h -j ID -o %L` (the time left as `[D-][H:]M:S`, or `UNLIMITED` /
//!      `NOT_SET`); else `scontrol show job -o ID`, `TimeLimit - RunTime` (both
//!      `[D-][H:]M:S`). Durations are used rather than `EndTime`/`%e`, which are local
//!      times whose conversion depends on the time zone of the node.
//!    - **Flux** (`FLUX_JOB_ID`): `flux job timeleft` (whole seconds left; `4294967295`,
//!      UINT_MAX, when the job has no limit); else `flux jobs -no {expiration} ID` (the
//!      expiration in seconds since the epoch, `0.0` when there is none).
//!    - **LSF** (`LSB_JOBID`): `bjobs -noheader -o time_left ID` (`H:MM` or, with
//!      `LSB_HMS_TIME_FORMAT`, `H:MM:SS`, followed by a status letter L/E/X; `-` when the
//!      job has no run limit). LSF exports no variable holding the end.
//!    - **PBS/Torque** (`PBS_JOBID`): `qstat -f ID`: `Walltime.Remaining = SECONDS`
//!      (Torque), else `Resource_List.walltime - resources_used.walltime` (PBS Pro and
//!      OpenPBS; `resources_used` is sampled by the server, so the end is approximate).
//!
//! A command that is missing, fails, prints nothing usable or runs longer than
//! [`COMMAND_TIMEOUT`] is skipped without an error: then the job has no known end and the
//! `halt_seconds` rule does not apply (what SCR does too).

use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::config::{settings, Config};

/// How long a resource-manager query may take before it is given up (a hung controller
/// must not hold up every rank's init).
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

/// Flux's `flux job timeleft` prints UINT_MAX for a job without a time limit.
const FLUX_UNLIMITED: u64 = u32::MAX as u64;

/// The allocation's end (seconds since the epoch) and the source it was read from (e.g.
/// `"SLURM_JOB_END_TIME"`), from the resource manager the environment `env` names,
/// running its query commands from `env`'s `PATH` (the process's when `env` has none);
/// `now` is the current time, to which the time left that some commands report is
/// added. `None` when no resource manager is found or none reports a limit.
pub fn allocation_end(env: &dyn Fn(&str) -> Option<String>, now: i64) -> Option<(i64, String)> {
    let path = env("PATH");
    allocation_end_with(env, &|p, a| run_command(path.as_deref(), p, a), now)
}

/// [`allocation_end`] after the `end_time` key, which wins when set (non-zero); reads
/// the process environment. Call it on one rank and broadcast the answer: thousands of
/// ranks each running `squeue` at init would load the controller (SCR asks once, too).
pub(crate) fn from_config_and_env(config: &Config) -> Option<(i64, String)> {
    let key = config.get(settings::END_TIME);
    if key > 0 {
        let origin = &config.setting_of(settings::END_TIME).origin;
        return Some((
            i64::try_from(key).unwrap_or(i64::MAX),
            format!("end_time ({origin})"),
        ));
    }
    allocation_end(&|k| std::env::var(k).ok(), now_secs())
}

/// A command runner: the standard output of `program args` when it exits with status
/// 0, else `None`. Injected so that tests fake every resource manager.
pub type Runner<'a> = dyn Fn(&str, &[&str]) -> Option<String> + 'a;

/// [`allocation_end`] with the commands run through `run`.
pub(crate) fn allocation_end_with(
    env: &dyn Fn(&str) -> Option<String>,
    run: &Runner,
    now: i64,
) -> Option<(i64, String)> {
    let var = |k: &str| {
        env(k)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    if let Some(id) = var("SLURM_JOB_ID").or_else(|| var("SLURM_JOBID")) {
        return slurm(&var, run, &id, now);
    }
    if let Some(id) = var("FLUX_JOB_ID") {
        return flux(run, &id, now);
    }
    if let Some(id) = var("LSB_JOBID") {
        return lsf(run, &id, now);
    }
    if let Some(id) = var("PBS_JOBID") {
        return pbs(run, &id, now);
    }
    None
}

fn slurm(
    var: &dyn Fn(&str) -> Option<String>,
    run: &Runner,
    id: &str,
    now: i64,
) -> Option<(i64, String)> {
    if let Some(end) = var("SLURM_JOB_END_TIME").and_then(|v| v.parse::<i64>().ok()) {
        if end > 0 {
            return Some((end, "SLURM_JOB_END_TIME".into()));
        }
    }
    if let Some(out) = run("squeue", &["-h", "-j", id, "-o", "%L"]) {
        if let Some(left) = out.lines().next().and_then(parse_slurm_duration) {
            return Some((now + left, format!("squeue -h -j {id} -o %L")));
        }
    }
    let out = run("scontrol", &["show", "job", "-o", id])?;
    let field = |name: &str| {
        out.split_whitespace()
            .find_map(|w| w.strip_prefix(name)?.strip_prefix('='))
            .and_then(parse_slurm_duration)
    };
    let (limit, used) = (field("TimeLimit")?, field("RunTime")?);
    Some((now + limit - used, format!("scontrol show job -o {id}")))
}

fn flux(run: &Runner, id: &str, now: i64) -> Option<(i64, String)> {
    if let Some(out) = run("flux", &["job", "timeleft"]) {
        if let Ok(left) = out.trim().parse::<u64>() {
            if left >= FLUX_UNLIMITED {
                return None;
            }
            return Some((now + left as i64, "flux job timeleft".into()));
        }
    }
    let out = run("flux", &["jobs", "-no", "{expiration}", id])?;
    let exp: f64 = out.trim().parse().ok()?;
    (exp.is_finite() && exp > 0.0).then(|| {
        (
            exp.floor() as i64,
            format!("flux jobs -no {{expiration}} {id}"),
        )
    })
}

fn lsf(run: &Runner, id: &str, now: i64) -> Option<(i64, String)> {
    let out = run("bjobs", &["-noheader", "-o", "time_left", id])?;
    let first = out.split_whitespace().next()?;
    let parts: Vec<i64> = first
        .split(':')
        .map(|p| p.parse::<i64>().ok().filter(|n| *n >= 0))
        .collect::<Option<_>>()?;
    let left = match parts.as_slice() {
        [h, m] => (h * 60 + m) * 60,
        [h, m, s] => (h * 60 + m) * 60 + s,
        _ => return None,
    };
    Some((now + left, format!("bjobs -noheader -o time_left {id}")))
}

fn pbs(run: &Runner, id: &str, now: i64) -> Option<(i64, String)> {
    let out = run("qstat", &["-f", id])?;
    let field = |name: &str| {
        out.lines().find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == name).then(|| v.trim().to_string())
        })
    };
    let source = format!("qstat -f {id}");
    if let Some(left) = field("Walltime.Remaining").and_then(|v| v.parse::<i64>().ok()) {
        return Some((now + left, source));
    }
    let limit = parse_slurm_duration(&field("Resource_List.walltime")?)?;
    let used = field("resources_used.walltime")
        .and_then(|v| parse_slurm_duration(&v))
        .unwrap_or(0);
    Some((now + limit - used, source))
}

/// Seconds in a duration written `[D-][[H:]M:]S` (SLURM's time format; PBS's `H:M:S`
/// is the same without days); `None` for anything else (`UNLIMITED`, `NOT_SET`,
/// `INVALID`, `Partition_Limit`).
pub(crate) fn parse_slurm_duration(text: &str) -> Option<i64> {
    let text = text.trim();
    let (days, rest) = match text.split_once('-') {
        Some((d, r)) => (d.parse::<i64>().ok()?, r),
        None => (0, text),
    };
    let parts: Vec<i64> = rest
        .split(':')
        .map(|p| p.parse::<i64>().ok().filter(|n| *n >= 0))
        .collect::<Option<_>>()?;
    let hms = match parts.as_slice() {
        [s] => *s,
        [m, s] => m * 60 + s,
        [h, m, s] => (h * 60 + m) * 60 + s,
        _ => return None,
    };
    (days >= 0).then_some(days * 86400 + hms)
}

/// Run `program args`, found in `path` (else the process's `PATH`), with no input, its
/// error output discarded, for at most [`COMMAND_TIMEOUT`]; its output when it exits
/// with status 0.
fn run_command(path: Option<&str>, program: &str, args: &[&str]) -> Option<String> {
    run_command_within(path, program, args, COMMAND_TIMEOUT)
}

fn run_command_within(
    path: Option<&str>,
    program: &str,
    args: &[&str],
    timeout: Duration,
) -> Option<String> {
    let mut cmd = Command::new(program);
    if let Some(path) = path {
        // std searches the PATH given to the child
        cmd.env("PATH", path);
    }
    match crate::command::output_within(cmd.args(args), timeout) {
        Ok(out) => out.status.success().then_some(out.stdout),
        Err(why @ crate::command::CommandError::TimedOut { .. }) => {
            tracing::warn!("{why}; the allocation's end time is not known from it");
            None
        }
        // not installed, not runnable: this resource manager is not the one
        Err(_) => None,
    }
}

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::HashMap;

    const NOW: i64 = 1_800_000_000;

    /// A faked environment and faked command outputs; records the commands run.
    struct Fake {
        env: HashMap<&'static str, &'static str>,
        outputs: HashMap<String, &'static str>,
        ran: RefCell<Vec<String>>,
    }

    impl Fake {
        fn new(env: &[(&'static str, &'static str)]) -> Fake {
            Fake {
                env: env.iter().copied().collect(),
                outputs: HashMap::new(),
                ran: RefCell::new(Vec::new()),
            }
        }
        fn output(mut self, command: &str, out: &'static str) -> Fake {
            self.outputs.insert(command.to_string(), out);
            self
        }
        fn end(&self) -> Option<(i64, String)> {
            let env = |k: &str| self.env.get(k).map(|v| v.to_string());
            let run = |p: &str, a: &[&str]| {
                let line = std::iter::once(p)
                    .chain(a.iter().copied())
                    .collect::<Vec<_>>()
                    .join(" ");
                self.ran.borrow_mut().push(line.clone());
                self.outputs.get(&line).map(|s| s.to_string())
            };
            allocation_end_with(&env, &run, NOW)
        }
        fn ran(&self) -> Vec<String> {
            self.ran.borrow().clone()
        }
    }

    #[test]
    fn durations_parse_as_slurm_writes_them() {
        assert_eq!(parse_slurm_duration("59:58"), Some(3598));
        assert_eq!(parse_slurm_duration("1:00:00"), Some(3600));
        assert_eq!(parse_slurm_duration("2-03:04:05"), Some(2 * 86400 + 11045));
        assert_eq!(parse_slurm_duration("7"), Some(7));
        assert_eq!(parse_slurm_duration("UNLIMITED"), None);
        assert_eq!(parse_slurm_duration("NOT_SET"), None);
        assert_eq!(parse_slurm_duration("1:2:3:4"), None);
        assert_eq!(parse_slurm_duration("-1:00"), None);
    }

    #[test]
    fn no_resource_manager_means_no_end_and_no_command() {
        let f = Fake::new(&[("HOME", "/root")]);
        assert_eq!(f.end(), None);
        assert!(f.ran().is_empty());
    }

    #[test]
    fn slurm_end_time_variable_wins_without_a_command() {
        let f = Fake::new(&[("SLURM_JOB_ID", "42"), ("SLURM_JOB_END_TIME", "1800003600")])
            .output("squeue -h -j 42 -o %L", "5:00\n");
        assert_eq!(
            f.end(),
            Some((1_800_003_600, "SLURM_JOB_END_TIME".to_string()))
        );
        assert!(f.ran().is_empty());
    }

    #[test]
    fn slurm_squeue_time_left_then_scontrol() {
        let f = Fake::new(&[("SLURM_JOBID", "42")]).output("squeue -h -j 42 -o %L", "1:00:00\n");
        assert_eq!(
            f.end(),
            Some((NOW + 3600, "squeue -h -j 42 -o %L".to_string()))
        );

        // squeue missing: scontrol's limit minus run time
        let f = Fake::new(&[("SLURM_JOB_ID", "42")]).output(
            "scontrol show job -o 42",
            "JobId=42 JobName=heat UserId=me(1) RunTime=00:10:00 TimeLimit=01:00:00 TimeMin=N/A EndTime=2027-01-15T10:00:00\n",
        );
        assert_eq!(
            f.end(),
            Some((NOW + 3000, "scontrol show job -o 42".to_string()))
        );
        assert_eq!(
            f.ran(),
            vec!["squeue -h -j 42 -o %L", "scontrol show job -o 42"]
        );

        // no limit
        let f = Fake::new(&[("SLURM_JOB_ID", "42")])
            .output("squeue -h -j 42 -o %L", "UNLIMITED\n")
            .output(
                "scontrol show job -o 42",
                "JobId=42 RunTime=00:10:00 TimeLimit=UNLIMITED\n",
            );
        assert_eq!(f.end(), None);
    }

    #[test]
    fn flux_timeleft_then_expiration() {
        let f = Fake::new(&[("FLUX_JOB_ID", "ƒ2CZbmq")]).output("flux job timeleft", "120\n");
        assert_eq!(f.end(), Some((NOW + 120, "flux job timeleft".to_string())));

        let f =
            Fake::new(&[("FLUX_JOB_ID", "ƒ2CZbmq")]).output("flux job timeleft", "4294967295\n");
        assert_eq!(f.end(), None);

        let f = Fake::new(&[("FLUX_JOB_ID", "ƒ2CZbmq")])
            .output("flux jobs -no {expiration} ƒ2CZbmq", "1800000500.25\n");
        assert_eq!(
            f.end(),
            Some((
                1_800_000_500,
                "flux jobs -no {expiration} ƒ2CZbmq".to_string()
            ))
        );

        let f = Fake::new(&[("FLUX_JOB_ID", "ƒ2CZbmq")])
            .output("flux jobs -no {expiration} ƒ2CZbmq", "0.0\n");
        assert_eq!(f.end(), None);
    }

    #[test]
    fn lsf_time_left() {
        let f =
            Fake::new(&[("LSB_JOBID", "7")]).output("bjobs -noheader -o time_left 7", "1:30 L\n");
        assert_eq!(
            f.end(),
            Some((NOW + 5400, "bjobs -noheader -o time_left 7".to_string()))
        );
        let f = Fake::new(&[("LSB_JOBID", "7")])
            .output("bjobs -noheader -o time_left 7", "01:30:15 E\n");
        assert_eq!(f.end().unwrap().0, NOW + 5415);
        let f = Fake::new(&[("LSB_JOBID", "7")]).output("bjobs -noheader -o time_left 7", "-\n");
        assert_eq!(f.end(), None);
    }

    #[test]
    fn pbs_remaining_or_limit_minus_used() {
        let f = Fake::new(&[("PBS_JOBID", "9.server")]).output(
            "qstat -f 9.server",
            "Job Id: 9.server\n    Resource_List.walltime = 01:00:00\n    Walltime.Remaining = 3540\n",
        );
        assert_eq!(f.end(), Some((NOW + 3540, "qstat -f 9.server".to_string())));

        let f = Fake::new(&[("PBS_JOBID", "9.server")]).output(
            "qstat -f 9.server",
            "Job Id: 9.server\n    resources_used.walltime = 00:20:00\n    Resource_List.walltime = 02:00:00\n",
        );
        assert_eq!(f.end(), Some((NOW + 6000, "qstat -f 9.server".to_string())));

        let f = Fake::new(&[("PBS_JOBID", "9.server")])
            .output("qstat -f 9.server", "Job Id: 9.server\n    job_state = R\n");
        assert_eq!(f.end(), None);
    }

    #[test]
    fn the_end_time_key_wins_and_names_its_origin() {
        let dir = tempfile::tempdir().unwrap();
        let system = dir.path().join("system.toml");
        std::fs::write(&system, "").unwrap();
        let mut loader = crate::config::Loader::default();
        loader.cwd = dir.path().to_path_buf();
        loader.env = [
            ("SCR_SYSTEM_CONFIG", system.display().to_string()),
            ("SCR_END_TIME", "1800000999".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let config = loader.load().unwrap();
        let (end, source) = from_config_and_env(&config).unwrap();
        assert_eq!(end, 1_800_000_999);
        assert!(source.starts_with("end_time ("), "{source}");
        assert!(source.contains("SCR_END_TIME"), "{source}");
    }

    #[test]
    fn a_missing_command_is_no_error() {
        // the real runner, with a program that does not exist
        assert_eq!(run_command(None, "scr-no-such-command-xyz", &[]), None);
        assert_eq!(run_command(None, "false", &[]), None);
        assert_eq!(run_command(None, "echo", &["hi"]).as_deref(), Some("hi\n"));
        // a hung command is killed at the deadline, also when its child keeps the
        // output pipe open
        let t = std::time::Instant::now();
        assert_eq!(
            run_command_within(
                None,
                "sh",
                &["-c", "sleep 30 & exec sleep 30"],
                Duration::from_millis(300)
            ),
            None
        );
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        // a PATH without the program
        assert_eq!(run_command(Some("/nonexistent"), "echo", &["hi"]), None);
    }
}
