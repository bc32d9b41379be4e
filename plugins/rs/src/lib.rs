//! The Reed-Solomon (RS) redundancy scheme over GF(2^8): each set of `p` members keeps `k`
//! checksums (`set_failures`, default 2) and rebuilds any `k` members that lost their
//! files.
//!
//! # Code
//!
//! The field is GF(2^8) with the polynomial 0x11D; the code is the `(p + k) × p`
//! Vandermonde matrix turned into one whose top `p × p` block is the identity
//! ([`scr_kernels::matrix::encoding`]), so any `p` of its rows are independent and any
//! square block of its bottom `k` rows (the checksum coefficients `E[p + j][q]`) is
//! invertible: whichever `k` of the `p + k` values of a row are lost, the rest determine
//! them. `set_failures = k` needs `1 <= k < p` and `p + k <= 256`, with `p` the members of
//! the set actually formed (a set can be smaller than `set_size`); anything else is
//! refused at instantiation with the values and what to change.
//!
//! `k = 1` is accepted: it is this same code with one checksum row, tolerating one lost
//! member per set like XOR (its coefficients are not all 1, so its checksum bytes differ
//! from XOR parity; XOR is the cheaper choice for one loss, RS with `k = 1` exists so that
//! a configuration can lower `set_failures` without changing scheme).
//!
//! # Layout
//!
//! Member `i`'s files, concatenated and zero padded, form its logical file, cut into
//! `p - k` data chunks of `chunk = ceil(largest logical file in the set / (p - k))`
//! bytes. The set is seen as `p` rows of chunks (see [`Layout`]): in row `r`, checksum
//! `j` (0..k) is held by member `(r - j) mod p`, who contributes zeros as data in that
//! row; every other member contributes one of its data chunks, in increasing row order.
//! So member `i` holds checksum `j` of row `(i + j) mod p`, and its redundancy file's
//! payload is its `k` checksum chunks, checksum `j` at offset `j · chunk` (recorded as
//! the header's `sections`, which also record `k`). The header (see
//! [`scr_plugin::redfile`]) carries the file metadata of member `i` and of its `k` left
//! neighbours: a member's metadata is on itself and on its `k` right neighbours, `k + 1`
//! members, so any `k` losses leave a copy of every member's file list.
//!
//! # Encode (apply)
//!
//! Pipelined in pieces of `buffer_size` bytes of the chunk. In step `s` (1..=p-k) member
//! `q` reads the piece of its data chunk in row `(q - s) mod p` (each data byte is read
//! once) and sends it to the `k` holders of that row: holder `(q - s - j) mod p`
//! accumulates `E[p + j][q] ·` piece into its checksum `j`. Each (step, `j`) is one shift
//! of the ring (every member sends `s + j` places left and receives from `s + j` places
//! right), done as one `sendrecv`, which cannot deadlock for any `p` and `k`. After
//! `p - k` steps the piece of each of the `k` checksums is final and written. With
//! `apply_with_crc` the same pass hashes each data byte as it is read
//! ([`scr_plugin::lofi::FileCrcs`]), so the host needs no second read for the CRC32s;
//! the file metadata (with those CRC32s) goes to the `k` right neighbours after the data.
//!
//! # Decode (recover)
//!
//! A member has lost its data when its files are missing or fail their size and CRC32
//! check (a corrupt survivor must never be spread), and its redundancy when its file is
//! missing, fails its checksums or belongs to another dataset, set or `k`. In row `r` the
//! unknowns are the data chunk of every member that lost data and does not hold a
//! checksum there, and checksum `j` when its holder lost redundancy. Each checksum row is
//! an equation `Σ_q E[p + j][q] · d_q + c_j = 0`; the equations of lost checksums are
//! forced, others fill up to the number of unknowns. A row with more than `k` unknowns
//! cannot be solved and the rebuild is refused on every member with `UNRECOVERABLE`;
//! `k` lost members never make more than `k` unknowns in a row.
//!
//! Row `r` is solved by member `r`: in `p - 1` shift steps every member sends it the one
//! known value the row's equations need from it (data or checksum), and the solver
//! accumulates coefficient × value into one buffer per equation
//! ([`scr_kernels::mul_add_multi`], reading the value once); it inverts the small matrix
//! of the unknowns' coefficients once ([`scr_kernels::matrix::invert`]), solves, and in
//! `p - 1` more shift steps sends each unknown to the member that lost it, who writes
//! data into its logical file or a checksum into its new redundancy file. Rebuilt data
//! must match the size and CRC32 recorded for it, and every lost redundancy file is
//! written again, so the set is protected again. Only what was lost is written: a member
//! that lost only its redundancy file keeps its data untouched.
//!
//! An offline rebuild (`scr postrun`) gives RS every survivor's redundancy file: RS keeps
//! the defaults of `Scheme::rebuild_sources` (`None`: every survivor) and
//! `Scheme::recover_files` (`recover`). The checksums of a row are spread over `k`
//! members and every row has its own, so even with fewer than `k` losses a rebuild reads
//! checksums from most of the set, and this decoder counts any member's missing
//! redundancy file as a loss to solve for.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use scr_kernels::matrix::{self, Matrix};
use scr_plugin::collect::{gather_flags, recv_bytes, send_bytes, sendrecv_bytes, Failures};
use scr_plugin::lofi::{with_crcs, FileCrcs, LogicalFile};
use scr_plugin::redfile::{self, RedHeader, RedReader, RedWriter, StoredMeta};
use scr_plugin::ring::{finish_rebuild, pieces, Ring};
use scr_plugin::verify::verify_files;
use scr_plugin::{
    Applied, DatasetFiles, ErrorCode, FileMeta, Host, LogLevel, Params, PluginError, PluginLibrary,
    PluginResult, RecoverRequest, ReduceOp, Scheme, SchemeConfig, SchemeDescription,
};

