//! What a configuration means in practice: `scr config explain --checkpoint N` renders the
//! effective checkpoint descriptor for a checkpoint id (resolved by
//! [`Config::descriptor`]), with every value's origin, the redundancy sets a job of a given
//! layout forms, and what the scheme's plugin says about them.

use std::fmt::Write as _;

use crate::config::{settings, Checkpoint, Config, Descriptor};
use crate::registry::{Kind, Registry, RegistryError};

/// Where a job's ranks run, for the sets `explain` shows: the node of each world rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobLayout {
    /// `nodes[r]` is the node of world rank r.
    pub nodes: Vec<String>,
    /// Where the layout came from, for the explanation (`--ranks 8 --ranks-per-node 2`).
    pub source: String,
}

impl JobLayout {
    /// `ranks` ranks, `per_node` consecutive ranks per node (`node0`, `node1`, ...), as a
    /// block-placing launcher does.
    pub fn uniform(ranks: u32, per_node: u32) -> JobLayout {
        let per_node = per_node.max(1);
        JobLayout {
            nodes: (0..ranks)
                .map(|r| format!("node{}", r / per_node))
                .collect(),
            source: format!("--ranks {ranks} --ranks-per-node {per_node}"),
        }
    }

    /// The simulated nodes of `node_names` (one name per rank), when set.
    pub fn from_node_names(config: &Config) -> Option<JobLayout> {
        let names = config.get(settings::NODE_NAMES);
        (!names.is_empty()).then(|| JobLayout {
            nodes: names.split(',').map(|n| n.trim().to_string()).collect(),
            source: format!(
                "node_names ({})",
                config.setting_of(settings::NODE_NAMES).origin
            ),
        })
    }
}

/// The `sets:` line and the set sizes a job of `layout` forms for descriptor `d` (the
/// runtime's own formation, [`form_sets`](crate::runtime::sets::form_sets)), so the scheme
/// is described for the sets that really form — `set_size` is a minimum, and a job on
/// fewer failure groups than that forms smaller sets.
fn job_sets(config: &Config, d: &Descriptor<'_>, layout: Option<&JobLayout>) -> (String, Vec<u32>) {
    let set_size = d.set_size();
    if d.group.0 == "WORLD" {
        return (
            "one member each: group WORLD is one failure group for the whole job, and a set never holds two ranks of one group".to_string(),
            vec![1],
        );
    }
    let Some(layout) = layout else {
        return (
            format!(
                "at least {set_size} members each where the job spans {set_size} or more {} failure groups, one rank per group; fewer otherwise (give --ranks N [--ranks-per-node M] for a job's sets)",
                d.group.0
            ),
            vec![set_size],
        );
    };
    let groups: Result<Vec<String>, crate::config::NoGroupValue> = layout
        .nodes
        .iter()
        .map(|node| config.failure_group(&d.group.0, node))
        .collect();
    let groups = match groups {
        Ok(g) => g,
        Err(e) => return (format!("cannot be formed: {e}"), vec![]),
    };
    let hop = d.hop_distance.0;
    let sets = crate::runtime::sets::form_sets(&groups, set_size as usize, hop as usize);
    let mut sizes: Vec<u32> = sets.iter().map(|s| s.members.len() as u32).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let mut counts = Vec::new();
    for size in sizes.iter().rev() {
        let n = sets
            .iter()
            .filter(|s| s.members.len() as u32 == *size)
            .count();
        counts.push(format!("{n} of {size} member(s)"));
    }
    let mut distinct = groups.clone();
    distinct.sort();
    distinct.dedup();
    (
        format!(
            "{} set(s): {} ({} ranks in {} {} failure group(s), from {}; set_size {set_size} is a minimum{})",
            sets.len(),
            counts.join(", "),
            layout.nodes.len(),
            distinct.len(),
            d.group.0,
            layout.source,
            if hop > 1 {
                format!("; neighbours {hop} groups apart (hop_distance, {})", d.hop_distance.1)
            } else {
                String::new()
            }
        ),
        sizes,
    )
}

