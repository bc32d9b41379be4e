//! Online recovery: a job that loses a process goes on inside the same `mpiexec`.
//!
//! The job is started with `spares` processes more than the application needs. The
//! others run the application's body on the *application communicator* (ranks
//! `0..N-1`); the spares wait inside [`run`]. When a process is lost (ULFM, see
//! [`crate::runtime::ulfm`]) every survivor's library calls fail alike, the body returns,
//! and [`run`] repairs the job:
//!
//! 1. **agree**: every living process (the spares too, who were waiting there) takes part
//!    in one `MPIX_Comm_agree` on the team communicator: the application finished on
//!    every rank, it failed for a reason of its own (every rank returns that error), or a
//!    process was lost;
//! 2. **revoke and shrink** the team to the living processes;
//! 3. **assign**: the lost application ranks, lowest first, go to the spares: each to a
//!    spare on its own node where one is left (its node's cache, when the node survived,
//!    still holds its files: nothing to rebuild), the others to the remaining spares,
//!    lowest team rank first; every survivor keeps its rank. With no spare left the job shrinks
//!    (the survivors keep their order and are numbered densely) when the application
//!    allows it, else every process returns the same error;
//! 4. **agree** again that every living process got through; a process lost meanwhile
//!    starts the repair over (each pass needs one more loss, so the passes are bounded by
//!    the number of processes);
//! 5. split the new application communicator and run the body again: it initialises the
//!    runtime on it, whose init restores the cache (the replaced ranks' files are rebuilt
//!    from their redundancy sets onto the spares' nodes), and restarts through
//!    `have_restart` as after a relaunch.
//!
//! Without ULFM at run time (another MPI, or `mpiexec` without `--with-ft ulfm`) [`run`]
//! says once why online recovery is off and runs the body once; the spares wait for the
//! end, and a lost process ends the job as before.
//!
//! Where this differs from Fenix: the spares wait inside the library rather than in the
//! application's `Fenix_Init`; the body is a function called again (no `setjmp`), so the
//! application's state is whatever its restart reads, never memory kept across the
//! failure; the data come from files in node-local cache, rebuilt by the redundancy
//! scheme in force (any loss pattern it tolerates), not from in-memory copies.

use std::time::Instant;

use mpi::topology::{Color, SimpleCommunicator};
use mpi::traits::{Communicator as _, CommunicatorCollectives as _};

use crate::error::{Result, ScrError};
use crate::runtime::ulfm;

/// Recoveries this process went through (every [`run`] of it).
static RECOVERIES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// How many recoveries this process went through.
pub fn recoveries() -> u32 {
    RECOVERIES.load(std::sync::atomic::Ordering::SeqCst)
}

/// A team member's role: an application rank, or this.
const SPARE: u32 = u32::MAX;

/// How the job recovers.
#[derive(Clone, Debug)]
pub struct Options {
    /// Processes of the job kept as spares (the last ones by world rank).
    pub spares: u32,
    /// With no spare left, go on with fewer ranks (the application restarts on any
    /// number of ranks) rather than end.
    pub shrink: bool,
}

/// One run of the application's body.
#[derive(Clone, Debug, Default)]
pub struct Attempt {
    /// 0 for the first run, then one more after each recovery.
    pub number: u32,
    /// This process's rank on the application communicator.
    pub rank: u32,
    /// The application communicator's size.
    pub size: u32,
    /// The application ranks the last recovery gave to spares (empty at first).
    pub replaced: Vec<u32>,
    /// The ranks the last recovery lost.
    pub lost: Vec<u32>,
    /// The size before the last recovery, when it shrank the job.
    pub shrunk_from: Option<u32>,
    /// Spares left now.
    pub spares_left: u32,
    /// Seconds the last recovery took, from the first process that saw the loss to the
    /// new application communicator.
    pub recovery_seconds: f64,
}

