//! The chart installed into the real control plane as a user would, with the
//! pod runner running the operator image as the `moldau-operator` binary and
//! the broker image as `moldau-broker`:
//!
//! - `helm_install_small_cluster_produce_consume_uninstall` — the README path:
//!   `helm install` → the operator pod runs as its own ServiceAccount (the
//!   pod runner hands it a token of that account, so the chart's RBAC is what
//!   it gets) and becomes Ready, holding the leader Lease → `kubectl apply`
//!   of `manifests/examples/kafkacluster-small.yaml` and `kafkatopics.yaml`
//!   → the broker is Ready, the topics exist on it (kcat -L on the pod IP) →
//!   produce and consume with kcat → `helm uninstall` removes the operator
//!   and keeps the CRDs, the KafkaCluster, its brokers and their data.
//! - `helm_upgrade_updates_templated_crds` — `crds.templated=true`: adopting
//!   existing CRDs, `helm upgrade` with a changed CRD changes it in the API
//!   server, and `helm uninstall` keeps the CRDs.
//!
//! The two tests share one pod runner and run one after the other (both
//! install an operator watching every namespace).

mod packaging_support;

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::ListParams;
use moldau_e2e::{kubectl, kubectl_ok, paths, pod_is_ready, wait_for, TestNamespace};
use packaging_support::{chart, container_log, helm_ok, kcat, pod_identity, pod_runner, repo};

const LONG: Duration = Duration::from_secs(240);

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn enabled() -> bool {
    if !paths::e2e_enabled() {
        eprintln!("MOLDAU_E2E=0: skipped");
        return false;
    }
    true
}

/// Waits for the operator pod of `release` to be Ready; returns it.
pub async fn operator_pod(ns: &TestNamespace, instance: &str) -> Result<Pod> {
    let pods = ns.api::<Pod>();
    let sel =
        format!("app.kubernetes.io/name=moldau-operator,app.kubernetes.io/instance={instance}");
    wait_for(LONG, "the operator pod Ready", || {
        let pods = pods.clone();
        let sel = sel.clone();
        async move {
            let list = pods.list(&ListParams::default().labels(&sel)).await?;
            Ok(list.items.into_iter().find(pod_is_ready))
        }
    })
    .await
}

/// Checks that the operator pod runs as `sa` and leads: the credentials the
/// pod runner handed the process authenticate as the ServiceAccount, and the
/// leader Lease (written with them) names the pod.
pub async fn check_operator_identity(ns: &TestNamespace, pod: &Pod, sa: &str) -> Result<()> {
    let name = pod.metadata.name.clone().context("pod name")?;
    let uid = pod.metadata.uid.clone().context("pod uid")?;
    assert_eq!(
        pod.spec
            .as_ref()
            .and_then(|s| s.service_account_name.as_deref()),
        Some(sa)
    );
    let who = pod_identity(&ns.name, &name, &uid)?;
    assert_eq!(who, format!("system:serviceaccount:{}:{sa}", ns.name));
    let leases = ns.api::<Lease>();
    wait_for(LONG, "the operator to hold its Lease", || {
        let leases = leases.clone();
        let name = name.clone();
        async move {
            let l = leases.get_opt("moldau-operator").await?;
            let holder = l.and_then(|l| l.spec).and_then(|s| s.holder_identity);
            Ok((holder.as_deref() == Some(name.as_str())).then_some(()))
        }
    })
    .await?;
    Ok(())
}

fn jsonpath(ns: &str, what: &str, path: &str) -> Result<String> {
    Ok(
        kubectl_ok(&["-n", ns, "get", what, "-o", &format!("jsonpath={path}")])?
            .trim()
            .to_string(),
    )
}

async fn wait_jsonpath(ns: &str, what: &str, path: &str, want: &str) -> Result<()> {
    let desc = format!("{ns}/{what} {path} == {want}");
    wait_for(LONG, &desc, || async move {
        Ok((jsonpath(ns, what, path).ok().as_deref() == Some(want)).then_some(()))
    })
    .await
}

