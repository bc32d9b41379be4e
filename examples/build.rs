//! Extracts the README's Rust example (its one ```rust,no_run block) into `OUT_DIR`, so
//! that the `scr-readme-example` binary is exactly the code the README shows and the tests
//! can run it under `mpiexec` (the doctest of scr-api only compiles it).

use std::path::PathBuf;

fn main() {
    let readme = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"))
        .join("../README.md");
    println!("cargo:rerun-if-changed={}", readme.display());
    let text =
        std::fs::read_to_string(&readme).unwrap_or_else(|e| panic!("{}: {e}", readme.display()));
    let open = "```rust,no_run\n";
    let start = text
        .find(open)
        .unwrap_or_else(|| panic!("{}: no ```rust,no_run block", readme.display()))
        + open.len();
    let len = text[start..].find("```").unwrap_or_else(|| {
        panic!(
            "{}: the ```rust,no_run block is not closed",
            readme.display()
        )
    });
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it"));
    std::fs::write(out.join("readme_example.rs"), &text[start..start + len])
        .expect("write the extracted example");
}
