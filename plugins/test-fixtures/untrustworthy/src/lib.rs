//! Test fixture: three mirror schemes (each member's files copied whole to its right-hand
//! neighbour) that rebuild a lost member byte-exact, yet each breaks one integrity rule
//! the conformance harness must catch:
//!
//! - `TRUSTING` never checks what it reads or rebuilds, yet declares that it verifies
//!   survivors itself (`SurvivorCheck::Scheme`): a survivor whose data was corrupted is
//!   handed back as good, and its corrupted bytes are copied again;
//! - `HOSTCHECKED` is `TRUSTING` declaring what it does: it relies on the host's check
//!   of survivors (`SurvivorCheck::Host`, the default), and so passes;
//! - `NOREPROTECT` rebuilds lost data but never writes a lost redundancy copy again, so
//!   the set is not protected after a recovery;
//! - `WRONGLIST` writes its redundancy file but `redundancy_files` names another one;
//! - `HANG` never returns from apply (for the harness's watchdog: always pass `--scheme`
//!   to scr-conformance with this library);
//! - `FEWSOURCES` says an offline rebuild reads no survivor's redundancy
//!   (`rebuild_sources` is the empty set) but keeps the default `recover_files`, which
//!   needs the provider's copy: every offline rebuild fails;
//! - `REWRITES` names the right source (the lost member's right-hand neighbour) and
//!   rebuilds from it, but writes the redundancy files of the survivors it was not given
//!   again;
//! - `CRASHREBUILD` behaves, except that with the environment variable
//!   `SCR_FIXTURE_CRASH_REBUILD` set, a member that lost its files writes part of its
//!   redundancy file in `recover` and then exits the process (a node dying mid-rebuild).
//!
//! Otherwise they behave: one loss tolerated, two refused alike with `unrecoverable`,
//! redundancy files with a verified header, metadata restored.

use std::path::{Path, PathBuf};

use scr_plugin::collect::{gather_flags, recv_bytes, send_bytes, sendrecv_bytes, Failures};
use scr_plugin::lofi::restore_metadata;
use scr_plugin::redfile::{self, open_verified, RedHeader, RedWriter, StoredMeta};
use scr_plugin::{
    DatasetFiles, ErrorCode, FileMeta, Host, PluginError, PluginLibrary, PluginResult,
    RecoverRequest, Scheme, SchemeConfig, SchemeDescription, SurvivorCheck,
};

/// Provides `TRUSTING`, `HOSTCHECKED`, `NOREPROTECT`, `WRONGLIST`, `HANG`,
/// `CRASHREBUILD`, `FEWSOURCES` and `REWRITES`.
pub struct UntrustworthyLib;

const TAG: u32 = 31;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Flaw {
    Trusting,
    NoReprotect,
    WrongList,
    Hang,
    CrashRebuild,
    FewSources,
    Rewrites,
}

struct Mirror {
    flaw: Flaw,
    name: &'static str,
    members: u32,
    member: u32,
    world_rank: u32,
}

fn json(v: &[StoredMeta]) -> PluginResult<Vec<u8>> {
    serde_json::to_vec(v).map_err(|e| PluginError::new(ErrorCode::OTHER, e.to_string()))
}

fn unjson(b: &[u8]) -> PluginResult<Vec<StoredMeta>> {
    serde_json::from_slice(b).map_err(|e| PluginError::new(ErrorCode::CORRUPT, e.to_string()))
}

impl Mirror {
    fn red_path(&self, dir: &Path) -> PathBuf {
        redfile::member_file(dir, self.name, self.world_rank, self.member, self.members)
    }

    /// Write `metas`' files from the concatenation `bytes`, with their metadata.
    fn write_files(metas: &[FileMeta], bytes: &[u8]) -> PluginResult<()> {
        let mut at = 0usize;
        for m in metas {
            let p = Path::new(m.path.as_str());
            if let Some(d) = p.parent() {
                std::fs::create_dir_all(d).map_err(|e| PluginError::io(d.display(), e))?;
            }
            let end = (at + m.size as usize).min(bytes.len());
            std::fs::write(p, &bytes[at..end]).map_err(|e| PluginError::io(p.display(), e))?;
            restore_metadata(m)?;
            at = end;
        }
        Ok(())
    }

