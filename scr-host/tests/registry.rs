//! The plugin registry against real shared libraries: the shipped plugins, and fixture
//! libraries that are not plugins, have another layout or ABI version, panic, or
//! duplicate a name. Each problem must come back as one line naming the file.

use std::path::PathBuf;

use abi_stable::std_types::RSome;
use scr_host::config::check_plugins;
use scr_host::config::{ConfigError, Loader, Origin};
use scr_host::registry::{Kind, Origin as LibOrigin, Registry, RegistryError, SearchPath};
use scr_plugin::{
    inproc, DatasetFiles, ErrorCode, Param, RecoverRequest, SchemeConfig, TransferConfig,
};

use scr_plugin::conformance::{built_library as lib, target_dir};

fn registry_of(names: &[&str]) -> Registry {
    let mut r = Registry::default();
    for n in names {
        r.add_file(&lib(n), LibOrigin::Explicit);
    }
    r
}

fn scheme_config(name: &str) -> SchemeConfig {
    SchemeConfig {
        scheme: name.into(),
        params: Default::default(),
        settings: Default::default(),
        members: 4,
        member: 0,
        world_rank: 0,
    }
}

fn refusal(name: &str) -> String {
    let r = registry_of(&[name]);
    assert!(r.libraries().is_empty());
    assert_eq!(r.refused().len(), 1);
    let line = r.refused()[0].to_string();
    assert!(!line.contains('\n'), "not one line: {line}");
    assert!(line.starts_with(&lib(name).display().to_string()), "{line}");
    line
}

#[test]
fn shipped_plugins_load_from_the_builtin_directory() {
    let dir = scr_host::registry::builtin_plugin_dir().expect("built-in plugin dir");
    let r = Registry::load(&SearchPath {
        builtin: Some(dir),
        ..SearchPath::default()
    });
    assert!(r.refused().is_empty(), "{:?}", r.refused());
    let names: Vec<&str> = r.libraries().iter().map(|l| l.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "scr-single",
            "scr-partner",
            "scr-xor",
            "scr-reed-solomon",
            "scr-axl-transfer"
        ]
    );
    assert!(r
        .libraries()
        .iter()
        .all(|l| l.abi_version == scr_plugin::ABI_VERSION && l.origin == LibOrigin::Builtin));
    assert_eq!(r.names(Kind::Scheme), ["PARTNER", "RS", "SINGLE", "XOR"]);
    assert_eq!(r.names(Kind::Transfer), ["bbapi", "dw", "pthread", "sync"]);
    // no fixture library sits in the built-in list even though it is in the same dir
    assert!(names.iter().all(|n| !n.contains("fixture")));
}

