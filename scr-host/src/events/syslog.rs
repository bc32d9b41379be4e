//! Sending event lines to syslog (`log_syslog_enable`, SCR's SCR_LOG_SYSLOG_ENABLE):
//! libc's `openlog`/`syslog`, the one `unsafe` of the event log, kept in this module.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString};
use std::sync::Mutex;

/// The ident `openlog` was last given. syslog(3) keeps the pointer, not a copy, so every
/// ident handed to it lives for the rest of the process (leaked: one small string per
/// distinct ident, which a process names once or twice).
static OPENED: Mutex<Option<&'static CStr>> = Mutex::new(None);

/// The facility value of a `log_syslog_facility` word; `None` for a word that is not one
/// (the configuration accepts only [`crate::config::keys::SYSLOG_FACILITIES`]).
pub(crate) fn facility(word: &str) -> Option<libc::c_int> {
    Some(match word.to_ascii_uppercase().as_str() {
        "LOG_USER" => libc::LOG_USER,
        "LOG_DAEMON" => libc::LOG_DAEMON,
        "LOG_LOCAL0" => libc::LOG_LOCAL0,
        "LOG_LOCAL1" => libc::LOG_LOCAL1,
        "LOG_LOCAL2" => libc::LOG_LOCAL2,
        "LOG_LOCAL3" => libc::LOG_LOCAL3,
        "LOG_LOCAL4" => libc::LOG_LOCAL4,
        "LOG_LOCAL5" => libc::LOG_LOCAL5,
        "LOG_LOCAL6" => libc::LOG_LOCAL6,
        "LOG_LOCAL7" => libc::LOG_LOCAL7,
        _ => return None,
    })
}

/// The level value of a `log_syslog_level` word; `None` for a word that is not one.
pub fn level(word: &str) -> Option<libc::c_int> {
    Some(match word.to_ascii_uppercase().as_str() {
        "LOG_EMERG" => libc::LOG_EMERG,
        "LOG_ALERT" => libc::LOG_ALERT,
        "LOG_CRIT" => libc::LOG_CRIT,
        "LOG_ERR" => libc::LOG_ERR,
        "LOG_WARNING" => libc::LOG_WARNING,
        "LOG_NOTICE" => libc::LOG_NOTICE,
        "LOG_INFO" => libc::LOG_INFO,
        "LOG_DEBUG" => libc::LOG_DEBUG,
        _ => return None,
    })
}

/// Why nothing was sent to syslog: C cannot take a string holding a NUL byte.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SyslogError {
    /// The event's line holds one.
    #[error("the event line holds a NUL byte")]
    NulInLine,
    /// The ident (`log_syslog_prefix`) holds one.
    #[error("log_syslog_prefix {0:?} holds a NUL byte; choose another")]
    NulInIdent(String),
}

