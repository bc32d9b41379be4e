//! The redundancy descriptors in force in this run: for each, this rank's redundancy
//! set, its scheme loaded for that set and the set's host services; which descriptor a
//! dataset takes (SCR's rule: the largest interval dividing the checkpoint id); and the
//! failure-group lookups and set communicators that forming a set needs (also for the
//! sets of datasets an earlier run wrote, at restore).

use std::ops::Index;
use std::sync::Arc;
use std::time::Duration;

use scr_plugin::SurvivorCheck;

use super::collective::agree_on;
use super::topology::Topology;
use super::world::{SetHost, World};
use super::Funnel;
use super::{sets, OutputFlags, Result, ScrError, Set};
use crate::config::{settings, Config};
use crate::registry::{LoadedScheme, Registry};
use crate::state::filemap::DescriptorRecord;

/// How a background protection's thread reaches MPI (agreed across ranks; see
/// `output::background`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::runtime) enum Progress {
    /// Itself, on a host of its own (MPI at MPI_THREAD_MULTIPLE on every rank).
    Thread,
    /// Through the application's thread, at the library's calls (a funneled host).
    Calls,
    /// Not at all: over TCP connections of the set's own (`socket_host`), made at init
    /// (the foreground for the whole job where some set cannot make them, agreed) and
    /// again after a failed protection (`Calls` for that set where they cannot be then).
    Sockets,
}

/// A redundancy descriptor in force in this run.
pub(in crate::runtime) struct RedDesc {
    index: usize,
    interval: u64,
    /// Chosen for output datasets (`output = true`; SCR's `OUTPUT=1`).
    output: bool,
    record: DescriptorRecord,
    /// Shared with a background protection's thread (see `output::background`).
    scheme: Arc<LoadedScheme>,
    host: Box<dyn SetHost>,
    /// Whether its scheme runs in the background after complete_output
    /// (`protect_in_background`), and how that thread reaches MPI; the same on every rank.
    background: Option<Progress>,
    /// The host of the background thread, on a duplicate of the set's communicator made
    /// at the first background protection (collective over the set).
    background_host: Option<Arc<dyn SetHost>>,
    /// Whether the scheme hashes the files in its apply (`crc32_in_apply`) on every
    /// rank: agreed once here, not at each checkpoint (a scheme's answer is fixed).
    hashes_in_apply: bool,
    /// Whether the scheme tolerates no loss on every rank (`describe`; SINGLE): it keeps
    /// no redundancy data that could carry the files' CRC32s, so they may be computed
    /// in the background (see `deferred_crc`). Agreed once here, like `hashes_in_apply`.
    keeps_no_redundancy: bool,
}

impl RedDesc {
    /// Its datasets bypass the cache from now on (a shared file was routed into cache:
    /// see `complete_output`).
    fn bypass_from_now(&mut self) {
        self.record.bypass = true;
    }

    /// Its place in the configuration's list of descriptors.
    pub(in crate::runtime) fn index(&self) -> usize {
        self.index
    }

    /// Checkpoints whose id it divides take it (the largest such interval wins).
    pub(in crate::runtime) fn interval(&self) -> u64 {
        self.interval
    }

    /// What a dataset written with it records of it.
    pub(in crate::runtime) fn record(&self) -> &DescriptorRecord {
        &self.record
    }

    /// Its scheme, loaded for this rank's set.
    pub(in crate::runtime) fn scheme(&self) -> &LoadedScheme {
        &self.scheme
    }

    /// The host services of this rank's set.
    pub(in crate::runtime) fn host(&self) -> &dyn SetHost {
        &*self.host
    }

    /// Whether the scheme hashes the files in its apply, on every rank (agreed).
    pub(in crate::runtime) fn hashes_in_apply(&self) -> bool {
        self.hashes_in_apply
    }

    /// Whether the scheme tolerates no loss on every rank (agreed; see `deferred_crc`).
    pub(in crate::runtime) fn keeps_no_redundancy(&self) -> bool {
        self.keeps_no_redundancy
    }

    /// Whether its scheme is applied in the background (the same on every rank).
    pub(in crate::runtime) fn background(&self) -> bool {
        self.background.is_some()
    }

