//! `scr config explain` end to end: the three-level example's descriptors, failure
//! groups and the sets a job of a given layout forms, and what the scheme says of them.

mod common;
use common::*;

fn explain(sb: &Sandbox, n: u64) -> Run {
    let n = n.to_string();
    let run = sb.run(
        &["config", "explain", "-c", THREE_LEVEL, "--checkpoint", &n],
        &[],
    );
    run.expect_code(0);
    run.expect_stdout(&format!("checkpoint {n} uses descriptor"));
    run
}

/// The seed's rule: ids divisible by 8 → PARTNER on /ssd across switches; by 4 but not 8
/// → XOR of 8 on /ssd; all others → XOR of 16 on /tmp.
#[test]
fn explain_applies_the_three_level_example() {
    let sb = Sandbox::new();
    struct Level {
        ids: &'static [u64],
        scheme: &'static str,
        store: &'static str,
        group: &'static str,
        marker: String,
        plugin: &'static str,
    }
    let cases = [
        Level {
            ids: &[8, 16, 24],
            scheme: "PARTNER",
            store: "/ssd",
            group: "SWITCH",
            marker: format!("interval 8, {THREE_LEVEL}:36"),
            plugin: "libscr_partner.so",
        },
        Level {
            ids: &[4, 12, 20],
            scheme: "XOR",
            store: "/ssd",
            group: "NODE",
            marker: format!("param:   set_size = 8 ({THREE_LEVEL}:34)"),
            plugin: "libscr_xor.so",
        },
        Level {
            ids: &[1, 2, 3, 5, 7],
            scheme: "XOR",
            store: "/tmp",
            group: "NODE",
            marker: format!("param:   set_size = 16 ({THREE_LEVEL}:27)"),
            plugin: "libscr_xor.so",
        },
    ];
    for Level {
        ids,
        scheme,
        store,
        group,
        marker,
        plugin,
    } in cases
    {
        for &n in ids {
            let run = explain(&sb, n);
            run.expect_stdout(&format!("scheme:  {scheme}"))
                .expect_stdout(&format!("store:   {store}"))
                .expect_stdout(&format!("group:   {group}"))
                .expect_stdout(&marker);
            assert!(
                line_of(&run, "plugin:").contains(plugin),
                "{}",
                run.describe()
            );
            let status = line_of(&run, "status:");
            assert!(
                status.trim_start().starts_with("status:  sets of ")
                    && status.contains(": ok: ")
                    && status.ends_with("tolerates 1 lost member(s) per set"),
                "{}",
                run.describe()
            );
        }
    }
}

/// `SCR_GROUP=WORLD` is the descriptor's failure group, not the cache's: the cache store
/// stays node-local (SCR's store default, NODE), and the descriptor, whose sets then have
/// one member each, says it protects nothing.
#[test]
fn group_world_leaves_the_store_node_local_and_protects_nothing() {
    let sb = Sandbox::new();
    let run = sb.run(
        &[
            "config",
            "explain",
            "--checkpoint",
            "1",
            "--ranks",
            "8",
            "--ranks-per-node",
            "2",
        ],
        &[("SCR_GROUP", "WORLD")],
    );
    run.expect_code(0)
        .expect_stdout("group:   WORLD (environment SCR_GROUP)");
    let store = line_of(&run, "store:");
    assert!(
        store.contains("group NODE") && store.contains("view node"),
        "{}",
        run.describe()
    );
    assert!(
        line_of(&run, "sets:").contains("one member each"),
        "{}",
        run.describe()
    );
    assert!(
        line_of(&run, "status:").contains("sets of 1: ok: XOR parity over 1 member(s)"),
        "{}",
        run.describe()
    );
    let warning = line_of(&run, "warning:");
    for part in [
        "descriptor 0 (XOR, group WORLD) protects nothing",
        "a full set of set_size = 8 tolerates 1",
        "set group = \"NODE\"",
    ] {
        assert!(warning.contains(part), "{part}: {}", run.describe());
    }
    let show = sb.run(&["config", "show"], &[("SCR_GROUP", "WORLD")]);
    show.expect_code(0).expect_stdout("view = \"node\"");
    // on NODE over four nodes the sets protect: no warning
    let run = sb.run(
        &[
            "config",
            "explain",
            "--checkpoint",
            "1",
            "--ranks",
            "8",
            "--ranks-per-node",
            "2",
        ],
        &[],
    );
    run.expect_code(0);
    assert!(!run.stdout.contains("warning:"), "{}", run.describe());
}

