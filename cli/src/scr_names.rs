//! SCR's command names (`scr_run`, `scr_srun`, `scr_mpirun`, `scr_jsrun`, `scr_halt`,
//! `scr_index`, `scr_postrun`, `scr_prerun`, `scr_list_down_nodes`, `scr_should_exit`),
//! installed as links to `scr`: called by one of those names, `scr` reads SCR 3.1's
//! options (its user guide's run, halt and manage pages) and does the same through its
//! own subcommands, so that job scripts written for SCR run unchanged.
//!
//! [`translate`] turns a name and its arguments into a [`Plan`]: `scr` command lines to
//! run in turn, or one of the few queries that have no `scr` subcommand of their own.
//! Usage errors are `Err` with the message; SCR's tools exit 1 for them.

/// The names `scr` answers to, with what each is.
pub const NAMES: &[(&str, &str)] = &[
    ("scr_run", "scr_run LAUNCHER [LAUNCHER_ARGS] PROG [PROG_ARGS]: scr run -- LAUNCHER ..."),
    ("scr_srun", "scr_srun [SRUN_ARGS] PROG [PROG_ARGS]: scr run -- srun ..."),
    ("scr_mpirun", "scr_mpirun [MPIRUN_ARGS] PROG [PROG_ARGS]: scr run -- mpirun ..."),
    ("scr_jsrun", "scr_jsrun [JSRUN_ARGS] PROG [PROG_ARGS]: scr run -- jsrun ..."),
    ("scr_halt", "scr_halt [-c N] [-b TIME] [-a TIME] [-i] [-s N] [-l] [--unset-checkpoints|--unset-before|--unset-after|--unset-seconds|--unset-reason] [-r] [-v] [PREFIX_DIR ...]"),
    ("scr_index", "scr_index [-p DIR] [-l | -c NAME | --drop NAME | --drop-after NAME | -a NAME | -b ID]"),
    ("scr_postrun", "scr_postrun [-j LAUNCHER] [-p DIR] [-v]"),
    ("scr_prerun", "scr_prerun [-p DIR] [-v]"),
    ("scr_list_down_nodes", "scr_list_down_nodes [-j LAUNCHER] [-r] [-d NODESET] [-f] [-l] [-s SECS] [NODESET]"),
    ("scr_should_exit", "scr_should_exit [-p DIR] [--down NODESET] [--min-nodes N] [--runs N] [-v]"),
];

/// The launchers SCR's `scr_run` accepts (and `mpiexec`).
const LAUNCHERS: &[&str] = &[
    "aprun", "flux", "jsrun", "lrun", "mpirun", "mpiexec", "srun",
];

/// What an SCR command line does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Print the usage line and exit 0 (`-h`, `--help`).
    Help(String),
    /// Run these `scr` command lines (arguments after the program name) in turn; the
    /// exit status is the first failing one's.
    Scr(Vec<Vec<String>>),
    /// SCR's `scr_prerun`: prepare the prefix before the first launch of an allocation.
    Prerun {
        /// The prefix directory (default: the configuration's).
        prefix: Option<String>,
        /// Say what was done.
        verbose: bool,
    },
    /// SCR's `scr_list_down_nodes`: one compressed list of the down nodes (empty when
    /// none), or a `NODE: REASON` line each with `reasons`; exit 0.
    ListDownNodes {
        /// The nodes to check (default: the allocation's).
        nodes: Option<String>,
        /// Nodes to take as down without checking them.
        down: Vec<String>,
        /// Print each node's reason.
        reasons: bool,
    },
    /// SCR's `scr_should_exit`: exit 0 when the job should stop launching runs (a halt
    /// condition, no run left, too few nodes left), else 1.
    ShouldExit {
        /// The prefix directory (default: the configuration's).
        prefix: Option<String>,
        /// Nodes known to be down.
        down: Option<String>,
        /// Nodes a run needs (default: `min_nodes`, else the last run's, else the
        /// allocation's).
        min_nodes: Option<u64>,
        /// Runs left (0: stop).
        runs: Option<u64>,
        /// Say why.
        verbose: bool,
    },
}

/// The command name `argv0` answers to, if it is one of SCR's (its base name).
pub fn scr_name(argv0: &str) -> Option<&'static str> {
    let base = argv0.rsplit('/').next().unwrap_or(argv0);
    NAMES.iter().map(|(n, _)| *n).find(|n| *n == base)
}

