use std::collections::BTreeMap;

use super::super::inproc::run_ranks;
use super::*;

const SIZES: [u32; 4] = [1, 2, 3, 5];

/// A value with some structure: a map, an option, a string, a nested result.
type Value = (
    BTreeMap<u32, Vec<String>>,
    Option<u64>,
    Result<String, String>,
);

fn value_of(rank: u32) -> Value {
    let names = (0..rank).map(|i| format!("r{rank}.{i}")).collect();
    (
        BTreeMap::from([(rank, names)]),
        rank.is_multiple_of(2).then_some(u64::from(rank) << 40),
        if rank.is_multiple_of(3) {
            Ok(format!("rank {rank}"))
        } else {
            Err(format!("rank {rank} failed"))
        },
    )
}

/// The error's rank and label, and that its text names both.
fn named(e: &ExchangeError) -> (u32, &'static str) {
    let text = e.to_string();
    assert!(
        text.starts_with(&format!("{} from rank {} is unreadable: ", e.what, e.rank)),
        "{text}"
    );
    (e.rank, e.what)
}

#[test]
fn broadcast_value_round_trips_from_any_root() {
    for n in SIZES {
        for root in 0..n {
            let out = run_ranks(n, |w| {
                // (what non-roots pass is never read)
                let mine = value_of(w.rank());
                w.broadcast_value(root, Some(&mine), "value").unwrap()
            });
            assert!(
                out.iter().all(|v| *v == value_of(root)),
                "n={n} root={root}"
            );
        }
    }
}

#[test]
fn broadcast_value_of_nothing_or_garbage_is_an_error_naming_the_root() {
    let out = run_ranks(3, |w| {
        let none: Result<Vec<u64>, _> = w.broadcast_value(1, None, "held ids");
        let garbage = if w.rank() == 2 {
            let _ = w.broadcast_from(2, b"{not json");
            None
        } else {
            Some(w.broadcast_value::<Vec<u64>>(2, None, "index entries"))
        };
        (
            none.map_err(|e| named(&e)),
            garbage.map(|g| g.map_err(|e| named(&e))),
        )
    });
    for (rank, (none, garbage)) in out.into_iter().enumerate() {
        assert_eq!(none, Err((1, "held ids")));
        if rank != 2 {
            assert_eq!(garbage, Some(Err((2, "index entries"))));
        }
    }
}

#[test]
fn send_and_recv_value_round_trip_and_name_the_sender() {
    let out = run_ranks(3, |w| match w.rank() {
        0 => {
            w.send_value(2, 9, &value_of(0));
            w.send(2, 9, b"\xff\xfe");
            None
        }
        1 => {
            // a borrowed form sent, the owned one received
            w.send_value(2, 9, &["a", "b"][..]);
            None
        }
        _ => Some((
            w.recv_value::<Value>(0, 9, "value"),
            w.recv_value::<Vec<String>>(1, 9, "names"),
            w.recv_value::<Value>(0, 9, "filemap moved")
                .map_err(|e| named(&e)),
        )),
    });
    let (value, names, garbage) = out[2].as_ref().unwrap();
    assert_eq!(value.as_ref().unwrap(), &value_of(0));
    assert_eq!(names.as_ref().unwrap(), &["a", "b"]);
    assert_eq!(garbage, &Err((0, "filemap moved")));
}

#[test]
fn gather_values_round_trip_in_member_order() {
    for n in SIZES {
        let members: Vec<u32> = (0..n).rev().collect();
        let root = n / 2;
        let out = run_ranks(n, |w| {
            w.gather_values::<Value, Value>(root, &members, &value_of(w.rank()), 3, "outcome")
                .map(|all| all.into_iter().map(Result::unwrap).collect::<Vec<_>>())
        });
        for (rank, got) in out.into_iter().enumerate() {
            if rank as u32 == root {
                let want: Vec<Value> = members.iter().map(|&m| value_of(m)).collect();
                assert_eq!(got, Some(want), "n={n}");
            } else {
                assert_eq!(got, None);
            }
        }
    }
}

#[test]
fn gather_values_name_the_member_whose_value_is_unreadable() {
    let members = [0, 1, 2, 3];
    let out = run_ranks(4, |w| {
        if w.rank() == 2 {
            w.gather_from(0, &members, b"[1, 2", 4);
            None
        } else {
            w.gather_values::<_, Vec<String>>(
                0,
                &members,
                &[format!("{}", w.rank())][..],
                4,
                "names",
            )
            .map(|all| {
                all.into_iter()
                    .map(|r| r.map_err(|e| named(&e)))
                    .collect::<Vec<_>>()
            })
        }
    });
    assert_eq!(
        out[0],
        Some(vec![
            Ok(vec!["0".to_string()]),
            Ok(vec!["1".to_string()]),
            Err((2, "names")),
            Ok(vec!["3".to_string()]),
        ])
    );
}

