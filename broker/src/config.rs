//! Broker configuration: command-line flags (with environment fallbacks) and
//! the Kafka-named broker properties (`num.partitions`, `log.retention.ms`, …)
//! read from an optional properties file and `--set key=value` overrides.
//!
//! This module only parses and validates; it does not open sockets or files
//! other than the properties file.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;

/// Command-line interface of `moldau-broker`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "moldau-broker",
    version,
    about = "Moldau: a Kafka-compatible streaming log broker"
)]
pub struct Cli {
    /// Address the Kafka listener binds.
    #[arg(long, env = "MOLDAU_LISTEN", default_value = "127.0.0.1:9092")]
    pub listen: SocketAddr,
    /// host:port clients are told to connect to (defaults to the listen address).
    #[arg(long, env = "MOLDAU_ADVERTISED_LISTENER")]
    pub advertised_listener: Option<String>,
    /// Address of the HTTP endpoint serving /metrics, /healthz and /readyz.
    #[arg(long, env = "MOLDAU_HTTP_LISTEN", default_value = "127.0.0.1:9644")]
    pub http_listen: SocketAddr,
    /// Directory holding the partitions' logs and the broker's metadata.
    #[arg(long, env = "MOLDAU_DATA_DIR", default_value = "moldau-data")]
    pub data_dir: PathBuf,
    /// This broker's node id.
    #[arg(long, env = "MOLDAU_NODE_ID", default_value_t = 0)]
    pub node_id: i32,
    /// Java properties file with Kafka broker config names.
    #[arg(long, env = "MOLDAU_CONFIG_FILE")]
    pub config_file: Option<PathBuf>,
    /// A broker property override, `key=value`; may be repeated; wins over the file.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    /// Name of the cluster this broker belongs to (reported as cluster id).
    #[arg(long, env = "MOLDAU_CLUSTER_NAME", default_value = "moldau")]
    pub cluster_name: String,
    /// Log filter (tracing `EnvFilter` syntax).
    #[arg(long, env = "MOLDAU_LOG", default_value = "info")]
    pub log: String,
    /// Log format: `text` or `json`.
    #[arg(long, env = "MOLDAU_LOG_FORMAT", default_value = "text")]
    pub log_format: String,
}

/// A broker property that could not be understood.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("line {line} of the properties is not `key=value`: {text}")]
    Syntax { line: usize, text: String },
    #[error("invalid value {value:?} for {key}: {reason}")]
    Invalid {
        key: String,
        value: String,
        reason: String,
    },
}

/// Broker-wide settings, named after Kafka's broker configs.
#[derive(Debug, Clone, PartialEq)]
pub struct BrokerConfig {
    pub num_partitions: i32,
    pub default_replication_factor: i16,
    pub auto_create_topics_enable: bool,
    pub delete_topic_enable: bool,
    pub socket_request_max_bytes: usize,
    pub message_max_bytes: i64,
    pub log_segment_bytes: i64,
    pub log_roll_ms: i64,
    pub log_retention_ms: i64,
    pub log_retention_bytes: i64,
    pub log_retention_check_interval_ms: i64,
    pub log_flush_interval_messages: i64,
    pub log_flush_interval_ms: i64,
    pub log_index_interval_bytes: i64,
    pub log_index_size_max_bytes: i64,
    pub log_message_timestamp_type: String,
    pub log_segment_delete_delay_ms: i64,
    pub log_cleanup_policy: String,
    pub group_initial_rebalance_delay_ms: i64,
    pub group_min_session_timeout_ms: i32,
    pub group_max_session_timeout_ms: i32,
    pub group_max_size: i32,
    pub offsets_topic_num_partitions: i32,
    pub offsets_retention_minutes: i64,
    pub offset_metadata_max_bytes: i32,
    pub offsets_retention_check_interval_ms: i64,
    /// `max.connections`: open client connections in all (Kafka's default,
    /// unlimited, is further capped at start to half the process's file
    /// descriptor limit, so connections can never starve the logs).
    pub max_connections: usize,
    /// `max.connections.per.ip` and `max.connections.per.ip.overrides`.
    pub max_connections_per_ip: usize,
    pub max_connections_per_ip_overrides: String,
    /// `connections.max.idle.ms`: a connection with no request for this
    /// long is closed.
    pub connections_max_idle_ms: i64,
    /// `queued.max.request.bytes`: request bytes in flight across the
    /// broker; `-1` is unbounded (Kafka's default). Moldau's default is
    /// 256 MiB, raised to `socket.request.max.bytes` when that is larger.
    pub queued_max_request_bytes: i64,
    /// `socket.request.read.timeout.ms` (Moldau's own; Kafka has none): a
    /// request whose bytes do not all arrive within this time of its first
    /// byte closes the connection (slow or stalled senders).
    pub socket_request_read_timeout_ms: i64,
    /// Every property as given (file, then overrides), for DescribeConfigs.
    pub raw: BTreeMap<String, String>,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        Self {
            num_partitions: 1,
            default_replication_factor: 1,
            auto_create_topics_enable: true,
            delete_topic_enable: true,
            socket_request_max_bytes: 100 * 1024 * 1024,
            message_max_bytes: 1024 * 1024 + 12,
            log_segment_bytes: 1024 * 1024 * 1024,
            log_roll_ms: 7 * 24 * 3600 * 1000,
            log_retention_ms: 7 * 24 * 3600 * 1000,
            log_retention_bytes: -1,
            log_retention_check_interval_ms: 5 * 60 * 1000,
            log_flush_interval_messages: i64::MAX,
            log_flush_interval_ms: i64::MAX,
            log_index_interval_bytes: 4096,
            log_index_size_max_bytes: 10 * 1024 * 1024,
            log_message_timestamp_type: "CreateTime".into(),
            log_segment_delete_delay_ms: 60_000,
            log_cleanup_policy: "delete".into(),
            group_initial_rebalance_delay_ms: 3_000,
            group_min_session_timeout_ms: 6_000,
            group_max_session_timeout_ms: 1_800_000,
            group_max_size: i32::MAX,
            offsets_topic_num_partitions: 50,
            offsets_retention_minutes: 7 * 24 * 60,
            offset_metadata_max_bytes: 4096,
            offsets_retention_check_interval_ms: 600_000,
            max_connections: i32::MAX as usize,
            max_connections_per_ip: i32::MAX as usize,
            max_connections_per_ip_overrides: String::new(),
            connections_max_idle_ms: 600_000,
            queued_max_request_bytes: 256 * 1024 * 1024,
            socket_request_read_timeout_ms: 60_000,
            raw: BTreeMap::new(),
        }
    }
}

