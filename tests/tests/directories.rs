//! Directories others can touch, end to end: a shared base others can
//! write to needs the sticky bit; nothing below the job's directory is followed through a
//! symbolic link (dataset directories, nested directories of routed names, the targets of
//! distribute); what the runtime creates in cache is private (directories 0700, the
//! files it and the plugins write 0600, application files keep their own mode); names
//! read from prefix state never lead out of the prefix.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use scr_e2e::{Cluster, JobOutput};

const TWO_NODES: &[&str] = &["n0", "n0", "n1", "n1"];
const CELLS: &str = "3000";

fn heat(c: &Cluster, nodes: &[&str], steps: u64) -> JobOutput {
    c.run(
        nodes,
        "scr-heat",
        &["--steps", &steps.to_string(), "--cells", CELLS],
    )
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .mode()
        & 0o7777
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Everything below `dir` (not `dir` itself), depth first.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let is_dir = std::fs::symlink_metadata(&p).unwrap().is_dir();
        out.push(p.clone());
        if is_dir {
            out.extend(walk(&p));
        }
    }
    out
}

/// A directory of "another user" that anyone may write to (so a link to it would work).
fn theirs(c: &Cluster) -> PathBuf {
    let d = c.path("theirs");
    std::fs::create_dir(&d).unwrap();
    chmod(&d, 0o777);
    d
}

fn count(dir: &Path) -> usize {
    std::fs::read_dir(dir).unwrap().count()
}

/// A cache base anyone can write to without the sticky bit lets another user rename the
/// job's directory away at any time: refused on every rank, naming path, owner and mode
/// and what to do; the same for an ancestor of the base. /dev/shm's 1777 is accepted; a
/// base owned by another user is refused whatever its mode (its owner can rename what
/// is in it).
#[test]
fn a_base_others_can_write_needs_the_sticky_bit() {
    let c = Cluster::new();
    let cache = c.path("cache");
    chmod(&cache, 0o777);
    let out = heat(&c, TWO_NODES, 6);
    assert_ne!(out.code, 124, "the job hung\n{out}");
    assert_ne!(out.code, 0, "the open base was used\n{out}");
    let want = format!(
        "the shared base {} (owner uid 0, mode 0777) can be written by other users and has no sticky bit, so another user could rename or replace this job's directory in it: set the sticky bit (chmod +t {}",
        cache.display(),
        cache.display()
    );
    assert!(out.stderr.contains(&want), "{want}\n{out}");
    assert!(!out.stdout.contains("checkpoint ckpt.5: kept"), "{out}");
    assert_eq!(count(&cache), 0, "nothing was created in the open base");

    // like /dev/shm
    chmod(&cache, 0o1777);
    let out = heat(&c, TWO_NODES, 6);
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.contains("checkpoint ckpt.5: kept"), "{out}");

    // owned by another user, even one only that user can write to: its owner can
    // rename what is in it whatever the mode
    std::os::unix::fs::chown(&cache, Some(12345), None).unwrap();
    chmod(&cache, 0o755);
    let out = c.run(TWO_NODES, "scr-probe", &["candidate"]);
    assert_eq!(out.code, 0, "{out}");
    for (r, report) in c.probe_reports(4).iter().enumerate() {
        assert!(
            report.contains(&format!(
                "the shared base {} (mode 0755) is owned by uid 12345, neither root nor this user",
                cache.display()
            )),
            "rank {r}: {report}"
        );
    }
    std::os::unix::fs::chown(&cache, Some(0), None).unwrap();

    // an open ancestor: the whole tree could be moved
    let mut c = Cluster::new();
    let open = c.path("open");
    std::fs::create_dir_all(open.join("cache")).unwrap();
    chmod(&open, 0o777);
    c.set("SCR_CACHE_BASE", open.join("cache").to_str().unwrap());
    let out = heat(&c, TWO_NODES, 6);
    assert_ne!(out.code, 0, "{out}");
    let want = format!(
        "{}, above the shared base {}, (owner uid 0, mode 0777) can be written by other users and has no sticky bit",
        open.display(),
        open.join("cache").display()
    );
    assert!(out.stderr.contains(&want), "{want}\n{out}");
    assert_eq!(count(&open.join("cache")), 0);
}

