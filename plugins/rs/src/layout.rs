//! Where chunks sit in a set (the seed's layout of data and checksum chunks over rows),
//! how a row is solved after losses, and how many checksums a set keeps: the arithmetic
//! of the scheme, apart from its I/O and exchanges.

use scr_plugin::{PluginError, PluginResult};

/// Where chunks sit in a set of `p` members with `k` checksums per row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Members in the set.
    pub p: u32,
    /// Checksums per row.
    pub k: u32,
}

impl Layout {
    /// The member holding checksum `j` of row `r`: `(r - j) mod p`.
    pub fn holder(&self, r: u32, j: u32) -> u32 {
        (r + self.p - j) % self.p
    }

    /// Which checksum member `i` holds in row `r`, if any (then its data there is zero).
    pub fn checksum_of(&self, i: u32, r: u32) -> Option<u32> {
        let j = (r + self.p - i) % self.p;
        (j < self.k).then_some(j)
    }

    /// Which of member `i`'s `p - k` data chunks sits in row `r` (None: `i` holds a
    /// checksum there). Data chunks fill the rows `i` holds no checksum of, in increasing
    /// row order.
    pub fn data_chunk(&self, i: u32, r: u32) -> Option<u64> {
        if self.checksum_of(i, r).is_some() {
            return None;
        }
        let held_below = (0..self.k).filter(|&j| (i + j) % self.p < r).count() as u64;
        Some(u64::from(r) - held_below)
    }

    /// The row whose data member `q` sends to its holders in encode step `s` (1..=p-k).
    pub fn encode_row(&self, q: u32, s: u32) -> u32 {
        (q + self.p - s % self.p) % self.p
    }
}

/// A value a row's solve is missing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unknown {
    /// Data chunk `chunk` of `member`.
    Data {
        /// Who lost it.
        member: u32,
        /// Which of its data chunks.
        chunk: u64,
    },
    /// Checksum `j` of the row, held by `member`.
    Checksum {
        /// Who lost it.
        member: u32,
        /// Which checksum.
        j: u32,
    },
}

impl Unknown {
    /// The member that lost this value and gets it back.
    pub fn member(&self) -> u32 {
        match *self {
            Unknown::Data { member, .. } | Unknown::Checksum { member, .. } => member,
        }
    }
}

/// A value a member knows and a row's solve needs from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Known {
    /// One of its data chunks.
    Data(u64),
    /// Checksum `j` of the row.
    Checksum(u32),
}

/// How one row is solved after losses: its unknowns and the checksum equations chosen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowPlan {
    /// The row.
    pub row: u32,
    /// What the row is missing, by member.
    pub unknowns: Vec<Unknown>,
    /// The checksum indices whose equations solve them (ascending); fewer than the
    /// unknowns when the row cannot be solved.
    pub equations: Vec<u32>,
}

impl RowPlan {
    /// The unknowns of row `r` when members lost their data (`lost_data`) or their
    /// redundancy (`lost_red`), and the equations that solve them: those of lost
    /// checksums (each lost checksum appears in its own equation only), then others in
    /// increasing order.
    pub fn new(lay: Layout, r: u32, lost_data: &[bool], lost_red: &[bool]) -> RowPlan {
        let mut unknowns = Vec::new();
        for m in 0..lay.p {
            match (lay.checksum_of(m, r), lay.data_chunk(m, r)) {
                (Some(j), _) if lost_red[m as usize] => {
                    unknowns.push(Unknown::Checksum { member: m, j })
                }
                (None, Some(chunk)) if lost_data[m as usize] => {
                    unknowns.push(Unknown::Data { member: m, chunk })
                }
                _ => {}
            }
        }
        let mut equations: Vec<u32> = unknowns
            .iter()
            .filter_map(|u| match u {
                Unknown::Checksum { j, .. } => Some(*j),
                Unknown::Data { .. } => None,
            })
            .collect();
        for j in 0..lay.k {
            if equations.len() >= unknowns.len() {
                break;
            }
            if !equations.contains(&j) {
                equations.push(j);
            }
        }
        equations.sort_unstable();
        RowPlan {
            row: r,
            unknowns,
            equations,
        }
    }

    /// What member `q` contributes to this row's solve, if anything: its data chunk when
    /// it holds none of the row's checksums and kept its data, or its checksum when the
    /// row's equations use it and it kept its redundancy.
    pub fn contribution(
        &self,
        lay: Layout,
        q: u32,
        lost_data: &[bool],
        lost_red: &[bool],
    ) -> Option<Known> {
        if self.unknowns.is_empty() {
            return None;
        }
        match lay.checksum_of(q, self.row) {
            Some(j) => {
                (!lost_red[q as usize] && self.equations.contains(&j)).then_some(Known::Checksum(j))
            }
            None => (!lost_data[q as usize])
                .then(|| lay.data_chunk(q, self.row).map(Known::Data))
                .flatten(),
        }
    }

