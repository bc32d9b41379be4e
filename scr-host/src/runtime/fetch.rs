//! Fetch (prefix → cache) and the restart read in place in the prefix: rank 0 chooses the
//! newest usable checkpoint from the index, each block leader reads its part of the
//! rank2file map and hands its members their lists, every file is verified against
//! rank2file, and the fetched dataset is protected again.

use super::cache::Cache;
use super::collective::Collective;
use super::descriptors::Descriptors;
use super::dispatch::transfers;
use super::evict::evictor;
use super::flush::Flushing;
use super::job::Job;
use super::restart::state::PrefixRestart;
use super::restart::state::RestartState;
use super::restart::writers::WriterLists;
use super::tags::{LIST_TAG, SOURCE_TAG};
use super::topology::Topology;
use super::window::Direction;
use super::world::{Exchange, Op};
use super::TestHooks;
use crate::config::settings;
use crate::config::Config;
use crate::registry::Registry;
use crate::transfer::{collect, Planned};

mod resized;

use super::flushed::{check_flushed, check_map, MapError, MapLayout};

use std::collections::BTreeMap;
use std::path::Path;

use super::{now_secs, DatasetRecord, DescriptorRecord, FileRecord, Result, ScrError};
use crate::events::Event;
use crate::integrity;
use crate::state::prefix::{
    self, FlushedFile, Index, IndexEntry, Rank2File, Rank2FileMap, Rank2FilePart,
};

/// Fetching from the prefix over the parts it uses, borrowed from a runtime or a phase
/// that holds them ([`fetcher!`]).
pub(in crate::runtime) struct Fetcher<'a> {
    pub(in crate::runtime) world: &'a mut Collective,
    pub(in crate::runtime) cache: &'a mut Cache,
    pub(in crate::runtime) restart: &'a mut RestartState,
    pub(in crate::runtime) flushing: &'a Flushing,
    pub(in crate::runtime) config: &'a Config,
    pub(in crate::runtime) registry: &'a Registry,
    pub(in crate::runtime) job: &'a Job,
    pub(in crate::runtime) topo: &'a Topology,
    pub(in crate::runtime) hooks: &'a TestHooks,
    pub(in crate::runtime) descs: &'a Descriptors,
}

/// A [`Fetcher`] over the parts of `$s` (the runtime, or a phase holding them).
macro_rules! fetcher {
    ($s:expr) => {
        $crate::runtime::fetch::Fetcher {
            world: &mut $s.world,
            cache: &mut $s.cache,
            restart: &mut $s.restart,
            flushing: &$s.flushing,
            config: &$s.config,
            registry: &$s.registry,
            job: &$s.job,
            topo: &$s.topo,
            hooks: &$s.hooks,
            descs: &$s.descs,
        }
    };
}
pub(in crate::runtime) use fetcher;

