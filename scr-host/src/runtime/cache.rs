//! The cache at init and between checkpoints: moving files to the ranks that own them,
//! verifying and rebuilding datasets through their schemes, deleting and evicting.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use abi_stable::std_types::{RNone, ROption, RSome};
use mpi::traits::{Communicator as _, Destination as _, Source as _};
use scr_plugin::{DatasetFiles, FileMeta, RecoverRequest, SchemeConfig};
use serde::{Deserialize, Serialize};

use super::{all_gather_bytes, io_err, DatasetRecord, Filemap, Result, Runtime, ScrError, Set};

/// Tag of the messages that move files between ranks at init.
const MOVE_TAG: i32 = 7001;
/// Piece size when moving file contents.
const MOVE_PIECE: usize = 64 << 20;

/// What `stat_file` measured.
pub(super) struct Meta {
    pub size: u64,
    pub mode: u32,
    pub mtime: (i64, u32),
    pub crc32: Option<u32>,
}

/// Size, mode, mtime and (when asked) CRC32 of a file.
pub(super) fn stat_file(path: &Path, crc: bool, buf: usize) -> std::io::Result<Meta> {
    let md = std::fs::metadata(path)?;
    if !md.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let crc32 = if crc {
        let mut h = crc32fast::Hasher::new();
        let mut f = std::fs::File::open(path)?;
        let mut b = vec![0u8; buf];
        loop {
            let n = f.read(&mut b)?;
            if n == 0 {
                break;
            }
            h.update(&b[..n]);
        }
        Some(h.finalize())
    } else {
        None
    };
    Ok(Meta {
        size: md.len(),
        mode: md.mode() & 0o7777,
        mtime: (md.mtime(), md.mtime_nsec() as u32),
        crc32,
    })
}

/// The plugin's view of a dataset held in `dir`.
pub(super) fn dataset_files(rec: &DatasetRecord, dir: &Path) -> DatasetFiles {
    DatasetFiles {
        dataset_id: rec.id,
        dir: dir.display().to_string().into(),
        files: rec.files.iter().map(|f| file_meta(f, dir)).collect(),
    }
}

fn file_meta(f: &super::FileRecord, dir: &Path) -> FileMeta {
    FileMeta {
        path: dir.join(&f.name).display().to_string().into(),
        size: f.size,
        mode: f.mode,
        uid: 0,
        gid: 0,
        mtime_sec: f.mtime.0,
        mtime_nsec: f.mtime.1,
        atime_sec: f.mtime.0,
        atime_nsec: f.mtime.1,
        crc32: f.crc32.map_or(RNone, RSome),
    }
}

/// What each rank tells the others about a dataset it holds complete.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Summary {
    rank: u32,
    record: DatasetRecord,
}

impl Runtime {
    /// Move, verify and rebuild everything the cache holds; drop what cannot be saved.
    pub(super) fn restore_cache(&mut self) -> Result<()> {
        if self.config.bool("distribute") {
            self.distribute()?;
        }
        self.filemap = match Filemap::load(&self.cntl_dir, self.rank) {
            Ok(m) => m,
            Err(e) => {
                eprintln!(
                    "scr-rs[{}]: warning: {e}; treating this rank's cache as lost",
                    self.rank
                );
                Filemap {
                    rank: self.rank,
                    datasets: BTreeMap::new(),
                }
            }
        };
        // datasets that never completed (a crash inside an output) are garbage
        let incomplete: Vec<DatasetRecord> = self
            .filemap
            .datasets
            .values()
            .filter(|d| !d.complete)
            .cloned()
            .collect();
        for d in &incomplete {
            self.remove_local(d)?;
        }

        let mine: Vec<Summary> = self
            .filemap
            .datasets
            .values()
            .map(|d| Summary {
                rank: self.rank,
                record: d.clone(),
            })
            .collect();
        let bytes = serde_json::to_vec(&mine).expect("summaries serialize");
        let all: Vec<Summary> = all_gather_bytes(&self.world, &bytes)
            .into_iter()
            .flat_map(|b| serde_json::from_slice::<Vec<Summary>>(&b).unwrap_or_default())
            .collect();
        let mut by_id: BTreeMap<u64, Vec<&Summary>> = BTreeMap::new();
        for s in &all {
            by_id.entry(s.record.id).or_default().push(s);
        }
        let max_dataset = by_id.keys().max().copied().unwrap_or(0);
        let max_ckpt = all
            .iter()
            .filter_map(|s| s.record.checkpoint_id)
            .max()
            .unwrap_or(0);
        self.next_dataset = max_dataset + 1;
        self.next_checkpoint = max_ckpt + 1;

        for (&id, holders) in by_id.iter().rev() {
            self.restore_dataset(id, holders)?;
        }
        Ok(())
    }

