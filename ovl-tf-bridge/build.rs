//! Links the bridge against TensorFlow's framework library by SONAME, without needing
//! TensorFlow at build time.
//!
//! The bridge is loaded into a process that already has `libtensorflow_framework.so.2` (Python
//! imported TensorFlow), and every TensorFlow symbol it uses is exported by that library. The
//! linker only needs a library carrying that SONAME to record the dependency, so this script
//! builds an empty stub with it in `OUT_DIR` and links with
//! `-Wl,--no-as-needed -l:libtensorflow_framework.so.2`. At load time the dynamic loader matches
//! the dependency to the already-loaded framework library by its SONAME.
use std::path::PathBuf;
use std::process::Command;

const SONAME: &str = "libtensorflow_framework.so.2";

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let source = out.join("tf_stub.c");
    std::fs::write(
        &source,
        "/* Stub carrying only the SONAME of TensorFlow's framework library (see build.rs). */\n",
    )
    .expect("cannot write the stub source into OUT_DIR");
    let compiler = cc::Build::new()
        .cargo_metadata(false)
        .try_get_compiler()
        .expect("no C compiler found (set CC)");
    let stub = out.join(SONAME);
    let status = Command::new(compiler.path())
        .args(["-shared", "-fPIC", "-o"])
        .arg(&stub)
        .arg(format!("-Wl,-soname,{SONAME}"))
        .arg(&source)
        .status()
        .expect("cannot run the C compiler");
    assert!(
        status.success(),
        "building the TensorFlow stub library failed"
    );
    println!("cargo:rustc-cdylib-link-arg=-L{}", out.display());
    println!("cargo:rustc-cdylib-link-arg=-Wl,--no-as-needed");
    println!("cargo:rustc-cdylib-link-arg=-l:{SONAME}");
    println!("cargo:rerun-if-changed=build.rs");
}