/// The usage line of `name`.
fn usage(name: &str) -> String {
    let line = NAMES
        .iter()
        .find(|(n, _)| *n == name)
        .map_or("", |(_, u)| *u);
    format!(
        "Usage: {line}\n(scr-rs: the same as SCR 3.1's {name}, through `scr`; see `scr --help`)"
    )
}

/// Command-line words, with `--opt=value` split into `--opt value`.
struct Words {
    words: std::collections::VecDeque<String>,
    name: &'static str,
}

impl Words {
    fn new(name: &'static str, args: &[String]) -> Words {
        let mut words = std::collections::VecDeque::new();
        for a in args {
            match a.split_once('=') {
                Some((opt, value)) if opt.starts_with('-') => {
                    words.push_back(opt.to_string());
                    words.push_back(value.to_string());
                }
                _ => words.push_back(a.clone()),
            }
        }
        Words { words, name }
    }

    fn next(&mut self) -> Option<String> {
        self.words.pop_front()
    }

    /// The value of option `opt`.
    fn value(&mut self, opt: &str) -> Result<String, String> {
        self.next()
            .ok_or_else(|| format!("{}: {opt} needs a value\n{}", self.name, usage(self.name)))
    }

    /// The whole-number value of option `opt`.
    fn number(&mut self, opt: &str) -> Result<u64, String> {
        let v = self.value(opt)?;
        v.trim()
            .parse()
            .map_err(|_| format!("{}: {opt} {v}: not a whole number", self.name))
    }

    fn unknown(&self, word: &str) -> String {
        format!("{}: unknown option {word}\n{}", self.name, usage(self.name))
    }
}

/// What `name` (one of [`NAMES`]) called with `args` does. `to_epoch` turns one of
/// `scr_halt`'s times (SCR's `YYYY-MM-DDTHH:MM:SS`, local time) into seconds since the
/// epoch.
pub fn translate(
    name: &str,
    args: &[String],
    to_epoch: &dyn Fn(&str) -> Result<i64, String>,
) -> Result<Plan, String> {
    let Some(name) = scr_name(name) else {
        return Err(format!("{name}: not one of SCR's command names"));
    };
    // (the launchers' forms pass every word after the launcher on: `--help` there is the
    // application's, unless it comes first)
    let launches = ["scr_run", "scr_srun", "scr_mpirun", "scr_jsrun"].contains(&name);
    if !launches && args.iter().any(|a| a == "-h" || a == "--help") {
        return Ok(Plan::Help(usage(name)));
    }
    match name {
        "scr_run" | "scr_srun" | "scr_mpirun" | "scr_jsrun" => run(name, args),
        "scr_halt" => halt(args, to_epoch),
        "scr_index" => index(args),
        "scr_postrun" => {
            let mut w = Words::new(name, args);
            let mut scr = vec!["postrun".to_string()];
            while let Some(a) = w.next() {
                match a.as_str() {
                    // (the launcher: `scr postrun` reaches the nodes its own way)
                    "-j" | "--joblauncher" => drop(w.value(&a)?),
                    "-p" | "--prefix" => scr.extend(["--prefix".into(), w.value(&a)?]),
                    "-v" | "--verbose" => {}
                    _ => return Err(w.unknown(&a)),
                }
            }
            Ok(Plan::Scr(vec![scr]))
        }
        "scr_prerun" => {
            let mut w = Words::new(name, args);
            let (mut prefix, mut verbose) = (None, false);
            while let Some(a) = w.next() {
                match a.as_str() {
                    "-p" | "--prefix" => prefix = Some(w.value(&a)?),
                    "-v" | "--verbose" => verbose = true,
                    _ => return Err(w.unknown(&a)),
                }
            }
            Ok(Plan::Prerun { prefix, verbose })
        }
        "scr_list_down_nodes" => {
            let mut w = Words::new(name, args);
            let (mut nodes, mut down, mut reasons) = (None, Vec::new(), false);
            while let Some(a) = w.next() {
                match a.as_str() {
                    "-j" | "--joblauncher" => drop(w.value(&a)?),
                    "-r" | "--reason" => reasons = true,
                    "-d" | "--down" => down.push(w.value(&a)?),
                    // (free space is always checked; the log and the seconds are SCR's
                    // own event log's, written by `scr run` here)
                    "-f" | "--free" | "-l" | "--log" => {}
                    "-s" | "--secs" => drop(w.number(&a)?),
                    o if o.starts_with('-') => return Err(w.unknown(o)),
                    _ if nodes.is_none() => nodes = Some(a),
                    _ => return Err(format!("{name}: one node set at most, got {a} too")),
                }
            }
            Ok(Plan::ListDownNodes {
                nodes,
                down,
                reasons,
            })
        }
        _ => {
            let mut w = Words::new(name, args);
            let mut plan = (None, None, None, None, false);
            while let Some(a) = w.next() {
                match a.as_str() {
                    "-p" | "--prefix" => plan.0 = Some(w.value(&a)?),
                    "--down" => plan.1 = Some(w.value(&a)?),
                    "--min-nodes" => plan.2 = Some(w.number(&a)?),
                    "--runs" => plan.3 = Some(w.number(&a)?),
                    "-v" | "--verbose" => plan.4 = true,
                    _ => return Err(w.unknown(&a)),
                }
            }
            let (prefix, down, min_nodes, runs, verbose) = plan;
            Ok(Plan::ShouldExit {
                prefix,
                down,
                min_nodes,
                runs,
                verbose,
            })
        }
    }
}

