use super::*;

const SIZES: [u32; 5] = [1, 2, 3, 4, 7];

#[test]
fn rank_size_barrier_and_reductions() {
    for n in SIZES {
        let out = run_ranks(n, |w| {
            w.barrier();
            let r = u64::from(w.rank());
            (
                w.rank(),
                w.size(),
                w.min_u64(r + 5),
                w.max_u64(r + 5),
                w.sum_u64(r),
                w.or_u64(1 << r),
                w.all_reduce_u64s(&[r, 1, 100 - r], Op::Sum),
                w.agree(w.rank() != 1),
                w.all_reduce_u8(u8::from(w.rank() == 0), Op::Max),
            )
        });
        let sum: u64 = (0..u64::from(n)).sum();
        for (rank, o) in out.into_iter().enumerate() {
            assert_eq!((o.0, o.1), (rank as u32, n));
            assert_eq!((o.2, o.3, o.4), (5, u64::from(n) + 4, sum), "n={n}");
            assert_eq!(o.5, (1u64 << n) - 1);
            assert_eq!(o.6, vec![sum, u64::from(n), 100 * u64::from(n) - sum]);
            assert_eq!(o.7, n == 1, "agree at n={n}");
            assert_eq!(o.8, 1);
        }
    }
}

#[test]
fn exclusive_scans_start_from_the_identity() {
    for n in SIZES {
        let out = run_ranks(n, |w| {
            let r = u64::from(w.rank());
            (
                w.exclusive_scan_u64(r + 1, Op::Sum),
                w.exclusive_scan_u64(10 - r, Op::Min),
            )
        });
        for (rank, (sum, min)) in out.into_iter().enumerate() {
            let r = rank as u64;
            assert_eq!(sum, r * (r + 1) / 2, "n={n} rank={rank}");
            assert_eq!(min, if rank == 0 { u64::MAX } else { 11 - r });
        }
    }
}

#[test]
fn broadcasts_and_gathers() {
    for n in SIZES {
        let root = n - 1;
        let out = run_ranks(n, |w| {
            let r = w.rank();
            let mut fixed = if r == root { *b"root" } else { [0u8; 4] };
            w.broadcast_into(root, &mut fixed);
            let long = vec![r as u8; 3 * r as usize];
            (
                fixed,
                w.broadcast_from(root, &long),
                w.broadcast_bytes(format!("zero{r}").as_bytes()),
                w.broadcast_from(0, &[]),
                w.all_gather_bytes(&long),
                w.all_gather_u32(r * 10),
                w.all_gather_fixed(&[r as u8, 7]),
            )
        });
        for o in out {
            assert_eq!(&o.0, b"root");
            assert_eq!(o.1, vec![root as u8; 3 * root as usize]);
            assert_eq!(o.2, b"zero0");
            assert!(o.3.is_empty());
            let lens: Vec<usize> = o.4.iter().map(Vec::len).collect();
            assert_eq!(lens, (0..n as usize).map(|r| 3 * r).collect::<Vec<_>>());
            assert_eq!(o.5, (0..n).map(|r| r * 10).collect::<Vec<_>>());
            let fixed: Vec<u8> = (0..n).flat_map(|r| [r as u8, 7]).collect();
            assert_eq!(o.6, fixed);
        }
    }
}

#[test]
fn split_orders_by_key_then_rank_and_leaves_undefined_out() {
    for n in SIZES {
        // colors: rank % 3, but rank 1 undefined; keys descending so order reverses,
        // except ranks 4.. share one key (ties ordered by rank)
        let out = run_ranks(n, |w| {
            let r = w.rank();
            let color = (r != 1).then_some(r % 3);
            let key = if r >= 4 { 0 } else { 100 - r };
            let sub = w.split(color, key)?;
            // the sub-communicator works on its own: gather the world ranks
            let members = sub.all_gather_u32(r);
            sub.barrier();
            Some((sub.rank(), sub.size(), members))
        });
        for (r, o) in out.into_iter().enumerate() {
            let r = r as u32;
            if r == 1 {
                assert!(o.is_none());
                continue;
            }
            let mut expect: Vec<(u32, u32)> = (0..n)
                .filter(|&q| q != 1 && q % 3 == r % 3)
                .map(|q| (if q >= 4 { 0 } else { 100 - q }, q))
                .collect();
            expect.sort();
            let expect: Vec<u32> = expect.into_iter().map(|(_, q)| q).collect();
            let (rank, size, members) = o.unwrap();
            assert_eq!(members, expect, "n={n} rank={r}");
            assert_eq!(size as usize, expect.len());
            assert_eq!(members[rank as usize], r);
        }
    }
}

