//! abi_stable records each type's package (`CARGO_PKG_NAME`) in its layout and compares
//! packages before anything else. A plugin built against a changed copy of scr-plugin
//! carries the package name `scr-plugin`; this fixture's copied types must too, so that
//! the host compares their layouts instead of refusing a foreign package.

fn main() {
    println!("cargo:rustc-env=CARGO_PKG_NAME=scr-plugin");
}
