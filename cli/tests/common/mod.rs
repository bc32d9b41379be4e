//! What the end-to-end tests of the `scr` command share: a hermetic run (cleared
//! environment, a fresh temporary working directory, and no stray system configuration
//! file) and what it printed. Each test file uses part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

pub const SCR: &str = env!("CARGO_BIN_EXE_scr");
pub const SYSTEM_CONFIG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/scr.toml");
pub const THREE_LEVEL: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../config/examples/three-level.toml"
);
pub const STORES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../config/examples/stores.toml"
);
pub const GROUPS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../config/examples/groups.toml"
);

/// The system file read when `SCR_SYSTEM_CONFIG` is unset.
pub const DEFAULT_SYSTEM_CONFIG: &str = scr_host::config::DEFAULT_SYSTEM_CONFIG;

/// What one run of `scr` did.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn describe(&self) -> String {
        format!(
            "exit {}\n--- stdout ---\n{}--- stderr ---\n{}",
            self.code, self.stdout, self.stderr
        )
    }

    #[track_caller]
    pub fn expect_code(&self, code: i32) -> &Self {
        assert_eq!(
            self.code,
            code,
            "unexpected exit status\n{}",
            self.describe()
        );
        self
    }

    #[track_caller]
    pub fn expect_stdout(&self, needle: &str) -> &Self {
        assert!(
            self.stdout.contains(needle),
            "stdout lacks {needle:?}\n{}",
            self.describe()
        );
        self
    }

    #[track_caller]
    pub fn expect_stderr(&self, needle: &str) -> &Self {
        assert!(
            self.stderr.contains(needle),
            "stderr lacks {needle:?}\n{}",
            self.describe()
        );
        self
    }
}

/// A temporary working directory for hermetic runs.
pub struct Sandbox {
    pub dir: TempDir,
}

impl Sandbox {
    pub fn new() -> Self {
        Sandbox {
            dir: TempDir::new().expect("temporary directory"),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Write `text` to `name` in the sandbox and return its absolute path.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.path().join(name);
        std::fs::write(&p, text).expect("write temporary file");
        p
    }

    /// Run `scr args...` with only `env` set, in the sandbox. When the test sets no
    /// system file and the default one exists, an empty file stands in for it.
    pub fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut cmd = Command::new(SCR);
        cmd.env_clear().current_dir(self.path()).args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        if !env.iter().any(|(k, _)| *k == "SCR_SYSTEM_CONFIG")
            && Path::new(DEFAULT_SYSTEM_CONFIG).exists()
        {
            cmd.env("SCR_SYSTEM_CONFIG", self.write("empty-system.toml", ""));
        }
        let out = cmd.output().expect("spawn scr");
        Run {
            code: out.status.code().expect("scr exited normally"),
            stdout: String::from_utf8(out.stdout).expect("utf-8 stdout"),
            stderr: String::from_utf8(out.stderr).expect("utf-8 stderr"),
        }
    }
}

/// A file in the directory holding the `scr` binary, the shipped plugins and the test
/// fixtures.
pub fn target_file(name: &str) -> String {
    scr_plugin::conformance::target_dir()
        .join(name)
        .display()
        .to_string()
}

pub fn line_of<'a>(run: &'a Run, prefix: &str) -> &'a str {
    run.stdout
        .lines()
        .find(|l| l.trim_start().starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} line\n{}", run.describe()))
}
