//! The `KafkaCluster` reconciler: `builders` (desired objects), `rollout`
//! (rolling-restart planner), `status` (conditions) are pure; `membership`
//! parses the brokers' cluster record (and reads it); `controller` is the
//! thin async edge that reads, applies and reports.

pub mod builders;
pub mod controller;
pub mod membership;
pub mod rollout;
pub mod status;
pub mod validate;
