//! The `KafkaQuota` reconciler: `plan` is pure (desired quotas of a cluster,
//! broker state and ownership records → AlterClientQuotas operations, then
//! the new ownership records); `controller` is the Kubernetes edge.

pub mod controller;
pub mod plan;
