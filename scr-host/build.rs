//! Records the directory this build puts its artifacts in, so that a development build
//! finds the plugin libraries built beside it without any configuration.

fn main() {
    // OUT_DIR is <target>/<profile>/build/<package>-<hash>/out.
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    if let Some(profile_dir) = out.ancestors().nth(3) {
        println!(
            "cargo:rustc-env=SCR_BUILD_PLUGIN_DIR={}",
            profile_dir.display()
        );
    }
    println!("cargo:rerun-if-env-changed=SCR_PLUGIN_INSTALL_DIR");
    println!("cargo:rerun-if-changed=build.rs");
}
