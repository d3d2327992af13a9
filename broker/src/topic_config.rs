//! Topic-level configs: the Kafka names a topic accepts, their validation,
//! their broker-wide defaults, and their translation into a [`LogConfig`].
//!
//! Pure functions only; persistence of a topic's overrides belongs to
//! `metadata`, applying them to open logs to `partitions`.

use std::collections::BTreeMap;

use crate::config::BrokerConfig;
use crate::storage::LogConfig;

/// Value type of a config, as DescribeConfigs v3+ reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigType {
    Boolean = 1,
    String = 2,
    Int = 3,
    Long = 5,
    Double = 6,
    List = 7,
}

/// Where an effective value comes from (DescribeConfigs `config_source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    DynamicTopic = 1,
    DynamicBroker = 2,
    DynamicDefaultBroker = 3,
    StaticBroker = 4,
    Default = 5,
}

/// One topic config Moldau understands.
#[derive(Debug)]
pub struct TopicConfigDef {
    pub name: &'static str,
    /// The broker config supplying the default, if any.
    pub broker_key: Option<&'static str>,
    pub kind: ConfigType,
    pub doc: &'static str,
}

/// Every topic config Moldau accepts. Others are rejected with INVALID_CONFIG.
pub const TOPIC_CONFIGS: &[TopicConfigDef] = &[
    TopicConfigDef {
        name: "cleanup.policy",
        broker_key: Some("log.cleanup.policy"),
        kind: ConfigType::List,
        doc: "delete, compact, or both",
    },
    TopicConfigDef {
        name: "compression.type",
        broker_key: None,
        kind: ConfigType::String,
        doc: "only `producer`: batches are stored as the producer compressed them",
    },
    TopicConfigDef {
        name: "delete.retention.ms",
        broker_key: None,
        kind: ConfigType::Long,
        doc: "how long tombstones are kept after compaction",
    },
    TopicConfigDef {
        name: "file.delete.delay.ms",
        broker_key: Some("log.segment.delete.delay.ms"),
        kind: ConfigType::Long,
        doc: "delay before a deleted segment's files are removed",
    },
    TopicConfigDef {
        name: "flush.messages",
        broker_key: Some("log.flush.interval.messages"),
        kind: ConfigType::Long,
        doc: "fsync after this many messages",
    },
    TopicConfigDef {
        name: "flush.ms",
        broker_key: Some("log.flush.interval.ms"),
        kind: ConfigType::Long,
        doc: "fsync when unflushed data is this old",
    },
    TopicConfigDef {
        name: "index.interval.bytes",
        broker_key: Some("log.index.interval.bytes"),
        kind: ConfigType::Int,
        doc: "bytes between offset index entries",
    },
    TopicConfigDef {
        name: "follower.replication.throttled.replicas",
        broker_key: None,
        kind: ConfigType::List,
        doc: "replicas throttled on the follower side while outside the ISR: * or partition:broker,…",
    },
    TopicConfigDef {
        name: "leader.replication.throttled.replicas",
        broker_key: None,
        kind: ConfigType::List,
        doc: "replicas throttled on the leader side while their follower is outside the ISR: * or partition:broker,…",
    },
    TopicConfigDef {
        name: "max.compaction.lag.ms",
        broker_key: None,
        kind: ConfigType::Long,
        doc: "longest time a record stays uncompacted",
    },
    TopicConfigDef {
        name: "max.message.bytes",
        broker_key: Some("message.max.bytes"),
        kind: ConfigType::Int,
        doc: "largest record batch accepted",
    },
    TopicConfigDef {
        name: "message.timestamp.type",
        broker_key: Some("log.message.timestamp.type"),
        kind: ConfigType::String,
        doc: "CreateTime or LogAppendTime",
    },
    TopicConfigDef {
        name: "min.cleanable.dirty.ratio",
        broker_key: None,
        kind: ConfigType::Double,
        doc: "dirty ratio that triggers compaction",
    },
    TopicConfigDef {
        name: "min.compaction.lag.ms",
        broker_key: None,
        kind: ConfigType::Long,
        doc: "shortest time a record stays uncompacted",
    },
    TopicConfigDef {
        name: "min.insync.replicas",
        broker_key: Some("min.insync.replicas"),
        kind: ConfigType::Int,
        doc: "in-sync replicas needed for acks=all",
    },
    TopicConfigDef {
        name: "retention.bytes",
        broker_key: Some("log.retention.bytes"),
        kind: ConfigType::Long,
        doc: "largest size of a partition's log before old segments are deleted; -1 unlimited",
    },
    TopicConfigDef {
        name: "retention.ms",
        broker_key: Some("log.retention.ms"),
        kind: ConfigType::Long,
        doc: "age after which whole segments are deleted; -1 forever",
    },
    TopicConfigDef {
        name: "segment.bytes",
        broker_key: Some("log.segment.bytes"),
        kind: ConfigType::Int,
        doc: "size at which a segment is rolled",
    },
    TopicConfigDef {
        name: "segment.index.bytes",
        broker_key: Some("log.index.size.max.bytes"),
        kind: ConfigType::Int,
        doc: "size of a segment's offset index",
    },
    TopicConfigDef {
        name: "segment.ms",
        broker_key: Some("log.roll.ms"),
        kind: ConfigType::Long,
        doc: "age at which a segment is rolled",
    },
    TopicConfigDef {
        name: "unclean.leader.election.enable",
        broker_key: None,
        kind: ConfigType::Boolean,
        doc: "whether an out-of-sync replica may become leader",
    },
];

