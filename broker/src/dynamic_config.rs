//! Dynamic broker configs: the broker configs that may change while
//! brokers run (`kafka-configs --alter --entity-type brokers`), their
//! validation, and how a broker resolves them — its own dynamic value
//! (entity = its node id), else the cluster-wide dynamic default (entity
//! `""`, `--entity-default`), else its static properties. They live in the
//! cluster metadata (the controller's cluster record in cluster mode, the
//! local metadata document of a standalone broker) and reach brokers in
//! the metadata image.
//!
//! Which configs are dynamic: the replication throttle rates (Kafka's
//! `kafka-reassign-partitions --throttle` sets and clears them); the broker
//! defaults of topic configs Kafka marks dynamic (`log.retention.*`,
//! `log.segment.bytes`, `log.roll.*` (with `log.roll.jitter.ms`),
//! `log.cleanup.policy`, `log.flush.*`, `log.index.*`,
//! `log.segment.delete.delay.ms`, `log.message.timestamp.type` and
//! `log.message.timestamp.{before,after}.max.ms`, `compression.type` and
//! `compression.{gzip,lz4,zstd}.level`, `log.preallocate`,
//! `message.max.bytes`, `min.insync.replicas`), which take effect on every open log of the
//! broker as soon as the image carrying them is installed ([`effective`]);
//! the connection limits `max.connections`, `max.connections.per.ip` and
//! `max.connections.per.ip.overrides`, which the broker's connection
//! limiter takes from the same image (new connections over a lowered
//! limit are closed, open ones stay, as in Kafka);
//! and `replica.alter.log.dirs.io.max.bytes.per.second`, accepted so
//! Kafka's tools work but without effect: a Moldau broker has one data
//! directory, so replicas never move between its directories. Any other
//! broker config is refused as Kafka refuses read-only ones
//! (INVALID_REQUEST) — among them the `log.cleaner.*` family, which Kafka
//! can change at run time but Moldau reads at start only (or does not
//! have).

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;

use crate::config::BrokerConfig;
use crate::config_values::{BrokerConfigs, ConfigSource};
use crate::error::TopicError;

/// One dynamic broker config.
#[derive(Debug)]
pub struct DynamicDef {
    pub name: &'static str,
    pub doc: &'static str,
}

pub const LEADER_THROTTLED_RATE: &str = "leader.replication.throttled.rate";
pub const FOLLOWER_THROTTLED_RATE: &str = "follower.replication.throttled.rate";

