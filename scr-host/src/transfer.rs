//! Transfers: what flush, fetch and scavenge share to move one rank's files through a
//! transfer plugin, and the check that nothing a plugin says is trusted (every file has one
//! Complete result matched by source and destination, and the host re-reads the
//! destination's size and CRC32).

use crate::config::settings;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use scr_plugin::{
    host_ref, FileResult, HostServices as _, PluginError, TransferBox, TransferConfig,
    TransferStatus,
};

use crate::config::Config;
use crate::integrity;
use crate::local_host::LocalHost;
use crate::registry::{Kind, Registry, RegistryError};
use crate::state::prefix::FlushedFile;

/// What one rank's part of a flush produced.
pub(crate) type RankOutcome = std::result::Result<Vec<FlushedFile>, String>;

/// One file of a transfer and what it must be once the transfer says it is done.
#[derive(Clone, Debug)]
pub(crate) struct Planned {
    /// The file's name (relative to the prefix and to the dataset's cache directory).
    pub name: String,
    pub source: PathBuf,
    pub destination: PathBuf,
    /// Size the destination must have.
    pub size: u64,
    /// CRC32 the destination must have, when one was recorded (at `complete_output` for a
    /// flush, in rank2file for a fetch).
    pub crc32: Option<u32>,
    /// The destination relative to the prefix when a flush relocated it
    /// ([`crate::layout::relocated`]).
    pub stored: Option<String>,
}

/// Why a transfer could not be started ([`start_transfer`], and a flush's transfer
/// reopened at init).
#[derive(Debug, thiserror::Error)]
pub(crate) enum StartError {
    /// The registry could not create (or reopen) the transfer.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The plugin refused a file, the dispatch or its results.
    #[error("{error} ({label})")]
    Plugin {
        error: PluginError,
        label: Box<Label>,
    },
}

/// Why a transfer failed, or why its outcome is not trusted. Every message but the
/// plugin's own (which [`collect`] completes) names the transfer (its label boxed, so
/// that the error stays small).
#[derive(Debug, thiserror::Error)]
pub(crate) enum TransferError {
    /// Waiting for the transfer failed (the plugin's error).
    #[error("{0}")]
    Plugin(PluginError),
    /// The runtime stopped while a background transfer ran.
    #[error("cancelled by the runtime (it stopped before the flush ended)")]
    Cancelled,
    /// The transfer's overall status is not Complete.
    #[error("transfer did not complete: {why} ({label})")]
    NotComplete { why: String, label: Box<Label> },
    /// A result names a file the transfer was not given.
    #[error("the transfer reported a file it was not given ({from} -> {to}) ({label})")]
    NotGiven {
        from: String,
        to: String,
        label: Box<Label>,
    },
    /// No result for a planned file.
    #[error("{name}: the transfer returned no result for it ({} -> {}) ({label})", from.display(), to.display())]
    NoResult {
        name: String,
        from: PathBuf,
        to: PathBuf,
        label: Box<Label>,
    },
    /// Several results for a planned file.
    #[error("{name}: the transfer returned {count} results for it ({label})")]
    Results {
        name: String,
        count: usize,
        label: Box<Label>,
    },
    /// A planned file's result is not Complete.
    #[error("{name}: {why} ({label})")]
    FileFailed {
        name: String,
        why: String,
        label: Box<Label>,
    },
    /// The source cannot be read to compute the CRC32 the copy must have.
    #[error("{name}: the source {} cannot be read to check the copy: {source} ({label})", path.display())]
    SourceUnreadable {
        name: String,
        path: PathBuf,
        source: std::io::Error,
        label: Box<Label>,
    },
    /// The destination cannot be read back.
    #[error("{name}: expected {want}, but {} cannot be read after the transfer reported it complete: {source} ({label})", path.display())]
    DestinationUnreadable {
        name: String,
        want: Expected,
        path: PathBuf,
        source: std::io::Error,
        label: Box<Label>,
    },
    /// The destination's size or CRC32 differs from what it must be.
    #[error("{name}: expected {want}, {} has {size} bytes CRC32 {crc:08x} ({label})", path.display())]
    Differs {
        name: String,
        want: Expected,
        path: PathBuf,
        size: u64,
        crc: u32,
        label: Box<Label>,
    },
    /// The CRC32 the transfer claims differs from the destination's.
    #[error("{name}: the transfer reported CRC32 {claimed:08x}, {} has CRC32 {crc:08x} ({label})", path.display())]
    ClaimedCrc {
        name: String,
        claimed: u32,
        path: PathBuf,
        crc: u32,
        label: Box<Label>,
    },
}

