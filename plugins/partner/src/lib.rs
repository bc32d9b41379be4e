//! The PARTNER redundancy scheme: full copies of each member's files on its `replicas`
//! right-hand neighbours in the set (which set formation places in other failure
//! groups). Each member's redundancy file holds the copies of its left-hand partners,
//! nearest first, with their metadata in the header; with `apply_with_crc` the first copy
//! hashes the bytes it reads, so the host needs no second read for the CRC32s. Any loss
//! that leaves one copy of every member's files is rebuilt: the lost members' files from
//! a partner's copy, then only the redundancy files that were lost, from their partners'
//! data, so the set is protected as before while every intact redundancy file stays as
//! it is.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
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
pub struct Partner;

const TAG: u32 = 23;
const PARAMS: &[&str] = &["set_size", "set_failures", "replicas", "buffer_size"];

/// One PARTNER instance for one member of one set.
pub struct PartnerScheme {
    members: u32,
    member: u32,
    world_rank: u32,
    replicas: u32,
    piece: usize,
}

impl PartnerScheme {
    /// An instance for member `member` (world rank `world_rank`) of a set of `members`,
    /// keeping `replicas` copies (at most `members - 1`), moving data in `piece` bytes.
    pub fn new(members: u32, member: u32, world_rank: u32, replicas: u32, piece: usize) -> Self {
        PartnerScheme {
            members,
            member,
            world_rank,
            replicas: replicas.min(members.saturating_sub(1)),
            piece: piece.max(1),
        }
    }

    fn red_path(&self, dir: &Path) -> PathBuf {
        redfile::member_file(dir, "PARTNER", self.world_rank, self.member, self.members)
    }

    fn check_host(&self, host: &Host<'_>) -> PluginResult<()> {
        host.check_place("PARTNER", self.member, self.members)
    }

    /// The apply: for each partner distance `d`, this member's data goes to its `d`-th
    /// right-hand partner while the `d`-th left-hand partner's data comes in (sizes are
    /// exchanged first, so every receive knows its length); the file metadata follows
    /// the data, because with `crc` its CRC32s are computed from the bytes this pass read
    /// (in the first copy; the others read the same bytes again). Returns the redundancy
    /// file written and, with `crc`, each data file's CRC32.
    fn encode(
        &self,
        host: &Host<'_>,
        dataset: &DatasetFiles,
        crc: bool,
    ) -> PluginResult<(Vec<String>, Vec<Option<u32>>)> {
        self.check_host(host)?;
        let me = self.member;
        let dir = Path::new(dataset.dir.as_str());
        let mut failure = Failures::new();
        let size: u64 = dataset.files.iter().map(|m| m.size).sum();
        let steps = host
            .all_reduce(size, ReduceOp::Max)?
            .div_ceil(self.piece as u64);

        let mut crcs = crc.then(|| FileCrcs::new(&dataset.files));
        let mut sections = BTreeMap::new();
        let mut lofi = failure.note(LogicalFile::open(&dataset.files));
        let mut writer = failure.note(RedWriter::create(&self.red_path(dir)));
        let mut out = vec![0u8; self.piece];
        let mut inc = vec![0u8; self.piece];
        for d in 1..=self.replicas {
            let from = host.left(d);
            let mut theirs = [0u8; 8];
            host.sendrecv(host.right(d), &size.to_le_bytes(), from, &mut theirs, TAG)?;
            let their_size = u64::from_le_bytes(theirs);
            sections.insert(
                from,
                (writer.as_ref().map_or(0, RedWriter::len), their_size),
            );
            for step in 0..steps {
                let s = piece_len(size, step, self.piece);
                let r = piece_len(their_size, step, self.piece);
                let at = step * self.piece as u64;
                if let Some(l) = lofi.as_mut() {
                    if failure.note(l.read_at(at, &mut out[..s])).is_some() && d == 1 {
                        if let Some(h) = crcs.as_mut() {
                            h.update(at, &out[..s]);
                        }
                    }
                }
                host.sendrecv(host.right(d), &out[..s], from, &mut inc[..r], TAG)?;
                if let Some(w) = writer.as_mut() {
                    failure.note(w.write(&inc[..r]));
                }
            }
        }
        let crcs = crcs.map(FileCrcs::finish).unwrap_or_default();
        let mine: Vec<StoredMeta> = failure
            .note(with_crcs(&dataset.files, &crcs))
            .unwrap_or_default()
            .iter()
            .map(|m| StoredMeta::from_meta(m, dir))
            .collect();
        let mine_json = serde_json::to_vec(&mine).expect("metadata serializes");
        let mut files: BTreeMap<u32, Vec<StoredMeta>> = BTreeMap::new();
        for d in 1..=self.replicas {
            let from = host.left(d);
            let theirs = sendrecv_bytes(host, host.right(d), &mine_json, from, TAG)?;
            let theirs: Vec<StoredMeta> = failure
                .note(unjson(&theirs).and_then(|t| same_size(t, from, &sections)))
                .unwrap_or_default();
            files.insert(from, theirs);
        }
        files.insert(me, mine);
        let mut written = None;
        if let (Some(w), true) = (writer, failure.is_empty()) {
            let header = RedHeader {
                files,
                sections,
                ..RedHeader::for_member("PARTNER", dataset.dataset_id, host)?
            };
            written = failure.note(w.finish(header));
        }
        failure.agree(host, "PARTNER apply")?;
        Ok((
            written
                .map(|p| vec![p.display().to_string()])
                .unwrap_or_default(),
            crcs,
        ))
    }

