//! A restart by another number of ranks than wrote the checkpoint (N writers, M readers):
//! the checkpoint is read in place in the prefix, where any rank may route any writer's
//! file by name; each rank learns the writers' lists it needs from the map itself
//! ([`WriterLists`]).
//!
//! Why in place and not fetched into cache: the cache's redundancy sets were the N-rank
//! job's, and this job protects its own next checkpoint in M-rank sets; copying the old
//! files into this job's cache would cost a full read and write of the dataset for a
//! copy no set protects. Why nothing is exchanged: offering it takes the choice rank 0
//! broadcast (the index entry and the map's layout, constant size), so a resized restart
//! costs each rank what a same-size one does, whatever N and M.

use super::{Fetcher, MapLayout};
use crate::config::settings;
use crate::runtime::restart::writers::WriterLists;
use crate::state::prefix::IndexEntry;
use std::collections::BTreeMap;

impl Fetcher<'_> {
    /// Offer `entry`, written by another number of ranks, for the restart read in place,
    /// once rank 0 found its map's root sound (`layout`; else the reason, the same on
    /// every rank, and the caller passes the checkpoint over). Its files are checked as
    /// the application routes them, and `complete_restart` agrees on the outcome.
    pub(super) fn offer_resized(
        &mut self,
        entry: &IndexEntry,
        layout: Result<MapLayout, String>,
    ) -> Result<(), String> {
        let layout = layout?;
        let lists = WriterLists::in_prefix(
            self.job.prefix(),
            entry.id,
            entry.world_size,
            &layout,
            self.config.get(settings::CRC_ON_RESTART),
            self.config.file_buf_size(),
        );
        self.offer_in_place(entry, BTreeMap::new(), Some(lists));
        Ok(())
    }
}