/// Every CRD the chart ships (`charts/moldau/crds/<name>.yaml`), so a new
/// kind is covered without editing this list.
fn crd_names() -> Vec<String> {
    let dir = repo().join("charts/moldau/crds");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| {
            let name = e.ok()?.file_name().to_string_lossy().into_owned();
            name.strip_suffix(".yaml").map(str::to_string)
        })
        .collect();
    names.sort();
    assert!(names.len() >= 3, "CRDs in {}: {names:?}", dir.display());
    names
}

#[tokio::test]
async fn helm_install_small_cluster_produce_consume_uninstall() -> Result<()> {
    if !enabled() {
        return Ok(());
    }
    let _serial = SERIAL.lock().await;
    pod_runner()?;
    let ops = TestNamespace::new("pkg-helm").await?;
    kubectl_ok(&[
        "label",
        "ns",
        &ops.name,
        "pod-security.kubernetes.io/enforce=restricted",
    ])?;
    let kafka = TestNamespace::new("pkg-kafka").await?;
    let release = ops.name.clone();
    let sa = format!("{release}-moldau");

    // 1. helm install (CRDs from the chart's crds/ when missing).
    let t = std::time::Instant::now();
    let out = helm_ok(&[
        "install",
        &release,
        &chart(),
        "-n",
        &ops.name,
        "--wait",
        "--timeout",
        "110s",
    ])?;
    assert!(out.contains("STATUS: deployed"), "{out}");
    assert!(
        out.contains("kafkacluster-small.yaml"),
        "NOTES tell how to create a cluster:\n{out}"
    );
    for crd in crd_names() {
        kubectl_ok(&[
            "wait",
            "--for=condition=Established",
            &format!("crd/{crd}"),
            "--timeout=60s",
        ])?;
    }
    let pod = operator_pod(&ops, &release).await?;
    check_operator_identity(&ops, &pod, &sa).await?;
    eprintln!("operator ready {:?} after helm install", t.elapsed());

    // 2. The small example cluster and its topics.
    let examples = repo().join("manifests/examples");
    kafka.kubectl_ok(&[
        "apply",
        "-f",
        &examples.join("kafkacluster-small.yaml").to_string_lossy(),
    ])?;
    kafka.kubectl_ok(&[
        "apply",
        "-f",
        &examples.join("kafkatopics.yaml").to_string_lossy(),
    ])?;
    let ns = kafka.name.as_str();
    wait_jsonpath(
        ns,
        "kafkacluster/small",
        "{.status.conditions[?(@.type==\"Ready\")].status}",
        "True",
    )
    .await?;
    wait_jsonpath(ns, "kafkacluster/small", "{.status.readyReplicas}", "1").await?;
    // The README's command agrees.
    kafka.kubectl_ok(&[
        "wait",
        "kafkacluster/small",
        "--for=condition=Ready",
        "--timeout=60s",
    ])?;
    let listed = kafka.kubectl_ok(&["get", "kafkaclusters,kafkatopics"])?;
    assert!(
        listed.contains("small") && listed.contains("orders"),
        "{listed}"
    );
    wait_jsonpath(
        ns,
        "kafkatopic/orders",
        "{.status.conditions[?(@.type==\"Ready\")].status}",
        "True",
    )
    .await?;
    wait_jsonpath(
        ns,
        "kafkatopic/customer-state",
        "{.status.conditions[?(@.type==\"Ready\")].status}",
        "True",
    )
    .await?;
    eprintln!(
        "cluster and topics ready {:?} after helm install",
        t.elapsed()
    );

    // 3. The topics exist on the broker; produce and consume with kcat.
    let ip = jsonpath(ns, "pod/small-0", "{.status.podIP}")?;
    assert!(ip.starts_with("127."), "pod IP {ip}");
    let broker = format!("{ip}:9092");
    let md = kcat(&["-b", &broker, "-L", "-m", "10"], None)?;
    assert!(md.contains("topic \"orders\" with 3 partitions"), "{md}");
    assert!(
        md.contains("topic \"customer.state\" with 1 partitions"),
        "{md}"
    );
    kcat(
        &["-b", &broker, "-P", "-t", "orders", "-p", "0", "-m", "10"],
        Some(b"one\ntwo\nthree\n"),
    )?;
    let got = kcat(
        &[
            "-b",
            &broker,
            "-C",
            "-t",
            "orders",
            "-p",
            "0",
            "-o",
            "beginning",
            "-c",
            "3",
            "-e",
            "-m",
            "10",
        ],
        None,
    )?;
    assert_eq!(
        got.lines().collect::<Vec<_>>(),
        ["one", "two", "three"],
        "{got}"
    );

    // The operator got every permission it needed from the chart's RBAC.
    let log = container_log(
        &ops.name,
        pod.metadata.name.as_deref().unwrap(),
        pod.metadata.uid.as_deref().unwrap(),
        "operator",
    );
    assert!(
        !log.to_lowercase().contains("forbidden"),
        "RBAC denied the operator something:\n{log}"
    );

    // 4. helm uninstall: operator gone; CRDs, cluster, brokers and data stay.
    helm_ok(&[
        "uninstall",
        &release,
        "-n",
        &ops.name,
        "--wait",
        "--timeout",
        "110s",
    ])?;
    assert!(ops
        .api::<Deployment>()
        .list(&ListParams::default())
        .await?
        .items
        .is_empty());
    let pods = ops.api::<Pod>();
    wait_for(Duration::from_secs(90), "the operator pod gone", || {
        let pods = pods.clone();
        async move {
            Ok(pods
                .list(&ListParams::default())
                .await?
                .items
                .is_empty()
                .then_some(()))
        }
    })
    .await?;
    for crd in crd_names() {
        kubectl_ok(&["get", "crd", &crd])?;
    }
    assert_eq!(
        jsonpath(ns, "kafkacluster/small", "{.metadata.name}")?,
        "small"
    );
    assert_eq!(
        jsonpath(ns, "kafkatopic/orders", "{.metadata.name}")?,
        "orders"
    );
    let pvcs = kafka
        .api::<PersistentVolumeClaim>()
        .list(&ListParams::default())
        .await?;
    let claim = pvcs
        .items
        .first()
        .and_then(|p| p.metadata.name.clone())
        .context("broker PVC")?;
    let data = kafka.pvc_dir(&claim);
    assert!(dir_has_files(&data), "no data left in {}", data.display());
    let again = kcat(
        &[
            "-b",
            &broker,
            "-C",
            "-t",
            "orders",
            "-p",
            "0",
            "-o",
            "beginning",
            "-c",
            "3",
            "-e",
            "-m",
            "10",
        ],
        None,
    )?;
    assert_eq!(
        again.lines().count(),
        3,
        "the broker still serves its data: {again}"
    );

    // Cleanup without an operator: release the topic finalizers.
    for t in ["orders", "customer-state"] {
        let _ = kafka.kubectl(&[
            "patch",
            "kafkatopic",
            t,
            "--type=merge",
            "-p",
            "{\"metadata\":{\"finalizers\":null}}",
        ]);
    }
    Ok(())
}