    /// The unknown of this row that `member` lost, if any (at most one: a member is
    /// either a checksum holder or a data contributor in a row).
    pub fn unknown_of(&self, member: u32) -> Option<(usize, Unknown)> {
        self.unknowns
            .iter()
            .enumerate()
            .find(|(_, u)| u.member() == member)
            .map(|(i, u)| (i, *u))
    }
}

/// Refuse `k` checksums for a set of `p` members unless GF(2^8) RS can provide them.
pub fn check_failures(p: u32, k: u64) -> PluginResult<()> {
    let why = if k == 0 {
        format!(
            "scheme RS: set_failures = 0 leaves nothing to rebuild from; set it between 1 and {} for this set of {p} members (or use the SINGLE scheme for no redundancy)",
            p.saturating_sub(1).max(1)
        )
    } else if k >= u64::from(p) {
        format!(
            "scheme RS: set_failures = {k} needs sets of at least {} members, but this set has {p}; lower set_failures below {p} or raise set_size (a set is smaller than set_size when the job spans too few failure groups)",
            k + 1
        )
    } else if u64::from(p) + k > 256 {
        format!(
            "scheme RS: a set of {p} members with set_failures = {k} needs {} code rows and GF(2^8) has at most 256; lower set_size or set_failures so that they add up to 256 at most",
            u64::from(p) + k
        )
    } else {
        return Ok(());
    };
    Err(PluginError::invalid_parameter(why))
}

/// The checksums a set of `p` members keeps when the descriptor asks for `k`
/// (`set_failures`) in sets of at least `set_size`: `k`, or `p - 1` when this set is
/// smaller than `k + 1` because the job spans too few failure groups for it (fewer nodes
/// than `set_size`, or ranks spread unevenly over the nodes, as after spares took lost
/// ranks beside others). Such a set is protected as far as it can be rather than failing
/// the job (a set of one member keeps no checksum); the host reports the sets that
/// tolerate fewer losses than a full one. A `k` that not even a full set of `set_size`
/// can hold is the configuration's fault and refused, as are `k = 0` and sets too large
/// for GF(2^8) ([`check_failures`]).
pub fn checksums_for(p: u32, k: u64, set_size: u64) -> PluginResult<u32> {
    if k == 0 {
        check_failures(p, 0)?;
    }
    if k >= set_size {
        return Err(PluginError::invalid_parameter(format!(
            "scheme RS: set_failures = {k} needs sets of at least {} members, but set_size is {set_size}; lower set_failures below {set_size} or raise set_size",
            k + 1
        )));
    }
    let k = k.min(u64::from(p.saturating_sub(1)));
    if k > 0 {
        check_failures(p, k)?;
    }
    Ok(k as u32)
}

/// Which members lost their data and which their redundancy file, in a set laid out
/// as `lay`.
pub(crate) struct Lost {
    pub(crate) lay: Layout,
    pub(crate) data: Vec<bool>,
    pub(crate) red: Vec<bool>,
}

impl Lost {
    /// Who knows member `x`'s file list: `x` itself when it kept its data (the host's
    /// verified list), else the first of `x, x+1 .. x+k` whose header is intact.
    pub(crate) fn source(&self, x: u32) -> Option<u32> {
        let Layout { p, k } = self.lay;
        if !self.data[x as usize] {
            Some(x)
        } else {
            (0..=k)
                .map(|d| (x + d) % p)
                .find(|&y| !self.red[y as usize])
        }
    }

    /// The file lists member `l` needs: its own when it lost data; its own and its `k`
    /// left neighbours' when it writes its header again.
    pub(crate) fn needs(&self, l: u32) -> Vec<u32> {
        let Layout { p, k } = self.lay;
        if self.red[l as usize] {
            (0..=k).map(|d| (l + p - d) % p).collect()
        } else if self.data[l as usize] {
            vec![l]
        } else {
            Vec::new()
        }
    }

    /// The lists member `src` is the source of and member `l` needs.
    pub(crate) fn lists_for(&self, src: u32, l: u32) -> Vec<u32> {
        self.needs(l)
            .into_iter()
            .filter(|&x| self.source(x) == Some(src))
            .collect()
    }
}