    /// The scheme and the host a background protection's thread uses, the host made at
    /// the first call (collective over the set: every member calls it at the same
    /// complete_output); in [`Progress::Calls`], its MPI calls go through `funnel`.
    fn background_parts(
        &mut self,
        funnel: &Arc<Funnel>,
        (me, timeout): (u32, std::time::Duration),
        injected: Option<&str>,
    ) -> (Arc<LoadedScheme>, Arc<dyn SetHost>) {
        if self.background_host.is_none() {
            let host: Arc<dyn SetHost> = match self.background {
                Some(Progress::Sockets) => {
                    match super::socket_host::connect(&*self.host, me, timeout, injected) {
                        Ok(h) => {
                            if self.host.rank() == 0 {
                                tracing::info!(
                                    "descriptor {} ({}): the redundancy set of world rank {me} connected its {} members again for the background protection",
                                    self.index,
                                    self.record.scheme,
                                    self.host.size()
                                );
                            }
                            Arc::new(h)
                        }
                        Err(e) => {
                            // (agreed in the set: every member falls back alike)
                            if self.host.rank() == 0 {
                                tracing::warn!(
                                    "descriptor {} ({}): the redundancy set of world rank {me} could not connect its members again for protect_below_multiple = sockets ({e}); its background protection hands its MPI calls to the application's thread instead (calls)",
                                    self.index, self.record.scheme
                                );
                            }
                            Arc::from(self.host.background(Some(funnel.clone())))
                        }
                    }
                }
                Some(Progress::Calls) => Arc::from(self.host.background(Some(funnel.clone()))),
                _ => Arc::from(self.host.background(None)),
            };
            self.background_host = Some(host);
        }
        let host = self.background_host.clone().expect("made above");
        (self.scheme.clone(), host)
    }
}

/// Whether and how descriptor `index` (`d`, which asks for `protect_in_background`) runs
/// its scheme in the background: a thread that calls MPI itself where every rank's MPI
/// allows it beside the application; below that, as `protect_below_multiple` says, inside
/// complete_output (`None`), a thread whose MPI calls the application's thread makes
/// at the library's calls, or a thread that calls no MPI (its set's own TCP
/// connections). Agreed (a rank initialised otherwise would leave the others'
/// threads waiting); rank 0 says which mode is in force and why.
fn background_progress(
    world: &dyn World,
    config: &Config,
    index: usize,
    d: &crate::config::Descriptor,
) -> Option<Progress> {
    let mine = world.concurrent_threads();
    let all = world.agree(mine.is_ok());
    let below_mode = config.get(settings::PROTECT_BELOW_MULTIPLE);
    if world.rank() == 0 {
        let scheme = &d.scheme.0;
        let why = match (&mine, all) {
            (_, true) => String::new(),
            (Err(why), false) => why.clone(),
            (Ok(()), false) => "MPI runs below MPI_THREAD_MULTIPLE on some rank".into(),
        };
        let below = &config.setting_of(settings::PROTECT_BELOW_MULTIPLE).origin;
        match (all, below_mode.as_str()) {
            (true, _) => tracing::info!(
                "descriptor {index} ({scheme}): protect_in_background = true: its scheme runs in a background thread after complete_output (MPI_THREAD_MULTIPLE)"
            ),
            (false, "sockets") => tracing::info!(
                "descriptor {index} ({scheme}): protect_in_background = true ({}); {why}, and protect_below_multiple = sockets ({below}): its scheme runs in a background thread after complete_output, which calls no MPI: each redundancy set's members exchange its data over TCP connections of the library's own, made now",
                d.background.1
            ),
            (false, "calls") => tracing::info!(
                "descriptor {index} ({scheme}): protect_in_background = true ({}); {why}, and protect_below_multiple = calls ({below}): its scheme runs in a background thread after complete_output, whose MPI calls the application's thread makes when it calls the library (SCR_Need_checkpoint each timestep lets it advance; what is left is finished at the next start_output, restart or finalize)",
                d.background.1
            ),
            (false, _) => tracing::warn!(
                "descriptor {index} ({scheme}): protect_in_background = true ({}), but {why}: its scheme runs inside complete_output (protect_below_multiple = foreground, {below}; `sockets` runs it in the background over the library's own connections)",
                d.background.1
            ),
        }
    }
    match (all, below_mode.as_str()) {
        (true, _) => Some(Progress::Thread),
        (false, "calls") => Some(Progress::Calls),
        (false, "sockets") => Some(Progress::Sockets),
        (false, _) => None,
    }
}

