//! Generates the gRPC code of `proto/controller.proto` (tonic + prost),
//! compiling the .proto with protox so that no `protoc` is needed, and
//! records the source revision the binary is built from
//! (`MOLDAU_BUILD_REVISION`, read by `crate::build_info`).

use std::path::Path;
use std::process::Command;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = protox::compile(["proto/controller.proto"], ["proto"])?;
    tonic_prost_build::configure().compile_fds(files)?;
    println!("cargo:rerun-if-changed=proto/controller.proto");
    // Worktrees of this repository sharing one target dir share this
    // script's output (cargo's hashes are relative to the workspace), and
    // a tree whose .proto is older than the last run elsewhere would take
    // that run's code: a build from another directory regenerates it.
    println!("cargo:rerun-if-env-changed=PWD");
    println!("cargo:rustc-env=MOLDAU_BUILD_REVISION={}", revision());
    Ok(())
}

/// The revision: `MOLDAU_BUILD_REVISION` when set (an image build, whose
/// context has no `.git`, passes it), else the git commit of the checkout,
/// else "unknown". Uncommitted changes are not marked: the script reruns
/// when HEAD moves, not on every edit.
fn revision() -> String {
    println!("cargo:rerun-if-env-changed=MOLDAU_BUILD_REVISION");
    if let Ok(r) = std::env::var("MOLDAU_BUILD_REVISION") {
        if !r.trim().is_empty() {
            return r.trim().to_string();
        }
    }
    // Rerun after a checkout (HEAD) or a commit (the branch HEAD names);
    // only files that exist, since a missing one would rerun every build.
    let mut watched = vec![git(&["rev-parse", "--git-path", "HEAD"])];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(git(&["rev-parse", "--git-path", &branch]));
        watched.push(git(&["rev-parse", "--git-path", "packed-refs"]));
    }
    for path in watched.into_iter().flatten() {
        if Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".to_string())
}

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_string())
}
