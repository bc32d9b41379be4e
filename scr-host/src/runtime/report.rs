//! What init and the run found, for the event log and the application: the datasets init
//! dropped, the nodes whose cache was lost, when init began, the allocation's end, and
//! whether the note on files without a CRC32 was given. Phases report into it through
//! its verbs; finalize and the event log read it.

use std::collections::BTreeSet;
use std::time::Instant;

/// What init and the run found.
#[derive(Debug)]
pub(in crate::runtime) struct RunReport {
    /// Datasets init dropped (the application may ask).
    lost: Vec<String>,
    /// Nodes whose cache init found lost (for the event log).
    lost_nodes: BTreeSet<String>,
    /// Nodes lost beyond those `World::gather_some` brought to rank 0 by name.
    lost_nodes_unnamed: u64,
    /// When init began (the finalize event says how long the run was).
    init_started: Instant,
    /// Rank 0: the allocation's end and where it was read from (`halt_seconds` counts
    /// back from it); read once at init.
    allocation_end: Option<(i64, String)>,
    /// Whether rank 0 said that files without a CRC32 are checked by size only.
    crc_note_given: bool,
}

impl RunReport {
    /// A report of a run whose init begins now.
    pub(in crate::runtime) fn new() -> RunReport {
        RunReport {
            lost: Vec::new(),
            lost_nodes: BTreeSet::new(),
            lost_nodes_unnamed: 0,
            init_started: Instant::now(),
            allocation_end: None,
            crc_note_given: false,
        }
    }

    /// When init began.
    pub(in crate::runtime) fn init_started(&self) -> Instant {
        self.init_started
    }

    /// Reports of datasets init dropped.
    pub(in crate::runtime) fn lost(&self) -> &[String] {
        &self.lost
    }

    /// Init dropped a dataset: `report` says which and why.
    pub(in crate::runtime) fn add_lost(&mut self, report: String) {
        self.lost.push(report);
    }

    /// Nodes found to have lost their cache: `named` by name, `total` in all (more than
    /// named when the gather brought only some names).
    pub(in crate::runtime) fn add_lost_nodes(
        &mut self,
        named: impl IntoIterator<Item = String>,
        total: u64,
    ) {
        let mut brought = 0u64;
        for n in named {
            brought += 1;
            self.lost_nodes.insert(n);
        }
        self.lost_nodes_unnamed = self.lost_nodes_unnamed.max(total.saturating_sub(brought));
    }

    /// The nodes named as having lost their cache.
    pub(in crate::runtime) fn lost_nodes(&self) -> &BTreeSet<String> {
        &self.lost_nodes
    }

    /// Nodes lost beyond those named.
    pub(in crate::runtime) fn lost_nodes_unnamed(&self) -> u64 {
        self.lost_nodes_unnamed
    }

    /// The allocation's end and where it was read from (rank 0, after init).
    pub(in crate::runtime) fn allocation_end(&self) -> Option<&(i64, String)> {
        self.allocation_end.as_ref()
    }

    /// Record the allocation's end (rank 0, once at init).
    pub(in crate::runtime) fn set_allocation_end(&mut self, end: Option<(i64, String)>) {
        self.allocation_end = end;
    }

    /// `true` the first time only: the note on files without a CRC32 is given once.
    pub(in crate::runtime) fn crc_note_due(&mut self) -> bool {
        !std::mem::replace(&mut self.crc_note_given, true)
    }
}
