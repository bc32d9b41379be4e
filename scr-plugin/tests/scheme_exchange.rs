//! A real scheme-style exchange on the in-process host: XOR parity (RAID-5 over a
//! redundancy set, as redset's XOR scheme does it) computed and rebuilt purely in memory.
//!
//! Why: the unit tests of `inproc` check each service on its own; a scheme needs them to
//! work *together* — a collective to agree on sizes, a pipelined ring of `sendrecv`s, and
//! point-to-point `send`/`recv` chains whose message sizes differ per member — across many
//! members at once. If any of that misroutes, reorders or truncates a message, the parity
//! or the rebuilt bytes stop matching a direct computation done here without the host.

use std::time::Duration;

use scr_plugin::{inproc, ErrorCode, Host, PluginError, PluginResult, ReduceOp};

/// Tags of the different messages, so that no two kinds can be confused.
const RING: u32 = 1;
const LEFT_LEN: u32 = 2;
const CHAIN: u32 = 3;
const LOST_LEN: u32 = 4;
const LOST_LEFT_LEN: u32 = 5;

/// Lengths of the members' logical files: a zero-length one, one byte, and primes, so
/// that neither the largest length nor any other is a multiple of `n - 1`.
const LENS: [usize; 8] = [1009, 0, 4099, 17, 2053, 1, 3001, 777];

/// What one member keeps after `apply`: its logical file and its XOR redundancy file
/// (the parity chunk plus a header with the chunk size and its left neighbour's length).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Stored {
    data: Vec<u8>,
    parity: Vec<u8>,
    chunk: usize,
    left_len: u64,
}

/// Member `rank`'s logical file: `LENS[rank]` bytes from an LCG seeded by the rank.
fn logical_file(rank: usize) -> Vec<u8> {
    let mut x = 0x9E37_79B9_u32.wrapping_mul(rank as u32 + 1);
    (0..LENS[rank])
        .map(|_| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (x >> 24) as u8
        })
        .collect()
}

/// Failure groups two members per node: `["n0", "n0", "n1", "n1", ...]`.
fn groups(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("n{}", i / 2)).collect()
}

/// Which of member `m`'s `n - 1` data chunks sits in slot `s` (`s != m`): slot `m` holds
/// the inserted zero chunk, so the chunks after it shift up by one.
fn chunk_in_slot(m: usize, s: usize) -> usize {
    if s < m {
        s
    } else {
        s - 1
    }
}

fn padded(data: &[u8], chunk: usize, n: usize) -> Vec<u8> {
    let mut p = data.to_vec();
    p.resize(chunk * (n - 1), 0);
    p
}

fn xor_into(acc: &mut [u8], other: &[u8]) {
    assert_eq!(acc.len(), other.len());
    acc.iter_mut().zip(other).for_each(|(a, b)| *a ^= b);
}

/// XOR apply: agree on the chunk size, then the ring reduce-scatter — the partial for
/// member `d` starts at `d + 1`, moves right one hop per step with every member adding its
/// slot-`d` chunk, and arrives complete at `d` after `n - 1` steps.
fn apply(host: &Host<'_>, data: Vec<u8>) -> PluginResult<Stored> {
    let (n, r) = (host.size() as usize, host.rank() as usize);
    let max = host.all_reduce(data.len() as u64, ReduceOp::Max)? as usize;
    let chunk = max.div_ceil(n - 1);
    let p = padded(&data, chunk, n);
    let piece = |slot: usize| &p[chunk_in_slot(r, slot) * chunk..][..chunk];
    let mut out = piece((r + n - 1) % n).to_vec();
    let mut incoming = vec![0u8; chunk];
    for step in 1..n {
        host.sendrecv(host.right(1), &out, host.left(1), &mut incoming, RING)?;
        out.copy_from_slice(&incoming);
        if step < n - 1 {
            xor_into(&mut out, piece((r + 2 * n - 1 - step) % n));
        }
    }
    // The XOR header also keeps the left neighbour's length, so a lost member's size survives.
    let mut left = [0u8; 8];
    let mine = (data.len() as u64).to_le_bytes();
    host.sendrecv(host.right(1), &mine, host.left(1), &mut left, LEFT_LEN)?;
    let left_len = u64::from_le_bytes(left);
    Ok(Stored {
        data,
        parity: out,
        chunk,
        left_len,
    })
}