/// Connect the members of this rank's set (`host`'s) for descriptor `index`'s
/// background protection over sockets (collective over `world`): the socket host and
/// `Progress::Sockets` when every set connected, else (agreed) neither, the descriptor
/// then protecting inside complete_output, as below MPI_THREAD_MULTIPLE by default, and
/// rank 0 naming the first rank whose set could not (its log says why).
fn connect_at_init(
    world: &dyn World,
    (index, scheme): (usize, &str),
    host: &dyn SetHost,
    timeout: Duration,
    injected: Option<&str>,
) -> (Option<Progress>, Option<Arc<dyn SetHost>>) {
    let me = world.rank();
    let made = super::socket_host::connect(host, me, timeout, injected);
    // (the first rank that failed itself: the others of its set refuse after it)
    let failed = match &made {
        Ok(_) => false,
        Err(e) => e.own,
    };
    let first = world.min_u64(if failed { u64::from(me) } else { u64::MAX });
    let refused = !world.agree(made.is_ok());
    match made {
        Ok(h) if !refused => {
            if me == 0 {
                tracing::info!(
                    "descriptor {index} ({scheme}): the members of each redundancy set are connected for the background protection (protect_below_multiple = sockets)"
                );
            }
            (Some(Progress::Sockets), Some(Arc::new(h)))
        }
        _ => {
            if me == 0 {
                tracing::warn!(
                    "descriptor {index} ({scheme}): protect_below_multiple = sockets, but rank {first} could not connect the members of its redundancy set (its log says why): its scheme runs inside complete_output"
                );
            }
            (None, None)
        }
    }
}

/// Say (on rank 0) when the sets of some ranks tolerate fewer lost members under
/// descriptor `index` than a full set of `set_size` does (collective; `tolerated` is this
/// rank's set's, `full` the full set's): a set smaller than its scheme needs keeps what
/// it can (RS fewer checksums, PARTNER fewer copies, XOR none for a set of one) rather
/// than fail the job, and the admin must hear of it. When no set tolerates a loss
/// (`none_tolerate`, agreed) the descriptor protects nothing, and that is said instead,
/// with the reason (group WORLD, or a job on one failure group).
fn weaker_sets(
    world: &dyn World,
    index: usize,
    (scheme, group): (&str, &str),
    set_size: u32,
    (tolerated, full): (u32, u32),
    none_tolerate: bool,
) {
    let t = u64::from(tolerated);
    // (agreed: the same on every rank, so that the reductions below are made by all)
    let most = world.max_u64(t.max(u64::from(full)));
    let least = world.min_u64(t);
    if least >= most {
        return;
    }
    if none_tolerate {
        if world.rank() == 0 {
            tracing::warn!(
                "{}",
                crate::config::protects_nothing(index, scheme, group, set_size, most)
            );
        }
        return;
    }
    let me = u64::from(world.rank());
    let first = world.min_u64(if t < most { me } else { u64::MAX });
    let count = world.sum_u64(u64::from(t < most));
    if world.rank() == 0 {
        tracing::warn!(
            "descriptor {index} ({scheme}): the sets of {count} rank(s) (rank {first} the first) tolerate {least} lost member(s) where a full set of set_size = {set_size} tolerates {most}: they have fewer members than the scheme needs because the job spans too few failure groups for them (fewer nodes than set_size, or ranks spread unevenly over the nodes, as after spares took lost ranks beside others); their checkpoints are less protected"
        );
    }
}

/// The redundancy descriptors in force, in configuration order.
#[derive(Default)]
pub(in crate::runtime) struct Descriptors {
    list: Vec<RedDesc>,
}

