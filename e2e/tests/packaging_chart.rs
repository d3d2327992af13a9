//! The Helm chart (`charts/moldau`) without a cluster: `helm lint` and
//! `helm template` with the default values and each major toggle (watched
//! namespace, monitoring, templated CRDs), values rejected by the schema, the
//! chart's CRDs being the repository's `crds/` files, and
//! `manifests/install.yaml` matching the chart (`scripts/gen-install-manifest.sh --check`).

mod packaging_support;

use std::process::Command;
use std::time::Duration;

use anyhow::Result;
use moldau_e2e::{paths, run_with_timeout};
use packaging_support::{chart, helm_ok, repo};

fn enabled() -> bool {
    if !paths::e2e_enabled() {
        eprintln!("MOLDAU_E2E=0: skipped");
        return false;
    }
    true
}

/// The documents of a rendered manifest whose `kind:` is `kind`.
fn docs_of_kind<'a>(rendered: &'a str, kind: &str) -> Vec<&'a str> {
    rendered
        .split("\n---")
        .filter(|d| d.lines().any(|l| l == format!("kind: {kind}")))
        .collect()
}

fn doc_named<'a>(rendered: &'a str, kind: &str, name: &str) -> Option<&'a str> {
    docs_of_kind(rendered, kind)
        .into_iter()
        .find(|d| d.contains(&format!("\n  name: {name}\n")))
}

fn template(extra: &[&str]) -> Result<String> {
    let chart = chart();
    let mut args = vec!["template", "rel", chart.as_str(), "-n", "ops"];
    args.extend_from_slice(extra);
    helm_ok(&args)
}

fn lint(extra: &[&str]) -> Result<()> {
    let chart = chart();
    let mut args = vec!["lint", "--strict", chart.as_str()];
    args.extend_from_slice(extra);
    let out = helm_ok(&args)?;
    assert!(out.contains("0 chart(s) failed"), "{out}");
    Ok(())
}

#[test]
fn chart_lints_and_renders_defaults() -> Result<()> {
    if !enabled() {
        return Ok(());
    }
    lint(&[])?;
    let out = template(&[])?;
    let dep = doc_named(&out, "Deployment", "rel-moldau-operator").expect("operator Deployment");
    for want in [
        "image: \"moldau/operator:0.1.0\"",
        "serviceAccountName: rel-moldau",
        "fieldPath: metadata.namespace",
        "fieldPath: metadata.name",
        "fieldPath: status.podIP",
        "value: \"$(POD_IP):8080\"",
        "name: MOLDAU_LEADER_ELECTION\n              value: \"true\"",
        "--lease-name=moldau-operator",
        "runAsNonRoot: true",
        "readOnlyRootFilesystem: true",
        "allowPrivilegeEscalation: false",
        "- ALL",
        "type: RuntimeDefault",
        "path: /readyz",
        "path: /healthz",
        "memory: 256Mi",
    ] {
        assert!(dep.contains(want), "Deployment lacks {want:?}:\n{dep}");
    }
    assert!(!dep.contains("MOLDAU_WATCH_NAMESPACE"), "{dep}");
    // Cluster-wide RBAC, the leader-election Role, the aggregated roles.
    let cr = doc_named(&out, "ClusterRole", "rel-moldau-operator").expect("operator ClusterRole");
    for want in [
        "kafkaclusters/status",
        "kafkatopics/finalizers",
        "statefulsets",
        "poddisruptionbudgets",
        "rolebindings",
        "events.k8s.io",
        // read for KafkaCluster status, and granted to the brokers' Role
        "metadatashards",
    ] {
        assert!(cr.contains(want), "ClusterRole lacks {want}:\n{cr}");
    }
    // What the brokers' Role grants (operator/tests/rbac_grants.rs checks
    // rule by rule that the operator holds all of it).
    assert!(
        cr.contains("resources: [metadatashards]\n    verbs: [get, list, watch, create, update, patch, delete]"),
        "{cr}"
    );
    assert!(
        cr.contains(
            "apiGroups: [\"\", events.k8s.io]\n    resources: [events]\n    verbs: [create, patch]"
        ),
        "{cr}"
    );
    assert!(
        !cr.contains("\"*\"") && !cr.contains("- '*'"),
        "no wildcards: {cr}"
    );
    assert!(doc_named(&out, "ClusterRoleBinding", "rel-moldau-operator").is_some());
    assert!(doc_named(&out, "Role", "rel-moldau-leader-election").is_some());
    let view = doc_named(&out, "ClusterRole", "rel-moldau-view").expect("view role");
    assert!(view.contains("rbac.authorization.k8s.io/aggregate-to-view: \"true\""));
    let edit = doc_named(&out, "ClusterRole", "rel-moldau-edit").expect("edit role");
    assert!(edit.contains("rbac.authorization.k8s.io/aggregate-to-edit: \"true\""));
    assert!(doc_named(&out, "Service", "rel-moldau-operator-metrics").is_some());
    assert!(doc_named(&out, "ServiceAccount", "rel-moldau").is_some());
    for off in [
        "ServiceMonitor",
        "PodMonitor",
        "PrometheusRule",
        "CustomResourceDefinition",
        "Namespace",
        "ConfigMap",
    ] {
        assert!(
            docs_of_kind(&out, off).is_empty(),
            "{off} rendered by default"
        );
    }
    // Scheduling knobs reach the pod.
    let out = template(&[
        "--set",
        "nodeSelector.disk=ssd",
        "--set",
        "tolerations[0].key=dedicated,tolerations[0].operator=Exists",
        "--set",
        "replicas=3",
        "--set",
        "affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight=1",
        "--set",
        "affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm.topologyKey=kubernetes.io/hostname",
    ])?;
    let dep = doc_named(&out, "Deployment", "rel-moldau-operator").unwrap();
    for want in [
        "replicas: 3",
        "disk: ssd",
        "key: dedicated",
        "podAntiAffinity",
    ] {
        assert!(dep.contains(want), "{want}:\n{dep}");
    }
    Ok(())
}

