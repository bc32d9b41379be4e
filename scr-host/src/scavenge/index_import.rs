//! `scr index import`: make files that were not written through the library a
//! checkpoint of the prefix (LLNL/scr#232): a directory inside the prefix, its files
//! assigned to the ranks that wrote them, each read once for its size and CRC32, recorded
//! as a flush records a dataset (rank2file, summary, index entry), so that `have_restart`
//! offers it to a job of any number of ranks and later restarts check every byte.

use super::*;
use crate::state::StateError;

/// Why `scr index import` refused the files, or could not record them.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// The directory (or the list) could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// What could not be read.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The directory or a listed file is not inside the prefix.
    #[error("{}: not inside the prefix {}; imported files must lie in the prefix, where a restart reads them", path.display(), prefix.display())]
    Outside {
        /// The path.
        path: PathBuf,
        /// The prefix.
        prefix: PathBuf,
    },
    /// A listed or found file is missing, unreadable, not a regular file, or a link.
    #[error("{}: {why}; nothing is imported", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// A line of the list does not read as `RANK PATH`.
    #[error("{}:{line}: {why}; each line is `RANK PATH` (PATH relative to the directory imported, or absolute), `#` starts a comment", path.display())]
    List {
        /// The list.
        path: PathBuf,
        /// The line number (from 1).
        line: usize,
        /// What is wrong.
        why: String,
    },
    /// The ranks listed are not 0..N, each with at least one file.
    #[error("the files are assigned to ranks {ranks:?}; every rank 0..{} must have a file (a rank with none wrote nothing and cannot be told apart from a missing line)", ranks.len())]
    Ranks {
        /// The ranks that have files.
        ranks: Vec<u32>,
    },
    /// No file was found.
    #[error("{}: holds no file to import", path.display())]
    Empty {
        /// The directory.
        path: PathBuf,
    },
    /// A dataset of that name is in the index already.
    #[error("the index of {} holds a dataset named `{name}` already (id {id}); give another --name, or drop it first (`scr index drop {name}`)", prefix.display())]
    NameTaken {
        /// The prefix.
        prefix: PathBuf,
        /// The name.
        name: String,
        /// The dataset that has it.
        id: u64,
    },
    /// A state file could not be written.
    #[error("{0}")]
    State(#[from] StateError),
    /// The index refused it, or a check before adding failed.
    #[error("{0}")]
    Add(#[from] IndexAddError),
}

/// What to import: the directory, the name, the assignment of files to ranks.
#[derive(Clone, Debug)]
pub struct Import {
    /// The directory holding the files (inside the prefix).
    pub dir: PathBuf,
    /// The dataset's name (default: the directory's name).
    pub name: Option<String>,
    /// A list of `RANK PATH` lines; without it every regular file below `dir` is one
    /// rank's, in the natural order of their paths (`rank_2` before `rank_10`).
    pub list: Option<PathBuf>,
    /// The checkpoint id (default: after every checkpoint id the prefix used).
    pub checkpoint_id: Option<u64>,
}

/// `scr index import`: record the files `import` names as a complete checkpoint of
/// `prefix`: every file's size and CRC32 read, rank2file and summary written, the entry
/// added (the restart point when it is the newest checkpoint). The dataset id and the
/// checkpoint id continue after every id the prefix used, and are recorded, so that a
/// job's next checkpoint never reuses them. Returns the entry and whether it became the
/// restart point. Nothing is recorded when a file is missing or unreadable.
pub fn index_import(
    prefix: &Path,
    import: &Import,
    (job_name, made): (Option<String>, crate::state::prefix::Provenance),
    buf: usize,
) -> Result<(IndexEntry, bool), ImportError> {
    let prefix = &crate::private_dir::lexical_normalize(prefix);
    let dir = &crate::private_dir::lexical_normalize(&import.dir);
    let inside = |p: &Path| -> Result<String, ImportError> {
        p.strip_prefix(prefix)
            .ok()
            .filter(|rel| !rel.as_os_str().is_empty() && !rel.starts_with(".scr"))
            .map(|rel| rel.to_string_lossy().into_owned())
            .ok_or_else(|| ImportError::Outside {
                path: p.to_path_buf(),
                prefix: prefix.clone(),
            })
    };
    inside(dir)?;
    let assigned: Vec<(u32, PathBuf)> = match &import.list {
        Some(list) => read_list(list, dir)?,
        None => files_below(dir)?
            .into_iter()
            .zip(0u32..)
            .map(|(p, r)| (r, p))
            .collect(),
    };
    if assigned.is_empty() {
        return Err(ImportError::Empty { path: dir.clone() });
    }
    let mut ranks: BTreeMap<u32, Vec<FlushedFile>> = BTreeMap::new();
    for (rank, path) in &assigned {
        let name = inside(path)?;
        let (size, crc32) = size_and_crc(path, buf)?;
        ranks.entry(*rank).or_default().push(FlushedFile {
            name,
            size,
            crc32: Some(crc32),
            stored: None,
        });
    }
    let world_size = ranks.len() as u32;
    if !ranks.keys().copied().eq(0..world_size) {
        return Err(ImportError::Ranks {
            ranks: ranks.keys().copied().collect(),
        });
    }
    let name = import.name.clone().unwrap_or_else(|| {
        dir.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    });
    let index = Index::load_or_rebuild(prefix)?;
    if let Some(e) = index.datasets.values().find(|e| e.name == name) {
        return Err(ImportError::NameTaken {
            prefix: prefix.clone(),
            name,
            id: e.id,
        });
    }
    let ids = crate::runtime::Ids::load_at(prefix);
    let id = ids
        .dataset
        .max(index.datasets.keys().copied().max().unwrap_or(0))
        .max(largest_dataset_dir(prefix))
        + 1;
    let checkpoint_id = import.checkpoint_id.unwrap_or_else(|| {
        index
            .datasets
            .values()
            .filter_map(|e| e.checkpoint_id)
            .max()
            .unwrap_or(0)
            .max(ids.checkpoint)
            + 1
    });
    crate::runtime::Ids::record_at(prefix, id, ids.checkpoint.max(checkpoint_id))?;
    let summary = Summary {
        id,
        name,
        checkpoint_id: Some(checkpoint_id),
        world_size,
        files: ranks.values().map(|v| v.len() as u64).sum(),
        bytes: ranks.values().flatten().map(|f| f.size).sum(),
        complete: true,
        job_name: job_name.clone(),
        made: made.clone(),
    };
    Rank2File { ranks }.write(prefix, id, world_size, prefix::RANK2FILE_BLOCK)?;
    prefix::write(&Summary::path(prefix, id), "summary", &summary)?;
    Ok(index_add(prefix, &id.to_string(), false, job_name, buf)?)
}

/// The `RANK PATH` lines of `list`, paths relative to `dir` unless absolute.
fn read_list(list: &Path, dir: &Path) -> Result<Vec<(u32, PathBuf)>, ImportError> {
    let text = std::fs::read_to_string(list).map_err(|source| ImportError::Io {
        path: list.to_path_buf(),
        source,
    })?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let bad = |why: String| ImportError::List {
            path: list.to_path_buf(),
            line: n + 1,
            why,
        };
        let (rank, path) = line
            .split_once(char::is_whitespace)
            .ok_or_else(|| bad(format!("`{line}` has no path")))?;
        let rank: u32 = rank
            .parse()
            .map_err(|_| bad(format!("`{rank}` is not a rank number")))?;
        let path = Path::new(path.trim());
        out.push((rank, crate::private_dir::lexical_normalize(&dir.join(path))));
    }
    Ok(out)
}

