//! `scr-bench-recovery`: how long a job takes from a lost process to its first step after
//! recovery, online (a spare inside the same `mpiexec`, under MPI with ULFM) against a
//! relaunch by `scr run`, the same job on the same machine, as a ratio.
//!
//! Both runs are `scr-heat` with `--ranks` ranks on simulated nodes of two ranks each
//! (XOR), checkpointing every 5 steps; rank 2 is killed after `--kill-at` steps and its
//! node's cache and control directories are removed first. The clock runs from the
//! killed rank's `t_kill` (just before SIGKILL) to rank 0's `t_resumed` (its first step
//! after the restart): detection, repair or relaunch, init with the rebuild, the restart
//! read and one step.
//!
//! - online: the wheel's `mpiexec --with-ft ulfm` with one spare more (`scr-heat
//!   --spares 1`);
//! - relaunch: `scr run --runs 2 -- LAUNCHER {ranks}` with Debian's `mpiexec`, whose
//!   first launch kills the rank and whose second restarts.
//!
//! The pairs alternate which runs first; the table gives each pair and the medians.
//! Both final states are checked against each other. Run after `cargo build --release`
//! and `scripts/setup.sh` (which installs the ULFM Open MPI into `target/ulfm`):
//! `target/release/scr-bench-recovery`.

use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    name = "scr-bench-recovery",
    version,
    about = "Time from a lost process to the first step after recovery: online (ULFM spare) against an `scr run` relaunch"
)]
struct Args {
    /// Application ranks (two per simulated node).
    #[arg(long, default_value_t = 8)]
    ranks: usize,
    /// Steps of the job.
    #[arg(long, default_value_t = 40)]
    steps: u64,
    /// Rank 2 is killed after this step.
    #[arg(long, default_value_t = 17)]
    kill_at: u64,
    /// Cells per rank.
    #[arg(long, default_value_t = 4096)]
    cells: usize,
    /// Pairs of runs (online and relaunch).
    #[arg(long, default_value_t = 3)]
    pairs: usize,
    /// Where the simulated nodes' storage and the prefix go.
    #[arg(long, default_value = "/dev/shm")]
    dir: PathBuf,
    /// The Open MPI with ULFM (default: target/ulfm beside this program's build).
    #[arg(long)]
    ulfm: Option<PathBuf>,
}

/// The OpenMPI settings the tests and benchmarks share (`tests/openmpi-local.env`).
const LOCAL_ENV: &str = include_str!("../../../tests/openmpi-local.env");

fn local_env() -> Vec<(&'static str, &'static str)> {
    LOCAL_ENV
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .collect()
}

/// A program of this build (beside this one).
fn sibling(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("own path");
    exe.with_file_name(name)
}

/// One run's directories: node-local bases and the prefix.
struct Site {
    dir: tempfile::TempDir,
}

