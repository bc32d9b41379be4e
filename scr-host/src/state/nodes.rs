//! The nodes file (SCR's `nodes.scr`, body `{"NODES": n}`): how many nodes a run uses.
//! Init writes it into each node's control directory ([`crate::layout::nodes_file`], by
//! the node's first rank) and, on rank 0, into the prefix
//! ([`crate::layout::prefix_nodes_file`]), where `scr run` reads it before a relaunch
//! (see [`crate::launch::nodes::previous_run_nodes`]).

use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{read_state, write_private_state, write_state, StateError};

/// State-file kind of the nodes file.
pub const KIND: &str = "nodes";

/// The nodes file's body.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Nodes {
    /// How many nodes the run uses (SCR's `NODES`: the number of distinct nodes its
    /// ranks run on).
    #[serde(rename = "NODES")]
    pub nodes: u64,
}

impl Nodes {
    /// Write the file at `path` atomically; `private` (a control directory): mode 0600,
    /// never through a symbolic link.
    pub fn write(&self, path: &Path, private: bool) -> io::Result<()> {
        if private {
            write_private_state(path, KIND, self)
        } else {
            write_state(path, KIND, self)
        }
    }

    /// Read the file at `path` (an error when absent, damaged or of another version).
    pub fn read(path: &Path) -> Result<Nodes, StateError> {
        read_state(path, KIND)
    }
}