#[test]
fn shipped_names_instantiate_or_say_what_they_need() {
    let r = registry_of(&[
        "scr_single",
        "scr_partner",
        "scr_xor",
        "scr_reed_solomon",
        "scr_axl_transfer",
    ]);
    for (s, tolerated) in [
        ("single", 0),
        ("Partner", 1),
        ("XOR", 1),
        ("rs", 2),
        ("RS", 2),
    ] {
        let scheme = r.new_scheme(&scheme_config(s)).unwrap();
        assert_eq!(
            scheme.describe().unwrap().tolerated_losses,
            tolerated,
            "{s}"
        );
    }
    // a set of 2 (a job on two nodes) cannot hold RS's default 2 checksums: it keeps 1
    let small = r
        .new_scheme(&SchemeConfig {
            members: 2,
            ..scheme_config("RS")
        })
        .unwrap();
    assert_eq!(small.describe().unwrap().tolerated_losses, 1);
    // set_failures that not even a full set of set_size can hold: refused, saying why
    let mut config = SchemeConfig {
        members: 2,
        ..scheme_config("RS")
    };
    config.params = vec![
        Param {
            key: "set_size".into(),
            value: "2".into(),
        },
        Param {
            key: "set_failures".into(),
            value: "2".into(),
        },
    ]
    .into();
    match r.new_scheme(&config) {
        Err(RegistryError::Plugin { call, error, file }) => {
            assert_eq!(call, "new_scheme");
            assert_eq!(error.code, ErrorCode::INVALID_PARAMETER);
            assert!(
                error.message().contains(
                    "set_failures = 2 needs sets of at least 3 members, but set_size is 2"
                ),
                "{error}"
            );
            assert!(file.ends_with(".so"));
        }
        other => panic!(
            "RS with set_failures = set_size: expected a refusal, got {:?}",
            other.err()
        ),
    }
    let dir = tempfile::tempdir().unwrap();
    let out = inproc::run(&["n0"], |host| {
        ["sync", "PThread", "bbapi", "dw"].map(|t| {
            let config = TransferConfig {
                transfer_type: t.into(),
                state_file: dir
                    .path()
                    .join(format!("{t}.state"))
                    .display()
                    .to_string()
                    .into(),
                crc32: true,
                preserve_metadata: true,
                settings: Default::default(),
            };
            match r.new_transfer(&config, host.raw()) {
                Err(RegistryError::Plugin { error, .. }) => Some(error.code),
                Err(e) => panic!("{t}: {e}"),
                Ok(_) => None,
            }
        })
    });
    // sync and pthread work; the vendor types need their library, absent here
    assert_eq!(
        out[0],
        [
            None,
            None,
            Some(ErrorCode::UNAVAILABLE),
            Some(ErrorCode::UNAVAILABLE)
        ]
    );
}

#[test]
fn a_library_that_is_not_a_plugin_is_refused() {
    let line = refusal("scr_fixture_not_a_plugin");
    assert!(
        line.contains("refused: not an scr-rs plugin: it exports no abi_stable root module"),
        "{line}"
    );
}

/// The sentence every ABI refusal ends with.
fn rebuild() -> String {
    format!(
        "; rebuild the plugin against scr-plugin {}, this host's version (see \"Upgrading scr-plugin\" in scr_plugin::manual)",
        scr_plugin::VERSION
    )
}

/// An ABI refusal is one line of words: what changed and where, then what to do; none of
/// abi_stable's vocabulary.
fn abi_refusal(name: &str) -> String {
    let line = refusal(name);
    let (_, reason) = line.split_once(": refused: ").unwrap();
    for internal in [
        "_self",
        "param_",
        "field_name",
        "__returns",
        "vtable",
        "VTable",
        "_TO",
    ] {
        assert!(!reason.contains(internal), "{internal} in: {line}");
    }
    reason.to_string()
}

#[test]
fn an_abi_incompatible_layout_is_refused_in_one_line() {
    assert_eq!(
        abi_refusal("scr_fixture_layout_mismatch"),
        format!(
            "incompatible plugin ABI: its root module comes from package `scr-fixture-layout-mismatch`, not from `scr-plugin`: the library was not built with scr_plugin::export_plugin! against scr-plugin{}",
            rebuild()
        )
    );
}

#[test]
fn a_parameter_added_to_a_method_is_refused_in_words() {
    assert_eq!(
        abi_refusal("scr_fixture_abi_param_added"),
        format!(
            "incompatible plugin ABI: a parameter was added to scheme method `redundancy_files` (this host's scr-plugin has 1 parameter, the library 2 parameters){}",
            rebuild()
        )
    );
}

#[test]
fn a_parameter_whose_type_changed_is_refused_in_words() {
    assert_eq!(
        abi_refusal("scr_fixture_abi_param_type"),
        format!(
            "incompatible plugin ABI: the type of parameter 1 of scheme method `redundancy_files` changed (this host's scr-plugin has `&DatasetFiles`, the library `u64`){}",
            rebuild()
        )
    );
}

#[test]
fn a_return_type_that_changed_is_refused_in_words() {
    assert_eq!(
        abi_refusal("scr_fixture_abi_return_type"),
        format!(
            "incompatible plugin ABI: the return type of scheme method `redundancy_files` changed: inside its `RResult`, this host's scr-plugin has `RString`, the library `FileMeta`{}",
            rebuild()
        )
    );
}