/// Every broker config that can be changed dynamically.
pub const DYNAMIC_BROKER_CONFIGS: &[DynamicDef] = &[
    DynamicDef {
        name: FOLLOWER_THROTTLED_RATE,
        doc: "bytes/s a follower fetches for its throttled replicas outside the ISR",
    },
    DynamicDef {
        name: LEADER_THROTTLED_RATE,
        doc: "bytes/s a leader sends to throttled followers outside the ISR",
    },
    DynamicDef {
        name: "replica.alter.log.dirs.io.max.bytes.per.second",
        doc: "accepted for Kafka's tools; no effect: a Moldau broker has one data directory",
    },
    DynamicDef {
        name: "log.retention.ms",
        doc: "default retention.ms of topics",
    },
    DynamicDef {
        name: "log.retention.minutes",
        doc: "default retention of topics in minutes (log.retention.ms wins)",
    },
    DynamicDef {
        name: "log.retention.hours",
        doc: "default retention of topics in hours (log.retention.ms and .minutes win)",
    },
    DynamicDef {
        name: "log.retention.bytes",
        doc: "default retention.bytes of topics",
    },
    DynamicDef {
        name: "log.segment.bytes",
        doc: "default segment.bytes of topics",
    },
    DynamicDef {
        name: "log.roll.ms",
        doc: "default segment.ms of topics",
    },
    DynamicDef {
        name: "log.roll.hours",
        doc: "default segment.ms of topics in hours (log.roll.ms wins)",
    },
    DynamicDef {
        name: "log.cleanup.policy",
        doc: "default cleanup.policy of topics",
    },
    DynamicDef {
        name: "log.flush.interval.messages",
        doc: "default flush.messages of topics",
    },
    DynamicDef {
        name: "log.flush.interval.ms",
        doc: "default flush.ms of topics",
    },
    DynamicDef {
        name: "log.index.interval.bytes",
        doc: "default index.interval.bytes of topics",
    },
    DynamicDef {
        name: "log.index.size.max.bytes",
        doc: "default segment.index.bytes of topics",
    },
    DynamicDef {
        name: "log.segment.delete.delay.ms",
        doc: "default file.delete.delay.ms of topics",
    },
    DynamicDef {
        name: "log.message.timestamp.type",
        doc: "default message.timestamp.type of topics",
    },
    DynamicDef {
        name: "message.max.bytes",
        doc: "default max.message.bytes of topics",
    },
    DynamicDef {
        name: "min.insync.replicas",
        doc: "default min.insync.replicas of topics",
    },
    DynamicDef {
        name: "compression.type",
        doc: "default compression.type of topics",
    },
    DynamicDef {
        name: "compression.gzip.level",
        doc: "default compression.gzip.level of topics",
    },
    DynamicDef {
        name: "compression.lz4.level",
        doc: "default compression.lz4.level of topics",
    },
    DynamicDef {
        name: "compression.zstd.level",
        doc: "default compression.zstd.level of topics",
    },
    DynamicDef {
        name: "log.message.timestamp.before.max.ms",
        doc: "default message.timestamp.before.max.ms of topics",
    },
    DynamicDef {
        name: "log.message.timestamp.after.max.ms",
        doc: "default message.timestamp.after.max.ms of topics",
    },
    DynamicDef {
        name: "log.roll.jitter.ms",
        doc: "default segment.jitter.ms of topics",
    },
    DynamicDef {
        name: "log.preallocate",
        doc: "default preallocate of topics (accepted, no effect on Moldau's segment files)",
    },
    DynamicDef {
        name: "max.connections",
        doc: "client connections the broker accepts in all; new ones over it are closed",
    },
    DynamicDef {
        name: "max.connections.per.ip",
        doc: "client connections the broker accepts from one IP; new ones over it are closed",
    },
    DynamicDef {
        name: "max.connections.per.ip.overrides",
        doc: "ip:count pairs that replace max.connections.per.ip for those IPs",
    },
];

/// Whether `name` is one of the throttle-like rates (non-negative longs
/// with their own validation) rather than a broker property.
fn is_rate(name: &str) -> bool {
    matches!(
        name,
        LEADER_THROTTLED_RATE
            | FOLLOWER_THROTTLED_RATE
            | "replica.alter.log.dirs.io.max.bytes.per.second"
    )
}

/// Broker `node`'s effective config: its static properties with every
/// dynamic value laid over them (its own over the cluster default), built
/// with the same rules as at start (so `log.retention.ms` still wins over a
/// dynamic `log.retention.hours`, as in Kafka). `raw` stays the static
/// properties; `dynamic` records what was laid over them.
pub fn effective(
    static_config: &BrokerConfig,
    configs: &BrokerConfigs,
    node: i32,
) -> Result<BrokerConfig, crate::config::ConfigError> {
    let mut props = static_config.raw.clone();
    let mut dynamic = BTreeMap::new();
    for def in DYNAMIC_BROKER_CONFIGS {
        let own = configs
            .get(&node.to_string())
            .and_then(|c| c.get(def.name))
            .map(|v| (v.clone(), ConfigSource::DynamicBroker));
        let default = configs
            .get("")
            .and_then(|c| c.get(def.name))
            .map(|v| (v.clone(), ConfigSource::DynamicDefaultBroker));
        let values: Vec<(String, ConfigSource)> = own.into_iter().chain(default).collect();
        if let Some((v, _)) = values.first() {
            props.insert(def.name.to_string(), v.clone());
            dynamic.insert(def.name.to_string(), values);
        }
    }
    let mut c = BrokerConfig::from_properties(props)?;
    c.raw = static_config.raw.clone();
    c.dynamic = dynamic;
    Ok(c)
}

pub fn find(name: &str) -> Option<&'static DynamicDef> {
    DYNAMIC_BROKER_CONFIGS.iter().find(|d| d.name == name)
}

/// Checks an entity name: `""` (the cluster default) or a node id.
pub fn validate_entity(entity: &str) -> Result<(), TopicError> {
    if entity.is_empty() || entity.parse::<i32>().is_ok_and(|id| id >= 0) {
        return Ok(());
    }
    Err(TopicError::new(
        ResponseError::InvalidRequest,
        format!("{entity:?} is not a broker id (or the default entity \"\")"),
    ))
}