mod layout;
use layout::Lost;
pub use layout::{check_failures, checksums_for, Known, Layout, RowPlan, Unknown};

/// The library's identity and the names it provides.
pub struct Rs;

const SCHEME: &str = "RS";
/// File lists sent to the members whose headers keep copies (apply) or who lost them.
const TAG_META: u32 = 19;
/// Encode pieces on their way to the checksum holders.
const TAG_ENCODE: u32 = 20;
/// Known values on their way to a row's solver.
const TAG_REDUCE: u32 = 21;
/// Solved unknowns on their way to the member that lost them.
const TAG_SCATTER: u32 = 22;
const PARAMS: &[&str] = &["set_size", "set_failures", "replicas", "buffer_size"];
/// `set_failures` when the descriptor names none.
pub const DEFAULT_FAILURES: u32 = 2;

/// The set size when the descriptor gives none (SCR's `SET_SIZE` default, the host's).
pub const DEFAULT_SET_SIZE: u64 = 8;

/// One RS instance for one member of one set.
pub struct RsScheme {
    lay: Layout,
    member: u32,
    world_rank: u32,
    piece: usize,
    code: Matrix,
}

impl RsScheme {
    /// An instance for member `member` (world rank `world_rank`) of a set of `members`
    /// with `k` checksums, working in pieces of `piece` bytes; refused unless
    /// `1 <= k < members` and `members + k <= 256`, or a set of one member with none
    /// (its file is only checked, as [`checksums_for`] gives it).
    pub fn new(
        members: u32,
        member: u32,
        world_rank: u32,
        k: u32,
        piece: usize,
    ) -> PluginResult<Self> {
        let code = if members == 1 && k == 0 {
            vec![vec![1]]
        } else {
            check_failures(members, u64::from(k))?;
            matrix::encoding(members as usize, k as usize).ok_or_else(|| {
                PluginError::invalid_parameter(format!(
                    "scheme RS: no encoding matrix for {members} members and {k} checksums"
                ))
            })?
        };
        Ok(RsScheme {
            lay: Layout { p: members, k },
            member,
            world_rank,
            piece: piece.max(1),
            code,
        })
    }

    /// The coefficient of member `q`'s data in checksum `j`.
    fn coef(&self, j: u32, q: u32) -> u8 {
        self.code[(self.lay.p + j) as usize][q as usize]
    }

    fn red_path(&self, dir: &Path) -> PathBuf {
        redfile::member_file(dir, SCHEME, self.world_rank, self.member, self.lay.p)
    }

    fn check_host(&self, host: &Host<'_>) -> PluginResult<()> {
        host.check_place(SCHEME, self.member, self.lay.p)
    }

    /// The header sections of `k` checksum chunks of `chunk` bytes, one after another.
    fn sections(&self, chunk: u64) -> BTreeMap<u32, (u64, u64)> {
        (0..self.lay.k)
            .map(|j| (j, (u64::from(j) * chunk, chunk)))
            .collect()
    }

    /// Whether a verified header is this member's for this dataset with this code.
    fn header_fits(&self, h: &RedHeader, dataset_id: u64, host: &Host<'_>) -> bool {
        if !h.matches(SCHEME, dataset_id, self.lay.p, self.member) {
            return false;
        }
        if h.sections.len() != self.lay.k as usize {
            host.log(
                LogLevel::Warn,
                &format!(
                    "RS: {} was written with set_failures = {}, this run uses {}; not used",
                    self.red_path(Path::new("")).display(),
                    h.sections.len(),
                    self.lay.k
                ),
            );
            return false;
        }
        h.sections == self.sections(h.chunk)
            && h.payload_len == u64::from(self.lay.k) * h.chunk
            && h.files.contains_key(&self.member)
    }

