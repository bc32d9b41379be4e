//! The restart offered: an invalid restart falls back to the next older checkpoint (in
//! cache, or in the prefix), and a file may be named by its base name alone.

use super::*;

/// A restart the application reports invalid is not offered again: the next older
/// checkpoint in cache is, on every rank alike, and the invalid one is deleted.
#[test]
fn an_invalid_restart_falls_back_to_the_next_older_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["n0", "n1"];
    let wrote = job(dir.path(), &nodes, &[("SCR_CACHE_SIZE", "3")], |rt, r| {
        (1..=2)
            .map(|n| {
                write_checkpoint(rt, dir.path(), &format!("ckpt.{n}"), &format!("f{n}_{r}")).is_ok()
            })
            .collect::<Vec<_>>()
    });
    assert!(wrote.iter().all(|(w, _)| w == &[true, true]), "{wrote:?}");
    let out = job(dir.path(), &nodes, &[("SCR_CACHE_SIZE", "3")], |rt, _| {
        let mut seen = Vec::new();
        while let Some(name) = rt.have_restart() {
            seen.push(name.clone());
            rt.start_restart().expect("start_restart");
            // the application finds ckpt.2 unusable, ckpt.1 good
            let valid = name == "ckpt.1";
            let all_valid = rt.complete_restart(valid).expect("complete_restart");
            if all_valid {
                break;
            }
        }
        seen
    });
    for (r, (seen, end)) in out.iter().enumerate() {
        assert_eq!(seen, &["ckpt.2", "ckpt.1"], "rank {r}");
        assert_eq!(end, &Ok(()), "rank {r}");
    }
    // the invalid checkpoint left the cache (as SCR deletes it): a later run offers the
    // older one first
    for node in nodes {
        assert_eq!(
            listing(&cache_job_dir(dir.path(), node)),
            ["scr.dataset.1"],
            "{node}"
        );
    }
    let next = job(dir.path(), &nodes, &[("SCR_CACHE_SIZE", "3")], |rt, _| {
        rt.have_restart()
    });
    for (r, (offered, _)) in next.iter().enumerate() {
        assert_eq!(offered.as_deref(), Some("ckpt.1"), "rank {r}");
    }
}

/// During a restart a file may be named by its base name alone (SCR 3.x): `f_1` finds
/// `sub/f_1` of the checkpoint; a base name two files share is refused naming both, and
/// a name the checkpoint does not hold at all is refused as before.
#[test]
fn a_restart_finds_a_file_by_its_base_name_unless_two_share_it() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = ["n0", "n1"];
    let prefix = dir.path().join("prefix");
    let wrote = job(dir.path(), &nodes, &[], |rt, r| {
        rt.start_output("ckpt.1", CHECKPOINT)?;
        for sub in ["sub", "a", "b"] {
            let name = if sub == "sub" {
                format!("sub/f_{r}")
            } else {
                format!("{sub}/same_{r}")
            };
            let p = rt.route_file(&prefix.join(name))?;
            std::fs::write(&p, format!("{sub} of rank {r}")).map_err(io_err(&p))?;
        }
        rt.complete_output(true)
    });
    for (r, (kept, _)) in wrote.iter().enumerate() {
        assert!(matches!(kept, Ok(true)), "rank {r}: {kept:?}");
    }
    let out = job(dir.path(), &nodes, &[], |rt, r| {
        rt.start_restart().expect("a restart");
        let bare = rt
            .route_file(&prefix.join(format!("f_{r}")))
            .map(|p| std::fs::read_to_string(p).unwrap_or_default());
        let shared = rt
            .route_file(&prefix.join(format!("same_{r}")))
            .map(|p| p.display().to_string());
        let absent = rt
            .route_file(&prefix.join("never"))
            .map(|p| p.display().to_string());
        rt.complete_restart(true).expect("complete_restart");
        (
            show("bare", bare),
            show("shared", shared),
            show("absent", absent),
        )
    });
    for (r, ((bare, shared, absent), _)) in out.iter().enumerate() {
        assert_eq!(bare, &format!("bare: ok sub of rank {r}"), "rank {r}");
        assert_eq!(
            shared,
            &format!(
                "shared: route_file: `{}` names no file of the checkpoint, and its base name matches both `a/same_{r}` and `b/same_{r}`; give the file's path",
                prefix.join(format!("same_{r}")).display()
            ),
            "rank {r}"
        );
        assert!(
            absent.starts_with("absent: route_file: ")
                && absent.contains("is not a file of checkpoint ckpt.1"),
            "rank {r}: {absent}"
        );
    }
}

/// A checkpoint from the prefix that the application reports invalid is marked failed in
/// the index and the next older one is offered — fetched, or read in place with
/// `fetch = false` — never a newer one, also when `current` (here `scr index current`)
/// pinned the one that failed. Every cache is lost first, so every restart comes from
/// the prefix.
#[test]
fn an_invalid_restart_from_the_prefix_falls_back_to_the_next_older_one_there() {
    for fetch in ["1", "0"] {
        for pinned in [None, Some("ckpt.2")] {
            let dir = tempfile::tempdir().unwrap();
            let nodes = ["n0", "n1"];
            let prefix = dir.path().join("prefix");
            let env = [("SCR_FLUSH", "1"), ("SCR_FETCH", fetch)];
            let wrote = job(dir.path(), &nodes, &env, |rt, r| {
                (1..=3)
                    .map(|n| {
                        write_checkpoint(rt, dir.path(), &format!("ckpt.{n}"), &format!("f{n}_{r}"))
                            .is_ok()
                    })
                    .collect::<Vec<_>>()
            });
            assert!(
                wrote.iter().all(|(w, end)| w == &[true; 3] && end.is_ok()),
                "{wrote:?}"
            );
            if let Some(name) = pinned {
                crate::state::prefix::Index::set_current_in(&prefix, name).unwrap();
            }
            for base in ["cache", "cntl"] {
                std::fs::remove_dir_all(dir.path().join(base)).unwrap();
            }
            // the first checkpoint offered is reported invalid; the next must be older
            let first = pinned.unwrap_or("ckpt.3");
            let out = job(dir.path(), &nodes, &env, |rt, r| {
                let mut seen = Vec::new();
                while let Some(name) = rt.have_restart() {
                    rt.start_restart().expect("start_restart");
                    let n: u32 = name.trim_start_matches("ckpt.").parse().unwrap();
                    let file = format!("f{n}_{r}");
                    let path = rt.route_file(&prefix.join(&file)).expect("route_file");
                    let read = std::fs::read_to_string(&path).unwrap_or_default();
                    let exact = read == format!("{name} {file}");
                    seen.push(format!("{name} {exact}"));
                    if rt
                        .complete_restart(exact && name != first)
                        .expect("complete")
                    {
                        break;
                    }
                }
                seen
            });
            let next = if first == "ckpt.3" {
                "ckpt.2"
            } else {
                "ckpt.1"
            };
            for (r, (seen, end)) in out.iter().enumerate() {
                assert_eq!(
                    seen,
                    &[format!("{first} true"), format!("{next} true")],
                    "fetch {fetch}, pinned {pinned:?}, rank {r}"
                );
                assert_eq!(end, &Ok(()), "rank {r}");
            }
            let index = crate::state::prefix::Index::load(&prefix).unwrap();
            let failed: Vec<&str> = index
                .datasets
                .values()
                .filter(|e| e.failed.is_some())
                .map(|e| e.name.as_str())
                .collect();
            assert_eq!(failed, [first], "fetch {fetch}, pinned {pinned:?}");
        }
    }
}
