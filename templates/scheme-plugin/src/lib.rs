//! MIRROR, an example redundancy scheme for scr-rs: every member of a redundancy set
//! keeps a full copy of its left neighbour's files in one redundancy file, so a set
//! survives the loss of any one member (its data, its redundancy file, or both).
//!
//! It is written to be copied: the streaming around the ring is
//! [`scr_plugin::ring::Ring`]'s, the redundancy file with its checksummed header is
//! [`scr_plugin::redfile`]'s, and what is left is the scheme's own logic. See the scr-rs
//! manual (`cargo doc -p scr-plugin --open`, module `scr_plugin::manual`).
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use scr_plugin::abi_stable::std_types::RSome;
use scr_plugin::collect::{gather_flags, recv_bytes, send_bytes, Failures};
use scr_plugin::lofi::LogicalFile;
use scr_plugin::redfile::{self, open_verified, RedHeader, RedReader, RedWriter, StoredMeta};
use scr_plugin::ring::{finish_rebuild, zeros, Ring};
use scr_plugin::verify::verify_files;
use scr_plugin::{
    DatasetFiles, ErrorCode, FileMeta, Host, LogLevel, Params, PluginError, PluginLibrary,
    PluginResult, RecoverRequest, Scheme, SchemeConfig, SchemeDescription,
};

/// EDIT: the scheme's name, as a `[[checkpoint]]` table's `type` names it.
const SCHEME: &str = "MIRROR";
/// The message tag of every message this scheme sends.
const TAG: u32 = 41;
/// Every scheme receives these four; MIRROR uses only `buffer_size`.
const PARAMS: &[&str] = &["set_size", "set_failures", "replicas", "buffer_size"];

/// The library: its identity and the schemes it provides.
pub struct Mirror;

impl PluginLibrary for Mirror {
    const NAME: &'static str = "mirror-scheme";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const SCHEMES: &'static [&'static str] = &[SCHEME];

    fn new_scheme(config: &SchemeConfig) -> PluginResult<Box<dyn Scheme>> {
        let params = Params::new("scheme MIRROR", &config.params);
        params.only(PARAMS)?;
        let piece = params.u64_in("buffer_size", 1 << 20, 1..=(1 << 30))? as usize;
        Ok(Box::new(MirrorScheme::new(
            config.members.max(1),
            config.member,
            config.world_rank,
            piece,
        )))
    }
}

scr_plugin::export_plugin!(Mirror);

/// One MIRROR instance: member `member` (world rank `world_rank`) of a set of
/// `members`, moving data `piece` bytes at a time.
pub struct MirrorScheme {
    members: u32,
    member: u32,
    world_rank: u32,
    piece: usize,
}

impl MirrorScheme {
    /// An instance for one member of one set.
    pub fn new(members: u32, member: u32, world_rank: u32, piece: usize) -> Self {
        MirrorScheme {
            members,
            member,
            world_rank,
            piece: piece.max(1),
        }
    }

    /// This member's redundancy file in the dataset directory.
    fn red_path(&self, dir: &Path) -> PathBuf {
        redfile::member_file(dir, SCHEME, self.world_rank, self.member, self.members)
    }

