//! Fortran applications on libscr: examples/fortran/checkpoint.f90 built with `mpif90`
//! as a user builds it (`-I<include> -L<lib> -lscr`, `INCLUDE 'scrf.h'`), run under
//! mpiexec on simulated nodes through a checkpoint, a killed rank, a lost node and a
//! restart; and SCR's Fortran calling convention (blank-padded strings in and out,
//! trailing IERROR, too-short output variables) checked from a small Fortran program.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use scr_e2e::{files_below, Cluster, JobOutput, TWO_NODES};

/// The workspace's root directory.
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is inside the workspace")
        .to_path_buf()
}

/// Where a Fortran program finds `scrf.h` and `libscr`: (include dir, lib dir). The one
/// place to switch the tests to the install tree.
fn fortran_build_dirs() -> (PathBuf, PathBuf) {
    let prefix = scr_e2e::install::install_tree();
    let include = prefix.join("include");
    let lib = prefix.join("lib");
    assert!(
        lib.join("libscr.so").is_file(),
        "{} is missing: run `cargo build --workspace` first",
        lib.join("libscr.so").display()
    );
    assert!(
        include.join("scrf.h").is_file(),
        "{}/scrf.h is missing",
        include.display()
    );
    (include, lib)
}

/// Build `source` into `out` with `mpif90 [extra] -o out source -I.. -L.. -Wl,-rpath,.. -lscr`.
/// A machine without gfortran or OpenMPI's wrappers fails the test: the Fortran
/// interface is part of what is shipped, so its test must not pass by skipping.
fn mpif90(source: &Path, out: &Path, extra: &[&str]) {
    mpif90_linking(source, out, extra, &["-lscr"]);
}

/// [`mpif90`] with the libraries `libs` (SCR's documented line is `-lscrf -lscr`).
fn mpif90_linking(source: &Path, out: &Path, extra: &[&str], libs: &[&str]) {
    let (include, lib) = fortran_build_dirs();
    let mut cmd = Command::new("mpif90");
    cmd.args(extra)
        .arg("-o")
        .arg(out)
        .arg(source)
        .arg(format!("-I{}", include.display()))
        .arg(format!("-L{}", lib.display()))
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .args(libs)
        .current_dir(out.parent().expect("output directory"));
    let setup = "run scripts/setup.sh, which installs gfortran and OpenMPI's Fortran compiler wrapper mpif90";
    match cmd.output() {
        Err(e) => panic!("mpif90 could not be started ({e}): {setup}"),
        Ok(o) if !o.status.success() => panic!(
            "mpif90 failed to build {} (if it says gfortran is missing: {setup})\n{}{}",
            source.display(),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
        Ok(_) => {}
    }
}

/// The Fortran example, built into `dir`.
fn build_example(dir: &Path) -> PathBuf {
    let exe = dir.join("checkpoint_f90");
    mpif90(
        &workspace_root().join("examples/fortran/checkpoint.f90"),
        &exe,
        &[],
    );
    exe
}

/// A cluster as the example's runs use it: XOR (so a lost node is rebuilt), a
/// checkpoint every 5 steps.
fn cluster() -> Cluster {
    let mut c = Cluster::for_installed();
    c.set("SCR_COPY_TYPE", "XOR")
        .set("SCR_CHECKPOINT_INTERVAL", "5");
    c
}

/// Run the example on [`TWO_NODES`], checking that it ran as one world of 4 ranks.
fn run_example(c: &Cluster, exe: &Path, args: &[&str]) -> JobOutput {
    let out = c.run_path(TWO_NODES, exe, args);
    let sizes: Vec<&str> = out
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("ranks "))
        .collect();
    assert_eq!(sizes, ["4"], "one `ranks 4` line expected\n{out}");
    out
}

/// The checkpoint files (`.../ckpt/rank_*`) in `node`'s cache, by path below it.
fn cached_checkpoint_files(c: &Cluster, node: &str) -> BTreeMap<String, Vec<u8>> {
    let base = c.cache_dir(node);
    files_below(&base)
        .into_iter()
        .filter(|p| p.parent().is_some_and(|d| d.ends_with("ckpt")))
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p.strip_prefix(&base).unwrap().display().to_string(), bytes)
        })
        .collect()
}

