//! The PARTNER redundancy scheme: full copies of each member's files on its `replicas`
//! right-hand neighbours in the set (which set formation places in other failure
//! groups). Each member's redundancy file holds the copies of its left-hand partners,
//! nearest first, with their metadata in the header; with `apply_with_crc` the first copy
//! hashes the bytes it reads, so the host needs no second read for the CRC32s. Any loss
//! that leaves one copy of every member's files is rebuilt: the lost members' files from
//! a partner's copy, then only the redundancy files that were lost, from their partners'
//! data, so the set is protected as before while every intact redundancy file stays as
//! it is.
//!
//! An offline rebuild (`scr postrun`) needs less: `rebuild_sources` names, for each lost
//! member, only the nearest surviving partner holding its copy, and `recover_files`
//! rebuilds the lost members from those copies alone, writing no redundancy.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use scr_plugin::collect::{gather_flags, recv_bytes, send_bytes, sendrecv_bytes, Failures};
use scr_plugin::lofi::{with_crcs, FileCrcs, LogicalFile};
use scr_plugin::redfile::{self, RedHeader, RedReader, RedWriter, StoredMeta};
use scr_plugin::ring::{finish_rebuild, zeros, Ring};
use scr_plugin::verify::verify_files;
use scr_plugin::{
    abi_stable::std_types::{RNone, RSome},
    Applied, DatasetFiles, ErrorCode, FileMeta, Host, LogLevel, Params, PluginError, PluginLibrary,
    PluginResult, RecoverRequest, Scheme, SchemeConfig, SchemeDescription,
};

/// The library's identity and the names it provides.
pub struct Partner;

const TAG: u32 = 23;
const PARAMS: &[&str] = &["set_size", "set_failures", "replicas", "buffer_size"];

/// The set size when the descriptor gives none (SCR's `SET_SIZE` default, the host's).
pub const DEFAULT_SET_SIZE: u64 = 8;

