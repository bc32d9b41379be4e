//! End-to-end tests of the `scr` command: every run is hermetic (cleared environment,
//! a fresh temporary working directory, and no stray system configuration file).

mod common;
use common::*;

use std::process::Command;

// 1. examples and the annotated system file

#[test]
fn every_example_passes_config_check() {
    let sb = Sandbox::new();
    for file in [THREE_LEVEL, STORES, GROUPS] {
        let run = sb.run(&["config", "check", file], &[]);
        run.expect_code(0);
        assert!(
            run.stdout.lines().any(|l| l.starts_with("ok:")),
            "{file}: no `ok:` line\n{}",
            run.describe()
        );
        run.expect_stdout(file);
    }
}

#[test]
fn annotated_system_file_passes_as_system_file() {
    let sb = Sandbox::new();
    let run = sb.run(
        &["config", "check"],
        &[("SCR_SYSTEM_CONFIG", SYSTEM_CONFIG)],
    );
    run.expect_code(0);
    assert!(
        run.stdout.lines().any(|l| l.starts_with("ok:")),
        "no `ok:` line\n{}",
        run.describe()
    );
    run.expect_stdout(SYSTEM_CONFIG);
}

#[test]
fn annotated_system_file_fails_as_user_file() {
    let sb = Sandbox::new();
    let run = sb.run(&["config", "check", SYSTEM_CONFIG], &[]);
    run.expect_code(1)
        .expect_stderr("only the system configuration may lock keys")
        .expect_stderr("[plugins] `builtin` can only be set in the system configuration")
        .expect_stderr(
            "[plugins] `allow_user_plugins` can only be set in the system configuration",
        );
    assert!(
        run.stderr
            .lines()
            .any(|l| l.starts_with(&format!("scr: error: {SYSTEM_CONFIG}:"))
                && l.contains("only the system configuration may lock keys")),
        "the lock error does not name the file\n{}",
        run.describe()
    );
    assert!(!run.stdout.contains("ok:"), "{}", run.describe());
}

// 2. located errors (`scr config explain`: explain.rs)

#[test]
fn typo_is_reported_with_file_line_and_suggestion() {
    let sb = Sandbox::new();
    let bad = sb.write(
        "bad.toml",
        "# a user file with a typo\ncache_size = 2\ncache_bse = \"/x\"\nset_size = 4\n",
    );
    let bad = bad.display().to_string();
    let run = sb.run(&["config", "check", &bad], &[]);
    run.expect_code(1);
    let errors: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.starts_with("scr: error: "))
        .collect();
    assert_eq!(errors.len(), 1, "{}", run.describe());
    assert!(
        errors[0].starts_with(&format!("scr: error: {bad}:3: ")),
        "wrong location\n{}",
        run.describe()
    );
    assert!(
        errors[0].contains("unknown key `cache_bse`")
            && errors[0].contains("did you mean `cache_base`"),
        "{}",
        run.describe()
    );
    run.expect_stderr("1 configuration error");
    assert!(run.stdout.is_empty(), "{}", run.describe());

    // The same file as SCR_CONF_FILE breaks every command that loads the configuration.
    let run = sb.run(&["config", "show"], &[("SCR_CONF_FILE", &bad)]);
    run.expect_code(1)
        .expect_stderr(&format!("scr: error: {bad}:3: "));
}

// 3. show: values with origins, and the output is a configuration

const USER_FILE: &str = "# user settings\n\nset_size = 4\n";

#[test]
fn show_prints_values_with_their_origins() {
    let sb = Sandbox::new();
    let user = sb.write("user.toml", USER_FILE).display().to_string();
    let run = sb.run(
        &["config", "show"],
        &[("SCR_CACHE_SIZE", "5"), ("SCR_CONF_FILE", &user)],
    );
    run.expect_code(0);
    let cache = line_of(&run, "cache_size = ");
    assert!(
        cache.starts_with("cache_size = 5 ") && cache.ends_with("# environment SCR_CACHE_SIZE"),
        "{cache:?}\n{}",
        run.describe()
    );
    let set = line_of(&run, "set_size = ");
    assert!(
        set.starts_with("set_size = 4 ") && set.ends_with(&format!("# {user}:3")),
        "{set:?}\n{}",
        run.describe()
    );
    let copy = line_of(&run, "copy_type = ");
    assert!(
        copy.starts_with("copy_type = \"XOR\"") && copy.ends_with("# default"),
        "{copy:?}\n{}",
        run.describe()
    );
}

