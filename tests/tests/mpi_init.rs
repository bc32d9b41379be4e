//! libscr's MPI_Init and MPI_Init_thread (capi/src/mpi_init.c): the level they ask MPI
//! for (MPI_THREAD_MULTIPLE only when SCR_PROTECT_IN_BACKGROUND is true in the job's
//! environment), what init says when MPI runs below it, and a profiling tool's MPI_Init
//! beside them, through tests/c/semantics.c under mpiexec on simulated nodes. The Fortran
//! names are tested in fortran.rs.

use std::process::Command;

use scr_e2e::{assert_all_ok, c_source, lines_of, semantics_c, Cluster, JobOutput, TWO_NODES};

/// Every rank's `thread` line (SEMANTICS_INIT), in rank order.
fn thread_levels(out: &JobOutput, ranks: usize) -> Vec<String> {
    (0..ranks)
        .map(|r| {
            lines_of(out, r)
                .into_iter()
                .find_map(|l| l.strip_prefix("thread ").map(str::to_string))
                .unwrap_or_else(|| panic!("rank {r} printed no thread level\n{out}"))
        })
        .collect()
}

/// libscr's MPI_Init and MPI_Init_thread pass the application's level on unless the
/// job's environment turns protect_in_background on; then they ask MPI for
/// MPI_THREAD_MULTIPLE, so an application written for plain MPI_Init gets its
/// protection in a thread beside it, and what that thread wrote rebuilds a lost node.
#[test]
fn mpi_init_asks_for_thread_multiple_only_when_the_environment_protects_in_background() {
    let work = tempfile::tempdir().unwrap();
    let exe = semantics_c(work.path());
    let mut c = Cluster::for_installed();
    c.set("SCR_COPY_TYPE", "XOR")
        .set("SCR_FLUSH", "0")
        .set("SCR_DEBUG", "1")
        .set("SEMANTICS_INIT", "plain");
    let background =
        "its scheme runs in a background thread after complete_output (MPI_THREAD_MULTIPLE)";

    // not asked: MPI_Init's own level, and the scheme in the foreground
    let out = c.run_path(TWO_NODES, &exe, &["write", "1"]);
    assert_all_ok(&out, 4);
    assert_eq!(thread_levels(&out, 4), ["single"; 4], "{out}");
    assert!(out.logged(Some(0), "info", background).is_empty(), "{out}");

    // asked in a file only: the level stays, and init says how to change it (the
    // background then runs over the library's connections, by default)
    let conf = work.path().join("background.toml");
    std::fs::write(&conf, "protect_in_background = true\n").unwrap();
    c.set("SCR_CONF_FILE", conf.to_str().unwrap());
    let out = c.run_path(TWO_NODES, &exe, &["write", "1"]);
    assert_all_ok(&out, 4);
    assert_eq!(thread_levels(&out, 4), ["single"; 4], "{out}");
    let said = out.logged(
        Some(0),
        "info",
        "MPI was initialised with thread level Single, not MPI_THREAD_MULTIPLE (set SCR_PROTECT_IN_BACKGROUND=1 in the job's environment and libscr's MPI_Init asks MPI for it",
    );
    assert!(
        said.len() == 1 && said[0].contains("protect_below_multiple = sockets (default)"),
        "{out}"
    );
    c.env.remove("SCR_CONF_FILE");

    // asked by the environment: plain MPI_Init gets MPI_THREAD_MULTIPLE, and so does
    // MPI_Init_thread asking for less
    c.set("SCR_PROTECT_IN_BACKGROUND", "1");
    for init in ["funneled", "plain"] {
        c.set("SEMANTICS_INIT", init);
        let out = c.run_path(TWO_NODES, &exe, &["write", "3"]);
        assert_all_ok(&out, 4);
        assert_eq!(thread_levels(&out, 4), ["multiple"; 4], "{init}: {out}");
        assert_eq!(
            out.logged(Some(0), "info", background).len(),
            1,
            "{init}: {out}"
        );
    }

    // the XOR data the thread wrote rebuilds node n1's files of the newest checkpoint
    c.lose_node("n1");
    let out = c.run_path(TWO_NODES, &exe, &["current", "ckpt.3"]);
    assert_all_ok(&out, 4);
    for r in 0..4 {
        assert!(
            lines_of(&out, r).contains(&"restarted ckpt.3 holding \"step 3\"".to_string()),
            "rank {r}\n{out}"
        );
    }
}