/// XOR rebuild. `mine` is `None` on a member that lost everything. The members first
/// decide together whether a rebuild is possible, so all of them succeed or fail alike;
/// then the survivors reduce along the chain `lost+1 → … → lost-1 → lost`, each adding
/// its contribution to every chunk of the lost member's data and parity.
fn rebuild(host: &Host<'_>, mine: Option<Stored>) -> PluginResult<Stored> {
    let (n, r) = (host.size() as usize, host.rank() as usize);
    if host.all_agree(mine.is_some())? {
        return Ok(mine.expect("every member has its data"));
    }
    let missing = host.all_reduce(u64::from(mine.is_none()), ReduceOp::Sum)?;
    if missing > 1 {
        let msg = format!("{missing} of {n} members lost their data; XOR rebuilds only one");
        return Err(PluginError::new(ErrorCode::UNRECOVERABLE, msg));
    }
    let lost_plus_one = if mine.is_none() { r as u64 + 1 } else { 0 };
    let lost = host.all_reduce(lost_plus_one, ReduceOp::Max)? as usize - 1;
    let chunk_hint = mine.as_ref().map_or(0, |s| s.chunk as u64);
    let chunk = host.all_reduce(chunk_hint, ReduceOp::Max)? as usize;
    let mut buf = vec![0u8; n * chunk]; // n - 1 data chunks, then the parity chunk
    let Some(me) = mine else {
        let (mut len, mut left_len) = ([0u8; 8], [0u8; 8]);
        host.recv(host.left(1), CHAIN, &mut buf)?;
        host.recv(host.right(1), LOST_LEN, &mut len)?;
        host.recv(host.left(1), LOST_LEFT_LEN, &mut left_len)?;
        let len = u64::from_le_bytes(len) as usize;
        let parity = buf.split_off((n - 1) * chunk);
        buf.truncate(len);
        let left_len = u64::from_le_bytes(left_len);
        return Ok(Stored {
            data: buf,
            parity,
            chunk,
            left_len,
        });
    };
    let p = padded(&me.data, chunk, n);
    let position = (r + n - lost) % n; // 1 ..= n-1 along the chain
    if position > 1 {
        host.recv(host.left(1), CHAIN, &mut buf)?;
    }
    for j in 0..n {
        // Chunk j < n-1 of the lost data sits in slot `s`; slot `lost` is its parity.
        let s = if j == n - 1 {
            lost
        } else {
            j + usize::from(j >= lost)
        };
        let contribution = if s == r {
            &me.parity[..]
        } else {
            &p[chunk_in_slot(r, s) * chunk..][..chunk]
        };
        xor_into(&mut buf[j * chunk..][..chunk], contribution);
    }
    host.send(host.right(1), CHAIN, &buf)?;
    if position == 1 {
        host.send(host.left(1), LOST_LEN, &me.left_len.to_le_bytes())?;
    }
    if position == n - 1 {
        let len = (me.data.len() as u64).to_le_bytes();
        host.send(host.right(1), LOST_LEFT_LEN, &len)?;
    }
    Ok(me)
}

/// The parity of member `r` computed directly, without any exchange.
fn direct_parity(files: &[Vec<u8>], chunk: usize, r: usize) -> Vec<u8> {
    let n = files.len();
    let mut parity = vec![0u8; chunk];
    for (m, file) in files.iter().enumerate().filter(|&(m, _)| m != r) {
        let p = padded(file, chunk, n);
        xor_into(&mut parity, &p[chunk_in_slot(m, r) * chunk..][..chunk]);
    }
    parity
}

/// Apply on `n` members and check every parity chunk and header against a direct
/// computation.
fn apply_and_check(n: usize) -> (Vec<String>, Vec<Stored>) {
    let groups = groups(n);
    let names: Vec<&str> = groups.iter().map(String::as_str).collect();
    let stored = inproc::run(&names, |host| {
        apply(host, logical_file(host.rank() as usize))
    });
    let stored: Vec<Stored> = stored.into_iter().map(Result::unwrap).collect();
    let files: Vec<Vec<u8>> = (0..n).map(logical_file).collect();
    let max = files.iter().map(Vec::len).max().unwrap();
    let chunk = max.div_ceil(n - 1);
    assert!(
        chunk * (n - 1) > max,
        "n={n}: the test should exercise padding"
    );
    for (r, s) in stored.iter().enumerate() {
        assert_eq!(s.chunk, chunk, "n={n} member {r}: chunk");
        assert_eq!(s.data, files[r], "n={n} member {r}: data");
        assert_eq!(
            s.parity,
            direct_parity(&files, chunk, r),
            "n={n} member {r}: parity"
        );
        assert_eq!(
            s.left_len,
            files[(r + n - 1) % n].len() as u64,
            "n={n} member {r}"
        );
    }
    (groups, stored)
}

/// Every single loss, on sets of 3, 4 and 8 members, is rebuilt byte for byte: data
/// (including the zero-length and the largest file), parity and header; the survivors
/// keep what they had. With no loss, everyone keeps its state.
#[test]
fn xor_parity_matches_direct_computation_and_every_single_loss_is_rebuilt() {
    for n in [3, 4, 8] {
        let (groups, stored) = apply_and_check(n);
        let names: Vec<&str> = groups.iter().map(String::as_str).collect();
        for lost in (0..n).map(Some).chain([None]) {
            let out = inproc::run(&names, |host| {
                let r = host.rank() as usize;
                rebuild(host, (Some(r) != lost).then(|| stored[r].clone()))
            });
            for (r, got) in out.into_iter().enumerate() {
                let got = got.unwrap_or_else(|e| panic!("n={n} lost={lost:?} member {r}: {e}"));
                assert_eq!(got, stored[r], "n={n} lost={lost:?} member {r}");
            }
        }
    }
}

/// Two losses exceed what XOR tolerates: every member must notice it together and return
/// the same UNRECOVERABLE error — none may hang waiting for a partner that will never send
/// (a short receive timeout turns a hang into a different, failing error).
#[test]
fn two_losses_are_detected_by_every_member_with_the_same_error() {
    for n in [3, 4] {
        let (groups, stored) = apply_and_check(n);
        let names: Vec<&str> = groups.iter().map(String::as_str).collect();
        for a in 0..n {
            for b in a + 1..n {
                let world = inproc::World::new(&names, Duration::from_secs(5));
                let out = inproc::run_in(&world, |host| {
                    let r = host.rank() as usize;
                    rebuild(host, (r != a && r != b).then(|| stored[r].clone()))
                });
                let expect = PluginError::new(
                    ErrorCode::UNRECOVERABLE,
                    format!("2 of {n} members lost their data; XOR rebuilds only one"),
                );
                for (r, got) in out.into_iter().enumerate() {
                    assert_eq!(got, Err(expect.clone()), "n={n} lost {a},{b} member {r}");
                }
            }
        }
    }
}
