//! Paths shared by the scripts, the pod runner and the tests. They must agree
//! with `e2e/scripts/lib.sh`.

use std::path::PathBuf;

/// The `e2e/` directory of the repository.
pub fn e2e_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `${MOLDAU_E2E_STATE:-<repo>/e2e/.state}`.
pub fn state_dir() -> PathBuf {
    match std::env::var_os("MOLDAU_E2E_STATE") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => e2e_dir().join(".state"),
    }
}

/// `${MOLDAU_CACHE:-$HOME/.cache/moldau}/bin`: the built tools.
pub fn bin_dir() -> PathBuf {
    let cache = match std::env::var_os("MOLDAU_CACHE") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => {
            let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
            PathBuf::from(home).join(".cache/moldau")
        }
    };
    cache.join("bin")
}

/// A built tool (`kubectl`, `helm`, `etcd`, ...).
pub fn tool(name: &str) -> PathBuf {
    bin_dir().join(name)
}

/// The admin kubeconfig written by `controlplane-up.sh`.
pub fn kubeconfig() -> PathBuf {
    state_dir().join("kubeconfig")
}

/// Fixtures shipped with the tests.
pub fn fixture(name: &str) -> PathBuf {
    e2e_dir().join("fixtures").join(name)
}

/// Whether the e2e tests should run: everything but `MOLDAU_E2E=0`.
pub fn e2e_enabled() -> bool {
    std::env::var("MOLDAU_E2E")
        .map(|v| v != "0")
        .unwrap_or(true)
}

/// A binary of this workspace, built (debug or release, like the running
/// test) if it is missing or stale: `cargo build` is a no-op when it is up
/// to date.
pub fn workspace_bin(package: &str, bin: &str) -> PathBuf {
    static BUILD: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let exe = std::env::current_exe().expect("test executable");
    // target/<profile>/deps/<test> → target/<profile>
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("profile dir")
        .to_path_buf();
    let _guard = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    let target = dir.parent().expect("target dir").to_path_buf();
    let mut cmd = std::process::Command::new(env!("CARGO"));
    // --workspace: the features of a workspace build, so this reuses what
    // `cargo test --workspace` compiled instead of building a second copy
    // of the dependency tree (`-p` would resolve the package's own features).
    cmd.args(["build", "--workspace", "--bin", bin])
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    if dir.file_name().and_then(|n| n.to_str()) == Some("release") {
        cmd.arg("--release");
    }
    let status = cmd.status().expect("running cargo build");
    assert!(
        status.success(),
        "cargo build --workspace --bin {bin} (package {package}) failed"
    );
    dir.join(bin)
}