/// `scr_run LAUNCHER ...` and its forms with the launcher in the name.
fn run(name: &'static str, args: &[String]) -> Result<Plan, String> {
    let launcher = match name {
        "scr_srun" => Some("srun"),
        "scr_mpirun" => Some("mpirun"),
        "scr_jsrun" => Some("jsrun"),
        _ => None,
    };
    let mut words: Vec<String> = launcher.map(str::to_string).into_iter().collect();
    words.extend(args.iter().cloned());
    if let Some(first) = args.first() {
        if first == "-h" || first == "--help" {
            return Ok(Plan::Help(usage(name)));
        }
    }
    for a in &words {
        let opt = a.split('=').next().unwrap_or(a);
        if ["-rc", "--run-cmd", "-rs", "--restart-cmd"].contains(&opt) {
            return Err(format!(
                "{name}: {opt} is not supported: the application finds its restart through SCR_Have_restart (name its checkpoint there); run the application itself"
            ));
        }
    }
    if words.len() < 2 {
        return Err(format!("{name}: no program to launch\n{}", usage(name)));
    }
    if !LAUNCHERS.contains(&words[0].as_str()) {
        return Err(format!(
            "{name}: invalid launcher {}: one of {} (or `scr run -- ANY LAUNCHER ...`)",
            words[0],
            LAUNCHERS.join(", ")
        ));
    }
    let mut scr = vec!["run".to_string(), "--".to_string()];
    scr.extend(words);
    Ok(Plan::Scr(vec![scr]))
}

/// `scr_halt`: each change of SCR's, on every prefix named (default: the
/// configuration's), then the conditions listed, as SCR prints them after a change.
fn halt(args: &[String], to_epoch: &dyn Fn(&str) -> Result<i64, String>) -> Result<Plan, String> {
    let mut w = Words::new("scr_halt", args);
    let mut opts: Vec<String> = Vec::new();
    let mut dirs: Vec<String> = Vec::new();
    let mut changes = false;
    let time = |opt: &str, v: String| -> Result<String, String> {
        // this `scr halt`'s own forms (seconds since the epoch, +SECONDS) pass as they are
        if v.trim().parse::<i64>().is_ok() || v.starts_with('+') {
            return Ok(v);
        }
        to_epoch(&v)
            .map(|t| t.to_string())
            .map_err(|e| format!("scr_halt: {opt} {v}: {e} (give YYYY-MM-DDTHH:MM:SS)"))
    };
    while let Some(a) = w.next() {
        changes |=
            !matches!(a.as_str(), "-l" | "--list" | "-v" | "--verbose") && a.starts_with('-');
        match a.as_str() {
            "-c" | "--checkpoints" => {
                let n = w.number(&a)?;
                opts.extend(["--checkpoints".into(), n.to_string()]);
            }
            "-b" | "--before" => {
                let v = time(&a, w.value(&a)?)?;
                opts.extend(["--before".into(), v]);
            }
            "-a" | "--after" => {
                let v = time(&a, w.value(&a)?)?;
                opts.extend(["--after".into(), v]);
            }
            "-s" | "--seconds" => {
                let n = w.number(&a)?;
                opts.extend(["--seconds".into(), n.to_string()]);
            }
            "-i" | "--immediate" => opts.extend(["--reason".into(), "JOB_HALTED".into()]),
            "-r" | "--remove" => opts.push("--clear".into()),
            "-l" | "--list" | "-v" | "--verbose" => {}
            u if u.starts_with("--unset-") => {
                let what = &u["--unset-".len()..];
                if !["checkpoints", "before", "after", "seconds", "reason"].contains(&what) {
                    return Err(w.unknown(u));
                }
                opts.extend(["--unset".into(), what.into()]);
            }
            o if o.starts_with('-') => return Err(w.unknown(o)),
            _ => dirs.push(a),
        }
    }
    // with no option at all, SCR's scr_halt halts the job now
    if !changes && !args.iter().any(|a| a == "-l" || a == "--list") {
        opts.extend(["--reason".into(), "JOB_HALTED".into()]);
    }
    let on = |dir: Option<&String>| {
        let mut c = vec!["halt".to_string()];
        if let Some(d) = dir {
            c.extend(["--prefix".into(), d.clone()]);
        }
        c.extend(opts.iter().cloned());
        c
    };
    Ok(Plan::Scr(match dirs.is_empty() {
        true => vec![on(None)],
        false => dirs.iter().map(|d| on(Some(d))).collect(),
    }))
}

