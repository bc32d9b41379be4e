//! Python applications: the `scr` module (python/, ctypes over libscr) with mpi4py, run
//! as a user would (`mpiexec -n 4 python3 checkpoint.py`) on simulated nodes through
//! checkpoint, a killed rank, a lost node and a byte-exact restart; the module's return
//! and error conventions; the ImportError that says where it looked for libscr; and a
//! `pip install` of the package from an install tree into a virtual environment.
//!
//! Needs python3 with mpi4py (Debian: python3-mpi4py, python3-venv): the tests fail,
//! not skip, without them, saying to run scripts/setup.sh. libscr comes from
//! `target/debug` (`cargo build --workspace`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use scr_e2e::{relative_files_below, Cluster, JobOutput, TWO_NODES};

/// The repository's root.
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is in the repository")
        .to_path_buf()
}

/// The Python example.
fn example() -> PathBuf {
    repo().join("examples/python/checkpoint.py")
}

/// A Python interpreter that has mpi4py: `SCR_TEST_PYTHON` when set, else `python3` on
/// PATH, else `/usr/bin/python3` (a PATH's python3, e.g. pyenv's, may lack the system's
/// mpi4py). None of them: the test fails and says what to install.
fn python() -> PathBuf {
    static FOUND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let found = FOUND.get_or_init(|| {
        let mut candidates: Vec<PathBuf> = Vec::new();
        if let Some(p) = std::env::var_os("SCR_TEST_PYTHON") {
            candidates.push(p.into());
        }
        candidates.extend([PathBuf::from("python3"), PathBuf::from("/usr/bin/python3")]);
        let mut tried = Vec::new();
        for c in candidates {
            match Command::new(&c).args(["-c", "import mpi4py"]).output() {
                Ok(o) if o.status.success() => return Ok(c),
                Ok(o) => tried.push(format!(
                    "{}: {}",
                    c.display(),
                    String::from_utf8_lossy(&o.stderr)
                        .lines()
                        .last()
                        .unwrap_or("failed")
                )),
                Err(e) => tried.push(format!("{}: {e}", c.display())),
            }
        }
        Err(tried.join("; "))
    });
    match found {
        Ok(p) => p.clone(),
        Err(tried) => panic!(
            "no python3 with mpi4py (tried {tried}): run scripts/setup.sh, which installs \
             python3-mpi4py and python3-venv (or set SCR_TEST_PYTHON to an interpreter that has mpi4py)"
        ),
    }
}

/// Copy the files of directory `from` into `to` (created), leaving out what a build
/// leaves behind (`build/`, `*.egg-info`, `__pycache__`, the recorded `_install.py`).
fn copy_package(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap_or_else(|e| panic!("{}: {e}", to.display()));
    for e in std::fs::read_dir(from).unwrap_or_else(|e| panic!("{}: {e}", from.display())) {
        let e = e.expect("directory entry");
        let name = e.file_name().to_string_lossy().into_owned();
        if name == "build"
            || name == "__pycache__"
            || name == "_install.py"
            || name.ends_with(".egg-info")
        {
            continue;
        }
        let target = to.join(&name);
        if e.file_type().expect("file type").is_dir() {
            copy_package(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap_or_else(|err| {
                panic!("{} -> {}: {err}", e.path().display(), target.display())
            });
        }
    }
}

/// Where the tests take the `scr` package and libscr from: the package and library
/// `scripts/install.sh` installed ([`scr_e2e::install_tree`]), in a prefix of the test's
/// own in `dir` (`PREFIX/share/scr/python/scr`, `PREFIX/lib/libscr.so`): pip builds in
/// the package's directory, which tests must not share.
fn install_prefix(dir: &Path) -> PathBuf {
    let tree = scr_e2e::install_tree();
    let lib = tree.join("lib/libscr.so");
    let prefix = dir.join("install");
    copy_package(
        &tree.join("share/scr/python"),
        &prefix.join("share/scr/python"),
    );
    std::fs::create_dir_all(prefix.join("lib")).expect("mkdir lib");
    std::os::unix::fs::symlink(&lib, prefix.join("lib/libscr.so")).expect("link libscr.so");
    prefix
}

/// The directory to put on PYTHONPATH to import `scr` from an install at `prefix`.
fn package_dir(prefix: &Path) -> PathBuf {
    prefix.join("share/scr/python")
}

/// A cluster whose jobs import `scr` from an install at `prefix` (libscr found through
/// the install tree: not SCR_LIBRARY, and not the LD_LIBRARY_PATH cargo gives tests,
/// which holds target/debug), with a copy scheme that rebuilds a lost node.
fn python_cluster(c: &mut Cluster, prefix: &Path) {
    c.set("PYTHONPATH", &package_dir(prefix).display().to_string())
        .set("LD_LIBRARY_PATH", "")
        .set("SCR_COPY_TYPE", "XOR")
        .set("SCR_CHECKPOINT_INTERVAL", "5");
}

fn run_example(c: &Cluster, args: &[&str]) -> JobOutput {
    let script = example();
    let mut all = vec![script.to_str().expect("UTF-8 path")];
    all.extend_from_slice(args);
    let out = c.run_path(TWO_NODES, &python(), &all);
    let sizes: Vec<&str> = out
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("ranks "))
        .collect();
    assert_eq!(
        sizes,
        ["4"],
        "the example ran with the wrong world size (one `ranks 4` line expected)\n{out}"
    );
    out
}

