//! PARTNER's rebuild restores only what was lost: the lost members' files and the
//! redundancy files they held. Every other member's redundancy file is left exactly as it
//! was (same inode, same mtime, same bytes), and the set is protected again: losing next
//! the member whose only copy sits in a rebuilt redundancy file is rebuilt byte-exact too.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use scr_partner::PartnerScheme;
use scr_plugin::abi_stable::std_types::{RNone, RSome};
use scr_plugin::{inproc, DatasetFiles, FileMeta, Host, RecoverRequest, Scheme};

const PIECE: usize = 100;

/// What a loss takes from a member.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Loss {
    Everything,
    Data,
    Redundancy,
}

/// Member `m`'s files: uneven sizes, an empty file, several pieces.
fn make_files(dir: &Path, m: u32) -> Vec<(FileMeta, Vec<u8>)> {
    std::fs::create_dir_all(dir).unwrap();
    let sizes: &[u64] = match m % 3 {
        0 => &[3 * PIECE as u64 + 7, 0],
        1 => &[1, 250],
        _ => &[5 * PIECE as u64 + m as u64],
    };
    sizes
        .iter()
        .enumerate()
        .map(|(f, &size)| {
            let path = dir.join(format!("f{f}.dat"));
            let data: Vec<u8> = (0..size)
                .map(|i| (i as u8).wrapping_mul(17) ^ (m as u8 * 29) ^ f as u8)
                .collect();
            std::fs::write(&path, &data).unwrap();
            let meta = FileMeta {
                crc32: RSome(crc32fast::hash(&data)),
                ..FileMeta::new(path.display().to_string(), size)
            };
            (meta, data)
        })
        .collect()
}

/// Inode, mtime and bytes of a file: what "left exactly as it was" compares.
fn fingerprint(p: &Path) -> (u64, i64, i64, Vec<u8>) {
    let md = std::fs::metadata(p).unwrap();
    (
        md.ino(),
        md.mtime(),
        md.mtime_nsec(),
        std::fs::read(p).unwrap(),
    )
}

struct Member {
    dir: PathBuf,
    files: Vec<(FileMeta, Vec<u8>)>,
    red: PathBuf,
}

impl Member {
    fn metas(&self) -> Vec<FileMeta> {
        self.files.iter().map(|(m, _)| m.clone()).collect()
    }

    fn dataset(&self) -> DatasetFiles {
        DatasetFiles {
            dataset_id: 5,
            dir: self.dir.display().to_string().into(),
            files: self.metas().into(),
        }
    }

    /// Lose what `loss` says, recover collectively, and check this member's files came
    /// back byte-exact. Returns whether this member's redundancy file was untouched.
    fn lose_and_recover(
        &self,
        host: &Host<'_>,
        scheme: &PartnerScheme,
        loss: Option<Loss>,
    ) -> Result<bool, String> {
        let before = fingerprint(&self.red);
        // (a rewrite shows in the inode; the pause makes it show in the mtime as well)
        std::thread::sleep(std::time::Duration::from_millis(5));
        host.barrier().unwrap();
        if matches!(loss, Some(Loss::Everything | Loss::Data)) {
            for (m, _) in &self.files {
                std::fs::remove_file(m.path.as_str()).unwrap();
            }
        }
        if matches!(loss, Some(Loss::Everything | Loss::Redundancy)) {
            std::fs::remove_file(&self.red).unwrap();
        }
        host.barrier().unwrap();
        let request = RecoverRequest {
            dataset_id: 5,
            dir: self.dir.display().to_string().into(),
            files: if matches!(loss, Some(Loss::Everything | Loss::Data)) {
                RNone
            } else {
                RSome(self.metas().into())
            },
        };
        let got = scheme
            .recover(host, &request)
            .map_err(|e| format!("recover: {e}"))?;
        if got.len() != self.files.len() {
            return Err(format!("{} files returned", got.len()));
        }
        for ((want, data), g) in self.files.iter().zip(&got) {
            if g.path != want.path || g.crc32 != want.crc32 {
                return Err(format!("returned {g:?} for {want:?}"));
            }
            if std::fs::read(want.path.as_str()).unwrap() != *data {
                return Err(format!("{} not rebuilt byte-exact", want.path));
            }
        }
        if !self.red.is_file() {
            return Err(format!(
                "{} is missing after the rebuild",
                self.red.display()
            ));
        }
        Ok(fingerprint(&self.red) == before)
    }
}

