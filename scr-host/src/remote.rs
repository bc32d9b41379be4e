//! Reaching the other nodes of an allocation from the launch host: the remote runner
//! that `scr postrun` scavenges through and `scr run` probes and cleans nodes through.
//!
//! # Why a runner, and which
//!
//! Node-local storage is readable only on its node, so the end of a job has to run a
//! command on every node (SCR's `scr_postrun` fans `scr_copy` out with pdsh). Which
//! command reaches a node is the site's: the resource manager's own launcher inside an
//! allocation, pdsh, ssh, or something else. The key `remote_runner` names it as a
//! template; unset, the first of these that applies is used:
//! 1. SLURM (`SLURM_JOB_ID` set, `srun` installed): `srun --overlap -N 1 -n 1 -w {node}
//!    sh -c {cmd}` (a step inside the allocation, beside a running one);
//! 2. Flux (`FLUX_URI` set, `flux` installed): `flux exec -r {rank} sh -c {cmd}`, the
//!    broker rank being the node's place in `flux getattr hostlist`;
//! 3. pdsh installed: `pdsh -S -N -w {node} {cmd}`;
//! 4. none: only this host (and simulated nodes, whose directories are all here).
//!
//! In a template, `{node}` is the node's name, `{rank}` its place in the allocation and
//! `{cmd}` the command as one shell-quoted string (appended when the template does not
//! place it), as rsh, ssh and pdsh expect: they join their arguments and hand them to a
//! shell there. The template is split at white space (no quoting inside it).
//!
//! # What runs there
//!
//! This very `scr` executable (its absolute path; an installation on a file system every
//! node sees, as the library itself must be) with the job's settings: every `SCR_*`
//! variable of this process's environment is passed on explicitly, plus the job id and
//! user in force here (a node reached through ssh or pdsh does not inherit the
//! allocation's environment, and the node's directories are named by them).
//!
//! # Bounds
//!
//! A probe (`scr run`'s node check) gets `remote_timeout` seconds; a node that does not
//! answer in time is down. Scavenge copies have no limit (a large cache takes what it
//! takes) but run on at most `remote_fanout` nodes at once.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::command::{output_within, CommandError, Output};
use crate::config::{settings, Config};

/// Why a command could not be run on a node, or gave no readable report. Each message
/// starts with the node's name.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RemoteError {
    /// The node's name is not a host name: it is never passed to the runner.
    #[error("`{node}` is not a host name (letters, digits, `.`, `-` and `_`, not starting with `-`); it is not passed to {runner}")]
    NotAHostName {
        /// The name given.
        node: String,
        /// The runner's source.
        runner: String,
    },
    /// The runner places `{rank}` and the node is not in the allocation.
    #[error("{node} is not in the allocation's node list ({allocation}), so its {{rank}} for {runner} is not known")]
    NotInAllocation {
        /// The node.
        node: String,
        /// The allocation's nodes (a compressed host list).
        allocation: String,
        /// The runner's source.
        runner: String,
    },
    /// The runner could not be started, or did not answer in time.
    #[error("{node} not reached through {runner}: {source}")]
    NotReached {
        /// The node.
        node: String,
        /// The runner's source.
        runner: String,
        /// Why.
        source: CommandError,
    },
    /// The command ended without its report line: it did not run to its end there.
    #[error("{node} not reached through {runner} ({}): {}", code.map_or("killed by a signal".into(), |c| format!("status {c}")), if stderr.is_empty() { "nothing on stderr" } else { stderr })]
    NoReport {
        /// The node.
        node: String,
        /// The runner's source.
        runner: String,
        /// The exit code (`None`: killed by a signal).
        code: Option<i32>,
        /// What it printed on stderr (trimmed).
        stderr: String,
    },
    /// The report line does not parse.
    #[error("{node}: its report `{report}` cannot be read: {source}")]
    BadReport {
        /// The node.
        node: String,
        /// The report.
        report: String,
        /// Why.
        source: serde_json::Error,
    },
}

/// The line a remote `scr` prints last, with its report (JSON), when [`REPORT_VAR`] is
/// set: the proof that it ran to its end there (see [`Runner::run_scr`]).
pub const REPORT_MARK: &str = "#scr-report ";

/// Set by the runner for the `scr` it runs on a node: print the [`REPORT_MARK`] line.
pub const REPORT_VAR: &str = "SCR_REMOTE_REPORT";