fn dir_has_files(dir: &Path) -> bool {
    fn walk(d: &Path) -> bool {
        std::fs::read_dir(d)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| {
                let p = e.path();
                if p.is_dir() {
                    walk(&p)
                } else {
                    e.metadata().map(|m| m.len() > 0).unwrap_or(false)
                }
            })
    }
    walk(dir)
}

/// Copies the chart (following the crds symlink) and adds a printer column
/// to the KafkaTopic CRD.
fn changed_chart(dir: &Path) -> Result<()> {
    let st = std::process::Command::new("cp")
        .args(["-rL", &chart()])
        .arg(dir)
        .status()?;
    anyhow::ensure!(st.success(), "cp -rL chart");
    let crd = dir.join("moldau/crds/kafkatopics.moldau.io.yaml");
    let text = std::fs::read_to_string(&crd)?;
    let marker = "  - additionalPrinterColumns:\n";
    anyhow::ensure!(text.contains(marker), "unexpected CRD layout");
    let changed = text.replacen(
        marker,
        &format!("{marker}    - jsonPath: .spec.clusterRef\n      name: UpgradeCheck\n      priority: 1\n      type: string\n"),
        1,
    );
    std::fs::write(&crd, changed)?;
    Ok(())
}

fn printer_columns() -> Result<String> {
    kubectl_ok(&[
        "get",
        "crd",
        "kafkatopics.moldau.io",
        "-o",
        "jsonpath={.spec.versions[0].additionalPrinterColumns[*].name}",
    ])
}

