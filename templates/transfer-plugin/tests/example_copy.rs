//! The transfer through the same FFI entry points the scr-rs host uses, on an in-process
//! host: byte-exact copies with CRC32, results one per file in order, no temporary file
//! left, a missing source refused by name, the copy thread's messages reaching the host.
//! The full contract (cancel, resume in a new process, a vanishing source) is checked by
//! `scr-conformance` under mpiexec (see README.md).

use std::path::{Path, PathBuf};

use scr_example_copy::ExampleCopyPlugin;
use scr_plugin::{host_ref, inproc, root_module, LogLevel, TransferConfig, TransferStatus};

/// A fresh scratch directory under the system's temporary directory.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn config(state: &Path) -> TransferConfig {
    TransferConfig {
        transfer_type: "example-copy".into(),
        state_file: state.display().to_string().into(),
        crc32: true,
        preserve_metadata: true,
        settings: Default::default(),
    }
}

fn content(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(29) ^ seed).collect()
}

#[test]
fn copies_files_byte_exact_with_crc_and_logs_through_the_host() {
    let dir = scratch("example-copy-test");
    let sizes = [0usize, 1, 4099, 3 << 20];
    let mut files = Vec::new();
    for (i, n) in sizes.iter().enumerate() {
        let src = dir.join(format!("src/f{i}"));
        std::fs::create_dir_all(src.parent().unwrap()).unwrap();
        std::fs::write(&src, content(*n, i as u8)).unwrap();
        files.push((src, dir.join(format!("dst/sub/f{i}")), content(*n, i as u8)));
    }
    let world = inproc::World::new(&["node"], std::time::Duration::from_secs(60));
    let services = world.member(0);
    let root = root_module::<ExampleCopyPlugin>();
    let mut t = (root.new_transfer())(&config(&dir.join("state")), host_ref(&services))
        .into_result()
        .unwrap();
    for (s, d, _) in &files {
        t.add(s.to_str().unwrap().into(), d.to_str().unwrap().into())
            .into_result()
            .unwrap();
    }
    t.dispatch(host_ref(&services)).into_result().unwrap();
    let status = t.wait(host_ref(&services)).into_result().unwrap();
    assert_eq!(status, TransferStatus::Complete);

    let results = t.results().into_result().unwrap();
    assert_eq!(results.len(), files.len());
    for ((s, d, data), r) in files.iter().zip(results.iter()) {
        assert_eq!(r.source.as_str(), s.to_str().unwrap());
        assert_eq!(r.destination.as_str(), d.to_str().unwrap());
        assert_eq!(r.status, TransferStatus::Complete);
        assert_eq!(&std::fs::read(d).unwrap(), data, "{}", d.display());
        assert_eq!(r.crc32.into_option(), Some(crc32(data)));
        assert_eq!(r.bytes, data.len() as u64);
    }
    let mut left: Vec<_> = std::fs::read_dir(dir.join("dst/sub"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, ["f0", "f1", "f2", "f3"], "no temporary file left");

    // the copy thread's message for each file reached the host's log, in order
    let logged: Vec<String> = world
        .log_records()
        .into_iter()
        .filter(|(_, level, m)| *level == LogLevel::Debug && m.starts_with("example-copy: "))
        .map(|(_, _, m)| m)
        .collect();
    let expected: Vec<String> = files
        .iter()
        .map(|(s, d, data)| {
            format!(
                "example-copy: copying {} ({} bytes) to {}",
                s.display(),
                data.len(),
                d.display()
            )
        })
        .collect();
    assert_eq!(logged, expected);

    // a source that does not exist is refused when added, naming it
    let mut t = (root.new_transfer())(&config(&dir.join("state2")), host_ref(&services))
        .into_result()
        .unwrap();
    let missing = dir.join("no-such-file");
    let e = t
        .add(
            missing.to_str().unwrap().into(),
            dir.join("x").to_str().unwrap().into(),
        )
        .into_result()
        .unwrap_err();
    assert!(
        e.message().starts_with(&format!("{}: ", missing.display())),
        "{e}"
    );
    drop(t);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// CRC32 (IEEE), bit by bit: an independent check of what the plugin reports.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}