impl Descriptors {
    /// The descriptors the configuration enables, each with this rank's redundancy set
    /// (formed so that no set holds two ranks of one failure group) and its scheme
    /// loaded for it (collective over `world`; every refusal agreed).
    pub(in crate::runtime) fn create(
        world: &dyn World,
        config: &Config,
        registry: &Registry,
        topo: &Topology,
        injected: Option<&str>,
    ) -> Result<Descriptors> {
        let mut list = Vec::new();
        for i in 0..config.checkpoints.len() {
            let d = config.descriptor(i);
            if !d.checkpoint.enabled {
                continue;
            }
            let value = agree_on(world, group_value(config, topo, &d.group.0))?;
            let (mine, comm, groups) = sets::form_my_set_in(
                world,
                &value,
                d.set_size() as usize,
                d.hop_distance.0 as usize,
            );
            let host = comm.set_host(mine.members.clone(), groups, topo.rank());
            let member = mine
                .members
                .iter()
                .position(|&m| m == topo.rank())
                .expect("a member of its own set") as u32;
            let scheme_config =
                d.scheme_config(config, mine.members.len() as u32, member, topo.rank());
            // a scheme may refuse one set (e.g. its size) but not another: agree first
            let scheme = agree_on(
                world,
                registry.new_scheme(&scheme_config).map_err(ScrError::from),
            )?;
            let record = DescriptorRecord {
                index: i,
                scheme: d.scheme.0.clone(),
                params: d
                    .params
                    .iter()
                    .map(|(k, v, _)| (k.clone(), v.clone()))
                    .collect(),
                group: d.group.0.clone(),
                store: d.store_path.clone(),
                set_id: mine.id,
                members: mine.members.clone(),
                bypass: d.bypass.0,
            };
            // agreed by every rank, whatever its own answer, so that every member of a
            // set makes the same call: whether it hashes in apply, and whether it
            // tolerates no loss (then it keeps no redundancy that could carry the CRC32s,
            // see `deferred_crc`); one reduction counts the ranks that say no to each
            let no_hash = u64::from(!scheme.raw().crc32_in_apply());
            let tolerated = scheme
                .raw()
                .describe()
                .into_result()
                .map(|d| d.tolerated_losses);
            let keeps_some = u64::from(!matches!(tolerated, Ok(0)));
            let noes = world.sum_u64(no_hash | keeps_some << 32);
            let hashes_in_apply = noes & 0xffff_ffff == 0;
            let keeps_no_redundancy = noes >> 32 == 0;
            // what a full set tolerates: the same scheme for a set of set_size members
            let full = registry
                .new_scheme(&d.scheme_config(config, d.set_size(), 0, topo.rank()))
                .ok()
                .and_then(|s| s.raw().describe().into_result().ok())
                .map_or(0, |desc| desc.tolerated_losses);
            weaker_sets(
                world,
                i,
                (&d.scheme.0, &d.group.0),
                d.set_size(),
                (tolerated.unwrap_or(0), full),
                keeps_no_redundancy,
            );
            if topo.rank() == 0 {
                tracing::debug!(
                    "descriptor {i}: {}",
                    survivor_contract(
                        &d.scheme.0,
                        scheme.raw().survivor_check(),
                        config.get(settings::CRC_ON_RESTART)
                    )
                );
            }
            // (a scheme that keeps no redundancy has nothing to do in the background: its
            // CRC32s are hashed there already, see `deferred_crc`)
            let background = (d.background.0 && !keeps_no_redundancy)
                .then(|| background_progress(world, config, i, &d))
                .flatten();
            let (background, background_host) = match background {
                Some(Progress::Sockets) => {
                    let timeout = Duration::from_secs(config.get(settings::ABORT_TIMEOUT));
                    connect_at_init(world, (i, &d.scheme.0), &*host, timeout, injected)
                }
                other => (other, None),
            };
            list.push(RedDesc {
                index: i,
                interval: d.checkpoint.interval,
                output: d.checkpoint.output,
                record,
                scheme: Arc::new(scheme),
                host,
                background,
                background_host,
                hashes_in_apply,
                keeps_no_redundancy,
            });
        }
        Ok(Descriptors { list })
    }

    /// The descriptor for a dataset, as SCR chooses it: an output dataset takes the first
    /// descriptor marked `output` when there is one; otherwise a checkpoint takes
    /// [`Descriptors::for_checkpoint`] its id, and other datasets the interval-1 descriptor.
    pub(in crate::runtime) fn for_dataset(
        &self,
        flags: OutputFlags,
        next_checkpoint: u64,
    ) -> usize {
        let marked = flags
            .output
            .then(|| self.list.iter().position(|d| d.output))
            .flatten();
        marked.unwrap_or_else(|| self.for_checkpoint(flags.checkpoint.then_some(next_checkpoint)))
    }

    /// The descriptor for checkpoint id `id`: the largest interval dividing it, the first
    /// of equal ones (as SCR), one not marked `output` before one that is (an output
    /// descriptor may share an interval with another; checkpoints take the other).
    pub(in crate::runtime) fn for_checkpoint(&self, checkpoint_id: Option<u64>) -> usize {
        let id = checkpoint_id.unwrap_or(1);
        self.list
            .iter()
            .enumerate()
            .filter(|(_, d)| id.is_multiple_of(d.interval))
            .min_by_key(|(i, d)| (std::cmp::Reverse(d.interval), d.output, *i))
            .map(|(i, _)| i)
            .expect("validation guarantees an interval-1 descriptor")
    }

