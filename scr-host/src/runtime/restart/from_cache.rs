//! A restart by another number of ranks from the old job's caches (same nodes, N ranks
//! wrote, M ranks restart): no read of the prefix.
//!
//! Each old rank's files are where that rank's filemap is: in the cache of the node whose
//! control directory holds `filemap_<w>`. The ranks now on a node share that node's
//! filemaps between them; each offers the old ranks' files it handles to the new ranks
//! whose share of the work overlaps them (old rank `w` of N covers `[w/N, (w+1)/N)`, new
//! rank `r` of M covers `[r/M, (r+1)/M)`), in one sparse exchange of metadata. A new rank
//! on the same node reads them where they are (checked when routed, as any restart
//! file); a rank on another node asks for their bytes, and the holder sends them in
//! pieces, checked against the recorded size and CRC32 as they arrive, into a directory
//! of this restart that its end removes. The transfers run in one order every rank
//! agrees on ((writer, receiver) pairs ascending), so blocking sends cannot deadlock.
//!
//! Every old rank of the share must be offered exactly once, by a holder whose record
//! names the same checkpoint; otherwise (a node's cache lost, a copy that does not
//! check) every rank says so alike and the restart takes the prefix's copy or an older
//! checkpoint. Per rank: four reductions, a broadcast of the checkpoint's identity, two
//! sparse exchanges of O(N/M + 1) messages, and the share's bytes.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::state::PrefixRestart;
use super::writers::WriterLists;
use super::Restarter;
use crate::config::settings;
use crate::runtime::distribute::{inside_dir, MOVE_PIECE};
use crate::runtime::tags::RESIZE_TAGS;
use crate::runtime::world::Exchange;
use crate::runtime::{DatasetRecord, Filemap, Result};
use crate::state::prefix::{FlushedFile, Index};

/// An old rank's files of the checkpoint, offered by the rank that handles its filemap.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Offer {
    /// The old rank.
    writer: u32,
    /// The node whose cache holds them.
    node: String,
    /// The store they are in.
    store: String,
    /// The checkpoint's name, checkpoint id and writers, which every offer must share.
    name: String,
    checkpoint_id: Option<u64>,
    writers: u32,
    /// Its files (names relative to the dataset directory, sizes, CRC32s).
    files: Vec<FlushedFile>,
}

impl Offer {
    fn of(writer: u32, node: &str, rec: &DatasetRecord) -> Offer {
        Offer {
            writer,
            node: node.to_string(),
            store: rec.descriptor.store.clone(),
            name: rec.name.clone(),
            checkpoint_id: rec.checkpoint_id,
            writers: rec.world_size,
            files: rec
                .files
                .iter()
                .map(|f| FlushedFile {
                    name: f.name.clone(),
                    size: f.size,
                    crc32: f.crc32,
                    stored: None,
                })
                .collect(),
        }
    }
}

/// The old ranks (of `n`) whose share of the work overlaps new rank `r`'s (of `m`).
pub(in crate::runtime) fn share_of(r: u32, n: u32, m: u32) -> std::ops::Range<u32> {
    let (r, n, m) = (u64::from(r), u64::from(n), u64::from(m));
    // w overlaps r when w·m < (r+1)·n and (w+1)·m > r·n
    let lo = (r * n) / m;
    let hi = ((r + 1) * n).div_ceil(m).min(n);
    lo as u32..hi as u32
}

/// The new ranks (of `m`) whose share overlaps old rank `w`'s (of `n`).
fn readers_of(w: u32, n: u32, m: u32) -> std::ops::Range<u32> {
    share_of(w, m, n)
}