/// Every regular file below `dir` (no link followed; a link is refused by name), in the
/// natural order of their paths.
fn files_below(dir: &Path) -> Result<Vec<PathBuf>, ImportError> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let entries = std::fs::read_dir(&d).map_err(|source| ImportError::Io {
            path: d.clone(),
            source,
        })?;
        for e in entries {
            let e = e.map_err(|source| ImportError::Io {
                path: d.clone(),
                source,
            })?;
            let path = e.path();
            let kind = e.file_type().map_err(|source| ImportError::Io {
                path: path.clone(),
                source,
            })?;
            if kind.is_dir() {
                todo.push(path);
            } else if kind.is_file() {
                found.push(path);
            } else {
                return Err(ImportError::File {
                    path,
                    why: "not a regular file (a link, a device, ...)".into(),
                });
            }
        }
    }
    found.sort_by_cached_key(|p| natural_key(&p.to_string_lossy()));
    Ok(found)
}

/// A sort key that orders runs of digits by their value: `rank_2` before `rank_10`.
fn natural_key(s: &str) -> Vec<(String, u128)> {
    let mut key = Vec::new();
    let mut text = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            let mut digits = c.to_string();
            while let Some(d) = chars.peek().copied().filter(char::is_ascii_digit) {
                digits.push(d);
                chars.next();
            }
            key.push((
                std::mem::take(&mut text),
                digits.parse().unwrap_or(u128::MAX),
            ));
        } else {
            text.push(c);
        }
    }
    key.push((text, 0));
    key
}

/// The size and CRC32 of the regular file `path` (a link or a missing file refused).
fn size_and_crc(path: &Path, buf: usize) -> Result<(u64, u32), ImportError> {
    let bad = |why: String| ImportError::File {
        path: path.to_path_buf(),
        why,
    };
    let meta = std::fs::symlink_metadata(path).map_err(|e| bad(e.to_string()))?;
    if !meta.file_type().is_file() {
        return Err(bad("not a regular file (a link, a directory, ...)".into()));
    }
    let crc = scr_plugin::verify::file_crc32(path, buf).map_err(|e| bad(e.to_string()))?;
    Ok((meta.len(), crc))
}