/// The output of `scr config show` parses and validates as a configuration. (Read as
/// the system file, where every key it prints is allowed.)
#[test]
fn show_output_checks_as_system_file() {
    let sb = Sandbox::new();
    let user = sb.write("user.toml", USER_FILE).display().to_string();
    let run = sb.run(
        &["config", "show"],
        &[("SCR_CACHE_SIZE", "5"), ("SCR_CONF_FILE", &user)],
    );
    run.expect_code(0);
    let shown = sb.write("shown.toml", &run.stdout).display().to_string();
    let check = sb.run(&["config", "check"], &[("SCR_SYSTEM_CONFIG", &shown)]);
    check.expect_code(0).expect_stdout("ok: ");

    // and it means the same thing
    let again = sb.run(&["config", "show"], &[("SCR_SYSTEM_CONFIG", &shown)]);
    again.expect_code(0);
    assert!(line_of(&again, "cache_size = ").starts_with("cache_size = 5 "));
    assert!(line_of(&again, "set_size = ").starts_with("set_size = 4 "));
}

#[test]
fn show_output_with_group_tables_is_valid_toml() {
    let sb = Sandbox::new();
    let run = sb.run(&["config", "show"], &[("SCR_CONF_FILE", THREE_LEVEL)]);
    run.expect_code(0);
    let shown = sb.write("shown.toml", &run.stdout).display().to_string();
    let check = sb.run(&["config", "check"], &[("SCR_SYSTEM_CONFIG", &shown)]);
    check
        .expect_code(0)
        .expect_stdout("ok: 3 checkpoint descriptor(s)");
}

// 4. plugins list

/// The blocks of `scr plugins list`: each starts with an unindented file line.
fn blocks(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in text.lines() {
        if !line.starts_with(' ') || out.is_empty() {
            out.push(String::new());
        }
        let last = out.last_mut().expect("a block");
        last.push_str(line);
        last.push('\n');
    }
    out
}

#[test]
fn plugins_list_shows_every_shipped_plugin() {
    let sb = Sandbox::new();
    let run = sb.run(&["plugins", "list"], &[]);
    run.expect_code(0);
    let blocks = blocks(&run.stdout);
    let expected = [
        ("libscr_single.so", "scheme SINGLE (tolerates 0)"),
        ("libscr_partner.so", "scheme PARTNER (tolerates 1)"),
        ("libscr_xor.so", "scheme XOR (tolerates 1)"),
        ("libscr_reed_solomon.so", "scheme RS (tolerates 2)"),
        ("libscr_axl_transfer.so", "transfer bbapi"),
    ];
    for (file, provides) in expected {
        let block = blocks
            .iter()
            .find(|b| {
                b.lines()
                    .next()
                    .is_some_and(|l| l.ends_with(&format!("/{file}")))
            })
            .unwrap_or_else(|| panic!("{file} not listed\n{}", run.describe()));
        for needle in ["status: loaded", "ABI 1", "built-in", provides] {
            assert!(
                block.contains(needle),
                "{file}: {needle:?} missing\n{}",
                run.describe()
            );
        }
    }
    assert!(!run.stdout.contains("refused"), "{}", run.describe());
    assert!(!run.stdout.contains("duplicate"), "{}", run.describe());
}

// 5. plugins check