#[test]
fn chart_watched_namespace_uses_roles_only() -> Result<()> {
    if !enabled() {
        return Ok(());
    }
    lint(&["--set", "watchNamespaces={apps}"])?;
    let out = template(&["--set", "watchNamespaces={apps}"])?;
    assert!(doc_named(&out, "ClusterRole", "rel-moldau-operator").is_none());
    assert!(doc_named(&out, "ClusterRoleBinding", "rel-moldau-operator").is_none());
    let role = doc_named(&out, "Role", "rel-moldau-operator").expect("Role");
    assert!(role.contains("namespace: apps"), "{role}");
    assert!(role.contains("metadatashards"), "{role}");
    let rb = doc_named(&out, "RoleBinding", "rel-moldau-operator").expect("RoleBinding");
    assert!(
        rb.contains("namespace: apps") && rb.contains("namespace: ops"),
        "{rb}"
    );
    let dep = doc_named(&out, "Deployment", "rel-moldau-operator").unwrap();
    assert!(
        dep.contains("name: MOLDAU_WATCH_NAMESPACE\n              value: \"apps\""),
        "{dep}"
    );
    // Only the aggregated user roles stay cluster-scoped.
    let crs: Vec<_> = docs_of_kind(&out, "ClusterRole");
    assert_eq!(crs.len(), 2, "{crs:?}");
    Ok(())
}