/// The text of `scr config explain --checkpoint N`; `layout` places a job's ranks so the
/// sets it would form are shown (without one, only the rule is).
pub fn explain_checkpoint(
    config: &Config,
    registry: &Registry,
    id: u64,
    layout: Option<&JobLayout>,
) -> String {
    let mut out = String::new();
    let Some(ck) = config.checkpoint_for(id) else {
        let _ = writeln!(
            out,
            "checkpoint {id}: no enabled descriptor has an interval dividing {id}"
        );
        return out;
    };
    let index = config
        .checkpoints
        .iter()
        .position(|c| std::ptr::eq(c, ck))
        .expect("descriptor from this config");
    let d = config.descriptor(index);
    let _ = writeln!(
        out,
        "checkpoint {id} uses descriptor {index} (interval {}, {})",
        ck.interval, ck.origin
    );
    let _ = writeln!(
        out,
        "  why:     the largest interval dividing {id} is {}; candidates: {}",
        ck.interval,
        candidate_intervals(config, id)
    );
    let _ = writeln!(out, "  scheme:  {} ({})", d.scheme.0, d.scheme.1);
    let _ = writeln!(out, "  store:   {}", store_line(config, &d));
    let _ = writeln!(out, "  group:   {} ({})", d.group.0, d.group.1);
    let _ = writeln!(
        out,
        "  protect: {} ({})",
        protection_mode(config, d.background.0),
        d.background.1
    );
    let provider = registry.provider(Kind::Scheme, &d.scheme.0);
    let in_use = provider
        .as_ref()
        .ok()
        .and_then(|lib| params_in_use(&lib.name));
    for (k, v, o) in &d.params {
        match in_use {
            Some(used) if !used.contains(&k.as_str()) => {
                // a parameter the scheme ignores is shown only where someone set it
                if *o != crate::config::Origin::Default {
                    let _ = writeln!(
                        out,
                        "  note:    {k} = {v} ({o}) has no effect on {}: it reads {}",
                        d.scheme.0,
                        match used.is_empty() {
                            true => "no parameter".to_string(),
                            false => used.join(", "),
                        }
                    );
                }
            }
            _ => {
                let _ = writeln!(out, "  param:   {k} = {v} ({o})");
            }
        }
    }
    let (sets, sizes) = job_sets(config, &d, layout);
    let _ = writeln!(out, "  sets:    {sets}");
    match provider {
        Ok(lib) => {
            let _ = writeln!(
                out,
                "  plugin:  {} ({} {}, {})",
                lib.path.display(),
                lib.name,
                lib.version,
                lib.origin
            );
            for members in &sizes {
                let _ = writeln!(
                    out,
                    "  status:  {}",
                    describe_for(config, registry, &d, *members)
                );
            }
            let tolerated = |members| {
                registry
                    .new_scheme(&d.scheme_config(config, members, 0, 0))
                    .and_then(|s| s.describe())
                    .map_or(0, |desc| desc.tolerated_losses)
            };
            let full = tolerated(d.set_size());
            if full > 0 && !sizes.is_empty() && sizes.iter().all(|&m| tolerated(m) == 0) {
                let why = crate::config::protects_nothing(
                    index,
                    &d.scheme.0,
                    &d.group.0,
                    d.set_size(),
                    u64::from(full),
                );
                let _ = writeln!(out, "  warning: {why}");
            }
        }
        Err(e) => {
            let _ = writeln!(out, "  plugin:  {e}");
        }
    }
    out
}

/// The descriptor parameters a shipped scheme's library reads, `set_size` included where
/// the host forms the scheme's sets by it; None for another library (every parameter is
/// passed to it, and which it reads only it knows). The shipped plugins accept the four
/// common parameters, so that one set of defaults serves every descriptor, and read these.
fn params_in_use(library: &str) -> Option<&'static [&'static str]> {
    match library {
        "scr-single" => Some(&[]),
        "scr-partner" => Some(&["set_size", "replicas", "buffer_size"]),
        "scr-xor" => Some(&["set_size", "buffer_size"]),
        "scr-reed-solomon" => Some(&["set_size", "set_failures", "buffer_size"]),
        _ => None,
    }
}

/// Every enabled descriptor's interval, smallest first, with whether it divides `id` and
/// where it was set: why `id` got the descriptor it got.
fn candidate_intervals(config: &Config, id: u64) -> String {
    let mut enabled: Vec<&Checkpoint> = config.checkpoints.iter().filter(|c| c.enabled).collect();
    enabled.sort_by_key(|c| c.interval);
    enabled
        .into_iter()
        .map(|c| {
            let mark = if id.is_multiple_of(c.interval) {
                "divides"
            } else {
                "does not divide"
            };
            format!("interval {} ({mark}; {})", c.interval, c.origin)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The store a descriptor writes to, with its group, count, view, flush transfer and
/// where it was defined (or that it is undefined).
fn store_line(config: &Config, d: &Descriptor<'_>) -> String {
    match d.store {
        Some(s) => format!(
            "{} (group {}, count {}, view {}, flush transfer {}; {})",
            s.path,
            config.store_group(s),
            config.store_count(s),
            config.store_view(s),
            config.store_transfer(s).0,
            s.origin
        ),
        None => format!("{} (undefined store!)", d.store_path),
    }
}

/// What the scheme says about a set of `members`: its summary and tolerated losses, or
/// why it refuses such a set.
fn describe_for(config: &Config, registry: &Registry, d: &Descriptor<'_>, members: u32) -> String {
    let described = registry
        .new_scheme(&d.scheme_config(config, members, 0, 0))
        .and_then(|s| s.describe());
    match described {
        Ok(desc) => format!(
            "sets of {members}: ok: {}; tolerates {} lost member(s) per set",
            desc.summary, desc.tolerated_losses
        ),
        Err(RegistryError::Plugin { error, .. }) => {
            format!("sets of {members}: {}", error.message)
        }
        Err(e) => format!("sets of {members}: {e}"),
    }
}

/// When a descriptor's scheme runs, as `protect_in_background` and, below
/// MPI_THREAD_MULTIPLE, `protect_below_multiple` ask: which of the two applies only the
/// job can tell (its init says which mode is in force).
fn protection_mode(config: &Config, background: bool) -> String {
    if !background {
        return "inside complete_output; protect_in_background = false".into();
    }
    let below = config.get(settings::PROTECT_BELOW_MULTIPLE);
    let origin = &config.setting_of(settings::PROTECT_BELOW_MULTIPLE).origin;
    let otherwise = match below.as_str() {
        "calls" => "else in a background thread whose MPI calls the application's thread makes at its calls into the library",
        "sockets" => "else in a background thread that calls no MPI, each redundancy set exchanging over TCP connections of the library's own",
        _ => "else inside complete_output",
    };
    // libscr's MPI_Init reads only the environment (see runtime::mpi_init): say what it
    // does in this one
    let init = if crate::runtime::mpi_init::wants_multiple() {
        "libscr's MPI_Init asks for it in this environment, where SCR_PROTECT_IN_BACKGROUND is true"
    } else {
        "libscr's MPI_Init leaves the level to the application in this environment, where SCR_PROTECT_IN_BACKGROUND is not true"
    };
    format!(
        "in a background thread after complete_output when MPI runs at MPI_THREAD_MULTIPLE (init says so on rank 0; {init}), {otherwise} (protect_below_multiple = {below}, {origin}); protect_in_background = true"
    )
}
