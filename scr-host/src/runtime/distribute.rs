//! Distribution at init: when ranks changed nodes, each rank's cached files and filemap
//! move to the rank that now owns them (point to point between the two ranks concerned).

use super::cache::{file_names, remove_files};
use super::restore::Restorer;
use super::tags::{MOVE_TAG, OFFER_TAG};
use super::world::Exchange;
use super::{DatasetRecord, Filemap, Result};
use crate::integrity::is_inside;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

impl Restorer<'_> {
    /// Move filemaps and files left on one node for ranks that now run on another
    /// (SCR's distribute step). Transfers run one at a time in an order every rank
    /// agrees on, so no two can deadlock.
    pub(in crate::runtime) fn distribute(&mut self) -> Result<()> {
        let mut offers: Vec<(u32, u32)> = Vec::new(); // (owner, holder)
        if self.topo.first_on_node() {
            for (owner, _) in Filemap::owners_in(self.job.cntl_dir()) {
                // an owner of this job that runs on another node now, holding a dataset
                // written by as many ranks as this job has (another job size's datasets
                // stay where they are: a restart of another size reads them in place)
                let moved = owner < self.topo.size()
                    && !self.topo.node_ranks().contains(&owner)
                    && Filemap::load(self.job.cntl_dir(), owner).map_or(true, |fm| {
                        fm.datasets.is_empty()
                            || fm
                                .datasets
                                .values()
                                .any(|d| d.world_size == 0 || d.world_size == self.topo.size())
                    });
                if moved {
                    offers.push((owner, self.topo.rank()));
                }
            }
        }
        // Each offer goes to its owner alone (a sparse exchange: per rank its own offers
        // plus one non-blocking barrier; was an all-gather of every offer, O(P)). The
        // holder sends and the owner receives its pairs in the order of (owner, holder):
        // the pair first in that order among those left is next on both its ranks, so
        // the blocking transfers cannot deadlock.
        let sends: Vec<(u32, Vec<u8>)> = offers
            .iter()
            .map(|&(owner, _)| (owner, vec![1u8])) // (never an empty buffer to MPI)
            .collect();
        let mut all: Vec<(u32, u32)> = offers;
        all.extend(
            self.world
                .sparse_exchange(&sends, OFFER_TAG)
                .into_iter()
                .map(|(holder, _)| (self.topo.rank(), holder)),
        );
        all.sort();
        let mut received = BTreeSet::new();
        for (owner, holder) in all {
            if self.topo.rank() == holder {
                self.send_filemap(owner)?;
            } else if self.topo.rank() == owner {
                self.receive_filemap(holder)?;
                received.insert(holder);
            }
        }
        if !received.is_empty() {
            self.topo.info(&format!(
                "rank {} received its cache from rank(s) {received:?}",
                self.topo.rank()
            ));
        }
        Ok(())
    }

    /// Whether a store's files are visible from every node (nothing to move).
    fn store_is_global(&self, store: &str) -> bool {
        store_is_global(self.config, store)
    }

    /// Send `owner`'s filemap and node-local files to it; delete them here only once the
    /// owner confirmed it holds them.
    fn send_filemap(&mut self, owner: u32) -> Result<()> {
        let peer = owner;
        let map = Filemap::load(self.job.cntl_dir(), owner).unwrap_or(Filemap {
            rank: owner,
            datasets: BTreeMap::new(),
        });
        self.world.send_value(peer, MOVE_TAG, &map);
        let mut buf = vec![0u8; MOVE_PIECE];
        for rec in map.datasets.values() {
            if self.store_is_global(&rec.descriptor.store) {
                continue;
            }
            let dir = self.job.dataset_dir(&rec.descriptor.store, rec.id);
            for name in file_names(rec) {
                let path = dir.join(&name);
                // a name that leaves the dataset directory, or a link on the way, is
                // never read: sent as gone
                let file = inside_dir(&dir, &name)
                    .map_err(|e| {
                        tracing::warn!("{e}; not sent");
                        std::io::Error::other(e)
                    })
                    .and_then(|()| {
                        scr_plugin::cachefs::open_file(&path).map_err(std::io::Error::other)
                    });
                let len = file
                    .as_ref()
                    .ok()
                    .and_then(|f| f.metadata().ok())
                    .map_or(u64::MAX, |m| m.len());
                self.world.send(peer, MOVE_TAG, &len.to_le_bytes());
                // (len is u64::MAX exactly when the file could not be opened or stat'ed)
                let mut f = match file {
                    Ok(f) if len != u64::MAX => f,
                    _ => continue, // this file is gone; the owner's verification will notice
                };
                let mut ok = true;
                let mut left = len;
                while left > 0 {
                    let n = left.min(MOVE_PIECE as u64) as usize;
                    if ok && f.read_exact(&mut buf[..n]).is_err() {
                        ok = false;
                    }
                    if !ok {
                        buf[..n].fill(0);
                    }
                    self.world.send(peer, MOVE_TAG, &buf[..n]);
                    left -= n as u64;
                }
                // whether the bytes sent are the file's: the owner drops it otherwise
                self.world.send(peer, MOVE_TAG, &[u8::from(ok)]);
            }
        }
        let mut ack = [0u8];
        self.world.recv_into(peer, MOVE_TAG, &mut ack);
        if ack[0] != 1 {
            tracing::warn!(
                "rank {owner} could not store its moved files; they stay on node {}",
                self.topo.node()
            );
            return Ok(());
        }
        for rec in map.datasets.values() {
            if !self.store_is_global(&rec.descriptor.store) {
                let dir = self.job.dataset_dir(&rec.descriptor.store, rec.id);
                if let Err(e) = remove_files(&dir, &file_names(rec)) {
                    tracing::warn!("{e}");
                }
            }
        }
        // with its journal: the records moved with the map
        if let Err(e) = Filemap::remove(self.job.cntl_dir(), owner) {
            tracing::warn!("{e}");
        }
        Ok(())
    }

    /// Receive this rank's filemap and files from `holder`: the records are saved first
    /// (nothing sits in cache unrecorded), then the files; every message is consumed even
    /// when writing fails, so the holder never waits forever, and the holder deletes its
    /// copies only after the acknowledgement.
    fn receive_filemap(&mut self, holder: u32) -> Result<()> {
        let peer = holder;
        let moved: Filemap = match self.world.recv_value(peer, MOVE_TAG, "filemap moved") {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!("{e}");
                Filemap {
                    rank: self.topo.rank(),
                    datasets: BTreeMap::new(),
                }
            }
        };
        let mut mine = Filemap::load(self.job.cntl_dir(), self.topo.rank()).unwrap_or(Filemap {
            rank: self.topo.rank(),
            datasets: BTreeMap::new(),
        });
        for rec in moved.datasets.values() {
            mine.datasets.entry(rec.id).or_insert_with(|| rec.clone());
        }
        let mut ok = mine
            .save(self.job.cntl_dir())
            .map_err(|e| tracing::warn!("{e}"))
            .is_ok();
        let mut buf = vec![0u8; MOVE_PIECE];
        for rec in moved.datasets.values() {
            if self.store_is_global(&rec.descriptor.store) {
                continue;
            }
            let dir = self.job.dataset_dir(&rec.descriptor.store, rec.id);
            for name in file_names(rec) {
                ok &= self.receive_moved_file(peer, rec, &dir, &name, &mut buf);
            }
        }
        self.world.send(peer, MOVE_TAG, &[u8::from(ok)]);
        Ok(())
    }

    /// Receive one moved file `name` of `rec` into `dir` (inside it only, every level
    /// private, never through a link), consuming every message even when writing fails.
    /// False when the holder sent it whole but it could not be stored here.
    fn receive_moved_file(
        &self,
        peer: u32,
        rec: &DatasetRecord,
        dir: &Path,
        name: &Path,
        buf: &mut [u8],
    ) -> bool {
        let mut len = [0u8; 8];
        self.world.recv_into(peer, MOVE_TAG, &mut len);
        let len = u64::from_le_bytes(len);
        if len == u64::MAX {
            // the holder could not read it: nothing follows, nothing to store
            return true;
        }
        let path = dir.join(name);
        // the name must stay inside the dataset directory; every directory level
        // is created 0700 and never followed through a link, the file 0600 and
        // never opened through one
        let base = Path::new(&rec.descriptor.store);
        let mut out = inside_dir(dir, name)
            .map_err(|e| e.to_string())
            .and_then(|()| {
                let parent = path.parent().unwrap_or(dir);
                crate::private_dir::create_private_dir(base, parent).map_err(|e| e.to_string())
            })
            .and_then(|()| scr_plugin::cachefs::create_file(&path).map_err(|e| e.to_string()))
            .map_err(|e| tracing::warn!("{e}"))
            .ok();
        let mut left = len;
        while left > 0 {
            let n = left.min(MOVE_PIECE as u64) as usize;
            self.world.recv_into(peer, MOVE_TAG, &mut buf[..n]);
            if let Some(f) = out.as_mut() {
                if f.write_all(&buf[..n]).is_err() {
                    out = None;
                }
            }
            left -= n as u64;
        }
        let mut sender_ok = [0u8];
        self.world.recv_into(peer, MOVE_TAG, &mut sender_ok);
        let sender_ok = sender_ok[0];
        // an application file gets back the mode it was recorded with (the
        // application's own, which a flush restores); redundancy files stay 0600
        let mode = rec.files.iter().find(|f| Path::new(&f.name) == name);
        let stored = sender_ok == 1
            && out.is_some_and(|f| {
                mode.filter(|m| m.mode != 0).is_none_or(|m| {
                    use std::os::unix::fs::PermissionsExt;
                    // (never setuid/setgid/sticky bits from a filemap)
                    f.set_permissions(std::fs::Permissions::from_mode(m.mode & 0o777))
                        .is_ok()
                }) && f.sync_all().is_ok()
            });
        if !stored {
            // a partial or unreadable copy must not pass for the file (only a
            // name inside the dataset directory is removed, through no link)
            if inside_dir(dir, name).is_ok() {
                let _ = remove_files(dir, &[name.to_path_buf()]);
            }
            return sender_ok != 1;
        }
        true
    }
}

/// Whether `store`'s files are visible from every node, as `config` describes it.
pub(in crate::runtime) fn store_is_global(config: &crate::config::Config, store: &str) -> bool {
    config
        .store(store)
        .is_some_and(|s| config.store_view(s) == crate::config::View::Global)
}

/// Piece size when moving file contents.
pub(in crate::runtime) const MOVE_PIECE: usize = 64 << 20;

/// A name read from a filemap that leaves the directory it is recorded for.
#[derive(Debug, thiserror::Error)]
#[error("`{}` is recorded in a filemap for {} but leaves it", .name.display(), .dir.display())]
pub(in crate::runtime) struct LeavesDir {
    name: PathBuf,
    dir: PathBuf,
}

/// `Err` naming the file unless `name` (read from a filemap) stays inside `dir`.
pub(in crate::runtime) fn inside_dir(
    dir: &Path,
    name: &Path,
) -> std::result::Result<(), LeavesDir> {
    if is_inside(&name.to_string_lossy()) {
        Ok(())
    } else {
        Err(LeavesDir {
            name: name.to_path_buf(),
            dir: dir.to_path_buf(),
        })
    }
}
