//! `example-copy`: a transfer type that copies files with plain `std::fs`, built on the
//! copy engine of scr-plugin ([`scr_plugin::copy_engine`]).
//!
//! The engine does everything a transfer must get right — the copy thread, the state
//! persisted for resume, cancel, temporary names renamed and fsynced when complete,
//! CRC32, metadata, results in order, messages from the copy thread reaching the host.
//! What is yours is [`ExampleCopy::copy_chunk`]: how to move one byte range of a source
//! file into the temporary destination. Replace its body with your vendor's calls.
//!
//! The transfer contract, the call order and the threads are in the manual:
//! `scr_plugin::manual::transfers` (`cargo doc -p scr-plugin --open`).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};

use scr_plugin::copy_engine::{self, Chunk, CopyEngine, EngineSettings, FileCopier};
use scr_plugin::{
    Host, LogLevel, PluginError, PluginLibrary, PluginResult, Transfer, TransferConfig,
};

/// The transfer type's name, as users write it (`flush_type = "example-copy"`, or `type`
/// in a `[[store]]`); its settings come from `[plugins.example-copy]`.
pub const TYPE_NAME: &str = "example-copy";

/// How one chunk is copied. Called on the engine's copy threads (several chunks at once
/// when `threads` > 1, so it takes `&self`): it must not use a `Host` — log through
/// `chunk.log`.
pub struct ExampleCopy;

impl FileCopier for ExampleCopy {
    fn copy_chunk(&self, chunk: &Chunk<'_>) -> PluginResult<u32> {
        if chunk.offset == 0 {
            // reaches the host (and its log) at the transfer's next test/wait call
            chunk.log.log(
                LogLevel::Debug,
                format!(
                    "{TYPE_NAME}: copying {} ({} bytes) to {}",
                    chunk.source.display(),
                    chunk.file_size,
                    chunk.destination.display()
                ),
            );
        }
        let io_src = |e| PluginError::io(chunk.source.display(), e);
        let io_dst = |e| PluginError::io(chunk.temp_path.display(), e);
        let mut buf = vec![0u8; chunk.len as usize];
        let mut src = File::open(chunk.source).map_err(io_src)?;
        src.seek(SeekFrom::Start(chunk.offset)).map_err(io_src)?;
        // a source shorter than when it was added fails here: that file is Failed
        src.read_exact(&mut buf).map_err(io_src)?;
        // the engine opened this chunk's own handle on the temporary file (mode 0600,
        // never through a link), so seeking it does not disturb other threads
        let mut dst = chunk.temp;
        dst.seek(SeekFrom::Start(chunk.offset)).map_err(io_dst)?;
        dst.write_all(&buf).map_err(io_dst)?;
        // the CRC32 of exactly the bytes copied; the engine combines the chunks'
        Ok(copy_engine::crc32(&buf))
    }
}

/// The library: its name and the transfer types it provides.
pub struct ExampleCopyPlugin;

impl PluginLibrary for ExampleCopyPlugin {
    const NAME: &'static str = "scr-example-copy";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const TRANSFERS: &'static [&'static str] = &[TYPE_NAME];

    fn new_transfer(config: &TransferConfig, _host: &Host<'_>) -> PluginResult<Box<dyn Transfer>> {
        // `threads` (default 1) and `chunk_size` (default 16 MiB) from
        // [plugins.example-copy]; add your own setting names to the list to accept them
        let settings = EngineSettings::from_config(config, 1, &[])?;
        Ok(Box::new(CopyEngine::new(config, settings, ExampleCopy)?))
    }

    fn resume_transfer(
        config: &TransferConfig,
        _host: &Host<'_>,
    ) -> PluginResult<Box<dyn Transfer>> {
        Ok(Box::new(CopyEngine::resume(config, ExampleCopy)?))
    }
}

scr_plugin::export_plugin!(ExampleCopyPlugin);
