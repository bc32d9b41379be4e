//! The directories a restart of another size keeps its copies and rebuilt files in
//! (`scr.resize.<id>.<rank>` in the job's directory of a store): their names, and their
//! removal at init when a run ended inside such a restart. A module of its own so that
//! init's restore (which removes them) and the restart from the old caches (which makes
//! them) share it without importing each other.

/// The name of the directory rank `rank` keeps a restart's copies and rebuilt files of
/// dataset `id` in, in the job's directory of a store.
pub(in crate::runtime) fn staging_name(id: u64, rank: u32) -> String {
    format!("{STAGING}{id}.{rank}")
}

/// How every such directory's name starts.
const STAGING: &str = "scr.resize.";

/// At init, before any restart: the first rank of each node removes what a restart of
/// another size left in the job's directory of each store (a run that ended inside the
/// restart); a failure is a warning.
pub(in crate::runtime) fn remove_stale_staging(
    job: &crate::runtime::job::Job,
    config: &crate::config::Config,
    topo: &crate::runtime::topology::Topology,
) {
    if !topo.first_on_node() {
        return;
    }
    for store in &config.stores {
        let dir = job.store_dir(&store.path);
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let stale = e.file_name().to_string_lossy().starts_with(STAGING)
                && e.file_type().is_ok_and(|t| t.is_dir());
            if stale {
                if let Err(err) = std::fs::remove_dir_all(e.path()) {
                    tracing::warn!(
                        "{}: {err}; a restart's leftover copies stay",
                        e.path().display()
                    );
                }
            }
        }
    }
}