/// `hop_distance` puts a set's neighbours that many nodes apart, and explain says so.
#[test]
fn explain_shows_the_sets_hop_distance_forms() {
    let sb = Sandbox::new();
    let run = sb.run(
        &["config", "explain", "--checkpoint", "1", "--ranks", "8"],
        &[("SCR_HOP_DISTANCE", "2"), ("SCR_SET_SIZE", "4")],
    );
    run.expect_code(0);
    let sets = line_of(&run, "sets:");
    assert!(
        sets.contains("2 set(s): 2 of 4 member(s)")
            && sets
                .contains("neighbours 2 groups apart (hop_distance, environment SCR_HOP_DISTANCE)"),
        "{}",
        run.describe()
    );
}

/// `explain` shows the sets a job really forms: `set_size` is a minimum, and a job on
/// fewer nodes than that forms smaller sets, for which the scheme is described.
#[test]
fn explain_describes_the_sets_a_job_of_a_given_layout_forms() {
    let sb = Sandbox::new();
    let run = sb.run(
        &[
            "config",
            "explain",
            "--checkpoint",
            "1",
            "--ranks",
            "10",
            "--ranks-per-node",
            "2",
        ],
        &[],
    );
    run.expect_code(0);
    assert_eq!(
        line_of(&run, "sets:"),
        "  sets:    2 set(s): 2 of 5 member(s) (10 ranks in 5 NODE failure group(s), from --ranks 10 --ranks-per-node 2; set_size 8 is a minimum)",
        "{}",
        run.describe()
    );
    assert!(
        line_of(&run, "status:")
            .starts_with("  status:  sets of 5: ok: XOR parity over 5 member(s)"),
        "{}",
        run.describe()
    );
    // the simulated nodes of node_names are the layout when no --ranks is given
    let run = sb.run(
        &["config", "explain", "--checkpoint", "1"],
        &[("SCR_NODE_NAMES", "a,a,b,b,c,c")],
    );
    run.expect_code(0);
    assert!(
        line_of(&run, "sets:").starts_with("  sets:    2 set(s): 2 of 3 member(s) (6 ranks in 3 NODE failure group(s), from node_names"),
        "{}",
        run.describe()
    );
    // without a layout only the rule is stated, and the description says for which size
    let run = sb.run(&["config", "explain", "--checkpoint", "1"], &[]);
    run.expect_code(0);
    assert!(
        line_of(&run, "sets:").contains("at least 8 members each"),
        "{}",
        run.describe()
    );
    assert!(
        line_of(&run, "status:").starts_with("  status:  sets of 8: ok: "),
        "{}",
        run.describe()
    );
    // --ranks-per-node needs --ranks: a usage error
    sb.run(
        &[
            "config",
            "explain",
            "--checkpoint",
            "1",
            "--ranks-per-node",
            "2",
        ],
        &[],
    )
    .expect_code(2);
}

#[test]
fn an_scr_file_imports_to_a_configuration_that_explains_the_same() {
    let sb = Sandbox::new();
    let scr = sb.write(
        "scr.conf",
        "SCR_COPY_TYPE=FILE\n\
         STORE=/tmp GROUP=NODE\nSTORE=/ssd GROUP=NODE COUNT=3\n\
         CKPT=0 INTERVAL=1 GROUP=NODE   STORE=/tmp TYPE=XOR     SET_SIZE=16\n\
         CKPT=1 INTERVAL=4 GROUP=NODE   STORE=/ssd TYPE=XOR     SET_SIZE=8\n\
         CKPT=2 INTERVAL=8 GROUP=SWITCH STORE=/ssd TYPE=PARTNER\n\
         GROUPS=zin1 SWITCH=0\nGROUPS=zin2 SWITCH=1\n",
    );
    let run = sb.run(&["config", "import", scr.to_str().unwrap()], &[]);
    run.expect_code(0);
    let toml = sb.write("imported.toml", &run.stdout);
    for n in [1u64, 4, 8, 12, 16] {
        let ours = sb.run(
            &[
                "config",
                "explain",
                "-c",
                toml.to_str().unwrap(),
                "--checkpoint",
                &n.to_string(),
            ],
            &[],
        );
        let seed = explain(&sb, n);
        ours.expect_code(0);
        for prefix in ["scheme:", "store:", "group:", "param:   set_size"] {
            let strip = |l: &str| l.split(" (").next().unwrap().to_string();
            assert_eq!(
                strip(line_of(&ours, prefix)),
                strip(line_of(&seed, prefix)),
                "checkpoint {n}"
            );
        }
    }
    let bad = sb.write("bad.conf", "SCR_CACHE_SIZE=3\nSCR_FLUSH=often\n");
    let run = sb.run(&["config", "import", bad.to_str().unwrap()], &[]);
    run.expect_code(1).expect_stderr(&format!(
        "scr: error: {}:2: SCR_FLUSH: \"often\" is not",
        bad.display()
    ));
}

