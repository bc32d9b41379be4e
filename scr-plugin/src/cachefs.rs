//! Directories and files in cache that nothing can redirect: shared by the host and the
//! plugins, so every directory level below a job's directory is created and judged the
//! same way.
//!
//! Cache lives under bases other users can write to (`/dev/shm`, `/tmp`). The host makes
//! the job's directory private ([`create_dirs`] from the base, each level 0700 and
//! checked); below it, a directory level is never followed through a symbolic link and a
//! file is never opened through one (`O_NOFOLLOW`), so a link left in place of a dataset
//! directory, a nested directory or a file (planted before the directory became private,
//! or by a careless tool) cannot send checkpoint bytes, or a delete, anywhere else.
//!
//! Levels are judged with `lstat` one at a time, not with `openat`: every level below the
//! base is owned by the user and writable by nobody else (checked here), and the base
//! must keep others from renaming entries in it (the host's sticky-bit check), so nobody
//! else can swap a level between the check and the use.

use std::fmt;
use std::fs::File;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Mode of every directory the runtime or a plugin creates in cache.
pub const DIR_MODE: u32 = 0o700;
/// Mode every file the runtime or a plugin creates in cache is created with.
pub const FILE_MODE: u32 = 0o600;

/// Why a directory level or file in cache is not used.
#[derive(Debug)]
pub enum CacheFsError {
    /// The entry exists but could let another user read or redirect the data.
    Refused {
        /// The entry.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
        /// Its owner.
        uid: u32,
        /// Its permission bits.
        mode: u32,
    },
    /// A file operation failed.
    Io {
        /// The entry.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

impl fmt::Display for CacheFsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CacheFsError::Refused {
                path,
                why,
                uid,
                mode,
            } => write!(
                f,
                "{} {why} (owner uid {uid}, mode {mode:04o}); it is not used, because another user could read or redirect checkpoints through it: remove it, or choose another cache_base / cntl_base",
                path.display()
            ),
            CacheFsError::Io { path, source } => write!(f, "{}: {source}", path.display()),
        }
    }
}

impl std::error::Error for CacheFsError {}

impl From<CacheFsError> for crate::PluginError {
    fn from(e: CacheFsError) -> Self {
        crate::PluginError::new(crate::ErrorCode::IO, e.to_string())
    }
}

fn io_at(path: &Path) -> impl FnOnce(std::io::Error) -> CacheFsError + '_ {
    move |source| CacheFsError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Judge an existing directory level itself (never what a link points to): a symbolic
/// link, something other than a directory, a directory owned by another user than
/// `owner` (when given) or root, or one group or others can write, is refused. (A level
/// root made and left unwritable to others — a job prolog's `mkdir -p` — is fine: root
/// can change anything anyway.)
pub fn check_dir(path: &Path, owner: Option<u32>) -> Result<(), CacheFsError> {
    let md = std::fs::symlink_metadata(path).map_err(io_at(path))?;
    let why = if md.file_type().is_symlink() {
        Some("is a symbolic link".to_string())
    } else if !md.is_dir() {
        Some("is not a directory".to_string())
    } else if owner.is_some_and(|u| u != md.uid() && md.uid() != 0) {
        Some(format!("is owned by uid {}, not by this user", md.uid()))
    } else if md.mode() & 0o022 != 0 {
        Some(format!(
            "has mode {:04o}: group or others can write to it",
            md.mode() & 0o7777
        ))
    } else {
        None
    };
    match why {
        Some(why) => Err(CacheFsError::Refused {
            path: path.to_path_buf(),
            why,
            uid: md.uid(),
            mode: md.mode() & 0o7777,
        }),
        None => Ok(()),
    }
}

/// The owner of `path` itself (not of what a link points to).
pub fn owner_of(path: &Path) -> Result<u32, CacheFsError> {
    std::fs::symlink_metadata(path)
        .map(|m| m.uid())
        .map_err(io_at(path))
}

/// The levels of `dir` below `top` (`top` excluded), or an error when `dir` is not below
/// `top` or a level is `..`.
fn levels(top: &Path, dir: &Path) -> Result<Vec<PathBuf>, CacheFsError> {
    let rel = dir.strip_prefix(top).map_err(|_| CacheFsError::Io {
        path: dir.to_path_buf(),
        source: std::io::Error::other(format!("is not below {}", top.display())),
    })?;
    let mut at = top.to_path_buf();
    let mut out = Vec::new();
    for c in rel.components() {
        match c {
            std::path::Component::Normal(n) => {
                at.push(n);
                out.push(at.clone());
            }
            std::path::Component::CurDir => {}
            _ => {
                return Err(CacheFsError::Io {
                    path: dir.to_path_buf(),
                    source: std::io::Error::other(format!(
                        "leaves {} (a `..` or root component)",
                        top.display()
                    )),
                })
            }
        }
    }
    Ok(out)
}