#[test]
fn fortran_example_restarts_after_a_lost_node() {
    let build = tempfile::tempdir().expect("build directory");
    let exe = build_example(build.path());

    // an uninterrupted run: the final state every restarted run must reach
    let fresh = cluster();
    let reference = run_example(&fresh, &exe, &["--steps", "20"]);
    assert_eq!(reference.code, 0, "{reference}");
    assert!(reference.stdout.contains("starting fresh\n"), "{reference}");
    // SCR_CONFIG's query through the Fortran binding
    assert!(reference.stdout.contains(", scheme XOR\n"), "{reference}");
    for n in [5, 10, 15, 20] {
        assert!(
            reference.stdout.contains(&format!("checkpoint ckpt.{n}\n")),
            "{reference}"
        );
    }
    let expected = reference.final_state().to_string();
    assert!(expected.starts_with("20 state crc32 "), "{reference}");

    // rank 1 dies after step 12: ckpt.10 is the newest checkpoint
    let c = cluster();
    let killed = run_example(&c, &exe, &["--steps", "20", "--kill-at", "12"]);
    assert_ne!(killed.code, 0, "the killed job must fail\n{killed}");
    assert!(
        killed.stdout.contains("rank 1 killed after step 12\n"),
        "{killed}"
    );
    assert!(killed.stdout.contains("checkpoint ckpt.10\n"), "{killed}");
    assert!(killed.line_after("final step ").is_none(), "{killed}");

    // node n1 (ranks 2 and 3) is lost with its cache
    let lost = cached_checkpoint_files(&c, "n1");
    let names: Vec<&str> = lost.keys().map(|k| k.rsplit('/').next().unwrap()).collect();
    assert_eq!(
        names,
        [
            "rank_2.part0",
            "rank_2.part1",
            "rank_3.part0",
            "rank_3.part1"
        ],
        "n1 holds ranks 2 and 3's files of ckpt.10 (2 files per rank) before it is lost"
    );
    c.lose_node("n1");
    assert!(!c.cache_dir("n1").exists());

    // the restart rebuilds n1's files from XOR, byte for byte, and reads them
    let restarted = run_example(&c, &exe, &["--steps", "10"]);
    assert_eq!(restarted.code, 0, "{restarted}");
    assert!(
        restarted
            .stdout
            .contains("restarted from ckpt.10 at step 10\n"),
        "{restarted}"
    );
    assert_eq!(
        cached_checkpoint_files(&c, "n1"),
        lost,
        "the files rebuilt in n1's cache differ from those lost"
    );

    // and the run continues from it to the uninterrupted run's final state
    let finished = run_example(&c, &exe, &["--steps", "20"]);
    assert_eq!(finished.code, 0, "{finished}");
    assert!(
        finished
            .stdout
            .contains("restarted from ckpt.10 at step 10\n"),
        "{finished}"
    );
    assert_eq!(finished.final_state(), expected, "{finished}");
}