/// Every file below `dir/results` with its bytes, by relative name.
fn results(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let root = dir.join("results");
    relative_files_below(&root)
        .into_iter()
        .map(|f| {
            let bytes = std::fs::read(root.join(&f)).expect("output file");
            (f, bytes)
        })
        .collect()
}

#[test]
fn python_example_restarts_from_a_rebuilt_checkpoint_after_losing_a_node() {
    let tmp = tempfile::tempdir().expect("temporary directory");
    let prefix = install_prefix(tmp.path());

    let mut reference = Cluster::new();
    python_cluster(&mut reference, &prefix);
    let whole = run_example(&reference, &["--steps", "30", "--files", "3"]);
    assert_eq!(whole.code, 0, "{whole}");
    assert!(whole.stdout.contains("starting fresh"), "{whole}");
    assert!(
        whole
            .stdout
            .contains("scr-rs 0.1.0 (SCR API v3.1.0), scheme XOR"),
        "the version and the config query's answer\n{whole}"
    );
    assert_eq!(whole.final_state().split(' ').next(), Some("30"), "{whole}");

    let mut c = Cluster::new();
    python_cluster(&mut c, &prefix);
    let first = run_example(
        &c,
        &[
            "--steps",
            "30",
            "--files",
            "3",
            "--kill-at",
            "17",
            "--kill-rank",
            "1",
        ],
    );
    assert_ne!(first.code, 0, "rank 1 was killed\n{first}");
    assert!(
        first.stdout.contains("rank 1 killed after step 17"),
        "{first}"
    );
    assert!(first.stdout.contains("checkpoint ckpt.15"), "{first}");
    assert!(first.line_after("final step ").is_none(), "{first}");

    c.lose_node("n1");
    let second = run_example(&c, &["--steps", "30", "--files", "3"]);
    assert_eq!(second.code, 0, "{second}");
    assert!(
        second.stdout.contains("restarted from ckpt.15 at step 15"),
        "the restart resumes from the newest checkpoint, rebuilt on n1\n{second}"
    );
    assert_eq!(
        second.final_state(),
        whole.final_state(),
        "the restarted run ends in the uninterrupted run's state\n{second}"
    );

    let expected = results(&reference.prefix());
    let names: Vec<&str> = expected.iter().map(|(n, _)| n.as_str()).collect();
    let want: Vec<String> = [10, 20, 30]
        .iter()
        .flat_map(|s| (0..4).map(move |r| format!("step{s}/rank_{r}.txt")))
        .collect();
    assert_eq!(names, want, "the uninterrupted run's output datasets");
    assert_eq!(
        results(&c.prefix()),
        expected,
        "the interrupted and restarted runs' output datasets equal the uninterrupted run's, byte for byte"
    );
}

/// A program checking the module's conventions; every rank prints `rank R KEY VALUE`.
const CONVENTIONS: &str = r#"
from mpi4py import MPI
import sys
import scr

rank = MPI.COMM_WORLD.Get_rank()
if rank == 0:
    sys.stdout.write("ranks %d\n" % MPI.COMM_WORLD.Get_size())