impl Site {
    fn new(base: &Path) -> Site {
        let dir = tempfile::Builder::new()
            .prefix("scr-bench-recovery.")
            .tempdir_in(base)
            .expect("temporary directory");
        for d in ["cache", "cntl", "prefix"] {
            std::fs::create_dir(dir.path().join(d)).expect("mkdir");
        }
        Site { dir }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// The environment of a job on `nodes`.
    fn env(&self, cmd: &mut Command, nodes: &[String]) {
        for (k, v) in local_env() {
            cmd.env(k, v);
        }
        cmd.current_dir(self.path("prefix"))
            .env("SCR_CACHE_BASE", self.path("cache"))
            .env("SCR_CNTL_BASE", self.path("cntl"))
            .env("SCR_JOB_ID", "bench")
            .env("SCR_SYSTEM_CONFIG", "/dev/null")
            .env("SCR_COPY_TYPE", "XOR")
            .env("SCR_NODE_NAMES", nodes.join(","))
            .env("USER", "bench")
            .env_remove("SCR_CONF_FILE");
    }

    /// The directories rank 2's node loses.
    fn lost_node(&self) -> String {
        format!(
            "{},{}",
            self.path("cache/n1").display(),
            self.path("cntl/n1").display()
        )
    }
}

/// The value after `key ` on the first line that has it.
fn value(out: &str, key: &str) -> Option<String> {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{key} ")))
        .map(str::to_string)
}

/// Seconds from `t_kill` to `t_resumed` in a job's output, and its final state.
fn measured(what: &str, out: &std::process::Output) -> (f64, String) {
    let text = String::from_utf8_lossy(&out.stdout);
    let ms = |key: &str| -> u128 {
        value(&text, key)
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| {
                panic!(
                    "{what}: no `{key}` line; the job printed:\n{text}\n{}",
                    String::from_utf8_lossy(&out.stderr)
                )
            })
    };
    let (kill, resumed) = (ms("t_kill"), ms("t_resumed"));
    let state = value(&text, "final step").unwrap_or_default();
    assert!(
        out.status.success() && !state.is_empty(),
        "{what}: the job failed ({}):\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    (resumed.saturating_sub(kill) as f64 / 1000.0, state)
}

fn heat_args(args: &Args) -> Vec<String> {
    [
        "--steps".into(),
        args.steps.to_string(),
        "--every".into(),
        "5".into(),
        "--cells".into(),
        args.cells.to_string(),
        "--timestamps".into(),
    ]
    .into()
}

fn nodes(n: usize) -> Vec<String> {
    (0..n).map(|r| format!("n{}", r / 2)).collect()
}

/// The online run: a spare on a node of its own.
fn online(args: &Args, ulfm: &Path) -> (f64, String) {
    let site = Site::new(&args.dir);
    let mut names = nodes(args.ranks);
    names.push(format!("n{}", args.ranks.div_ceil(2)));
    let mut cmd = Command::new(ulfm.join("bin/mpiexec"));
    cmd.args([
        "--with-ft",
        "ulfm",
        "--oversubscribe",
        "--bind-to",
        "none",
        "-n",
    ])
    .arg(names.len().to_string())
    .arg(sibling("scr-heat"))
    .args(heat_args(args))
    .args(["--spares", "1", "--kill-rank", "2", "--kill-at"])
    .arg(args.kill_at.to_string())
    .arg("--wipe-before-kill")
    .arg(site.lost_node());
    site.env(&mut cmd, &names);
    cmd.env("PRTE_ALLOW_RUN_AS_ROOT", "1")
        .env("PRTE_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("LD_LIBRARY_PATH", ulfm.join("lib"));
    measured("online", &cmd.output().expect("mpiexec runs"))
}

/// The relaunch: `scr run` starts the job twice; the first launch loses rank 2's node.
fn relaunch(args: &Args) -> (f64, String) {
    let site = Site::new(&args.dir);
    let names = nodes(args.ranks);
    let heat = |extra: &str| {
        format!(
            "mpiexec -n \"$1\" '{}' {} {extra}",
            sibling("scr-heat").display(),
            heat_args(args).join(" ")
        )
    };
    let marker = site.path("launched-once");
    let script = site.path("launch.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nif [ ! -e '{m}' ]; then\n  touch '{m}'\n  {first}\n  exit $?\nfi\nexec {later}\n",
            m = marker.display(),
            first = heat(&format!(
                "--kill-rank 2 --kill-at {} --wipe-before-kill {}",
                args.kill_at,
                site.lost_node()
            )),
            later = heat(""),
        ),
    )
    .expect("launcher written");
    let mut cmd = Command::new(sibling("scr"));
    cmd.args(["run", "--runs", "2", "--postrun", "false", "--"])
        .arg("sh")
        .arg(&script)
        .arg("{ranks}");
    site.env(&mut cmd, &names);
    cmd.env(
        "SCR_NODELIST",
        format!("n[0-{}]", args.ranks.div_ceil(2) - 1),
    );
    measured("relaunch", &cmd.output().expect("scr run runs"))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args = Args::parse();
    assert!(args.ranks >= 4 && args.kill_at > 5 && args.kill_at < args.steps);
    let ulfm = args.ulfm.clone().unwrap_or_else(|| {
        sibling("scr-heat")
            .parent()
            .and_then(Path::parent)
            .map(|target| target.join("ulfm"))
            .expect("target directory")
    });
    assert!(
        ulfm.join("bin/mpiexec").is_file(),
        "no Open MPI with ULFM at {} (run scripts/setup.sh, or pass --ulfm)",
        ulfm.display()
    );
    println!(
        "scr-bench-recovery: {} ranks on {} simulated nodes, XOR, rank 2 and its node lost after step {} of {}, {} cells per rank",
        args.ranks,
        args.ranks.div_ceil(2),
        args.kill_at,
        args.steps,
        args.cells
    );
    println!(
        "{:>4}  {:>12}  {:>12}  {:>7}",
        "pair", "online s", "relaunch s", "ratio"
    );
    let (mut on, mut re) = (Vec::new(), Vec::new());
    for pair in 0..args.pairs {
        let ((o, so), (r, sr)) = if pair % 2 == 0 {
            let o = online(&args, &ulfm);
            (o, relaunch(&args))
        } else {
            let r = relaunch(&args);
            (online(&args, &ulfm), r)
        };
        assert_eq!(so, sr, "the two runs ended in different states");
        println!("{:>4}  {:>12.3}  {:>12.3}  {:>7.1}", pair + 1, o, r, r / o);
        on.push(o);
        re.push(r);
    }
    let (o, r) = (median(&mut on), median(&mut re));
    println!(
        "median  online {o:.3} s, relaunch {r:.3} s: online recovery is {:.1}x faster",
        r / o
    );
}
