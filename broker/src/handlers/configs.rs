//! DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics and
//! brokers. A broker's configs are its static properties plus the dynamic
//! ones (`crate::dynamic_config`: the replication throttle rates), which
//! AlterConfigs/IncrementalAlterConfigs change for one broker (its id) or
//! for all (the default entity `""`) through the controller; altering any
//! other broker config is refused with INVALID_REQUEST, as Kafka refuses
//! its read-only ones.

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{
    alter_configs_response, incremental_alter_configs_response, AlterConfigsRequest,
    AlterConfigsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::str_bytes;
use crate::broker::Broker;
use crate::config::BrokerConfig;
use crate::config_values::ConfigSource;
use crate::error::TopicError;
use crate::topic_config::{self, ConfigType};
use crate::topics::AlterOp;

const TOPIC: i8 = 2;
const BROKER: i8 = 4;

fn wanted(keys: &Option<Vec<StrBytes>>, name: &str) -> bool {
    keys.as_ref()
        .is_none_or(|k| k.is_empty() || k.iter().any(|x| x.as_str() == name))
}

fn describe_topic(
    broker: &Broker,
    name: &str,
    keys: &Option<Vec<StrBytes>>,
    docs: bool,
    include_synonyms: bool,
) -> Result<Vec<DescribeConfigsResourceResult>, TopicError> {
    let unknown = || {
        TopicError::new(
            ResponseError::UnknownTopicOrPartition,
            format!("topic {name} does not exist"),
        )
    };
    // Cluster mode: the controller's image has every topic's overrides
    // (this broker may hold no partition of it); standalone: its own.
    let overrides = if broker.controller_link().is_some() {
        broker
            .image()
            .topic(name)
            .ok_or_else(unknown)?
            .configs
            .clone()
    } else {
        broker
            .topics
            .get(name)
            .ok_or_else(unknown)?
            .meta
            .configs
            .clone()
    };
    let effective = topic_config::effective(&overrides, &broker.topics.broker_config());
    Ok(effective
        .into_iter()
        .filter(|(k, _)| wanted(keys, k))
        .map(|(k, (v, source))| {
            let def = topic_config::find(k);
            DescribeConfigsResourceResult::default()
                .with_name(str_bytes(k))
                .with_value(Some(str_bytes(&v)))
                .with_config_source(source as i8)
                .with_config_type(def.map_or(ConfigType::String, |d| d.kind) as i8)
                .with_documentation(if docs {
                    def.map(|d| str_bytes(d.doc))
                } else {
                    None
                })
                .with_synonyms(match def {
                    Some(def) if include_synonyms => {
                        topic_config::synonyms(def, &overrides, &broker.topics.broker_config())
                            .into_iter()
                            .map(|(name, value, source)| {
                                DescribeConfigsSynonym::default()
                                    .with_name(str_bytes(name))
                                    .with_value(Some(str_bytes(&value)))
                                    .with_source(source as i8)
                            })
                            .collect()
                    }
                    _ => Vec::new(),
                })
        })
        .collect())
}

/// The broker configs DescribeConfigs reports, with their values in `cfg`.
fn broker_values(cfg: &BrokerConfig) -> Vec<(&'static str, String)> {
    // Kafka shows an unlimited rate as Long.MAX_VALUE
    let rate = |r: u64| i64::try_from(r).unwrap_or(i64::MAX).to_string();
    vec![
        ("num.partitions", cfg.num_partitions.to_string()),
        (
            "default.replication.factor",
            cfg.default_replication_factor.to_string(),
        ),
        (
            "auto.create.topics.enable",
            cfg.auto_create_topics_enable.to_string(),
        ),
        ("delete.topic.enable", cfg.delete_topic_enable.to_string()),
        (
            "socket.request.max.bytes",
            cfg.socket_request_max_bytes.to_string(),
        ),
        ("message.max.bytes", cfg.message_max_bytes.to_string()),
        ("min.insync.replicas", cfg.min_insync_replicas.to_string()),
        ("log.segment.bytes", cfg.log_segment_bytes.to_string()),
        ("log.roll.ms", cfg.log_roll_ms.to_string()),
        ("log.retention.ms", cfg.log_retention_ms.to_string()),
        ("log.retention.bytes", cfg.log_retention_bytes.to_string()),
        (
            "log.retention.check.interval.ms",
            cfg.log_retention_check_interval_ms.to_string(),
        ),
        ("log.cleanup.policy", cfg.log_cleanup_policy.clone()),
        (
            "log.cleaner.io.max.bytes.per.second",
            kafka_double(cfg.log_cleaner_io_max_bytes_per_second),
        ),
        ("log.cleaner.enable", cfg.log_cleaner_enable.to_string()),
        (
            "num.recovery.threads.per.data.dir",
            cfg.num_recovery_threads_per_data_dir.to_string(),
        ),
        (
            "log.cleaner.backoff.ms",
            cfg.log_cleaner_backoff_ms.to_string(),
        ),
        (
            "log.message.timestamp.type",
            cfg.log_message_timestamp_type.clone(),
        ),
        ("max.connections", cfg.max_connections.to_string()),
        (
            "max.connections.per.ip",
            cfg.max_connections_per_ip.to_string(),
        ),
        (
            "max.connections.per.ip.overrides",
            cfg.max_connections_per_ip_overrides.clone(),
        ),
        (
            "connections.max.idle.ms",
            cfg.connections_max_idle_ms.to_string(),
        ),
        // broker defaults of topic configs without a typed field: Kafka's
        // defaults (a static or dynamic value comes first as its synonym)
        ("compression.type", "producer".into()),
        ("log.preallocate", "false".into()),
        ("log.message.timestamp.after.max.ms", "3600000".into()),
        ("log.message.timestamp.before.max.ms", i64::MAX.to_string()),
        (
            "queued.max.request.bytes",
            cfg.queued_max_request_bytes.to_string(),
        ),
        (
            "max.incremental.fetch.session.cache.slots",
            cfg.max_incremental_fetch_session_cache_slots.to_string(),
        ),
        (
            "min.incremental.fetch.session.eviction.ms",
            cfg.min_incremental_fetch_session_eviction_ms.to_string(),
        ),
        (
            "socket.request.read.timeout.ms",
            cfg.socket_request_read_timeout_ms.to_string(),
        ),
        (
            crate::dynamic_config::LEADER_THROTTLED_RATE,
            rate(cfg.leader_replication_throttled_rate),
        ),
        (
            crate::dynamic_config::FOLLOWER_THROTTLED_RATE,
            rate(cfg.follower_replication_throttled_rate),
        ),
    ]
}

/// One broker config with every value it has, most specific first: this
/// broker's dynamic value, the cluster-wide dynamic default, the broker's
/// properties, the default (`defaults`: what the static config makes of
/// an unset key, e.g. `log.retention.ms` from `log.retention.hours`). The
/// first is the effective one; all are its synonyms (Kafka's
/// DescribeConfigs `include_synonyms`).
fn broker_synonyms(
    key: &str,
    dynamic: &crate::config_values::BrokerConfigs,
    node: i32,
    static_cfg: &BrokerConfig,
    defaults: &BTreeMap<&'static str, String>,
) -> Vec<(String, ConfigSource)> {
    let mut out = Vec::new();
    if crate::dynamic_config::find(key).is_some() {
        let own = dynamic.get(&node.to_string()).and_then(|c| c.get(key));
        if let Some(v) = own {
            out.push((v.clone(), ConfigSource::DynamicBroker));
        }
        if let Some(v) = dynamic.get("").and_then(|c| c.get(key)) {
            out.push((v.clone(), ConfigSource::DynamicDefaultBroker));
        }
    }
    if let Some(v) = static_cfg.raw.get(key) {
        // as given in the properties (leading/trailing spaces are the value's)
        out.push((v.clone(), ConfigSource::StaticBroker));
    }
    if let Some(v) = defaults.get(key) {
        out.push((v.clone(), ConfigSource::Default));
    }
    out
}

fn describe_broker(
    broker: &Broker,
    name: &str,
    keys: &Option<Vec<StrBytes>>,
    docs: bool,
    include_synonyms: bool,
) -> Result<Vec<DescribeConfigsResourceResult>, TopicError> {
    let image = broker.image();
    let doc = |k: &str| {
        crate::dynamic_config::find(k)
            .map(|d| str_bytes(d.doc))
            .filter(|_| docs)
    };
    if name.is_empty() {
        // the default entity: the cluster-wide dynamic defaults only
        let defaults = image.broker_configs.get("").cloned().unwrap_or_default();
        return Ok(defaults
            .into_iter()
            .filter(|(k, _)| wanted(keys, k))
            .map(|(k, v)| {
                let synonyms = if include_synonyms {
                    vec![(v.clone(), ConfigSource::DynamicDefaultBroker)]
                } else {
                    Vec::new()
                };
                config_entry(
                    &k,
                    &EntryValues::new(&v, ConfigSource::DynamicDefaultBroker, synonyms),
                    false,
                )
                .with_documentation(doc(&k))
            })
            .collect());
    }
    if name != broker.node_id.to_string() {
        return Err(TopicError::new(
            ResponseError::InvalidRequest,
            format!("this is broker {}, not {name}", broker.node_id),
        ));
    }
    // the static properties; the dynamic values are laid over them
    let static_cfg = broker.topics.static_broker_config();
    let defaults: BTreeMap<&'static str, String> = broker_values(static_cfg).into_iter().collect();
    let mut keys_shown: std::collections::BTreeSet<String> =
        defaults.keys().map(|k| k.to_string()).collect();
    keys_shown.extend(static_cfg.raw.keys().cloned());
    keys_shown.extend(
        crate::dynamic_config::DYNAMIC_BROKER_CONFIGS
            .iter()
            .filter(|d| {
                crate::dynamic_config::resolve(&image.broker_configs, broker.node_id, d.name)
                    .is_some()
            })
            .map(|d| d.name.to_string()),
    );
    Ok(keys_shown
        .into_iter()
        .filter(|k| wanted(keys, k))
        .filter_map(|k| {
            let all = broker_synonyms(
                &k,
                &image.broker_configs,
                broker.node_id,
                static_cfg,
                &defaults,
            );
            let (value, source) = all.first().cloned()?;
            let read_only = crate::dynamic_config::find(&k).is_none();
            let synonyms = if include_synonyms { all } else { Vec::new() };
            Some(
                config_entry(&k, &EntryValues::new(&value, source, synonyms), read_only)
                    .with_documentation(doc(&k)),
            )
        })
        .collect())
}

/// An entry's value and source, and the synonyms to report (empty unless asked).
struct EntryValues {
    value: String,
    source: ConfigSource,
    synonyms: Vec<(String, ConfigSource)>,
}

impl EntryValues {
    fn new(value: &str, source: ConfigSource, synonyms: Vec<(String, ConfigSource)>) -> Self {
        EntryValues {
            value: value.to_string(),
            source,
            synonyms,
        }
    }
}

fn config_entry(name: &str, e: &EntryValues, read_only: bool) -> DescribeConfigsResourceResult {
    DescribeConfigsResourceResult::default()
        .with_name(str_bytes(name))
        .with_value(Some(str_bytes(&e.value)))
        .with_read_only(read_only)
        .with_config_source(e.source as i8)
        .with_config_type(ConfigType::String as i8)
        .with_synonyms(
            e.synonyms
                .iter()
                .map(|(value, source)| {
                    DescribeConfigsSynonym::default()
                        .with_name(str_bytes(name))
                        .with_value(Some(str_bytes(value)))
                        .with_source(*source as i8)
                })
                .collect(),
        )
}

pub fn describe(broker: &Broker, req: DescribeConfigsRequest) -> DescribeConfigsResponse {
    let results = req
        .resources
        .into_iter()
        .map(|r| {
            let name = r.resource_name.as_str().to_string();
            let outcome = match r.resource_type {
                TOPIC => describe_topic(
                    broker,
                    &name,
                    &r.configuration_keys,
                    req.include_documentation,
                    req.include_synonyms,
                ),
                BROKER => describe_broker(
                    broker,
                    &name,
                    &r.configuration_keys,
                    req.include_documentation,
                    req.include_synonyms,
                ),
                other => Err(TopicError::new(
                    ResponseError::InvalidRequest,
                    format!("resource type {other} is not supported"),
                )),
            };
            let entry = DescribeConfigsResult::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name);
            match outcome {
                Ok(configs) => entry.with_configs(configs),
                Err(e) => entry
                    .with_error_code(e.code.code())
                    .with_error_message(Some(str_bytes(&e.message))),
            }
        })
        .collect();
    DescribeConfigsResponse::default().with_results(results)
}