/// Parses Java-properties text (`key=value` or `key: value`, `#`/`!` comments).
pub fn parse_properties(text: &str) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut out = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('!') {
            continue;
        }
        let split = trimmed
            .find(['=', ':'])
            .ok_or_else(|| ConfigError::Syntax {
                line: i + 1,
                text: trimmed.to_string(),
            })?;
        let (k, v) = trimmed.split_at(split);
        out.insert(k.trim().to_string(), v[1..].trim().to_string());
    }
    Ok(out)
}

fn parse_num<T: std::str::FromStr>(key: &str, value: &str) -> Result<T, ConfigError>
where
    T::Err: std::fmt::Display,
{
    value.parse::<T>().map_err(|e| ConfigError::Invalid {
        key: key.into(),
        value: value.into(),
        reason: e.to_string(),
    })
}

fn parse_bool(key: &str, value: &str) -> Result<bool, ConfigError> {
    match value.to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(ConfigError::Invalid {
            key: key.into(),
            value: value.into(),
            reason: "expected true or false".into(),
        }),
    }
}

impl BrokerConfig {
    /// Builds the config from properties; unknown keys are kept (and shown by
    /// DescribeConfigs) but otherwise ignored, as Kafka does.
    pub fn from_properties(props: BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let mut c = BrokerConfig::default();
        // Kafka's precedence: ms over minutes over hours.
        if let Some(v) = props.get("log.retention.hours") {
            c.log_retention_ms = parse_num::<i64>("log.retention.hours", v)? * 3_600_000;
        }
        if let Some(v) = props.get("log.retention.minutes") {
            c.log_retention_ms = parse_num::<i64>("log.retention.minutes", v)? * 60_000;
        }
        if let Some(v) = props.get("log.roll.hours") {
            c.log_roll_ms = parse_num::<i64>("log.roll.hours", v)? * 3_600_000;
        }
        for (k, v) in &props {
            match k.as_str() {
                "num.partitions" => c.num_partitions = parse_num(k, v)?,
                "default.replication.factor" => c.default_replication_factor = parse_num(k, v)?,
                "auto.create.topics.enable" => c.auto_create_topics_enable = parse_bool(k, v)?,
                "delete.topic.enable" => c.delete_topic_enable = parse_bool(k, v)?,
                "socket.request.max.bytes" => c.socket_request_max_bytes = parse_num(k, v)?,
                "message.max.bytes" => c.message_max_bytes = parse_num(k, v)?,
                "log.segment.bytes" => c.log_segment_bytes = parse_num(k, v)?,
                "log.roll.ms" => c.log_roll_ms = parse_num(k, v)?,
                "log.retention.ms" => c.log_retention_ms = parse_num(k, v)?,
                "log.retention.bytes" => c.log_retention_bytes = parse_num(k, v)?,
                "log.retention.check.interval.ms" => {
                    c.log_retention_check_interval_ms = parse_num(k, v)?
                }
                "log.flush.interval.messages" => c.log_flush_interval_messages = parse_num(k, v)?,
                "log.flush.interval.ms" => c.log_flush_interval_ms = parse_num(k, v)?,
                "log.index.interval.bytes" => c.log_index_interval_bytes = parse_num(k, v)?,
                "log.index.size.max.bytes" => c.log_index_size_max_bytes = parse_num(k, v)?,
                "log.segment.delete.delay.ms" => c.log_segment_delete_delay_ms = parse_num(k, v)?,
                "log.cleanup.policy" => c.log_cleanup_policy = v.clone(),
                "group.initial.rebalance.delay.ms" => {
                    c.group_initial_rebalance_delay_ms = parse_num(k, v)?
                }
                "group.min.session.timeout.ms" => c.group_min_session_timeout_ms = parse_num(k, v)?,
                "group.max.session.timeout.ms" => c.group_max_session_timeout_ms = parse_num(k, v)?,
                "group.max.size" => c.group_max_size = parse_num(k, v)?,
                "offsets.topic.num.partitions" => c.offsets_topic_num_partitions = parse_num(k, v)?,
                "offsets.retention.minutes" => c.offsets_retention_minutes = parse_num(k, v)?,
                "offset.metadata.max.bytes" => c.offset_metadata_max_bytes = parse_num(k, v)?,
                "offsets.retention.check.interval.ms" => {
                    c.offsets_retention_check_interval_ms = parse_num(k, v)?
                }
                "max.connections" => c.max_connections = parse_num(k, v)?,
                "max.connections.per.ip" => c.max_connections_per_ip = parse_num(k, v)?,
                "max.connections.per.ip.overrides" => {
                    crate::protocol::limits::parse_per_ip_overrides(v).map_err(|reason| {
                        ConfigError::Invalid {
                            key: k.clone(),
                            value: v.clone(),
                            reason,
                        }
                    })?;
                    c.max_connections_per_ip_overrides = v.clone()
                }
                "connections.max.idle.ms" => c.connections_max_idle_ms = parse_num(k, v)?,
                "queued.max.request.bytes" => c.queued_max_request_bytes = parse_num(k, v)?,
                "socket.request.read.timeout.ms" => {
                    c.socket_request_read_timeout_ms = parse_num(k, v)?
                }
                "log.message.timestamp.type" => {
                    if v != "CreateTime" && v != "LogAppendTime" {
                        return Err(ConfigError::Invalid {
                            key: k.clone(),
                            value: v.clone(),
                            reason: "expected CreateTime or LogAppendTime".into(),
                        });
                    }
                    c.log_message_timestamp_type = v.clone();
                }
                _ => {}
            }
        }
        if c.num_partitions < 1 {
            return Err(ConfigError::Invalid {
                key: "num.partitions".into(),
                value: c.num_partitions.to_string(),
                reason: "must be at least 1".into(),
            });
        }
        if c.offsets_topic_num_partitions < 1 {
            return Err(ConfigError::Invalid {
                key: "offsets.topic.num.partitions".into(),
                value: c.offsets_topic_num_partitions.to_string(),
                reason: "must be at least 1".into(),
            });
        }
        c.raw = props;
        Ok(c)
    }