/// The largest dataset id with a directory under `.scr` (0: none).
fn largest_dataset_dir(prefix: &Path) -> u64 {
    std::fs::read_dir(prefix::scr_dir(prefix))
        .map(|it| {
            it.filter_map(Result::ok)
                .filter_map(|e| layout::parse_dataset_dir_name(&e.file_name().to_string_lossy()))
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A prefix with `files` (relative path, contents) written into it.
    fn prefix_with(files: &[(&str, &[u8])]) -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        for (name, body) in files {
            let p = t.path().join(name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, body).unwrap();
        }
        t
    }

    fn import_of(dir: &Path) -> Import {
        Import {
            dir: dir.to_path_buf(),
            name: None,
            list: None,
            checkpoint_id: None,
        }
    }

    #[test]
    fn files_are_ranks_in_natural_order_with_sizes_and_crcs_recorded() {
        let t = prefix_with(&[
            ("old/rank_10.dat", b"ten"),
            ("old/rank_2.dat", b"two!"),
            ("old/sub/rank_1.dat", b"one"),
        ]);
        let (e, current) = index_import(
            t.path(),
            &import_of(&t.path().join("old")),
            (None, Default::default()),
            4096,
        )
        .expect("imported");
        assert!(current);
        assert_eq!(
            (
                e.id,
                e.name.as_str(),
                e.checkpoint_id,
                e.world_size,
                e.complete
            ),
            (1, "old", Some(1), 3, true)
        );
        let map = Rank2File::load(t.path(), e.id).unwrap();
        let names: Vec<(u32, &str, u64, Option<u32>)> = map
            .ranks
            .iter()
            .flat_map(|(r, v)| {
                v.iter()
                    .map(move |f| (*r, f.name.as_str(), f.size, f.crc32))
            })
            .collect();
        assert_eq!(
            names,
            [
                (0, "old/rank_2.dat", 4, Some(crc32fast::hash(b"two!"))),
                (1, "old/rank_10.dat", 3, Some(crc32fast::hash(b"ten"))),
                (2, "old/sub/rank_1.dat", 3, Some(crc32fast::hash(b"one"))),
            ]
        );
        // the ids are used: the next import continues after them
        std::fs::create_dir_all(t.path().join("next")).unwrap();
        std::fs::write(t.path().join("next/a"), b"a").unwrap();
        let (e2, _) = index_import(
            t.path(),
            &import_of(&t.path().join("next")),
            (None, Default::default()),
            4096,
        )
        .expect("imported");
        assert_eq!((e2.id, e2.checkpoint_id), (2, Some(2)));
        let ids = crate::runtime::Ids::load_at(t.path());
        assert_eq!((ids.dataset, ids.checkpoint), (2, 2));
    }

    #[test]
    fn refusals_name_what_is_wrong_and_record_nothing() {
        let t = prefix_with(&[("d/a", b"a"), ("d/b", b"b")]);
        let list = t.path().join("list");
        let with_list = |text: &str| {
            std::fs::write(&list, text).unwrap();
            let mut i = import_of(&t.path().join("d"));
            i.list = Some(list.clone());
            index_import(t.path(), &i, (None, Default::default()), 4096)
                .map(|_| ())
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            with_list("0 a\n2 b\n"),
            "the files are assigned to ranks [0, 2]; every rank 0..2 must have a file (a rank with none wrote nothing and cannot be told apart from a missing line)"
        );
        assert_eq!(
            with_list("0 a\nx b\n"),
            format!(
                "{}:2: `x` is not a rank number; each line is `RANK PATH` (PATH relative to the directory imported, or absolute), `#` starts a comment",
                list.display()
            )
        );
        assert_eq!(
            with_list("0 a\n1 ../../elsewhere\n"),
            format!(
                "{}: not inside the prefix {}; imported files must lie in the prefix, where a restart reads them",
                t.path().parent().unwrap().join("elsewhere").display(),
                t.path().display()
            )
        );
        assert!(Index::load(t.path()).map_or(true, |ix| ix.datasets.is_empty()));
        // a name the index holds
        index_import(
            t.path(),
            &import_of(&t.path().join("d")),
            (None, Default::default()),
            4096,
        )
        .unwrap();
        let err = index_import(
            t.path(),
            &import_of(&t.path().join("d")),
            (None, Default::default()),
            4096,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("holds a dataset named `d` already (id 1)"),
            "{err}"
        );
    }

    #[test]
    fn natural_order_compares_digit_runs_by_value() {
        let mut v = ["r10", "r2", "r1", "q9", "r02x"];
        v.sort_by_cached_key(|s| natural_key(s));
        assert_eq!(v, ["q9", "r1", "r2", "r02x", "r10"]);
    }
}