/// The report line for `payload` (what a remote `scr` prints last), when this process
/// was started by a runner ([`REPORT_VAR`] set); `None` otherwise.
pub fn report_line(payload: &impl serde::Serialize) -> Option<String> {
    std::env::var_os(REPORT_VAR)?;
    Some(format!(
        "{REPORT_MARK}{}",
        serde_json::to_string(payload).unwrap_or_else(|_| "null".into())
    ))
}

/// [`report_line`] when run by a runner, else the payload alone as a JSON line (what a
/// user running the command sees).
pub fn report_or_plain(payload: &impl serde::Serialize) -> String {
    report_line(payload)
        .unwrap_or_else(|| serde_json::to_string(payload).unwrap_or_else(|_| "null".into()))
}

/// Read a report's payload as `T`; an error naming `node` when it is not one.
pub(crate) fn parse_report<T: serde::de::DeserializeOwned>(
    node: &str,
    report: &str,
) -> Result<T, RemoteError> {
    serde_json::from_str(report).map_err(|source| RemoteError::BadReport {
        node: node.to_string(),
        report: report.to_string(),
        source,
    })
}

/// How long a command that has no limit of its own may run: a scavenge copy of a large
/// cache; a week stands for "no limit" without overflowing a deadline.
const NO_LIMIT: Duration = Duration::from_secs(7 * 24 * 3600);

/// A way to run `scr` on another node of the allocation.
#[derive(Clone, Debug)]
pub struct Runner {
    /// The template's words (`{node}`, `{rank}`, `{cmd}` replaced per call).
    words: Vec<String>,
    /// Where the template came from, for messages (`remote_runner (file ...)`, `srun
    /// (SLURM)`).
    pub source: String,
    /// The allocation's nodes in order: `{rank}` is a node's place in it.
    order: Vec<String>,
    /// The `scr` executable to run there.
    exe: PathBuf,
    /// The settings passed on: `(variable, value)`.
    env: Vec<(String, String)>,
    /// A probe's limit (`remote_timeout`).
    pub timeout: Duration,
    /// Nodes worked on at once (`remote_fanout`).
    pub fanout: usize,
}

/// What a command run on a node ended with: its output, or why it could not run or
/// did not answer in time.
pub(crate) type Answer = Result<RemoteOutput, RemoteError>;

/// What a command run on a node printed and its exit code (`None`: killed by a signal).
#[derive(Clone, Debug)]
pub struct RemoteOutput {
    /// Its exit code.
    pub code: Option<i32>,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
}

impl From<Output> for RemoteOutput {
    fn from(o: Output) -> RemoteOutput {
        RemoteOutput {
            code: o.status.code(),
            stdout: o.stdout,
            stderr: o.stderr,
        }
    }
}

impl Runner {
    /// The runner the configuration and the environment (`env`) give, for an allocation
    /// of `nodes` (in order); `None` when there is none (`remote_runner = "none"`, or
    /// unset and no resource manager launcher or pdsh is found).
    pub fn from_config(
        config: &Config,
        nodes: &[String],
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Option<Runner> {
        let key = config.get(settings::REMOTE_RUNNER);
        let key = key.trim();
        let (template, source) = if key.eq_ignore_ascii_case("none") {
            return None;
        } else if !key.is_empty() {
            let origin = &config.setting_of(settings::REMOTE_RUNNER).origin;
            (key.to_string(), format!("remote_runner ({origin})"))
        } else {
            let set = |v: &str| env(v).is_some_and(|s| !s.trim().is_empty());
            let path = env("PATH").unwrap_or_default();
            if set("SLURM_JOB_ID") && on_path(&path, "srun") {
                (
                    "srun --overlap -N 1 -n 1 -w {node} sh -c {cmd}".to_string(),
                    "srun (SLURM_JOB_ID is set)".to_string(),
                )
            } else if set("FLUX_URI") && on_path(&path, "flux") {
                (
                    "flux exec -r {rank} sh -c {cmd}".to_string(),
                    "flux exec (FLUX_URI is set)".to_string(),
                )
            } else if on_path(&path, "pdsh") {
                (
                    "pdsh -S -N -w {node} {cmd}".to_string(),
                    "pdsh (installed)".to_string(),
                )
            } else {
                return None;
            }
        };
        let mut words: Vec<String> = template.split_whitespace().map(String::from).collect();
        if !words.iter().any(|w| w.contains("{cmd}")) {
            words.push("{cmd}".into());
        }
        let mut pass: Vec<(String, String)> = std::env::vars()
            .filter(|(k, _)| k.starts_with("SCR_"))
            .collect();
        for (var, value) in [
            ("SCR_JOB_ID", config.get(settings::JOB_ID)),
            ("SCR_USER", config.get(settings::USER)),
            (REPORT_VAR, "1".to_string()),
        ] {
            pass.retain(|(k, _)| k != var);
            pass.push((var.to_string(), value));
        }
        pass.sort();
        Some(Runner {
            words,
            source,
            order: nodes.to_vec(),
            exe: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("scr")),
            env: pass,
            timeout: Duration::from_secs(config.get(settings::REMOTE_TIMEOUT).max(1)),
            fanout: config.get(settings::REMOTE_FANOUT).max(1) as usize,
        })
    }