/// A profiling tool's MPI_Init and MPI_Init_thread: they say they ran, and whether
/// MPI_THREAD_MULTIPLE was asked of them; like any tool it wraps the program's other MPI
/// calls too (here MPI_Comm_rank, which keeps it linked where the linker drops libraries
/// nothing needs).
const TOOL: &str = r#"
#include <mpi.h>
#include <stdio.h>
int MPI_Comm_rank(MPI_Comm comm, int *rank)
{
    return PMPI_Comm_rank(comm, rank);
}
int MPI_Init(int *argc, char ***argv)
{
    printf("tool MPI_Init\n");
    return PMPI_Init(argc, argv);
}
#ifndef TOOL_INIT_ONLY
int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
    printf("tool MPI_Init_thread %s\n", required == MPI_THREAD_MULTIPLE ? "multiple" : "less");
    return PMPI_Init_thread(argc, argv, required, provided);
}
#endif
"#;

/// Run `mpicc` with `args`, which must succeed.
fn mpicc<I, S>(args: I)
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut cmd = Command::new("mpicc");
    cmd.args(args);
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// libscr's MPI_Init and MPI_Init_thread pass each call on to the next definition of the
/// name: a profiling tool linked after libscr still sees its MPI_Init, and the raised
/// level (SCR_PROTECT_IN_BACKGROUND in the environment) reaches it through its
/// MPI_Init_thread. A tool linked into the program with libscr.a keeps its own MPI_Init
/// and init says why the level stayed; where the tool defines MPI_Init only, the program
/// takes libscr's MPI_Init_thread and still links (libscr's definitions are weak).
#[test]
fn a_profiling_tool_keeps_its_mpi_init_beside_libscr() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let tool = dir.join("tool.c");
    std::fs::write(&tool, TOOL).unwrap();
    let source = c_source("semantics.c");
    let lib = dir.join("libtool.so");
    mpicc([
        "-shared".into(),
        "-fPIC".into(),
        "-o".into(),
        lib.clone().into_os_string(),
        tool.clone().into_os_string(),
    ]);
    // the tool linked after libscr, as `-lscr -ltool`
    let shared = dir.join("semantics-tool");
    let mut args: Vec<std::ffi::OsString> = vec![
        "-o".into(),
        shared.clone().into_os_string(),
        source.clone().into_os_string(),
    ];
    args.extend(scr_e2e::scr_build_flags().into_iter().map(Into::into));
    args.extend([
        format!("-L{}", dir.display()).into(),
        format!("-Wl,-rpath,{}", dir.display()).into(),
        "-ltool".into(),
    ]);
    mpicc(&args);

    let mut c = Cluster::for_installed();
    c.set("SEMANTICS_INIT", "plain");
    let out = c.run_path(TWO_NODES, &shared, &["version"]);
    assert_all_ok(&out, 4);
    assert_eq!(out.stdout.matches("tool MPI_Init\n").count(), 4, "{out}");
    assert_eq!(thread_levels(&out, 4), ["single"; 4], "{out}");
    c.set("SCR_PROTECT_IN_BACKGROUND", "1");
    let out = c.run_path(TWO_NODES, &shared, &["version"]);
    assert_all_ok(&out, 4);
    assert_eq!(
        out.stdout
            .matches("tool MPI_Init_thread multiple\n")
            .count(),
        4,
        "{out}"
    );
    assert_eq!(thread_levels(&out, 4), ["multiple"; 4], "{out}");

    // the tool inside a program linked with libscr.a: its strong MPI_Init wins
    let fixed = dir.join("semantics-static-tool");
    let mut args: Vec<std::ffi::OsString> = vec![
        "-DTOOL_INIT_ONLY".into(),
        "-o".into(),
        fixed.clone().into_os_string(),
        tool.into_os_string(),
        source.into_os_string(),
    ];
    args.extend(scr_e2e::static_libscr_args());
    mpicc(&args);
    // (a static program finds the plugins through the directory its build baked in:
    // here the development build's)
    let mut c = Cluster::new();
    c.set("SEMANTICS_INIT", "plain")
        .set("SCR_PROTECT_IN_BACKGROUND", "1")
        .set("SCR_COPY_TYPE", "XOR")
        .set("SCR_DEBUG", "1");
    let out = c.run_path(TWO_NODES, &fixed, &["write", "1"]);
    assert_all_ok(&out, 4);
    assert_eq!(out.stdout.matches("tool MPI_Init\n").count(), 4, "{out}");
    assert_eq!(thread_levels(&out, 4), ["single"; 4], "{out}");
    assert!(
        !out.logged(
            Some(0),
            "info",
            "SCR_PROTECT_IN_BACKGROUND is set in the environment, but MPI was not initialised through libscr's MPI_Init"
        )
        .is_empty(),
        "{out}"
    );
}