fn unsupported(resource_type: i8) -> TopicError {
    TopicError::new(
        ResponseError::InvalidRequest,
        format!("resource type {resource_type} is not supported"),
    )
}

/// Applies IncrementalAlterConfigs operations to a broker entity's dynamic
/// configs: SET and DELETE of dynamic configs only (none is a list).
pub fn apply_broker_incremental(
    configs: &mut BTreeMap<String, String>,
    ops: &[(String, AlterOp, Option<String>)],
) -> Result<(), TopicError> {
    for (name, op, value) in ops {
        match (op, value) {
            (AlterOp::Set, Some(v)) => {
                crate::dynamic_config::validate(name, v)?;
                configs.insert(name.clone(), v.clone());
            }
            (AlterOp::Delete, _) => {
                // deleting a dynamic config that is not set is a no-op;
                // naming a static one is refused, as Kafka does
                crate::dynamic_config::validate_name(name)?;
                configs.remove(name);
            }
            (AlterOp::Set, None) => {
                return Err(TopicError::new(
                    ResponseError::InvalidConfig,
                    format!("SET of {name} without a value"),
                ))
            }
            (AlterOp::Append | AlterOp::Subtract, _) => {
                return Err(TopicError::new(
                    ResponseError::InvalidConfig,
                    format!("{name} is not a list; APPEND and SUBTRACT apply only to lists"),
                ))
            }
        }
    }
    Ok(())
}

