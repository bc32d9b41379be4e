//! The plugin manual: how to write, test and ship a redundancy scheme or a transfer type
//! for scr-rs. Documentation only (no code lives here); read it with
//! `cargo doc -p scr-plugin --open` and follow `scr_plugin::manual`.
//!
//! - [`schemes`]: what the runtime calls on a scheme, when, with which parameters; the
//!   host services and their rules; the [`ring`](crate::ring) streaming helper.
//! - [`testing`]: unit tests over [`inproc`](crate::inproc), the
//!   [`conformance`](crate::conformance) cases from a plugin's own tests, and
//!   `scr-conformance` under `mpiexec`.
//! - [`transfers`]: transfer types (copies between cache and the prefix).
//! - [`versions`]: what each release of this SDK promises, and the migration notes.
//!
//! # Start from a template
//!
//! `templates/scheme-plugin/` in the scr-rs repository is a complete scheme plugin crate
//! (MIRROR: every member keeps a copy of its left neighbour's files) that builds outside
//! the workspace and passes `scr-conformance` as shipped. Copy it, rename it, change the
//! path dependency on `scr-plugin` to a version (or a git revision), and replace the
//! arithmetic. `scripts/test-templates.sh` builds and checks every template that way.
//!
//! # A plugin crate
//!
//! ```toml
//! [package]
//! name = "my-scheme"
//! edition = "2021"
//!
//! [lib]
//! crate-type = ["cdylib", "rlib"] # cdylib: the .so the runtime loads; rlib: for tests
//!
//! [dependencies]
//! scr-plugin = "0.1"
//! abi_stable = "0.11.3"           # the same 0.11.x as scr-plugin: see below
//! ```
//!
//! The library implements [`PluginLibrary`](crate::PluginLibrary) on a unit struct
//! (its name, version, the scheme names it provides and `new_scheme`) and exports it
//! with [`export_plugin!`](crate::export_plugin). The runtime finds it through the
//! `[plugins]` table of the configuration (`directories`, `files`) and picks a scheme by
//! the name a `[[checkpoint]]` table's `type` gives.
//!
//! # The abi_stable pin
//!
//! Every type crossing the boundary between the runtime and a plugin is an
//! `abi_stable` type, checked when the library is loaded: a plugin
//! built against a different layout is refused with the reason, never called. Two
//! consequences for a plugin crate:
//!
//! - It needs a **direct** dependency `abi_stable = "0.11.x"`, with the same minor
//!   version (0.11) as scr-plugin's. [`export_plugin!`](crate::export_plugin) expands,
//!   in the plugin's crate, to `#[::abi_stable::export_root_module]`, whose own
//!   expansion names more `abi_stable` paths: those resolve only against a crate the
//!   plugin depends on by that name, not through scr-plugin's re-export. Cargo unifies
//!   the two requirements into one copy; a different minor (0.10, 0.12) would be a
//!   second copy whose types do not match, and the build fails or the load is refused.
//! - Use [`scr_plugin::abi_stable`](crate::abi_stable) (re-exported) for the few
//!   `abi_stable` types a plugin writes itself (`RSome`/`RNone` in a
//!   [`RecoverRequest`](crate::RecoverRequest), `RString`, `RVec`), so that they are
//!   the very types scr-plugin uses.
//!
//! # Panics
//!
//! Every entry point [`export_plugin!`](crate::export_plugin) generates runs under
//! [`guard`](crate::guard): a panic does not unwind into the runtime (which would abort
//! the whole MPI job) but comes back as a [`PluginError`](crate::PluginError) with code
//! [`ErrorCode::PANIC`](crate::ErrorCode::PANIC) naming the plugin and the call. Only
//! the member that panicked returns, though: the others may wait in the plugin for its
//! messages. The runtime then ends the job with `MPI_Abort` and the reason after
//! `abort_timeout` seconds (see [`Scheme`](crate::Scheme)). So collective code returns
//! errors rather than panicking, and agrees on them (see [`schemes`]).

pub mod schemes;
pub mod testing;
pub mod transfers;
pub mod versions;
