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
//! directory, so replicas never move between its directories. These are
//! [`DYNAMIC_BROKER_CONFIGS`], the configs Moldau *applies* at run time;
//! among them `log.retention.{minutes,hours}` and `log.roll.hours`, which
//! Kafka refuses (only the first synonym is dynamic there) but Moldau's
//! operator applies this way.
//!
//! Every other config Kafka 4.4 can change at run time
//! ([`STORED_BROKER_CONFIGS`]: its `DynamicBrokerConfig` sets — thread
//! pools, `log.cleaner.*`, listeners and their SSL/SASL settings, remote
//! storage, group coordinator tuning, …) is accepted, validated with the
//! type and bounds Kafka gives it, stored in the cluster metadata and
//! reported by DescribeConfigs (source DYNAMIC_BROKER_CONFIG or
//! DYNAMIC_DEFAULT_BROKER_CONFIG), but Moldau does not act on it: it has
//! no such thread pools, plugins or remote storage, and those it reads
//! (`log.cleaner.backoff.ms`, `log.cleaner.io.max.bytes.per.second`,
//! `num.recovery.threads.per.data.dir`,
//! `transaction.partition.verification.enable`, and the listeners'
//! `listeners`, `listener.security.protocol.map`,
//! `sasl.enabled.mechanisms` and JAAS users) it reads from its properties
//! at start. So are names no broker config has (Kafka keeps
//! them as custom configs), and the per-listener form
//! `listener.name.<listener>.<config>`.
//!
//! Refused as Kafka refuses them (INVALID_REQUEST, Kafka's code for every
//! broker config it will not take, bad values included): a broker config
//! that cannot change at run time ("cannot update dynamically"), the
//! keystore and truststore settings without a listener prefix, per-broker
//! configs (listeners, SSL, SASL) at the cluster-default entity, a value
//! of the wrong type or out of bounds, and a thread count below half or
//! above double the current one ([`check_thread_count`]). Deleting any
//! config, dynamic or not, is accepted (a no-op when it is not set), as in
//! Kafka. The decisions are [`classify`], [`validate`] and
//! [`validate_for_entity`], all pure.

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;

use crate::config::BrokerConfig;
use crate::config_values::{BrokerConfigs, ConfigSource};
use crate::error::TopicError;

/// One dynamic broker config.
#[derive(Debug, PartialEq, Eq)]
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

/// The type and bounds Kafka gives a broker config, for the values of
/// [`STORED_BROKER_CONFIGS`] (Kafka's `ConfigDef` types; the bounds of
/// its validators).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// A 32-bit integer within `min..=max`.
    Int { min: i64, max: i64 },
    /// A 64-bit integer within `min..=max`.
    Long { min: i64, max: i64 },
    /// A 16-bit integer.
    Short,
    /// A floating-point number within `min..=max`.
    Double { min: f64, max: f64 },
    /// `true` or `false`, in any case.
    Boolean,
    /// One of these strings.
    OneOf(&'static [&'static str]),
    /// A comma-separated list.
    List,
    /// A string (or a class name).
    Text,
    /// A secret: never reported back (DescribeConfigs shows it as
    /// sensitive, without its value).
    Password,
}

impl Kind {
    /// Checks `value` as Kafka parses a config of this kind; the error is
    /// Kafka's reason.
    pub fn check(self, value: &str) -> Result<(), String> {
        let v = value.trim();
        let in_range = |n: i64, min: i64, max: i64| {
            if n < min {
                Err(format!("Value must be at least {min}"))
            } else if n > max {
                Err(format!("Value must be no more than {max}"))
            } else {
                Ok(())
            }
        };
        match self {
            Kind::Int { min, max } => v
                .parse::<i32>()
                .map_err(|_| "Not a number of type INT".to_string())
                .and_then(|n| in_range(n.into(), min, max)),
            Kind::Long { min, max } => v
                .parse::<i64>()
                .map_err(|_| "Not a number of type LONG".to_string())
                .and_then(|n| in_range(n, min, max)),
            Kind::Short => v
                .parse::<i16>()
                .map(drop)
                .map_err(|_| "Not a number of type SHORT".to_string()),
            Kind::Double { min, max } => {
                let n = v
                    .parse::<f64>()
                    .map_err(|_| "Not a number of type DOUBLE".to_string())?;
                if n < min {
                    Err(format!("Value must be at least {min}"))
                } else if n > max {
                    Err(format!("Value must be no more than {max}"))
                } else {
                    Ok(())
                }
            }
            Kind::Boolean => {
                if v.eq_ignore_ascii_case("true") || v.eq_ignore_ascii_case("false") {
                    Ok(())
                } else {
                    Err("Expected value to be either true or false".to_string())
                }
            }
            Kind::OneOf(choices) => {
                if choices.contains(&v) {
                    Ok(())
                } else {
                    Err(format!("String must be one of: {}", choices.join(", ")))
                }
            }
            Kind::List | Kind::Text | Kind::Password => Ok(()),
        }
    }
}