pub fn find(name: &str) -> Option<&'static TopicConfigDef> {
    TOPIC_CONFIGS.iter().find(|d| d.name == name)
}

/// The broker-wide default of a topic config.
pub fn broker_default(def: &TopicConfigDef, broker: &BrokerConfig) -> (String, ConfigSource) {
    let dynamic = def
        .broker_key
        .and_then(|k| broker.dynamic.get(k))
        .and_then(|values| values.first());
    let source = match (dynamic, def.broker_key) {
        (Some((_, source)), _) => *source,
        (None, Some(k)) if broker.raw.contains_key(k) => ConfigSource::StaticBroker,
        _ => ConfigSource::Default,
    };
    let value = match def.name {
        "cleanup.policy" => broker.log_cleanup_policy.clone(),
        "compression.type" => "producer".into(),
        "delete.retention.ms" => "86400000".into(),
        "file.delete.delay.ms" => broker.log_segment_delete_delay_ms.to_string(),
        "flush.messages" => broker.log_flush_interval_messages.to_string(),
        "flush.ms" => broker.log_flush_interval_ms.to_string(),
        "index.interval.bytes" => broker.log_index_interval_bytes.to_string(),
        "max.compaction.lag.ms" => i64::MAX.to_string(),
        "max.message.bytes" => broker.message_max_bytes.to_string(),
        "message.timestamp.type" => broker.log_message_timestamp_type.clone(),
        "min.cleanable.dirty.ratio" => "0.5".into(),
        "min.compaction.lag.ms" => "0".into(),
        "min.insync.replicas" => broker.min_insync_replicas.to_string(),
        "retention.bytes" => broker.log_retention_bytes.to_string(),
        "retention.ms" => broker.log_retention_ms.to_string(),
        "segment.bytes" => broker.log_segment_bytes.to_string(),
        "segment.index.bytes" => broker.log_index_size_max_bytes.to_string(),
        "segment.ms" => broker.log_roll_ms.to_string(),
        "unclean.leader.election.enable" => "false".into(),
        _ => String::new(),
    };
    (value, source)
}

fn long_at_least(value: &str, min: i64) -> Result<i64, String> {
    let v: i64 = value
        .trim()
        .parse()
        .map_err(|_| format!("{value:?} is not a number"))?;
    if v < min {
        return Err(format!("{v} is below the minimum {min}"));
    }
    Ok(v)
}

