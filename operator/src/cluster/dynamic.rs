//! Broker configs of `KafkaCluster.spec.config` that brokers take at run
//! time (Kafka's dynamic cluster-wide configs that Moldau brokers apply
//! without a restart: the defaults of topic configs, see the broker's
//! `dynamic_config`). Pure.
//!
//! A change of such a key's *value* does not roll the brokers: the pod
//! template's config hash covers every other key with its value but these
//! keys by name only ([`hash_input`]), and the operator sets the new value
//! as the cluster-wide dynamic default (IncrementalAlterConfigs on the
//! broker resource `""`, [`plan`]). Adding or removing such a key still
//! rolls, so every broker's `server.properties` always agrees with the spec
//! about which keys it sets (a removed key must fall back to the built-in
//! default, not to a value a running broker read at start). The operator
//! owns the cluster-wide defaults of these keys: one set by hand with
//! `kafka-configs --entity-default` and absent from the spec is removed.

use std::collections::BTreeMap;

use moldau_broker::dynamic_config;

use crate::kafka::ConfigOp;

/// Dynamic broker configs that `spec.config` does not apply at run time:
/// the replication throttles belong to partition moves (the operator sets
/// them per broker while replicas move, see `rebalance`), and
/// `replica.alter.log.dirs.io.max.bytes.per.second` has no effect on a
/// Moldau broker (one data directory). In the spec they are static keys.
const NOT_FROM_SPEC: &[&str] = &[
    dynamic_config::FOLLOWER_THROTTLED_RATE,
    dynamic_config::LEADER_THROTTLED_RATE,
    "replica.alter.log.dirs.io.max.bytes.per.second",
];

/// Whether `key` is applied at run time: a config the broker takes
/// dynamically (its own list, `moldau_broker::dynamic_config`), but not
/// one of [`NOT_FROM_SPEC`].
pub fn is_dynamic(key: &str) -> bool {
    dynamic_config::find(key).is_some() && !NOT_FROM_SPEC.contains(&key)
}

/// What the config hash covers: every key, and the value of every key that
/// is not dynamic.
pub fn hash_input(config: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    config
        .iter()
        .map(|(k, v)| {
            let v = if is_dynamic(k) {
                "(applied at run time)".to_string()
            } else {
                v.clone()
            };
            (k.clone(), v)
        })
        .collect()
}

/// The operations that bring the cluster-wide dynamic defaults
/// (`current`, as DescribeConfigs reports the default entity) to the
/// dynamic keys of `config`.
pub fn plan(
    config: &BTreeMap<String, String>,
    current: &BTreeMap<String, String>,
) -> Vec<ConfigOp> {
    let desired: BTreeMap<&String, &String> =
        config.iter().filter(|(k, _)| is_dynamic(k)).collect();
    let mut ops: Vec<ConfigOp> = desired
        .iter()
        .filter(|(k, v)| current.get(**k).map(|c| c.trim()) != Some(v.trim()))
        .map(|(k, v)| ConfigOp::Set((*k).clone(), v.trim().to_string()))
        .collect();
    ops.extend(
        current
            .keys()
            .filter(|k| is_dynamic(k) && !desired.contains_key(k))
            .map(|k| ConfigOp::Delete(k.clone())),
    );
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_spec_applies_at_run_time_the_brokers_dynamic_configs_but_the_throttles() {
        for key in [
            "log.retention.ms",
            "log.retention.hours",
            "compression.zstd.level",
            "max.connections.per.ip.overrides",
            "message.max.bytes",
            "min.insync.replicas",
        ] {
            assert!(is_dynamic(key), "{key}");
        }
        for key in [
            "leader.replication.throttled.rate",
            "follower.replication.throttled.rate",
            "replica.alter.log.dirs.io.max.bytes.per.second",
            "num.partitions",
            "log.retention.check.interval.ms",
        ] {
            assert!(!is_dynamic(key), "{key}");
        }
    }

    #[test]
    fn only_a_dynamic_value_leaves_the_hash_input_unchanged() {
        let a = map(&[("log.retention.ms", "1000"), ("num.partitions", "3")]);
        let value = map(&[("log.retention.ms", "2000"), ("num.partitions", "3")]);
        let static_change = map(&[("log.retention.ms", "1000"), ("num.partitions", "4")]);
        let removed = map(&[("num.partitions", "3")]);
        assert_eq!(hash_input(&a), hash_input(&value));
        assert_ne!(hash_input(&a), hash_input(&static_change));
        assert_ne!(hash_input(&a), hash_input(&removed), "removing a key rolls");
    }

    #[test]
    fn the_default_entity_follows_the_spec() {
        let spec = map(&[
            ("log.retention.ms", "1000"),
            ("message.max.bytes", " 2000 "),
            ("num.partitions", "3"),
        ]);
        assert_eq!(
            plan(&spec, &BTreeMap::new()),
            vec![
                ConfigOp::Set("log.retention.ms".into(), "1000".into()),
                ConfigOp::Set("message.max.bytes".into(), "2000".into()),
            ]
        );
        let current = map(&[
            ("log.retention.ms", "1000"),
            ("message.max.bytes", "5"),
            ("log.segment.bytes", "1048576"),
            ("leader.replication.throttled.rate", "100"),
        ]);
        assert_eq!(
            plan(&spec, &current),
            vec![
                ConfigOp::Set("message.max.bytes".into(), "2000".into()),
                ConfigOp::Delete("log.segment.bytes".into()),
            ],
            "throttle rates belong to rebalances and are left alone"
        );
        assert!(plan(
            &spec,
            &map(&[("log.retention.ms", "1000"), ("message.max.bytes", "2000")])
        )
        .is_empty());
    }
}