/// One broker config Kafka can change at run time and Moldau stores and
/// reports without acting on it.
#[derive(Debug, PartialEq)]
pub struct StoredDef {
    pub name: &'static str,
    pub kind: Kind,
}

/// The broker configs of Apache Kafka 4.4's dynamic set (its
/// `DynamicBrokerConfig.ALL_DYNAMIC_CONFIGS`) that are not in
/// [`DYNAMIC_BROKER_CONFIGS`], with their types and bounds: accepted,
/// stored and reported, without effect on a Moldau broker.
#[rustfmt::skip]
pub const STORED_BROKER_CONFIGS: &[StoredDef] = &[
    StoredDef { name: "background.threads", kind: Kind::Int { min: 1, max: i32::MAX as i64 } },
    StoredDef { name: "config.providers", kind: Kind::List },
    StoredDef { name: "cordoned.log.dirs", kind: Kind::List },
    StoredDef { name: "errors.deadletterqueue.auto.create.topics.enable", kind: Kind::Boolean },
    StoredDef { name: "errors.deadletterqueue.topic.name.prefix", kind: Kind::Text },
    StoredDef { name: "follower.fetch.last.tiered.offset.enable", kind: Kind::Boolean },
    StoredDef { name: "group.consumer.assignment.interval.ms", kind: Kind::Int { min: 0, max: i32::MAX as i64 } },
    StoredDef { name: "group.consumer.assignor.offload.enable", kind: Kind::Boolean },
    StoredDef { name: "group.coordinator.cached.buffer.max.bytes", kind: Kind::Int { min: 524288, max: i32::MAX as i64 } },
    StoredDef { name: "group.share.assignment.interval.ms", kind: Kind::Int { min: 0, max: i32::MAX as i64 } },
    StoredDef { name: "group.share.assignor.offload.enable", kind: Kind::Boolean },
    StoredDef { name: "group.streams.assignment.interval.ms", kind: Kind::Int { min: 0, max: i32::MAX as i64 } },
    StoredDef { name: "group.streams.assignor.offload.enable", kind: Kind::Boolean },
    StoredDef { name: "listener.security.protocol.map", kind: Kind::Text },
    StoredDef { name: "listeners", kind: Kind::List },
    StoredDef { name: "log.cleaner.backoff.ms", kind: Kind::Long { min: 0, max: i64::MAX } },
    StoredDef { name: "log.cleaner.dedupe.buffer.size", kind: Kind::Long { min: i64::MIN, max: i64::MAX } },
    StoredDef { name: "log.cleaner.delete.retention.ms", kind: Kind::Long { min: 0, max: i64::MAX } },
    StoredDef { name: "log.cleaner.io.buffer.load.factor", kind: Kind::Double { min: f64::MIN, max: f64::MAX } },
    StoredDef { name: "log.cleaner.io.buffer.size", kind: Kind::Int { min: 0, max: i32::MAX as i64 } },
    StoredDef { name: "log.cleaner.io.max.bytes.per.second", kind: Kind::Double { min: f64::MIN, max: f64::MAX } },
    StoredDef { name: "log.cleaner.max.compaction.lag.ms", kind: Kind::Long { min: 1, max: i64::MAX } },
    StoredDef { name: "log.cleaner.min.cleanable.ratio", kind: Kind::Double { min: 0.0, max: 1.0 } },
    StoredDef { name: "log.cleaner.min.compaction.lag.ms", kind: Kind::Long { min: 0, max: i64::MAX } },
    StoredDef { name: "log.cleaner.threads", kind: Kind::Int { min: 0, max: i32::MAX as i64 } },
    StoredDef { name: "log.local.retention.bytes", kind: Kind::Long { min: -2, max: i64::MAX } },
    StoredDef { name: "log.local.retention.ms", kind: Kind::Long { min: -2, max: i64::MAX } },
    StoredDef { name: "log.remote.copy.lag.bytes", kind: Kind::Long { min: -1, max: i64::MAX } },
    StoredDef { name: "log.remote.copy.lag.ms", kind: Kind::Long { min: -1, max: i64::MAX } },
    StoredDef { name: "max.connection.creation.rate", kind: Kind::Int { min: 0, max: i32::MAX as i64 } },
    StoredDef { name: "max.decompressed.message.bytes", kind: Kind::Int { min: 1, max: 2147483639 } },
    StoredDef { name: "metric.reporters", kind: Kind::List },
    StoredDef { name: "num.io.threads", kind: Kind::Int { min: 1, max: i32::MAX as i64 } },
    StoredDef { name: "num.network.threads", kind: Kind::Int { min: 1, max: i32::MAX as i64 } },
    StoredDef { name: "num.recovery.threads.per.data.dir", kind: Kind::Int { min: 1, max: i32::MAX as i64 } },
    StoredDef { name: "num.replica.fetchers", kind: Kind::Int { min: 1, max: i32::MAX as i64 } },
    StoredDef { name: "principal.builder.class", kind: Kind::Text },
    StoredDef { name: "producer.id.expiration.ms", kind: Kind::Int { min: 1, max: i32::MAX as i64 } },
    StoredDef { name: "remote.fetch.max.wait.ms", kind: Kind::Int { min: 1, max: i32::MAX as i64 } },
    StoredDef { name: "remote.list.offsets.request.timeout.ms", kind: Kind::Long { min: 1, max: i64::MAX } },
    StoredDef { name: "remote.log.index.file.cache.total.size.bytes", kind: Kind::Long { min: 1, max: i64::MAX } },
    StoredDef { name: "remote.log.manager.copier.thread.pool.size", kind: Kind::Int { min: 1, max: i32::MAX as i64 } },
    StoredDef { name: "remote.log.manager.copy.max.bytes.per.second", kind: Kind::Long { min: 1, max: i64::MAX } },
    StoredDef { name: "remote.log.manager.expiration.thread.pool.size", kind: Kind::Int { min: 1, max: i32::MAX as i64 } },
    StoredDef { name: "remote.log.manager.fetch.max.bytes.per.second", kind: Kind::Long { min: 1, max: i64::MAX } },
    StoredDef { name: "remote.log.manager.follower.thread.pool.size", kind: Kind::Int { min: 1, max: i32::MAX as i64 } },
    StoredDef { name: "remote.log.reader.threads", kind: Kind::Int { min: 1, max: i32::MAX as i64 } },
    StoredDef { name: "sasl.enabled.mechanisms", kind: Kind::List },
    StoredDef { name: "sasl.jaas.config", kind: Kind::Password },
    StoredDef { name: "sasl.kerberos.kinit.cmd", kind: Kind::Text },
    StoredDef { name: "sasl.kerberos.min.time.before.relogin", kind: Kind::Long { min: i64::MIN, max: i64::MAX } },
    StoredDef { name: "sasl.kerberos.principal.to.local.rules", kind: Kind::List },
    StoredDef { name: "sasl.kerberos.service.name", kind: Kind::Text },
    StoredDef { name: "sasl.kerberos.ticket.renew.jitter", kind: Kind::Double { min: f64::MIN, max: f64::MAX } },
    StoredDef { name: "sasl.kerberos.ticket.renew.window.factor", kind: Kind::Double { min: f64::MIN, max: f64::MAX } },
    StoredDef { name: "sasl.login.refresh.buffer.seconds", kind: Kind::Short },
    StoredDef { name: "sasl.login.refresh.min.period.seconds", kind: Kind::Short },
    StoredDef { name: "sasl.login.refresh.window.factor", kind: Kind::Double { min: f64::MIN, max: f64::MAX } },
    StoredDef { name: "sasl.login.refresh.window.jitter", kind: Kind::Double { min: f64::MIN, max: f64::MAX } },
    StoredDef { name: "sasl.mechanism.inter.broker.protocol", kind: Kind::Text },
    StoredDef { name: "share.coordinator.cached.buffer.max.bytes", kind: Kind::Int { min: 524288, max: i32::MAX as i64 } },
    StoredDef { name: "ssl.cipher.suites", kind: Kind::List },
    StoredDef { name: "ssl.client.auth", kind: Kind::OneOf(&["required", "requested", "none"]) },
    StoredDef { name: "ssl.enabled.protocols", kind: Kind::List },
    StoredDef { name: "ssl.endpoint.identification.algorithm", kind: Kind::Text },
    StoredDef { name: "ssl.engine.factory.class", kind: Kind::Text },
    StoredDef { name: "ssl.key.password", kind: Kind::Password },
    StoredDef { name: "ssl.keymanager.algorithm", kind: Kind::Text },
    StoredDef { name: "ssl.keystore.certificate.chain", kind: Kind::Password },
    StoredDef { name: "ssl.keystore.key", kind: Kind::Password },
    StoredDef { name: "ssl.keystore.location", kind: Kind::Text },
    StoredDef { name: "ssl.keystore.password", kind: Kind::Password },
    StoredDef { name: "ssl.keystore.type", kind: Kind::Text },
    StoredDef { name: "ssl.protocol", kind: Kind::Text },
    StoredDef { name: "ssl.provider", kind: Kind::Text },
    StoredDef { name: "ssl.secure.random.implementation", kind: Kind::Text },
    StoredDef { name: "ssl.trustmanager.algorithm", kind: Kind::Text },
    StoredDef { name: "ssl.truststore.certificates", kind: Kind::Password },
    StoredDef { name: "ssl.truststore.location", kind: Kind::Text },
    StoredDef { name: "ssl.truststore.password", kind: Kind::Password },
    StoredDef { name: "ssl.truststore.type", kind: Kind::Text },
    StoredDef { name: "transaction.partition.verification.enable", kind: Kind::Boolean },
    StoredDef { name: "unclean.leader.election.enable", kind: Kind::Boolean },
];

