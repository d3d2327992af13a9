//! `KafkaRetentionPolicy`: `resolve` is the pure policy resolution (matching,
//! precedence, default vs enforce, bounds, restoring a topic's own settings
//! when a policy goes, conformance); `plan` turns it into the changes of the
//! topics without a `KafkaTopic` and each policy's report; `controller` is
//! the Kubernetes/Kafka edge. Topics with a `KafkaTopic` get the same
//! resolution from the KafkaTopic reconciler (`crate::topic::controller`),
//! so each topic has one writer.

pub mod controller;
pub mod plan;
pub mod resolve;

use crate::crd::KafkaRetentionPolicy;

/// The policies of cluster `cluster` in namespace `ns` that take part in
/// the resolution: not being deleted (a policy that goes restores what it
/// set), and valid (an invalid one is reported and applies nothing).
pub fn usable<'a>(
    all: &'a [KafkaRetentionPolicy],
    ns: &str,
    cluster: &str,
) -> Vec<&'a KafkaRetentionPolicy> {
    all.iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(ns) && p.spec.cluster_ref == cluster)
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| resolve::validate(p).is_empty())
        .collect()
}