    /// The apply: the pipelined encode of the `k` checksums, then the exchange of file
    /// metadata with the `k` right neighbours (after the data, because with `crc` the
    /// CRC32s that go into the headers are computed from the bytes this pass reads, see
    /// [`FileCrcs`]). Returns the redundancy file written and, with `crc`, each data
    /// file's CRC32.
    fn encode(
        &self,
        host: &Host<'_>,
        dataset: &DatasetFiles,
        crc: bool,
    ) -> PluginResult<(Vec<String>, Vec<Option<u32>>)> {
        if let Some(note) = scr_kernels::take_selection_note() {
            host.log(LogLevel::Warn, note);
        }
        self.check_host(host)?;
        let Layout { p, k } = self.lay;
        let me = self.member;
        let dir = Path::new(dataset.dir.as_str());
        let mut failure = Failures::new();
        let size: u64 = dataset.files.iter().map(|m| m.size).sum();
        let largest = host.all_reduce(size, ReduceOp::Max)?;
        let chunk = largest.div_ceil(u64::from(p - k));
        let mut crcs = crc.then(|| FileCrcs::new(&dataset.files));
        let mut lofi = failure.note(LogicalFile::open(&dataset.files));
        let mut writer = failure.note(RedWriter::create(&self.red_path(dir)));
        let mut data = vec![0u8; self.piece];
        let mut incoming = vec![0u8; self.piece];
        let mut sums = vec![vec![0u8; self.piece]; k as usize];
        for (offset, n) in pieces(chunk, self.piece) {
            for c in sums.iter_mut() {
                c[..n].fill(0);
            }
            for s in 1..=(p - k) {
                let row = self.lay.encode_row(me, s);
                let buf = &mut data[..n];
                match (self.lay.data_chunk(me, row), lofi.as_mut()) {
                    (Some(c), Some(l)) => {
                        let at = c * chunk + offset;
                        if failure.note(l.read_at(at, buf)).is_some() {
                            // every data byte of this member passes here exactly once
                            if let Some(h) = crcs.as_mut() {
                                h.update(at, buf);
                            }
                        } else {
                            buf.fill(0);
                        }
                    }
                    _ => buf.fill(0),
                }
                for j in 0..k {
                    let from = host.right(s + j);
                    host.sendrecv(host.left(s + j), buf, from, &mut incoming[..n], TAG_ENCODE)?;
                    scr_kernels::mul_add(
                        &mut sums[j as usize][..n],
                        &incoming[..n],
                        self.coef(j, from),
                    );
                }
            }
            if let Some(w) = writer.as_mut() {
                for (j, sum) in sums.iter().enumerate() {
                    failure.note(w.write_at(j as u64 * chunk + offset, &sum[..n]));
                }
            }
        }
        // after the data, because with `crc` the CRC32s come from the bytes this pass read
        let crcs = crcs.map(FileCrcs::finish).unwrap_or_default();
        let files = self.exchange_file_lists(host, dataset, &crcs, &mut failure)?;
        let mut written = None;
        if let (Some(w), true) = (writer, failure.is_empty()) {
            let header = RedHeader {
                chunk,
                files,
                sections: self.sections(chunk),
                ..RedHeader::for_member(SCHEME, dataset.dataset_id, host)?
            };
            written = failure.note(w.finish(header));
        }
        failure.agree(host, "RS apply")?;
        Ok((
            written
                .map(|p| vec![p.display().to_string()])
                .unwrap_or_default(),
            crcs,
        ))
    }

    /// The file lists this member's header holds (collective): its own (with `crcs`) and
    /// those of its k left neighbours, whose lost files its checksums can rebuild; its own
    /// goes into the headers of its k right neighbours.
    fn exchange_file_lists(
        &self,
        host: &Host<'_>,
        dataset: &DatasetFiles,
        crcs: &[Option<u32>],
        failure: &mut Failures,
    ) -> PluginResult<BTreeMap<u32, Vec<StoredMeta>>> {
        let dir = Path::new(dataset.dir.as_str());
        let mine: Vec<StoredMeta> = failure
            .note(with_crcs(&dataset.files, crcs))
            .unwrap_or_default()
            .iter()
            .map(|m| StoredMeta::from_meta(m, dir))
            .collect();
        let mut files = BTreeMap::from([(self.member, mine.clone())]);
        for d in 1..=self.lay.k {
            let got = sendrecv_bytes(host, host.right(d), &json(&mine), host.left(d), TAG_META)?;
            let left: Vec<StoredMeta> =
                failure.note(unjson(&got, host.left(d))).unwrap_or_default();
            files.insert(host.left(d), left);
        }
        Ok(files)
    }

