//! A shared prefix under concurrent use: an administrator's `scr index` commands run
//! while a job flushes, and no update of either is lost.

use scr_e2e::{binary, Cluster};

/// `scr index current ckpt.1` in a loop while a 4-rank job flushes 30 checkpoints: every
/// flushed checkpoint ends up recorded complete in the index (without the lock on the
/// prefix's state, updates of the two processes overwrote each other).
#[test]
fn an_admin_editing_the_index_while_a_job_flushes_loses_no_flush() {
    let mut c = Cluster::new();
    c.set("SCR_FLUSH", "1");
    let scr = binary("scr");
    let stop = c.path("stop");
    let admin = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "n=0; while [ ! -e {stop} ]; do {scr} index current ckpt.1 --prefix {prefix} >/dev/null 2>&1 && n=$((n+1)); done; echo $n",
            stop = stop.display(),
            scr = scr.display(),
            prefix = c.prefix().display()
        ))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = c.run(
        &["n0", "n0", "n1", "n1"],
        "scr-heat",
        &["--steps", "30", "--every", "1", "--cells", "64"],
    );
    std::fs::write(&stop, b"").unwrap();
    let admin = admin.wait_with_output().unwrap();
    assert_eq!(out.code, 0, "{out}");
    let edits: u32 = String::from_utf8_lossy(&admin.stdout)
        .trim()
        .parse()
        .unwrap();
    assert!(edits > 0, "the admin's loop never ran alongside the job");
    let list = std::process::Command::new(&scr)
        .args(["index", "list", "--prefix"])
        .arg(c.prefix())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&list.stdout);
    for step in 1..=30 {
        let name = format!("ckpt.{step}");
        let line = text
            .lines()
            .find(|l| l.split_whitespace().nth(2) == Some(name.as_str()))
            .unwrap_or_else(|| {
                panic!("{name} missing from the index ({edits} admin edits)\n{text}")
            });
        assert!(
            line.contains(" complete") && !line.contains("FAILED"),
            "{name}: {line} ({edits} admin edits)\n{text}"
        );
    }
}
