//! Test fixture: a plugin whose calls panic, to prove the panic guard turns each panic into
//! an error naming the plugin and the call while the host carries on — and schemes that
//! fail on one member of a set only, to prove such a failure never leaves the job hanging.

use scr_plugin::{
    DatasetFiles, FileMeta, Host, PluginLibrary, PluginResult, RecoverRequest, Scheme,
    SchemeConfig, SchemeDescription,
};

/// Provides PANIC_NEW (panics when created), PANIC_APPLY (created fine, panics in
/// `apply`), PANIC_DROP (panics when the instance is dropped), PANIC_ONE (member 1 of each
/// set panics in `apply` while the other members wait for a message from it), FAIL_ONE
/// (member 1 returns an error from `apply`, the others succeed without waiting) and
/// FAIL_PARTIAL (like FAIL_ONE, after every member wrote part of its declared redundancy
/// file and of a temporary file only its `remove` knows; with the environment variable
/// `SCR_FIXTURE_APPLY_OK` set, every apply succeeds), PANIC_ONE_RECOVER (applies fine,
/// writing nothing; member 1 of each set panics in `recover` while the other members wait
/// for member 1: member 0 in a reduction, member 3 in a local loop asking
/// `is_cancelled`, the others in a receive) and FAIL_ONE_RECOVER (the same with an error instead of a panic).
pub struct PanicLib;

struct PanicsInApply {
    name: String,
    panic_on_drop: bool,
}

impl Drop for PanicsInApply {
    fn drop(&mut self) {
        if self.panic_on_drop {
            panic!("deliberate panic in drop");
        }
    }
}

impl Scheme for PanicsInApply {
    fn describe(&self) -> PluginResult<SchemeDescription> {
        Ok(SchemeDescription {
            name: self.name.as_str().into(),
            tolerated_losses: 0,
            summary: "panics in apply".into(),
        })
    }
    fn apply(&self, _: &Host<'_>, _: &DatasetFiles) -> PluginResult<Vec<String>> {
        panic!("deliberate panic in apply")
    }
    fn recover(&self, _: &Host<'_>, _: &RecoverRequest) -> PluginResult<Vec<FileMeta>> {
        Ok(vec![])
    }
    fn redundancy_files(&self, _: &DatasetFiles) -> PluginResult<Vec<String>> {
        Ok(vec![])
    }
    fn remove(&self, _: &Host<'_>, _: &DatasetFiles) -> PluginResult<()> {
        Ok(())
    }
}

/// Fails in `apply` on member 1 only.
struct OneMemberFails {
    name: String,
    member: u32,
    world_rank: u32,
    panics: bool,
    /// FAIL_PARTIAL: write part of the redundancy files first.
    partial: bool,
    /// PANIC_ONE_RECOVER, FAIL_ONE_RECOVER: apply succeeds, recover fails on member 1.
    in_recover: bool,
}

impl OneMemberFails {
    /// The redundancy file FAIL_PARTIAL declares, and its temporary file (not declared).
    fn partial_files(&self, dir: &str) -> [std::path::PathBuf; 2] {
        let dir = std::path::Path::new(dir);
        [
            dir.join(format!("fail_partial.{}.red", self.world_rank)),
            dir.join(format!("fail_partial.{}.red.tmp", self.world_rank)),
        ]
    }
}

