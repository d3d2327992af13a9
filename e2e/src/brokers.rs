//! Moldau brokers in cluster mode `kubernetes` against the e2e control
//! plane: the one place that says how such a broker is started.
//!
//! Owns the cluster-mode part of a broker's command line (`--cluster
//! kubernetes --cluster-name --namespace`, the controller listener, lease
//! timings short enough for tests) and its environment (the admin
//! kubeconfig). Whoever runs the process adds the per-node part (node id,
//! Kafka/HTTP listeners, data directory) and any test-specific settings:
//! `e2e/tests/cluster_kubernetes.rs` spawns brokers itself;
//! `e2e/tests/cluster_kubernetes_clients.rs` hands these arguments to the
//! Python client suite (`MOLDAU_CLUSTER_ARGS`), whose broker harness starts
//! them. Every listener is on 127.0.0.1.

use std::ffi::OsString;

use crate::paths;

/// `controller.lease.duration.ms` of every test broker: a crashed
/// controller is replaced within this time.
pub const LEASE_DURATION_MS: u64 = 4000;
/// `controller.lease.retry.ms` of every test broker.
pub const LEASE_RETRY_MS: u64 = 500;

/// The arguments that make a broker a member of the Kafka cluster `cluster`
/// whose metadata lives in `namespace`: cluster mode and the controller's
/// gRPC listener on an ephemeral loopback port, every timing at its
/// default.
pub fn kubernetes_membership_args(cluster: &str, namespace: &str) -> Vec<String> {
    [
        "--cluster",
        "kubernetes",
        "--cluster-name",
        cluster,
        "--namespace",
        namespace,
        "--controller-listen",
        "127.0.0.1:0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// [`kubernetes_membership_args`] with the short lease timings above.
pub fn kubernetes_cluster_args(cluster: &str, namespace: &str) -> Vec<String> {
    let mut args = kubernetes_membership_args(cluster, namespace);
    args.extend([
        "--set".to_string(),
        format!("controller.lease.duration.ms={LEASE_DURATION_MS}"),
        "--set".to_string(),
        format!("controller.lease.retry.ms={LEASE_RETRY_MS}"),
    ]);
    args
}

/// The environment such a broker needs: the admin kubeconfig of the e2e
/// control plane, and logs without colour codes.
pub fn kubernetes_cluster_env() -> Vec<(&'static str, OsString)> {
    vec![
        ("KUBECONFIG", paths::kubeconfig().into_os_string()),
        ("NO_COLOR", "1".into()),
    ]
}
