//! The dataset being written, a part of the runtime (between start_output and
//! complete_output). Its fields are the output phase's alone (`output`); every other
//! phase asks through its verbs.

use std::collections::HashSet;
use std::time::Instant;

use crate::state::filemap::DatasetRecord;

/// The dataset being written.
pub(in crate::runtime) struct Output {
    pub(super) record: DatasetRecord,
    pub(super) desc: usize,
    pub(super) started: Instant,
    /// This rank's redundancy file names (relative), asked of the scheme once at
    /// start_output so route_file can refuse them without asking per file.
    pub(super) redundancy_names: Vec<String>,
    /// The names routed so far (`record.files`' names), so that a name routed again is
    /// found without a scan of every file.
    pub(super) routed: HashSet<String>,
    /// A bypass dataset routed a name that already existed in the prefix (see
    /// `bypass`).
    pub(super) overwrites: bool,
}

impl Output {
    /// The dataset's name.
    pub(in crate::runtime) fn name(&self) -> &str {
        &self.record.name
    }

    /// The dataset's record as routed so far.
    pub(in crate::runtime) fn record(&self) -> &DatasetRecord {
        &self.record
    }
}
