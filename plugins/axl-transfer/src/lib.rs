//! Transfer types for flushing datasets to the prefix and fetching them back:
//! `sync` (one thread) and `pthread` (a pool that splits large files into chunks), both
//! scr-plugin's copy engine with CRC32 while copying, metadata, temporary names renamed on
//! completion, persisted state for resume and cancel (see [`copy`]); `bbapi` (IBM burst buffer) and `dw` (Cray
//! DataWarp) drive the vendor library opened at run time, with an optional fallback type
//! when it is absent (see [`vendor`]).
#![deny(unsafe_code)]

pub mod copy;
pub mod vendor;

use scr_plugin::{Host, PluginLibrary, PluginResult, Transfer, TransferConfig};

/// The library's identity and the names it provides.
pub struct AxlTransfer;

impl PluginLibrary for AxlTransfer {
    const NAME: &'static str = "scr-axl-transfer";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const TRANSFERS: &'static [&'static str] = &["sync", "pthread", "bbapi", "dw"];

    fn new_transfer(config: &TransferConfig, host: &Host<'_>) -> PluginResult<Box<dyn Transfer>> {
        match config.transfer_type.to_ascii_lowercase().as_str() {
            "sync" | "pthread" => Ok(Box::new(copy::new(config)?)),
            _ => vendor::create(config, host, false),
        }
    }

    fn resume_transfer(
        config: &TransferConfig,
        host: &Host<'_>,
    ) -> PluginResult<Box<dyn Transfer>> {
        match config.transfer_type.to_ascii_lowercase().as_str() {
            "sync" | "pthread" => Ok(Box::new(copy::resume(config)?)),
            _ => vendor::create(config, host, true),
        }
    }
}

scr_plugin::export_plugin!(AxlTransfer);
