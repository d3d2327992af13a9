//! The runner's Node: registration, status heartbeats and the node Lease in
//! `kube-node-lease`, as kubelet keeps them.

use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use super::now_rfc3339;

/// Node capacity: generous, so scheduling never depends on this machine.
pub const CAPACITY: [(&str, &str); 4] = [
    ("cpu", "64"),
    ("memory", "256Gi"),
    ("pods", "250"),
    ("ephemeral-storage", "1Ti"),
];

/// Creates the Node if needed (labels as kubelet sets them).
pub async fn register(client: &Client, name: &str) -> Result<Node> {
    let api: Api<Node> = Api::all(client.clone());
    if let Some(n) = api.get_opt(name).await? {
        return Ok(n);
    }
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": std::env::consts::ARCH.replace("x86_64", "amd64").replace("aarch64", "arm64"),
                "beta.kubernetes.io/os": "linux",
                "moldau.io/podrunner": "true",
            },
        },
        "spec": {},
    }))?;
    match api.create(&PostParams::default(), &node).await {
        Ok(n) => Ok(n),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(api.get(name).await?),
        Err(e) => Err(e.into()),
    }
}

/// Writes the node status (Ready or not) with a fresh heartbeat.
pub async fn update_status(
    client: &Client,
    name: &str,
    ready: bool,
    since: &str,
    kubelet_port: u16,
) -> Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    let now = now_rfc3339();
    let cap: serde_json::Map<String, serde_json::Value> = CAPACITY
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    let cond = |t: &str, status: &str, reason: &str, msg: &str| {
        json!({"type": t, "status": status, "reason": reason, "message": msg,
               "lastHeartbeatTime": now, "lastTransitionTime": since})
    };
    let (rs, rr, rm) = if ready {
        (
            "True",
            "KubeletReady",
            "moldau-podrunner is posting ready status",
        )
    } else {
        ("False", "PodRunnerStopped", "moldau-podrunner stopped")
    };
    let status = json!({
        "status": {
            "capacity": cap,
            "allocatable": cap,
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "ok"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "ok"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "ok"),
                cond("Ready", rs, rr, rm),
            ],
            // Only the InternalIP: the API server reaches a node by the
            // first address of its preferred types, and a Hostname would be
            // resolved through DNS. `$patch: replace` drops any other
            // address an older runner reported.
            "addresses": [
                {"$patch": "replace"},
                {"type": "InternalIP", "address": "127.0.0.1"},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
            "nodeInfo": {
                "machineID": "moldau-e2e", "systemUUID": "moldau-e2e", "bootID": "moldau-e2e",
                "kernelVersion": "host", "osImage": "moldau-podrunner (host processes)",
                "containerRuntimeVersion": "moldau://0.1", "kubeletVersion": "v1.34.4-moldau",
                "kubeProxyVersion": "", "operatingSystem": "linux",
                "architecture": std::env::consts::ARCH.replace("x86_64", "amd64").replace("aarch64", "arm64"),
            },
        }
    });
    api.patch_status(name, &PatchParams::default(), &Patch::Strategic(status))
        .await?;
    Ok(())
}

/// Creates or renews the node Lease in `kube-node-lease`.
pub async fn renew_lease(client: &Client, node: &Node, duration: Duration) -> Result<()> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let api: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let now = MicroTime(Timestamp::now());
    match api.get_opt(&name).await? {
        Some(mut l) => {
            let spec = l.spec.get_or_insert_with(Default::default);
            spec.holder_identity = Some(name.clone());
            spec.renew_time = Some(now);
            spec.lease_duration_seconds = Some(duration.as_secs() as i32);
            api.replace(&name, &PostParams::default(), &l).await?;
        }
        None => {
            let l = Lease {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some("kube-node-lease".into()),
                    owner_references: Some(vec![OwnerReference {
                        api_version: "v1".into(),
                        kind: "Node".into(),
                        name: name.clone(),
                        uid: node.metadata.uid.clone().unwrap_or_default(),
                        ..Default::default()
                    }]),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(name.clone()),
                    lease_duration_seconds: Some(duration.as_secs() as i32),
                    renew_time: Some(now),
                    ..Default::default()
                }),
            };
            api.create(&PostParams::default(), &l).await?;
        }
    }
    Ok(())
}