/// Create `dir` below `top` one level at a time, each new level with mode 0700, and
/// judge every level that already exists with [`check_dir`] (`owner`: the user every
/// level must belong to). `top` itself is neither created nor judged.
pub fn create_dirs(top: &Path, dir: &Path, owner: Option<u32>) -> Result<(), CacheFsError> {
    for at in levels(top, dir)? {
        match std::fs::DirBuilder::new().mode(DIR_MODE).create(&at) {
            Ok(()) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_at(&at)(e)),
        }
        // it was there already (or another rank of this job made it just now)
        check_dir(&at, owner)?;
    }
    Ok(())
}

/// Judge the levels of `dir` below `top` that exist (`top` excluded) with [`check_dir`],
/// before anything is read or deleted through them; the first missing level ends the
/// walk (nothing below it exists either).
pub fn check_dirs(top: &Path, dir: &Path, owner: Option<u32>) -> Result<(), CacheFsError> {
    for at in levels(top, dir)? {
        match check_dir(&at, owner) {
            Err(CacheFsError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                return Ok(())
            }
            other => other?,
        }
    }
    Ok(())
}

/// Create (or truncate) the file `path` for writing, with mode 0600 when it is new,
/// never through a symbolic link at `path` (a link there is refused, naming it).
pub fn create_file(path: &Path) -> Result<File, CacheFsError> {
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|source| refused_link(path, source))
}

/// Open `path` for writing without truncating it (a resumed copy keeps what it wrote),
/// creating it with mode 0600 when `create`, never through a symbolic link at `path`:
/// a link planted at a temporary name would otherwise take the bytes elsewhere.
pub fn open_for_writing(path: &Path, create: bool) -> Result<File, CacheFsError> {
    std::fs::OpenOptions::new()
        .write(true)
        .create(create)
        .mode(FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|source| refused_link(path, source))
}

/// Open the existing file `path` for reading, never through a symbolic link at `path`.
pub fn open_file(path: &Path) -> Result<File, CacheFsError> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|source| refused_link(path, source))
}

/// `O_NOFOLLOW` fails with `ELOOP` on a link: say so, naming it.
fn refused_link(path: &Path, source: std::io::Error) -> CacheFsError {
    if source.raw_os_error() == Some(libc::ELOOP) {
        if let Ok(md) = std::fs::symlink_metadata(path) {
            return CacheFsError::Refused {
                path: path.to_path_buf(),
                why: "is a symbolic link".into(),
                uid: md.uid(),
                mode: md.mode() & 0o7777,
            };
        }
    }
    CacheFsError::Io {
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
    }

    #[test]
    fn levels_are_created_0700_and_files_0600() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("a/b/c");
        create_dirs(t.path(), &dir, None).unwrap();
        for d in ["a", "a/b", "a/b/c"] {
            assert_eq!(mode(&t.path().join(d)), 0o700, "{d}");
        }
        let f = dir.join("f");
        drop(create_file(&f).unwrap());
        assert_eq!(mode(&f), 0o600);
    }

    #[test]
    fn a_link_in_place_of_a_level_or_a_file_is_refused_and_nothing_goes_through_it() {
        let t = tempfile::tempdir().unwrap();
        let theirs = t.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        let top = t.path().join("job");
        std::fs::create_dir(&top).unwrap();
        std::os::unix::fs::symlink(&theirs, top.join("a")).unwrap();
        let e = create_dirs(&top, &top.join("a/b"), None).unwrap_err();
        assert!(
            e.to_string()
                .starts_with(&format!("{} is a symbolic link", top.join("a").display())),
            "{e}"
        );
        let e = check_dirs(&top, &top.join("a/b"), None).unwrap_err();
        assert!(e.to_string().contains("is a symbolic link"), "{e}");
        std::os::unix::fs::symlink(theirs.join("f"), top.join("f")).unwrap();
        let e = create_file(&top.join("f")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with(&format!("{} is a symbolic link", top.join("f").display())),
            "{e}"
        );
        assert_eq!(std::fs::read_dir(&theirs).unwrap().count(), 0);
        // a missing level ends the check; `..` never passes
        check_dirs(&top, &top.join("x/y"), None).unwrap();
        assert!(create_dirs(&top, &top.join("../x"), None).is_err());
    }

    #[test]
    fn an_open_or_foreign_level_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let open = t.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = create_dirs(t.path(), &open.join("x"), None).unwrap_err();
        assert!(
            e.to_string()
                .contains("has mode 0777: group or others can write to it (owner uid"),
            "{e}"
        );
        assert!(!open.join("x").exists());
        // another user's level is refused; root's (a prolog's `mkdir -p`) is not
        let theirs = t.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o755)).unwrap();
        if std::os::unix::fs::chown(&theirs, Some(54321), None).is_ok() {
            let e = check_dir(&theirs, Some(1000)).unwrap_err();
            assert!(
                e.to_string()
                    .contains("is owned by uid 54321, not by this user"),
                "{e}"
            );
            std::os::unix::fs::chown(&theirs, Some(0), None).unwrap();
            assert!(
                check_dir(&theirs, Some(1000)).is_ok(),
                "root's level is accepted"
            );
        }
    }
}