/// Checks that `name` can be changed dynamically (INVALID_REQUEST, as
/// Kafka answers for a read-only config, when not).
pub fn validate_name(name: &str) -> Result<(), TopicError> {
    if find(name).is_none() {
        return Err(TopicError::new(
            ResponseError::InvalidRequest,
            format!(
                "cannot update {name} dynamically; set it in the broker's properties (dynamic: {})",
                DYNAMIC_BROKER_CONFIGS
                    .iter()
                    .map(|d| d.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    Ok(())
}

/// Validates one dynamic broker config: a dynamic name, and a value with
/// the rules the key has in the broker's properties (the rates:
/// non-negative longs).
pub fn validate(name: &str, value: &str) -> Result<(), TopicError> {
    validate_name(name)?;
    if !is_rate(name) {
        // a broker property: the rules it has in the broker's properties
        // (keys without a typed field, e.g. `compression.type`, with the
        // rules of the topic config they default)
        let props = BTreeMap::from([(name.to_string(), value.to_string())]);
        return BrokerConfig::from_properties(props)
            .map_err(|e| e.to_string())
            .and_then(|c| crate::topic_config::validate_broker_keys(&c))
            .map_err(|e| TopicError::new(ResponseError::InvalidConfig, e));
    }
    match value.trim().parse::<i64>() {
        Ok(v) if v >= 0 => Ok(()),
        _ => Err(TopicError::new(
            ResponseError::InvalidConfig,
            format!("{name}: {value:?} is not a non-negative number"),
        )),
    }
}

/// Broker `node`'s dynamic value of `name` and its source, if set.
pub fn resolve<'a>(
    configs: &'a BrokerConfigs,
    node: i32,
    name: &str,
) -> Option<(&'a str, ConfigSource)> {
    let own = configs
        .get(&node.to_string())
        .and_then(|c| c.get(name))
        .map(|v| (v.as_str(), ConfigSource::DynamicBroker));
    own.or_else(|| {
        configs
            .get("")
            .and_then(|c| c.get(name))
            .map(|v| (v.as_str(), ConfigSource::DynamicDefaultBroker))
    })
}

/// A byte rate for broker `node`: dynamic, else `static_value`.
pub fn rate(configs: &BrokerConfigs, node: i32, name: &str, static_value: u64) -> u64 {
    resolve(configs, node, name)
        .and_then(|(v, _)| v.trim().parse::<u64>().ok())
        .unwrap_or(static_value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_brokers_own_value_wins_over_the_default_which_wins_over_static() {
        let mut c = BrokerConfigs::new();
        assert_eq!(rate(&c, 1, LEADER_THROTTLED_RATE, 7), 7);
        c.entry(String::new())
            .or_default()
            .insert(LEADER_THROTTLED_RATE.into(), "100".into());
        assert_eq!(rate(&c, 1, LEADER_THROTTLED_RATE, 7), 100);
        assert_eq!(
            resolve(&c, 1, LEADER_THROTTLED_RATE),
            Some(("100", ConfigSource::DynamicDefaultBroker))
        );
        c.entry("1".into())
            .or_default()
            .insert(LEADER_THROTTLED_RATE.into(), "5".into());
        assert_eq!(rate(&c, 1, LEADER_THROTTLED_RATE, 7), 5);
        assert_eq!(rate(&c, 2, LEADER_THROTTLED_RATE, 7), 100);
        assert_eq!(
            resolve(&c, 1, LEADER_THROTTLED_RATE),
            Some(("5", ConfigSource::DynamicBroker))
        );
        assert_eq!(rate(&c, 1, FOLLOWER_THROTTLED_RATE, 7), 7);
    }

    #[test]
    fn only_dynamic_configs_with_sound_values_and_entities_are_accepted() {
        assert!(validate(LEADER_THROTTLED_RATE, "1048576").is_ok());
        assert!(validate("replica.alter.log.dirs.io.max.bytes.per.second", "0").is_ok());
        assert_eq!(
            validate(LEADER_THROTTLED_RATE, "-1").unwrap_err().code,
            ResponseError::InvalidConfig
        );
        assert_eq!(
            validate(LEADER_THROTTLED_RATE, "fast").unwrap_err().code,
            ResponseError::InvalidConfig
        );
        assert_eq!(
            validate("num.partitions", "1").unwrap_err().code,
            ResponseError::InvalidRequest
        );
        assert_eq!(
            validate("num.network.threads", "10").unwrap_err().code,
            ResponseError::InvalidRequest,
            "read at start only"
        );
        assert!(validate("max.connections", "10").is_ok());
        assert!(validate("max.connections.per.ip", "0").is_ok());
        assert!(validate("max.connections.per.ip.overrides", "127.0.0.2:3, [::1]:0").is_ok());
        assert_eq!(
            validate("max.connections.per.ip.overrides", "somewhere")
                .unwrap_err()
                .code,
            ResponseError::InvalidConfig
        );
        assert_eq!(
            validate("max.connections.per.ip", "-1").unwrap_err().code,
            ResponseError::InvalidConfig
        );
        assert!(validate("log.retention.ms", "1").is_ok());
        assert!(validate("compression.type", "lz4").is_ok());
        // as Kafka: only the first synonym of a topic config's default is
        // dynamic (log.roll.jitter.hours is read from the properties only)
        assert_eq!(
            validate("log.roll.jitter.hours", "2").unwrap_err().code,
            ResponseError::InvalidRequest
        );
        assert!(validate("log.preallocate", "true").is_ok());
        for (name, bad) in [
            ("compression.type", "brotli"),
            ("compression.zstd.level", "99"),
            ("log.message.timestamp.after.max.ms", "-1"),
            ("log.roll.jitter.ms", "soon"),
            ("log.preallocate", "maybe"),
        ] {
            assert_eq!(
                validate(name, bad).unwrap_err().code,
                ResponseError::InvalidConfig,
                "{name}={bad}"
            );
        }
        assert!(validate("log.cleanup.policy", "compact").is_ok());
        assert_eq!(
            validate("log.retention.ms", "a week").unwrap_err().code,
            ResponseError::InvalidConfig
        );
        assert_eq!(
            validate("log.message.timestamp.type", "Now")
                .unwrap_err()
                .code,
            ResponseError::InvalidConfig
        );
        for def in DYNAMIC_BROKER_CONFIGS {
            assert!(validate_name(def.name).is_ok());
        }
        assert_eq!(
            validate_name("num.partitions").unwrap_err().code,
            ResponseError::InvalidRequest
        );
        assert!(validate_entity("").is_ok() && validate_entity("3").is_ok());
        assert!(validate_entity("x").is_err() && validate_entity("-1").is_err());
    }

    #[test]
    fn dynamic_values_lay_over_the_static_properties_with_kafkas_precedence() {
        let static_config = BrokerConfig::load(
            None,
            &[
                "log.retention.ms=1000".into(),
                "message.max.bytes=500".into(),
            ],
        )
        .unwrap();
        let mut c = BrokerConfigs::new();
        let eff = effective(&static_config, &c, 1).unwrap();
        assert_eq!(eff, static_config, "nothing dynamic: the static config");
        c.entry(String::new())
            .or_default()
            .insert("message.max.bytes".into(), "100".into());
        c.entry(String::new())
            .or_default()
            .insert("log.retention.hours".into(), "2".into());
        c.entry("1".into())
            .or_default()
            .insert("message.max.bytes".into(), "50".into());
        let eff = effective(&static_config, &c, 1).unwrap();
        assert_eq!(eff.message_max_bytes, 50, "own over default over static");
        assert_eq!(
            effective(&static_config, &c, 2).unwrap().message_max_bytes,
            100
        );
        assert_eq!(
            eff.log_retention_ms, 1000,
            "a static ms wins over dynamic hours"
        );
        assert_eq!(
            eff.raw, static_config.raw,
            "raw stays the static properties"
        );
        assert_eq!(
            eff.dynamic["message.max.bytes"],
            vec![
                ("50".to_string(), ConfigSource::DynamicBroker),
                ("100".to_string(), ConfigSource::DynamicDefaultBroker)
            ]
        );
        c.entry(String::new())
            .or_default()
            .insert("log.retention.ms".into(), "7".into());
        assert_eq!(
            effective(&static_config, &c, 1).unwrap().log_retention_ms,
            7
        );
    }
}
