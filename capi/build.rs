//! `SCR_Configf` takes C varargs, which stable Rust cannot define: it is a few lines of C
//! (`src/configf.c`) that format the string and call `SCR_Config`. libscr's `MPI_Init`
//! and `MPI_Init_thread` are C too (`src/mpi_init.c`), because they must be weak
//! definitions, which stable Rust cannot make.

fn main() {
    cc::Build::new()
        .file("src/configf.c")
        .file("src/mpi_init.c")
        .include("include")
        .warnings(true)
        .extra_warnings(true)
        .compile("scr_configf");
    // rustc exports only Rust's #[no_mangle] functions from the cdylib; add the C one
    let map = std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"))
        .join("src/exports.map");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        map.display()
    );
    println!("cargo:rerun-if-changed=src/exports.map");
    println!("cargo:rerun-if-changed=src/configf.c");
    println!("cargo:rerun-if-changed=src/mpi_init.c");
    println!("cargo:rerun-if-changed=include/scr.h");
}
