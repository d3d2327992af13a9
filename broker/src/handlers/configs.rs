//! DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics and
//! brokers. A broker's configs are its static properties plus the dynamic
//! ones (`crate::dynamic_config`: those Moldau applies, and the rest of
//! Kafka's dynamic set and custom names, which it stores and reports),
//! which AlterConfigs/IncrementalAlterConfigs change for one broker (its
//! id) or for all (the default entity `""`) through the controller, with
//! `dynamic_config`'s rules: Kafka's refusals, all INVALID_REQUEST.
//! DescribeConfigs reports every dynamic value with its source; secrets and
//! custom names as sensitive, without their values (Kafka's way).
//!
//! Client-metrics resources (KIP-714, type 16: `metrics`, `interval.ms`,
//! `match`) take the dynamic broker configs' path, under the entity
//! `client-metrics:<name>` (see `crate::telemetry`): through the
//! controller into the cluster metadata and the image. DescribeConfigs
//! reports all three, defaults included, as Kafka does.

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{
    alter_configs_response, incremental_alter_configs_response, AlterConfigsRequest,
    AlterConfigsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, ListConfigResourcesRequest,
    ListConfigResourcesResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::access::Access;
use super::str_bytes;
use crate::broker::Broker;
use crate::config::BrokerConfig;
use crate::config_values::ConfigSource;
use crate::dynamic_config::Dynamic;
use crate::error::TopicError;
use crate::security::acl::AclOperation;
use crate::topic_config::{self, ConfigType};
use crate::topics::AlterOp;

/// Kafka's `GROUP` config resource type (KIP-848's group configs).
const GROUP: i8 = 32;
const TOPIC: i8 = 2;
const BROKER: i8 = 4;
/// Kafka's `CLIENT_METRICS` config resource type (KIP-714).
const CLIENT_METRICS: i8 = 16;

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
    if crate::dynamic_config::is_dynamic(key) {
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
            .map(|d| d.doc)
            .or_else(|| crate::dynamic_config::stored(k).map(|_| STORED_DOC))
            .map(str_bytes)
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
    // every dynamic value of this broker and of the default, applied or
    // not; custom names only on the default entity (as Kafka shows them)
    keys_shown.extend(
        [broker.node_id.to_string(), String::new()]
            .iter()
            .filter_map(|entity| image.broker_configs.get(entity))
            .flat_map(|c| c.keys())
            .filter(|k| {
                !matches!(
                    crate::dynamic_config::classify(k),
                    Dynamic::Custom | Dynamic::ReadOnly
                )
            })
            .cloned(),
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
            // as Kafka: only the names of its dynamic set are not read-only
            let read_only = crate::dynamic_config::find(&k).is_none()
                && crate::dynamic_config::stored(&k).is_none();
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

/// What DescribeConfigs says of a stored dynamic config (Kafka's dynamic
/// set, without effect on Moldau).
const STORED_DOC: &str =
    "one of Kafka's dynamic broker configs: stored and reported, without effect on a Moldau broker";

/// A broker config entry; a sensitive one (a password, a custom name) is
/// reported without its value, as Kafka does.
fn config_entry(name: &str, e: &EntryValues, read_only: bool) -> DescribeConfigsResourceResult {
    let sensitive = crate::dynamic_config::is_sensitive(name);
    let shown = |v: &str| (!sensitive).then(|| str_bytes(v));
    DescribeConfigsResourceResult::default()
        .with_name(str_bytes(name))
        .with_value(shown(&e.value))
        .with_is_sensitive(sensitive)
        .with_read_only(read_only)
        .with_config_source(e.source as i8)
        .with_config_type(ConfigType::String as i8)
        .with_synonyms(
            e.synonyms
                .iter()
                .map(|(value, source)| {
                    DescribeConfigsSynonym::default()
                        .with_name(str_bytes(name))
                        .with_value(shown(value))
                        .with_source(*source as i8)
                })
                .collect(),
        )
}

/// Whether `operation` (DESCRIBE_CONFIGS or ALTER_CONFIGS) on config
/// resource `(resource_type, name)` is allowed, as Kafka asks it: a
/// topic's on the topic, a group's on the group, a broker's, a broker
/// logger's or client metrics' on the cluster; the refusal names the
/// resource's kind in its error code.
fn config_access(
    access: &Access,
    operation: AclOperation,
    resource_type: i8,
    name: &str,
) -> Result<(), TopicError> {
    let (allowed, code) = match resource_type {
        TOPIC => (
            access.allows_topic(operation, name),
            ResponseError::TopicAuthorizationFailed,
        ),
        GROUP => (
            access.allows_group(operation, name),
            ResponseError::GroupAuthorizationFailed,
        ),
        _ => (
            access.allows_cluster(operation),
            ResponseError::ClusterAuthorizationFailed,
        ),
    };
    if allowed {
        return Ok(());
    }
    Err(TopicError::new(
        code,
        format!("no {operation} on config resource {name:?} of type {resource_type}"),
    ))
}

/// DescribeConfigs; each resource needs DESCRIBE_CONFIGS
/// ([`config_access`]).
pub fn describe(
    broker: &Broker,
    req: DescribeConfigsRequest,
    access: &Access,
) -> DescribeConfigsResponse {
    let results = req
        .resources
        .into_iter()
        .map(|r| {
            let name = r.resource_name.as_str().to_string();
            let allowed = config_access(
                access,
                AclOperation::DescribeConfigs,
                r.resource_type,
                &name,
            );
            let outcome = match r.resource_type {
                _ if allowed.is_err() => allowed.map(|()| Vec::new()),
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
                CLIENT_METRICS => describe_client_metrics(
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

/// A client-metrics resource's configs: each of Kafka's three, its own
/// value (source CLIENT_METRICS_CONFIG) or the default (DEFAULT_CONFIG);
/// a resource never set shows the defaults, as in Kafka.
fn describe_client_metrics(
    broker: &Broker,
    name: &str,
    keys: &Option<Vec<StrBytes>>,
    docs: bool,
    include_synonyms: bool,
) -> Result<Vec<DescribeConfigsResourceResult>, TopicError> {
    use crate::telemetry::subscriptions as cm;
    client_metrics_name(name)?;
    let image = broker.image();
    let own = image.broker_configs.get(&cm::entity_of(name));
    Ok(cm::CONFIG_NAMES
        .iter()
        .filter(|k| wanted(keys, k))
        .map(|k| {
            let (value, source) = match own.and_then(|c| c.get(*k)) {
                Some(v) => (v.clone(), ConfigSource::ClientMetrics),
                None => (
                    cm::default_value(k).unwrap_or_default(),
                    ConfigSource::Default,
                ),
            };
            let kind = if *k == cm::INTERVAL_MS {
                ConfigType::Int
            } else {
                ConfigType::List
            };
            let doc = match *k {
                cm::METRICS => "Telemetry metric name prefix list",
                cm::INTERVAL_MS => "Metrics push interval in milliseconds",
                _ => "Client match criteria",
            };
            DescribeConfigsResourceResult::default()
                .with_name(str_bytes(k))
                .with_value(Some(str_bytes(&value)))
                .with_config_source(source as i8)
                .with_config_type(kind as i8)
                .with_documentation(docs.then(|| str_bytes(doc)))
                .with_synonyms(if include_synonyms {
                    vec![DescribeConfigsSynonym::default()
                        .with_name(str_bytes(k))
                        .with_value(Some(str_bytes(&value)))
                        .with_source(source as i8)]
                } else {
                    Vec::new()
                })
        })
        .collect())
}

/// Kafka refuses a client-metrics resource without a name.
fn client_metrics_name(name: &str) -> Result<(), TopicError> {
    if name.trim().is_empty() {
        return Err(TopicError::new(
            ResponseError::InvalidRequest,
            "Subscription name can't be empty",
        ));
    }
    Ok(())
}

/// Applies IncrementalAlterConfigs operations to a client-metrics
/// resource's configs: SET and DELETE of any of its configs, APPEND and
/// SUBTRACT on its lists (`metrics`, `match`). The whole new set is
/// validated by the controller's path
/// (`dynamic_config::validate_entity_configs`).
pub fn apply_client_metrics_incremental(
    configs: &mut BTreeMap<String, String>,
    ops: &[(String, AlterOp, Option<String>)],
) -> Result<(), TopicError> {
    use crate::telemetry::subscriptions as cm;
    for (name, op, value) in ops {
        if !cm::CONFIG_NAMES.contains(&name.as_str()) {
            return Err(TopicError::new(
                ResponseError::InvalidRequest,
                format!("Unknown client metrics configuration: {name}"),
            ));
        }
        match (op, value) {
            (AlterOp::Set, Some(v)) => {
                configs.insert(name.clone(), v.clone());
            }
            (AlterOp::Set, None) => {
                return Err(TopicError::new(
                    ResponseError::InvalidRequest,
                    format!("SET of {name} without a value"),
                ))
            }
            (AlterOp::Delete, _) => {
                configs.remove(name);
            }
            (AlterOp::Append | AlterOp::Subtract, _) => {
                if name == cm::INTERVAL_MS {
                    return Err(TopicError::new(
                        ResponseError::InvalidRequest,
                        format!("Config value append is not allowed for config key: {name}"),
                    ));
                }
                let now = configs.get(name).cloned().unwrap_or_default();
                configs.insert(
                    name.clone(),
                    edit_list(&now, *op, value.as_deref().unwrap_or("")),
                );
            }
        }
    }
    Ok(())
}

/// ListConfigResources v0 (KIP-714's ListClientMetricsResources): the
/// names of the client-metrics resources, what `kafka-client-metrics
/// --list` and `--describe` ask. Needs DESCRIBE_CONFIGS on the cluster, as
/// in Kafka. (v1, KIP-1142's other resource types, is not served: a
/// client asking only for client metrics falls back to v0.)
pub fn list_config_resources(
    broker: &Broker,
    _req: ListConfigResourcesRequest,
    access: &Access,
) -> ListConfigResourcesResponse {
    if let Err(e) = config_access(access, AclOperation::DescribeConfigs, CLIENT_METRICS, "") {
        return ListConfigResourcesResponse::default().with_error_code(e.code.code());
    }
    let image = broker.image();
    let resources = image
        .broker_configs
        .keys()
        .filter_map(|entity| crate::telemetry::resource_name(entity))
        .map(|name| {
            kafka_protocol::messages::list_config_resources_response::ConfigResource::default()
                .with_resource_name(str_bytes(name))
                .with_resource_type(CLIENT_METRICS)
        })
        .collect();
    ListConfigResourcesResponse::default().with_config_resources(resources)
}

fn unsupported(resource_type: i8) -> TopicError {
    TopicError::new(
        ResponseError::InvalidRequest,
        format!("resource type {resource_type} is not supported"),
    )
}

/// Checks one value set on broker entity `entity`: the dynamic rules of
/// its name and value, and Kafka's limit on changing a thread count
/// (`current` gives the broker's value of a config now, if any).
fn check_broker_set(
    entity: &str,
    name: &str,
    value: &str,
    current: &impl Fn(&str) -> Option<String>,
) -> Result<(), TopicError> {
    crate::dynamic_config::validate_for_entity(entity, name, value)?;
    if let Some(default) = crate::dynamic_config::default_thread_count(name) {
        let now = current(name)
            .and_then(|v| v.trim().parse::<i64>().ok())
            .unwrap_or(default);
        crate::dynamic_config::check_thread_count(name, now, value)?;
    }
    Ok(())
}

/// Whether a broker config takes APPEND and SUBTRACT (Kafka's LIST type).
fn is_broker_list(name: &str) -> bool {
    use crate::dynamic_config::{stored, Kind};
    name == "log.cleanup.policy" || stored(name).is_some_and(|d| d.kind == Kind::List)
}

/// Applies IncrementalAlterConfigs operations to broker entity `entity`'s
/// dynamic configs (`""`: the cluster default), as Kafka does: SET of a
/// config Kafka can change at run time (or a custom name), with its
/// value's rules; DELETE of any name (a no-op when not set); APPEND and
/// SUBTRACT on list configs, from `current`'s value when the entity has
/// none of its own. Every refusal is INVALID_REQUEST.
pub fn apply_broker_incremental(
    entity: &str,
    configs: &mut BTreeMap<String, String>,
    ops: &[(String, AlterOp, Option<String>)],
    current: impl Fn(&str) -> Option<String>,
) -> Result<(), TopicError> {
    for (name, op, value) in ops {
        match (op, value) {
            (AlterOp::Set, Some(v)) => {
                check_broker_set(entity, name, v, &current)?;
                configs.insert(name.clone(), v.clone());
            }
            (AlterOp::Delete, _) => {
                configs.remove(name);
            }
            (AlterOp::Set, None) => {
                return Err(TopicError::new(
                    ResponseError::InvalidRequest,
                    format!("SET of {name} without a value"),
                ))
            }
            (AlterOp::Append | AlterOp::Subtract, _) => {
                if !is_broker_list(name) {
                    return Err(TopicError::new(
                        ResponseError::InvalidRequest,
                        format!("Config value append is not allowed for config key: {name}"),
                    ));
                }
                let now = configs
                    .get(name)
                    .cloned()
                    .or_else(|| current(name))
                    .unwrap_or_default();
                let next = edit_list(&now, *op, value.as_deref().unwrap_or(""));
                check_broker_set(entity, name, &next, &current)?;
                configs.insert(name.clone(), next);
            }
        }
    }
    Ok(())
}

/// A comma-separated list with `items` appended (those not in it yet) or
/// subtracted.
fn edit_list(list: &str, op: AlterOp, items: &str) -> String {
    let mut out: Vec<String> = list
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    for item in items.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if op == AlterOp::Append {
            if !out.iter().any(|i| i == item) {
                out.push(item.to_string());
            }
        } else {
            out.retain(|i| i != item);
        }
    }
    out.join(",")
}

/// The value broker `broker` has for `name` now: its dynamic value (own,
/// else the default), else its properties (for `log.cleanup.policy`, else
/// its default).
fn current_broker_value(broker: &Broker, name: &str) -> Option<String> {
    let image = broker.image();
    crate::dynamic_config::resolve(&image.broker_configs, broker.node_id, name)
        .map(|(v, _)| v.to_string())
        .or_else(|| broker.topics.static_broker_config().raw.get(name).cloned())
        .or_else(|| {
            (name == "log.cleanup.policy").then(|| {
                broker
                    .topics
                    .static_broker_config()
                    .log_cleanup_policy
                    .clone()
            })
        })
}

/// AlterConfigs; each resource needs ALTER_CONFIGS ([`config_access`]).
pub fn alter(broker: &Broker, req: AlterConfigsRequest, access: &Access) -> AlterConfigsResponse {
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
                if r.resource_type == BROKER {
                    let current = |k: &str| current_broker_value(broker, k);
                    for (k, v) in &replacement {
                        check_broker_set(&name, k, v, &current)?;
                    }
                }
                *configs = replacement;
                Ok(())
            };
            let controller = crate::controller::Controller::new(broker);
            let allowed = config_access(access, AclOperation::AlterConfigs, r.resource_type, &name);
            let outcome = match r.resource_type {
                _ if allowed.is_err() => allowed,
                TOPIC => controller.alter_topic_configs(&name, replace, req.validate_only),
                // AlterConfigs replaces the entity's whole dynamic set
                BROKER => controller.alter_broker_configs(&name, replace, req.validate_only),
                CLIENT_METRICS => client_metrics_name(&name).and_then(|()| {
                    controller.alter_broker_configs(
                        &crate::telemetry::entity_of(&name),
                        replace,
                        req.validate_only,
                    )
                }),
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

/// IncrementalAlterConfigs; each resource needs ALTER_CONFIGS
/// ([`config_access`]).
pub fn incremental_alter(
    broker: &Broker,
    req: IncrementalAlterConfigsRequest,
    access: &Access,
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
            let allowed = config_access(access, AclOperation::AlterConfigs, r.resource_type, &name);
            let outcome = allowed.and(ops).and_then(|ops| match r.resource_type {
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
                    |configs| {
                        apply_broker_incremental(&name, configs, &ops, |k| {
                            current_broker_value(broker, k)
                        })
                    },
                    req.validate_only,
                ),
                CLIENT_METRICS => client_metrics_name(&name).and_then(|()| {
                    crate::controller::Controller::new(broker).alter_broker_configs(
                        &crate::telemetry::entity_of(&name),
                        |configs| apply_client_metrics_incremental(configs, &ops),
                        req.validate_only,
                    )
                }),
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

    fn none(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn broker_configs_of_any_value_type_can_be_deleted() {
        let mut configs = BTreeMap::new();
        let set = |k: &str, v: &str| (k.to_string(), AlterOp::Set, Some(v.to_string()));
        let delete = |k: &str| (k.to_string(), AlterOp::Delete, None);
        apply_broker_incremental(
            "",
            &mut configs,
            &[
                set("compression.type", "lz4"),
                set("log.preallocate", "true"),
                set("max.connections.per.ip.overrides", "127.0.0.2:3"),
            ],
            none,
        )
        .unwrap();
        assert_eq!(configs.len(), 3);
        apply_broker_incremental(
            "",
            &mut configs,
            &[
                delete("compression.type"),
                delete("log.preallocate"),
                delete("max.connections.per.ip.overrides"),
                delete("log.roll.jitter.ms"),
                // as Kafka: deleting a read-only config is a no-op
                delete("num.partitions"),
            ],
            none,
        )
        .unwrap();
        assert!(configs.is_empty());
        assert_eq!(
            apply_broker_incremental("", &mut configs, &[set("num.partitions", "2")], none)
                .unwrap_err()
                .code,
            ResponseError::InvalidRequest
        );
    }

    #[test]
    fn broker_sets_follow_kafkas_rules_per_entity() {
        let set = |k: &str, v: &str| (k.to_string(), AlterOp::Set, Some(v.to_string()));
        let mut configs = BTreeMap::new();
        apply_broker_incremental(
            "1",
            &mut configs,
            &[set("sasl.kerberos.min.time.before.relogin", "70000")],
            none,
        )
        .unwrap();
        assert_eq!(configs["sasl.kerberos.min.time.before.relogin"], "70000");
        let e = apply_broker_incremental(
            "",
            &mut BTreeMap::new(),
            &[set("sasl.kerberos.min.time.before.relogin", "70000")],
            none,
        )
        .unwrap_err();
        assert_eq!(e.code, ResponseError::InvalidRequest);
        // thread counts: at most double the current value (Kafka's default
        // when the broker has none)
        let mut configs = BTreeMap::new();
        assert!(
            apply_broker_incremental("1", &mut configs, &[set("num.io.threads", "100")], none)
                .is_err()
        );
        apply_broker_incremental("1", &mut configs, &[set("num.io.threads", "16")], none).unwrap();
        let current = |k: &str| (k == "num.io.threads").then(|| "40".to_string());
        apply_broker_incremental("1", &mut configs, &[set("num.io.threads", "80")], current)
            .unwrap();
    }

    #[test]
    fn broker_lists_take_append_and_subtract_others_do_not() {
        let op = |k: &str, op: AlterOp, v: &str| (k.to_string(), op, Some(v.to_string()));
        let mut configs = BTreeMap::new();
        let current = |k: &str| (k == "log.cleanup.policy").then(|| "delete".to_string());
        apply_broker_incremental(
            "",
            &mut configs,
            &[op("log.cleanup.policy", AlterOp::Append, "compact")],
            current,
        )
        .unwrap();
        assert_eq!(configs["log.cleanup.policy"], "delete,compact");
        apply_broker_incremental(
            "",
            &mut configs,
            &[op("log.cleanup.policy", AlterOp::Subtract, "delete")],
            current,
        )
        .unwrap();
        assert_eq!(configs["log.cleanup.policy"], "compact");
        apply_broker_incremental(
            "1",
            &mut configs,
            &[op(
                "sasl.enabled.mechanisms",
                AlterOp::Append,
                "PLAIN,SCRAM-SHA-256",
            )],
            none,
        )
        .unwrap();
        assert_eq!(configs["sasl.enabled.mechanisms"], "PLAIN,SCRAM-SHA-256");
        let e = apply_broker_incremental(
            "",
            &mut configs,
            &[op("num.io.threads", AlterOp::Append, "1")],
            none,
        )
        .unwrap_err();
        assert_eq!(e.code, ResponseError::InvalidRequest);
    }

    #[test]
    fn client_metrics_ops_follow_kafkas_types() {
        let op = |k: &str, op: AlterOp, v: &str| (k.to_string(), op, Some(v.to_string()));
        let mut c = BTreeMap::new();
        apply_client_metrics_incremental(
            &mut c,
            &[
                op("metrics", AlterOp::Set, "a."),
                op("metrics", AlterOp::Append, "b.,a."),
                op("interval.ms", AlterOp::Set, "1000"),
                op("match", AlterOp::Append, "client_id=x"),
            ],
        )
        .unwrap();
        assert_eq!(c["metrics"], "a.,b.");
        assert_eq!(c["match"], "client_id=x");
        apply_client_metrics_incremental(&mut c, &[op("metrics", AlterOp::Subtract, "a.")])
            .unwrap();
        assert_eq!(c["metrics"], "b.");
        // interval.ms is an int: no APPEND; unknown names refused
        let e =
            apply_client_metrics_incremental(&mut c, &[op("interval.ms", AlterOp::Append, "1")])
                .unwrap_err();
        assert_eq!(e.code, ResponseError::InvalidRequest);
        let e = apply_client_metrics_incremental(&mut c, &[op("colour", AlterOp::Set, "red")])
            .unwrap_err();
        assert_eq!(e.code, ResponseError::InvalidRequest);
        apply_client_metrics_incremental(
            &mut c,
            &[
                ("metrics".into(), AlterOp::Delete, None),
                ("match".into(), AlterOp::Delete, None),
                ("interval.ms".into(), AlterOp::Delete, None),
            ],
        )
        .unwrap();
        assert!(c.is_empty());
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
