//! `scr nodes down` (each reason, the resource manager's own list), the node lists
//! `scr run` takes from the resource managers, and `scr hostlist`, driven as a batch
//! script would.

use scr_e2e::Cluster;

mod launch_common;
use launch_common::scr;

#[test]
fn nodes_down_names_each_reason() {
    let c = Cluster::new();
    let cache = c.path("cache");
    // n1: its cache base is a file; n2: the site script says so; n3: fine
    std::fs::write(cache.join("n1"), "").unwrap();
    let script = c.path("down.sh");
    std::fs::write(&script, "#!/bin/sh\necho \"n2 fan failure ($#: $*)\"\n").unwrap();
    let mut perm = std::fs::metadata(&script).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(&script, perm).unwrap();
    let sim = [
        ("SCR_NODE_NAMES", "n1,n2,n3"),
        ("SCR_DOWN_NODES_SCRIPT", script.to_str().unwrap()),
        ("SCR_EXCLUDE_NODES", "n4"),
    ];
    let out = scr(&c, &["nodes", "down", "n[1-4]"], &sim);
    assert_eq!(out.code, 1, "{out}");
    assert_eq!(
        out.stdout,
        format!(
            "n1: {} is not a directory\nn2: down_nodes_script: fan failure (4: n1 n2 n3 n4)\n\
             n4: listed in exclude_nodes\n",
            cache.join("n1").display()
        )
    );
    // too little free space for what the store needs
    let out = scr(
        &c,
        &["nodes", "down", "n3"],
        &[("SCR_NODE_NAMES", "n3"), ("SCR_CACHE_FREE", "1PB")],
    );
    assert_eq!(out.code, 1, "{out}");
    assert!(
        out.stdout
            .starts_with(&format!("n3: {} has ", cache.join("n3").display()))
            && out
                .stdout
                .ends_with(" bytes free, below the 1125899906842624 needed (cache_free)\n"),
        "{out}"
    );
    // all well: nothing printed, exit 0
    let out = scr(&c, &["nodes", "down"], &[("SCR_NODE_NAMES", "n3,n3")]);
    assert_eq!((out.code, out.stdout.as_str()), (0, ""), "{out}");
    // a real node name that does not resolve
    let out = scr(&c, &["nodes", "down", "nosuch.invalid"], &[]);
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (
            1,
            "nosuch.invalid: host name `nosuch.invalid` does not resolve to an address\n"
        ),
        "{out}"
    );
}

/// The resource manager's own view of down nodes, as SCR's `scr_list_down_nodes` asks
/// for it: inside SLURM `sinfo -ho %N -t down -n NODES` (its host lists), inside Flux
/// `flux resource list -s down -n -o {nodelist}`. Stand-ins on PATH print what the real
/// commands would; one that fails leaves the other checks to decide, with a warning.
#[test]
fn down_nodes_come_from_the_resource_manager_too() {
    let c = Cluster::new();
    let bin = c.path("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let tool = |name: &str, body: &str| {
        let p = bin.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        let mut perm = std::fs::metadata(&p).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
        std::fs::set_permissions(&p, perm).unwrap();
    };
    // sinfo answers only the query SCR makes, with the nodes it was asked about
    tool(
        "sinfo",
        "[ \"$1 $2 $3 $4 $5\" = \"-ho %N -t down -n\" ] || exit 2\n[ \"$6\" = \"n1,n2,n3,n4\" ] || exit 3\necho 'n[2,4]'",
    );
    tool(
        "flux",
        "[ \"$*\" = \"resource list -s down -n -o {nodelist}\" ] || exit 2\necho 'n3'",
    );
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let sim = |extra: (&'static str, &'static str)| {
        vec![
            ("SCR_NODE_NAMES", "n1,n2,n3,n4"),
            ("PATH", path.as_str()),
            extra,
        ]
    };
    let out = scr(
        &c,
        &["nodes", "down", "n[1-4]"],
        &sim(("SLURM_JOB_ID", "42")),
    );
    assert_eq!(out.code, 1, "{out}");
    assert_eq!(
        out.stdout, "n2: reported down by SLURM (sinfo)\nn4: reported down by SLURM (sinfo)\n",
        "{out}"
    );
    let out = scr(
        &c,
        &["nodes", "down", "n[1-4]"],
        &sim(("FLUX_URI", "local:///x")),
    );
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (1, "n3: reported down by Flux (flux resource list)\n"),
        "{out}"
    );
    // a failing sinfo: nothing from it, said why, the other checks still run
    tool("sinfo", "echo 'sinfo: error: slurmctld down' >&2; exit 1");
    let out = scr(
        &c,
        &["nodes", "down", "n[1-4]"],
        &sim(("SLURM_JOB_ID", "42")),
    );
    assert_eq!((out.code, out.stdout.as_str()), (0, ""), "{out}");
    assert!(out.stderr.contains("slurmctld down"), "{out}");
}