pub fn alter(broker: &Broker, req: AlterConfigsRequest) -> AlterConfigsResponse {
    let responses = req
        .resources
        .into_iter()
        .map(|r| {
            let name = r.resource_name.as_str().to_string();
            let mut replacement = BTreeMap::new();
            for c in &r.configs {
                if let Some(v) = &c.value {
                    replacement.insert(c.name.as_str().to_string(), v.as_str().to_string());
                }
            }
            let replace = |configs: &mut BTreeMap<String, String>| {
                *configs = replacement;
                Ok(())
            };
            let controller = crate::controller::Controller::new(broker);
            let outcome = match r.resource_type {
                TOPIC => controller.alter_topic_configs(&name, replace, req.validate_only),
                // AlterConfigs replaces the entity's whole dynamic set
                BROKER => controller.alter_broker_configs(&name, replace, req.validate_only),
                other => Err(unsupported(other)),
            };
            let entry = alter_configs_response::AlterConfigsResourceResponse::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name);
            match outcome {
                Ok(()) => entry,
                Err(e) => entry
                    .with_error_code(e.code.code())
                    .with_error_message(Some(str_bytes(&e.message))),
            }
        })
        .collect();
    AlterConfigsResponse::default().with_responses(responses)
}

/// Applies IncrementalAlterConfigs operations to a topic's overrides.
pub fn apply_incremental(
    configs: &mut BTreeMap<String, String>,
    ops: &[(String, AlterOp, Option<String>)],
    defaults: impl Fn(&str) -> String,
) -> Result<(), TopicError> {
    for (name, op, value) in ops {
        let def = topic_config::find(name).ok_or_else(|| {
            TopicError::new(
                ResponseError::InvalidConfig,
                format!("unknown topic config {name}"),
            )
        })?;
        match op {
            AlterOp::Set => {
                let v = value.clone().ok_or_else(|| {
                    TopicError::new(
                        ResponseError::InvalidConfig,
                        format!("SET of {name} without a value"),
                    )
                })?;
                configs.insert(name.clone(), v);
            }
            AlterOp::Delete => {
                configs.remove(name);
            }
            AlterOp::Append | AlterOp::Subtract => {
                if def.kind != ConfigType::List {
                    return Err(TopicError::new(
                        ResponseError::InvalidConfig,
                        format!("{name} is not a list; APPEND and SUBTRACT apply only to lists"),
                    ));
                }
                let current = configs.get(name).cloned().unwrap_or_else(|| defaults(name));
                let mut items: Vec<String> = current
                    .split(',')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect();
                for item in value
                    .as_deref()
                    .unwrap_or("")
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                {
                    if *op == AlterOp::Append {
                        if !items.iter().any(|i| i == item) {
                            items.push(item.to_string());
                        }
                    } else {
                        items.retain(|i| i != item);
                    }
                }
                configs.insert(name.clone(), items.join(","));
            }
        }
    }
    Ok(())
}

