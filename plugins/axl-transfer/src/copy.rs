//! The `sync` and `pthread` transfer types: the copy engine of scr-plugin
//! ([`scr_plugin::copy_engine`]) with its plain POSIX copier, on one thread (`sync`) or
//! a pool (`pthread`, `threads` setting, default 4) that splits large files into chunks
//! and spreads small files over the threads. The engine writes every destination under
//! a temporary name renamed when complete, computes CRC32 while copying, keeps metadata,
//! and persists its state so another process can resume, wait or cancel.

use scr_plugin::copy_engine::{CopyEngine, EngineSettings, PreadCopier};
use scr_plugin::{Params, PluginResult, TransferConfig};

/// A `sync` or `pthread` transfer.
pub type CopyTransfer = CopyEngine<PreadCopier>;

/// Settings of the copy types (`[plugins.sync]` / `[plugins.pthread]`): `chunk_size`
/// (4 KiB..=16 GiB, default 16 MiB) for both, `threads` (1..=256, default 4) for
/// `pthread` only (`sync` accepts the key and copies on one thread); `fallback` and
/// `library` are accepted because a vendor type falls back with its own settings.
pub fn settings(config: &TransferConfig) -> PluginResult<EngineSettings> {
    let kind = config.transfer_type.to_ascii_lowercase();
    let what = format!("transfer type {kind}");
    let settings = Params::new(&what, &config.settings);
    settings.only(&["threads", "chunk_size", "fallback", "library"])?;
    let chunk_size = settings.u64_in("chunk_size", 16 << 20, 4096..=(1 << 34))?;
    let threads = if kind == "sync" {
        1
    } else {
        settings.u64_in("threads", 4, 1..=256)? as usize
    };
    Ok(EngineSettings {
        threads,
        chunk_size,
    })
}

/// A new, empty transfer of `config.transfer_type` (`sync` or `pthread`).
pub fn new(config: &TransferConfig) -> PluginResult<CopyTransfer> {
    CopyEngine::new(config, settings(config)?, PreadCopier)
}

/// Re-open the transfer persisted in `config.state_file` (see
/// [`CopyEngine::resume`]): it keeps the thread count and chunk size it was started with.
pub fn resume(config: &TransferConfig) -> PluginResult<CopyTransfer> {
    CopyEngine::resume(config, PreadCopier)
}

#[cfg(test)]
mod tests {
    use super::*;
    use scr_plugin::{host_ref, inproc, Host, Param, Transfer, TransferStatus};
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::path::Path;

    /// Run `f` with the host services of a one-member in-process world.
    fn with_host<T>(f: impl FnOnce(&Host<'_>) -> T) -> T {
        let world = inproc::World::new(&["n"], std::time::Duration::from_secs(30));
        let services = world.member(0);
        let host = Host::new(host_ref(&services));
        let out = f(&host);
        drop(host);
        out
    }

    fn config(kind: &str, state: &Path, settings: &[(&str, &str)]) -> TransferConfig {
        TransferConfig {
            transfer_type: kind.into(),
            state_file: state.display().to_string().into(),
            crc32: true,
            preserve_metadata: true,
            settings: settings
                .iter()
                .map(|(k, v)| Param {
                    key: (*k).into(),
                    value: (*v).into(),
                })
                .collect(),
        }
    }

    fn data(n: usize, seed: u8) -> Vec<u8> {
        (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
    }

    #[test]
    fn copies_many_files_with_crc_and_metadata_on_both_types() {
        for kind in ["sync", "pthread"] {
            let dir = tempfile::tempdir().unwrap();
            let src = dir.path().join("src");
            std::fs::create_dir(&src).unwrap();
            let sizes = [0usize, 1, 4095, 4096, 4097, 3 * 4096 + 5, 100_000];
            for (i, n) in sizes.iter().enumerate() {
                let p = src.join(format!("f{i}"));
                std::fs::write(&p, data(*n, i as u8)).unwrap();
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
            }
            let state = dir.path().join("state.json");
            let mut t = new(&config(kind, &state, &[("chunk_size", "4096")])).unwrap();
            for i in 0..sizes.len() {
                t.add(
                    src.join(format!("f{i}")).to_str().unwrap(),
                    dir.path().join(format!("out/d{i}")).to_str().unwrap(),
                )
                .unwrap();
            }
            let status = with_host(|host| {
                t.dispatch(host).unwrap();
                t.wait(host).unwrap()
            });
            assert_eq!(status, TransferStatus::Complete, "{kind}");
            let results = t.results().unwrap();
            for (i, n) in sizes.iter().enumerate() {
                let out = dir.path().join(format!("out/d{i}"));
                let got = std::fs::read(&out).unwrap();
                assert_eq!(got, data(*n, i as u8), "{kind} file {i}");
                assert_eq!(results[i].crc32.into_option(), Some(crc32fast::hash(&got)));
                let md = std::fs::metadata(&out).unwrap();
                assert_eq!(md.mode() & 0o777, 0o640);
                let smd = std::fs::metadata(src.join(format!("f{i}"))).unwrap();
                assert_eq!(md.mtime(), smd.mtime());
                assert!(!dir.path().join(format!("out/d{i}.scr-part")).exists());
            }
        }
    }

    /// `sync` copies on one thread whatever `threads` says; `pthread` takes it; a chunk
    /// size below 4 KiB and an unknown key are refused, naming the setting.
    #[test]
    fn settings_of_the_two_types() {
        let s = Path::new("/nonexistent/state");
        let of = |kind, kv: &[(&str, &str)]| settings(&config(kind, s, kv));
        assert_eq!(
            of("sync", &[("threads", "8")]).unwrap(),
            EngineSettings {
                threads: 1,
                chunk_size: 16 << 20
            }
        );
        assert_eq!(
            of("pthread", &[("threads", "8"), ("chunk_size", "8192")]).unwrap(),
            EngineSettings {
                threads: 8,
                chunk_size: 8192
            }
        );
        assert_eq!(of("pthread", &[]).unwrap().threads, 4);
        let e = of("pthread", &[("chunk_size", "100")]).unwrap_err();
        assert!(e.message().contains("chunk_size"), "{e}");
        let e = of("sync", &[("thread", "2")]).unwrap_err();
        assert!(
            e.message()
                .starts_with("transfer type sync: unknown parameter `thread`"),
            "{e}"
        );
    }

    #[test]
    fn a_missing_source_is_refused_at_add() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = new(&config("sync", &dir.path().join("s"), &[])).unwrap();
        let e = t.add("/nonexistent/file", "/tmp/x").unwrap_err();
        assert!(e.message().starts_with("/nonexistent/file: "), "{e}");
    }
}
