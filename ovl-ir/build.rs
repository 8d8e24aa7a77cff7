//! Compiles `proto/ovl.proto` with a pure-Rust protobuf parser (no system `protoc`).
fn main() {
    let proto_dir = "../proto";
    let proto = "../proto/ovl.proto";
    println!("cargo:rerun-if-changed={proto}");
    let fds = protox::compile([proto], [proto_dir]).expect("proto/ovl.proto does not parse");
    prost_build::Config::new()
        .compile_fds(fds)
        .expect("prost code generation for proto/ovl.proto failed");
}