pub fn incremental_alter(
    broker: &Broker,
    req: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let responses = req
        .resources
        .into_iter()
        .map(|r| {
            let name = r.resource_name.as_str().to_string();
            let ops: Result<Vec<_>, TopicError> = r
                .configs
                .iter()
                .map(|c| {
                    let op = match c.config_operation {
                        0 => AlterOp::Set,
                        1 => AlterOp::Delete,
                        2 => AlterOp::Append,
                        3 => AlterOp::Subtract,
                        other => {
                            return Err(TopicError::new(
                                ResponseError::InvalidRequest,
                                format!("unknown config operation {other}"),
                            ))
                        }
                    };
                    Ok((
                        c.name.as_str().to_string(),
                        op,
                        c.value.as_ref().map(|v| v.as_str().to_string()),
                    ))
                })
                .collect();
            let outcome = ops.and_then(|ops| match r.resource_type {
                TOPIC => {
                    let broker_cfg = broker.topics.broker_config().clone();
                    crate::controller::Controller::new(broker).alter_topic_configs(
                        &name,
                        |configs| {
                            apply_incremental(configs, &ops, |k| {
                                topic_config::find(k)
                                    .map(|d| topic_config::broker_default(d, &broker_cfg).0)
                                    .unwrap_or_default()
                            })
                        },
                        req.validate_only,
                    )
                }
                BROKER => crate::controller::Controller::new(broker).alter_broker_configs(
                    &name,
                    |configs| apply_broker_incremental(configs, &ops),
                    req.validate_only,
                ),
                other => Err(unsupported(other)),
            });
            let entry = incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name);
            match outcome {
                Ok(()) => entry,
                Err(e) => entry
                    .with_error_code(e.code.code())
                    .with_error_message(Some(str_bytes(&e.message))),
            }
        })
        .collect();
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}

