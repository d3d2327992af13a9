//! The `KafkaRetentionPolicy` resource: topic configs (retention and any
//! other topic config) stated once for every matching topic of one
//! `KafkaCluster` in the same namespace.
//!
//! A topic matches when its name matches one of `selector.topicNames`
//! (glob patterns: `*` any run of characters, `?` one character) and/or it is
//! managed by a `KafkaTopic` whose labels carry `selector.matchLabels`; when
//! both are given, both must hold. Internal topics (`__*`) never match.
//!
//! `mode: default` fills in keys the topic does not set itself; `mode:
//! enforce` overrides the topic's own value, and with `bounds` for a key
//! clamps the topic's own value into `[min, max]` instead. When several
//! policies govern the same key of a topic, the highest `priority` wins,
//! then the lexicographically smallest name; the others report the conflict.
//! The resolution is `crate::retention::resolve` (pure).

// several printer columns share a `type_`
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Condition;

/// Desired topic configs of every matching topic.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "moldau.io",
    version = "v1alpha1",
    kind = "KafkaRetentionPolicy",
    plural = "kafkaretentionpolicies",
    shortname = "krp",
    namespaced,
    status = "KafkaRetentionPolicyStatus",
    derive = "PartialEq",
    doc = "Topic configs (retention, cleanup, segments, ...) applied to every matching topic of a Moldau KafkaCluster in the same namespace.",
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.clusterRef"),
    printcolumn(name = "Mode", type_ = "string", json_path = ".spec.mode"),
    printcolumn(
        name = "Matched",
        type_ = "integer",
        json_path = ".status.matchedTopics"
    ),
    printcolumn(
        name = "Conforming",
        type_ = "integer",
        json_path = ".status.conformingTopics"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct KafkaRetentionPolicySpec {
    /// Name of the `KafkaCluster` (same namespace) whose topics are governed.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("clusterRef is immutable"))]
    pub cluster_ref: String,
    /// Which topics the policy governs.
    pub selector: TopicSelector,
    /// Precedence among policies governing the same key of a topic (highest wins).
    #[serde(default)]
    pub priority: i32,
    /// `default` fills in unset keys; `enforce` overrides the topic's own value.
    #[serde(default)]
    pub mode: PolicyMode,
    /// Topic configs with Kafka names (e.g. `retention.ms`, `cleanup.policy`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config: BTreeMap<String, String>,
    /// Numeric bounds per config key (`enforce` only): a topic's own value
    /// is clamped into them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub bounds: BTreeMap<String, Bounds>,
}

/// Which topics a policy governs.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("(has(self.matchLabels) && size(self.matchLabels) > 0) || (has(self.topicNames) && size(self.topicNames) > 0)").message("set matchLabels and/or topicNames"))]
pub struct TopicSelector {
    /// Labels the topic's `KafkaTopic` must carry.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Glob patterns of topic names (`*`, `?`); any may match.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topic_names: Vec<String>,
}

/// How a policy's values meet a topic's own.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum PolicyMode {
    /// Only where the topic sets nothing itself.
    #[default]
    Default,
    /// Over the topic's own value (within `bounds` when given).
    Enforce,
}

/// Numeric bounds of one config key (inclusive).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Bounds {
    /// Smallest allowed value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<i64>,
    /// Largest allowed value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<i64>,
}

/// A matched topic that does not conform, and why.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NonConformingTopic {
    /// Topic name.
    pub topic: String,
    /// Why.
    pub reason: String,
}

/// Observed state of a KafkaRetentionPolicy.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KafkaRetentionPolicyStatus {
    /// `Ready`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Topics the selector matches.
    #[serde(default)]
    pub matched_topics: i32,
    /// Matched topics whose governed configs are as the policies resolve.
    #[serde(default)]
    pub conforming_topics: i32,
    /// Matched topics that do not conform, with the reason (at most 50 listed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub non_conforming: Vec<NonConformingTopic>,
    /// Keys of matched topics that a policy of higher precedence governs
    /// instead of this one (at most 50 listed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<PolicyConflict>,
}

/// A key of a topic this policy would govern but another one does.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyConflict {
    /// Topic name.
    pub topic: String,
    /// Config key.
    pub key: String,
    /// The policy that governs it.
    pub winner: String,
}