/// A Fortran program exercising the calling convention: strings in (blank-trimmed) and
/// out (blank-padded), too-short output variables, the trailing IERROR.
const PROBE: &str = r#"
program probe
  use mpi
  implicit none
  include 'scrf.h'
  integer :: ierr, flag, u, ios
  character(len=40) :: v40, name, longname
  character(len=3) :: v3
  character(len=8) :: v8
  character(len=SCR_MAX_FILENAME) :: path

  call MPI_INIT(ierr)
  v40 = 'stale'
  call SCR_CONFIG('SCR_COPY_TYPE=PARTNER', v40, ierr)
  print '(a,i0,3a)', 'set ', ierr, ' [', v40, ']'
  longname = 'SCR_COPY_TYPE'
  call SCR_CONFIG(longname, v40, ierr)
  print '(a,i0,3a)', 'query ', ierr, ' [', v40, ']'
  v3 = 'abc'
  call SCR_CONFIG('SCR_COPY_TYPE', v3, ierr)
  print '(a,i0,3a)', 'short ', ierr, ' [', v3, ']'
  v40 = 'stale'
  call SCR_CONFIG('SCR_JOB_NAME', v40, ierr)
  print '(a,i0,3a)', 'none ', ierr, ' [', v40, ']'
  v40 = 'stale'
  call SCR_CONFIG('SCR_NO_SUCH_KEY', v40, ierr)
  print '(a,i0,3a)', 'unknown ', ierr, ' [', v40, ']'
  call SCR_GET_VERSION(v40, ierr)
  print '(a,i0,3a)', 'version ', ierr, ' [', v40, ']'
  v8 = 'stale'
  call SCR_GET_VERSION(v8, ierr)
  print '(a,i0,3a)', 'version8 ', ierr, ' [', v8, ']'

  call SCR_INIT(ierr)
  print '(a,i0)', 'init ', ierr
  call SCR_CONFIG('SCR_CACHE_SIZE=3', v40, ierr)
  print '(a,i0)', 'late set ', ierr
  longname = 'data/in.dat'
  call SCR_ROUTE_FILE(longname, v40, ierr)
  print '(a,i0,3a)', 'route ', ierr, ' [', v40, ']'
  v8 = 'stale'
  call SCR_ROUTE_FILE(longname, v8, ierr)
  print '(a,i0,3a)', 'route8 ', ierr, ' [', v8, ']'
  name = 'stale'
  flag = 7
  call SCR_HAVE_RESTART(flag, name, ierr)
  print '(a,i0,a,i0,3a)', 'have ', ierr, ' ', flag, ' [', name, ']'

  call SCR_START_OUTPUT(' ', SCR_FLAG_CHECKPOINT, ierr)
  print '(a,i0)', 'start ', ierr
  call SCR_ROUTE_FILE('state.dat', path, ierr)
  print '(a,i0,a,l1,a,l1)', 'routed ', ierr, ' absolute ', path(1:1) == '/', &
    ' ends ', path(len_trim(path) - 9:len_trim(path)) == '/state.dat'
  open (newunit=u, file=trim(path), status='replace', action='write', iostat=ios)
  write (u, '(a)', iostat=ios) 'state'
  close (u)
  call SCR_COMPLETE_OUTPUT(1, ierr)
  print '(a,i0)', 'complete ', ierr
  call SCR_FINALIZE(ierr)
  print '(a,i0)', 'finalize ', ierr
  call MPI_FINALIZE(ierr)
end program probe
"#;

/// `[text]` blank-padded to `len`.
fn padded(text: &str, len: usize) -> String {
    format!("[{text:<len$}]")
}

#[test]
fn fortran_calling_convention() {
    let build = tempfile::tempdir().expect("build directory");
    let source = build.path().join("probe.f90");
    std::fs::write(&source, PROBE).expect("probe source");
    let version = format!("scr-rs {} (SCR API v3.1.0)", env!("CARGO_PKG_VERSION"));
    let expected = [
        format!("set 0 {}", padded("", 40)),
        format!("query 0 {}", padded("PARTNER", 40)),
        format!("short 1 {}", padded("", 3)),
        format!("none 0 {}", padded("", 40)),
        format!("unknown 1 {}", padded("", 40)),
        format!("version 0 {}", padded(&version, 40)),
        format!("version8 1 {}", padded("", 8)),
        "init 0".into(),
        "late set 1".into(),
        format!("route 0 {}", padded("data/in.dat", 40)),
        format!("route8 1 {}", padded("", 8)),
        format!("have 0 0 {}", padded("", 40)),
        "start 0".into(),
        "routed 0 absolute T ends T".into(),
        "complete 0".into(),
        "finalize 0".into(),
    ]
    .map(|l| l + "\n")
    .concat();

    // gfortran's default names (scr_config_) and the -fsecond-underscore ones
    // (scr_config__), which libscr exports too; the second linked with SCR's
    // `-lscrf -lscr`
    for (exe, flags, libs) in [
        ("probe", &[][..], &["-lscr"][..]),
        (
            "probe2",
            &["-fsecond-underscore"][..],
            &["-lscrf", "-lscr"][..],
        ),
    ] {
        let exe = build.path().join(exe);
        mpif90_linking(&source, &exe, flags, libs);
        let mut c = Cluster::for_installed();
        // the scheme comes from SCR_CONFIG alone
        c.env.remove("SCR_COPY_TYPE");
        let out = c.run_path(&["n0"], &exe, &[]);
        assert_eq!(out.code, 0, "{flags:?}\n{out}");
        assert_eq!(out.stdout, expected, "{flags:?}\n{out}");
        for message in [
            "scr-rs[rank=0]: error: SCR_CONFIG: the value `PARTNER` is 7 characters, but the CHARACTER variable passed holds 3; declare it CHARACTER(LEN=7) or longer".to_string(),
            "scr-rs[rank=0]: error: SCR_CONFIG: \"SCR_NO_SUCH_KEY\": unknown key".into(),
            format!("scr-rs[rank=0]: error: SCR_GET_VERSION: the version `{version}` is {} characters, but the CHARACTER variable passed holds 8; declare it CHARACTER(LEN={})", version.len(), version.len()),
            "scr-rs[rank=0]: error: SCR_CONFIG: \"SCR_CACHE_SIZE=3\": values can only be set before SCR_Init".into(),
            "scr-rs[rank=0]: error: SCR_ROUTE_FILE: the routed path `data/in.dat` is 11 characters, but the CHARACTER variable passed holds 8; declare it CHARACTER(LEN=11) or longer".into(),
        ] {
            assert!(out.stderr.contains(&message), "{flags:?}: missing `{message}`\n{out}");
        }
        assert_eq!(
            out.stderr.matches("scr-rs[rank=0]: error: ").count(),
            5,
            "only the five failures above are reported\n{out}"
        );
    }

    // compilers naming procedures in upper case find them too
    let nm = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(fortran_build_dirs().1.join("libscr.so"))
        .output()
        .expect("nm (binutils) runs");
    let symbols = String::from_utf8_lossy(&nm.stdout);
    for name in [
        "SCR_INIT",
        "SCR_CONFIG",
        "SCR_ROUTE_FILE",
        "scr_route_file_",
        "scr_route_file__",
    ] {
        assert!(
            symbols.lines().any(|l| l.ends_with(&format!(" T {name}"))),
            "libscr.so does not export {name}"
        );
    }
}