    /// `recover`, or with `offline` an offline rebuild: a survivor's missing redundancy
    /// file is then no loss (only the provider's copy is read). The flaw of `REWRITES`:
    /// its offline rebuild ends with the apply that re-protects the set, writing the
    /// redundancy files of survivors it was not given.
    fn restore(
        &self,
        host: &Host<'_>,
        request: &RecoverRequest,
        offline: bool,
    ) -> PluginResult<Vec<FileMeta>> {
        let n = self.members;
        let me = self.member;
        let dir = Path::new(request.dir.as_str());
        let red = open_verified(&self.red_path(dir))
            .ok()
            .filter(|r| r.header.matches(self.name, request.dataset_id, n, me));
        let mut data_lost = gather_flags(host, request.files.is_none())?;
        if self.flaw == Flaw::CrashRebuild
            && request.files.is_none()
            && std::env::var_os("SCR_FIXTURE_CRASH_REBUILD").is_some()
        {
            let _ = std::fs::write(self.red_path(dir), b"partial parity");
            std::process::exit(17);
        }
        if self.flaw != Flaw::Trusting && data_lost.contains(&true) {
            // the flaw of TRUSTING is skipping exactly this
            let bad = request
                .files
                .as_ref()
                .into_option()
                .is_some_and(|f| scr_plugin::verify::verify_files(f).is_err());
            if !host.all_agree(!bad)? {
                data_lost = gather_flags(host, request.files.is_none() || bad)?;
            }
        }
        let red_ok = gather_flags(host, red.is_some())?;
        let mut files = request
            .files
            .clone()
            .into_option()
            .unwrap_or_default()
            .into_vec();
        let lost: Vec<u32> = (0..n)
            .filter(|&m| data_lost[m as usize] || (!offline && !red_ok[m as usize]))
            .collect();
        if lost.is_empty() {
            return Ok(files);
        }
        if lost.len() > 1 {
            return Err(PluginError::new(
                ErrorCode::UNRECOVERABLE,
                format!("members {lost:?} lost files; a mirror rebuilds one"),
            ));
        }
        let f = lost[0];
        if offline && !red_ok[(f as usize + 1) % n as usize] {
            return Err(PluginError::new(
                ErrorCode::UNRECOVERABLE,
                format!("member {f} lost its files and its copy is not here"),
            ));
        }
        let mut failure = Failures::new();
        if data_lost[f as usize] {
            let p = (f + 1) % n;
            if me == p {
                let mut r = red.expect("the provider's copy checked out");
                let metas = r.header.files.get(&f).cloned().unwrap_or_default();
                let mut payload = vec![0u8; r.header.payload_len as usize];
                failure.note(r.read_at(0, &mut payload));
                send_bytes(host, f, TAG, &json(&metas)?)?;
                send_bytes(host, f, TAG, &payload)?;
            } else if me == f {
                let metas = failure.note(recv_bytes(host, p, TAG).and_then(|b| unjson(&b)));
                let bytes = recv_bytes(host, p, TAG)?;
                if let Some(metas) = metas {
                    files = metas.iter().map(|m| m.to_meta(dir)).collect();
                    failure.note(Self::write_files(&files, &bytes));
                }
            }
        }
        failure.agree(host, "mirror rebuild")?;
        if self.flaw != Flaw::NoReprotect {
            self.apply(
                host,
                &DatasetFiles {
                    dataset_id: request.dataset_id,
                    dir: request.dir.clone(),
                    files: files.clone().into(),
                },
            )?;
        }
        Ok(files)
    }
}

impl Scheme for Mirror {
    fn describe(&self) -> PluginResult<SchemeDescription> {
        Ok(SchemeDescription {
            name: self.name.into(),
            tolerated_losses: 1.min(self.members.saturating_sub(1)),
            summary: "a mirror on the right-hand neighbour with an integrity flaw".into(),
        })
    }