#[test]
fn plugins_check_refuses_a_library_that_is_not_a_plugin() {
    let sb = Sandbox::new();
    let file = target_file("libscr_fixture_not_a_plugin.so");
    let run = sb.run(&["plugins", "check", &file], &[]);
    run.expect_code(1);
    assert_eq!(run.stdout.lines().count(), 1, "{}", run.describe());
    assert!(run.stderr.is_empty(), "{}", run.describe());
    run.expect_stdout(&file)
        .expect_stdout("not an scr-rs plugin");
}

#[test]
fn plugins_check_refuses_an_abi_layout_mismatch() {
    let sb = Sandbox::new();
    let file = target_file("libscr_fixture_layout_mismatch.so");
    let run = sb.run(&["plugins", "check", &file], &[]);
    run.expect_code(1);
    assert_eq!(run.stdout.lines().count(), 1, "{}", run.describe());
    assert!(run.stderr.is_empty(), "{}", run.describe());
    run.expect_stdout(&file).expect_stdout(
        "refused: incompatible plugin ABI: its root module comes from package `scr-fixture-layout-mismatch`, not from `scr-plugin`",
    );
}

#[test]
fn plugins_check_accepts_a_shipped_plugin() {
    let sb = Sandbox::new();
    let file = target_file("libscr_xor.so");
    let run = sb.run(&["plugins", "check", &file], &[]);
    run.expect_code(0)
        .expect_stdout(&file)
        .expect_stdout("scr-xor")
        .expect_stdout("status: loaded")
        .expect_stdout("named file");
}

// 6. usage

#[test]
fn usage_errors_exit_2() {
    let sb = Sandbox::new();
    let run = sb.run(&["config", "explain"], &[]);
    run.expect_code(2).expect_stderr("--checkpoint");
    let run = sb.run(&["config", "explain", "--checkpoint", "0"], &[]);
    run.expect_code(2).expect_stderr("invalid value '0'");
    let run = sb.run(&["frobnicate"], &[]);
    run.expect_code(2).expect_stderr("frobnicate");
    assert!(run.stdout.is_empty(), "{}", run.describe());
}

#[test]
fn help_lists_subcommands() {
    let sb = Sandbox::new();
    let cases: [(&[&str], &[&str]); 3] = [
        (&["--help"], &["config", "plugins"]),
        (&["config", "--help"], &["check", "show", "explain"]),
        (&["plugins", "--help"], &["list", "check"]),
    ];
    for (args, subcommands) in cases {
        let run = sb.run(args, &[]);
        run.expect_code(0).expect_stdout("Commands:");
        for sub in subcommands {
            assert!(
                run.stdout
                    .lines()
                    .any(|l| l.trim_start().starts_with(&format!("{sub} "))),
                "scr {args:?}: subcommand {sub} not listed\n{}",
                run.describe()
            );
        }
    }
}

// 7. locks

#[test]
fn locked_key_cannot_be_overridden_from_the_environment() {
    let sb = Sandbox::new();
    let system = sb
        .write(
            "system.toml",
            "# site policy\ncache_size = 3\n\nlocked = [\"cache_size\"]\n",
        )
        .display()
        .to_string();
    let run = sb.run(
        &["config", "check"],
        &[("SCR_SYSTEM_CONFIG", &system), ("SCR_CACHE_SIZE", "9")],
    );
    run.expect_code(1);
    let error = run
        .stderr
        .lines()
        .find(|l| l.contains("locked"))
        .unwrap_or_else(|| panic!("no lock error\n{}", run.describe()));
    assert!(
        error.starts_with("scr: error: environment SCR_CACHE_SIZE: "),
        "{}",
        run.describe()
    );
    assert!(error.contains("`cache_size`"), "{}", run.describe());
    assert!(
        error.contains(&format!("({system}:4)")),
        "the lock's line is not named\n{}",
        run.describe()
    );
    assert!(run.stdout.is_empty(), "{}", run.describe());

    // without the override the same system file is fine
    let run = sb.run(&["config", "check"], &[("SCR_SYSTEM_CONFIG", &system)]);
    run.expect_code(0).expect_stdout("ok: ");
}

// other findings