/// The dynamic configs Kafka changes per broker only, never at the
/// cluster default (its `PER_BROKER_CONFIGS`).
const PER_BROKER_ONLY: &[&str] = &[
    "cordoned.log.dirs",
    "listener.security.protocol.map",
    "listeners",
    "principal.builder.class",
    "sasl.enabled.mechanisms",
    "sasl.jaas.config",
    "sasl.kerberos.kinit.cmd",
    "sasl.kerberos.min.time.before.relogin",
    "sasl.kerberos.principal.to.local.rules",
    "sasl.kerberos.service.name",
    "sasl.kerberos.ticket.renew.jitter",
    "sasl.kerberos.ticket.renew.window.factor",
    "sasl.login.refresh.buffer.seconds",
    "sasl.login.refresh.min.period.seconds",
    "sasl.login.refresh.window.factor",
    "sasl.login.refresh.window.jitter",
    "sasl.mechanism.inter.broker.protocol",
    "ssl.cipher.suites",
    "ssl.client.auth",
    "ssl.enabled.protocols",
    "ssl.endpoint.identification.algorithm",
    "ssl.engine.factory.class",
    "ssl.key.password",
    "ssl.keymanager.algorithm",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
    "ssl.keystore.location",
    "ssl.keystore.password",
    "ssl.keystore.type",
    "ssl.protocol",
    "ssl.provider",
    "ssl.secure.random.implementation",
    "ssl.trustmanager.algorithm",
    "ssl.truststore.certificates",
    "ssl.truststore.location",
    "ssl.truststore.password",
    "ssl.truststore.type",
];