#[test]
fn node_lists_come_from_the_resource_manager() {
    let c = Cluster::new();
    let nodes = |env: &[(&str, &str)]| {
        let out = scr(&c, &["env", "nodes"], env);
        assert_eq!(out.code, 0, "{out}");
        out.stdout
    };
    assert_eq!(
        nodes(&[("SLURM_JOB_NODELIST", "r[1-2]n[01-02]")]),
        "r1n[01-02],r2n[01-02]\n"
    );
    assert_eq!(nodes(&[("LSB_MCPU_HOSTS", "l3 8 l1 8 l2 8")]), "l[1-3]\n");
    let nodefile = c.path("pbs_nodes");
    std::fs::write(&nodefile, "p1\np1\np2\n").unwrap();
    assert_eq!(
        nodes(&[("PBS_NODEFILE", nodefile.to_str().unwrap())]),
        "p[1-2]\n"
    );
    // Flux: `flux getattr hostlist` (a fake flux first on PATH)
    let bin = c.path("bin");
    std::fs::create_dir(&bin).unwrap();
    let flux = bin.join("flux");
    std::fs::write(
        &flux,
        "#!/bin/sh\n[ \"$*\" = 'getattr hostlist' ] && echo 'f[7-9]'\n",
    )
    .unwrap();
    let mut perm = std::fs::metadata(&flux).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(&flux, perm).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    assert_eq!(
        nodes(&[("FLUX_URI", "local:///tmp/x"), ("PATH", &path)]),
        "f[7-9]\n"
    );
    let bad = scr(&c, &["env", "nodes"], &[("SLURM_NODELIST", "n[2-1]")]);
    assert_eq!(bad.code, 1, "{bad}");
    assert_eq!(
        bad.stderr,
        "scr: error: SLURM_NODELIST: host list `n[2-1]`: the range `2-1` runs backwards in `n[2-1]`\n"
    );
}

#[test]
fn hostlist_cli() {
    let c = Cluster::new();
    let run = |args: &[&str]| {
        let out = scr(&c, args, &[]);
        (out.code, out.stdout, out.stderr)
    };
    assert_eq!(
        run(&["hostlist", "expand", "node[1-3,7]", "x"]).1,
        "node1,node2,node3,node7,x\n"
    );
    assert_eq!(
        run(&["hostlist", "expand", "--lines", "r[1-2]n[08-09]"]).1,
        "r1n08\nr1n09\nr2n08\nr2n09\n"
    );
    assert_eq!(
        run(&["hostlist", "compress", "n3,n1,n2", "n10", "m01"]).1,
        "n[1-3,10],m01\n"
    );
    assert_eq!(
        run(&["hostlist", "diff", "n[1-8]", "n[2-4,7]"]).1,
        "n[1,5-6,8]\n"
    );
    assert_eq!(
        run(&["hostlist", "intersect", "n[1-8]", "n[2-4,7],m1"]).1,
        "n[2-4,7]\n"
    );
    assert_eq!(
        run(&["hostlist", "expand", "n[1-4"]),
        (
            1,
            String::new(),
            "scr: error: host list `n[1-4`: `[` never closed in `[1-4`\n".into()
        )
    );
}
