//! A restart by another number of ranks than wrote the checkpoint (N writers, M readers):
//! every rank learns every writer's list of files, one rank checks each writer's files,
//! and the checkpoint is read in place in the prefix, where any rank may route any of
//! its files by name.
//!
//! Why in place and not fetched into cache: the cache's redundancy sets were the N-rank
//! job's, and this job protects its own next checkpoint in M-rank sets; copying the old
//! files into this job's cache would cost a full read and write of the dataset for a
//! copy no set protects. Why every list on every rank: `route_file` is local, so a rank
//! must know where a file of any writer is without asking another rank; that is the
//! dataset's file list (names, sizes, CRC32s), about 100 bytes per file, once per
//! restart — a resized restart costs O(files) per rank where a same-size one costs
//! O(own files).

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::{BlockLists, Fetcher, MapLayout};
use crate::runtime::window::{Direction, Window};
use crate::runtime::world::{Exchange, Op};
use crate::state::prefix::{IndexEntry, Rank2File, Rank2FilePart};

impl Fetcher<'_> {
    /// Every writer's list of files of `entry` on every rank (collective), from its
    /// rank2file map as `layout` says: each part of a tree is read by one rank (part `n`
    /// by rank `n mod M`), the parts' totals must add up to the root's, and the lists
    /// are all-gathered; a single-file map (legacy) is rank 0's (`single`). The map must
    /// list every writer 0..N. The same `Err` text on every rank when it cannot be used.
    ///
    /// Per rank: one 24-byte sum, one min-reduction, and the all-gather of the whole map
    /// (its bytes on every rank); ⌈parts / M⌉ parts read.
    pub(super) fn read_every_list(
        &self,
        entry: &IndexEntry,
        layout: &MapLayout,
        single: Option<&Rank2File>,
    ) -> Result<BlockLists, String> {
        let (me, size) = (self.topo.rank(), self.topo.size());
        let prefix = self.job.prefix();
        let read: Result<BlockLists, String> = match layout {
            MapLayout::Tree(root) => {
                let blocks = root.blocks();
                let parts: Vec<_> = (0..blocks.count())
                    .filter(|n| n % size == me)
                    .map(|n| Rank2FilePart::load(prefix, entry.id, blocks, n))
                    .collect();
                // [files, bytes, unreadable parts] of the parts this rank read
                let mut totals = [0u64; 3];
                for part in &parts {
                    match part {
                        Ok(p) => {
                            totals[0] += p.files;
                            totals[1] += p.bytes;
                        }
                        Err(_) => totals[2] += 1,
                    }
                }
                let [files, bytes, unreadable] =
                    <[u64; 3]>::try_from(self.world.all_reduce_u64s(&totals, Op::Sum))
                        .expect("three sums");
                // (an unreadable part says why itself)
                let sums = if unreadable == 0 {
                    root.check_totals(prefix, entry.id, files, bytes)
                        .map_err(|e| e.to_string())
                } else {
                    Ok(())
                };
                sums.and_then(|()| {
                    let mut lists = BlockLists::new();
                    for part in parts {
                        lists.extend(part.map_err(|e| e.to_string())?.ranks);
                    }
                    Ok(lists)
                })
            }
            MapLayout::Single { .. } => Ok(single.map(|m| m.ranks.clone()).unwrap_or_default()),
        };
        if let Some((_, why)) = crate::runtime::first_failure(
            self.world.as_dyn(),
            read.as_ref().err().map(String::as_str),
        ) {
            return Err(why);
        }
        let mine = read.unwrap_or_default();
        // the same bytes on every rank, so the same outcome everywhere
        let mut every = BlockLists::new();
        for (_, lists) in self
            .world
            .all_gather_values::<_, BlockLists>(&mine, "rank2file lists")
        {
            every.extend(lists.map_err(|e| e.to_string())?);
        }
        if !every.keys().copied().eq(0..entry.world_size) {
            return Err(format!(
                "{}: lists the files of ranks {:?}, the index records ranks 0..{} as its writers",
                Rank2File::path(prefix, entry.id).display(),
                every.keys().collect::<Vec<_>>(),
                entry.world_size
            ));
        }
        Ok(every)
    }

    /// Offer `entry`, written by another number of ranks, for the restart read in place
    /// (collective): writer `w`'s files are checked by rank `w mod M`
    /// ([`Fetcher::check_flushed`]: size, and CRC32 with `crc_on_restart`), at most
    /// `fetch_width` ranks reading at once; then every rank routes any file of any
    /// writer. `Err`: the lowest failing rank's reason, the same on every rank (the
    /// caller passes the checkpoint over).
    ///
    /// Per rank: the window's cost, one min-reduction, and a broadcast of the first
    /// failure's text when one failed.
    pub(super) fn open_resized(
        &mut self,
        entry: &IndexEntry,
        every: Result<BlockLists, String>,
    ) -> Result<(), String> {
        let (me, size) = (self.topo.rank(), self.topo.size());
        let window = Window::of(self.config, self.hooks, Direction::Fetch);
        let checked = window.run(self.world.as_dyn(), || {
            let every = every.as_ref().map_err(Clone::clone)?;
            for (writer, list) in every.iter().filter(|(w, _)| *w % size == me) {
                for f in list {
                    self.check_flushed(f)
                        .map_err(|why| format!("{why} (a file of rank {writer})"))?;
                }
            }
            Ok(())
        });
        if let Some((rank, why)) = crate::runtime::first_failure(
            self.world.as_dyn(),
            checked.as_ref().err().map(String::as_str),
        ) {
            return Err(format!("rank {rank}: {why}"));
        }
        // checked: every name stays inside the prefix (the check refused any that leaves)
        let every = every?;
        let mut files: BTreeMap<String, PathBuf> = BTreeMap::new();
        let mut written: BTreeMap<u32, Vec<String>> = BTreeMap::new();
        for (writer, list) in every {
            let mut names = Vec::with_capacity(list.len());
            for f in list {
                let path = f
                    .stored_path(self.job.prefix())
                    .map_err(|e| e.to_string())?;
                files.entry(f.name.clone()).or_insert(path);
                names.push(f.name);
            }
            written.insert(writer, names);
        }
        self.offer_in_place(entry, files, written);
        Ok(())
    }
}
