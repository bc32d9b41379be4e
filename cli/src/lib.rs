//! The command-line side of scr-rs, shared by its commands: the exit-status convention
//! and man-page generation. The `scr` binary (`src/main.rs`) parses arguments with clap,
//! calls the scr-host library and prints what it returns; `scr-conformance` uses the man
//! pages from here too. The library holds no parser and prints nothing to stdout, so it
//! can be driven from any front end.
#![deny(missing_docs)]
#![deny(unsafe_code)]

pub mod exit;
pub mod man;
pub mod scr_names;