#[test]
fn system_flag_checks_a_system_file_without_installing_it() {
    let sb = Sandbox::new();
    let run = sb.run(&["config", "check", "--system", SYSTEM_CONFIG], &[]);
    run.expect_code(0)
        .expect_stdout("ok: 1 checkpoint descriptor(s)");
    let run = sb.run(&["config", "check", SYSTEM_CONFIG], &[]);
    run.expect_code(1)
        .expect_stderr("to check a system file, run `scr config check --system FILE`");
}

#[test]
fn show_output_escapes_keys_and_strings_as_toml() {
    let sb = Sandbox::new();
    let user = sb.write(
        "odd.toml",
        "job_name = \"a\\u0007b \\\"quoted\\\"\"\n\
         [[checkpoint]]\ninterval = 1\n[checkpoint.params]\n\"block size\" = 4\n\
         [plugins.\"my type\"]\n\"a key\" = \"x\\ty\"\n",
    );
    let user = user.display().to_string();
    let run = sb.run(&["config", "show"], &[("SCR_CONF_FILE", &user)]);
    run.expect_code(0);
    let shown = sb.write("shown.toml", &run.stdout).display().to_string();
    let again = sb.run(&["config", "show"], &[("SCR_SYSTEM_CONFIG", &shown)]);
    again.expect_code(0);
    let body = |r: &Run| -> Vec<String> {
        r.stdout
            .lines()
            .skip(1) // names the files read
            // where the first run's user file came from (SCR_CONF_FILE), which the
            // second run, reading the output as its system file, does not have
            .filter(|l| !l.starts_with("# conf_file"))
            .map(|l| l.split("  #").next().unwrap().trim_end().to_string())
            .collect()
    };
    assert_eq!(body(&again), body(&run), "values change on a round trip");
    assert!(
        run.stdout.contains("\"block size\" = \"4\""),
        "{}",
        run.stdout
    );
}

#[test]
fn halt_sets_unsets_and_lists_conditions() {
    let sb = Sandbox::new();
    let prefix = sb.path().display().to_string();
    let run = sb.run(
        &[
            "halt",
            "--prefix",
            &prefix,
            "--checkpoints",
            "3",
            "--after",
            "1700000000",
            "--reason",
            "maintenance",
        ],
        &[],
    );
    run.expect_code(0)
        .expect_stdout("CheckpointsLeft  3")
        .expect_stdout("ExitAfter        1700000000")
        .expect_stdout("ExitReason       maintenance");
    let run = sb.run(
        &[
            "halt", "--prefix", &prefix, "--unset", "reason", "--unset", "after",
        ],
        &[],
    );
    run.expect_code(0)
        .expect_stdout("CheckpointsLeft  3")
        .expect_stdout("ExitAfter        -")
        .expect_stdout("ExitReason       -");
    let run = sb.run(&["halt", "--prefix", &prefix], &[]);
    run.expect_code(0).expect_stdout("CheckpointsLeft  3");
    let run = sb.run(&["halt", "--prefix", &prefix, "--clear"], &[]);
    run.expect_code(0).expect_stdout("CheckpointsLeft  -");
    sb.run(&["halt", "--prefix", &prefix, "--unset", "bogus"], &[])
        .expect_code(2);
    sb.run(&["halt", "--prefix", &prefix, "--after", "soon"], &[])
        .expect_code(2);
}

/// The index entry of complete checkpoint `ckpt.<id>` (dataset `id`).
fn entry(id: u64) -> scr_host::state::prefix::IndexEntry {
    scr_host::state::prefix::IndexEntry {
        id,
        name: format!("ckpt.{id}"),
        checkpoint_id: Some(id),
        dir: format!("scr.dataset.{id}"),
        world_size: 1,
        complete: true,
        ..Default::default()
    }
}

