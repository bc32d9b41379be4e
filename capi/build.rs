//! `SCR_Configf` takes C varargs, which stable Rust cannot define: it is a few lines of C
//! (`src/configf.c`) that format the string and call `SCR_Config`.

fn main() {
    cc::Build::new()
        .file("src/configf.c")
        .include("include")
        .warnings(true)
        .extra_warnings(true)
        .compile("scr_configf");
    println!("cargo:rerun-if-changed=src/configf.c");
    println!("cargo:rerun-if-changed=include/scr.h");
}
