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
//! # Upgrading scr-plugin
//!
//! The runtime compares the layout of every type a plugin library exchanges with it
//! against its own when it loads the library, and refuses a library whose layout
//! differs, in one line that says what changed and where, for example:
//!
//! ```text
//! libmy_scheme.so: refused: incompatible plugin ABI: a parameter was added to scheme
//! method `redundancy_files` (this host's scr-plugin has 1 parameter, the library 2
//! parameters); rebuild the plugin against scr-plugin 0.1.3, this host's version (see
//! "Upgrading scr-plugin" in scr_plugin::manual)
//! ```
//!
//! Other refusals name a parameter or return type that changed, a field added,
//! removed or renamed in a contract type, an enum that gained a variant, a type whose
//! size or alignment changed, or an incompatible scr-plugin version. Whatever the
//! kind, the remedy is the same: set the plugin's `scr-plugin` dependency to the version
//! the refusal names (the runtime's), run `cargo build` and ship the new library. What
//! the rebuild may need of the source:
//!
//! - **Nothing, for methods appended to the contract.** scr-plugin only *adds* defaulted
//!   methods after the last mandatory one (as
//!   [`Scheme::crc32_in_apply`](crate::Scheme::crc32_in_apply),
//!   [`Scheme::survivor_check`](crate::Scheme::survivor_check) and
//!   [`Scheme::rebuild_sources`](crate::Scheme::rebuild_sources) were); a library
//!   binary built before them is refused ("the scheme object lacks method `…`: the
//!   library was built against an older scr-plugin (its source compiles unchanged
//!   against this one)"), and its source builds unchanged against the newer scr-plugin. A
//!   library built against a newer scr-plugin still loads into an older runtime, which
//!   never calls the methods it does not know.
//! - **Whatever the CHANGELOG says, for anything else.** scr-plugin's `CHANGELOG.md`
//!   lists every change of the contract; a release that changes a call's meaning while
//!   its layout stays the same raises [`ABI_VERSION`](crate::ABI_VERSION), and the
//!   runtime refuses a library built for another one ("plugin ABI version mismatch").
//!
//! Check the rebuilt library with `scr plugins check PATH` and `scr-conformance`
//! ([`testing`]).
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
