//! A small async Kafka admin client on the `kafka-protocol` crate over a tokio
//! `TcpStream` (or TLS over one, `dial`): ApiVersions, Metadata, CreateTopics, CreatePartitions,
//! DescribeConfigs, IncrementalAlterConfigs, DeleteTopics, and for
//! rebalancing AlterPartitionReassignments, ListPartitionReassignments,
//! DescribeLogDirs and ElectLeaders; DescribeClientQuotas and
//! AlterClientQuotas (`quota`); CreateAcls, DescribeAcls and DeleteAcls
//! (`acl`); DescribeUserScramCredentials and AlterUserScramCredentials with
//! the client-side salted password (`scram`).
//!
//! `wire` owns framing and version negotiation (pure, unit tested); `admin`
//! owns the connection and the typed admin calls; `metadata` is the typed
//! result of Metadata (plain data); `reassign` builds and reads the
//! reassignment messages (pure, unit tested). Callers pass socket
//! addresses (broker pod IPs); this module never resolves names.

pub mod acl;
pub mod admin;
pub mod dial;
pub mod metadata;
pub mod quota;
pub mod reassign;
pub mod scram;
pub mod wire;

pub use admin::{AdminClient, ConfigEntry, ConfigOp};
pub use dial::{Dial, TlsDial};
pub use metadata::{BrokerInfo, ClusterMetadata, PartitionInfo, TopicMetadata};
pub use reassign::{OngoingReassignment, PartitionError, Reassignment};

use kafka_protocol::ResponseError;

/// Errors of the admin client.
#[derive(Debug, thiserror::Error)]
pub enum KafkaError {
    /// Connecting, reading or writing failed.
    #[error("I/O error talking to {addr}: {source}")]
    Io {
        /// Broker address.
        addr: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The broker did not answer in time.
    #[error("timed out talking to {0}")]
    Timeout(String),
    /// The bytes on the wire did not make sense.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The TLS material to dial a secured cluster is missing or unusable.
    #[error("TLS to the brokers: {0}")]
    Tls(String),
    /// The broker does not implement a version of this API that we speak.
    #[error("broker does not support {0}")]
    Unsupported(&'static str),
    /// The broker answered with a Kafka error code.
    #[error("{api} failed: {error} (code {code}){}", message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Broker {
        /// The API called.
        api: &'static str,
        /// Kafka error code.
        code: i16,
        /// Kafka error name.
        error: String,
        /// Error message from the broker.
        message: Option<String>,
    },
}

impl KafkaError {
    /// Builds a [`KafkaError::Broker`] from a non-zero error code.
    pub fn broker(api: &'static str, code: i16, message: Option<String>) -> Self {
        let error = ResponseError::try_from_code(code)
            .map(|e| e.to_string())
            .unwrap_or_else(|| "NONE".into());
        KafkaError::Broker {
            api,
            code,
            error,
            message,
        }
    }

    /// The Kafka error code, when the broker sent one.
    pub fn code(&self) -> Option<i16> {
        match self {
            KafkaError::Broker { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// Kafka error codes the operator reacts to.
pub mod codes {
    /// UNKNOWN_TOPIC_OR_PARTITION
    pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
    /// UNSUPPORTED_VERSION
    pub const UNSUPPORTED_VERSION: i16 = 35;
    /// TOPIC_ALREADY_EXISTS
    pub const TOPIC_ALREADY_EXISTS: i16 = 36;
    /// INVALID_PARTITIONS
    pub const INVALID_PARTITIONS: i16 = 37;
    /// INVALID_REPLICATION_FACTOR
    pub const INVALID_REPLICATION_FACTOR: i16 = 38;
    /// INVALID_CONFIG
    pub const INVALID_CONFIG: i16 = 40;
    /// NOT_CONTROLLER
    pub const NOT_CONTROLLER: i16 = 41;
}
