//! Tests of the scavenge tools: which dataset is chosen, and `index add`'s checks.

use super::*;

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