def say(key, *value):
    # one write per line: the ranks' output is merged
    sys.stdout.write(" ".join(["rank", str(rank), key] + [str(v) for v in value]) + "\n")
    sys.stdout.flush()

def failing(key, f, *args):
    try:
        f(*args)
        say(key, "no error")
    except scr.Error as e:
        say(key, e.call, isinstance(e, RuntimeError), str(e).replace("\n", " "))

say("constants", scr.FLAG_NONE, scr.FLAG_CHECKPOINT, scr.FLAG_OUTPUT, scr.SUCCESS, scr.FAILURE, scr.MAX_FILENAME)
# as SCR's own Python test begins: a key nothing set queries as None
say("unset_query", repr(scr.config("SCR_DEBUG")))
say("set", repr(scr.config("SCR_CACHE_SIZE=3")))
say("query", repr(scr.config("SCR_CACHE_SIZE")))
say("descriptor", repr(scr.config("CKPT=0 TYPE=PARTNER")), repr(scr.config("CKPT=0 TYPE")))
failing("bad_key", scr.config, "SCR_NO_SUCH_KEY")
failing("bad_set", scr.config, "SCR_NO_SUCH_KEY=1")
say("route_before_init", scr.route_file("early.txt"))
scr.init()
failing("set_after_init", scr.config, "SCR_CACHE_SIZE=4")
say("query_after_init", repr(scr.config("SCR_CACHE_SIZE")))
say("version", scr.get_version())
say("route_outside", scr.route_file("some/dir/file.txt"))
say("have_restart", repr(scr.have_restart()))
failing("start_restart", scr.start_restart)
# no interval, seconds or overhead rule is set: checkpoint whenever asked
say("need_checkpoint", scr.need_checkpoint())
failing("complete_outside", scr.complete_output)
scr.start_output("out.1", scr.FLAG_OUTPUT)
path = scr.route_file("data/part_%d.txt" % rank)
with open(path, "w") as f:
    f.write("rank %d\n" % rank)
say("routed_elsewhere", path != "data/part_%d.txt" % rank)
say("complete", scr.complete_output())
scr.start_output("out.2", scr.FLAG_OUTPUT)
say("complete_one_invalid", scr.complete_output(rank != 1))
failing("bad_flags", scr.start_output, "out.3", 8)
say("should_exit", scr.should_exit())
scr.finalize()
failing("init_after_finalize", scr.init)
"#;

/// Run the Python program `text` (saved as `name`) on two ranks with the module of an
/// install tree made in `tmp`, libscr named by `SCR_LIBRARY` (the other tests find it
/// through the install tree: the variable is the module's, not a setting libscr warns
/// about).
fn run_script(tmp: &Path, name: &str, text: &str) -> (Cluster, JobOutput) {
    let prefix = install_prefix(tmp);
    let mut c = Cluster::new();
    c.set("PYTHONPATH", &package_dir(&prefix).display().to_string())
        .set(
            "SCR_LIBRARY",
            &prefix.join("lib/libscr.so").display().to_string(),
        );
    let script = c.path(name);
    std::fs::write(&script, text).expect("script");
    let out = c.run_path(&["n0", "n1"], &python(), &[script.to_str().unwrap()]);
    (c, out)
}

