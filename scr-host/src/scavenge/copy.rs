//! The per-node step (`scr scavenge`): copy each rank's application and redundancy files
//! of a dataset out of one node's cache into the prefix's staging directory, through the
//! store's transfer type, verified, with a manifest per rank. Apart from the coordinating
//! step because it runs on every node, alone, reading only that node's storage.

use super::*;

/// Which of a rank's files a copy takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parts {
    /// Application and redundancy files: `scr scavenge` alone, for `postrun --no-copy`.
    All,
    /// Application files only: postrun's first round. Redundancy files are copied only
    /// for the sets that lost a member ([`Parts::RedundancyOf`]): a survivor's PARTNER
    /// copy or XOR parity is read only when something has to be rebuilt from it.
    Data,
    /// The redundancy files of these ranks, added to the manifests their first round
    /// wrote.
    RedundancyOf(BTreeSet<u32>),
}

impl Scavenger {
    /// The per-node step for `parts` of each rank's files (see [`Parts`]), of the ranks
    /// `only` when given (postrun gives each rank to one node).
    pub(crate) fn copy_parts(
        &self,
        node: &str,
        id: u64,
        parts: &Parts,
        only: Option<&BTreeSet<u32>>,
    ) -> NodeReport {
        if let Parts::RedundancyOf(ranks) = parts {
            return self.copy_redundancy(node, id, ranks);
        }
        let with_redundancy = *parts == Parts::All;
        let mut report = NodeReport::default();
        let buf = self.config.file_buf_size();
        // (said once per node: listing it said so already)
        let listed = self.asked.lock().is_ok_and(|l| l.contains_key(node));
        if !listed {
            self.note_missing_cntl(node);
        }
        for map in self.filemaps(node) {
            if only.is_some_and(|o| !o.contains(&map.rank)) {
                continue;
            }
            let Some(record) = map.datasets.get(&id).filter(|d| d.complete).cloned() else {
                continue;
            };
            let rank = map.rank;
            let stage = rank_stage(&self.prefix, id, rank);
            let path = manifest_path(&self.prefix, id, rank);
            // a rank whose filemap is on two nodes (a relaunch on other nodes left the
            // old one): a verified copy of the same record from the other node stands,
            // rather than being removed for a second copy that may fail
            if let Ok(prev) = read_state::<RankManifest>(&path, MANIFEST) {
                if prev.node != node && prev.copied.is_ok() && prev.record == record {
                    self.progress.done(
                        &format!(
                            "{node}: rank {rank}: already copied from {}; this node's copy is not used",
                            prev.node
                        ),
                        0,
                    );
                    continue;
                }
            }
            let _ = std::fs::remove_dir_all(&stage);
            let bytes: u64 = record.files.iter().map(|f| f.size).sum();
            self.progress.start(&format!("{node} rank {rank}"), bytes);
            let started = Instant::now();
            // (the manifest and the node's report carry the reason as text)
            let copied = self
                .copy_rank(node, &record, &stage, buf, true, with_redundancy)
                .map_err(|e| e.to_string());
            if copied.is_err() {
                // nothing of a failed copy stays: the rank counts as lost
                let _ = std::fs::remove_dir_all(&stage);
            }
            let line = match &copied {
                Ok(files) if with_redundancy => format!(
                    "{node}: rank {rank}: {} file(s) and {} redundancy file(s) of {}, {}",
                    record.files.len(),
                    files.len() - record.files.len(),
                    record.name,
                    rate(bytes, started.elapsed().as_secs_f64())
                ),
                Ok(files) => format!(
                    "{node}: rank {rank}: {} file(s) of {}, {}",
                    files.len(),
                    record.name,
                    rate(bytes, started.elapsed().as_secs_f64())
                ),
                Err(why) => format!("{node}: rank {rank}: NOT copied: {why}"),
            };
            self.progress.done(&line, bytes);
            let manifest = RankManifest {
                rank,
                node: node.to_string(),
                record,
                copied: copied.clone(),
            };
            if let Err(e) = prefix::write(&path, MANIFEST, &manifest) {
                report.failed.push((rank, e.to_string()));
                continue;
            }
            match copied {
                Ok(_) => {
                    report.copied.push(rank);
                    report.bytes += bytes;
                }
                Err(why) => report.failed.push((rank, why)),
            }
        }
        report
    }