#[test]
fn scatter_values_round_trip_and_name_the_root() {
    for n in SIZES {
        let members: Vec<u32> = (0..n).collect();
        let root = n - 1;
        let out = run_ranks(n, |w| {
            let parts: Vec<Value> = if w.rank() == root {
                members.iter().map(|&m| value_of(m + 10)).collect()
            } else {
                Vec::new()
            };
            w.scatter_values(root, &members, &parts, 5, "lists")
                .unwrap()
        });
        for (rank, got) in out.into_iter().enumerate() {
            assert_eq!(got, value_of(rank as u32 + 10), "n={n}");
        }
    }
    let out = run_ranks(2, |w| {
        if w.rank() == 0 {
            w.scatter_to(0, &[0, 1], &[b"1".to_vec(), b"\"x\"".to_vec()], 5);
            None
        } else {
            Some(
                w.scatter_values::<u64>(0, &[0, 1], &[], 5, "lists")
                    .map_err(|e| named(&e)),
            )
        }
    });
    assert_eq!(out[1], Some(Err((0, "lists"))));
}

#[test]
fn gather_some_values_round_trip_and_name_the_sender() {
    for n in SIZES {
        let out = run_ranks(n, |w| {
            let mine = (w.rank() % 2 == 1).then(|| value_of(w.rank()));
            let (got, total) = w.gather_some_values(mine.as_ref(), "failure");
            let got: Vec<(u32, Value)> = got.into_iter().map(|(r, v)| (r, v.unwrap())).collect();
            (got, total)
        });
        let want: Vec<(u32, Value)> = (0..n)
            .filter(|r| r % 2 == 1)
            .map(|r| (r, value_of(r)))
            .collect();
        for (rank, (got, total)) in out.into_iter().enumerate() {
            assert_eq!(total, want.len() as u64);
            assert_eq!(got, if rank == 0 { want.clone() } else { Vec::new() });
        }
    }
    let out = run_ranks(3, |w| {
        let (got, total) = if w.rank() == 1 {
            let (_, total) = w.gather_some(Some(b"nope"));
            (Vec::new(), total)
        } else {
            w.gather_some_values(Some(&(u64::from(w.rank()), "why".to_string())), "failure")
        };
        let got: Vec<_> = got
            .into_iter()
            .map(|(r, v)| (r, v.map_err(|e| named(&e))))
            .collect();
        (got, total)
    });
    assert_eq!(
        out[0],
        (
            vec![
                (0, Ok((0, "why".to_string()))),
                (1, Err((1, "failure"))),
                (2, Ok((2, "why".to_string()))),
            ],
            3
        )
    );
}

#[test]
fn sparse_exchange_values_round_trip_and_name_the_sender() {
    for n in SIZES {
        let out = run_ranks(n, |w| {
            let me = w.rank();
            // each rank sends its names to the ranks above it (a borrowed form)
            let names: Vec<String> = (0..3).map(|i| format!("{me}.{i}")).collect();
            let borrowed: Vec<&str> = names.iter().map(String::as_str).collect();
            let sends: Vec<(u32, Vec<&str>)> = (me + 1..w.size())
                .map(|to| (to, borrowed.clone()))
                .collect();
            w.sparse_exchange_values::<_, Vec<String>>(&sends, 6, "names")
                .into_iter()
                .map(|(from, v)| (from, v.unwrap()))
                .collect::<Vec<_>>()
        });
        for (rank, got) in out.into_iter().enumerate() {
            let want: Vec<(u32, Vec<String>)> = (0..rank as u32)
                .map(|r| (r, (0..3).map(|i| format!("{r}.{i}")).collect()))
                .collect();
            assert_eq!(got, want, "n={n}");
        }
    }
    let out = run_ranks(3, |w| {
        if w.rank() == 1 {
            w.sparse_exchange(&[(0, b"{}".to_vec())], 6);
            Vec::new()
        } else {
            let sends = if w.rank() == 2 {
                vec![(0, vec![2u64])]
            } else {
                Vec::new()
            };
            w.sparse_exchange_values::<_, Vec<u64>>(&sends, 6, "paths")
                .into_iter()
                .map(|(from, v)| (from, v.map_err(|e| named(&e))))
                .collect()
        }
    });
    assert_eq!(out[0], vec![(1, Err((1, "paths"))), (2, Ok(vec![2]))]);
}