    /// Build a set communicator and its host services for `set` (collective over world:
    /// every rank passes its own set and failure-group value, or `None` to take no
    /// part). The members' group values are gathered within the set: O(set size).
    pub(in crate::runtime) fn set_host(
        world: &dyn World,
        topo: &Topology,
        set: Option<&Set>,
        group: &str,
    ) -> Option<Box<dyn SetHost>> {
        // (a set id from a filemap or another rank's record that is no MPI color —
        // negative as an i32 — leaves this rank without a set: the caller's agreement
        // then refuses the dataset on every rank, where MPI would abort this rank alone)
        let set = set.filter(|s| i32::try_from(s.id).is_ok());
        let color = set.map(|s| s.id as u32);
        let key = set
            .and_then(|s| s.members.iter().position(|&m| m == topo.rank()))
            .unwrap_or(0) as u32;
        let comm = world.split(color, key)?;
        let set = set?;
        let groups = sets::gather_strings_in(&*comm, group);
        Some(comm.set_host(set.members.clone(), groups, topo.rank()))
    }

    /// The descriptors, in configuration order.
    pub(in crate::runtime) fn iter(&self) -> std::slice::Iter<'_, RedDesc> {
        self.list.iter()
    }

    /// How many are in force.
    pub(in crate::runtime) fn len(&self) -> usize {
        self.list.len()
    }
}

impl Descriptors {
    /// Descriptor `i`'s datasets bypass the cache from now on, on this rank (every rank
    /// calls it alike: the reason is agreed).
    pub(in crate::runtime) fn bypass_from_now(&mut self, i: usize) {
        self.list[i].bypass_from_now();
    }

    /// Descriptor `i`'s [`RedDesc::background_parts`] (collective over its set).
    pub(in crate::runtime) fn background_parts(
        &mut self,
        i: usize,
        funnel: &Arc<Funnel>,
        (me, timeout): (u32, std::time::Duration),
        injected: Option<&str>,
    ) -> (Arc<LoadedScheme>, Arc<dyn SetHost>) {
        self.list[i].background_parts(funnel, (me, timeout), injected)
    }

    /// Descriptor `i`'s background host is let go after a failed protection (on every
    /// member of the set alike: the failure is agreed in the set); the next protection
    /// makes a new one. A funneled host cannot replace its data communicator itself
    /// (see `MpiHost::settle`).
    pub(in crate::runtime) fn forget_background_host(&mut self, i: usize) {
        self.list[i].background_host = None;
    }
}

impl Index<usize> for Descriptors {
    type Output = RedDesc;

    fn index(&self, i: usize) -> &RedDesc {
        &self.list[i]
    }
}

/// This rank's failure-group value for group `name`.
pub(in crate::runtime) fn group_value(
    config: &Config,
    topo: &Topology,
    name: &str,
) -> Result<String> {
    config
        .failure_group(name, topo.node())
        .map_err(|e| ScrError::Usage(e.to_string()))
}

/// Which survivor-check contract a scheme declared, in words (for the logs). The host
/// checks survivors before `recover` under either (see `Restorer::check_cached`).
pub(in crate::runtime) fn survivor_contract(
    scheme: &str,
    check: SurvivorCheck,
    verified: bool,
) -> String {
    match (check, verified) {
        (SurvivorCheck::Host, _) => format!(
            "survivors are checked by the host before {scheme}'s recover; the scheme relies on that check (SurvivorCheck::Host)"
        ),
        (SurvivorCheck::Scheme, true) => format!(
            "survivors are checked by the host before {scheme}'s recover (size and CRC32), which tells the scheme so (survivors_verified): the scheme, which verifies survivors itself (SurvivorCheck::Scheme), need not read them again"
        ),
        (SurvivorCheck::Scheme, false) => format!(
            "survivors are checked by the host before {scheme}'s recover (size only: crc_on_restart is off), and again by the scheme, which verifies them itself (SurvivorCheck::Scheme)"
        ),
    }
}

#[cfg(test)]
mod survivor_contract_tests {
    use super::survivor_contract;
    use scr_plugin::SurvivorCheck;

    #[test]
    fn the_log_says_which_survivor_contract_is_in_force() {
        assert_eq!(
            survivor_contract("MIRROR", SurvivorCheck::Host, true),
            "survivors are checked by the host before MIRROR's recover; the scheme relies on that check (SurvivorCheck::Host)"
        );
        assert_eq!(
            survivor_contract("XOR", SurvivorCheck::Scheme, false),
            "survivors are checked by the host before XOR's recover (size only: crc_on_restart is off), and again by the scheme, which verifies them itself (SurvivorCheck::Scheme)"
        );
        assert_eq!(
            survivor_contract("XOR", SurvivorCheck::Scheme, true),
            "survivors are checked by the host before XOR's recover (size and CRC32), which tells the scheme so (survivors_verified): the scheme, which verifies survivors itself (SurvivorCheck::Scheme), need not read them again"
        );
    }
}