impl Scheme for OneMemberFails {
    fn describe(&self) -> PluginResult<SchemeDescription> {
        Ok(SchemeDescription {
            name: self.name.as_str().into(),
            tolerated_losses: 0,
            summary: "fails in apply on member 1 only".into(),
        })
    }
    fn apply(&self, host: &Host<'_>, dataset: &DatasetFiles) -> PluginResult<Vec<String>> {
        if self.in_recover {
            return Ok(vec![]);
        }
        let mut written = Vec::new();
        if self.partial {
            for p in self.partial_files(&dataset.dir) {
                std::fs::write(&p, b"partial parity")
                    .map_err(|e| scr_plugin::PluginError::io(p.display(), e))?;
            }
            if std::env::var_os("SCR_FIXTURE_APPLY_OK").is_some() {
                let [red, tmp] = self.partial_files(&dataset.dir);
                std::fs::rename(&tmp, &red)
                    .map_err(|e| scr_plugin::PluginError::io(tmp.display(), e))?;
                return Ok(vec![red.display().to_string()]);
            }
            written.push(self.partial_files(&dataset.dir)[0].display().to_string());
        }
        if self.member == 1 {
            if self.panics {
                panic!("deliberate panic in apply on member 1");
            }
            return Err(scr_plugin::PluginError::new(
                scr_plugin::ErrorCode::IO,
                "deliberate failure in apply on member 1",
            ));
        }
        if self.panics && host.size() > 1 {
            // wait for a message member 1 never sends: without the host's settle step
            // this member would wait forever
            let mut buf = [0u8; 1];
            host.recv(1, 99, &mut buf)?;
        }
        Ok(written)
    }
    fn recover(&self, host: &Host<'_>, request: &RecoverRequest) -> PluginResult<Vec<FileMeta>> {
        if !self.in_recover {
            return Ok(vec![]);
        }
        if self.member == 1 {
            if self.panics {
                panic!("deliberate panic in recover on member 1");
            }
            return Err(scr_plugin::PluginError::new(
                scr_plugin::ErrorCode::IO,
                "deliberate failure in recover on member 1",
            ));
        }
        if host.size() > 1 {
            // wait for member 1, which never comes: in a collective (member 0), in a local
            // loop that asks whether to stop (member 3) and in a receive (the others);
            // the host's notice must end all three
            if self.member == 0 {
                host.all_reduce(1, scr_plugin::ReduceOp::Sum)?;
            } else if self.member == 3 {
                let started = std::time::Instant::now();
                while started.elapsed() < std::time::Duration::from_secs(40) {
                    host.check_cancelled()?;
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                return Err(scr_plugin::PluginError::new(
                    scr_plugin::ErrorCode::OTHER,
                    "member 3 was never cancelled",
                ));
            } else {
                let mut buf = [0u8; 1];
                host.recv(1, 99, &mut buf)?;
            }
        }
        // a member the host did not stop (no notice): its files as they are
        Ok(request
            .files
            .clone()
            .into_option()
            .map(|v| v.into_vec())
            .unwrap_or_default())
    }
    fn redundancy_files(&self, dataset: &DatasetFiles) -> PluginResult<Vec<String>> {
        Ok(if self.partial {
            vec![self.partial_files(&dataset.dir)[0].display().to_string()]
        } else {
            vec![]
        })
    }
    fn remove(&self, _: &Host<'_>, dataset: &DatasetFiles) -> PluginResult<()> {
        if self.partial {
            for p in self.partial_files(&dataset.dir) {
                match std::fs::remove_file(&p) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(scr_plugin::PluginError::io(p.display(), e))
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

impl PluginLibrary for PanicLib {
    const NAME: &'static str = "scr-fixture-panic";
    const VERSION: &'static str = "0.0.1";
    const SCHEMES: &'static [&'static str] = &[
        "PANIC_NEW",
        "PANIC_APPLY",
        "PANIC_DROP",
        "PANIC_ONE",
        "FAIL_ONE",
        "FAIL_PARTIAL",
        "PANIC_ONE_RECOVER",
        "FAIL_ONE_RECOVER",
    ];

    fn new_scheme(config: &SchemeConfig) -> PluginResult<Box<dyn Scheme>> {
        if config.scheme.eq_ignore_ascii_case("PANIC_NEW") {
            panic!("deliberate panic in new_scheme");
        }
        for (name, panics, partial, in_recover) in [
            ("PANIC_ONE", true, false, false),
            ("FAIL_ONE", false, false, false),
            ("FAIL_PARTIAL", false, true, false),
            ("PANIC_ONE_RECOVER", true, false, true),
            ("FAIL_ONE_RECOVER", false, false, true),
        ] {
            if config.scheme.eq_ignore_ascii_case(name) {
                return Ok(Box::new(OneMemberFails {
                    name: name.into(),
                    member: config.member,
                    world_rank: config.world_rank,
                    panics,
                    partial,
                    in_recover,
                }));
            }
        }
        Ok(Box::new(PanicsInApply {
            name: config.scheme.to_ascii_uppercase(),
            panic_on_drop: config.scheme.eq_ignore_ascii_case("PANIC_DROP"),
        }))
    }
}

scr_plugin::export_plugin!(PanicLib);
