//! Versions of this SDK, what each promises, and how to move a plugin from one to the
//! next.
//!
//! # The promise
//!
//! scr-plugin follows semantic versioning as cargo reads it for a 0.y.z crate: within one
//! 0.y series (0.1.0, 0.1.1, 0.1.2, 0.1.3, ...) a plugin's source keeps building and its library keeps
//! loading into every host of that series. A release of the series adds items; an item
//! that must change is kept beside its replacement, marked `#[deprecated]` with a note
//! that names the replacement and this page. A change that cannot be made that way is a
//! new series (0.2.0), listed here with a migration note before it is released.
//!
//! Every release is a git tag `scr-plugin-v<version>` and a line of
//! `scr-plugin/RELEASES` (the version and its commit). The repository's test suite
//! (`scripts/test.sh`, step `semver`) compares the public API with every earlier release
//! of the same series through `cargo semver-checks` and fails on a break, so a break
//! cannot ship unannounced. `CHANGELOG.md` beside the crate lists every change, release
//! by release.
//!
//! Loading is a matter of the library *binary*: a host loads a library built against
//! its own release or a newer one of its series. A library built against an older
//! release is refused when the interface has grown since (a defaulted method appended
//! to a trait: abi_stable requires the library's table to hold every method the host
//! knows), saying so in one line; rebuilding it from its unchanged source is the fix
//! (see "Upgrading scr-plugin" in [the manual](super)).
//!
//! # 0.1.2 → 0.1.3
//!
//! The source: nothing to do, a plugin written against 0.1.2 builds unchanged. Its
//! library must be rebuilt to load into a 0.1.3 runtime (the refusal names
//! `survivors_verified`), since the host services gained one defaulted method,
//! [`HostServices::survivors_verified`](crate::abi::HostServices::survivors_verified)
//! ([`Host::survivors_verified`](crate::Host::survivors_verified)): a scheme that
//! verifies survivors itself ([`SurvivorCheck::Scheme`](crate::SurvivorCheck::Scheme))
//! may skip that read when it is `true`, since the host has just made the same check;
//! a host built before 0.1.3 answers `false`. A scheme that writes rebuilt files
//! through [`LogicalFile`](crate::lofi::LogicalFile) and ends with
//! [`ring::finish_rebuild`](crate::ring::finish_rebuild) now has them checked from the
//! bytes it wrote instead of a read-back, with no change to its code.
//!
//! # 0.1.1 → 0.1.2
//!
//! The source: nothing to do, a plugin written against 0.1.1 builds unchanged. Its
//! library must be rebuilt to load into a 0.1.2 runtime, since the scheme interface
//! gained two defaulted methods after `survivor_check`:
//! [`Scheme::rebuild_sources`](crate::Scheme::rebuild_sources) and
//! [`Scheme::recover_files`](crate::Scheme::recover_files). The defaults (every
//! survivor's redundancy; `recover`) keep a scheme correct for `scr postrun`'s offline
//! rebuilds; a scheme whose rebuild reads only some survivors' redundancy implements
//! both, so postrun copies less (see [`schemes`](super::schemes), "Offline rebuilds").
//! A test type implementing
//! [`conformance::SchemeUnderTest`](crate::conformance::SchemeUnderTest) itself (as
//! `scr-conformance` does) forwards both, or the cases test it with the defaults.
//!
//! # 0.1.0 → 0.1.1
//!
//! The source: nothing to do, a plugin written against 0.1.0 builds unchanged. Its
//! library must be rebuilt to load, since the scheme interface gained defaulted methods
//! (`crc32_in_apply`, `apply_with_crc`, `survivor_check`). One call is deprecated (a
//! warning, not an error):
//!
//! - `LogicalFile::create(metas)` → [`LogicalFile::create_in`](crate::lofi::LogicalFile::create_in)`(dir,
//!   metas)`, where `dir` is the dataset directory the scheme was given (for a
//!   [`Scheme`](crate::Scheme)'s `apply` and `recover`, the directory of the dataset's
//!   files). `create_in` creates every directory level below `dir` with mode 0700 and the
//!   files with mode 0600, and never writes through a symbolic link planted in the cache
//!   in place of a level or a file. The deprecated form derives `dir` from the files'
//!   common directory, so it cannot check the levels above it.
//!
//!   ```ignore
//!   // 0.1.0
//!   let mut out = LogicalFile::create(&metas)?;
//!   // 0.1.1
//!   let mut out = LogicalFile::create_in(dir, &metas)?;
//!   ```
