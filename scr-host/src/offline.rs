//! A redundancy set's `recover` run in one process: every member's scheme as a thread of
//! an in-process world ([`scr_plugin::inproc`]), the survivors from directories holding
//! their files as their records list them, the lost from empty directories; then what
//! the lost members got back checked against the CRC32s the redundancy data carries.
//!
//! Why one process: the members' scheme calls must run together, one per member, and
//! when the job that wrote the dataset is gone (`scr postrun`) or had another number of
//! ranks (a restart of another size, where one process may stand for several old ranks
//! of different sets) no set of processes matches the old sets one to one. The schemes
//! need no change: each sees a set of the old size and its own member index.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use abi_stable::std_types::{RNone, RSome};
use scr_plugin::RecoverRequest;

use crate::config::{settings, Config};
use crate::registry::{Registry, RegistryError};
use crate::state::filemap::{DatasetRecord, DescriptorRecord, FileRecord};

/// Why the scheme could not rebuild a set offline.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RebuildError {
    /// The scheme could not be made, or its `recover_files` failed.
    #[error("{0}")]
    Scheme(RegistryError),
    /// A lost member's staging directory could not be made.
    #[error("{}: {source}", path.display())]
    Io {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// What the scheme rebuilt does not check out.
    #[error("{scheme} rebuilt wrong data: {why}")]
    WrongData {
        /// The scheme.
        scheme: String,
        /// What is wrong.
        why: crate::integrity::VerifyError,
    },
}

/// One member of a set in an offline recovery.
pub(crate) struct Member<'a> {
    /// Its rank in the job that wrote the dataset.
    pub(crate) rank: u32,
    /// Its failure group (node), as its scheme saw it.
    pub(crate) group: String,
    /// Its directory: a survivor's files (and redundancy files) at the names its record
    /// lists; for a lost member, where its files are rebuilt (emptied first).
    pub(crate) dir: PathBuf,
    /// A survivor's record; `None` for a lost member.
    pub(crate) record: Option<&'a DatasetRecord>,
}

/// Rebuild the lost members of one set of dataset `id`, described by `d` (a survivor's
/// descriptor record): every member's scheme runs `recover_files` as a thread. Each lost
/// member's files (with their own record's names, sizes and CRC32s when `own` has one),
/// verified; `crc_expected` when the dataset recorded CRC32s.
pub(crate) fn recover_set(
    registry: &Registry,
    config: &Config,
    id: u64,
    d: &DescriptorRecord,
    members: &[Member<'_>],
    own: &BTreeMap<u32, DatasetRecord>,
    crc_expected: bool,
) -> Result<BTreeMap<u32, Vec<FileRecord>>, RebuildError> {
    let mut schemes = Vec::with_capacity(members.len());
    let mut requests = Vec::with_capacity(members.len());
    for (i, m) in members.iter().enumerate() {
        let scheme = registry
            .new_scheme(&config.recorded_scheme_config(d, i as u32, m.rank))
            .map_err(RebuildError::Scheme)?;
        let files = match m.record {
            Some(rec) => RSome(crate::integrity::dataset_files(rec, &m.dir).files),
            None => {
                let _ = std::fs::remove_dir_all(&m.dir);
                std::fs::create_dir_all(&m.dir).map_err(|source| RebuildError::Io {
                    path: m.dir.clone(),
                    source,
                })?;
                RNone
            }
        };
        schemes.push(scheme);
        requests.push(RecoverRequest {
            dataset_id: id,
            dir: m.dir.display().to_string().into(),
            files,
        });
    }
    let groups: Vec<&str> = members.iter().map(|m| m.group.as_str()).collect();
    let timeout = Duration::from_secs(config.get(settings::ABORT_TIMEOUT).max(60));
    let world = scr_plugin::inproc::World::new(&groups, timeout);
    let results = scr_plugin::inproc::run_in(&world, |host| {
        let i = host.rank() as usize;
        schemes[i]
            .raw()
            .recover_files(host.raw(), &requests[i])
            .into_result()
            .map(|v| v.into_vec())
            .map_err(|e| schemes[i].error("recover_files", e))
    });
    // what the scheme logged while rebuilding, with the rank it ran for
    let label = format!("scheme {}", d.scheme);
    for (member, level, message) in world.log_records() {
        let rank = members.get(member as usize).map_or(member, |m| m.rank);
        crate::log::plugin_message(level, rank, &label, &message);
    }
    let buf = config.file_buf_size();
    let mut out = BTreeMap::new();
    for (m, result) in members.iter().zip(results) {
        let metas = result.map_err(RebuildError::Scheme)?;
        if m.record.is_some() {
            continue;
        }
        let recs = crate::integrity::verify_rebuilt(
            m.rank,
            &metas,
            own.get(&m.rank),
            &m.dir,
            crc_expected,
            buf,
        )
        .map_err(|why| RebuildError::WrongData {
            scheme: d.scheme.clone(),
            why,
        })?;
        out.insert(m.rank, recs);
    }
    Ok(out)
}
