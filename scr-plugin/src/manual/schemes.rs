//! Writing a redundancy scheme: what the runtime calls, when, and with what.
//!
//! A scheme is a [`Scheme`](crate::Scheme) made by
//! [`PluginLibrary::new_scheme`](crate::PluginLibrary::new_scheme) for **one member of
//! one redundancy set**. A set is a group of ranks in different failure groups (nodes,
//! by default) formed by the runtime from a `[[checkpoint]]` descriptor's `group` and
//! `set_size`; the scheme's job is that the files of a tolerated number of lost members
//! of a set can be rebuilt from what the others keep.
//!
//! # Call order
//!
//! 1. **`new_scheme`, once per descriptor and set, at init.** `SCR_Init` forms the sets
//!    of every enabled descriptor and calls `new_scheme` on every rank with its
//!    [`SchemeConfig`](crate::SchemeConfig): `members` (the size of the set actually
//!    formed, which may differ from `set_size`: a job spanning fewer failure groups
//!    makes smaller sets), `member` (this rank's place in it, `0..members`),
//!    `world_rank`, `params` (below) and `settings` (the `[plugins.<scheme>]` table of
//!    the configuration). A refusal on any rank fails init on every rank with the
//!    reason, so refuse bad parameters here, naming them and what to change. Then
//!    [`crc32_in_apply`](crate::Scheme::crc32_in_apply) is asked once; the host uses
//!    `apply_with_crc` only when every rank said `true`.
//! 2. **`redundancy_files` before every `apply`** (and at `SCR_Start_output`, before the
//!    application has written its files): the host records the names first, so that a
//!    crash or a failed apply leaves nothing the next init cannot find and delete. It is
//!    local (not collective) and must depend only on the dataset directory and id, and
//!    list exactly the files `apply` writes.
//! 3. **`apply` (or `apply_with_crc`) at `SCR_Complete_output`**, collective over the
//!    set, when every rank's files are there; also after a dataset is fetched back from
//!    the prefix into cache. It must succeed or fail alike on every member.
//! 4. **`recover` at every init, for every cached dataset, also when nothing was lost.**
//!    A fresh instance is made for the purpose with the parameters recorded with the
//!    dataset (those in effect when it was applied) and the set recorded with it. A
//!    member that lost its files gets `files: RNone` and an empty directory. The no-loss
//!    path is the common one: keep it to a few all-reduces (gather presence flags, verify
//!    only when something is lost); see "Survivors: who verifies them" below and the
//!    integrity contract on
//!    [`Scheme::recover`](crate::Scheme::recover). `redundancy_files` is called before
//!    it too (the names a rebuild writes are recorded first).
//! 5. **`remove` only to discard a dataset whose apply failed on some member**: it must
//!    delete whatever this member's `apply` wrote, temporary files included. A dataset
//!    deleted in the normal course (cache full, a newer checkpoint) is deleted by the
//!    host through the names `redundancy_files` gave, without calling the scheme.
//!
//! Outside a job: `scr explain` and `scr show` instantiate a scheme (with `members =
//! set_size`, `member = 0`) only to call [`describe`](crate::Scheme::describe);
//! `scr postrun` runs `recover` offline for a set with lost members, **all members as
//! threads of one process** over [`inproc`](crate::inproc), each in its own staging
//! directory. So keep no per-process global state, and derive every path from the
//! dataset directory you are given.
//!
//! # Parameters
//!
//! Every scheme receives the same four parameters, whether it uses them or not, from
//! the descriptor (or the configuration's scalar keys of the same name) and their
//! defaults:
//!
//! | parameter      | from                              | default |
//! |----------------|-----------------------------------|---------|
//! | `set_size`     | `set_size`                        | 8       |
//! | `set_failures` | `set_failures`                    | 2       |
//! | `replicas`     | `replicas`                        | 1       |
//! | `buffer_size`  | `mpi_buf_size` (bytes)            | 1 MiB   |
//!
//! followed by the descriptor's own `params` table (which may not shadow these four).
//! `set_size` has already shaped the set (use `members`, not `set_size`, for its size);
//! `buffer_size` is the piece size in which to move data, which bounds memory.
//!
//! Read them with [`Params`](crate::Params), and refuse unknown keys with
//! [`Params::only`](crate::Params::only) so that a misspelt parameter is an error, not
//! a silent default. A scheme that does not use some of the four must still accept
//! them: list them in `only` and simply never read them.
//!
//! ```
//! use scr_plugin::{Params, PluginResult, SchemeConfig};
//!
//! /// Every scheme receives these; MIRROR uses only `buffer_size`.
//! const PARAMS: &[&str] = &["set_size", "set_failures", "replicas", "buffer_size", "fsync"];
//!
//! fn piece_size(config: &SchemeConfig) -> PluginResult<(usize, bool)> {
//!     let params = Params::new("scheme MIRROR", &config.params);
//!     params.only(PARAMS)?; // set_size, set_failures, replicas: accepted, ignored
//!     Ok((
//!         params.u64_in("buffer_size", 1 << 20, 1..=(1 << 30))? as usize,
//!         params.bool_or("fsync", true)?,
//!     ))
//! }
//! ```
//!
//! # Host services, threads and collectives
//!
//! Every call receives a [`Host`](crate::Host): the set's communicator (members
//! `0..host.size()`, [`rank`](crate::Host::rank), [`left`](crate::Host::left) /
//! [`right`](crate::Host::right) in the ring), logging and cancellation. The plugin
//! never links MPI.
//!
//! - **Collective services** — [`barrier`](crate::Host::barrier),
//!   [`all_reduce`](crate::Host::all_reduce), [`all_agree`](crate::Host::all_agree),
//!   [`broadcast`](crate::Host::broadcast), and the helpers built on them
//!   ([`collect::gather_flags`](crate::collect::gather_flags),
//!   [`Failures::agree`](crate::collect::Failures::agree),
//!   [`Ring::largest`](crate::ring::Ring::largest)) — must be called by **every member,
//!   in the same order**. A member that skips one (an early `return` on a local error)
//!   leaves the others waiting: note the error, keep taking part with neutral data, and
//!   agree at the end ([`collect::Failures`](crate::collect::Failures)).
//! - **Point-to-point** — [`send`](crate::Host::send), [`recv`](crate::Host::recv)
//!   (exactly `buf.len()` bytes; a message of another length is an error),
//!   [`sendrecv`](crate::Host::sendrecv) — are blocking; messages between two members
//!   with one tag arrive in order. Tags are `0..=`[`MAX_TAG`](crate::MAX_TAG). Both
//!   sides must agree on every message and its length; a ring of `send`s before
//!   `recv`s can deadlock, `sendrecv` cannot.
//! - **Threads**: a scheme may use threads, but the host serialises every service call
//!   (one MPI call at a time, process-wide) and, under MPI, accepts calls from another
//!   thread than the caller's only when MPI was initialised with
//!   `MPI_THREAD_SERIALIZED` or higher; otherwise the call fails with a message saying
//!   so. Host calls from several threads still follow the rules above: every member
//!   must make the same collective calls in the same order.
//! - **Logging**: [`Host::log`](crate::Host::log) becomes a `tracing` event of the host
//!   at the same level, with the rank and the dataset as fields, filtered by `SCR_DEBUG`
//!   or `RUST_LOG` like the runtime's own messages; use it for warnings (a survivor
//!   counted as lost) rather than `eprintln!` (a line the application cannot filter) or
//!   `tracing` inside the plugin (a cdylib's own dispatcher, which no subscriber sees).
//!
//! # When another member fails: propagate the error
//!
//! A call that fails on one member only (an error it returns, or a panic the guard
//! catches) must not leave the others waiting for it. The scr-rs hosts see to it: the
//! failing member's host tells the others, and from then until the end of the call
//! **every host service returns an error** on them — a `recv`, `sendrecv`, `send`,
//! `barrier`, `all_reduce` or `broadcast` that waits for the failed member, or is called
//! afterwards — with code [`ErrorCode::PEER_FAILED`](crate::ErrorCode::PEER_FAILED) and
//! a message naming the member and its error: `member 1 (world rank 3) failed in apply:
//! <its error>`. [`Host::is_cancelled`](crate::Host::is_cancelled) turns true too.
//!
//! What a scheme must do: **propagate it** — return an error from the call (`?` does it),
//! without further host calls, and without retrying or waiting in a loop of its own.
//! Every member then returns, and the host gives every member the same error (the first
//! failing member's). A scheme that swallows the error and keeps blocking outside the
//! host services (on a lock, a thread, a file another member should write) is the one
//! case the runtime still ends with `MPI_Abort` after `abort_timeout`.
//!
//! Messages left behind by the failed call (the failed member's unreceived sends, a
//! collective some members entered) never reach the next call: the host gives the set
//! a fresh communicator after a failed call. Unit tests see the same behaviour in
//! process: [`inproc::World::member_failed`](crate::inproc::World::member_failed) is what
//! a host does when a member fails, and `scr-conformance` settles every call as the
//! runtime does.
//!
//! # Cancellation
//!
//! [`Host::is_cancelled`](crate::Host::is_cancelled) and
//! [`Host::check_cancelled`](crate::Host::check_cancelled) tell a long call to stop. The
//! runtime cancels transfers (a flush at finalize), and a scheme's collective call when
//! another member of its set failed in it (above); tests can
//! ([`inproc::World::cancel`](crate::inproc::World::cancel)). A long local loop (encoding
//! a large file) should check between pieces, so that it stops soon after a peer failed.
//! Otherwise a scheme that checks must stop on every member alike: check where all
//! members are in step and agree (`host.all_agree(!host.is_cancelled())`) before
//! returning [`ErrorCode::CANCELLED`](crate::ErrorCode::CANCELLED), never on one member
//! alone.
//!
//! # CRC32s in the apply
//!
//! The host records a CRC32 of every file (`crc_on_copy`, the default). A scheme that
//! reads every byte of its member's data anyway returns `true` from
//! [`crc32_in_apply`](crate::Scheme::crc32_in_apply) and implements
//! [`apply_with_crc`](crate::Scheme::apply_with_crc): it hashes the bytes as it reads
//! them ([`lofi::FileCrcs`](crate::lofi::FileCrcs) accepts pieces in any order) and
//! returns one CRC32 per file ([`Applied::with_crc`](crate::Applied::with_crc)), so the
//! host does not read the files a second time. The files then arrive with
//! `crc32: RNone`, and the CRC32s computed are the ones to store in the redundancy data,
//! because a rebuild checks against them. [`crc_cases`](crate::crc_cases) tests it.
//! The default (`false`, `apply_with_crc` calling `apply`) is always correct.
//!
//! # Survivors: who verifies them
//!
//! Before every `recover` the host checks each member's cached files against the size
//! and CRC32 it recorded (`crc_on_restart`, default on; sizes only when no CRC32 was
//! recorded, `crc_on_copy = false`), and a member whose files fail is passed to
//! `recover` as one that lost them (`files: RNone`). So the `files` of a member passed
//! as intact are what it wrote, and a scheme may rely on that. What it relies on is
//! part of its contract, declared by [`Scheme::survivor_check`](crate::Scheme::survivor_check):
//!
//! | declaration | the scheme | `scr-conformance`'s corrupted-survivor cases |
//! |---|---|---|
//! | [`SurvivorCheck::Host`](crate::SurvivorCheck::Host) (the default) | relies on the host's check: reads each survivor once, to rebuild | check the survivors as the host does and pass the damaged one as lost; the scheme must rebuild right or fail alike |
//! | [`SurvivorCheck::Scheme`](crate::SurvivorCheck::Scheme) | verifies every survivor whose data feeds a rebuild ([`verify::verify_files`](crate::verify::verify_files)) and counts a damaged one as lost, unless the host says it has just done so ([`Host::survivors_verified`](crate::Host::survivors_verified)) | hand the damaged survivor over as intact, from a host that does not say so; the scheme must detect it (a failure says so) |
//!
//! Either way the scheme never hands back a wrong byte: the rebuilt files are checked
//! against the sizes and CRC32s in the redundancy data, and the host checks them again.
//! Declare what `recover` really does. PARTNER, XOR and RS declare `Scheme` (they
//! verify before they rebuild); SINGLE, which rebuilds nothing, keeps `Host`. The
//! runtime checks survivors under both declarations and logs which one is in force (at
//! `debug`). When its check covered the recorded CRC32s (`crc_on_restart`, the default)
//! it also says so through `Host::survivors_verified`, and a `Scheme` scheme skips its
//! second read: each survivor is read once. The verdict is `false` under an older host,
//! with `crc_on_restart = false` (sizes only) and in `scr postrun`'s offline rebuild;
//! then the scheme's own check is the one that reads the CRC32s, so declare `Scheme`
//! only when `recover` verifies.
//!
//! A rebuild's own output is not read back by the scheme either: files written through
//! [`LogicalFile`](crate::lofi::LogicalFile) are hashed as they are written, and
//! [`ring::finish_rebuild`](crate::ring::finish_rebuild) compares those CRC32s with the
//! redundancy data's. The host, which trusts no plugin's word, reads them once.
//! Likewise a redundancy file need not be read twice: open it with
//! [`RedReader::open`](crate::redfile::RedReader::open) (its header is checked), read
//! what the rebuild needs, and call
//! [`verify_rest`](crate::redfile::RedReader::verify_rest) before anything built from it
//! counts; it hashes what was read and reads only the rest. The catch is that a damaged
//! payload is found after its bytes were used: every member must then drop what the
//! round produced and treat that member's redundancy as lost (PARTNER asks the next
//! partner, RS solves again without it). [`open_verified`](crate::redfile::open_verified)
//! before the rebuild is the simpler choice, at the cost of a second read.
//!
//! # Offline rebuilds: which redundancy a rebuild reads
//!
//! `scr postrun` scavenges a killed job's newest checkpoint out of the node-local caches
//! into the prefix and rebuilds the ranks whose node is gone away from the nodes: each
//! member of a set that lost one runs the scheme over the files copied out of the
//! caches. Every file copied is a read over the network, so the host asks the scheme
//! which redundancy the rebuild needs,
//! [`Scheme::rebuild_sources`](crate::Scheme::rebuild_sources)`(lost)`, copies every
//! survivor's application files and only the named survivors' redundancy files, and
//! calls [`Scheme::recover_files`](crate::Scheme::recover_files), which rebuilds the
//! lost members' files from that alone and writes no redundancy (the host discards the
//! set's redundancy after an offline rebuild).
//!
//! What a scheme gains by implementing both: postrun copies less. A PARTNER set of 4
//! with one copy that lost one member reads the redundancy file of that member's
//! right-hand neighbour only (its copy is there), not the three survivors'; with
//! `replicas = 2`, the nearest surviving holder of each lost member's copy. A scheme
//! whose every lost byte depends on every survivor's redundancy keeps the defaults,
//! `None` (every survivor's) and `recover_files` calling `recover`: XOR (each byte is
//! the XOR of every survivor's slot, parity included) and RS do.
//!
//! The two go together: a scheme that names sources must rebuild without the other
//! survivors' redundancy files, which are absent, so it implements `recover_files` too
//! (PARTNER's is its `recover` without the re-protection, a survivor's absent
//! redundancy file being no loss unless it held the nearest copy). Everything else is
//! `recover`'s contract: check what is read and what is rebuilt, never hand back a
//! wrong byte, fail alike with `UNRECOVERABLE` when a lost member has no copy left.
//! `scr-conformance` holds a scheme to its declaration: for every pattern of up to `k`
//! lost members and the `k + 1` beyond, each survivor keeps its redundancy only when
//! named, the lost members must come back byte-exact (beyond the claim: or fail alike),
//! and a survivor not named must have no redundancy file written.
//!
//! # The ring helper
//!
//! Most schemes stream a member's logical file ([`lofi::LogicalFile`](crate::lofi::LogicalFile):
//! its files concatenated and zero-padded) around the ring of its set in pieces of
//! `buffer_size`. [`ring::Ring`](crate::ring::Ring) does the bookkeeping (lengths
//! exchanged, the same number of steps everywhere, empty pieces, zeros and a noted
//! failure for a read that fails) and leaves the per-piece arithmetic to closures:
//!
//! - [`Ring::shift`](crate::ring::Ring::shift): each member's bytes to the member `d`
//!   places right (PARTNER, the template's MIRROR);
//! - [`Ring::send`](crate::ring::Ring::send) / [`Ring::recv`](crate::ring::Ring::recv):
//!   one member's bytes to another (a lost member's files back);
//! - [`Ring::reduce_scatter`](crate::ring::Ring::reduce_scatter) and
//!   [`Ring::reduce_to`](crate::ring::Ring::reduce_to): XOR-style parity and its rebuild,
//!   with any `combine`;
//! - [`ring::finish_rebuild`](crate::ring::finish_rebuild): flush, check against the
//!   recorded size and CRC32, delete on a mismatch, restore mode and times.
//!
//! The shipped PARTNER, XOR and RS plugins are written with it; read them next to the
//! template. [`redfile`](crate::redfile) writes redundancy files with a checksummed
//! header (file metadata, sections) that recovery can trust or reject.
