//! The socket host in process: ranks are threads of an in-process world, whose set hosts
//! make the mesh (`connect`) as MPI's do; the connections are real TCP on this machine.

use std::time::Duration;

use abi_stable::std_types::RSlice;
use scr_plugin::{ErrorCode, Host, HostServices, PluginError, ReduceOp};

use super::*;
use crate::runtime::world::inproc::run_ranks;
use crate::runtime::world::World;

const LONG: Duration = Duration::from_secs(20);

/// Each rank's socket host over an in-process set of all `w`'s ranks.
fn mesh(w: &dyn World) -> SocketHost {
    let n = w.size();
    let me = w.rank();
    let set = w.duplicate().set_host(
        (0..n).collect(),
        (0..n).map(|m| format!("n{m}")).collect(),
        me,
    );
    connect(&*set, me, LONG, None).unwrap_or_else(|e| panic!("rank {me}: {e}"))
}

/// `len` bytes that say who sent them and why.
fn payload(from: u32, tag: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32 ^ from.wrapping_mul(31) ^ tag.wrapping_mul(7)) as u8)
        .collect()
}

/// Messages in a ring (sizes from none to 3 MiB), every member first sending to all the
/// others and only then receiving (what a blocking MPI send may not survive, here
/// nothing waits for its receiver), out of tag order, and the collectives: each arrives
/// byte-exact, for sets of one to five.
#[test]
fn messages_and_collectives_arrive_byte_exact() {
    for n in [1, 2, 3, 5] {
        let out = run_ranks(n, |w| {
            let host = mesh(&*w);
            let h = Host::new(host.services());
            let (r, n) = (h.rank(), h.size());
            let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
            for (tag, len) in [(0, 0usize), (1, 17), (2, 3 << 20)] {
                let mut got = vec![0u8; len];
                h.sendrecv(next, &payload(r, tag, len), prev, &mut got, tag)
                    .unwrap();
                assert_eq!(got, payload(prev, tag, len), "n={n} r={r} tag {tag}");
            }
            // everyone sends to everyone (1 MiB each, two tags, the higher first) ...
            for d in 0..n {
                h.send(d, 9, &payload(r, 9, 1 << 20)).unwrap();
                h.send(d, 8, &payload(r, 8, 5)).unwrap();
            }
            // ... then receives, the lower tag first
            for s in 0..n {
                let mut small = [0u8; 5];
                h.recv(s, 8, &mut small).unwrap();
                assert_eq!(small.to_vec(), payload(s, 8, 5));
                let mut big = vec![0u8; 1 << 20];
                h.recv(s, 9, &mut big).unwrap();
                assert_eq!(big, payload(s, 9, 1 << 20));
            }
            h.barrier().unwrap();
            let sums = (
                h.all_reduce(u64::from(r) + 1, ReduceOp::Sum).unwrap(),
                h.all_reduce(u64::from(r) + 1, ReduceOp::Min).unwrap(),
                h.all_reduce(u64::from(r) + 1, ReduceOp::Max).unwrap(),
            );
            let mut roots = Vec::new();
            for root in 0..n {
                let mut b = if r == root {
                    payload(root, 0, 1000)
                } else {
                    vec![0; 1000]
                };
                h.broadcast(root, &mut b).unwrap();
                roots.push(b == payload(root, 0, 1000));
            }
            let settled = host.settle("apply", None, LONG);
            (sums, roots, matches!(settled, Settled::Returned))
        });
        let total: u64 = (1..=u64::from(n)).sum();
        for (sums, roots, returned) in out {
            assert_eq!(sums, (total, 1, u64::from(n)), "n={n}");
            assert!(roots.iter().all(|&b| b), "n={n}: {roots:?}");
            assert!(returned, "n={n}");
        }
    }
}

