//! The exit statuses of every `scr` command, one convention so a script can rely on them:
//! 0 success (or "yes" to a yes/no query), 1 invalid input or a failed check (a
//! configuration error, a refused plugin, a corrupt file, a node found down, an operation
//! that did not complete — the message says which), 2 usage (clap's own code for a bad
//! command line), 3 "no" to a yes/no query (`scr flush-file need-flush`, `scr halt
//! --check`). A query's "no" is not 1 because a script must tell "the answer is no" from
//! "the question could not be answered" (an unreadable flush or halt file).

/// Success, or "yes" to a yes/no query.
pub const OK: u8 = 0;
/// Invalid input or a failed check; the message on stderr says what and what to do.
pub const INVALID: u8 = 1;
/// A bad command line (clap exits with it too).
pub const USAGE: u8 = 2;
/// "No" to a yes/no query.
pub const NO: u8 = 3;