/// How [`run`] ended on this process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finished {
    /// This process ran the application to its end (as an original rank or a spare that
    /// took a lost rank's place).
    Ran {
        /// Recoveries the job went through.
        recoveries: u32,
    },
    /// This process stayed a spare until the end.
    Spare {
        /// Recoveries the job went through.
        recoveries: u32,
    },
}

/// Bits of the agreement after a body (a bitwise AND over the living processes).
const NO_LOSS: u32 = 1;
const APP_OK: u32 = 2;

/// Run `body` on the application communicator, recovering from lost processes (see the
/// module doc). `body` returns `Ok` when the application finished, or the error its
/// library calls returned ([`ScrError::ProcessFailed`] after a loss). Collective over
/// `world`; every process returns alike.
pub fn run<F>(world: &SimpleCommunicator, options: &Options, mut body: F) -> Result<Finished>
where
    F: FnMut(&SimpleCommunicator, &Attempt) -> Result<()>,
{
    let (me, size) = (world.rank() as u32, world.size() as u32);
    if options.spares >= size {
        return Err(ScrError::Usage(format!(
            "spares = {} leaves no process for the application: the job has {size} processes; start it with more, or keep fewer spares",
            options.spares
        )));
    }
    // (the runtime is not initialised yet: its log lines start here)
    let _ = crate::log::init(crate::log::env_debug());
    let _log = crate::log::runtime_span(me).entered();
    let ulfm = match ulfm::status() {
        Ok(u) => Some(u),
        Err(why) => {
            if me == 0 {
                tracing::warn!("online recovery is off: {why}");
            }
            None
        }
    };
    // (the simulated node names, `node_names`, go by this index: see `ulfm`)
    ulfm::set_process_index(me);
    let mut team = world.duplicate();
    ulfm::watch(&team);
    let mut active = size - options.spares;
    let mut role = if me < active { me } else { SPARE };
    let node = node_key(me);
    // each application rank's node, for the spares' placement (empty: no preference)
    let mut placement = match ulfm {
        Some(_) => {
            let before = ulfm::failures();
            let mut pairs = vec![0u32; 2 * size as usize];
            team.all_gather_into(&[role, node][..], &mut pairs[..]);
            match ulfm::failures() == before {
                true => placement_of(&pairs, active),
                false => Vec::new(),
            }
        }
        None => Vec::new(),
    };
    let mut attempt = Attempt {
        size: active,
        spares_left: options.spares,
        ..Attempt::default()
    };
    loop {
        let before = ulfm::failures();
        let color = match role {
            SPARE => Color::undefined(),
            _ => Color::with_value(0),
        };
        let app = team.split_by_color_with_key(color, role.min(i32::MAX as u32) as i32);
        let split_failed = ulfm::failures() != before;
        let outcome = match (&app, split_failed) {
            (_, true) => Err(lost_error("forming the application communicator")),
            (Some(app), false) => {
                ulfm::watch(app);
                attempt.rank = role;
                attempt.size = active;
                body(app, &attempt)
            }
            (None, false) => Ok(()),
        };
        if let Some(app) = app {
            if split_failed {
                // (a failed split made nothing MPI holds)
                std::mem::forget(app);
            } else {
                ulfm::free(app);
            }
        }
        let Some(ulfm) = ulfm else {
            // no recovery: the spares waited for this barrier (a loss ends the job)
            team.barrier();
            ulfm::free(team);
            return match (outcome, role) {
                (Err(e), _) => Err(e),
                (Ok(()), SPARE) => Ok(Finished::Spare { recoveries: 0 }),
                (Ok(()), _) => Ok(Finished::Ran { recoveries: 0 }),
            };
        };
        let lost_here = ulfm::lost() || matches!(outcome, Err(ScrError::ProcessFailed(_)));
        let own_error = match &outcome {
            Err(e) if !lost_here => Some(e.to_string()),
            _ => None,
        };
        let mut flag = 0;
        if !lost_here {
            flag |= NO_LOSS;
        }
        if own_error.is_none() {
            flag |= APP_OK;
        }
        let (rc, agreed) = ulfm.agree(&team, flag);
        let loss = rc != 0 || agreed & NO_LOSS == 0;
        if !loss {
            ulfm::free(team);
            if agreed & APP_OK == 0 {
                return Err(match own_error {
                    Some(e) => ScrError::Collective(e),
                    None => ScrError::Collective(
                        "the application failed on another rank (see its error there)".into(),
                    ),
                });
            }
            return Ok(match role {
                SPARE => Finished::Spare {
                    recoveries: attempt.number,
                },
                _ => Finished::Ran {
                    recoveries: attempt.number,
                },
            });
        }
        let started = Instant::now();
        let lost_at = ulfm::lost_at_ms();
        let repaired = match repair(ulfm, &mut team, [role, node], active, &placement, options) {
            Ok(r) => r,
            Err(e) => {
                // (never left watched once this returns: a later revoke would reach it)
                ulfm::free(team);
                return Err(e);
            }
        };
        if repaired.team_rank == 0 {
            tracing::warn!(
                "recovered from the loss of rank(s) {:?} in {:.3} s: {}",
                repaired.lost,
                started.elapsed().as_secs_f64(),
                if repaired.replaced.is_empty() {
                    format!("the job goes on with {} ranks", repaired.active)
                } else {
                    format!(
                        "spares took rank(s) {:?}; {} spare(s) left",
                        repaired.replaced, repaired.spares_left
                    )
                }
            );
        }
        ulfm::clear_lost();
        RECOVERIES.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        attempt = Attempt {
            number: attempt.number + 1,
            rank: repaired.role,
            size: repaired.active,
            replaced: repaired.replaced,
            lost: repaired.lost,
            shrunk_from: (repaired.active < active).then_some(active),
            spares_left: repaired.spares_left,
            recovery_seconds: match lost_at {
                0 => started.elapsed().as_secs_f64(),
                t => now_ms.saturating_sub(t) as f64 / 1000.0,
            },
        };
        role = repaired.role;
        active = repaired.active;
        placement = repaired.placement;
    }
}

