//! `scr-readme-example`: the README's "Using it from Rust" example, verbatim (extracted
//! by build.rs), so `tests/tests/readme_example.rs` can prove it checkpoints, restarts and
//! survives a lost node on several ranks.
include!(concat!(env!("OUT_DIR"), "/readme_example.rs"));