    fn apply(&self, host: &Host<'_>, dataset: &DatasetFiles) -> PluginResult<Vec<String>> {
        if self.flaw == Flaw::Hang {
            loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            }
        }
        let dir = Path::new(dataset.dir.as_str());
        let mut failure = Failures::new();
        let mine: Vec<StoredMeta> = dataset
            .files
            .iter()
            .map(|m| StoredMeta::from_meta(m, dir))
            .collect();
        let mut bytes = Vec::new();
        for m in dataset.files.iter() {
            if let Some(b) = failure
                .note(std::fs::read(m.path.as_str()).map_err(|e| PluginError::io(&m.path, e)))
            {
                bytes.extend(b);
            }
        }
        let (right, left) = (host.right(1), host.left(1));
        let left_metas = failure
            .note(sendrecv_bytes(host, right, &json(&mine)?, left, TAG).and_then(|b| unjson(&b)))
            .unwrap_or_default();
        let left_bytes = sendrecv_bytes(host, right, &bytes, left, TAG)?;
        let path = self.red_path(dir);
        if failure.is_empty() {
            let written = RedWriter::create(&path).and_then(|mut w| {
                w.write(&left_bytes)?;
                w.finish(RedHeader {
                    files: [(left, left_metas)].into_iter().collect(),
                    ..RedHeader::for_member(self.name, dataset.dataset_id, host)?
                })
            });
            failure.note(written);
        }
        failure.agree(host, "mirror apply")?;
        Ok(vec![path.display().to_string()])
    }

    fn recover(&self, host: &Host<'_>, request: &RecoverRequest) -> PluginResult<Vec<FileMeta>> {
        self.restore(host, request, false)
    }

    /// `FEWSOURCES` names none (wrongly); `REWRITES` the mirror's one holder of each
    /// lost member's copy; the others every survivor.
    fn rebuild_sources(&self, lost: &[u32]) -> Option<Vec<u32>> {
        let n = self.members;
        match self.flaw {
            Flaw::FewSources => Some(Vec::new()),
            Flaw::Rewrites => Some(
                lost.iter()
                    .map(|&f| (f + 1) % n)
                    .filter(|p| !lost.contains(p))
                    .collect(),
            ),
            _ => None,
        }
    }

    /// `REWRITES`: the offline rebuild, flawed (see [`Mirror::restore`]).
    fn recover_files(
        &self,
        host: &Host<'_>,
        request: &RecoverRequest,
    ) -> PluginResult<Vec<FileMeta>> {
        if self.flaw == Flaw::Rewrites {
            self.restore(host, request, true)
        } else {
            self.recover(host, request)
        }
    }

    /// Every scheme here but `HOSTCHECKED` says it verifies survivors; all but
    /// `TRUSTING` and `HOSTCHECKED` do.
    fn survivor_check(&self) -> SurvivorCheck {
        if self.name == "HOSTCHECKED" {
            SurvivorCheck::Host
        } else {
            SurvivorCheck::Scheme
        }
    }

    fn redundancy_files(&self, dataset: &DatasetFiles) -> PluginResult<Vec<String>> {
        let path = self.red_path(Path::new(dataset.dir.as_str()));
        Ok(vec![if self.flaw == Flaw::WrongList {
            path.with_extension("elsewhere").display().to_string()
        } else {
            path.display().to_string()
        }])
    }

    fn remove(&self, _host: &Host<'_>, dataset: &DatasetFiles) -> PluginResult<()> {
        redfile::remove(&self.red_path(Path::new(dataset.dir.as_str())))
    }
}

impl PluginLibrary for UntrustworthyLib {
    const NAME: &'static str = "scr-fixture-untrustworthy";
    const VERSION: &'static str = "0.0.1";
    const SCHEMES: &'static [&'static str] = &[
        "TRUSTING",
        "HOSTCHECKED",
        "NOREPROTECT",
        "WRONGLIST",
        "HANG",
        "CRASHREBUILD",
        "FEWSOURCES",
        "REWRITES",
    ];

    fn new_scheme(config: &SchemeConfig) -> PluginResult<Box<dyn Scheme>> {
        let (flaw, name) = match config.scheme.to_ascii_uppercase().as_str() {
            "TRUSTING" => (Flaw::Trusting, "TRUSTING"),
            "HOSTCHECKED" => (Flaw::Trusting, "HOSTCHECKED"),
            "NOREPROTECT" => (Flaw::NoReprotect, "NOREPROTECT"),
            "HANG" => (Flaw::Hang, "HANG"),
            "CRASHREBUILD" => (Flaw::CrashRebuild, "CRASHREBUILD"),
            "FEWSOURCES" => (Flaw::FewSources, "FEWSOURCES"),
            "REWRITES" => (Flaw::Rewrites, "REWRITES"),
            _ => (Flaw::WrongList, "WRONGLIST"),
        };
        Ok(Box::new(Mirror {
            flaw,
            name,
            members: config.members.max(1),
            member: config.member,
            world_rank: config.world_rank,
        }))
    }
}