/// This process's node as a number (a hash of its name: node_names from the environment
/// by process index, else the host name, as the runtime names nodes). Two nodes hashing
/// alike only cost a spare's placement, never correctness.
fn node_key(process: u32) -> u32 {
    let simulated = std::env::var("SCR_NODE_NAMES").ok().and_then(|names| {
        names
            .split(',')
            .nth(process as usize)
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty())
    });
    let name = simulated.unwrap_or_else(crate::launch::nodes::this_host);
    crc32fast::hash(name.as_bytes())
}

/// Each application rank's node (`active` entries) from every process's `[role, node]`.
fn placement_of(pairs: &[u32], active: u32) -> Vec<u32> {
    let mut placement = vec![0u32; active as usize];
    for pair in pairs.chunks_exact(2) {
        if let Some(slot) = placement.get_mut(pair[0] as usize) {
            *slot = pair[1];
        }
    }
    placement
}

/// What a repair decided, the same on every living process.
struct Repaired {
    /// This process's new role.
    role: u32,
    /// Application ranks now.
    active: u32,
    /// The ranks lost, and those of them spares took.
    lost: Vec<u32>,
    replaced: Vec<u32>,
    spares_left: u32,
    /// This process's rank in the repaired team.
    team_rank: u32,
    /// Each application rank's node now.
    placement: Vec<u32>,
}

