//! The `KafkaUser` resource (Strimzi's model): a user of one
//! `KafkaCluster` in the same namespace, its credentials kept in a Secret
//! named after the user, and its ACLs.
//!
//! The user name is the object's name. `authentication.type` is a SCRAM
//! mechanism or `tls`:
//! - SCRAM (`scram-sha-512`, `scram-sha-256`): principal `User:<name>`.
//!   `authentication.password` names a Secret key holding the password;
//!   without it the operator generates one (32 characters) and keeps it in
//!   the user's Secret, which carries Strimzi's keys `password` and
//!   `sasl.jaas.config`.
//! - `tls`: principal `User:CN=<name>`. The operator issues a client
//!   certificate with subject `CN=<name>`, signed by the cluster's clients
//!   CA, and keeps it in the user's Secret: `user.crt`, `user.key` and
//!   `ca.crt`. Unlike Strimzi (which puts the clients CA there) `ca.crt` is
//!   the cluster CA certificate: what a client needs to verify the brokers.
//!   A `password` is refused (CEL).
//!
//! Ownership: a KafkaUser owns every SCRAM credential of its name and every
//! ACL of both its principals (`User:<name>` and `User:CN=<name>`) on its
//! cluster (as Strimzi's User Operator does): ACLs the spec does not list
//! are removed, a switch of type removes what the other type had, and
//! deleting the object removes them all, with its credentials.

// several printer columns share a `type_`
#![allow(clippy::duplicated_attributes)]

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Condition;

/// Desired user (SCRAM or tls) and ACLs.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "moldau.io",
    version = "v1alpha1",
    kind = "KafkaUser",
    plural = "kafkausers",
    shortname = "ku",
    namespaced,
    status = "KafkaUserStatus",
    derive = "PartialEq",
    doc = "A SCRAM or TLS (client certificate) user of a Moldau KafkaCluster in the same namespace, with its credentials Secret and ACLs.",
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.clusterRef"),
    printcolumn(
        name = "Authentication",
        type_ = "string",
        json_path = ".spec.authentication.type"
    ),
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason"
    ),
    printcolumn(name = "Secret", type_ = "string", json_path = ".status.secret"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct KafkaUserSpec {
    /// Name of the `KafkaCluster` (same namespace) the user belongs to.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("clusterRef is immutable"))]
    pub cluster_ref: String,
    /// How the user authenticates.
    pub authentication: UserAuthentication,
    /// What the user may do; absent: the user has no ACLs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization: Option<UserAuthorization>,
}

/// How a user authenticates: a SCRAM mechanism or a client certificate.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum UserAuthenticationType {
    /// SCRAM-SHA-512.
    #[serde(rename = "scram-sha-512")]
    ScramSha512,
    /// SCRAM-SHA-256.
    #[serde(rename = "scram-sha-256")]
    ScramSha256,
    /// A client certificate signed by the cluster's clients CA, subject
    /// `CN=<name>` (principal `User:CN=<name>`).
    #[serde(rename = "tls")]
    Tls,
}

/// How a user authenticates.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.type != 'tls' || !has(self.password)").message("a tls user has no password"))]
pub struct UserAuthentication {
    /// `scram-sha-512`, `scram-sha-256` or `tls`.
    #[serde(rename = "type")]
    pub type_: UserAuthenticationType,
    /// Where a SCRAM password comes from; absent: the operator generates
    /// one. Not for `tls`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<PasswordSource>,
}

/// A password given by the user.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PasswordSource {
    /// The Secret key holding it.
    pub value_from: PasswordValueFrom,
}

/// Strimzi's `valueFrom`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PasswordValueFrom {
    /// A key of a Secret in the KafkaUser's namespace.
    pub secret_key_ref: SecretKeyRef,
}

/// A key of a Secret in the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Secret name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key in the Secret's data.
    #[schemars(length(min = 1))]
    pub key: String,
}

/// What a user may do.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UserAuthorization {
    /// `simple`: Kafka's ACLs.
    #[serde(rename = "type")]
    pub type_: UserAuthorizationType,
    /// The user's ACLs (principal `User:<name>`, `User:CN=<name>` for tls).
    #[serde(default)]
    pub acls: Vec<AclRuleSpec>,
}

/// The authorization kinds (Strimzi's `simple` only).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum UserAuthorizationType {
    /// Kafka ACLs.
    Simple,
}

/// One ACL rule: a resource, operations on it, a host and allow/deny.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AclRuleSpec {
    /// The resource the rule applies to.
    pub resource: AclResourceSpec,
    /// Operations allowed or denied.
    #[schemars(length(min = 1))]
    pub operations: Vec<AclOperationSpec>,
    /// Host the rule applies to (`*`: any).
    #[serde(default = "any_host")]
    pub host: String,
    /// `allow` (default) or `deny`.
    #[serde(rename = "type", default)]
    pub type_: AclRuleType,
}

fn any_host() -> String {
    "*".into()
}

/// `allow` or `deny`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum AclRuleType {
    /// ALLOW.
    #[default]
    Allow,
    /// DENY (wins over any ALLOW).
    Deny,
}

/// The resource of an ACL rule.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.type == 'cluster' || (has(self.name) && size(self.name) > 0)").message("name is required for topic, group and transactionalId resources"))]
pub struct AclResourceSpec {
    /// `topic`, `group`, `cluster` or `transactionalId`.
    #[serde(rename = "type")]
    pub type_: AclResourceType,
    /// Resource name (`*` for every one); ignored for `cluster`
    /// (Kafka's `kafka-cluster`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `literal` (default) or `prefix`.
    #[serde(default)]
    pub pattern_type: AclPatternType,
}

/// Resource types of ACLs.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum AclResourceType {
    /// A topic.
    Topic,
    /// A consumer group.
    Group,
    /// The cluster.
    Cluster,
    /// A transactional id.
    TransactionalId,
}

/// Pattern types of ACL resources.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum AclPatternType {
    /// The name exactly (or `*`).
    #[default]
    Literal,
    /// Every name starting with it.
    Prefix,
}

/// Kafka ACL operations, in Strimzi's spelling.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum AclOperationSpec {
    /// READ.
    Read,
    /// WRITE.
    Write,
    /// CREATE.
    Create,
    /// DELETE.
    Delete,
    /// ALTER.
    Alter,
    /// DESCRIBE.
    Describe,
    /// CLUSTER_ACTION.
    ClusterAction,
    /// DESCRIBE_CONFIGS.
    DescribeConfigs,
    /// ALTER_CONFIGS.
    AlterConfigs,
    /// IDEMPOTENT_WRITE.
    IdempotentWrite,
    /// ALL.
    All,
}

/// Observed state of a KafkaUser.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KafkaUserStatus {
    /// `Ready`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The Kafka user name (principal `User:<username>`): `<name>`, or
    /// `CN=<name>` for tls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// The Secret holding the user's credentials (password and JAAS
    /// config, or certificate and key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}