/// The keystore and truststore configs Kafka changes only with a
/// listener prefix (`listener.name.<l>.ssl.keystore.location`).
const PER_LISTENER_ONLY: &[&str] = &[
    "ssl.key.password",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
    "ssl.keystore.location",
    "ssl.keystore.password",
    "ssl.keystore.type",
    "ssl.truststore.certificates",
    "ssl.truststore.location",
    "ssl.truststore.password",
    "ssl.truststore.type",
];

/// The per-listener configs Kafka also takes at the cluster default.
const CLUSTER_LEVEL_LISTENER_CONFIGS: &[&str] = &[
    "max.connection.creation.rate",
    "max.connections",
    "num.network.threads",
];

/// The thread counts Kafka changes by at most a factor of two at once.
const THREAD_POOL_CONFIGS: &[&str] = &[
    "background.threads",
    "num.io.threads",
    "num.recovery.threads.per.data.dir",
    "num.replica.fetchers",
];

/// Kafka's default of a thread count of [`THREAD_POOL_CONFIGS`] (what
/// [`check_thread_count`] compares with when nothing else sets it).
pub fn default_thread_count(name: &str) -> Option<i64> {
    match name {
        "background.threads" => Some(10),
        "num.io.threads" => Some(8),
        "num.recovery.threads.per.data.dir" => Some(2),
        "num.replica.fetchers" => Some(1),
        _ => None,
    }
}