#[test]
fn chart_monitoring_renders_monitors_alerts_and_dashboards() -> Result<()> {
    if !enabled() {
        return Ok(());
    }
    let on = [
        "--set",
        "metrics.serviceMonitor.enabled=true",
        "--set",
        "metrics.prometheusRule.enabled=true",
        "--set",
        "grafana.dashboards.enabled=true",
    ];
    lint(&on)?;
    let out = template(&on)?;
    let sm = doc_named(&out, "ServiceMonitor", "rel-moldau-operator").expect("ServiceMonitor");
    assert!(sm.contains("port: http") && sm.contains("jobLabel: app.kubernetes.io/name"));
    let pm = doc_named(&out, "PodMonitor", "rel-moldau-brokers").expect("PodMonitor");
    assert!(pm.contains("app.kubernetes.io/name: moldau-broker") && pm.contains("any: true"));
    // The alerts group by kafka_cluster, the pod label moldau.io/cluster.
    assert!(
        pm.contains("sourceLabels: [__meta_kubernetes_pod_label_moldau_io_cluster]")
            && pm.contains("targetLabel: kafka_cluster"),
        "{pm}"
    );
    let rule = doc_named(&out, "PrometheusRule", "rel-moldau").expect("PrometheusRule");
    for alert in [
        "MoldauBrokerDown",
        "MoldauUnderReplicatedPartitions",
        "MoldauUnderMinIsrPartitions",
        "MoldauOfflinePartitions",
        "MoldauIsrFlapping",
        "MoldauBrokerDiskNearlyFull",
        "MoldauOperatorReconcileErrors",
        "MoldauOperatorNoLeader",
    ] {
        assert!(
            rule.contains(&format!("alert: {alert}")),
            "{alert}:\n{rule}"
        );
    }
    // Operator metric names used by the alerts are the ones it registers.
    let telemetry = std::fs::read_to_string(repo().join("operator/src/telemetry.rs"))?;
    assert!(telemetry.contains("Registry::with_prefix(\"moldau_operator\")"));
    for (metric, registered) in [
        (
            "moldau_operator_reconcile_errors_total",
            "\"reconcile_errors\"",
        ),
        ("moldau_operator_leader", "\"leader\""),
    ] {
        assert!(rule.contains(metric), "{metric}");
        assert!(
            telemetry.contains(registered),
            "operator no longer registers {registered}"
        );
    }
    assert!(rule.contains("> 0.85"), "disk threshold: {rule}");
    // Broker metric names used by the alerts are the ones the broker
    // registers (prometheus_client adds `_total` to counters).
    let metrics = std::fs::read_to_string(repo().join("broker/src/metrics.rs"))?;
    assert!(metrics.contains("Registry::with_prefix(\"moldau\")"));
    for (metric, registered) in [
        (
            "moldau_under_replicated_partitions",
            "\"under_replicated_partitions\"",
        ),
        (
            "moldau_under_min_isr_partitions",
            "\"under_min_isr_partitions\"",
        ),
        ("moldau_offline_partitions", "\"offline_partitions\""),
        ("moldau_isr_shrinks_total", "\"isr_shrinks\""),
        ("moldau_isr_expands_total", "\"isr_expands\""),
    ] {
        assert!(rule.contains(metric), "{metric}");
        assert!(
            metrics.contains(registered),
            "the broker no longer registers {registered}"
        );
    }
    // Offline partitions are reported by the controller's broker only: max
    // per cluster, never a sum that a controller change could double.
    assert!(
        rule.contains("max by (namespace, kafka_cluster) (moldau_offline_partitions) > 0"),
        "{rule}"
    );
    assert!(
        rule.contains("increase(moldau_isr_shrinks_total[10m])") && rule.contains("for: 30m"),
        "ISR flapping defaults: {rule}"
    );
    // Dashboards are valid JSON inside a ConfigMap labelled for the Grafana sidecar.
    let cm =
        doc_named(&out, "ConfigMap", "rel-moldau-dashboard-moldau-overview").expect("dashboard");
    assert!(cm.contains("grafana_dashboard: \"1\""), "{cm}");
    let raw =
        std::fs::read_to_string(repo().join("charts/moldau/dashboards/moldau-overview.json"))?;
    let dash: serde_json::Value = serde_json::from_str(&raw)?;
    assert_eq!(dash["uid"], "moldau-overview");
    assert!(dash["panels"].as_array().is_some_and(|p| p.len() >= 8));
    // The ISR flapping window and duration are values, checked by the schema.
    let out = template(
        &[
            &on[..],
            &[
                "--set",
                "metrics.prometheusRule.isrFlapping.window=5m",
                "--set",
                "metrics.prometheusRule.isrFlapping.for=1h",
            ],
        ]
        .concat(),
    )?;
    let rule = doc_named(&out, "PrometheusRule", "rel-moldau").unwrap();
    assert!(
        rule.contains("increase(moldau_isr_expands_total[5m])") && rule.contains("for: 1h"),
        "{rule}"
    );
    // The monitor of the brokers follows the watched namespace.
    let out = template(&[&on[..], &["--set", "watchNamespaces={apps}"]].concat())?;
    let pm = doc_named(&out, "PodMonitor", "rel-moldau-brokers").unwrap();
    assert!(pm.contains("matchNames:\n      - apps"), "{pm}");
    Ok(())
}

