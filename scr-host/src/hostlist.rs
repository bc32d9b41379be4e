//! SLURM-style host lists (SCR's `scr_glob_hosts`): `node[1-4,7]`, `rack[1-2]n[01-03]`,
//! comma lists of either.
//!
//! A bracket holds comma-separated numbers and `lo-hi` ranges. A bound written with a
//! leading zero (`01`) fixes the width every number of that range is padded to, as SLURM
//! does; `1-10` is not padded. Several brackets in one name multiply out, the first
//! varying slowest (`rack[1-2]n[1-2]` is `rack1n1,rack1n2,rack2n1,rack2n2`).
//!
//! [`compress`] is the inverse: it groups names by the text around their last run of
//! digits and writes each group as one bracket, so `expand(compress(x))` gives the same
//! hosts (sorted within each group, duplicates dropped).

use std::collections::BTreeSet;
use std::fmt;

/// The largest number of hosts one expression may expand to: a typo such as
/// `node[1-999999999]` must be an error, not an exhausted memory.
pub(crate) const MAX_HOSTS: usize = 1 << 20;

/// A host list that cannot be read, with the text at fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostlistError {
    /// The whole expression.
    pub list: String,
    /// What is wrong, naming the offending part.
    pub message: Problem,
}

impl fmt::Display for HostlistError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "host list `{}`: {}", self.list, self.message)
    }
}

impl std::error::Error for HostlistError {}

/// What is wrong with a host list.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Problem {
    /// Two commas in a row, or a comma at an end.
    #[error("an empty item (two commas in a row, or a comma at an end)")]
    EmptyItem,
    /// The whole list names too many hosts.
    #[error("more than {MAX_HOSTS} hosts")]
    TooMany,
    /// A `[` inside brackets.
    #[error("nested `[` at byte {at} in `{rest}`")]
    Nested {
        /// Where, in the list.
        at: usize,
        /// The list from the item on.
        rest: String,
    },
    /// A `]` without its `[`.
    #[error("`]` without `[` in `{0}`")]
    Unopened(String),
    /// A `[` without its `]`.
    #[error("`[` never closed in `{0}`")]
    Unclosed(String),
    /// Whitespace or a control character in a name.
    #[error("{c:?} inside the host name `{item}`")]
    BadCharacter {
        /// The character.
        c: char,
        /// The item.
        item: String,
    },
    /// A bracket that cannot be read.
    #[error("{problem} in `{item}`")]
    Bracket {
        /// What is wrong with it.
        problem: BracketProblem,
        /// The item.
        item: String,
    },
    /// An item that names too many hosts.
    #[error("`{0}` names more than {MAX_HOSTS} hosts")]
    ItemTooMany(String),
}

/// What is wrong with the numbers in one bracket.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BracketProblem {
    /// `[]`.
    #[error("empty brackets `[]`")]
    Empty,
    /// A part that is neither a number nor a range.
    #[error("`{0}` is not a number or a range lo-hi")]
    NotANumber(String),
    /// A number beyond `u64`.
    #[error("`{0}` is too large a number")]
    TooLarge(String),
    /// `hi-lo`.
    #[error("the range `{0}` runs backwards")]
    Backwards(String),
    /// A range of too many numbers.
    #[error("the range `{0}` names more than {MAX_HOSTS} hosts")]
    TooMany(String),
}

/// Every host `list` names, in the order written, duplicates dropped (a host named
/// twice is one node). Whitespace around items and an empty list are allowed (`""` is no
/// host); an empty item (`a,,b`) is not.
pub fn expand(list: &str) -> Result<Vec<String>, HostlistError> {
    let err = |message: Problem| HostlistError {
        list: list.to_string(),
        message,
    };
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    if list.trim().is_empty() {
        return Ok(out);
    }
    for item in split_top(list).map_err(err)? {
        let item = item.trim();
        if item.is_empty() {
            return Err(err(Problem::EmptyItem));
        }
        for host in expand_item(item).map_err(err)? {
            if seen.insert(host.clone()) {
                out.push(host);
                if out.len() > MAX_HOSTS {
                    return Err(err(Problem::TooMany));
                }
            }
        }
    }
    Ok(out)
}