    /// Run `scr` somewhere else than this executable (tests: the binary under test).
    #[cfg(test)]
    pub(crate) fn with_exe(mut self, exe: &std::path::Path) -> Runner {
        self.exe = exe.to_path_buf();
        self
    }

    /// The command line that runs `scr ARGS` on `node`; refused when the template
    /// places `{rank}` and `node` is not in the allocation (it would reach another node).
    pub fn command(&self, node: &str, args: &[String]) -> Result<Command, RemoteError> {
        let mut line: Vec<String> = vec!["env".into()];
        line.extend(self.env.iter().map(|(k, v)| quote(&format!("{k}={v}"))));
        line.push(quote(&self.exe.display().to_string()));
        line.extend(args.iter().map(|a| quote(a)));
        let cmd = line.join(" ");
        let rank = self.order.iter().position(|n| n == node);
        if rank.is_none() && self.words.iter().any(|w| w.contains("{rank}")) {
            return Err(RemoteError::NotInAllocation {
                node: node.to_string(),
                allocation: crate::hostlist::compress(&self.order),
                runner: self.source.clone(),
            });
        }
        let rank = rank.map(|r| r.to_string()).unwrap_or_default();
        // `{cmd}` inside a word too (`sh -c '{cmd}'` would otherwise pass it literally)
        let words: Vec<String> = self
            .words
            .iter()
            .map(|w| {
                w.replace("{node}", node)
                    .replace("{rank}", &rank)
                    .replace("{cmd}", &cmd)
            })
            .collect();
        let mut c = Command::new(&words[0]);
        c.args(&words[1..]);
        Ok(c)
    }

    /// Run `scr ARGS` on `node` and wait at most `limit` (`None`: no limit). A node name
    /// that is not a host name is refused: it becomes an argument of the runner (`ssh
    /// {node}`), where `-oProxyCommand=...` would be an option, not a host.
    pub fn run(&self, node: &str, args: &[String], limit: Option<Duration>) -> Answer {
        if !is_host_name(node) {
            return Err(RemoteError::NotAHostName {
                node: node.to_string(),
                runner: self.source.clone(),
            });
        }
        let mut cmd = self.command(node, args)?;
        output_within(&mut cmd, limit.unwrap_or(NO_LIMIT))
            .map(RemoteOutput::from)
            .map_err(|source| RemoteError::NotReached {
                node: node.to_string(),
                runner: self.source.clone(),
                source,
            })
    }

    /// Run `scr ARGS` on `node` (as [`Runner::run`]) and take its report: the payload of
    /// the last line it printed with [`REPORT_MARK`], and the lines before it. Without
    /// that line the command did not run to its end there — the runner failed (srun's
    /// exit 1, ssh's 255, an agent's refusal) or `scr` stopped early (a configuration
    /// error) — and the error says so with the status and what it printed on stderr:
    /// no exit status is ever taken for one of `scr`'s answers.
    pub fn run_scr(
        &self,
        node: &str,
        args: &[String],
        limit: Option<Duration>,
    ) -> Result<(Vec<String>, String), RemoteError> {
        let out = self.run(node, args, limit)?;
        let mut lines: Vec<String> = out.stdout.lines().map(String::from).collect();
        match lines.iter().rposition(|l| l.starts_with(REPORT_MARK)) {
            Some(i) => {
                let report = lines[i][REPORT_MARK.len()..].to_string();
                lines.truncate(i);
                Ok((lines, report))
            }
            None => Err(RemoteError::NoReport {
                node: node.to_string(),
                runner: self.source.clone(),
                code: out.code,
                stderr: out.stderr.trim().to_string(),
            }),
        }
    }

