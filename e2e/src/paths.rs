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