/// On a set of `n` with `replicas` copies: apply, lose `pattern` (each member with its
/// kind of loss), recover; then lose `second` (everything) and recover again.
fn scenario(n: u32, replicas: u32, pattern: &[(u32, Loss)], second: &[u32]) {
    let top = tempfile::tempdir().unwrap();
    let groups: Vec<String> = (0..n).map(|i| format!("node{i}")).collect();
    let refs: Vec<&str> = groups.iter().map(String::as_str).collect();
    let out = inproc::run(&refs, |host| -> Result<(), String> {
        let me = host.rank();
        let scheme = PartnerScheme::new(n, me, me, replicas, PIECE);
        let dir = top.path().join(format!("member{me}"));
        let files = make_files(&dir, me);
        let mut member = Member {
            dir,
            files,
            red: PathBuf::new(),
        };
        let applied = scheme
            .apply_with_crc(host, &member.dataset())
            .map_err(|e| format!("apply: {e}"))?;
        member.red = PathBuf::from(applied.redundancy[0].as_str());

        let mine = pattern.iter().find(|(m, _)| *m == me).map(|(_, l)| *l);
        let untouched = member.lose_and_recover(host, &scheme, mine)?;
        let red_lost = matches!(mine, Some(Loss::Everything | Loss::Redundancy));
        if untouched == red_lost {
            return Err(format!(
                "member {me} ({mine:?}): after the rebuild its redundancy file {} was {}",
                member.red.display(),
                if untouched {
                    "not written again"
                } else {
                    "written again although it was intact"
                }
            ));
        }

        let again = second.contains(&me).then_some(Loss::Everything);
        member
            .lose_and_recover(host, &scheme, again)
            .map_err(|e| format!("second loss {second:?}: {e}"))?;
        Ok(())
    });
    for (m, r) in out.iter().enumerate() {
        assert!(
            r.is_ok(),
            "set of {n}, {replicas} replicas, lost {pattern:?} then {second:?}: member {m}: {r:?}"
        );
    }
}

#[test]
fn a_lost_member_gets_its_files_and_its_copies_back_and_survivors_keep_theirs() {
    for n in [2, 3, 4] {
        for f in 0..n {
            // member f - 1's only copy is in f's rebuilt redundancy file: lose f - 1 next
            scenario(n, 1, &[(f, Loss::Everything)], &[(f + n - 1) % n]);
        }
    }
}

#[test]
fn lost_data_alone_or_redundancy_alone_rewrites_only_what_was_lost() {
    for f in 0..4 {
        scenario(4, 1, &[(f, Loss::Data)], &[(f + 1) % 4]);
        scenario(4, 1, &[(f, Loss::Redundancy)], &[(f + 3) % 4]);
    }
}

#[test]
fn two_replicas_two_lost_members() {
    // neighbours, and members apart; then one whose copies sat on the rebuilt ones
    scenario(5, 2, &[(1, Loss::Everything), (2, Loss::Everything)], &[0]);
    scenario(5, 2, &[(0, Loss::Everything), (3, Loss::Redundancy)], &[4]);
    scenario(5, 2, &[(4, Loss::Data), (0, Loss::Everything)], &[3]);
}