#[test]
fn a_duplicate_keeps_its_traffic_apart() {
    for n in SIZES {
        let out = run_ranks(n, |w| {
            let dup = w.duplicate();
            let next = (w.rank() + 1) % w.size();
            let prev = (w.rank() + w.size() - 1) % w.size();
            w.send(next, 5, b"original");
            dup.send(next, 5, b"duplicate");
            let a = dup.recv(prev, 5);
            let b = w.recv(prev, 5);
            (dup.rank(), dup.size(), dup.sum_u64(1), a, b)
        });
        for (r, o) in out.into_iter().enumerate() {
            assert_eq!((o.0, o.1, o.2), (r as u32, n, u64::from(n)));
            assert_eq!((&o.3[..], &o.4[..]), (&b"duplicate"[..], &b"original"[..]));
        }
    }
}

#[test]
fn messages_keep_their_order_per_sender_and_tag() {
    for n in SIZES.into_iter().filter(|&n| n > 1) {
        let out = run_ranks(n, |w| {
            if w.rank() == 0 {
                // receive tag 2 first although tag 1 was sent first; then tag 1 in order
                let mut got = Vec::new();
                for src in 1..w.size() {
                    let mut b = [0u8; 2];
                    w.recv_into(src, 2, &mut b);
                    got.push(b.to_vec());
                    got.push(w.recv(src, 1));
                    got.push(w.recv(src, 1));
                }
                got
            } else {
                let r = w.rank() as u8;
                w.send(0, 1, &[r, 1]);
                w.send(0, 1, &[r, 2, 2]);
                w.send(0, 2, &[r, 9]);
                Vec::new()
            }
        });
        let expect: Vec<Vec<u8>> = (1..n as u8)
            .flat_map(|r| [vec![r, 9], vec![r, 1], vec![r, 2, 2]])
            .collect();
        assert_eq!(out[0], expect);
    }
}

#[test]
fn sparse_exchanges_deliver_everything_ordered_by_sender() {
    for n in SIZES {
        let out = run_ranks(n, |w| {
            let (r, size) = (w.rank(), w.size());
            // nobody sends
            let none = w.sparse_exchange(&[], 11);
            // everyone sends to everyone (itself included), two messages to rank 0
            let mut sends: Vec<(u32, Vec<u8>)> =
                (0..size).map(|d| (d, vec![r as u8, d as u8])).collect();
            sends.push((0, vec![r as u8, 99]));
            let all = w.sparse_exchange(&sends, 12);
            // the same tag again at once: no message of one exchange leaks into the next
            let one = w.sparse_exchange(&[((r + 1) % size, vec![r as u8])], 12);
            (none, all, one)
        });
        for (r, (none, all, one)) in out.into_iter().enumerate() {
            assert!(none.is_empty());
            let mut expect: Vec<(u32, Vec<u8>)> = Vec::new();
            for s in 0..n {
                expect.push((s, vec![s as u8, r as u8]));
                if r == 0 {
                    expect.push((s, vec![s as u8, 99]));
                }
            }
            assert_eq!(all, expect, "n={n} rank={r}");
            let from = (r as u32 + n - 1) % n;
            assert_eq!(one, vec![(from, vec![from as u8])]);
        }
    }
}

