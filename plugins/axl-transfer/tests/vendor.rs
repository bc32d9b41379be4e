//! The vendor transfer types against stand-in vendor libraries built by this workspace
//! (`plugins/test-fixtures/{bbapi,datawarp}`): the real loading path and call sequence,
//! asynchronous staging, failures on demand, an absent library and the fallback type.
//! One test function, because failures are switched on through the environment.

use std::path::{Path, PathBuf};
use std::time::Duration;

use scr_axl_transfer::AxlTransfer;
use scr_plugin::{
    host_ref, inproc, Host, LogLevel, Param, PluginLibrary, TransferConfig, TransferStatus,
};

/// A stand-in vendor library the workspace built (see `plugins/test-fixtures`).
fn stand_in(name: &str) -> String {
    scr_plugin::conformance::built_library(name)
        .display()
        .to_string()
}

fn config(kind: &str, state: &Path, settings: &[(&str, &str)]) -> TransferConfig {
    TransferConfig {
        transfer_type: kind.into(),
        state_file: state.display().to_string().into(),
        crc32: true,
        preserve_metadata: false,
        settings: settings
            .iter()
            .map(|(k, v)| Param {
                key: (*k).into(),
                value: (*v).into(),
            })
            .collect(),
    }
}

/// Files a, b, c in `dir/src`; their destinations in `dir/dst`.
fn files(dir: &Path) -> Vec<(PathBuf, PathBuf, Vec<u8>)> {
    std::fs::create_dir_all(dir.join("src")).unwrap();
    (0..3)
        .map(|i| {
            let data: Vec<u8> = (0..1000 * (i + 1)).map(|x| (x * 7 + i) as u8).collect();
            let src = dir.join(format!("src/f{i}"));
            std::fs::write(&src, &data).unwrap();
            (src, dir.join(format!("dst/sub/f{i}")), data)
        })
        .collect()
}

fn run(
    kind: &str,
    settings: &[(&str, &str)],
    host: &Host<'_>,
) -> Result<(TransferStatus, Vec<String>), String> {
    let dir = tempfile::tempdir().unwrap();
    let fs = files(dir.path());
    let cfg = config(kind, &dir.path().join("state"), settings);
    let mut t = AxlTransfer::new_transfer(&cfg, host).map_err(|e| e.to_string())?;
    for (s, d, _) in &fs {
        t.add(s.to_str().unwrap(), d.to_str().unwrap())
            .map_err(|e| e.to_string())?;
    }
    t.dispatch(host).map_err(|e| e.to_string())?;
    let status = t.wait(host).map_err(|e| e.to_string())?;
    let mut notes = Vec::new();
    if status == TransferStatus::Complete {
        let results = t.results().unwrap();
        for ((_, d, data), r) in fs.iter().zip(&results) {
            assert_eq!(&std::fs::read(d).unwrap(), data, "{kind}: {}", d.display());
            assert_eq!(r.crc32.into_option(), Some(crc32fast::hash(data)));
            assert_eq!(r.bytes, data.len() as u64);
        }
        notes.push("verified".to_string());
    }
    Ok((status, notes))
}