    /// Write this member's redundancy file: the left neighbour's bytes (streamed in
    /// while this member's go right), then a header with both members' file lists.
    /// Collective; the same outcome on every member.
    fn protect(
        &self,
        host: &Host<'_>,
        id: u64,
        dir: &Path,
        files: &[FileMeta],
    ) -> PluginResult<String> {
        host.check_place(SCHEME, self.member, self.members)?;
        let mut failure = Failures::new();
        let size: u64 = files.iter().map(|m| m.size).sum();
        let mut lofi = failure.note(LogicalFile::open(files));
        let mut writer = failure.note(RedWriter::create(&self.red_path(dir)));
        let mut ring = Ring::new(host, TAG, self.piece);
        let largest = ring.largest(size)?;
        // EDIT: the per-piece arithmetic; here a plain copy
        let left_size = ring.shift(
            1,
            size,
            largest,
            &mut failure,
            |at, buf| match lofi.as_mut() {
                Some(l) => l.read_at(at, buf),
                None => zeros(buf), // the open failed; its error is noted already
            },
            |_, bytes| writer.as_mut().map_or(Ok(()), |w| w.write(bytes)),
        )?;
        // the left neighbour's file list travels after its bytes
        let mine: Vec<StoredMeta> = files
            .iter()
            .map(|m| StoredMeta::from_meta(m, dir))
            .collect();
        let json = serde_json::to_vec(&mine).expect("metadata serializes");
        let got =
            scr_plugin::collect::sendrecv_bytes(host, host.right(1), &json, host.left(1), TAG)?;
        let left: Vec<StoredMeta> = failure.note(unjson(&got)).unwrap_or_default();
        let described: u64 = left.iter().map(|m| m.size).sum();
        if described != left_size {
            failure.note::<()>(Err(PluginError::new(
                ErrorCode::CORRUPT,
                format!(
                    "member {} sent {left_size} bytes but metadata for {described}",
                    host.left(1)
                ),
            )));
        }
        let mut written = None;
        if let (Some(w), true) = (writer, failure.is_empty()) {
            let header = RedHeader {
                files: BTreeMap::from([(self.member, mine), (host.left(1), left)]),
                ..RedHeader::for_member(SCHEME, id, host)?
            };
            written = failure.note(w.finish(header));
        }
        failure.agree(host, "MIRROR apply")?;
        Ok(written.expect("agreed").display().to_string())
    }

    /// Every member's "lost its data" and "lost its redundancy" flags, or `None` when
    /// nothing is lost (two all-reduces: the common path). When something is lost, a
    /// survivor whose files fail their size and CRC32 check counts as lost too.
    fn losses(
        &self,
        host: &Host<'_>,
        request: &RecoverRequest,
        red_ok: bool,
    ) -> PluginResult<Option<(Vec<bool>, Vec<bool>)>> {
        let data_lost = gather_flags(host, request.files.is_none())?;
        let red_lost = gather_flags(host, !red_ok)?;
        if !data_lost.contains(&true) && !red_lost.contains(&true) {
            return Ok(None);
        }
        let bad = match &request.files {
            RSome(files) => verify_files(files)
                .map_err(|e| host.log(LogLevel::Warn, &format!("MIRROR: {e}; counted as lost")))
                .is_err(),
            _ => false,
        };
        let data_lost = if host.all_agree(!bad)? {
            data_lost
        } else {
            gather_flags(host, request.files.is_none() || bad)?
        };
        Ok(Some((data_lost, red_lost)))
    }

