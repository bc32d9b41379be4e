//! The rank2file map as SCR's tree: written in parts of `rank2file_block`
//! ranks by each block's leader, each part naming its dataset, block and totals, under
//! a root holding only the layout and totals; read back by the leaders at fetch, a
//! damaged part or parts not adding up to the root refused with the same error on every
//! rank, and a single-file map of an earlier release still fetched; rank 0 exchanges no
//! message per block. Seven ranks in blocks of three: parts of 3, 3 and 1 ranks.

use scr_e2e::{wipe_caches, Cluster, JobOutput};
use scr_host::state::prefix::{
    self, dataset_dir, Blocks, Index, Rank2File, Rank2FilePart, Rank2FileRoot,
};
use scr_host::state::read_state;

/// Seven ranks on two simulated nodes.
const SEVEN: &[&str] = &["n0", "n0", "n0", "n0", "n1", "n1", "n1"];

fn cluster() -> Cluster {
    let mut c = Cluster::new();
    c.set("SCR_FLUSH", "2").set("SCR_RANK2FILE_BLOCK", "3");
    c
}

fn heat(c: &Cluster, steps: u64) -> JobOutput {
    let out = c.run(SEVEN, "scr-heat", &["--steps", &steps.to_string()]);
    assert_eq!(out.code, 0, "{out}");
    out
}

fn id_of(c: &Cluster, name: &str) -> u64 {
    Index::load(&c.prefix())
        .unwrap()
        .datasets
        .values()
        .find(|e| e.name == name)
        .unwrap_or_else(|| panic!("{name} is in the index"))
        .id
}

/// Every rank2file file in the dataset's directory, by name.
fn map_files(c: &Cluster, id: u64) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dataset_dir(&c.prefix(), id))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("rank2file"))
        .collect();
    v.sort();
    v
}

#[test]
fn a_flushed_map_is_written_in_parts_per_block_and_fetched_byte_exact() {
    let c = cluster();
    heat(&c, 22);
    let id = id_of(&c, "ckpt.20");
    assert_eq!(
        map_files(&c, id),
        [
            "rank2file.0.scr",
            "rank2file.1.scr",
            "rank2file.2.scr",
            "rank2file.scr"
        ]
    );
    let dir = dataset_dir(&c.prefix(), id);
    let root: Rank2FileRoot = read_state(&dir.join("rank2file.scr"), prefix::ROOT_KIND).unwrap();
    assert_eq!((root.ranks, root.block, root.parts), (7, 3, 3));
    let mut total = 0u64;
    for (n, want) in [(0u32, 0u32..3), (1, 3..6), (2, 6..7)] {
        let file = format!("rank2file.{n}.scr");
        let part: Rank2FilePart = read_state(&dir.join(&file), prefix::PART_KIND).unwrap();
        // the part says what it is
        assert_eq!(
            (part.dataset, part.index, part.block, part.first, part.count),
            (id, n, 3, want.start, want.len() as u32),
            "{file}"
        );
        assert!(part.ranks.keys().copied().eq(want.clone()), "{file}");
        let mut bytes_in_part = 0;
        for r in want {
            let files = &part.ranks[&r];
            assert_eq!(files.len(), 1, "rank {r}");
            let f = &files[0];
            assert_eq!(f.name, format!("ckpt.20/rank_{r}.ckpt"));
            let bytes = std::fs::read(c.prefix().join(&f.name)).unwrap();
            assert_eq!(f.size, bytes.len() as u64, "rank {r}");
            assert_eq!(f.crc32, Some(crc32fast::hash(&bytes)), "rank {r}");
            bytes_in_part += f.size;
        }
        assert_eq!(
            (part.files, part.bytes),
            (part.ranks.len() as u64, bytes_in_part),
            "{file}"
        );
        total += bytes_in_part;
    }
    // the root's totals: the sums reduced over the leaders
    assert_eq!((root.files, root.bytes), (7, total));
    // the offline tools' whole-map read goes through every part
    let whole = Rank2File::load(&c.prefix(), id).unwrap();
    assert!(whole.ranks.keys().copied().eq(0..7));
    // no temporary file nor a list of writes is left beside them
    assert!(!dir.join("writes.0.scr").exists() && !dir.join("writes.scr").exists());

    wipe_caches(&c);
    let out = heat(&c, 30);
    assert_eq!(
        out.line_after("restarted from "),
        Some("ckpt.20 at step 20"),
        "{out}"
    );
    assert_eq!(out.final_state(), scr_e2e::reference_state(7, 30, None));
}

#[test]
fn a_damaged_part_is_refused_on_every_rank_naming_it() {
    let c = cluster();
    heat(&c, 22);
    let id = id_of(&c, "ckpt.20");
    let part = dataset_dir(&c.prefix(), id).join("rank2file.1.scr");
    let mut bytes = std::fs::read(&part).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    std::fs::write(&part, bytes).unwrap();
    wipe_caches(&c);
    let out = heat(&c, 30);
    assert_eq!(
        out.line_after("restarted from "),
        Some("ckpt.10 at step 10"),
        "{out}"
    );
    assert!(out.stderr.contains("ckpt.20 cannot be fetched"), "{out}");
    let why = Index::load(&c.prefix()).unwrap().datasets[&id]
        .failed
        .clone()
        .expect("marked failed");
    // only ranks 3..6 read part 1, yet rank 0 fails with its error: agreed everywhere
    assert!(
        why.starts_with("fetch failed on rank 0: ")
            && why.contains(&format!("{}: checksum mismatch", part.display())),
        "{why}"
    );
    assert_eq!(out.final_state(), scr_e2e::reference_state(7, 30, None));
}