    /// Who lost what, or `None` when nothing is (the common case, two all-reduces). A
    /// rebuild reads every survivor's data: a survivor whose files do not match their
    /// recorded size and CRC32 would put wrong bytes into the rebuilt files and
    /// checksums, so it counts as having lost its data (only checked when something is
    /// lost). Collective.
    ///
    /// `red` is this member's redundancy file with its header checked. When nothing is
    /// lost by presence every payload is checked here (a damaged one is rebuilt like a
    /// lost one); otherwise each survivor's is checked in the rebuild's pass over it.
    fn losses(
        &self,
        host: &Host<'_>,
        data_ok: bool,
        given: &[FileMeta],
        red_file: &mut Option<RedReader>,
    ) -> PluginResult<Option<Lost>> {
        let mut data = gather_flags(host, !data_ok)?;
        let mut red = gather_flags(host, red_file.is_none())?;
        if !data.contains(&true) && !red.contains(&true) {
            let bad = red_file.as_mut().is_some_and(|r| {
                r.verify_payload()
                    .map_err(|e| {
                        host.log(LogLevel::Warn, &format!("RS: {e}; rebuilt"));
                    })
                    .is_err()
            });
            if host.all_agree(!bad)? {
                return Ok(None);
            }
            if bad {
                *red_file = None;
            }
            red = gather_flags(host, red_file.is_none())?;
        }
        // the host's check already covered them when it says so: one read, not two
        let mine_bad = data_ok
            && !host.survivors_verified()
            && verify_files(given)
                .map_err(|e| {
                    host.log(
                        LogLevel::Warn,
                        &format!("RS: {e}; counted as lost and rebuilt"),
                    )
                })
                .is_err();
        if !host.all_agree(!mine_bad)? {
            data = gather_flags(host, !data_ok || mine_bad)?;
        }
        Ok(Some(Lost {
            lay: self.lay,
            data,
            red,
        }))
    }

    /// Every row's plan, or `UNRECOVERABLE` (the same on every member, no messages)
    /// when a row has more unknowns than equations or a needed file list has no intact
    /// copy left.
    fn plans(&self, lost: &Lost) -> PluginResult<Vec<RowPlan>> {
        let Layout { p, k } = self.lay;
        let members: Vec<u32> = (0..p)
            .filter(|&m| lost.data[m as usize] || lost.red[m as usize])
            .collect();
        let plans: Vec<RowPlan> = (0..p)
            .map(|r| RowPlan::new(self.lay, r, &lost.data, &lost.red))
            .collect();
        if plans
            .iter()
            .any(|pl| pl.equations.len() < pl.unknowns.len())
        {
            return Err(PluginError::new(
                ErrorCode::UNRECOVERABLE,
                format!(
                    "members {members:?} of {p} lost files and RS with set_failures = {k} rebuilds at most {k} per set"
                ),
            ));
        }
        if let Some(x) = (0..p)
            .flat_map(|l| lost.needs(l))
            .find(|&x| lost.source(x).is_none())
        {
            return Err(PluginError::new(
                ErrorCode::UNRECOVERABLE,
                format!(
                    "members {members:?} of {p} lost files and no intact copy of member {x}'s file list is left (RS with set_failures = {k})"
                ),
            ));
        }
        Ok(plans)
    }

    /// The file lists this member needs ([`Lost::needs`]), from their sources. In shift
    /// step `t` every member sends member `me + t` the lists it is the source of and
    /// that member needs, in one message, and receives those from member `me - t`: both
    /// sides know whether a message goes, so every send meets its receive, and the
    /// steps run side by side instead of one list after another. A list that is missing
    /// or names a file outside the dataset directory is noted as corrupt.
    fn exchange_lists(
        &self,
        host: &Host<'_>,
        lost: &Lost,
        header: Option<&RedHeader>,
        given: &[FileMeta],
        dir: &Path,
        failure: &mut Failures,
    ) -> PluginResult<BTreeMap<u32, Vec<StoredMeta>>> {
        let (me, p) = (self.member, self.lay.p);
        let my_copy = |x: u32| -> Option<Vec<StoredMeta>> {
            if x == me && !lost.data[me as usize] {
                Some(
                    given
                        .iter()
                        .map(|m| StoredMeta::from_meta(m, dir))
                        .collect(),
                )
            } else {
                header.and_then(|h| h.files.get(&x).cloned())
            }
        };
        let mut known: BTreeMap<u32, Vec<StoredMeta>> = BTreeMap::new();
        for x in lost.lists_for(me, me) {
            let mine = my_copy(x).ok_or_else(|| {
                PluginError::new(
                    ErrorCode::CORRUPT,
                    format!("this member's redundancy header has no file list for member {x}"),
                )
            });
            if let Some(v) = failure.note(mine) {
                known.insert(x, v);
            }
        }
        for t in 1..p {
            let (to, from) = ((me + t) % p, (me + p - t) % p);
            let give: Vec<(u32, Option<Vec<StoredMeta>>)> = lost
                .lists_for(me, to)
                .into_iter()
                .map(|x| (x, my_copy(x)))
                .collect();
            let want = lost.lists_for(from, me);
            let out = json(&give);
            let got = match (give.is_empty(), want.is_empty()) {
                (false, false) => Some(sendrecv_bytes(host, to, &out, from, TAG_META)?),
                (false, true) => {
                    send_bytes(host, to, TAG_META, &out)?;
                    None
                }
                (true, false) => Some(recv_bytes(host, from, TAG_META)?),
                (true, true) => None,
            };
            let Some(got) = got else { continue };
            let Some(got) = failure.note(unjson::<Vec<(u32, Option<Vec<StoredMeta>>)>>(&got, from))
            else {
                continue;
            };
            for x in want {
                if let Some(v) = failure.note(list_from(&got, from, x)) {
                    known.insert(x, v);
                }
            }
        }
        Ok(known)
    }

