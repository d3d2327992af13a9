//! The API server answers; CRDs applied with server-side apply become
//! Established; custom resources violating the OpenAPI schema or a CEL rule
//! are rejected by a server-side dry run.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use moldau_e2e::{client, kubectl_ok, paths, wait_for, TestNamespace};

#[tokio::test]
async fn api_server_answers() -> anyhow::Result<()> {
    if !paths::e2e_enabled() {
        eprintln!("MOLDAU_E2E=0: skipped");
        return Ok(());
    }
    let c = client().await?;
    let v = c.apiserver_version().await?;
    assert_eq!(v.major, "1");
    let readyz = kubectl_ok(&["get", "--raw", "/readyz"])?;
    assert_eq!(readyz.trim(), "ok");
    // The control plane's scripts only ever bind loopback addresses.
    let eps = kubectl_ok(&[
        "get",
        "--raw",
        "/api/v1/namespaces/default/services/kubernetes",
    ])?;
    let svc: serde_json::Value = serde_json::from_str(&eps)?;
    let ip = svc["spec"]["clusterIP"].as_str().unwrap_or_default();
    assert!(
        ip.starts_with("127."),
        "service ClusterIP {ip} is outside 127.0.0.0/8"
    );
    Ok(())
}

/// Listening TCP sockets (address, port) from /proc/net/tcp and tcp6.
fn listeners() -> Vec<(String, u16)> {
    let mut out = vec![];
    for (file, v6) in [("/proc/net/tcp", false), ("/proc/net/tcp6", true)] {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 4 || f[3] != "0A" {
                continue;
            }
            let Some((addr, port)) = f[1].split_once(':') else {
                continue;
            };
            let port = u16::from_str_radix(port, 16).unwrap_or(0);
            let addr = if v6 {
                format!("[{addr}]")
            } else {
                let n = u32::from_str_radix(addr, 16).unwrap_or(0);
                std::net::Ipv4Addr::from(n.swap_bytes()).to_string()
            };
            out.push((addr, port));
        }
    }
    out
}

fn port_env(name: &str, default: u16) -> u16 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::test]
async fn control_plane_listens_on_loopback_only() -> anyhow::Result<()> {
    if !paths::e2e_enabled() {
        eprintln!("MOLDAU_E2E=0: skipped");
        return Ok(());
    }
    moldau_e2e::ensure_control_plane()?;
    let ports = [
        port_env("MOLDAU_E2E_ETCD_PORT", 12379),
        port_env("MOLDAU_E2E_ETCD_PEER_PORT", 12380),
        port_env("MOLDAU_E2E_APISERVER_PORT", 16443),
        port_env("MOLDAU_E2E_KCM_PORT", 10257),
        port_env("MOLDAU_E2E_SCHEDULER_PORT", 10259),
    ];
    let l = listeners();
    for port in ports {
        let on: Vec<&String> = l
            .iter()
            .filter(|(_, p)| *p == port)
            .map(|(a, _)| a)
            .collect();
        assert!(!on.is_empty(), "nothing listens on port {port}");
        for a in on {
            assert!(
                a.starts_with("127."),
                "port {port} is bound to {a}, outside 127.0.0.0/8"
            );
        }
    }
    Ok(())
}

#[tokio::test]
async fn crd_server_side_apply_and_validation() -> anyhow::Result<()> {
    if !paths::e2e_enabled() {
        eprintln!("MOLDAU_E2E=0: skipped");
        return Ok(());
    }
    let crd_file = paths::fixture("crd-widgets.yaml");
    kubectl_ok(&[
        "apply",
        "--server-side",
        "--field-manager=moldau-e2e",
        "-f",
        crd_file.to_str().unwrap(),
    ])?;
    let c = client().await?;
    let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
    wait_for(Duration::from_secs(30), "CRD Established", || {
        let crds = crds.clone();
        async move {
            let crd = crds.get("widgets.e2e.moldau.io").await?;
            let established = crd
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            Ok(established.then_some(()))
        }
    })
    .await?;

    let ns = TestNamespace::new("crd").await?;
    let f = |n: &str| paths::fixture(n).to_str().unwrap().to_string();
    // Discovery may lag Established by a moment: retry the valid one.
    let valid = f("widget-valid.yaml");
    wait_for(Duration::from_secs(30), "valid Widget accepted", || {
        let out = ns.kubectl(&["apply", "--dry-run=server", "-f", &valid]);
        async move {
            let out = out?;
            if out.status.success() {
                Ok(Some(()))
            } else {
                Err(anyhow::anyhow!("{}", String::from_utf8_lossy(&out.stderr)))
            }
        }
    })
    .await?;

    let out = ns.kubectl(&[
        "apply",
        "--dry-run=server",
        "-f",
        &f("widget-bad-schema.yaml"),
    ])?;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "schema violation accepted");
    assert!(
        err.contains("spec.replicas") && err.contains("less than or equal to 9"),
        "unexpected error: {err}"
    );
    assert!(
        err.contains("spec.size"),
        "enum violation not reported: {err}"
    );

    let out = ns.kubectl(&["apply", "--dry-run=server", "-f", &f("widget-bad-cel.yaml")])?;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "CEL violation accepted");
    assert!(
        err.contains("minReplicas must not exceed replicas"),
        "unexpected error: {err}"
    );
    // Nothing was created by the dry runs.
    let list = ns.kubectl_ok(&["get", "widgets", "-o", "name"])?;
    assert!(list.trim().is_empty(), "dry run created objects: {list}");
    Ok(())
}
