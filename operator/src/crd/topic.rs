//! The `KafkaTopic` resource: one topic of a `KafkaCluster` in the same namespace.
//!
//! Validation the API server enforces (OpenAPI bounds + CEL): `clusterRef` and
//! `topicName` are immutable, the topic name is a legal Kafka topic name,
//! `partitions >= 1` and never decreases, `replicationFactor >= 1` when set.
//!
//! `replicationFactor` is optional: without it the topic gets its cluster's
//! `default.replication.factor` (the KafkaCluster's `spec.config`, else
//! Kafka's default of 1), as a Kafka client's CreateTopics with replication
//! factor -1 does. The printer column shows the factor the topic has.

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Condition;

/// Desired state of a topic.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "moldau.io",
    version = "v1alpha1",
    kind = "KafkaTopic",
    plural = "kafkatopics",
    shortname = "kt",
    namespaced,
    status = "KafkaTopicStatus",
    derive = "PartialEq",
    doc = "A topic of a Moldau KafkaCluster in the same namespace, managed through the Kafka admin API.",
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.clusterRef"),
    printcolumn(name = "Partitions", type_ = "integer", json_path = ".spec.partitions"),
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".status.replicationFactor"),
    printcolumn(name = "Moved", type_ = "integer", json_path = ".status.reassignment.partitionsDone", priority = 1),
    printcolumn(name = "Moves", type_ = "integer", json_path = ".status.reassignment.partitionsTotal", priority = 1),
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new("has(self.spec.topicName) || self.metadata.name.size() <= 249").message("metadata.name is longer than a Kafka topic name may be (249); set spec.topicName")
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.topicName) == has(oldSelf.topicName)").message("topicName is immutable"))]
pub struct KafkaTopicSpec {
    /// Name of the `KafkaCluster` (same namespace) that holds the topic.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("clusterRef is immutable"))]
    pub cluster_ref: String,
    /// Kafka topic name; defaults to `metadata.name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 249), regex(pattern = r"^[a-zA-Z0-9._-]+$"))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("topicName is immutable"))]
    #[x_kube(validation = Rule::new("self != '.' && self != '..'").message("topicName may not be '.' or '..'"))]
    pub topic_name: Option<String>,
    /// Number of partitions; can grow, never shrink.
    #[schemars(range(min = 1))]
    #[x_kube(validation = Rule::new("self >= oldSelf").message("partitions cannot be decreased"))]
    pub partitions: i32,
    /// Replicas of each partition; defaults to the cluster's
    /// `default.replication.factor`. Changing it later is not supported yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 32767))]
    pub replication_factor: Option<i32>,
    /// Topic config, with Kafka config names (e.g. `retention.ms`, `cleanup.policy`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config: BTreeMap<String, String>,
    /// What happens to the topic in Kafka when this resource is deleted.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,
}

/// What deleting a `KafkaTopic` does to the Kafka topic.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum DeletionPolicy {
    /// Delete the topic and its data.
    #[default]
    Delete,
    /// Keep the topic in Kafka.
    Retain,
}

impl KafkaTopic {
    /// The Kafka topic name: `spec.topicName`, else `metadata.name`.
    pub fn kafka_topic_name(&self) -> String {
        self.spec
            .topic_name
            .clone()
            .or_else(|| self.metadata.name.clone())
            .unwrap_or_default()
    }
}

/// Observed state of a topic.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KafkaTopicStatus {
    /// `Ready` and `Degraded`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The Kafka topic name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic_name: Option<String>,
    /// The Kafka topic id (UUID).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic_id: Option<String>,
    /// Partitions the topic has in Kafka.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<i32>,
    /// Replication factor the topic has in Kafka.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication_factor: Option<i32>,
    /// Effective topic config reported by DescribeConfigs (sensitive values omitted).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config: BTreeMap<String, String>,
    /// Present while partitions of the topic move (a `KafkaRebalance` or
    /// any other reassignment); removed when none does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reassignment: Option<TopicReassignment>,
    /// Config keys whose value a `KafkaRetentionPolicy` decided (filled in
    /// or overrode `spec.config`) → that policy's name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub policy_config: BTreeMap<String, String>,
}

/// Partition moves of one topic in progress.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TopicReassignment {
    /// The `KafkaRebalance` (same namespace) moving the topic's partitions,
    /// if one is `Rebalancing` them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebalance: Option<String>,
    /// Moves of this topic's partitions in that rebalance's proposal.
    #[serde(default)]
    pub partitions_total: i32,
    /// Of those, the moves done (replicas at their target).
    #[serde(default)]
    pub partitions_done: i32,
    /// Partitions moving now (ListPartitionReassignments), by anyone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partitions_moving: Vec<i32>,
}