    /// Write again the redundancy file of every member that lost it (`red_lost`), from
    /// its partners' data, leaving every other member's redundancy file as it is: a
    /// survivor's copies of a rebuilt member are still exact, since the rebuilt files
    /// were checked against the CRC32s those copies carry. `own` is this member's files
    /// (rebuilt or verified). Collective; every member walks the same list of (lost
    /// file, partner) pairs in the same order, so each send meets its receive.
    fn reprotect(
        &self,
        host: &Host<'_>,
        dataset_id: u64,
        dir: &Path,
        own: &[FileMeta],
        red_lost: &[bool],
    ) -> PluginResult<()> {
        let n = self.members;
        let me = self.member;
        let mut failure = Failures::new();
        let mut writer = if red_lost[me as usize] {
            failure.note(RedWriter::create(&self.red_path(dir)))
        } else {
            None
        };
        let mut files: BTreeMap<u32, Vec<StoredMeta>> = BTreeMap::new();
        let mut sections = BTreeMap::new();
        let mut buf = vec![0u8; self.piece];
        for f in (0..n).filter(|&f| red_lost[f as usize]) {
            for d in 1..=self.replicas {
                let src = (f + n - d) % n;
                if me == src {
                    let mine: Vec<StoredMeta> =
                        own.iter().map(|m| StoredMeta::from_meta(m, dir)).collect();
                    let len: u64 = own.iter().map(|m| m.size).sum();
                    send_bytes(
                        host,
                        f,
                        TAG,
                        &serde_json::to_vec(&mine).expect("metadata serializes"),
                    )?;
                    host.send(f, TAG, &len.to_le_bytes())?;
                    let mut lofi = failure.note(LogicalFile::open(own));
                    for step in 0..len.div_ceil(self.piece as u64) {
                        let s = piece_len(len, step, self.piece);
                        let read = lofi
                            .as_mut()
                            .map(|l| l.read_at(step * self.piece as u64, &mut buf[..s]));
                        if read.is_none_or(|r| failure.note(r).is_none()) {
                            buf[..s].fill(0);
                        }
                        host.send(f, TAG, &buf[..s])?;
                    }
                } else if me == f {
                    let theirs = failure.note(recv_bytes(host, src, TAG).and_then(|b| unjson(&b)));
                    let mut len = [0u8; 8];
                    host.recv(src, TAG, &mut len)?;
                    let len = u64::from_le_bytes(len);
                    sections.insert(src, (writer.as_ref().map_or(0, RedWriter::len), len));
                    if let Some(t) = theirs {
                        files.insert(
                            src,
                            failure
                                .note(same_size(t, src, &sections))
                                .unwrap_or_default(),
                        );
                    }
                    for step in 0..len.div_ceil(self.piece as u64) {
                        let s = piece_len(len, step, self.piece);
                        host.recv(src, TAG, &mut buf[..s])?;
                        if let Some(w) = writer.as_mut() {
                            failure.note(w.write(&buf[..s]));
                        }
                    }
                }
            }
        }
        if let (Some(w), true) = (writer, failure.is_empty()) {
            files.insert(
                me,
                own.iter().map(|m| StoredMeta::from_meta(m, dir)).collect(),
            );
            let header = RedHeader {
                files,
                sections,
                ..RedHeader::for_member("PARTNER", dataset_id, host)?
            };
            failure.note(w.finish(header));
        }
        failure.agree(host, "PARTNER re-protection")
    }
}