/// Validates one topic config override; the error text is for the client.
pub fn validate(name: &str, value: &str) -> Result<(), String> {
    let def = find(name).ok_or_else(|| format!("unknown topic config {name}"))?;
    match def.name {
        "cleanup.policy" => {
            let parts: Vec<&str> = value.split(',').map(str::trim).collect();
            if parts.is_empty() || parts.iter().any(|p| *p != "delete" && *p != "compact") {
                return Err(format!(
                    "cleanup.policy {value:?}: expected delete, compact or both"
                ));
            }
        }
        "compression.type" if value != "producer" => {
            return Err("Moldau stores batches as the producer compressed them: only compression.type=producer is supported".into());
        }
        "message.timestamp.type" if value != "CreateTime" && value != "LogAppendTime" => {
            return Err("message.timestamp.type must be CreateTime or LogAppendTime".into());
        }
        "leader.replication.throttled.replicas" | "follower.replication.throttled.replicas" => {
            crate::replication::throttle::ThrottledReplicas::parse(value)?;
        }
        "unclean.leader.election.enable" if value != "true" && value != "false" => {
            return Err("expected true or false".into());
        }
        "min.cleanable.dirty.ratio" => {
            let v: f64 = value
                .parse()
                .map_err(|_| format!("{value:?} is not a number"))?;
            if !(0.0..=1.0).contains(&v) {
                return Err("min.cleanable.dirty.ratio must be within [0, 1]".into());
            }
        }
        "retention.ms" | "retention.bytes" => {
            long_at_least(value, -1)?;
        }
        "segment.bytes" => {
            long_at_least(value, 1024)?;
            if value
                .trim()
                .parse::<i64>()
                .map_or(true, |v| v > i32::MAX as i64)
            {
                return Err("segment.bytes must fit in an int".into());
            }
        }
        "segment.index.bytes" => {
            long_at_least(value, 4096)?;
        }
        "segment.ms" | "flush.messages" | "flush.ms" | "min.insync.replicas" => {
            long_at_least(value, 1)?;
        }
        "max.message.bytes"
        | "index.interval.bytes"
        | "delete.retention.ms"
        | "file.delete.delay.ms"
        | "min.compaction.lag.ms"
        | "max.compaction.lag.ms" => {
            long_at_least(value, 0)?;
        }
        _ => {}
    }
    Ok(())
}

/// The effective value and source of every topic config, given the topic's
/// overrides.
pub fn effective(
    overrides: &BTreeMap<String, String>,
    broker: &BrokerConfig,
) -> BTreeMap<&'static str, (String, ConfigSource)> {
    TOPIC_CONFIGS
        .iter()
        .map(|def| {
            let v = match overrides.get(def.name) {
                Some(v) => (v.clone(), ConfigSource::DynamicTopic),
                None => broker_default(def, broker),
            };
            (def.name, v)
        })
        .collect()
}

/// The synonyms of one topic config, most specific first, as Kafka's
/// DescribeConfigs lists them with `include_synonyms`: the topic's own
/// value (dynamic topic config), the broker config it defaults to when set
/// dynamically for this broker or the cluster (dynamic broker config,
/// dynamic default broker config) and in the broker's properties (static
/// broker config), and the built-in default (under the broker config's
/// name where there is one).
pub fn synonyms(
    def: &TopicConfigDef,
    overrides: &BTreeMap<String, String>,
    broker: &BrokerConfig,
) -> Vec<(&'static str, String, ConfigSource)> {
    static BUILT_IN: std::sync::OnceLock<BrokerConfig> = std::sync::OnceLock::new();
    let built_in = BUILT_IN.get_or_init(BrokerConfig::default);
    let mut out = Vec::with_capacity(3);
    if let Some(v) = overrides.get(def.name) {
        out.push((def.name, v.clone(), ConfigSource::DynamicTopic));
    }
    if let Some(key) = def.broker_key {
        // dynamic broker values: this broker's own, then the cluster default
        for (value, source) in broker.dynamic.get(key).into_iter().flatten() {
            out.push((key, value.trim().to_string(), *source));
        }
        if let Some(value) = broker.raw.get(key) {
            out.push((key, value.trim().to_string(), ConfigSource::StaticBroker));
        }
    }
    let default_name = def.broker_key.unwrap_or(def.name);
    out.push((
        default_name,
        broker_default(def, built_in).0,
        ConfigSource::Default,
    ));
    out
}

