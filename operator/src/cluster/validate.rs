//! Checks of a `KafkaCluster` spec that the CRD schema cannot express cheaply
//! (map keys): config keys must look like Kafka config names and must not be
//! ones the operator sets itself, and every key and value must pass the
//! broker's own check (`moldau_broker::config_check`, the code
//! `moldau-broker --check-config` runs: a misspelled key or a value the
//! broker would refuse at start is refused here, before any broker is
//! rolled onto it); and, again, that the broker's ports differ, listeners'
//! included, and that TLS listeners do not advertise pod IPs (the CRD's
//! CEL rules say so too, but an older CRD may be installed). Pure; a
//! failure becomes `ConfigAccepted=False ConfigRefused` and a `Degraded`
//! condition with its reason and a Warning Event, never a crash, never a
//! roll, and never `Ready=False` while the brokers serve.

use std::collections::BTreeMap;

use crate::crd::{AdvertisedAddress, KafkaClusterSpec, RESERVED_BROKER_CONFIG};

use super::builders::BROKER_HTTP_PORT;
use super::listeners;
use super::status::Problem;

/// Whether `key` looks like a Kafka config name.
pub fn is_config_name(key: &str) -> bool {
    let mut chars = key.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase() || c.is_ascii_digit())
        && key.len() <= 255
        && key
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'))
}

/// Config keys that are not Kafka config names.
pub fn bad_config_names(config: &BTreeMap<String, String>) -> Vec<String> {
    config
        .keys()
        .filter(|k| !is_config_name(k))
        .cloned()
        .collect()
}

