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
//! `kafka-reassign-partitions --throttle` sets and clears them), and
//! `replica.alter.log.dirs.io.max.bytes.per.second`, accepted so Kafka's
//! tools work but without effect: a Moldau broker has one data directory,
//! so replicas never move between its directories. Any other broker
//! config is refused as Kafka refuses read-only ones (INVALID_REQUEST).

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;

use crate::topic_config::ConfigSource;
use crate::topics::TopicError;

/// Dynamic configs by entity: `""` for the cluster-wide default, else a
/// broker's node id.
pub type BrokerConfigs = BTreeMap<String, BTreeMap<String, String>>;

/// One dynamic broker config.
#[derive(Debug)]
pub struct DynamicDef {
    pub name: &'static str,
    pub doc: &'static str,
}

pub const LEADER_THROTTLED_RATE: &str = "leader.replication.throttled.rate";
pub const FOLLOWER_THROTTLED_RATE: &str = "follower.replication.throttled.rate";

/// A standalone broker's dynamic configs, kept in
/// `dynamic-broker-configs.json` in its data directory (replaced
/// atomically). A file that cannot be read is logged and treated as empty:
/// the broker starts on its static properties.
#[derive(Debug)]
pub struct LocalStore {
    path: std::path::PathBuf,
    configs: parking_lot::RwLock<BrokerConfigs>,
}

impl LocalStore {
    pub fn open(data_dir: &std::path::Path) -> Self {
        let path = data_dir.join("dynamic-broker-configs.json");
        let configs = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::error!(path = %path.display(), error = %e, "unreadable dynamic broker configs; using the static properties");
                BrokerConfigs::new()
            }),
            Err(_) => BrokerConfigs::new(),
        };
        Self {
            path,
            configs: parking_lot::RwLock::new(configs),
        }
    }

    pub fn get(&self) -> BrokerConfigs {
        self.configs.read().clone()
    }

    /// Replaces `entity`'s dynamic configs (none: removes the entity).
    pub fn replace(
        &self,
        entity: &str,
        configs: BTreeMap<String, String>,
    ) -> Result<(), TopicError> {
        let mut all = self.configs.write();
        let mut next = all.clone();
        if configs.is_empty() {
            next.remove(entity);
        } else {
            next.insert(entity.to_string(), configs);
        }
        let bytes = serde_json::to_vec_pretty(&next)
            .map_err(|e| TopicError::new(ResponseError::UnknownServerError, e.to_string()))?;
        crate::metadata::write_atomically(&self.path, &bytes)
            .map_err(|e| TopicError::new(ResponseError::KafkaStorageError, e.to_string()))?;
        *all = next;
        Ok(())
    }
}

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
];

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

/// Validates one dynamic broker config (all are non-negative longs).
pub fn validate(name: &str, value: &str) -> Result<(), TopicError> {
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
            validate("log.retention.ms", "1").unwrap_err().code,
            ResponseError::InvalidRequest
        );
        assert!(validate_entity("").is_ok() && validate_entity("3").is_ok());
        assert!(validate_entity("x").is_err() && validate_entity("-1").is_err());
    }
}