#[tokio::test]
async fn helm_upgrade_updates_templated_crds() -> Result<()> {
    if !enabled() {
        return Ok(());
    }
    let _serial = SERIAL.lock().await;
    pod_runner()?;
    let ops = TestNamespace::new("pkg-crds").await?;
    let release = ops.name.clone();

    // CRDs that exist already (installed from crds/ or by kubectl) are
    // adopted by the release, as the README says.
    for crd in crd_names() {
        let crd = crd.as_str();
        if kubectl(&["get", "crd", crd])?.status.success() {
            kubectl_ok(&[
                "label",
                "crd",
                crd,
                "app.kubernetes.io/managed-by=Helm",
                "--overwrite",
            ])?;
            kubectl_ok(&[
                "annotate",
                "crd",
                crd,
                &format!("meta.helm.sh/release-name={release}"),
                &format!("meta.helm.sh/release-namespace={}", ops.name),
                "--overwrite",
            ])?;
        }
    }
    helm_ok(&[
        "install",
        &release,
        &chart(),
        "-n",
        &ops.name,
        "--skip-crds",
        "--set",
        "crds.templated=true",
        "--wait",
        "--timeout",
        "110s",
    ])?;
    for crd in crd_names() {
        kubectl_ok(&[
            "wait",
            "--for=condition=Established",
            &format!("crd/{crd}"),
            "--timeout=60s",
        ])?;
        let keep = kubectl_ok(&[
            "get",
            "crd",
            &crd,
            "-o",
            "jsonpath={.metadata.annotations.helm\\.sh/resource-policy}",
        ])?;
        assert_eq!(keep.trim(), "keep", "{crd}");
    }
    let pod = operator_pod(&ops, &release).await?;
    check_operator_identity(&ops, &pod, &format!("{release}-moldau")).await?;
    assert!(!printer_columns()?.contains("UpgradeCheck"));

    // helm upgrade with a changed CRD changes it in the API server.
    let tmp = std::env::temp_dir().join(format!("moldau-chart-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&tmp)?;
    changed_chart(&tmp)?;
    let changed = tmp.join("moldau");
    helm_ok(&[
        "upgrade",
        &release,
        &changed.to_string_lossy(),
        "-n",
        &ops.name,
        "--reuse-values",
        "--wait",
        "--timeout",
        "110s",
    ])?;
    let cols = printer_columns()?;
    assert!(cols.contains("UpgradeCheck"), "CRD not upgraded: {cols}");
    let _ = std::fs::remove_dir_all(&tmp);

    // And back to the repository's CRDs.
    helm_ok(&[
        "upgrade",
        &release,
        &chart(),
        "-n",
        &ops.name,
        "--reuse-values",
        "--wait",
        "--timeout",
        "110s",
    ])?;
    assert!(!printer_columns()?.contains("UpgradeCheck"));

    // Uninstall keeps the templated CRDs.
    helm_ok(&[
        "uninstall",
        &release,
        "-n",
        &ops.name,
        "--wait",
        "--timeout",
        "110s",
    ])?;
    for crd in crd_names() {
        kubectl_ok(&["get", "crd", &crd])?;
    }
    assert!(ops
        .api::<Deployment>()
        .list(&ListParams::default())
        .await?
        .items
        .is_empty());
    Ok(())
}
