//! Tests of the rank2file map: blocks, the tree written and read back, parts of another
//! dataset or block refused, and the formats of other releases.

use super::*;

/// Rank `r` of `ranks` with `r % 3` files (rank 0, 3, 6: none).
fn map(ranks: u32) -> Rank2File {
    Rank2File {
        ranks: (0..ranks)
            .map(|r| {
                let files = (0..r % 3)
                    .map(|i| FlushedFile {
                        name: format!("ckpt.1/rank_{r}.{i}"),
                        size: u64::from(r * 10 + i),
                        crc32: Some(r),
                        stored: None,
                    })
                    .collect();
                (r, files)
            })
            .collect(),
    }
}

#[test]
fn blocks_cover_every_rank_once_with_an_uneven_last_block() {
    let b = Blocks::new(7, 3);
    assert_eq!(b.count(), 3);
    assert_eq!(
        (0..3).map(|n| b.members(n)).collect::<Vec<_>>(),
        [0..3, 3..6, 6..7]
    );
    assert_eq!(b.leaders().collect::<Vec<_>>(), [0, 3, 6]);
    assert_eq!(
        (0..7).map(|r| b.of(r)).collect::<Vec<_>>(),
        [0, 0, 0, 1, 1, 1, 2]
    );
    // a block larger than the job: one block; 0 is taken as 1
    assert_eq!(Blocks::new(4, 256).count(), 1);
    assert_eq!(Blocks::new(4, 0).count(), 4);
}

#[test]
fn a_map_written_as_a_tree_reads_back_whole_with_totals_in_the_root() {
    let dir = tempfile::tempdir().unwrap();
    let m = map(7);
    let root = m.write(dir.path(), 5, 7, 3).unwrap();
    // ranks 1, 4: one file; 2, 5: two
    let bytes = 10 + 20 + 21 + 40 + 50 + 51;
    assert_eq!(
        root,
        Rank2FileRoot {
            ranks: 7,
            block: 3,
            parts: 3,
            files: 6,
            bytes
        }
    );
    assert_eq!(Rank2File::load(dir.path(), 5).unwrap(), m);
    assert_eq!(
        Rank2FileMap::load(dir.path(), 5).unwrap(),
        Rank2FileMap::Tree(root.clone())
    );
    // each part says what it is, as a leader reads it knowing only the layout
    let parts: Vec<_> = (0..3)
        .map(|n| Rank2FilePart::load(dir.path(), 5, root.blocks(), n).unwrap())
        .collect();
    assert_eq!(
        parts
            .iter()
            .map(|p| (p.dataset, p.index, p.block, p.first, p.count, p.files, p.bytes))
            .collect::<Vec<_>>(),
        [
            (5, 0, 3, 0, 3, 3, 10 + 20 + 21),
            (5, 1, 3, 3, 3, 3, 40 + 50 + 51),
            (5, 2, 3, 6, 1, 0, 0)
        ]
    );
    assert_eq!(parts[2].ranks, BTreeMap::from([(6, Vec::new())]));
    Rank2File::remove(dir.path(), 5);
    let left: Vec<_> = std::fs::read_dir(dataset_dir(dir.path(), 5))
        .unwrap()
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_part_of_another_dataset_or_block_is_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    map(7).write(dir.path(), 5, 7, 3).unwrap();
    let part1 = Rank2FilePart::path(dir.path(), 5, 1);
    let good = std::fs::read(&part1).unwrap();

    // another dataset's intact part 1 in its place
    map(7).write(dir.path(), 6, 7, 3).unwrap();
    std::fs::copy(Rank2FilePart::path(dir.path(), 6, 1), &part1).unwrap();
    let e = Rank2File::load(dir.path(), 5).unwrap_err().to_string();
    assert_eq!(
        e,
        format!(
            "{}: is a part of dataset 6, not of dataset 5; the file is not trusted",
            part1.display()
        )
    );

    // this dataset's part 0 copied over part 1
    std::fs::copy(Rank2FilePart::path(dir.path(), 5, 0), &part1).unwrap();
    let e = Rank2File::load(dir.path(), 5).unwrap_err().to_string();
    assert_eq!(
        e,
        format!(
            "{}: is part 0 of blocks of 3 ranks, expected part 1 of blocks of 3; the file is not trusted",
            part1.display()
        )
    );

    // read with another layout than it was written with (blocks of 4)
    std::fs::write(&part1, &good).unwrap();
    let e = Rank2FilePart::load(dir.path(), 5, Blocks::new(7, 4), 1)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(&format!(
            "{}: is part 1 of blocks of 3 ranks",
            part1.display()
        )),
        "{e}"
    );

    // a part whose own header was forged to other ranks (checksum made to match)
    let mut forged: Rank2FilePart = read_state(&part1, PART_KIND).unwrap();
    forged.first = 2;
    forged.write(dir.path()).unwrap();
    let e = Rank2File::load(dir.path(), 5).unwrap_err().to_string();
    assert_eq!(
        e,
        format!(
            "{}: lists ranks [3, 4, 5] (records 2..5), expected 3..6; the file is not trusted",
            part1.display()
        )
    );
    // or to other totals
    let mut forged: Rank2FilePart = read_state(&part1, PART_KIND).unwrap();
    forged.first = 3;
    forged.bytes += 1;
    forged.write(dir.path()).unwrap();
    let e = Rank2File::load(dir.path(), 5).unwrap_err().to_string();
    assert_eq!(
        e,
        format!(
            "{}: records 3 file(s) of 142 bytes, its lists hold 3 of 141; the file is not trusted",
            part1.display()
        )
    );

    // damaged: the state file's checksum
    let mut bytes = good.clone();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 1;
    std::fs::write(&part1, &bytes).unwrap();
    let e = Rank2File::load(dir.path(), 5).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!("{}: checksum mismatch", part1.display())),
        "{e}"
    );
}