/// What a destination must be: its size and CRC32, and where that CRC32 comes from.
#[derive(Clone, Debug)]
pub(crate) struct Expected {
    size: u64,
    crc: u32,
    from: String,
}

impl std::fmt::Display for Expected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} bytes CRC32 {:08x} ({})",
            self.size, self.crc, self.from
        )
    }
}

/// Which transfer did it, for messages that must let an admin find the culprit.
#[derive(Clone, Debug)]
pub(crate) struct Label {
    pub transfer_type: String,
    pub plugin: String,
}

/// A dispatched transfer with what it was asked to do.
pub(crate) struct Started {
    pub transfer: TransferBox,
    pub files: Vec<Planned>,
    pub label: Label,
    pub host: LocalHost,
}

/// Wait for `transfer`. A background waiter (`poll`) asks with `test` between short
/// sleeps so that it can see the runtime's cancellation flag and stop the transfer even
/// when the plugin's `wait` never looks at `is_cancelled`.
pub(crate) fn wait_transfer(
    transfer: &mut TransferBox,
    host: &LocalHost,
    poll: bool,
) -> std::result::Result<TransferStatus, TransferError> {
    if !poll {
        return transfer
            .wait(host_ref(host))
            .into_result()
            .map_err(TransferError::Plugin);
    }
    loop {
        if host.is_cancelled() {
            let _ = transfer.cancel(host_ref(host));
            return Err(TransferError::Cancelled);
        }
        match transfer.test(host_ref(host)).into_result() {
            Ok(TransferStatus::InProgress) => std::thread::sleep(Duration::from_millis(20)),
            Ok(status) => return Ok(status),
            Err(e) => return Err(TransferError::Plugin(e)),
        }
    }
}

/// Check a finished transfer against what it was asked to do, trusting none of its
/// claims: its overall status ([`check_status`]), then exactly one Complete result per
/// added file, matched by source *and* destination ([`match_results`], [`sole_result`]),
/// then the destination itself, re-read by the host ([`check_destination`]): it must
/// exist with the planned size and, where a CRC32 was recorded, that CRC32. A CRC32 the
/// transfer reports must also match what the host computed.
///
/// Returns the CRC32 the host computed for each planned file, in order. `recorded` says
/// where the expected CRC comes from, for the message.
pub(crate) fn verify(
    label: &Label,
    status: TransferStatus,
    results: &[FileResult],
    files: &[Planned],
    recorded: &str,
    buf: usize,
) -> std::result::Result<Vec<u32>, TransferError> {
    check_status(label, status, results)?;
    let matched = match_results(label, results, files)?;
    files
        .iter()
        .zip(&matched)
        .map(|(p, rs)| {
            let r = sole_result(label, p, rs)?;
            check_destination(label, p, r, recorded, buf)
        })
        .collect()
}

/// The transfer's overall status must be Complete: else the first error a file's result
/// gives (or the status itself) says why it is not.
pub(crate) fn check_status(
    label: &Label,
    status: TransferStatus,
    results: &[FileResult],
) -> std::result::Result<(), TransferError> {
    if status == TransferStatus::Complete {
        return Ok(());
    }
    let why = results
        .iter()
        .find_map(|r| r.error.clone().into_option())
        .map(|e| e.into_string())
        .unwrap_or_else(|| format!("{status:?}"));
    Err(TransferError::NotComplete {
        why,
        label: Box::new(label.clone()),
    })
}

