//! An install tree made from this build's artifacts, shared by the tests that build and
//! run programs as a user of an installed scr-rs would (C, C++, Fortran, Python).
//!
//! nextest runs every test in its own process, so the tree is installed under a file
//! lock, once per build: it is installed again only when something `scripts/install.sh`
//! copies (a built artifact, a header, an example, the Python package, the default
//! configuration, the script itself) is newer than the last successful install.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

/// The workspace root (the parent of this crate's directory).
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace")
        .to_path_buf()
}

/// The newest modification time of `path` and, for a directory, of everything below it.
fn newest_below(path: &Path) -> Option<SystemTime> {
    let meta = std::fs::metadata(path).ok()?;
    let mut newest = meta.modified().ok();
    if meta.is_dir() {
        for entry in std::fs::read_dir(path).ok()?.flatten() {
            newest = newest.max(newest_below(&entry.path()));
        }
    }
    newest
}

/// What `scripts/install.sh --from <target>` copies: its inputs. Missing ones are skipped.
fn install_inputs(target: &Path) -> Vec<PathBuf> {
    let root = workspace_root();
    let mut inputs: Vec<PathBuf> = [
        "scr",
        "scr-conformance",
        "libscr.so",
        "libscr.a",
        "libscr_single.so",
        "libscr_partner.so",
        "libscr_xor.so",
        "libscr_reed_solomon.so",
        "libscr_axl_transfer.so",
    ]
    .iter()
    .map(|f| target.join(f))
    .collect();
    for rel in [
        "capi/include",
        "examples/c",
        "examples/cxx",
        "examples/fortran",
        "examples/python",
        "python",
        "config/scr.toml",
        "config/scr.pc.in",
        "config/cmake",
        "scripts/install.sh",
    ] {
        inputs.push(root.join(rel));
    }
    inputs
}

/// Run `scripts/install.sh --prefix <prefix> --from <target>` (with `--require-capi` once
/// the C library's crate is in the tree). Panics with the script's output when it fails.
pub fn run_install_script(prefix: &Path, target: &Path) -> String {
    let root = workspace_root();
    let mut cmd = Command::new("bash");
    cmd.arg(root.join("scripts/install.sh"))
        .arg("--prefix")
        .arg(prefix)
        .arg("--from")
        .arg(target);
    if root.join("capi/Cargo.toml").is_file() {
        cmd.arg("--require-capi");
    }
    let out = cmd.output().expect("run bash scripts/install.sh");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "scripts/install.sh --prefix {} --from {} failed ({})\n--- stdout ---\n{stdout}--- stderr ---\n{}",
        prefix.display(),
        target.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The prefix of an install tree of this build's artifacts (`target/tmp/install-<profile>`),
/// installed by `scripts/install.sh --from target/<profile>` when missing or older than
/// what it installs. Build the workspace first (`cargo build --workspace`).
pub fn install_tree() -> PathBuf {
    let target = crate::target_dir();
    let profile = target
        .file_name()
        .expect("target/<profile>")
        .to_string_lossy()
        .into_owned();
    let tmp = target
        .parent()
        .expect("target/<profile> has a parent")
        .join("tmp");
    std::fs::create_dir_all(&tmp).expect("create target/tmp");
    let prefix = tmp.join(format!("install-{profile}"));
    let stamp = tmp.join(format!("install-{profile}.stamp"));
    let lock = std::fs::File::create(tmp.join(format!("install-{profile}.lock")))
        .expect("create the install lock file");
    lock.lock().expect("lock the install tree");
    let installed = std::fs::metadata(&stamp).and_then(|m| m.modified()).ok();
    let newest = install_inputs(&target)
        .iter()
        .filter_map(|p| newest_below(p))
        .max();
    if installed.is_none() || newest > installed {
        // a failed install must not look current to the next test
        let _ = std::fs::remove_file(&stamp);
        run_install_script(&prefix, &target);
        std::fs::write(&stamp, format!("{}\n", prefix.display())).expect("write install stamp");
    }
    // the lock is released when `lock` is dropped
    prefix
}
