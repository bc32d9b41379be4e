//! The PARTNER redundancy scheme: full copies of each member's files on its `replicas`
//! right-hand neighbours in the set (which set formation places in other failure
//! groups). Each member's redundancy file holds the copies of its left-hand partners,
//! nearest first, with their metadata in the header. Any loss that leaves one copy of
//! every member's files is rebuilt, and then every redundancy file is written again so
//! the set is protected as before.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use scr_plugin::collect::{gather_flags, recv_bytes, send_bytes, sendrecv_bytes, Failures};
use scr_plugin::lofi::{restore_metadata, LogicalFile};
use scr_plugin::redfile::{self, open_verified, RedHeader, RedReader, RedWriter, StoredMeta};
use scr_plugin::verify::verify_files;
use scr_plugin::{
    abi_stable::std_types::{RNone, RSome},
    DatasetFiles, ErrorCode, FileMeta, Host, LogLevel, Params, PluginError, PluginLibrary,
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
        self.check_host(host)?;
        let me = self.member;
        let dir = Path::new(dataset.dir.as_str());
        let mut failure = Failures::new();
        let mine: Vec<StoredMeta> = dataset
            .files
            .iter()
            .map(|m| StoredMeta::from_meta(m, dir))
            .collect();
        let size: u64 = mine.iter().map(|m| m.size).sum();
        let steps = host
            .all_reduce(size, ReduceOp::Max)?
            .div_ceil(self.piece as u64);
        let mine_json = serde_json::to_vec(&mine).expect("metadata serializes");

        let mut files: BTreeMap<u32, Vec<StoredMeta>> = BTreeMap::new();
        let mut sections = BTreeMap::new();
        let mut lofi = failure.note(LogicalFile::open(&dataset.files));
        let mut writer = failure.note(RedWriter::create(&self.red_path(dir)));
        let mut out = vec![0u8; self.piece];
        let mut inc = vec![0u8; self.piece];
        for d in 1..=self.replicas {
            let from = host.left(d);
            let theirs: Vec<StoredMeta> = failure
                .note(
                    sendrecv_bytes(host, host.right(d), &mine_json, from, TAG)
                        .and_then(|b| unjson(&b)),
                )
                .unwrap_or_default();
            let their_size: u64 = theirs.iter().map(|m| m.size).sum();
            sections.insert(
                from,
                (writer.as_ref().map_or(0, RedWriter::len), their_size),
            );
            files.insert(from, theirs);
            for step in 0..steps {
                let s = piece_len(size, step, self.piece);
                let r = piece_len(their_size, step, self.piece);
                if let Some(l) = lofi.as_mut() {
                    failure.note(l.read_at(step * self.piece as u64, &mut out[..s]));
                }
                host.sendrecv(host.right(d), &out[..s], from, &mut inc[..r], TAG)?;
                if let Some(w) = writer.as_mut() {
                    failure.note(w.write(&inc[..r]));
                }
            }
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
        Ok(written
            .map(|p| vec![p.display().to_string()])
            .unwrap_or_default())
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
        // every member's copies are written again, so the set is protected as before
        drop(red);
        self.apply(
            host,
            &DatasetFiles {
                dataset_id: request.dataset_id,
                dir: request.dir.clone(),
                files: files.clone().into(),
            },
        )?;
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
