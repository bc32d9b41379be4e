//! One launch of the job step as a process: started (in a process group of its own
//! under a watchdog), its output relayed line by line, a termination signal to `scr run`
//! passed on with a grace period, killed when the watchdog sees no progress, and reaped.

use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::watchdog::{Progress, Watchdog};
use super::{signals, Relay, RunOptions};

/// How a step ended.
pub(super) enum Ended {
    Status(std::process::ExitStatus),
    Watchdog(u64),
    /// `scr run` received this signal and passed it on.
    Signalled(i32),
}

/// Start the step and wait for it. With a watchdog (`watchdog` > 0 seconds) the step
/// runs in a process group of its own, so that everything it started can be ended
/// together when it shows no progress; without one it stays in `scr run`'s group, where
/// a Ctrl-C at the terminal reaches it directly. A termination signal sent to `scr run`
/// is passed on to the step (its group with a watchdog), which then has
/// [`SIGNAL_GRACE`] to end before it is killed.
pub(super) fn launch(
    mut cmd: Command,
    dog: &Watchdog,
    watched: &[PathBuf],
    opts: &RunOptions,
) -> std::io::Result<Ended> {
    use std::os::unix::process::CommandExt;
    let watchdog = dog.secs;
    let own_group = watchdog > 0;
    if own_group {
        cmd.process_group(0);
        // (a background process group reading the terminal would be stopped: SIGTTIN)
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
    }
    let start = Instant::now();
    let mut child = cmd.spawn()?;
    // the step's output is passed through line by line; each line is progress
    let last_output = Arc::new(AtomicU64::new(0));
    let mut pumps = Vec::new();
    if let Some(out) = child.stdout.take() {
        pumps.push(pump(
            out,
            false,
            opts.relay.clone(),
            last_output.clone(),
            start,
        ));
    }
    if let Some(err) = child.stderr.take() {
        pumps.push(pump(
            err,
            true,
            opts.relay.clone(),
            last_output.clone(),
            start,
        ));
    }
    let mut progress = Progress::new(watched, start, last_output);
    let ended = loop {
        if let Some(s) = child.try_wait()? {
            break Ended::Status(s);
        }
        if let Some(sig) = signals::take() {
            opts.say(format!(
                "received {}: passing it on to the job step ({}), which has {} s to end",
                signals::name(sig),
                if own_group {
                    "its process group"
                } else {
                    "the launcher"
                },
                SIGNAL_GRACE.as_secs()
            ));
            end_step(&mut child, own_group, sig, SIGNAL_GRACE);
            break Ended::Signalled(sig);
        }
        std::thread::sleep(Duration::from_millis(100));
        if watchdog == 0 {
            continue;
        }
        // (the index is read only once the shorter timeout has passed)
        let idle = progress.idle();
        let limit = if idle >= Duration::from_secs(watchdog) {
            dog.timeout()
        } else {
            Duration::MAX
        };
        if idle >= limit {
            let watchdog = limit.as_secs();
            opts.say(format!(
                "watchdog: no output and no file changed under {} for {watchdog} s; killing the job step (process group {})",
                watched
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                child.id()
            ));
            // a signal to `scr run` during the grace is not lost: it ends the retries
            match end_step(&mut child, own_group, libc::SIGTERM, Duration::from_secs(5)) {
                Some(sig) => break Ended::Signalled(sig),
                None => break Ended::Watchdog(watchdog),
            }
        }
    };
    reap(&child, own_group, pumps);
    Ok(ended)
}

/// After the step ended: kill whatever it left running in its own process group (it
/// would hold the output pipes open and `scr run` would wait for it), and pass its
/// output on until the pipes close, waiting at most a few seconds for a process that
/// left the group and keeps them open.
fn reap(child: &Child, own_group: bool, pumps: Vec<std::thread::JoinHandle<()>>) {
    if own_group {
        signals::send(child.id(), true, libc::SIGKILL);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while pumps.iter().any(|p| !p.is_finished()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    for p in pumps.into_iter().filter(|p| p.is_finished()) {
        let _ = p.join();
    }
}

/// How long a step has to end after a signal passed on from `scr run` (SLURM's
/// `--signal=B:TERM@120` leaves two minutes before the time limit; postrun needs some).
pub const SIGNAL_GRACE: Duration = Duration::from_secs(30);

/// Send `signal` to the step (its process group when `group`), and SIGKILL after
/// `grace` if it has not ended; a second signal to `scr run` cuts the grace short and
/// is returned.
fn end_step(child: &mut Child, group: bool, signal: i32, grace: Duration) -> Option<i32> {
    signals::send(child.id(), group, signal);
    let deadline = Instant::now() + grace;
    let mut exited = false;
    let mut taken = None;
    while Instant::now() < deadline {
        if let Some(sig) = signals::take() {
            taken = Some(sig);
            break;
        }
        if matches!(child.try_wait(), Ok(Some(_))) {
            exited = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // a group's leader may be gone while others of the group live on; a lone launcher
    // that has exited is not signalled again (its pid may be another process's by now)
    if group || !exited {
        signals::send(child.id(), group, libc::SIGKILL);
    }
    let _ = child.wait();
    taken
}

/// Hand `from` to `relay` line by line, noting when each line came.
fn pump(
    from: impl std::io::Read + Send + 'static,
    stderr: bool,
    relay: Relay,
    last: Arc<AtomicU64>,
    start: Instant,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut r = std::io::BufReader::new(from);
        let mut line = Vec::new();
        while r.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
            last.store(start.elapsed().as_millis() as u64, Ordering::Relaxed);
            relay(stderr, &line);
            line.clear();
        }
    })
}