/// The results the transfer reported for each planned file (by position in `files`),
/// matched by source *and* destination: a plugin may report in any order, but not for
/// a file it was not given.
pub(crate) fn match_results<'r>(
    label: &Label,
    results: &'r [FileResult],
    files: &[Planned],
) -> std::result::Result<Vec<Vec<&'r FileResult>>, TransferError> {
    let index: BTreeMap<(&Path, &Path), usize> = files
        .iter()
        .enumerate()
        .map(|(i, p)| ((p.source.as_path(), p.destination.as_path()), i))
        .collect();
    let mut matched: Vec<Vec<&FileResult>> = vec![Vec::new(); files.len()];
    for r in results {
        let at = index
            .get(&(
                Path::new(r.source.as_str()),
                Path::new(r.destination.as_str()),
            ))
            .copied();
        match at {
            Some(i) => matched[i].push(r),
            None => {
                return Err(TransferError::NotGiven {
                    from: r.source.to_string(),
                    to: r.destination.to_string(),
                    label: Box::new(label.clone()),
                })
            }
        }
    }
    Ok(matched)
}

/// The one result `rs` the transfer reported for planned file `p`, which must say
/// Complete: none, several, or one that is not Complete fails the transfer.
pub(crate) fn sole_result<'r>(
    label: &Label,
    p: &Planned,
    rs: &[&'r FileResult],
) -> std::result::Result<&'r FileResult, TransferError> {
    let r = match rs {
        [r] => *r,
        [] => {
            return Err(TransferError::NoResult {
                name: p.name.clone(),
                from: p.source.clone(),
                to: p.destination.clone(),
                label: Box::new(label.clone()),
            })
        }
        many => {
            return Err(TransferError::Results {
                name: p.name.clone(),
                count: many.len(),
                label: Box::new(label.clone()),
            })
        }
    };
    if r.status != TransferStatus::Complete {
        let why = r
            .error
            .clone()
            .into_option()
            .map(|e| e.into_string())
            .unwrap_or_else(|| format!("{:?}", r.status));
        return Err(TransferError::FileFailed {
            name: p.name.clone(),
            why,
            label: Box::new(label.clone()),
        });
    }
    Ok(r)
}

/// Re-read the destination of planned file `p` and check it against the size and CRC32
/// it must have (recorded, else computed from the source), and against the CRC32 the
/// transfer's result `r` claims, if it claims one. Returns the CRC32 the host computed.
pub(crate) fn check_destination(
    label: &Label,
    p: &Planned,
    r: &FileResult,
    recorded: &str,
    buf: usize,
) -> std::result::Result<u32, TransferError> {
    // with no CRC32 recorded (crc_on_copy = false), the source is the reference: a
    // copy of the right size with other bytes must not become the recorded truth
    let (expected, from) = match p.crc32 {
        Some(c) => (c, recorded),
        None => (
            integrity::file_crc32(&p.source, buf).map_err(|source| {
                TransferError::SourceUnreadable {
                    name: p.name.clone(),
                    path: p.source.clone(),
                    source,
                    label: Box::new(label.clone()),
                }
            })?,
            "of the source",
        ),
    };
    let want = Expected {
        size: p.size,
        crc: expected,
        from: from.to_string(),
    };
    let meta = integrity::stat_file(&p.destination, true, buf).map_err(|source| {
        TransferError::DestinationUnreadable {
            name: p.name.clone(),
            want: want.clone(),
            path: p.destination.clone(),
            source,
            label: Box::new(label.clone()),
        }
    })?;
    let got = meta.crc32.unwrap_or_default();
    if meta.size != p.size || got != expected {
        return Err(TransferError::Differs {
            name: p.name.clone(),
            want,
            path: p.destination.clone(),
            size: meta.size,
            crc: got,
            label: Box::new(label.clone()),
        });
    }
    if let Some(claimed) = r.crc32.into_option() {
        if claimed != got {
            return Err(TransferError::ClaimedCrc {
                name: p.name.clone(),
                claimed,
                path: p.destination.clone(),
                crc: got,
                label: Box::new(label.clone()),
            });
        }
    }
    Ok(got)
}

