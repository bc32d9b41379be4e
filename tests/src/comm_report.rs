//! The per-rank report the counting probes write (`scr-comm-probe`, `scr-bgflush-probe`)
//! and the tests read: free lines of outcome, and one line per counted API call name
//! `<step> <name> <calls> <collectives> <msgs_sent> <msgs_recv> <bytes_sent> <bytes_recv>`
//! (the time is left out: it is not asserted).

use std::collections::BTreeMap;

use scr_api::CommStats;

/// `[calls, collectives, msgs_sent, msgs_recv, bytes_sent, bytes_recv]`.
pub type Counts = [u64; 6];

/// The lines of `stats` measured in `step` (a probe appends them to its report).
pub fn lines(step: &str, stats: &CommStats) -> String {
    stats
        .per_call
        .iter()
        .map(|(name, s)| {
            format!(
                "{step} {name} {} {} {} {} {} {}\n",
                s.calls, s.collectives, s.msgs_sent, s.msgs_recv, s.bytes_sent, s.bytes_recv
            )
        })
        .collect()
}

/// The probes' common start: a need_checkpoint with nothing pending, counted as step
/// `idle`, then one checkpoint `ckpt.1` of one file `state_<rank>.dat` holding `data`.
/// Returns the `idle` lines and whether complete_output kept the checkpoint.
pub fn idle_then_one_checkpoint(
    scr: &mut scr_api::Scr,
    rank: usize,
    data: &[u8],
) -> (String, bool) {
    scr.reset_comm_stats();
    scr.need_checkpoint().expect("need_checkpoint");
    let idle = lines("idle", &scr.comm_stats());
    scr.start_output("ckpt.1", scr_api::Flags::CHECKPOINT)
        .expect("start_output");
    let p = scr
        .route_file(format!("state_{rank}.dat"))
        .expect("route_file");
    std::fs::write(&p, data).expect("write");
    (idle, scr.complete_output(true).expect("complete_output"))
}

/// One rank's report: the outcome lines, and (step, name) → counts.
pub struct Report {
    /// The lines that are not counts, in order.
    pub lines: Vec<String>,
    counts: BTreeMap<(String, String), Counts>,
}

impl Report {
    /// Parse a report's text (a line of a step, a name and six numbers is a count).
    pub fn parse(text: &str) -> Report {
        let mut report = Report {
            lines: Vec::new(),
            counts: BTreeMap::new(),
        };
        for line in text.lines() {
            let words: Vec<&str> = line.split(' ').collect();
            let numbers: Option<Vec<u64>> = words
                .get(2..)
                .map(|rest| rest.iter().map(|w| w.parse().ok()).collect())
                .unwrap_or(None);
            match (words.as_slice(), numbers) {
                ([step, name, ..], Some(n)) if n.len() == 6 => {
                    let mut counts = Counts::default();
                    counts.copy_from_slice(&n);
                    report
                        .counts
                        .insert((step.to_string(), name.to_string()), counts);
                }
                _ => report.lines.push(line.to_string()),
            }
        }
        report
    }

    /// The counts of `name` measured in `step` (all zero when nothing was counted).
    pub fn get(&self, step: &str, name: &str) -> Counts {
        self.counts
            .get(&(step.to_string(), name.to_string()))
            .copied()
            .unwrap_or_default()
    }

    /// The names counted in `step`.
    pub fn names(&self, step: &str) -> Vec<&str> {
        self.counts
            .keys()
            .filter(|(s, _)| s == step)
            .map(|(_, n)| n.as_str())
            .collect()
    }

    /// Whether `line` is one of the outcome lines.
    pub fn has(&self, line: &str) -> bool {
        self.lines.iter().any(|l| l == line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_outcome_lines_are_told_apart() {
        let r = Report::parse(
            "world size 4\ninit init 1 2 3 4 5 6\nkept true\ncomplete flush 1 0 0 0 x 0\n",
        );
        assert_eq!(r.get("init", "init"), [1, 2, 3, 4, 5, 6]);
        assert_eq!(r.get("init", "fetch"), [0; 6]);
        assert_eq!(r.names("init"), ["init"]);
        assert_eq!(
            r.lines,
            ["world size 4", "kept true", "complete flush 1 0 0 0 x 0"]
        );
        assert!(r.has("kept true"));
    }
}