/// `scr_index`: one action (default: list).
fn index(args: &[String]) -> Result<Plan, String> {
    let mut w = Words::new("scr_index", args);
    let mut prefix = Vec::new();
    let mut action: Option<Vec<String>> = None;
    while let Some(a) = w.next() {
        let this = match a.as_str() {
            "-p" | "--prefix" => {
                prefix = vec!["--prefix".to_string(), w.value(&a)?];
                continue;
            }
            "-l" | "--list" => vec!["list".to_string()],
            "-c" | "--current" => vec!["current".into(), w.value(&a)?],
            "-d" | "--drop" => vec!["drop".into(), w.value(&a)?],
            "--drop-after" => vec!["drop-after".into(), w.value(&a)?],
            "-a" | "--add" => vec!["add".into(), w.value(&a)?],
            // (a dataset in the prefix is complete or absent here: `scr postrun`
            // rebuilds lost files before it copies; adding checks every file)
            "-b" | "--build" => vec!["add".into(), w.number(&a)?.to_string()],
            _ => return Err(w.unknown(&a)),
        };
        if action.replace(this).is_some() {
            return Err(format!(
                "scr_index: one action at a time\n{}",
                usage("scr_index")
            ));
        }
    }
    let mut scr = vec!["index".to_string()];
    scr.extend(prefix);
    scr.extend(action.unwrap_or_else(|| vec!["list".into()]));
    Ok(Plan::Scr(vec![scr]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_string).collect()
    }

    fn epoch(t: &str) -> Result<i64, String> {
        match t {
            "2023-07-04T21:00:00" => Ok(1_688_504_400),
            _ => Err("unsupported time format".into()),
        }
    }

    /// The `scr` command lines `line` (an SCR command line from its user guide) runs.
    fn scr_lines(line: &str) -> Vec<String> {
        let words = args(line);
        match translate(&words[0], &words[1..], &epoch) {
            Ok(Plan::Scr(lines)) => lines.iter().map(|l| l.join(" ")).collect(),
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn scr_halt_as_scrs_user_guide_writes_it() {
        for (line, want) in [
            ("scr_halt", vec!["halt --reason JOB_HALTED"]),
            (
                "scr_halt /p/lscratcha/user1/simulation123",
                vec!["halt --prefix /p/lscratcha/user1/simulation123 --reason JOB_HALTED"],
            ),
            ("scr_halt --checkpoints 10", vec!["halt --checkpoints 10"]),
            (
                "scr_halt --after 2023-07-04T21:00:00",
                vec!["halt --after 1688504400"],
            ),
            (
                "scr_halt --before=2023-07-04T21:00:00",
                vec!["halt --before 1688504400"],
            ),
            ("scr_halt --immediate", vec!["halt --reason JOB_HALTED"]),
            (
                "scr_halt --checkpoints 10 --before 2023-07-04T21:00:00",
                vec!["halt --checkpoints 10 --before 1688504400"],
            ),
            ("scr_halt --list", vec!["halt"]),
            ("scr_halt --unset-before", vec!["halt --unset before"]),
            ("scr_halt --remove", vec!["halt --clear"]),
            (
                "scr_halt -c 3 -s 600 a b",
                vec![
                    "halt --prefix a --checkpoints 3 --seconds 600",
                    "halt --prefix b --checkpoints 3 --seconds 600",
                ],
            ),
        ] {
            assert_eq!(scr_lines(line), want, "{line}");
        }
        let e = translate("scr_halt", &args("--before tomorrow"), &epoch).unwrap_err();
        assert_eq!(
            e,
            "scr_halt: --before tomorrow: unsupported time format (give YYYY-MM-DDTHH:MM:SS)"
        );
        let e = translate("scr_halt", &args("--unset-everything"), &epoch).unwrap_err();
        assert!(
            e.starts_with("scr_halt: unknown option --unset-everything\nUsage: scr_halt"),
            "{e}"
        );
    }

    #[test]
    fn scr_index_as_scrs_user_guide_writes_it() {
        for (line, want) in [
            ("scr_index", "index list"),
            ("scr_index --list", "index list"),
            ("scr_index --current ckpt.12", "index current ckpt.12"),
            ("scr_index --drop ckpt.50", "index drop ckpt.50"),
            ("scr_index --add ckpt.50", "index add ckpt.50"),
            ("scr_index --build 50", "index add 50"),
            (
                "scr_index --prefix=/p/run1 --drop-after ckpt.8",
                "index --prefix /p/run1 drop-after ckpt.8",
            ),
        ] {
            assert_eq!(scr_lines(line), [want], "{line}");
        }
        let e = translate("scr_index", &args("--add a --drop b"), &epoch).unwrap_err();
        assert!(e.starts_with("scr_index: one action at a time"), "{e}");
        let e = translate("scr_index", &args("--build x"), &epoch).unwrap_err();
        assert_eq!(e, "scr_index: --build x: not a whole number");
    }

    #[test]
    fn scr_run_and_its_launcher_forms() {
        assert_eq!(
            scr_lines("scr_run srun -n512 -N64 ./my_job"),
            ["run -- srun -n512 -N64 ./my_job"]
        );
        assert_eq!(
            scr_lines("/opt/scr/bin/scr_srun -n512 -N64 ./my_job --steps 3"),
            ["run -- srun -n512 -N64 ./my_job --steps 3"]
        );
        assert_eq!(scr_lines("scr_jsrun -n 4 ./a"), ["run -- jsrun -n 4 ./a"]);
        assert_eq!(
            scr_lines("scr_mpirun -np 4 ./a"),
            ["run -- mpirun -np 4 ./a"]
        );
        let e = translate("scr_run", &args("ssh ./a"), &epoch).unwrap_err();
        assert!(
            e.starts_with("scr_run: invalid launcher ssh: one of aprun"),
            "{e}"
        );
        let e = translate("scr_run", &args("srun --run-cmd=./a ./a"), &epoch).unwrap_err();
        assert!(e.starts_with("scr_run: --run-cmd is not supported"), "{e}");
        let e = translate("scr_run", &args("srun"), &epoch).unwrap_err();
        assert!(e.starts_with("scr_run: no program to launch"), "{e}");
        // the application's own --help is the application's
        assert_eq!(
            scr_lines("scr_srun -n 2 ./a --help"),
            ["run -- srun -n 2 ./a --help"]
        );
    }

    #[test]
    fn the_queries_and_postrun_and_prerun_of_scrs_job_scripts() {
        assert_eq!(
            scr_lines("scr_postrun -p /p/run1 -j srun -v"),
            ["postrun --prefix /p/run1"]
        );
        let words = args("--down n[3-4] -j srun -r n[1-8]");
        assert_eq!(
            translate("scr_list_down_nodes", &words, &epoch).unwrap(),
            Plan::ListDownNodes {
                nodes: Some("n[1-8]".into()),
                down: vec!["n[3-4]".into()],
                reasons: true
            }
        );
        let words = args("-p /p/run1 --down n3 --runs 2 --min-nodes 4 -v");
        assert_eq!(
            translate("scr_should_exit", &words, &epoch).unwrap(),
            Plan::ShouldExit {
                prefix: Some("/p/run1".into()),
                down: Some("n3".into()),
                min_nodes: Some(4),
                runs: Some(2),
                verbose: true
            }
        );
        assert_eq!(
            translate("scr_prerun", &args("-p /p/run1"), &epoch).unwrap(),
            Plan::Prerun {
                prefix: Some("/p/run1".into()),
                verbose: false
            }
        );
        for name in ["scr_should_exit", "scr_postrun", "scr_prerun", "scr_halt"] {
            assert!(
                matches!(
                    translate(name, &args("--help"), &epoch).unwrap(),
                    Plan::Help(u) if u.starts_with(&format!("Usage: {name} ["))
                ),
                "{name}"
            );
        }
        assert_eq!(scr_name("/usr/bin/scr_index"), Some("scr_index"));
        assert_eq!(scr_name("scr"), None);
    }
}