    /// Give member `f` its files back from its right neighbour's copy: the file list,
    /// then the bytes. Returns the rebuilt files on `f`. Collective.
    fn rebuild(
        &self,
        host: &Host<'_>,
        dir: &Path,
        f: u32,
        red: Option<&mut RedReader>,
    ) -> PluginResult<Option<Vec<FileMeta>>> {
        let holder = (f + 1) % self.members;
        let mut failure = Failures::new();
        let mut ring = Ring::new(host, TAG, self.piece);
        let mut rebuilt = None;
        if self.member == holder {
            let r = red.expect("the holder's copy checked out");
            let list = r.header.files.get(&f).cloned().unwrap_or_default();
            let len: u64 = list.iter().map(|m| m.size).sum();
            send_bytes(
                host,
                f,
                TAG,
                &serde_json::to_vec(&list).expect("serializes"),
            )?;
            ring.send(f, len, &mut failure, |at, buf| r.read_at(at, buf))?;
        } else if self.member == f {
            let list: Vec<StoredMeta> = failure
                .note(recv_bytes(host, holder, TAG).and_then(|b| unjson(&b)))
                .unwrap_or_default();
            let metas: Vec<FileMeta> = list.iter().map(|m| m.to_meta(dir)).collect();
            let len: u64 = metas.iter().map(|m| m.size).sum();
            let mut lofi = failure.note(LogicalFile::create_in(dir, &metas));
            ring.recv(holder, len, &mut failure, |at, bytes| {
                lofi.as_mut().map_or(Ok(()), |l| l.write_at(at, bytes))
            })?;
            // checked against the size and CRC32 the copy recorded; deleted if wrong
            finish_rebuild(lofi, &metas, &mut failure);
            rebuilt = Some(metas);
        }
        failure.agree(host, "MIRROR rebuild")?;
        Ok(rebuilt)
    }
}

fn unjson(b: &[u8]) -> PluginResult<Vec<StoredMeta>> {
    serde_json::from_slice(b).map_err(|e| {
        PluginError::new(
            ErrorCode::CORRUPT,
            format!("file list from a neighbour: {e}"),
        )
    })
}

impl Scheme for MirrorScheme {
    fn describe(&self) -> PluginResult<SchemeDescription> {
        Ok(SchemeDescription {
            name: SCHEME.into(),
            tolerated_losses: u32::from(self.members > 1),
            summary: format!(
                "a copy of each member's files on its right neighbour, sets of {}",
                self.members
            )
            .into(),
        })
    }

    fn apply(&self, host: &Host<'_>, dataset: &DatasetFiles) -> PluginResult<Vec<String>> {
        let dir = Path::new(dataset.dir.as_str());
        Ok(vec![self.protect(
            host,
            dataset.dataset_id,
            dir,
            &dataset.files,
        )?])
    }

    fn recover(&self, host: &Host<'_>, request: &RecoverRequest) -> PluginResult<Vec<FileMeta>> {
        host.check_place(SCHEME, self.member, self.members)?;
        let (n, id) = (self.members, request.dataset_id);
        let dir = Path::new(request.dir.as_str());
        let mut red: Option<RedReader> = open_verified(&self.red_path(dir))
            .ok()
            .filter(|r| r.header.matches(SCHEME, id, n, self.member));
        let given = request
            .files
            .clone()
            .into_option()
            .unwrap_or_default()
            .into_vec();
        let Some((data_lost, red_lost)) = self.losses(host, request, red.is_some())? else {
            return Ok(given);
        };
        // a lost member's files are on its right neighbour only
        let lost: Vec<u32> = (0..n).filter(|&m| data_lost[m as usize]).collect();
        let orphans: Vec<u32> = lost
            .iter()
            .copied()
            .filter(|&f| red_lost[((f + 1) % n) as usize])
            .collect();
        if lost.len() > 1 || !orphans.is_empty() || n < 2 {
            return Err(PluginError::new(
                ErrorCode::UNRECOVERABLE,
                format!("members {lost:?} of {n} lost their files and MIRROR keeps one copy (of {orphans:?}, none is left)"),
            ));
        }
        let mut files = given;
        if let Some(&f) = lost.first() {
            if let Some(rebuilt) = self.rebuild(host, dir, f, red.as_mut())? {
                files = rebuilt;
            }
        }
        // protected again: every member writes its copy anew (simple, if not minimal)
        drop(red);
        self.protect(host, id, dir, &files)?;
        Ok(files)
    }

    fn redundancy_files(&self, dataset: &DatasetFiles) -> PluginResult<Vec<String>> {
        Ok(vec![self
            .red_path(Path::new(dataset.dir.as_str()))
            .display()
            .to_string()])
    }

    /// Who verifies survivors: each survivor's data is verified (`verify_files`) before it feeds a rebuild.
    fn survivor_check(&self) -> scr_plugin::SurvivorCheck {
        scr_plugin::SurvivorCheck::Scheme
    }

    fn remove(&self, _host: &Host<'_>, dataset: &DatasetFiles) -> PluginResult<()> {
        redfile::remove(&self.red_path(Path::new(dataset.dir.as_str())))
    }
}