#[test]
fn python_module_conventions() {
    let tmp = tempfile::tempdir().expect("temporary directory");
    let (c, out) = run_script(tmp.path(), "conventions.py", CONVENTIONS);
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        out.stdout
            .lines()
            .filter(|l| l.starts_with("ranks "))
            .collect::<Vec<_>>(),
        ["ranks 2"],
        "world size\n{out}"
    );
    let config_error = "SCR_Config failed: \"SCR_NO_SUCH_KEY\": unknown key `SCR_NO_SUCH_KEY` (a query names a key; to set one write `KEY=VALUE`)";
    let expected = [
        "constants 0 1 2 0 1 1024".to_string(),
        "unset_query None".into(),
        "set None".into(),
        "query '3'".into(),
        "descriptor None 'PARTNER'".into(),
        format!("bad_key SCR_Config True {config_error}"),
        "bad_set SCR_Config True SCR_Config failed: \"SCR_NO_SUCH_KEY=1\": unknown key `SCR_NO_SUCH_KEY`".into(),
        "route_before_init early.txt".into(),
        "set_after_init SCR_Config True SCR_Config failed: \"SCR_CACHE_SIZE=4\": values can only be set before SCR_Init (queries work at any time)".into(),
        "query_after_init '3'".into(),
        "version scr-rs 0.1.0 (SCR API v3.1.0)".into(),
        "route_outside some/dir/file.txt".into(),
        "have_restart None".into(),
        "start_restart SCR_Start_restart True SCR_Start_restart failed: start_restart: no checkpoint to restart from (have_restart said none)".into(),
        "need_checkpoint False".into(),
        "complete_outside SCR_Complete_output True SCR_Complete_output failed: complete_output: no dataset is being written; call start_output first".into(),
        "routed_elsewhere True".into(),
        "complete True".into(),
        "complete_one_invalid False".into(),
        "bad_flags SCR_Start_output True SCR_Start_output failed: start_output: flags 0x8 hold bits that are not SCR_FLAG_CHECKPOINT (1) or SCR_FLAG_OUTPUT (2)".into(),
        "should_exit False".into(),
        "init_after_finalize SCR_Init True SCR_Init failed: SCR_Finalize was already called; SCR cannot be initialised again in this process".into(),
    ];
    for rank in 0..2 {
        let mine: Vec<&str> = out
            .stdout
            .lines()
            .filter_map(|l| l.strip_prefix(&format!("rank {rank} ")))
            .collect();
        assert_eq!(mine, expected, "rank {rank}'s answers\n{out}");
    }
    assert!(
        !out.stderr.contains("SCR_LIBRARY"),
        "no warning about SCR_LIBRARY\n{out}"
    );
    // libscr's reasons still reach stderr, once per rank, with the rank
    for rank in 0..2 {
        let line = format!(
            "scr-rs[rank={rank}]: error: SCR_Config: \"SCR_NO_SUCH_KEY\": unknown key `SCR_NO_SUCH_KEY` (a query names a key; to set one write `KEY=VALUE`)"
        );
        assert_eq!(
            out.stderr.lines().filter(|l| *l == line).count(),
            1,
            "{line}\n{out}"
        );
    }
    // the output dataset reached the prefix with what each rank wrote
    for rank in 0..2 {
        let f = c.prefix().join(format!("data/part_{rank}.txt"));
        assert_eq!(
            std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}\n{out}", f.display())),
            format!("rank {rank}\n")
        );
    }
}

/// As SCR's own Python test (its run with `SCR_ENABLE=0`): `init()` raises when SCR is
/// disabled; `route_file` still passes names through.
const DISABLED: &str = r#"
from mpi4py import MPI
import scr
rank = MPI.COMM_WORLD.Get_rank()
scr.config("SCR_ENABLE=0")
try:
    scr.init()
    print("rank %d init returned" % rank)
except RuntimeError as e:
    print("rank %d init raised %s" % (rank, e.call))
print("rank %d route %s" % (rank, scr.route_file("a/b.txt")))
"#;

#[test]
fn init_raises_when_scr_is_disabled() {
    let tmp = tempfile::tempdir().expect("temporary directory");
    let (_c, out) = run_script(tmp.path(), "disabled.py", DISABLED);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        !out.stderr.contains("without calling SCR_Finalize"),
        "{out}"
    );
    for rank in 0..2 {
        for line in [
            format!("rank {rank} init raised SCR_Init"),
            format!("rank {rank} route a/b.txt"),
        ] {
            // (two processes' lines may interleave on the shared stdout)
            assert!(out.stdout.contains(&line), "{line}\n{out}");
        }
    }
}

/// Cache bypass from Python, as SCR's test_api --shared-file does in C: one file written by
/// both ranks at their own offsets goes straight to the prefix, and a second run restarts
/// from it in place.
const BYPASS: &str = r#"
import os, sys
from mpi4py import MPI
import scr
rank = MPI.COMM_WORLD.Get_rank()
scr.config("SCR_CACHE_BYPASS=1")
print("rank %d bypass %s" % (rank, scr.config("SCR_CACHE_BYPASS")))
scr.init()
mine = ("rank %d" % rank).ljust(16).encode()
if sys.argv[1] == "write":
    scr.start_output("ckpt.1", scr.FLAG_CHECKPOINT)
    path = scr.route_file("shared.bin")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.pwrite(fd, mine, 16 * rank)
    os.close(fd)
    scr.complete_output()
    print("rank %d wrote %s" % (rank, os.path.relpath(path)))