/// A Fortran program that initialises MPI as PROBE_INIT says (`funneled`:
/// MPI_INIT_THREAD with MPI_THREAD_FUNNELED, else MPI_INIT) and prints the level MPI
/// runs at, then one checkpoint through SCR.
const THREAD_PROBE: &str = r#"
program threadprobe
  use mpi
  implicit none
  include 'scrf.h'
  integer :: ierr, level, provided, rank, u
  character(len=32) :: how
  character(len=1024) :: path
  character(len=32) :: mine
  call get_environment_variable("PROBE_INIT", how)
  if (trim(how) == "funneled") then
    call MPI_INIT_THREAD(MPI_THREAD_FUNNELED, provided, ierr)
  else
    call MPI_INIT(ierr)
  end if
  call MPI_COMM_RANK(MPI_COMM_WORLD, rank, ierr)
  call MPI_QUERY_THREAD(level, ierr)
  if (level == MPI_THREAD_MULTIPLE) then
    print '("r",I0," init ",I0," thread multiple")', rank, ierr
  else if (level == MPI_THREAD_FUNNELED) then
    print '("r",I0," init ",I0," thread funneled")', rank, ierr
  else if (level == MPI_THREAD_SINGLE) then
    print '("r",I0," init ",I0," thread single")', rank, ierr
  else
    print '("r",I0," init ",I0," thread other")', rank, ierr
  end if
  call SCR_INIT(ierr)
  call SCR_START_OUTPUT("ckpt.1", SCR_FLAG_CHECKPOINT, ierr)
  write(mine, '("state",I0,".dat")') rank
  call SCR_ROUTE_FILE(trim(mine), path, ierr)
  open(newunit=u, file=trim(path), status="replace", action="write")
  write(u, '(A,I0)') "rank ", rank
  close(u)
  call SCR_COMPLETE_OUTPUT(1, ierr)
  print '("r",I0," complete ",I0)', rank, ierr
  call SCR_FINALIZE(ierr)
  call MPI_FINALIZE(ierr)
end program threadprobe
"#;

