//! Records the target triple, which the `cc` crate needs to find the C++ compiler at run time
//! (outside a build script).

fn main() {
    let target = std::env::var("TARGET").unwrap_or_default();
    println!("cargo:rustc-env=OVL_CODEGEN_TARGET={target}");
    println!("cargo:rerun-if-changed=build.rs");
}