/// Wait for a started transfer and verify it (see [`verify`]); this rank's flushed files
/// with the CRC32s the host computed from the destinations.
pub(crate) fn collect(started: Started, poll: bool, recorded: &str, buf: usize) -> RankOutcome {
    let Started {
        mut transfer,
        files,
        label,
        host,
    } = started;
    let outcome = wait_transfer(&mut transfer, &host, poll)
        .map_err(|e| format!("{e} ({label})"))
        .and_then(|status| {
            let results = transfer
                .results()
                .into_result()
                .map_err(|e| format!("{e} ({label})"))?;
            verify(&label, status, &results, &files, recorded, buf).map_err(|e| e.to_string())
        });
    let crcs = match outcome {
        Ok(crcs) => crcs,
        Err(why) => {
            // a transfer that failed (a full prefix, a quota) may leave its partial
            // files (the copy types' `*.scr-part`) holding the space every later flush
            // needs: cancelling is how a plugin is told to remove what it has not
            // finished (the destinations it completed are the caller's to remove)
            if !host.is_cancelled() {
                if let Err(e) = transfer.cancel(host_ref(&host)).into_result() {
                    tracing::warn!(
                        "cancelling the failed transfer ({label}): {e}; it may leave partial files"
                    );
                }
            }
            return Err(why);
        }
    };
    Ok(files
        .into_iter()
        .zip(crcs)
        .map(|(p, crc)| FlushedFile {
            name: p.name,
            size: p.size,
            crc32: Some(crc),
            stored: p.stored,
        })
        .collect())
}

/// The transfer type of `store` (its own `type`, else `flush_type`), and a label naming
/// it and the library that provides it.
pub(crate) fn transfer_label(config: &Config, registry: &Registry, store: &str) -> Label {
    let transfer_type = config.store_transfer_at(store);
    let plugin = registry
        .provider(Kind::Transfer, &transfer_type)
        .map(|l| l.path.display().to_string())
        .unwrap_or_else(|e| format!("(none: {e})"));
    Label {
        transfer_type,
        plugin,
    }
}

/// The configuration of a transfer of `label`'s type persisting its state in
/// `state_file`.
pub(crate) fn transfer_config(config: &Config, label: &Label, state_file: &Path) -> TransferConfig {
    TransferConfig {
        transfer_type: label.transfer_type.as_str().into(),
        state_file: state_file.display().to_string().into(),
        // the host re-reads every destination and checks its CRC32 whatever the
        // transfer says; crc_on_flush adds the transfer's own CRC as a second check
        crc32: config.get(settings::CRC_ON_FLUSH),
        preserve_metadata: true,
        settings: config.plugin_settings(&label.transfer_type).into(),
    }
}

/// The library that provides the built-in transfer types: the only one known to read
/// the pacing settings ([`paced`]).
pub(crate) const BUILTIN_TRANSFERS: &str = "scr-axl-transfer";

/// The smallest share of `flush_async_bw` a rank's transfer gets, bytes per second: the
/// copy engine pauses after each chunk (at least 4 KiB), and a smaller share would make
/// a pause long enough to keep a cancelled transfer (finalize, a halt) waiting.
const MIN_SHARE: u64 = 16 << 10;

/// Whether background flushes are paced at all: a `flush_async_bw` cap, or a
/// `flush_async_percent` below 100.
pub(crate) fn pacing_asked(config: &Config) -> bool {
    let percent = config.get(settings::FLUSH_ASYNC_PERCENT);
    config.get(settings::FLUSH_ASYNC_BW) > 0 || (percent > 0.0 && percent < 100.0)
}

