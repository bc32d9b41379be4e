//! The SINGLE redundancy scheme: each rank's files stay in its cache with their metadata
//! and no redundancy data is written. It tolerates no loss: when any member of a set lost
//! its files, every member fails the recovery the same way, so the runtime drops the
//! dataset instead of restoring half of it.
#![forbid(unsafe_code)]

use scr_plugin::{
    DatasetFiles, ErrorCode, FileMeta, Host, Params, PluginError, PluginLibrary, PluginResult,
    RecoverRequest, ReduceOp, Scheme, SchemeConfig, SchemeDescription,
};

/// The library's identity and the names it provides.
pub struct Single;

/// One SINGLE instance (it has no state).
struct SingleScheme;

impl Scheme for SingleScheme {
    fn describe(&self) -> PluginResult<SchemeDescription> {
        Ok(SchemeDescription {
            name: "SINGLE".into(),
            tolerated_losses: 0,
            summary: "no redundancy data; files kept in cache with their metadata".into(),
        })
    }

    fn apply(&self, host: &Host<'_>, dataset: &DatasetFiles) -> PluginResult<Vec<String>> {
        // Nothing to encode, but the files must be there: a member whose file vanished
        // makes the whole dataset fail, on every member alike.
        let missing: Vec<&str> = dataset
            .files
            .iter()
            .filter(|f| std::fs::metadata(f.path.as_str()).map(|m| m.len()).ok() != Some(f.size))
            .map(|f| f.path.as_str())
            .collect();
        let ok = host.all_agree(missing.is_empty())?;
        if ok {
            Ok(Vec::new())
        } else if !missing.is_empty() {
            Err(PluginError::new(
                ErrorCode::IO,
                format!(
                    "file(s) missing or of the wrong size: {}",
                    missing.join(", ")
                ),
            ))
        } else {
            Err(PluginError::new(
                ErrorCode::IO,
                "another member of the set is missing files",
            ))
        }
    }

    fn recover(&self, host: &Host<'_>, request: &RecoverRequest) -> PluginResult<Vec<FileMeta>> {
        let have = request.files.is_some();
        let lost = host.all_reduce(u64::from(!have), ReduceOp::Sum)?;
        if lost == 0 {
            return Ok(request
                .files
                .clone()
                .into_option()
                .unwrap_or_default()
                .into_vec());
        }
        Err(PluginError::new(
            ErrorCode::UNRECOVERABLE,
            format!(
                "{lost} of {} member(s) lost their files and SINGLE keeps no redundancy data",
                host.size()
            ),
        ))
    }

    fn redundancy_files(&self, _dataset: &DatasetFiles) -> PluginResult<Vec<String>> {
        Ok(Vec::new())
    }

    /// Who verifies survivors: SINGLE rebuilds nothing, so no survivor feeds a rebuild: the host's check is all there is.
    fn survivor_check(&self) -> scr_plugin::SurvivorCheck {
        scr_plugin::SurvivorCheck::Host
    }

    fn remove(&self, _host: &Host<'_>, _dataset: &DatasetFiles) -> PluginResult<()> {
        Ok(())
    }
}

impl PluginLibrary for Single {
    const NAME: &'static str = "scr-single";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const SCHEMES: &'static [&'static str] = &["SINGLE"];

    fn new_scheme(config: &SchemeConfig) -> PluginResult<Box<dyn Scheme>> {
        // The host passes the common parameters to every scheme; SINGLE uses none of them
        // but refuses anything else, so a misspelt parameter is not silently ignored.
        Params::new("scheme SINGLE", &config.params).only(&[
            "set_size",
            "set_failures",
            "replicas",
            "buffer_size",
        ])?;
        Ok(Box::new(SingleScheme))
    }
}

scr_plugin::export_plugin!(Single);

#[cfg(test)]
mod tests {
    use super::*;
    use abi_stable::std_types::{RNone, RSome};
    use scr_plugin::{inproc, Param};

    fn file(dir: &std::path::Path, name: &str, bytes: &[u8]) -> FileMeta {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        FileMeta::new(path.display().to_string(), bytes.len() as u64)
    }

    #[test]
    fn apply_writes_nothing_and_fails_everywhere_when_a_file_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        let scheme = SingleScheme;
        let out = inproc::run(&["n0", "n1", "n2"], |host| {
            let mut f = file(dir.path(), &format!("r{}", host.rank()), b"data");
            if host.rank() == 1 {
                f.size = 99; // recorded size disagrees with the file
            }
            let ds = DatasetFiles {
                dataset_id: 1,
                dir: dir.path().display().to_string().into(),
                files: vec![f].into(),
            };
            scheme.apply(host, &ds).map_err(|e| e.code)
        });
        assert!(out.iter().all(|r| *r == Err(ErrorCode::IO)), "{out:?}");
        let out = inproc::run(&["n0", "n1"], |host| {
            let f = file(dir.path(), &format!("ok{}", host.rank()), b"x");
            let ds = DatasetFiles {
                dataset_id: 2,
                dir: dir.path().display().to_string().into(),
                files: vec![f].into(),
            };
            scheme.apply(host, &ds)
        });
        assert!(out.iter().all(|r| r.as_ref().unwrap().is_empty()));
    }

    #[test]
    fn recover_tolerates_no_loss_and_every_loss_pattern_fails_alike() {
        let scheme = SingleScheme;
        // no loss: every member gets its own files back
        let out = inproc::run(&["a", "b", "c"], |host| {
            let files = vec![FileMeta::new(format!("/f{}", host.rank()), 1)];
            let req = RecoverRequest {
                dataset_id: 1,
                dir: "/".into(),
                files: RSome(files.into()),
            };
            scheme.recover(host, &req).unwrap()[0].path.to_string()
        });
        assert_eq!(out, ["/f0", "/f1", "/f2"]);
        // every non-empty loss pattern over 3 members (one beyond the claim of 0 and more)
        for mask in 1u32..8 {
            let out = inproc::run(&["a", "b", "c"], |host| {
                let lost = mask & (1 << host.rank()) != 0;
                let req = RecoverRequest {
                    dataset_id: 1,
                    dir: "/".into(),
                    files: if lost {
                        RNone
                    } else {
                        RSome(Default::default())
                    },
                };
                scheme.recover(host, &req).unwrap_err()
            });
            let n = mask.count_ones();
            for e in out {
                assert_eq!(e.code, ErrorCode::UNRECOVERABLE);
                assert_eq!(
                    e.message(),
                    format!(
                        "{n} of 3 member(s) lost their files and SINGLE keeps no redundancy data"
                    )
                );
            }
        }
    }

    #[test]
    fn unknown_parameters_are_refused() {
        let config = SchemeConfig {
            scheme: "single".into(),
            params: vec![Param {
                key: "replcas".into(),
                value: "2".into(),
            }]
            .into(),
            settings: Default::default(),
            members: 1,
            member: 0,
            world_rank: 0,
        };
        let e = Single::new_scheme(&config).err().unwrap();
        assert!(e.message().contains("unknown parameter `replcas`"), "{e}");
    }
}
