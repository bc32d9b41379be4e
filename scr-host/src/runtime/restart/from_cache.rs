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
    /// Where they are on that node (the dataset's directory in cache, or where they were
    /// rebuilt).
    dir: PathBuf,
    /// The checkpoint's name, checkpoint id and writers, which every offer must share.
    name: String,
    checkpoint_id: Option<u64>,
    writers: u32,
    /// Its files (names relative to the dataset directory, sizes, CRC32s).
    files: Vec<FlushedFile>,
}

impl Offer {
    fn of(held: &Held, node: &str) -> Offer {
        let (writer, rec) = (held.writer, &held.record);
        Offer {
            writer,
            node: node.to_string(),
            store: rec.descriptor.store.clone(),
            dir: held.dir.clone(),
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

/// An old rank's files this rank holds on its node: in the dataset's directory in cache,
/// or where this rank rebuilt them.
#[derive(Clone, Debug)]
struct Held {
    writer: u32,
    record: DatasetRecord,
    dir: PathBuf,
}

/// What the coordinator of a redundancy set learns from each rank holding a member: the
/// member's record (its set and the set's members in order, its files and redundancy
/// files) and the node it is on.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Present {
    writer: u32,
    record: DatasetRecord,
    node: String,
}

/// Where a held member of a set is: the rank holding it, its node, its record.
type Holder = (u32, String, DatasetRecord);

/// A set with lost members: who rebuilds it, and where every member is.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Plan {
    set: u64,
    /// The rank that rebuilds the set, and its node.
    rebuilder: u32,
    rebuilder_node: String,
    /// Each member in the set's order: its old rank, and where it is held (`None`: lost).
    members: Vec<(u32, Option<Holder>)>,
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
        let mut mine: Vec<Held> = handled
            .iter()
            .filter_map(|(w, fm)| {
                fm.datasets.get(&id).filter(|d| fits(d)).map(|d| Held {
                    writer: *w,
                    dir: self.job.dataset_dir(&d.descriptor.store, id),
                    record: d.clone(),
                })
            })
            .collect();
        // what every offer must name: the lowest holder's record
        let first = self
            .world
            .min_u64(if mine.is_empty() { u64::MAX } else { me.into() });
        if first == u64::MAX {
            return Ok(false);
        }
        let ident = mine.first().map(|h| {
            (
                h.record.name.clone(),
                h.record.world_size,
                h.record.descriptor.store.clone(),
            )
        });
        let Ok((name, n, store)) =
            self.world
                .broadcast_value(first as u32, ident.as_ref(), "checkpoint identity")
        else {
            return Ok(false);
        };
        let share = share_of(me, n, m);
        // this restart's copies and rebuilt files, removed when it ends
        let staging = self
            .job
            .store_dir(&store)
            .join(super::staging::staging_name(id, me));
        // old ranks no cache holds are rebuilt first, through their sets' redundancy
        let rebuilt = self.rebuild_lost(&mine, id, &staging);
        let failed = rebuilt.as_ref().err().map(String::as_str);
        if let Some((rank, why)) = crate::runtime::first_failure(self.world.as_dyn(), failed) {
            let _ = std::fs::remove_dir_all(&staging);
            self.topo.warn(&format!(
                "{name} (written by {n} ranks) cannot be read from the nodes' caches: its lost old ranks cannot be rebuilt: rank {rank}: {why}"
            ));
            return Ok(false);
        }
        let rebuilt = rebuilt.unwrap_or_default();
        let rebuilt_any = !rebuilt.is_empty();
        if rebuilt_any {
            let ranks: Vec<u32> = rebuilt.iter().map(|h| h.writer).collect();
            tracing::info!("rebuilt old rank(s) {ranks:?} of {name} from redundancy");
        }
        mine.extend(rebuilt);
        let offers = self.exchange_offers(&mine, n, &share, &name);
        let offers = match self.agreed(&name, n, offers) {
            Some(o) => o,
            None => {
                let _ = std::fs::remove_dir_all(&staging);
                return Ok(false);
            }
        };
        // the bytes of the share held on other nodes, copied here
        let copied = self.copy_share(&mine, &offers, &staging);
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
                let files = o
                    .files
                    .iter()
                    .map(|f| match copied.get(&f.name) {
                        Some(path) => (f.clone(), path.clone(), true),
                        None => (f.clone(), o.dir.join(&f.name), false),
                    })
                    .collect();
                (*w, files)
            })
            .collect();
        let lists = WriterLists::cached(
            cached,
            Some(share),
            (!copied.is_empty() || rebuilt_any).then_some(staging),
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

    /// Rebuild the old ranks of dataset `id` that no node's cache holds, through their
    /// redundancy sets (collective). Each rank tells the coordinator of each set it holds
    /// a member of (rank `set mod M`) which member, in one sparse exchange; a coordinator
    /// that finds a set with members held nowhere chooses the rank holding its lowest
    /// held member to rebuild it, and tells every holder of the set, in another. The
    /// survivors on other nodes than the rebuilder's send it their files (data and
    /// redundancy), in (set, member) order on every rank; the rebuilder runs the scheme's
    /// recover in the set's old geometry, one thread per old member
    /// ([`crate::offline::recover_set`]), into `staging`, and holds the rebuilt ranks
    /// from then on. The rebuilt old ranks this rank holds; `Err` naming what failed here.
    /// A set none of whose members is held is not found here: the offers then miss its
    /// members, which every rank says alike.
    fn rebuild_lost(
        &self,
        mine: &[Held],
        id: u64,
        staging: &Path,
    ) -> std::result::Result<Vec<Held>, String> {
        let (me, m) = (self.topo.rank(), self.topo.size());
        let node = self.topo.node().to_string();
        let sends: Vec<(u32, Present)> = mine
            .iter()
            .map(|h| {
                let coordinator = (h.record.descriptor.set_id % u64::from(m)) as u32;
                let present = Present {
                    writer: h.writer,
                    record: h.record.clone(),
                    node: node.clone(),
                };
                (coordinator, present)
            })
            .collect();
        let got =
            self.world
                .sparse_exchange_values::<_, Present>(&sends, RESIZE_TAGS[3], "held member");
        let mut why = None;
        // as a coordinator: per set, its members in order and where each is held
        let mut sets: BTreeMap<u64, (Vec<u32>, BTreeMap<u32, Holder>)> = BTreeMap::new();
        for (from, p) in got {
            match p {
                Ok(p) => {
                    let d = &p.record.descriptor;
                    let set = sets
                        .entry(d.set_id)
                        .or_insert_with(|| (d.members.clone(), BTreeMap::new()));
                    set.1.insert(p.writer, (from, p.node, p.record));
                }
                Err(e) => {
                    why.get_or_insert(e.to_string());
                }
            }
        }
        let mut plans: Vec<(u32, Plan)> = Vec::new();
        for (set, (members, held)) in &sets {
            let lost: Vec<u32> = members
                .iter()
                .copied()
                .filter(|w| !held.contains_key(w))
                .collect();
            let Some((_, (rebuilder, rebuilder_node, template))) = held.iter().next() else {
                continue;
            };
            if lost.is_empty() {
                continue;
            }
            // more lost than the scheme tolerates: said here, before any file moves
            let d = &template.descriptor;
            let tolerated = self
                .registry
                .new_scheme(&self.config.recorded_scheme_config(d, 0, members[0]))
                .and_then(|s| s.describe())
                .map(|desc| desc.tolerated_losses as usize);
            match tolerated {
                Ok(t) if lost.len() > t => {
                    why.get_or_insert(format!(
                        "set {set} of old ranks {members:?} lost ranks {lost:?} with their nodes' caches, more than {} tolerates ({t})",
                        d.scheme
                    ));
                    continue;
                }
                Err(e) => {
                    why.get_or_insert(format!("set {set}: {e}"));
                    continue;
                }
                Ok(_) => {}
            }
            let plan = Plan {
                set: *set,
                rebuilder: *rebuilder,
                rebuilder_node: rebuilder_node.clone(),
                members: members.iter().map(|w| (*w, held.get(w).cloned())).collect(),
            };
            let holders: std::collections::BTreeSet<u32> = held.values().map(|h| h.0).collect();
            plans.extend(holders.into_iter().map(|r| (r, plan.clone())));
        }
        let plans: Vec<Plan> = self
            .world
            .sparse_exchange_values::<_, Plan>(&plans, RESIZE_TAGS[4], "rebuild plan")
            .into_iter()
            .filter_map(|(_, p)| p.map_err(|e| why.get_or_insert(e.to_string())).ok())
            .collect();
        // the survivors' files to rebuilders on other nodes, in (set, member) order
        let mut pairs: Vec<(u64, u32, u32, u32)> = Vec::new(); // (set, member, from, to)
        for p in &plans {
            for (w, held) in &p.members {
                if let Some((h, hnode, _)) = held {
                    if *hnode != p.rebuilder_node && (*h == me || p.rebuilder == me) {
                        pairs.push((p.set, *w, *h, p.rebuilder));
                    }
                }
            }
        }
        pairs.sort_unstable();
        pairs.dedup();
        let member_dir = |set: u64, w: u32| {
            staging
                .join(format!("rebuild.{set}"))
                .join(format!("rank_{w}"))
        };
        let base = staging.parent().unwrap_or(staging);
        let mut buf = self.piece_buffer();
        for (set, w, from, to) in pairs {
            let plan = plans
                .iter()
                .find(|p| p.set == set)
                .expect("a plan of this set");
            let Some((_, _, rec)) = plan
                .members
                .iter()
                .find(|(x, _)| *x == w)
                .and_then(|(_, h)| h.as_ref())
            else {
                continue;
            };
            let names = crate::runtime::cache::file_names(rec);
            if from == me {
                let dir = mine
                    .iter()
                    .find(|h| h.writer == w)
                    .map(|h| h.dir.clone())
                    .unwrap_or_default();
                self.send_files(to, &dir, &names, &mut buf);
            } else {
                let dir = member_dir(set, w);
                for name in &names {
                    let name = name.to_string_lossy();
                    // (a data file's size is recorded; a redundancy file's is the scheme's)
                    let size = rec.files.iter().find(|f| f.name == name).map(|f| f.size);
                    if let Err(e) = self.receive_bytes(from, (&name, size), (&dir, base), &mut buf)
                    {
                        why.get_or_insert(format!(
                            "{e} (a file of old rank {w}, from rank {from})"
                        ));
                    }
                }
            }
        }
        if let Some(why) = why {
            return Err(why);
        }
        // rebuild the sets this rank was chosen for; a peer's record names files the
        // scheme reads here: each must stay inside its directory
        let mut rebuilt = Vec::new();
        for plan in plans.iter().filter(|p| p.rebuilder == me) {
            for (w, held) in &plan.members {
                if let Some((_, _, rec)) = held {
                    let dir = member_dir(plan.set, *w);
                    for name in crate::runtime::cache::file_names(rec) {
                        inside_dir(&dir, &name)
                            .map_err(|e| format!("old rank {w}'s record: {e}"))?;
                    }
                }
            }
            let template = plan
                .members
                .iter()
                .find_map(|(_, h)| h.as_ref().map(|h| h.2.clone()))
                .expect("a rebuilt set has a held member");
            let crc_expected = plan
                .members
                .iter()
                .filter_map(|(_, h)| h.as_ref())
                .any(|h| h.2.files.iter().any(|f| f.crc32.is_some()));
            let members: Vec<crate::offline::Member<'_>> = plan
                .members
                .iter()
                .map(|(w, held)| match held {
                    Some((_, hnode, rec)) => crate::offline::Member {
                        rank: *w,
                        group: hnode.clone(),
                        dir: if *hnode == plan.rebuilder_node {
                            self.job.dataset_dir(&rec.descriptor.store, id)
                        } else {
                            member_dir(plan.set, *w)
                        },
                        record: Some(rec),
                    },
                    None => crate::offline::Member {
                        rank: *w,
                        group: format!("lost-{w}"),
                        dir: member_dir(plan.set, *w),
                        record: None,
                    },
                })
                .collect();
            if let Err(e) = crate::private_dir::create_private_dir(
                base,
                &staging.join(format!("rebuild.{}", plan.set)),
            ) {
                return Err(e.to_string());
            }
            let files = crate::offline::recover_set(
                self.registry,
                self.config,
                id,
                &template.descriptor,
                &members,
                &BTreeMap::new(),
                crc_expected,
            )
            .map_err(|e| {
                format!(
                    "set {} of old ranks {:?}: {e}",
                    plan.set, template.descriptor.members
                )
            })?;
            for (w, files) in files {
                rebuilt.push(Held {
                    writer: w,
                    dir: member_dir(plan.set, w),
                    record: DatasetRecord {
                        files,
                        redundancy: Vec::new(),
                        ..template.clone()
                    },
                });
            }
        }
        Ok(rebuilt)
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
        mine: &[Held],
        n: u32,
        share: &std::ops::Range<u32>,
        name: &str,
    ) -> std::result::Result<BTreeMap<u32, (u32, Offer)>, String> {
        let m = self.topo.size();
        let sends: Vec<(u32, Offer)> = mine
            .iter()
            .flat_map(|h| {
                let offer = Offer::of(h, self.topo.node());
                readers_of(h.writer, n, m).map(move |r| (r, offer.clone()))
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
            // where the files are, when this rank reads them there (the same node):
            // inside this job's directory of their store, each name inside that (a
            // peer's word is checked before any path is built from it; a copy's names are
            // checked as it arrives)
            let store_dir = self.job.store_dir(&offer.store);
            let here = offer.node == self.topo.node();
            let dir_outside = !offer.dir.starts_with(&store_dir)
                || offer
                    .dir
                    .components()
                    .any(|c| c == std::path::Component::ParentDir);
            let outside = (here && dir_outside)
                .then(|| offer.dir.display().to_string())
                .or_else(|| {
                    offer
                        .files
                        .iter()
                        .find(|f| inside_dir(&offer.dir, Path::new(&f.name)).is_err())
                        .map(|f| f.name.clone())
                });
            if offer.name != name || offer.writers != n || !share.contains(&offer.writer) {
                why.get_or_insert(format!(
                    "rank {from} offered {} of {} ranks as old rank {}'s, where {name} of {n} ranks was chosen",
                    offer.name, offer.writers, offer.writer
                ));
            } else if let Some(path) = outside {
                why.get_or_insert(format!(
                    "rank {from} offered old rank {}'s file at `{path}`, outside this job's directory in {}",
                    offer.writer,
                    store_dir.display()
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
        mine: &[Held],
        offers: &BTreeMap<u32, (u32, Offer)>,
        staging: &Path,
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
        let mut buf = self.piece_buffer();
        for (w, to, from) in pairs {
            if from == me {
                // (a rank asks only the rank that offered it `w`: this one holds it)
                if let Some(h) = mine.iter().find(|h| h.writer == w) {
                    let names: Vec<PathBuf> = h
                        .record
                        .files
                        .iter()
                        .map(|f| PathBuf::from(&f.name))
                        .collect();
                    self.send_files(to, &h.dir, &names, &mut buf);
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

    /// The buffer files travel in, in pieces of the same size on every rank (the
    /// configuration is the same everywhere).
    fn piece_buffer(&self) -> Vec<u8> {
        vec![0u8; MOVE_PIECE.min(self.config.file_buf_size().max(1 << 20))]
    }

    /// Send the files `names` of `dir` (on this node) to `to`: per file its length
    /// (`u64::MAX`: unreadable, nothing follows), its pieces, and whether they are the
    /// file's bytes.
    fn send_files(&self, to: u32, dir: &Path, names: &[PathBuf], buf: &mut [u8]) {
        for name in names {
            let file = inside_dir(dir, name)
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

    /// Receive file `f` from `from` into `staging`, checked against its recorded size
    /// and CRC32; its path, or why not.
    fn receive_file(
        &self,
        from: u32,
        f: &FlushedFile,
        staging: &Path,
        buf: &mut [u8],
    ) -> std::result::Result<PathBuf, String> {
        let base = staging.parent().unwrap_or(staging);
        let (path, len, crc) =
            self.receive_bytes(from, (&f.name, Some(f.size)), (staging, base), buf)?;
        if len != f.size {
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

    /// Receive the bytes of file `name` from `from` into `dir`, below `base` (every
    /// message consumed whatever happens here; every directory level from `base` down
    /// private, never through a link): its path, length and CRC32, or why not.
    fn receive_bytes(
        &self,
        from: u32,
        (name, expected): (&str, Option<u64>),
        (dir, base): (&Path, &Path),
        buf: &mut [u8],
    ) -> std::result::Result<(PathBuf, u64, u32), String> {
        let mut len = [0u8; 8];
        self.world.recv_into(from, RESIZE_TAGS[2], &mut len);
        let len = u64::from_le_bytes(len);
        if len == u64::MAX {
            return Err(format!("{name}: unreadable in its node's cache"));
        }
        let path = dir.join(name);
        // a length other than the recorded size is not written (its bytes are drained)
        let mut out = expected
            .filter(|&e| e != len)
            .map_or(Ok(()), |e| {
                Err(format!("{name} is {len} bytes in cache, recorded {e}"))
            })
            .and_then(|()| inside_dir(dir, Path::new(name)).map_err(|e| e.to_string()))
            .and_then(|()| {
                let parent = path.parent().unwrap_or(dir);
                crate::private_dir::create_private_dir(base, parent).map_err(|e| e.to_string())
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
        if sent_ok[0] != 1 {
            return Err(format!(
                "{name}: could not be read whole in its node's cache"
            ));
        }
        Ok((path, len, hasher.finalize()))
    }

    /// Whether `store`'s files are visible from every node (nothing to copy).
    fn store_is_global(&self, store: &str) -> bool {
        crate::runtime::distribute::store_is_global(self.config, store)
    }

    /// The layout of dataset `id`'s rank2file map when the prefix's index holds it
    /// complete (collective; rank 0 reads, every rank is told): the prefix's copy serves
    /// the files this rank's cache does not reach.
    fn prefix_layout(&self, id: u64) -> Option<crate::runtime::flushed::MapLayout> {
        let layout = if self.topo.rank() == 0 {
            Index::load(self.job.prefix())
                .ok()
                .and_then(|ix| ix.datasets.get(&id).cloned())
                .filter(|e| e.complete && e.failed.is_none())
                .and_then(|e| crate::runtime::flushed::layout_of(self.job.prefix(), &e))
        } else {
            None
        };
        self.world
            .broadcast_value(0, Some(&layout), "prefix layout")
            .ok()
            .flatten()
    }
}
