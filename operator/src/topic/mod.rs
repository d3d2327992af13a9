//! The `KafkaTopic` reconciler: `plan` and `status` are pure; `sync` runs a
//! plan against one broker through the admin client; `controller` is the
//! Kubernetes edge (cluster lookup, broker pod IPs, finalizer, status).

pub mod controller;
pub mod plan;
pub mod status;
pub mod sync;
