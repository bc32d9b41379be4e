//! Helpers for the end-to-end tests: a "cluster" (a temporary directory holding the
//! node-local cache and control bases and the prefix) and MPI jobs launched in it on
//! simulated nodes.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

pub mod comm_report;
pub mod hosts;
pub mod install;
pub mod local_mpi;
pub mod ulfm;
pub use hosts::TestBed;
pub use install::install_tree;

/// `target/<profile>`, where the workspace's binaries are built.
pub use scr_plugin::conformance::target_dir;

/// A binary of the workspace (build the workspace first: `cargo build --workspace`).
pub fn binary(name: &str) -> PathBuf {
    let p = target_dir().join(name);
    assert!(
        p.is_file(),
        "{} is missing: run `cargo build --workspace` first",
        p.display()
    );
    p
}

/// The compiler and linker flags that build an application against libscr as a user
/// does: `pkg-config --cflags --libs scr` of this build's install tree
/// ([`install::install_tree`]), so the tests use the installed headers, library and
/// pkg-config file (whose rpath lets the program find libscr.so).
pub fn scr_build_flags() -> Vec<String> {
    let prefix = install::install_tree();
    let out = Command::new("pkg-config")
        .args(["--cflags", "--libs", "scr"])
        .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig"))
        .output()
        .unwrap_or_else(|e| panic!("pkg-config cannot run ({e}): run scripts/setup.sh"));
    assert!(
        out.status.success(),
        "pkg-config --cflags --libs scr: {out:?}"
    );
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// Compile `source` with `compiler` (mpicc, mpicxx) against libscr as an application
/// would: `<flags> -lscr`, the library found at run time through its rpath.
pub fn build_against_libscr(compiler: &str, source: &Path, dir: &Path) -> PathBuf {
    let exe = dir.join(source.file_stem().unwrap());
    let flags = scr_build_flags();
    let out = Command::new(compiler)
        .arg("-Wall")
        .arg("-Werror")
        .arg("-o")
        .arg(&exe)
        .arg(source)
        .args(&flags)
        .output()
        .unwrap_or_else(|e| {
            panic!("{compiler} cannot run ({e}): run scripts/setup.sh to install the MPI compiler wrappers")
        });
    assert!(
        out.status.success(),
        "{compiler} {} {flags:?} failed:\n{}",
        source.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// What a finished job printed.
#[derive(Debug)]
pub struct JobOutput {
    /// Exit code of mpiexec (124: killed by the 120 s timeout).
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl JobOutput {
    /// The value after `prefix` on the first line starting with it.
    pub fn line_after(&self, prefix: &str) -> Option<&str> {
        self.stdout.lines().find_map(|l| l.strip_prefix(prefix))
    }

    /// The log lines on stderr (`scr-rs[FIELDS]: LEVEL: MESSAGE`, see `scr_host::log`) of
    /// `rank` (any rank when `None`) at `level` whose message contains `text`.
    pub fn logged(&self, rank: Option<u32>, level: &str, text: &str) -> Vec<&str> {
        self.stderr
            .lines()
            .filter(|l| {
                let Some((head, message)) = l.split_once(&format!("]: {level}: ")) else {
                    return false;
                };
                let fields = head.strip_prefix("scr-rs[").unwrap_or("");
                message.contains(text)
                    && rank.is_none_or(|r| fields.split(' ').any(|f| f == format!("rank={r}")))
            })
            .collect()
    }

    /// The final-state checksum the heat example prints.
    pub fn final_state(&self) -> &str {
        self.line_after("final step ")
            .unwrap_or_else(|| panic!("no final state line\n{self}"))
    }
}

impl std::fmt::Display for JobOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\n--- stdout ---\n{}--- stderr ---\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// A temporary "cluster": node-local bases and a prefix, one job id.
pub struct Cluster {
    dir: tempfile::TempDir,
    /// Extra environment for every job.
    pub env: BTreeMap<String, String>,
    /// Set when the jobs run on a test bed's hosts instead of simulated nodes.
    bed: Option<OnBed>,
}

/// Where a cluster on a test bed launches its jobs and keeps its node-local storage.
struct OnBed {
    agent: PathBuf,
    local: PathBuf,
    store: PathBuf,
    hosts: Vec<String>,
}

impl Default for Cluster {
    fn default() -> Self {
        Self::new()
    }
}

impl Cluster {
    /// An empty cluster.
    pub fn new() -> Cluster {
        let dir = tempfile::tempdir().expect("temporary directory");
        for d in ["cache", "cntl", "prefix"] {
            std::fs::create_dir(dir.path().join(d)).expect("mkdir");
        }
        // SINGLE (no redundancy data, the cheapest) unless a test chooses a scheme: the
        // tests about rebuilding set PARTNER or XOR (the default scheme) themselves
        let env = BTreeMap::from([("SCR_COPY_TYPE".to_string(), "SINGLE".to_string())]);
        Cluster {
            dir,
            env,
            bed: None,
        }
    }

    /// A cluster whose jobs run on `bed`'s hosts: `mpirun --host ...` through the bed's
    /// rsh agent, with the cache and control bases at the bed's node-local directory, and
    /// without `SCR_NODE_NAMES`, so the runtime tells nodes apart by `gethostname` as on
    /// a real cluster. The prefix lives in the bed's directory (shared by the hosts); the
    /// `nodes` given to [`Cluster::run`] are host names, each host's ranks consecutive.
    pub fn on_bed(bed: &TestBed) -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("cluster.")
            .tempdir_in(bed.dir())
            .expect("temporary directory in the bed");
        std::fs::create_dir(dir.path().join("prefix")).expect("mkdir");
        let env = BTreeMap::from([("SCR_COPY_TYPE".to_string(), "SINGLE".to_string())]);
        Cluster {
            dir,
            env,
            bed: Some(OnBed {
                agent: bed.agent(),
                local: bed.local_dir(),
                store: bed.dir().join("store"),
                hosts: bed.hosts().to_vec(),
            }),
        }
    }

    /// A path inside the cluster's directory (for configuration files, global stores).
    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// The prefix directory (the jobs' working directory).
    pub fn prefix(&self) -> PathBuf {
        self.dir.path().join("prefix")
    }

    /// Node `node`'s cache directory for this job (on a test bed, as seen from outside
    /// the host).
    pub fn cache_dir(&self, node: &str) -> PathBuf {
        let base = match &self.bed {
            Some(bed) => bed.store.join(node),
            None => self.dir.path().join("cache").join(node),
        };
        base.join(USER).join("scr.e2e")
    }

    /// "Lose" a node: delete its cache and control directories (on a test bed, lose a
    /// host with [`TestBed::kill`] instead).
    pub fn lose_node(&self, node: &str) {
        assert!(
            self.bed.is_none(),
            "on a test bed, lose a host with TestBed::kill"
        );
        for base in ["cache", "cntl"] {
            let d = self.dir.path().join(base).join(node);
            std::fs::remove_dir_all(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
        }
    }

    /// Load these plugin libraries of the workspace (file names in `target/<profile>`,
    /// e.g. `libscr_fixture_panic.so`) through a system configuration file, for every
    /// later job.
    pub fn load_plugins(&mut self, libs: &[&str]) -> &mut Self {
        let files: Vec<String> = libs
            .iter()
            .map(|l| {
                let lib = target_dir().join(l);
                assert!(lib.is_file(), "{} (build the workspace)", lib.display());
                format!("\"{}\"", lib.display())
            })
            .collect();
        let system = self.path("system.toml");
        std::fs::write(
            &system,
            format!("[plugins]\nfiles = [{}]\n", files.join(", ")),
        )
        .expect("system configuration");
        self.set("SCR_SYSTEM_CONFIG", &system.display().to_string())
    }

    /// What each of `ranks` ranks of a `scr-probe` job reported (`probe_<rank>.txt` in
    /// the prefix); a rank that wrote none fails the test: it did not run or did not
    /// return.
    pub fn probe_reports(&self, ranks: usize) -> Vec<String> {
        (0..ranks)
            .map(|r| {
                std::fs::read_to_string(self.prefix().join(format!("probe_{r}.txt")))
                    .unwrap_or_else(|e| panic!("rank {r} wrote no report: {e}"))
            })
            .collect()
    }

    /// A cluster for programs built against the install tree: the development build's
    /// plugin directory is not searched (`SCR_PLUGIN_SKIP_BUILD_DIR`), so the installed
    /// libscr must find the installed plugins by itself, as on a user's machine.
    pub fn for_installed() -> Cluster {
        let mut c = Cluster::new();
        c.set("SCR_PLUGIN_SKIP_BUILD_DIR", "1");
        c
    }

    /// Set an environment variable for every later job.
    pub fn set(&mut self, key: &str, value: &str) -> &mut Self {
        self.env.insert(key.into(), value.into());
        self
    }

    /// Start `program args` like [`Cluster::run`] without waiting (output piped).
    pub fn spawn(&self, nodes: &[&str], program: &str, args: &[&str]) -> std::process::Child {
        self.command(nodes, program, args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("mpiexec starts")
    }

    /// Run `program args` under `mpiexec -n <nodes.len()>`, rank r on simulated node
    /// `nodes[r]`.
    ///
    /// For `scr-heat`, which prints `ranks N` first on rank 0, the world size is checked
    /// here: a wrong `mpiexec` silently runs N singletons, which must not pass a test.
    pub fn run(&self, nodes: &[&str], program: &str, args: &[&str]) -> JobOutput {
        let out = output_of(self.command(nodes, program, args));
        if program == "scr-heat" && out.stdout.lines().any(|l| l.starts_with("ranks ")) {
            let sizes: Vec<&str> = out
                .stdout
                .lines()
                .filter_map(|l| l.strip_prefix("ranks "))
                .collect();
            assert_eq!(
                sizes,
                [nodes.len().to_string()],
                "scr-heat ran with the wrong world size (one `ranks` line of {} expected)\n{out}",
                nodes.len()
            );
        }
        out
    }

    /// Like [`Cluster::run`], with every rank started through `wrapper` (a command that
    /// ends by running the program it is given as `$0 "$@"`, e.g. `sh -c '...; exec
    /// "$0" "$@"'`), so that ranks can be given different environments.
    pub fn run_wrapped(
        &self,
        nodes: &[&str],
        wrapper: &[&str],
        program: &str,
        args: &[&str],
    ) -> JobOutput {
        output_of(self.command_with(nodes, wrapper, program, args))
    }

    /// Like [`Cluster::run`] for a program outside the workspace's build (a C, Fortran
    /// or Python program, or an interpreter with its script as the first argument).
    pub fn run_path(&self, nodes: &[&str], program: &Path, args: &[&str]) -> JobOutput {
        output_of(self.command_path(nodes, &[], program, args))
    }

    /// Like [`Cluster::spawn`] for a program outside the workspace's build.
    pub fn spawn_path(&self, nodes: &[&str], program: &Path, args: &[&str]) -> std::process::Child {
        self.command_path(nodes, &[], program, args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("mpiexec starts")
    }

    fn command(&self, nodes: &[&str], program: &str, args: &[&str]) -> Command {
        self.command_with(nodes, &[], program, args)
    }

    fn command_with(
        &self,
        nodes: &[&str],
        wrapper: &[&str],
        program: &str,
        args: &[&str],
    ) -> Command {
        self.command_path(nodes, wrapper, &binary(program), args)
    }

    fn command_path(
        &self,
        nodes: &[&str],
        wrapper: &[&str],
        program: &Path,
        args: &[&str],
    ) -> Command {
        // a hung job fails its test instead of hanging the suite
        let mut cmd = Command::new("timeout");
        cmd.args(["--kill-after=5", "120", "mpiexec"]);
        cmd.arg("-n").arg(nodes.len().to_string());
        let env = self.job_env(nodes);
        if let Some(bed) = &self.bed {
            cmd.arg("--host").arg(hosts::host_list(nodes));
            cmd.args(bed_args(bed, &env));
        }
        cmd.args(wrapper);
        cmd.arg(program).args(args);
        self.with_env(&mut cmd, &env);
        cmd
    }

    /// The environment of a job on `nodes` (a later setting overrides an earlier one).
    fn job_env(&self, nodes: &[&str]) -> BTreeMap<String, String> {
        let mut env: BTreeMap<String, String> = mpi_env()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        // each job's OpenMPI session directory in the test's own temporary directory:
        // jobs of parallel tests starting at once raced to create the shared
        // /tmp/ompi.<host>.<uid> ("mkdir ... File exists", orte_init failed)
        env.insert(
            "OMPI_MCA_orte_tmpdir_base".into(),
            self.dir.path().display().to_string(),
        );
        let (cache, cntl) = match &self.bed {
            Some(bed) => (bed.local.clone(), bed.local.clone()),
            None => (self.dir.path().join("cache"), self.dir.path().join("cntl")),
        };
        env.insert("SCR_CACHE_BASE".into(), cache.display().to_string());
        env.insert("SCR_CNTL_BASE".into(), cntl.display().to_string());
        env.insert("SCR_JOB_ID".into(), "e2e".into());
        env.insert("SCR_SYSTEM_CONFIG".into(), "/dev/null".into());
        if self.bed.is_none() && !nodes.is_empty() {
            env.insert("SCR_NODE_NAMES".into(), nodes.join(","));
        }
        env.extend(self.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        env
    }

    /// Give `cmd` the environment `env`, in the prefix.
    fn with_env(&self, cmd: &mut Command, env: &BTreeMap<String, String>) {
        cmd.current_dir(self.prefix());
        cmd.env_remove("SCR_CONF_FILE")
            // cargo's test runner points LD_LIBRARY_PATH at target/<profile>, which would
            // load the build's libscr.so instead of the installed one a program's rpath
            // names (RUNPATH ranks below LD_LIBRARY_PATH)
            .env_remove("LD_LIBRARY_PATH");
        if self.bed.is_some() {
            // a variable of the test's own environment must not stand in for the host name
            cmd.env_remove("SCR_NODE_NAMES");
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
    }

    /// `scr ARGS` on the launch host with the jobs' settings, in the prefix (`scr
    /// postrun`, `scr run`). On a test bed the launch host is outside the hosts, as a
    /// batch script's node is: the allocation is the bed's hosts (`SCR_NODELIST`) and
    /// they are reached through the bed's agent (`SCR_REMOTE_RUNNER`).
    pub fn scr(&self, args: &[&str]) -> Command {
        let mut env = self.job_env(&[]);
        if let Some(bed) = &self.bed {
            env.entry("SCR_REMOTE_RUNNER".into())
                .or_insert(format!("{} {{node}} {{cmd}}", bed.agent.display()));
            env.entry("SCR_NODELIST".into())
                .or_insert_with(|| bed.hosts.join(","));
        }
        let mut cmd = Command::new(binary("scr"));
        cmd.args(args);
        self.with_env(&mut cmd, &env);
        cmd
    }

    /// On a test bed, the launcher words for `scr run -- ...`: `mpirun --host {hosts}`
    /// with `ranks_per_node` ranks on each (`{ranks}` in all), the bed's agent, flags and
    /// forwarded variables, then `program args` (a workspace binary).
    pub fn bed_launcher(&self, ranks_per_node: u32, program: &str, args: &[&str]) -> Vec<String> {
        let bed = self.bed.as_ref().expect("a cluster on a test bed");
        let mut words: Vec<String> = [
            "mpirun",
            "--host",
            "{hosts}",
            "--map-by",
            &format!("ppr:{ranks_per_node}:node"),
            "-np",
            "{ranks}",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        words.extend(bed_args(bed, &self.job_env(&[])));
        words.push(binary(program).display().to_string());
        words.extend(args.iter().map(|s| s.to_string()));
        words
    }
}

/// The MPI settings of every job on a test bed: ranks of different hosts talk over TCP on
/// loopback (no other interface is addressed), and each host's daemon sees only its own
/// slots and so does not know that all hosts share two cores: ranks busy-polling in MPI
/// calls would starve each other (an init of 5 s instead of 0.5 s at 8 ranks).
pub(crate) const BED_TRANSPORT: &[(&str, &str)] = &[
    ("btl", "self,vader,tcp"),
    ("btl_tcp_if_include", "lo"),
    ("mpi_yield_when_idle", "1"),
];

/// mpirun's arguments for a job on the bed's hosts: the agent, the transport, and `-x`
/// for every variable of `env` the ranks need.
fn bed_args(bed: &OnBed, env: &BTreeMap<String, String>) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "--mca".into(),
        "plm_rsh_agent".into(),
        bed.agent.display().to_string(),
    ];
    // the launcher's own traffic over loopback too (Open MPI 5's refuses that: see
    // `Cluster::ulfm_command`)
    for (k, v) in BED_TRANSPORT.iter().chain(&[("oob_tcp_if_include", "lo")]) {
        a.extend(["--mca".into(), k.to_string(), v.to_string()]);
    }
    a.extend(forwarded(env));
    a
}

/// `-x VAR` for every variable of `env` a rank on another host needs: the agent starts
/// each host's daemon with a fresh environment, as ssh does, and Open MPI passes on only
/// its own `OMPI_MCA_*` variables by itself.
fn forwarded(env: &BTreeMap<String, String>) -> Vec<String> {
    env.keys()
        .filter(|k| !k.starts_with("OMPI_MCA_"))
        .flat_map(|k| ["-x".to_string(), k.clone()])
        .collect()
}

/// Run a job's command to its end.
fn output_of(mut cmd: Command) -> JobOutput {
    let out = cmd.output().expect("mpiexec runs (is OpenMPI installed?)");
    JobOutput {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Four ranks on two simulated nodes, two per node: the placement most tests use.
pub const TWO_NODES: &[&str] = &["n0", "n0", "n1", "n1"];

/// (name, complete, failed) of every entry of `prefix`'s index, by dataset id.
pub fn index_entries(prefix: &Path) -> Vec<(String, bool, Option<String>)> {
    scr_host::state::prefix::Index::load(prefix)
        .unwrap()
        .datasets
        .values()
        .map(|e| (e.name.clone(), e.complete, e.failed.clone()))
        .collect()
}

/// Lose both nodes of [`TWO_NODES`]: every cache and control directory.
pub fn wipe_caches(c: &Cluster) {
    for node in ["n0", "n1"] {
        c.lose_node(node);
    }
}

/// Wait for a job started with [`Cluster::spawn`] and take what it printed.
pub fn output_of_child(child: std::process::Child) -> JobOutput {
    let out = child.wait_with_output().expect("the job's output");
    JobOutput {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Every file below `dir` that is not a directory (links are listed, not followed), as
/// full paths, sorted; nothing when `dir` does not exist.
pub fn files_below(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                todo.push(e.path());
            } else {
                out.push(e.path());
            }
        }
    }
    out.sort();
    out
}

/// [`files_below`] as names relative to `dir`.
pub fn relative_files_below(dir: &Path) -> Vec<String> {
    files_below(dir)
        .iter()
        .map(|p| p.strip_prefix(dir).unwrap_or(p).display().to_string())
        .collect()
}

/// The final state scr-heat reaches in an uninterrupted run (no checkpoints, fresh
/// cluster) of `ranks` ranks, `steps` steps and `cells` cells per rank (`None`: the
/// example's default): what every restarted run must end in.
pub fn reference_state(ranks: usize, steps: u64, cells: Option<usize>) -> String {
    let c = Cluster::new();
    let steps = steps.to_string();
    let cells = cells.map(|n| n.to_string());
    let mut args = vec!["--steps", steps.as_str(), "--every", "0"];
    if let Some(n) = &cells {
        args.extend(["--cells", n.as_str()]);
    }
    let nodes = vec!["x"; ranks];
    let out = c.run(&nodes, "scr-heat", &args);
    assert_eq!(out.code, 0, "{out}");
    out.final_state().to_string()
}

/// The user name jobs run as (it appears in cache and control directory names).
pub const USER: &str = "e2e";

/// The environment that lets OpenMPI run many ranks as root on two cores
/// ([`local_mpi`]), and the user name jobs run as.
pub fn mpi_env() -> Vec<(&'static str, &'static str)> {
    let mut env = local_mpi::openmpi_local_env();
    env.push(("USER", USER));
    env
}

/// The one `ranks N` line a C test program (tests/c) prints: a wrong mpiexec runs N
/// singletons, which must not pass.
pub fn assert_world(out: &JobOutput, n: usize) {
    let sizes: Vec<&str> = out
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("ranks "))
        .collect();
    assert_eq!(sizes, [n.to_string()], "expected one world of {n}\n{out}");
}

/// Rank `r`'s lines, without the `r<rank> ` mark.
pub fn lines_of(out: &JobOutput, r: usize) -> Vec<String> {
    let mark = format!("r{r} ");
    out.stdout
        .lines()
        .filter_map(|l| l.strip_prefix(&mark))
        .map(str::to_string)
        .collect()
}

/// Every checked line `ok`, on every rank, and the run ended well.
pub fn assert_all_ok(out: &JobOutput, ranks: usize) {
    assert_eq!(out.code, 0, "{out}");
    assert_world(out, ranks);
    for r in 0..ranks {
        let lines = lines_of(out, r);
        assert!(!lines.is_empty(), "rank {r} printed nothing\n{out}");
        assert!(
            !lines.iter().any(|l| l.starts_with("FAILED")),
            "rank {r}: {lines:#?}\n{out}"
        );
    }
}

/// The C test program tests/c/`name`.
pub fn c_source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("c").join(name)
}

/// tests/c/semantics.c (SCR 3.x behaviours, one mode per run) built against libscr into
/// `dir`.
pub fn semantics_c(dir: &Path) -> PathBuf {
    build_against_libscr("mpicc", &c_source("semantics.c"), dir)
}

/// The compiler arguments that link a program with the install tree's `libscr.a`
/// ([`install::install_tree`]): its include directory, the archive itself, then the
/// libraries `pkg-config --static` says it needs.
pub fn static_libscr_args() -> Vec<std::ffi::OsString> {
    let prefix = install::install_tree();
    let private = Command::new("pkg-config")
        .args(["--static", "--libs-only-l", "scr"])
        .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig"))
        .output()
        .unwrap_or_else(|e| panic!("pkg-config cannot run ({e}): run scripts/setup.sh"));
    assert!(private.status.success(), "{private:?}");
    let mut args = vec![
        format!("-I{}", prefix.join("include").display()).into(),
        prefix.join("lib/libscr.a").into_os_string(),
    ];
    args.extend(
        String::from_utf8_lossy(&private.stdout)
            .split_whitespace()
            .filter(|l| *l != "-lscr")
            .map(Into::into),
    );
    args
}