#[test]
fn a_field_removed_from_a_contract_type_is_refused_in_words() {
    assert_eq!(
        abi_refusal("scr_fixture_abi_field_removed"),
        format!(
            "incompatible plugin ABI: field `summary` was removed from `SchemeDescription` (in the return value of scheme method `describe`){}",
            rebuild()
        )
    );
}

#[test]
fn a_newer_semantic_abi_version_is_refused() {
    let line = refusal("scr_fixture_future_abi");
    let v = scr_plugin::ABI_VERSION;
    assert!(
        line.ends_with(&format!(
            ": refused: plugin ABI version mismatch: this host speaks version {v}, the library was built for version {}{}",
            v + 1,
            rebuild()
        )),
        "{line}"
    );
}

#[test]
fn a_root_module_that_panics_is_refused() {
    let line = refusal("scr_fixture_bad_root");
    assert!(line.contains("its root module failed to load"), "{line}");
    assert!(line.contains("panicked"), "{line}");
}

#[test]
fn files_that_are_not_shared_libraries_are_refused_and_the_rest_load() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("README.so"), "not an ELF file\n").unwrap();
    std::fs::copy(lib("scr_xor"), dir.path().join("libsite_xor.so")).unwrap();
    std::fs::write(dir.path().join("notes.txt"), "ignored: not *.so").unwrap();
    let r = Registry::load(&SearchPath {
        site_directories: vec![dir.path().to_path_buf(), PathBuf::from("/nonexistent/dir")],
        ..SearchPath::default()
    });
    assert_eq!(r.libraries().len(), 1);
    assert_eq!(r.libraries()[0].name, "scr-xor");
    let lines: Vec<String> = r.refused().iter().map(|x| x.to_string()).collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].contains("README.so: refused: cannot be opened as a shared library"));
    assert!(lines[1].contains("/nonexistent/dir: refused: cannot read plugin directory"));
}

#[test]
fn a_panicking_plugin_is_an_error_and_the_host_carries_on() {
    let r = registry_of(&["scr_fixture_panic", "scr_xor"]);
    match r.new_scheme(&scheme_config("panic_new")) {
        Err(RegistryError::Plugin { error, call, .. }) => {
            assert_eq!(call, "new_scheme");
            assert_eq!(error.code, ErrorCode::PANIC);
            assert_eq!(
                error.message(),
                "plugin scr-fixture-panic panicked in new_scheme: deliberate panic in new_scheme"
            );
        }
        other => panic!("{:?}", other.err()),
    }
    // an instance whose apply panics: every member gets the error, nobody aborts
    let scheme = r.new_scheme(&scheme_config("PANIC_APPLY")).unwrap();
    assert_eq!(scheme.describe().unwrap().name.as_str(), "PANIC_APPLY");
    let results = inproc::run(&["a", "b"], |host| {
        let ds = DatasetFiles {
            dataset_id: 1,
            dir: "/nonexistent".into(),
            files: Default::default(),
        };
        scheme.raw().apply(host.raw(), &ds).into_result()
    });
    for res in results {
        let e = res.unwrap_err();
        assert_eq!(e.code, ErrorCode::PANIC);
        assert!(e
            .message()
            .contains("panicked in apply: deliberate panic in apply"));
    }
    // and the same instance and registry still work afterwards
    let req = RecoverRequest {
        dataset_id: 1,
        dir: "/nonexistent".into(),
        files: RSome(Default::default()),
    };
    let ok = inproc::run(&["a"], |host| {
        scheme.raw().recover(host.raw(), &req).into_result()
    });
    assert!(ok[0].as_ref().unwrap().is_empty());
    assert_eq!(
        r.new_scheme(&scheme_config("xor"))
            .unwrap()
            .describe()
            .unwrap()
            .name
            .as_str(),
        "XOR"
    );
}