/// Revoke, shrink and assign (steps 2 to 4 of the module doc), until one pass gets
/// through without another loss.
fn repair(
    ulfm: &ulfm::Ulfm,
    team: &mut SimpleCommunicator,
    role_and_node: [u32; 2],
    active: u32,
    placement: &[u32],
    options: &Options,
) -> Result<Repaired> {
    let passes = team.size().max(1) as u32;
    for _ in 0..passes {
        ulfm.revoke(team);
        let shrunk = match ulfm.shrink(team) {
            Ok(c) => c,
            Err(rc) => {
                tracing::warn!(
                    "repair: shrinking the job failed ({}); again",
                    ulfm::error_string(rc)
                );
                continue;
            }
        };
        ulfm::watch(&shrunk);
        // (the revoked team is left to MPI: see `ulfm::free`)
        ulfm::free(std::mem::replace(team, shrunk));
        let before = ulfm::failures();
        let mut pairs = vec![0u32; 2 * team.size() as usize];
        team.all_gather_into(&role_and_node[..], &mut pairs[..]);
        if ulfm::failures() != before {
            continue;
        }
        let roles: Vec<u32> = pairs.iter().step_by(2).copied().collect();
        let nodes: Vec<u32> = pairs.iter().skip(1).step_by(2).copied().collect();
        let decided = assign(&roles, &nodes, placement, active, options);
        if let Err(e) = &decided {
            // every living process says it before any of them returns (the agreement
            // below): the job may end as soon as one process exits
            tracing::error!("{e}");
        }
        let me = team.rank() as usize;
        let (rc, ok) = ulfm.agree(team, 1);
        if rc != 0 || ok != 1 || ulfm::failures() != before {
            continue;
        }
        return match decided {
            Ok((new_roles, active, lost, replaced)) => {
                let now: Vec<u32> = new_roles
                    .iter()
                    .zip(&nodes)
                    .flat_map(|(&r, &n)| [r, n])
                    .collect();
                Ok(Repaired {
                    role: new_roles[me],
                    active,
                    spares_left: new_roles.iter().filter(|&&r| r == SPARE).count() as u32,
                    lost,
                    replaced,
                    team_rank: me as u32,
                    placement: placement_of(&now, active),
                })
            }
            Err(e) => Err(e),
        };
    }
    Err(ScrError::ProcessFailed(format!(
        "the job lost a process during each of {passes} attempts to recover; giving up"
    )))
}

/// The new roles of the living processes (`roles`: each one's role before, `nodes`:
/// each one's node), the new number of application ranks, the ranks lost and those of
/// them given to spares. `placement` is each application rank's node before the loss
/// (empty when unknown): a lost rank goes to a spare on its node where one is left.
#[allow(clippy::type_complexity)]
fn assign(
    roles: &[u32],
    nodes: &[u32],
    placement: &[u32],
    active: u32,
    options: &Options,
) -> Result<(Vec<u32>, u32, Vec<u32>, Vec<u32>)> {
    let present: std::collections::BTreeSet<u32> =
        roles.iter().copied().filter(|&r| r != SPARE).collect();
    let lost: Vec<u32> = (0..active).filter(|r| !present.contains(r)).collect();
    let mut new_roles = roles.to_vec();
    let mut spares: Vec<usize> = (0..roles.len()).filter(|&i| roles[i] == SPARE).collect();
    let spare_count = spares.len();
    let replaced: Vec<u32> = lost.iter().copied().take(spare_count).collect();
    let mut unplaced = Vec::new();
    for &rank in &replaced {
        let home = placement.get(rank as usize);
        match spares.iter().position(|&i| Some(&nodes[i]) == home) {
            Some(k) => new_roles[spares.remove(k)] = rank,
            None => unplaced.push(rank),
        }
    }
    for (slot, rank) in spares.into_iter().zip(unplaced) {
        new_roles[slot] = rank;
    }
    if replaced.len() == lost.len() {
        return Ok((new_roles, active, lost, replaced));
    }
    if !options.shrink {
        return Err(ScrError::ProcessFailed(format!(
            "lost rank(s) {lost:?} with {spare_count} spare(s) left, and the application does not go on with fewer ranks; ending the job"
        )));
    }
    // no spare left for the rest: the application ranks keep their order, numbered densely
    let mut order: Vec<usize> = (0..new_roles.len())
        .filter(|&i| new_roles[i] != SPARE)
        .collect();
    order.sort_by_key(|&i| new_roles[i]);
    let count = order.len() as u32;
    for (new, i) in order.into_iter().enumerate() {
        new_roles[i] = new as u32;
    }
    Ok((new_roles, count, lost, replaced))
}