    /// Verify (and, through the scheme, rebuild) dataset `id` on every rank, or drop it
    /// everywhere. Collective.
    fn restore_dataset(&mut self, id: u64, holders: &[&Summary]) -> Result<()> {
        let own = self.filemap.datasets.get(&id).cloned();
        // the record that says which set this rank belonged to
        let template = own.clone().or_else(|| {
            holders
                .iter()
                .find(|s| s.record.descriptor.members.contains(&self.rank))
                .map(|s| s.record.clone())
        });
        let set = template.as_ref().map(|t| Set {
            id: t.descriptor.set_id,
            members: t.descriptor.members.clone(),
        });
        let host = self.set_host(set.as_ref(), &self.nodes);
        let scheme = template.as_ref().map(|t| {
            self.registry.new_scheme(&SchemeConfig {
                scheme: t.descriptor.scheme.as_str().into(),
                params: t
                    .descriptor
                    .params
                    .iter()
                    .map(|(k, v)| scr_plugin::Param {
                        key: k.as_str().into(),
                        value: v.as_str().into(),
                    })
                    .collect(),
                settings: self.config.plugin_settings(&t.descriptor.scheme).into(),
                members: t.descriptor.members.len() as u32,
                member: t
                    .descriptor
                    .members
                    .iter()
                    .position(|&m| m == self.rank)
                    .unwrap_or(0) as u32,
                world_rank: self.rank,
            })
        });
        let ready = matches!((&host, &scheme), (Some(_), Some(Ok(_))));
        let name = template
            .as_ref()
            .or(holders.first().map(|s| &s.record))
            .map(|r| r.name.clone())
            .unwrap_or_default();

        // intact files on this rank?
        let intact = own.as_ref().is_some_and(|rec| {
            let dir = self.dataset_dir(&rec.descriptor.store, id);
            rec.files.iter().all(|f| {
                std::fs::metadata(dir.join(&f.name)).is_ok_and(|m| m.is_file() && m.len() == f.size)
            })
        });
        let mut outcome: std::result::Result<Vec<FileMeta>, String> =
            Err("this rank is in no redundancy set for it".into());
        if self.all_agree(ready) {
            let (Some(host), Some(Ok(scheme)), Some(t)) = (&host, &scheme, &template) else {
                unreachable!("ready on every rank")
            };
            let dir = self.dataset_dir(&t.descriptor.store, id);
            std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
            let files: ROption<abi_stable::std_types::RVec<FileMeta>> = match (&own, intact) {
                (Some(rec), true) => RSome(dataset_files(rec, &dir).files),
                _ => RNone,
            };
            let request = RecoverRequest {
                dataset_id: id,
                dir: dir.display().to_string().into(),
                files,
            };
            outcome = scheme
                .raw()
                .recover(scr_plugin::host_ref(host), &request)
                .into_result()
                .map(|v| v.into_vec())
                .map_err(|e| scheme.error("recover", e).to_string());
        } else if let Some(Err(e)) = &scheme {
            outcome = Err(e.to_string());
        }
        let kept = self.all_agree(outcome.is_ok());
        if kept {
            if !intact {
                // rebuilt here: record the files the scheme restored
                let mut rec = template.expect("a member of the set");
                let dir = self.dataset_dir(&rec.descriptor.store, id);
                let metas = outcome.expect("kept");
                rec.files = metas
                    .iter()
                    .map(|m| super::FileRecord {
                        name: Path::new(m.path.as_str())
                            .strip_prefix(&dir)
                            .unwrap_or(Path::new(m.path.as_str()))
                            .to_string_lossy()
                            .into_owned(),
                        size: m.size,
                        mode: m.mode,
                        mtime: (m.mtime_sec, m.mtime_nsec),
                        crc32: m.crc32.into_option(),
                    })
                    .collect();
                rec.complete = true;
                // this rank's redundancy files, as the scheme names them
                if let Some(Ok(scheme)) = &scheme {
                    let ds = dataset_files(&rec, &dir);
                    if let Ok(red) = scheme.raw().redundancy_files(&ds).into_result() {
                        rec.redundancy = red
                            .iter()
                            .map(|p| {
                                let p = Path::new(p.as_str());
                                p.strip_prefix(&dir)
                                    .unwrap_or(p)
                                    .to_string_lossy()
                                    .into_owned()
                            })
                            .collect();
                    }
                }
                self.filemap.datasets.insert(id, rec);
                self.save_filemap()?;
            }
            return Ok(());
        }
        // dropped everywhere: say which ranks lacked their files, and why
        let lacking = all_gather_bytes(&self.world, &[u8::from(!intact)]);
        let ranks: Vec<String> = lacking
            .iter()
            .enumerate()
            .filter(|(_, b)| b.first() == Some(&1))
            .map(|(r, _)| r.to_string())
            .collect();
        let why = outcome.err().unwrap_or_default();
        let report = format!(
            "dataset {id} ({name}) cannot be restored and was dropped: ranks without their files: [{}]; {why}",
            ranks.join(", ")
        );
        self.warn(&report);
        self.lost.push(report);
        if let Some(rec) = own {
            self.remove_local(&rec)?;
        }
        Ok(())
    }

