//! The transfer cases: files of varied shapes copied byte-exact with CRC32 and metadata,
//! no temporary file left behind, cancel leaving no partial destination, a transfer
//! resumed from its persisted state by a new object, an unreadable source refused.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use scr_host::registry::Registry;
use scr_plugin::{inproc, Param, TransferBox, TransferConfig, TransferStatus};

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
        if results.len() != files.len() {
            return Err(format!(
                "{} results for {} files",
                results.len(),
                files.len()
            ));
        }
        for ((s, d, data), r) in files.iter().zip(results.iter()) {
            let got = std::fs::read(d).map_err(|e| format!("{}: {e}", d.display()))?;
            if &got != data {
                return Err(format!("{} differs from its source", d.display()));
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

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// Run the transfer cases for type `name`; `report(case, outcome)` once per case.
pub fn run(
    registry: &Registry,
    name: &str,
    settings: &[Param],
    base: &Path,
    report: &mut dyn FnMut(String, Result<String, String>),
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

    // copy everything, verify everything
    let files = case.sources("copy");
    let outcome = case.create("copy.state").and_then(|mut t| {
        case.fill(&mut t, &files)?;
        let status = case.with_host(|h| {
            t.dispatch(h.sabi_reborrow()).into_result()?;
            t.wait(h).into_result()
        });
        match status {
            Ok(TransferStatus::Complete) => case
                .check(&t, &files)
                .map(|()| format!("{} files", files.len())),
            Ok(s) => Err(format!("ended {s:?}")),
            Err(e) => Err(e.to_string()),
        }
    });
    report(
        label("copies files of every shape byte-exact with CRC32 and metadata"),
        outcome,
    );

    // a new object resumes the persisted transfer and finds it complete or completes it
    let outcome = (|| {
        let cfg = case.config("copy.state");
        let mut t = case
            .with_host(|h| registry.resume_transfer(&cfg, h))
            .map_err(|e| e.to_string())?;
        let status = case.with_host(|h| {
            let s = t.test(h.sabi_reborrow()).into_result()?;
            if s == TransferStatus::Idle {
                t.dispatch(h.sabi_reborrow()).into_result()?;
            }
            t.wait(h).into_result()
        });
        match status {
            Ok(TransferStatus::Complete) => case.check(&t, &files).map(|()| String::new()),
            Ok(s) => Err(format!("resumed transfer ended {s:?}")),
            Err(e) => Err(e.to_string()),
        }
    })();
    report(label("resumes from its persisted state"), outcome);

    // cancel right after dispatch: cancelled, no partial destination
    let files = case.sources("cancel");
    let outcome = case.create("cancel.state").and_then(|mut t| {
        case.fill(&mut t, &files)?;
        case.with_host(|h| {
            t.dispatch(h.sabi_reborrow()).into_result()?;
            t.cancel(h.sabi_reborrow()).into_result()?;
            t.test(h).into_result()
        })
        .map_err(|e| e.to_string())
        .and_then(|s| {
            let partial: Vec<PathBuf> = walk(&case.dir.join("cancel/dst"))
                .into_iter()
                .filter(|p| {
                    let full = files.iter().find(|f| &f.1 == p);
                    full.is_none_or(|f| std::fs::read(p).map(|b| b != f.2).unwrap_or(true))
                })
                .collect();
            match (s, partial.is_empty()) {
                (TransferStatus::Cancelled, true) => Ok(String::new()),
                (TransferStatus::Complete, true) => Ok("finished before the cancel arrived".into()),
                (s, true) => Err(format!("status {s:?} after cancel")),
                (_, false) => Err(format!("partial destinations left: {partial:?}")),
            }
        })
    });
    report(label("cancel leaves no partial destination"), outcome);

    // a source that does not exist is refused when added, naming it
    let outcome = case.create("missing.state").and_then(|mut t| {
        let missing = case.dir.join("no-such-file");
        match t
            .add(
                missing.display().to_string().as_str().into(),
                case.dir.join("x").display().to_string().as_str().into(),
            )
            .into_result()
        {
            Ok(()) => Err("a missing source was accepted".into()),
            Err(e) if e.message().contains(&missing.display().to_string()) => Ok(String::new()),
            Err(e) => Err(format!("the error does not name the file: {e}")),
        }
    });
    report(label("a missing source is refused, naming it"), outcome);
    let _ = std::fs::remove_dir_all(&case.dir);
}
