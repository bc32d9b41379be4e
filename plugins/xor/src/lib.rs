//! The XOR redundancy scheme (RAID-5 across the members of a redundancy set).
//!
//! Each member's files form one logical file, zero-padded to `n - 1` chunks of
//! `chunk = ceil(largest logical file in the set / (n - 1))` bytes. Member `i` treats its
//! logical file as `n` slots with an all-zero slot at position `i`; the parity of slot `j`
//! (the XOR of every member's slot `j`) is stored by member `j`. Apply computes it with a
//! pipelined ring reduce-scatter: in pieces of `buffer_size` bytes, each member receives
//! from its left neighbour and sends to its right, reading each data byte once and writing
//! each parity byte once. With `apply_with_crc` the same pass hashes each data byte as it
//! is read ([`FileCrcs`]), so the host needs no second read for the CRC32s. Each member's
//! file metadata (with those CRC32s) then goes into its right neighbour's redundancy-file
//! header. One lost member per set is rebuilt by a pipelined reduction along the ring to
//! it, which also restores its parity, so the set is protected again.
//!
//! An offline rebuild (`scr postrun`) needs every survivor's redundancy file: each lost
//! byte is the XOR of every survivor's slot, parity slots included, and the lost member's
//! metadata is in its right neighbour's header. So XOR keeps the defaults of
//! `Scheme::rebuild_sources` (`None`: every survivor) and `Scheme::recover_files`
//! (`recover`).
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

use scr_plugin::collect::{gather_flags, recv_bytes, send_bytes, sendrecv_bytes, Failures};
use scr_plugin::lofi::{with_crcs, FileCrcs, LogicalFile};
use scr_plugin::redfile::{self, RedHeader, RedReader, RedWriter, StoredMeta};
use scr_plugin::ring::{finish_rebuild, zeros, Ring};
use scr_plugin::verify::verify_files;
use scr_plugin::{
    abi_stable::std_types::{RNone, RSome},
    Applied, DatasetFiles, ErrorCode, FileMeta, Host, LogLevel, Params, PluginError, PluginLibrary,
    PluginResult, RecoverRequest, ReduceOp, Scheme, SchemeConfig, SchemeDescription,
};

/// The library's identity and the names it provides.
pub struct Xor;

const TAG: u32 = 17;
const PARAMS: &[&str] = &["set_size", "set_failures", "replicas", "buffer_size"];

/// One XOR instance for one member of one set.
pub struct XorScheme {
    members: u32,
    member: u32,
    world_rank: u32,
    piece: usize,
}

impl XorScheme {
    /// An instance for member `member` (world rank `world_rank`) of a set of `members`,
    /// working in pieces of `piece` bytes.
    pub fn new(members: u32, member: u32, world_rank: u32, piece: usize) -> Self {
        XorScheme {
            members,
            member,
            world_rank,
            piece: piece.max(1),
        }
    }

    fn red_path(&self, dir: &Path) -> PathBuf {
        redfile::member_file(dir, "XOR", self.world_rank, self.member, self.members)
    }

    fn check_host(&self, host: &Host<'_>) -> PluginResult<()> {
        host.check_place("XOR", self.member, self.members)
    }

