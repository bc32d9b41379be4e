//! The report of `scr-bench-c --vs DIR`: this build against another, pair by pair.
//!
//! Each repetition ran every measurement once on each build, the two jobs back to back
//! (alternating which went first), so a pair shares the machine's state of the moment:
//! the ratio of a pair is the figure, and the report gives the median of the ratios
//! with their spread, beside each build's own medians. On a shared machine the jobs'
//! rates swing by 2× between runs; the ratios of pairs swing much less.

use serde_json::{json, Value};

use super::{Args, Job, Op};
use scr_examples::Spread;

/// One row: a measurement on both builds.
struct Row {
    scheme: String,
    mib: usize,
    /// "loop MiB/s" or "rebuild s".
    what: &'static str,
    this: Spread,
    other: Spread,
    /// This build's figure over the other's, per pair; above 1 is better for a rate,
    /// below 1 for seconds.
    ratio: Spread,
}

/// The rows: per size and scheme, the loop's MiB/s and, where measured, the rebuild's
/// seconds, paired by repetition.
fn rows(args: &Args, jobs: &[Job]) -> Vec<Row> {
    let mut out = Vec::new();
    for &mib in &args.mib {
        for scheme in &args.schemes {
            for (op, what, key) in [
                (Op::Loop, "loop MiB/s", "mib_per_s"),
                (Op::Rebuild, "rebuild s", "init_s"),
            ] {
                let of = |build: usize, rep: usize| {
                    jobs.iter()
                        .find(|j| {
                            j.op == op
                                && j.build == build
                                && j.rep == rep
                                && j.mib == mib
                                && &j.scheme == scheme
                        })
                        .map(|j| j.num(key))
                };
                let pairs: Vec<(f64, f64)> = (0..args.reps)
                    .filter_map(|rep| Some((of(0, rep)?, of(1, rep)?)))
                    .collect();
                if pairs.is_empty() {
                    continue;
                }
                out.push(Row {
                    scheme: scheme.clone(),
                    mib,
                    what,
                    this: Spread::of(pairs.iter().map(|p| p.0)),
                    other: Spread::of(pairs.iter().map(|p| p.1)),
                    ratio: Spread::of(pairs.iter().map(|p| p.0 / p.1)),
                });
            }
        }
    }
    out
}

/// Print the A/B table (or JSON with `--json`).
pub(super) fn report(args: &Args, jobs: &[Job]) {
    let rows = rows(args, jobs);
    let other = args
        .vs
        .as_ref()
        .map(|d| d.display().to_string())
        .unwrap_or_default();
    if args.json {
        let out = json!({
            "client": "examples/c/test_api.c",
            "vs": other,
            "ranks": args.ranks,
            "set_size": args.set_size,
            "set_failures": args.set_failures,
            "crc_on_copy": args.crc == super::Crc::On,
            "checkpoints": args.checkpoints,
            "sleep_s": args.sleep,
            "reps": args.reps,
            "rows": rows.iter().map(|r| json!({
                "scheme": r.scheme,
                "mib_per_rank": r.mib,
                "measure": r.what,
                "this": r.this.json(),
                "vs": r.other.json(),
                "this_over_vs": r.ratio.json(),
            })).collect::<Vec<Value>>(),
            "jobs": jobs.iter().map(Job::json).collect::<Vec<_>>(),
        });
        println!("{out}");
        return;
    }
    println!(
        "this build against {other}: {} ranks, set size {}, RS k = {}, crc_on_copy {}, \
         {} timed checkpoints, sleep {} s, {} pairs (one job per build each, alternating \
         which goes first)",
        args.ranks,
        args.set_size,
        args.set_failures,
        if args.crc == super::Crc::On {
            "on"
        } else {
            "off"
        },
        args.checkpoints,
        args.sleep,
        args.reps
    );
    println!();
    println!(
        "{:<8} {:>8} {:<11} {:>9} {:>9} {:>10}",
        "scheme", "MiB/rank", "measure", "this", "vs", "this / vs"
    );
    for r in &rows {
        let digits = if r.what == "rebuild s" { 3 } else { 0 };
        println!(
            "{:<8} {:>8} {:<11} {:>9.*} {:>9.*} {:>10.2}",
            r.scheme, r.mib, r.what, digits, r.this.median, digits, r.other.median, r.ratio.median
        );
    }
    println!();
    println!(
        "details (medians [min-max]; this / vs per pair: above 1 is faster for MiB/s, \
         below 1 is faster for seconds):"
    );
    for r in &rows {
        let digits = if r.what == "rebuild s" { 3 } else { 0 };
        println!(
            "  {} {} MiB {}: this {}, vs {}, this / vs {}",
            r.scheme,
            r.mib,
            r.what,
            r.this.show(digits),
            r.other.show(digits),
            r.ratio.show(2)
        );
    }
}
