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
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

use scr_plugin::collect::{gather_flags, recv_bytes, send_bytes, sendrecv_bytes, Failures};
use scr_plugin::lofi::{restore_metadata, with_crcs, FileCrcs, LogicalFile};
use scr_plugin::redfile::{self, open_verified, RedHeader, RedReader, RedWriter, StoredMeta};
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
        if n > 1 {
            let mut send = vec![0u8; self.piece];
            let mut recv = vec![0u8; self.piece];
            let mut offset = 0u64;
            while offset < chunk {
                let p = (self.piece as u64).min(chunk - offset) as usize;
                for step in 1..n {
                    let slot = (me + n - step) % n;
                    let buf = &mut send[..p];
                    match (chunk_of(me, slot), lofi.as_mut()) {
                        (Some(c), Some(l)) => {
                            let at = c * chunk + offset;
                            if failure.note(l.read_at(at, buf)).is_some() {
                                // hashed as read, before the parity is folded in
                                if let Some(h) = crcs.as_mut() {
                                    h.update(at, buf);
                                }
                            } else {
                                buf.fill(0);
                            }
                        }
                        _ => buf.fill(0),
                    }
                    if step > 1 {
                        scr_kernels::xor_into(buf, &recv[..p]);
                    }
                    host.sendrecv(host.right(1), buf, host.left(1), &mut recv[..p], TAG)?;
                }
                if let Some(w) = writer.as_mut() {
                    failure.note(w.write(&recv[..p]));
                }
                offset += p as u64;
            }
        }
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
        self.check_host(host)?;
        let n = self.members;
        let me = self.member;
        let dir = Path::new(request.dir.as_str());
        let red: Option<RedReader> = open_verified(&self.red_path(dir))
            .ok()
            .filter(|r| r.header.matches("XOR", request.dataset_id, n, me));
        let data_ok = request.files.is_some();
        let mut lost = gather_flags(host, !(data_ok && red.is_some()))?;
        if !lost.contains(&true) {
            return Ok(request
                .files
                .clone()
                .into_option()
                .unwrap_or_default()
                .into_vec());
        }
        // A rebuild reads every survivor's data: a survivor whose files do not match
        // their recorded size and CRC32 would put wrong bytes into the lost member's
        // files, so it counts as lost too. Only paid when something is lost.
        let mine_bad = match &request.files {
            RSome(files) => verify_files(files)
                .map_err(|e| host.log(LogLevel::Warn, &format!("XOR: {e}; counted as lost")))
                .is_err(),
            RNone => false,
        };
        if !host.all_agree(!mine_bad)? {
            lost = gather_flags(host, !(data_ok && !mine_bad && red.is_some()))?;
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
        let f = lost_members[0];
        let (right, left) = ((f + 1) % n, (f + n - 1) % n);

        // what the lost member needs to know: its chunk size, its own files' metadata
        // (kept by its right neighbour) and its left neighbour's (kept by that neighbour)
        #[derive(serde::Serialize, serde::Deserialize)]
        struct Info {
            chunk: u64,
            own: Vec<StoredMeta>,
            left: Vec<StoredMeta>,
        }
        let mut failure = Failures::new();
        let header = red.as_ref().map(|r| r.header.clone());
        if me == right {
            let h = header.clone().expect("a survivor has a verified header");
            let info = Info {
                chunk: h.chunk,
                own: h.files.get(&f).cloned().unwrap_or_default(),
                left: if right == left {
                    h.files.get(&me).cloned().unwrap_or_default()
                } else {
                    Vec::new()
                },
            };
            send_bytes(host, f, TAG, &json(&info))?;
        }
        if me == left && left != right {
            let h = header.clone().expect("a survivor has a verified header");
            send_bytes(
                host,
                f,
                TAG,
                &json(&h.files.get(&me).cloned().unwrap_or_default()),
            )?;
        }
        let mut info = Info {
            chunk: header.as_ref().map_or(0, |h| h.chunk),
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
        let chunk = host.all_reduce(info.chunk, ReduceOp::Max)?;

        // survivors read their data (or parity in their own slot); the lost member
        // writes what the reduction delivers
        let own_metas: Vec<FileMeta> = if me == f {
            info.own.iter().map(|m| m.to_meta(dir)).collect()
        } else {
            request
                .files
                .clone()
                .into_option()
                .unwrap_or_default()
                .into_vec()
        };
        let mut lofi = if me == f {
            failure.note(LogicalFile::create(dir, &own_metas))
        } else {
            failure.note(LogicalFile::open(&own_metas))
        };
        let mut red = red;
        let mut writer = if me == f {
            failure.note(RedWriter::create(&self.red_path(dir)))
        } else {
            None
        };
        let k = (me + n - f) % n; // position along the chain f+1 .. f-1, f
        let mut buf = vec![0u8; self.piece];
        let mut incoming = vec![0u8; self.piece];
        let mut offset = 0u64;
        while offset < chunk {
            let p = (self.piece as u64).min(chunk - offset) as usize;
            for slot in 0..n {
                if me == f {
                    host.recv(left, TAG, &mut incoming[..p])?;
                    match chunk_of(f, slot) {
                        Some(c) => {
                            if let Some(l) = lofi.as_mut() {
                                failure.note(l.write_at(c * chunk + offset, &incoming[..p]));
                            }
                        }
                        None => {
                            if let Some(w) = writer.as_mut() {
                                failure.note(w.write(&incoming[..p]));
                            }
                        }
                    }
                    continue;
                }
                let out = &mut buf[..p];
                let read = if slot == me {
                    red.as_mut().map(|r| r.read_at(offset, out))
                } else {
                    chunk_of(me, slot)
                        .and_then(|c| lofi.as_mut().map(|l| l.read_at(c * chunk + offset, out)))
                };
                if read.is_some_and(|r| failure.note(r).is_none()) {
                    out.fill(0);
                }
                if k > 1 {
                    host.recv(host.left(1), TAG, &mut incoming[..p])?;
                    scr_kernels::xor_into(out, &incoming[..p]);
                }
                host.send(host.right(1), TAG, out)?;
            }
            offset += p as u64;
        }
        if me == f {
            if let Some(l) = lofi.as_mut() {
                failure.note(l.sync());
            }
            drop(lofi);
            // the rebuilt files must match the size and CRC32 the neighbour's header
            // recorded for them, or the rebuild fails on every member and nothing that
            // looks recovered is left behind
            if failure.is_empty() && failure.note(verify_files(&own_metas)).is_none() {
                for m in &own_metas {
                    let _ = std::fs::remove_file(m.path.as_str());
                }
            }
            for m in &own_metas {
                if failure.is_empty() {
                    failure.note(restore_metadata(m));
                }
            }
            if let (Some(w), true) = (writer, failure.is_empty()) {
                let header = RedHeader {
                    chunk,
                    files: [(me, info.own.clone()), (left, info.left.clone())]
                        .into_iter()
                        .collect(),
                    ..RedHeader::for_member("XOR", request.dataset_id, host)?
                };
                failure.note(w.finish(header));
            }
        }
        failure.agree(host, "XOR rebuild")?;
        Ok(own_metas)
    }

    fn redundancy_files(&self, dataset: &DatasetFiles) -> PluginResult<Vec<String>> {
        Ok(vec![self
            .red_path(Path::new(dataset.dir.as_str()))
            .display()
            .to_string()])
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