    /// `f` for every node of `nodes`, at most `fanout` at once; the answers in `nodes`'
    /// order.
    pub fn each<T: Send>(&self, nodes: &[String], f: impl Fn(&str) -> T + Sync) -> Vec<T> {
        fan_out(nodes, self.fanout, f)
    }
}

/// `f` for every node of `nodes` on at most `width` threads; the answers in order.
pub(crate) fn fan_out<T: Send>(
    nodes: &[String],
    width: usize,
    f: impl Fn(&str) -> T + Sync,
) -> Vec<T> {
    let next = AtomicUsize::new(0);
    let mut out: Vec<(usize, T)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..width.clamp(1, nodes.len().max(1)))
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(node) = nodes.get(i) else { break };
                        mine.push((i, f(node)));
                    }
                    mine
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a fan-out worker panicked"))
            .collect()
    });
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, t)| t).collect()
}

/// Whether `a` and `b` name the same host: equal, or equal up to the first dot (a
/// resource manager's short name against `gethostname`'s fully qualified one).
pub(crate) fn same_host(a: &str, b: &str) -> bool {
    let short = |n: &str| n.split('.').next().unwrap_or(n).to_string();
    a == b || short(a) == short(b)
}

/// Whether `name` can only be a host name for a runner (no option, no shell syntax).
fn is_host_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-_".contains(c))
}

