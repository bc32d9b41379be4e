//! The job: its identity (user, job id), the prefix, this node's control directory, and
//! where the job's directory is in each store. Known once init placed the rank on its
//! node; read by every phase, written by none.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::topology::Topology;
use super::{Result, ScrError};
use crate::config::{settings, Config, View};
use crate::private_dir::create_private_dir;
use crate::state::prefix::Provenance;

/// A store as this job uses it: whether its directory carries the node's name (a
/// node-local store of simulated nodes) and whether the job may create it.
#[derive(Clone, Debug)]
struct StoreUse {
    per_node: bool,
    mkdir: bool,
}

/// The job's identity and directories.
#[derive(Debug)]
pub(in crate::runtime) struct Job {
    user: String,
    job_id: String,
    prefix: PathBuf,
    /// This node's control directory (empty until init placed the rank).
    cntl_dir: PathBuf,
    /// This rank's node, and whether nodes are simulated (paths then carry the name).
    node: String,
    simulated: bool,
    /// The stores the configuration names, by path.
    stores: BTreeMap<String, StoreUse>,
    /// Where the job's events go (`log_enable`, `log_txt_enable`, `log_syslog_enable`),
    /// written by rank 0 alone.
    sinks: crate::events::Sinks,
    rank0: bool,
}

impl Job {
    /// The job as the configuration names it, before init placed the rank on a node.
    pub(in crate::runtime) fn new(config: &Config, rank: u32) -> Job {
        Job {
            sinks: crate::events::Sinks::from_config(config),
            rank0: rank == 0,
            user: config.get(settings::USER),
            job_id: config.get(settings::JOB_ID),
            prefix: PathBuf::from(config.get(settings::PREFIX)),
            cntl_dir: PathBuf::new(),
            node: String::new(),
            simulated: false,
            stores: BTreeMap::new(),
        }
    }

    /// The job on the node `topo` found: its control directory under `cntl_base`, and
    /// its directory in each store the configuration names.
    pub(in crate::runtime) fn place(&mut self, config: &Config, topo: &Topology) {
        self.node = topo.node().to_string();
        self.simulated = topo.simulated();
        self.cntl_dir = crate::layout::job_dir(
            Path::new(&config.get(settings::CNTL_BASE)),
            self.simulated,
            &self.node,
            &self.user,
            &self.job_id,
        );
        self.stores = config
            .stores
            .iter()
            .map(|s| {
                let usage = StoreUse {
                    per_node: config.store_view(s) == View::Node,
                    mkdir: s.mkdir,
                };
                (s.path.clone(), usage)
            })
            .collect();
    }

    /// The job id.
    pub(in crate::runtime) fn job_id(&self) -> &str {
        &self.job_id
    }

    /// The prefix (the parallel file system's directory of this job's datasets).
    pub(in crate::runtime) fn prefix(&self) -> &Path {
        &self.prefix
    }

    /// This node's control directory.
    pub(in crate::runtime) fn cntl_dir(&self) -> &Path {
        &self.cntl_dir
    }

    /// The job's directory in `store` (a store the configuration does not name is taken
    /// as node-local, as SCR does).
    pub(in crate::runtime) fn store_dir(&self, store: &str) -> PathBuf {
        let per_node = self
            .stores
            .get(&crate::config::normalize_store(store))
            .is_none_or(|s| s.per_node);
        crate::layout::job_dir(
            Path::new(store),
            self.simulated && per_node,
            &self.node,
            &self.user,
            &self.job_id,
        )
    }

    /// Dataset `id`'s directory in `store`.
    pub(in crate::runtime) fn dataset_dir(&self, store: &str, id: u64) -> PathBuf {
        crate::layout::cache_dataset_dir(&self.store_dir(store), id)
    }

    /// Create this job's directory in `store` (see [`create_private_dir`]). A store with
    /// `mkdir = false` (SCR's MKDIR=0: a job prolog or the burst buffer makes it) must
    /// hold it already; it is checked all the same.
    pub(in crate::runtime) fn create_store_dir(&self, store: &str) -> Result<()> {
        let dir = self.store_dir(store);
        let mkdir = self
            .stores
            .get(&crate::config::normalize_store(store))
            .is_none_or(|s| s.mkdir);
        if !mkdir && !dir.is_dir() {
            return Err(ScrError::Usage(format!(
                "store {store}: mkdir = false, but the job's directory {} does not exist on node {}; create it before the job starts (as a job prolog would) or set mkdir = true",
                dir.display(),
                self.node
            )));
        }
        create_private_dir(Path::new(store), &dir)
    }

    /// Append `event` to the prefix's event log (rank 0; see [`crate::events`]).
    pub(in crate::runtime) fn log_event(&self, event: crate::events::Event) {
        self.log_event_of(&self.job_id, event);
    }

    /// [`Job::log_event`] for job `job_id` (a flush a previous job began).
    pub(in crate::runtime) fn log_event_of(&self, job_id: &str, event: crate::events::Event) {
        if self.rank0 {
            self.sinks.record(&self.prefix, job_id, event);
        }
    }

    /// Rank 0 at init: when the event log's last run started and never finalized (or
    /// halted), that run failed — killed, a node lost, a rank crashed. Logged as a
    /// failure so that `scr log` can count the time between failures.
    pub(in crate::runtime) fn log_previous_run_failure(&self) {
        use crate::events::Event;
        let Ok((records, _)) = crate::events::read(&self.prefix) else {
            return;
        };
        let last_init = records
            .iter()
            .rposition(|r| matches!(r.event, Event::Init { .. }));
        let Some(i) = last_init else {
            return;
        };
        let ended = records[i..]
            .iter()
            .any(|r| matches!(r.event, Event::Finalize { .. } | Event::Halt { .. }));
        if !ended {
            self.log_event(Event::Failure {
                what: format!(
                    "the previous run (job {}, started at {:.0}) ended without finalize",
                    records[i].job_id, records[i].time
                ),
                rank: None,
            });
        }
    }
}

/// Who makes dataset records in this job (`user`, `job_id`, `cluster_name`), and when it
/// was `created` (unknown for records of earlier releases: now, the flush's time, is the
/// closest that can be told).
pub fn provenance(config: &Config, created: Option<i64>) -> Provenance {
    let now_secs = super::now_secs;
    let known = |s: String| Some(s).filter(|s| !s.is_empty());
    Provenance {
        user: known(config.get(settings::USER)),
        job_id: known(config.get(settings::JOB_ID)),
        cluster: known(config.get(settings::CLUSTER_NAME)),
        created: created.or_else(|| Some(now_secs())),
    }
}