/// `config` (a background flush's transfer, of a type `provider` provides) held to this
/// rank's share of `flush_async_bw` over `ranks` ranks and to `flush_async_percent`, as
/// the built-in copy engine's `bandwidth` and `percent` settings. Another library's type
/// gets no setting it might refuse (`false`: not paced; init says so).
pub(crate) fn paced(
    config: &Config,
    ranks: u32,
    provider: &str,
    transfer: &mut TransferConfig,
) -> bool {
    if !pacing_asked(config) {
        return true;
    }
    let bw = config.get(settings::FLUSH_ASYNC_BW);
    let percent = config.get(settings::FLUSH_ASYNC_PERCENT);
    if provider != BUILTIN_TRANSFERS {
        return false;
    }
    if bw > 0 {
        // at least MIN_SHARE, so the pauses stay short (a cap below it per rank still
        // paces every rank, at MIN_SHARE)
        let share = (bw / u64::from(ranks.max(1))).max(MIN_SHARE) as f64;
        stricter(&mut transfer.settings, "bandwidth", share);
    }
    if percent > 0.0 && percent < 100.0 {
        stricter(&mut transfer.settings, "percent", percent);
    }
    true
}

/// Set the copy engine's cap `key` (`bandwidth` or `percent`, where a lower value paces
/// harder) to `value`, or keep the transfer type's own value of it where that is a
/// stricter cap: a `[plugins.<type>]` setting an admin made for every transfer of the
/// type and `flush_async_bw`'s share for background flushes both hold, so a background
/// flush keeps the lower. The engine reads the first value of a key, so the one value is
/// replaced in place; an own value that is no number is left for the engine to refuse by
/// name.
fn stricter(settings: &mut abi_stable::std_types::RVec<scr_plugin::Param>, key: &str, value: f64) {
    let text = |v: f64| match key {
        "bandwidth" => format!("{}", v as u64),
        _ => v.to_string(),
    };
    let own = settings
        .iter_mut()
        .find(|p| p.key.as_str().eq_ignore_ascii_case(key));
    match own {
        None => settings.push(scr_plugin::Param {
            key: key.into(),
            value: text(value).into(),
        }),
        Some(p) => match p.value.as_str().trim().parse::<f64>() {
            // 0 (and, for percent, 100 or more) sets no cap of its own
            Ok(v) if v > 0.0 && (key == "bandwidth" || v < 100.0) => {
                p.value = text(v.min(value)).into();
            }
            Ok(_) => p.value = text(value).into(),
            Err(_) => {}
        },
    }
}

/// Create a transfer through `registry`, add `files` and dispatch it (flush, fetch and
/// scavenge all start theirs here).
pub(crate) fn start_transfer(
    registry: &Registry,
    config: &TransferConfig,
    host: LocalHost,
    label: Label,
    files: Vec<Planned>,
) -> std::result::Result<Started, StartError> {
    let plugin = |error: PluginError| StartError::Plugin {
        error,
        label: Box::new(label.clone()),
    };
    let mut transfer = registry.new_transfer(config, host_ref(&host))?;
    for p in &files {
        transfer
            .add(
                p.source.display().to_string().as_str().into(),
                p.destination.display().to_string().as_str().into(),
            )
            .into_result()
            .map_err(plugin)?;
    }
    transfer
        .dispatch(host_ref(&host))
        .into_result()
        .map_err(plugin)?;
    Ok(Started {
        transfer,
        files,
        label,
        host,
    })
}

impl std::fmt::Display for Label {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "transfer type `{}`, plugin {}",
            self.transfer_type, self.plugin
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    fn label() -> Label {
        Label {
            transfer_type: "LIAR".into(),
            plugin: "/lib/libliar.so".into(),
        }
    }