fn lost_error(during: &str) -> ScrError {
    ScrError::ProcessFailed(format!(
        "{during}: a process of the job was lost ({})",
        ulfm::error_string(ulfm::lost_code())
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(spares: u32, shrink: bool) -> Options {
        Options { spares, shrink }
    }

    #[test]
    fn spares_take_the_lost_ranks_lowest_first_and_survivors_keep_theirs() {
        // 4 application ranks, rank 1 and 3 lost; two spares at team ranks 3 and 4
        let roles = [0, 2, SPARE, SPARE];
        let (new, active, lost, replaced) =
            assign(&roles, &[0; 4], &[], 4, &opts(2, false)).unwrap();
        assert_eq!(lost, vec![1, 3]);
        assert_eq!(replaced, vec![1, 3]);
        assert_eq!(new, vec![0, 2, 1, 3]);
        assert_eq!(active, 4);
    }

    #[test]
    fn with_too_few_spares_the_job_shrinks_densely_or_ends_alike() {
        let roles = [0, 3, SPARE];
        let (new, active, lost, replaced) =
            assign(&roles, &[0; 3], &[], 4, &opts(1, true)).unwrap();
        assert_eq!(lost, vec![1, 2]);
        assert_eq!(replaced, vec![1]);
        // ranks 0, 3 and the spare (now 1) keep their order: 0, 2, 1
        assert_eq!(new, vec![0, 2, 1]);
        assert_eq!(active, 3);
        let e = assign(&roles, &[0; 3], &[], 4, &opts(1, false))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("lost rank(s) [1, 2] with 1 spare(s) left"),
            "{e}"
        );
    }

    #[test]
    fn a_lost_rank_goes_to_a_spare_on_its_own_node_where_one_is_left() {
        // ranks 0..4 on nodes 10, 10, 11, 11; spares on nodes 12 (team rank 2) and 11
        // (team rank 3); rank 2 lost alone, then ranks 2 and 3 (node 11) together
        let placement = [10, 10, 11, 11];
        let roles = [0, 1, SPARE, SPARE, 3];
        let nodes = [10, 10, 12, 11, 11];
        let (new, _, lost, replaced) =
            assign(&roles, &nodes, &placement, 4, &opts(2, false)).unwrap();
        assert_eq!((lost, replaced), (vec![2], vec![2]));
        assert_eq!(
            new,
            vec![0, 1, SPARE, 2, 3],
            "the spare on node 11 took rank 2"
        );
        let roles = [0, 1, SPARE, SPARE];
        let nodes = [10, 10, 12, 11];
        let (new, _, _, replaced) = assign(&roles, &nodes, &placement, 4, &opts(2, false)).unwrap();
        assert_eq!(replaced, vec![2, 3]);
        // rank 2 (lowest) takes node 11's spare; rank 3 the other
        assert_eq!(new, vec![0, 1, 3, 2]);
        // without a placement, lowest spare first as before
        let (new, _, _, _) = assign(&roles, &nodes, &[], 4, &opts(2, false)).unwrap();
        assert_eq!(new, vec![0, 1, 2, 3]);
    }

    #[test]
    fn a_loss_of_only_a_spare_changes_no_rank() {
        let roles = [0, 1, 2, SPARE];
        let (new, active, lost, replaced) =
            assign(&roles, &[0; 4], &[], 3, &opts(2, false)).unwrap();
        assert!(lost.is_empty() && replaced.is_empty());
        assert_eq!((new, active), (vec![0, 1, 2, SPARE], 3));
    }
}