/// The first problem of a cluster spec, if any.
pub fn cluster_spec_problem(spec: &KafkaClusterSpec) -> Option<Problem> {
    let layout = listeners::layout(spec);
    let names: Vec<String> = layout
        .all()
        .map(|l| {
            if spec.listeners.is_empty() {
                "spec.listenerPort".to_string()
            } else if l.name == listeners::REPLICATION_LISTENER {
                "the replication listener".to_string()
            } else {
                format!("listener {}", l.port_name)
            }
        })
        .collect();
    let mut ports: Vec<(&str, i32)> = layout
        .all()
        .zip(&names)
        .map(|(l, name)| (name.as_str(), l.port))
        .collect();
    ports.push(("spec.controllerPort", spec.controller_port));
    ports.push(("the broker's HTTP port", BROKER_HTTP_PORT));
    for (i, (a, pa)) in ports.iter().enumerate() {
        if let Some((b, _)) = ports[i + 1..].iter().find(|(_, pb)| pb == pa) {
            return Some(Problem {
                reason: "InvalidPorts".into(),
                message: format!("{a} and {b} are both {pa}; each needs its own port"),
            });
        }
    }
    if spec.advertised_address == Some(AdvertisedAddress::PodIp)
        && spec.listeners.iter().any(|l| l.tls)
    {
        return Some(Problem {
            reason: "InvalidListeners".into(),
            message: "TLS listeners advertise the pods' DNS names, which their certificate carries: spec.advertisedAddress cannot be PodIP".into(),
        });
    }
    let bad = bad_config_names(&spec.config);
    if !bad.is_empty() {
        return Some(Problem {
            reason: "InvalidConfig".into(),
            message: format!(
                "spec.config keys are not Kafka config names: {}",
                bad.join(", ")
            ),
        });
    }
    let reserved: Vec<&str> = RESERVED_BROKER_CONFIG
        .iter()
        .copied()
        .filter(|k| spec.config.contains_key(*k))
        .collect();
    if !reserved.is_empty() {
        return Some(Problem {
            reason: "InvalidConfig".into(),
            message: format!(
                "spec.config may not set {}: the operator manages them",
                reserved.join(", ")
            ),
        });
    }
    let problems = moldau_broker::config_check::check(&spec.config);
    if !problems.is_empty() {
        return Some(Problem {
            reason: "InvalidConfig".into(),
            message: format!(
                "spec.config is refused, no broker was restarted: {}",
                problems
                    .iter()
                    .map(|p| p.to_string())
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_names() {
        assert!(is_config_name("log.retention.ms"));
        assert!(is_config_name("num.partitions"));
        assert!(!is_config_name(""));
        assert!(!is_config_name("Log.Retention"));
        assert!(!is_config_name(".x"));
        assert!(!is_config_name("a=b"));
    }

    #[test]
    fn reserved_and_bad_keys_are_problems() {
        let mut spec: KafkaClusterSpec = serde_json::from_value(serde_json::json!({
            "replicas": 1, "image": "i", "storage": {"size": "1Gi"}
        }))
        .unwrap();
        assert_eq!(spec.listener_port, 9092);
        assert_eq!(spec.controller_port, 9091);
        assert_eq!(cluster_spec_problem(&spec), None);
        spec.config.insert("listeners".into(), "x".into());
        let p = cluster_spec_problem(&spec).unwrap();
        assert_eq!(p.reason, "InvalidConfig");
        assert!(p.message.contains("listeners"));
        spec.config.insert("Bad Key".into(), "x".into());
        assert!(cluster_spec_problem(&spec)
            .unwrap()
            .message
            .contains("Bad Key"));
    }

    #[test]
    fn config_the_broker_would_refuse_is_refused_before_a_roll() {
        let mut spec: KafkaClusterSpec = serde_json::from_value(serde_json::json!({
            "replicas": 1, "image": "i", "storage": {"size": "1Gi"},
            "config": {"num.partitions": "3", "num.io.threads": "8"}
        }))
        .unwrap();
        assert_eq!(cluster_spec_problem(&spec), None);
        spec.config.insert("num.partitions".into(), "abc".into());
        let p = cluster_spec_problem(&spec).unwrap();
        assert_eq!(p.reason, "InvalidConfig");
        assert!(
            p.message.contains("num.partitions") && p.message.contains("\"abc\""),
            "{}",
            p.message
        );
        spec.config.insert("num.partitions".into(), "3".into());
        spec.config
            .insert("log.retention.msx".into(), "1000".into());
        let p = cluster_spec_problem(&spec).unwrap();
        assert!(
            p.message.contains(
                "log.retention.msx: unknown broker config (did you mean log.retention.ms?)"
            ),
            "{}",
            p.message
        );
    }

    #[test]
    fn ports_must_differ() {
        let mut spec: KafkaClusterSpec = serde_json::from_value(serde_json::json!({
            "replicas": 1, "image": "i", "storage": {"size": "1Gi"},
            "listenerPort": 9000, "controllerPort": 9000
        }))
        .unwrap();
        let p = cluster_spec_problem(&spec).unwrap();
        assert_eq!(p.reason, "InvalidPorts");
        assert!(p.message.contains("spec.controllerPort"), "{}", p.message);
        spec.controller_port = BROKER_HTTP_PORT;
        assert!(cluster_spec_problem(&spec)
            .unwrap()
            .message
            .contains("HTTP port"));
        spec.controller_port = 9001;
        assert_eq!(cluster_spec_problem(&spec), None);
    }

    #[test]
    fn listener_ports_must_differ_from_every_other_port() {
        let mut spec: KafkaClusterSpec = serde_json::from_value(serde_json::json!({
            "replicas": 1, "image": "i", "storage": {"size": "1Gi"},
            "listeners": [{"name": "plain", "port": 9092}, {"name": "tls", "port": 9090, "tls": true}]
        }))
        .unwrap();
        let p = cluster_spec_problem(&spec).unwrap();
        assert_eq!(p.reason, "InvalidPorts");
        assert!(
            p.message.contains("listener tls") && p.message.contains("replication"),
            "{}",
            p.message
        );
        spec.listeners[1].port = 9093;
        assert_eq!(cluster_spec_problem(&spec), None);
        spec.advertised_address = Some(AdvertisedAddress::PodIp);
        assert_eq!(
            cluster_spec_problem(&spec).unwrap().reason,
            "InvalidListeners"
        );
    }

    #[test]
    fn the_crd_rule_names_the_http_port() {
        use kube::CustomResourceExt;
        let yaml = serde_yaml::to_string(&crate::crd::KafkaCluster::crd()).unwrap();
        assert!(
            yaml.contains(&format!("self.spec.controllerPort != {BROKER_HTTP_PORT}")),
            "the CEL rule must use the broker's HTTP port"
        );
    }
}