/// A link planted in place of the dataset directory inside the job's (private)
/// directory: refused naming it, and not one byte written through it.
#[test]
fn a_link_in_place_of_a_dataset_directory_is_refused() {
    let c = Cluster::new();
    let theirs = theirs(&c);
    let job = c.cache_dir("n1");
    std::fs::create_dir_all(&job).unwrap();
    for d in [
        c.path("cache/n1"),
        job.parent().unwrap().into(),
        job.clone(),
    ] {
        chmod(&d, 0o700);
    }
    let link = job.join("scr.dataset.1");
    std::os::unix::fs::symlink(&theirs, &link).unwrap();
    let out = heat(&c, TWO_NODES, 6);
    assert_ne!(out.code, 124, "the job hung\n{out}");
    assert_ne!(out.code, 0, "the job used the planted link\n{out}");
    let want = format!(
        "{} is a symbolic link (owner uid 0, mode 0777)",
        link.display()
    );
    assert!(out.stderr.contains(&want), "{want}\n{out}");
    assert!(!out.stdout.contains("checkpoint ckpt.5: kept"), "{out}");
    assert_eq!(count(&theirs), 0, "files went through the planted link");
}

/// A link in place of a directory of a nested routed name, or of the routed file itself:
/// route_file refuses it naming the link, records nothing, and the output still
/// completes with the files routed properly.
#[test]
fn route_file_never_goes_through_a_planted_link() {
    let mut c = Cluster::new();
    let theirs = theirs(&c);
    c.set("PROBE_THEIRS", theirs.to_str().unwrap());
    let out = c.run(TWO_NODES, "scr-probe", &["planted-nested"]);
    assert_eq!(out.code, 0, "{out}");
    let reports = c.probe_reports(4);
    for (r, report) in reports.iter().enumerate() {
        let dataset = report
            .lines()
            .find_map(|l| l.strip_prefix("dataset "))
            .unwrap_or_else(|| panic!("rank {r}: {report}"));
        let sub = format!("nested: {dataset}/sub_{r} is a symbolic link (owner uid 0");
        assert!(report.contains(&sub), "rank {r}: {sub}\n{report}");
        let file = format!(
            "file: route_file: {dataset}/file_{r}.dat is a symbolic link; it is not written through: remove it"
        );
        assert!(report.contains(&file), "rank {r}: {file}\n{report}");
        assert!(report.contains("kept Ok(true)"), "rank {r}: {report}");
    }
    assert_eq!(count(&theirs), 0, "files went through the planted links");
}

/// Distribute moves a rank's files to the node it now runs on: a link planted there in
/// place of the dataset directory is refused naming it, nothing is written through it,
/// and the holder keeps its copy (no data lost).
#[test]
fn distribute_never_writes_through_a_planted_link() {
    let mut c = Cluster::new();
    c.set("SCR_CACHE_SIZE", "2").set("SCR_FLUSH", "0");
    let out = heat(&c, TWO_NODES, 12);
    assert_eq!(out.code, 0, "{out}");
    let held = c.cache_dir("n0");
    let datasets: Vec<String> = std::fs::read_dir(&held)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("scr.dataset."))
        .collect();
    assert_eq!(datasets.len(), 2, "{datasets:?}");
    let rank0: Vec<(PathBuf, Vec<u8>)> = walk(&held)
        .into_iter()
        .filter(|p| p.ends_with("rank_0.ckpt"))
        .map(|p| {
            let b = std::fs::read(&p).unwrap();
            (p, b)
        })
        .collect();
    assert_eq!(rank0.len(), 2);

    // ranks 0 and 1 move to n2, where links wait in place of their dataset directories
    let theirs = theirs(&c);
    let job = c.cache_dir("n2");
    std::fs::create_dir_all(&job).unwrap();
    for d in [
        c.path("cache/n2"),
        job.parent().unwrap().into(),
        job.clone(),
    ] {
        chmod(&d, 0o700);
    }
    for d in &datasets {
        std::os::unix::fs::symlink(&theirs, job.join(d)).unwrap();
    }
    let out = heat(&c, &["n2", "n2", "n0", "n0"], 20);
    assert_ne!(out.code, 124, "the job hung\n{out}");
    let link = job.join(&datasets[0]);
    let want = format!("{} is a symbolic link", link.display());
    assert!(out.stderr.contains(&want), "{want}\n{out}");
    assert_eq!(count(&theirs), 0, "files went through the planted links");
    for (p, b) in &rank0 {
        assert_eq!(&std::fs::read(p).unwrap(), b, "{} lost", p.display());
    }
}