/// Member 1 fails first-hand while 0 and 2 wait in a receive from it, after it sent
/// member 0 a message that is never received: both waits end with its error, every member
/// settles on it, and the next call starts clean (the stale message is gone).
#[test]
fn a_failed_member_ends_the_others_waits_and_every_member_settles_on_its_error() {
    let out = run_ranks(3, |w| {
        let host = mesh(&*w);
        let h = Host::new(host.services());
        let r = h.rank();
        let result: Result<(), PluginError> = if r == 1 {
            h.send(0, 4, b"stale").unwrap();
            Err(PluginError::new(ErrorCode::IO, "disk gone"))
        } else {
            let mut buf = [0u8; 8];
            h.recv(1, 3, &mut buf)
        };
        let code = result.as_ref().err().map(|e| e.code);
        let waited = result.as_ref().err().map(|e| e.message().to_string());
        let settled = host.settle("apply", result.as_ref().err(), LONG);
        // (the runtime agrees on the outcome over MPI before any member starts the next
        // call: no member's next frames can reach another still settling)
        w.barrier();
        // the next call: member 1 sends afresh on the same tag
        if r == 1 {
            h.send(0, 4, b"fresh").unwrap();
        }
        let mut next = [0u8; 5];
        if r == 0 {
            h.recv(1, 4, &mut next).unwrap();
        }
        let again = host.settle("apply", None, LONG);
        (
            r,
            code,
            waited,
            settled,
            next,
            matches!(again, Settled::Returned),
        )
    });
    for (r, code, waited, settled, next, again) in out {
        assert_eq!(
            code,
            Some(if r == 1 {
                ErrorCode::IO
            } else {
                ErrorCode::PEER_FAILED
            })
        );
        let Settled::Failed {
            member,
            world_rank,
            error,
        } = settled
        else {
            panic!("rank {r}: {settled:?}");
        };
        assert_eq!((member, world_rank, error.code), (1, 1, ErrorCode::IO));
        assert_eq!(
            error.message(),
            "member 1 (world rank 1) failed in apply: disk gone"
        );
        if r != 1 {
            assert_eq!(waited.as_deref(), Some(error.message()), "rank {r}");
        }
        if r == 0 {
            assert_eq!(&next, b"fresh");
        }
        assert!(again, "rank {r}");
    }
}

/// Member 2's process goes (its connections close) while the others wait for it: their
/// waits end, and they settle on its loss.
#[test]
fn a_lost_member_ends_the_waits_and_is_settled_as_failed() {
    let out = run_ranks(3, |w| {
        let host = mesh(&*w);
        let r = host.rank();
        if r == 2 {
            drop(host);
            return (r, None, None);
        }
        let h = Host::new(host.services());
        let mut buf = [0u8; 4];
        let e = h.recv(2, 0, &mut buf).unwrap_err();
        let settled = host.settle("apply", Some(&e), LONG);
        (r, Some(e), Some(settled))
    });
    let mut agreed = Vec::new();
    for (r, e, settled) in out.into_iter().filter(|o| o.0 != 2) {
        let e = e.unwrap();
        assert_eq!(e.code, ErrorCode::PEER_FAILED, "rank {r}");
        // (its own sight of the loss, or the other survivor's notice of it)
        assert!(
            e.message()
                .contains("member 2 (world rank 2) was lost: its connection"),
            "rank {r}: {}",
            e.message()
        );
        match settled.unwrap() {
            Settled::Failed { member, error, .. } => {
                // (the lowest failing member's error: a survivor that heard of the other's
                // failure before its own settle failed second-hand, so either survivor
                // may be it, the same on both)
                assert!(member < 2, "rank {r}: {member}");
                assert!(error.message().contains("member 2 (world rank 2) was lost"));
                agreed.push((member, error.message().to_string()));
            }
            other => panic!("rank {r}: {other:?}"),
        }
    }
    assert_eq!(agreed[0], agreed[1]);
}

/// A member that failed gives up after its grace when another never settles.
#[test]
fn a_failed_member_is_stuck_when_another_never_settles() {
    let out = run_ranks(2, |w| {
        let host = mesh(&*w);
        let r = host.rank();
        let settled = match r {
            0 => Some(host.settle(
                "apply",
                Some(&PluginError::new(ErrorCode::IO, "x")),
                Duration::from_millis(300),
            )),
            _ => None,
        };
        // (member 1 keeps its connections open until member 0 gave up)
        w.barrier();
        (r, settled.map(|s| matches!(s, Settled::Stuck)))
    });
    assert_eq!(out[0], (0, Some(true)));
}