#[test]
fn a_missing_part_or_parts_of_another_flush_are_caught() {
    let dir = tempfile::tempdir().unwrap();
    map(7).write(dir.path(), 5, 7, 3).unwrap();
    let root_path = Rank2File::path(dir.path(), 5);
    let part1 = Rank2FilePart::path(dir.path(), 5, 1);
    let good = std::fs::read(&part1).unwrap();

    // an intact part 1 of the same dataset and block, other contents (a part left
    // by another flush of it): only the totals tell
    let mut other = map(7);
    other.ranks.get_mut(&4).unwrap()[0].size += 1;
    other.write(dir.path(), 5, 7, 3).unwrap();
    let root = Rank2FileRoot::new(Blocks::new(7, 3), 6, 10 + 20 + 21 + 40 + 50 + 51);
    root.write(dir.path(), 5).unwrap();
    let e = Rank2File::load(dir.path(), 5).unwrap_err().to_string();
    assert_eq!(
        e,
        format!(
            "{}: records 6 file(s) of 192 bytes, its 3 part(s) list 6 file(s) of 193 bytes (a part is missing or not this flush's); the file is not trusted",
            root_path.display()
        )
    );

    // a root recording fewer parts than its layout needs: refused before any part
    std::fs::write(&part1, &good).unwrap();
    let short = Rank2FileRoot {
        parts: 2,
        ..root.clone()
    };
    short.write(dir.path(), 5).unwrap();
    let e = Rank2File::load(dir.path(), 5).unwrap_err().to_string();
    assert_eq!(
        e,
        format!(
            "{}: records 2 part(s), 7 ranks in blocks of 3 need 3; the file is not trusted",
            root_path.display()
        )
    );

    // missing
    root.write(dir.path(), 5).unwrap();
    assert!(Rank2File::load(dir.path(), 5).is_ok());
    std::fs::remove_file(&part1).unwrap();
    let e = Rank2File::load(dir.path(), 5).unwrap_err();
    assert!(e.is_not_found(), "{e}");
    assert!(
        e.to_string().starts_with(&part1.display().to_string()),
        "{e}"
    );
}

#[test]
fn a_root_listing_its_parts_of_the_unreleased_format_is_refused_saying_so() {
    let dir = tempfile::tempdir().unwrap();
    map(4).write(dir.path(), 2, 4, 3).unwrap();
    let path = Rank2File::path(dir.path(), 2);
    write(
        &path,
        LISTING_ROOT_KIND,
        &serde_json::json!({"ranks": 4, "block": 3, "files": 2, "bytes": 30, "parts": []}),
    )
    .unwrap();
    let e = Rank2File::load(dir.path(), 2).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!(
            "{}: a `rank2file-root` root (a development format listing every part, never released), this release reads `rank2file-tree` roots",
            path.display()
        )),
        "{e}"
    );
}

#[test]
fn a_single_file_map_of_an_earlier_release_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let m = map(4);
    write(&Rank2File::path(dir.path(), 2), SINGLE_KIND, &m).unwrap();
    assert_eq!(Rank2File::load(dir.path(), 2).unwrap(), m);
    assert_eq!(
        Rank2FileMap::load(dir.path(), 2).unwrap(),
        Rank2FileMap::Single(m)
    );
}