    /// Postrun's second round on `node`: the redundancy files of `ranks` (survivors in a
    /// set that lost a member), verified and added to the manifests their first round
    /// wrote. A rank whose redundancy cannot be copied counts as lost (its manifest says
    /// why): a rebuild must not start from a survivor whose redundancy it cannot read.
    fn copy_redundancy(&self, node: &str, id: u64, ranks: &BTreeSet<u32>) -> NodeReport {
        let mut report = NodeReport::default();
        let buf = self.config.file_buf_size();
        for map in self.filemaps(node) {
            if !ranks.contains(&map.rank) {
                continue;
            }
            let rank = map.rank;
            let path = manifest_path(&self.prefix, id, rank);
            let Ok(mut manifest) = read_state::<RankManifest>(&path, MANIFEST) else {
                continue;
            };
            if manifest.node != node || manifest.copied.is_err() {
                continue;
            }
            let record = manifest.record.clone();
            let stage = rank_stage(&self.prefix, id, rank);
            self.progress
                .start(&format!("{node} rank {rank} redundancy"), 0);
            let started = Instant::now();
            let copied = self
                .copy_rank(node, &record, &stage, buf, false, true)
                .map_err(|e| e.to_string());
            let bytes: u64 = copied
                .as_ref()
                .map_or(0, |v| v.iter().map(|f| f.size).sum());
            let line = match &copied {
                Ok(files) => format!(
                    "{node}: rank {rank}: {} redundancy file(s) of {}, {}",
                    files.len(),
                    record.name,
                    rate(bytes, started.elapsed().as_secs_f64())
                ),
                Err(why) => format!("{node}: rank {rank}: redundancy NOT copied: {why}"),
            };
            self.progress.done(&line, bytes);
            manifest.copied = match (manifest.copied, copied) {
                (Ok(mut have), Ok(more)) => {
                    have.extend(more);
                    Ok(have)
                }
                (_, Err(why)) => Err(format!("its redundancy files: {why}")),
                (Err(why), _) => Err(why),
            };
            if let Err(e) = prefix::write(&path, MANIFEST, &manifest) {
                report.failed.push((rank, e.to_string()));
                continue;
            }
            match manifest.copied {
                Ok(_) => {
                    report.copied.push(rank);
                    report.bytes += bytes;
                }
                Err(why) => report.failed.push((rank, why)),
            }
        }
        report
    }

    /// Copy one rank's application and redundancy files through the store's transfer
    /// type, each verified by the host after the copy (size and the CRC32 the filemap
    /// recorded; the source's CRC32 for redundancy files, which have no record).
    fn copy_rank(
        &self,
        node: &str,
        record: &DatasetRecord,
        stage: &Path,
        buf: usize,
        data: bool,
        redundancy: bool,
    ) -> Result<Vec<FlushedFile>, CopyError> {
        let store = &record.descriptor.store;
        // a store the configuration defines, in a dataset directory the runtime made
        // (private, this user's, no link on the way): a damaged or forged filemap must not
        // make scavenge copy other files into the prefix
        if self.config.store(store).is_none() {
            return Err(CopyError::UnknownStore(store.clone()));
        }
        let cache = layout::cache_dataset_dir(&self.store_dir(store, node), record.id);
        if cache.is_dir() {
            crate::private_dir::create_private_dir(Path::new(store), &cache)?;
        }
        let mut files = Vec::new();
        for f in record.files.iter().filter(|_| data) {
            check_relative(&f.name)?;
            files.push(Planned {
                name: f.name.clone(),
                source: cache.join(&f.name),
                destination: stage.join(&f.name),
                size: f.size,
                crc32: f.crc32,
                stored: None,
            });
        }
        for r in record.redundancy.iter().filter(|_| redundancy) {
            check_relative(r)?;
            let source = cache.join(r);
            let size = std::fs::metadata(&source)
                .map_err(|e| CopyError::Redundancy {
                    path: source.clone(),
                    source: e,
                })?
                .len();
            files.push(Planned {
                name: r.clone(),
                source,
                destination: stage.join(r),
                size,
                crc32: None,
                stored: None,
            });
        }
        std::fs::create_dir_all(stage).map_err(|e| CopyError::Stage {
            path: stage.to_path_buf(),
            source: e,
        })?;
        let label = transfer_label(&self.config, &self.registry, store);
        let host = LocalHost::new(
            record.descriptor.members.first().copied().unwrap_or(0),
            node,
            &format!("transfer {}", label.transfer_type),
            Arc::new(AtomicBool::new(false)),
        );
        let state = stage.with_extension("transfer.state");
        let config = transfer_config(&self.config, &label, &state);
        let started = start_transfer(&self.registry, &config, host, label, files)
            .map_err(CopyError::Start)?;
        let out = collect(started, false, "recorded in the filemap", buf);
        let _ = std::fs::remove_file(&state);
        out.map_err(CopyError::Transfer)
    }
}

/// Why one rank's files could not be copied into its staging directory (`copy_rank`):
/// the rank counts as lost. Typed for the copy; its text goes into the rank's manifest
/// and the node's report.
#[derive(Debug, thiserror::Error)]
enum CopyError {
    /// The filemap names a store the configuration does not define.
    #[error("the filemap names store {0}, which the configuration does not define; run postrun with the job's configuration")]
    UnknownStore(String),
    /// The cache's dataset directory is not a private directory of this user's.
    #[error(transparent)]
    Dir(#[from] crate::error::ScrError),
    /// A recorded name leaves the directory.
    #[error(transparent)]
    Name(#[from] prefix::OutsidePrefix),
    /// A redundancy file could not be stat'ed.
    #[error("redundancy file {}: {source}", path.display())]
    Redundancy {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The staging directory could not be made.
    #[error("{}: {source}", path.display())]
    Stage {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The transfer could not be started.
    #[error(transparent)]
    Start(crate::transfer::StartError),
    /// The transfer or the check of a copied file failed.
    #[error("{0}")]
    Transfer(String),
}