/// Every part intact and its own (checksum, dataset, block, ranks, its totals its
/// lists'), yet one of them not the flush the root records: the reduction of the parts'
/// totals catches it, and every rank fails with the root's error.
#[test]
fn parts_whose_totals_do_not_add_up_to_the_root_are_refused_on_every_rank() {
    let c = cluster();
    heat(&c, 22);
    let id = id_of(&c, "ckpt.20");
    let root_path = Rank2File::path(&c.prefix(), id);
    let root: Rank2FileRoot = read_state(&root_path, prefix::ROOT_KIND).unwrap();
    let part_path = Rank2FilePart::path(&c.prefix(), id, 2);
    let part: Rank2FilePart = read_state(&part_path, prefix::PART_KIND).unwrap();
    // part 2 (rank 6) rewritten listing one file fewer: consistent in itself
    let dropped = part.ranks[&6][0].size;
    let mut ranks = part.ranks.clone();
    ranks.insert(6, Vec::new());
    let forged = Rank2FilePart::new(id, Blocks::new(7, 3), 2, ranks);
    forged.write(&c.prefix()).unwrap();
    assert_eq!(
        Rank2FilePart::load(&c.prefix(), id, Blocks::new(7, 3), 2).unwrap(),
        forged
    );
    wipe_caches(&c);
    let out = heat(&c, 30);
    assert_eq!(
        out.line_after("restarted from "),
        Some("ckpt.10 at step 10"),
        "{out}"
    );
    let why = Index::load(&c.prefix()).unwrap().datasets[&id]
        .failed
        .clone()
        .expect("marked failed");
    assert_eq!(
        why,
        format!(
            "fetch failed on rank 0: {}: records 7 file(s) of {} bytes, its 3 part(s) list 6 file(s) of {} bytes (a part is missing or not this flush's); the file is not trusted",
            root_path.display(),
            root.bytes,
            root.bytes - dropped
        ),
        "{out}"
    );
    assert_eq!(out.final_state(), scr_e2e::reference_state(7, 30, None));
}

#[test]
fn a_single_file_map_of_an_earlier_release_is_still_fetched() {
    let c = cluster();
    heat(&c, 22);
    let id = id_of(&c, "ckpt.20");
    // rewrite ckpt.20's map the way releases before the tree did: one file, every rank
    let whole = Rank2File::load(&c.prefix(), id).unwrap();
    Rank2File::remove(&c.prefix(), id);
    prefix::write(
        &Rank2File::path(&c.prefix(), id),
        prefix::SINGLE_KIND,
        &whole,
    )
    .unwrap();
    assert_eq!(map_files(&c, id), ["rank2file.scr"]);
    assert_eq!(Rank2File::load(&c.prefix(), id).unwrap(), whole);
    wipe_caches(&c);
    let out = heat(&c, 30);
    assert_eq!(
        out.line_after("restarted from "),
        Some("ckpt.20 at step 20"),
        "{out}"
    );
    assert_eq!(out.final_state(), scr_e2e::reference_state(7, 30, None));
}

/// `[msgs_sent, msgs_recv]` of `what name` (e.g. `complete flush`) in each rank's
/// `scr-comm-probe` report, checking the job's world size.
fn messages(c: &Cluster, ranks: usize, what: &str) -> Vec<[u64; 2]> {
    (0..ranks)
        .map(|r| {
            let text = std::fs::read_to_string(c.prefix().join(format!("comm_{r}.txt")))
                .unwrap_or_else(|e| panic!("rank {r} wrote no report: {e}"));
            assert!(
                text.starts_with(&format!("world size {ranks}\n")),
                "rank {r}: {text}"
            );
            text.lines()
                .find_map(|l| l.strip_prefix(what).and_then(|l| l.strip_prefix(' ')))
                .map(|rest| {
                    // calls collectives msgs_sent msgs_recv bytes_sent bytes_recv
                    let n: Vec<u64> = rest.split(' ').map(|w| w.parse().unwrap()).collect();
                    [n[2], n[3]]
                })
                .unwrap_or_else(|| panic!("rank {r}: no `{what}` line\n{text}"))
        })
        .collect()
}

/// The point-to-point messages of a flush and a fetch at 8 ranks in blocks of 3
/// (leaders 0, 3, 6): a member sends its leader its names (the list of what the flush
/// may write) and its outcome, and at fetch receives its own list; a leader receives
/// those from its members and sends them their lists. Rank 0 is a leader like the
/// others: no message to or from the other leaders (the root's totals are reduced, the
/// root's layout broadcast), so nothing it handles grows with the number of blocks.
#[test]
fn flush_and_fetch_exchange_only_within_blocks() {
    let mut c = Cluster::new();
    c.set("SCR_FLUSH", "1").set("SCR_RANK2FILE_BLOCK", "3");
    let eight = ["n0", "n0", "n0", "n0", "n1", "n1", "n1", "n1"];
    let out = c.run(&eight, "scr-comm-probe", &[]);
    assert_eq!(out.code, 0, "{out}");
    // [sent, received]: members 2 sent; leaders get 2 per member and send nothing
    assert_eq!(
        messages(&c, 8, "complete flush"),
        [
            [0, 4],
            [2, 0],
            [2, 0],
            [0, 4],
            [2, 0],
            [2, 0],
            [0, 2],
            [2, 0]
        ]
    );
    for node in ["n0", "n1"] {
        c.lose_node(node);
    }
    let out = c.run(&eight, "scr-comm-probe", &[]);
    assert_eq!(out.code, 0, "{out}");
    // each leader (rank 0 too) sends its members their lists, and receives nothing
    assert_eq!(
        messages(&c, 8, "init fetch"),
        [
            [2, 0],
            [0, 1],
            [0, 1],
            [2, 0],
            [0, 1],
            [0, 1],
            [1, 0],
            [0, 1]
        ]
    );
}