impl Fetcher<'_> {
    /// The checkpoint in the prefix to restart from next (collective; chosen on rank 0):
    /// `wanted` first, then the index's current one, then the newest, skipping `tried`;
    /// with this rank's list of files from its rank2file map, or why the map cannot be
    /// used (the same error on every rank, naming the file).
    ///
    /// No rank receives the whole map, and rank 0 no message per block: rank 0 reads the
    /// root and broadcasts the choice with the root (the index entry, the layout and the
    /// totals: constant size); each block leader computes its part's name from its block
    /// index, reads it and checks that it is that dataset's part for that block and those
    /// ranks ([`Rank2FilePart::load`]) — one reader per part, as SCR bounds the readers
    /// of a file and the bytes each reads, rather than every rank opening the same part
    /// (R readers per file) — and one reduction sums the parts' totals, which must be
    /// the root's (a part missing, or swapped for another flush's of other contents);
    /// then each leader sends each member its list. Whether every rank got its list is
    /// agreed by a min-reduction.
    ///
    /// A single-file map of an earlier release (legacy only) is read by rank 0, which
    /// sends each leader its block's lists instead (P/R messages from rank 0): kept so
    /// a prefix flushed before the tree restarts, not a path a current flush takes.
    ///
    /// Per rank: one broadcast of the entry and root (about 350 bytes), one 24-byte sum
    /// and one min-reduction (O(log P) steps each), one message with its own list; a
    /// leader also R - 1 messages sent and one part (R ranks) read. Rank 0: the root
    /// read, and as a leader — O(1) messages beyond its own block's whatever P. Plus one
    /// broadcast of the error's text when a part is refused. The last value is the map's
    /// bytes in all (on rank 0, which logs it).
    ///
    /// A checkpoint written by another number of ranks than this job has (N → M) is
    /// read differently: every rank gets the map's layout only, and reads the writers'
    /// lists it needs itself ([`WriterLists`]).
    fn choose_from_index(
        &self,
        tried: &[u64],
        wanted: Option<&str>,
        older_than: Option<u64>,
    ) -> Option<(IndexEntry, Lists, u64)> {
        // rank 0: the choice and its map's layout; a single-file map itself (legacy)
        let (choice, single) = if self.topo.rank() == 0 {
            self.pick_from_index(tried, wanted, older_than)
        } else {
            (None, None)
        };
        let (entry, layout): (IndexEntry, std::result::Result<MapLayout, String>) = self
            .world
            .broadcast_value(0, Some(&choice), "checkpoint chosen")
            .unwrap_or(None)?;
        let resized = entry.world_size != self.topo.size();
        let layout = match layout {
            Ok(l) => l,
            Err(why) if resized => return Some((entry, Lists::Every(Err(why)), 0)),
            Err(why) => return Some((entry, Lists::Mine(Err(why)), 0)),
        };
        if resized {
            return Some((entry, Lists::Every(Ok(layout)), 0));
        }
        let (blocks, total) = match &layout {
            MapLayout::Tree(root) => (root.blocks(), root.bytes),
            MapLayout::Single { block } => (
                prefix::Blocks::new(self.topo.size(), *block),
                single
                    .as_ref()
                    .map_or(0, |m| m.ranks.values().flatten().map(|f| f.size).sum()),
            ),
        };
        let block_lists = self.read_block_lists(&entry, &layout, single.as_ref(), blocks);
        let mine = self.hand_out_lists(blocks, block_lists.as_ref());
        Some((entry, Lists::Mine(mine), total))
    }

    /// Rank 0: the checkpoint [`Fetcher::choose_from_index`] takes — `wanted` first, then
    /// the index's order of fetch candidates, skipping `tried` — with its map's layout (or
    /// why its map cannot be used), and a single-file map itself (legacy). `None` when no
    /// candidate is left.
    fn pick_from_index(
        &self,
        tried: &[u64],
        wanted: Option<&str>,
        older_than: Option<u64>,
    ) -> (Choice, Option<Rank2File>) {
        let index = Index::load_or_rebuild(self.job.prefix()).unwrap_or_else(|e| {
            tracing::warn!("{e}; no checkpoint is taken from the prefix");
            Index::default()
        });
        let mut candidates = index.restart_candidates();
        // the checkpoint `current` named is tried first
        if let Some(pos) = candidates
            .iter()
            .position(|e| Some(e.name.as_str()) == wanted)
        {
            let e = candidates.remove(pos);
            candidates.insert(0, e);
        }
        // after a checkpoint failed, only older ones: a fallback never leads to a newer
        // checkpoint than the one that failed (the one `current` pinned included)
        let older = |e: &IndexEntry| match (older_than, e.checkpoint_id) {
            (Some(bound), Some(c)) => c < bound,
            _ => true,
        };
        match candidates
            .into_iter()
            .find(|e| !tried.contains(&e.id) && older(e))
        {
            None => (None, None),
            Some(e) => {
                let (layout, single) = self.map_layout(e);
                // every rank is told the choice: why the map cannot be used goes as text
                let layout = layout.map_err(|why| why.to_string());
                (Some((e.clone(), layout)), single)
            }
        }
    }

    /// Rank 0: the layout of the rank2file map of `entry` that every rank is told, once
    /// the map is loaded and lists the ranks the index says wrote it ([`check_map`]); a
    /// single-file map (legacy) also itself, since rank 0 sends its lists.
    fn map_layout(
        &self,
        entry: &IndexEntry,
    ) -> (std::result::Result<MapLayout, MapError>, Option<Rank2File>) {
        let map = Rank2FileMap::load(self.job.prefix(), entry.id)
            .map_err(MapError::State)
            .and_then(|m| check_map(self.job.prefix(), entry.id, entry.world_size, m));
        match map {
            Ok(Rank2FileMap::Tree(root)) => (Ok(MapLayout::Tree(root)), None),
            Ok(Rank2FileMap::Single(m)) => (
                Ok(MapLayout::Single {
                    block: super::flush::rank2file_blocks(self.config, self.topo.size()).block,
                }),
                Some(m),
            ),
            Err(why) => (Err(why), None),
        }
    }

    /// A leader: its block's lists of the map of `entry`, read from its part (a tree) or
    /// received from rank 0 (a single-file map, legacy: rank 0 holds it in `single`);
    /// `None` on the other ranks (collective). For a tree, the parts' totals must add up
    /// to the root's (when every part was read: an unreadable one says why itself); every
    /// leader then fails its block alike.
    fn read_block_lists(
        &self,
        entry: &IndexEntry,
        layout: &MapLayout,
        single: Option<&Rank2File>,
        blocks: prefix::Blocks,
    ) -> Option<std::result::Result<BlockLists, ListError>> {
        let n = blocks.of(self.topo.rank());
        let leader = self.topo.rank() == blocks.leader(n);
        match layout {
            MapLayout::Tree(root) => {
                let part =
                    leader.then(|| Rank2FilePart::load(self.job.prefix(), entry.id, blocks, n));
                // a leader: its part's totals [files, bytes, unreadable]
                let totals = match &part {
                    Some(Ok(part)) => [part.files, part.bytes, 0],
                    Some(Err(_)) => [0, 0, 1],
                    None => [0; 3],
                };
                let [files, bytes, unreadable] =
                    <[u64; 3]>::try_from(self.world.all_reduce_u64s(&totals, Op::Sum))
                        .expect("three sums");
                let sums = if unreadable == 0 {
                    root.check_totals(self.job.prefix(), entry.id, files, bytes)
                        .map_err(ListError::Totals)
                } else {
                    Ok(())
                };
                part.map(|part| sums.and(part.map(|p| p.ranks).map_err(ListError::Part)))
            }
            MapLayout::Single { .. } => leader.then(|| self.receive_legacy_lists(single, blocks)),
        }
    }

    /// A leader, from a single-file map (legacy): its block's lists, which rank 0 (holding
    /// the map in `single`) sends each leader.
    fn receive_legacy_lists(
        &self,
        single: Option<&Rank2File>,
        blocks: prefix::Blocks,
    ) -> std::result::Result<BlockLists, ListError> {
        let leaders: Vec<u32> = blocks.leaders().collect();
        let sources: Vec<BlockLists> = match single {
            Some(m) => (0..blocks.count())
                .map(|b| {
                    blocks
                        .members(b)
                        .map(|r| (r, m.ranks.get(&r).cloned().unwrap_or_default()))
                        .collect()
                })
                .collect(),
            None => Vec::new(),
        };
        self.world
            .scatter_values(0, &leaders, &sources, SOURCE_TAG, "rank2file lists")
            .map_err(|e| ListError::Unreadable(e.source))
    }

    /// Each leader sends each member of its block its list (or the block's error), from
    /// `block_lists` (the leader's, `None` elsewhere); then every rank takes the lowest
    /// failing rank's error, so that all give the same answer (collective).
    fn hand_out_lists(
        &self,
        blocks: prefix::Blocks,
        block_lists: Option<&std::result::Result<BlockLists, ListError>>,
    ) -> std::result::Result<Vec<FlushedFile>, String> {
        let n = blocks.of(self.topo.rank());
        let leader = blocks.leader(n);
        let members: Vec<u32> = blocks.members(n).collect();
        let lists: Vec<std::result::Result<Vec<FlushedFile>, String>> = match block_lists {
            None => Vec::new(),
            Some(block_lists) => blocks
                .members(n)
                .map(|r| match block_lists {
                    Ok(l) => Ok(l.get(&r).cloned().unwrap_or_default()),
                    // sent to the members as text
                    Err(why) => Err(why.to_string()),
                })
                .collect(),
        };
        let mine = self
            .world
            .scatter_values(leader, &members, &lists, LIST_TAG, "rank2file list")
            .unwrap_or_else(|e| {
                Err(format!(
                    "rank {} sent an unreadable rank2file list: {}",
                    e.rank, e.source
                ))
            });
        // the same answer everywhere: the lowest failing rank's error
        match super::first_failure(self.world.as_dyn(), mine.as_ref().err().map(String::as_str)) {
            Some((_, why)) => Err(why),
            None => mine,
        }
    }

    /// Rank 0 marks a checkpoint that cannot be restarted from as failed in the index
    /// (kept through a rebuild of the index from the summaries), so no later run tries
    /// it again; a failure to do so is a warning.
    fn mark_failed_in_index(&self, entry: &IndexEntry, reason: &str) {
        if self.topo.rank() == 0 {
            if let Err(e) = Index::mark_failed(self.job.prefix(), entry.id, reason) {
                tracing::warn!("{e}; {} is not marked failed in the index", entry.name);
            }
        }
    }

    /// With `fetch = false` and no checkpoint in cache, restart straight from the prefix
    /// (SCR 3.x): offer the checkpoint `choose_from_index` picks, after every rank found
    /// its files there with the recorded size (and CRC32, with `crc_on_restart`);
    /// `route_file` then returns their prefix paths. One that fails is marked failed in
    /// the index and the next older one is tried. Collective. Per rank and candidate:
    /// [`Fetcher::choose_from_index`]'s cost (O(log P) steps, its own list) plus one
    /// min-reduction, and a broadcast of the first failure's text when one failed.
    pub(in crate::runtime) fn open_prefix_restart(
        &mut self,
        wanted: Option<&str>,
        mut older_than: Option<u64>,
    ) -> Result<()> {
        let mut tried: Vec<u64> = Vec::new();
        while let Some((entry, lists, _)) = self.choose_from_index(&tried, wanted, older_than) {
            tried.push(entry.id);
            let list = match self.own_list_or_offer(&entry, lists) {
                Ok(list) => list,
                Err(true) => return Ok(()),
                Err(false) => {
                    older_than = bound_below(older_than, entry.checkpoint_id);
                    continue;
                }
            };
            // reading every file for its CRC32 reads the prefix as a fetch does: at most
            // `fetch_width` ranks at once
            let window =
                crate::runtime::window::Window::of(self.config, self.hooks, Direction::Fetch);
            let mine = window.run(self.world.as_dyn(), || {
                list.and_then(|list| {
                    let mut files = BTreeMap::new();
                    for f in &list {
                        let path = check_flushed(
                            self.job.prefix(),
                            f,
                            self.config.get(settings::CRC_ON_RESTART),
                            self.config.file_buf_size(),
                        )?;
                        files.insert(f.name.clone(), path);
                    }
                    Ok(files)
                })
            });
            let failed =
                super::first_failure(self.world.as_dyn(), mine.as_ref().err().map(String::as_str))
                    .map(|(rank, why)| format!("rank {rank}: {why}"));
            match (failed, mine) {
                (None, Ok(files)) => {
                    self.offer_in_place(&entry, files, None);
                    return Ok(());
                }
                (failed, _) => {
                    self.pass_over(&entry, &failed.unwrap_or_default());
                    older_than = bound_below(older_than, entry.checkpoint_id);
                }
            }
        }
        Ok(())
    }

    /// Offer `entry` for the restart, read in place in the prefix: this rank's own `files`
    /// by the name the application routes → where each is stored, or, written by another
    /// number of ranks, every writer's files as `lists` finds them.
    pub(in crate::runtime) fn offer_in_place(
        &mut self,
        entry: &IndexEntry,
        files: BTreeMap<String, std::path::PathBuf>,
        lists: Option<WriterLists>,
    ) {
        self.cache.used(Some(entry.id), entry.checkpoint_id);
        let by = if lists.is_some() {
            format!(
                " (written by {} ranks, read by {})",
                entry.world_size,
                self.topo.size()
            )
        } else {
            String::new()
        };
        self.topo.info(&format!(
            "restarting from {}{by} read in place in the prefix {}",
            entry.name,
            self.job.prefix().display()
        ));
        self.restart.offer_in_prefix(PrefixRestart::new(
            entry.id,
            entry.name.clone(),
            entry.checkpoint_id,
            files,
            entry.world_size,
            lists,
        ));
    }

    /// This rank's list of `entry`'s files when the job has as many ranks as wrote it
    /// (`Ok`, for the caller to read or fetch); otherwise `entry` is offered read in place
    /// (`Err(true)`), or passed over when it cannot be (`Err(false)`), alike on every rank.
    fn own_list_or_offer(
        &mut self,
        entry: &IndexEntry,
        lists: Lists,
    ) -> std::result::Result<std::result::Result<Vec<FlushedFile>, String>, bool> {
        match lists {
            Lists::Mine(list) => Ok(list),
            Lists::Every(layout) => match self.offer_resized(entry, layout) {
                Ok(()) => Err(true),
                Err(reason) => {
                    self.pass_over(entry, &reason);
                    Err(false)
                }
            },
        }
    }

    /// A checkpoint of the prefix that cannot be restarted from (`reason`, agreed) is
    /// passed over: said once, and marked failed in the index.
    fn pass_over(&self, entry: &IndexEntry, reason: &str) {
        self.topo.warn(&format!(
            "{} in the prefix cannot be read for a restart: {reason}; trying an older checkpoint",
            entry.name
        ));
        self.mark_failed_in_index(entry, reason);
    }

    /// With no restartable checkpoint in cache, fetch the newest complete one from the
    /// prefix (falling back to older ones, marking failures in the index) and protect it
    /// again with its redundancy scheme. Collective. Per rank and candidate:
    /// [`Fetcher::choose_from_index`]'s cost (O(log P) steps, its own list) and two
    /// agreements on failure (a min-reduction each, and a broadcast of the first
    /// failure's text when one failed; were all-gathers of every rank's reason, O(P)),
    /// besides what re-protecting costs in the redundancy sets.
    pub(in crate::runtime) fn fetch(
        &mut self,
        wanted: Option<&str>,
        mut older_than: Option<u64>,
    ) -> Result<()> {
        let _counted = super::comm::scope("fetch");
        let mut tried: Vec<u64> = Vec::new();
        loop {
            let choice = self.choose_from_index(&tried, wanted, older_than);
            let Some((entry, lists, fetch_bytes)) = choice else {
                return Ok(());
            };
            tried.push(entry.id);
            // written by another number of ranks: read in place, not fetched (its
            // redundancy sets were the old job's; the next checkpoint is this job's)
            let list = match self.own_list_or_offer(&entry, lists) {
                Ok(list) => list,
                Err(true) => return Ok(()),
                Err(false) => {
                    older_than = bound_below(older_than, entry.checkpoint_id);
                    continue;
                }
            };
            let fetch_started = std::time::Instant::now();
            // at most `fetch_width` ranks read from the prefix at once; a rank whose
            // list or copy failed passes its turn on all the same (no early return
            // between enter and leave; fetch_one makes no collective call)
            let window =
                crate::runtime::window::Window::of(self.config, self.hooks, Direction::Fetch);
            window.enter(self.world.as_dyn());
            let outcome = list
                .map_err(FetchError::List)
                .and_then(|list| self.fetch_one(&entry, list));
            window.leave(self.world.as_dyn());
            // the lowest failing rank's reason, on every rank (O(log P), not a gather)
            let why = outcome.as_ref().err().map(|e| e.to_string());
            let failed = super::first_failure(self.world.as_dyn(), why.as_deref())
                .map(|(rank, why)| format!("fetch failed on rank {rank}: {why}"));
            // protect it again in cache: a failure there is a failed fetch too
            let failed = match failed {
                None => {
                    let protected = self.protect_fetched(entry.id).err().map(|e| e.to_string());
                    self.world
                        .first_failure_credited(protected.as_deref())
                        .map(|(rank, why)| format!("re-protecting failed on rank {rank}: {why}"))
                }
                some => some,
            };
            match failed {
                None => {
                    // offered even when an earlier `current` passed its id over (a
                    // fallback below the pinned checkpoint fetches it)
                    self.restart.unskip(entry.id);
                    // ids continue after the fetched dataset
                    self.cache.used(Some(entry.id), entry.checkpoint_id);
                    if self.topo.rank() == 0 {
                        let _ = Index::update(self.job.prefix(), |ix| {
                            ix.fetched(entry.id, &entry.name, now_secs())
                        });
                    }
                    self.topo.info(&format!(
                        "fetched {} from {}",
                        entry.name,
                        self.job.prefix().display()
                    ));
                    self.job.log_event(Event::Fetch {
                        name: entry.name.clone(),
                        id: entry.id,
                        bytes: fetch_bytes,
                        seconds: fetch_started.elapsed().as_secs_f64(),
                    });
                    return Ok(());
                }
                Some(reason) => {
                    if let Some(rec) = self.cache.get(entry.id).cloned() {
                        let removed = evictor!(self).remove_local(&rec);
                        self.world.agree_on(removed)?;
                    } else {
                        self.world.agree_on(Ok(()))?;
                    }
                    self.topo.warn(&format!(
                        "{} cannot be fetched: {reason}; trying an older checkpoint",
                        entry.name
                    ));
                    self.mark_failed_in_index(&entry, &reason);
                    older_than = bound_below(older_than, entry.checkpoint_id);
                }
            }
        }
    }

    /// Copy this rank's files of `entry` from the prefix into cache, recorded in the
    /// filemap first, and verify sizes and CRC32s.
    fn fetch_one(
        &mut self,
        entry: &IndexEntry,
        mine: Vec<FlushedFile>,
    ) -> std::result::Result<(), FetchError> {
        let desc = self.descs.for_checkpoint(entry.checkpoint_id);
        let store = self.descs[desc].record().store.clone();
        let dir = self.job.dataset_dir(&store, entry.id);
        let mut record = DatasetRecord {
            id: entry.id,
            name: entry.name.clone(),
            checkpoint_id: entry.checkpoint_id,
            output: entry.output,
            complete: false,
            // fetched into cache and protected there, whatever the descriptor says of
            // new datasets (a bypass descriptor's record would route it to the prefix)
            descriptor: DescriptorRecord {
                bypass: false,
                ..self.descs[desc].record().clone()
            },
            files: mine
                .iter()
                .map(|f| FileRecord {
                    name: f.name.clone(),
                    size: f.size,
                    crc32: f.crc32,
                    ..FileRecord::default()
                })
                .collect(),
            redundancy: Vec::new(),
            world_size: self.topo.size(),
            crc32_pending: false,
            created: entry.made.created,
        };
        self.cache.put(record.clone());
        self.cache.save()?;
        // every directory from the store down 0700 and checked, none a link
        let base = Path::new(&store);
        crate::private_dir::create_private_dir(base, &dir)?;
        let mut files = Vec::with_capacity(mine.len());
        for f in &mine {
            let source = f.stored_path(self.job.prefix())?;
            let destination = dir.join(&f.name);
            if let Some(parent) = destination.parent() {
                crate::private_dir::create_private_dir(base, parent)?;
            }
            files.push(Planned {
                name: f.name.clone(),
                source,
                destination,
                size: f.size,
                crc32: f.crc32,
                stored: None,
            });
        }
        // the same transfer type as the flush from this store, verified the same way
        let label = transfers!(self).label_of(&store);
        let state = crate::layout::fetch_state(self.job.cntl_dir(), entry.id, self.topo.rank());
        let started = transfers!(self).dispatch(label, files, &state, false);
        let buf = self.config.file_buf_size();
        let fetched = started.map_err(FetchError::Start).and_then(|s| {
            collect(s, false, "recorded by the flush", buf).map_err(FetchError::Transfer)
        });
        let _ = std::fs::remove_file(&state);
        let fetched = fetched?;
        for (f, rec) in fetched.iter().zip(record.files.iter_mut()) {
            let dst = dir.join(&f.name);
            let meta = integrity::stat_file(&dst, false, buf)
                .map_err(|source| FetchError::Stat { path: dst, source })?;
            rec.mode = meta.mode;
            rec.mtime = meta.mtime;
            rec.crc32 = f.crc32;
        }
        self.cache.put(record);
        Ok(self.cache.save()?)
    }

    /// Apply the redundancy scheme to a fetched dataset and mark it complete.
    /// Collective. When apply fails on some rank, the dataset is discarded on every rank
    /// (the redundancy files declared before apply among its names) and the ranks where
    /// it failed return their error.
    fn protect_fetched(&mut self, id: u64) -> Result<()> {
        // (a failure before the apply below is this rank's own)
        self.world.set_credit(None);
        let mut rec = self.cache.record(id).clone();
        let desc = self.descs.for_checkpoint(rec.checkpoint_id);
        let dir = self.job.dataset_dir(&rec.descriptor.store, id);
        // the redundancy files are recorded before they exist, like every file
        let declared = integrity::declare_redundancy(self.descs[desc].scheme(), &mut rec, &dir)
            .and_then(|()| {
                self.cache.put(rec.clone());
                self.cache.save()
            });
        self.world.agree_on(declared)?;
        let rd = &self.descs[desc];
        let ds = integrity::dataset_files(&rec, &dir);
        let result = rd
            .scheme()
            .raw()
            .apply(rd.host().services(), &ds)
            .into_result();
        let label = format!("{id} ({})", rec.name);
        let red = self
            .world
            .settle_call(rd.host(), rd.scheme(), "apply", &label, result)
            .map_err(ScrError::from);
        if !self.world.all(red.is_ok()) {
            // discarded on every rank, what the scheme wrote with it (its `remove` takes
            // what it did not declare); this rank's own error only, as the caller
            // gathers every rank's to name the one that failed
            // (its `remove` is settled too: the apply's credit is what the caller needs)
            let credit = self.world.credit();
            evictor!(self).discard_failed_apply(Some(desc), &rec)?;
            self.world.set_credit(credit);
            return red.map(|_| ());
        }
        let red = red?;
        rec.redundancy = red
            .iter()
            .map(|p| {
                Path::new(p.as_str())
                    .strip_prefix(&dir)
                    .unwrap_or(Path::new(p.as_str()))
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        rec.complete = true;
        self.cache.put(rec);
        self.cache.save()
    }
}

/// The lists of files a rank gets of the checkpoint chosen from the index, or why it got
/// none (the same text on every rank).
pub(in crate::runtime) enum Lists {
    /// Written by as many ranks as this job has: this rank's own files.
    Mine(std::result::Result<Vec<FlushedFile>, String>),
    /// Written by another number of ranks: its map's layout, from which each rank reads
    /// the writers' lists it needs ([`WriterLists`]).
    Every(std::result::Result<MapLayout, String>),
}

/// What rank 0 tells every rank at fetch: the chosen checkpoint's index entry with its
/// map's layout, or why its map cannot be used; `None` when no candidate is left.
pub(in crate::runtime) type Choice = Option<(IndexEntry, std::result::Result<MapLayout, String>)>;

/// The lists of one block's ranks in a rank2file map, by rank.
pub(in crate::runtime) type BlockLists = BTreeMap<u32, Vec<FlushedFile>>;

/// Why a block leader has no lists for its block's ranks; each member of the block is
/// sent this as text in place of its list.
#[derive(Debug, thiserror::Error)]
pub(in crate::runtime) enum ListError {
    /// The parts' totals do not add up to the root's.
    #[error(transparent)]
    Totals(crate::state::StateError),
    /// The leader's part is unreadable or not that block's.
    #[error(transparent)]
    Part(crate::state::StateError),
    /// Rank 0's lists of a single-file map (legacy) did not parse.
    #[error("rank 0 sent unreadable rank2file lists: {0}")]
    Unreadable(serde_json::Error),
}

/// Why this rank's files of a checkpoint could not be fetched into cache
/// ([`Fetcher::fetch_one`]). Typed for the rank; the lowest failing rank's text is what
/// every rank is told.
#[derive(Debug, thiserror::Error)]
pub(in crate::runtime) enum FetchError {
    /// This rank got no list of its files (the text every rank of its block was told).
    #[error("{0}")]
    List(String),
    /// Recording the dataset or making its directory failed.
    #[error(transparent)]
    Record(#[from] ScrError),
    /// A file is named outside the prefix.
    #[error(transparent)]
    Name(#[from] prefix::OutsidePrefix),
    /// The transfer could not be started.
    #[error(transparent)]
    Start(crate::transfer::StartError),
    /// The transfer or the check of a copied file failed.
    #[error("{0}")]
    Transfer(String),
    /// A fetched file could not be stat'ed.
    #[error("{}: {source}", path.display())]
    Stat {
        /// The file in cache.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The bound on checkpoint ids after `checkpoint` failed: below it, and below any earlier
/// bound.
pub(in crate::runtime) fn bound_below(bound: Option<u64>, checkpoint: Option<u64>) -> Option<u64> {
    match (bound, checkpoint) {
        (Some(b), Some(c)) => Some(b.min(c)),
        (b, c) => b.or(c),
    }
}