#[test]
fn a_name_provided_twice_is_reported_and_ambiguous() {
    let r = registry_of(&["scr_xor", "scr_fixture_duplicate"]);
    let dups = r.duplicates();
    assert_eq!(dups.len(), 1);
    let line = dups[0].to_string();
    assert!(!line.contains('\n'));
    assert!(
        line.starts_with("scheme \"XOR\" is provided by more than one library"),
        "{line}"
    );
    assert!(line.contains("libscr_xor.so") && line.contains("libscr_fixture_duplicate.so"));
    assert!(matches!(
        r.provider(Kind::Scheme, "xOr"),
        Err(RegistryError::Ambiguous { .. })
    ));
    assert_eq!(
        r.provider(Kind::Scheme, "unique_fixture").unwrap().name,
        "scr-fixture-duplicate"
    );
}

#[test]
fn an_unknown_name_lists_the_known_ones() {
    let r = registry_of(&["scr_xor", "scr_partner", "scr_axl_transfer"]);
    let e = r.provider(Kind::Scheme, "MIRROR").unwrap_err().to_string();
    assert_eq!(
        e,
        "unknown scheme \"MIRROR\": no loaded plugin provides it (known: PARTNER, XOR)"
    );
    let e = r.provider(Kind::Transfer, "ftp").unwrap_err().to_string();
    assert!(e.ends_with("(known: bbapi, dw, pthread, sync)"), "{e}");
}

#[test]
fn the_same_file_reached_twice_loads_once() {
    let mut r = registry_of(&["scr_xor"]);
    r.add_file(&lib("scr_xor"), LibOrigin::Explicit);
    assert_eq!(r.libraries().len(), 1);
    assert!(r.duplicates().is_empty());
}

/// A configuration naming a type that no loaded plugin provides is an error at the line
/// of that type; a store's transfer type likewise.
#[test]
fn config_check_refuses_types_no_plugin_provides() {
    let dir = tempfile::tempdir().unwrap();
    let user = dir.path().join("user.toml");
    std::fs::write(
        &user,
        "[[store]]\npath = \"/ssd\"\ntype = \"ftp\"\n\n[[checkpoint]]\ninterval = 1\nstore = \"/ssd\"\ntype = \"MIRROR\"\n",
    )
    .unwrap();
    let system = dir.path().join("system.toml");
    std::fs::write(&system, "").unwrap();
    let mut loader = Loader::default();
    loader.env = [
        ("SCR_CONF_FILE".to_string(), user.display().to_string()),
        (
            "SCR_SYSTEM_CONFIG".to_string(),
            system.display().to_string(),
        ),
    ]
    .into();
    loader.cwd = dir.path().to_path_buf();
    let config = loader.load().unwrap();
    let r = registry_of(&["scr_xor", "scr_axl_transfer"]);
    let f = check_plugins(&config, &r);
    let at = |line| Origin::File {
        path: user.clone(),
        line,
    };
    assert_eq!(
        f.errors,
        vec![
            ConfigError {
                origin: at(8),
                message: "unknown scheme \"MIRROR\": no loaded plugin provides it (known: XOR)"
                    .into()
            },
            ConfigError {
                origin: at(1),
                message: "store `/ssd`: unknown transfer type \"ftp\": no loaded plugin provides it (known: bbapi, dw, pthread, sync)".into()
            },
        ]
    );
}

#[test]
fn a_builtin_file_that_is_not_the_shipped_library_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        lib("scr_fixture_duplicate"),
        dir.path().join("libscr_single.so"),
    )
    .unwrap();
    std::fs::copy(lib("scr_xor"), dir.path().join("libscr_xor.so")).unwrap();
    std::fs::copy(lib("scr_fixture_panic"), dir.path().join("libextra.so")).unwrap();
    let r = Registry::load(&SearchPath {
        builtin: Some(dir.path().to_path_buf()),
        ..SearchPath::default()
    });
    let names: Vec<&str> = r.libraries().iter().map(|l| l.name.as_str()).collect();
    assert_eq!(
        names,
        ["scr-xor"],
        "only shipped file names, and only the right library"
    );
    assert_eq!(r.refused().len(), 1);
    assert!(r.refused()[0].to_string().contains(
        "libscr_single.so: refused: a built-in plugin file must be library scr-single, but this one is scr-fixture-duplicate 0.0.1"
    ));
}