    /// The apply: the ring reduce-scatter of the parity, then the exchange of file
    /// metadata with the neighbours (after the data, because with `crc` the CRC32s that
    /// go into the headers are computed from the bytes this pass reads). Returns the
    /// redundancy file written and, with `crc`, each data file's CRC32.
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
        let n = self.members;
        let me = self.member;
        let dir = Path::new(dataset.dir.as_str());
        let mut failure = Failures::new();
        let size: u64 = dataset.files.iter().map(|m| m.size).sum();
        let largest = host.all_reduce(size, ReduceOp::Max)?;
        let chunk = if n > 1 {
            largest.div_ceil(n as u64 - 1)
        } else {
            0
        };
        let mut crcs = crc.then(|| FileCrcs::new(&dataset.files));
        let mut lofi = failure.note(LogicalFile::open(&dataset.files));
        let mut writer = failure.note(RedWriter::create(&self.red_path(dir)));
        Ring::new(host, TAG, self.piece).reduce_scatter(
            chunk,
            &mut failure,
            |slot, offset, buf| match (chunk_of(me, slot), lofi.as_mut()) {
                (Some(c), Some(l)) => {
                    let at = c * chunk + offset;
                    l.read_at(at, buf)?;
                    // hashed as read, before the parity is folded in
                    if let Some(h) = crcs.as_mut() {
                        h.update(at, buf);
                    }
                    Ok(())
                }
                _ => zeros(buf),
            },
            scr_kernels::xor_into,
            |_, parity| writer.as_mut().map_or(Ok(()), |w| w.write(parity)),
        )?;
        let crcs = crcs.map(FileCrcs::finish).unwrap_or_default();
        let mine: Vec<StoredMeta> = failure
            .note(with_crcs(&dataset.files, &crcs))
            .unwrap_or_default()
            .iter()
            .map(|m| StoredMeta::from_meta(m, dir))
            .collect();
        let left_meta = sendrecv_bytes(host, host.right(1), &json(&mine), host.left(1), TAG)?;
        let left: Vec<StoredMeta> = failure.note(unjson(&left_meta)).unwrap_or_default();
        let mut written = None;
        if let (Some(w), true) = (writer, failure.is_empty()) {
            let header = RedHeader {
                chunk,
                files: [(me, mine), (host.left(1), left)].into_iter().collect(),
                ..RedHeader::for_member("XOR", dataset.dataset_id, host)?
            };
            written = failure.note(w.finish(header));
        }
        failure.agree(host, "XOR apply")?;
        Ok((
            written
                .map(|p| vec![p.display().to_string()])
                .unwrap_or_default(),
            crcs,
        ))
    }

    /// The one member whose data or redundancy is lost, or `None` when nothing is
    /// (the common case, one all-reduce). A rebuild reads every survivor's data: a
    /// survivor whose files do not match their recorded size and CRC32 would put wrong
    /// bytes into the lost member's files, so it counts as lost too (only checked when
    /// something is lost). `UNRECOVERABLE` on every member when more than one is lost.
    /// Collective.
    ///
    /// `red` is this member's redundancy file with its header checked. When nothing is
    /// lost by presence, every payload is checked here (no rebuild will read it, and a
    /// damaged one is rebuilt like a lost one); otherwise the rebuild checks each
    /// survivor's payload in the pass that reads it (`RedReader::verify_rest`).
    fn lost_member(
        &self,
        host: &Host<'_>,
        request: &RecoverRequest,
        red: &mut Option<RedReader>,
    ) -> PluginResult<Option<u32>> {
        let n = self.members;
        let data_ok = request.files.is_some();
        let mut lost = gather_flags(host, !(data_ok && red.is_some()))?;
        if !lost.contains(&true) {
            let bad = red.as_mut().is_some_and(|r| {
                r.verify_payload()
                    .map_err(|e| host.log(LogLevel::Warn, &format!("XOR: {e}; rebuilt")))
                    .is_err()
            });
            if host.all_agree(!bad)? {
                return Ok(None);
            }
            if bad {
                *red = None;
            }
            lost = gather_flags(host, !(data_ok && red.is_some()))?;
        }
        let red_ok = red.is_some();
        // the host's check already covered them when it says so: one read, not two
        let mine_bad = match &request.files {
            RSome(_) if host.survivors_verified() => false,
            RSome(files) => verify_files(files)
                .map_err(|e| host.log(LogLevel::Warn, &format!("XOR: {e}; counted as lost")))
                .is_err(),
            RNone => false,
        };
        if !host.all_agree(!mine_bad)? {
            lost = gather_flags(host, !(data_ok && !mine_bad && red_ok))?;
        }
        let lost_members: Vec<u32> = (0..n).filter(|&m| lost[m as usize]).collect();
        if lost_members.len() > 1 || n < 2 {
            return Err(PluginError::new(
                ErrorCode::UNRECOVERABLE,
                format!(
                    "members {lost_members:?} of {n} lost files and XOR rebuilds only one per set"
                ),
            ));
        }
        Ok(Some(lost_members[0]))
    }

    /// What lost member `f` needs to know, sent to it by its neighbours: its chunk size
    /// and its own files' metadata (kept by its right neighbour), and its left
    /// neighbour's (kept by that neighbour). Every other member gets the chunk size of
    /// its own `header`. Failures to decode are noted.
    fn info_for(
        &self,
        host: &Host<'_>,
        f: u32,
        header: Option<&RedHeader>,
        failure: &mut Failures,
    ) -> PluginResult<Info> {
        let (me, n) = (self.member, self.members);
        let (right, left) = ((f + 1) % n, (f + n - 1) % n);
        let files_of = |m: u32| {
            let h = header.expect("a survivor has a verified header");
            h.files.get(&m).cloned().unwrap_or_default()
        };
        if me == right {
            let info = Info {
                chunk: header.map_or(0, |h| h.chunk),
                own: files_of(f),
                left: if right == left {
                    files_of(me)
                } else {
                    Vec::new()
                },
            };
            send_bytes(host, f, TAG, &json(&info))?;
        }
        if me == left && left != right {
            send_bytes(host, f, TAG, &json(&files_of(me)))?;
        }
        let mut info = Info {
            chunk: header.map_or(0, |h| h.chunk),
            own: Vec::new(),
            left: Vec::new(),
        };
        if me == f {
            if let Some(i) =
                failure.note(recv_bytes(host, right, TAG).and_then(|b| unjson::<Info>(&b)))
            {
                info = i;
            }
            if left != right {
                if let Some(l) = failure.note(recv_bytes(host, left, TAG).and_then(|b| unjson(&b)))
                {
                    info.left = l;
                }
            }
        }
        Ok(info)
    }

    /// The rebuild of member `f` by a pipelined reduction along the ring to it:
    /// survivors read their data (or their parity, in their own slot), `f` writes what
    /// arrives into its files or its new redundancy file, checks the files against the
    /// metadata its neighbour kept and writes its redundancy header. Returns this
    /// member's files. Collective; failures are noted.
    fn rebuild(
        &self,
        host: &Host<'_>,
        request: &RecoverRequest,
        f: u32,
        info: &Info,
        mut red: Option<RedReader>,
        failure: &mut Failures,
    ) -> PluginResult<Vec<FileMeta>> {
        let me = self.member;
        let dir = Path::new(request.dir.as_str());
        let chunk = host.all_reduce(info.chunk, ReduceOp::Max)?;
        let own_metas: Vec<FileMeta> = if me == f {
            info.own.iter().map(|m| m.to_meta(dir)).collect()
        } else {
            given(request)
        };
        // survivors read from `data`, the lost member writes into `rebuilt`
        let (mut data, mut rebuilt, mut writer) = if me == f {
            let lofi = failure.note(LogicalFile::create_in(dir, &own_metas));
            (
                None,
                lofi,
                failure.note(RedWriter::create(&self.red_path(dir))),
            )
        } else {
            (failure.note(LogicalFile::open(&own_metas)), None, None)
        };
        Ring::new(host, TAG, self.piece).reduce_to(
            f,
            chunk,
            failure,
            |slot, offset, out| {
                let read = if slot == me {
                    red.as_mut().map(|r| r.read_at(offset, out))
                } else {
                    chunk_of(me, slot)
                        .and_then(|c| data.as_mut().map(|l| l.read_at(c * chunk + offset, out)))
                };
                read.unwrap_or_else(|| zeros(out))
            },
            scr_kernels::xor_into,
            |slot, offset, bytes| match chunk_of(f, slot) {
                Some(c) => rebuilt
                    .as_mut()
                    .map_or(Ok(()), |l| l.write_at(c * chunk + offset, bytes)),
                None => writer.as_mut().map_or(Ok(()), |w| w.write(bytes)),
            },
        )?;
        // each survivor's parity was hashed as the reduction read it: a damaged one
        // fails the rebuild on every member (through `failure`) before anything counts
        if let Some(r) = red.as_mut().filter(|_| me != f) {
            failure.note(r.verify_rest());
        }
        if me == f {
            // the rebuilt files must match the size and CRC32 the neighbour's header
            // recorded for them, or the rebuild fails on every member and nothing that
            // looks recovered is left behind
            finish_rebuild(rebuilt, &own_metas, failure);
            if let (Some(w), true) = (writer, failure.is_empty()) {
                let header = RedHeader {
                    chunk,
                    files: [(me, info.own.clone()), (host.left(1), info.left.clone())]
                        .into_iter()
                        .collect(),
                    ..RedHeader::for_member("XOR", request.dataset_id, host)?
                };
                failure.note(w.finish(header));
            }
        }
        Ok(own_metas)
    }
}

