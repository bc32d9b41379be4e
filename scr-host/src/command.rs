//! Running an outside command with a time limit (a resource manager's query, a site's
//! down-node script, `df` on a file system that may hang): a command that does not
//! answer must not hold up a job's init or `scr run` for ever.

use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long the output of a command that has exited is still read, for a child it left
/// behind holding its pipes.
const PIPE_GRACE: Duration = Duration::from_secs(2);

/// Why a command gave no output: it could not be started, or it did not end in time.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// The program could not be started (not installed, not executable).
    #[error("`{program}` cannot run: {source}")]
    CannotRun {
        /// The program.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// The command did not end within its time limit and was killed.
    #[error("`{program}` did not answer within {:.1} s and was stopped", timeout.as_secs_f64())]
    TimedOut {
        /// The program.
        program: String,
        /// The limit.
        timeout: Duration,
    },
}

/// What a command printed and how it ended.
pub(crate) struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Run `cmd` (stdin closed, output captured) and wait at most `timeout`; past it the
/// command is killed and the error says so. Its output is read on threads, so that a
/// command printing more than a pipe holds cannot block on its write while we wait for
/// it to exit, and a child it left behind holding the pipes is not waited for past the
/// deadline either (what was read by then is returned).
pub(crate) fn output_within(cmd: &mut Command, timeout: Duration) -> Result<Output, CommandError> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| CommandError::CannotRun {
            program: program.clone(),
            source,
        })?;
    let read = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut bytes);
            }
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let out = read(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = read(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(CommandError::TimedOut { program, timeout });
            }
        }
    };
    // a child it left behind may hold the pipes open for long (ssh's ControlPersist
    // master keeps stderr): what it printed is read for a short grace, not to the deadline
    let grace = deadline.min(Instant::now() + PIPE_GRACE);
    while !(out.is_finished() && err.is_finished()) && Instant::now() < grace {
        std::thread::sleep(Duration::from_millis(10));
    }
    let take = |h: std::thread::JoinHandle<String>| {
        if h.is_finished() {
            h.join().unwrap_or_default()
        } else {
            String::new()
        }
    };
    Ok(Output {
        status,
        stdout: take(out),
        stderr: take(err),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_and_status_are_returned() {
        let o = output_within(
            Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]),
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(o.stdout, "out\n");
        assert_eq!(o.stderr, "err\n");
        assert_eq!(o.status.code(), Some(3));
    }

    #[test]
    fn a_command_that_does_not_answer_is_stopped() {
        let started = Instant::now();
        let e = output_within(Command::new("sleep").arg("30"), Duration::from_millis(300))
            .err()
            .unwrap();
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(matches!(e, CommandError::TimedOut { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "`sleep` did not answer within 0.3 s and was stopped"
        );
    }

    #[test]
    fn a_child_left_holding_the_pipes_is_not_waited_for() {
        let started = Instant::now();
        let o = output_within(
            Command::new("sh").args(["-c", "sleep 30 & echo done"]),
            Duration::from_millis(500),
        )
        .unwrap();
        assert!(o.status.success());
        assert!(started.elapsed() < Duration::from_secs(5));
        // nor up to a long deadline: a short grace once the command itself has exited
        let started = Instant::now();
        let o = output_within(
            Command::new("sh").args(["-c", "sleep 30 & echo done"]),
            Duration::from_secs(60),
        )
        .unwrap();
        assert!(o.status.success());
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }
}
