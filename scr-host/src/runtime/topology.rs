//! Where this rank is in the job: its rank, the job's size, its node (simulated or real),
//! the node's ranks and the number of nodes. Found once by init (collectively) and fixed
//! from then on: every phase reads it, none writes it.

use super::collective::agree_on;
use super::world::World;
use super::{sets, Result, ScrError};
use crate::config::{settings, Config};

/// Where this rank is in the job (fixed after init).
#[derive(Debug)]
pub(in crate::runtime) struct Topology {
    rank: u32,
    size: u32,
    node: String,
    /// World ranks on this rank's node, in rank order (from a split by node name: no
    /// rank learns every rank's node).
    node_ranks: Vec<u32>,
    /// Nodes in the job.
    node_count: u32,
    simulated: bool,
}

impl Topology {
    /// A rank not placed on a node yet (before init's collective steps).
    pub(in crate::runtime) fn unplaced(world: &dyn World) -> Topology {
        Topology {
            rank: world.rank(),
            size: world.size(),
            node: String::new(),
            node_ranks: Vec::new(),
            node_count: 0,
            simulated: false,
        }
    }

    /// This rank's node (the testing override `node_names`, else the host name; agreed),
    /// the ranks on it and the number of nodes (collective over `world`).
    pub(in crate::runtime) fn find(world: &dyn World, config: &Config) -> Result<Topology> {
        let (rank, size) = (world.rank(), world.size());
        let node_names = config.get(settings::NODE_NAMES);
        let simulated = !node_names.is_empty();
        let node = if simulated {
            let names: Vec<&str> = node_names.split(',').map(str::trim).collect();
            // (by the process's rank in the whole job: see `World::process_index`)
            let index = world.process_index();
            match names.get(index as usize) {
                Some(n) if !n.is_empty() => Ok(n.to_string()),
                _ if index == rank => Err(ScrError::Usage(format!(
                    "node_names lists {} node(s) but the job has {size} ranks; give one name per rank",
                    names.len()
                ))),
                _ => Err(ScrError::Usage(format!(
                    "node_names lists {} node(s) but this is process {index} of the MPI job; give one name per process, spares included",
                    names.len()
                ))),
            }
        } else {
            Ok(std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "localhost".into()))
        };
        let node = agree_on(world, node)?;
        // the ranks of this node find each other by a split by node name (see
        // sets::split_by_value) and count the nodes with one reduction: per rank
        // O(log P) steps and O(ranks per node) bytes (was: every rank's node name on
        // every rank, O(P))
        let node_comm = sets::split_by_value_in(world, &node);
        let node_ranks = node_comm.all_gather_u32(rank);
        let first = u64::from(node_comm.rank() == 0);
        let node_count = u32::try_from(world.sum_u64(first)).unwrap_or(u32::MAX);
        Ok(Topology {
            rank,
            size,
            node,
            node_ranks,
            node_count,
            simulated,
        })
    }

    /// This process's world rank.
    pub(in crate::runtime) fn rank(&self) -> u32 {
        self.rank
    }

    /// The number of ranks in the job.
    pub(in crate::runtime) fn size(&self) -> u32 {
        self.size
    }

    /// This rank's node name (simulated or real).
    pub(in crate::runtime) fn node(&self) -> &str {
        &self.node
    }

    /// World ranks on this rank's node, in rank order.
    pub(in crate::runtime) fn node_ranks(&self) -> &[u32] {
        &self.node_ranks
    }

    /// Nodes in the job.
    pub(in crate::runtime) fn node_count(&self) -> u32 {
        self.node_count
    }

    /// Whether the nodes are simulated (`node_names`): node-local paths then carry the
    /// node's name.
    pub(in crate::runtime) fn simulated(&self) -> bool {
        self.simulated
    }

    /// Whether this rank is the first (lowest) on its node.
    pub(in crate::runtime) fn first_on_node(&self) -> bool {
        self.node_ranks.first() == Some(&self.rank)
    }

    /// A message at info level from rank 0 alone (the same on every rank: one line, not
    /// one per rank). Whether it is printed is the subscriber's choice (`SCR_DEBUG`, or
    /// `RUST_LOG`): never filtered here, so a `RUST_LOG` directive can show it.
    pub(in crate::runtime) fn info(&self, msg: &str) {
        if self.rank == 0 {
            tracing::info!("{msg}");
        }
    }

    /// A warning from rank 0 alone (the same on every rank).
    pub(in crate::runtime) fn warn(&self, msg: &str) {
        if self.rank == 0 {
            tracing::warn!("{msg}");
        }
    }
}