    /// Delete this rank's files of a dataset (other ranks on the node share the dataset
    /// directory) and forget it.
    pub(super) fn remove_local(&mut self, rec: &DatasetRecord) -> Result<()> {
        let dir = self.dataset_dir(&rec.descriptor.store, rec.id);
        remove_files(&dir, &file_names(rec))?;
        self.filemap.datasets.remove(&rec.id);
        self.save_filemap()
    }

    /// Delete a dataset on this rank (every rank calls it for a collective delete).
    pub(super) fn delete_dataset(&mut self, rec: &DatasetRecord) -> Result<()> {
        self.remove_local(rec)
    }

    /// Evict the oldest datasets of `store` until `room` more fit under its count, never
    /// evicting the newest complete checkpoint (the restart point).
    pub(super) fn evict(&mut self, store: &str, room: u64) -> Result<()> {
        let limit = self
            .config
            .store(store)
            .map(|s| self.config.store_count(s))
            .unwrap_or_else(|| self.config.u64("cache_size"))
            .max(1);
        let protected = self.restart_candidate_any();
        loop {
            let held: Vec<DatasetRecord> = self
                .filemap
                .datasets
                .values()
                .filter(|d| d.descriptor.store == store)
                .cloned()
                .collect();
            if (held.len() as u64) + room <= limit {
                return Ok(());
            }
            let Some(victim) = held.into_iter().find(|d| Some(d.id) != protected) else {
                return Ok(());
            };
            self.info(&format!(
                "evicting dataset {} ({}) from {store}",
                victim.id, victim.name
            ));
            self.remove_local(&victim)?;
        }
    }

    /// The newest complete checkpoint, skipped or not.
    fn restart_candidate_any(&self) -> Option<u64> {
        self.filemap
            .datasets
            .values()
            .filter(|d| d.complete && d.checkpoint_id.is_some())
            .max_by_key(|d| d.checkpoint_id)
            .map(|d| d.id)
    }

    /// Move filemaps and files left on one node for ranks that now run on another
    /// (SCR's distribute step). Transfers run one at a time in an order every rank
    /// agrees on, so no two can deadlock.
    fn distribute(&mut self) -> Result<()> {
        let first_on_node =
            self.nodes.iter().position(|n| *n == self.node) == Some(self.rank as usize);
        let mut offers: Vec<(u32, u32)> = Vec::new(); // (owner, holder)
        if first_on_node {
            for (owner, _) in Filemap::owners_in(&self.cntl_dir) {
                let moved = self
                    .nodes
                    .get(owner as usize)
                    .is_some_and(|n| *n != self.node);
                if moved {
                    offers.push((owner, self.rank));
                }
            }
        }
        let bytes = serde_json::to_vec(&offers).expect("offers serialize");
        let mut all: Vec<(u32, u32)> = all_gather_bytes(&self.world, &bytes)
            .into_iter()
            .flat_map(|b| serde_json::from_slice::<Vec<(u32, u32)>>(&b).unwrap_or_default())
            .collect();
        all.sort();
        let mut received = BTreeSet::new();
        for (owner, holder) in all {
            if self.rank == holder {
                self.send_filemap(owner)?;
            } else if self.rank == owner {
                self.receive_filemap(holder)?;
                received.insert(holder);
            }
        }
        if !received.is_empty() {
            self.info(&format!(
                "rank {} received its cache from rank(s) {received:?}",
                self.rank
            ));
        }
        Ok(())
    }

