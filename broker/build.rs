//! Generates the gRPC code of `proto/controller.proto` (tonic + prost),
//! compiling the .proto with protox so that no `protoc` is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = protox::compile(["proto/controller.proto"], ["proto"])?;
    tonic_prost_build::configure().compile_fds(files)?;
    println!("cargo:rerun-if-changed=proto/controller.proto");
    Ok(())
}
