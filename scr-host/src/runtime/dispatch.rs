//! Dispatching this rank's transfers: the runtime's side of [`crate::transfer`] (the
//! transfer type of a store, its state file in the control directory, the host that
//! carries the runtime's cancel flag).

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use scr_plugin::TransferConfig;

use crate::local_host::LocalHost;
use crate::transfer::{
    paced, start_transfer, transfer_config, transfer_label, Label, Planned, StartError, Started,
};

use super::job::Job;
use super::topology::Topology;
use super::DatasetRecord;
use crate::config::Config;
use crate::registry::Registry;
use crate::state::prefix;

/// This rank's [`Transfers`] over the parts of `$s` (the runtime, or a phase holding
/// them).
macro_rules! transfers {
    ($s:expr) => {
        $crate::runtime::dispatch::Transfers {
            config: &$s.config,
            registry: &$s.registry,
            job: &$s.job,
            topo: &$s.topo,
            cancel: $s.flushing.cancel_flag(),
        }
    };
}
pub(in crate::runtime) use transfers;

/// This rank's transfers: the configuration and registry that name a store's transfer
/// type, the job's directories, and the cancel flag every transfer's host carries.
pub(in crate::runtime) struct Transfers<'a> {
    pub(in crate::runtime) config: &'a Config,
    pub(in crate::runtime) registry: &'a Registry,
    pub(in crate::runtime) job: &'a Job,
    pub(in crate::runtime) topo: &'a Topology,
    pub(in crate::runtime) cancel: Arc<AtomicBool>,
}

impl Transfers<'_> {
    /// The configuration of a transfer of `label`'s type persisting its state in
    /// `state_file` ([`transfer_config`]); a `background` flush's is held to this rank's
    /// share of `flush_async_bw` and to `flush_async_percent` ([`paced`]).
    pub(in crate::runtime) fn config(
        &self,
        label: &Label,
        state_file: &Path,
        background: bool,
    ) -> TransferConfig {
        let mut config = transfer_config(self.config, label, state_file);
        if background {
            let provider = self
                .registry
                .provider(crate::registry::Kind::Transfer, &label.transfer_type)
                .map(|l| l.name.as_str())
                .unwrap_or_default();
            paced(self.config, self.topo.size(), provider, &mut config);
        }
        config
    }

    /// The state file of this rank's transfer of dataset `id`.
    pub(in crate::runtime) fn state_file(&self, id: u64) -> PathBuf {
        crate::layout::transfer_state(self.job.cntl_dir(), id, self.topo.rank())
    }

    /// The transfer type of `store` and the library providing it ([`transfer_label`]).
    pub(in crate::runtime) fn label_of(&self, store: &str) -> Label {
        transfer_label(self.config, self.registry, store)
    }

    /// The host a transfer of `label`'s type gets: its log is the runtime's and its
    /// cancellation flag is the runtime's cancel flag.
    pub(in crate::runtime) fn host(&self, label: &Label) -> LocalHost {
        LocalHost::new(
            self.topo.rank(),
            self.topo.node(),
            &format!("transfer {}", label.transfer_type),
            Arc::clone(&self.cancel),
        )
    }

    /// Create, fill and dispatch a transfer of `label`'s type for `files`, with a host
    /// whose log is the runtime's and whose cancellation flag is the runtime's cancel flag.
    pub(in crate::runtime) fn dispatch(
        &self,
        label: Label,
        files: Vec<Planned>,
        state_file: &Path,
        background: bool,
    ) -> std::result::Result<Started, StartError> {
        let host = self.host(&label);
        let config = self.config(&label, state_file, background);
        start_transfer(self.registry, &config, host, label, files)
    }

    /// Start this rank's transfer of `rec` to the prefix: to `<prefix>/<name>`, or into
    /// the dataset's own directory when `relocate`; paced when in the `background`.
    pub(in crate::runtime) fn start(
        &self,
        rec: &DatasetRecord,
        relocate: bool,
        background: bool,
    ) -> std::result::Result<Started, StartError> {
        let label = self.label_of(&rec.descriptor.store);
        let cache_dir = self.job.dataset_dir(&rec.descriptor.store, rec.id);
        let files: Vec<Planned> = rec
            .files
            .iter()
            .map(|f| {
                let stored = relocate.then(|| prefix::relocated(rec.id, &f.name));
                Planned {
                    name: f.name.clone(),
                    source: cache_dir.join(&f.name),
                    destination: self.job.prefix().join(stored.as_deref().unwrap_or(&f.name)),
                    size: f.size,
                    crc32: f.crc32,
                    stored,
                }
            })
            .collect();
        self.dispatch(label, files, &self.state_file(rec.id), background)
    }
}
