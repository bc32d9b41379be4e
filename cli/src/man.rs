//! Man pages of the scr-rs commands, generated from the clap definitions they document
//! (clap_mangen): each command writes its own with `--print-man DIR`, an internal option
//! (handled before argument parsing, so it needs none of the command's required
//! arguments) that `scripts/install.sh` runs to fill `share/man/man1`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The internal option: `<command> --print-man DIR`.
pub const PRINT_MAN: &str = "--print-man";

/// `Some(DIR)` when this process was started as `<command> --print-man DIR` (exactly).
pub fn requested() -> Option<PathBuf> {
    requested_in(std::env::args_os().skip(1).collect())
}

fn requested_in(args: Vec<OsString>) -> Option<PathBuf> {
    match args.as_slice() {
        [flag, dir] if flag == PRINT_MAN => Some(PathBuf::from(dir)),
        _ => None,
    }
}

/// Write `<name>.1` for `cmd` and `<name>-<sub>.1` for every visible subcommand, nested
/// ones included, into `dir` (created if missing). Reports a failure on stderr naming the
/// directory; exit status 1 then.
pub fn write_pages(cmd: clap::Command, dir: &Path) -> ExitCode {
    let name = cmd.get_name().to_string();
    match std::fs::create_dir_all(dir).and_then(|()| clap_mangen::generate_to(cmd, dir)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // a program that installed no subscriber (scr-conformance) still prints it
            let _ = scr_host::log::init(0);
            tracing::error!("{name}: cannot write man pages into {}: {e}", dir.display());
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_exactly_print_man_dir_is_a_request() {
        let args = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(
            requested_in(args(&["--print-man", "/tmp/m"])),
            Some(PathBuf::from("/tmp/m"))
        );
        assert_eq!(requested_in(args(&["--print-man"])), None);
        assert_eq!(requested_in(args(&["plugins", "--print-man", "/x"])), None);
        assert_eq!(requested_in(args(&["--print-man", "/x", "more"])), None);
    }

    #[test]
    fn pages_are_written_for_the_command_and_each_visible_subcommand() {
        let cmd = clap::Command::new("tool")
            .about("A tool.")
            .subcommand(
                clap::Command::new("config")
                    .about("Configuration.")
                    .subcommand(clap::Command::new("check").about("Check it.")),
            )
            .subcommand(clap::Command::new("secret").hide(true));
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("man1");
        assert_eq!(write_pages(cmd, &out), ExitCode::SUCCESS);
        let mut names: Vec<String> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["tool-config-check.1", "tool-config.1", "tool.1"]);
        let page = std::fs::read_to_string(out.join("tool-config-check.1")).unwrap();
        assert!(page.starts_with(".ie \\n(.g .ds Aq"), "{page}");
        assert!(page.contains(".TH tool-config-check 1"), "{page}");
    }
}