/// Plugin destructors run inside abi_stable's `extern "C"` drop functions; a panic there
/// must be contained, or the whole job aborts. Reaching the end of this test is the proof.
#[test]
fn a_panic_while_dropping_a_plugin_object_does_not_abort() {
    let r = registry_of(&["scr_fixture_panic"]);
    let scheme = r.new_scheme(&scheme_config("PANIC_DROP")).unwrap();
    assert_eq!(scheme.describe().unwrap().name.as_str(), "PANIC_DROP");
    drop(scheme);
    assert!(r.new_scheme(&scheme_config("PANIC_APPLY")).is_ok());
}

/// A plugin file or directory another user could have written is refused before it is
/// opened (its constructors would run in every rank): owned by someone else, or writable
/// by group or others. `scr plugins list` shows the reason.
#[test]
fn plugins_others_could_write_are_refused_before_they_are_opened() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
    };
    let only_refusal = |r: &Registry| -> String {
        assert!(r.libraries().is_empty(), "{:?}", r.libraries().len());
        let lines: Vec<String> = r.refused().iter().map(|x| x.to_string()).collect();
        assert_eq!(lines.len(), 1, "{lines:?}");
        lines[0].clone()
    };

    // a world-writable plugin directory: refused whole, naming its mode
    let dir = tempfile::tempdir().unwrap();
    let so = dir.path().join("libsite_xor.so");
    std::fs::copy(lib("scr_xor"), &so).unwrap();
    mode(dir.path(), 0o777);
    let mut r = Registry::default();
    r.add_directory(
        dir.path(),
        LibOrigin::SiteDirectory(dir.path().to_path_buf()),
    );
    let line = only_refusal(&r);
    assert!(
        line.contains("plugin directory")
            && line.contains("has mode 0777: writable by group or others")
            && line.contains("chmod go-w"),
        "{line}"
    );
    // ... and a file named explicitly in it
    let mut r = Registry::default();
    r.add_file(&so, LibOrigin::Explicit);
    let line = only_refusal(&r);
    assert!(line.contains("not opened: its directory"), "{line}");

    // a group-writable file in a private directory: refused when the group is another
    // one (needs root to arrange), accepted when it is the user's own private group
    // (umask 002 distributions)
    mode(dir.path(), 0o700);
    mode(&so, 0o775);
    if std::os::unix::fs::chown(&so, None, Some(54322)).is_ok() {
        let mut r = Registry::default();
        r.add_file(&so, LibOrigin::Explicit);
        let line = only_refusal(&r);
        assert!(
            line.contains("not opened: plugin file") && line.contains("has mode 0775"),
            "{line}"
        );
        std::os::unix::fs::chown(&so, None, Some(current_gid())).unwrap();
    }
    if own_group_is_private() {
        let mut r = Registry::default();
        r.add_file(&so, LibOrigin::Explicit);
        assert_eq!(
            r.libraries().len(),
            1,
            "private group write is the user's own"
        );
    }
    // writable by others: refused whatever the group
    mode(&so, 0o757);
    let mut r = Registry::default();
    r.add_file(&so, LibOrigin::Explicit);
    let line = only_refusal(&r);
    assert!(line.contains("has mode 0757"), "{line}");

    // a file owned by another user (needs root to arrange)
    mode(&so, 0o755);
    if std::os::unix::fs::chown(&so, Some(54321), None).is_ok() {
        let mut r = Registry::default();
        r.add_file(&so, LibOrigin::Explicit);
        let line = only_refusal(&r);
        assert!(
            line.contains("is owned by uid 54321, neither root nor this user"),
            "{line}"
        );
        std::os::unix::fs::chown(&so, Some(0), None).unwrap();
    }

    // a symbolic link in a trusted directory is judged by its target
    let open = tempfile::tempdir().unwrap();
    let target = open.path().join("libplanted.so");
    std::fs::copy(lib("scr_xor"), &target).unwrap();
    mode(open.path(), 0o777);
    let link = dir.path().join("liblink.so");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let mut r = Registry::default();
    r.add_file(&link, LibOrigin::Explicit);
    let line = only_refusal(&r);
    assert!(line.contains("not opened: its directory"), "{line}");
    mode(open.path(), 0o700);

    // once fixed, the same file loads
    std::fs::remove_file(&link).unwrap();
    let mut r = Registry::default();
    r.add_directory(
        dir.path(),
        LibOrigin::SiteDirectory(dir.path().to_path_buf()),
    );
    assert_eq!(
        r.libraries().len(),
        1,
        "{:?}",
        r.refused()
            .iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
    );
}

