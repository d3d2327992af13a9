//! `kubectl apply -f manifests/install.yaml` (the chart rendered by
//! `scripts/gen-install-manifest.sh`) into a fresh namespace gives the same
//! running operator as `helm install`: its pod runs as its own
//! ServiceAccount in a namespace enforcing the `restricted` Pod Security
//! level, becomes Ready and holds the leader Lease.

mod packaging_support;

use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use moldau_e2e::{kubectl, kubectl_ok, paths, pod_is_ready, wait_for, TestNamespace};
use packaging_support::{container_log, pod_identity, pod_runner, repo};

const LONG: Duration = Duration::from_secs(240);

#[tokio::test]
async fn install_manifest_runs_the_operator() -> Result<()> {
    if !paths::e2e_enabled() {
        eprintln!("MOLDAU_E2E=0: skipped");
        return Ok(());
    }
    pod_runner()?;
    let ns = TestNamespace::new("pkg-manifest").await?;
    // The file installs into moldau-system; the test uses its own namespace.
    let text = std::fs::read_to_string(repo().join("manifests/install.yaml"))?;
    assert!(text.contains("namespace: moldau-system"));
    let text = text.replace("moldau-system", &ns.name);
    let file = std::env::temp_dir().join(format!("{}-install.yaml", ns.name));
    std::fs::write(&file, text)?;
    let t = std::time::Instant::now();
    let applied = kubectl_ok(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        &file.to_string_lossy(),
    ]);
    let _ = std::fs::remove_file(&file);
    applied?;

    let level = kubectl_ok(&[
        "get",
        "ns",
        &ns.name,
        "-o",
        "jsonpath={.metadata.labels.pod-security\\.kubernetes\\.io/enforce}",
    ])?;
    assert_eq!(level.trim(), "restricted");
    let pods = ns.api::<Pod>();
    let pod = wait_for(LONG, "the operator pod Ready", || {
        let pods = pods.clone();
        async move {
            let list = pods
                .list(&ListParams::default().labels("app.kubernetes.io/name=moldau-operator"))
                .await?;
            Ok(list.items.into_iter().find(pod_is_ready))
        }
    })
    .await?;
    eprintln!("operator ready {:?} after kubectl apply", t.elapsed());
    let name = pod.metadata.name.clone().context("pod name")?;
    let uid = pod.metadata.uid.clone().context("uid")?;
    assert_eq!(
        pod.spec
            .as_ref()
            .and_then(|s| s.service_account_name.as_deref()),
        Some("moldau")
    );
    assert_eq!(
        pod_identity(&ns.name, &name, &uid)?,
        format!("system:serviceaccount:{}:moldau", ns.name)
    );
    let leases = ns.api::<Lease>();
    wait_for(LONG, "the operator to hold its Lease", || {
        let leases = leases.clone();
        let name = name.clone();
        async move {
            let holder = leases
                .get_opt("moldau-operator")
                .await?
                .and_then(|l| l.spec)
                .and_then(|s| s.holder_identity);
            Ok((holder.as_deref() == Some(name.as_str())).then_some(()))
        }
    })
    .await?;
    let log = container_log(&ns.name, &name, &uid, "operator");
    assert!(!log.to_lowercase().contains("forbidden"), "{log}");

    // The cluster-scoped objects of install.yaml (the CRDs stay).
    let _ = kubectl(&[
        "delete",
        "clusterrolebinding",
        "moldau-operator",
        "--ignore-not-found",
    ]);
    let _ = kubectl(&[
        "delete",
        "clusterrole",
        "moldau-operator",
        "moldau-view",
        "moldau-edit",
        "--ignore-not-found",
    ]);
    Ok(())
}
