//! What the application's `MPI_Init` asked of MPI, where libscr's own `MPI_Init` and
//! `MPI_Init_thread` ran (scr-capi's `src/mpi_init.c`: weak definitions that pass each
//! call on to the next definition of the name, the level chosen by scr-capi's
//! `mpi_init` module): when the job's environment turns `protect_in_background` on, they ask
//! for `MPI_THREAD_MULTIPLE`, so that a protection thread may call MPI beside an
//! application written for plain `MPI_Init`. Only the environment decides, because
//! MPI_Init runs before the configuration's files can be read.
//!
//! Kept here, process-wide, for init's word on which progress mode is in force and why
//! (`below_multiple`): an admin who set the variable must hear whether MPI gave less
//! or libscr's MPI_Init never ran (the program or a profiling library linked before
//! libscr defines the name; a Rust program initialises MPI itself).

use std::sync::atomic::{AtomicU8, Ordering};

use crate::config::keys::{self, Type, Value};
use crate::config::settings;

/// libscr's MPI_Init did not run in this process.
const UNSEEN: u8 = 0;
/// It ran and passed the application's level on.
const PASSED: u8 = 1;
/// It ran and asked for MPI_THREAD_MULTIPLE.
const ASKED: u8 = 2;

static SEEN: AtomicU8 = AtomicU8::new(UNSEEN);

/// The environment variable that turns `protect_in_background` on (its own name first).
fn variable() -> String {
    keys::env_vars(settings::PROTECT_IN_BACKGROUND.key())
        .into_iter()
        .next()
        .unwrap_or_default()
}

/// Whether this process's environment turns `protect_in_background` on: its variable
/// (or an alias) set to a true value, as the configuration reads it. An unreadable
/// value is left to init to refuse, as any other; here it asks for nothing.
pub fn wants_multiple() -> bool {
    keys::env_vars(settings::PROTECT_IN_BACKGROUND.key())
        .iter()
        .find_map(|v| std::env::var(v).ok())
        .is_some_and(|text| keys::parse_text(Type::Bool, &text) == Ok(Value::Bool(true)))
}

/// Record that libscr's MPI_Init ran, asking for MPI_THREAD_MULTIPLE (`asked`) or
/// passing the application's level on.
pub fn note(asked: bool) {
    SEEN.store(if asked { ASKED } else { PASSED }, Ordering::Relaxed);
}

/// Why MPI runs at `level`, below MPI_THREAD_MULTIPLE, and what would change it.
pub(crate) fn below_multiple(level: &dyn std::fmt::Debug) -> String {
    let var = variable();
    match SEEN.load(Ordering::Relaxed) {
        ASKED => format!(
            "libscr's MPI_Init asked MPI for MPI_THREAD_MULTIPLE ({var} is set in the environment) and MPI provided only {level:?}"
        ),
        PASSED => format!(
            "MPI was initialised with thread level {level:?}, not MPI_THREAD_MULTIPLE (set {var}=1 in the job's environment and libscr's MPI_Init asks MPI for it, or call MPI_Init_thread with MPI_THREAD_MULTIPLE)"
        ),
        _ if wants_multiple() => format!(
            "MPI was initialised with thread level {level:?}, not MPI_THREAD_MULTIPLE: {var} is set in the environment, but MPI was not initialised through libscr's MPI_Init (the program, or a library linked before libscr, defines MPI_Init; or the program is not linked with libscr); MPI_Init_thread with MPI_THREAD_MULTIPLE allows it"
        ),
        _ => format!(
            "MPI was initialised with thread level {level:?}, not MPI_THREAD_MULTIPLE (MPI_Init_thread with MPI_THREAD_MULTIPLE allows it)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each way libscr's MPI_Init can have run names its own cause (the process-wide
    /// note is this test's alone: no other test of the crate writes it).
    #[test]
    fn the_message_names_what_mpi_init_did() {
        let level = "Single";
        note(true);
        let asked = below_multiple(&level);
        assert!(
            asked.starts_with("libscr's MPI_Init asked MPI for MPI_THREAD_MULTIPLE (SCR_PROTECT_IN_BACKGROUND is set in the environment) and MPI provided only \"Single\""),
            "{asked}"
        );
        note(false);
        let passed = below_multiple(&level);
        assert!(
            passed.contains("not MPI_THREAD_MULTIPLE (set SCR_PROTECT_IN_BACKGROUND=1 in the job's environment and libscr's MPI_Init asks MPI for it"),
            "{passed}"
        );
    }
}
