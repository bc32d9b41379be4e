//! Private directories: the cache and control directories are made and checked here (0700,
//! owned by this user, no link followed, sticky-bit rules for shared bases).

use std::path::{Component, Path, PathBuf};

use crate::error::{io_err, Result, ScrError};

/// Create `dir` below `base` (a shared base such as /dev/shm, which other users can
/// write to) one level at a time, each new level with mode 0700, and check every level
/// that already exists: a symbolic link, a directory owned by another user, or one that
/// group or others can write is refused, naming it. Another user could otherwise plant
/// `<base>/<user>` in advance — as a link to a directory of theirs (our checkpoints would
/// be written there) or as an open directory (they could read our checkpoints and forge
/// our filemaps). `base` itself is created (as an ordinary directory) when missing, and
/// judged by [`check_base`].
///
/// Every directory the runtime makes in cache goes through here (job, dataset and nested
/// directories alike), so no level below the base is ever followed through a link; the
/// plugins use the same rules ([`scr_plugin::cachefs`]).
pub(crate) fn create_private_dir(base: &Path, dir: &Path) -> Result<()> {
    if !base.exists() {
        std::fs::create_dir_all(base).map_err(io_err(base))?;
    }
    check_base(base)?;
    scr_plugin::cachefs::create_dirs(base, dir, crate::registry::effective_uid())
        .map_err(cachefs_err)
}

/// A [`scr_plugin::cachefs`] refusal is a usage error (the user must remove what was
/// planted or choose another base); anything else is an I/O error.
pub(crate) fn cachefs_err(e: scr_plugin::cachefs::CacheFsError) -> ScrError {
    use scr_plugin::cachefs::CacheFsError;
    match e {
        CacheFsError::Io { path, source } => ScrError::Io { path, source },
        refused => ScrError::Usage(refused.to_string()),
    }
}

/// A shared base (`cache_base`, `cntl_base`, a store) that someone other than this user
/// can write to must have the sticky bit, as /tmp and /dev/shm do (mode 1777): without
/// it anyone who can write there can rename this user's directory away and put their
/// own in its place at any moment, after every check. The owner of a directory can do
/// that whatever its mode, so the base must also be owned by root or this user.
///
/// The same holds for every ancestor of the base, judged after resolving symbolic links
/// in the configured path (the path itself is the site's or user's choice; where it
/// leads is what others could change): renaming an ancestor moves the whole tree. "Others"
/// are group members unless the group is root's or this user's private group, and all
/// other users.
pub(crate) fn check_base(base: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let real = base.canonicalize().map_err(io_err(base))?;
    let me = crate::registry::effective_uid();
    for at in real.ancestors() {
        let md = std::fs::metadata(at).map_err(io_err(at))?;
        let mode = md.mode() & 0o7777;
        let what = if at == real {
            format!("the shared base {}", at.display())
        } else {
            format!(
                "{}, above the shared base {},",
                at.display(),
                base.display()
            )
        };
        if md.uid() != 0 && me.is_some_and(|u| u != md.uid()) {
            return Err(ScrError::Usage(format!(
                "{what} (mode {mode:04o}) is owned by uid {}, neither root nor this user: its owner could rename or replace this job's directory in it at any time; choose a base owned by root or by you",
                md.uid()
            )));
        }
        let group_writes =
            mode & 0o020 != 0 && md.gid() != 0 && !crate::registry::private_group(md.gid());
        let others_write = mode & 0o002 != 0 || group_writes;
        if others_write && mode & 0o1000 == 0 {
            return Err(ScrError::Usage(format!(
                "{what} (owner uid {}, mode {mode:04o}) can be written by other users and has no sticky bit, so another user could rename or replace this job's directory in it: set the sticky bit (chmod +t {}, as /tmp and /dev/shm are: mode 1777), make it writable by its owner only, or choose another cache_base / cntl_base / store",
                md.uid(),
                at.display()
            )));
        }
    }
    Ok(())
}

/// Resolve `.` and `..` without touching the file system (the file may not exist yet).
pub(crate) fn lexical_normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}
