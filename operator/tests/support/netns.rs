//! The operator on the network-namespace plane (`moldau_e2e::netns_plane`):
//! the plane brought up with this workspace's pod runner and broker image,
//! the repository's CRDs and one namespace, and the operator started inside
//! it, confined to that namespace, short resyncs, its log `operator.log` in
//! the plane's logs directory.

use std::process::{Child, Command};

use anyhow::Result;
use moldau_e2e::netns_plane::NetnsPlane;
use moldau_e2e::paths;

/// A plane with the CRDs and `namespace`, and the operator running in it
/// (see [`start_operator`]).
pub fn plane_with_operator(
    namespace: &str,
    identity: &str,
    http_port: u16,
) -> Result<(NetnsPlane, Child)> {
    let runner = paths::workspace_bin("moldau-e2e", "moldau-podrunner");
    let broker = paths::workspace_bin("moldau-broker", "moldau-broker");
    let plane = NetnsPlane::up(&runner, &[("moldau/broker", broker.as_path())])?;
    plane.apply_repo_crds()?;
    plane.kubectl_ok(&["create", "namespace", namespace])?;
    let operator = start_operator(&plane, namespace, identity, http_port)?;
    Ok((plane, operator))
}

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
