//! Transfer types for flushing datasets to the prefix and fetching them back:
//! `sync` (one thread) and `pthread` (a pool that splits large files into chunks), both
//! with CRC32 while copying, metadata, temporary names renamed on completion, persisted
//! state for resume and cancel (see [`copy`]). `bbapi` (IBM burst buffer) and `dw` (Cray
//! DataWarp) are registered but not implemented yet: creating one says so.
#![forbid(unsafe_code)]

pub mod copy;

use scr_plugin::{Host, PluginLibrary, PluginResult, Transfer, TransferConfig};

/// The library's identity and the names it provides.
pub struct AxlTransfer;

impl PluginLibrary for AxlTransfer {
    const NAME: &'static str = "scr-axl-transfer";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const TRANSFERS: &'static [&'static str] = &["sync", "pthread", "bbapi", "dw"];

    fn new_transfer(config: &TransferConfig, _host: &Host<'_>) -> PluginResult<Box<dyn Transfer>> {
        match config.transfer_type.to_ascii_lowercase().as_str() {
            "sync" | "pthread" => Ok(Box::new(copy::CopyTransfer::new(config)?)),
            other => Err(scr_plugin::PluginError::not_implemented(format!(
                "transfer type {other}"
            ))),
        }
    }

    fn resume_transfer(
        config: &TransferConfig,
        _host: &Host<'_>,
    ) -> PluginResult<Box<dyn Transfer>> {
        match config.transfer_type.to_ascii_lowercase().as_str() {
            "sync" | "pthread" => Ok(Box::new(copy::CopyTransfer::resume(config)?)),
            other => Err(scr_plugin::PluginError::not_implemented(format!(
                "resuming transfer type {other}"
            ))),
        }
    }
}

scr_plugin::export_plugin!(AxlTransfer);