/// `word` quoted for a POSIX shell (single quotes; a quote inside closes, escapes and
/// reopens them), unless it is made of characters no shell treats specially.
pub fn quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@+%".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// Whether an executable `name` is in one of the `PATH` directories.
fn on_path(path: &str, name: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(path).any(|d| {
        std::fs::metadata(d.join(name))
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::path::Path;

    fn config(vars: &[(&str, &str)]) -> Config {
        Config::from_vars(vars)
    }

    fn runner(cfg: &[(&str, &str)], env: &[(&str, &str)]) -> Option<Runner> {
        let env: BTreeMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let nodes = vec!["n0".to_string(), "n1".to_string()];
        Runner::from_config(&config(cfg), &nodes, &|k| env.get(k).cloned())
    }

    fn argv(c: &Command) -> Vec<String> {
        std::iter::once(c.get_program())
            .chain(c.get_args())
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn quoting_survives_a_shell() {
        for w in [
            "plain",
            "two words",
            "it's",
            "$HOME",
            "a\"b",
            "",
            "x;rm -rf /",
        ] {
            let out = Command::new("sh")
                .arg("-c")
                .arg(format!("printf %s {}", quote(w)))
                .output()
                .unwrap();
            assert_eq!(String::from_utf8_lossy(&out.stdout), w);
        }
    }

    #[test]
    fn a_template_places_node_rank_and_the_quoted_command() {
        let r = runner(
            &[("SCR_REMOTE_RUNNER", "ssh -x {node}"), ("SCR_JOB_ID", "77")],
            &[],
        )
        .unwrap()
        .with_exe(Path::new("/opt/scr dir/scr"));
        assert!(
            r.source
                .starts_with("remote_runner (environment SCR_REMOTE_RUNNER"),
            "{}",
            r.source
        );
        let a = argv(
            &r.command("n1", &["scavenge".into(), "--node".into(), "n1".into()])
                .unwrap(),
        );
        assert_eq!(&a[..3], ["ssh", "-x", "n1"]);
        assert_eq!(a.len(), 4, "{a:?}");
        assert!(a[3].starts_with("env "), "{}", a[3]);
        assert!(a[3].contains("SCR_JOB_ID=77 "), "{}", a[3]);
        assert!(
            a[3].ends_with(" '/opt/scr dir/scr' scavenge --node n1"),
            "{}",
            a[3]
        );
        let r = runner(
            &[("SCR_REMOTE_RUNNER", "flux exec -r {rank} sh -c {cmd}")],
            &[],
        )
        .unwrap();
        let a = argv(&r.command("n1", &["x".into()]).unwrap());
        assert_eq!(&a[..6], ["flux", "exec", "-r", "1", "sh", "-c"]);
        assert_eq!(a.len(), 6 + 1);
    }

    #[test]
    fn the_runner_is_found_in_the_environment_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        for tool in ["srun", "flux", "pdsh"] {
            let p = dir.path().join(tool);
            std::fs::write(&p, "#!/bin/sh\n").unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let path = dir.path().to_str().unwrap();
        let r = runner(&[], &[("PATH", path), ("SLURM_JOB_ID", "5")]).unwrap();
        assert_eq!(
            argv(&r.command("n0", &[]).unwrap())[..8],
            ["srun", "--overlap", "-N", "1", "-n", "1", "-w", "n0"]
        );
        let r = runner(&[], &[("PATH", path), ("FLUX_URI", "local://x")]).unwrap();
        assert_eq!(
            argv(&r.command("n1", &[]).unwrap())[..4],
            ["flux", "exec", "-r", "1"]
        );
        let r = runner(&[], &[("PATH", path)]).unwrap();
        assert_eq!(
            argv(&r.command("n1", &[]).unwrap())[..5],
            ["pdsh", "-S", "-N", "-w", "n1"]
        );
        assert!(runner(&[], &[("PATH", "/nonexistent")]).is_none());
        assert!(runner(&[("SCR_REMOTE_RUNNER", "none")], &[("PATH", path)]).is_none());
    }

    #[test]
    fn a_node_that_does_not_answer_in_time_is_named() {
        let r = runner(&[("SCR_REMOTE_RUNNER", "sh -c {cmd}")], &[])
            .unwrap()
            .with_exe(Path::new("/bin/sleep"));
        let e = r
            .run("n0", &["20".into()], Some(Duration::from_millis(300)))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("n0 not reached through remote_runner"), "{e}");
        assert!(e.contains("did not answer within 0.3 s"), "{e}");
        let r = r.with_exe(Path::new("/bin/echo"));
        let o = r.run("n0", &["it's here".into()], None).unwrap();
        assert_eq!((o.code, o.stdout.as_str()), (Some(0), "it's here\n"));
        for bad in ["-oProxyCommand=touch /tmp/x", "n0;reboot", "", "n 0"] {
            let e = r.run(bad, &[], None).unwrap_err().to_string();
            assert!(e.contains("is not a host name"), "{e}");
        }
    }

    #[test]
    fn only_a_report_line_proves_that_scr_ran_there() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let script = |name: &str, body: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
            p.display().to_string()
        };
        // a runner that fails by itself with status 1 (srun's "Unable to create step")
        let fails = script("fails", "echo step refused >&2; exit 1");
        let r = runner(&[("SCR_REMOTE_RUNNER", &format!("{fails} {{node}}"))], &[]).unwrap();
        let e = r.run_scr("n0", &[], None).unwrap_err().to_string();
        assert_eq!(
            e,
            "n0 not reached through remote_runner (environment SCR_REMOTE_RUNNER) (status 1): step refused"
        );
        // `{cmd}` inside a word is placed too; the report is the payload of the last
        // marked line, the lines before it are returned
        let runs = script("runs", "exec sh -c \"${1#--command=}\"");
        let r = runner(
            &[("SCR_REMOTE_RUNNER", &format!("{runs} --command={{cmd}}"))],
            &[],
        )
        .unwrap()
        .with_exe(Path::new("/bin/printf"));
        let (lines, report) = r
            .run_scr("n0", &["a\\n#scr-report {\"x\":1}\\n".into()], None)
            .unwrap();
        assert_eq!(
            (lines, report.as_str()),
            (vec!["a".to_string()], "{\"x\":1}")
        );
        // `{rank}` of a node outside the allocation is not guessed
        let r = runner(&[("SCR_REMOTE_RUNNER", "flux exec -r {rank}")], &[]).unwrap();
        let e = r.run("n9", &[], None).unwrap_err().to_string();
        assert!(
            e.starts_with("n9 is not in the allocation's node list (n[0-1])"),
            "{e}"
        );
    }

    #[test]
    fn fan_out_keeps_order_and_bounds_the_width() {
        let nodes: Vec<String> = (0..20).map(|i| format!("n{i}")).collect();
        let now = AtomicUsize::new(0);
        let most = AtomicUsize::new(0);
        let out = fan_out(&nodes, 3, |n| {
            let in_flight = now.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(in_flight, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(5));
            now.fetch_sub(1, Ordering::SeqCst);
            n.to_uppercase()
        });
        assert_eq!(
            out,
            nodes.iter().map(|n| n.to_uppercase()).collect::<Vec<_>>()
        );
        assert!(most.load(Ordering::SeqCst) <= 3);
        assert!(most.load(Ordering::SeqCst) >= 2, "never ran two at once");
    }
}
