//! # Writing a transfer type
//!
//! A *transfer type* (`sync`, `pthread`, `bbapi`, `dw`, or a vendor's own) moves a
//! rank's files between the node-local cache and the prefix: flushes, fetches at
//! restart, scavenges at the end of a job. Users pick it with `flush_type` (or `type` in
//! a `[[store]]`); its settings come from `[plugins.<type>]` of the configuration.
//!
//! The fastest start is the template: copy `templates/transfer-plugin/` out of the
//! scr-rs tree, follow its README (rename, point the `scr-plugin` path at your
//! checkout, replace one function), build, and run `scr-conformance` on it. This page is
//! the contract behind it.
//!
//! ## The crate
//!
//! A `cdylib` (plus `rlib` for its own tests) depending on `scr-plugin` and on
//! `abi_stable` **directly**, pinned to the version scr-plugin uses (`=0.11.3`):
//! [`export_plugin!`](crate::export_plugin) expands to `#[::abi_stable::export_root_module]`,
//! which names `abi_stable` from your crate, and abi_stable checks every type's layout
//! at load, so two versions do not mix. A library built against another scr-plugin
//! version is refused at load with the reason; rebuild it against the host's. Keep
//! `panic = "unwind"` (the default): see *Panics* below.
//!
//! Implement [`PluginLibrary`](crate::PluginLibrary) with `TRANSFERS` (the type names,
//! lower case by convention), [`new_transfer`](crate::PluginLibrary::new_transfer) and
//! [`resume_transfer`](crate::PluginLibrary::resume_transfer), each returning a
//! `Box<dyn` [`Transfer`](crate::Transfer)`>`. The host only calls them for names you
//! declared.
//!
//! ## Call order
//!
//! For every transfer the host (flush, fetch, scavenge) does, on one rank:
//!
//! 1. `new_transfer(config, host)` — a new, empty transfer. [`TransferConfig`](crate::TransferConfig)
//!    carries the type name, `state_file` (a path in the host's private control
//!    directory where the transfer persists what it needs to be resumed; write it at
//!    once, so a bad path fails here), `crc32` (report each file's CRC32), and
//!    `preserve_metadata` (give each destination its source's mode and times) and the
//!    type's `settings` (refuse keys you do not know, naming them:
//!    [`Params::only`](crate::Params::only)).
//!    Or, at the next init after a run died mid-flush, in a **new process**:
//!    `resume_transfer(config, host)` with the same `state_file` (see *Resume*).
//! 2. `add(source, destination)` once per file, before `dispatch` only. Absolute paths;
//!    the destination's directories may not exist yet (create them).
//! 3. `dispatch(host)` — start copying and return; the copy runs in the background.
//! 4. `test(host)` repeatedly (a background flush polls it between the application's
//!    checkpoints) and/or `wait(host)` (blocks until the transfer is no longer
//!    `InProgress`). Both return the transfer's [`TransferStatus`](crate::TransferStatus).
//! 5. `cancel(host)` — at any point after creation (a flush that must give way, a job
//!    ending, a resumed transfer that cannot be used).
//! 6. `results()` — at any point, and right after `resume_transfer` before anything else.
//! 7. Drop. A transfer dropped while copying should finish or stop its threads before
//!    returning (the copy engine joins its thread), never leave them writing.
//!
//! ## The contract
//!
//! `scr-conformance` checks each point (see *Testing*); the host relies on them.
//!
//! - **Results**: exactly one [`FileResult`](crate::FileResult) per added file, in the
//!   order added, naming that source and destination; `status` per file (a file can be
//!   `Failed` while others are `Complete`), `error` saying why, `bytes` copied,
//!   `crc32` when `config.crc32`.
//! - **A missing source is refused at `add`**, with an error whose message starts with
//!   the source's path (`PluginError::io(source, e)`).
//! - **Status**: `Complete` only when every file is complete; a file whose source
//!   vanished or could not be read is `Failed`, and so is the transfer.
//! - **CRC32** of the bytes actually copied (not of the source read again later), so a
//!   bit flipped on the way is caught: the host re-reads every destination and compares
//!   it with the CRC32 in its filemap whatever the transfer says; the transfer's own
//!   CRC32 is a second check (`crc_on_flush`).
//! - **Metadata**: with `preserve_metadata`, each destination gets its source's mode and
//!   modification time (nanoseconds included) and, where permitted, owner.
//! - **No temporary file left**: write each destination under a temporary name and
//!   rename it into place when complete (`<destination>.scr-part`: the host's cleanup
//!   after a crash removes leftovers by this suffix), fsync the file and its directory.
//!   After `Complete`, `Failed` or `cancel`, nothing but finished destinations remains.
//! - **Cancel** stops the copy, removes every partly written destination, and `test`
//!   then reports `Cancelled` (or `Complete` if everything finished before the cancel
//!   arrived). Dispatching a cancelled transfer again starts what is missing.
//! - **Resume**: `resume_transfer` builds a new object from `state_file`, in another
//!   process. `results()` must then list the files of the original transfer, in order
//!   (the host compares them with the dataset it is resuming and cancels on a mismatch).
//!   `test` reports `Idle` (the host then calls `dispatch`, which copies only what is
//!   missing, after checking that what was copied is still intact) or `Complete`; in
//!   the end the results are those of an uninterrupted transfer. A state file is
//!   trusted only when private and well formed, because resuming writes, and cancelling
//!   deletes, the paths it names ([`check_resumed`](crate::copy_engine::check_resumed)).
//! - **State files** are written atomically (temporary file, fsync, rename:
//!   [`persist_atomic`](crate::copy_engine::persist_atomic)).
//!
//! ## Threads
//!
//! [`Transfer`](crate::Transfer) is `Send`: the host calls a transfer from one thread at a
//! time (`&mut self`), not necessarily always the same one. Each call receives a
//! [`Host`](crate::Host), valid for that call only: `Host` is not `Send`, so it cannot be
//! kept or moved to a copy thread. Anything that needs the host (logging) happens in the
//! calls; a copy thread works on files and shared state only. The host's communicator
//! is not for transfers: they are not collective, and each rank copies its own files.
//!
//! ## Logging from a copy thread
//!
//! Log through [`Host::log`](crate::Host::log) in the calls. A plugin is a cdylib with its
//! own copy of every global (a `tracing` dispatcher, a `log` logger): a message logged
//! to one of those inside the plugin never reaches the host's log. From a thread, queue
//! messages in a [`LogQueue`](crate::copy_engine::LogQueue); the transfer emits them
//! through the host at its next call. The copy engine does this for you: a
//! [`FileCopier`](crate::copy_engine::FileCopier) logs with `chunk.log.log(level, ...)`,
//! and the messages come out at the next `dispatch`, `test` or `cancel`, and as they
//! arrive during `wait`. Messages still queued when the transfer is dropped are lost.
//! Levels: `Error` and `Warn` are shown by default, `Info` at `SCR_DEBUG=1`, `Debug` at 2.
//!
//! ## The copy engine
//!
//! [`copy_engine`](crate::copy_engine) keeps all of the above for types that copy byte
//! ranges: thread pool, chunks, persisted state, resume with per-chunk verification,
//! cancel, temporary file + rename + fsync, CRC32, metadata, results, logging. A vendor
//! writes one [`FileCopier`](crate::copy_engine::FileCopier): given a
//! [`Chunk`](crate::copy_engine::Chunk) (source, offset, length, and the temporary
//! destination already opened), copy those bytes and return their CRC32
//! ([`crc32`](crate::copy_engine::crc32)). An error fails that file only.
//!
//! ```
//! use scr_plugin::copy_engine::{CopyEngine, EngineSettings, PreadCopier};
//! use scr_plugin::{Host, PluginLibrary, PluginResult, Transfer, TransferConfig};
//!
//! struct Lib;
//! impl PluginLibrary for Lib {
//!     const NAME: &'static str = "my-transfer";
//!     const VERSION: &'static str = "1.0.0";
//!     const TRANSFERS: &'static [&'static str] = &["mine"];
//!     fn new_transfer(c: &TransferConfig, _: &Host<'_>) -> PluginResult<Box<dyn Transfer>> {
//!         // `threads` and `chunk_size` from [plugins.mine], nothing else accepted
//!         let settings = EngineSettings::from_config(c, 1, &[])?;
//!         Ok(Box::new(CopyEngine::new(c, settings, PreadCopier)?))
//!     }
//!     fn resume_transfer(c: &TransferConfig, _: &Host<'_>) -> PluginResult<Box<dyn Transfer>> {
//!         Ok(Box::new(CopyEngine::resume(c, PreadCopier)?))
//!     }
//! }
//! // in the cdylib: scr_plugin::export_plugin!(Lib);
//! ```
//!
//! A vendor service that moves whole files itself (start, then poll: IBM's burst buffer,
//! Cray DataWarp — `bbapi` and `dw` in `plugins/axl-transfer/src/vendor.rs`) does not fit
//! chunks. Such a type implements `Transfer` directly and polls the vendor in
//! `test`/`wait` (where it has the host), and still takes the pieces:
//! [`persist_atomic`](crate::copy_engine::persist_atomic) for its state,
//! [`check_resumed`](crate::copy_engine::check_resumed) before trusting it,
//! [`file_crc32`](crate::copy_engine::file_crc32) and
//! [`copy_metadata`](crate::copy_engine::copy_metadata) once the vendor reports a file
//! done, [`remove_regular`](crate::copy_engine::remove_regular) on cancel. A resumed
//! vendor transfer asks the vendor where the transfer is instead of starting it again
//! (two copies racing on the same destinations), and a query that keeps failing is an
//! error, not `Failed`.
//!
//! ## Panics
//!
//! Every call is guarded ([`guard`](crate::guard)): a panic becomes an error naming
//! the plugin and the call instead of unwinding across the boundary (which would abort
//! the job). Panics on your own threads are yours: the engine catches a panicking
//! copier and fails that file with the panic's message, and marks the transfer `Failed`
//! if its thread dies otherwise.
//!
//! ## Testing
//!
//! - Unit tests call the plugin through the same entry points the host uses:
//!   [`root_module`](crate::root_module)`::<YourLib>()`, then `new_transfer`, `add`,
//!   `dispatch`, `wait`, `results` with the host services of an in-process world
//!   ([`inproc::World`](crate::inproc::World), whose `log_records` show what reached
//!   the host's log). The template's `tests/` does exactly this.
//! - `scr-conformance` runs the whole contract on the built library, on every rank:
//!   files of every shape byte-exact (it reads the destinations itself) with CRC32 and
//!   metadata, results in order, resume from the state file, cancel right after
//!   dispatch, cancel mid-copy then resume **in a new process**, a source that vanishes
//!   mid-transfer, a missing source. Build it in the scr-rs tree (`cargo build -p
//!   scr-conformance`) and run it on your library:
//!
//!   ```sh
//!   mpiexec -n 2 target/debug/scr-conformance --plugin /path/to/libmine.so \
//!       [--transfer mine] [--setting chunk_size=1048576]
//!   ```
//!
//!   Rank 0 prints one `PASS`/`FAIL` line per case; the exit status is 1 on any failure.
//! - In the scr-rs tree, `scripts/test-templates.sh` copies each template outside the
//!   workspace, builds it against the checkout's scr-plugin and runs `scr-conformance`
//!   on it, as CI does.