else:
    name = scr.have_restart()
    scr.start_restart()
    path = scr.route_file("shared.bin")
    fd = os.open(path, os.O_RDONLY)
    got = os.pread(fd, 16, 16 * rank)
    os.close(fd)
    scr.complete_restart()
    print("rank %d restarted %s from %s exact %s" % (rank, name, os.path.relpath(path), got == mine))
scr.finalize()
"#;

#[test]
fn python_writes_a_shared_file_with_cache_bypass_and_restarts_from_it() {
    let tmp = tempfile::tempdir().expect("temporary directory");
    let prefix = install_prefix(tmp.path());
    let mut c = Cluster::new();
    c.set("PYTHONPATH", &package_dir(&prefix).display().to_string())
        .set(
            "SCR_LIBRARY",
            &prefix.join("lib/libscr.so").display().to_string(),
        );
    let script = c.path("bypass.py");
    std::fs::write(&script, BYPASS).expect("script");
    let out = c.run_path(
        &["n0", "n1"],
        &python(),
        &[script.to_str().unwrap(), "write"],
    );
    assert_eq!(out.code, 0, "{out}");
    for rank in 0..2 {
        for line in [
            format!("rank {rank} bypass 1"),
            format!("rank {rank} wrote shared.bin"),
        ] {
            assert!(out.stdout.contains(&line), "{line}\n{out}");
        }
    }
    let expected: Vec<u8> = (0..2)
        .flat_map(|r| format!("{:<16}", format!("rank {r}")).into_bytes())
        .collect();
    assert_eq!(
        std::fs::read(c.prefix().join("shared.bin")).unwrap(),
        expected
    );
    scr_e2e::wipe_caches(&c);
    let out = c.run_path(
        &["n0", "n1"],
        &python(),
        &[script.to_str().unwrap(), "read"],
    );
    assert_eq!(out.code, 0, "{out}");
    for rank in 0..2 {
        let line = format!("rank {rank} restarted ckpt.1 from shared.bin exact True");
        assert!(out.stdout.contains(&line), "{line}\n{out}");
    }
}

/// `python -c CODE` with `scr` on PYTHONPATH from `dir`, without MPI and without any of
/// the test environment's library search paths.
fn import_scr(dir: &Path, extra_env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = Command::new(python());
    cmd.args(["-c", "import scr; print(scr.library_path)"])
        .env("PYTHONPATH", dir)
        .env_remove("SCR_LIBRARY")
        .env_remove("LD_LIBRARY_PATH");
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    cmd.output().expect("python3 runs")
}