    fn send_filemap(&mut self, owner: u32) -> Result<()> {
        let peer = self.world.process_at_rank(owner as i32);
        let map = Filemap::load(&self.cntl_dir, owner).unwrap_or(Filemap {
            rank: owner,
            datasets: BTreeMap::new(),
        });
        send_blob(
            &peer,
            &serde_json::to_vec(&map).expect("filemap serializes"),
        );
        for rec in map.datasets.values() {
            let dir = self.dataset_dir(&rec.descriptor.store, rec.id);
            for name in file_names(rec) {
                let path = dir.join(&name);
                match std::fs::read(&path) {
                    Ok(data) => {
                        peer.send_with_tag(&(data.len() as u64), MOVE_TAG);
                        for piece in data.chunks(MOVE_PIECE) {
                            peer.send_with_tag(piece, MOVE_TAG);
                        }
                    }
                    Err(_) => peer.send_with_tag(&u64::MAX, MOVE_TAG),
                }
            }
            remove_files(&dir, &file_names(rec))?;
        }
        let file = self.cntl_dir.join(Filemap::file_name(owner));
        std::fs::remove_file(&file).map_err(io_err(&file))
    }

    fn receive_filemap(&mut self, holder: u32) -> Result<()> {
        let peer = self.world.process_at_rank(holder as i32);
        let blob = recv_blob(&peer);
        let moved: Filemap = serde_json::from_slice(&blob).map_err(|e| {
            ScrError::Collective(format!(
                "filemap moved from rank {holder} is unreadable: {e}"
            ))
        })?;
        let mut mine = Filemap::load(&self.cntl_dir, self.rank).unwrap_or(Filemap {
            rank: self.rank,
            datasets: BTreeMap::new(),
        });
        for rec in moved.datasets.values() {
            let dir = self.dataset_dir(&rec.descriptor.store, rec.id);
            for name in file_names(rec) {
                let mut len = 0u64;
                peer.receive_into_with_tag(&mut len, MOVE_TAG);
                if len == u64::MAX {
                    continue; // the holder no longer had this file
                }
                let path = dir.join(&name);
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).map_err(io_err(parent))?;
                }
                let mut f = std::fs::File::create(&path).map_err(io_err(&path))?;
                let mut left = len as usize;
                while left > 0 {
                    let n = left.min(MOVE_PIECE);
                    let mut piece = vec![0u8; n];
                    peer.receive_into_with_tag(&mut piece[..], MOVE_TAG);
                    f.write_all(&piece).map_err(io_err(&path))?;
                    left -= n;
                }
                f.sync_all().map_err(io_err(&path))?;
            }
            mine.datasets.entry(rec.id).or_insert_with(|| rec.clone());
        }
        mine.save(&self.cntl_dir)
            .map_err(io_err(&self.cntl_dir.join(Filemap::file_name(self.rank))))
    }
}

/// Delete `names` (relative to `dir`), then every directory from their parents up to
/// `dir` that is left empty. Files already gone are fine.
fn remove_files(dir: &Path, names: &[PathBuf]) -> Result<()> {
    for name in names {
        let path = dir.join(name);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(ScrError::Io { path, source: e }),
        }
        let mut parent = path.parent();
        while let Some(p) = parent.filter(|p| p.starts_with(dir) && *p != dir) {
            if std::fs::remove_dir(p).is_err() {
                break; // not empty: another rank's file still lives here
            }
            parent = p.parent();
        }
    }
    let _ = std::fs::remove_dir(dir); // only when empty
    Ok(())
}

/// Application and redundancy files of a dataset, relative to its directory.
fn file_names(rec: &DatasetRecord) -> Vec<PathBuf> {
    rec.files
        .iter()
        .map(|f| PathBuf::from(&f.name))
        .chain(rec.redundancy.iter().map(PathBuf::from))
        .collect()
}

fn send_blob(peer: &mpi::topology::Process<'_>, bytes: &[u8]) {
    peer.send_with_tag(&(bytes.len() as u64), MOVE_TAG);
    peer.send_with_tag(bytes, MOVE_TAG);
}

fn recv_blob(peer: &mpi::topology::Process<'_>) -> Vec<u8> {
    let mut len = 0u64;
    peer.receive_into_with_tag(&mut len, MOVE_TAG);
    let mut buf = vec![0u8; len as usize];
    peer.receive_into_with_tag(&mut buf[..], MOVE_TAG);
    buf
}