/// `scr index current` run by an admin while a job updates the index: every update is a
/// read-modify-write under an advisory lock on `<prefix>/.scr/lock`, so none is lost
/// (before the lock, concurrent updates dropped some of each other's entries).
#[test]
fn concurrent_index_updates_from_several_processes_lose_nothing() {
    use scr_host::state::prefix::Index;
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path();
    Index::update(prefix, |ix| {
        ix.datasets.insert(1, entry(1));
    })
    .unwrap();
    let admins: Vec<std::process::Child> = (0..4)
        .map(|_| {
            Command::new("sh")
                .arg("-c")
                .arg(format!(
                    "for i in $(seq 15); do {SCR} index current ckpt.1 --prefix {} >/dev/null || exit 1; done",
                    prefix.display()
                ))
                .spawn()
                .unwrap()
        })
        .collect();
    for id in 100..200 {
        Index::update(prefix, |ix| {
            ix.datasets.insert(id, entry(id));
        })
        .unwrap();
    }
    for mut a in admins {
        assert!(a.wait().unwrap().success());
    }
    let ix = Index::load(prefix).unwrap();
    let missing: Vec<u64> = (100..200)
        .filter(|id| !ix.datasets.contains_key(id))
        .collect();
    assert!(missing.is_empty(), "lost updates: {missing:?}");
    assert_eq!(ix.current.as_deref(), Some("ckpt.1"));
    let holder = std::fs::read_to_string(prefix.join(".scr/lock")).unwrap();
    assert!(holder.starts_with("pid "), "{holder}");
}

/// An index written by a release with another format version is not damage: it is never
/// replaced by one rebuilt from the summaries (that would wipe a shared prefix's
/// history); updates fail with the version named. A damaged one is rebuilt, and the
/// damaged file is kept beside it.
#[test]
fn an_index_of_another_version_is_never_rebuilt_over() {
    use scr_host::state::prefix::Index;
    let dir = tempfile::tempdir().unwrap();
    let path = Index::path(dir.path());
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let body = b"{\"datasets\":{}}";
    let other = format!("scr-rs index 999 crc32={:08x}\n", crc32fast::hash(body));
    let mut bytes = other.into_bytes();
    bytes.extend_from_slice(body);
    std::fs::write(&path, &bytes).unwrap();
    let e = Index::update(dir.path(), |ix| ix.current = Some("x".into())).unwrap_err();
    assert!(e.to_string().contains("format version 999"), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "left as it was");

    // damage (a flipped byte) is rebuilt, the damaged file kept
    std::fs::remove_file(&path).unwrap();
    Index::update(dir.path(), |ix| ix.current = Some("a".into())).unwrap();
    let mut good = std::fs::read(&path).unwrap();
    let last = good.len() - 2;
    good[last] ^= 1;
    std::fs::write(&path, &good).unwrap();
    Index::update(dir.path(), |ix| ix.current = Some("b".into())).unwrap();
    assert_eq!(
        Index::load(dir.path()).unwrap().current.as_deref(),
        Some("b")
    );
    assert_eq!(
        std::fs::read(path.with_extension("scr.damaged")).unwrap(),
        good
    );
}

/// `scr index current NAME` and `scr index drop NAME` decide on the index as it is once
/// they hold the prefix lock: a dataset a job's flush records while the command waits for
/// the lock is found (before, the index was read before the lock, so the command refused
/// a name that was there by the time it wrote, or wrote back a stale choice).
#[test]
fn index_commands_decide_on_the_index_they_find_under_the_lock() {
    use scr_host::state::prefix::{Index, PrefixLock};
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path();
    Index::update(prefix, |ix| {
        ix.datasets.insert(1, entry(1));
    })
    .unwrap();
    for (args, id, said) in [
        (
            &["index", "current", "ckpt.2"][..],
            2,
            "restart point set to ckpt.2\n",
        ),
        (&["index", "drop", "ckpt.3"][..], 3, "dropped ckpt.3\n"),
    ] {
        // another process (a job) holds the lock: a separate open file description
        // conflicts with the command's flock as another process's would
        let held = std::fs::File::open(PrefixLock::path(prefix)).unwrap();
        held.lock().unwrap();
        let admin = Command::new(SCR)
            .args(args)
            .arg("--prefix")
            .arg(prefix)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(500));
        // the job records its flush (as it does, under the lock it holds)
        let mut ix = Index::load(prefix).unwrap();
        ix.datasets.insert(id, entry(id));
        scr_host::state::write_state(&Index::path(prefix), "index", &ix).unwrap();
        held.unlock().unwrap();
        let out = admin.wait_with_output().unwrap();
        assert_eq!(
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).into_owned()
            ),
            (Some(0), said.to_string()),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let ix = Index::load(prefix).unwrap();
    assert_eq!(ix.current.as_deref(), Some("ckpt.2"));
    assert_eq!(ix.datasets.keys().copied().collect::<Vec<_>>(), [1, 2]);
}