scr_plugin::export_plugin!(UntrustworthyLib);

#[cfg(test)]
mod tests {
    use super::*;
    use scr_plugin::conformance::{run_scheme_cases, CaseResult, Loaded};
    use scr_plugin::inproc;

    /// The cases over in-process members; returns the failed case names.
    fn failed(name: &str) -> Vec<String> {
        let dir = std::env::temp_dir().join(format!(
            "scr-fixture-untrustworthy.{}.{name}",
            std::process::id()
        ));
        let results = inproc::run(&["a", "b", "c"], |host| {
            let scheme = UntrustworthyLib::new_scheme(&SchemeConfig {
                scheme: name.into(),
                params: Default::default(),
                settings: Default::default(),
                members: host.size(),
                member: host.rank(),
                world_rank: host.rank(),
            })
            .unwrap();
            let mut cases: Vec<CaseResult> = Vec::new();
            let mine = dir.join(format!("m{}", host.rank()));
            let boxed = scr_plugin::scheme_box::<UntrustworthyLib>(scheme);
            run_scheme_cases(host, &Loaded(&boxed), &mine, 256, &mut |c| cases.push(c)).unwrap();
            cases
        });
        let _ = std::fs::remove_dir_all(&dir);
        results[0]
            .iter()
            .filter(|c| c.failure.is_some())
            .map(|c| c.name.clone())
            .collect()
    }

    #[test]
    fn each_flaw_fails_its_own_cases_and_only_those() {
        let trusting = failed("TRUSTING");
        assert!(!trusting.is_empty());
        assert!(
            trusting.iter().all(|c| c.contains("corrupted by one byte")),
            "{trusting:#?}"
        );
        // the same flaw, declared: relying on the host's survivor check, it passes
        assert_eq!(failed("HOSTCHECKED"), Vec::<String>::new());
        let noreprotect = failed("NOREPROTECT");
        assert!(!noreprotect.is_empty());
        // once a recovery left the set unprotected, later tolerated losses fail too
        assert!(
            noreprotect.iter().any(|c| c.contains("protected again")),
            "{noreprotect:#?}"
        );
        assert!(
            !noreprotect.iter().any(|c| c.contains("redundancy_files")
                || c.contains("beyond the claim")
                || c.contains("corrupted")),
            "{noreprotect:#?}"
        );
        let wronglist = failed("WRONGLIST");
        assert_eq!(
            wronglist,
            [
                "varied: redundancy_files lists exactly what apply wrote",
                "uniform: redundancy_files lists exactly what apply wrote",
                "one-member-has-data: redundancy_files lists exactly what apply wrote"
            ],
            "{wronglist:#?}"
        );
    }

    /// The offline rebuild is held to what `rebuild_sources` declares: every single loss
    /// (3 members, 3 shapes) fails, and only those cases.
    #[test]
    fn offline_rebuilds_are_held_to_the_declared_sources() {
        let offline_single: Vec<String> = ["varied", "uniform", "one-member-has-data"]
            .iter()
            .flat_map(|shape| {
                (0..3).map(move |m| {
                    format!(
                        "{shape}: offline rebuild of members [{m}] with the redundancy of the survivors rebuild_sources names: recover_files rebuilds them exactly"
                    )
                })
            })
            .collect();
        // declares no source, yet its recover_files needs the provider's copy
        assert_eq!(failed("FEWSOURCES"), offline_single);
        // rebuilds from the declared source, then writes the survivors' redundancy again
        assert_eq!(failed("REWRITES"), offline_single);
    }
}
