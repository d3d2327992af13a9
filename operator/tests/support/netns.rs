//! The operator on the network-namespace plane (`moldau_e2e::netns_plane`):
//! started inside the plane, confined to one namespace, short resyncs, its
//! log `operator.log` in the plane's logs directory.

use std::process::{Child, Command};

use anyhow::Result;
use moldau_e2e::netns_plane::NetnsPlane;

/// Starts this package's operator binary in `plane`, watching and leading
/// in `namespace` as `identity`, its HTTP endpoint on 127.0.0.1:`http_port`
/// of the plane's namespace.
pub fn start_operator(
    plane: &NetnsPlane,
    namespace: &str,
    identity: &str,
    http_port: u16,
) -> Result<Child> {
    let mut operator = Command::new(env!("CARGO_BIN_EXE_moldau-operator"));
    operator
        .env("KUBECONFIG", plane.kubeconfig())
        .env("RUST_LOG", "info,kube=warn")
        .args(["--namespace", namespace, "--watch-namespace", namespace])
        .args(["--identity", identity])
        .args(["--http-listen", &format!("127.0.0.1:{http_port}")])
        .args(["--cluster-resync", "5", "--retry", "2"]);
    plane.spawn(&operator, &plane.logs_dir().join("operator.log"))
}