    /// The chunk size, as every intact header recorded it (they must agree); with no
    /// header left (only redundancy lost, everywhere) the one apply computed.
    fn agreed_chunk(
        &self,
        host: &Host<'_>,
        header: Option<&RedHeader>,
        given: &[FileMeta],
    ) -> PluginResult<u64> {
        let recorded = header.map(|h| h.chunk);
        let hi = host.all_reduce(recorded.unwrap_or(0), ReduceOp::Max)?;
        let lo = host.all_reduce(recorded.unwrap_or(u64::MAX), ReduceOp::Min)?;
        if lo == u64::MAX {
            let size: u64 = given.iter().map(|m| m.size).sum();
            Ok(host
                .all_reduce(size, ReduceOp::Max)?
                .div_ceil(u64::from(self.lay.p - self.lay.k)))
        } else if lo != hi {
            Err(PluginError::new(
                ErrorCode::CORRUPT,
                format!("the intact RS headers of the set record chunk sizes from {lo} to {hi} bytes; not trusted"),
            ))
        } else {
            Ok(hi)
        }
    }

    /// The inverse of the coefficients of this member's row's unknowns (empty when the
    /// row lost nothing). A singular matrix is a bug; noted, and zeros stand in.
    fn row_inverse(&self, plan: &RowPlan, failure: &mut Failures) -> Matrix {
        let a: Matrix = plan
            .equations
            .iter()
            .map(|&j| {
                plan.unknowns
                    .iter()
                    .map(|u| match *u {
                        Unknown::Data { member, .. } => self.coef(j, member),
                        Unknown::Checksum { j: uj, .. } => u8::from(uj == j),
                    })
                    .collect()
            })
            .collect();
        if a.is_empty() {
            return Vec::new();
        }
        failure
            .note(matrix::invert(&a).ok_or_else(|| {
                PluginError::new(
                    ErrorCode::OTHER,
                    format!(
                        "RS: the coefficients of row {}'s unknowns are singular (a bug)",
                        self.member
                    ),
                )
            }))
            .unwrap_or_else(|| vec![vec![0u8; a.len()]; a.len()])
    }

    /// Solve every row, piece by piece: each member solves its own row (reduce the
    /// known values to it, multiply by the inverse) and scatters the solved unknowns to
    /// the members that lost them, who store them through `io`. Collective.
    fn solve_rows(
        &self,
        host: &Host<'_>,
        plans: &[RowPlan],
        lost: &Lost,
        io: &mut RowIo,
        failure: &mut Failures,
    ) -> PluginResult<()> {
        let plan = &plans[self.member as usize];
        let inverse = self.row_inverse(plan, failure);
        let eqs = plan.equations.len();
        let mut sums = vec![vec![0u8; self.piece]; eqs];
        let mut solved = vec![vec![0u8; self.piece]; eqs];
        let mut bufs = (vec![0u8; self.piece], vec![0u8; self.piece]);
        for (offset, n) in pieces(io.chunk, self.piece) {
            for s in sums.iter_mut() {
                s[..n].fill(0);
            }
            self.reduce_piece(
                host,
                plans,
                lost,
                io,
                (offset, n),
                &mut sums,
                &mut bufs,
                failure,
            )?;
            // solve: unknowns = inverse · sums
            for x in solved.iter_mut() {
                x[..n].fill(0);
            }
            for (e, sum) in sums.iter().enumerate() {
                let column: Vec<u8> = inverse.iter().map(|row| row[e]).collect();
                let mut dsts: Vec<&mut [u8]> = solved.iter_mut().map(|x| &mut x[..n]).collect();
                scr_kernels::mul_add_multi(&mut dsts, &sum[..n], &column);
            }
            self.scatter_piece(host, plans, io, (offset, n), &solved, &mut bufs.1, failure)?;
        }
        Ok(())
    }

