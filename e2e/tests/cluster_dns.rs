//! Cluster DNS on the network-namespace plane ([`moldau_e2e::netns_plane`]):
//! CoreDNS, built from its Go module, serves the names a StatefulSet's pods
//! use for each other — `<pod>.<headless service>` through each pod's own
//! search path, the fully qualified `<pod>.<service>.<ns>.svc.cluster.local`,
//! the headless Service's name for every pod, a ClusterIP Service's name —
//! and a recreated pod's name follows it to its new address. These are the
//! names brokers can advertise and certificates can name.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Result};
use moldau_e2e::netns_plane::{poll_until, NetnsPlane, POD_NETWORK};
use moldau_e2e::paths;
use serde_json::{json, Value};

const NS: &str = "dns-test";

fn objects() -> Value {
    let pod_env = |name: &str, path: &str| json!({"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}});
    json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "peers", "namespace": NS},
         "spec": {"clusterIP": "None", "publishNotReadyAddresses": true, "selector": {"app": "web"},
                  "ports": [{"name": "http", "port": 8080}]}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "front", "namespace": NS},
         "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 8080}]}},
        {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web", "namespace": NS},
         "spec": {"replicas": 2, "serviceName": "peers", "podManagementPolicy": "Parallel",
                  "selector": {"matchLabels": {"app": "web"}},
                  "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                      "terminationGracePeriodSeconds": 2,
                      "containers": [{
                          "name": "testpod", "image": "moldau/testpod:latest",
                          "args": ["--listen", "$(POD_IP):8080", "--data", "/data"],
                          "env": [pod_env("POD_IP", "status.podIP"), pod_env("POD_NAME", "metadata.name"),
                                  pod_env("POD_NAMESPACE", "metadata.namespace")],
                          "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 1},
                          "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                      "volumes": [{"name": "data", "emptyDir": {}}]}}}},
    ]})
}

/// `GET http://<ip>:8080<path>` from inside the namespace: (status, body).
fn get(plane: &NetnsPlane, ip: &str, path: &str) -> Result<(u16, String)> {
    let mut curl = Command::new("curl");
    curl.args([
        "-s",
        "--max-time",
        "10",
        "-w",
        "\n%{http_code}",
        &format!("http://{ip}:8080{path}"),
    ]);
    let out = plane.exec(&curl, Duration::from_secs(15))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    Ok((code.trim().parse().unwrap_or(0), body.to_string()))
}

fn resolved(plane: &NetnsPlane, from_ip: &str, name: &str) -> Result<Vec<String>> {
    let (code, body) = get(plane, from_ip, &format!("/resolve/{name}"))?;
    if code != 200 {
        bail!("{name} did not resolve in the pod at {from_ip}: {code} {body}");
    }
    let mut ips: Vec<String> = serde_json::from_str(&body)?;
    ips.sort();
    ips.dedup();
    Ok(ips)
}

#[test]
fn pods_resolve_each_other_through_the_cluster_dns() -> Result<()> {
    if !paths::e2e_enabled() {
        return Ok(());
    }
    let plane = NetnsPlane::up(
        Path::new(env!("CARGO_BIN_EXE_moldau-podrunner")),
        &[(
            "moldau/testpod",
            Path::new(env!("CARGO_BIN_EXE_moldau-testpod")),
        )],
    )?;
    plane.kubectl_ok(&["create", "namespace", NS])?;
    let file = std::env::temp_dir().join(format!("{}-objects.json", plane.name()));
    std::fs::write(&file, objects().to_string())?;
    plane.kubectl_ok(&["apply", "-f", &file.to_string_lossy()])?;
    let _ = std::fs::remove_file(&file);
    poll_until("web-0 and web-1 Ready", Duration::from_secs(120), || {
        let out = plane.kubectl(&[
            "-n",
            NS,
            "get",
            "pods",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type==\"Ready\")].status} {end}",
        ])?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        Ok((text.contains("web-0=True") && text.contains("web-1=True")).then_some(()))
    })?;
    let ip0 = plane.pod_ip(NS, "web-0")?.expect("web-0 has an address");
    let ip1 = plane.pod_ip(NS, "web-1")?.expect("web-1 has an address");
    let pod_prefix = POD_NETWORK.rsplitn(3, '.').last().unwrap().to_string();
    assert!(
        ip0.starts_with(&pod_prefix) && ip1.starts_with(&pod_prefix),
        "pod addresses {ip0}, {ip1} in {POD_NETWORK}/16"
    );

    // The per-pod name, through the pod's own search path (its namespace
    // first) and fully qualified; the headless Service names every pod.
    // EndpointSlices follow the pods, so the first answers may lag them.
    poll_until("web-1.peers from web-0", Duration::from_secs(60), || {
        Ok((resolved(&plane, &ip0, "web-1.peers").ok() == Some(vec![ip1.clone()])).then_some(()))
    })?;
    assert_eq!(
        resolved(&plane, &ip0, "web-1.peers.dns-test.svc.cluster.local")?,
        vec![ip1.clone()]
    );
    assert_eq!(
        resolved(&plane, &ip1, "web-0.peers.dns-test.svc")?,
        vec![ip0.clone()]
    );
    let mut both = vec![ip0.clone(), ip1.clone()];
    both.sort();
    assert_eq!(
        resolved(&plane, &ip1, "peers")?,
        both,
        "the headless Service names every pod"
    );
    // A ClusterIP Service resolves to its ClusterIP (which is never dialed).
    let cluster_ip = plane.kubectl_ok(&[
        "-n",
        NS,
        "get",
        "svc",
        "front",
        "-o",
        "jsonpath={.spec.clusterIP}",
    ])?;
    assert_eq!(resolved(&plane, &ip0, "front")?, vec![cluster_ip]);
    // A name outside the cluster's zone does not resolve (nothing is
    // forwarded off the namespace).
    assert_eq!(get(&plane, &ip0, "/resolve/example.invalid")?.0, 404);

    // Dialed by name: web-0 reaches web-1's server.
    let (code, body) = get(&plane, &ip0, "/peer/web-1.peers:8080")?;
    assert_eq!(code, 200, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body)?["pod"], "web-1");

    // A recreated pod keeps its name, which follows it to its new address.
    plane.kubectl_ok(&[
        "-n",
        NS,
        "delete",
        "pod",
        "web-1",
        "--wait=true",
        "--timeout=60s",
    ])?;
    let new_ip = poll_until(
        "web-1 recreated with an address",
        Duration::from_secs(90),
        || Ok(plane.pod_ip(NS, "web-1")?.filter(|ip| *ip != ip1)),
    )?;
    poll_until(
        "web-1.peers to follow the pod",
        Duration::from_secs(60),
        || {
            Ok(
                (resolved(&plane, &ip0, "web-1.peers").ok() == Some(vec![new_ip.clone()]))
                    .then_some(()),
            )
        },
    )?;
    Ok(())
}