#[test]
fn chart_crds_are_the_repository_files() -> Result<()> {
    if !enabled() {
        return Ok(());
    }
    let crds = repo().join("crds");
    let link = repo().join("charts/moldau/crds");
    let meta = std::fs::symlink_metadata(&link)?;
    assert!(
        meta.file_type().is_symlink(),
        "charts/moldau/crds must be a symlink to ../../crds"
    );
    assert_eq!(std::fs::canonicalize(&link)?, std::fs::canonicalize(&crds)?);
    let mut files: Vec<_> = std::fs::read_dir(&crds)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    files.sort();
    assert!(files.len() >= 2, "{files:?}");

    // `helm template --include-crds` (what `helm install` applies) holds each file verbatim.
    let out = template(&["--include-crds"])?;
    for f in &files {
        let text = std::fs::read_to_string(f)?;
        assert!(
            out.contains(text.trim_end()),
            "{} not rendered verbatim",
            f.display()
        );
    }
    // The packaged chart carries them too (helm follows the symlink).
    let dir = tempfile_dir("moldau-chart-pkg")?;
    helm_ok(&["package", &chart(), "-d", &dir.to_string_lossy()])?;
    let tgz = dir.join("moldau-0.1.0.tgz");
    let list = Command::new("tar").arg("tzf").arg(&tgz).output()?;
    let list = String::from_utf8_lossy(&list.stdout);
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy();
        assert!(
            list.contains(&format!("moldau/crds/{name}")),
            "{name} missing from package:\n{list}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);

    // Templated (opt-in): the same CRDs, kept on uninstall.
    lint(&["--set", "crds.templated=true"])?;
    let out = template(&["--set", "crds.templated=true"])?;
    let docs = docs_of_kind(&out, "CustomResourceDefinition");
    assert_eq!(docs.len(), files.len(), "{out}");
    for name in [
        "kafkaclusters.moldau.io",
        "kafkatopics.moldau.io",
        "metadatashards.moldau.io",
    ] {
        let d = docs
            .iter()
            .find(|d| d.contains(&format!("\n  name: {name}\n")))
            .unwrap_or_else(|| panic!("templated {name}"));
        assert!(d.contains("helm.sh/resource-policy: keep"), "{d}");
        assert!(
            d.contains("x-kubernetes-validations") || name.contains("topics"),
            "{d}"
        );
    }
    Ok(())
}

fn tempfile_dir(prefix: &str) -> Result<std::path::PathBuf> {
    let d = std::env::temp_dir().join(format!("{prefix}-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&d)?;
    Ok(d)
}

#[test]
fn chart_schema_rejects_bad_values() -> Result<()> {
    if !enabled() {
        return Ok(());
    }
    let chart = chart();
    // (value, expected message, rejected by the schema — `helm lint` too)
    for (set, want, schema) in [
        (
            "image.tg=v1",
            "additional properties 'tg' not allowed",
            true,
        ),
        (
            "replica=2",
            "additional properties 'replica' not allowed",
            true,
        ),
        ("replicas=-1", "minimum", true),
        ("watchNamespaces={a,b}", "maxItems", true),
        ("image.pullPolicy=Sometimes", "/image/pullPolicy", true),
        (
            "metrics.prometheusRule.diskUsageThreshold=2",
            "diskUsageThreshold",
            true,
        ),
        (
            "metrics.prometheusRule.isrFlapping.for=soon",
            "isrFlapping",
            true,
        ),
        (
            "leaderElection.enabled=false,replicas=2",
            "leaderElection.enabled=false needs replicas",
            false,
        ),
    ] {
        let out = moldau_e2e::helm(&["template", "rel", &chart, "--set", set])?;
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !out.status.success(),
            "helm template --set {set} passed:\n{all}"
        );
        assert!(
            all.contains(want),
            "helm template --set {set}: no {want:?} in\n{all}"
        );
        if schema {
            let out = moldau_e2e::helm(&["lint", &chart, "--set", set])?;
            assert!(!out.status.success(), "helm lint --set {set} passed");
        }
    }
    Ok(())
}

#[test]
fn install_manifest_is_generated_from_the_chart() -> Result<()> {
    if !enabled() {
        return Ok(());
    }
    moldau_e2e::ensure_tools()?;
    let out = run_with_timeout(
        Command::new("bash")
            .arg(repo().join("scripts/gen-install-manifest.sh"))
            .arg("--check")
            .env("HELM", paths::tool("helm")),
        Duration::from_secs(120),
    )?;
    assert!(
        out.status.success(),
        "manifests/install.yaml drifted from the chart; run scripts/gen-install-manifest.sh\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(repo().join("manifests/install.yaml"))?;
    for kind in [
        "Namespace",
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
    ] {
        assert!(
            !docs_of_kind(&text, kind).is_empty(),
            "install.yaml has no {kind}"
        );
    }
    assert!(text.contains("namespace: moldau-system"));
    Ok(())
}