    /// One piece of the reduction to each row's solver: this member adds its own known
    /// value of its row, then in step `t` sends its value for row `me + t` to that
    /// row's solver while the value of member `me - t` for this member's row comes in
    /// and is added (coefficient × value, once per equation) to `sums`.
    #[allow(clippy::too_many_arguments)]
    fn reduce_piece(
        &self,
        host: &Host<'_>,
        plans: &[RowPlan],
        lost: &Lost,
        io: &mut RowIo,
        (offset, n): (u64, usize),
        sums: &mut [Vec<u8>],
        (out, incoming): &mut (Vec<u8>, Vec<u8>),
        failure: &mut Failures,
    ) -> PluginResult<()> {
        let (me, p, lay) = (self.member, self.lay.p, self.lay);
        let plan = &plans[me as usize];
        let ring = Ring::new(host, TAG_REDUCE, self.piece);
        let accumulate = |sums: &mut [Vec<u8>], kn: Known, q: u32, val: &[u8]| match kn {
            Known::Data(_) => {
                let coefs: Vec<u8> = plan.equations.iter().map(|&j| self.coef(j, q)).collect();
                let mut dsts: Vec<&mut [u8]> = sums.iter_mut().map(|s| &mut s[..n]).collect();
                scr_kernels::mul_add_multi(&mut dsts, val, &coefs);
            }
            Known::Checksum(j) => {
                if let Some(e) = plan.equations.iter().position(|&x| x == j) {
                    scr_kernels::xor_into(&mut sums[e][..n], val);
                }
            }
        };
        if let Some(kn) = plan.contribution(lay, me, &lost.data, &lost.red) {
            io.read(kn, offset, &mut out[..n], failure);
            accumulate(sums, kn, me, &out[..n]);
        }
        for t in 1..p {
            let (to, from) = ((me + t) % p, (me + p - t) % p);
            let give = plans[to as usize].contribution(lay, me, &lost.data, &lost.red);
            let take = plan.contribution(lay, from, &lost.data, &lost.red);
            if let Some(kn) = give {
                io.read(kn, offset, &mut out[..n], failure);
            }
            ring.exchange(
                give.map(|_| (to, &out[..n])),
                take.map(|_| (from, &mut incoming[..n])),
            )?;
            if let Some(kn) = take {
                accumulate(sums, kn, from, &incoming[..n]);
            }
        }
        Ok(())
    }

    /// One piece of the scatter of solved unknowns: this member stores its own unknown
    /// of its row, then in step `t` sends the unknown of member `me + t` to it while
    /// this member's unknown in row `me - t` comes in and is stored.
    #[allow(clippy::too_many_arguments)]
    fn scatter_piece(
        &self,
        host: &Host<'_>,
        plans: &[RowPlan],
        io: &mut RowIo,
        (offset, n): (u64, usize),
        solved: &[Vec<u8>],
        incoming: &mut [u8],
        failure: &mut Failures,
    ) -> PluginResult<()> {
        let (me, p) = (self.member, self.lay.p);
        let plan = &plans[me as usize];
        let ring = Ring::new(host, TAG_SCATTER, self.piece);
        if let Some((i, u)) = plan.unknown_of(me) {
            io.store(u, offset, &solved[i][..n], failure);
        }
        for t in 1..p {
            let (to, from) = ((me + t) % p, (me + p - t) % p);
            let give = plan.unknown_of(to).map(|(i, _)| (to, &solved[i][..n]));
            let take = plans[from as usize].unknown_of(me);
            ring.exchange(give, take.map(|_| (from, &mut incoming[..n])))?;
            if let Some((_, u)) = take {
                io.store(u, offset, &incoming[..n], failure);
            }
        }
        Ok(())
    }
}

/// Member `x`'s file list out of what member `from` sent, if it is there and names
/// only files inside the dataset directory.
fn list_from(
    got: &[(u32, Option<Vec<StoredMeta>>)],
    from: u32,
    x: u32,
) -> PluginResult<Vec<StoredMeta>> {
    let v = got
        .iter()
        .find(|(y, _)| *y == x)
        .and_then(|(_, v)| v.clone())
        .ok_or_else(|| {
            PluginError::new(
                ErrorCode::CORRUPT,
                format!("member {from}'s redundancy header has no file list for member {x}"),
            )
        })?;
    match v.iter().find(|m| !redfile::stays_inside(&m.name)) {
        Some(bad) => Err(PluginError::new(
            ErrorCode::CORRUPT,
            format!("member {from} sent file name `{}` for member {x}, which leaves the dataset directory; not trusted", bad.name),
        )),
        None => Ok(v),
    }
}

/// This member's files and redundancy during a rebuild, as the rows' values: data
/// chunks in its logical file, checksums in its redundancy file (the old one to read,
/// or the new one being written), `chunk` bytes each.
struct RowIo {
    chunk: u64,
    lofi: Option<LogicalFile>,
    red: Option<RedReader>,
    writer: Option<RedWriter>,
}

