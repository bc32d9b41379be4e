//! The OpenMPI settings for running many ranks of one job on one machine (as root, more
//! ranks than cores, shared memory only): what the tests, the benchmarks and the demo
//! launch `mpiexec` with. Kept in `tests/openmpi-local.env`, which the shell scripts
//! source, so the scripts and the Rust code share one list.

/// The file's text, compiled in.
const FILE: &str = include_str!("../openmpi-local.env");

/// The `(variable, value)` pairs of `tests/openmpi-local.env`, in file order.
pub fn openmpi_local_env() -> Vec<(&'static str, &'static str)> {
    FILE.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_file_lists_the_openmpi_settings() {
        let env = super::openmpi_local_env();
        assert_eq!(env.len(), 7, "{env:?}");
        assert!(env.contains(&("OMPI_ALLOW_RUN_AS_ROOT", "1")));
        assert!(env.contains(&("OMPI_MCA_btl", "self,vader")));
        assert!(env.iter().all(|(k, _)| k.starts_with("OMPI_")));
    }
}
