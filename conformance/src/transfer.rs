//! The transfer cases: files of varied shapes copied byte-exact with CRC32 and metadata,
//! no temporary file left behind, cancel leaving no partial destination, a transfer
//! resumed from its persisted state by a new object, an unreadable source refused.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use scr_host::registry::Registry;
use scr_plugin::conformance::walk;
use scr_plugin::{inproc, FileResult, Param, TransferBox, TransferConfig, TransferStatus};

/// (relative name, size) of the case files: empty, one byte, odd sizes, many small files,
/// one larger than several chunks of the default copy types.
fn shapes() -> Vec<(String, usize)> {
    let mut v = vec![
        ("empty.dat".to_string(), 0),
        ("one.dat".to_string(), 1),
        ("odd.dat".to_string(), 4099),
        ("sub/dir/nested.dat".to_string(), 77_777),
        ("big.dat".to_string(), 40 << 20),
    ];
    v.extend((0..50).map(|i| (format!("small/{i}.dat"), 1000 + i * 13)));
    v
}

fn content(name: &str, size: usize) -> Vec<u8> {
    let seed = crc32fast::hash(name.as_bytes());
    (0..size)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761) ^ seed) as u8)
        .collect()
}

struct Case<'a> {
    registry: &'a Registry,
    name: &'a str,
    settings: &'a [Param],
    dir: PathBuf,
}

