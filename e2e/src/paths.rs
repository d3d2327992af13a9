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
    let mut cmd = cargo_command();
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

/// Variables cargo sets for the crate it runs (a test binary here), which a
/// cargo started from that crate must not inherit.
const CRATE_RUN_VARS: &[&str] = &[
    "CARGO_MANIFEST_DIR",
    "CARGO_MANIFEST_PATH",
    "CARGO_MANIFEST_LINKS",
    "CARGO_CRATE_NAME",
    "CARGO_BIN_NAME",
    "CARGO_PRIMARY_PACKAGE",
    "CARGO_TARGET_TMPDIR",
    "CARGO_RUSTC_CURRENT_DIR",
    "OUT_DIR",
];

/// `cargo` (the one running the tests) for a build started from a test,
/// without the variables cargo set for the test itself. Build scripts watch
/// some of them (ring's `rerun-if-env-changed=CARGO_MANIFEST_DIR`): an
/// inherited value reruns ring's build script, which recompiles ring, rustls,
/// kube and the workspace, and the next top-level cargo, seeing the variable
/// unset again, recompiles them once more.
pub fn cargo_command() -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO"));
    for (name, _) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        if CRATE_RUN_VARS.contains(&name)
            || name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_BIN_EXE_")
            || name.starts_with("CARGO_CFG_")
        {
            cmd.env_remove(name);
        }
    }
    cmd
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_cargo_started_from_a_test_does_not_inherit_the_test_s_crate_variables() {
        // cargo test sets CARGO_MANIFEST_DIR and CARGO_PKG_NAME for this test
        assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
        let cmd = super::cargo_command();
        let removed: Vec<_> = cmd
            .get_envs()
            .filter(|(_, v)| v.is_none())
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        for name in ["CARGO_MANIFEST_DIR", "CARGO_PKG_NAME"] {
            assert!(
                removed.iter().any(|r| r == name),
                "{name} is removed: {removed:?}"
            );
        }
        assert!(
            !removed
                .iter()
                .any(|r| r == "CARGO_HOME" || r == "CARGO_INCREMENTAL"),
            "cargo's own settings stay: {removed:?}"
        );
    }
}