/// What a lost member needs to rebuild: its chunk size, its own files' metadata (kept
/// by its right neighbour) and its left neighbour's (for its new redundancy header).
#[derive(serde::Serialize, serde::Deserialize)]
struct Info {
    chunk: u64,
    own: Vec<StoredMeta>,
    left: Vec<StoredMeta>,
}

/// The files the host found for this member (none when it lost them).
fn given(request: &RecoverRequest) -> Vec<FileMeta> {
    request
        .files
        .clone()
        .into_option()
        .unwrap_or_default()
        .into_vec()
}

/// Which data chunk of member `i` sits in slot `j` (None: the zero slot).
fn chunk_of(i: u32, j: u32) -> Option<u64> {
    match j.cmp(&i) {
        std::cmp::Ordering::Less => Some(j as u64),
        std::cmp::Ordering::Equal => None,
        std::cmp::Ordering::Greater => Some(j as u64 - 1),
    }
}

fn json<T: serde::Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).expect("metadata serializes")
}

fn unjson<T: serde::de::DeserializeOwned>(b: &[u8]) -> PluginResult<T> {
    serde_json::from_slice(b).map_err(|e| {
        PluginError::new(
            ErrorCode::CORRUPT,
            format!("metadata from a neighbour: {e}"),
        )
    })
}