/// A double as Kafka's configs print one (`Double.MAX_VALUE` as Java
/// writes it; whole numbers with a `.0`).
fn kafka_double(v: f64) -> String {
    if v == f64::MAX {
        "1.7976931348623157E308".into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.1}")
    } else {
        v.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broker_configs_of_any_value_type_can_be_deleted() {
        let mut configs = BTreeMap::new();
        let set = |k: &str, v: &str| (k.to_string(), AlterOp::Set, Some(v.to_string()));
        let delete = |k: &str| (k.to_string(), AlterOp::Delete, None);
        apply_broker_incremental(
            &mut configs,
            &[
                set("compression.type", "lz4"),
                set("log.preallocate", "true"),
                set("max.connections.per.ip.overrides", "127.0.0.2:3"),
            ],
        )
        .unwrap();
        assert_eq!(configs.len(), 3);
        apply_broker_incremental(
            &mut configs,
            &[
                delete("compression.type"),
                delete("log.preallocate"),
                delete("max.connections.per.ip.overrides"),
                delete("log.roll.jitter.ms"),
            ],
        )
        .unwrap();
        assert!(configs.is_empty());
        assert_eq!(
            apply_broker_incremental(&mut configs, &[delete("num.partitions")])
                .unwrap_err()
                .code,
            ResponseError::InvalidRequest
        );
    }

    #[test]
    fn incremental_ops_set_delete_append_subtract() {
        let mut c = BTreeMap::new();
        let defaults = |_: &str| "delete".to_string();
        apply_incremental(
            &mut c,
            &[("retention.ms".into(), AlterOp::Set, Some("5".into()))],
            defaults,
        )
        .unwrap();
        assert_eq!(c["retention.ms"], "5");
        apply_incremental(
            &mut c,
            &[(
                "cleanup.policy".into(),
                AlterOp::Append,
                Some("compact".into()),
            )],
            defaults,
        )
        .unwrap();
        assert_eq!(c["cleanup.policy"], "delete,compact");
        apply_incremental(
            &mut c,
            &[(
                "cleanup.policy".into(),
                AlterOp::Subtract,
                Some("delete".into()),
            )],
            defaults,
        )
        .unwrap();
        assert_eq!(c["cleanup.policy"], "compact");
        apply_incremental(
            &mut c,
            &[("retention.ms".into(), AlterOp::Delete, None)],
            defaults,
        )
        .unwrap();
        assert!(!c.contains_key("retention.ms"));
        let e = apply_incremental(
            &mut c,
            &[("retention.ms".into(), AlterOp::Append, Some("1".into()))],
            defaults,
        )
        .unwrap_err();
        assert_eq!(e.code, ResponseError::InvalidConfig);
        assert!(apply_incremental(
            &mut c,
            &[("bogus".into(), AlterOp::Set, Some("1".into()))],
            defaults
        )
        .is_err());
    }
}
