//! The `KafkaQuota` resource: client quotas (Kafka's `producer_byte_rate`,
//! `consumer_byte_rate`, `request_percentage`) for a list of entities of one
//! `KafkaCluster` in the same namespace, applied with AlterClientQuotas.
//!
//! An entity is a user, a client id, or both (Kafka's `(user, client-id)`
//! pair), each either named exactly or the default (`defaultUser` /
//! `defaultClientId`, Kafka's `<default>`). A client id may instead be named
//! by prefix (`clientIdPrefix`: every client id starting with it; Moldau's
//! `client-id-prefix` entity type, an extension — Kafka has none): it comes
//! right after the exact client id in Kafka's precedence, the longest
//! matching prefix wins, and the clients it matches share its rates. Users
//! have no prefix form. Until authentication exists every client is the user
//! `ANONYMOUS`.
//!
//! Ownership: the status' `applied` list records exactly the entity keys this
//! object set on the broker; the reconciler removes those (and only those)
//! when they leave the spec or the object is deleted. When two KafkaQuotas of
//! one cluster set the same key of the same entity, the oldest object
//! (creationTimestamp, then name) wins and the other reports the conflict.

// several printer columns share a `type_`
#![allow(clippy::duplicated_attributes)]

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Condition;

/// Desired client quotas.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "moldau.io",
    version = "v1alpha1",
    kind = "KafkaQuota",
    plural = "kafkaquotas",
    shortname = "kq",
    namespaced,
    status = "KafkaQuotaStatus",
    derive = "PartialEq",
    doc = "Client quotas (byte rates, request percentage) for users and client ids of a Moldau KafkaCluster in the same namespace.",
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.clusterRef"),
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.producerByteRate) || has(self.consumerByteRate) || has(self.requestPercentage)").message("set at least one of producerByteRate, consumerByteRate, requestPercentage"))]
pub struct KafkaQuotaSpec {
    /// Name of the `KafkaCluster` (same namespace) the quotas apply to.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("clusterRef is immutable"))]
    pub cluster_ref: String,
    /// The entities that get the rates.
    #[schemars(length(min = 1))]
    pub entities: Vec<QuotaEntitySpec>,
    /// Bytes per second a client may produce (Kafka `producer_byte_rate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub producer_byte_rate: Option<i64>,
    /// Bytes per second a client may fetch (Kafka `consumer_byte_rate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub consumer_byte_rate: Option<i64>,
    /// Percentage of one request handler thread's time per quota window
    /// (Kafka `request_percentage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.01))]
    pub request_percentage: Option<f64>,
}

/// A quota entity: a user, a client id, or both; each by exact name or the
/// default, a client id also by prefix.
#[derive(
    Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Default, KubeSchema,
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!(has(self.user) && has(self.defaultUser) && self.defaultUser)").message("user and defaultUser are exclusive"))]
#[x_kube(validation = Rule::new("!(has(self.clientId) && has(self.defaultClientId) && self.defaultClientId)").message("clientId and defaultClientId are exclusive"))]
#[x_kube(validation = Rule::new("!(has(self.clientIdPrefix) && (has(self.clientId) || (has(self.defaultClientId) && self.defaultClientId)))").message("clientIdPrefix is exclusive with clientId and defaultClientId"))]
#[x_kube(validation = Rule::new("has(self.user) || has(self.clientId) || has(self.clientIdPrefix) || (has(self.defaultUser) && self.defaultUser) || (has(self.defaultClientId) && self.defaultClientId)").message("name a user, a client id, a client-id prefix, or a default"))]
pub struct QuotaEntitySpec {
    /// Exact user name (`ANONYMOUS` until authentication exists).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub user: Option<String>,
    /// The default user entity (`<default>`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub default_user: bool,
    /// Exact client id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub client_id: Option<String>,
    /// The default client-id entity (`<default>`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub default_client_id: bool,
    /// Every client id starting with this prefix (Moldau's `client-id-prefix`
    /// entity, an extension of Kafka's quotas); exclusive with `clientId`
    /// and `defaultClientId`. The longest matching prefix wins; an exact
    /// client id beats any prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub client_id_prefix: Option<String>,
}

/// Quotas of one entity that this object set on the broker.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppliedQuota {
    /// The entity.
    pub entity: QuotaEntitySpec,
    /// Kafka quota key → value this object set.
    pub values: std::collections::BTreeMap<String, f64>,
}

/// An entity the broker refused, or that another KafkaQuota owns.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RefusedQuota {
    /// The entity.
    pub entity: QuotaEntitySpec,
    /// Why (the broker's error, or the conflicting KafkaQuota).
    pub reason: String,
}

/// Observed state of a KafkaQuota.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KafkaQuotaStatus {
    /// `Ready`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// What this object set on the broker (its ownership record).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applied: Vec<AppliedQuota>,
    /// Entities refused by the broker or in conflict with another KafkaQuota.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<RefusedQuota>,
}