#[test]
fn gather_some_gather_from_and_scatter_to() {
    for n in SIZES {
        let out = run_ranks(n, |w| {
            let r = w.rank();
            let odd = (r % 2 == 1).then(|| vec![r as u8]);
            let (reports, total) = w.gather_some(odd.as_deref());
            let members: Vec<u32> = (0..w.size()).rev().collect();
            let gathered = w.gather_from(0, &members, &[r as u8; 2], 30);
            let parts: Vec<Vec<u8>> = members.iter().map(|&m| vec![m as u8 + 1]).collect();
            let part = w.scatter_to(0, &members, &parts, 31);
            (reports, total, gathered, part)
        });
        let odd: Vec<u32> = (0..n).filter(|r| r % 2 == 1).collect();
        for (r, (reports, total, gathered, part)) in out.into_iter().enumerate() {
            assert_eq!(total, odd.len() as u64);
            assert_eq!(part, vec![r as u8 + 1]);
            if r == 0 {
                let expect: Vec<(u32, Vec<u8>)> = odd.iter().map(|&o| (o, vec![o as u8])).collect();
                assert_eq!(reports, expect);
                let expect: Vec<Vec<u8>> = (0..n).rev().map(|m| vec![m as u8; 2]).collect();
                assert_eq!(gathered.unwrap(), expect);
            } else {
                assert!(reports.is_empty() && gathered.is_none());
            }
        }
    }
}

#[test]
fn set_hosts_run_plugin_collectives_and_settle() {
    let out = run_ranks(4, |w| {
        let me = w.rank();
        let set = w.split(Some(me % 2), me).unwrap();
        let members = set.all_gather_u32(me);
        let groups: Vec<String> = members.iter().map(|m| format!("n{m}")).collect();
        let host = set.set_host(members.clone(), groups, me);
        let h = scr_plugin::Host::new(host.services());
        let sum = h.all_reduce(u64::from(me), ReduceOp::Sum).unwrap();
        let dup = host.duplicate();
        let hd = scr_plugin::Host::new(dup.services());
        let max = hd.all_reduce(u64::from(me), ReduceOp::Max).unwrap();
        let settled = matches!(
            host.settle("apply", None, Duration::from_secs(1)),
            crate::runtime::Settled::Returned
        );
        (
            sum,
            max,
            h.world_rank(1).unwrap(),
            h.failure_group(0).unwrap(),
            host.size_matches(2),
            settled,
        )
    });
    assert_eq!(out[0], (2, 2, 2, "n0".to_string(), true, true));
    assert_eq!(out[1], (4, 3, 3, "n1".to_string(), true, true));
}

#[test]
fn a_failed_member_settles_false_after_its_grace() {
    let out = run_ranks(2, |w| {
        let host = w.set_host(vec![0, 1], vec!["a".into(), "b".into()], 0);
        if host.rank() == 0 {
            // member 1 never settles: member 0 failed, gives up after its grace
            let e = PluginError::new(scr_plugin::ErrorCode::IO, "disk gone");
            !matches!(
                host.settle("apply", Some(&e), Duration::from_millis(50)),
                crate::runtime::Settled::Stuck
            )
        } else {
            true
        }
    });
    assert_eq!(out, [false, true]);
}

#[test]
fn a_wait_times_out_naming_the_op_and_rank() {
    let err = std::panic::catch_unwind(|| {
        run_ranks_within(2, Duration::from_millis(100), |w| {
            if w.rank() == 1 {
                w.recv(0, 3);
            }
        })
    })
    .unwrap_err();
    let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        msg.contains("rank 1 timed out") && msg.contains("in recv"),
        "{msg}"
    );
}

#[test]
fn mismatched_collectives_and_aborts_fail_the_run_at_once() {
    let err = std::panic::catch_unwind(|| {
        run_ranks(3, |w| {
            if w.rank() == 2 {
                w.barrier();
            } else {
                w.sum_u64(1);
            }
        })
    })
    .unwrap_err();
    let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("out of step"), "{msg}");
    let started = Instant::now();
    let err = std::panic::catch_unwind(|| {
        run_ranks(3, |w| {
            if w.rank() == 1 {
                w.abort(4);
            }
            w.barrier();
        })
    })
    .unwrap_err();
    let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert_eq!(msg, "rank 1 aborted the job with code 4");
    assert!(started.elapsed() < Duration::from_secs(10));
}
