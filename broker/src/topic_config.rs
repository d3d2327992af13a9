//! Topic-level configs: the Kafka names a topic accepts, their validation,
//! their broker-wide defaults, and their translation into a [`LogConfig`].
//!
//! Pure functions only; persistence of a topic's overrides belongs to
//! `metadata`, applying them to open logs to `partitions`.

use std::collections::BTreeMap;

use crate::config::{BrokerConfig, MIN_SEGMENT_BYTES};
use crate::config_values::ConfigSource;
use crate::storage::recompress::TargetCompression;
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

/// One topic config Moldau understands.
#[derive(Debug)]
pub struct TopicConfigDef {
    pub name: &'static str,
    /// The broker config supplying the default, if any.
    pub broker_key: Option<&'static str>,
    pub kind: ConfigType,
    pub doc: &'static str,
}

/// `internal.segment.bytes`: Kafka 4's internal topic config (for tests)
/// that replaces `segment.bytes` and escapes its 1 MiB minimum (KIP-1030).
/// Accepted from 1024 bytes; DescribeConfigs shows it only where a topic
/// sets it, as Kafka does with internal configs.
pub const INTERNAL_SEGMENT_BYTES: &str = "internal.segment.bytes";

/// Every topic config Moldau accepts. Others are rejected with INVALID_CONFIG.
pub const TOPIC_CONFIGS: &[TopicConfigDef] = &[
    TopicConfigDef {
        name: "cleanup.policy",
        broker_key: Some("log.cleanup.policy"),
        kind: ConfigType::List,
        doc: "delete, compact, or both",
    },
    TopicConfigDef {
        name: "compression.gzip.level",
        broker_key: Some("compression.gzip.level"),
        kind: ConfigType::Int,
        doc: "gzip level of broker-side compression: 1 to 9, or -1 for the codec's default",
    },
    TopicConfigDef {
        name: "compression.lz4.level",
        broker_key: Some("compression.lz4.level"),
        kind: ConfigType::Int,
        doc: "lz4 level of broker-side compression: 1 to 17",
    },
    TopicConfigDef {
        name: "compression.type",
        broker_key: Some("compression.type"),
        kind: ConfigType::String,
        doc: "codec batches are stored with: gzip, snappy, lz4, zstd or uncompressed (the broker recompresses), or producer (stored as the producer compressed them)",
    },
    TopicConfigDef {
        name: "compression.zstd.level",
        broker_key: Some("compression.zstd.level"),
        kind: ConfigType::Int,
        doc: "zstd level of broker-side compression: -131072 to 22",
    },
    TopicConfigDef {
        name: "delete.retention.ms",
        broker_key: None,
        kind: ConfigType::Long,
        doc: "how long tombstones are kept after compaction",
    },
    TopicConfigDef {
        name: "errors.deadletterqueue.group.enable",
        broker_key: None,
        kind: ConfigType::Boolean,
        doc: "Kafka 4.4: whether share groups may use this topic as their dead-letter queue; accepted and stored, no effect until Moldau serves share groups (issue 39)",
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
        name: "local.retention.bytes",
        broker_key: Some("log.local.retention.bytes"),
        kind: ConfigType::Long,
        doc: "tiered storage: accepted, no effect (Moldau has no tiered storage)",
    },
    TopicConfigDef {
        name: "local.retention.ms",
        broker_key: Some("log.local.retention.ms"),
        kind: ConfigType::Long,
        doc: "tiered storage: accepted, no effect (Moldau has no tiered storage)",
    },
    TopicConfigDef {
        name: "max.compaction.lag.ms",
        broker_key: None,
        kind: ConfigType::Long,
        doc: "longest time a record stays uncompacted",
    },
    TopicConfigDef {
        name: "max.decompressed.message.bytes",
        broker_key: Some("max.decompressed.message.bytes"),
        kind: ConfigType::Int,
        doc: "Kafka 4.4: the largest decompressed record; accepted and stored, not yet applied per record (Moldau bounds what one batch may decompress to at 64 MiB, storage::compression)",
    },
    TopicConfigDef {
        name: "max.message.bytes",
        broker_key: Some("message.max.bytes"),
        kind: ConfigType::Int,
        doc: "largest record batch accepted",
    },
    TopicConfigDef {
        name: "message.timestamp.after.max.ms",
        broker_key: Some("log.message.timestamp.after.max.ms"),
        kind: ConfigType::Long,
        doc: "with CreateTime, records more than this ahead of the broker's clock are refused (INVALID_TIMESTAMP)",
    },
    TopicConfigDef {
        name: "message.timestamp.before.max.ms",
        broker_key: Some("log.message.timestamp.before.max.ms"),
        kind: ConfigType::Long,
        doc: "with CreateTime, records more than this behind the broker's clock are refused (INVALID_TIMESTAMP)",
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
        name: "preallocate",
        broker_key: Some("log.preallocate"),
        kind: ConfigType::Boolean,
        doc: "accepted, no effect: Moldau's segment files grow with appends (their indexes are preallocated and memory-mapped)",
    },
    TopicConfigDef {
        name: "remote.copy.lag.bytes",
        broker_key: Some("log.remote.copy.lag.bytes"),
        kind: ConfigType::Long,
        doc: "tiered storage (Kafka 4.4): accepted, no effect (Moldau has no tiered storage)",
    },
    TopicConfigDef {
        name: "remote.copy.lag.ms",
        broker_key: Some("log.remote.copy.lag.ms"),
        kind: ConfigType::Long,
        doc: "tiered storage (Kafka 4.4): accepted, no effect (Moldau has no tiered storage)",
    },
    TopicConfigDef {
        name: "remote.log.copy.disable",
        broker_key: None,
        kind: ConfigType::Boolean,
        doc: "tiered storage: accepted, no effect (Moldau has no tiered storage)",
    },
    TopicConfigDef {
        name: "remote.log.delete.on.disable",
        broker_key: None,
        kind: ConfigType::Boolean,
        doc: "tiered storage: accepted, no effect (Moldau has no tiered storage)",
    },
    TopicConfigDef {
        name: "remote.storage.enable",
        broker_key: None,
        kind: ConfigType::Boolean,
        doc: "tiered storage: only false (Moldau has no tiered storage; true is refused as by a Kafka broker without it)",
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
        doc: "size at which a segment is rolled; at least 1 MiB (1048576), as Kafka 4 (KIP-1030)",
    },
    TopicConfigDef {
        name: INTERNAL_SEGMENT_BYTES,
        broker_key: None,
        kind: ConfigType::Int,
        doc: "for tests only: a segment size that replaces segment.bytes, from 1024 bytes (Kafka 4's internal config of that name)",
    },
    TopicConfigDef {
        name: "segment.index.bytes",
        broker_key: Some("log.index.size.max.bytes"),
        kind: ConfigType::Int,
        doc: "size of a segment's offset index",
    },
    TopicConfigDef {
        name: "segment.jitter.ms",
        broker_key: Some("log.roll.jitter.ms"),
        kind: ConfigType::Long,
        doc: "a segment rolls by age at segment.ms minus a random jitter below this, drawn per segment",
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

/// Whether `name` is one of Apache Kafka's topic configs: a name of
/// [`TOPIC_CONFIGS`] other than Kafka's internal [`INTERNAL_SEGMENT_BYTES`]
/// (for tests only). The one list of topic config names: the operator
/// checks the keys of its `KafkaRetentionPolicy` objects with it.
pub fn is_kafka_topic_config(name: &str) -> bool {
    name != INTERNAL_SEGMENT_BYTES && find(name).is_some()
}

/// The broker-wide default of a topic config.
pub fn broker_default(def: &TopicConfigDef, broker: &BrokerConfig) -> (String, ConfigSource) {
    // A broker key's value and source: its dynamic value (this broker's,
    // else the cluster default), else the broker's properties.
    let broker_value = |k: &str| -> Option<(String, ConfigSource)> {
        broker
            .dynamic
            .get(k)
            .and_then(|values| values.first())
            .map(|(v, source)| (v.trim().to_string(), *source))
            .or_else(|| {
                broker
                    .raw
                    .get(k)
                    .map(|v| (v.trim().to_string(), ConfigSource::StaticBroker))
            })
    };
    let mut source = def
        .broker_key
        .and_then(broker_value)
        .map_or(ConfigSource::Default, |(_, source)| source);
    // Configs without a typed field in `BrokerConfig`: the broker's
    // dynamic value or its properties as given (validated when written or
    // at start, see `validate_broker_keys`), else Kafka's default.
    let raw_or = |default: &str| -> String {
        def.broker_key
            .and_then(broker_value)
            .map_or_else(|| default.to_string(), |(v, _)| v)
    };
    // `log.roll.jitter.hours` when `log.roll.jitter.ms` is not set (as
    // `log.roll.hours` for `log.roll.ms`).
    let mut jitter = || -> String {
        if let Some((v, _)) = broker_value("log.roll.jitter.ms") {
            return v;
        }
        match broker_value("log.roll.jitter.hours") {
            Some((h, hours_source)) => {
                source = hours_source;
                h.parse::<i64>()
                    .map_or_else(|_| "0".into(), |h| h.saturating_mul(3_600_000).to_string())
            }
            None => "0".into(),
        }
    };
    let value = match def.name {
        "cleanup.policy" => broker.log_cleanup_policy.clone(),
        "compression.type" => raw_or("producer"),
        "compression.gzip.level" => raw_or("-1"),
        "compression.lz4.level" => raw_or("9"),
        "compression.zstd.level" => raw_or("3"),
        "local.retention.bytes" | "local.retention.ms" => raw_or("-2"),
        "errors.deadletterqueue.group.enable" => "false".into(),
        "max.decompressed.message.bytes" => raw_or("2147483639"),
        "remote.copy.lag.bytes" => raw_or("-1"),
        "remote.copy.lag.ms" => raw_or("0"),
        "message.timestamp.after.max.ms" => raw_or("3600000"),
        "message.timestamp.before.max.ms" => raw_or(&i64::MAX.to_string()),
        "preallocate" => raw_or("false"),
        "remote.log.copy.disable" | "remote.log.delete.on.disable" | "remote.storage.enable" => {
            "false".into()
        }
        "segment.jitter.ms" => jitter(),
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

/// Kafka's `ConfigException` text for a refused value.
fn kafka_invalid(name: &str, value: &str, why: impl std::fmt::Display) -> String {
    format!("Invalid value {value} for configuration {name}: {why}")
}

/// A Kafka `LONG`/`INT` within `[min, max]`, refused with Kafka's messages.
fn kafka_number(name: &str, value: &str, int: bool, min: i64, max: i64) -> Result<i64, String> {
    let parsed = if int {
        value.trim().parse::<i32>().map(i64::from).ok()
    } else {
        value.trim().parse::<i64>().ok()
    };
    let kind = if int { "INT" } else { "LONG" };
    let v =
        parsed.ok_or_else(|| kafka_invalid(name, value, format!("Not a number of type {kind}")))?;
    if v < min {
        return Err(kafka_invalid(
            name,
            value,
            format!("Value must be at least {min}"),
        ));
    }
    if v > max {
        return Err(kafka_invalid(
            name,
            value,
            format!("Value must be no more than {max}"),
        ));
    }
    Ok(v)
}

/// A Kafka `BOOLEAN` (`true`/`false`, any case).
fn kafka_bool(name: &str, value: &str) -> Result<bool, String> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(kafka_invalid(
            name,
            value,
            "Expected value to be either true or false",
        )),
    }
}

/// The codecs `compression.type` accepts besides `producer`, as Kafka's
/// `BrokerCompressionType` names them.
const CODECS: &[(&str, kafka_protocol::records::Compression)] = &[
    ("uncompressed", kafka_protocol::records::Compression::None),
    ("zstd", kafka_protocol::records::Compression::Zstd),
    ("lz4", kafka_protocol::records::Compression::Lz4),
    ("snappy", kafka_protocol::records::Compression::Snappy),
    ("gzip", kafka_protocol::records::Compression::Gzip),
];

/// Validates one topic config override; the error text is for the client.
pub fn validate(name: &str, value: &str) -> Result<(), String> {
    let def = find(name).ok_or_else(|| format!("unknown topic config {name}"))?;
    match def.name {
        "compression.type"
            if value.trim() != "producer" && !CODECS.iter().any(|(n, _)| *n == value.trim()) =>
        {
            return Err(kafka_invalid(
                name,
                value,
                "String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer",
            ));
        }
        "compression.gzip.level" => {
            let v = kafka_number(name, value, true, i64::from(i32::MIN), i64::from(i32::MAX))?;
            if v != -1 && !(1..=9).contains(&v) {
                return Err(kafka_invalid(
                    name,
                    value,
                    "Value must be between 1 and 9 or equal to -1",
                ));
            }
        }
        "compression.lz4.level" => {
            kafka_number(name, value, true, 1, 17)?;
        }
        "compression.zstd.level" => {
            kafka_number(name, value, true, -131_072, 22)?;
        }
        "local.retention.ms" | "local.retention.bytes" => {
            kafka_number(name, value, false, -2, i64::MAX)?;
        }
        "message.timestamp.after.max.ms"
        | "message.timestamp.before.max.ms"
        | "segment.jitter.ms" => {
            kafka_number(name, value, false, 0, i64::MAX)?;
        }
        "preallocate"
        | "remote.log.copy.disable"
        | "remote.log.delete.on.disable"
        | "errors.deadletterqueue.group.enable" => {
            kafka_bool(name, value)?;
        }
        "max.decompressed.message.bytes" => {
            kafka_number(name, value, true, 1, 2_147_483_639)?;
        }
        "remote.copy.lag.bytes" | "remote.copy.lag.ms" => {
            kafka_number(name, value, false, -1, i64::MAX)?;
        }
        "remote.storage.enable" if kafka_bool(name, value)? => {
            // Kafka's answer when `remote.log.storage.system.enable` is off.
            return Err("Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage.".into());
        }
        _ => {}
    }
    match def.name {
        "cleanup.policy" => {
            let parts: Vec<&str> = value.split(',').map(str::trim).collect();
            if parts.is_empty() || parts.iter().any(|p| *p != "delete" && *p != "compact") {
                return Err(format!(
                    "cleanup.policy {value:?}: expected delete, compact or both"
                ));
            }
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
            kafka_number(name, value, true, MIN_SEGMENT_BYTES, i64::from(i32::MAX))?;
        }
        INTERNAL_SEGMENT_BYTES => {
            kafka_number(name, value, true, 1024, i64::from(i32::MAX))?;
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
        .filter(|def| def.name != INTERNAL_SEGMENT_BYTES || overrides.contains_key(def.name))
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
    if def.name == INTERNAL_SEGMENT_BYTES {
        return out; // no default: only a topic's own value
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
        segment_bytes: eff
            .get(INTERNAL_SEGMENT_BYTES)
            .and_then(|(v, _)| v.trim().parse::<i64>().ok())
            .unwrap_or_else(|| long("segment.bytes", d.segment_bytes as i64))
            .max(1024) as u64,
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
        max_compaction_lag_ms: long("max.compaction.lag.ms", d.max_compaction_lag_ms).max(1),
        segment_jitter_ms: long("segment.jitter.ms", d.segment_jitter_ms).max(0),
        message_timestamp_before_max_ms: long(
            "message.timestamp.before.max.ms",
            d.message_timestamp_before_max_ms,
        )
        .max(0),
        message_timestamp_after_max_ms: long(
            "message.timestamp.after.max.ms",
            d.message_timestamp_after_max_ms,
        )
        .max(0),
        compression: target_compression(&eff),
    }
}

/// `compression.type` and the level of its codec, as the storage layer
/// applies them (an unknown value, never accepted, keeps `producer`).
fn target_compression(eff: &BTreeMap<&'static str, (String, ConfigSource)>) -> TargetCompression {
    let value = |name: &str| eff.get(name).map_or("", |(v, _)| v.trim());
    let Some(&(_, codec)) = CODECS.iter().find(|(n, _)| *n == value("compression.type")) else {
        return TargetCompression::Producer;
    };
    use kafka_protocol::records::Compression;
    let (level_key, default) = match codec {
        Compression::Gzip => ("compression.gzip.level", -1),
        Compression::Lz4 => ("compression.lz4.level", 9),
        Compression::Zstd => ("compression.zstd.level", 3),
        Compression::None | Compression::Snappy => ("", 0),
    };
    let level = value(level_key).parse::<i32>().unwrap_or(default);
    TargetCompression::Codec { codec, level }
}

/// Checks the broker properties that supply defaults of topic configs
/// without a typed `BrokerConfig` field (`compression.type`,
/// `log.roll.jitter.ms`, …) with the topic config's rules, so a bad
/// broker default fails at start rather than at each topic.
pub fn validate_broker_keys(broker: &BrokerConfig) -> Result<(), String> {
    for def in TOPIC_CONFIGS {
        let Some(key) = def.broker_key else { continue };
        let raw_only = matches!(
            def.name,
            "compression.type"
                | "compression.gzip.level"
                | "compression.lz4.level"
                | "compression.zstd.level"
                | "local.retention.bytes"
                | "local.retention.ms"
                | "message.timestamp.after.max.ms"
                | "message.timestamp.before.max.ms"
                | "max.decompressed.message.bytes"
                | "preallocate"
                | "remote.copy.lag.bytes"
                | "remote.copy.lag.ms"
                | "segment.jitter.ms"
        );
        if let (true, Some(v)) = (raw_only, broker.raw.get(key)) {
            validate(def.name, v).map_err(|e| format!("{key}: {e}"))?;
        }
    }
    if let Some(v) = broker.raw.get("log.roll.jitter.hours") {
        kafka_number("log.roll.jitter.hours", v, true, 0, i64::from(i32::MAX))
            .map_err(|e| format!("log.roll.jitter.hours: {e}"))?;
    }
    Ok(())
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
        let dynamic = crate::config_values::BrokerConfigs::from([
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
    fn dynamic_broker_defaults_without_a_typed_field_reach_the_log_config() {
        use crate::storage::recompress::TargetCompression;
        let broker = BrokerConfig::load(
            None,
            &[
                "compression.type=gzip".into(),
                "log.roll.jitter.hours=1".into(),
            ],
        )
        .unwrap();
        let lc = log_config(&BTreeMap::new(), &broker);
        assert!(matches!(lc.compression, TargetCompression::Codec { .. }));
        assert_eq!(
            lc.segment_jitter_ms, 3_600_000,
            "from log.roll.jitter.hours"
        );
        let dynamic = crate::config_values::BrokerConfigs::from([(
            String::new(),
            BTreeMap::from([
                ("compression.type".to_string(), "producer".to_string()),
                ("log.roll.jitter.ms".to_string(), "500".to_string()),
                (
                    "log.message.timestamp.after.max.ms".to_string(),
                    "10".to_string(),
                ),
                (
                    "log.message.timestamp.before.max.ms".to_string(),
                    "20".to_string(),
                ),
                ("log.preallocate".to_string(), "true".to_string()),
            ]),
        )]);
        let eff = crate::dynamic_config::effective(&broker, &dynamic, 1).unwrap();
        let lc = log_config(&BTreeMap::new(), &eff);
        assert_eq!(lc.compression, TargetCompression::Producer);
        assert_eq!(
            lc.segment_jitter_ms, 500,
            "log.roll.jitter.ms wins over hours"
        );
        assert_eq!(
            (
                lc.message_timestamp_after_max_ms,
                lc.message_timestamp_before_max_ms
            ),
            (10, 20)
        );
        assert_eq!(
            broker_default(find("preallocate").unwrap(), &eff),
            ("true".to_string(), ConfigSource::DynamicDefaultBroker)
        );
        // hours only (static; Kafka has only log.roll.jitter.ms dynamic):
        // its value and source
        assert_eq!(
            broker_default(find("segment.jitter.ms").unwrap(), &broker),
            ("3600000".to_string(), ConfigSource::StaticBroker)
        );
        // a topic's own override still wins
        let o = BTreeMap::from([("compression.type".to_string(), "zstd".to_string())]);
        assert!(matches!(
            log_config(&o, &eff).compression,
            TargetCompression::Codec { .. }
        ));
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
        assert!(
            !eff.contains_key(INTERNAL_SEGMENT_BYTES),
            "an internal config is listed only where set"
        );
        // internal.segment.bytes replaces segment.bytes
        let mut small = o.clone();
        small.insert(INTERNAL_SEGMENT_BYTES.to_string(), "2048".to_string());
        assert_eq!(log_config(&small, &broker).segment_bytes, 2048);
        assert_eq!(
            effective(&small, &broker)[INTERNAL_SEGMENT_BYTES],
            ("2048".into(), ConfigSource::DynamicTopic)
        );
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
        assert!(validate("compression.type", "gzip").is_ok());
        assert!(validate("compression.type", "brotli").is_err());
        assert!(validate("segment.bytes", "10").is_err());
        assert_eq!(
            validate("segment.bytes", "1048575").unwrap_err(),
            "Invalid value 1048575 for configuration segment.bytes: Value must be at least 1048576"
        );
        assert!(validate("segment.bytes", "1048576").is_ok());
        assert!(validate("segment.bytes", "2147483648").is_err());
        assert!(validate(INTERNAL_SEGMENT_BYTES, "1024").is_ok());
        assert!(validate(INTERNAL_SEGMENT_BYTES, "1023").is_err());
        assert!(validate("message.timestamp.type", "LogAppendTime").is_ok());
    }

    /// The names Apache Kafka 4.4.0's `LogConfig` defines (its internal
    /// `internal.segment.bytes` aside), printed from its `configDefCopy()`.
    const KAFKA_4_4_TOPIC_CONFIGS: &[&str] = &[
        "cleanup.policy",
        "compression.gzip.level",
        "compression.lz4.level",
        "compression.type",
        "compression.zstd.level",
        "delete.retention.ms",
        "errors.deadletterqueue.group.enable",
        "file.delete.delay.ms",
        "flush.messages",
        "flush.ms",
        "follower.replication.throttled.replicas",
        "index.interval.bytes",
        "leader.replication.throttled.replicas",
        "local.retention.bytes",
        "local.retention.ms",
        "max.compaction.lag.ms",
        "max.decompressed.message.bytes",
        "max.message.bytes",
        "message.timestamp.after.max.ms",
        "message.timestamp.before.max.ms",
        "message.timestamp.type",
        "min.cleanable.dirty.ratio",
        "min.compaction.lag.ms",
        "min.insync.replicas",
        "preallocate",
        "remote.copy.lag.bytes",
        "remote.copy.lag.ms",
        "remote.log.copy.disable",
        "remote.log.delete.on.disable",
        "remote.storage.enable",
        "retention.bytes",
        "retention.ms",
        "segment.bytes",
        "segment.index.bytes",
        "segment.jitter.ms",
        "segment.ms",
        "unclean.leader.election.enable",
    ];

    #[test]
    fn every_kafka_topic_config_is_known_and_its_default_valid() {
        let mut ours: Vec<&str> = TOPIC_CONFIGS
            .iter()
            .map(|d| d.name)
            .filter(|n| *n != INTERNAL_SEGMENT_BYTES)
            .collect();
        ours.sort_unstable();
        assert_eq!(ours, KAFKA_4_4_TOPIC_CONFIGS);
        assert!(KAFKA_4_4_TOPIC_CONFIGS
            .iter()
            .all(|n| is_kafka_topic_config(n)));
        assert!(!is_kafka_topic_config(INTERNAL_SEGMENT_BYTES));
        assert!(!is_kafka_topic_config("log.retention.ms"));
        let broker = BrokerConfig::default();
        for def in TOPIC_CONFIGS {
            let (v, source) = broker_default(def, &broker);
            assert_eq!(source, ConfigSource::Default, "{}", def.name);
            if !v.is_empty() {
                assert_eq!(validate(def.name, &v), Ok(()), "{} default {v:?}", def.name);
            }
        }
        for gone in [
            "message.format.version",
            "message.downconversion.enable",
            "message.timestamp.difference.max.ms",
        ] {
            assert!(
                validate(gone, "x").is_err(),
                "{gone} was removed in Kafka 4.0"
            );
        }
    }

    #[test]
    fn new_configs_validate_with_kafkas_rules_and_messages() {
        for (k, ok) in [
            ("compression.gzip.level", &["-1", "1", "9"][..]),
            ("compression.lz4.level", &["1", "17"]),
            ("compression.zstd.level", &["-131072", "0", "22"]),
            ("segment.jitter.ms", &["0", "9223372036854775807"]),
            ("message.timestamp.after.max.ms", &["0", "3600000"]),
            ("message.timestamp.before.max.ms", &["0"]),
            ("local.retention.ms", &["-2", "-1", "5"]),
            ("local.retention.bytes", &["-2", "100"]),
            ("preallocate", &["true", "FALSE"]),
            ("remote.storage.enable", &["false"]),
            ("remote.log.copy.disable", &["true", "false"]),
            ("remote.log.delete.on.disable", &["true"]),
            ("errors.deadletterqueue.group.enable", &["true", "false"]),
            ("max.decompressed.message.bytes", &["1", "2147483639"]),
            ("remote.copy.lag.bytes", &["-1", "0", "1048576"]),
            ("remote.copy.lag.ms", &["-1", "0", "60000"]),
        ] {
            for v in ok {
                assert_eq!(validate(k, v), Ok(()), "{k}={v}");
            }
        }
        for codec in ["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"] {
            assert_eq!(validate("compression.type", codec), Ok(()));
        }
        for (k, v, message) in [
            ("compression.zstd.level", "23", "Invalid value 23 for configuration compression.zstd.level: Value must be no more than 22"),
            ("compression.zstd.level", "-131073", "Invalid value -131073 for configuration compression.zstd.level: Value must be at least -131072"),
            ("compression.gzip.level", "0", "Invalid value 0 for configuration compression.gzip.level: Value must be between 1 and 9 or equal to -1"),
            ("compression.gzip.level", "10", "Invalid value 10 for configuration compression.gzip.level: Value must be between 1 and 9 or equal to -1"),
            ("compression.gzip.level", "x", "Invalid value x for configuration compression.gzip.level: Not a number of type INT"),
            ("compression.lz4.level", "0", "Invalid value 0 for configuration compression.lz4.level: Value must be at least 1"),
            ("compression.lz4.level", "18", "Invalid value 18 for configuration compression.lz4.level: Value must be no more than 17"),
            ("preallocate", "maybe", "Invalid value maybe for configuration preallocate: Expected value to be either true or false"),
            ("segment.jitter.ms", "-1", "Invalid value -1 for configuration segment.jitter.ms: Value must be at least 0"),
            ("segment.jitter.ms", "abc", "Invalid value abc for configuration segment.jitter.ms: Not a number of type LONG"),
            ("message.timestamp.after.max.ms", "-1", "Invalid value -1 for configuration message.timestamp.after.max.ms: Value must be at least 0"),
            ("local.retention.ms", "-3", "Invalid value -3 for configuration local.retention.ms: Value must be at least -2"),
            ("remote.storage.enable", "yes", "Invalid value yes for configuration remote.storage.enable: Expected value to be either true or false"),
            ("max.decompressed.message.bytes", "0", "Invalid value 0 for configuration max.decompressed.message.bytes: Value must be at least 1"),
            ("remote.copy.lag.ms", "-2", "Invalid value -2 for configuration remote.copy.lag.ms: Value must be at least -1"),
            ("remote.storage.enable", "true", "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage."),
            ("compression.type", "brotli", "Invalid value brotli for configuration compression.type: String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer"),
        ] {
            assert_eq!(validate(k, v), Err(message.to_string()), "{k}={v}");
        }
    }

    #[test]
    fn new_configs_reach_the_log_config() {
        use kafka_protocol::records::Compression;
        let broker = BrokerConfig::default();
        let d = log_config(&BTreeMap::new(), &broker);
        assert_eq!(d.compression, TargetCompression::Producer);
        assert_eq!(d.segment_jitter_ms, 0);
        assert_eq!(d.message_timestamp_after_max_ms, 3_600_000);
        assert_eq!(d.message_timestamp_before_max_ms, i64::MAX);
        let o = BTreeMap::from([
            ("compression.type".to_string(), "zstd".to_string()),
            ("compression.zstd.level".to_string(), "-7".to_string()),
            ("compression.gzip.level".to_string(), "2".to_string()),
            ("segment.jitter.ms".to_string(), "500".to_string()),
            (
                "message.timestamp.before.max.ms".to_string(),
                "10".to_string(),
            ),
            (
                "message.timestamp.after.max.ms".to_string(),
                "20".to_string(),
            ),
        ]);
        let c = log_config(&o, &broker);
        assert_eq!(
            c.compression,
            TargetCompression::Codec {
                codec: Compression::Zstd,
                level: -7
            }
        );
        assert_eq!(c.segment_jitter_ms, 500);
        assert_eq!(
            (
                c.message_timestamp_before_max_ms,
                c.message_timestamp_after_max_ms
            ),
            (10, 20)
        );
        for (codec, level) in [
            ("gzip", Some((Compression::Gzip, -1))),
            ("lz4", Some((Compression::Lz4, 9))),
            ("snappy", Some((Compression::Snappy, 0))),
            ("uncompressed", Some((Compression::None, 0))),
            ("producer", None),
        ] {
            let o = BTreeMap::from([("compression.type".to_string(), codec.to_string())]);
            let want = level.map_or(TargetCompression::Producer, |(codec, level)| {
                TargetCompression::Codec { codec, level }
            });
            assert_eq!(log_config(&o, &broker).compression, want, "{codec}");
        }
    }

    #[test]
    fn broker_properties_supply_the_new_defaults() {
        let broker = BrokerConfig::load(
            None,
            &[
                "compression.type=lz4".into(),
                "compression.lz4.level=3".into(),
                "log.roll.jitter.ms=700".into(),
                "log.message.timestamp.after.max.ms=5".into(),
                "log.preallocate=true".into(),
            ],
        )
        .unwrap();
        assert_eq!(validate_broker_keys(&broker), Ok(()));
        let eff = effective(&BTreeMap::new(), &broker);
        assert_eq!(
            eff["compression.type"],
            ("lz4".into(), ConfigSource::StaticBroker)
        );
        assert_eq!(
            eff["preallocate"],
            ("true".into(), ConfigSource::StaticBroker)
        );
        assert_eq!(
            eff["remote.storage.enable"],
            ("false".into(), ConfigSource::Default)
        );
        let c = log_config(&BTreeMap::new(), &broker);
        assert_eq!(
            c.compression,
            TargetCompression::Codec {
                codec: kafka_protocol::records::Compression::Lz4,
                level: 3
            }
        );
        assert_eq!(
            (c.segment_jitter_ms, c.message_timestamp_after_max_ms),
            (700, 5)
        );
        let bad = BrokerConfig::load(None, &["compression.zstd.level=99".into()]).unwrap();
        assert!(validate_broker_keys(&bad)
            .unwrap_err()
            .contains("compression.zstd.level"));
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
