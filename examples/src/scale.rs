//! `scr-bench-scale`'s worker checks: what each rank writes, and the byte-exact reads
//! back after a restart (of the same size, and of another size), collective through
//! `complete_restart` so that no rank is left waiting when one fails.

use std::path::Path;

use scr_api::Scr;

/// What a check returns: `Ok(None)` when every rank read its files byte for byte, else
/// what this rank found wrong (or that another rank did).
type Checked = Result<Option<String>, Box<dyn std::error::Error>>;

/// Rank `rank`'s content of a file of `len` bytes (`salt` tells files apart): different on
/// every rank so that an XOR rebuild that mixes up members is caught.
pub fn content(rank: usize, len: usize, salt: u64) -> Vec<u8> {
    let mut x = (rank as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ salt;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Read the restart checkpoint `want` back and compare `file` with `expected`
/// (collective); `Ok(None)` when every rank read its file byte for byte, else what this
/// rank found wrong (or that another rank did).
pub fn restart_check(scr: &mut Scr, want: &str, file: &Path, expected: &[u8]) -> Checked {
    let offered = scr.have_restart();
    if offered.as_deref() != Some(want) {
        return Err(format!(
            "the restart offers {offered:?}, not {want} (lost datasets: {:?})",
            scr.lost_datasets()
        )
        .into());
    }
    scr.start_restart()?;
    // a rank that cannot read its file says so through complete_restart (collective),
    // never by leaving the others waiting in it
    let mine = match scr.route_file(file) {
        Ok(path) => match std::fs::read(&path) {
            Ok(b) if b == expected => None,
            Ok(b) => Some(format!(
                "{}: {} bytes differ from the {} written",
                path.display(),
                b.len(),
                expected.len()
            )),
            Err(e) => Some(format!("{}: {e}", path.display())),
        },
        Err(e) => Some(format!("route_file {}: {e}", file.display())),
    };
    let all = scr.complete_restart(mine.is_none())?;
    Ok(match (mine, all) {
        (Some(e), _) => Some(e),
        (None, false) => Some("another rank did not read its file back".into()),
        (None, true) => None,
    })
}

/// Inside a job of `m` ranks restarting from the checkpoint `ckpt.2` of `n` ranks: rank
/// `rank` lists the files of the old ranks its share of `n` overlaps (`restart_files`),
/// routes and reads each, and compares it with what that rank wrote (collective through
/// complete_restart); as [`restart_check`]. With `prefix`, every file must come from the
/// caches, not from it (the half spans every node: the step measures the restart from
/// the old job's caches).
pub fn resize_check(
    scr: &mut Scr,
    prefix: Option<&Path>,
    rank: usize,
    m: usize,
    n: usize,
    bytes: usize,
) -> Checked {
    let offered = scr.have_restart();
    if offered.as_deref() != Some("ckpt.2") {
        return Err(format!("the restart of {m} ranks offers {offered:?}, not ckpt.2").into());
    }
    scr.start_restart()?;
    let writers = scr.restart_writers()? as usize;
    let mut mine = (writers != n).then(|| format!("{writers} writers, not {n}"));
    // the old ranks w whose share [w/n, (w+1)/n) overlaps [rank/m, (rank+1)/m)
    for w in (0..n).filter(|w| w * m < (rank + 1) * n && (w + 1) * m > rank * n) {
        let want = format!("ckpt.2/rank_{w}.dat");
        let got = scr
            .restart_files(w as u32)
            .map_err(|e| e.to_string())
            .and_then(|files| {
                let f = files
                    .iter()
                    .find(|f| f.ends_with(&want))
                    .ok_or_else(|| format!("rank {w} lists {files:?}, not {want}"))?;
                let path = scr.route_file(f).map_err(|e| e.to_string())?;
                if prefix.is_some_and(|p| path.starts_with(p)) {
                    return Err(format!("{want} was read from the prefix, not the caches"));
                }
                std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))
            });
        match got {
            Ok(b) if b == content(w, bytes, 2) => {}
            Ok(_) => mine = mine.or(Some(format!("{want}: the bytes differ"))),
            Err(e) => mine = mine.or(Some(e)),
        }
    }
    let all = scr.complete_restart(mine.is_none())?;
    Ok(match (mine, all) {
        (Some(e), _) => Some(e),
        (None, false) => Some("another rank did not read its files back".into()),
        (None, true) => None,
    })
}
