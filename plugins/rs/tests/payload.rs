//! A survivor's checksums damaged behind an intact header are found in the pass that
//! reads them: the round is voided, they count as lost, and the rebuild runs again
//! without them. Within the claim (one member lost and one survivor's checksums
//! damaged, k = 2) the lost member comes back byte-exact and the damaged checksums are
//! written again; beyond it (two lost and one damaged) every member fails alike and no
//! lost file looks recovered.

use scr_plugin::abi_stable::std_types::{RNone, RSome};
use scr_plugin::redfile::open_verified;
use scr_plugin::{inproc, DatasetFiles, FileMeta, RecoverRequest, Scheme};
use scr_reed_solomon::RsScheme;

fn scenario(lost: &[u32], damaged: u32) -> Vec<Result<Option<u32>, String>> {
    let top = tempfile::tempdir().unwrap();
    inproc::run(&["node0", "node1", "node2", "node3"], |host| {
        let me = host.rank();
        let scheme = RsScheme::new(4, me, me, 2, 100).unwrap();
        let dir = top.path().join(format!("member{me}"));
        std::fs::create_dir_all(&dir).unwrap();
        let data: Vec<u8> = (0..1000 + me * 77).map(|i| (i * 7 + me) as u8).collect();
        let path = dir.join("rank.ckpt");
        std::fs::write(&path, &data).unwrap();
        let meta = FileMeta {
            crc32: RSome(crc32fast::hash(&data)),
            ..FileMeta::new(path.display().to_string(), data.len() as u64)
        };
        let ds = DatasetFiles {
            dataset_id: 3,
            dir: dir.display().to_string().into(),
            files: vec![meta.clone()].into(),
        };
        let applied = scheme
            .apply_with_crc(host, &ds)
            .map_err(|e| e.to_string())?;
        let red = std::path::PathBuf::from(applied.redundancy[0].as_str());
        let intact = open_verified(&red).unwrap().header.payload_crc32;
        if me == damaged {
            let mut b = std::fs::read(&red).unwrap();
            b[5] ^= 1;
            std::fs::write(&red, &b).unwrap();
        }
        let gone = lost.contains(&me);
        if gone {
            std::fs::remove_dir_all(&dir).unwrap();
            std::fs::create_dir_all(&dir).unwrap();
        }
        host.barrier().unwrap();
        let request = RecoverRequest {
            dataset_id: 3,
            dir: dir.display().to_string().into(),
            files: if gone {
                RNone
            } else {
                RSome(vec![meta].into())
            },
        };
        match scheme.recover(host, &request) {
            Ok(_) => {
                if std::fs::read(&path).unwrap() != data {
                    return Err(format!("member {me}: not rebuilt byte-exact"));
                }
                let now = open_verified(&red).map_err(|e| e.to_string())?;
                if now.header.payload_crc32 != intact {
                    return Err(format!("member {me}: checksums not as applied"));
                }
                Ok(None)
            }
            Err(e) if gone && path.exists() => Err(format!(
                "member {me}: failed ({e}) but its lost file looks recovered"
            )),
            Err(e) => Ok(Some(e.code.0)),
        }
    })
}

#[test]
fn damaged_checksums_found_in_the_pass_are_rebuilt_within_the_claim() {
    for damaged in 1..4 {
        let out = scenario(&[0], damaged);
        assert!(
            out.iter().all(|r| r == &Ok(None)),
            "member 0 lost, member {damaged}'s checksums damaged: {out:?}"
        );
    }
}

#[test]
fn damaged_checksums_beyond_the_claim_fail_everywhere() {
    let out = scenario(&[0, 1], 2);
    let first = out[0].clone();
    assert!(matches!(first, Ok(Some(_))), "{out:?}");
    assert!(out.iter().all(|r| r == &first), "{out:?}");
}