/// `theirs`, the metadata partner `from` sent, if its sizes add up to the length of the
/// data it sent (recorded in `sections`): a header must describe the bytes it guards.
fn same_size(
    theirs: Vec<StoredMeta>,
    from: u32,
    sections: &BTreeMap<u32, (u64, u64)>,
) -> PluginResult<Vec<StoredMeta>> {
    let sent = sections.get(&from).map_or(0, |s| s.1);
    let described: u64 = theirs.iter().map(|m| m.size).sum();
    if described == sent {
        Ok(theirs)
    } else {
        Err(PluginError::new(
            ErrorCode::CORRUPT,
            format!("member {from} sent {sent} bytes but metadata for {described}"),
        ))
    }
}

fn unjson<T: serde::de::DeserializeOwned>(b: &[u8]) -> PluginResult<T> {
    serde_json::from_slice(b)
        .map_err(|e| PluginError::new(ErrorCode::CORRUPT, format!("metadata from a partner: {e}")))
}

fn piece_len(total: u64, step: u64, piece: usize) -> usize {
    total.saturating_sub(step * piece as u64).min(piece as u64) as usize
}

impl Scheme for PartnerScheme {
    fn describe(&self) -> PluginResult<SchemeDescription> {
        Ok(SchemeDescription {
            name: "PARTNER".into(),
            tolerated_losses: self.replicas,
            summary: format!(
                "{} full cop{} of each member's files on other members of a set of {}",
                self.replicas,
                if self.replicas == 1 { "y" } else { "ies" },
                self.members
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
        let mut red: Option<RedReader> = open_verified(&self.red_path(dir))
            .ok()
            .filter(|r| r.header.matches("PARTNER", request.dataset_id, n, me));
        let data_lost = gather_flags(host, request.files.is_none())?;
        let red_ok = gather_flags(host, red.is_some())?;
        if !data_lost.contains(&true) && !red_ok.contains(&false) {
            return Ok(request
                .files
                .clone()
                .into_option()
                .unwrap_or_default()
                .into_vec());
        }
        // Something is lost, so survivors' data will be copied again by the apply that
        // re-protects the set: a survivor whose files do not match their recorded size
        // and CRC32 counts as lost too (its copy on a partner is rebuilt in its place)
        // rather than spreading wrong bytes. Only paid when something is lost.
        let mine_bad = match &request.files {
            RSome(files) => verify_files(files)
                .map_err(|e| {
                    host.log(
                        LogLevel::Warn,
                        &format!("PARTNER: {e}; rebuilding this member from a partner's copy"),
                    );
                })
                .is_err(),
            RNone => false,
        };
        let data_lost = if host.all_agree(!mine_bad)? {
            data_lost
        } else {
            gather_flags(host, request.files.is_none() || mine_bad)?
        };
        // who can give each lost member its files back: its nearest partner whose
        // redundancy file checked out
        let mut providers = Vec::new();
        let mut orphans = Vec::new();
        for f in (0..n).filter(|&f| data_lost[f as usize]) {
            match (1..=self.replicas)
                .map(|d| (f + d) % n)
                .find(|&p| red_ok[p as usize])
            {
                Some(p) => providers.push((f, p)),
                None => orphans.push(f),
            }
        }
        if !orphans.is_empty() {
            return Err(PluginError::new(
                ErrorCode::UNRECOVERABLE,
                format!(
                    "members {orphans:?} of {n} lost their files and no partner holds an intact copy ({} cop{} kept)",
                    self.replicas,
                    if self.replicas == 1 { "y" } else { "ies" }
                ),
            ));
        }
        let mut failure = Failures::new();
        let mut rebuilt = None;
        let mut buf = vec![0u8; self.piece];
        for &(f, p) in &providers {
            if me == p {
                let r = red.as_mut().expect("a provider's file checked out");
                let metas = r.header.files.get(&f).cloned().unwrap_or_default();
                let (offset, len) = r.header.sections.get(&f).copied().unwrap_or((0, 0));
                send_bytes(
                    host,
                    f,
                    TAG,
                    &serde_json::to_vec(&metas).expect("serializes"),
                )?;
                for step in 0..len.div_ceil(self.piece as u64) {
                    let s = piece_len(len, step, self.piece);
                    if failure
                        .note(r.read_at(offset + step * self.piece as u64, &mut buf[..s]))
                        .is_none()
                    {
                        buf[..s].fill(0);
                    }
                    host.send(f, TAG, &buf[..s])?;
                }
            } else if me == f {
                let stored: Vec<StoredMeta> = failure
                    .note(recv_bytes(host, p, TAG).and_then(|b| unjson(&b)))
                    .unwrap_or_default();
                let metas: Vec<FileMeta> = stored.iter().map(|m| m.to_meta(dir)).collect();
                let len: u64 = metas.iter().map(|m| m.size).sum();
                let mut lofi = failure.note(LogicalFile::create(dir, &metas));
                for step in 0..len.div_ceil(self.piece as u64) {
                    let s = piece_len(len, step, self.piece);
                    host.recv(p, TAG, &mut buf[..s])?;
                    if let Some(l) = lofi.as_mut() {
                        failure.note(l.write_at(step * self.piece as u64, &buf[..s]));
                    }
                }
                if let Some(l) = lofi.as_mut() {
                    failure.note(l.sync());
                }
                drop(lofi);
                // never hand back bytes that differ from what the copy's metadata
                // records (size, CRC32): a wrong rebuild must fail, not look recovered
                if failure.is_empty() && failure.note(verify_files(&metas)).is_none() {
                    for m in &metas {
                        let _ = std::fs::remove_file(m.path.as_str());
                    }
                }
                for m in &metas {
                    if failure.is_empty() {
                        failure.note(restore_metadata(m));
                    }
                }
                rebuilt = Some(metas);
            }
        }
        failure.agree(host, "PARTNER rebuild")?;
        let files = rebuilt.unwrap_or_else(|| {
            request
                .files
                .clone()
                .into_option()
                .unwrap_or_default()
                .into_vec()
        });
        // only the redundancy files that were lost (or not trusted) are written again:
        // the survivors' copies are still exact, and the set is protected as before
        drop(red);
        let red_lost: Vec<bool> = red_ok.iter().map(|ok| !ok).collect();
        if red_lost.contains(&true) {
            self.reprotect(host, request.dataset_id, dir, &files, &red_lost)?;
        }
        Ok(files)
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

impl PluginLibrary for Partner {
    const NAME: &'static str = "scr-partner";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const SCHEMES: &'static [&'static str] = &["PARTNER"];

    fn new_scheme(config: &SchemeConfig) -> PluginResult<Box<dyn Scheme>> {
        let params = Params::new("scheme PARTNER", &config.params);
        params.only(PARAMS)?;
        let replicas = params.u64_in("replicas", 1, 1..=4095)? as u32;
        let piece = params.u64_in("buffer_size", 1 << 20, 1..=(1 << 30))? as usize;
        Ok(Box::new(PartnerScheme::new(
            config.members.max(1),
            config.member,
            config.world_rank,
            replicas,
            piece,
        )))
    }
}

scr_plugin::export_plugin!(Partner);