/// Refuse `replicas` copies that not even a full set of `set_size` members can keep
/// (each copy goes to another member). A set smaller than `set_size`, because the job
/// spans too few failure groups for it, keeps `members - 1` copies instead, which its
/// description says and the host reports at init.
pub fn check_replicas(replicas: u32, set_size: u64) -> PluginResult<()> {
    if u64::from(replicas) >= set_size {
        return Err(PluginError::invalid_parameter(format!(
            "scheme PARTNER: replicas = {replicas} needs sets of at least {} members (each copy on another member), but set_size is {set_size}; lower replicas below {set_size} or raise set_size",
            u64::from(replicas) + 1
        )));
    }
    Ok(())
}

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
        let mut ring = Ring::new(host, TAG, self.piece);
        let largest = ring.largest(size)?;

        let mut crcs = crc.then(|| FileCrcs::new(&dataset.files));
        let mut sections = BTreeMap::new();
        let mut lofi = failure.note(LogicalFile::open(&dataset.files));
        let mut writer = failure.note(RedWriter::create(&self.red_path(dir)));
        for d in 1..=self.replicas {
            let start = writer.as_ref().map_or(0, RedWriter::len);
            let their_size = ring.shift(
                d,
                size,
                largest,
                &mut failure,
                |at, buf| match lofi.as_mut() {
                    Some(l) => {
                        l.read_at(at, buf)?;
                        // the first copy reads every byte once: hash it there
                        if let (1, Some(h)) = (d, crcs.as_mut()) {
                            h.update(at, buf);
                        }
                        Ok(())
                    }
                    None => zeros(buf),
                },
                |_, bytes| writer.as_mut().map_or(Ok(()), |w| w.write(bytes)),
            )?;
            sections.insert(host.left(d), (start, their_size));
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
        let mut ring = Ring::new(host, TAG, self.piece);
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
                    ring.send(f, len, &mut failure, |at, buf| match lofi.as_mut() {
                        Some(l) => l.read_at(at, buf),
                        None => zeros(buf),
                    })?;
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
                    ring.recv(src, len, &mut failure, |_, bytes| {
                        writer.as_mut().map_or(Ok(()), |w| w.write(bytes))
                    })?;
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

    /// Who lost what: every member's "lost its data" and "redundancy file checked out"
    /// flags, or `None` when nothing is lost (the common case, two all-reduces). When
    /// something is lost, survivors' data will be copied again by the apply that
    /// re-protects the set: a survivor whose files do not match their recorded size and
    /// CRC32 counts as lost too (its copy on a partner is rebuilt in its place) rather
    /// than spreading wrong bytes. Collective.
    ///
    /// `red` is this member's redundancy file with its header checked. When nothing is
    /// lost by presence every payload is checked here (a damaged one is written again);
    /// otherwise [`Self::restore_files`] checks each before or while it is read.
    fn losses(
        &self,
        host: &Host<'_>,
        request: &RecoverRequest,
        red: &mut Option<RedReader>,
    ) -> PluginResult<Option<(Vec<bool>, Vec<bool>)>> {
        let data_lost = gather_flags(host, request.files.is_none())?;
        let mut red_ok = gather_flags(host, red.is_some())?;
        if !data_lost.contains(&true) && !red_ok.contains(&false) {
            if host.all_agree(self.payload_ok(host, red))? {
                return Ok(None);
            }
            red_ok = gather_flags(host, red.is_some())?;
        }
        // the host's check already covered them when it says so: one read, not two
        let mine_bad = match &request.files {
            RSome(_) if host.survivors_verified() => false,
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
        Ok(Some((data_lost, red_ok)))
    }

    /// Who gives each lost member its files back: (lost member, its nearest partner
    /// whose redundancy file checked out); `UNRECOVERABLE` naming the members no partner
    /// holds an intact copy of. The same on every member (no messages).
    fn providers(&self, data_lost: &[bool], red_ok: &[bool]) -> PluginResult<Vec<(u32, u32)>> {
        let n = self.members;
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
        if orphans.is_empty() {
            Ok(providers)
        } else {
            Err(PluginError::new(
                ErrorCode::UNRECOVERABLE,
                format!(
                    "members {orphans:?} of {n} lost their files and no partner holds an intact copy ({} cop{} kept)",
                    self.replicas,
                    if self.replicas == 1 { "y" } else { "ies" }
                ),
            ))
        }
    }

    /// The first half of `recover`: this member's files, rebuilt from a partner's copy
    /// if it lost them, and every member's "redundancy file checked out" flag (all
    /// `true` when nothing was lost). Reads redundancy only from the providers, so a
    /// survivor's absent redundancy file is not needed unless it holds the nearest
    /// intact copy of a lost member. Collective.
    fn restore_files(
        &self,
        host: &Host<'_>,
        request: &RecoverRequest,
    ) -> PluginResult<(Vec<FileMeta>, Vec<bool>)> {
        self.check_host(host)?;
        let dir = Path::new(request.dir.as_str());
        // the header is checked here; the payload before the rebuild, or by a provider
        // in the pass that sends it: read once either way
        let mut red: Option<RedReader> = RedReader::open(&self.red_path(dir)).ok().filter(|r| {
            r.header
                .matches("PARTNER", request.dataset_id, self.members, self.member)
        });
        let given = || -> Vec<FileMeta> {
            request
                .files
                .clone()
                .into_option()
                .unwrap_or_default()
                .into_vec()
        };
        let Some((data_lost, mut red_ok)) = self.losses(host, request, &mut red)? else {
            return Ok((given(), vec![true; self.members as usize]));
        };
        // a provider found to hold a damaged copy only after sending it is no longer
        // trusted and the next nearest is asked: at most one round per member
        let me = self.member;
        let mut checked = false;
        loop {
            let providers = self.providers(&data_lost, &red_ok)?;
            // a survivor that sends nothing checks its payload now: its copy is what a
            // later loss would need, and a damaged one is written again
            let sends = providers.iter().any(|&(_, p)| p == me);
            let ok = sends || checked || self.payload_ok(host, &mut red);
            if !host.all_agree(ok)? {
                red_ok = gather_flags(host, red.is_some())?;
            }
            match self.rebuild(host, dir, red.as_mut(), &providers)? {
                Round::Done(files) => return Ok((files.unwrap_or_else(given), red_ok)),
                Round::Damaged(bad) => {
                    for p in bad {
                        red_ok[p as usize] = false;
                    }
                    if !red_ok[me as usize] {
                        red = None;
                    }
                    // every payload was checked in this round: before it, or as it was sent
                    checked = true;
                }
            }
        }
    }

    /// Whether this member's redundancy payload, if any, checks out (read whole); a
    /// damaged one is dropped from `red` and logged. Not collective.
    fn payload_ok(&self, host: &Host<'_>, red: &mut Option<RedReader>) -> bool {
        let bad = red.as_mut().is_some_and(|r| {
            r.verify_payload()
                .map_err(|e| {
                    host.log(
                        LogLevel::Warn,
                        &format!("PARTNER: {e}; its copies are written again"),
                    )
                })
                .is_err()
        });
        if bad {
            *red = None;
        }
        !bad
    }

    /// Copy each lost member's files back from its provider's redundancy file: the file
    /// list, then the bytes, streamed in pieces. Returns this member's rebuilt files if
    /// it lost them. Never hands back bytes that differ from what the copy's metadata
    /// records (size, CRC32): a wrong rebuild fails on every member, it does not look
    /// recovered. Collective.
    fn rebuild(
        &self,
        host: &Host<'_>,
        dir: &Path,
        mut red: Option<&mut RedReader>,
        providers: &[(u32, u32)],
    ) -> PluginResult<Round> {
        let me = self.member;
        let mut failure = Failures::new();
        let mut rebuilt = None;
        let mut ring = Ring::new(host, TAG, self.piece);
        for &(f, p) in providers {
            if me == p {
                let r = red.as_deref_mut().expect("a provider's header checked out");
                let metas = r.header.files.get(&f).cloned().unwrap_or_default();
                let (offset, len) = r.header.sections.get(&f).copied().unwrap_or((0, 0));
                send_bytes(
                    host,
                    f,
                    TAG,
                    &serde_json::to_vec(&metas).expect("serializes"),
                )?;
                ring.send(f, len, &mut failure, |at, buf| r.read_at(offset + at, buf))?;
            } else if me == f {
                let stored: Vec<StoredMeta> = failure
                    .note(recv_bytes(host, p, TAG).and_then(|b| unjson(&b)))
                    .unwrap_or_default();
                let metas: Vec<FileMeta> = stored.iter().map(|m| m.to_meta(dir)).collect();
                let len: u64 = metas.iter().map(|m| m.size).sum();
                let mut lofi = failure.note(LogicalFile::create_in(dir, &metas));
                ring.recv(p, len, &mut failure, |at, bytes| {
                    lofi.as_mut().map_or(Ok(()), |l| l.write_at(at, bytes))
                })?;
                finish_rebuild(lofi, &metas, &mut failure);
                rebuilt = Some(metas);
            }
        }
        // a provider's payload was hashed as it was sent (the rest of it is read now):
        // a damaged one voids the round on every member, and what its receivers wrote
        // goes, before anything counts
        let damaged = red.is_some_and(|r| {
            providers.iter().any(|&(_, p)| p == me)
                && r.verify_rest()
                    .map_err(|e| {
                        host.log(
                            LogLevel::Warn,
                            &format!("PARTNER: {e}; asking the next partner for its copy"),
                        )
                    })
                    .is_err()
        });
        let damaged = gather_flags(host, damaged)?;
        if damaged.contains(&true) {
            if let Some(metas) = &rebuilt {
                for m in metas {
                    let _ = std::fs::remove_file(m.path.as_str());
                }
            }
            let bad = (0..self.members).filter(|&m| damaged[m as usize]);
            return Ok(Round::Damaged(bad.collect()));
        }
        failure.agree(host, "PARTNER rebuild")?;
        Ok(Round::Done(rebuilt))
    }
}

/// How a round of copying lost members' files back from their partners ended.
enum Round {
    /// Every copy checked out: this member's rebuilt files if it lost them.
    Done(Option<Vec<FileMeta>>),
    /// These providers' payloads turned out damaged while they were sent.
    Damaged(Vec<u32>),
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
        let (files, red_ok) = self.restore_files(host, request)?;
        // only the redundancy files that were lost (or not trusted) are written again:
        // the survivors' copies are still exact, and the set is protected as before
        let red_lost: Vec<bool> = red_ok.iter().map(|ok| !ok).collect();
        if red_lost.contains(&true) {
            let dir = Path::new(request.dir.as_str());
            self.reprotect(host, request.dataset_id, dir, &files, &red_lost)?;
        }
        Ok(files)
    }

    /// For each lost member, its nearest surviving right-hand partner within `replicas`:
    /// the one whose redundancy file holds its copy and which `recover_files` reads it
    /// from (the nearest partner whose redundancy file checks out, see `providers`). A
    /// member no surviving partner holds a copy of adds no source; `recover_files` then
    /// fails with `unrecoverable`, the same as `recover`.
    fn rebuild_sources(&self, lost: &[u32]) -> Option<Vec<u32>> {
        let n = self.members;
        if lost.iter().any(|&m| m >= n) {
            return None; // not a loss of this set: claim nothing, the host copies all
        }
        let mut sources: Vec<u32> = lost
            .iter()
            .filter_map(|&f| {
                (1..=self.replicas)
                    .map(|d| (f + d) % n)
                    .find(|p| !lost.contains(p))
            })
            .collect();
        sources.sort_unstable();
        sources.dedup();
        Some(sources)
    }

    /// `recover` without the re-protection: a survivor whose redundancy file is absent
    /// (not named by `rebuild_sources`) is merely not a provider, and no redundancy file
    /// is written. What is read is checked as in `recover` (the providers' headers and
    /// payload, every survivor's data against its size and CRC32, every rebuilt file
    /// against the copy's metadata).
    fn recover_files(
        &self,
        host: &Host<'_>,
        request: &RecoverRequest,
    ) -> PluginResult<Vec<FileMeta>> {
        Ok(self.restore_files(host, request)?.0)
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

impl PluginLibrary for Partner {
    const NAME: &'static str = "scr-partner";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const SCHEMES: &'static [&'static str] = &["PARTNER"];

    fn new_scheme(config: &SchemeConfig) -> PluginResult<Box<dyn Scheme>> {
        let params = Params::new("scheme PARTNER", &config.params);
        params.only(PARAMS)?;
        let replicas = params.u64_in("replicas", 1, 1..=4095)? as u32;
        let set_size = params.u64_or("set_size", DEFAULT_SET_SIZE)?;
        check_replicas(replicas, set_size)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_a_full_set_cannot_keep_are_refused_and_a_small_set_keeps_what_it_can() {
        assert!(check_replicas(1, 8).is_ok() && check_replicas(7, 8).is_ok());
        let e = check_replicas(8, 8).unwrap_err();
        assert_eq!(e.code, ErrorCode::INVALID_PARAMETER);
        assert_eq!(
            e.message(),
            "scheme PARTNER: replicas = 8 needs sets of at least 9 members (each copy on another member), but set_size is 8; lower replicas below 8 or raise set_size"
        );
        // a set of 2 (a job on two nodes) keeps 1 of 3 copies, and says so
        let small = PartnerScheme::new(2, 0, 0, 3, 1024);
        assert_eq!(small.describe().unwrap().tolerated_losses, 1);
        let alone = PartnerScheme::new(1, 0, 0, 1, 1024);
        assert_eq!(alone.describe().unwrap().tolerated_losses, 0);
    }
}
