//! The `sync` and `pthread` transfer types: the copy engine of scr-plugin
//! ([`scr_plugin::copy_engine`]) with its plain POSIX copier, on one thread (`sync`) or
//! a pool (`pthread`, `threads` setting, default 4) that splits large files into chunks
//! and spreads small files over the threads. The engine writes every destination under
//! a temporary name renamed when complete, computes CRC32 while copying, keeps metadata,
//! and persists its state so another process can resume, wait or cancel.
//!
//! Pacing: with a `bandwidth` setting (bytes per second) the transfer copies at most that
//! fast, and with `percent` it copies at most that share of its time, pausing between
//! chunks (SCR's `SCR_FLUSH_ASYNC_BW` and `SCR_FLUSH_ASYNC_PERCENT`, which the host passes
//! to a background flush's transfer as its share of the job's cap). The pause is decided
//! after each chunk from what the whole transfer copied since it started, over every
//! copy thread, so the rate holds however many threads copy; a paced transfer copies in
//! chunks of at most a quarter second of its bandwidth, so the pauses stay short.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use scr_plugin::copy_engine::{Chunk, CopyEngine, EngineSettings, FileCopier, PreadCopier};
use scr_plugin::{Params, PluginResult, TransferConfig};

/// A `sync` or `pthread` transfer.
pub type CopyTransfer = CopyEngine<PacedCopier>;

/// The pace a transfer keeps: at most `bandwidth` bytes per second (0: no cap), copying
/// at most `percent` of the time (0 or 100: always).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Pace {
    /// Bytes per second; 0 for no cap.
    pub bandwidth: u64,
    /// Percent of the time spent copying, `0.0..=100.0`; 0 or 100 for no pause.
    pub percent: f64,
}

impl Pace {
    /// The `bandwidth` and `percent` settings of `settings` (absent: no pacing).
    fn from_settings(what: &str, settings: &Params<'_>) -> PluginResult<Pace> {
        let bandwidth = settings.u64_in("bandwidth", 0, 0..=u64::MAX)?;
        let percent = match settings.get("percent") {
            None => 0.0,
            Some(text) => match text.trim().parse::<f64>() {
                Ok(p) if (0.0..=100.0).contains(&p) => p,
                _ => {
                    return Err(scr_plugin::PluginError::invalid_parameter(format!(
                        "{what}: parameter `percent` = \"{text}\" is not a number in 0..=100"
                    )))
                }
            },
        };
        Ok(Pace { bandwidth, percent })
    }

    /// Whether it paces at all.
    fn is_on(&self) -> bool {
        self.bandwidth > 0 || (self.percent > 0.0 && self.percent < 100.0)
    }

    /// How long to pause now, `elapsed` after the transfer started, having copied
    /// `bytes` in `busy` (summed over the copy threads' chunk times): long enough that
    /// `bytes` took at least `bytes / bandwidth` and that copying took at most `percent`
    /// of the time.
    pub fn pause(&self, bytes: u64, busy: Duration, elapsed: Duration) -> Duration {
        let mut until = Duration::ZERO;
        if self.bandwidth > 0 {
            until = until.max(Duration::from_secs_f64(
                bytes as f64 / self.bandwidth as f64,
            ));
        }
        if self.percent > 0.0 && self.percent < 100.0 {
            until = until.max(busy.mul_f64(100.0 / self.percent));
        }
        until.saturating_sub(elapsed)
    }
}

/// What a paced transfer has copied since it started (shared by its copy threads).
#[derive(Debug)]
struct Progress {
    started: Instant,
    bytes: u64,
    busy: Duration,
}

/// The plain POSIX copier ([`PreadCopier`]), paced by a [`Pace`].
#[derive(Debug)]
pub struct PacedCopier {
    pace: Pace,
    progress: Arc<Mutex<Progress>>,
}

impl PacedCopier {
    /// A copier keeping `pace`; its clock starts at the first chunk.
    pub fn new(pace: Pace) -> PacedCopier {
        PacedCopier {
            pace,
            progress: Arc::new(Mutex::new(Progress {
                started: Instant::now(),
                bytes: 0,
                busy: Duration::ZERO,
            })),
        }
    }
}

impl FileCopier for PacedCopier {
    fn copy_chunk(&self, chunk: &Chunk<'_>) -> PluginResult<u32> {
        let began = Instant::now();
        let crc = PreadCopier.copy_chunk(chunk)?;
        if self.pace.is_on() {
            let pause = {
                let mut p = scr_plugin::sync::lock(&self.progress);
                if p.bytes == 0 && p.busy.is_zero() {
                    // the clock starts with the first chunk, not at dispatch
                    p.started = began;
                }
                p.bytes += chunk.len;
                p.busy += began.elapsed();
                self.pace.pause(p.bytes, p.busy, p.started.elapsed())
            };
            std::thread::sleep(pause);
        }
        Ok(crc)
    }
}