    /// Reads the properties file (if any) and applies `key=value` overrides.
    pub fn load(file: Option<&std::path::Path>, overrides: &[String]) -> Result<Self, ConfigError> {
        let mut props = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.to_path_buf(),
                    source,
                })?;
                parse_properties(&text)?
            }
            None => BTreeMap::new(),
        };
        for (i, o) in overrides.iter().enumerate() {
            let (k, v) = o.split_once('=').ok_or_else(|| ConfigError::Syntax {
                line: i + 1,
                text: o.clone(),
            })?;
            props.insert(k.trim().to_string(), v.trim().to_string());
        }
        Self::from_properties(props)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_parse_with_comments_and_both_separators() {
        let p =
            parse_properties("# c\n! c\n\nnum.partitions=3\nlog.retention.ms : 1000\n").unwrap();
        assert_eq!(p["num.partitions"], "3");
        assert_eq!(p["log.retention.ms"], "1000");
        assert!(parse_properties("novalue\n").is_err());
    }

    #[test]
    fn broker_config_applies_kafka_names_and_precedence() {
        let c = BrokerConfig::load(
            None,
            &[
                "log.retention.hours=2".into(),
                "log.retention.ms=5000".into(),
                "num.partitions=4".into(),
                "auto.create.topics.enable=false".into(),
            ],
        )
        .unwrap();
        assert_eq!(c.log_retention_ms, 5000);
        assert_eq!(c.num_partitions, 4);
        assert!(!c.auto_create_topics_enable);
        let hours = BrokerConfig::load(None, &["log.retention.hours=2".into()]).unwrap();
        assert_eq!(hours.log_retention_ms, 7_200_000);
    }

    #[test]
    fn broker_config_rejects_bad_values() {
        assert!(BrokerConfig::load(None, &["num.partitions=0".into()]).is_err());
        assert!(BrokerConfig::load(None, &["num.partitions=x".into()]).is_err());
        assert!(BrokerConfig::load(None, &["auto.create.topics.enable=maybe".into()]).is_err());
        assert!(BrokerConfig::load(None, &["log.message.timestamp.type=Now".into()]).is_err());
    }
}