/// A failed mark (kept beside the summary, so a rebuilt index keeps it) can be cleared
/// once its cause is fixed; then the checkpoint can be made the restart point again.
#[test]
fn scr_index_clear_failed_makes_a_checkpoint_usable_again() {
    use scr_host::state::prefix::{FailedNote, Index};
    let sb = Sandbox::new();
    let prefix = sb.path().join("prefix");
    std::fs::create_dir(&prefix).unwrap();
    Index::update(&prefix, |ix| {
        ix.datasets.insert(1, entry(1));
    })
    .unwrap();
    Index::mark_failed(&prefix, 1, "re-protecting failed on rank 2").unwrap();
    assert!(FailedNote::path(&prefix, 1).is_file());
    let p = prefix.display().to_string();
    sb.run(&["index", "current", "ckpt.1", "--prefix", &p], &[])
        .expect_code(1);
    let run = sb.run(&["index", "clear-failed", "ckpt.1", "--prefix", &p], &[]);
    run.expect_code(0);
    assert!(
        run.stdout
            .contains("ckpt.1: failed mark cleared (it said: re-protecting failed on rank 2)"),
        "{}",
        run.stdout
    );
    assert!(!FailedNote::path(&prefix, 1).exists());
    assert_eq!(Index::load(&prefix).unwrap().datasets[&1].failed, None);
    sb.run(&["index", "current", "ckpt.1", "--prefix", &p], &[])
        .expect_code(0);
    let unknown = sb.run(&["index", "clear-failed", "ckpt.9", "--prefix", &p], &[]);
    unknown.expect_code(1);
    assert!(
        unknown
            .stderr
            .contains("no dataset named `ckpt.9` in the index"),
        "{}",
        unknown.stderr
    );
}

/// A plugin that was refused is named in the error of the descriptor that then lacks its
/// scheme, not only in a separate warning.
#[test]
fn config_check_names_a_refused_plugin_where_its_scheme_is_missing() {
    let sb = Sandbox::new();
    let file = target_file("libscr_fixture_layout_mismatch.so");
    let system = sb.write("system.toml", &format!("[plugins]\nfiles = [\"{file}\"]\n"));
    let user = sb.write(
        "user.toml",
        "[[checkpoint]]\ninterval = 1\ntype = \"MIRROR\"\n",
    );
    let run = sb.run(
        &["config", "check", user.to_str().unwrap()],
        &[("SCR_SYSTEM_CONFIG", system.to_str().unwrap())],
    );
    run.expect_code(1);
    let error = run
        .stderr
        .lines()
        .find(|l| l.contains("unknown scheme \"MIRROR\""))
        .unwrap_or_else(|| panic!("no error for MIRROR\n{}", run.describe()));
    assert!(
        error.starts_with(&format!("scr: error: {}:3: ", user.display())),
        "{}",
        run.describe()
    );
    assert!(
        error.ends_with(&format!(
            "; {file}: refused: incompatible plugin ABI: its root module comes from package `scr-fixture-layout-mismatch`, not from `scr-plugin`: the library was not built with scr_plugin::export_plugin! against scr-plugin; rebuild the plugin against scr-plugin {}, this host's version (see \"Upgrading scr-plugin\" in scr_plugin::manual)",
            scr_plugin::VERSION
        )),
        "{}",
        run.describe()
    );
}
