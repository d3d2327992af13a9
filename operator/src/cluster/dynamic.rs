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

use crate::kafka::ConfigOp;

/// The broker configs applied at run time.
pub const DYNAMIC_KEYS: &[&str] = &[
    "compression.gzip.level",
    "compression.lz4.level",
    "compression.type",
    "compression.zstd.level",
    "log.cleanup.policy",
    "log.flush.interval.messages",
    "log.flush.interval.ms",
    "log.index.interval.bytes",
    "log.index.size.max.bytes",
    "log.message.timestamp.after.max.ms",
    "log.message.timestamp.before.max.ms",
    "log.message.timestamp.type",
    "log.preallocate",
    "log.retention.bytes",
    "log.retention.hours",
    "log.retention.minutes",
    "log.retention.ms",
    "log.roll.hours",
    "log.roll.jitter.ms",
    "log.roll.ms",
    "log.segment.bytes",
    "log.segment.delete.delay.ms",
    "max.connections",
    "max.connections.per.ip",
    "max.connections.per.ip.overrides",
    "message.max.bytes",
    "min.insync.replicas",
];

/// Whether `key` is applied at run time.
pub fn is_dynamic(key: &str) -> bool {
    DYNAMIC_KEYS.contains(&key)
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