/// Settings of the copy types (`[plugins.sync]` / `[plugins.pthread]`): `chunk_size`
/// (4 KiB..=16 GiB, default 16 MiB) for both, `threads` (1..=256, default 4) for
/// `pthread` only (`sync` accepts the key and copies on one thread); `fallback` and
/// `library` are accepted because a vendor type falls back with its own settings.
pub fn settings(config: &TransferConfig) -> PluginResult<EngineSettings> {
    let kind = config.transfer_type.to_ascii_lowercase();
    let what = format!("transfer type {kind}");
    let settings = Params::new(&what, &config.settings);
    settings.only(&[
        "threads",
        "chunk_size",
        "fallback",
        "library",
        "bandwidth",
        "percent",
    ])?;
    let mut chunk_size = settings.u64_in("chunk_size", 16 << 20, 4096..=(1 << 34))?;
    let pace = Pace::from_settings(&what, &settings)?;
    if pace.bandwidth > 0 {
        // a quarter second of the bandwidth per chunk, so the pauses stay short
        chunk_size = chunk_size.min((pace.bandwidth / 4).max(4096));
    }
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

/// The pace `config`'s settings ask for.
fn pace(config: &TransferConfig) -> PluginResult<Pace> {
    let what = format!(
        "transfer type {}",
        config.transfer_type.to_ascii_lowercase()
    );
    Pace::from_settings(&what, &Params::new(&what, &config.settings))
}

/// A new, empty transfer of `config.transfer_type` (`sync` or `pthread`).
pub fn new(config: &TransferConfig) -> PluginResult<CopyTransfer> {
    CopyEngine::new(config, settings(config)?, PacedCopier::new(pace(config)?))
}

/// Re-open the transfer persisted in `config.state_file` (see
/// [`CopyEngine::resume`]): it keeps the thread count and chunk size it was started with,
/// and keeps the pace `config` asks for now.
pub fn resume(config: &TransferConfig) -> PluginResult<CopyTransfer> {
    CopyEngine::resume(config, PacedCopier::new(pace(config)?))
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

    /// The pause keeps the transfer at or under its bandwidth (from what it copied since
    /// it started) and its copying under its share of the time; without either, none.
    #[test]
    fn the_pause_holds_the_bandwidth_and_the_share_of_time() {
        let s = Duration::from_secs;
        let bw = Pace {
            bandwidth: 100,
            percent: 0.0,
        };
        // 500 bytes at 100 B/s take 5 s: 1 s after the start, 4 s to wait
        assert_eq!(bw.pause(500, s(1), s(1)), s(4));
        assert_eq!(bw.pause(500, s(1), s(6)), Duration::ZERO, "slow already");
        let pct = Pace {
            bandwidth: 0,
            percent: 25.0,
        };
        // busy 1 s at 25 %: the transfer's 4 s, 3 s of which are pauses
        assert_eq!(pct.pause(1 << 30, s(1), s(1)), s(3));
        let both = Pace {
            bandwidth: 100,
            percent: 50.0,
        };
        assert_eq!(both.pause(100, s(3), s(3)), s(3), "the stricter one");
        for off in [
            Pace::default(),
            Pace {
                bandwidth: 0,
                percent: 100.0,
            },
        ] {
            assert!(!off.is_on());
            assert_eq!(off.pause(1 << 40, s(1), s(1)), Duration::ZERO);
        }
    }

    /// A paced transfer copies every byte right and takes at least its bytes over its
    /// bandwidth (a cap: a lower bound on the time, not a speed claim); chunks shrink to
    /// a quarter second of the bandwidth; a bad setting is refused by name.
    #[test]
    fn a_paced_transfer_keeps_its_bandwidth() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir(&src).unwrap();
        let n = 96 * 1024;
        std::fs::write(src.join("a"), data(n, 7)).unwrap();
        std::fs::write(src.join("b"), data(n, 9)).unwrap();
        let state = dir.path().join("state.json");
        // 192 KiB at 256 KiB/s: at least 0.75 s
        let cfg = config(
            "pthread",
            &state,
            &[("bandwidth", "262144"), ("threads", "2")],
        );
        assert_eq!(settings(&cfg).unwrap().chunk_size, 65536);
        let mut t = new(&cfg).unwrap();
        for f in ["a", "b"] {
            t.add(
                src.join(f).to_str().unwrap(),
                dir.path().join(format!("out/{f}")).to_str().unwrap(),
            )
            .unwrap();
        }
        let began = Instant::now();
        let status = with_host(|host| {
            t.dispatch(host).unwrap();
            t.wait(host).unwrap()
        });
        let took = began.elapsed();
        assert_eq!(status, TransferStatus::Complete);
        assert!(took >= Duration::from_millis(740), "{took:?}");
        assert_eq!(std::fs::read(dir.path().join("out/a")).unwrap(), data(n, 7));
        assert_eq!(std::fs::read(dir.path().join("out/b")).unwrap(), data(n, 9));
        let e = settings(&config("sync", &state, &[("percent", "150")])).unwrap_err();
        assert!(e.message().contains("`percent` = \"150\""), "{e}");
        let e = settings(&config("sync", &state, &[("bandwidth", "fast")])).unwrap_err();
        assert!(e.message().contains("`bandwidth`"), "{e}");
    }
}