/// libscr's Fortran MPI_INIT and MPI_INIT_THREAD (gfortran's names, those of
/// `-fsecond-underscore`, and `use mpi_f08`'s) ask MPI for MPI_THREAD_MULTIPLE when the
/// job's environment turns protect_in_background on, and pass the program's level on
/// otherwise.
#[test]
fn fortran_mpi_init_asks_for_thread_multiple_only_when_the_environment_protects_in_background() {
    let build = tempfile::tempdir().expect("build directory");
    let source = build.path().join("threadprobe.f90");
    std::fs::write(&source, THREAD_PROBE).expect("probe source");
    let background =
        "its scheme runs in a background thread after complete_output (MPI_THREAD_MULTIPLE)";
    // the same program with `use mpi_f08` (Open MPI's MPI_Init_f08 and
    // MPI_Init_thread_f08)
    let source08 = build.path().join("threadprobe08.f90");
    std::fs::write(
        &source08,
        THREAD_PROBE.replace("  use mpi\n", "  use mpi_f08\n"),
    )
    .expect("probe source");
    for (exe, flags, source) in [
        ("threadprobe", &[][..], &source),
        ("threadprobe2", &["-fsecond-underscore"][..], &source),
        ("threadprobe08", &[][..], &source08),
    ] {
        let exe = build.path().join(exe);
        mpif90(source, &exe, flags);
        for (init, env, level) in [
            ("plain", None, "single"),
            ("funneled", None, "funneled"),
            ("plain", Some("1"), "multiple"),
            ("funneled", Some("yes"), "multiple"),
        ] {
            let mut c = cluster();
            c.set("SCR_DEBUG", "1")
                .set("SCR_FLUSH", "0")
                .set("PROBE_INIT", init);
            if let Some(v) = env {
                c.set("SCR_PROTECT_IN_BACKGROUND", v);
            }
            let out = c.run_path(TWO_NODES, &exe, &[]);
            let case = format!("{flags:?} {init} {env:?}");
            assert_eq!(out.code, 0, "{case}\n{out}");
            for r in 0..4 {
                for line in [
                    format!("r{r} init 0 thread {level}\n"),
                    format!("r{r} complete 0\n"),
                ] {
                    assert!(out.stdout.contains(&line), "{case}: no `{line}`\n{out}");
                }
            }
            assert_eq!(
                out.logged(Some(0), "info", background).len(),
                usize::from(env.is_some()),
                "{case}\n{out}"
            );
        }
    }
}

/// `scrf.h` in a fixed-form (FORTRAN 77 layout) and a free-form source, with SCR's
/// constant values.
#[test]
fn scrf_h_in_fixed_and_free_form() {
    let build = tempfile::tempdir().expect("build directory");
    let fixed = "      PROGRAM FIXED
      INCLUDE 'scrf.h'
      INTEGER IERROR
      CHARACTER(LEN=8) V
      CALL SCR_GET_VERSION(V, IERROR)
      PRINT '(6(I0,1X),A,1X,I0)', SCR_SUCCESS, SCR_FAILURE,
     &  SCR_MAX_FILENAME, SCR_FLAG_NONE, SCR_FLAG_CHECKPOINT,
     &  SCR_FLAG_OUTPUT, SCR_VERSION, IERROR
      END
";
    let free = "program free
  implicit none
  include 'scrf.h'
  character(len=64) :: v
  integer :: ierror
  call SCR_GET_VERSION(v, ierror)
  print '(6(i0,1x),a,1x,i0)', SCR_SUCCESS, SCR_FAILURE, SCR_MAX_FILENAME, &
    SCR_FLAG_NONE, SCR_FLAG_CHECKPOINT, SCR_FLAG_OUTPUT, SCR_VERSION, ierror
end program free
";
    // the fixed-form program's 8-character variable is too short for the version:
    // IERROR is SCR_FAILURE there
    for (file, text, flags, expected) in [
        (
            "fixed.f",
            fixed,
            "-ffixed-form",
            "0 1 1024 0 1 2 v3.1.0 1\n",
        ),
        ("free.f90", free, "-ffree-form", "0 1 1024 0 1 2 v3.1.0 0\n"),
    ] {
        let source = build.path().join(file);
        std::fs::write(&source, text).expect("source");
        let exe = build.path().join(file.replace('.', "_"));
        mpif90(&source, &exe, &[flags, "-std=f2008", "-Werror", "-Wall"]);
        let out = Command::new(&exe).output().expect("the program runs");
        assert!(out.status.success(), "{file}: {out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), expected, "{file}");
    }
}

/// A Fortran 90 program with `USE scr` (the module's interfaces check every call), linked
/// with SCR's `-lscrf -lscr`, initialises, routes a file outside a dataset and finalizes.
const USES_MODULE: &str = "program uses_module
  use mpi
  use scr
  implicit none
  integer :: ierr, ierror, flag
  character(len=SCR_MAX_FILENAME) :: path
  call MPI_INIT(ierr)
  call SCR_INIT(ierror)
  print '(A,I0)', 'init ', ierror
  call SCR_ROUTE_FILE('data/in.dat', path, ierror)
  print '(A,I0,A,A)', 'route ', ierror, ' ', trim(path)
  call SCR_NEED_CHECKPOINT(flag, ierror)
  print '(A,I0)', 'need ', ierror
  call SCR_FINALIZE(ierror)
  print '(A,I0)', 'finalize ', ierror
  call MPI_FINALIZE(ierr)
end program uses_module
";

#[test]
fn a_program_using_the_scr_module_builds_and_runs() {
    let build = tempfile::tempdir().expect("build directory");
    let (include, _) = fortran_build_dirs();
    assert!(
        include.join("scr.mod").is_file(),
        "{}/scr.mod was not installed",
        include.display()
    );
    let source = build.path().join("uses_module.f90");
    std::fs::write(&source, USES_MODULE).expect("source");
    let exe = build.path().join("uses_module");
    mpif90_linking(&source, &exe, &["-Wall", "-Werror"], &["-lscrf", "-lscr"]);
    let c = Cluster::for_installed();
    let out = c.run_path(&["n0"], &exe, &[]);
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        out.stdout, "init 0\nroute 0 data/in.dat\nneed 0\nfinalize 0\n",
        "{out}"
    );
}

