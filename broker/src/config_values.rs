//! Config vocabulary shared by the broker's static properties (`config`),
//! the topic config rules (`topic_config`), the dynamic broker configs
//! (`dynamic_config`) and the metadata image that carries them: where an
//! effective value comes from ([`ConfigSource`]) and the dynamic configs
//! by entity ([`BrokerConfigs`]).
//!
//! Bottom vocabulary: imports nothing of the broker.

use std::collections::BTreeMap;

/// Where an effective value comes from (DescribeConfigs `config_source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    DynamicTopic = 1,
    DynamicBroker = 2,
    DynamicDefaultBroker = 3,
    StaticBroker = 4,
    Default = 5,
    /// A client-metrics resource's (KIP-714) own value.
    ClientMetrics = 7,
}

/// Dynamic configs by entity: `""` for the cluster-wide default, else a
/// broker's node id, or `client-metrics:<name>` for a client-metrics
/// resource (see `crate::telemetry`).
pub type BrokerConfigs = BTreeMap<String, BTreeMap<String, String>>;
