//! The per-call MPI counters (`Scr::comm_stats`) and the split byte
//! exchanges (item 3), under `mpiexec -n 4` on four simulated nodes: exact counts each
//! derived from the exchanges the code makes, and byte-exact data through exchanges
//! split into rounds of 7 bytes.

use scr_e2e::comm_report::{Counts, Report};
use scr_e2e::Cluster;

const FOUR_NODES: &[&str] = &["n0", "n1", "n2", "n3"];

/// Run `scr-comm-probe` on four ranks with `env` and read every rank's report, checking
/// that the job had four ranks (a wrong mpiexec runs four singletons).
fn run(env: &[(&str, &str)]) -> Vec<Report> {
    let mut c = Cluster::new();
    c.set("SCR_COPY_TYPE", "SINGLE");
    for (k, v) in env {
        c.set(k, v);
    }
    let out = c.run(FOUR_NODES, "scr-comm-probe", &[]);
    assert_eq!(out.code, 0, "{out}");
    (0..4)
        .map(|r| {
            let text = std::fs::read_to_string(c.prefix().join(format!("comm_{r}.txt")))
                .unwrap_or_else(|e| panic!("rank {r} wrote no report: {e}\n{out}"));
            let report = Report::parse(&text);
            assert_eq!(
                report.lines[0], "world size 4",
                "rank {r}: not a 4-rank job"
            );
            report
        })
        .collect()
}

/// Counts of one all-gather of `n` bytes per rank at 4 ranks: the 8-byte lengths (one
/// all-gather: 8 sent, 3 × 8 received), then the data (n sent, 3n received).
fn gather(n: u64) -> Counts {
    [0, 2, 0, 0, 8 + n, 24 + 3 * n]
}

/// Counts of one one-byte agreement (an all-reduce of a u8: 1 byte each way).
const AGREE: Counts = [0, 1, 0, 0, 1, 1];

fn sum(parts: &[Counts]) -> Counts {
    let mut t = Counts::default();
    for p in parts {
        for (a, b) in t.iter_mut().zip(p) {
            *a += b;
        }
    }
    t
}