/// A survivor's data damaged by one byte and passed as intact, while member 0 is lost:
/// told nothing, PARTNER reads every survivor, finds member 2's damage and rebuilds it
/// from its copy; told that the host verified the survivors (`survivors_verified`, which
/// the runtime says only after its own size and CRC32 check), it does not read them
/// again, so member 2's file is not touched: one read of each survivor, not two.
#[test]
fn the_hosts_verdict_on_survivors_spares_the_second_read() {
    for told in [false, true] {
        let top = tempfile::tempdir().unwrap();
        let out = inproc::run(&["node0", "node1", "node2", "node3"], |host| {
            let me = host.rank();
            let scheme = PartnerScheme::new(4, me, me, 1, PIECE);
            let dir = top.path().join(format!("member{me}"));
            let member = Member {
                files: make_files(&dir, me),
                dir,
                red: PathBuf::new(),
            };
            scheme
                .apply_with_crc(host, &member.dataset())
                .map_err(|e| format!("apply: {e}"))?;
            let damaged = PathBuf::from(member.files[0].0.path.as_str());
            if me == 2 {
                let mut b = std::fs::read(&damaged).unwrap();
                b[7] ^= 1;
                std::fs::write(&damaged, &b).unwrap();
            }
            if me == 0 {
                std::fs::remove_dir_all(&member.dir).unwrap();
                std::fs::create_dir_all(&member.dir).unwrap();
            }
            host.barrier().unwrap();
            let request = RecoverRequest {
                dataset_id: 5,
                dir: member.dir.display().to_string().into(),
                files: if me == 0 {
                    RNone
                } else {
                    RSome(member.metas().into())
                },
            };
            let verified = scr_plugin::SurvivorsVerified::new(host.raw());
            let as_told = Host::new(scr_plugin::host_ref(&verified));
            let got = if told {
                assert!(as_told.survivors_verified() && !host.survivors_verified());
                scheme.recover(&as_told, &request)
            } else {
                scheme.recover(host, &request)
            };
            got.map_err(|e| format!("recover: {e}"))?;
            Ok::<_, String>(std::fs::read(&damaged).unwrap() == member.files[0].1)
        });
        let exact: Vec<bool> = out.into_iter().map(|r| r.unwrap()).collect();
        // told: member 2's damage stays (the host would have passed it as lost);
        // untold: PARTNER found it and rebuilt it from member 3's copy
        assert_eq!(exact, [true, true, !told, true], "told {told}");
    }
}

/// With two copies, a lost member's nearest partner holding a damaged copy (its header
/// intact, one payload byte flipped) is found out in the pass that sends it: the round
/// is voided, the next partner's copy rebuilds the member byte-exact, and the damaged
/// redundancy file is written again, so the set is protected as before.
#[test]
fn a_damaged_copy_found_while_sent_falls_back_to_the_next_partner() {
    let top = tempfile::tempdir().unwrap();
    let out = inproc::run(&["node0", "node1", "node2", "node3"], |host| {
        let me = host.rank();
        let scheme = PartnerScheme::new(4, me, me, 2, PIECE);
        let dir = top.path().join(format!("member{me}"));
        let mut member = Member {
            files: make_files(&dir, me),
            dir,
            red: PathBuf::new(),
        };
        let applied = scheme
            .apply_with_crc(host, &member.dataset())
            .map_err(|e| format!("apply: {e}"))?;
        member.red = PathBuf::from(applied.redundancy[0].as_str());
        let payload =
            |p: &Path| scr_plugin::redfile::open_verified(p).map(|r| r.header.payload_crc32);
        let intact = payload(&member.red).unwrap();
        if me == 1 {
            let mut b = std::fs::read(&member.red).unwrap();
            b[0] ^= 1;
            std::fs::write(&member.red, &b).unwrap();
            assert!(payload(&member.red).is_err());
        }
        member.lose_and_recover(host, &scheme, (me == 0).then_some(Loss::Everything))?;
        // member 1's file holds the copies of members 0 and 3 again, checked
        Ok::<_, String>(payload(&member.red).ok() == Some(intact))
    });
    for (m, r) in out.iter().enumerate() {
        assert_eq!(r, &Ok(true), "member {m}");
    }
}