fn current_gid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::metadata(dir.path()).unwrap().gid()
}

/// Whether this process's group has no other members in /etc/group (a private group).
fn own_group_is_private() -> bool {
    let gid = current_gid().to_string();
    std::fs::read_to_string("/etc/group").is_ok_and(|g| {
        g.lines().any(|l| {
            let f: Vec<&str> = l.split(':').collect();
            f.len() >= 4 && f[2] == gid && f[3].trim().is_empty()
        })
    })
}

/// A program that finds no plugin says every place it looked, in search order, so the
/// user knows where to put them; once anything is known the message stays short.
#[test]
fn when_no_plugin_is_found_the_error_lists_every_place_looked() {
    let empty = tempfile::tempdir().unwrap();
    let candidates = vec![
        empty.path().join("install/lib/scr/plugins"),
        empty.path().join("lib/scr/plugins"),
    ];
    let site = empty.path().join("site");
    let r = Registry::load(&SearchPath {
        builtin: None,
        builtin_candidates: candidates.clone(),
        site_directories: vec![site.clone()],
        ..SearchPath::default()
    });
    assert_eq!(
        r.looked(),
        [candidates[0].clone(), candidates[1].clone(), site.clone()]
    );
    let e = r.provider(Kind::Scheme, "XOR").unwrap_err().to_string();
    assert_eq!(
        e,
        format!(
            "unknown scheme \"XOR\": no loaded plugin provides it (known: none; looked in: {}, {}, {}); {}: refused: cannot read plugin directory: No such file or directory (os error 2)",
            candidates[0].display(),
            candidates[1].display(),
            site.display(),
            site.display()
        )
    );
    // a found built-in directory stands for the candidates
    let dir = scr_host::registry::builtin_plugin_dir().expect("built-in plugin dir");
    let r = Registry::load(&SearchPath {
        builtin: Some(dir.clone()),
        builtin_candidates: candidates,
        ..SearchPath::default()
    });
    assert_eq!(r.looked(), [dir]);
    assert_eq!(
        r.provider(Kind::Scheme, "MIRROR").unwrap_err().to_string(),
        "unknown scheme \"MIRROR\": no loaded plugin provides it (known: PARTNER, RS, SINGLE, XOR)"
    );
}

/// The executable running the tests is the object holding scr-host's code, so its
/// `../lib/scr/plugins` is a candidate, and the development build directory comes last.
#[test]
fn builtin_candidates_include_the_executables_lib_dir_and_end_with_the_build_dir() {
    let candidates = scr_host::registry::builtin_plugin_candidates();
    let exe = std::env::current_exe().unwrap();
    let prefix = exe.parent().unwrap().parent().unwrap();
    assert!(
        candidates.contains(&prefix.join("lib/scr/plugins")),
        "{candidates:?}"
    );
    assert_eq!(candidates.last(), Some(&target_dir()), "{candidates:?}");
}