/// Translates effective topic configs into the storage layer's settings.
/// `min.insync.replicas` of a topic: its override, else the broker's.
pub fn min_insync_replicas(overrides: &BTreeMap<String, String>, broker: &BrokerConfig) -> usize {
    overrides
        .get("min.insync.replicas")
        .and_then(|v| v.trim().parse::<i64>().ok())
        .unwrap_or(i64::from(broker.min_insync_replicas))
        .clamp(1, i64::from(i16::MAX)) as usize
}

pub fn log_config(overrides: &BTreeMap<String, String>, broker: &BrokerConfig) -> LogConfig {
    let eff = effective(overrides, broker);
    let long = |name: &str, fallback: i64| -> i64 {
        eff.get(name)
            .and_then(|(v, _)| v.trim().parse::<i64>().ok())
            .unwrap_or(fallback)
    };
    let d = LogConfig::default();
    // `cleanup.policy`: a list of `delete` and/or `compact`.
    let policy: Vec<String> = eff.get("cleanup.policy").map_or_else(
        || vec!["delete".to_string()],
        |(v, _)| {
            v.split(',')
                .map(|p| p.trim().to_ascii_lowercase())
                .collect()
        },
    );
    LogConfig {
        segment_bytes: long("segment.bytes", d.segment_bytes as i64).max(1024) as u64,
        segment_ms: long("segment.ms", d.segment_ms).max(1),
        retention_ms: long("retention.ms", d.retention_ms),
        retention_bytes: long("retention.bytes", d.retention_bytes),
        max_message_bytes: long("max.message.bytes", d.max_message_bytes as i64).max(0) as usize,
        index_interval_bytes: long("index.interval.bytes", d.index_interval_bytes as i64).max(1)
            as u64,
        segment_index_bytes: long("segment.index.bytes", d.segment_index_bytes as i64).max(4096)
            as u64,
        flush_messages: long("flush.messages", d.flush_messages).max(1),
        flush_ms: long("flush.ms", d.flush_ms).max(1),
        log_append_time: eff
            .get("message.timestamp.type")
            .is_some_and(|(v, _)| v == "LogAppendTime"),
        file_delete_delay_ms: long("file.delete.delay.ms", d.file_delete_delay_ms).max(0),
        compact: policy.iter().any(|p| p == "compact"),
        delete: policy.iter().any(|p| p == "delete"),
        delete_retention_ms: long("delete.retention.ms", d.delete_retention_ms).max(0),
        min_cleanable_dirty_ratio: eff
            .get("min.cleanable.dirty.ratio")
            .and_then(|(v, _)| v.trim().parse::<f64>().ok())
            .filter(|r| r.is_finite())
            .map_or(d.min_cleanable_dirty_ratio, |r| r.clamp(0.0, 1.0)),
        min_compaction_lag_ms: long("min.compaction.lag.ms", d.min_compaction_lag_ms).max(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synonyms_go_from_the_topic_to_the_broker_to_the_default() {
        let broker = BrokerConfig::load(None, &["log.retention.ms=1000".into()]).unwrap();
        let o = BTreeMap::from([("retention.ms".to_string(), "5".to_string())]);
        let retention = find("retention.ms").unwrap();
        let default_ms = BrokerConfig::default().log_retention_ms.to_string();
        assert_eq!(
            synonyms(retention, &o, &broker),
            vec![
                ("retention.ms", "5".to_string(), ConfigSource::DynamicTopic),
                (
                    "log.retention.ms",
                    "1000".to_string(),
                    ConfigSource::StaticBroker
                ),
                (
                    "log.retention.ms",
                    default_ms.clone(),
                    ConfigSource::Default
                ),
            ]
        );
        assert_eq!(
            synonyms(retention, &BTreeMap::new(), &BrokerConfig::default()),
            vec![("log.retention.ms", default_ms, ConfigSource::Default)]
        );
        let ratio = find("min.cleanable.dirty.ratio").unwrap();
        assert_eq!(
            synonyms(ratio, &BTreeMap::new(), &broker),
            vec![(
                "min.cleanable.dirty.ratio",
                "0.5".to_string(),
                ConfigSource::Default
            )]
        );
    }

    #[test]
    fn dynamic_broker_values_are_the_default_and_listed_before_the_static_one() {
        let broker = BrokerConfig::load(None, &["log.retention.ms=1000".into()]).unwrap();
        let dynamic = crate::dynamic_config::BrokerConfigs::from([
            (
                String::new(),
                BTreeMap::from([("log.retention.ms".to_string(), "20".to_string())]),
            ),
            (
                "3".to_string(),
                BTreeMap::from([("log.retention.ms".to_string(), "30".to_string())]),
            ),
        ]);
        let eff = crate::dynamic_config::effective(&broker, &dynamic, 3).unwrap();
        let retention = find("retention.ms").unwrap();
        assert_eq!(
            broker_default(retention, &eff),
            ("30".to_string(), ConfigSource::DynamicBroker)
        );
        let listed: Vec<ConfigSource> = synonyms(retention, &BTreeMap::new(), &eff)
            .into_iter()
            .map(|(_, _, s)| s)
            .collect();
        assert_eq!(
            listed,
            vec![
                ConfigSource::DynamicBroker,
                ConfigSource::DynamicDefaultBroker,
                ConfigSource::StaticBroker,
                ConfigSource::Default
            ]
        );
        assert_eq!(log_config(&BTreeMap::new(), &eff).retention_ms, 30);
    }

    #[test]
    fn overrides_win_over_broker_defaults() {
        let broker = BrokerConfig::load(None, &["log.retention.ms=1000".into()]).unwrap();
        let mut o = BTreeMap::new();
        o.insert("segment.bytes".to_string(), "4096".to_string());
        let eff = effective(&o, &broker);
        assert_eq!(
            eff["segment.bytes"],
            ("4096".into(), ConfigSource::DynamicTopic)
        );
        assert_eq!(
            eff["retention.ms"],
            ("1000".into(), ConfigSource::StaticBroker)
        );
        assert_eq!(eff["retention.bytes"], ("-1".into(), ConfigSource::Default));
        let lc = log_config(&o, &broker);
        assert_eq!(lc.segment_bytes, 4096);
        assert_eq!(lc.retention_ms, 1000);
        assert!(lc.delete && !lc.compact);
        assert_eq!(lc.delete_retention_ms, 86_400_000);
        assert_eq!(lc.min_cleanable_dirty_ratio, 0.5);
        o.insert("cleanup.policy".to_string(), "compact,delete".to_string());
        o.insert("min.cleanable.dirty.ratio".to_string(), "0.1".to_string());
        o.insert("delete.retention.ms".to_string(), "5".to_string());
        o.insert("min.compaction.lag.ms".to_string(), "7".to_string());
        let lc = log_config(&o, &broker);
        assert!(lc.delete && lc.compact);
        assert_eq!(lc.min_cleanable_dirty_ratio, 0.1);
        assert_eq!((lc.delete_retention_ms, lc.min_compaction_lag_ms), (5, 7));
        o.insert("cleanup.policy".to_string(), "compact".to_string());
        let lc = log_config(&o, &broker);
        assert!(!lc.delete && lc.compact);
    }

    #[test]
    fn validation_rejects_unknown_and_out_of_range() {
        assert!(validate("retention.ms", "-1").is_ok());
        assert!(validate("retention.ms", "-2").is_err());
        assert!(validate("retention.ms", "abc").is_err());
        assert!(validate("no.such.config", "1").is_err());
        assert!(validate("cleanup.policy", "compact,delete").is_ok());
        assert!(validate("cleanup.policy", "shred").is_err());
        assert!(validate("compression.type", "gzip").is_err());
        assert!(validate("segment.bytes", "10").is_err());
        assert!(validate("message.timestamp.type", "LogAppendTime").is_ok());
    }

    #[test]
    fn log_append_time_maps_to_storage_flag() {
        let broker = BrokerConfig::default();
        let mut o = BTreeMap::new();
        o.insert(
            "message.timestamp.type".to_string(),
            "LogAppendTime".to_string(),
        );
        assert!(log_config(&o, &broker).log_append_time);
        assert!(!log_config(&BTreeMap::new(), &broker).log_append_time);
    }
}
