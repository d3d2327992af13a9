//! The library's error type: what a reconcile can fail with. Bad specs are not
//! errors (they become status conditions); these are failures worth a retry.

use crate::cluster::builders::BuildError;
use crate::kafka::KafkaError;

/// A failed reconcile or operator step.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// Desired objects could not be built.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// A Kafka admin call failed.
    #[error("Kafka admin: {0}")]
    Kafka(#[from] KafkaError),
    /// Adding or removing a finalizer failed, or its cleanup did.
    #[error("finalizer: {0}")]
    Finalizer(String),
    /// An object lacked a field the API server always sets.
    #[error("object has no {0}")]
    MissingField(&'static str),
    /// Leader election could not proceed.
    #[error("leader election: {0}")]
    Leadership(String),
}

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
