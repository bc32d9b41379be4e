//! Test fixture: transfer type `LYING`, which reports `Complete` for every file. How it
//! lies is chosen by the environment variable `SCR_FIXTURE_LIE` (read when the transfer
//! is created), so one library serves every test of "trust nothing a transfer says":
//!
//! - `nocopy` (the default): copies nothing, returns one Complete result per file;
//! - `noresults`: copies every file, returns no results at all;
//! - `short`: copies every file but the last byte of each, results claim the full size;
//! - `flip`: copies every file with its first byte flipped, results carry the source's CRC;
//! - `swap`: copies every file, but returns the results in reverse order;
//! - `honest`: copies every file and tells the truth (a control for the tests).

use scr_plugin::{
    FileResult, Host, PluginLibrary, PluginResult, Transfer, TransferConfig, TransferStatus,
};

/// Provides `LYING`.
pub struct LyingLib;

struct Lying {
    how: String,
    files: Vec<(String, String)>,
    results: Vec<FileResult>,
}

impl Lying {
    fn copy(&self, src: &str, dst: &str) -> PluginResult<(u64, u32)> {
        let mut data = std::fs::read(src).map_err(|e| scr_plugin::PluginError::io(src, e))?;
        let size = data.len() as u64;
        let crc = crc32(&data);
        match self.how.as_str() {
            "short" => {
                data.pop();
            }
            "flip" => {
                if let Some(b) = data.first_mut() {
                    *b ^= 0x01;
                }
            }
            _ => {}
        }
        if let Some(dir) = std::path::Path::new(dst).parent() {
            std::fs::create_dir_all(dir).map_err(|e| scr_plugin::PluginError::io(dst, e))?;
        }
        std::fs::write(dst, &data).map_err(|e| scr_plugin::PluginError::io(dst, e))?;
        Ok((size, crc))
    }
}

/// Plain CRC-32 (IEEE), bitwise: the fixture needs no dependency for it.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

impl Transfer for Lying {
    fn add(&mut self, source: &str, destination: &str) -> PluginResult<()> {
        self.files.push((source.into(), destination.into()));
        Ok(())
    }

    fn dispatch(&mut self, _: &Host<'_>) -> PluginResult<()> {
        for (src, dst) in &self.files {
            let size = std::fs::metadata(src).map(|m| m.len()).unwrap_or(0);
            let (bytes, crc) = if self.how == "nocopy" {
                (size, None)
            } else {
                let (s, c) = self.copy(src, dst)?;
                (s, Some(c))
            };
            self.results.push(FileResult {
                source: src.as_str().into(),
                destination: dst.as_str().into(),
                bytes,
                crc32: crc.into(),
                status: TransferStatus::Complete,
                error: None.into(),
            });
        }
        match self.how.as_str() {
            "noresults" => self.results.clear(),
            "swap" => self.results.reverse(),
            _ => {}
        }
        Ok(())
    }

    fn test(&mut self, _: &Host<'_>) -> PluginResult<TransferStatus> {
        Ok(TransferStatus::Complete)
    }

    fn wait(&mut self, _: &Host<'_>) -> PluginResult<TransferStatus> {
        Ok(TransferStatus::Complete)
    }

    fn cancel(&mut self, _: &Host<'_>) -> PluginResult<()> {
        Ok(())
    }

    fn results(&self) -> PluginResult<Vec<FileResult>> {
        Ok(self.results.clone())
    }
}

impl PluginLibrary for LyingLib {
    const NAME: &'static str = "scr-fixture-lying-transfer";
    const VERSION: &'static str = "0.0.1";
    const TRANSFERS: &'static [&'static str] = &["LYING"];

    fn new_transfer(_: &TransferConfig, _: &Host<'_>) -> PluginResult<Box<dyn Transfer>> {
        Ok(Box::new(Lying {
            how: std::env::var("SCR_FIXTURE_LIE").unwrap_or_else(|_| "nocopy".into()),
            files: Vec::new(),
            results: Vec::new(),
        }))
    }
}

scr_plugin::export_plugin!(LyingLib);