/// What the runtime and the schemes create in cache is private: every directory from the
/// node level down 0700; filemaps, the nodes file and redundancy files 0600; the
/// application's files keep the mode the application gave them (the dataset directory
/// already keeps others out, and a flush restores that mode). A rebuild after a lost node
/// creates the same.
#[test]
fn cache_directories_are_0700_and_written_files_0600() {
    let mut c = Cluster::new();
    c.set("SCR_COPY_TYPE", "XOR")
        .set("SCR_CACHE_SIZE", "2")
        .set("SCR_FLUSH", "0");
    let out = heat(&c, TWO_NODES, 12);
    assert_eq!(out.code, 0, "{out}");
    let check = |node: &str| {
        let mut seen = (0, 0, 0);
        for base in ["cache", "cntl"] {
            let top = c.path(base).join(node);
            assert_eq!(mode(&top), 0o700, "{}", top.display());
            for p in walk(&top) {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                let m = mode(&p);
                if std::fs::symlink_metadata(&p).unwrap().is_dir() {
                    assert_eq!(m, 0o700, "{}", p.display());
                    seen.0 += 1;
                } else if name.ends_with(".ckpt") {
                    // the application's own file (File::create under umask 022)
                    assert_eq!(m, 0o644, "{}", p.display());
                } else {
                    // filemaps, nodes file, redundancy files
                    assert_eq!(m, 0o600, "{}", p.display());
                    seen.1 += usize::from(name.ends_with(".redset"));
                    seen.2 += usize::from(name.starts_with("filemap_"));
                }
            }
        }
        // cache/<node>/e2e/scr.e2e/scr.dataset.N/ckpt.M and cntl's levels
        assert!(seen.0 >= 7, "{node}: {seen:?}");
        assert_eq!(
            (seen.1, seen.2),
            (4, 2),
            "{node}: redundancy files, filemaps"
        );
    };
    check("n0");
    check("n1");
    // n1 lost: its ranks' files are rebuilt from XOR parity, into new directories
    c.lose_node("n1");
    // (12 steps: no new checkpoint, so the rebuilt ones stay in cache to be checked)
    let out = heat(&c, TWO_NODES, 12);
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.contains("restarted from"), "{out}");
    check("n1");
}

/// A forged rank2file map naming a file outside the prefix (through `..` or absolute):
/// the fetch refuses the dataset, reads and writes nothing outside, and the job falls
/// back (here to a fresh start, the only other choice).
#[test]
fn a_forged_rank2file_name_is_never_fetched() {
    use scr_host::state::prefix::{self, FlushedFile, Index, Rank2File};
    let mut c = Cluster::new();
    c.set("SCR_FLUSH", "1").set("SCR_CACHE_SIZE", "1");
    let out = heat(&c, TWO_NODES, 6);
    assert_eq!(out.code, 0, "{out}");
    let index = Index::load(&c.prefix()).unwrap();
    let victim = c.path("outside.dat");
    std::fs::write(&victim, b"not the library's").unwrap();
    for e in index.datasets.values() {
        let mut map = Rank2File::load(&c.prefix(), e.id).unwrap();
        let files = map.ranks.entry(0).or_default();
        files.push(FlushedFile {
            name: "../outside.dat".into(),
            size: 17,
            ..FlushedFile::default()
        });
        files.push(FlushedFile {
            name: victim.display().to_string(),
            size: 17,
            ..FlushedFile::default()
        });
        prefix::write(&Rank2File::path(&c.prefix(), e.id), "rank2file", &map).unwrap();
    }
    for node in ["n0", "n1"] {
        c.lose_node(node);
    }
    let out = heat(&c, TWO_NODES, 8);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stderr
            .contains("`../outside.dat` is not a path inside the prefix"),
        "{out}"
    );
    assert!(!out.stdout.contains("restarted from"), "{out}");
    assert_eq!(std::fs::read(&victim).unwrap(), b"not the library's");
    for node in ["n0", "n1"] {
        let job = c.cache_dir(node);
        assert!(!job.join("outside.dat").exists());
        assert!(walk(&job).iter().all(|p| !p.ends_with("outside.dat")));
    }
}