#[test]
fn every_step_counts_the_exchanges_it_makes() {
    let reports = run(&[]);
    for (r, rep) in reports.iter().enumerate() {
        for outcome in [
            "kept true",
            // no checkpoint rule is set: SCR 3's answer is no
            "need false",
            "gather ok",
            "split-gather ok",
            "split-broadcast ok",
            "empty-gather ok",
        ] {
            assert!(
                rep.lines.iter().any(|l| l == outcome),
                "rank {r}: no `{outcome}` in {:?}",
                rep.lines
            );
        }
        // init is entered once; the fetch step nested in it counts apart
        assert_eq!(rep.get("init", "init")[0], 1, "rank {r}");
        assert_eq!(rep.get("init", "fetch")[0], 1, "rank {r}");

        // route_file: local, no exchange
        assert_eq!(rep.names("route"), ["route_file"], "rank {r}");
        assert_eq!(
            rep.get("route", "route_file"),
            [1, 0, 0, 0, 0, 0],
            "rank {r}"
        );

        // complete_output of one dataset of one file (`state_<r>.dat`) per rank, scheme
        // SINGLE, no flush due (flush = 10), halt_exit off; in the order of the code:
        // the clash check sends each name to the rank owning its hash (crc32 % size)
        // as `[["Routed","state_<q>.dat"]]` (26 bytes): one message from every rank,
        // one to each owner per name it owns
        let owner = |q: usize| crc32fast::hash(format!("state_{q}.dat").as_bytes()) % 4;
        let names_json = br#"[["Routed","state_0.dat"]]"#.len() as u64;
        let owned = (0..4).filter(|&q| owner(q) == r as u32).count() as u64;
        let expected = sum(&[
            [1, 0, 0, 0, 0, 0], // one call
            AGREE,              // begin: agree on the preconditions
            // the clash check: this rank's names to their owners, the names it owns
            // from their senders, and the exchange's non-blocking barrier
            [0, 1, 1, owned, names_json, owned * names_json],
            AGREE,              // all valid (files there, no clash)
            AGREE,              // redundancy files named and recorded
            [0, 1, 0, 0, 8, 8], // SINGLE's apply: host all_agree (a u64 all-reduce)
            // settle: a non-blocking 8-byte sum on the set's control communicator (how
            // many members failed first-hand)
            [0, 1, 0, 0, 8, 8],
            AGREE,              // kept (applied everywhere)
            AGREE,              // committed everywhere
            [0, 1, 0, 0, 8, 8], // total checkpoint bytes (a u64 sum) for the event log
            // eviction walks the ids held in the store upwards by min-reductions: the
            // lowest held id (a u64), what its holders say of evicting it (one byte), then the next
            // id above it (none: u64::MAX)
            [0, 1, 0, 0, 8, 8],
            AGREE,
            [0, 1, 0, 0, 8, 8],
            AGREE, // eviction's outcome agreed
        ]);
        assert_eq!(expected[..2], [1, 13]);
        assert_eq!(rep.names("complete"), ["complete_output"], "rank {r}");
        assert_eq!(rep.get("complete", "complete_output"), expected, "rank {r}");

        // need_checkpoint: rank 0 decides and broadcasts one byte
        let need = if r == 0 {
            [1, 1, 0, 0, 1, 0]
        } else {
            [1, 1, 0, 0, 0, 1]
        };
        assert_eq!(rep.get("need", "need_checkpoint"), need, "rank {r}");

        // the exchanges outside every API call count under `outside`:
        // 10 bytes per rank gathered: 3 × 10 received
        assert_eq!(rep.names("gather"), ["outside"], "rank {r}");
        assert_eq!(rep.get("gather", "outside"), gather(10), "rank {r}");
        // rank q holds 5q + 1 bytes: 1 + 6 + 11 + 16 = 34 bytes in rounds of at most 7:
        // ceil(34 / 7) = 5 data rounds after the lengths; rank r sends its 5r + 1 bytes
        // and receives the other 34 - (5r + 1)
        let own = 5 * r as u64 + 1;
        assert_eq!(
            rep.get("split-gather", "outside"),
            [0, 1 + 5, 0, 0, 8 + own, 24 + 34 - own],
            "rank {r}"
        );
        // rank 0's 20 bytes in pieces of at most 7: the length, then 7 + 7 + 6
        let bcast = if r == 0 {
            [0, 4, 0, 0, 28, 0]
        } else {
            [0, 4, 0, 0, 0, 28]
        };
        assert_eq!(rep.get("split-broadcast", "outside"), bcast, "rank {r}");
        // nothing to carry: the lengths only, no data round
        assert_eq!(
            rep.get("empty-gather", "outside"),
            [0, 1, 0, 0, 8, 24],
            "rank {r}"
        );
    }
}

/// A flush inside complete_output counts under `flush`, not under complete_output,
/// whose own numbers stay those of the run without a flush.
#[test]
fn a_nested_flush_counts_under_its_own_name() {
    let reports = run(&[("SCR_FLUSH", "1")]);
    let reports_without_flush = run(&[]);
    for (r, rep) in reports.iter().enumerate() {
        assert_eq!(
            rep.names("complete"),
            ["complete_output", "flush"],
            "rank {r}"
        );
        // (what complete_output counts without a flush: every_step_counts_... derives it)
        let without_flush = reports_without_flush[r].get("complete", "complete_output");
        assert_eq!(
            rep.get("complete", "complete_output"),
            without_flush,
            "rank {r}"
        );
        let flush = rep.get("complete", "flush");
        assert_eq!(flush[0], 1, "rank {r}: one flush");
        assert!(
            flush[1] > 0,
            "rank {r}: the flush's collectives are counted"
        );
    }
}
