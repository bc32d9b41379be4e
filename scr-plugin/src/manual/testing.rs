//! Testing a plugin: without MPI first, then as the runtime loads it.
//!
//! # 1. Unit tests over `inproc`
//!
//! [`inproc::run`](crate::inproc::run) runs a closure on one thread per member of a set
//! (given by their failure groups), each with a [`Host`](crate::Host) whose services
//! (point-to-point, collectives, logging, cancellation) behave as the MPI ones do. A
//! scheme's algorithm is tested with plain `cargo test`, no MPI, no runtime:
//!
//! ```
//! use scr_plugin::{collect::Failures, inproc, ring::Ring};
//!
//! // the parity of three members' slots, as XOR's apply computes it
//! let parity = inproc::run(&["node0", "node1", "node2"], |host| {
//!     assert_eq!(host.size(), 3);
//!     let me = host.rank() as u8;
//!     let mut failures = Failures::new();
//!     let mut got = Vec::new();
//!     Ring::new(host, 7, 2)
//!         .reduce_scatter(
//!             3,
//!             &mut failures,
//!             |slot, _, buf| { buf.fill(if slot == u32::from(me) { 0 } else { me + 1 }); Ok(()) },
//!             |acc, inc| acc.iter_mut().zip(inc).for_each(|(a, b)| *a ^= b),
//!             |_, bytes| { got.extend_from_slice(bytes); Ok(()) },
//!         )
//!         .unwrap();
//!     failures.agree(host, "parity").unwrap();
//!     got
//! });
//! // member 0's slot: 0 ^ 2 ^ 3, member 1's: 1 ^ 0 ^ 3, member 2's: 1 ^ 2 ^ 0
//! assert_eq!(parity, [vec![1; 3], vec![2; 3], vec![3; 3]]);
//! ```
//!
//! [`inproc::World`](crate::inproc::World) gives more control: a timeout that turns a
//! deadlock into a test failure, [`cancel`](crate::inproc::World::cancel), and the
//! [`log_records`](crate::inproc::World::log_records) a scheme wrote. To go through the
//! same FFI shims as the runtime, box the scheme with
//! [`scheme_box`](crate::scheme_box) (or make it with
//! [`root_module`](crate::root_module)) and call it through `host.raw()` (see the
//! crate-level example).
//!
//! # 2. The conformance cases from the plugin's tests
//!
//! [`conformance::run_scheme_cases`](crate::conformance::run_scheme_cases) is what
//! `scr-conformance` runs on each set: varied file shapes, every loss pattern the scheme
//! claims to tolerate (data, redundancy, both, mixed) rebuilt byte-exact and protected
//! again, every pattern beyond the claim failing alike, a corrupted survivor never
//! trusted (checked by the harness as the host does, or handed over unverified,
//! according to [`survivor_check`](crate::Scheme::survivor_check): see
//! [`schemes`](super::schemes), "Survivors: who verifies them"), corrupted headers, the
//! offline rebuild of every pattern up to `k + 1` with the redundancy of the survivors
//! [`rebuild_sources`](crate::Scheme::rebuild_sources) names (see
//! [`schemes`](super::schemes), "Offline rebuilds"), repeatable apply,
//! `redundancy_files` and `remove`. Call
//! it on every member from an `inproc` test, with the piece size the scheme was made
//! with (so that files span several pieces), and assert that no case failed:
//!
//! ```ignore
//! let dir = tempfile::tempdir().unwrap();
//! let results = inproc::run(&["n0", "n1", "n2"], |host| {
//!     let scheme = MirrorScheme::new(host.size(), host.rank(), host.rank(), 256);
//!     let mut cases = Vec::new();
//!     let mine = dir.path().join(format!("member{}", host.rank()));
//!     run_scheme_cases(host, &scheme, &mine, 256, &mut |c| cases.push(c)).unwrap();
//!     cases
//! });
//! let failed: Vec<_> = results[0].iter().filter(|c| c.failure.is_some()).collect();
//! assert!(failed.is_empty(), "{failed:#?}");
//! ```
//!
//! `templates/scheme-plugin/tests/conformance.rs` is a complete one. A scheme that
//! returns `true` from `crc32_in_apply` also runs
//! [`crc_cases::check_crc_in_apply`](crate::crc_cases::check_crc_in_apply): its CRC32s
//! must be the files' and its redundancy data the same as through plain `apply`.
//!
//! # 3. `scr-conformance` under `mpiexec`
//!
//! The last word is the built library loaded as the runtime loads it, over MPI:
//!
//! ```sh
//! cargo build -p scr-conformance          # in an scr-rs checkout
//! mpiexec -n 4 target/debug/scr-conformance --plugin /path/to/libmine.so
//! ```
//!
//! It checks loading (ABI, declared names, `new_scheme`), then splits the ranks into
//! sets and runs the cases above on each. Options:
//!
//! - `--scheme NAME` (repeatable): only these schemes (default: every one declared);
//! - `--set-size S` (repeatable): sets of `S` members (default: 2, 3 and every rank,
//!   those that fit in the launch); a set needs at least `S` ranks;
//! - `--param KEY=VALUE` (repeatable): scheme parameters for every instance (default
//!   `buffer_size=4096`, so that files span several pieces);
//! - `--ranks-per-node K`: `K` consecutive ranks share a failure group and sets are
//!   formed across groups as the runtime does (members' world ranks not consecutive);
//! - `--dir DIR`: where the members' files go (default: the system temporary directory);
//! - `--timeout SECS` (default 600): a hang becomes a failure naming the case;
//! - `--transfer NAME`, `--setting KEY=VALUE`: for transfer types (see [`transfers`](super::transfers)).
//!
//! Rank 0 prints `NOTE launched on N rank(s)`, one `PASS`/`FAIL` line per case and
//! `N passed, N failed`; the exit status is 1 on any failure. As root with OpenMPI, set
//! `OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1` (and
//! `OMPI_MCA_rmaps_base_oversubscribe=1` on a machine with fewer cores than ranks).
//! `scripts/test-templates.sh` in the scr-rs repository runs all three steps for every
//! template, on a copy built outside the workspace.