#[test]
fn vendor_types_drive_the_stand_in_libraries() {
    let world = inproc::World::new(&["n"], Duration::from_secs(60));
    let services = world.member(0);
    let host = Host::new(host_ref(&services));
    let bb = stand_in("scr_fixture_bbapi");
    let dw = stand_in("scr_fixture_datawarp");

    // the full call sequences, asynchronous completion, CRC32 of the destinations
    for (kind, lib) in [("bbapi", &bb), ("dw", &dw)] {
        let (status, notes) = run(kind, &[("library", lib)], &host).unwrap();
        assert_eq!(
            (status, notes.as_slice()),
            (TransferStatus::Complete, &["verified".to_string()][..]),
            "{kind}"
        );
    }

    // an absent library: a clear error naming it and what to do
    let e = run("bbapi", &[("library", "/nonexistent/libbbAPI.so")], &host).unwrap_err();
    assert!(
        e.starts_with("unavailable: unavailable: /nonexistent/libbbAPI.so not found"),
        "{e}"
    );
    assert!(
        e.contains(
            "set [plugins.bbapi] library = \"/path/to/libbbAPI.so\" or fallback = \"pthread\""
        ),
        "{e}"
    );
    let e = run("dw", &[], &host).unwrap_err();
    assert!(e.contains("unavailable: libdatawarp.so not found"), "{e}");

    // with a fallback the transfer still happens, and says so
    let (status, _) = run(
        "dw",
        &[
            ("library", "/nonexistent/libdw.so"),
            ("fallback", "pthread"),
        ],
        &host,
    )
    .unwrap();
    assert_eq!(status, TransferStatus::Complete);
    assert!(world
        .log_records()
        .iter()
        .any(|(_, level, msg)| *level == LogLevel::Warn
            && msg.contains("dw: unavailable: /nonexistent/libdw.so not found")
            && msg.contains("this transfer uses the fallback type pthread")));
    let e = run(
        "bbapi",
        &[("library", "/nonexistent/x.so"), ("fallback", "dw")],
        &host,
    )
    .unwrap_err();
    assert!(e.contains("the fallback must be sync or pthread"), "{e}");

    // failures on demand
    std::env::set_var("FAKE_BBAPI_FAIL", "start");
    let e = run("bbapi", &[("library", &bb)], &host).unwrap_err();
    assert!(
        e.contains("bbapi: BB_StartTransfer returned -1: stand-in: start failure on demand"),
        "{e}"
    );
    std::env::set_var("FAKE_BBAPI_FAIL", "transfer");
    assert_eq!(
        run("bbapi", &[("library", &bb)], &host).unwrap().0,
        TransferStatus::Failed
    );
    std::env::remove_var("FAKE_BBAPI_FAIL");
    std::env::set_var("FAKE_DW_FAIL", "stage");
    let e = run("dw", &[("library", &dw)], &host).unwrap_err();
    assert!(
        e.contains("dw: dw_stage_file_out(") && e.contains("returned -5"),
        "{e}"
    );
    std::env::set_var("FAKE_DW_FAIL", "transfer");
    assert_eq!(
        run("dw", &[("library", &dw)], &host).unwrap().0,
        TransferStatus::Failed
    );
    std::env::remove_var("FAKE_DW_FAIL");

    // a transfer that failed is started over by another dispatch, and then copies
    for (kind, lib, var) in [
        ("bbapi", &bb, "FAKE_BBAPI_FAIL"),
        ("dw", &dw, "FAKE_DW_FAIL"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let fs = files(dir.path());
        let cfg = config(kind, &dir.path().join("state"), &[("library", lib)]);
        let mut t = AxlTransfer::new_transfer(&cfg, &host).unwrap();
        for (s, d, _) in &fs {
            t.add(s.to_str().unwrap(), d.to_str().unwrap()).unwrap();
        }
        std::env::set_var(var, "transfer");
        t.dispatch(&host).unwrap();
        assert_eq!(t.wait(&host).unwrap(), TransferStatus::Failed, "{kind}");
        std::env::remove_var(var);
        let log = dir.path().join("terminated");
        std::env::set_var("FAKE_DW_TERMINATE_LOG", &log);
        t.dispatch(&host).unwrap();
        std::env::remove_var("FAKE_DW_TERMINATE_LOG");
        if kind == "dw" {
            // DataWarp's failed stages were terminated before staging again
            let sources: Vec<String> = fs.iter().map(|(s, _, _)| s.display().to_string()).collect();
            assert_eq!(
                std::fs::read_to_string(&log)
                    .unwrap()
                    .lines()
                    .collect::<Vec<_>>(),
                sources,
                "{kind}"
            );
        }
        assert_eq!(t.wait(&host).unwrap(), TransferStatus::Complete, "{kind}");
        for (_, d, data) in &fs {
            assert_eq!(&std::fs::read(d).unwrap(), data, "{kind}: {}", d.display());
        }
    }

    // a status query that keeps failing is reported as such by dispatch, never taken
    // for "failed" and started over beside a copy that may still be running
    let dir = tempfile::tempdir().unwrap();
    let fs = files(dir.path());
    let cfg = config("dw", &dir.path().join("state"), &[("library", &dw)]);
    let mut t = AxlTransfer::new_transfer(&cfg, &host).unwrap();
    for (s, d, _) in &fs {
        t.add(s.to_str().unwrap(), d.to_str().unwrap()).unwrap();
    }
    t.dispatch(&host).unwrap();
    let log = dir.path().join("terminated");
    std::env::set_var("FAKE_DW_TERMINATE_LOG", &log);
    std::env::set_var("FAKE_DW_FAIL", "query");
    let e = t.dispatch(&host).unwrap_err();
    std::env::remove_var("FAKE_DW_FAIL");
    std::env::remove_var("FAKE_DW_TERMINATE_LOG");
    assert!(
        e.message().contains("dw_query_file_stage(")
            && e.message().contains("returned -5 (3 tries)")
            && e.message().contains("not started again"),
        "{e}"
    );
    assert!(!log.exists(), "nothing was terminated or restaged");
    assert_eq!(t.wait(&host).unwrap(), TransferStatus::Complete);
    for (_, d, data) in &fs {
        assert_eq!(&std::fs::read(d).unwrap(), data);
    }

    // two bbapi transfers at once share one initialisation of the library
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut both = Vec::new();
    for d in [&d1, &d2] {
        let fs = files(d.path());
        let mut t = AxlTransfer::new_transfer(
            &config("bbapi", &d.path().join("state"), &[("library", &bb)]),
            &host,
        )
        .unwrap();
        for (s, dst, _) in &fs {
            t.add(s.to_str().unwrap(), dst.to_str().unwrap()).unwrap();
        }
        t.dispatch(&host).unwrap();
        both.push((t, fs));
    }
    for (mut t, fs) in both {
        assert_eq!(t.wait(&host).unwrap(), TransferStatus::Complete);
        for (_, d, data) in &fs {
            assert_eq!(&std::fs::read(d).unwrap(), data);
        }
    }

    // resume: another transfer object picks the persisted state up and waits
    let dir = tempfile::tempdir().unwrap();
    let fs = files(dir.path());
    let cfg = config("bbapi", &dir.path().join("state"), &[("library", &bb)]);
    std::env::set_var("FAKE_BBAPI_DELAY_MS", "50");
    let mut t = AxlTransfer::new_transfer(&cfg, &host).unwrap();
    for (s, d, _) in &fs {
        t.add(s.to_str().unwrap(), d.to_str().unwrap()).unwrap();
    }
    t.dispatch(&host).unwrap();
    std::mem::forget(t); // "this process" goes away without waiting
    std::env::remove_var("FAKE_BBAPI_DELAY_MS");
    let mut resumed = AxlTransfer::resume_transfer(&cfg, &host).unwrap();
    assert_eq!(resumed.wait(&host).unwrap(), TransferStatus::Complete);
    for (_, d, data) in &fs {
        assert_eq!(&std::fs::read(d).unwrap(), data);
    }
    drop(host);
}