/// The stored config `name` (exact name).
pub fn stored(name: &str) -> Option<&'static StoredDef> {
    STORED_BROKER_CONFIGS.iter().find(|d| d.name == name)
}

/// Whether DescribeConfigs must hide `name`'s value: a password, or a
/// name of no known type (Kafka hides those too).
pub fn is_sensitive(name: &str) -> bool {
    match classify(name) {
        Dynamic::Stored(def) => def.kind == Kind::Password,
        Dynamic::PerListener => {
            name.ends_with(".sasl.jaas.config")
                || listener_base(name)
                    .and_then(stored)
                    .is_some_and(|def| def.kind == Kind::Password)
        }
        Dynamic::Custom => true,
        Dynamic::Applied(_) | Dynamic::ReadOnly => false,
    }
}

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
    if crate::telemetry::subscriptions::resource_name(entity).is_some_and(|n| !n.trim().is_empty())
    {
        return Ok(());
    }
    Err(TopicError::new(
        ResponseError::InvalidRequest,
        format!("{entity:?} is not a broker id (or the default entity \"\")"),
    ))
}

/// Checks an entity's whole new set of configs: a broker entity's one by
/// one ([`validate`]); a client-metrics resource's (the entities
/// `client-metrics:<name>`, KIP-714's config resource type 16, kept with
/// the dynamic broker configs so they travel the same way into the
/// cluster metadata and the image) with their own rules.
pub fn validate_entity_configs(
    entity: &str,
    configs: &std::collections::BTreeMap<String, String>,
) -> Result<(), TopicError> {
    validate_entity(entity)?;
    if let Some(name) = crate::telemetry::subscriptions::resource_name(entity) {
        return crate::telemetry::subscriptions::validate(name, configs);
    }
    configs.iter().try_for_each(|(k, v)| validate(k, v))
}