/// A shipped scheme's explanation lists the parameters it reads only: XOR never shows
/// `replicas` or `set_failures` at their defaults, and one set by the user is named as
/// having no effect; RS shows `set_failures`; PARTNER `replicas`.
#[test]
fn explain_lists_only_the_parameters_the_scheme_reads() {
    let sb = Sandbox::new();
    let params = |run: &Run| -> Vec<String> {
        run.stdout
            .lines()
            .filter_map(|l| l.trim_start().strip_prefix("param:"))
            .map(|l| l.split_whitespace().next().unwrap_or_default().to_string())
            .collect()
    };
    let explain = |env: &[(&str, &str)]| {
        let run = sb.run(&["config", "explain", "--checkpoint", "1"], env);
        run.expect_code(0);
        run
    };
    let run = explain(&[("SCR_COPY_TYPE", "XOR")]);
    assert_eq!(
        params(&run),
        ["set_size", "buffer_size"],
        "{}",
        run.describe()
    );
    assert!(!run.stdout.contains("note:"), "{}", run.describe());
    let run = explain(&[("SCR_COPY_TYPE", "XOR"), ("SCR_SET_FAILURES", "3")]);
    assert_eq!(
        params(&run),
        ["set_size", "buffer_size"],
        "{}",
        run.describe()
    );
    assert_eq!(
        line_of(&run, "note:").trim(),
        "note:    set_failures = 3 (environment SCR_SET_FAILURES) has no effect on XOR: it reads set_size, buffer_size",
        "{}",
        run.describe()
    );
    let run = explain(&[("SCR_COPY_TYPE", "RS")]);
    assert_eq!(
        params(&run),
        ["set_size", "set_failures", "buffer_size"],
        "{}",
        run.describe()
    );
    let run = explain(&[("SCR_COPY_TYPE", "PARTNER")]);
    assert_eq!(
        params(&run),
        ["set_size", "replicas", "buffer_size"],
        "{}",
        run.describe()
    );
    let run = explain(&[("SCR_COPY_TYPE", "SINGLE"), ("SCR_SET_SIZE", "4")]);
    assert!(params(&run).is_empty(), "{}", run.describe());
    assert!(
        line_of(&run, "note:").contains("set_size = 4 (environment SCR_SET_SIZE) has no effect on SINGLE: it reads no parameter"),
        "{}",
        run.describe()
    );
}

/// Each descriptor's line says when its scheme runs: inside complete_output, or in the
/// background where the application's MPI allows it (which only the job can tell), with
/// where the setting came from and whether libscr's MPI_Init raises the level in this
/// environment.
#[test]
fn explain_says_when_the_scheme_runs() {
    let sb = Sandbox::new();
    let run = sb.run(&["config", "explain", "--checkpoint", "1"], &[]);
    run.expect_code(0);
    run.expect_stdout("protect: inside complete_output; protect_in_background = false (default)");
    let run = sb.run(
        &["config", "explain", "--checkpoint", "1"],
        &[("SCR_PROTECT_IN_BACKGROUND", "1")],
    );
    run.expect_code(0);
    run.expect_stdout("protect: in a background thread after complete_output when MPI runs at MPI_THREAD_MULTIPLE (init says so on rank 0; libscr's MPI_Init asks for it in this environment, where SCR_PROTECT_IN_BACKGROUND is true)");
    run.expect_stdout("else in a background thread that calls no MPI, each redundancy set exchanging over TCP connections of the library's own (protect_below_multiple = sockets, default)");
    run.expect_stdout("protect_in_background = true (environment SCR_PROTECT_IN_BACKGROUND)");
    let run = sb.run(
        &["config", "explain", "--checkpoint", "1"],
        &[
            ("SCR_PROTECT_IN_BACKGROUND", "1"),
            ("SCR_PROTECT_BELOW_MULTIPLE", "calls"),
        ],
    );
    run.expect_code(0);
    run.expect_stdout("else in a background thread whose MPI calls the application's thread makes at its calls into the library (protect_below_multiple = calls, environment SCR_PROTECT_BELOW_MULTIPLE)");
    let run = sb.run(
        &["config", "explain", "--checkpoint", "1"],
        &[
            ("SCR_PROTECT_IN_BACKGROUND", "1"),
            ("SCR_PROTECT_BELOW_MULTIPLE", "foreground"),
        ],
    );
    run.expect_code(0);
    run.expect_stdout("else inside complete_output (protect_below_multiple = foreground, environment SCR_PROTECT_BELOW_MULTIPLE)");
    // set in a file only: MPI_Init, which reads only the environment, leaves the level
    let conf = sb.write("background.toml", "protect_in_background = true\n");
    let run = sb.run(
        &["config", "explain", "--checkpoint", "1"],
        &[("SCR_CONF_FILE", conf.to_str().unwrap())],
    );
    run.expect_code(0);
    run.expect_stdout("(init says so on rank 0; libscr's MPI_Init leaves the level to the application in this environment, where SCR_PROTECT_IN_BACKGROUND is not true)");
    run.expect_stdout("protect_in_background = true (");
}