/// What a plugin gets wrong is refused with what happened: a message of another length
/// (the bytes that fit delivered), a tag above MAX_TAG, a member that does not exist,
/// members in different collectives.
#[test]
fn misuse_is_refused_with_its_reason() {
    let out = run_ranks(2, |w| {
        let host = mesh(&*w);
        let h = Host::new(host.services());
        let r = h.rank();
        let mut errors = Vec::new();
        if r == 0 {
            h.send(1, 1, b"abcdef").unwrap();
        } else {
            let mut short = [0u8; 4];
            errors.push(h.recv(0, 1, &mut short).unwrap_err().message().to_string());
            errors.push(String::from_utf8_lossy(&short).into_owned());
        }
        // (straight to the host: the SDK's `Host` refuses these before they reach it)
        let raw = |dest: u32, tag: u32| {
            HostServices::send(&host, dest, tag, RSlice::from_slice(b"x"))
                .unwrap_err()
                .message()
                .to_string()
        };
        errors.push(raw(1 - r, scr_plugin::MAX_TAG + 1));
        errors.push(raw(2, 0));
        // member 0 reduces, member 1 broadcasts: each learns of the other's
        let e = if r == 0 {
            h.all_reduce(1, ReduceOp::Sum).unwrap_err()
        } else {
            let mut b = [0u8; 8];
            h.broadcast(1, &mut b).unwrap_err()
        };
        errors.push(e.message().to_string());
        // the clean-up the settle of a failed call makes, then a broadcast whose root's
        // buffer is longer: an error on both members, the root's too
        w.barrier();
        let _ = host.settle("apply", Some(&e), LONG);
        w.barrier();
        let mut b = vec![7u8; if r == 0 { 8 } else { 4 }];
        errors.push(h.broadcast(0, &mut b).unwrap_err().message().to_string());
        (r, errors)
    });
    let (_, zero) = &out[0];
    let (_, one) = &out[1];
    assert_eq!(
        one[0],
        "expected 4 bytes from member 0 (tag 1) but 6 arrived"
    );
    assert_eq!(one[1], "abcd");
    assert_eq!(zero[0], "tag 32768 is above the largest plugin tag 32767");
    assert_eq!(zero[1], "member 2 does not exist in a set of 2 members");
    assert_eq!(
        zero[2],
        "member 1 is in another collective (a broadcast) than this member (a reduction)"
    );
    assert_eq!(
        one[4],
        "member 0 is in another collective (a reduction) than this member (a broadcast's agreement on its length)"
    );
    assert_eq!(
        zero[3],
        "broadcast from member 0: buffers differ in length (8 bytes at the root, 8 here)"
    );
    assert_eq!(
        one[5],
        "broadcast from member 0: buffers differ in length (8 bytes at the root, 4 here)"
    );
}

/// A connection that does not present the set's token is refused (and said), one that
/// says nothing holds the accepting member up for a second at most, and the members
/// that do present it are accepted.
#[test]
fn a_stranger_without_the_token_is_refused() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let at = listener.local_addr().unwrap();
    let token = [7u8; 16];
    let started = std::time::Instant::now();
    // connected first, and silent until the end
    let silent = TcpStream::connect(at).unwrap();
    // a process with another token: it learns nothing, and is refused
    let stranger = std::thread::spawn(move || {
        let mut s = TcpStream::connect(at).unwrap();
        connect::tests_greet(&mut s, &[8u8; 16], (0, 1, 3))
    });
    let member = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        let mut s = TcpStream::connect(at).unwrap();
        connect::tests_greet(&mut s, &token, (0, 1, 3))
    });
    let got = connect::tests_accept(&listener, &token, (1, 3), LONG).unwrap();
    let took = started.elapsed();
    assert_eq!(
        stranger.join().unwrap(),
        Err("its answer did not prove this set's token")
    );
    assert_eq!(member.join().unwrap(), Ok(()));
    assert_eq!(got, vec![0]);
    assert!(took < Duration::from_secs(3), "{took:?}");
    drop(silent);
}

/// A member that cannot listen makes every member refuse, itself with its reason and the
/// others naming it, without waiting for connections that cannot come.
#[test]
fn a_member_that_cannot_listen_makes_the_whole_set_refuse() {
    let out = run_ranks(3, |w| {
        let me = w.rank();
        let set = w.duplicate().set_host(
            vec![10, 11, 12],
            vec!["a".into(), "b".into(), "c".into()],
            me,
        );
        let started = std::time::Instant::now();
        let injected = (me == 1).then_some("sockets:1:1");
        let e = connect(&*set, me, LONG, injected)
            .err()
            .map(|e| (e.own, e.why));
        (e, started.elapsed())
    });
    assert_eq!(
        out[1].0,
        Some((true, "listening for the set's connections: cannot listen on a TCP port: injected failure (sockets:1:1)".to_string()))
    );
    for r in [0, 2] {
        assert_eq!(
            out[r].0,
            Some((false, "listening for the set's connections: member 1 (world rank 11) could not (its log says why)".to_string())),
            "rank {r}"
        );
    }
    assert!(out.iter().all(|(_, took)| *took < Duration::from_secs(5)));
}
