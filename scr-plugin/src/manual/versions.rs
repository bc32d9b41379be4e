//! Versions of this SDK, what each promises, and how to move a plugin from one to the
//! next.
//!
//! # The promise
//!
//! scr-plugin follows semantic versioning as cargo reads it for a 0.y.z crate: within one
//! 0.y series (0.1.0, 0.1.1, ...) a plugin's source keeps building and its library keeps
//! loading into every host of that series. A release of the series adds items; an item
//! that must change is kept beside its replacement, marked `#[deprecated]` with a note
//! that names the replacement and this page. A change that cannot be made that way is a
//! new series (0.2.0), listed here with a migration note before it is released.
//!
//! Every release is a git tag `scr-plugin-v<version>`. The repository's test suite
//! (`scripts/test.sh`, step `semver`) compares the public API with every earlier release
//! of the same series through `cargo semver-checks` and fails on a break, so a break
//! cannot ship unannounced. `CHANGELOG.md` beside the crate lists every change, release
//! by release.
//!
//! Loading follows the same rule: a host of the 0.1 series loads a library built
//! against any 0.1 release (abi_stable compares the series; the layout check then
//! compares every type the library and the host share, and a refusal says which method
//! or field differs).
//!
//! # 0.1.0 → 0.1.1
//!
//! Nothing to do: a plugin written against 0.1.0 builds and loads unchanged. One call
//! is deprecated (a warning, not an error):
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
