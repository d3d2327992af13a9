//! A `KafkaCluster`'s client listeners, its ACL authorization and its
//! certificate authorities (issue 38, Strimzi's model): the spec types
//! only, with the CEL rules the API server checks. What they become in the
//! brokers' configuration is `cluster::listeners`'s.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One client listener of every broker.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.authentication) || self.authentication.type != 'tls' || self.tls").message("authentication type tls (client certificates) needs tls: true"))]
pub struct ListenerSpec {
    /// Listener name: lower-case letters and digits, at most 11, starting
    /// with a letter (Strimzi's rule); `replication` is the operator's own.
    /// The broker's listener name is its upper-case form.
    #[schemars(length(min = 1, max = 11), regex(pattern = r"^[a-z][a-z0-9]*$"))]
    #[x_kube(validation = Rule::new("self != 'replication'").message("listener name replication is reserved for the brokers' own listener"))]
    pub name: String,
    /// Port the listener binds on every broker pod.
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    /// Serve TLS with the broker certificate the cluster CA signs.
    #[serde(default)]
    pub tls: bool,
    /// How clients authenticate; absent: they do not (PLAINTEXT or SSL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authentication: Option<ListenerAuthentication>,
}

/// How clients of a listener authenticate.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListenerAuthentication {
    /// `scram-sha-512` (SASL, credentials from `KafkaUser`s) or `tls`
    /// (client certificates the clients CA signs, principal `User:CN=<name>`).
    #[serde(rename = "type")]
    pub type_: ListenerAuthenticationType,
}

/// Client authentication kinds.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ListenerAuthenticationType {
    /// SASL SCRAM-SHA-512.
    #[serde(rename = "scram-sha-512")]
    ScramSha512,
    /// Mutual TLS.
    #[serde(rename = "tls")]
    Tls,
}

/// ACL authorization of a cluster.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterAuthorization {
    /// `simple`: Kafka's StandardAuthorizer with ACLs (`KafkaUser`s, or
    /// `kafka-acls`); nothing is allowed without an ACL.
    #[serde(rename = "type")]
    pub type_: ClusterAuthorizationType,
    /// Principals allowed everything besides the brokers and the operator,
    /// e.g. `User:CN=admin` or `User:admin`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub super_users: Vec<String>,
}

/// Authorizer kinds.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ClusterAuthorizationType {
    /// Kafka's ACLs.
    Simple,
}

/// Validity of an operator-run certificate authority and of what it signs.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.renewalDays < self.validityDays").message("renewalDays must be less than validityDays (else every certificate is due as soon as it is issued)"))]
pub struct CertificateAuthoritySpec {
    /// Days a CA certificate (and a certificate it signs) is valid.
    #[serde(default = "default_validity_days")]
    #[schemars(range(min = 2, max = 36500))]
    pub validity_days: u32,
    /// Days before expiry a certificate is renewed; a renewed broker
    /// certificate rolls the brokers one at a time.
    #[serde(default = "default_renewal_days")]
    #[schemars(range(min = 1, max = 36499))]
    pub renewal_days: u32,
}

impl Default for CertificateAuthoritySpec {
    fn default() -> Self {
        Self {
            validity_days: default_validity_days(),
            renewal_days: default_renewal_days(),
        }
    }
}

fn default_validity_days() -> u32 {
    365
}

fn default_renewal_days() -> u32 {
    30
}
