//! RBAC escalation prevention lets the operator create the brokers' Role only
//! when it holds every permission in it. Checks, rule by rule, that the
//! operator's shipped RBAC — `operator/deploy/clusterrole.yaml` and the
//! ClusterRole of `manifests/install.yaml` (the Helm chart rendered; kept in
//! sync by `scripts/gen-install-manifest.sh --check`) — covers what
//! `builders::broker_rules` grants, and lets the operator read the brokers'
//! cluster record. No cluster needed.

use std::path::Path;

use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use moldau_operator::cluster::builders::{broker_rules, Names};
use serde::Deserialize;

fn cluster_roles(file: &str) -> Vec<ClusterRole> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(file);
    let text = std::fs::read_to_string(&path).expect("manifest exists");
    serde_yaml::Deserializer::from_str(&text)
        .filter_map(|d| {
            let v = serde_yaml::Value::deserialize(d).ok()?;
            (v.get("kind")?.as_str()? == "ClusterRole")
                .then(|| serde_yaml::from_value(v).expect("a ClusterRole"))
        })
        .collect()
}

fn named(roles: Vec<ClusterRole>, name: &str) -> ClusterRole {
    roles
        .into_iter()
        .find(|r| r.metadata.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no ClusterRole {name}"))
}

/// Whether `held` allows `verb` on `group/resource` named `name` (None: any).
fn allows(
    held: &[PolicyRule],
    group: &str,
    resource: &str,
    verb: &str,
    name: Option<&str>,
) -> bool {
    held.iter().any(|r| {
        let has = |list: &Option<Vec<String>>, want: &str| {
            list.as_ref()
                .is_some_and(|l| l.iter().any(|x| x == want || x == "*"))
        };
        has(&r.api_groups, group)
            && has(&r.resources, resource)
            && (r.verbs.iter().any(|v| v == verb || v == "*"))
            && match (&r.resource_names, name) {
                (None, _) => true,
                (Some(names), _) if names.is_empty() => true,
                (Some(names), Some(n)) => names.iter().any(|x| x == n),
                (Some(_), None) => false,
            }
    })
}

/// Every permission of `granted`, as `(group, resource, verb, name)`.
fn permissions(granted: &[PolicyRule]) -> Vec<(String, String, String, Option<String>)> {
    let mut out = Vec::new();
    for r in granted {
        let names: Vec<Option<String>> = match &r.resource_names {
            Some(n) if !n.is_empty() => n.iter().cloned().map(Some).collect(),
            _ => vec![None],
        };
        for g in r.api_groups.iter().flatten() {
            for res in r.resources.iter().flatten() {
                for v in &r.verbs {
                    for n in &names {
                        out.push((g.clone(), res.clone(), v.clone(), n.clone()));
                    }
                }
            }
        }
    }
    out
}

fn check(held: &ClusterRole, source: &str) {
    let held = held.rules.clone().unwrap_or_default();
    let names = Names {
        cluster: "demo".into(),
        namespace: "ns".into(),
    };
    let granted = permissions(&broker_rules(&names));
    assert!(!granted.is_empty());
    for (g, res, v, n) in granted {
        assert!(
            allows(&held, &g, &res, &v, n.as_deref()),
            "{source}: the operator grants {v} on {g}/{res} ({n:?}) to the brokers without holding it"
        );
    }
    assert!(
        allows(
            &held,
            "moldau.io",
            "metadatashards",
            "get",
            Some("demo-cluster")
        ),
        "{source}: the operator cannot read the cluster record"
    );
    // The KafkaRebalance controller watches its resources, reads the
    // approve/stop annotations and writes their status.
    for (res, verb) in [
        ("kafkarebalances", "get"),
        ("kafkarebalances", "list"),
        ("kafkarebalances", "watch"),
        ("kafkarebalances/status", "patch"),
        // the rebalance a scale runs
        ("kafkarebalances", "create"),
        ("kafkarebalances", "patch"),
        ("kafkarebalances", "delete"),
    ] {
        assert!(
            allows(&held, "moldau.io", res, verb, None),
            "{source}: the operator cannot {verb} {res}"
        );
    }
}

/// The policy resources the operator reconciles: `(resource, verbs)`.
const POLICY_GRANTS: &[(&str, &[&str])] = &[
    ("kafkaquotas", &["get", "list", "watch", "patch", "update"]),
    ("kafkaquotas/status", &["get", "patch", "update"]),
    ("kafkaquotas/finalizers", &["update"]),
    (
        "kafkaretentionpolicies",
        &["get", "list", "watch", "patch", "update"],
    ),
    ("kafkaretentionpolicies/status", &["get", "patch", "update"]),
    ("kafkaretentionpolicies/finalizers", &["update"]),
    ("kafkausers", &["get", "list", "watch", "patch", "update"]),
    ("kafkausers/status", &["get", "patch", "update"]),
    ("kafkausers/finalizers", &["update"]),
];

/// Core resources the KafkaUser controller needs: the user Secrets it
/// writes (server-side apply) and watches, the password Secrets it reads.
const CORE_GRANTS: &[(&str, &[&str])] =
    &[("secrets", &["get", "list", "watch", "create", "patch"])];

fn check_policy(held: &ClusterRole, source: &str) {
    let held = held.rules.clone().unwrap_or_default();
    for (res, verbs) in POLICY_GRANTS {
        for v in *verbs {
            assert!(
                allows(&held, "moldau.io", res, v, None),
                "{source}: the operator cannot {v} moldau.io/{res}"
            );
        }
    }
    for (res, verbs) in CORE_GRANTS {
        for v in *verbs {
            assert!(
                allows(&held, "", res, v, None),
                "{source}: the operator cannot {v} {res}"
            );
        }
    }
}

#[test]
fn operator_roles_cover_the_policy_resources() {
    for file in ["operator/deploy/clusterrole.yaml", "manifests/install.yaml"] {
        check_policy(&named(cluster_roles(file), "moldau-operator"), file);
    }
}

#[test]
fn deploy_clusterrole_covers_the_broker_role() {
    let role = named(
        cluster_roles("operator/deploy/clusterrole.yaml"),
        "moldau-operator",
    );
    check(&role, "operator/deploy/clusterrole.yaml");
}

#[test]
fn install_manifest_clusterrole_covers_the_broker_role() {
    let role = named(cluster_roles("manifests/install.yaml"), "moldau-operator");
    check(&role, "manifests/install.yaml");
}

#[test]
fn coverage_check_catches_a_missing_grant() {
    let held = vec![PolicyRule {
        api_groups: Some(vec!["coordination.k8s.io".into()]),
        resources: Some(vec!["leases".into()]),
        resource_names: Some(vec!["other".into()]),
        verbs: vec!["get".into()],
        ..Default::default()
    }];
    assert!(!allows(
        &held,
        "coordination.k8s.io",
        "leases",
        "get",
        Some("demo-controller")
    ));
    assert!(!allows(
        &held,
        "coordination.k8s.io",
        "leases",
        "create",
        None
    ));
    assert!(allows(
        &held,
        "coordination.k8s.io",
        "leases",
        "get",
        Some("other")
    ));
}