/// Split at commas outside brackets; an unbalanced bracket is an error.
fn split_top(list: &str) -> Result<Vec<&str>, Problem> {
    let mut items = Vec::new();
    let (mut depth, mut start, mut open_at) = (0usize, 0usize, 0usize);
    for (i, c) in list.char_indices() {
        match c {
            '[' if depth == 0 => {
                depth = 1;
                open_at = i;
            }
            '[' => {
                return Err(Problem::Nested {
                    at: i,
                    rest: list[start..].to_string(),
                })
            }
            ']' if depth == 0 => {
                return Err(Problem::Unopened(list[start..=i].to_string()));
            }
            ']' => depth = 0,
            ',' if depth == 0 => {
                items.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(Problem::Unclosed(list[open_at..].to_string()));
    }
    items.push(&list[start..]);
    Ok(items)
}

/// One item: literal text and bracket groups, multiplied out.
fn expand_item(item: &str) -> Result<Vec<String>, Problem> {
    let mut hosts = vec![String::new()];
    let mut rest = item;
    while !rest.is_empty() {
        match rest.find('[') {
            None => {
                check_literal(item, rest)?;
                hosts.iter_mut().for_each(|h| h.push_str(rest));
                rest = "";
            }
            Some(open) => {
                let lit = &rest[..open];
                check_literal(item, lit)?;
                let close = rest[open..].find(']').map(|c| open + c).expect("balanced");
                let numbers =
                    expand_bracket(&rest[open + 1..close]).map_err(|problem| Problem::Bracket {
                        problem,
                        item: item.to_string(),
                    })?;
                if hosts.len().saturating_mul(numbers.len()) > MAX_HOSTS {
                    return Err(Problem::ItemTooMany(item.to_string()));
                }
                hosts = hosts
                    .iter()
                    .flat_map(|h| numbers.iter().map(move |n| format!("{h}{lit}{n}")))
                    .collect();
                rest = &rest[close + 1..];
            }
        }
    }
    Ok(hosts)
}

fn check_literal(item: &str, lit: &str) -> Result<(), Problem> {
    match lit.chars().find(|c| c.is_whitespace() || c.is_control()) {
        Some(c) => Err(Problem::BadCharacter {
            c,
            item: item.to_string(),
        }),
        None => Ok(()),
    }
}

/// `1-4,7` or `01-03`: the numbers as text, padded.
fn expand_bracket(inner: &str) -> Result<Vec<String>, BracketProblem> {
    if inner.trim().is_empty() {
        return Err(BracketProblem::Empty);
    }
    let mut out = Vec::new();
    for part in inner.split(',') {
        let part = part.trim();
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let num = |s: &str| -> Result<u64, BracketProblem> {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(BracketProblem::NotANumber(part.to_string()));
            }
            s.parse::<u64>()
                .map_err(|_| BracketProblem::TooLarge(s.to_string()))
        };
        let (a, b) = (num(lo)?, num(hi)?);
        if a > b {
            return Err(BracketProblem::Backwards(part.to_string()));
        }
        if b - a >= MAX_HOSTS as u64 {
            return Err(BracketProblem::TooMany(part.to_string()));
        }
        // a leading zero on the lower bound fixes the width (SLURM's rule)
        let width = if lo.len() > 1 && lo.starts_with('0') {
            lo.len()
        } else {
            0
        };
        out.extend((a..=b).map(|n| format!("{n:0width$}")));
    }
    Ok(out)
}

/// Every host the lists name, in order, each once (`scr hostlist expand` and `compress`
/// take several lists and treat them as one).
pub fn expand_all<S: AsRef<str>>(lists: &[S]) -> Result<Vec<String>, HostlistError> {
    let mut out: Vec<String> = Vec::new();
    for l in lists {
        for h in expand(l.as_ref())? {
            if !out.contains(&h) {
                out.push(h);
            }
        }
    }
    Ok(out)
}

/// The shortest SLURM-style expression of `hosts` this module writes: names that differ
/// only in their last run of digits (same text before and after it, same padding) share
/// one bracket. Groups appear in the order of their first host; numbers are sorted and
/// duplicates dropped.
pub fn compress<S: AsRef<str>>(hosts: &[S]) -> String {
    let mut groups: Vec<Group> = Vec::new();
    // names written as they are (no digits, or a number too large), in first-seen order
    let mut plain: Vec<String> = Vec::new();
    // what to print, in first-seen order: a group or a plain name
    enum Slot {
        Group(usize),
        Plain(usize),
    }
    let mut slots: Vec<Slot> = Vec::new();
    for h in hosts {
        let h = h.as_ref();
        let parsed =
            last_digits(h).and_then(|(b, d, a)| d.parse::<u64>().ok().map(|n| (b, d, a, n)));
        let Some((before, digits, after, n)) = parsed else {
            if !plain.iter().any(|p| p == h) {
                plain.push(h.to_string());
                slots.push(Slot::Plain(plain.len() - 1));
            }
            continue;
        };
        // padded when written with a leading zero
        let padded = digits.len() > 1 && digits.starts_with('0');
        match groups.iter().position(|g| g.takes(before, digits, after)) {
            Some(i) => {
                groups[i].numbers.insert(n);
            }
            None => {
                groups.push(Group {
                    before: before.to_string(),
                    after: after.to_string(),
                    width: if padded { digits.len() } else { 0 },
                    numbers: BTreeSet::from([n]),
                });
                slots.push(Slot::Group(groups.len() - 1));
            }
        }
    }
    slots
        .iter()
        .map(|s| match s {
            Slot::Group(i) => groups[*i].render(),
            Slot::Plain(i) => plain[*i].clone(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Host names equal but for their last number: the text around it, the width numbers are
/// padded to (0: unpadded), the numbers.
struct Group {
    before: String,
    after: String,
    width: usize,
    numbers: BTreeSet<u64>,
}

impl Group {
    /// Whether a name of `before`, `digits`, `after` belongs here: same text around the
    /// number, and the same padding — an unpadded number as long as a padded group's
    /// width joins that group (09 and 10 are both width 2).
    fn takes(&self, before: &str, digits: &str, after: &str) -> bool {
        let padded = digits.len() > 1 && digits.starts_with('0');
        self.before == before
            && self.after == after
            && if padded {
                self.width == digits.len()
            } else {
                self.width == 0 || self.width == digits.len()
            }
    }

    /// The group as one name (a single number) or `before[ranges]after`.
    fn render(&self) -> String {
        let w = self.width;
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        for &n in &self.numbers {
            match ranges.last_mut() {
                Some((_, hi)) if *hi + 1 == n => *hi = n,
                _ => ranges.push((n, n)),
            }
        }
        if let [(a, b)] = ranges.as_slice() {
            if a == b {
                return format!("{}{a:0w$}{}", self.before, self.after);
            }
        }
        let inner: Vec<String> = ranges
            .iter()
            .map(|&(a, b)| {
                if a == b {
                    format!("{a:0w$}")
                } else {
                    format!("{a:0w$}-{b:0w$}")
                }
            })
            .collect();
        format!("{}[{}]{}", self.before, inner.join(","), self.after)
    }
}

/// `name` split around its last run of ASCII digits.
fn last_digits(name: &str) -> Option<(&str, &str, &str)> {
    let b = name.as_bytes();
    let end = b.iter().rposition(u8::is_ascii_digit)? + 1;
    let start = b[..end]
        .iter()
        .rposition(|c| !c.is_ascii_digit())
        .map_or(0, |p| p + 1);
    Some((&name[..start], &name[start..end], &name[end..]))
}

/// The hosts of `a` that are not in `b`, in `a`'s order.
pub fn diff(a: &[String], b: &[String]) -> Vec<String> {
    let b: BTreeSet<&String> = b.iter().collect();
    a.iter().filter(|h| !b.contains(h)).cloned().collect()
}

/// The hosts of `a` that are also in `b`, in `a`'s order.
pub fn intersect(a: &[String], b: &[String]) -> Vec<String> {
    let b: BTreeSet<&String> = b.iter().collect();
    a.iter().filter(|h| b.contains(h)).cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ex(s: &str) -> Vec<String> {
        expand(s).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn ranges_and_lists() {
        assert_eq!(
            ex("node[1-4,7]"),
            ["node1", "node2", "node3", "node4", "node7"]
        );
        assert_eq!(ex("a,b , c"), ["a", "b", "c"]);
        assert_eq!(ex("n[8-11]"), ["n8", "n9", "n10", "n11"]);
        assert_eq!(ex("n[3]x"), ["n3x"]);
        assert_eq!(ex(""), Vec::<String>::new());
        assert_eq!(ex("n1,n1,n[1-2]"), ["n1", "n2"]);
    }

    #[test]
    fn padding_is_kept() {
        assert_eq!(ex("n[08-10]"), ["n08", "n09", "n10"]);
        assert_eq!(ex("n[001-002]"), ["n001", "n002"]);
        assert_eq!(
            ex("rack[1-2]n[01-03]"),
            ["rack1n01", "rack1n02", "rack1n03", "rack2n01", "rack2n02", "rack2n03"]
        );
    }

    #[test]
    fn errors_name_the_bad_text() {
        let e = |s: &str| expand(s).unwrap_err().to_string();
        assert_eq!(
            e("node[1-4"),
            "host list `node[1-4`: `[` never closed in `[1-4`"
        );
        assert_eq!(
            e("node1-4]"),
            "host list `node1-4]`: `]` without `[` in `node1-4]`"
        );
        assert_eq!(
            e("node[4-1]"),
            "host list `node[4-1]`: the range `4-1` runs backwards in `node[4-1]`"
        );
        assert_eq!(
            e("n[1-x],m"),
            "host list `n[1-x],m`: `1-x` is not a number or a range lo-hi in `n[1-x]`"
        );
        assert_eq!(
            e("a,,b"),
            "host list `a,,b`: an empty item (two commas in a row, or a comma at an end)"
        );
        assert_eq!(e("n[]"), "host list `n[]`: empty brackets `[]` in `n[]`");
        assert_eq!(
            e("n[[1]]"),
            "host list `n[[1]]`: nested `[` at byte 2 in `n[[1]]`"
        );
        assert!(e("n[0-99999999]").contains("more than"));
        assert!(e("a[0-1023]b[0-1023]c[0-1]").contains("more than"));
        assert_eq!(e("a b"), "host list `a b`: ' ' inside the host name `a b`");
    }

    #[test]
    fn compress_groups_by_last_number() {
        let c = |s: &[&str]| compress(s);
        assert_eq!(
            c(&["node1", "node2", "node3", "node4", "node7"]),
            "node[1-4,7]"
        );
        assert_eq!(c(&["n3", "n1", "n2", "n2"]), "n[1-3]");
        assert_eq!(c(&["n08", "n09", "n10"]), "n[08-10]");
        assert_eq!(c(&["n8", "n9", "n10"]), "n[8-10]");
        assert_eq!(c(&["login", "n1", "x"]), "login,n1,x");
        assert_eq!(c(&["n1a", "n2a", "n1b"]), "n[1-2]a,n1b");
        assert_eq!(c(&["n1", "n01"]), "n1,n01");
        assert_eq!(
            c(&["rack1n01", "rack1n02", "rack1n03", "rack2n01", "rack2n02"]),
            "rack1n[01-03],rack2n[01-02]"
        );
        assert_eq!(compress::<&str>(&[]), "");
    }

    #[test]
    fn round_trips() {
        for list in [
            "node[1-4,7]",
            "n[08-10],n[1-2]",
            "rack[1-2]n[01-03]",
            "a,b,c",
            "gpu[001-120,200]-ib",
            "n[1-3],n[007-009]",
            "x[99-101]",
        ] {
            let hosts = ex(list);
            let c = compress(&hosts);
            let mut again = ex(&c);
            let mut want = hosts.clone();
            again.sort();
            want.sort();
            assert_eq!(again, want, "{list} -> {c}");
        }
    }

    #[test]
    fn set_operations_keep_the_first_lists_order() {
        let a = ex("n[1-5]");
        let b = ex("n[4,2],m1");
        assert_eq!(diff(&a, &b), ["n1", "n3", "n5"]);
        assert_eq!(intersect(&a, &b), ["n2", "n4"]);
        assert_eq!(intersect(&b, &a), ["n4", "n2"]);
    }
}