#[test]
fn python_import_error_lists_every_place_looked() {
    let tmp = tempfile::tempdir().expect("temporary directory");
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let empty_s = empty.display().to_string();

    // from the source tree: not an install, nothing recorded, an empty LD_LIBRARY_PATH
    let source = repo().join("python");
    let out = import_scr(&source, &[("LD_LIBRARY_PATH", &empty_s)]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    let message = format!(
        "ImportError: scr: libscr.so was not found. Looked in:\n  - SCR_LIBRARY: not set\n  \
         - the install tree: this package ({}) is not in PREFIX/share/scr/python\n  \
         - no libscr was recorded when this package was installed\n  \
         - {empty_s}/libscr.so (LD_LIBRARY_PATH): no such file\n  \
         - the dynamic linker's cache (ctypes.util.find_library('scr')): no libscr\n\
         Set SCR_LIBRARY to the path of libscr.so (PREFIX/lib/libscr.so of an install, or \
         target/debug/libscr.so of a cargo build), or add its directory to LD_LIBRARY_PATH.\n",
        source.join("scr").display()
    );
    assert!(
        stderr.ends_with(&message),
        "{stderr}\nexpected to end with:\n{message}"
    );

    // an install tree whose lib/ lost libscr.so
    let prefix = install_prefix(tmp.path());
    std::fs::remove_file(prefix.join("lib/libscr.so")).unwrap();
    let out = import_scr(&package_dir(&prefix), &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    let line = format!(
        "  - {}/lib/libscr.so (the install tree this package is in): no such file\n",
        prefix.display()
    );
    assert!(stderr.contains(&line), "{stderr}\nexpected:\n{line}");
    assert!(
        stderr.contains("  - LD_LIBRARY_PATH: not set\n"),
        "{stderr}"
    );

    // SCR_LIBRARY naming a missing file is an error of its own: nothing else is tried
    let missing = tmp.path().join("nope/libscr.so");
    let out = import_scr(
        &package_dir(&prefix),
        &[("SCR_LIBRARY", missing.to_str().unwrap())],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    let message = format!(
        "ImportError: scr: cannot load libscr from SCR_LIBRARY: {} (SCR_LIBRARY): no such file; \
         set SCR_LIBRARY to the path of libscr.so",
        missing.display()
    );
    assert!(stderr.contains(&message), "{stderr}\nexpected:\n{message}");

    // ... and a file that is not a library says why it could not be loaded
    let out = import_scr(
        &package_dir(&prefix),
        &[("SCR_LIBRARY", example().to_str().unwrap())],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("(SCR_LIBRARY): cannot be loaded: ")
            && stderr.contains("invalid ELF header"),
        "{stderr}"
    );
}

#[test]
fn python_pip_install_from_the_install_tree_finds_libscr() {
    let tmp = tempfile::tempdir().expect("temporary directory");
    let prefix = install_prefix(tmp.path());
    let venv = tmp.path().join("venv");
    let py = python();
    let out = Command::new(&py)
        .args(["-m", "venv", "--system-site-packages"])
        .arg(&venv)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "python3 -m venv failed (run scripts/setup.sh: it installs python3-venv): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let venv_python = venv.join("bin/python");
    let out = Command::new(&venv_python)
        .args([
            "-m",
            "pip",
            "install",
            "--no-index",
            "--no-build-isolation",
            "--quiet",
        ])
        .arg(package_dir(&prefix))
        .env_remove("PYTHONPATH")
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
        .output()
        .expect("pip runs");
    assert!(
        out.status.success(),
        "pip install failed\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // imported from the environment (not the install tree), libscr found through the
    // path recorded at install time: no SCR_LIBRARY, LD_LIBRARY_PATH or PYTHONPATH
    let out = Command::new(&venv_python)
        .args([
            "-c",
            "import scr; print(scr.__file__); print(scr.library_path)",
        ])
        .current_dir(tmp.path())
        .env_remove("PYTHONPATH")
        .env_remove("SCR_LIBRARY")
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert!(
        Path::new(lines[0]).starts_with(&venv)
            && lines[0].ends_with("site-packages/scr/__init__.py"),
        "imported from the environment: {stdout}"
    );
    assert_eq!(
        lines[1],
        prefix.join("lib/libscr.so").display().to_string(),
        "the install tree's libscr"
    );

    // a copy of the package out of its install tree (built where the tree is read
    // only) keeps the libscr path an installer recorded in scr/_install.py
    let copy = tmp.path().join("copy");
    copy_package(&package_dir(&prefix), &copy);
    let recorded = scr_e2e::binary("libscr.so");
    std::fs::write(
        copy.join("scr/_install.py"),
        format!("LIBSCR = {:?}\n", recorded.display().to_string()),
    )
    .unwrap();
    let out = Command::new(&venv_python)
        .args([
            "-m",
            "pip",
            "install",
            "--no-index",
            "--no-build-isolation",
            "--quiet",
        ])
        .args(["--force-reinstall", "--no-deps"])
        .arg(&copy)
        .env_remove("PYTHONPATH")
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
        .output()
        .expect("pip runs");
    assert!(
        out.status.success(),
        "pip install of the copy failed\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&venv_python)
        .args(["-c", "import scr; print(scr.library_path)"])
        .current_dir(tmp.path())
        .env_remove("PYTHONPATH")
        .env_remove("SCR_LIBRARY")
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .expect("python runs");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim_end(),
        recorded.display().to_string(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // and the installed module runs an MPI job: the example, 4 ranks
    let mut c = Cluster::new();
    c.set("SCR_CHECKPOINT_INTERVAL", "5");
    c.set("PYTHONPATH", "");
    let script = example();
    let out = c.run_path(
        TWO_NODES,
        &venv_python,
        &[script.to_str().unwrap(), "--steps", "10"],
    );
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        out.stdout
            .lines()
            .filter(|l| l.starts_with("ranks "))
            .collect::<Vec<_>>(),
        ["ranks 4"],
        "{out}"
    );
    assert!(out.stdout.contains("checkpoint ckpt.10"), "{out}");
}

/// Write (`write`) or read back (`read`) a checkpoint on any number of ranks through
/// `scr.restart_writers` and `scr.restart_files`: every rank reads every old rank's file.
const RESIZE: &str = r#"import sys
from mpi4py import MPI
import scr

rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()


def say(line):
    # one write per line: print writes the text and its newline apart, and the ranks'
    # output shares one pipe
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


if rank == 0:
    say("ranks %d" % size)


def content(writer, step):
    return bytes(((i * 13) ^ (writer * 31) ^ (step * 7)) & 255 for i in range(3000))


scr.init()
if sys.argv[1] == "write":
    scr.start_output("ckpt.1", scr.FLAG_CHECKPOINT)
    with open(scr.route_file("ckpt.1/part_%d.dat" % rank), "wb") as f:
        f.write(content(rank, 1))
    scr.complete_output(True)
else:
    name = scr.have_restart()
    scr.start_restart()
    step = int(name[len("ckpt."):])
    writers = scr.restart_writers()
    exact, files = True, 0
    for w in range(writers):
        for old in scr.restart_files(w):
            with open(scr.route_file(old), "rb") as f:
                exact = exact and f.read() == content(w, step)
            files += 1
    scr.complete_restart(exact)
    say("r%d restarted %s writers %d files %d %s"
        % (rank, name, writers, files, "exact" if exact else "DIFFERS"))
scr.finalize()
"#;

/// A checkpoint written by 8 ranks on 4 nodes, restarted by 6 through the Python module:
/// every rank reads every old rank's file byte-exact.
#[test]
fn a_checkpoint_of_eight_ranks_restarts_on_six_through_the_python_module() {
    let tmp = tempfile::tempdir().expect("temporary directory");
    let prefix = install_prefix(tmp.path());
    let mut c = Cluster::new();
    c.set("PYTHONPATH", &package_dir(&prefix).display().to_string())
        .set("LD_LIBRARY_PATH", "");
    let script = c.path("resize.py");
    std::fs::write(&script, RESIZE).expect("script");
    let script = script.to_str().expect("UTF-8 path");
    let eight = ["n0", "n0", "n1", "n1", "n2", "n2", "n3", "n3"];
    let wrote = c.run_path(&eight, &python(), &[script, "write"]);
    assert_eq!(wrote.code, 0, "{wrote}");
    assert_eq!(wrote.stdout, "ranks 8\n", "{wrote}");
    let six = ["n0", "n0", "n1", "n2", "n3", "n3"];
    let read = c.run_path(&six, &python(), &[script, "read"]);
    assert_eq!(read.code, 0, "{read}");
    let mut lines: Vec<&str> = read.stdout.lines().collect();
    lines.sort();
    let mut want: Vec<String> = (0..6)
        .map(|r| format!("r{r} restarted ckpt.1 writers 8 files 8 exact"))
        .collect();
    want.push("ranks 6".into());
    assert_eq!(lines, want, "{read}");
}

#[test]
fn a_python_application_recovers_online_through_run_resilient() {
    let tmp = tempfile::tempdir().expect("temporary directory");
    let prefix = install_prefix(tmp.path());
    let script = repo().join("examples/python/resilient.py");
    let script = script.to_str().expect("UTF-8 path");
    let nodes = ["n0", "n0", "n1", "n1", "n2"];
    // the same job uninterrupted, under Debian's MPI (no ULFM: the spare waits)
    let mut plain = Cluster::new();
    python_cluster(&mut plain, &prefix);
    let reference = plain.run_path(&nodes, &python(), &[script, "1", "40"]);
    let expected = scr_e2e::ulfm::uninterrupted_final(&reference);
    // rank 2 killed after step 17, under MPI with ULFM: a spare takes its place
    let mut c = Cluster::new();
    python_cluster(&mut c, &prefix);
    let out = c.run_ulfm_path(&nodes, &python(), &[script, "1", "40", "17", "2"]);
    scr_e2e::ulfm::assert_recovered_once(&out, expected);
}
