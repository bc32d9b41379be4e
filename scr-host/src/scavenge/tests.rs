//! Tests of the scavenge tools: which dataset is chosen, and `index add`'s checks.

use super::*;
use crate::state::prefix::Provenance;

/// Write a state file.
fn put(path: &Path, kind: &str, v: &impl Serialize) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    crate::state::write_state(path, kind, v).unwrap();
}

fn dataset(prefix: &Path, id: u64, name: &str, files: &[(&str, &[u8])]) {
    let mut ranks = BTreeMap::new();
    for (r, (n, data)) in files.iter().enumerate() {
        std::fs::create_dir_all(prefix.join(n).parent().unwrap()).unwrap();
        std::fs::write(prefix.join(n), data).unwrap();
        ranks.insert(
            r as u32,
            vec![FlushedFile {
                name: n.to_string(),
                size: data.len() as u64,
                crc32: Some(crc32fast::hash(data)),
                stored: None,
            }],
        );
    }
    let summary = Summary {
        id,
        name: name.into(),
        checkpoint_id: Some(id),
        world_size: files.len() as u32,
        files: files.len() as u64,
        bytes: files.iter().map(|f| f.1.len() as u64).sum(),
        complete: true,
        ..Summary::default()
    };
    put(
        &Rank2File::path(prefix, id),
        "rank2file",
        &Rank2File { ranks },
    );
    put(&Summary::path(prefix, id), "summary", &summary);
}

#[test]
fn the_newest_checkpoint_is_scavenged_even_when_an_output_came_after_it() {
    let rec = |id: u64, ckpt: Option<u64>, complete: bool| DatasetRecord {
        id,
        name: format!("d{id}"),
        checkpoint_id: ckpt,
        output: ckpt.is_none(),
        complete,
        ..DatasetRecord::default()
    };
    let pick = |v: Vec<DatasetRecord>| to_scavenge(v.into_iter()).map(|d| d.id);
    // ckpt 3, then an output (id 4, always flushed), then an incomplete checkpoint
    assert_eq!(
        pick(vec![
            rec(3, Some(2), true),
            rec(4, None, true),
            rec(5, Some(3), false)
        ]),
        Some(3)
    );
    // outputs only: the newest output
    assert_eq!(pick(vec![rec(1, None, true), rec(2, None, true)]), Some(2));
    assert_eq!(pick(vec![rec(1, Some(1), false)]), None);
}

#[test]
fn index_add_checks_every_file_then_adds_it_as_the_restart_point() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    dataset(p, 3, "ckpt.3", &[("c3/a", b"alpha"), ("c3/b", b"beta")]);
    let (entry, current) = index_add(p, "ckpt.3", false, None, 4096).unwrap();
    assert!(entry.complete && current);
    let ix = Index::load(p).unwrap();
    assert_eq!(ix.current.as_deref(), Some("ckpt.3"));
    assert!(ix.datasets[&3].complete);
    // twice: refused
    let err = index_add(p, "3", false, None, 4096)
        .unwrap_err()
        .to_string();
    assert!(err.contains("in the index already"), "{err}");
    // an older one is added but does not become the restart point
    dataset(p, 2, "ckpt.2", &[("c2/a", b"one"), ("c2/b", b"two")]);
    let (_, current) = index_add(p, "2", false, None, 4096).unwrap();
    assert!(!current);
    assert_eq!(Index::load(p).unwrap().current.as_deref(), Some("ckpt.3"));
}

#[test]
fn index_add_refuses_a_flipped_byte_naming_rank_and_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    dataset(p, 4, "ckpt.4", &[("c4/a", b"alpha"), ("c4/b", b"beta")]);
    std::fs::write(p.join("c4/b"), b"bexa").unwrap();
    let err = index_add(p, "ckpt.4", false, None, 4096)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("rank 1: c4/b (") && err.contains("CRC32"),
        "{err}"
    );
    assert!(Index::load(p).unwrap().datasets.is_empty());
    let err = index_add(p, "ckpt.9", false, None, 4096)
        .unwrap_err()
        .to_string();
    assert!(err.contains("no dataset `ckpt.9`"), "{err}");
}

/// A dataset directory with a rank2file map but no summary (a flush that ended between
/// the two): `index add ID` builds the summary from the map and the index's open entry
/// (name, checkpoint id, provenance) once every file checks out, and indexes it; a
/// missing file refuses it by rank and name and writes no summary; with no entry naming
/// it, it is refused with what to do.
#[test]
fn index_add_builds_a_missing_summary_from_rank2file_after_checking_every_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    dataset(p, 5, "ckpt.5", &[("c5/a", b"alpha"), ("c5/b", b"beta")]);
    std::fs::remove_file(Summary::path(p, 5)).unwrap();
    // nothing names it
    let err = index_add(p, "5", false, None, 4096)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no summary, and the index has no entry naming dataset 5")
            && err.contains("scr index import"),
        "{err}"
    );
    // the open entry of the interrupted flush names it
    let made = Provenance {
        user: Some("alice".into()),
        job_id: Some("4242".into()),
        cluster: Some("quartz".into()),
        created: Some(1_700_000_000),
    };
    Index::update(p, |ix| {
        ix.begin_flush(&IndexEntry {
            id: 5,
            name: "ckpt.5".into(),
            checkpoint_id: Some(5),
            world_size: 2,
            dir: layout::dataset_dir_name(5),
            made: made.clone(),
            ..IndexEntry::default()
        })
    })
    .unwrap();
    // a file is missing: refused by rank and name, no summary written
    std::fs::rename(p.join("c5/b"), p.join("c5/b.away")).unwrap();
    let err = index_add(p, "5", false, None, 4096)
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("rank 1: c5/b ("), "{err}");
    assert!(!Summary::path(p, 5).exists());
    assert!(!Index::load(p).unwrap().datasets[&5].complete);
    // every file there: built, checked, indexed as the restart point
    std::fs::rename(p.join("c5/b.away"), p.join("c5/b")).unwrap();
    let (entry, current) = index_add(p, "5", false, None, 4096).unwrap();
    assert!(entry.complete && current, "{entry:?}");
    assert_eq!(entry.made, made);
    let built: Summary = read_state(&Summary::path(p, 5), "summary").unwrap();
    assert_eq!(
        (built.name.as_str(), built.checkpoint_id, built.world_size),
        ("ckpt.5", Some(5), 2)
    );
    assert_eq!((built.files, built.bytes, built.complete), (2, 9, true));
    assert_eq!(built.made, made);
    // an index rebuilt from the summaries keeps who made it
    std::fs::remove_file(Index::path(p)).unwrap();
    assert_eq!(Index::rebuild(p).unwrap().datasets[&5].made, made);
}
