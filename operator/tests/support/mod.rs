//! Test support: locating (and if needed building) the workspace binaries the
//! integration tests run as processes: `moldau-broker` and `moldau-podrunner`.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

static BUILD: Mutex<()> = Mutex::new(());

/// `<target>/<profile>` of this test binary (`<target>/<profile>/deps/<test>`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    exe.parent()
        .and_then(|deps| deps.parent())
        .map(PathBuf::from)
        .expect("test binary lives in <target>/<profile>/deps")
}

/// Path of workspace binary `bin` of package `package`, building it when it
/// is missing (`cargo test --workspace` has already built it).
pub fn workspace_bin(package: &str, bin: &str) -> PathBuf {
    let dir = profile_dir();
    let path = dir.join(bin);
    if path.exists() {
        return path;
    }
    let _guard = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    if path.exists() {
        return path;
    }
    let target = dir.parent().expect("target dir").to_path_buf();
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["build", "-p", package, "--bin", bin])
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    if dir.file_name().and_then(|n| n.to_str()) == Some("release") {
        cmd.arg("--release");
    }
    let status = cmd.status().expect("running cargo build");
    assert!(
        status.success(),
        "cargo build -p {package} --bin {bin} failed"
    );
    path
}