/// Write (`write`) or read back (`read`) a checkpoint on any number of ranks through the
/// Fortran bindings of the scr-rs extensions: every rank lists every old rank's files
/// (SCR_RESTART_WRITERS, _NUM_FILES, _FILE), routes and reads each, byte-exact.
const RESIZE: &str = r#"program resize
  use mpi
  implicit none
  include 'scrf.h'
  integer, parameter :: nbytes = 3000
  integer :: ierr, rank, nranks, ierror, flag, writers, w, cnt, i, step, u, files, ios
  character(len=SCR_MAX_FILENAME) :: name, old, routed
  character(len=64) :: path
  character(len=16) :: mode
  character(len=nbytes) :: data, got
  logical :: exact

  call MPI_INIT(ierr)
  call MPI_COMM_RANK(MPI_COMM_WORLD, rank, ierr)
  call MPI_COMM_SIZE(MPI_COMM_WORLD, nranks, ierr)
  if (rank == 0) print '(a,i0)', 'ranks ', nranks
  call SCR_INIT(ierror)
  call check('init')
  call get_command_argument(1, mode)
  if (mode == 'write') then
    call SCR_START_OUTPUT('ckpt.1', SCR_FLAG_CHECKPOINT, ierror)
    call check('start_output')
    write(path, '(a,i0,a)') 'ckpt.1/part_', rank, '.dat'
    call SCR_ROUTE_FILE(trim(path), routed, ierror)
    call check('route_file')
    call fill(rank, 1, data)
    open(newunit=u, file=trim(routed), access='stream', form='unformatted', status='replace')
    write(u) data
    close(u)
    call SCR_COMPLETE_OUTPUT(1, ierror)
    call check('complete_output')
    print '(a,i0,a)', 'r', rank, ' wrote ckpt.1'
  else
    call SCR_HAVE_RESTART(flag, name, ierror)
    call check('have_restart')
    call SCR_START_RESTART(name, ierror)
    call check('start_restart')
    read(name(6:), *) step
    call SCR_RESTART_WRITERS(writers, ierror)
    call check('restart_writers')
    exact = .true.
    files = 0
    do w = 0, writers - 1
      call SCR_RESTART_NUM_FILES(w, cnt, ierror)
      call check('restart_num_files')
      do i = 1, cnt
        call SCR_RESTART_FILE(w, i, old, ierror)
        call check('restart_file')
        call SCR_ROUTE_FILE(old, routed, ierror)
        call check('route_file')
        open(newunit=u, file=trim(routed), access='stream', form='unformatted', status='old')
        read(u, iostat=ios) got
        close(u)
        call fill(w, step, data)
        exact = exact .and. ios == 0 .and. got == data
        files = files + 1
      end do
    end do
    call SCR_COMPLETE_RESTART(merge(1, 0, exact), ierror)
    call check('complete_restart')
    print '(a,i0,4a,i0,a,i0,2a)', 'r', rank, ' restarted ', trim(name), &
      ' writers ', '', writers, ' files ', files, ' ', trim(merge('exact  ', 'DIFFERS', exact))
  end if
  call SCR_FINALIZE(ierror)
  call MPI_FINALIZE(ierr)
