//! RS computes its files' CRC32s in its own encode pass: the CRC32s it reports are the
//! files', and the checksums it writes are byte for byte what the host's other path
//! (CRC32s read first, then `apply`) writes — through the plugin-side scheme and through
//! the FFI object the host calls.

use scr_plugin::crc_cases::check_crc_in_apply;
use scr_plugin::{inproc, scheme_box, Scheme};
use scr_reed_solomon::{Rs, RsScheme};

fn run(set_size: u32, k: u32, ffi: bool) {
    let dir = tempfile::tempdir().unwrap();
    let groups: Vec<String> = (0..set_size).map(|i| format!("node{i}")).collect();
    let refs: Vec<&str> = groups.iter().map(String::as_str).collect();
    let piece = 64u64;
    let out = inproc::run(&refs, |host| {
        let scheme =
            RsScheme::new(host.size(), host.rank(), host.rank(), k, piece as usize).unwrap();
        assert!(scheme.crc32_in_apply());
        let mine = dir.path().join(format!("member{}", host.rank()));
        if ffi {
            let boxed = scheme_box::<Rs>(Box::new(scheme));
            check_crc_in_apply(host, &boxed, &mine, piece)
        } else {
            check_crc_in_apply(host, &scheme, &mine, piece)
        }
    });
    for (m, r) in out.iter().enumerate() {
        assert!(r.is_ok(), "set of {set_size}, k={k}, member {m}: {r:?}");
    }
}

#[test]
fn crcs_from_the_encode_pass_match_the_files() {
    for (p, k) in [(2, 1), (3, 1), (4, 2), (5, 3), (6, 3)] {
        run(p, k, false);
    }
}

#[test]
fn crcs_cross_the_ffi_boundary() {
    run(4, 2, true);
}