impl RowIo {
    /// Read known value `kn` at `offset` into `buf` (zeros, and the error noted, when
    /// it cannot be read).
    fn read(&mut self, kn: Known, offset: u64, buf: &mut [u8], failure: &mut Failures) {
        let chunk = self.chunk;
        let r = match kn {
            Known::Data(c) => self
                .lofi
                .as_mut()
                .map(|l| l.read_at(c * chunk + offset, buf)),
            Known::Checksum(j) => self
                .red
                .as_mut()
                .map(|r| r.read_at(u64::from(j) * chunk + offset, buf)),
        };
        if !matches!(r, Some(Ok(()))) {
            if let Some(Err(e)) = r {
                failure.note::<()>(Err(e));
            }
            buf.fill(0);
        }
    }

    /// Store solved unknown `u` at `offset`: data into the logical file, a checksum
    /// into the new redundancy file.
    fn store(&mut self, u: Unknown, offset: u64, val: &[u8], failure: &mut Failures) {
        let chunk = self.chunk;
        match u {
            Unknown::Data { chunk: c, .. } => {
                if let Some(l) = self.lofi.as_mut() {
                    failure.note(l.write_at(c * chunk + offset, val));
                }
            }
            Unknown::Checksum { j, .. } => {
                if let Some(w) = self.writer.as_mut() {
                    failure.note(w.write_at(u64::from(j) * chunk + offset, val));
                }
            }
        }
    }
}

fn json<T: serde::Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).expect("metadata serializes")
}

fn unjson<T: serde::de::DeserializeOwned>(b: &[u8], from: u32) -> PluginResult<T> {
    serde_json::from_slice(b).map_err(|e| {
        PluginError::new(
            ErrorCode::CORRUPT,
            format!("file list from member {from}: {e}"),
        )
    })
}

impl RsScheme {
    /// One round of the rebuild of what `lost` names: every row solved, the lost
    /// members' files and checksums written and checked. Collective.
    fn rebuild_round(
        &self,
        host: &Host<'_>,
        request: &RecoverRequest,
        given: &[FileMeta],
        lost: &Lost,
        red: &mut Option<RedReader>,
    ) -> PluginResult<Round> {
        let me = self.member;
        let dir = Path::new(request.dir.as_str());
        let plans = self.plans(lost)?;
        let header = red.as_ref().map(|r| r.header.clone());
        let mut failure = Failures::new();
        let known = self.exchange_lists(host, lost, header.as_ref(), given, dir, &mut failure)?;
        let chunk = self.agreed_chunk(host, header.as_ref(), given)?;

        let own_metas: Vec<FileMeta> = if lost.data[me as usize] {
            known
                .get(&me)
                .map(|v| v.iter().map(|m| m.to_meta(dir)).collect())
                .unwrap_or_default()
        } else {
            given.to_vec()
        };
        let mut io = RowIo {
            chunk,
            lofi: if lost.data[me as usize] {
                failure.note(LogicalFile::create_in(dir, &own_metas))
            } else {
                failure.note(LogicalFile::open(&own_metas))
            },
            red: red.take(),
            writer: if lost.red[me as usize] {
                failure.note(RedWriter::create(&self.red_path(dir)))
            } else {
                None
            },
        };
        self.solve_rows(host, &plans, lost, &mut io, &mut failure)?;

        let RowIo {
            lofi,
            writer,
            red: used,
            ..
        } = io;
        // every survivor's checksums were hashed as the rows read them (what the rows
        // did not need is read now): a damaged one voids the round on every member,
        // before anything written counts (the new redundancy file is never finished, a
        // lost member's written files go)
        *red = used;
        let damaged = red.as_mut().is_some_and(|r| {
            !lost.red[me as usize]
                && r.verify_rest()
                    .map_err(|e| {
                        host.log(
                            LogLevel::Warn,
                            &format!("RS: {e}; counted as lost and rebuilt"),
                        )
                    })
                    .is_err()
        });
        let damaged = gather_flags(host, damaged)?;
        if damaged.contains(&true) {
            drop(writer);
            if lost.data[me as usize] {
                drop(lofi);
                for m in &own_metas {
                    let _ = std::fs::remove_file(m.path.as_str());
                }
            }
            let bad = (0..self.lay.p).filter(|&m| damaged[m as usize]);
            return Ok(Round::Damaged(bad.collect()));
        }
        if lost.data[me as usize] {
            // the rebuilt files must match the size and CRC32 recorded for them, or the
            // rebuild fails on every member and nothing that looks recovered is left
            finish_rebuild(lofi, &own_metas, &mut failure);
        }
        if let (Some(w), true) = (writer, failure.is_empty()) {
            let files: BTreeMap<u32, Vec<StoredMeta>> = lost
                .needs(me)
                .into_iter()
                .map(|x| (x, known.get(&x).cloned().unwrap_or_default()))
                .collect();
            let header = RedHeader {
                chunk,
                files,
                sections: self.sections(chunk),
                ..RedHeader::for_member(SCHEME, request.dataset_id, host)?
            };
            failure.note(w.finish(header));
        }
        failure.agree(host, "RS rebuild")?;
        Ok(Round::Done(own_metas))
    }
}

