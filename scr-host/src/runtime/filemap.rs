//! The filemap: per rank, every dataset it holds in cache and every file of each, recorded
//! *before* the file exists (so nothing ever sits in cache unrecorded), with the metadata
//! and redundancy descriptor needed to verify, rebuild, move or delete it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::state::{read_state, write_private_state, StateError};

/// State-file kind of filemaps.
pub const KIND: &str = "filemap";

/// The redundancy descriptor a dataset was protected with, as recorded (so a later run
/// with another configuration can still rebuild it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DescriptorRecord {
    /// Index of the descriptor in the configuration of the run that wrote it.
    pub index: usize,
    /// Scheme name.
    pub scheme: String,
    /// Parameters passed to the scheme.
    pub params: Vec<(String, String)>,
    /// Failure group name.
    pub group: String,
    /// Store path.
    pub store: String,
    /// Redundancy set id.
    pub set_id: u64,
    /// World ranks of the set's members, in member order.
    pub members: Vec<u32>,
}

/// One application file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRecord {
    /// Path relative to the dataset directory (and to the prefix).
    pub name: String,
    /// Size in bytes once complete.
    pub size: u64,
    /// Permission bits.
    pub mode: u32,
    /// Modification time (seconds, nanoseconds).
    pub mtime: (i64, u32),
    /// CRC32 when `crc_on_copy` was set.
    pub crc32: Option<u32>,
}

/// One dataset held by this rank.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatasetRecord {
    /// Dataset id (every output).
    pub id: u64,
    /// Name given by the application.
    pub name: String,
    /// Checkpoint id, for checkpoints.
    pub checkpoint_id: Option<u64>,
    /// Also an output dataset.
    pub output: bool,
    /// Every rank completed it and redundancy was applied.
    pub complete: bool,
    /// How it is protected.
    pub descriptor: DescriptorRecord,
    /// Application files.
    pub files: Vec<FileRecord>,
    /// Redundancy files, relative to the dataset directory.
    pub redundancy: Vec<String>,
    /// Ranks in the job that wrote it (a restart needs as many).
    #[serde(default)]
    pub world_size: u32,
}

/// All datasets one rank holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Filemap {
    /// The world rank whose files these are.
    pub rank: u32,
    /// By dataset id.
    pub datasets: BTreeMap<u64, DatasetRecord>,
}

impl Filemap {
    /// The file name of rank `rank`'s filemap in a control directory.
    pub fn file_name(rank: u32) -> String {
        format!("filemap_{rank}.scr")
    }

    /// The owner rank of a filemap file name, if it is one.
    pub fn owner_of(file_name: &str) -> Option<u32> {
        file_name
            .strip_prefix("filemap_")?
            .strip_suffix(".scr")?
            .parse()
            .ok()
    }

    /// Read `dir`'s filemap of `rank`; a missing file is an empty filemap.
    pub fn load(dir: &Path, rank: u32) -> Result<Filemap, StateError> {
        match read_state(&dir.join(Self::file_name(rank)), KIND) {
            Ok(m) => Ok(m),
            Err(e) if e.is_not_found() => Ok(Filemap {
                rank,
                datasets: BTreeMap::new(),
            }),
            Err(e) => Err(e),
        }
    }

    /// Write it atomically into `dir`, mode 0600.
    pub fn save(&self, dir: &Path) -> std::io::Result<()> {
        write_private_state(&dir.join(Self::file_name(self.rank)), KIND, self)
    }

    /// Filemap owners present in a control directory.
    pub fn owners_in(dir: &Path) -> Vec<(u32, PathBuf)> {
        let mut v: Vec<(u32, PathBuf)> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                Some((Self::owner_of(&name)?, e.path()))
            })
            .collect();
        v.sort();
        v
    }
}
