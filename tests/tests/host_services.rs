//! The host services plugins receive, driven over MPI as a broken or hostile plugin or
//! peer would (`scr-host-probe`): every misuse is an error returned to the caller, never
//! an MPI abort, a panic, or memory sized by what a peer announced.

use scr_e2e::Cluster;

#[test]
fn misused_host_services_return_errors_instead_of_aborting_the_job() {
    let c = Cluster::new();
    let out = c.run(&["n0", "n1"], "scr-host-probe", &[]);
    assert_eq!(out.code, 0, "{out}");
    let report = |r: usize| {
        std::fs::read_to_string(c.prefix().join(format!("host_probe_{r}.txt")))
            .unwrap_or_else(|e| panic!("rank {r} wrote no report (the job aborted?): {e}\n{out}"))
    };
    let common = "world size 2\n\
        send tag 32768: communication error: tag 32768 is above the largest plugin tag 32767\n\
        send tag 2147483649: communication error: tag 2147483649 is above the largest plugin tag 32767\n\
        recv from member 7: communication error: member 7 does not exist in a set of 2 members\n";
    let thread = |r: u32| {
        format!(
            "from a plugin thread: rank {r} size 2: barrier: communication error: host services were called from a plugin thread, but MPI was initialised with thread level Single; initialise MPI with Threading::Serialized or Multiple, or call from the calling thread\n\
             barrier on the owner thread: ok\n"
        )
    };
    assert_eq!(
        report(0),
        format!(
            "{common}sent 268435456 bytes: ok\nsent 2 bytes: ok\nsent 4 bytes: ok\n{}",
            thread(0)
        )
    );
    assert_eq!(
        report(1),
        format!(
            "{common}\
             recv 4 bytes: communication error: expected 4 bytes from member 0 (tag 5) but 268435456 arrived (message discarded, truncated)\n\
             recv 4 bytes: communication error: expected 4 bytes from member 0 (tag 5) but 2 arrived\n\
             recv 4 bytes: ok \"next\"\n\
             peak memory grew by less than 64 MiB: true\n{}",
            thread(1)
        )
    );
}