/// How a round of the rebuild ended.
enum Round {
    /// Rebuilt and checked: this member's files.
    Done(Vec<FileMeta>),
    /// These members' checksums turned out damaged in the pass that read them.
    Damaged(Vec<u32>),
}

impl Scheme for RsScheme {
    fn describe(&self) -> PluginResult<SchemeDescription> {
        Ok(SchemeDescription {
            name: SCHEME.into(),
            tolerated_losses: self.lay.k,
            summary: format!(
                "Reed-Solomon over GF(2^8): {} checksum(s) per set of {}, {} KiB pieces",
                self.lay.k,
                self.lay.p,
                self.piece >> 10
            )
            .into(),
        })
    }

    fn apply(&self, host: &Host<'_>, dataset: &DatasetFiles) -> PluginResult<Vec<String>> {
        Ok(self.encode(host, dataset, false)?.0)
    }

    fn crc32_in_apply(&self) -> bool {
        true
    }

    fn apply_with_crc(&self, host: &Host<'_>, dataset: &DatasetFiles) -> PluginResult<Applied> {
        let (redundancy, crcs) = self.encode(host, dataset, true)?;
        Ok(Applied::with_crc(redundancy, crcs))
    }

    fn recover(&self, host: &Host<'_>, request: &RecoverRequest) -> PluginResult<Vec<FileMeta>> {
        if let Some(note) = scr_kernels::take_selection_note() {
            host.log(LogLevel::Warn, note);
        }
        self.check_host(host)?;
        let me = self.member;
        let dir = Path::new(request.dir.as_str());
        // the header is checked here; the payload in `losses` or in the rebuild's pass
        // over it: read once either way
        let mut red: Option<RedReader> = RedReader::open(&self.red_path(dir))
            .ok()
            .filter(|r| self.header_fits(&r.header, request.dataset_id, host));
        let given: Vec<FileMeta> = request
            .files
            .clone()
            .into_option()
            .unwrap_or_default()
            .into_vec();
        let Some(mut lost) = self.losses(host, request.files.is_some(), &given, &mut red)? else {
            return Ok(given);
        };
        // a survivor's checksums found damaged in the pass that read them void the
        // round; they then count as lost, and the rebuild runs again without them (at
        // most one round per member)
        loop {
            match self.rebuild_round(host, request, &given, &lost, &mut red)? {
                Round::Done(own) => return Ok(own),
                Round::Damaged(bad) => {
                    for m in bad {
                        lost.red[m as usize] = true;
                    }
                    if lost.red[me as usize] {
                        red = None;
                    }
                }
            }
        }
    }

    fn redundancy_files(&self, dataset: &DatasetFiles) -> PluginResult<Vec<String>> {
        Ok(vec![self
            .red_path(Path::new(dataset.dir.as_str()))
            .display()
            .to_string()])
    }

    /// Who verifies survivors: each survivor's data is verified (`verify_files`) before it
    /// feeds a rebuild, unless the host says it has just verified them
    /// (`Host::survivors_verified`).
    fn survivor_check(&self) -> scr_plugin::SurvivorCheck {
        scr_plugin::SurvivorCheck::Scheme
    }

    fn remove(&self, _host: &Host<'_>, dataset: &DatasetFiles) -> PluginResult<()> {
        redfile::remove(&self.red_path(Path::new(dataset.dir.as_str())))
    }
}

impl PluginLibrary for Rs {
    const NAME: &'static str = "scr-reed-solomon";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const SCHEMES: &'static [&'static str] = &["RS"];

    fn new_scheme(config: &SchemeConfig) -> PluginResult<Box<dyn Scheme>> {
        let params = Params::new("scheme RS", &config.params);
        params.only(PARAMS)?;
        let piece = params.u64_in("buffer_size", 1 << 20, 1..=(1 << 30))? as usize;
        let members = config.members.max(1);
        let k = params.u64_or("set_failures", u64::from(DEFAULT_FAILURES))?;
        let set_size = params.u64_or("set_size", DEFAULT_SET_SIZE)?;
        let k = checksums_for(members, k, set_size)?;
        Ok(Box::new(RsScheme::new(
            members,
            config.member,
            config.world_rank,
            k,
            piece,
        )?))
    }
}

scr_plugin::export_plugin!(Rs);

#[cfg(test)]
mod tests;