impl Scheme for XorScheme {
    fn describe(&self) -> PluginResult<SchemeDescription> {
        Ok(SchemeDescription {
            name: "XOR".into(),
            tolerated_losses: u32::from(self.members > 1),
            summary: format!(
                "XOR parity over {} member(s), {} KiB pieces",
                self.members,
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
        let dir = Path::new(request.dir.as_str());
        // the header is checked here, the payload in `lost_member` or in the rebuild's
        // pass over it: read once either way
        let mut red: Option<RedReader> = RedReader::open(&self.red_path(dir)).ok().filter(|r| {
            r.header
                .matches("XOR", request.dataset_id, self.members, self.member)
        });
        let Some(f) = self.lost_member(host, request, &mut red)? else {
            return Ok(given(request));
        };
        let mut failure = Failures::new();
        let header = red.as_ref().map(|r| r.header.clone());
        let info = self.info_for(host, f, header.as_ref(), &mut failure)?;
        let own = self.rebuild(host, request, f, &info, red, &mut failure)?;
        failure.agree(host, "XOR rebuild")?;
        Ok(own)
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

impl PluginLibrary for Xor {
    const NAME: &'static str = "scr-xor";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const SCHEMES: &'static [&'static str] = &["XOR"];

    fn new_scheme(config: &SchemeConfig) -> PluginResult<Box<dyn Scheme>> {
        let params = Params::new("scheme XOR", &config.params);
        params.only(PARAMS)?;
        let piece = params.u64_in("buffer_size", 1 << 20, 1..=(1 << 30))? as usize;
        Ok(Box::new(XorScheme::new(
            config.members.max(1),
            config.member,
            config.world_rank,
            piece,
        )))
    }
}

scr_plugin::export_plugin!(Xor);