/// Send `line` to syslog under `ident` with `facility | level`. An ident or line holding a
/// NUL byte cannot be passed to C: it is an error naming which, and nothing is sent.
pub fn send(
    ident: &str,
    facility: libc::c_int,
    level: libc::c_int,
    line: &str,
) -> Result<(), SyslogError> {
    let message = CString::new(line).map_err(|_| SyslogError::NulInLine)?;
    let mut opened = scr_plugin::sync::lock(&OPENED);
    if opened.is_none_or(|o| o.to_bytes() != ident.as_bytes()) {
        let owned = CString::new(ident).map_err(|_| SyslogError::NulInIdent(ident.to_string()))?;
        let kept: &'static CStr = Box::leak(owned.into_boxed_c_str());
        // SAFETY: `kept` is NUL-terminated and lives for the rest of the process, as
        // openlog(3) requires of its ident; OPENED's lock keeps openlog calls apart.
        unsafe { libc::openlog(kept.as_ptr(), libc::LOG_ODELAY, facility) };
        *opened = Some(kept);
    }
    // SAFETY: the format is a literal "%s" and `message` a NUL-terminated string that
    // outlives the call, so syslog(3) reads exactly one string argument.
    unsafe { libc::syslog(facility | level, c"%s".as_ptr(), message.as_ptr()) };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::keys::{SYSLOG_FACILITIES, SYSLOG_LEVELS};

    #[test]
    fn every_configurable_facility_and_level_has_its_libc_value() {
        for w in SYSLOG_FACILITIES {
            assert!(facility(w).is_some(), "{w}");
        }
        for w in SYSLOG_LEVELS {
            assert!(level(w).is_some(), "{w}");
        }
        assert_eq!(facility("log_local7"), Some(libc::LOG_LOCAL7));
        assert_eq!(level("LOG_INFO"), Some(libc::LOG_INFO));
        assert_eq!(level("LOUD"), None);
    }

    #[test]
    fn a_nul_byte_is_refused_before_anything_is_sent() {
        assert!(send("SCR", libc::LOG_USER, libc::LOG_DEBUG, "a\0b")
            .unwrap_err()
            .to_string()
            .contains("NUL"));
        assert!(send("S\0CR", libc::LOG_USER, libc::LOG_DEBUG, "ab")
            .unwrap_err()
            .to_string()
            .contains("log_syslog_prefix"));
    }

    /// Set in the child of [`an_event_reaches_syslog_as_one_line`]: it runs in its own
    /// mount namespace, with a private /dev holding the test's /dev/log.
    const CHILD: &str = "SCR_TEST_SYSLOG_CHILD";

    /// The events of a configuration with `log_syslog_enable` reach syslog as one line
    /// each, with the ident, facility and level the keys name. syslog(3) writes to
    /// /dev/log, which this machine's /dev may not have and which a test must not
    /// create there: the test runs itself again under `unshare --mount` with a tmpfs
    /// over /dev (root only), where its child binds /dev/log and reads what was sent.
    #[test]
    fn an_event_reaches_syslog_as_one_line() {
        if std::env::var_os(CHILD).is_some() {
            return child_receives_an_event();
        }
        // SAFETY: geteuid has no preconditions and only reads the process's ids.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: a private /dev for /dev/log needs root");
            return;
        }
        let exe = std::env::current_exe().unwrap();
        let script = "mount -t tmpfs none /dev && mknod -m 666 /dev/null c 1 3 && exec \"$0\" --exact events::syslog::tests::an_event_reaches_syslog_as_one_line --nocapture";
        let out = std::process::Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", script])
            .arg(&exe)
            .env(CHILD, "1")
            .output()
            .expect("unshare runs (util-linux)");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{text}");
        assert!(
            text.contains("received <"),
            "the child never received: {text}"
        );
    }

    /// The child: bind /dev/log, log one event through the sinks a configuration
    /// names, and check the line that arrives.
    fn child_receives_an_event() {
        let socket = std::os::unix::net::UnixDatagram::bind("/dev/log").expect("bind /dev/log");
        socket
            .set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let mut loader = crate::config::Loader::from_process();
        loader.env = [
            ("SCR_LOG_SYSLOG_ENABLE", "1"),
            ("SCR_LOG_SYSLOG_PREFIX", "scr-rs-test"),
            ("SCR_LOG_SYSLOG_FACILITY", "LOG_LOCAL3"),
            ("SCR_LOG_SYSLOG_LEVEL", "LOG_NOTICE"),
            ("SCR_LOG_TXT_ENABLE", "0"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        loader.system_file = Some(std::path::PathBuf::from("/dev/null"));
        let config = loader.load().unwrap();
        let sinks = crate::events::Sinks::from_config(&config);
        let prefix = tempfile::tempdir().unwrap();
        sinks.record(
            prefix.path(),
            "job-7",
            crate::events::Event::Halt {
                reason: "the test says so".into(),
            },
        );
        let mut buf = vec![0u8; 65536];
        let n = socket.recv(&mut buf).expect("a line arrives");
        let line = String::from_utf8_lossy(&buf[..n]).into_owned();
        println!("received {line}");
        let priority = libc::LOG_LOCAL3 | libc::LOG_NOTICE;
        assert!(line.starts_with(&format!("<{priority}>")), "{line}");
        assert!(line.contains("scr-rs-test: {"), "{line}");
        assert!(
            line.contains(r#""job_id":"job-7","event":"halt","reason":"the test says so"}"#),
            "{line}"
        );
        assert!(!line.contains('\n'), "one line: {line}");
        assert!(
            !crate::events::path(prefix.path()).exists(),
            "log_txt_enable = false writes no text log"
        );
    }
}