impl Case<'_> {
    fn config(&self, state: &str) -> TransferConfig {
        TransferConfig {
            transfer_type: self.name.into(),
            state_file: self.dir.join(state).display().to_string().into(),
            crc32: true,
            preserve_metadata: true,
            settings: self.settings.to_vec().into(),
        }
    }

    /// Create the sources under `src/` and return (source, destination, bytes).
    fn sources(&self, tag: &str) -> Vec<(PathBuf, PathBuf, Vec<u8>)> {
        shapes()
            .into_iter()
            .map(|(n, size)| {
                let src = self.dir.join(tag).join("src").join(&n);
                let dst = self.dir.join(tag).join("dst").join(&n);
                std::fs::create_dir_all(src.parent().expect("parent")).expect("mkdir");
                let data = content(&n, size);
                std::fs::write(&src, &data).expect("write source");
                std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o640))
                    .expect("chmod");
                (src, dst, data)
            })
            .collect()
    }

    fn with_host<T>(&self, f: impl FnOnce(scr_plugin::HostRef<'_>) -> T) -> T {
        let world = inproc::World::new(&["conformance"], std::time::Duration::from_secs(600));
        let services = world.member(0);
        f(scr_plugin::host_ref(&services))
    }

    fn create(&self, state: &str) -> Result<TransferBox, String> {
        self.with_host(|h| self.registry.new_transfer(&self.config(state), h))
            .map_err(|e| e.to_string())
    }

    fn fill(
        &self,
        t: &mut TransferBox,
        files: &[(PathBuf, PathBuf, Vec<u8>)],
    ) -> Result<(), String> {
        for (s, d, _) in files {
            t.add(
                s.display().to_string().as_str().into(),
                d.display().to_string().as_str().into(),
            )
            .into_result()
            .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    fn check(&self, t: &TransferBox, files: &[(PathBuf, PathBuf, Vec<u8>)]) -> Result<(), String> {
        let results = t.results().into_result().map_err(|e| e.to_string())?;
        check_results(&results, files)
    }
}

/// Never trust what a transfer says: every destination is read back and compared byte
/// for byte with its source's bytes and CRC32, and the results must be exactly one per
/// added file, in the order added, naming that source and destination, all Complete.
fn check_results(
    results: &[FileResult],
    files: &[(PathBuf, PathBuf, Vec<u8>)],
) -> Result<(), String> {
    {
        check_names(results, files)?;
        for ((_, d, data), r) in files.iter().zip(results.iter()) {
            let got = std::fs::read(d).map_err(|e| {
                format!(
                    "{}: {e}, although the transfer reported it {:?}",
                    d.display(),
                    r.status
                )
            })?;
            if &got != data {
                let at = got.iter().zip(data).position(|(a, b)| a != b);
                return Err(format!(
                    "{} differs from its source ({} bytes, expected {}{}) although the transfer reported it {:?}",
                    d.display(),
                    got.len(),
                    data.len(),
                    at.map(|i| format!(", first difference at byte {i}")).unwrap_or_default(),
                    r.status
                ));
            }
            if r.crc32.into_option() != Some(crc32fast::hash(data)) {
                return Err(format!(
                    "{}: CRC32 {:?} reported, {:08x} expected",
                    d.display(),
                    r.crc32,
                    crc32fast::hash(data)
                ));
            }
            if r.status != TransferStatus::Complete {
                return Err(format!("{}: per-file status {:?}", d.display(), r.status));
            }
        }
        // metadata after every file's bytes: a wrong byte is the worse news
        for (s, d, _) in files {
            let (sm, dm) = (
                std::fs::metadata(s).map_err(|e| e.to_string())?,
                std::fs::metadata(d).map_err(|e| e.to_string())?,
            );
            if dm.mode() & 0o7777 != sm.mode() & 0o7777
                || (dm.mtime(), dm.mtime_nsec()) != (sm.mtime(), sm.mtime_nsec())
            {
                return Err(format!("{}: mode or mtime not preserved", d.display()));
            }
        }
        let leftovers: Vec<PathBuf> = walk(
            &files[0]
                .1
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default(),
        )
        .into_iter()
        .filter(|p| !files.iter().any(|f| &f.1 == p))
        .collect();
        if !leftovers.is_empty() {
            return Err(format!("temporary or extra files left: {leftovers:?}"));
        }
        Ok(())
    }
}

/// The results are exactly one per added file, in the order added, each naming that
/// file's source and destination.
fn check_names(
    results: &[FileResult],
    files: &[(PathBuf, PathBuf, Vec<u8>)],
) -> Result<(), String> {
    if results.len() != files.len() {
        return Err(format!(
            "{} results for {} files",
            results.len(),
            files.len()
        ));
    }
    for (i, ((s, d, _), r)) in files.iter().zip(results.iter()).enumerate() {
        if r.source.as_str() != s.display().to_string()
            || r.destination.as_str() != d.display().to_string()
        {
            return Err(format!(
                "result {i} is for {} -> {}, but file {i} added was {} -> {}",
                r.source,
                r.destination,
                s.display(),
                d.display()
            ));
        }
    }
    Ok(())
}

/// Run the transfer cases for type `name`; `report(case, outcome)` once per case.
pub fn run(
    registry: &Registry,
    plugin: &Path,
    name: &str,
    settings: &[Param],
    base: &Path,
    report: &mut dyn FnMut(String, Result<String, String>),
    started: &mut dyn FnMut(&str),
) {
    let case = Case {
        registry,
        name,
        settings,
        dir: base.join(format!("transfer-{name}")),
    };
    let _ = std::fs::remove_dir_all(&case.dir);
    std::fs::create_dir_all(&case.dir).expect("case directory");
    let label = |c: &str| format!("transfer {name}: {c}");

    let what = "copies files of every shape byte-exact with CRC32 and metadata";
    started(&label(what));
    let files = case.sources("copy");
    report(label(what), case.copy_all(&files));

    let what = "resumes from its persisted state";
    started(&label(what));
    report(label(what), case.resume(&files));

    let what = "cancel leaves no partial destination";
    started(&label(what));
    report(label(what), case.cancel_at_once());

    let what = "cancelled mid-copy, resumed in a new process, byte-exact";
    started(&label(what));
    report(
        label(what),
        case.cancel_mid_copy_and_resume_elsewhere(plugin),
    );

    let what = "a source that vanishes mid-transfer is reported Failed";
    started(&label(what));
    report(label(what), case.vanishing_source());

    let what = "a missing source is refused, naming it";
    started(&label(what));
    report(label(what), case.missing_source());
    let _ = std::fs::remove_dir_all(&case.dir);
}

/// The cases [`run`] runs, one method each; each returns its outcome (a note on
/// success, the reason on failure).
impl Case<'_> {
    /// Copy every shape of file and verify every destination (`files` from
    /// [`Case::sources`]).
    fn copy_all(&self, files: &[(PathBuf, PathBuf, Vec<u8>)]) -> Result<String, String> {
        self.create("copy.state").and_then(|mut t| {
            self.fill(&mut t, files)?;
            let status = self.with_host(|h| {
                t.dispatch(h.sabi_reborrow()).into_result()?;
                t.wait(h).into_result()
            });
            match status {
                Ok(TransferStatus::Complete) => self
                    .check(&t, files)
                    .map(|()| format!("{} files", files.len())),
                Ok(s) => Err(format!("ended {s:?}")),
                Err(e) => Err(e.to_string()),
            }
        })
    }

    /// A new object resumes the transfer [`Case::copy_all`] persisted and finds it
    /// complete or completes it; its results name every file, in order, right after the
    /// resume (the host checks that it is the flush it is resuming).
    fn resume(&self, files: &[(PathBuf, PathBuf, Vec<u8>)]) -> Result<String, String> {
        let cfg = self.config("copy.state");
        let mut t = self
            .with_host(|h| self.registry.resume_transfer(&cfg, h))
            .map_err(|e| e.to_string())?;
        let reopened = t.results().into_result().map_err(|e| e.to_string())?;
        check_names(&reopened, files).map_err(|e| format!("right after resume: {e}"))?;
        let status = self.with_host(|h| {
            let s = t.test(h.sabi_reborrow()).into_result()?;
            if s == TransferStatus::Idle {
                t.dispatch(h.sabi_reborrow()).into_result()?;
            }
            t.wait(h).into_result()
        });
        match status {
            Ok(TransferStatus::Complete) => self.check(&t, files).map(|()| String::new()),
            Ok(s) => Err(format!("resumed transfer ended {s:?}")),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Cancel right after dispatch: the transfer ends cancelled (or complete, when it
    /// was faster) and leaves no partial destination.
    fn cancel_at_once(&self) -> Result<String, String> {
        let files = self.sources("cancel");
        self.create("cancel.state").and_then(|mut t| {
            self.fill(&mut t, &files)?;
            self.with_host(|h| {
                t.dispatch(h.sabi_reborrow()).into_result()?;
                t.cancel(h.sabi_reborrow()).into_result()?;
                t.test(h).into_result()
            })
            .map_err(|e| e.to_string())
            .and_then(|s| {
                let partial: Vec<PathBuf> = walk(&self.dir.join("cancel/dst"))
                    .into_iter()
                    .filter(|p| {
                        let full = files.iter().find(|f| &f.1 == p);
                        full.is_none_or(|f| std::fs::read(p).map(|b| b != f.2).unwrap_or(true))
                    })
                    .collect();
                match (s, partial.is_empty()) {
                    (TransferStatus::Cancelled, true) => Ok(String::new()),
                    (TransferStatus::Complete, true) => {
                        Ok("finished before the cancel arrived".into())
                    }
                    (s, true) => Err(format!("status {s:?} after cancel")),
                    (_, false) => Err(format!("partial destinations left: {partial:?}")),
                }
            })
        })
    }

    /// Cancel in the middle of a multi-file copy, then a NEW process (this harness again,
    /// `--resume-child`, loading `plugin`) resumes it from the persisted state and must
    /// finish it byte-exact.
    fn cancel_mid_copy_and_resume_elsewhere(&self, plugin: &Path) -> Result<String, String> {
        let files = self.sources("midcancel");
        let mut t = self.create("midcancel.state")?;
        self.fill(&mut t, &files)?;
        let done = self
            .with_host(|h| -> Result<usize, scr_plugin::PluginError> {
                t.dispatch(h.sabi_reborrow()).into_result()?;
                let start = std::time::Instant::now();
                let done = loop {
                    let s = t.test(h.sabi_reborrow()).into_result()?;
                    let done = t
                        .results()
                        .into_result()?
                        .iter()
                        .filter(|r| r.status == TransferStatus::Complete)
                        .count();
                    if done > 0 || s != TransferStatus::InProgress || start.elapsed().as_secs() > 60
                    {
                        break done;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(1));
                };
                t.cancel(h).into_result()?;
                Ok(done)
            })
            .map_err(|e| e.to_string())?;
        drop(t);
        let (status, results) = self.resume_in_child(plugin)?;
        if status != TransferStatus::Complete {
            return Err(format!("the resumed transfer ended {status:?}"));
        }
        check_results(&results, &files)
            .map(|()| format!("{done} of {} files complete at the cancel", files.len()))
    }

    /// Run this harness again with `--resume-child` on the `midcancel` state: the status
    /// and per-file results the resuming process printed.
    fn resume_in_child(&self, plugin: &Path) -> Result<(TransferStatus, Vec<FileResult>), String> {
        let state = self.dir.join("midcancel.state");
        let mut cmd = std::process::Command::new(
            std::env::current_exe().map_err(|e| format!("the harness's own path: {e}"))?,
        );
        cmd.arg("--plugin")
            .arg(plugin)
            .arg("--transfer")
            .arg(self.name)
            .arg("--resume-child")
            .arg(&state);
        for p in self.settings {
            cmd.arg("--setting").arg(format!("{}={}", p.key, p.value));
        }
        let out = cmd
            .output()
            .map_err(|e| format!("re-running the harness to resume: {e}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(format!(
                "the resuming process failed ({}): {}{}",
                out.status,
                stdout.trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        parse_child(&stdout)
    }

    /// A source that vanishes while the transfer runs: that file is Failed, never
    /// Complete (unless it was copied whole before it vanished).
    fn vanishing_source(&self) -> Result<String, String> {
        let files: Vec<(PathBuf, PathBuf, Vec<u8>)> = [
            ("big.dat", 40usize << 20),
            ("gone.dat", 1000),
            ("after.dat", 10),
        ]
        .into_iter()
        .map(|(n, size)| {
            let src = self.dir.join("vanish/src").join(n);
            let dst = self.dir.join("vanish/dst").join(n);
            let data = content(n, size);
            std::fs::create_dir_all(src.parent().expect("parent")).expect("mkdir");
            std::fs::write(&src, &data).expect("write source");
            (src, dst, data)
        })
        .collect();
        let mut t = self.create("vanish.state")?;
        self.fill(&mut t, &files)?;
        let status = self
            .with_host(|h| {
                t.dispatch(h.sabi_reborrow()).into_result()?;
                let _ = std::fs::remove_file(&files[1].0);
                t.wait(h).into_result()
            })
            .map_err(|e| e.to_string())?;
        let results = t.results().into_result().map_err(|e| e.to_string())?;
        if results.len() != files.len() {
            return Err(format!(
                "{} results for {} files",
                results.len(),
                files.len()
            ));
        }
        let gone = &results[1];
        match gone.status {
            TransferStatus::Failed if status == TransferStatus::Complete => Err(format!(
                "the transfer reported Complete although {} failed",
                files[1].0.display()
            )),
            TransferStatus::Failed => Ok(format!("transfer {status:?}")),
            TransferStatus::Complete => {
                // copied before it vanished: then the copy must be whole
                match std::fs::read(&files[1].1) {
                    Ok(b) if b == files[1].2 => Ok("copied before the source vanished".into()),
                    _ => Err(format!(
                        "{} reported Complete but its destination is missing or wrong",
                        files[1].0.display()
                    )),
                }
            }
            s => Err(format!(
                "{} reported {s:?}, expected Failed",
                files[1].0.display()
            )),
        }
    }

    /// A source that does not exist is refused when added, and the error names it.
    fn missing_source(&self) -> Result<String, String> {
        let mut t = self.create("missing.state")?;
        let missing = self.dir.join("no-such-file");
        match t
            .add(
                missing.display().to_string().as_str().into(),
                self.dir.join("x").display().to_string().as_str().into(),
            )
            .into_result()
        {
            Ok(()) => Err("a missing source was accepted".into()),
            Err(e) if e.message().contains(&missing.display().to_string()) => Ok(String::new()),
            Err(e) => Err(format!("the error does not name the file: {e}")),
        }
    }
}

/// Parse what [`resume_child`] printed: `STATUS\t<status>` and one
/// `RESULT\t<status>\t<bytes>\t<crc32 or ->\t<source>\t<destination>` per file.
fn parse_child(out: &str) -> Result<(TransferStatus, Vec<FileResult>), String> {
    let status_of = |s: &str| match s {
        "Idle" => Ok(TransferStatus::Idle),
        "InProgress" => Ok(TransferStatus::InProgress),
        "Complete" => Ok(TransferStatus::Complete),
        "Failed" => Ok(TransferStatus::Failed),
        "Cancelled" => Ok(TransferStatus::Cancelled),
        _ => Err(format!("unknown status {s:?} from the resuming process")),
    };
    let mut status = None;
    let mut results = Vec::new();
    for line in out.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        match f.as_slice() {
            ["STATUS", s] => status = Some(status_of(s)?),
            ["RESULT", s, bytes, crc, src, dst] => results.push(FileResult {
                source: (*src).into(),
                destination: (*dst).into(),
                bytes: bytes.parse().map_err(|e| format!("{line}: {e}"))?,
                crc32: u32::from_str_radix(crc, 16)
                    .ok()
                    .map_or(abi_stable::std_types::RNone, abi_stable::std_types::RSome),
                status: status_of(s)?,
                error: abi_stable::std_types::RNone,
            }),
            _ => {}
        }
    }
    Ok((
        status.ok_or_else(|| format!("the resuming process printed no status: {out}"))?,
        results,
    ))
}

/// The hidden `--resume-child STATE` mode: in this new process, resume the transfer
/// persisted in `state`, finish it and print its status and results for the parent.
pub fn resume_child(
    plugin: &Path,
    names: &[String],
    settings: &[String],
    state: &Path,
) -> std::process::ExitCode {
    let run = || -> Result<(), String> {
        let name = names.first().ok_or("--resume-child needs --transfer")?;
        let mut registry = Registry::default();
        registry.add_file(plugin, scr_host::registry::Origin::Explicit);
        let settings: Vec<Param> = settings
            .iter()
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| Param {
                key: k.trim().into(),
                value: v.trim().into(),
            })
            .collect();
        let config = TransferConfig {
            transfer_type: name.as_str().into(),
            state_file: state.display().to_string().into(),
            crc32: true,
            preserve_metadata: true,
            settings: settings.into(),
        };
        let world = inproc::World::new(&["conformance"], std::time::Duration::from_secs(600));
        let services = world.member(0);
        let h = scr_plugin::host_ref(&services);
        let mut t = registry
            .resume_transfer(&config, h.sabi_reborrow())
            .map_err(|e| e.to_string())?;
        let mut status = t
            .test(h.sabi_reborrow())
            .into_result()
            .map_err(|e| e.to_string())?;
        if matches!(status, TransferStatus::Idle | TransferStatus::Cancelled) {
            t.dispatch(h.sabi_reborrow())
                .into_result()
                .map_err(|e| e.to_string())?;
        }
        if status != TransferStatus::Complete {
            status = t
                .wait(h.sabi_reborrow())
                .into_result()
                .map_err(|e| e.to_string())?;
        }
        println!("STATUS\t{status:?}");
        for r in t.results().into_result().map_err(|e| e.to_string())?.iter() {
            println!(
                "RESULT\t{:?}\t{}\t{}\t{}\t{}",
                r.status,
                r.bytes,
                r.crc32
                    .into_option()
                    .map_or("-".to_string(), |c| format!("{c:08x}")),
                r.source,
                r.destination
            );
        }
        Ok(())
    };
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::from(1)
        }
    }
}
