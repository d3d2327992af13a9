//! The `KafkaTopic` reconciler: `plan`, `status` and `reassignment` (the
//! per-topic progress of partition moves) are pure; `sync` runs a plan
//! against one broker through the admin client; `controller` is the
//! Kubernetes edge (cluster lookup, broker pod IPs, finalizer, status).

pub mod controller;
pub mod plan;
pub mod reassignment;
pub mod status;
pub mod sync;
