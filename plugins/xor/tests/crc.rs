//! XOR computes its files' CRC32s in its own pass: the CRC32s it reports are the files',
//! and the redundancy data it writes is byte for byte what the host's other path (CRC32s
//! read first, then `apply`) writes — through the plugin-side scheme and through the FFI
//! object the host calls.

use scr_plugin::crc_cases::check_crc_in_apply;
use scr_plugin::{inproc, scheme_box, Scheme};
use scr_xor::{Xor, XorScheme};

fn run(set_size: u32, ffi: bool) {
    let dir = tempfile::tempdir().unwrap();
    let groups: Vec<String> = (0..set_size).map(|i| format!("node{i}")).collect();
    let refs: Vec<&str> = groups.iter().map(String::as_str).collect();
    let piece = 64u64;
    let out = inproc::run(&refs, |host| {
        let scheme = XorScheme::new(host.size(), host.rank(), host.rank(), piece as usize);
        assert!(scheme.crc32_in_apply());
        let mine = dir.path().join(format!("member{}", host.rank()));
        if ffi {
            let boxed = scheme_box::<Xor>(Box::new(scheme));
            check_crc_in_apply(host, &boxed, &mine, piece)
        } else {
            check_crc_in_apply(host, &scheme, &mine, piece)
        }
    });
    for (m, r) in out.iter().enumerate() {
        assert!(r.is_ok(), "set of {set_size}, member {m}: {r:?}");
    }
}

#[test]
fn crcs_from_the_parity_pass_match_the_files_in_sets_of_2_to_5() {
    for n in 2..=5 {
        run(n, false);
    }
}

#[test]
fn crcs_cross_the_ffi_boundary() {
    run(4, true);
}