    /// Two source files and their planned destinations (not yet written).
    fn plan(dir: &Path) -> Vec<Planned> {
        ["a.ckpt", "b.ckpt"]
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let data = vec![i as u8 + 1; 100 + i];
                let source = dir.join(format!("src_{name}"));
                std::fs::write(&source, &data).unwrap();
                Planned {
                    name: name.to_string(),
                    source,
                    destination: dir.join(format!("dst_{name}")),
                    size: data.len() as u64,
                    crc32: Some(crc32fast::hash(&data)),
                    stored: None,
                }
            })
            .collect()
    }

    fn copy_all(files: &[Planned]) {
        for p in files {
            std::fs::copy(&p.source, &p.destination).unwrap();
        }
    }

    fn result(p: &Planned) -> FileResult {
        FileResult {
            source: p.source.display().to_string().into(),
            destination: p.destination.display().to_string().into(),
            bytes: p.size,
            crc32: p.crc32.into(),
            status: TransferStatus::Complete,
            error: None.into(),
        }
    }

    fn check(files: &[Planned], results: &[FileResult]) -> std::result::Result<Vec<u32>, String> {
        verify(
            &label(),
            TransferStatus::Complete,
            results,
            files,
            "when written",
            4096,
        )
        .map_err(|e| e.to_string())
    }

    #[test]
    fn results_in_any_order_are_matched_by_source_and_destination() {
        let dir = tempfile::tempdir().unwrap();
        let files = plan(dir.path());
        copy_all(&files);
        let mut results: Vec<FileResult> = files.iter().map(result).collect();
        results.reverse();
        let crcs = check(&files, &results).unwrap();
        assert_eq!(crcs, vec![files[0].crc32.unwrap(), files[1].crc32.unwrap()]);
    }

    #[test]
    fn a_missing_destination_is_refused_naming_file_sizes_and_transfer() {
        let dir = tempfile::tempdir().unwrap();
        let files = plan(dir.path());
        let results: Vec<FileResult> = files.iter().map(result).collect();
        let err = check(&files, &results).unwrap_err();
        assert!(
            err.starts_with("a.ckpt: expected 100 bytes CRC32")
                && err.contains("cannot be read")
                && err.contains("transfer type `LIAR`, plugin /lib/libliar.so"),
            "{err}"
        );
    }

    #[test]
    fn missing_duplicate_and_foreign_results_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let files = plan(dir.path());
        copy_all(&files);
        let err = check(&files, &[]).unwrap_err();
        assert!(
            err.contains("a.ckpt: the transfer returned no result"),
            "{err}"
        );
        let r = result(&files[0]);
        let err = check(&files, &[r.clone(), r.clone()]).unwrap_err();
        assert!(
            err.contains("a.ckpt: the transfer returned 2 results"),
            "{err}"
        );
        // the right destination under another source is not a result for the file
        let mut foreign = result(&files[1]);
        foreign.source = "/elsewhere".into();
        let err = check(&files, &[r, foreign]).unwrap_err();
        assert!(err.contains("a file it was not given (/elsewhere"), "{err}");
    }

    #[test]
    fn a_short_or_flipped_copy_is_refused_whatever_the_transfer_claims() {
        let dir = tempfile::tempdir().unwrap();
        let files = plan(dir.path());
        copy_all(&files);
        let results: Vec<FileResult> = files.iter().map(result).collect();
        let mut bytes = std::fs::read(&files[1].destination).unwrap();
        bytes[0] ^= 1;
        std::fs::write(&files[1].destination, &bytes).unwrap();
        let err = check(&files, &results).unwrap_err();
        assert!(
            err.starts_with(&format!(
                "b.ckpt: expected 101 bytes CRC32 {:08x} (when written), ",
                files[1].crc32.unwrap()
            )) && err.contains(&format!(
                "has 101 bytes CRC32 {:08x}",
                crc32fast::hash(&bytes)
            )),
            "{err}"
        );
        bytes.pop();
        bytes[0] ^= 1;
        std::fs::write(&files[1].destination, &bytes).unwrap();
        let err = check(&files, &results).unwrap_err();
        assert!(err.contains("has 100 bytes"), "{err}");
    }

    #[test]
    fn without_a_recorded_crc_the_source_is_the_reference() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = plan(dir.path());
        copy_all(&files);
        for p in &mut files {
            p.crc32 = None;
        }
        // right size, other bytes (a transfer that wrote zeros): refused
        let len = std::fs::metadata(&files[1].destination).unwrap().len() as usize;
        std::fs::write(&files[1].destination, vec![0u8; len]).unwrap();
        let mut results: Vec<FileResult> = files.iter().map(result).collect();
        results[1].crc32 = None.into();
        let err = check(&files, &results).unwrap_err();
        assert!(
            err.contains("b.ckpt: expected 101 bytes CRC32")
                && err.contains("(of the source)")
                && err.contains(" has 101 bytes CRC32 "),
            "{err}"
        );
    }

    #[test]
    fn without_a_recorded_crc_sizes_are_compared_and_the_computed_crc_kept() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = plan(dir.path());
        copy_all(&files);
        let want: Vec<u32> = files.iter().map(|p| p.crc32.unwrap()).collect();
        for p in &mut files {
            p.crc32 = None;
        }
        let results: Vec<FileResult> = files.iter().map(result).collect();
        assert_eq!(check(&files, &results).unwrap(), want);
        // but a CRC the transfer claims must be the destination's
        let mut lying = results.clone();
        lying[0].crc32 = Some(0xdead_beef).into();
        let err = check(&files, &lying).unwrap_err();
        assert!(
            err.contains("the transfer reported CRC32 deadbeef"),
            "{err}"
        );
    }

    #[test]
    fn a_failed_status_names_the_transfer() {
        let dir = tempfile::tempdir().unwrap();
        let files = plan(dir.path());
        let mut r = result(&files[0]);
        r.status = TransferStatus::Failed;
        r.error = Some(abi_stable::std_types::RString::from("disk full")).into();
        let err = verify(
            &label(),
            TransferStatus::Failed,
            &[r],
            &files,
            "when written",
            4096,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("did not complete: disk full (transfer type `LIAR`"),
            "{err}"
        );
    }

    /// A transfer that never finishes unless cancelled, and says whether it was.
    struct Endless(Arc<AtomicBool>);

    impl scr_plugin::Transfer for Endless {
        fn add(&mut self, _: &str, _: &str) -> scr_plugin::PluginResult<()> {
            Ok(())
        }
        fn dispatch(&mut self, _: &scr_plugin::Host<'_>) -> scr_plugin::PluginResult<()> {
            Ok(())
        }
        fn test(&mut self, _: &scr_plugin::Host<'_>) -> scr_plugin::PluginResult<TransferStatus> {
            Ok(TransferStatus::InProgress)
        }
        fn wait(&mut self, _: &scr_plugin::Host<'_>) -> scr_plugin::PluginResult<TransferStatus> {
            Ok(TransferStatus::InProgress)
        }
        fn cancel(&mut self, _: &scr_plugin::Host<'_>) -> scr_plugin::PluginResult<()> {
            self.0.store(true, Ordering::SeqCst);
            Ok(())
        }
        fn results(&self) -> scr_plugin::PluginResult<Vec<FileResult>> {
            Ok(Vec::new())
        }
    }

    struct EndlessLib;
    impl scr_plugin::PluginLibrary for EndlessLib {
        const NAME: &'static str = "endless";
        const VERSION: &'static str = "0";
    }

    #[test]
    fn the_runtimes_cancel_flag_stops_a_background_transfer() {
        let cancelled = Arc::new(AtomicBool::new(false));
        let flag = Arc::new(AtomicBool::new(false));
        let host = LocalHost::new(0, "n0", "transfer endless", Arc::clone(&flag));
        let mut t =
            scr_plugin::transfer_box::<EndlessLib>(Box::new(Endless(Arc::clone(&cancelled))));
        let waiter = std::thread::spawn(move || wait_transfer(&mut t, &host, true));
        std::thread::sleep(Duration::from_millis(100));
        assert!(!waiter.is_finished(), "the transfer is still running");
        flag.store(true, Ordering::SeqCst);
        let out = waiter.join().unwrap();
        assert!(matches!(out, Err(TransferError::Cancelled)));
        assert!(out
            .unwrap_err()
            .to_string()
            .contains("cancelled by the runtime"));
        assert!(
            cancelled.load(Ordering::SeqCst),
            "the plugin was told to cancel"
        );
    }

    /// A background flush's transfer of a built-in type gets this rank's share of
    /// `flush_async_bw` (the job's cap over its ranks) and `flush_async_percent` as the
    /// copy engine's `bandwidth` and `percent`; another library's type gets no setting it
    /// might refuse (and is reported unpaced); with neither key set nothing is added.
    #[test]
    fn a_background_transfer_is_given_its_share_of_the_cap() {
        let config = Config::from_vars;
        let state = Path::new("/nonexistent/state");
        let settings = |t: &TransferConfig| -> Vec<(String, String)> {
            t.settings
                .iter()
                .map(|p| (p.key.to_string(), p.value.to_string()))
                .collect()
        };
        let c = config(&[
            ("SCR_FLUSH_ASYNC_BW", "100MB"),
            ("SCR_FLUSH_ASYNC_PERCENT", "25"),
        ]);
        let mut t = transfer_config(&c, &label(), state);
        assert!(paced(&c, 4, BUILTIN_TRANSFERS, &mut t));
        let got = settings(&t);
        assert!(
            got.contains(&("bandwidth".into(), (25u64 << 20).to_string())),
            "{got:?}"
        );
        assert!(got.contains(&("percent".into(), "25".into())), "{got:?}");
        let mut t = transfer_config(&c, &label(), state);
        let before = settings(&t);
        assert!(!paced(&c, 4, "vendor-transfers", &mut t));
        assert_eq!(settings(&t), before, "another library's type is left alone");
        let none = config(&[]);
        let mut t = transfer_config(&none, &label(), state);
        assert!(paced(&none, 4, BUILTIN_TRANSFERS, &mut t));
        assert!(settings(&t).is_empty());
        // a share below 16 KiB/s still paces every rank, at 16 KiB/s: the engine's pauses
        // (one per chunk of at least 4 KiB) stay under a second for a cancel to be seen
        let tiny = config(&[("SCR_FLUSH_ASYNC_BW", "2")]);
        let mut t = transfer_config(&tiny, &label(), state);
        paced(&tiny, 8, BUILTIN_TRANSFERS, &mut t);
        assert_eq!(
            settings(&t),
            [("bandwidth".to_string(), "16384".to_string())]
        );
    }

    /// A cap the transfer type's own settings already hold (`[plugins.<type>]`) and the
    /// share of `flush_async_bw` / `flush_async_percent` both hold: a background flush
    /// keeps the stricter of each, as the one value of its key; an own value that sets
    /// no cap (0) gives way, and one that is no number is left for the engine to refuse.
    #[test]
    fn the_stricter_of_an_own_cap_and_the_share_is_kept() {
        let c = Config::from_vars(&[
            ("SCR_FLUSH_ASYNC_BW", "4000000"),
            ("SCR_FLUSH_ASYNC_PERCENT", "50"),
        ]);
        let state = Path::new("/nonexistent/state");
        let with = |own: &[(&str, &str)]| -> Vec<(String, String)> {
            let mut t = transfer_config(&c, &label(), state);
            t.settings = own
                .iter()
                .map(|(k, v)| scr_plugin::Param {
                    key: (*k).into(),
                    value: (*v).into(),
                })
                .collect();
            assert!(paced(&c, 4, BUILTIN_TRANSFERS, &mut t));
            t.settings
                .iter()
                .map(|p| (p.key.to_string(), p.value.to_string()))
                .collect()
        };
        let pair = |k: &str, v: &str| (k.to_string(), v.to_string());
        // the share (1000000 per rank of 4) is stricter than an own 5000000; an own 20
        // percent is stricter than 50
        assert_eq!(
            with(&[("bandwidth", "5000000"), ("percent", "20")]),
            [pair("bandwidth", "1000000"), pair("percent", "20")]
        );
        // an own 300000 is stricter than the share; an own 0 sets no cap and gives way
        assert_eq!(
            with(&[("Bandwidth", "300000"), ("percent", "0")]),
            [pair("Bandwidth", "300000"), pair("percent", "50")]
        );
        // not a number: left as it is, for the engine's error naming it
        assert_eq!(
            with(&[("bandwidth", "fast")]),
            [pair("bandwidth", "fast"), pair("percent", "50")]
        );
    }
}