contains
  subroutine fill(w, step, data)
    integer, intent(in) :: w, step
    character(len=nbytes), intent(out) :: data
    integer :: k
    do k = 0, nbytes - 1
      data(k+1:k+1) = achar(iand(ieor(ieor(k * 13, w * 31), step * 7), 255))
    end do
  end subroutine fill
  subroutine check(what)
    character(len=*), intent(in) :: what
    if (ierror /= SCR_SUCCESS) then
      print '(a,i0,2a)', 'r', rank, ' FAILED ', what
      call MPI_ABORT(MPI_COMM_WORLD, 1, ierr)
    end if
  end subroutine check
end program resize
"#;

/// A checkpoint written by 8 ranks on 4 nodes, restarted by 3 through the Fortran
/// bindings: every rank reads every old rank's file byte-exact.
#[test]
fn a_checkpoint_of_eight_ranks_restarts_on_three_through_the_fortran_bindings() {
    let build = tempfile::tempdir().expect("build directory");
    let source = build.path().join("resize.f90");
    std::fs::write(&source, RESIZE).expect("source");
    let exe = build.path().join("resize");
    mpif90(&source, &exe, &[]);
    let c = Cluster::for_installed();
    let eight = ["n0", "n0", "n1", "n1", "n2", "n2", "n3", "n3"];
    let wrote = c.run_path(&eight, &exe, &["write"]);
    assert_eq!(wrote.code, 0, "{wrote}");
    assert!(wrote.stdout.starts_with("ranks 8\n"), "{wrote}");
    let read = c.run_path(&["n0", "n1", "n2"], &exe, &["read"]);
    assert_eq!(read.code, 0, "{read}");
    let mut lines: Vec<&str> = read.stdout.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            "r0 restarted ckpt.1 writers 8 files 8 exact",
            "r1 restarted ckpt.1 writers 8 files 8 exact",
            "r2 restarted ckpt.1 writers 8 files 8 exact",
            "ranks 3"
        ],
        "{read}"
    );
}

/// `SCR_RUN_RESILIENT` from a real Fortran program (tests/fortran/resilient.f90, `USE
/// scr`: the module's interface checks the call and the body's form) under Debian's
/// MPI, which has no ULFM: the body runs once on the 4 application ranks with the
/// ATTEMPT array filled, the fifth process stays a spare, and a second job restarts
/// inside the body from the first one's checkpoint and ends in the state of one
/// uninterrupted job. (The recovery itself runs under Open MPI 5, which has no Fortran
/// library: tests/tests/online_recovery.rs calls the same binding as gfortran does.)
#[test]
fn scr_run_resilient_runs_a_fortran_body_and_restarts_inside_it() {
    let build = tempfile::tempdir().expect("build directory");
    let exe = build.path().join("resilient");
    mpif90(
        &workspace_root().join("tests/fortran/resilient.f90"),
        &exe,
        &[],
    );
    let nodes = ["n0", "n0", "n1", "n1", "n2"];
    let whole = Cluster::for_installed().run_path(&nodes, &exe, &["1", "40"]);
    assert_eq!(whole.code, 0, "{whole}");
    assert_eq!(whole.line_after("ranks "), Some("5"), "{whole}");
    let mut attempts: Vec<&str> = whole
        .stdout
        .lines()
        .filter(|l| l.contains(" attempt "))
        .collect();
    attempts.sort();
    // number, rank, size, lost, spares left; the spare (process 4) never ran the body
    assert_eq!(
        attempts,
        [
            "r0 attempt 0 0 4 0 1",
            "r1 attempt 0 1 4 0 1",
            "r2 attempt 0 2 4 0 1",
            "r3 attempt 0 3 4 0 1"
        ],
        "{whole}"
    );
    assert_eq!(whole.line_after("recoveries "), Some("0"), "{whole}");
    let expected = whole
        .line_after("final ")
        .unwrap_or_else(|| panic!("no final line\n{whole}"));
    assert!(expected.starts_with("40 "), "{whole}");
    // the same 40 steps as two jobs: the second restarts from ckpt.20 inside the body
    let c = Cluster::for_installed();
    let first = c.run_path(&nodes, &exe, &["1", "20"]);
    assert_eq!(first.code, 0, "{first}");
    let second = c.run_path(&nodes, &exe, &["1", "40"]);
    assert_eq!(second.code, 0, "{second}");
    assert_eq!(
        second.line_after("restarted from "),
        Some("ckpt.20 at step 20"),
        "{second}"
    );
    assert_eq!(second.line_after("final "), Some(expected), "{second}");
}