impl Restarter<'_> {
    /// Offer the newest checkpoint of another number of ranks that the nodes' caches
    /// hold, when its checkpoint id is above `newer_than`, at least `from` (the
    /// prefix's newest: the caches' copy of the same checkpoint is read rather than the
    /// prefix's) and below `below` (collective).
    /// Whether one is offered; when none can be (none cached, or an old rank's files in
    /// no cache or not checking), every rank returns `false` alike, and says why once.
    pub(in crate::runtime) fn restart_from_old_caches(
        &mut self,
        newer_than: Option<u64>,
        from: Option<u64>,
        below: Option<u64>,
    ) -> Result<bool> {
        let (me, m) = (self.topo.rank(), self.topo.size());
        let handled = self.handled_filemaps();
        let fits = |d: &DatasetRecord| {
            d.complete
                && d.world_size != m
                && d.world_size > 0
                && d.checkpoint_id.is_some_and(|c| {
                    newer_than.is_none_or(|t| c > t)
                        && from.is_none_or(|f| c >= f)
                        && below.is_none_or(|b| c < b)
                })
        };
        // the newest such checkpoint, then the largest dataset id of that checkpoint
        let datasets = || handled.iter().flat_map(|(_, fm)| fm.datasets.values());
        let newest = datasets()
            .filter(|d| fits(d))
            .filter_map(|d| d.checkpoint_id)
            .max();
        let newest = self.world.max_u64(newest.map_or(0, |c| c + 1));
        if newest == 0 {
            return Ok(false);
        }
        let ckpt = newest - 1;
        let id = datasets()
            .filter(|d| fits(d) && d.checkpoint_id == Some(ckpt))
            .map(|d| d.id + 1)
            .max()
            .unwrap_or(0);
        let id = self.world.max_u64(id) - 1;
        let mine: Vec<(u32, DatasetRecord)> = handled
            .iter()
            .filter_map(|(w, fm)| {
                fm.datasets
                    .get(&id)
                    .filter(|d| fits(d))
                    .map(|d| (*w, d.clone()))
            })
            .collect();
        // what every offer must name: the lowest holder's record
        let first = self
            .world
            .min_u64(if mine.is_empty() { u64::MAX } else { me.into() });
        if first == u64::MAX {
            return Ok(false);
        }
        let ident = mine.first().map(|(_, r)| (r.name.clone(), r.world_size));
        let Ok((name, n)) =
            self.world
                .broadcast_value(first as u32, ident.as_ref(), "checkpoint identity")
        else {
            return Ok(false);
        };
        let share = share_of(me, n, m);
        let offers = self.exchange_offers(&mine, n, &share, &name);
        let offers = match self.agreed(&name, n, offers) {
            Some(o) => o,
            None => return Ok(false),
        };
        // the bytes of the share held on other nodes, copied here
        let store = offers
            .values()
            .next()
            .map(|(_, o)| o.store.clone())
            .unwrap_or_default();
        let staging = self
            .job
            .store_dir(&store)
            .join(format!("scr.resize.{id}.{me}"));
        let copied = self.copy_share(&mine, &offers, &staging, id);
        let failed = copied.as_ref().err().map(String::as_str);
        if let Some((rank, why)) = crate::runtime::first_failure(self.world.as_dyn(), failed) {
            let _ = std::fs::remove_dir_all(&staging);
            self.topo.warn(&format!(
                "{name} (written by {n} ranks) cannot be read from the nodes' caches: rank {rank}: {why}"
            ));
            return Ok(false);
        }
        let copied = copied.unwrap_or_default();
        let cached = offers
            .iter()
            .map(|(w, (_, o))| {
                let dir = self.job.dataset_dir(&o.store, id);
                let files = o
                    .files
                    .iter()
                    .map(|f| match copied.get(&f.name) {
                        Some(path) => (f.clone(), path.clone(), true),
                        None => (f.clone(), dir.join(&f.name), false),
                    })
                    .collect();
                (*w, files)
            })
            .collect();
        let lists = WriterLists::cached(
            cached,
            Some(share),
            (!copied.is_empty()).then_some(staging),
            self.config.get(settings::CRC_ON_RESTART),
            self.config.file_buf_size(),
        );
        let lists = match self.prefix_layout(id) {
            Some(layout) => lists.with_prefix(self.job.prefix(), id, n, &layout),
            None => lists,
        };
        self.cache.used(Some(id), Some(ckpt));
        self.topo.info(&format!(
            "restarting from {name} (written by {n} ranks, read by {m}) from the nodes' caches"
        ));
        self.restart.offer_in_prefix(PrefixRestart::new(
            id,
            name,
            Some(ckpt),
            BTreeMap::new(),
            n,
            Some(lists),
        ));
        Ok(true)
    }

    /// The filemaps of old ranks in this node's control directory that this rank
    /// handles: the node's ranks take them in turn, in rank order.
    fn handled_filemaps(&self) -> Vec<(u32, Filemap)> {
        let node = self.topo.node_ranks();
        let k = node.len().max(1);
        let i = node
            .iter()
            .position(|&r| r == self.topo.rank())
            .unwrap_or(0);
        Filemap::owners_in(self.job.cntl_dir())
            .into_iter()
            .enumerate()
            .filter(|(j, _)| j % k == i)
            .filter_map(|(_, (w, _))| Filemap::load(self.job.cntl_dir(), w).ok().map(|fm| (w, fm)))
            .collect()
    }

    /// Offer each old rank's files this rank holds (`mine`) to the new ranks whose share
    /// overlaps them, and take the offers for this rank's `share`: by old rank, with the
    /// rank that offered them; or why not (an old rank offered twice, or not at all, or
    /// another checkpoint than `name` of `n` ranks).
    fn exchange_offers(
        &self,
        mine: &[(u32, DatasetRecord)],
        n: u32,
        share: &std::ops::Range<u32>,
        name: &str,
    ) -> std::result::Result<BTreeMap<u32, (u32, Offer)>, String> {
        let m = self.topo.size();
        let sends: Vec<(u32, Offer)> = mine
            .iter()
            .flat_map(|(w, rec)| {
                let offer = Offer::of(*w, self.topo.node(), rec);
                readers_of(*w, n, m).map(move |r| (r, offer.clone()))
            })
            .collect();
        let got = self.world.sparse_exchange_values::<_, Offer>(
            &sends,
            RESIZE_TAGS[0],
            "old rank's files",
        );
        let mut offers = BTreeMap::new();
        let mut why = None;
        for (from, offer) in got {
            let offer = match offer {
                Ok(o) => o,
                Err(e) => {
                    why.get_or_insert(e.to_string());
                    continue;
                }
            };
            if offer.name != name || offer.writers != n || !share.contains(&offer.writer) {
                why.get_or_insert(format!(
                    "rank {from} offered {} of {} ranks as old rank {}'s, where {name} of {n} ranks was chosen",
                    offer.name, offer.writers, offer.writer
                ));
            } else if let Some((other, _)) = offers.insert(offer.writer, (from, offer.clone())) {
                why.get_or_insert(format!(
                    "ranks {other} and {from} both hold old rank {}'s files",
                    offer.writer
                ));
            }
        }
        if let Some(w) = share.clone().find(|w| !offers.contains_key(w)) {
            why.get_or_insert(format!(
                "no node's cache holds the files of old rank {w} (its node was lost or replaced)"
            ));
        }
        match why {
            Some(why) => Err(why),
            None => Ok(offers),
        }
    }

    /// The offers, once every rank has its share's (agreed); `None` on every rank when
    /// some rank has not, said once.
    fn agreed(
        &self,
        name: &str,
        n: u32,
        offers: std::result::Result<BTreeMap<u32, (u32, Offer)>, String>,
    ) -> Option<BTreeMap<u32, (u32, Offer)>> {
        let failed = offers.as_ref().err().map(String::as_str);
        match crate::runtime::first_failure(self.world.as_dyn(), failed) {
            Some((rank, why)) => {
                self.topo.info(&format!(
                    "{name} (written by {n} ranks) cannot be read from the nodes' caches: rank {rank}: {why}"
                ));
                None
            }
            None => offers.ok(),
        }
    }

    /// Copy the share's files that another node holds into `staging` (asking their
    /// holders), and send the files of `mine` that other nodes' ranks ask for. The copies
    /// by name, each checked as it arrived; or the first thing that failed here.
    fn copy_share(
        &self,
        mine: &[(u32, DatasetRecord)],
        offers: &BTreeMap<u32, (u32, Offer)>,
        staging: &Path,
        id: u64,
    ) -> std::result::Result<BTreeMap<String, PathBuf>, String> {
        let me = self.topo.rank();
        let remote: Vec<(u32, &Offer)> = offers
            .values()
            .filter(|(_, o)| o.node != self.topo.node() && !self.store_is_global(&o.store))
            .map(|(from, o)| (*from, o))
            .collect();
        let asks: Vec<(u32, u32)> = remote.iter().map(|(from, o)| (*from, o.writer)).collect();
        let asked =
            self.world
                .sparse_exchange_values::<_, u32>(&asks, RESIZE_TAGS[1], "request for files");
        // every transfer in (writer, receiver) order, on both of its ranks
        let mut pairs: Vec<(u32, u32, u32)> = Vec::new(); // (writer, receiver, sender)
        let mut why = None;
        for (to, w) in asked {
            match w {
                Ok(w) => pairs.push((w, to, me)),
                Err(e) => {
                    why.get_or_insert(e.to_string());
                }
            }
        }
        pairs.extend(remote.iter().map(|(from, o)| (o.writer, me, *from)));
        pairs.sort_unstable();
        let mut copied = BTreeMap::new();
        let mut buf = vec![0u8; MOVE_PIECE.min(self.config.file_buf_size().max(1 << 20))];
        for (w, to, from) in pairs {
            if from == me {
                // (a rank asks only the rank that offered it `w`: this one holds it)
                if let Some((_, rec)) = mine.iter().find(|(x, _)| *x == w) {
                    self.send_files(to, rec, id, &mut buf);
                }
            } else {
                let offer = &offers[&w].1;
                for f in &offer.files {
                    match self.receive_file(from, f, staging, &mut buf) {
                        Ok(path) => {
                            copied.insert(f.name.clone(), path);
                        }
                        Err(e) => {
                            why.get_or_insert(format!(
                                "{e} (a file of old rank {w}, from rank {from})"
                            ));
                        }
                    }
                }
            }
        }
        match why {
            Some(why) => Err(why),
            None => Ok(copied),
        }
    }

    /// Send the files of `rec` (this node's cache) to `to`: per file its length
    /// (`u64::MAX`: unreadable, nothing follows), its pieces, and whether they are the
    /// file's bytes.
    fn send_files(&self, to: u32, rec: &DatasetRecord, id: u64, buf: &mut [u8]) {
        let dir = self.job.dataset_dir(&rec.descriptor.store, id);
        for f in &rec.files {
            let name = Path::new(&f.name);
            let file = inside_dir(&dir, name)
                .map_err(std::io::Error::other)
                .and_then(|()| {
                    scr_plugin::cachefs::open_file(&dir.join(name)).map_err(std::io::Error::other)
                });
            let len = file
                .as_ref()
                .ok()
                .and_then(|f| f.metadata().ok())
                .map_or(u64::MAX, |m| m.len());
            self.world.send(to, RESIZE_TAGS[2], &len.to_le_bytes());
            let mut file = match file {
                Ok(file) if len != u64::MAX => file,
                _ => continue,
            };
            let mut ok = true;
            let mut left = len;
            while left > 0 {
                let k = left.min(buf.len() as u64) as usize;
                if ok && file.read_exact(&mut buf[..k]).is_err() {
                    ok = false;
                }
                if !ok {
                    buf[..k].fill(0);
                }
                self.world.send(to, RESIZE_TAGS[2], &buf[..k]);
                left -= k as u64;
            }
            self.world.send(to, RESIZE_TAGS[2], &[u8::from(ok)]);
        }
    }

    /// Receive file `f` from `from` into `staging` (every message consumed whatever
    /// happens here), checked against its recorded size and CRC32; its path, or why not.
    fn receive_file(
        &self,
        from: u32,
        f: &FlushedFile,
        staging: &Path,
        buf: &mut [u8],
    ) -> std::result::Result<PathBuf, String> {
        let mut len = [0u8; 8];
        self.world.recv_into(from, RESIZE_TAGS[2], &mut len);
        let len = u64::from_le_bytes(len);
        if len == u64::MAX {
            return Err(format!("{}: unreadable in its node's cache", f.name));
        }
        let path = staging.join(&f.name);
        let store = staging.parent().unwrap_or(staging);
        let mut out = inside_dir(staging, Path::new(&f.name))
            .map_err(|e| e.to_string())
            .and_then(|()| {
                let parent = path.parent().unwrap_or(staging);
                crate::private_dir::create_private_dir(store, parent).map_err(|e| e.to_string())
            })
            .and_then(|()| scr_plugin::cachefs::create_file(&path).map_err(|e| e.to_string()));
        let mut hasher = crc32fast::Hasher::new();
        let mut left = len;
        while left > 0 {
            let k = left.min(buf.len() as u64) as usize;
            self.world.recv_into(from, RESIZE_TAGS[2], &mut buf[..k]);
            hasher.update(&buf[..k]);
            if let Ok(file) = out.as_mut() {
                if let Err(e) = file.write_all(&buf[..k]) {
                    out = Err(format!("{}: {e}", path.display()));
                }
            }
            left -= k as u64;
        }
        let mut sent_ok = [0u8];
        self.world.recv_into(from, RESIZE_TAGS[2], &mut sent_ok);
        out?;
        let crc = hasher.finalize();
        if sent_ok[0] != 1 {
            Err(format!(
                "{}: could not be read whole in its node's cache",
                f.name
            ))
        } else if len != f.size {
            Err(format!(
                "{} is {len} bytes in cache, recorded {}",
                f.name, f.size
            ))
        } else if f.crc32.is_some_and(|r| r != crc) {
            Err(format!(
                "{} has CRC32 {crc:08x} in cache, recorded {:08x}",
                f.name,
                f.crc32.unwrap_or_default()
            ))
        } else {
            Ok(path)
        }
    }

    /// Whether `store`'s files are visible from every node (nothing to copy).
    fn store_is_global(&self, store: &str) -> bool {
        crate::runtime::distribute::store_is_global(self.config, store)
    }

    /// The layout of dataset `id`'s rank2file map when the prefix's index holds it
    /// complete (collective; rank 0 reads, every rank is told): the prefix's copy serves
    /// the files this rank's cache does not reach.
    fn prefix_layout(&self, id: u64) -> Option<crate::runtime::fetch::MapLayout> {
        let layout = if self.topo.rank() == 0 {
            Index::load(self.job.prefix())
                .ok()
                .and_then(|ix| ix.datasets.get(&id).cloned())
                .filter(|e| e.complete && e.failed.is_none())
                .and_then(|e| crate::runtime::fetch::layout_of(self.job.prefix(), &e))
        } else {
            None
        };
        self.world
            .broadcast_value(0, Some(&layout), "prefix layout")
            .ok()
            .flatten()
    }
}