/// What a broker config name is to a dynamic update.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Dynamic {
    /// One of [`DYNAMIC_BROKER_CONFIGS`]: validated and applied.
    Applied(&'static DynamicDef),
    /// One of [`STORED_BROKER_CONFIGS`]: validated with Kafka's type and
    /// bounds, stored and reported.
    Stored(&'static StoredDef),
    /// `listener.name.<listener>.<config>` of a known config: validated as
    /// that config, stored and reported (Kafka's per-listener override).
    PerListener,
    /// A name no broker config has: stored and reported (hidden), as
    /// Kafka keeps custom configs.
    Custom,
    /// A broker config that cannot change at run time.
    ReadOnly,
}

/// Splits Kafka's per-listener prefix: `listener.name.<l>.<config>` →
/// `Some(<config>)`.
fn listener_base(name: &str) -> Option<&str> {
    name.strip_prefix("listener.name.")
        .and_then(|rest| rest.split_once('.'))
        .map(|(_, base)| base)
        .filter(|base| !base.is_empty())
}

/// What `name` is to a dynamic update. A per-listener name is never
/// read-only (Kafka's check is on exact names).
pub fn classify(name: &str) -> Dynamic {
    if listener_base(name).is_some() {
        // known by its base config, or a per-mechanism JAAS config
        return if crate::config_check::is_known(name) {
            Dynamic::PerListener
        } else {
            Dynamic::Custom
        };
    }
    if let Some(def) = find(name) {
        return Dynamic::Applied(def);
    }
    if let Some(def) = stored(name) {
        return Dynamic::Stored(def);
    }
    if crate::config_check::is_known(name) {
        return Dynamic::ReadOnly;
    }
    Dynamic::Custom
}

/// Whether `name` can be set dynamically at all (at some entity).
pub fn is_dynamic(name: &str) -> bool {
    classify(name) != Dynamic::ReadOnly
}

fn invalid_request(message: String) -> TopicError {
    TopicError::new(ResponseError::InvalidRequest, message)
}

/// Checks that `name` can be changed dynamically (INVALID_REQUEST, as
/// Kafka answers for a read-only config, when not).
pub fn validate_name(name: &str) -> Result<(), TopicError> {
    if classify(name) == Dynamic::ReadOnly {
        return Err(invalid_request(format!(
            "Cannot update these configs dynamically: {name} (set it in the broker's properties)"
        )));
    }
    if PER_LISTENER_ONLY.contains(&name) {
        return Err(invalid_request(format!(
            "These security configs can be dynamically updated only per-listener using the listener prefix: {name}"
        )));
    }
    Ok(())
}

/// [`validate`] for one entity: `""` (the cluster default) refuses what
/// Kafka changes per broker only (listeners and their SSL and SASL
/// settings, `cordoned.log.dirs`, and per-listener names other than the
/// connection limits).
pub fn validate_for_entity(entity: &str, name: &str, value: &str) -> Result<(), TopicError> {
    validate(name, value)?;
    if entity.is_empty() && is_per_broker(name) {
        return Err(invalid_request(format!(
            "Cannot update these configs at default cluster level, broker id must be specified: {name}"
        )));
    }
    Ok(())
}

/// Whether Kafka changes `name` per broker only.
fn is_per_broker(name: &str) -> bool {
    match listener_base(name) {
        Some(base) => !CLUSTER_LEVEL_LISTENER_CONFIGS.contains(&base),
        None => PER_BROKER_ONLY.contains(&name),
    }
}

/// Kafka's rule for a dynamic thread count (`num.io.threads`,
/// `num.replica.fetchers`, `num.recovery.threads.per.data.dir`,
/// `background.threads`): at least 1, at least half and at most double
/// the `current` one. Other names pass.
pub fn check_thread_count(name: &str, current: i64, value: &str) -> Result<(), TopicError> {
    if !THREAD_POOL_CONFIGS.contains(&name) {
        return Ok(());
    }
    let Ok(new) = value.trim().parse::<i64>() else {
        return Ok(()); // the type check answers
    };
    let why = if new < 1 {
        "value should be at least 1".to_string()
    } else if new < current / 2 {
        format!("value should be at least half the current value {current}")
    } else if new > current.saturating_mul(2) {
        format!("value should not be greater than double the current value {current}")
    } else {
        return Ok(());
    };
    Err(invalid_request(format!(
        "Dynamic thread count update validation failed for {name}={new}, {why}"
    )))
}

/// Validates one dynamic broker config: a name that may change at run
/// time ([`validate_name`]) and a value with its rules — an applied
/// config's as in the broker's properties (the rates: non-negative
/// longs), a stored one's Kafka type and bounds, a custom one's none.
/// Every refusal is INVALID_REQUEST, as Kafka answers.
pub fn validate(name: &str, value: &str) -> Result<(), TopicError> {
    validate_name(name)?;
    let typed = |def: &StoredDef| {
        def.kind.check(value).map_err(|why| {
            invalid_request(format!(
                "Invalid value {value} for configuration {name}: {why}"
            ))
        })
    };
    match classify(name) {
        Dynamic::Applied(_) => validate_applied(name, value),
        Dynamic::Stored(def) => typed(def),
        Dynamic::PerListener => {
            let base = listener_base(name).unwrap_or(name);
            match (find(base), stored(base)) {
                (Some(_), _) => validate_applied(base, value),
                (None, Some(def)) => typed(def),
                (None, None) => Ok(()),
            }
        }
        Dynamic::Custom | Dynamic::ReadOnly => Ok(()),
    }
}

fn validate_applied(name: &str, value: &str) -> Result<(), TopicError> {
    if !is_rate(name) {
        // a broker property: the rules it has in the broker's properties
        // (keys without a typed field, e.g. `compression.type`, with the
        // rules of the topic config they default)
        let props = BTreeMap::from([(name.to_string(), value.to_string())]);
        return BrokerConfig::from_properties(props)
            .map_err(|e| e.to_string())
            .and_then(|c| crate::topic_config::validate_broker_keys(&c))
            .map_err(invalid_request);
    }
    match value.trim().parse::<i64>() {
        Ok(v) if v >= 0 => Ok(()),
        _ => Err(invalid_request(format!(
            "{name}: {value:?} is not a non-negative number"
        ))),
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
            ResponseError::InvalidRequest
        );
        assert_eq!(
            validate(LEADER_THROTTLED_RATE, "fast").unwrap_err().code,
            ResponseError::InvalidRequest
        );
        assert_eq!(
            validate("num.partitions", "1").unwrap_err().code,
            ResponseError::InvalidRequest
        );
        assert!(
            validate("num.network.threads", "10").is_ok(),
            "dynamic in Kafka: stored"
        );
        assert!(validate("max.connections", "10").is_ok());
        assert!(validate("max.connections.per.ip", "0").is_ok());
        assert!(validate("max.connections.per.ip.overrides", "127.0.0.2:3, [::1]:0").is_ok());
        assert_eq!(
            validate("max.connections.per.ip.overrides", "somewhere")
                .unwrap_err()
                .code,
            ResponseError::InvalidRequest
        );
        assert_eq!(
            validate("max.connections.per.ip", "-1").unwrap_err().code,
            ResponseError::InvalidRequest
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
                ResponseError::InvalidRequest,
                "{name}={bad}"
            );
        }
        assert!(validate("log.cleanup.policy", "compact").is_ok());
        assert_eq!(
            validate("log.retention.ms", "a week").unwrap_err().code,
            ResponseError::InvalidRequest
        );
        assert_eq!(
            validate("log.message.timestamp.type", "Now")
                .unwrap_err()
                .code,
            ResponseError::InvalidRequest
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

    #[test]
    fn kafkas_whole_dynamic_set_is_accepted_the_rest_refused_as_kafka_does() {
        // stored without effect, with Kafka's types and bounds
        assert!(validate("sasl.kerberos.min.time.before.relogin", "70000").is_ok());
        assert!(validate("log.cleaner.threads", "2").is_ok());
        assert!(validate("unclean.leader.election.enable", "TRUE").is_ok());
        assert!(validate("ssl.client.auth", "required").is_ok());
        assert!(validate("log.cleaner.min.cleanable.ratio", "0.7").is_ok());
        assert!(validate("listeners", "PLAINTEXT://:9092").is_ok());
        for (name, bad, why) in [
            (
                "sasl.kerberos.min.time.before.relogin",
                "soon",
                "Not a number of type LONG",
            ),
            (
                "sasl.login.refresh.buffer.seconds",
                "99999",
                "Not a number of type SHORT",
            ),
            (
                "unclean.leader.election.enable",
                "maybe",
                "either true or false",
            ),
            ("ssl.client.auth", "sometimes", "must be one of"),
            ("log.cleaner.min.cleanable.ratio", "2", "no more than 1"),
            ("num.io.threads", "0", "at least 1"),
            ("max.connections", "abc", ""),
            ("max.connections", "-5", ""),
        ] {
            let e = validate(name, bad).unwrap_err();
            assert_eq!(e.code, ResponseError::InvalidRequest, "{name}={bad}");
            assert!(e.message.contains(why), "{name}={bad}: {}", e.message);
        }
        // every name of Kafka's set is dynamic here, applied or stored
        assert_eq!(
            DYNAMIC_BROKER_CONFIGS.len() - 3 + STORED_BROKER_CONFIGS.len(),
            110
        );
        for def in STORED_BROKER_CONFIGS {
            assert!(find(def.name).is_none(), "{} twice", def.name);
            assert_eq!(classify(def.name), Dynamic::Stored(def));
        }
        // read-only: Kafka's other broker configs and Moldau's own
        for name in [
            "num.partitions",
            "log.retention.check.interval.ms",
            "transaction.version",
        ] {
            let e = validate(name, "1").unwrap_err();
            assert_eq!(e.code, ResponseError::InvalidRequest);
            assert!(
                e.message
                    .starts_with("Cannot update these configs dynamically"),
                "{}",
                e.message
            );
        }
        // custom names are kept, hidden
        assert_eq!(classify("my.plugin.setting"), Dynamic::Custom);
        assert!(validate("my.plugin.setting", "x").is_ok());
        assert!(is_sensitive("my.plugin.setting"));
        assert!(is_sensitive("sasl.jaas.config"));
        assert!(!is_sensitive("sasl.kerberos.min.time.before.relogin"));
        // keystores only per listener; per-broker configs not at the default
        assert!(validate("ssl.keystore.location", "/k")
            .unwrap_err()
            .message
            .contains("per-listener"));
        assert!(
            validate_for_entity("1", "listener.name.client.ssl.keystore.type", "PKCS12").is_ok()
        );
        assert!(!is_sensitive("listener.name.client.ssl.keystore.type"));
        assert!(is_sensitive("listener.name.client.ssl.keystore.password"));
        assert_eq!(
            classify("listener.name.client.plain.sasl.jaas.config"),
            Dynamic::PerListener
        );
        assert!(is_sensitive("listener.name.client.plain.sasl.jaas.config"));
        assert!(
            validate_for_entity("", "listener.name.client.plain.sasl.jaas.config", "x").is_err()
        );
        assert_eq!(
            validate_for_entity("1", "listener.name.client.max.connections", "x")
                .unwrap_err()
                .code,
            ResponseError::InvalidRequest,
            "validated as its base config"
        );
        for (name, value) in [
            ("sasl.kerberos.min.time.before.relogin", "1"),
            ("listeners", "PLAINTEXT://:9092"),
            ("listener.name.client.ssl.keystore.type", "PKCS12"),
        ] {
            assert!(validate_for_entity("1", name, value).is_ok(), "{name}");
            let e = validate_for_entity("", name, value).unwrap_err();
            assert!(
                e.message.contains("default cluster level"),
                "{name}: {}",
                e.message
            );
        }
        assert!(validate_for_entity("", "listener.name.client.max.connections", "100").is_ok());
        assert!(validate_for_entity("", "log.cleaner.threads", "2").is_ok());
    }

    #[test]
    fn thread_counts_change_by_at_most_a_factor_of_two() {
        assert!(check_thread_count("num.io.threads", 8, "5").is_ok());
        assert!(check_thread_count("num.io.threads", 8, "16").is_ok());
        assert!(check_thread_count("num.io.threads", 8, "4").is_ok());
        let e = check_thread_count("num.io.threads", 8, "100").unwrap_err();
        assert!(
            e.message
                .contains("not be greater than double the current value 8"),
            "{}",
            e.message
        );
        assert!(check_thread_count("num.io.threads", 8, "3").is_err());
        assert!(check_thread_count("background.threads", 10, "0").is_err());
        assert!(
            check_thread_count("log.cleaner.threads", 1, "100").is_ok(),
            "not a pool Kafka limits"
        );
        assert_eq!(default_thread_count("num.io.threads"), Some(8));
    }
}
